"""Forecast requests: a history table and the times to predict -> one window per series.

The history and the query rows are read by :func:`~posenc.tasks.panel.read_panel` with the
trained model's :class:`~posenc.tasks.panel.SeriesSchema` (its columns, zone and scaling), so
new data means exactly what the training data meant. The windows are then gathered by the
same :class:`~posenc.tasks.windows.WindowDataset` as in training.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pandas as pd
from pandas.tseries.frequencies import to_offset
from posenc.core import check_positive_int
from posenc.temporal import localize

from .panel import Panel, SeriesSchema, read_panel, scale_panel
from .series_frame import parse_length
from .windows import WindowDataset, WindowIndex

__all__ = ["future_times", "request_dataset"]


# Calendar rules a series may follow with observations missing (a month, a holiday), where
# pd.infer_freq finds none; the coarsest one holding every observation is its rhythm (ties:
# the first listed, so month starts are "MS", not two semi-month steps).
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_RULES = tuple(to_offset(rule) for rule in (
    "D", "B", *(f"W-{day}" for day in ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")),
    "MS", "ME", "SMS", "SME", "BMS", "BME",
    *(f"Q{edge}-{month}" for edge in "SE" for month in _MONTHS[:3]),
    *(f"Y{edge}-{month}" for edge in "SE" for month in _MONTHS)))
_DAY_NS = 86400 * 10**9


def _calendar_rule(times: pd.DatetimeIndex) -> pd.DateOffset | None:
    """The coarsest of :data:`_RULES` (times its multiple) whose wall-clock grid from the first
    time holds every one of ``times`` (one time of day, increasing), provided at least half
    the gaps are one step of it: a rhythm with some observations missing, not irregular
    sampling."""
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


def _calendar_offset(local: np.ndarray) -> pd.DateOffset | None:
    """The calendar frequency of a series' ``(N,)`` int64 naive wall-clock ns: the one
    ``pd.infer_freq`` finds on all of them, else the calendar rule they follow with gaps
    (:func:`_calendar_rule`); None: fewer than 3 times, times of day that differ, irregular
    sampling, or a fixed duration (hours, minutes)."""
    if len(local) < 3:
        return None
    times = pd.DatetimeIndex(local.view("M8[ns]"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pandas 4 will return an offset, not its text
            freq = pd.infer_freq(times)
    except (ValueError, TypeError):
        freq = None
    if freq is not None:
        offset = to_offset(freq)
        return None if isinstance(offset, pd.offsets.Tick) else offset
    same_time_of_day = np.all(local % _DAY_NS == local[0] % _DAY_NS)
    increasing = np.all(np.diff(local) > 0)
    return _calendar_rule(times) if same_time_of_day and increasing else None


def future_times(panel: Panel, steps: int, ask: str = "as a DataFrame") -> pd.DataFrame:
    """The next ``steps`` times of every series of a history panel after its last
    observation: ``(S * steps)`` rows of the series and timestamp columns. ``ask`` says how
    the caller takes the times instead, for the error when there is no step to continue.

    A series whose local times follow a calendar frequency (days, business days, weeks, month
    starts or ends, ...), also with some observations missing, continues it in wall-clock
    time (a day is 23 or 25 hours across DST, a month 28 to 31 days); otherwise the step is
    the training data's median one (``schema.step_ns``): whole days in wall-clock time,
    shorter ones in real time."""
    schema = panel.schema
    step = pd.Timedelta(schema.step_ns)
    if step <= pd.Timedelta(0):
        raise ValueError(f"the training data had no sampling step (a single observation per "
                         f"series): give the times to predict {ask} with the series and "
                         f"timestamp columns")
    days = to_offset(f"{step.days}D") if step % pd.Timedelta("1D") == pd.Timedelta(0) else None
    held = np.flatnonzero(panel.lengths > 0)
    stamps = []
    for s in held:
        a, b = int(panel.starts[s]), int(panel.starts[s + 1])
        offset = _calendar_offset(panel.local[a:b]) or days
        if offset is None:
            start = schema.local_times(panel.utc[b - 1:b])[0]
            stamps.append(pd.DatetimeIndex([start + step * (k + 1) for k in range(steps)]))
            continue
        # Calendar steps continue the wall clock the rhythm was read on (the local times):
        # the time of day stays, whatever DST does.
        wall_start = pd.Timestamp(int(panel.local[b - 1]))
        if offset.is_on_offset(wall_start):
            wall = pd.date_range(wall_start, periods=steps + 1, freq=offset)[1:]
        else:
            wall = pd.DatetimeIndex([wall_start + offset * (k + 1) for k in range(steps)])
        if schema.tz is not None:
            stamps.append(localize(wall, schema.tz, ambiguous=True, nonexistent="shift_forward"))
        else:  # naive data (local is UTC) or one fixed UTC offset: wall = UTC + the offset
            stamps.append(wall - pd.Timedelta(int(panel.local[b - 1] - panel.utc[b - 1])))
    frame = schema.series_frame(np.repeat(held, steps))
    times = pd.DatetimeIndex(np.concatenate([s.as_unit("ns").asi8 for s in stamps])
                             .view("M8[ns]"))
    if schema.tz is not None or schema.aware:
        times = times.tz_localize("UTC").tz_convert(schema.tz or "UTC")
    frame[schema.timestamp_column] = times
    return frame


def _combine(history: Panel, future: Panel) -> tuple[Panel, np.ndarray]:
    """History and query rows of each series in one panel (history first); ``(S,)`` the row
    where each series' queries start."""
    schema = history.schema
    num = max(history.num_series, future.num_series)
    hist_series = np.repeat(np.arange(history.num_series), history.lengths)
    fut_series = np.repeat(np.arange(future.num_series), future.lengths)
    for s in np.flatnonzero(np.bincount(fut_series, minlength=num)
                            > 0):
        if s >= history.num_series or history.lengths[s] == 0:
            raise ValueError(f"series {schema.series_keys[s]!r} has times to predict but no "
                             "history; give its past observations in the history table")
    last = np.full(num, np.iinfo(np.int64).min)
    held = np.flatnonzero(history.lengths > 0)
    last[held] = history.utc[history.starts[held + 1] - 1]
    early = np.flatnonzero(future.utc <= last[fut_series])
    if len(early):
        i = int(early[0])
        s = int(fut_series[i])
        raise ValueError(f"future row {int(future.rows[i])} ({pd.Timestamp(future.utc[i])} UTC)"
                         f" of series {schema.series_keys[s]!r} is not after its last history "
                         f"time ({pd.Timestamp(last[s])} UTC); the times to predict must be "
                         "in the future of each series")
    series = np.concatenate((hist_series, fut_series))
    utc = np.concatenate((history.utc, future.utc))
    order = np.lexsort((utc, series))
    counts = np.bincount(series, minlength=num)
    starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    hist_counts = np.bincount(hist_series, minlength=num)
    panel = Panel(utc=utc[order], local=np.concatenate((history.local, future.local))[order],
                  values=np.concatenate((history.values, future.values))[order],
                  starts=starts, rows=np.concatenate((history.rows, future.rows))[order],
                  static_real=history.static_real, static_cat=history.static_cat,
                  schema=schema)
    return panel, starts[:-1] + hist_counts


