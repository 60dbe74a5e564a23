"""Data the loader would misread, and history a resume would lose: integer dates, a high below its low, a long run
of zero volume, metrics logged past the checkpoint a resume starts from, a launch that fails after making its run
folder. One line each (a warning for the volume), and nothing logged is lost."""
import json
import warnings

import pandas as pd
import pytest
from conftest import make_bars
from smoke_training import train

from clstm_ppo.cli import run_cli
from clstm_ppo.data import DataError, load_bars
from clstm_ppo.data.__main__ import main as data_main


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
@pytest.mark.parametrize("dates", ["days", "yyyymmdd"])
def test_integer_dates_are_refused_with_how_to_convert_them(tmp_path, capsys, suffix, dates):
    frame = make_bars(300)
    stamps = pd.to_datetime(frame["Date"])
    frame["Date"] = ((stamps - pd.Timestamp("1970-01-01")).dt.days if dates == "days"
                     else stamps.dt.strftime("%Y%m%d").astype(int))
    path = tmp_path / f"ABC{suffix}"
    frame.to_parquet(path, index=False) if suffix == ".parquet" else frame.to_csv(path, index=False)
    with pytest.raises(DataError) as err:
        load_bars(str(path))
    message = str(err.value)
    assert "column 'date' holds numbers" in message and "unit='D'" in message and "format='%Y%m%d'" in message
    assert "\n" not in message
    assert run_cli(data_main, ["--data", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {message}"


def test_a_high_below_its_low_is_refused_naming_the_first_bad_row(tmp_path):
    frame = make_bars(300)
    for row in (7, 40):
        high, low = float(frame.at[row, "High"]), float(frame.at[row, "Low"])
        frame.at[row, "High"], frame.at[row, "Low"] = low, high  # swapped columns
    path = tmp_path / "ABC.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(DataError, match=r"row 8 \(2001-01-10\) has high [0-9.]+ below low [0-9.]+; fix that row "
                                        r"\(are the high and low columns swapped\?\) or drop it"):
        load_bars(str(path))


@pytest.mark.parametrize("first, zeros, warned", [(100, 9, False), (100, 12, True), (0, 300, True)])
def test_a_long_run_of_zero_volume_is_warned_once(tmp_path, first, zeros, warned):
    frame = make_bars(300)
    frame.loc[20:22, "Volume"] = 0  # a short quiet stretch is no reason to speak
    frame.loc[first:first + zeros - 1, "Volume"] = 0
    path = tmp_path / "ABC.csv"
    frame.to_csv(path, index=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bars = load_bars(str(path))
    said = [str(w.message) for w in caught if "zero volume" in str(w.message)]
    assert len(bars["ABC"]) == 300, "a warning, not a refusal"
    if not warned:
        assert said == []
        return
    start = pd.bdate_range("2001-01-01", periods=300)[first].date()
    assert said == [f"{path}: {zeros} bars in a row from row {first + 1} ({start}) have zero "
                    "volume; the volume features read them as no trading: fill in the volume, or drop the volume "
                    "column if the source has none"]


def test_resuming_an_earlier_checkpoint_keeps_the_later_records_beside_the_run(tmp_path, capsys):
    """Resuming update 2 of a run that went on to update 4: the records of updates 3-4 move to
    metrics.dropped-<time>.jsonl (said in one line), and metrics.jsonl holds the run as it now continues."""
    small = ["--set", "train.num_envs=8", "--set", "output.checkpoint_every=2", "--set", "train.eval_every=2",
             "--set", "output.keep_last=5"]
    assert train(tmp_path, "--total-steps", str(4 * 256), *small) == 0
    run = tmp_path / "synthetic-smoke"
    before = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    later = [r for r in before if r["step"] > 2 * 256]
    assert later, "the first run logged past update 2"
    capsys.readouterr()
    assert train(tmp_path, "--total-steps", str(5 * 256), *small, "--resume-from",
                 str(run / "update_0000002.pt")) == 0
    out = capsys.readouterr()
    (aside,) = run.glob("metrics.dropped-*.jsonl")
    note = next(line for line in (out.out + out.err).splitlines() if "metrics.jsonl: moved" in line)
    assert f"moved {len(later)} record(s) past step 512 (to step {later[-1]['step']:,})" in note
    assert aside.name in note and "trained again now" in note
    assert [json.loads(line) for line in aside.read_text().splitlines()] == later, "every dropped record is kept"
    after = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert after[:len(before) - len(later)] == before[:len(before) - len(later)]
    steps = [r["step"] for r in after if r["kind"] == "update"]
    assert steps == sorted(steps) and steps[-1] == 5 * 256


def test_a_launch_that_fails_after_making_its_run_folder_takes_it_back(tmp_path, capsys, monkeypatch):
    from clstm_ppo.config import ConfigError
    from clstm_ppo.training import launch

    def fails(*args, **kwargs):
        raise ConfigError("the worker could not start")

    monkeypatch.setattr(launch, "run_worker", fails)
    assert train(tmp_path, "--total-steps", "512") == 2
    assert capsys.readouterr().err.strip() == "error: the worker could not start"
    assert not any(tmp_path.iterdir()), "no empty run folder is left behind"
