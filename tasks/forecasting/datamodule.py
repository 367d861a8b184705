"""``TimeSeriesDataModule``: a long table (CSV, Parquet, DataFrame) or a Parquet dataset ->
each split's forecast windows.

A table is read ([`read_panel`][posenc.tasks.forecasting.panel.read_panel]) with its own
[`Fitted`][posenc.tasks.Fitted] state, fitted on its training span
([`fit`][posenc.tasks.forecasting.panel.fit]), or a trained model's. Splits
are by time: a window belongs to the split that holds its whole horizon. A Parquet dataset
(a directory, glob or URL) is read lazily
([`posenc.tasks.forecasting.stream`][posenc.tasks.forecasting.stream]).
"""

from __future__ import annotations

import datetime as dt
import os
from numbers import Real
from typing import Any

import numpy as np
import pandas as pd
from lightning.pytorch import LightningDataModule
from posenc.core._checks import check_bool, check_choice, check_int, check_positive_int
from posenc.temporal.timestamps import utc_and_local
from torch.utils.data import DataLoader

from ..config import check_split_fractions, make_hparams_plain, plain
from ..distributed import distributed_rank
from .metrics import SeasonalError, natural_seasons, seasonality_for_step
from .output import request_dataset
from .panel import Panel, fit, read_panel, read_table, release_arrow_memory, scale_panel
from .schema import (
    MAX_WINDOW_ROWS,
    Columns,
    Fitted,
    check_unique_columns,
    check_window_rows,
    parse_length,
)
from .stream import CHUNK_ROWS, DatasetPanel, DatasetWindows, is_dataset
from .windows import (
    WindowDataset,
    WindowIndex,
    batched,
    count_windows,
    duration_windows,
    time_origins,
)

__all__ = ["MAX_ORIGINS_PER_ROW", "MODEL_SIZES", "PERSISTENCE",
           "TimeSeriesDataModule"]

# season= value whose baseline is the last observed value (the naive forecast).
PERSISTENCE = "persistence"
# Data module properties a Forecaster takes as arguments of the same names (dm.model_sizes()).
MODEL_SIZES = ("num_targets", "num_past_covariates", "num_future_covariates",
               "static_cardinalities", "num_static_real", "naive_seasons")
# More forecast origins per observation than this (a stride below the sampling) are refused.
MAX_ORIGINS_PER_ROW = 10
_RELATIVE = ("now", "today", "yesterday", "tomorrow")