def _series_start(panel: Panel, stored: list[int]) -> np.ndarray:
    """``(S,)`` int64 local ns of each series' first observation: the earlier of the
    training data's (``stored``, the schema's ``series_start``) and the history's first row;
    a series new to the model (or a schema without starts) begins at its history."""
    first = panel.series_starts()
    known = np.asarray(stored, np.int64)[:len(first)]
    here = first[:len(known)]
    first[:len(known)] = np.where(known == np.iinfo(np.int64).min, here,
                                  np.minimum(known, here))
    return first


def _read(frame: pd.DataFrame, schema: SeriesSchema, what: str, queries: bool) -> Panel:
    """``read_panel`` without fitting; its errors say which table (``history``/``future``)."""
    try:
        return read_panel(frame, schema, fit=False, queries=queries)
    except (ValueError, TypeError) as err:
        raise type(err)(f"{what}: {err}") from err


def request_dataset(schema: SeriesSchema, history: pd.DataFrame,
                    future: pd.DataFrame | int | None = None, *, future_name: str = "future",
                    future_form: str = "a DataFrame") -> WindowDataset:
    """A forecast request -> a dataset of one window per series that has times to predict.

    Args:
        schema: the trained model's schema (not modified: new series and their scaling,
            fitted on their own history, live in a copy).
        history: long-format table with the training data's columns (series, timestamp,
            targets, covariates, static columns); each series' context is its last
            ``context_length`` observations (or duration).
        future: the times to predict: a table of the series and timestamp columns plus the
            future covariates (any times after each series' history, in any order); an int:
            that many steps after each series' last observation (only without future
            covariates); None: the trained ``horizon`` in steps (a duration horizon: as many
            median steps as fit in it).
        future_name: what the caller's argument for ``future`` is called, for error messages
            (``forecast()``: ``future``; the ``posenc predict`` data module:
            ``--data.future_data``).
        future_form: what that argument takes, for error messages (a DataFrame; a
            CSV/Parquet file).

    Each series' age (:class:`~posenc.temporal.AgeFeature`) counts from its first
    observation in the training data (``schema.series_start``, kept in checkpoints) or in
    ``history`` if that is earlier; a series new to the model starts at its history.
    """
    if not isinstance(history, pd.DataFrame):
        raise TypeError(f"history must be a pandas DataFrame, got {type(history).__name__}")
    if not (future is None or isinstance(future, (pd.DataFrame, int))):
        raise TypeError(f"future must be a DataFrame of the times to predict, an int number of "
                        f"steps or None, got {type(future).__name__} ({future!r})"[:300])
    schema = copy.deepcopy(schema)
    ask = f"as {future_form} ({future_name}=...)"
    past = _read(history, schema, "history", queries=False)
    if isinstance(future, pd.DataFrame):
        queries = _read(future, schema, future_name, queries=True)
    else:
        if schema.future_covariates:
            raise ValueError(f"the model reads future covariates {schema.future_covariates}: "
                             f"give the times to predict {ask} with the series and timestamp "
                             f"columns and these covariates")
        if future is None:
            horizon = schema.horizon
            future = horizon if isinstance(horizon, int) else max(
                1, parse_length(horizon, "horizon").value // max(schema.step_ns, 1))
        steps = check_positive_int(future, "future")
        queries = read_panel(future_times(past, steps, ask), schema, fit=False,
                             queries=True)
    # Series new to the model extend schema.series_keys in either table; align both.
    num = len(schema.series_keys)
    past.starts = np.pad(past.starts, (0, num + 1 - len(past.starts)), mode="edge")
    queries.starts = np.pad(queries.starts, (0, num + 1 - len(queries.starts)), mode="edge")
    panel, first_query = _combine(past, queries)
    scale_panel(panel, None)
    wanted = np.flatnonzero(panel.lengths > 0)
    wanted = wanted[first_query[wanted] < panel.starts[wanted + 1]]
    context = schema.context_length
    if isinstance(context, int):
        c0 = np.maximum(panel.starts[wanted], first_query[wanted] - context)
    else:
        span = parse_length(context, "context_length").value
        c0 = np.array([panel.starts[s] + np.searchsorted(
            panel.utc[panel.starts[s]:first_query[s]], panel.utc[first_query[s] - 1] - span,
            "right") for s in wanted], np.int64)
    rows = np.stack((c0, first_query[wanted], panel.starts[wanted + 1]), 1)
    offsets = np.zeros(panel.num_series + 1, np.int64)
    offsets[wanted + 1] = 1
    index = WindowIndex(offsets=np.cumsum(offsets), rows=rows.astype(np.int64))
    return WindowDataset(panel, index, _series_start(panel, schema.series_start))
