"""TimeSeriesDataModule: windows, time splits without leakage, scaling, irregular sampling,
time zones, and clear errors for bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from posenc.tasks import TimeSeriesDataModule, make_batch
from posenc.tasks.datasets import SeattleTempsDataModule, TaylorDataModule
from posenc.tasks.forecasting.windows import local_time_fields
from posenc.temporal.calendar import FIELDS

from ..conftest import HOUR, setup_series, synthetic_series
from .conftest import collate_windows


def _windows(dm, split):
    ds = dm.datasets[split]
    return [ds[i] for i in range(len(ds))]


@pytest.mark.parametrize("kwargs", [
    {},
    {"stride": 1},
    {"context_length": "1D", "horizon": "6h", "stride": "3h"},
    {"irregular": 0.6, "context_length": "1D", "horizon": "6h", "stride": "2h"},
    {"irregular": 0.6},
])
def test_windows_never_see_the_future_and_splits_do_not_leak(series, kwargs):
    dm = setup_series(series, **kwargs)
    t_val, t_test = dm.split_times["val"], dm.split_times["test"]
    bounds = {"train": (-np.inf, t_val), "val": (t_val, t_test), "test": (t_test, np.inf)}
    for split, (lo, hi) in bounds.items():
        windows = _windows(dm, split)
        assert windows, split
        for w in windows:
            ctx, tgt = w["context_time"], w["target_time"]
            assert len(ctx) and len(tgt)
            assert ctx.max() < tgt.min()                       # context strictly before
            assert bool((tgt >= lo).all()) and bool((tgt < hi).all())  # horizon in its split
            assert bool((torch.diff(ctx) > 0).all()) and bool((torch.diff(tgt) > 0).all())
    # No target is shared between splits.
    targets = {s: {int(t) for w in _windows(dm, s) for t in w["target_time"]} for s in bounds}
    assert not targets["train"] & targets["val"]
    assert not targets["val"] & targets["test"]
    assert not targets["train"] & targets["test"]


def test_observation_windows_are_the_rows_just_before_the_horizon(series):
    dm = setup_series(series, stride=5)
    stamps = pd.DatetimeIndex(series["timestamp"]).as_unit("ns").asi8
    for w in _windows(dm, "train") + _windows(dm, "test"):
        first = int(np.searchsorted(stamps, int(w["target_time"][0])))
        assert w["context_time"].tolist() == stamps[first - 24:first].tolist()
        assert w["target_time"].tolist() == stamps[first:first + 6].tolist()
        expected = (series["value"].to_numpy()[first - 24:first] - dm.loc[0]) / dm.scale[0]
        np.testing.assert_allclose(w["context_value"][:, 0].numpy(), expected, rtol=1e-5,
                                   atol=1e-5)


def test_time_window_contents_match_a_brute_force_construction():
    frame = synthetic_series(200)
    keep = np.random.default_rng(3).random(200) < 0.7
    frame = frame[keep].reset_index(drop=True)
    dm = setup_series(frame, context_length="10h", horizon="4h", stride="3h",
                      train_stride="3h")
    stamps = pd.DatetimeIndex(frame["timestamp"]).as_unit("ns").asi8
    t_val = dm.split_times["val"]
    expected = []
    origin = stamps[0] + 10 * HOUR
    while origin + 4 * HOUR <= t_val:
        ctx = stamps[(stamps >= origin - 10 * HOUR) & (stamps < origin)]
        tgt = stamps[(stamps >= origin) & (stamps < origin + 4 * HOUR)]
        if len(ctx) and len(tgt):
            expected.append((ctx.tolist(), tgt.tolist()))
        origin += 3 * HOUR
    got = [(w["context_time"].tolist(), w["target_time"].tolist())
           for w in _windows(dm, "train")]
    assert got == expected
    assert len({len(c) for c, _ in got}) > 1  # irregular: contexts of different lengths


def test_scaling_is_fit_on_the_training_period_only(series):
    dm = setup_series(series)
    train = pd.DatetimeIndex(series["timestamp"]).as_unit("ns").asi8 < dm.split_times["val"]
    np.testing.assert_allclose(dm.loc[0], series["value"][train].mean(), rtol=1e-6)
    np.testing.assert_allclose(dm.scale[0], series["value"][train].std(ddof=0), rtol=1e-5)
    shifted = series.copy()
    shifted.loc[~train, "value"] += 1000.0  # change only validation/test values
    dm2 = setup_series(shifted)
    assert dm2.loc[0] == dm.loc[0] and dm2.scale[0] == dm.scale[0]


def test_irregular_keeps_a_seeded_fraction(series):
    def kept(seed):
        dm = setup_series(series, irregular=0.5, seed=seed)
        return set(dm.datasets["train"].utc.tolist())

    first, again, other = kept(0), kept(0), kept(1)
    all_stamps = set(pd.DatetimeIndex(series["timestamp"]).as_unit("ns").asi8.tolist())
    assert first == again and first != other
    assert first <= all_stamps
    # Binomial(400, 0.5): 4 standard deviations is +-40.
    assert abs(len(first) - 200) < 40


def test_multiple_targets_and_missing_values():
    frame = synthetic_series(columns=2)
    frame.loc[50, "value2"] = np.nan
    dm = setup_series(frame, target_columns=["value", "value2"], stride=1)
    assert dm.num_targets == 2 and dm.loc.shape == (2,)
    row = int(pd.DatetimeIndex(frame["timestamp"]).as_unit("ns").asi8[50])
    found = False
    for w in _windows(dm, "train"):
        hit = (w["context_time"] == row).nonzero()
        if len(hit):
            i = int(hit[0, 0])
            assert w["context_observed"][i].tolist() == [True, False]
            assert w["context_value"][i, 1] == 0.0
            found = True
    assert found


def test_collate_pads_with_masks_and_repeated_times(series):
    frame = series.drop(index=range(40, 52)).reset_index(drop=True)
    dm = setup_series(frame, context_length="1D", horizon="6h", stride="6h", train_stride="6h")
    items = _windows(dm, "train")[:6]
    batch = collate_windows(items)
    lengths = [len(i["context_time"]) for i in items]
    assert len(set(lengths)) > 1
    for b, item in enumerate(items):
        n = lengths[b]
        assert batch["context_valid"][b].tolist() == [True] * n + [False] * (max(lengths) - n)
        assert bool((batch["context_time"][b, n:] == item["context_time"][-1]).all())
        assert not batch["context_observed"][b, n:].any()
        assert torch.equal(batch["context_value"][b, :n], item["context_value"])


def test_seattle_localizes_dst_and_reports_local_time():
    dm = SeattleTempsDataModule(context_length=24, horizon=24)
    dm.setup("fit")
    ds = dm.datasets["train"]
    utc, local = np.asarray(ds.utc), np.asarray(ds.local)
    assert len(utc) == 8759
    offsets = (local - utc) // HOUR
    stamps = pd.DatetimeIndex(local)
    assert set(offsets[stamps.month == 1]) == {-8} and set(offsets[stamps.month == 7]) == {-7}
    gaps = np.diff(utc) // HOUR
    # The file's 02:00 on 2010-03-14 does not exist (shifted to 03:00 PDT): real steps stay
    # 1 h; in November the repeated 01:00 hour is missing from the file: one real 2 h gap.
    assert sorted(set(gaps.tolist())) == [1, 2] and int((gaps == 2).sum()) == 1
    two = int(np.flatnonzero(gaps == 2)[0])
    assert str(pd.Timestamp(local[two]).date()) == "2010-11-07"


def test_taylor_is_half_hourly_with_rebuilt_timestamps():
    dm = TaylorDataModule(context_length=96, horizon=48)
    dm.setup("fit")
    utc = np.asarray(dm.datasets["train"].utc)
    assert len(utc) == 4032 and set(np.diff(utc).tolist()) == {1800 * 10**9}
    assert pd.Timestamp(utc[0]) == pd.Timestamp("2000-06-05 00:00")


def test_csv_path_and_text_timestamps(tmp_path, series):
    path = tmp_path / "series.csv"
    series.to_csv(path, index=False)
    from_file, from_frame = setup_series(str(path)), setup_series(series)
    np.testing.assert_array_equal(from_file.datasets["val"].utc, from_frame.datasets["val"].utc)
    assert "data" in from_file.hparams and "data" not in from_frame.hparams


def test_parquet_path(tmp_path, series):
    path = tmp_path / "series.parquet"
    series.to_parquet(path)
    from_file = setup_series(str(path)).datasets["train"]
    assert len(from_file) == len(setup_series(series).datasets["train"])


@pytest.mark.parametrize("freq", ["W-SUN", "Q-DEC", "Y-DEC", "D"])
def test_period_timestamp_columns_are_read_as_their_start_times(tmp_path, freq):
    periods = pd.period_range("2020-01-01", periods=40, freq=freq)
    starts = np.array([p.start_time.value for p in periods], np.int64)  # each Period's own
    frame = pd.DataFrame({"timestamp": periods, "value": np.arange(40.0)})
    path = tmp_path / "periods.parquet"
    frame.to_parquet(path)
    indexed = frame.set_index("timestamp")
    assert isinstance(indexed.index, pd.PeriodIndex)
    for data in (frame, str(path), indexed.reset_index()):
        dm = setup_series(data, context_length=4, horizon=2)
        panel = dm.panel()
        np.testing.assert_array_equal(panel.utc, starts)
        np.testing.assert_array_equal(panel.local, starts)
        window = dm.datasets["train"][0]
        np.testing.assert_array_equal(window["context_time"].numpy(), starts[:4])
    with pytest.raises(ValueError, match="index is a PeriodIndex: reset_index"):
        setup_series(indexed)


@pytest.mark.parametrize("offset, offset_ns", [("+02:00", 2 * HOUR), ("-05:30", -5.5 * HOUR),
                                               ("Z", 0)])
def test_a_utc_offset_reads_the_same_from_text_csv_datetimes_and_parquet(tmp_path, offset,
                                                                        offset_ns):
    wall = pd.date_range("2024-03-10", periods=120, freq="1h")
    text = pd.DataFrame({"timestamp": wall.strftime("%Y-%m-%d %H:%M:%S") + offset,
                         "value": np.arange(120.0)})
    stamps = pd.to_datetime(text["timestamp"])
    assert isinstance(stamps.dtype, pd.DatetimeTZDtype)
    datetimes = text.assign(timestamp=stamps)
    text.to_csv(tmp_path / "a.csv", index=False)
    datetimes.to_parquet(tmp_path / "a.parquet")
    objects = text.assign(timestamp=pd.Series(list(stamps), dtype=object))
    # By hand: the wall clock as written is the local time; the instant is it minus the offset.
    local = wall.as_unit("ns").asi8
    for data in (text, tmp_path / "a.csv", datetimes, tmp_path / "a.parquet", objects,
                 text.assign(timestamp=text["timestamp"].str.replace(" ", "T"))):
        dm = setup_series(data)
        np.testing.assert_array_equal(dm.panel().local, local)
        np.testing.assert_array_equal(dm.panel().utc, local - int(offset_ns))
        window = dm.datasets["train"][0]
        np.testing.assert_array_equal(window["context_fields"].numpy(),
                                      _pandas_fields(local[:24]))
    iso = setup_series(text, timestamp_format="ISO8601").panel()
    np.testing.assert_array_equal(iso.local, local)


def test_tz_aware_offsets_convert_to_the_zone():
    stamps = pd.date_range("2021-03-10", periods=400, freq="1h", tz="America/New_York")
    frame = pd.DataFrame({"timestamp": stamps.strftime("%Y-%m-%dT%H:%M:%S%z"),
                          "value": np.arange(400.0)})
    dm = setup_series(frame, tz="America/New_York")
    ds = dm.datasets["train"]
    assert set(np.diff(np.asarray(ds.utc)).tolist()) == {HOUR}  # real time across the DST change
    local = pd.DatetimeIndex(np.asarray(ds.local))
    assert local[0] == pd.Timestamp("2021-03-10 00:00")


def test_make_batch_for_irregular_queries():
    ctx = pd.date_range("2021-01-01", periods=10, freq="1h")
    query = pd.DatetimeIndex(["2021-01-01 10:30", "2021-01-01 13:00", "2021-01-02 00:00"])
    batch = make_batch(ctx, np.arange(10.0), query, loc=5.0, scale=2.0)
    assert batch["target_time"].shape == (1, 3) and batch["context_value"].shape == (1, 10, 1)
    np.testing.assert_allclose(batch["context_value"][0, :, 0].numpy(),
                               (np.arange(10.0) - 5) / 2)
    assert not batch["target_observed"].any()
    with pytest.raises(ValueError, match="after the last context timestamp"):
        make_batch(ctx, np.arange(10.0), ctx[-2:])


def test_make_batch_is_the_data_module_s_batch_of_the_same_window(series):
    """make_batch and the data module build batches on one path: the same history, scaling
    and query times give the same tensors (but the horizon's truth, which a request lacks)."""
    frame = series.copy()
    frame.loc[frame.index % 9 == 0, "value"] = np.nan
    dm = setup_series(frame, tz="Europe/Berlin")
    ds = dm.datasets["val"]
    batch = ds.__getitems__([3])
    ctx = batch["context_local"][0].numpy()
    rows = np.searchsorted(ds.local, ctx)
    raw = frame["value"].to_numpy()[rows]
    utc = {side: pd.DatetimeIndex(batch[f"{side}_time"][0].numpy()).tz_localize("UTC")
           for side in ("context", "target")}
    made = make_batch(utc["context"], raw, utc["target"], tz="Europe/Berlin", loc=dm.loc,
                      scale=dm.scale)
    assert set(made) == set(batch)
    made["series_start_local"] = batch["series_start_local"]  # the request's age origin
    made["seasonal_error"] = batch["seasonal_error"]  # of the history given: here the context
    for key in set(batch) - {"target_value", "target_raw", "target_observed"}:
        torch.testing.assert_close(made[key], batch[key], rtol=0, atol=1e-6, msg=key)
    assert not made["target_observed"].any() and batch["target_observed"].any()


def _pandas_fields(local: np.ndarray) -> np.ndarray:
    """``(N,)`` naive local ns -> ``(N, len(FIELDS))`` from pandas' own accessors."""
    index = pd.DatetimeIndex(local)
    iso = index.isocalendar()
    weeks = pd.DatetimeIndex((iso.year.astype(str) + "-12-28").to_numpy()).isocalendar().week
    columns = {"second": index.second, "minute": index.minute, "hour": index.hour,
               "day_of_week": index.day_of_week, "day_of_month": index.day,
               "day_of_year": index.day_of_year, "month": index.month,
               "week_of_year": iso.week, "days_in_month": index.days_in_month,
               "days_in_year": 365 + index.is_leap_year, "weeks_in_year": weeks}
    return np.stack([np.asarray(columns[name], np.int64) for name in FIELDS], -1)


def test_batches_carry_the_calendar_fields_of_their_local_times():
    """Computed once in the data pipeline (pandas' accessors as the reference), padded like
    the timestamps, and the same keys from make_batch, so a model's forward never computes a
    calendar on the host."""
    frame = synthetic_series(200, freq="37min", start="2021-03-27 20:00")
    frame = frame[np.random.default_rng(1).random(200) < 0.7].reset_index(drop=True)
    frame["timestamp"] = frame["timestamp"].dt.tz_localize("UTC")
    dm = setup_series(frame, context_length="6h", horizon="3h", stride="2h",
                      tz="Europe/Berlin")  # local time across the DST change of 2021-03-28
    items = _windows(dm, "train")
    batch = collate_windows(items)
    for side in ("context", "target"):
        fields = batch[f"{side}_fields"]
        assert fields.dtype == torch.int32
        assert fields.shape == (*batch[f"{side}_valid"].shape, len(FIELDS))
        local = batch[f"{side}_local"].numpy()  # padding repeats the last real time
        np.testing.assert_array_equal(fields.reshape(-1, len(FIELDS)).numpy(),
                                      _pandas_fields(local.reshape(-1)))
    ctx = pd.date_range("2024-02-28 22:00", periods=5, freq="1h")
    one = make_batch(ctx, np.arange(5.0), pd.DatetimeIndex(["2024-03-01 00:30"]))
    assert set(one) == set(batch)
    np.testing.assert_array_equal(one["target_fields"][0].numpy(),
                                  _pandas_fields(one["target_local"][0].numpy()))
    assert one["target_fields"][0, 0, list(FIELDS).index("day_of_year")] == 61  # leap year


def test_local_time_fields_refuse_what_is_not_int64_nanoseconds():
    with pytest.raises(TypeError, match=r"^local must be int64 nanoseconds \(a numpy array or "
                                        r"tensor\), got float64"):
        local_time_fields(np.zeros(3))
    with pytest.raises(TypeError, match=r"got list"):
        local_time_fields([0, 1])


# -- bad input ---------------------------------------------------------------------------------
def test_missing_timestamp_column_is_named(series):
    with pytest.raises(ValueError, match=r"column 'time' not found; the data has columns "
                                         r"\['timestamp', 'value'\]"):
        setup_series(series, timestamp_column="time")


def test_missing_target_column_is_named(series):
    with pytest.raises(ValueError, match="column 'temp' not found"):
        setup_series(series, target_columns="temp")


def test_unparseable_timestamp_names_the_row(tmp_path, series):
    frame = series.astype({"timestamp": str})
    frame.loc[7, "timestamp"] = "not a date"
    with pytest.raises(ValueError, match=r"'timestamp': row 7 value 'not a date' cannot be "
                                         "parsed"):
        setup_series(frame)
    path = tmp_path / "bad.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"row 7 \(line 9 of .*bad.csv\)"):
        setup_series(str(path))


def test_nat_timestamp_names_the_row(series):
    frame = series.copy()
    frame.loc[12, "timestamp"] = pd.NaT
    with pytest.raises(ValueError, match=r"'timestamp': row 12 is missing \(NaT\)"):
        setup_series(frame)


def test_mixed_naive_and_aware_timestamps_are_refused(series):
    frame = series.astype({"timestamp": str})
    frame.loc[3, "timestamp"] = "2021-01-01 03:00:00+01:00"
    with pytest.raises(ValueError, match="mixes tz-naive and tz-aware values: row 0"):
        setup_series(frame)


def test_numeric_timestamps_are_refused(series):
    frame = series.assign(timestamp=np.arange(len(series)))
    with pytest.raises(TypeError, match="unit is ambiguous"):
        setup_series(frame)


def test_non_numeric_target_names_column_and_row(series):
    frame = series.astype({"value": object})
    frame.loc[21, "value"] = "twelve"
    with pytest.raises(ValueError, match=r"target column 'value': row 21 value 'twelve' is "
                                         "not numeric"):
        setup_series(frame)


def test_duplicate_timestamps_name_both_rows(series):
    frame = series.copy()
    frame.loc[9, "timestamp"] = frame.loc[8, "timestamp"]
    with pytest.raises(ValueError, match="row 9 repeats the timestamp of row 8"):
        setup_series(frame)


def test_too_short_series_says_so(series):
    with pytest.raises(ValueError, match="train split .* fits no window .* too short"):
        setup_series(series.iloc[:40], context_length=48)
    with pytest.raises(ValueError, match="val split .* 18 observations.* fits no window"):
        setup_series(series.iloc[:120], context_length=12, horizon=24)


def test_nonexistent_local_time_needs_an_explicit_option(series):
    frame = synthetic_series(start="2021-03-14 00:00", n=300)
    with pytest.raises(ValueError, match="timestamp column 'timestamp': cannot localize "
                                         "timestamps to tz='America/New_York'.*nonexistent"):
        setup_series(frame, tz="America/New_York")
    # Shifted forward, 02:00 lands on 03:00: a clock that reads both is a data error.
    with pytest.raises(ValueError, match="row 3 repeats the timestamp of row 2"):
        setup_series(frame, tz="America/New_York", nonexistent="shift_forward")
    dm = setup_series(frame.drop(index=3), tz="America/New_York", nonexistent="shift_forward")
    assert set(np.diff(np.asarray(dm.datasets["train"].utc)).tolist()) == {HOUR}


def test_bad_window_arguments(series):
    with pytest.raises(ValueError, match="must all be observation counts .* or all durations"):
        TimeSeriesDataModule(series, context_length=24, horizon="6h")
    with pytest.raises(ValueError, match="context_length must be an int .* or a duration"):
        TimeSeriesDataModule(series, context_length="a week")
    with pytest.raises(ValueError, match="horizon must be >= 1"):
        TimeSeriesDataModule(series, horizon=0)
    with pytest.raises(ValueError, match="ambiguous must be one of"):
        TimeSeriesDataModule(series, ambiguous="first")
    with pytest.raises(ValueError, match="irregular is the fraction"):
        TimeSeriesDataModule(series, irregular=1.5)
    with pytest.raises(ValueError, match="tz='Mars/Olympus' is not a known time zone"):
        TimeSeriesDataModule(series, tz="Mars/Olympus")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TimeSeriesDataModule("no/such/file.csv").setup()


def test_monthly_data_in_a_dst_zone_gets_the_yearly_season():
    # UTC steps between Paris month starts are 28-31 days +- 1 h; the median landed on
    # 30 days 23 h, so the season became one step (naive) and mase_season 1.
    stamps = pd.date_range(end="2009-12-01", periods=60, freq="MS")
    frame = pd.DataFrame({"ts": stamps, "load": np.arange(60.0)})
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="load",
                              tz="Europe/Paris", context_length=12, horizon=3)
    dm.setup("fit")
    assert dm.naive_seasons == ["365 days 00:00:00"]
    assert dm.mase_season == 12
