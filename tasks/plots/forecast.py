"""``posenc plot forecast``: history, truth, forecast and quantile band of chosen series.

    posenc plot forecast --forecasts forecasts.csv --data my.yaml --out forecast.png

The forecasts file is what [`ForecastWriter`][posenc.tasks.ForecastWriter] writes; ``--data`` is the
training config or the long-format table (column roles then read by
[`forecast_layout`][posenc.tasks.plots.forecast.forecast_layout]). Series keys are compared as text,
so a CSV's ``1`` and a Parquet file's ``1`` are one series.
"""

from __future__ import annotations

import argparse
import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from posenc.core._checks import check_int, check_positive_int
from posenc.temporal.timestamps import check_tz_name, parse_timestamps, utc_and_local

from ..forecasting.output import ORIGIN_COLUMN, quantile_columns
from ..forecasting.panel import numeric_column, read_table
from ..forecasting.schema import Columns, Fitted
from .core import new_figure, save_png

__all__ = ["add_forecast_arguments", "forecast_layout", "plot_forecast", "run_forecast"]


def _key_text(key: Any, width: int) -> tuple[str, ...]:
    """A series key as text, one value per series column (``"CA,1"`` or ``("CA", 1)``)."""
    if width == 0:
        raise ValueError(f"series={key!r}: the forecasts hold one series (no series "
                         "columns); drop --series")
    if isinstance(key, str):
        parts = tuple(key.split(",")) if width > 1 else (key,)
    else:
        parts = tuple(str(v) for v in key) if isinstance(key, (tuple, list)) else (str(key),)
    if len(parts) != width:
        raise ValueError(f"series: series {key!r} has {len(parts)} value(s), expected "
                         f"{width} (one per series column; on the command line join them "
                         "with commas, e.g. NY,EWR)")
    return parts


def _series_keys(frame: pd.DataFrame, columns: Sequence[str]) -> list[tuple[str, ...]]:
    """The series keys of ``frame`` as text, in order of appearance."""
    if not columns:
        return [()]
    unique = frame[list(columns)].drop_duplicates()
    return list(zip(*(unique[c].astype(str) for c in columns), strict=True))


def _in_series(frame: pd.DataFrame, columns: Sequence[str], key: tuple[str, ...]) -> np.ndarray:
    """``(N,)`` bool: the rows of series ``key``."""
    mask = np.ones(len(frame), bool)
    for name, value in zip(columns, key, strict=True):
        mask &= (frame[name].astype(str) == value).to_numpy()
    return mask


def _utc_ns(frame: pd.DataFrame, column: str, source: str | None, tz: str | None = None,
            ambiguous: str = "raise", nonexistent: str = "raise",
            timestamp_format: str | None = None) -> tuple[np.ndarray, Any]:
    """-> ``(N,)`` int64 (UTC ns if aware, else wall clock) and the parsed index's zone;
    ``source``: the file ``frame`` is (its rows are named by line in messages)."""
    index = parse_timestamps(frame[column].reset_index(drop=True), column, source, timestamp_format)
    return utc_and_local(index, tz, ambiguous, nonexistent, column)[0], index.tz


def _numbers(frame: pd.DataFrame, column: str, what: str) -> np.ndarray:
    """``(N,)`` float64 values of a column (NaN = missing); text that is no number raises."""
    source = what if what.lower().endswith(".csv") else None
    try:
        return numeric_column(frame[column].reset_index(drop=True), column, source)
    except (ValueError, TypeError) as err:
        raise type(err)(f"{what}: {err}") from None


