"""Panels (many series in one long table): windows never cross series, the split is by time
for every series, scaling comes from training rows only, batches carry covariates and static
attributes at the right places, bad tables are refused naming column, row and series."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from posenc.tasks import TimeSeriesDataModule
from posenc.tasks.forecasting.metrics import SeasonalError
from posenc.tasks.forecasting.panel import read_panel
from posenc.tasks.forecasting.schema import Columns
from posenc.tasks.forecasting.windows import (
    WindowDataset,
    count_windows,
    duration_windows,
    time_origins,
)

from .conftest import collate_windows

HOUR = 3600 * 10**9


def hourly(key, start, n, offset=0.0, drop=()):
    """One series: ``value`` = ``offset + row`` (its series and row can be read back)."""
    stamps = pd.date_range(start, periods=n, freq="1h")
    frame = pd.DataFrame({"id": key, "timestamp": stamps,
                          "value": offset + np.arange(n, dtype=float)})
    return frame.drop(index=list(drop))


@pytest.fixture
def ragged() -> pd.DataFrame:
    """Three series starting and ending at different times; ``b`` has a 3-hour gap, ``c`` is
    irregular (random steps of 1-3 h). ``value // 1000`` is the series."""
    a = hourly("a", "2021-01-01 00:00", 60, 0)
    b = hourly("b", "2021-01-01 07:00", 45, 1000, drop=(10, 11, 12))
    steps = np.random.default_rng(0).integers(1, 4, 30)
    c = pd.DataFrame({"id": "c", "timestamp": pd.Timestamp("2021-01-01 03:00")
                      + pd.to_timedelta(np.cumsum(steps), "h"),
                      "value": 2000 + np.arange(30, dtype=float)})
    return pd.concat([a, b, c], ignore_index=True)


def module(frame, **kwargs):
    args = {"series_column": "id", "context_length": 5, "horizon": 3, "stride": 2,
            "val_start": "2021-01-02 12:00", "test_start": "2021-01-03 00:00",
            "batch_size": 1000, **kwargs}
    dm = TimeSeriesDataModule(frame, **args)
    dm.setup("fit")
    return dm


def whole(dataset):
    return dataset.__getitems__(list(range(len(dataset))))


def raw(batch, side):
    """Values in data units ``(B, N)`` (NaN on padding)."""
    value = batch[f"{side}_value"][..., 0] * batch["scale"] + batch["loc"]
    return torch.where(batch[f"{side}_valid"], value, torch.nan).double().numpy()


# -- windows -------------------------------------------------------------------------------
def test_count_windows_exact_positions_per_series_and_a_short_series_has_none():
    # Series of 10, 7 and 3 rows; context 3, horizon 2, stride 2.
    starts = np.array([0, 10, 17, 20])
    utc = np.concatenate([np.arange(10), np.arange(7), np.arange(3)]) * HOUR
    index = count_windows(starts, utc, -(2**62), 2**62, 3, 2, 2)
    assert index.offsets.tolist() == [0, 3, 5, 5]
    series, c0, t0, t1 = index.locate(np.arange(len(index)))
    assert series.tolist() == [0, 0, 0, 1, 1]
    assert t0.tolist() == [3, 5, 7, 13, 15]
    assert (t0 - c0).tolist() == [3] * 5 and (t1 - t0).tolist() == [2] * 5


def test_count_windows_hold_their_horizon_within_the_split_bounds():
    starts = np.array([0, 10])
    utc = np.arange(10) * HOUR
    index = count_windows(starts, utc, 4 * HOUR, 9 * HOUR, 3, 2, 1)
    _, c0, t0, t1 = index.locate(np.arange(len(index)))
    # horizon rows 4..8 only; the context may reach back before the bound
    assert t0.tolist() == [4, 5, 6, 7] and c0.tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("kwargs", [{}, {"context_length": "5h", "horizon": "3h",
                                          "stride": "2h"}], ids=["count", "duration"])
