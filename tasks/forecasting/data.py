"""``TimeSeriesDataModule``: a CSV/Parquet file or DataFrame -> sliding forecast windows.

Context and horizon lengths are counts of observations (``168``) or durations with a unit
(``"7D"``, ``"36h"``; a bare ``"24"`` is refused, pandas would read nanoseconds). Text
timestamps share one format: the first row's, or ``timestamp_format``; a row in another format
is an error naming it, never a guess. Splits are by time: a window belongs to the split that
holds its whole horizon, so no training target lies in the validation or test period, and
every context ends before its horizon starts. Scaling statistics are per series and come
from the training period only. Handed a trained model's fitted state (series, scaling,
vocabularies, step, series starts: :meth:`TimeSeriesDataModule.use_fitted`, which a
``Forecaster`` calls in ``setup`` and when Lightning restores its checkpoint), the table is read
with it instead; a series new to the model is scaled by its own training period here.
A panel (many series, ``series_column``) is split at the same times for all series.
Batches: see :mod:`posenc.tasks.forecasting.windows`; the table is read by
:func:`posenc.tasks.forecasting.panel.read_panel`.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np
import pandas as pd
from lightning.pytorch import LightningDataModule
from posenc.core.encoding import check_choice, check_int, check_positive_int
from posenc.temporal.timestamps import (
    AMBIGUOUS,
    NONEXISTENT,
    check_tz_name,
    utc_and_local,
)
from torch.utils.data import DataLoader

from ..config import check_split_fractions, make_hparams_plain, plain
from .output import request_dataset
from .panel import (
    Panel,
    SeriesSchema,
    check_unique_columns,
    parse_length,
    read_panel,
    read_table,
    scale_panel,
)
from .windows import (
    WindowDataset,
    WindowIndex,
    batched,
    count_windows,
    duration_windows,
    time_origins,
)

__all__ = ["MAX_ORIGINS_PER_ROW", "MAX_WINDOW_ROWS", "MODEL_SIZES", "PERSISTENCE",
           "TimeSeriesDataModule"]

# Properties of the data module that a Forecaster takes as arguments of the same names: the
# CLI links them (posenc.tasks.cli), Python code passes dm.model_sizes().
# season= value whose baseline is the last observed value (the naive forecast).
PERSISTENCE = "persistence"

MODEL_SIZES = ("num_targets", "num_past_covariates", "num_future_covariates",
               "static_cardinalities", "num_static_real", "mase_season", "naive_season")

# A window with more rows than this could not be attended to anyway; a duration long for the
# data's sampling (years of seconds) is refused before its windows are built.
MAX_WINDOW_ROWS = 100_000
# More forecast origins than this many per observation repeat the same rows (the stride is
# below the sampling interval): refused before any window is built.
MAX_ORIGINS_PER_ROW = 10
# A count without a unit ("24") is 24 ns to pandas: durations must say their unit.
_RELATIVE = ("now", "today", "yesterday", "tomorrow")


def _columns(value: Any, name: str, required: bool = False) -> list[str]:
    """A column name or a list of names -> a list of unique names."""
    if value is None and required:
        raise TypeError(f"{name} must be a column name or a list of names, got None")
    if value is None:
        value = []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (Sequence, pd.Index, np.ndarray)):
        raise TypeError(f"{name} must be a column name or a list of names, got "
                        f"{type(value).__name__} ({value!r})")
    names = list(value)
    for i, item in enumerate(names):
        if not isinstance(item, str):
            raise TypeError(f"{name}[{i}] must be a column name (str), got "
                            f"{type(item).__name__} ({item!r})")
        if item in names[:i]:
            raise ValueError(f"{name} repeats {item!r}: {names}")
    if required and not names:
        raise ValueError(f"{name} must name at least one column")
    return names


def _keep_rows(panel: Panel, keep: np.ndarray) -> Panel:
    """The panel without the rows where ``keep`` is False (series stay, maybe shorter)."""
    series = panel.series_of_rows()[keep]
    counts = np.bincount(series, minlength=panel.num_series)
    starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return Panel(utc=panel.utc[keep], local=panel.local[keep], values=panel.values[keep],
                 starts=starts, rows=panel.rows[keep], static_real=panel.static_real,
                 static_cat=panel.static_cat, schema=panel.schema)


class TimeSeriesDataModule(LightningDataModule):
    """Sliding-window forecasting data from a CSV/Parquet file or a DataFrame.

    Args:
        data: path (``str`` or ``os.PathLike``, stored as text) to a ``.csv`` / ``.parquet``
            file, or a ``pandas.DataFrame``. Column names must be unique.
        timestamp_column: column holding the timestamps (text or datetime; naive or with a UTC
            offset, one form for the whole column). Rows are sorted by time; duplicate
            timestamps (the same instant, whatever its offset) are an error.
        target_columns: numeric column(s) to forecast (one channel each); NaN = missing. A
            channel that is constant over the training period gets ``scale`` 1.
        series_column: column(s) whose values name the series of a long-format panel (one
            row per series and timestamp); None: the table is one series. Windows never
            cross series; series may start and end at different times, have gaps and be
            irregular.
        past_covariates: numeric (or bool) columns known only up to the forecast origin (a
            measured temperature): the model sees them in the context; NaN = missing.
        future_covariates: numeric (or bool) columns known at the times to predict too (a
            workday flag, a temperature forecast); a missing value is an error naming its
            column and row.
        static_columns: one value per series (constant within it, else an error): text,
            categorical or bool columns are categories (embedded), numbers are standardized
            across series.
        tz: IANA time zone. Naive timestamps are local times there (localized with
            ``ambiguous``/``nonexistent``, in wall-clock order); aware ones are converted to
            it. Calendar features use this local time; elapsed time is always real (UTC) time.
        ambiguous: repeated local hour at a DST fall-back: ``raise``, ``earliest`` (the
            DST reading), ``latest`` (standard time) or ``infer`` (from the order).
        nonexistent: skipped local hour at a DST spring-forward: ``raise``,
            ``shift_forward`` or ``shift_backward``.
        context_length: context per window: observations (int) or a duration with a unit
            (``"7D"``, a ``timedelta``); a bare number such as ``"168"`` or ``168.0`` is refused.
        horizon: predicted span per window: observations (int) or a duration (``"24h"``).
        stride: distance between consecutive forecast origins, same kind as the lengths
            (default: ``horizon``). Durations may not place more than ``MAX_ORIGINS_PER_ROW``
            origins per observation (a stride below the sampling interval repeats windows),
            and a window holds at most ``MAX_WINDOW_ROWS`` rows.
        val_fraction: the last fraction of the time span held out for validation
            (ignored where ``val_start`` is given).
        test_fraction: the last fraction for test (ignored where ``test_start`` is given).
        val_start: an explicit split time (text or ``datetime``) in the form of the
            timestamps: naive for naive data (read in ``tz`` where given), with a UTC offset
            for aware data (naive ones are accepted there only with ``tz``).
        test_start: the same for the test split.
        season: the seasonal-naive baseline's season: a fixed duration (``"7D"``; the
            baseline repeats a fixed lag, so calendar months such as ``"12MS"`` are refused:
            give 12 for monthly data), a count of median sampling steps, ``"persistence"``
            (the last observed value: the naive forecast, the usual baseline for horizons far
            shorter than any season), or None for the default of the data's step
            (:func:`~posenc.tasks.forecasting.metrics.season_for_step`).
        irregular: keep a random fraction of observations (seeded), for irregular sampling;
            None keeps all.
        seed: seed of ``irregular``.
        batch_size: training windows per batch.
        eval_batch_size: windows per validation, test and predict batch.
        num_workers: loader worker processes.
        predict_split: what ``predict`` (``posenc predict``, ``trainer.predict``) forecasts:
            ``future`` (default): the times after each series' end, from the whole table as
            history (:meth:`~posenc.tasks.Forecaster.forecast`'s path); ``test`` or ``val``:
            that split's rolling windows (backtest forecasts, their truth in the table).
        future_data: with ``predict_split="future"``, the times to predict: a CSV/Parquet path
            or DataFrame of the series and timestamp columns and the future covariates; None:
            the trained horizon after each series' last observation.
        timestamp_format: ``pd.to_datetime`` format of text timestamps (``"%d/%m/%Y %H:%M"``,
            ``"ISO8601"``, ``"mixed"``). None: the format pandas infers from the first row,
            which every row must match (a row in another format is an error, not a guess).
    """

    def __init__(
        self,
        data: str | os.PathLike | Any = None,
        timestamp_column: str = "timestamp",
        target_columns: str | list[str] = "value",
        series_column: str | list[str] | None = None,
        past_covariates: list[str] | None = None,
        future_covariates: list[str] | None = None,
        static_columns: list[str] | None = None,
        tz: str | None = None,
        ambiguous: str = "raise",
        nonexistent: str = "raise",
        context_length: int | str = 168,
        horizon: int | str = 24,
        stride: int | str | None = None,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        val_start: str | None = None,
        test_start: str | None = None,
        season: int | str | None = None,
        irregular: float | None = None,
        seed: int = 0,
        batch_size: int = 64,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        timestamp_format: str | None = None,
        predict_split: str = "future",
        future_data: str | os.PathLike | Any = None,
    ) -> None:
        super().__init__()
        # A DataFrame is data, not a hyperparameter: keep it out of the checkpoint.
        frames = [name for name, value in (("data", data), ("future_data", future_data))
                  if not isinstance(value, (str, os.PathLike, type(None)))]
        self.save_hyperparameters(ignore=frames)
        # Paths, numpy scalars, timestamps and timedeltas as builtins: a checkpoint that
        # pickled them would not load with torch.load(weights_only=True).
        make_hparams_plain(self.hparams)
        self.data = data
        if timestamp_column is None:
            raise TypeError("timestamp_column must name a column, got None")
        self.timestamp_column = timestamp_column
        self.target_columns = _columns(target_columns, "target_columns", required=True)
        self.series_columns = _columns(series_column, "series_column")
        self.past_covariates = _columns(past_covariates, "past_covariates")
        self.future_covariates = _columns(future_covariates, "future_covariates")
        self.static_columns = _columns(static_columns, "static_columns")
        roles = {"timestamp_column": [timestamp_column], "target_columns": self.target_columns,
                 "series_column": self.series_columns, "past_covariates": self.past_covariates,
                 "future_covariates": self.future_covariates,
                 "static_columns": self.static_columns}
        seen: dict[str, str] = {}
        for role, names in roles.items():
            for name in names:
                if name in seen:
                    raise ValueError(f"column {name!r} is in both {seen[name]} and {role}; "
                                     "a column has one role")
                seen[name] = role
        if timestamp_format is not None and not isinstance(timestamp_format, str):
            raise TypeError(f"timestamp_format must be a str or None, got "
                            f"{type(timestamp_format).__name__} ({timestamp_format!r})")
        self.timestamp_format = timestamp_format
        self.tz = check_tz_name(tz)
        self.ambiguous = check_choice(ambiguous, "ambiguous", AMBIGUOUS)
        self.nonexistent = check_choice(nonexistent, "nonexistent", NONEXISTENT)
        self.context_length = parse_length(context_length, "context_length")
        self.horizon = parse_length(horizon, "horizon")
        self.stride = self.horizon if stride is None else parse_length(stride, "stride")
        kinds = {type(v) for v in (self.context_length, self.horizon, self.stride)}
        if len(kinds) != 1:
            raise ValueError(
                f"context_length={context_length!r}, horizon={horizon!r} and stride={stride!r} "
                "must all be observation counts (int) or all durations (str)")
        self.by_time = kinds == {pd.Timedelta}
        if not self.by_time and self.context_length + self.horizon > MAX_WINDOW_ROWS:
            raise ValueError(
                f"context_length + horizon = {self.context_length + self.horizon} rows per "
                f"window, above the limit of MAX_WINDOW_ROWS={MAX_WINDOW_ROWS}")
        self.val_fraction, self.test_fraction = check_split_fractions(val_fraction,
                                                                      test_fraction)
        self.val_start = self._split_argument(val_start, "val_start")
        self.test_start = self._split_argument(test_start, "test_start")
        if irregular is not None and (isinstance(irregular, (bool, np.bool_)) or not (
                isinstance(irregular, Real) and 0 < irregular <= 1)):  # NaN fails this too
            raise ValueError(f"irregular is the fraction of observations kept, in (0, 1], "
                             f"got {irregular!r}")
        self.irregular = irregular
        self.season = season if season in (None, PERSISTENCE) else parse_length(season,
                                                                                 "season")
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__} ({seed!r})")
        self.seed = int(seed)
        self.batch_size = check_positive_int(plain(batch_size), "batch_size")
        self.eval_batch_size = (self.batch_size if eval_batch_size is None
                                else check_positive_int(plain(eval_batch_size),
                                                        "eval_batch_size"))
        self.num_workers = check_int(plain(num_workers), "num_workers", ge=0)
        self.predict_split = check_choice(predict_split, "predict_split",
                                          ("future", "test", "val"))
        if future_data is not None and not isinstance(future_data,
                                                      (str, os.PathLike, pd.DataFrame)):
            raise TypeError(f"future_data must be a path or a pandas DataFrame, got "
                            f"{type(future_data).__name__}")
        self.future_data = future_data
        self.datasets: dict[str, WindowDataset] = {}
        self._datasets_panel: Panel | None = None  # the panel self.datasets window
        self._panel: Panel | None = None  # this data's own fit
        self._fitted: SeriesSchema | None = None  # a trained model's state (use_fitted)
        self._model_panel: tuple[SeriesSchema, Panel] | None = None  # read with it

    @staticmethod
    def _split_argument(value: Any, name: str) -> pd.Timestamp | None:
        """``val_start``/``test_start`` -> a Timestamp (zone applied later), checked now."""
        if value is None:
            return None
        if isinstance(value, (dt.datetime, np.datetime64)):
            stamp = pd.Timestamp(value)
        elif isinstance(value, str):
            if value.strip().lower() in _RELATIVE:
                raise ValueError(f"{name}={value!r} is relative to the day it runs; give a "
                                 "fixed time such as '2021-06-01'")
            try:
                stamp = pd.Timestamp(value)
            except (ValueError, TypeError, OverflowError) as err:
                raise ValueError(f"{name}={value!r} cannot be parsed as a timestamp (expected "
                                 "e.g. '2021-06-01 00:00')") from err
        else:
            raise TypeError(f"{name} must be a timestamp string or datetime, got "
                            f"{type(value).__name__} ({value!r})")
        if pd.isna(stamp):
            raise ValueError(f"{name}={value!r} cannot be parsed as a timestamp (it is NaT)")
        return stamp

    def _given(self, name: str) -> Any:
        """An argument as the user wrote it (for messages), else as parsed."""
        return self.hparams.get(name, getattr(self, name, None))

    @property
    def num_targets(self) -> int:
        """Target channels ``C``."""
        return len(self.target_columns)

    # -- loading ---------------------------------------------------------------------------
    def load_frame(self) -> pd.DataFrame:
        """The raw table (override in subclasses for built-in data)."""
        data = self.data
        if isinstance(data, pd.DataFrame):
            return data
        if data is None:
            raise ValueError(f"{type(self).__name__} needs data: a .csv/.parquet path or a "
                             "pandas DataFrame")
        return read_table(data)

    def _source(self) -> str | None:
        return os.fspath(self.data) if isinstance(self.data, (str, os.PathLike)) else None

    def _describe_data(self) -> str:
        source = self._source()
        if source is not None:
            return f"data={source!r}"
        return "data (a DataFrame)" if isinstance(self.data, pd.DataFrame) else type(self).__name__

    def _schema(self) -> SeriesSchema:
        return SeriesSchema(
            timestamp_column=self.timestamp_column, target_columns=list(self.target_columns),
            series_columns=list(self.series_columns),
            past_covariates=list(self.past_covariates),
            future_covariates=list(self.future_covariates),
            static_columns=list(self.static_columns), tz=self.tz, ambiguous=self.ambiguous,
            nonexistent=self.nonexistent, timestamp_format=self.timestamp_format,
            context_length=self._given("context_length"), horizon=self._given("horizon"))

    def use_fitted(self, schema: SeriesSchema | None) -> None:
        """Read the table with a trained model's fitted state from now on (``schema``, what
        the model keeps); None: with this data's own (fitted on its training period). The
        model hands it over (``Forecaster.setup`` and its checkpoint restore): the data never
        reads the model. Raises ``ValueError`` for a state of other channels or static
        columns than this data's
        (:meth:`~posenc.tasks.forecasting.panel.SeriesSchema.with_fitted`)."""
        if schema is not None and not isinstance(schema, SeriesSchema):
            raise TypeError(f"schema must be a SeriesSchema or None, got "
                            f"{type(schema).__name__}")
        if schema is not None:
            self._schema().with_fitted(schema)  # a state these columns cannot take: refused now
        self._fitted = schema

    def panel(self) -> Panel:
        """The checked, sorted and scaled table (read once; see
        :mod:`posenc.tasks.forecasting.panel`).

        The model sizes the CLI links (:attr:`static_cardinalities`, ...) need it, so it is
        read when first asked for, before ``setup``. With a trained model's fitted state
        (:meth:`use_fitted`, other than this data's own), the table is read with it instead
        (:meth:`~posenc.tasks.forecasting.panel.SeriesSchema.with_fitted`)."""
        fitted = self._fitted
        if fitted is None or (self._panel is not None and fitted is self._panel.schema):
            if self._panel is None:
                self._panel = self._read_panel(None)
            return self._panel
        if self._model_panel is None or self._model_panel[0] is not fitted:
            self._model_panel = (fitted, self._read_panel(fitted))
        return self._model_panel[1]

    def _read_panel(self, fitted: SeriesSchema | None) -> Panel:
        """The table read and scaled: fitting its own state (``fitted`` None), or with a
        trained model's. There, as ``forecast()`` treats a new series, a series new to the
        model is scaled on its own training span here and ages from its first row here; a
        category new to it gets code 0."""
        frame = self.load_frame()
        check_unique_columns(list(frame.columns), self._describe_data())
        if not len(frame):
            raise ValueError(f"{self._describe_data()} has no rows (columns "
                             f"{[str(c) for c in frame.columns]})")
        schema = self._schema() if fitted is None else self._schema().with_fitted(fitted)
        panel = read_panel(frame, schema, self._source(), fit=fitted is None)
        if self.irregular is not None and self.irregular < 1:
            keep = np.random.default_rng(self.seed).random(len(panel.utc)) < self.irregular
            panel = _keep_rows(panel, keep)
        if len(panel.utc) < 2:
            raise ValueError(f"the series in {self._describe_data()} has {len(panel.utc)} "
                             "observation(s); forecasting needs many more")
        if fitted is None:
            # The step of the local clock: monthly data in a DST zone is 30 days 23 h apart
            # in UTC at the median, which is no calendar step (and no yearly season).
            within = np.diff(panel.local)[np.diff(panel.series_of_rows()) == 0]
            schema.step_ns = int(np.median(within)) if len(within) else 0
        # Each series' first observation, for forecasts from a shorter history (its age); a
        # trained model's starts stay where they are earlier.
        schema.series_start = panel.series_starts(
            None if fitted is None else fitted.series_start).tolist()
        t_val, t_test = self._split_times(panel.utc, schema.aware)
        scale_panel(panel, t_val, self._source())  # keeps a trained model's scaling
        self.split_times = {"val": t_val, "test": t_test}
        return panel

    @property
    def schema(self) -> SeriesSchema:
        """How the table was read and scaled (what a trained model stores); for a trained
        model's Trainer, this description with the model's fitted state."""
        return self.panel().schema

    @property
    def series_keys(self) -> list[tuple]:
        """One key per series (its values of ``series_column``; ``[()]`` for one series)."""
        return self.schema.series_keys

    def model_sizes(self) -> dict[str, Any]:
        """The :data:`MODEL_SIZES` of this data, as ``Forecaster`` arguments:
        ``Forecaster(**dm.model_sizes(), dim=64, ...)``."""
        return {name: getattr(self, name) for name in MODEL_SIZES}

    @property
    def num_series(self) -> int:
        return len(self.series_keys)

    @property
    def num_past_covariates(self) -> int:
        return len(self.past_covariates)

    @property
    def num_future_covariates(self) -> int:
        return len(self.future_covariates)

    @property
    def static_cardinalities(self) -> list[int]:
        """Codes per categorical static column (its training values + 1 for unknown)."""
        schema = self.schema
        return [len(schema.static_categories[c]) + 1 for c in schema.static_cat_columns]

    @property
    def num_static_real(self) -> int:
        return len(self.schema.static_real_columns)

    @property
    def loc(self) -> np.ndarray:
        """``(S, C)`` per-series target means of the training span (``(C,)`` for one
        series)."""
        loc = np.asarray(self.schema.loc, np.float32)[:, :self.num_targets]
        return loc[0] if not self.series_columns else loc

    @property
    def scale(self) -> np.ndarray:
        """``(S, C)`` per-series target standard deviations (``(C,)`` for one series)."""
        scale = np.asarray(self.schema.scale, np.float32)[:, :self.num_targets]
        return scale[0] if not self.series_columns else scale

    @property
    def naive_season(self) -> str:
        """The seasonal-naive season, a duration: ``season`` if given (a count is in median
        sampling steps; ``"persistence"``: 1 ns, which makes the baseline the last observed
        value), else :func:`~posenc.tasks.forecasting.metrics.season_for_step` of the step."""
        from .metrics import season_for_step

        step = pd.Timedelta(self.schema.step_ns)
        if self.season == PERSISTENCE:
            # The value at or before origin + 1 ns - k ns for the smallest k that reaches the
            # origin: the last observed value, exactly.
            season = pd.Timedelta(1, "ns")
        elif self.season is None:
            season = season_for_step(step)
        elif isinstance(self.season, pd.Timedelta):
            season = self.season
        else:
            season = step * self.season
        return str(season)

    @property
    def mase_season(self) -> int:
        """The season in median sampling steps (the MASE denominator's lag), at least 1."""
        step = max(self.schema.step_ns, 1)
        return max(1, round(pd.Timedelta(self.naive_season).value / step))

    def _split_times(self, utc: np.ndarray, aware: bool) -> tuple[int, int]:
        """One ``(val_start, test_start)`` in UTC ns for every series: the split is by time."""
        start, end = int(utc.min()), int(utc.max())

        def explicit(stamp: pd.Timestamp, name: str) -> int:
            given = self._given(name)
            if stamp.tzinfo is None:
                if aware and self.tz is None:
                    raise ValueError(f"{name}={given!r} has no UTC offset but the timestamps "
                                     "are tz-aware: add an offset, or set tz to read it in")
                if self.tz is not None:
                    # The timestamps' own path (posenc.temporal.localize, exact DST shifts);
                    # one split time cannot be inferred from an order.
                    ambiguous = "raise" if self.ambiguous == "infer" else self.ambiguous
                    try:
                        utc, _ = utc_and_local(pd.DatetimeIndex([stamp]), self.tz, ambiguous,
                                               self.nonexistent, name)
                    except ValueError as err:
                        raise ValueError(f"{name}={given!r} is not a single local time in "
                                         f"tz={self.tz!r}: {err}") from err
                    return int(utc[0])
            elif not aware and self.tz is None:
                raise ValueError(f"{name}={given!r} has a UTC offset but the timestamps are "
                                 "tz-naive (their own clock): drop the offset, or set tz")
            try:
                return int(stamp.as_unit("ns").value)
            except (ValueError, OverflowError) as err:
                raise ValueError(f"{name}={given!r} is outside the nanosecond range") from err

        span = end - start
        t_val = (explicit(self.val_start, "val_start") if self.val_start is not None
                 else start + int(span * (1 - self.val_fraction - self.test_fraction)))
        t_test = (explicit(self.test_start, "test_start") if self.test_start is not None
                  else start + int(span * (1 - self.test_fraction)))
        if not start < t_val < t_test <= end:
            raise ValueError(f"split times must satisfy first timestamp < val_start < "
                             f"test_start <= last timestamp, got val_start="
                             f"{pd.Timestamp(t_val)}, test_start={pd.Timestamp(t_test)} for "
                             f"data from {pd.Timestamp(start)} to {pd.Timestamp(end)} (UTC)")
        return t_val, t_test

    def _check_cost(self, panel: Panel, bounds: dict[str, tuple[int, int]]) -> None:
        """Time mode: refuse strides and lengths whose windows would not fit, before the work."""
        lengths = self._window_lengths()
        origins = sum(int(time_origins(panel.starts, panel.utc, lo, hi, *lengths)[1].sum())
                      for lo, hi in bounds.values())
        if origins > MAX_ORIGINS_PER_ROW * len(panel.utc):
            spacing = pd.Timedelta(panel.schema.step_ns)
            raise ValueError(
                f"stride={self._given('stride') or self._given('horizon')!r} places about "
                f"{origins:.2g} forecast origins in data of {len(panel.utc)} observations (more "
                f"than MAX_ORIGINS_PER_ROW={MAX_ORIGINS_PER_ROW} per observation): windows "
                f"would repeat the same rows; use a stride of at least the sampling interval "
                f"(median {spacing} here)")

    def _window_lengths(self) -> tuple[int, int, int]:
        """``(context, horizon, stride)``: rows in count mode, nanoseconds in time mode."""
        lengths = (self.context_length, self.horizon, self.stride)
        return tuple(int(v.value) for v in lengths) if self.by_time else lengths

    def split_bounds(self) -> dict[str, tuple[int, int]]:
        """Each split's ``[lo, hi)`` in UTC ns: a window belongs to the split that holds its
        whole horizon."""
        utc = self.panel().utc
        t_val, t_test = self.split_times["val"], self.split_times["test"]
        return {"train": (int(utc.min()), t_val), "val": (t_val, t_test),
                "test": (t_test, int(utc.max()) + 1)}

    def windows(self, split: str) -> WindowIndex:
        """The lazy index of one split's windows (``train``, ``val`` or ``test``).

        Raises ``ValueError`` before building anything for a stride that places more than
        :data:`MAX_ORIGINS_PER_ROW` origins per observation, and for windows of more than
        :data:`MAX_WINDOW_ROWS` rows (durations; counts are checked when given)."""
        check_choice(split, "split", ("train", "val", "test"))
        panel = self.panel()
        bounds = self.split_bounds()
        lo, hi = bounds[split]
        if not self.by_time:
            return count_windows(panel.starts, panel.utc, lo, hi, *self._window_lengths())
        # Here, not in setup: every caller of windows() must be refused before the work.
        self._check_cost(panel, bounds)
        windows = duration_windows(panel.starts, panel.utc, lo, hi, *self._window_lengths())
        if len(windows):
            rows = int((windows.rows[:, 2] - windows.rows[:, 0]).max())
            if rows > MAX_WINDOW_ROWS:
                raise ValueError(
                    f"context_length={self._given('context_length')!r} and horizon="
                    f"{self._given('horizon')!r} make windows of up to {rows} rows in the "
                    f"{split} split, above the limit of MAX_WINDOW_ROWS={MAX_WINDOW_ROWS}")
        return windows

    def setup(self, stage: str | None = None) -> None:
        self._build_datasets()

    def _build_datasets(self) -> None:
        """Each split's :class:`WindowDataset` over :meth:`panel` (kept while it is the
        same panel)."""
        panel = self.panel()
        if self.datasets and self._datasets_panel is panel:
            return
        series_start = np.asarray(panel.schema.series_start, np.int64)
        datasets = {}
        for split, (lo, hi) in self.split_bounds().items():
            windows = self.windows(split)
            if not len(windows):
                raise ValueError(self._no_window(split, panel, lo, hi))
            datasets[split] = WindowDataset(panel, windows, series_start)
        self.datasets, self._datasets_panel = datasets, panel

    def _no_window(self, split: str, panel: Panel, lo: int, hi: int) -> str:
        utc = panel.utc
        count = int(((utc >= lo) & (utc < hi)).sum())
        what = "series" if panel.num_series == 1 else f"{panel.num_series} series"
        message = (f"the {split} split ({pd.Timestamp(lo)} to {pd.Timestamp(hi)} UTC, {count} "
                   f"observations in {what}) fits no window of context_length="
                   f"{self._given('context_length')!r} and horizon={self._given('horizon')!r}")
        spacing = pd.Timedelta(panel.schema.step_ns)
        if self.by_time and min(self.context_length, self.horizon) < spacing:
            return (message + f": a window needs an observation in its context and in its "
                    f"horizon, and these durations are shorter than the median sampling "
                    f"interval {spacing}; lengthen them")
        return message + ": the series is too short for these windows; shorten them or move " \
            "the split"

    # -- loaders ---------------------------------------------------------------------------
    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        if split not in self.datasets:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before asking for "
                               "data loaders")
        # Lightning restores a checkpoint (the model's state, handed over) after setup:
        # window with it.
        self._build_datasets()
        return DataLoader(self.datasets[split],
                          batch_size=self.batch_size if shuffle else self.eval_batch_size,
                          shuffle=shuffle, collate_fn=batched,
                          num_workers=self.num_workers, persistent_workers=self.num_workers > 0)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)

    def predict_dataloader(self) -> DataLoader:
        if self.predict_split != "future":
            return self._loader(self.predict_split, False)
        # A trained model's state (its training scaling and series) reads the history.
        schema = self._fitted if self._fitted is not None else self.schema
        future = self.future_data
        if isinstance(future, (str, os.PathLike)):
            future = read_table(future)
        dataset = request_dataset(schema, self.load_frame(), future,
                                  future_name="--data.future_data",
                                  future_form="a CSV/Parquet file or DataFrame")
        return DataLoader(dataset, batch_size=self.eval_batch_size, shuffle=False,
                          collate_fn=batched, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)
