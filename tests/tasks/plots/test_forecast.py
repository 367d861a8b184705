"""``posenc plot forecast``: history, truth, forecast and band from a ForecastWriter file."""

from __future__ import annotations

import matplotlib.dates as mdates
import numpy as np
import pandas as pd
import pytest
from posenc.tasks import plots
from posenc.tasks.forecasting.output import forecast_frame
from posenc.tasks.forecasting.schema import Columns, Fitted
from posenc.tasks.plots import forecast as plots_forecast
from posenc.tasks.tables import write_table

HOUR = 3_600_000_000_000
ZONE = "Europe/Berlin"
START = pd.Timestamp("2024-03-30 12:00", tz=ZONE)  # DST starts on the 31st at 02:00


def _history() -> pd.DataFrame:
    """Two series of 40 hourly naive local (Berlin) rows: value = 100 * series + step."""
    local = pd.date_range(START, periods=40, freq="h").tz_localize(None)
    return pd.DataFrame({"site": np.repeat(["a", "b"], 40), "ts": np.tile(local, 2),
                         "load": np.r_[np.arange(40.0), 100 + np.arange(40.0)]})


def _forecasts(origins=(29,)) -> pd.DataFrame:
    """Forecasts of steps origin+1..origin+6 of each series: truth - 0.5, band +-2."""
    schema = Fitted(Columns(timestamp_column="ts", target_columns=["load"],
                            series_columns=["site"], tz=ZONE), series_keys=(("a",), ("b",)))
    utc = pd.date_range(START, periods=40, freq="h").as_unit("ns").asi8
    outputs = []
    for origin in origins:
        time = np.stack([utc[origin + 1:origin + 7]] * 2)
        truth = np.stack([np.arange(origin + 1, origin + 7)] * 2) + np.array([[0], [100]])
        pred = (truth - 0.5)[..., None].astype(np.float32)
        outputs.append({"series": np.array([0, 1]), "time": time,
                        "valid": np.ones((2, 6), bool), "prediction": pred,
                        "quantiles": np.stack([pred - 2, pred, pred + 2], -1),
                        "origin": np.array([utc[origin]] * 2)})
    return forecast_frame(outputs, schema, [0.1, 0.5, 0.9])


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots save (their PNG is still written)."""
    saved = []
    save = plots_forecast.save_png

    def keep(fig, path):
        saved.append(fig)
        return save(fig, path)

    monkeypatch.setattr(plots_forecast, "save_png", keep)
    return saved


def _lines(ax) -> dict[str, tuple[list, list]]:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
            for line in ax.lines}


def test_plot_two_series_from_files(tmp_path, figures):
    # Origin 01:00 CET on 31 March; the first forecast step is at 03:00 CEST, an hour later.
    write_table(_forecasts(origins=(13,)), tmp_path / "f.csv")
    _history().to_csv(tmp_path / "data.csv", index=False)
    [png] = plots.main(["forecast", "--forecasts", str(tmp_path / "f.csv"), "--data",
                        str(tmp_path / "data.csv"), "--tz", ZONE, "--out",
                        str(tmp_path / "out" / "fc.png"), "--dpi", "40", "--history", "5"])
    assert png == tmp_path / "out" / "fc.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = figures[0]
    assert tuple(fig.canvas.get_width_height()) == (400, 232)  # (10, 1 + 2 * 2.4) in at 40
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["site=a: load", "site=b: load"]
    lines = _lines(axes[1])
    assert lines["history"][1] == [109.0, 110.0, 111.0, 112.0, 113.0]  # up to the origin
    assert lines["truth"][1] == [114.0 + k for k in range(6)]
    assert lines["forecast"][1] == [113.5 + k for k in range(6)]
    # Times are instants: the forecast starts one hour after the origin, across DST.
    assert lines["forecast"][0][0].isoformat() == "2024-03-31T03:00:00+02:00"
    origin = lines["origin"][0][0]
    assert mdates.date2num(lines["forecast"][0][0]) - mdates.date2num(origin) == (
        pytest.approx(1 / 24))
    assert lines["truth"][0][0] == lines["forecast"][0][0]
    [band] = axes[1].collections
    assert band.get_label() == "q0.1-q0.9"
    lows = band.get_paths()[0].vertices[:, 1]
    assert lows.min() == pytest.approx(111.5) and lows.max() == pytest.approx(120.5)
    assert axes[-1].get_xlabel() == f"time ({ZONE})"


def test_plot_from_a_config_chosen_series_and_origin(tmp_path, figures):
    write_table(_forecasts(origins=(20, 29)), tmp_path / "f.parquet")
    _history().to_parquet(tmp_path / "data.parquet")
    (tmp_path / "fit.yaml").write_text(
        "data:\n  class_path: posenc.tasks.TimeSeriesDataModule\n  init_args:\n"
        f"    data: {tmp_path / 'data.parquet'}\n    timestamp_column: ts\n"
        f"    target_columns: [load]\n    series_column: site\n    tz: {ZONE}\n")
    [png] = plots.main(["forecast", "--forecasts", str(tmp_path / "f.parquet"), "--data",
                        str(tmp_path / "fit.yaml"), "--series", "b", "--origin", "0",
                        "--out", str(tmp_path), "--dpi", "30"])
    assert png == tmp_path / "forecast.png" and png.is_file()
    [ax] = figures[0].axes
    lines = _lines(ax)
    assert lines["forecast"][1] == [120.5 + k for k in range(6)]  # the first origin (20)
    assert lines["history"][1] == [103.0 + k for k in range(18)]  # 3 x 6 steps
    assert ax.get_title() == "site=b: load"


def test_plot_errors_name_what_is_missing(tmp_path):
    forecasts, history = _forecasts(), _history()

    def plot(**kw):
        args = dict(timestamp_column="ts", target="load", series_columns=["site"], tz=ZONE)
        return plots_forecast.plot_forecast(forecasts, history, tmp_path / "x.png",
                                            **{**args, **kw})

    with pytest.raises(ValueError, match=r"series 'c' is not in the forecasts; it has 2 "
                                         r"series: \['a', 'b'\]"):
        plot(series=["c"])
    with pytest.raises(ValueError, match="the forecasts has no column 'temp'"):
        plot(target="temp")
    with pytest.raises(ValueError, match=r"series \('a', 1\) has 2 value\(s\), expected 1"):
        plot(series=[("a", 1)])
    with pytest.raises(ValueError, match=r"origin=1, but series 'a' has 1 forecast origin"):
        plot(origin=1)
    with pytest.raises(ValueError, match="timestamps in 'ts' of the data are tz-naive but "
                                         "those of the forecasts are tz-aware: give the zone"):
        plot(tz=None)
    with pytest.raises(ValueError, match="series 'b' has no rows in the data"):
        plots_forecast.plot_forecast(forecasts, history[history.site == "a"],
                                     tmp_path / "x.png", timestamp_column="ts",
                                     target="load", series_columns=["site"], tz=ZONE)
    bad = history.astype({"load": object})
    bad.loc[3, "load"] = "n/a"
    with pytest.raises(ValueError, match="the data: target column 'load': row 3 value 'n/a' is "
                                         "not numeric"):
        plots_forecast.plot_forecast(forecasts, bad, tmp_path / "x.png", timestamp_column="ts",
                                     target="load", series_columns=["site"], tz=ZONE)
    assert not (tmp_path / "x.png").exists()

    write_table(forecasts, tmp_path / "f.csv")
    history.to_csv(tmp_path / "d.csv", index=False)
    base = ["forecast", "--out", str(tmp_path / "x.png"), "--tz", ZONE]
    with pytest.raises(ValueError, match=r"--forecasts='.*nope.csv' is not a file"):
        plots.main([*base, "--forecasts", str(tmp_path / "nope.csv"), "--data",
                    str(tmp_path / "d.csv")])
    with pytest.raises(ValueError, match=r"--data='.*nope.yaml' is not a file"):
        plots.main([*base, "--forecasts", str(tmp_path / "f.csv"), "--data",
                    str(tmp_path / "nope.yaml")])
    with pytest.raises(ValueError, match=r"--target='temp' is not a target of the "
                                         r"forecasts; they have \['load'\]"):
        plots.main([*base, "--forecasts", str(tmp_path / "f.csv"), "--data",
                    str(tmp_path / "d.csv"), "--target", "temp"])
    (tmp_path / "bad.yaml").write_text("model: {}\n")
    with pytest.raises(ValueError, match="has no data section with a class_path"):
        plots.main([*base, "--forecasts", str(tmp_path / "f.csv"), "--data",
                    str(tmp_path / "bad.yaml")])


def test_plot_single_naive_series(tmp_path, figures):
    schema = Fitted(Columns(timestamp_column="t", target_columns=["y"]))
    stamps = pd.date_range("2021-01-01", periods=30, freq="h")
    out = {"series": np.array([0]), "time": stamps.as_unit("ns").asi8[None, 24:],
           "valid": np.ones((1, 6), bool), "prediction": np.ones((1, 6, 1), np.float32)}
    write_table(forecast_frame([out], schema), tmp_path / "f.parquet")
    pd.DataFrame({"t": stamps, "y": np.arange(30.0)}).to_csv(tmp_path / "d.csv", index=False)
    base = ["forecast", "--forecasts", str(tmp_path / "f.parquet"), "--data",
            str(tmp_path / "d.csv"), "--out", str(tmp_path / "p.png"), "--dpi", "20"]
    plots.main(base)
    [ax] = figures[0].axes
    lines = _lines(ax)
    assert lines["history"][1] == [float(v) for v in range(6, 24)]  # before the first step
    assert lines["truth"][1] == [float(v) for v in range(24, 30)]
    assert "origin" not in lines and not ax.collections  # no origin column, no quantiles
    assert ax.get_title() == "y" and ax.get_xlabel() == "time (no time zone)"
    with pytest.raises(ValueError, match="hold one series .no series columns.; drop --series"):
        plots.main([*base, "--series", "x"])
    with pytest.raises(ValueError, match="tz='Europe/Paris', but the timestamps of .*f.parquet "
                                         "are tz-naive"):
        plots.main([*base, "--tz", "Europe/Paris"])


def test_layout_is_read_off_the_forecasts_columns():
    frame = _forecasts()
    layout = plots_forecast.forecast_layout(frame, ["site", "ts", "load"])
    assert layout == {"timestamp_column": "ts", "series_columns": ["site"],
                      "targets": ["load"]}
    with pytest.raises(ValueError, match="no timestamp column found in the forecasts"):
        plots_forecast.forecast_layout(frame, ["site", "load"])