def test_windows_never_cross_series_and_never_leak_across_the_split(ragged, kwargs):
    dm = module(ragged, **kwargs)
    t_val = pd.Timestamp("2021-01-02 12:00").value
    t_test = pd.Timestamp("2021-01-03 00:00").value
    bounds = {"train": (-np.inf, t_val), "val": (t_val, t_test), "test": (t_test, np.inf)}
    values = [np.sort(ragged.loc[ragged.id == k, "value"].to_numpy()) for k in "abc"]
    seen = set()
    for split, (lo, hi) in bounds.items():
        batch = whole(dm.datasets[split])
        ctx, tgt = raw(batch, "context"), raw(batch, "target")
        series = batch["series"].numpy()
        for b in range(len(series)):
            c, t = ctx[b][~np.isnan(ctx[b])], tgt[b][~np.isnan(tgt[b])]
            ids = np.round(np.r_[c, t]).astype(int)
            assert (ids // 1000 == series[b]).all()          # one series per window
            rows = np.searchsorted(values[int(series[b])], ids)
            assert (np.diff(rows) == 1).all()                # consecutive rows of it
            ctime = batch["context_time"][b][batch["context_valid"][b]].numpy()
            ttime = batch["target_time"][b][batch["target_valid"][b]].numpy()
            assert ctime.max() < ttime.min()
            assert lo <= ttime.min() and ttime.max() < hi    # the whole horizon in its split
            seen.add(int(series[b]))
    assert seen == {0, 1, 2}


def test_duration_windows_equal_a_brute_force_construction(ragged):
    columns = Columns(timestamp_column="timestamp", target_columns=["value"],
                      series_columns=["id"])
    panel = read_panel(ragged, columns)
    lo, hi = pd.Timestamp("2021-01-01 10:00").value, pd.Timestamp("2021-01-03 00:00").value
    ctx, hor, stride = 5 * HOUR, 3 * HOUR, 2 * HOUR
    index = duration_windows(panel.starts, panel.utc, lo, hi, ctx, hor, stride)
    expected = []
    for s in range(panel.num_series):
        a, b = panel.starts[s], panel.starts[s + 1]
        times = panel.utc[a:b]
        origin = max(lo, times[0] + ctx)
        while origin + hor <= hi:
            c_rows = [a + i for i, t in enumerate(times) if origin - ctx <= t < origin]
            t_rows = [a + i for i, t in enumerate(times) if origin <= t < origin + hor]
            if c_rows and t_rows:
                expected.append((s, c_rows[0], t_rows[0], t_rows[-1] + 1))
            origin += stride
    got = list(zip(*(v.tolist() for v in index.locate(np.arange(len(index)))), strict=True))
    assert got == expected and len(expected) > 20


def test_a_series_too_short_for_any_window_has_none_and_the_others_keep_theirs(ragged):
    short = hourly("z", "2021-01-01 00:00", 4, 3000)  # shorter than context + horizon
    dm = module(pd.concat([ragged, short], ignore_index=True))
    assert dm.series_keys == [("a",), ("b",), ("c",), ("z",)]
    assert dm.windows("train").offsets[-2] == dm.windows("train").offsets[-1]
    assert 3 not in set(whole(dm.datasets["train"])["series"].tolist())
    assert len(dm.datasets["train"]) == len(module(ragged).datasets["train"])


@pytest.mark.parametrize("starts", [[0, 5, 10, 10], [0, 5, 5, 10], [0, 0, 5, 10]],
                         ids=["last", "middle", "first"])
def test_a_series_without_rows_has_no_windows_in_either_mode(starts):
    # irregular= can leave a series without rows; its neighbours keep their windows.
    starts = np.array(starts)
    utc = np.r_[np.arange(5), np.arange(5)] * HOUR
    first, counts = time_origins(starts, utc, 0, 10 * HOUR, 2 * HOUR, HOUR, HOUR)
    empty = np.diff(starts) == 0
    assert (counts[empty] == 0).all() and (counts[~empty] == 8).all()  # origins 2h..9h
    index = duration_windows(starts, utc, 0, 10 * HOUR, 2 * HOUR, HOUR, HOUR)
    assert np.diff(index.offsets).tolist() == np.where(empty, 0, 3).tolist()
    index = count_windows(starts, utc, 0, 10 * HOUR, 2, 1, 1)
    assert np.diff(index.offsets).tolist() == np.where(empty, 0, 3).tolist()


def test_irregular_may_empty_a_series_of_a_panel_in_duration_mode():
    frame = pd.concat([hourly("a", "2021-01-01", 200), hourly("b", "2021-01-01", 200, 1000),
                       hourly("z", "2021-01-01", 1, 2000)], ignore_index=True)
    dm = TimeSeriesDataModule(frame, series_column="id", context_length="5h", horizon="3h",
                              irregular=0.5, seed=1)
    dm.setup("fit")
    assert dm.panel().lengths[2] == 0 and dm.series_keys[2] == ("z",)
    assert 2 not in set(whole(dm.datasets["train"])["series"].tolist())


# -- scaling -------------------------------------------------------------------------------
def test_scaling_is_per_series_from_training_rows_only(ragged):
    dm = module(ragged)
    t_val = pd.Timestamp("2021-01-02 12:00")
    for s, key in enumerate("abc"):
        train = ragged[(ragged.id == key) & (ragged.timestamp < t_val)]["value"]
        assert dm.loc[s, 0] == pytest.approx(train.mean())
        assert dm.scale[s, 0] == pytest.approx(train.std(ddof=0))
    changed = ragged.copy()
    changed.loc[changed.timestamp >= t_val, "value"] *= 100.0
    other = module(changed)
    np.testing.assert_array_equal(other.loc, dm.loc)
    np.testing.assert_array_equal(other.scale, dm.scale)
    changed = ragged.copy()
    changed.loc[(changed.id == "b") & (changed.timestamp < t_val), "value"] += 7.0
    moved = module(changed)
    assert moved.loc[1, 0] == pytest.approx(dm.loc[1, 0] + 7.0)
    np.testing.assert_array_equal(moved.loc[[0, 2]], dm.loc[[0, 2]])


def test_a_series_without_training_rows_gets_the_pooled_training_statistics(ragged):
    late = hourly("d", "2021-01-02 13:00", 30, 3000)  # starts after val_start
    frame = pd.concat([ragged, late], ignore_index=True)
    dm = module(frame)
    train = ragged[ragged.timestamp < pd.Timestamp("2021-01-02 12:00")]["value"]
    assert dm.series_keys[3] == ("d",)
    assert dm.loc[3, 0] == pytest.approx(train.mean())
    assert dm.scale[3, 0] == pytest.approx(train.std(ddof=0))


def test_a_constant_training_channel_is_centred_with_scale_one(ragged):
    frame = ragged.copy()
    frame.loc[frame.id == "a", "value"] = 5.0
    dm = module(frame)
    assert (dm.loc[0, 0], dm.scale[0, 0]) == (5.0, 1.0)


# -- batches -------------------------------------------------------------------------------
@pytest.fixture
def rich(ragged) -> pd.DataFrame:
    frame = ragged.copy()
    frame["temp"] = 2.0 * frame["value"] + 1.0            # past covariate
    frame.loc[frame.index % 7 == 0, "temp"] = np.nan      # with missing values
    frame["flag"] = (frame["value"] % 2).astype(bool)     # future covariate
    frame["region"] = frame["id"].map({"a": "north", "b": "south", "c": "north"})
    frame["size"] = frame["id"].map({"a": 1.0, "b": 2.0, "c": 6.0})
    return frame


def rich_module(frame, **kwargs):
    return module(frame, past_covariates=["temp"], future_covariates=["flag"],
                  static_columns=["region", "size"], **kwargs)


def test_getitems_equals_collating_single_items(rich):
    dataset = rich_module(rich).datasets["train"]
    indexes = [0, 5, len(dataset) - 1, 3]
    batch = dataset.__getitems__(indexes)
    expected = collate_windows([dataset[i] for i in indexes])
    assert set(batch) == set(expected)
    for key in expected:
        torch.testing.assert_close(batch[key], expected[key], rtol=0, atol=0, msg=key)


def test_the_splits_share_one_seasonal_error_equal_to_each_split_building_its_own(rich):
    dm = rich_module(rich, mase_season=4)
    shared = dm.datasets["train"].seasonal_error
    assert all(d.seasonal_error is shared for d in dm.datasets.values())
    panel, fitted = dm.panel(), dm.fitted
    for name, dataset in dm.datasets.items():
        own = WindowDataset(panel, fitted, dataset.windows, 4)
        batch = whole(dataset)["seasonal_error"]
        torch.testing.assert_close(batch, whole(own)["seasonal_error"], rtol=0, atol=0,
                                   equal_nan=True, msg=name)


def test_a_seasonal_error_of_another_panel_is_refused(rich):
    dm = rich_module(rich)
    panel, dataset = dm.panel(), dm.datasets["train"]
    other = SeasonalError(panel.targets[:-1], panel.starts - np.r_[0, 0, 0, 1], 1)
    with pytest.raises(ValueError, match="seasonal_error was built for another panel"):
        WindowDataset(panel, dm.fitted, dataset.windows, seasonal_error=other)
    with pytest.raises(TypeError, match="seasonal_error must be a SeasonalError or None, got "
                                        "int"):
        WindowDataset(panel, dm.fitted, dataset.windows, seasonal_error=4)


def test_padding_repeats_edge_times_with_zero_unobserved_values():
    frame = pd.concat([hourly("a", "2021-01-01", 60), hourly("b", "2021-01-01", 60, 1000)])
    # A gap in b: its windows there have fewer rows and get padded.
    frame = frame[~((frame.id == "b") & frame.value.isin([1009.0, 1010.0]))]
    dm = module(frame, context_length="6h", horizon="3h", stride="3h")
    batch = whole(dm.datasets["train"])
    padded = ~batch["context_valid"]
    assert padded.any()
    for b, n in zip(*np.nonzero(padded.numpy()), strict=True):
        last = int(batch["context_valid"][b].sum()) - 1
        assert batch["context_time"][b, n] == batch["context_time"][b, last]
        assert batch["context_local"][b, n] == batch["context_local"][b, last]
        assert (batch["context_fields"][b, n] == batch["context_fields"][b, last]).all()
        assert batch["context_value"][b, n, 0] == 0 and not batch["context_observed"][b, n, 0]
        assert batch["context_past"].shape[-1] == 0


def test_covariates_and_static_attributes_land_in_their_keys_scaled_per_series(rich):
    dm = rich_module(rich)
    batch = whole(dm.datasets["train"])
    schema = dm.fitted
    assert schema.columns.channels == ["value", "temp", "flag"]
    loc, scale = np.asarray(schema.loc), np.asarray(schema.scale)
    t_val = pd.Timestamp("2021-01-02 12:00")
    for s, key in enumerate("abc"):
        train = rich[(rich.id == key) & (rich.timestamp < t_val)]
        assert loc[s, 1] == pytest.approx(train["temp"].mean())  # NaN skipped
        assert scale[s, 2] == pytest.approx(train["flag"].astype(float).std(ddof=0))
    lookup = rich.set_index(["id", "timestamp"])
    series = batch["series"].numpy()
    for b in range(0, len(series), 5):
        s, key = int(series[b]), "abc"[int(series[b])]
        for side in ("context", "target"):
            valid = batch[f"{side}_valid"][b].numpy()
            times = pd.DatetimeIndex(batch[f"{side}_time"][b].numpy()[valid].view("M8[ns]"))
            rows = lookup.loc[[(key, t) for t in times]]
            flag = (rows["flag"].to_numpy(float) - loc[s, 2]) / scale[s, 2]
            np.testing.assert_allclose(batch[f"{side}_future"][b, valid, 0], flag, rtol=1e-6)
            if side == "context":
                temp = rows["temp"].to_numpy()
                seen = batch["context_past_observed"][b, valid, 0].numpy()
                np.testing.assert_array_equal(seen, ~np.isnan(temp))
                got = batch["context_past"][b, valid, 0].numpy()
                np.testing.assert_allclose(got[seen], (temp[seen] - loc[s, 1]) / scale[s, 1],
                                           rtol=1e-5)
                assert (got[~seen] == 0).all()
    assert "target_past" not in batch
    # Categories sorted, code 0 kept for unknown; numbers standardized across series.
    assert schema.static_categories == {"region": ("north", "south")}
    assert dm.static_cardinalities == [3] and dm.num_static_real == 1
    assert batch["static_cat"][:, 0].tolist() == [[1, 2, 1][s] for s in series]
    sizes = np.array([1.0, 2.0, 6.0])
    z = (sizes - sizes.mean()) / sizes.std()
    np.testing.assert_allclose(batch["static_real"][:, 0], z[series], rtol=1e-6)


def test_the_row_order_of_the_table_does_not_matter(rich):
    shuffled = rich.sample(frac=1.0, random_state=3).reset_index(drop=True)
    ours, theirs = rich_module(rich), rich_module(shuffled)
    assert ours.series_keys == theirs.series_keys
    for split in ("train", "val", "test"):
        a, b = whole(ours.datasets[split]), whole(theirs.datasets[split])
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=f"{split} {key}")