class TimeSeriesDataModule(LightningDataModule):
    """Sliding-window forecasting data from a CSV/Parquet file or a DataFrame.

    Args:
        data: path (stored as text) to a ``.csv`` / ``.parquet`` file, or a ``DataFrame``,
            read in memory; or a Parquet dataset read lazily, each DDP rank and loader worker
            its own chunks ([`stream`][posenc.tasks.forecasting.stream]): a directory, a glob
            (``"panel/*.parquet"``) or an fsspec URL (``"s3://bucket/panel/"``).
        timestamp_column: the timestamps (text or datetime; naive or with a UTC offset, one
            form for the column). The same instant twice within a series is an error.
        target_columns: numeric column(s) to forecast, one channel each; NaN = missing. A
            channel constant over the training period gets ``scale`` 1.
        series_column: column(s) naming the series of a long-format panel; None: one series.
            Windows never cross series; series may start and end apart, have gaps and be
            irregular.
        past_covariates: numeric (or bool) columns known up to the forecast origin (a measured
            temperature), seen in the context; NaN = missing.
        future_covariates: numeric (or bool) columns known at the times to predict too (a
            workday flag, a temperature forecast); a missing value is an error.
        static_columns: one value per series: text, categorical or bool columns are categories
            (embedded), numbers are standardized across series.
        tz: IANA time zone. Naive timestamps are local times there (localized with
            ``ambiguous``/``nonexistent``, in wall-clock order); aware ones are converted to
            it. Calendar features use local time; elapsed time is always real (UTC) time.
        ambiguous: repeated local hour at a DST fall-back: ``raise``, ``earliest`` (the DST
            reading), ``latest`` (standard time) or ``infer`` (from the order).
        nonexistent: skipped local hour at a DST spring-forward: ``raise``,
            ``shift_forward`` or ``shift_backward``.
        context_length: context per window: observations (int) or a duration with a unit
            (``"7D"``, a ``timedelta``); a bare number such as ``"168"`` or ``168.0`` is refused.
        horizon: predicted span per window: observations (int) or a duration (``"24h"``).
        stride: distance between forecast origins of the validation and test backtests, same
            kind as the lengths (default: ``horizon``). Durations may place at most
            ``MAX_ORIGINS_PER_ROW`` origins per observation; a window holds at most
            ``MAX_WINDOW_ROWS`` rows.
        train_stride: distance between training origins, same kind as the lengths. None:
            dense, one per observation (counts) or per median sampling step (durations);
            bound an epoch with the trainer's ``limit_train_batches`` where that is too many.
        val_fraction: the last fraction of the time span held out for validation (ignored
            where ``val_start`` is given).
        test_fraction: the last fraction for test (ignored where ``test_start`` is given).
        val_start: an explicit split time (text or ``datetime``) in the form of the
            timestamps: naive for naive data (read in ``tz`` where given), with a UTC offset
            for aware data (naive ones are accepted there only with ``tz``).
        test_start: the same for the test split.
        train_on_val: train on the validation span too: the fitted state and the training
            windows reach ``test_start``, and there are no validation windows (run the
            trainer with ``limit_val_batches=0``); ``posenc fit --refit_epochs N`` sets it.
        season: the seasons of the seasonal-naive baselines, one or a list: a fixed duration
            (``"7D"``; calendar months such as ``"12MS"`` are refused: give 12 for monthly
            data), a count of median sampling steps or ``"persistence"`` (the last observed
            value); None: every natural season of the step that fits in the context
            ([`natural_seasons`][posenc.tasks.forecasting.metrics.natural_seasons]). Each is logged
            as its own baseline (``test/mae_naive_7d``).
        mase_season: the seasonal period ``m`` (observations) of MASE's and RMSSE's
            denominators; None: GluonTS's for the step
            ([`seasonality_for_step`][posenc.tasks.forecasting.metrics.seasonality_for_step]: 24 for
            hourly).
        irregular: keep a random fraction of observations (seeded); None keeps all.
        seed: seed of ``irregular``.
        batch_size: training windows per batch.
        eval_batch_size: windows per validation, test and predict batch.
        num_workers: loader worker processes (with a Parquet dataset they also read the
            chunks of the set-up's fitting pass).
        timestamp_format: ``pd.to_datetime`` format of text timestamps (``"%d/%m/%Y %H:%M"``,
            ``"ISO8601"``, ``"mixed"``). None: the format of the first row, which every row
            must match.
        predict_split: what ``predict`` forecasts: ``future`` (default): the times after each
            series' end, the whole table as history; ``test`` or ``val``: that split's
            rolling windows (backtests).
        future_data: with ``predict_split="future"``, the times to predict: a CSV/Parquet path
            or DataFrame of the series and timestamp columns and the future covariates; None:
            the trained horizon after each series' last observation.
        chunk_rows: with a Parquet dataset, the rows read at once (whole series): a process
            holds about two such chunks, or the longest series twice.
        fitted: a trained model's [`Fitted`][posenc.tasks.Fitted] state
            (``model.fitted``), or the path of its checkpoint: the table is read with it
            (its scaling, series, vocabularies and step; series new to it are scaled on their
            own training rows), which is never changed. None: the table's own state, fitted on
            its training span, which a ``Forecaster`` takes at its first fit. A trained model
            refuses data read with a state of its own; ``posenc validate/test/predict/export
            --ckpt_path`` gives the checkpoint here.
    """

    def __init__(
        self, data: str | os.PathLike | Any = None, timestamp_column: str = "timestamp",
        target_columns: str | list[str] = "value", series_column: str | list[str] | None = None,
        past_covariates: list[str] | None = None, future_covariates: list[str] | None = None,
        static_columns: list[str] | None = None, tz: str | None = None,
        ambiguous: str = "raise", nonexistent: str = "raise",
        context_length: int | str = 168, horizon: int | str = 24,
        stride: int | str | None = None, train_stride: int | str | None = None,
        val_fraction: float = 0.15, test_fraction: float = 0.15,
        val_start: str | None = None, test_start: str | None = None, train_on_val: bool = False,
        season: int | str | list[int | str] | None = None, mase_season: int | None = None,
        irregular: float | None = None, seed: int = 0, batch_size: int = 64,
        eval_batch_size: int | None = None, num_workers: int = 0,
        timestamp_format: str | None = None, predict_split: str = "future",
        future_data: str | os.PathLike | Any = None, chunk_rows: int = CHUNK_ROWS,
        fitted: Fitted | str | os.PathLike | None = None,
    ) -> None:
        super().__init__()
        # A DataFrame or a Fitted state is data, not a hyperparameter: kept out of the
        # checkpoint (a checkpoint path stays, as text).
        frames = [name for name, value in (("data", data), ("future_data", future_data),
                                           ("fitted", fitted))
                  if not isinstance(value, (str, os.PathLike, type(None)))]
        self.save_hyperparameters(ignore=frames)
        # Builtins only: a checkpoint must load with torch.load(weights_only=True).
        make_hparams_plain(self.hparams)
        self.data = data
        self.columns = Columns(timestamp_column, target_columns, series_column, past_covariates,
                               future_covariates, static_columns, tz, ambiguous, nonexistent,
                               timestamp_format)
        self.context_length = parse_length(context_length, "context_length")
        self.horizon = parse_length(horizon, "horizon")
        self.stride = self.horizon if stride is None else parse_length(stride, "stride")
        self.train_stride = None if train_stride is None else parse_length(train_stride,
                                                                           "train_stride")
        kinds = {type(v) for v in (self.context_length, self.horizon, self.stride,
                                   self.train_stride) if v is not None}
        if len(kinds) != 1:
            raise ValueError(
                f"context_length={context_length!r}, horizon={horizon!r}, stride={stride!r} "
                f"and train_stride={train_stride!r} must all be observation counts (int) or "
                "all durations (str)")
        self.by_time = kinds == {pd.Timedelta}
        check_window_rows(self.context_length, self.horizon)
        self.val_fraction, self.test_fraction = check_split_fractions(val_fraction, test_fraction)
        self.val_start = self._split_argument(val_start, "val_start")
        self.test_start = self._split_argument(test_start, "test_start")
        self.train_on_val = check_bool(train_on_val, "train_on_val")
        if irregular is not None and (isinstance(irregular, (bool, np.bool_)) or not (
                isinstance(irregular, Real) and 0 < irregular <= 1)):  # NaN fails this too
            raise ValueError(f"irregular is the fraction of observations kept, in (0, 1], got "
                             f"{irregular!r}")
        self.irregular = irregular
        many = isinstance(season, (list, tuple))
        if many and not season:
            raise ValueError("season must be a season, a list of seasons or None, got []")
        parsed = [s if s in (None, PERSISTENCE) else parse_length(s, "season")
                  for s in (season if many else [season])]
        self.season = parsed if many else parsed[0]
        self._mase_season = None if mase_season is None else check_positive_int(
            plain(mase_season), "mase_season")
        self.seed = check_int(plain(seed), "seed")
        self.batch_size = check_positive_int(plain(batch_size), "batch_size")
        self.eval_batch_size = (self.batch_size if eval_batch_size is None
                                else check_positive_int(plain(eval_batch_size), "eval_batch_size"))
        self.num_workers = check_int(plain(num_workers), "num_workers", ge=0)
        self.predict_split = check_choice(predict_split, "predict_split", ("future", "test", "val"))
        if self.train_on_val and self.predict_split == "val":
            raise ValueError("predict_split='val' needs validation windows, but train_on_val=True "
                             "trains on them")
        if future_data is not None and not isinstance(future_data, (str, os.PathLike,
                                                                    pd.DataFrame)):
            raise TypeError(f"future_data must be a path or a pandas DataFrame, got "
                            f"{type(future_data).__name__}")
        self.future_data = future_data
        self.chunk_rows = check_positive_int(plain(chunk_rows), "chunk_rows")
        if self.irregular is not None and self.irregular < 1 and is_dataset(data):
            raise ValueError("irregular thins a table read in memory; a Parquet dataset is "
                             "read lazily: leave irregular=None (thin the files instead)")
        if isinstance(fitted, (str, os.PathLike)):
            fitted = Fitted.from_checkpoint(fitted, "fitted")
        elif not isinstance(fitted, (Fitted, type(None))):
            raise TypeError(f"fitted must be a Fitted state (model.fitted), the path of a "
                            f"checkpoint holding one, or None, got {type(fitted).__name__}")
        if fitted is not None:
            self.columns.check_fitted(fitted)
        self._known = fitted  # a trained model's state, or None: the table's own
        self._read: tuple[Panel | DatasetPanel, Fitted] | None = None  # read once
        self.datasets: dict[str, WindowDataset | DatasetWindows] = {}
        self._datasets_rank: tuple[int, int] | None = None  # (rank, world) they were dealt to

    @staticmethod
    def _split_argument(value: Any, name: str) -> pd.Timestamp | None:
        """``val_start``/``test_start`` -> a Timestamp (zone applied later)."""
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
    def streaming(self) -> bool:
        """Whether ``data`` is a Parquet dataset read lazily (a directory, glob or URL)."""
        return is_dataset(self.data)

    def load_frame(self) -> pd.DataFrame:
        """The raw table (a preset overrides it)."""
        if self.streaming:
            raise ValueError(f"{self._describe_data()} is a Parquet dataset, read lazily in "
                             "chunks: it is never one table in memory")
        if isinstance(self.data, pd.DataFrame):
            return self.data
        if self.data is None:
            raise ValueError(f"{type(self).__name__} needs data: a .csv/.parquet path or a "
                             "pandas DataFrame")
        return read_table(self.data)

    def _source(self) -> str | None:
        return os.fspath(self.data) if isinstance(self.data, (str, os.PathLike)) else None

    def _describe_data(self) -> str:
        if (source := self._source()) is not None:
            return f"data={source!r}"
        return "data (a DataFrame)" if isinstance(self.data, pd.DataFrame) else type(self).__name__

    # -- the fitted state ------------------------------------------------------------------
    def _reading(self) -> tuple[Panel | DatasetPanel, Fitted]:
        """The scaled panel (or the Parquet dataset) and the state it is read with, read when
        first asked for."""
        if self._read is None:
            self._read = self._read_table(self._known)
        return self._read

    def _read_dataset(self, known: Fitted | None) -> tuple[DatasetPanel, Fitted]:
        """`_read_table` of a Parquet dataset: a scan of the series and time columns,
        then one pass over the chunks for the state (DDP ranks share both)."""
        rank, world = self._rank()
        dataset = DatasetPanel.scan(self.data, self.columns, known, self.chunk_rows, rank, world)
        if known is not None and dataset.aware != known.aware and self.columns.tz is None:
            kinds = ["tz-naive", "tz-aware"]
            raise ValueError(f"timestamp column {self.columns.timestamp_column!r} is "
                             f"{kinds[dataset.aware]} but the model was trained on "
                             f"{kinds[known.aware]} timestamps; use one form")
        t_val, t_test = self._split_times(np.array(dataset.span),
                                          dataset.aware if known is None else known.aware)
        fitted = dataset.fit(t_test if self.train_on_val else t_val, (t_val, t_test), known,
                             context_length=self._given("context_length"),
                             horizon=self._given("horizon"), workers=self.num_workers,
                             rank=rank, world_size=world)
        self.split_times = {"val": t_val, "test": t_test}
        return dataset, fitted

    def _read_table(self, known: Fitted | None) -> tuple[Panel, Fitted]:
        if self.streaming:
            return self._read_dataset(known)
        frame = self.load_frame()
        check_unique_columns(list(frame.columns), self._describe_data())
        if not len(frame):
            raise ValueError(f"{self._describe_data()} has no rows (columns "
                             f"{[str(c) for c in frame.columns]})")
        panel = read_panel(frame, self.columns, known, self._source())
        if self._source() is not None:  # a file's table, not needed past here
            del frame
            release_arrow_memory()
        if self.irregular is not None and self.irregular < 1:
            panel = panel.keep_rows(np.random.default_rng(self.seed).random(len(panel.utc))
                                    < self.irregular)
        if len(panel.utc) < 2:
            raise ValueError(f"the series in {self._describe_data()} has {len(panel.utc)} "
                             "observation(s); forecasting needs many more")
        t_val, t_test = self._split_times(panel.utc, panel.zone is not None if known is None
                                          else known.aware)
        # The state of the training span: through the validation span with train_on_val.
        fitted = fit(panel, self.columns, t_test if self.train_on_val else t_val, known,
                     context_length=self._given("context_length"), horizon=self._given("horizon"))
        self.split_times = {"val": t_val, "test": t_test}
        return scale_panel(panel, fitted, self._source()), fitted

    def panel(self) -> Panel:
        """The checked, sorted and scaled table, read when first asked for (the model sizes
        need it before ``setup``), with [`fitted`][posenc.tasks.TimeSeriesDataModule.fitted];
        ``TypeError`` for a Parquet dataset."""
        if self.streaming:
            raise TypeError(f"{self._describe_data()} is a Parquet dataset read lazily: there "
                            "is no in-memory panel; its batches come from "
                            "dm.datasets[split] after setup()")
        return self._reading()[0]

    @property
    def fitted(self) -> Fitted:
        """The state the table is read with: its own (fitted on its training period), or the
        trained model's it was given (``fitted=``) extended by the series new to it."""
        return self._reading()[1]

    @property
    def series_keys(self) -> list[tuple]:
        """One key per series (its values of ``series_column``; ``[()]`` for one series)."""
        return list(self.fitted.series_keys)

    def model_sizes(self) -> dict[str, Any]:
        """The `MODEL_SIZES` of this data, as ``Forecaster`` arguments:
        ``Forecaster(**dm.model_sizes(), dim=64, ...)``."""
        return {name: getattr(self, name) for name in MODEL_SIZES}

    @property
    def num_targets(self) -> int:
        return len(self.columns.target_columns)

    @property
    def num_series(self) -> int:
        return len(self.series_keys)

    @property
    def num_past_covariates(self) -> int:
        return len(self.columns.past_covariates)

    @property
    def num_future_covariates(self) -> int:
        return len(self.columns.future_covariates)

    @property
    def static_cardinalities(self) -> list[int]:
        """Codes per categorical static column (its training values + 1 for unknown)."""
        fitted = self.fitted
        return [len(fitted.static_categories[c]) + 1 for c in fitted.static_cat_columns]

    @property
    def num_static_real(self) -> int:
        return len(self.fitted.static_real_columns)

    @property
    def loc(self) -> np.ndarray:
        """``(S, C)`` per-series target means of the training span (``(C,)`` for one series)."""
        loc = self.fitted.target_scaling()[0]
        return loc[0] if not self.columns.series_columns else loc

    @property
    def scale(self) -> np.ndarray:
        """``(S, C)`` per-series target standard deviations (``(C,)`` for one series)."""
        scale = self.fitted.target_scaling()[1]
        return scale[0] if not self.columns.series_columns else scale

    @property
    def naive_seasons(self) -> list[str]:
        """The seasonal-naive baselines' seasons, durations: ``season`` (a count is in median
        sampling steps; ``"persistence"``: 1 ns, making the baseline the last observed value),
        else [`natural_seasons`][posenc.tasks.forecasting.metrics.natural_seasons] of the step."""
        step = pd.Timedelta(self.fitted.step_ns)
        if self.season is None:
            context = self.context_length if self.by_time else step * self.context_length
            return [str(s) for s in natural_seasons(step, context)]
        return [str(pd.Timedelta(1, "ns") if s == PERSISTENCE else
                    s if isinstance(s, pd.Timedelta) else step * s)
                for s in (self.season if isinstance(self.season, list) else [self.season])]

    @property
    def mase_season(self) -> int:
        """MASE's seasonal period in observations: ``mase_season`` if given, else GluonTS's
        for the median step."""
        if self._mase_season is not None:
            return self._mase_season
        return seasonality_for_step(pd.Timedelta(max(self.fitted.step_ns, 1)))

    # -- splits and windows ----------------------------------------------------------------
    def _split_times(self, utc: np.ndarray, aware: bool) -> tuple[int, int]:
        """One ``(val_start, test_start)`` in UTC ns for every series: the split is by time."""
        start, end = int(utc.min()), int(utc.max())

        def explicit(stamp: pd.Timestamp, name: str) -> int:
            given = self._given(name)
            tz = self.columns.tz
            if stamp.tzinfo is None:
                if aware and tz is None:
                    raise ValueError(f"{name}={given!r} has no UTC offset but the timestamps "
                                     "are tz-aware: add an offset, or set tz to read it in")
                if tz is not None:  # as the timestamps (one time cannot be "infer"red)
                    ambiguous = self.columns.ambiguous
                    try:
                        utc, _ = utc_and_local(pd.DatetimeIndex([stamp]), tz,
                                               "raise" if ambiguous == "infer" else ambiguous,
                                               self.columns.nonexistent, name)
                    except ValueError as err:
                        raise ValueError(f"{name}={given!r} is not a single local time in "
                                         f"tz={tz!r}: {err}") from err
                    return int(utc[0])
            elif not aware and tz is None:
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

    def _window_lengths(self, split: str) -> tuple[int, int, int]:
        """``(context, horizon, stride)`` of a split's windows: rows in count mode, ns in time
        mode. Training strides by ``train_stride``, by default one row (counts) or the median
        sampling step (durations; ``stride`` for data without one)."""
        stride = self.stride
        if split == "train" and self.train_stride is not None:
            stride = self.train_stride
        elif split == "train" and not self.by_time:
            stride = 1
        elif split == "train" and self.fitted.step_ns > 0:
            stride = pd.Timedelta(self.fitted.step_ns)
        lengths = (self.context_length, self.horizon, stride)
        return tuple(int(v.value) for v in lengths) if self.by_time else lengths

    def split_bounds(self) -> dict[str, tuple[int, int]]:
        """Each split's ``[lo, hi)`` in UTC ns (with ``train_on_val``, no ``val`` split)."""
        first, last = (self._reading()[0].span if self.streaming else
                       (int(self.panel().utc.min()), int(self.panel().utc.max())))
        t_val, t_test = self.split_times["val"], self.split_times["test"]
        test = (t_test, last + 1)
        if self.train_on_val:
            return {"train": (first, t_test), "test": test}
        return {"train": (first, t_val), "val": (t_val, t_test), "test": test}

    def windows(self, split: str) -> WindowIndex:
        """The lazy index of one split's windows (``train``, ``val`` or ``test``); ``ValueError``
        beyond `MAX_ORIGINS_PER_ROW` or `MAX_WINDOW_ROWS`."""
        check_choice(split, "split", ("train", "val", "test"))
        if self.streaming:
            raise TypeError(f"{self._describe_data()} is a Parquet dataset: its windows are "
                            "made chunk by chunk (dm.datasets[split] after setup())")
        panel = self.panel()
        bounds = self.split_bounds()
        if split not in bounds:
            raise ValueError(f"split={split!r}: train_on_val=True trains on the validation "
                             "span, there are no validation windows")
        lo, hi = bounds[split]
        lengths = self._window_lengths(split)
        if not self.by_time:
            return count_windows(panel.starts, panel.utc, lo, hi, *lengths)
        # Here, not in setup: every caller of windows() must be refused before the work.
        origins = {s: int(time_origins(panel.starts, panel.utc, a, b,
                                       *self._window_lengths(s))[1].sum())
                   for s, (a, b) in bounds.items()}
        total = sum(origins.values())
        if total > MAX_ORIGINS_PER_ROW * len(panel.utc):
            most = max(origins, key=origins.get)  # the split whose stride to name
            name = "train_stride" if most == "train" else "stride"
            given = self._given(name) if most == "train" else (self._given("stride")
                                                                or self._given("horizon"))
            raise ValueError(
                f"{name}={given!r} places about {total:.2g} forecast origins in data of "
                f"{len(panel.utc)} observations, {origins[most]:.2g} of them in the {most} "
                f"split (more than MAX_ORIGINS_PER_ROW={MAX_ORIGINS_PER_ROW} per "
                f"observation): windows would repeat the same rows; use a {name} of at least "
                f"the sampling interval (median {pd.Timedelta(self.fitted.step_ns)} here)")
        windows = duration_windows(panel.starts, panel.utc, lo, hi, *lengths)
        if len(windows):
            rows = int((windows.rows[:, 2] - windows.rows[:, 0]).max())
            if rows > MAX_WINDOW_ROWS:
                raise ValueError(
                    f"context_length={self._given('context_length')!r} and horizon="
                    f"{self._given('horizon')!r} make windows of up to {rows} rows in the "
                    f"{split} split, above the limit of MAX_WINDOW_ROWS={MAX_WINDOW_ROWS}")
        return windows

    def setup(self, stage: str | None = None) -> None:
        """Read the table ([`fitted`][posenc.tasks.TimeSeriesDataModule.fitted]) and make each
        split's windows (``datasets``; a Parquet dataset's are dealt to this process's DDP rank,
        made again where it changed). Predicting the future (``predict_split="future"``) needs no
        split: the loader reads the whole table as history."""
        panel, fitted = self._reading()
        if stage == "predict" and self.predict_split == "future":
            return
        rank = self._rank() if self.streaming else None
        if self.datasets and self._datasets_rank == rank:
            return
        if self.streaming:
            self.datasets = self._dataset_windows(panel, fitted)
        else:
            # One seasonal-error table for the splits: they read the same panel.
            errors = SeasonalError(panel.targets, panel.starts, self.mase_season)
            self.datasets = {split: self._split_windows(panel, fitted, split, lo, hi, errors)
                             for split, (lo, hi) in self.split_bounds().items()}
        self._datasets_rank = rank

    def _split_windows(self, panel: Panel, fitted: Fitted, split: str, lo: int, hi: int,
                       seasonal_error: SeasonalError) -> WindowDataset:
        windows = self.windows(split)
        if not len(windows):
            raise ValueError(self._no_window(split, panel, lo, hi))
        return WindowDataset(panel, fitted, windows, seasonal_error=seasonal_error)

    def _rank(self) -> tuple[int, int]:
        """``(rank, world size)``: the trainer's, else torch.distributed's, else one."""
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            return int(trainer.global_rank), int(trainer.world_size)
        return distributed_rank()

    def _dataset_windows(self, dataset: DatasetPanel, fitted: Fitted
                         ) -> dict[str, DatasetWindows]:
        """Each split's [`DatasetWindows`][posenc.tasks.forecasting.stream.DatasetWindows] (planned
        from per-series counts)."""
        rank, world = self._rank()
        out = {}
        for split, (lo, hi) in self.split_bounds().items():
            windows = DatasetWindows(
                dataset, fitted, (lo, hi), self._window_lengths(split), self.by_time,
                self.batch_size if split == "train" else self.eval_batch_size,
                shuffle=split == "train", seed=self.seed, seasonality=self.mase_season,
                rank=rank, world_size=world)
            if not windows.num_windows:
                raise ValueError(self._no_window(split, dataset, lo, hi))
            rows = int(dataset.lengths.sum())
            if self.by_time and windows.num_windows > MAX_ORIGINS_PER_ROW * rows:
                name = "train_stride" if split == "train" else "stride"
                raise ValueError(f"{name}={self._given(name)!r} places {windows.num_windows} "
                                 f"forecast origins in the {split} split of {rows} observations "
                                 f"(more than MAX_ORIGINS_PER_ROW={MAX_ORIGINS_PER_ROW} per "
                                 "observation)")
            out[split] = windows
        return out

    def _no_window(self, split: str, panel: Panel | DatasetPanel, lo: int, hi: int) -> str:
        if isinstance(panel, Panel):
            count = int(((panel.utc >= lo) & (panel.utc < hi)).sum())
            num_series = panel.num_series
        else:
            count, num_series = panel.rows_in(lo, hi), len(panel.series_keys)
        what = "series" if num_series == 1 else f"{num_series} series"
        message = (f"the {split} split ({pd.Timestamp(lo)} to {pd.Timestamp(hi)} UTC, {count} "
                   f"observations in {what}) fits no window of context_length="
                   f"{self._given('context_length')!r} and horizon={self._given('horizon')!r}")
        spacing = pd.Timedelta(self.fitted.step_ns)
        if self.by_time and min(self.context_length, self.horizon) < spacing:
            return (message + ": a window needs an observation in its context and in its "
                    "horizon, and these durations are shorter than the median sampling "
                    f"interval {spacing}; lengthen them")
        return message + (": the series is too short for these windows; shorten them or move "
                          "the split")

    def _loader(self, dataset: Any, shuffle: bool = False) -> DataLoader:
        if self.streaming and isinstance(dataset, DatasetWindows):  # whole batches
            return DataLoader(dataset, batch_size=None, num_workers=self.num_workers,
                              persistent_workers=self.num_workers > 0)
        return DataLoader(dataset, batch_size=self.batch_size if shuffle else self.eval_batch_size,
                          shuffle=shuffle, collate_fn=batched, num_workers=self.num_workers,
                          persistent_workers=self.num_workers > 0)

    def _split_loader(self, split: str) -> DataLoader:
        if split == "val" and self.train_on_val:
            raise RuntimeError("train_on_val=True trains on the validation span: there are no "
                               "validation windows; run the trainer with limit_val_batches=0")
        if split not in self.datasets:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before asking for "
                               "data loaders")
        return self._loader(self.datasets[split], shuffle=split == "train")

    def train_dataloader(self) -> DataLoader:
        return self._split_loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._split_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._split_loader("test")

    def predict_dataloader(self) -> DataLoader:
        if self.predict_split != "future":
            return self._split_loader(self.predict_split)
        future = self.future_data
        if isinstance(future, (str, os.PathLike)):
            future = read_table(future)
        if self.streaming:  # one window per series after its end, chunk by chunk
            dataset, fitted = self._reading()
            rank, world = self._rank()
            return self._loader(DatasetWindows(
                dataset, fitted, None, self._window_lengths("test"), self.by_time,
                self.eval_batch_size, rank=rank, world_size=world, future=future))
        # A trained model's state (its scaling and series) reads the whole table as history.
        return self._loader(request_dataset(
            self.fitted if self._known is None else self._known, self.load_frame(), future,
            future_name="--data.future_data", future_form="a CSV/Parquet file or DataFrame"))
