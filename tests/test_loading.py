import gzip
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import make_bars

from clstm_ppo.cli import run_cli
from clstm_ppo.config import ConfigError, DataConfig, load_config
from clstm_ppo.data import DataError, build_market_data, load_bars
from clstm_ppo.data.__main__ import main as data_main


def test_embedded_sp500_loads_with_default_splits():
    data = build_market_data(DataConfig(source="sp500"))
    assert data.symbols == ["SPX"]
    assert str(data.split_dates("train")[1].date()) == "2012-12-31"
    assert str(data.split_dates("validation")[0].date()) == "2013-01-02"
    assert str(data.split_dates("test")[1].date()) == "2018-12-31"
    spx = load_bars("sp500")["SPX"]
    assert spx["close"].iloc[0] == pytest.approx(1228.099976)


def test_common_spellings_are_accepted(tmp_path):
    frame = make_bars(300)
    frame = frame.rename(columns={"Date": "timestamp", "Close": "CLOSE", "Volume": "vol"})
    frame["Adj Close"] = frame["CLOSE"] / 2  # a 2:1 split adjustment scales every price
    frame.to_csv(tmp_path / "x.csv", index=False)
    bars = load_bars(str(tmp_path / "x.csv"))["x"]
    assert list(bars.columns) == ["date", "open", "high", "low", "close", "volume"]
    np.testing.assert_allclose(bars["close"], frame["CLOSE"] / 2)
    np.testing.assert_allclose(bars["high"], frame["High"] / 2)
    # An unnamed date index, as DataFrame.to_csv writes it, and parquet with a DatetimeIndex.
    indexed = make_bars(300).set_index("Date")
    indexed.index.name = None
    indexed.to_csv(tmp_path / "y.csv")
    assert len(load_bars(str(tmp_path / "y.csv"))["y"]) == 300
    as_parquet = make_bars(300)
    as_parquet.index = pd.DatetimeIndex(as_parquet.pop("Date"), name="Date")
    as_parquet.to_parquet(tmp_path / "z.parquet")
    assert load_bars(str(tmp_path / "z.parquet"))["z"]["date"].dtype.kind == "M"


def test_symbol_column_folder_and_intraday(tmp_path):
    a, b = make_bars(300, seed=1), make_bars(300, seed=2)
    both = pd.concat([a.assign(Symbol="AAA"), b.assign(Symbol="BBB")])
    both.to_csv(tmp_path / "both.csv", index=False)
    frames = load_bars(str(tmp_path / "both.csv"))
    assert list(frames) == ["AAA", "BBB"]
    folder = tmp_path / "per_file"
    folder.mkdir()
    a.to_csv(folder / "AAA.csv", index=False)
    with gzip.open(folder / "BBB.csv.gz", "wt") as fh:
        b.to_csv(fh, index=False)
    assert list(load_bars(str(folder))) == ["AAA", "BBB"]
    assert list(load_bars(str(folder), symbols=["BBB"])) == ["BBB"]
    intraday = make_bars(600)
    intraday["Date"] = pd.date_range("2020-01-02 09:30", periods=600, freq="5min", tz="America/New_York").astype(str)
    intraday.to_csv(tmp_path / "fast.csv", index=False)
    data = build_market_data(DataConfig(source=str(tmp_path / "fast.csv"), turbulence_lookback=100, window=10))
    assert data.dates[1] - data.dates[0] == pd.Timedelta(minutes=5)


def bad_file(tmp_path, edit, name="bad.csv"):
    frame = make_bars(300)
    frame = edit(frame)
    path = tmp_path / name
    frame.to_csv(path, index=False)
    return str(path)


def _nan(f):
    f.loc[17, "Close"] = np.nan
    return f


def _inf(f):
    f["High"] = f["High"].astype(object)
    f.loc[5, "High"] = "inf"
    return f


def _text(f):
    f["Low"] = f["Low"].astype(object)
    f.loc[9, "Low"] = "abc"
    return f


def _negative(f):
    f.loc[7, "Open"] = -3.0
    return f


def _unsorted(f):
    return f.iloc[[0, 1, 2, 4, 3, *range(5, len(f))]]


def _duplicate(f):
    return pd.concat([f.iloc[:6], f.iloc[5:6], f.iloc[6:]])