# -- refusals ------------------------------------------------------------------------------
def test_missing_columns_and_a_column_in_two_roles(rich):
    with pytest.raises(ValueError, match=r"column 'site' not found; the data has columns"):
        module(rich, series_column="site")
    with pytest.raises(ValueError, match=r"column 'humidity' not found"):
        module(rich, past_covariates=["humidity"])
    with pytest.raises(ValueError, match=r"'temp' is in both past_covariates and "
                                         r"future_covariates"):
        TimeSeriesDataModule(rich, series_column="id", past_covariates=["temp"],
                             future_covariates=["temp"])
    with pytest.raises(ValueError, match=r"'id' is in both series_column and static_columns"):
        TimeSeriesDataModule(rich, series_column="id", static_columns=["id"])


def test_a_missing_future_covariate_names_column_and_row(rich):
    frame = rich.copy()
    frame["flag"] = frame["flag"].astype(float)
    frame.loc[70, "flag"] = np.nan
    with pytest.raises(ValueError, match=r"future covariate 'flag': row 70 .*is missing"):
        rich_module(frame)


def test_a_static_value_that_changes_names_series_and_rows(rich):
    frame = rich.copy()
    frame.loc[75, "region"] = "east"
    with pytest.raises(ValueError, match=r"static column 'region' changes within series "
                                         r"\('b',\): row 75 is 'east' but row 60 is 'south'"):
        rich_module(frame)


