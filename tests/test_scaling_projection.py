"""The multi-GPU projection (lab/clstm_lab/studies/scaling.py): the ring all-reduce's arithmetic written out, one GPU
at efficiency 1, and what the measured parts give at 8 GPUs."""
import pytest

from clstm_lab.studies.scaling import LATENCY_S, LINKS_GB_PER_S, all_reduce_s, gradient_bytes, project


def test_a_ring_all_reduce_moves_two_n_minus_one_over_n_of_the_bytes_plus_its_latency():
    assert all_reduce_s(1e9, 1, 100.0, 1e-5) == 0.0
    assert all_reduce_s(1e9, 4, 100.0, 1e-5) == pytest.approx(2 * 3 / 4 * 1e9 / 100e9 + 1e-5)
    assert all_reduce_s(0, 8, 100.0, 2e-5) == pytest.approx(2e-5)


def test_one_gpu_is_the_baseline_and_more_gpus_only_add_time():
    rows = [project(n, 0.7, 0.03, 4096 * 128, 16, 600_000, 0.0, 0.02, 6.4e6, 64.0, 60e-6) for n in (1, 2, 4, 8)]
    assert rows[0]["efficiency"] == 1.0 and rows[0]["all_reduce_s"] == rows[0]["gather_s"] == 0.0
    assert rows[0]["env_steps_per_s"] == pytest.approx(4096 * 128 / 0.75)
    update = [r["update_s"] for r in rows]
    assert update == sorted(update) and all(r["efficiency"] <= 1.0 for r in rows)
    n = 8
    reduce = 16 * (2 * 7 / 8 * 600_000 / 64e9 + 60e-6) + 3 * 60e-6
    assert rows[3]["all_reduce_s"] == pytest.approx(reduce)
    assert rows[3]["gather_s"] == pytest.approx((n - 1) * 6.4e6 / 64e9)


@pytest.mark.parametrize("config", ["default", "paper"])
def test_the_measured_parts_give_at_least_95_percent_at_8_gpus_on_either_link(config):
    params, nbytes = gradient_bytes(config, [])
    assert nbytes == 4 * params and params > 10_000
    for link, bandwidth in LINKS_GB_PER_S.items():
        row = project(8, 0.70, 0.03, 4096 * 128, 16, nbytes, 0.0, 0.02, 6.4e6, bandwidth, LATENCY_S[link])
        assert row["efficiency"] >= 0.95, (config, link, row)