def forecast_layout(forecasts: pd.DataFrame, data_columns: Sequence[str],
                    timestamp_column: str | None = None,
                    series_columns: Sequence[str] | None = None) -> dict[str, Any]:
    """The column roles of a forecasts table (series columns, timestamp, optional
    `ORIGIN_COLUMN`, targets and their ``{target}_q{level}`` columns), read off its order.

    The timestamp column is ``timestamp_column``, else the first column also in ``data_columns``
    that holds timestamps. Returns ``{"timestamp_column", "series_columns", "targets"}``."""
    columns = [str(c) for c in forecasts.columns]
    if timestamp_column is None:
        for name in columns:
            column = forecasts[name]
            if (name == ORIGIN_COLUMN or name not in data_columns
                    or pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)):
                continue
            try:
                parse_timestamps(column.head(16).reset_index(drop=True), name)
            except (ValueError, TypeError):
                continue
            timestamp_column = name
            break
        else:
            raise ValueError(f"no timestamp column found in the forecasts (columns {columns}) "
                             f"that the data also has (columns {list(data_columns)}); name it "
                             "with --timestamp-column")
    elif timestamp_column not in columns:
        raise ValueError(f"timestamp column {timestamp_column!r} is not in the forecasts "
                         f"(columns {columns})")
    at = columns.index(timestamp_column)
    if series_columns is None:
        series_columns = [c for c in columns[:at] if c != ORIGIN_COLUMN]
    rest = [c for c in columns[at + 1:] if c != ORIGIN_COLUMN and c not in series_columns]
    quantile = {name for target in rest for _, name in quantile_columns(rest, target)}
    targets = [c for c in rest if c not in quantile]
    if not targets:
        raise ValueError(f"the forecasts have no target column after the timestamp column "
                         f"{timestamp_column!r} (columns {columns})")
    return {"timestamp_column": timestamp_column, "series_columns": list(series_columns),
            "targets": targets}


