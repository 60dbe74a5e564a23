"""lab/clstm_lab/bench/env_profile.py (scripts/bench/profile_env.py): operators per env step, and with --sites the
package functions that call them."""
import subprocess
import sys
from pathlib import Path

import torch
from conftest import strict_loads

from clstm_lab.bench.env_profile import SiteCounter
from clstm_ppo.market.black_scholes import bs_price

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench" / "profile_env.py"


def test_operators_are_counted_by_the_package_function_that_called_them():
    spot, strike, years = torch.full((8,), 100.0), torch.linspace(90.0, 110.0, 8), torch.full((8,), 0.25)
    vol, is_call = torch.full((8,), 0.2), strike > 100.0
    with SiteCounter() as sites:
        bs_price(spot, strike, years, 0.02, 0.01, vol, is_call)
    assert sum(sites.found.values()) > 10
    assert set(sites.found) <= {"market/black_scholes.py:_terms", "market/black_scholes.py:bs_price",
                                "market/black_scholes.py:_intrinsic", "market/flags.py:as_float",
                                "market/flags.py:choose", "market/flags.py:call_sign"}, sites.found
    assert sites.found["market/black_scholes.py:_terms"] >= 6  # sqrt, clamp, two products, exp... of d1 and d2

    x = torch.ones(4)
    with SiteCounter() as sites:
        x.view(2, 2).unsqueeze(0)  # views compute nothing: not counted
        x * 2.0  # noqa: B018 (one operator, called from here)
    assert dict(sites.found) == {"(outside the package)": 1}


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_the_sites_of_an_eager_step_add_up_to_its_operator_count():
    done = run("--device", "cpu", "--num-envs", "64", "--steps", "3", "--sites", "1000", "--json")
    assert done.returncode == 0, done.stderr[-800:]
    out = strict_loads(done.stdout.strip().splitlines()[-1])
    per_step, sites = out["rows"][0]["kernels_per_step"], out["sites"]
    assert all(site.startswith(("env/", "market/")) for site in sites), sites
    assert "env/accounting.py:mark_to_market" in sites and "env/observation.py:valid_actions" in sites
    # The profiler counts operators as called, the dispatcher after composite ones decompose: within a few %.
    assert abs(sum(sites.values()) - per_step) <= 0.05 * per_step, (sum(sites.values()), per_step)


def test_sites_refuses_a_compiled_step_with_one_line():
    done = run("--compiled", "--sites", "5")
    assert done.returncode != 0
    assert "--sites counts eager operators by caller" in done.stderr and "drop one" in done.stderr
