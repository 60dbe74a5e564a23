"""One inductor cache serves a graph compiled at this CPU's own vector width and again with ATen held to AVX2 (as
CI's second leg runs, or a cache shared by unlike machines): both give the eager numbers. On an AVX-512 CPU torch
2.13 alone reloaded the AVX-512 graph's code under AVX2 and computed wrong numbers (a segfault in the trainer's
graphs); on an AVX2-only CPU both runs are AVX2 and the test checks the cache's round trip."""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import json
import torch
from torch._inductor.cpu_vec_isa import pick_vec_isa
from clstm_ppo.device import compile_graph

torch.set_num_threads(1)

def f(x, w):  # a matmul, elementwise ops, a reduction and a softmax over lengths no vector width divides
    h = torch.tanh(x @ w) * torch.sigmoid(x[:, :w.shape[1]])
    return (h.exp() - 1).sum(-1), torch.softmax(h, -1)

x, w = torch.randn(37, 53, generator=torch.Generator().manual_seed(0)), torch.randn(53, 29)
compiled, eager = compile_graph(f, "test graph")(x, w), f(x, w)
print(json.dumps({"isa": str(pick_vec_isa()),
                  "error": max((c - e).abs().max().item() for c, e in zip(compiled, eager))}))
"""


def run_compiled(cache, capability: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    env |= {"TORCHINDUCTOR_CACHE_DIR": str(cache), **({"ATEN_CPU_CAPABILITY": capability} if capability else {})}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_cache_filled_at_one_vector_width_gives_eager_numbers_at_another(tmp_path):
    native = run_compiled(tmp_path / "inductor", None)
    held = run_compiled(tmp_path / "inductor", "avx2")
    assert "avx2" in held["isa"] and "avx512" not in held["isa"], held
    for run in (native, held):
        assert run["error"] == pytest.approx(0, abs=1e-5), (native, held)
