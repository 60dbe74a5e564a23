"""Storage URLs carry passwords: no form of one is ever printed (docs/TUNING.md, "Several machines")."""
import pytest

from clstm_ppo.config import ConfigError
from clstm_ppo.tuning.study import masked, open_storage, scrubbed

SECRET = "hunter2x"


@pytest.mark.parametrize("url", [
    f"postgresql://tune:{SECRET}@db-host:5432/tune",
    f"postgresql://tune@db-host:5432/tune?password={SECRET}",
    f"postgresql://tune@db-host/tune?sslmode=require&PASSWORD={SECRET}",
    f"postgresql+psycopg://tune:{SECRET}@db-host/tune?sslpassword={SECRET}",
    f"mysql://u@h/d?passwd={SECRET}",
    f"host=db-host user=tune password={SECRET}",
    f"host=db-host user=tune password = '{SECRET}'",
])
def test_every_password_form_is_masked(url):
    shown = masked(url)
    assert SECRET not in shown and "***" in shown
    assert "db-host" in shown or "h/d" in shown  # the rest stays readable: which server it is


def test_a_url_without_secrets_is_unchanged():
    for url in ("sqlite:///runs/study.db", "postgresql://tune@db-host:5432/tune?sslmode=require"):
        assert masked(url) == url


def test_an_error_that_quotes_the_url_is_scrubbed():
    url = f"postgresql://tune@db/tune?password={SECRET}"
    assert scrubbed(f"could not parse {url}", url) == "could not parse postgresql://tune@db/tune?password=***"


@pytest.mark.parametrize("url", [
    f"postgresql://tune:{SECRET}@127.0.0.1:1/tune",  # nothing listens on port 1: the driver's error is shown
    f"postgresql://tune@127.0.0.1:1/tune?password={SECRET}",
    f"not-a-url password={SECRET}",
    f"nosuchdialect://tune:{SECRET}@127.0.0.1/tune",
])
def test_a_storage_that_cannot_open_never_prints_its_password(url):
    with pytest.raises(ConfigError) as err:
        open_storage(url)
    assert SECRET not in str(err.value)
    assert str(err.value).count("\n") == 0