def plot_forecast(forecasts: pd.DataFrame, history: pd.DataFrame, path: str | os.PathLike, *,
                  timestamp_column: str, target: str, series_columns: Sequence[str] = (),
                  series: Sequence[Any] | None = None, max_series: int = 4,
                  origin: int = -1, history_length: int | None = None,
                  tz: str | None = None, ambiguous: str = "raise", nonexistent: str = "raise",
                  timestamp_format: str | None = None, dpi: int = 100,
                  names: tuple[str, str] = ("the forecasts", "the data")) -> Path:
    """One subplot per series: the history before the forecast origin, the truth, the point
    forecast, and the band between the lowest and highest ``{target}_q{level}`` quantile.

    Args:
        forecasts: the [`forecast_frame`][posenc.tasks.forecasting.output.forecast_frame] table.
        history: the long-format data (history and truth), same column names.
        series: keys to plot (a value, a tuple for several series columns, or ``"NY,EWR"``);
            None: the first ``max_series`` series of the forecasts.
        origin: with several `ORIGIN_COLUMN` values per series, an index into the
            series' sorted origins (-1 the latest).
        history_length: observations of history shown; None: three times the forecast steps.
        tz: with ``ambiguous``, ``nonexistent`` and ``timestamp_format``, how naive history
            timestamps are read; ``tz`` is also the zone the time axis shows.
        names: the two inputs in messages (file names).
    """
    import matplotlib.dates as mdates

    fc_name, data_name = names
    series_columns = list(series_columns)
    check_positive_int(max_series, "max_series")
    if history_length is not None:
        check_positive_int(history_length, "history_length")
    origin = check_int(origin, "origin")  # an index into the sorted origins
    tz = check_tz_name(tz)
    for frame, what in ((forecasts, fc_name), (history, data_name)):
        for name in [*series_columns, timestamp_column, target]:
            if name not in frame.columns:
                raise ValueError(f"{what} has no column {name!r}; it has "
                                 f"{[str(c) for c in frame.columns]}")
    if not len(forecasts):
        raise ValueError(f"{fc_name} has no rows")
    available = _series_keys(forecasts, series_columns)
    if isinstance(series, (str, tuple)):
        series = [series]
    chosen = ([_key_text(k, len(series_columns)) for k in series]
              if series is not None and len(series) else available[:max_series])
    for key in chosen:
        if key not in available:
            shown = [",".join(k) for k in available[:10]]
            more = " ..." if len(available) > 10 else ""
            raise ValueError(f"series {','.join(key)!r} is not in {fc_name}; it has "
                             f"{len(available)} series: {shown}{more}")
    levels = quantile_columns([str(c) for c in forecasts.columns], target)
    band = (levels[0], levels[-1]) if len(levels) >= 2 else None

    fc_time, fc_zone = _utc_ns(forecasts, timestamp_column, fc_name)
    aware = fc_zone is not None
    if not aware and tz is not None:
        raise ValueError(f"tz={tz!r}, but the timestamps of {fc_name} are tz-naive: the model "
                         "was trained on naive times without a zone (drop --tz)")
    fc_origin = (_utc_ns(forecasts, ORIGIN_COLUMN, fc_name)[0]
                 if ORIGIN_COLUMN in forecasts.columns else None)
    values = _numbers(history, target, data_name)
    fc_values = {name: _numbers(forecasts, name, fc_name)
                 for name in [target, *(name for _, name in band or ())]}
    zone = tz or (str(fc_zone) if aware and str(fc_zone) != "UTC" else None)
    panels = []
    for key in chosen:
        rows = np.flatnonzero(_in_series(forecasts, series_columns, key))
        if fc_origin is not None:
            origins = np.unique(fc_origin[rows])
            if not -len(origins) <= origin < len(origins):
                raise ValueError(f"origin={origin}, but series {','.join(key)!r} has "
                                 f"{len(origins)} forecast origin(s) in {fc_name} (index "
                                 f"{-len(origins)}..{len(origins) - 1})")
            rows = rows[fc_origin[rows] == origins[origin]]
        rows = rows[np.argsort(fc_time[rows], kind="stable")]
        in_series = _in_series(history, series_columns, key)
        if not in_series.any():
            raise ValueError(f"series {','.join(key)!r} has no rows in {data_name}")
        # Rows of one series: not the file's rows, so messages name no line.
        h_time, h_zone = _utc_ns(history[in_series], timestamp_column, None, tz, ambiguous,
                                 nonexistent, timestamp_format)
        if (h_zone is not None) != aware and (tz is None or h_zone is not None):
            raise ValueError(f"the timestamps in {timestamp_column!r} of {data_name} are "
                             f"{'tz-naive' if aware else 'tz-aware'} but those of {fc_name} are "
                             f"{'tz-aware' if aware else 'tz-naive'}"
                             + (": give the zone of the data's wall-clock times (--tz, the data "
                                "module's tz)" if aware else ""))
        zone = zone or (str(h_zone) if h_zone is not None else None)
        order = np.argsort(h_time, kind="stable")
        h_time, h_value = h_time[order], values[in_series][order]
        start = fc_origin[rows[0]] if fc_origin is not None else fc_time[rows[0]] - 1
        before = np.flatnonzero(h_time <= start)[-(history_length or 3 * len(rows)):]
        span = (h_time >= fc_time[rows[0]]) & (h_time <= fc_time[rows[-1]])
        panels.append((key, rows, start, (h_time[before], h_value[before]),
                       (h_time[span], h_value[span])))

    shown = Fitted(Columns(timestamp_column, (target,)), aware=aware, zone=zone)
    fig = new_figure((10.0, 1.0 + 2.4 * len(panels)), dpi)
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]

    def when(ns: np.ndarray) -> Any:
        return shown.local_times(ns).to_pydatetime()

    for ax, (key, rows, start, past, truth) in zip(axes, panels, strict=True):
        ax.plot(when(past[0]), past[1], color="0.2", lw=1.2, label="history")
        ax.plot(when(truth[0]), truth[1], color="C2", lw=1.2, label="truth")
        x = when(fc_time[rows])
        if band is not None:
            (lo_level, lo), (hi_level, hi) = band
            ax.fill_between(x, fc_values[lo][rows], fc_values[hi][rows], color="C0", alpha=0.25,
                            lw=0, label=f"q{lo_level:g}-q{hi_level:g}")
        ax.plot(x, fc_values[target][rows], color="C0", lw=1.5, label="forecast")
        if fc_origin is not None:
            ax.axvline(when(np.array([start]))[0], color="0.5", ls=":", lw=1, label="origin")
        label = ", ".join(f"{c}={v}" for c, v in zip(series_columns, key, strict=True))
        ax.set_title(f"{label}: {target}" if label else target, fontsize="medium")
        ax.set_ylabel(target)
        locator = mdates.AutoDateLocator(tz=shown.clock_zone)  # in the zone shown, not UTC
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=shown.clock_zone))
    axes[0].legend(fontsize="x-small", ncol=5, loc="upper left")
    zone = shown.clock_zone
    axes[-1].set_xlabel(f"time ({zone})" if zone else "time (no time zone)")
    return save_png(fig, path)