def test_a_repeated_time_names_both_rows_and_the_series_but_two_series_may_share_it(ragged):
    frame = ragged.copy()
    frame.loc[65, "timestamp"] = frame.loc[63, "timestamp"]
    with pytest.raises(ValueError, match=r"row 65 repeats the timestamp of row 63 .* in series "
                                         r"\('b',\)"):
        module(frame)
    # a and b share most of their timestamps: fine
    assert module(ragged).num_series == 3


def test_a_missing_series_id_names_its_row(ragged):
    frame = ragged.copy()
    frame.loc[42, "id"] = np.nan
    with pytest.raises(ValueError, match=r"series column 'id': row 42 has no series id"):
        module(frame)


def test_a_categorical_covariate_is_a_type_error(rich):
    frame = rich.copy()
    frame["temp"] = pd.Categorical(np.where(frame["value"] > 10, "hot", "cold"))
    with pytest.raises(TypeError, match=r"past covariate column 'temp' holds category"):
        rich_module(frame)


def test_naive_and_aware_timestamps_mixed_are_refused(ragged):
    frame = ragged.copy()
    frame["timestamp"] = frame["timestamp"].astype(str)
    frame.loc[70, "timestamp"] += "+00:00"
    with pytest.raises(ValueError, match=r"row 70"):
        module(frame)