def _bad_date(f):
    f.loc[3, "Date"] = "someday"
    return f


BAD_INPUTS = [
    (lambda f: f.drop(columns="Close"), ["missing column 'close'", "found: date, open, high, low, volume", "rename"]),
    (_nan, ["column 'close' row 18 (2001-01-24) is empty or NaN, not a finite number", "fill or drop"]),
    (_inf, ["column 'high' row 6", "not a finite number"]),
    (_text, ["column 'low' row 10", "'abc'"]),
    (_negative, ["column 'open' row 8", "-3.0", "must be positive"]),
    (_unsorted, ["not sorted", "row 5 (2001-01-04)", "sort the file by date"]),
    (_duplicate, ["2001-01-08", "appears twice", "rows 6 and 7", "remove the duplicate"]),
    (_bad_date, ["column 'date' row 4", "'someday'", "YYYY-MM-DD"]),
]


@pytest.mark.parametrize("edit, expected", BAD_INPUTS)
def test_bad_input_gets_one_clear_line(tmp_path, capsys, edit, expected):
    path = bad_file(tmp_path, edit)
    with pytest.raises(DataError) as err:
        load_bars(path)
    message = str(err.value)
    assert path in message and "\n" not in message
    for part in expected:
        assert part in message
    # The command line prints just that line and exits non-zero.
    assert run_cli(data_main, ["--data", path]) == 2
    out = capsys.readouterr()
    assert out.err.strip() == f"error: {message}" and out.out == ""


def test_split_shorter_than_window(capsys):
    code = run_cli(data_main, ["--data", "sp500", "--set", "data.val_end=2013-01-31"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: validation split (2013-01-02..2013-01-31, after indicator warm-up) has 21 bars")
    assert "window + 1 = 31" in err and "lower data.window" in err


def test_other_bad_sources(tmp_path):
    with pytest.raises(DataError, match="neither a file nor a folder nor a built-in name; .* sp500, dow, synthetic"):
        load_bars(str(tmp_path / "nope.csv"))
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match="cannot be read as CSV"):
        load_bars(str(tmp_path / "empty.csv"))
    with pytest.raises(DataError, match="has no underlying 'XYZ'; it has: SPX"):
        load_bars("sp500", symbols=["XYZ"])
    short = make_bars(100)
    short.to_csv(tmp_path / "short.csv", index=False)
    with pytest.raises(DataError, match="too few to warm up the indicators"):
        build_market_data(DataConfig(source=str(tmp_path / "short.csv")))


def test_a_one_row_file_and_an_out_of_range_data_setting(tmp_path):
    make_bars(1).to_csv(tmp_path / "one.csv", index=False)
    with pytest.raises(DataError, match="holds 1 dated row\\(s\\); give it years of bars"):
        build_market_data(DataConfig(source=str(tmp_path / "one.csv")))
    with pytest.raises(ConfigError, match=r"data.val_frac must be in \(0, 1\), got 0.0"):
        build_market_data(DataConfig(val_frac=0.0))  # a DataConfig made in code obeys the config's rules too


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="unknown key 'data.windw'; valid keys here: source, symbols, window"):
        load_config(overrides=["data.windw=3"])
    with pytest.raises(ConfigError, match="data.window must be int, got 'ten'"):
        load_config(overrides=["data.window=ten"])
    cfg = load_config(overrides=["data.window=12", "data.synthetic.regime_vol=[0.1, 0.2, 0.3]",
                                 "data.turbulence_quantile=9e-1"])
    assert cfg.data.window == 12 and cfg.data.synthetic.regime_vol == [0.1, 0.2, 0.3]
    assert cfg.data.turbulence_quantile == 0.9  # 9e-1 is text to PyYAML; a float setting reads it as a number
    with pytest.raises(ConfigError, match="data.turbulence_quantile must be float, got 'high'"):
        load_config(overrides=["data.turbulence_quantile=high"])


def test_module_runs_as_a_command():
    result = subprocess.run([sys.executable, "-m", "clstm_ppo.data", "--data", "synthetic"],
                            capture_output=True, text=True, check=True)
    assert "turbulence threshold" in result.stdout and "validation" in result.stdout