def add_forecast_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``posenc plot forecast`` options (``--out``, ``--dpi`` come with every plot)."""
    parser.description = (
        "History, truth, forecast and quantile band for chosen series. --data is the config you "
        "trained with (its data module's table: built-in data needs no file) or the long-format "
        "CSV/Parquet table; with a table, the column roles come from the forecasts file's layout "
        "(series columns, timestamp, targets) and --tz names the zone of its naive timestamps. "
        "--out: a .png path, or a folder (FOLDER/forecast.png).")
    parser.add_argument("--forecasts", type=Path, required=True,
                        help="forecasts file written by ForecastWriter (.csv or .parquet)")
    parser.add_argument("--data", type=Path, required=True,
                        help="history and truth: the training config (.yaml) or a long-format "
                             ".csv/.parquet table with the same column names")
    parser.add_argument("--series", nargs="+", default=None, metavar="KEY",
                        help="series to plot (several series columns: join the values with "
                             "commas, e.g. NY,EWR); default: the first --max-series")
    parser.add_argument("--max-series", type=int, default=4,
                        help="series plotted without --series (default: 4)")
    parser.add_argument("--target", default=None, help="target to plot (default: the first)")
    parser.add_argument("--origin", type=int, default=-1,
                        help="with several forecast origins (a backtest), which one per "
                             "series: an index into the sorted origins (default: -1, latest)")
    parser.add_argument("--history", type=int, default=None, dest="history_length",
                        help="observations of history shown (default: 3x the forecast steps)")
    parser.add_argument("--tz", default=None,
                        help="zone of the data's naive timestamps, also the axis' zone "
                             "(default: the config's tz, else the forecasts' zone)")
    parser.add_argument("--timestamp-column", default=None,
                        help="table input: the timestamp column (default: inferred)")
    parser.add_argument("--series-columns", nargs="*", default=None, metavar="COLUMN",
                        help="table input: the series id columns (default: the forecasts' "
                             "columns before the timestamp)")
    for action in parser._actions:
        if action.dest == "out":
            action.help = "output .png path, or a folder for forecast.png (default: plots)"


def _read(path: Path, argument: str) -> pd.DataFrame:
    if not path.is_file():
        raise ValueError(f"{argument}={str(path)!r} is not a file")
    try:
        return read_table(path)
    except ValueError as err:
        raise ValueError(f"{argument}: {err}") from err


def _config_data_module(path: Path) -> Any:
    """The data module a training config's ``data`` section builds (trusted as by ``fit``)."""
    import yaml

    from ..forecasting import TimeSeriesDataModule

    if not path.is_file():
        raise ValueError(f"--data={str(path)!r} is not a file")
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"--data={str(path)!r} is not valid YAML: {err}") from err
    section = config.get("data") if isinstance(config, dict) else None
    if isinstance(section, str):
        section = {"class_path": section}
    if not isinstance(section, dict) or not isinstance(section.get("class_path"), str):
        raise ValueError(f"--data={str(path)!r} has no data section with a class_path (a "
                         "posenc fit config: data: {class_path: ..., init_args: {...}})")
    class_path = section["class_path"]
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name or "posenc.tasks"), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"--data={str(path)!r}: data class_path {class_path!r} cannot be "
                         f"imported ({err})") from err
    if not (isinstance(cls, type) and issubclass(cls, TimeSeriesDataModule)):
        raise ValueError(f"--data={str(path)!r}: data class_path {class_path!r} is not a "
                         "TimeSeriesDataModule (its table holds the history to plot)")
    return cls(**(section.get("init_args") or {}))


def run_forecast(args: argparse.Namespace) -> Path:
    """``posenc plot forecast`` from parsed arguments; returns the PNG's path."""
    out = args.out if args.out.suffix.lower() == ".png" else args.out / "forecast.png"
    forecasts = _read(args.forecasts, "--forecasts")
    data = args.data
    if data.suffix.lower() in (".yaml", ".yml"):
        dm = _config_data_module(data)
        history = dm.load_frame()
        columns = dm.columns
        roles = {"timestamp_column": columns.timestamp_column,
                 "series_columns": list(columns.series_columns),
                 "targets": list(columns.target_columns)}
        reading = {"tz": args.tz or columns.tz, "ambiguous": columns.ambiguous,
                   "nonexistent": columns.nonexistent, "timestamp_format": columns.timestamp_format}
        data_name = f"the data of {data.name}"
    else:
        history = _read(data, "--data")
        roles = forecast_layout(forecasts, [str(c) for c in history.columns],
                                args.timestamp_column, args.series_columns)
        reading, data_name = {"tz": args.tz}, str(data)
    target = args.target or roles["targets"][0]
    if target not in roles["targets"]:
        raise ValueError(f"--target={target!r} is not a target of the forecasts; they have "
                         f"{roles['targets']}")
    return plot_forecast(forecasts, history, out, timestamp_column=roles["timestamp_column"],
                         target=target, series_columns=roles["series_columns"], series=args.series,
                         max_series=args.max_series, origin=args.origin, dpi=args.dpi,
                         history_length=args.history_length,
                         names=(str(args.forecasts), data_name), **reading)