def test_ambiguous_infer_localizes_each_series_of_a_panel_on_its_own():
    # Both series hold Paris's repeated 02:00 (2021-10-31); the table is sorted by time (series
    # interleaved), so only each series' own order tells its two 02:00 rows apart.
    wall = pd.DatetimeIndex(["2021-10-31 00:00", "2021-10-31 01:00", "2021-10-31 02:00",
                             "2021-10-31 02:00", "2021-10-31 03:00", "2021-10-31 04:00"])
    frame = pd.concat([pd.DataFrame({"id": k, "timestamp": wall, "value": np.arange(6.0) + o})
                       for k, o in (("x", 0), ("y", 100))], ignore_index=True)
    frame = frame.sort_values("timestamp", kind="stable").reset_index(drop=True)
    columns = Columns(timestamp_column="timestamp", target_columns=["value"],
                      series_columns=["id"], tz="Europe/Paris", ambiguous="infer")
    panel = read_panel(frame, columns)
    expected = pd.DatetimeIndex(["2021-10-30 22:00", "2021-10-30 23:00", "2021-10-31 00:00",
                                 "2021-10-31 01:00", "2021-10-31 02:00", "2021-10-31 03:00"])
    for s in range(2):
        rows = slice(panel.starts[s], panel.starts[s + 1])
        np.testing.assert_array_equal(panel.utc[rows], expected.as_unit("ns").asi8)
        np.testing.assert_array_equal(panel.values[rows, 0], np.arange(6.0) + 100 * s)


@pytest.mark.parametrize("role", ["series_column", "static_columns"])
@pytest.mark.parametrize("values, kind", [
    (pd.to_datetime(["2020-01-01", "2020-02-01"]), "Timestamp"),
    ([[1], [2]], "list"),
])
def test_ids_and_categories_must_be_plain_values(ragged, role, values, kind):
    # The schema goes into checkpoints that load with weights_only=True: a Timestamp there
    # would make the checkpoint unloadable, a list cannot be a key at all.
    frame = ragged[ragged.id != "c"].copy()
    frame["odd"] = [values[0] if k == "a" else values[1] for k in frame["id"]]
    kwargs = ({"series_column": "odd"} if role == "series_column"
              else {"static_columns": ["odd"]})
    with pytest.raises(TypeError, match=rf"column 'odd' holds {kind} values"):
        module(frame, **kwargs)


@pytest.mark.parametrize("values", [[np.inf, 1.0], [1e300, -1e300]], ids=["inf", "huge"])
def test_numeric_static_values_must_be_finite_once_standardized(ragged, values):
    frame = ragged.copy()
    frame["size"] = frame["id"].map({"a": values[0], "b": values[1], "c": 0.0})
    with pytest.raises(ValueError, match=r"static column 'size'"):
        module(frame, static_columns=["size"])
