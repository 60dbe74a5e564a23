"""scripts/bench/install_size.py: what each of clstm_ppo's requirements adds to the install it runs in."""
from pathlib import Path

import pytest
import tomllib

from clstm_lab.bench.install_size import canonical, requirement_rows

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def declared():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {canonical(d.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip()) for d in deps}


def test_every_declared_requirement_gets_a_row_and_the_groups_add_up(declared):
    rows = requirement_rows(groups={"all": tuple(declared), "tune": ("optuna", "sqlalchemy", "psycopg")})
    by_name = {r["requirement"]: r for r in rows}
    assert declared <= set(by_name)
    # leaving every requirement out saves the whole install and shares nothing
    assert by_name["all"]["own_share"] == pytest.approx(1.0) and by_name["all"]["shared_mb"] == 0
    # a group saves at least what each of its members saves alone (sqlalchemy alone saves nothing: optuna needs it)
    tune = by_name["tune"]
    assert tune["own_mb"] >= max(by_name[m]["own_mb"] for m in ("optuna", "sqlalchemy", "psycopg"))
    assert by_name["torch"]["own_mb"] > 100  # torch and its own libraries are most of an install
    assert sum(r["own_share"] for r in rows if r["requirement"] in declared) <= 1.0 + 1e-9
