"""Training windows: ``train_stride`` (dense by default) apart from the backtests' ``stride``,
and ``train_on_val`` (the refit on train + validation before the test backtest)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from posenc.tasks import TimeSeriesDataModule

from ..conftest import HOUR, setup_series, synthetic_series


def _origins(dm, split):
    """The first horizon timestamp (UTC ns) of every window of ``split``, in order."""
    ds = dm.datasets[split]
    return [int(ds[i]["target_time"][0]) for i in range(len(ds))]


def _expected_count_origins(stamps, lo, hi, context, horizon, stride):
    """Brute force: rows ``i`` with a full context before and the whole horizon
    ``stamps[i:i + horizon]`` in ``[lo, hi)``, every ``stride`` rows from the first."""
    rows = [i for i in range(context, len(stamps) - horizon + 1)
            if stamps[i] >= lo and stamps[i + horizon - 1] < hi]
    return [int(stamps[i]) for i in rows[::stride]]


@pytest.mark.parametrize("train_stride", [None, 1, 3])
def test_training_origins_are_dense_by_default_and_backtests_keep_their_stride(
        series, train_stride):
    dm = setup_series(series, stride=6, train_stride=train_stride)
    stamps = pd.DatetimeIndex(series["timestamp"]).as_unit("ns").asi8
    t_val, t_test = dm.split_times["val"], dm.split_times["test"]
    step = 1 if train_stride is None else train_stride
    train = _expected_count_origins(stamps, stamps[0], t_val, 24, 6, step)
    assert _origins(dm, "train") == train
    # Dense: every hour from the first full context (hour 24) to the last horizon in train.
    if step == 1:
        last = int(np.searchsorted(stamps, t_val)) - 6
        assert train == stamps[24:last + 1].tolist()
    assert _origins(dm, "val") == _expected_count_origins(stamps, t_val, t_test, 24, 6, 6)
    assert _origins(dm, "test") == _expected_count_origins(stamps, t_test, stamps[-1] + 1,
                                                            24, 6, 6)


def test_time_mode_trains_on_one_origin_per_median_step():
    frame = synthetic_series(300)
    dm = setup_series(frame, context_length="1D", horizon="6h", stride="6h")
    stamps = pd.DatetimeIndex(frame["timestamp"]).as_unit("ns").asi8
    t_val = dm.split_times["val"]
    # Hourly data: an origin every hour from the first full day while 6 h fit before t_val.
    expected = list(range(int(stamps[0]) + 24 * HOUR, t_val - 6 * HOUR + 1, HOUR))
    assert _origins(dm, "train") == expected
    val = _origins(dm, "val")
    assert np.diff(val).tolist() == [6 * HOUR] * (len(val) - 1)


def test_time_mode_train_stride_matches_a_brute_force_construction():
    frame = synthetic_series(200)
    frame = frame[np.random.default_rng(5).random(200) < 0.7].reset_index(drop=True)
    dm = setup_series(frame, context_length="10h", horizon="4h", stride="5h",
                      train_stride="2h")
    stamps = pd.DatetimeIndex(frame["timestamp"]).as_unit("ns").asi8
    expected, origin = [], stamps[0] + 10 * HOUR
    while origin + 4 * HOUR <= dm.split_times["val"]:
        ctx = stamps[(stamps >= origin - 10 * HOUR) & (stamps < origin)]
        tgt = stamps[(stamps >= origin) & (stamps < origin + 4 * HOUR)]
        if len(ctx) and len(tgt):
            expected.append(int(tgt[0]))
        origin += 2 * HOUR
    assert _origins(dm, "train") == expected


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"train_stride": "2h"}, ValueError, "train_stride='2h' must all be"),
    ({"train_stride": 0}, ValueError, "train_stride"),
    ({"train_stride": 2.5}, TypeError, "train_stride must be"),
    ({"train_stride": "12"}, ValueError, "train_stride='12' has no unit"),
    ({"train_on_val": "yes"}, TypeError, "train_on_val must be a bool"),
    ({"train_on_val": True, "predict_split": "val"}, ValueError, "predict_split='val'"),
])
def test_bad_training_arguments_are_refused(series, kwargs, error, match):
    with pytest.raises(error, match=match):
        TimeSeriesDataModule(series, context_length=24, horizon=6, **kwargs)


def test_a_train_stride_finer_than_the_sampling_is_refused_naming_it(series):
    dm = TimeSeriesDataModule(series, context_length="1D", horizon="6h", train_stride="1min")
    with pytest.raises(ValueError, match="train_stride='1min' places about .* train split"):
        dm.setup("fit")


def test_train_on_val_fits_the_state_and_the_windows_through_the_validation_span():
    frame = pd.concat([synthetic_series(300, seed=s).assign(site=name)
                       for s, name in enumerate(["a", "b"])], ignore_index=True)
    # Series b starts 40 hours later: its start and scaling are its own.
    frame = frame[~((frame["site"] == "b") & (frame.index < 340))].reset_index(drop=True)
    kwargs = {"series_column": "site", "context_length": 24, "horizon": 6, "stride": 6}
    base = setup_series(frame, **kwargs)
    dm = setup_series(frame, train_on_val=True, **kwargs)
    assert dm.split_times == base.split_times  # the same split times
    t_val, t_test = dm.split_times["val"], dm.split_times["test"]
    stamps = pd.DatetimeIndex(frame["timestamp"]).as_unit("ns").asi8
    seen = frame[stamps < t_test].groupby("site")["value"]
    np.testing.assert_allclose(dm.loc[:, 0], seen.mean().to_numpy(), rtol=1e-6)
    np.testing.assert_allclose(dm.scale[:, 0], seen.std(ddof=0).to_numpy(), rtol=1e-5)
    before_val = frame[stamps < t_val].groupby("site")["value"]
    np.testing.assert_allclose(base.loc[:, 0], before_val.mean().to_numpy(), rtol=1e-6)
    assert not np.allclose(dm.scale, base.scale, rtol=1e-4)  # the spans differ
    starts = frame.groupby("site")["timestamp"].min()
    assert list(dm.fitted.series_start) == pd.DatetimeIndex(starts).as_unit("ns").asi8.tolist()
    # Training horizons reach test_start; the test windows are the plain run's.
    ds = dm.datasets["train"]
    ends = [int(ds[i]["target_time"][-1]) for i in range(len(ds))]
    assert max(ends) < t_test and max(ends) >= t_test - HOUR
    assert len(ds) > len(base.datasets["train"])
    assert "val" not in dm.datasets
    assert _origins(dm, "test") == _origins(base, "test")
    with pytest.raises(RuntimeError, match="limit_val_batches=0"):
        dm.val_dataloader()
    with pytest.raises(ValueError, match="no validation windows"):
        dm.windows("val")


def test_a_backtest_stride_finer_than_the_sampling_is_refused_naming_it(series):
    dm = TimeSeriesDataModule(series, context_length="1D", horizon="6h", stride="1ns")
    with pytest.raises(ValueError, match=r"^stride='1ns' places about .* (val|test) split"):
        dm.windows("train")
