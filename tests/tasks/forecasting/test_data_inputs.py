"""Hostile input to posenc.tasks' time-series data: checkpoints that load with weights_only,
window lengths without units, mixed timestamp formats, make_batch's timestamp checks, empty
files, split times, time-zone suffixes, duplicated columns and the smaller public helpers."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from posenc.tasks import TimeSeriesDataModule, make_batch
from posenc.tasks.forecasting.windows import count_windows
from posenc.temporal import parse_timestamps

from ..conftest import HOUR, setup_series, synthetic_series
from .conftest import collate_windows


def _text(frame: pd.DataFrame) -> pd.DataFrame:
    """Timestamps as the text a CSV holds: ``2021-01-01 00:00:00``."""
    return frame.assign(timestamp=frame["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S"))


# -- 1. checkpoints ---------------------------------------------------------------------------
def test_path_data_is_stored_as_text_and_loads_with_weights_only(tmp_path, series):
    path = tmp_path / "series.csv"
    series.to_csv(path, index=False)
    dm = TimeSeriesDataModule(path, context_length=np.int64(24), horizon=6,
                              val_start=pd.Timestamp("2021-01-12"),
                              test_start=dt.datetime(2021, 1, 15))
    assert dm.hparams.data == str(path) and type(dm.hparams.data) is str
    assert type(dm.hparams.context_length) is int
    assert dm.hparams.val_start == "2021-01-12T00:00:00"
    columns = TimeSeriesDataModule(series, target_columns=series.columns[1:]).hparams
    assert columns.target_columns == ["value"]
    buffer = io.BytesIO()
    torch.save({"hp": dict(dm.hparams)}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    assert loaded["hp"]["data"] == str(path)
    dm.setup()  # the Path itself still works
    again = TimeSeriesDataModule(**loaded["hp"])
    again.setup()
    every = np.arange(len(dm.datasets["test"]))
    np.testing.assert_array_equal(again.datasets["test"].windows.locate(every),
                                  dm.datasets["test"].windows.locate(every))


# -- 2. window lengths ------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, error, match", [
    ({"horizon": "24"}, ValueError, r"horizon='24' has no unit"),
    ({"context_length": " 168 "}, ValueError, r"context_length=' 168 ' has no unit"),
    ({"horizon": 24.0}, TypeError, r"horizon must be an int .* got float \(24.0\)"),
    ({"stride": np.float32(2)}, TypeError, "stride must be an int"),
    ({"horizon": "NaT"}, ValueError, r"horizon must be a positive duration, got 'NaT'"),
    ({"horizon": np.timedelta64(24)}, ValueError, "horizon=.* has no unit"),
    ({"context_length": 200_000}, ValueError, r"context_length \+ horizon = 200006 rows"),
    ({"horizon": "10000000000D"}, ValueError, "horizon='10000000000D' is out of range"),
])
def test_window_lengths_need_units_and_integer_counts(series, kwargs, error, match):
    with pytest.raises(error, match=match):
        TimeSeriesDataModule(series, **{"context_length": 24, "horizon": 6, **kwargs})


@pytest.mark.parametrize("argument", ["context_length", "horizon", "stride", "season"])
@pytest.mark.parametrize("value", ["12MS", "1m", "1M", "1MS", "ME", "1YS"])
def test_calendar_units_are_refused_as_window_lengths_and_seasons(series, argument, value):
    # pd.Timedelta read "12MS" as 12 ms and "1m" as a minute: calendar months have no fixed
    # length, and the windows and the seasonal-naive lag are fixed durations.
    kwargs = {"context_length": "1D", "horizon": "6h", argument: value}
    with pytest.raises(ValueError, match=rf"^{argument}={value!r} is .*(calendar|ambiguous).*"
                                         rf"takes a fixed duration.*or an int"):
        TimeSeriesDataModule(series, **kwargs)


@pytest.mark.parametrize("value, hours", [("1h", 1), ("30min", 0.5), ("7D", 168), ("1W", 168),
                                          ("7 days", 168), ("1h30min", 1.5)])
def test_fixed_spellings_of_window_lengths_and_seasons_are_their_durations(series, value, hours):
    dm = TimeSeriesDataModule(series, context_length=value, horizon=value, stride=value,
                              season=value)
    expected = pd.Timedelta(hours=hours)
    assert dm.context_length == dm.horizon == dm.stride == dm.season == expected


def test_timedelta_objects_are_durations(series):
    dm = setup_series(series, context_length=pd.Timedelta("1D"), horizon=dt.timedelta(hours=6))
    assert len(dm.datasets["train"]) and dm.hparams.horizon == "0 days 06:00:00"
    assert type(dm.hparams.context_length) is str


def test_a_stride_far_below_the_sampling_interval_is_refused_before_the_work(series):
    dm = TimeSeriesDataModule(series, context_length="1D", horizon="6h", stride="1ns",
                              train_stride="1ns")
    with pytest.raises(ValueError, match=r"stride='1ns' places about 1\.3e\+15 forecast "
                                         r"origins .* 400 observations"):
        dm.setup()


def test_windows_of_any_split_refuse_a_tiny_stride_without_setup(series):
    # dm.windows() is public: it must refuse before allocating the origins (~1e15 here).
    dm = TimeSeriesDataModule(series, context_length="1D", horizon="6h", stride="1ns",
                              train_stride="1ns")
    for split in ("train", "val", "test"):
        with pytest.raises(ValueError, match=r"stride='1ns' places about 1\.3e\+15 forecast "
                                             r"origins .* 400 observations"):
            dm.windows(split)


def test_windows_with_too_many_rows_are_refused():
    frame = synthetic_series(1000, freq="1s")
    dm = TimeSeriesDataModule(frame, context_length="300s", horizon="10s",
                              val_fraction=0.2, test_fraction=0.2)
    import posenc.tasks.forecasting.datamodule as module

    old, module.MAX_WINDOW_ROWS = module.MAX_WINDOW_ROWS, 100
    try:
        with pytest.raises(ValueError, match=r"windows of up to 310 rows .* limit of "
                                             "MAX_WINDOW_ROWS=100"):
            dm.setup()
        with pytest.raises(ValueError, match=r"windows of up to 310 rows in the train split"):
            dm.windows("train")
    finally:
        module.MAX_WINDOW_ROWS = old


def test_durations_shorter_than_the_sampling_interval_say_so(series):
    with pytest.raises(ValueError, match=r"fits no window .* median sampling interval 0 days "
                                         r"01:00:00"):
        setup_series(series, context_length="30min", horizon="20min", stride="1h",
               val_start="2021-01-12 00:10")


# -- 3. timestamp formats ---------------------------------------------------------------------
def test_one_row_in_another_format_is_refused_naming_it(tmp_path, series):
    frame = _text(series)
    frame.loc[30, "timestamp"] = "01/02/2021 06:00"
    path = tmp_path / "mixed.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"row 30 \(line 32 of .*mixed.csv\) value "
                                         r"'01/02/2021 06:00' cannot be parsed: it does not "
                                         r"match the format '%Y-%m-%d %H:%M:%S' of row 0"):
        setup_series(str(path))
    with pytest.raises(ValueError, match="row 30 value '01/02/2021 06:00' cannot be parsed: "
                                         "it does not match"):
        setup_series(frame)


def test_an_explicit_timestamp_format_reads_the_column(series):
    frame = series.assign(timestamp=series["timestamp"].dt.strftime("%d/%m/%Y %H:%M"))
    dm = setup_series(frame, timestamp_format="%d/%m/%Y %H:%M")
    utc = np.asarray(dm.datasets["train"].utc)
    assert pd.Timestamp(utc[24]) == pd.Timestamp("2021-01-02 00:00")  # not 1 February
    iso = _text(series)
    iso.loc[5, "timestamp"] = "2021-01-01T05:00"
    with pytest.raises(ValueError, match="row 5 value '2021-01-01T05:00' cannot be parsed: "
                                         "it does not match"):
        setup_series(iso)
    assert len(setup_series(iso, timestamp_format="ISO8601").datasets["train"])
    with pytest.raises(ValueError, match=r"timestamp_format='%Q' .* bad directive"):
        setup_series(frame, timestamp_format="%Q")
    with pytest.raises(TypeError, match="timestamp_format must be a str"):
        TimeSeriesDataModule(frame, timestamp_format=5)


def test_a_format_that_cannot_be_inferred_needs_timestamp_format():
    column = pd.Series(["1609459200", "1609462800"])
    with pytest.raises(ValueError, match=r"format of row 0 value '1609459200' cannot be "
                                         r"inferred; pass timestamp_format"):
        parse_timestamps(column, "t")


# -- 4. make_batch ----------------------------------------------------------------------------
def test_make_batch_refuses_nat_and_unsorted_or_repeated_context():
    ctx = pd.date_range("2021-01-01", periods=6, freq="1h")
    query = pd.date_range("2021-01-01 06:00", periods=2, freq="1h")
    values = np.arange(6.0)
    with pytest.raises(ValueError, match=r"context_timestamps.*row 2 is missing \(NaT\)"):
        make_batch(ctx.insert(2, pd.NaT).delete(3), values, query)
    with pytest.raises(ValueError, match=r"query_timestamps.*row 1 is missing \(NaT\)"):
        make_batch(ctx, values, [query[0], pd.NaT])
    shuffled = ctx[[0, 1, 3, 2, 4, 5]]
    with pytest.raises(ValueError, match=r"context_timestamps must be sorted in time: row 3 "
                                         r"\(2021-01-01 02:00:00\) is before row 2"):
        make_batch(shuffled, values, query)
    with pytest.raises(ValueError, match="context_timestamps: row 3 repeats the timestamp of "
                                         "row 2"):
        make_batch(ctx[[0, 1, 2, 2, 3, 4]], values, query)
    with pytest.raises(ValueError, match="row 1 value '01/01/2021 01:00' cannot be parsed: "
                                         "it does not match"):
        make_batch(["2021-01-01 00:00", "01/01/2021 01:00"], [1.0, 2.0], query)


def test_make_batch_refuses_mixed_zones_and_bad_values():
    ctx = pd.date_range("2021-01-01", periods=4, freq="1h", tz="UTC")
    query = pd.date_range("2021-01-01 04:00", periods=2, freq="1h")
    with pytest.raises(ValueError, match="context_timestamps are tz-aware but "
                                         "query_timestamps are tz-naive"):
        make_batch(ctx, np.ones(4), query)
    naive = ctx.tz_localize(None)
    with pytest.raises(ValueError, match=r"context_values: row 2 is infinite"):
        make_batch(naive, [1.0, 2.0, np.inf, 3.0], query)
    with pytest.raises(ValueError, match=r"context_values must be numbers"):
        make_batch(naive, ["a", "b", "c", "d"], query)
    with pytest.raises(ValueError, match=r"context_values must be \(Nc,\) or \(Nc, C\)"):
        make_batch(naive, np.ones((4, 1, 1)), query)
    with pytest.raises(ValueError, match=r"scale must be finite and > 0, got \[0\.\]"):
        make_batch(naive, np.ones(4), query, scale=0.0)
    with pytest.raises(ValueError, match=r"loc has shape \(3,\) but context_values has 2 "
                                         "channels"):
        make_batch(naive, np.ones((4, 2)), query, loc=[0.0, 1.0, 2.0])
    with pytest.raises(TypeError, match="context_timestamps must be a 1D sequence"):
        make_batch("2021-01-01", [1.0], query)


def test_make_batch_keeps_query_order_and_accepts_int_nanoseconds():
    ctx = pd.date_range("2021-01-01", periods=4, freq="1h")
    query = pd.DatetimeIndex(["2021-01-01 09:00", "2021-01-01 05:00", "2021-01-01 05:00"])
    batch = make_batch(ctx.as_unit("ns").asi8, np.ones(4), query)
    assert batch["target_time"][0].tolist() == query.as_unit("ns").asi8.tolist()
    assert batch["context_time"][0].tolist() == ctx.as_unit("ns").asi8.tolist()


# -- 5. files, split times, zones, columns ----------------------------------------------------
def test_empty_files_name_the_file(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"data='.*empty.csv' is empty"):
        TimeSeriesDataModule(str(empty)).setup()
    header = tmp_path / "header.csv"
    header.write_text("timestamp,value\n")
    with pytest.raises(ValueError, match=r"data='.*header.csv' has no rows"):
        TimeSeriesDataModule(str(header)).setup()
    with pytest.raises(ValueError, match=r"data \(a DataFrame\) has no rows"):
        TimeSeriesDataModule(pd.DataFrame({"timestamp": [], "value": []})).setup()


@pytest.mark.parametrize("name", ["val_start", "test_start"])
@pytest.mark.parametrize("value, error, match", [
    ("soon", ValueError, "'soon' cannot be parsed as a timestamp"),
    ("now", ValueError, "'now' is relative"),
    ("NaT", ValueError, "'NaT' cannot be parsed"),
    (2021, TypeError, "must be a timestamp string"),
])
def test_bad_split_times_name_the_argument(series, name, value, error, match):
    with pytest.raises(error, match=f"{name}={value!r}.*" if error is ValueError else name):
        TimeSeriesDataModule(series, **{name: value})
    with pytest.raises(error, match=match):
        TimeSeriesDataModule(series, **{name: value})


def test_split_times_must_match_the_timestamps_form(series):
    with pytest.raises(ValueError, match=r"val_start='2021-01-12 00:00\+01:00' has a UTC offset "
                                         "but the timestamps are tz-naive"):
        setup_series(series, val_start="2021-01-12 00:00+01:00")
    aware = series.assign(timestamp=series["timestamp"].dt.tz_localize("UTC"))
    with pytest.raises(ValueError, match="test_start='2021-01-15' has no UTC offset but the "
                                         "timestamps are tz-aware"):
        setup_series(aware, test_start="2021-01-15")
    dm = setup_series(aware, val_start="2021-01-12 01:00+01:00", tz="Europe/Berlin",
                test_start="2021-01-15")
    assert dm.split_times["val"] == pd.Timestamp("2021-01-12 00:00", tz="UTC").value
    assert dm.split_times["test"] == pd.Timestamp("2021-01-14 23:00", tz="UTC").value


@pytest.mark.parametrize("suffix", [" UTC", "+05", "+0500", " GMT", "Z", "+05:00"])
def test_a_zone_suffix_on_one_row_is_refused_naming_it(series, suffix):
    frame = _text(series)
    frame.loc[11, "timestamp"] += suffix
    with pytest.raises(ValueError, match=r"row 11 .*2021-01-01 11:00:00"):
        setup_series(frame)
    aware = frame.assign(timestamp=_text(series)["timestamp"] + "+00:00")
    aware.loc[11, "timestamp"] = _text(series).loc[11, "timestamp"] + suffix
    if suffix in ("+05", "+0500", "+05:00"):  # an offset like the others: 06:00 UTC
        with pytest.raises(ValueError, match="row 11 repeats the timestamp of row 6"):
            setup_series(aware)
    elif suffix == "Z":
        assert len(setup_series(aware).datasets["train"])
    else:
        with pytest.raises(ValueError, match=r"row 11 value '2021-01-01 11:00:00"):
            setup_series(aware)


def test_mixed_naive_and_aware_with_an_iso_format_are_refused(series):
    frame = _text(series)
    frame.loc[11, "timestamp"] += "+05"
    with pytest.raises(ValueError, match=r"mixes tz-naive and tz-aware values: row 0 .* but "
                                         r"row 11 is '2021-01-01 11:00:00\+05'"):
        setup_series(frame, timestamp_format="ISO8601")


def test_duplicated_column_names_are_refused(tmp_path, series):
    path = tmp_path / "dup.csv"
    path.write_text("timestamp,value,value\n" + "".join(
        f"{t},{v},{v}\n" for t, v in zip(_text(series)["timestamp"], series["value"], strict=True)))
    with pytest.raises(ValueError, match=r"data='.*dup.csv' has 2 columns named 'value'"):
        setup_series(str(path))
    frame = pd.concat([series, series[["value"]]], axis=1)
    with pytest.raises(ValueError, match=r"data \(a DataFrame\) has 2 columns named 'value'"):
        setup_series(frame)


def test_column_checks(series):
    with pytest.raises(ValueError, match="column 'time' not found.*the DataFrame's index is a "
                                         "DatetimeIndex: reset_index"):
        setup_series(series.set_index("timestamp"), timestamp_column="time")
    with pytest.raises(ValueError, match=r"target_columns repeats 'value'"):
        TimeSeriesDataModule(series, target_columns=["value", "value"])
    with pytest.raises(ValueError, match="column 'timestamp' is in both timestamp_column and "
                                         "target_columns"):
        TimeSeriesDataModule(series, target_columns=["timestamp"])
    text = series.assign(value=series["value"].astype(str).str.replace(".", ",", regex=False))
    with pytest.raises(ValueError, match=r"target column 'value': row 0 value '.*,.*' is not "
                                         "numeric"):
        setup_series(text)
    with pytest.raises(TypeError, match="target column 'timestamp2' holds datetime64"):
        setup_series(series.assign(timestamp2=series["timestamp"]), target_columns="timestamp2")


def test_all_missing_training_values_and_single_rows(series):
    frame = series.copy()
    frame.loc[:300, "value"] = np.nan
    with pytest.raises(ValueError, match="target column 'value' has no observed value in the "
                                         "training period"):
        setup_series(frame)
    with pytest.raises(ValueError, match=r"the series in data \(a DataFrame\) has 1 observation"):
        setup_series(series.iloc[:1])


def test_values_that_overflow_float32_after_scaling_are_refused(series):
    frame = series.copy()
    frame.loc[3, "value"] = 1e300
    with pytest.raises(ValueError, match=r"target column 'value': row 3 value 1e\+300 does "
                                         "not fit float32"):
        setup_series(frame)
    frame.loc[:, "value"] = 0.0
    frame.loc[[7, 8], "value"] = [1e-12, -1e-12]  # the training spread: ~1e-13
    frame.loc[390, "value"] = 1e30  # a test value ~1e43 spreads away
    with pytest.raises(ValueError, match=r"row 390 value 1e\+30 does not fit float32 once "
                                         "scaled"):
        setup_series(frame)


def test_tz_converts_aware_data_to_its_local_time(series):
    aware = series.assign(timestamp=series["timestamp"].dt.tz_localize("UTC"))
    dm = setup_series(aware, tz="Asia/Tokyo")
    ds = dm.datasets["train"]
    assert int(ds.local[0] - ds.utc[0]) == 9 * HOUR
    assert int(ds.utc[0]) == pd.Timestamp("2021-01-01", tz="UTC").value


def test_the_same_instant_in_two_offsets_is_a_duplicate(series):
    frame = series.assign(timestamp=series["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S+00:00"))
    frame.loc[8, "timestamp"] = "2021-01-01 08:00:00+01:00"  # = 07:00 UTC, row 7
    with pytest.raises(ValueError, match="row 8 repeats the timestamp of row 7"):
        setup_series(frame)


def test_infer_localizes_in_wall_clock_order_even_when_rows_are_shuffled():
    stamps = pd.date_range("2021-11-06 20:00", periods=300, freq="1h", tz="America/New_York")
    frame = pd.DataFrame({"timestamp": stamps.tz_localize(None), "value": np.arange(300.0)})
    order = np.random.default_rng(0).permutation(300)
    dm = setup_series(frame.iloc[order].reset_index(drop=True), tz="America/New_York",
                ambiguous="infer")
    expected = stamps.as_unit("ns").asi8
    assert dm.datasets["train"].utc.tolist() == expected.tolist()


def test_out_of_range_timestamps_name_the_row(series):
    frame = _text(series)
    frame.loc[4, "timestamp"] = "2300-01-01 00:00:00"
    with pytest.raises(ValueError, match=r"row 4 .*2300-01-01 00:00:00.* outside the "
                                         "nanosecond range"):
        setup_series(frame)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"val_fraction": "0.1"}, TypeError, "val_fraction must be a number"),
    ({"irregular": float("nan")}, ValueError, "irregular is the fraction"),
    ({"batch_size": 0}, ValueError, "batch_size must be >= 1"),
    ({"eval_batch_size": 0}, ValueError, "eval_batch_size must be >= 1"),
    ({"num_workers": -1}, ValueError, "num_workers must be >= 0"),
    ({"seed": 1.5}, TypeError, "seed must be an int"),
    ({"irregular": True}, ValueError, "irregular is the fraction"),
    ({"tz": 5}, TypeError, r"tz must be an IANA time zone name \(str\) or None, got int"),
    ({"target_columns": None}, TypeError, "target_columns must be a column name or a list"),
    ({"timestamp_column": None}, TypeError, "timestamp_column must name a column"),
])
def test_other_arguments_are_checked(series, kwargs, error, match):
    with pytest.raises(error, match=match):
        TimeSeriesDataModule(series, **kwargs)


# -- the smaller public helpers ---------------------------------------------------------------
def test_parse_timestamps_object_datetimes_and_text():
    naive, aware = dt.datetime(2021, 1, 1), dt.datetime(2021, 1, 1, 1, tzinfo=dt.UTC)
    with pytest.raises(ValueError, match=r"'t' mixes tz-naive and tz-aware values: row 0 .* "
                                         "row 1"):
        parse_timestamps(pd.Series([naive, aware], dtype=object), "t")
    index = parse_timestamps(pd.Series([dt.datetime(2021, 1, 1, 0, 0, 0, 5), naive + dt.
                                        timedelta(hours=1)], dtype=object), "t")
    assert index[1] == pd.Timestamp("2021-01-01 01:00")
    with pytest.raises(ValueError, match=r"'t': row 1 is missing \(NaT\)"):
        parse_timestamps(pd.Series(["2021-01-01 00:00", ""]), "t")
    with pytest.raises(TypeError, match="'t' holds timedelta64.* durations, expected "
                                        "timestamps"):
        parse_timestamps(pd.Series(pd.to_timedelta([1, 2], unit="h")), "t")
    with pytest.raises(TypeError, match="column must be a pandas Series"):
        parse_timestamps(["2021-01-01"], "t")


def test_window_index_refuses_indexes_out_of_range():
    windows = count_windows(np.array([0, 10]), np.arange(10) * HOUR, 0, 10 * HOUR, 4, 2, 1)
    assert len(windows) == 5  # horizons start at rows 4..8
    with pytest.raises(IndexError, match="window 5 out of range for 5 windows"):
        windows.locate(np.array([0, 5]))
    with pytest.raises(IndexError, match="window -1 out of range"):
        windows.locate(np.array([-1]))


def test_collate_windows_checks_its_items(series):
    dm = setup_series(series)
    items = [dm.datasets["train"][i] for i in range(2)]
    with pytest.raises(ValueError, match="collate_windows needs at least one window"):
        collate_windows([])
    other = {**items[1], "loc": torch.zeros(2), "scale": torch.ones(2)}
    with pytest.raises(ValueError, match=r"items\[1\] has 2 target channels but items\[0\] "
                                         "has 1"):
        collate_windows([items[0], other])
    empty = {**items[1], "context_time": items[1]["context_time"][:0]}
    with pytest.raises(ValueError, match=r"items\[1\] has an empty context"):
        collate_windows([items[0], empty])


def test_path_objects_work_everywhere(tmp_path, series):
    path = Path(tmp_path) / "s.parquet"
    series.to_parquet(path)
    assert len(setup_series(path).datasets["train"]) == len(setup_series(series).datasets["train"])


@pytest.mark.parametrize("fractions, error, match", [
    ({"val_fraction": 0.0}, ValueError, r"val_fraction must be a finite number > 0 and < 1, got 0"),
    ({"test_fraction": 1.0}, ValueError, r"test_fraction must be a finite number > 0 and < 1"),
    ({"val_fraction": "0.1"}, TypeError, r"val_fraction must be a number"),
    ({"val_fraction": 0.6, "test_fraction": 0.4}, ValueError,
     r"val_fraction \+ test_fraction must be < 1, got 0.6 \+ 0.4"),
])
def test_split_fractions_are_checked_like_the_image_modules(fractions, error, match):
    with pytest.raises(error, match=match):
        TimeSeriesDataModule(data=pd.DataFrame(), timestamp_column="t", target_columns=["y"],
                             context_length=4, horizon=2, **fractions)
