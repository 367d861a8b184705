"""Evaluation: the seasonal-naive forecast against hand-worked and brute-force values, the
natural seasons of a step, the seasonal error of whole histories, and ForecastMetrics against
direct per-series computations, however the windows are batched or split across processes
(GluonTS's own numbers: test_gluonts_metrics.py)."""

from __future__ import annotations

import datetime
import math

import numpy as np
import pandas as pd
import pytest
import torch
from posenc.tasks.forecasting.metrics import (
    ForecastMetrics,
    SeasonalError,
    central_intervals,
    natural_seasons,
    season_label,
    seasonal_naive,
    seasonality_for_step,
)

HOUR = 3600 * 10**9
DAY = 24 * HOUR
EPOCH = pd.Timestamp("2024-03-01", tz="UTC").value  # realistic int64 ns (~1.7e18)


def _window(times, values, observed=None):
    """One unpadded window: (context_time, context_value, context_observed, context_valid)."""
    values = torch.as_tensor(values, dtype=torch.float32)
    values = values[:, None] if values.ndim == 1 else values
    observed = (torch.ones_like(values, dtype=torch.bool) if observed is None
                else torch.as_tensor(observed).reshape(values.shape))
    time = torch.as_tensor(times, dtype=torch.int64)
    return time[None], values[None], observed[None], torch.ones(1, len(time), dtype=torch.bool)


# -- seasonal_naive: hand-worked -------------------------------------------------------------
def test_regular_daily_series_with_weekly_season_is_the_textbook_seasonal_naive():
    y = torch.arange(30.0) ** 1.5                       # distinct values: no lucky matches
    times = EPOCH + torch.arange(30) * DAY
    ct, cv, co, valid = _window(times[:16], y[:16])
    naive = seasonal_naive(ct, cv, co, valid, times[None, 16:], 7 * DAY)[0, :, 0]
    # y[t - m * ceil(h / m)], origin index 15, h = 1..14, m = 7
    expected = [y[15 + h - 7 * math.ceil(h / 7)] for h in range(1, 15)]
    torch.testing.assert_close(naive, torch.stack(expected))
    assert naive[0] == y[9] and naive[6] == y[15] and naive[7] == y[9]  # y[t-7], then y[t-14]


def test_irregular_times_take_the_last_value_a_whole_number_of_seasons_earlier():
    hours = [0, 5, 13, 22, 30]                          # origin 30 h
    ct, cv, co, valid = _window([EPOCH + h * HOUR for h in hours], [10.0, 11, 12, 13, 14])
    queries = torch.tensor([[31, 40, 54, 60, 78]]) * HOUR + EPOCH
    naive = seasonal_naive(ct, cv, co, valid, queries, 24 * HOUR)[0, :, 0]
    # 31-24=7 -> 5h; 40-24=16 -> 13h; 54-24=30 -> 30h (the origin itself);
    # 60-24=36 > 30 so k=2: 12 -> 5h; 78-48=30 -> 30h
    assert naive.tolist() == [11.0, 12.0, 14.0, 11.0, 14.0]


def test_times_are_compared_in_exact_integer_nanoseconds():
    """At today's epoch float64 resolves 256 ns: one nanosecond decides the sample here."""
    ct, cv, co, valid = _window([EPOCH, EPOCH + 1], [1.0, 2.0])
    queries = torch.tensor([[EPOCH + DAY, EPOCH + DAY + 1]])
    naive = seasonal_naive(ct, cv, co, valid, queries, DAY)
    assert naive[0, :, 0].tolist() == [1.0, 2.0]


def test_missing_values_are_looked_up_per_channel():
    days = torch.arange(10) * DAY + EPOCH
    values = torch.stack([torch.arange(10.0), 100 + torch.arange(10.0)], -1)
    observed = torch.ones(10, 2, dtype=torch.bool)
    observed[3, 1] = observed[2, 1] = False             # channel 1 lacks days 2 and 3
    ct, cv, co, valid = _window(days[:8], values[:8], observed[:8])
    naive = seasonal_naive(ct, cv, co, valid, days[None, 8:10], 5 * DAY)[0]
    # lookups: day 3 and day 4 (origin day 7); channel 1 falls back to day 1 for day 3
    assert naive.tolist() == [[3.0, 101.0], [4.0, 104.0]]


def test_right_padding_changes_nothing_even_at_the_origin():
    hours = [0, 6, 12, 18]
    ct, cv, co, valid = _window([EPOCH + h * HOUR for h in hours], [1.0, 2.0, 3.0, 4.0])
    queries = EPOCH + torch.tensor([[19, 30, 42]]) * HOUR   # 42-24 = 18: the origin exactly
    alone = seasonal_naive(ct, cv, co, valid, queries, 24 * HOUR)
    # pad to 7 tokens as collate_windows does; a (wrongly) observed pad value must not leak
    pad = 3
    ct_p = torch.cat([ct, ct[:, -1:].expand(1, pad)], 1)
    cv_p = torch.cat([cv, torch.full((1, pad, 1), 99.0)], 1)
    co_p = torch.cat([co, torch.ones(1, pad, 1, dtype=torch.bool)], 1)
    valid_p = torch.cat([valid, torch.zeros(1, pad, dtype=torch.bool)], 1)
    padded = seasonal_naive(ct_p, cv_p, co_p, valid_p, queries, 24 * HOUR)
    assert alone[0, :, 0].tolist() == [4.0, 2.0, 4.0]    # 19-24 < 0 h: naive fallback
    torch.testing.assert_close(padded, alone)


def test_no_observation_early_enough_falls_back_to_the_last_observed_value():
    ct, cv, co, valid = _window([EPOCH + h * HOUR for h in (0, 1, 2)], [[5.0, 7.0]] * 2 +
                                [[6.0, 8.0]], [[True, True], [True, True], [True, False]])
    # season 24 h > the 2 h context: lookup 3-24 = -21 h is before the first sample
    naive = seasonal_naive(ct, cv, co, valid, torch.tensor([[EPOCH + 3 * HOUR]]), 24 * HOUR)
    assert naive[0, 0].tolist() == [6.0, 7.0]           # each channel's last observed value
    never = _window([EPOCH], [[1.0, 2.0]], [[True, False]])
    naive = seasonal_naive(*never, torch.tensor([[EPOCH + HOUR]]), HOUR)
    assert naive[0, 0, 0] == 1.0 and torch.isnan(naive[0, 0, 1])   # nothing to repeat


def _reference_naive(times, values, observed, n_valid, queries, season):
    """The docstring's rule, one query at a time, in Python integers."""
    out = np.full((len(queries), values.shape[1]), np.nan)
    times = [int(t) for t in times[:n_valid]]
    origin = times[-1]
    for i, t in enumerate(int(q) for q in queries):
        k = 1
        while t - k * season > origin:
            k += 1
        lookup = t - k * season
        for c in range(values.shape[1]):
            seen = [j for j in range(n_valid) if observed[j, c]]
            early = [j for j in seen if times[j] <= lookup]
            if early:
                out[i, c] = values[early[-1], c]
            elif seen:
                out[i, c] = values[seen[-1], c]
    return out


def test_batched_naive_matches_a_brute_force_reference_on_random_irregular_windows():
    rng = np.random.default_rng(0)
    b, nc, nh, channels, season = 6, 12, 5, 2, 7 * HOUR
    lengths = rng.integers(1, nc + 1, b)
    ct = np.zeros((b, nc), np.int64)
    for i, n in enumerate(lengths):
        ct[i, :n] = EPOCH + np.cumsum(rng.integers(1, 4 * HOUR, n))
        ct[i, n:] = ct[i, n - 1]
    cv = rng.normal(size=(b, nc, channels)).astype(np.float32)
    co = rng.random((b, nc, channels)) < 0.7
    valid = np.arange(nc)[None] < lengths[:, None]
    co &= valid[..., None]
    tt = ct[np.arange(b), lengths - 1][:, None] + np.cumsum(rng.integers(1, 9 * HOUR,
                                                                          (b, nh)), 1)
    got = seasonal_naive(torch.from_numpy(ct), torch.from_numpy(cv), torch.from_numpy(co),
                         torch.from_numpy(valid), torch.from_numpy(tt), season)
    for i in range(b):
        expected = _reference_naive(ct[i], cv[i], co[i], lengths[i], tt[i], season)
        np.testing.assert_array_equal(got[i].numpy(), expected.astype(np.float32))


def _daily_at_local_midnight(tz, stride=1, season=None):
    """Daily rows at local midnight in ``tz`` across both 2021/22 DST changes of New York,
    y = day index; the test split starts before the fall-back and ends after the
    spring-forward."""
    from posenc.tasks import TimeSeriesDataModule

    days = pd.date_range("2021-06-01", "2022-04-30", freq="D")
    frame = pd.DataFrame({"ts": days, "y": np.arange(len(days), dtype=np.float64)})
    return TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="y", tz=tz,
                                context_length=14, horizon=7, stride=stride,
                                season=season, val_start="2021-09-15",
                                test_start="2021-10-15", eval_batch_size=512)


def _local_day_index(utc_ns, tz):
    """Days since 2021-06-01 of each UTC instant's local calendar date in ``tz``."""
    stamps = pd.to_datetime(utc_ns.reshape(-1).numpy(), utc=True).tz_convert(tz)
    dates = stamps.tz_localize(None).normalize()
    return torch.from_numpy(((dates - pd.Timestamp("2021-06-01")).days.to_numpy()
                             .astype(np.float64)).reshape(utc_ns.shape))


@pytest.mark.parametrize("season_days", [1, 7])
def test_day_seasons_repeat_the_same_local_day_across_dst(season_days):
    tz = "America/New_York"
    dm = _daily_at_local_midnight(tz)
    dm.setup("test")
    [batch] = list(dm.test_dataloader())
    assert {pd.Timestamp(t, tz="UTC").tz_convert(tz).utcoffset() for t in
            batch["target_time"].flatten().tolist()} == {pd.Timedelta("-4h"),
                                                        pd.Timedelta("-5h")}
    # context values = the local day index of each row, built from the UTC times alone
    context = _local_day_index(batch["context_time"], tz)[..., None]
    naive = seasonal_naive(batch["context_time"], context, batch["context_observed"],
                           batch["context_valid"], batch["target_time"], season_days * DAY,
                           context_local=batch["context_local"],
                           target_local=batch["target_local"])[..., 0]
    target_day = _local_day_index(batch["target_time"], tz)
    origin_day = context[:, -1, 0][:, None]             # no padding: every window is full
    ahead = target_day - origin_day                      # 1..7 local days
    expected = target_day - season_days * torch.ceil(ahead / season_days)
    assert ahead.min() == 1 and ahead.max() == 7
    torch.testing.assert_close(naive, expected, rtol=0, atol=0)


@pytest.mark.parametrize("season, expected", [("1D", 4.0), ("7D", 7.0)])
def test_naive_test_metrics_are_the_same_with_and_without_a_dst_zone(tmp_path, season,
                                                                       expected):
    from posenc.tasks import Forecaster

    from ..conftest import cpu_trainer

    # y = day index, horizon 7: the value a local day back at the origin is off by h at
    # step h (mean 4); a local week back, by 7 at every step.
    results = {}
    for tz in ("America/New_York", None):
        dm = _daily_at_local_midnight(tz, stride=7, season=season)
        model = Forecaster(**dm.model_sizes(), dim=16, depth=1, num_heads=2)
        [results[tz]] = cpu_trainer(tmp_path).test(model, dm, verbose=False)
    for tz, result in results.items():
        assert result["test/mae_naive"] == pytest.approx(expected, abs=1e-4), tz
        assert result["test/rmse_naive"] == pytest.approx(
            math.sqrt(np.mean(np.square(np.arange(1, 8)))) if season == "1D" else 7.0,
            abs=1e-4), tz


def test_sub_day_seasons_stay_in_elapsed_time_across_dst():
    # hourly UTC instants over the New York fall-back: local 01:00 occurs twice
    utc = pd.date_range("2021-11-06 12:00", periods=24, freq="h", tz="UTC").as_unit("ns")
    local = utc.tz_convert("America/New_York").tz_localize(None)
    times = torch.from_numpy(utc.asi8.copy())
    ct, cv, co, valid = _window(times[:20], torch.arange(20.0))
    queries = times[None, 20:]
    kwargs = dict(context_local=torch.from_numpy(local.asi8[:20].copy())[None],
                  target_local=torch.from_numpy(local.asi8[20:].copy())[None])
    for season in (HOUR, 6 * HOUR):
        with_local = seasonal_naive(ct, cv, co, valid, queries, season, **kwargs)
        torch.testing.assert_close(with_local, seasonal_naive(ct, cv, co, valid, queries,
                                                              season))
    # 3 h back in real time from hours 20..23 -> hours 17, 18, 19, 17 (k = 2 for the last)
    three = seasonal_naive(ct, cv, co, valid, queries, 3 * HOUR, **kwargs)[0, :, 0]
    assert three.tolist() == [17.0, 18.0, 19.0, 17.0]


def test_a_repeated_local_hour_is_looked_up_before_the_clock_first_passes_it():
    # 30-min rows from local midnight of the New York fall-back (2021-11-07): local times
    # 00:00 00:30 01:00 01:30 01:00 01:30 02:00 ... (indices 0..6: 01:00 EDT is 2, EST 4)
    utc = pd.date_range("2021-11-07 04:00", "2021-11-08 05:30", freq="30min",
                        tz="UTC").as_unit("ns")
    local = utc.tz_convert("America/New_York").tz_localize(None)
    assert local[2] == local[4] == pd.Timestamp("2021-11-07 01:00")
    ct, cv, co, valid = _window(torch.from_numpy(utc.asi8.copy()), torch.arange(len(utc)))
    query = pd.DatetimeIndex(["2021-11-08 01:00", "2021-11-08 01:30"])    # unambiguous
    naive = seasonal_naive(
        ct, cv, co, valid,
        torch.from_numpy(query.tz_localize("America/New_York").as_unit("ns").asi8.copy())[None],
        DAY, context_local=torch.from_numpy(local.as_unit("ns").asi8.copy())[None],
        target_local=torch.from_numpy(query.as_unit("ns").asi8.copy())[None])
    # 01:00 a local day back: the first 01:00 (EDT); 01:30: the last row before the clock
    # passes 01:30 (02:00), the EST one. 24 h of elapsed time would give 4 and 5.
    assert naive[0, :, 0].tolist() == [2.0, 5.0]


def test_local_times_must_come_in_pairs_of_int64_tensors_shaped_as_the_times():
    ct, cv, co, valid, tt = _good()
    with pytest.raises(ValueError, match="context_local and target_local go together"):
        seasonal_naive(ct, cv, co, valid, tt, DAY, context_local=ct)
    with pytest.raises(TypeError, match="target_local must be a int64"):
        seasonal_naive(ct, cv, co, valid, tt, DAY, context_local=ct, target_local=tt.double())
    with pytest.raises(ValueError, match=r"context_local must be \(B, Nc\) as context_time"):
        seasonal_naive(ct, cv, co, valid, tt, DAY, context_local=ct[:, :1], target_local=tt)


# -- seasonal_naive: hostile input -----------------------------------------------------------
def _good():
    return _window([EPOCH, EPOCH + HOUR], [1.0, 2.0]) + (torch.tensor([[EPOCH + 2 * HOUR]]),)


@pytest.mark.parametrize("index, bad, error, match", [
    (0, lambda t: t.double(), TypeError, "context_time must be a int64"),
    (4, lambda t: t.float(), TypeError, "target_time must be a int64"),
    (1, lambda t: t.long(), TypeError, "context_value must be a floating point tensor"),
    (2, lambda t: t.float(), TypeError, "context_observed must be a bool tensor"),
    (3, lambda t: t.long(), TypeError, "context_valid must be a bool tensor"),
    (0, lambda t: t.numpy(), TypeError, "context_time must be a tensor, got ndarray"),
    (0, lambda t: t[0], ValueError, r"context_time must have 2 dimensions, got shape \(2,\)"),
    (1, lambda t: t[:, :1], ValueError, r"context_value must be \(B, Nc, C\) = \(1, 2, 1\)"),
    (2, lambda t: t.expand(1, 2, 3), ValueError, "context_observed must be"),
    (3, lambda t: t[:, :1], ValueError, r"context_valid must be \(B, Nc\)"),
    (4, lambda t: t.expand(2, 1), ValueError, "target_time must be .* B = 1"),
])
def test_seasonal_naive_rejects_bad_tensors_naming_them(index, bad, error, match):
    args = list(_good())
    args[index] = bad(args[index])
    with pytest.raises(error, match=match):
        seasonal_naive(*args, HOUR)


@pytest.mark.parametrize("season, error", [(0, ValueError), (-DAY, ValueError),
                                           (2**62 + 1, ValueError),
                                           (1.5 * HOUR, TypeError), (True, TypeError),
                                           (pd.Timedelta("1h"), TypeError)])
def test_seasonal_naive_rejects_bad_seasons(season, error):
    with pytest.raises(error, match="season_ns"):
        seasonal_naive(*_good(), season)


# -- natural seasons, season labels, the seasonal error of a history ----------------------------
@pytest.mark.parametrize("step, context, seasons", [
    ("1h", None, ["1D", "7D"]), ("30min", "7D", ["1D", "7D"]), ("1h", "72h", ["1D"]),
    ("11min", None, []),                                  # divides neither: persistence
    ("1D", None, ["7D", "365D"]), ("1D", "112D", ["7D"]), ("7D", None, ["365D"]),
    ("31D", None, ["365D"]), ("91D", None, ["365D"]), ("730D", None, []),
])
def test_natural_seasons_are_the_calendar_periods_a_step_divides(step, context, seasons):
    got = natural_seasons(pd.Timedelta(step), None if context is None else pd.Timedelta(context))
    assert got == ([pd.Timedelta(s) for s in seasons] or [pd.Timedelta(1, "ns")])


def test_season_labels_name_the_logged_baselines():
    labels = [season_label(pd.Timedelta(s).value) for s in ("1D", "7D", "24h", "36h", "30min",
                                                            "90s", "1ns", "1500ms")]
    assert labels == ["1d", "7d", "1d", "36h", "30min", "90s", "persistence", "1500000000ns"]


def test_seasonality_accepts_python_and_numpy_durations():
    assert seasonality_for_step(datetime.timedelta(minutes=15)) == 96
    assert seasonality_for_step(np.timedelta64(1, "h")) == 24


@pytest.mark.parametrize("step, error", [
    ("1h", TypeError), (3600, TypeError), (pd.NaT, TypeError),
    (pd.Timedelta(0), ValueError), (pd.Timedelta("-1h"), ValueError),
    (np.timedelta64("NaT"), ValueError),
])
def test_seasonality_and_natural_seasons_reject_non_durations(step, error):
    for function in (seasonality_for_step, natural_seasons):
        with pytest.raises(error, match="step must be"):
            function(step)


def test_seasonal_error_is_the_whole_history_before_the_origin_within_its_series():
    # series 0: 1, 3, NaN, 6, 2, 8 (rows 0-5); series 1: 5, 5, 9 (rows 6-8); lag 2
    values = np.array([1, 3, np.nan, 6, 2, 8, 5, 5, 9.0])[:, None]
    error = SeasonalError(values, np.array([0, 6, 9]), 2)
    got = error(np.array([0, 0, 1, 1, 0]), np.array([6, 5, 9, 8, 2]))
    # origin 6: pairs (6-3), (8-6) (2-NaN left out) -> |3|, |2|; origin 5: (6-3) only;
    # series 1, origin 9 (3 rows > lag): (9-5) -> 4; origin 8 (2 rows <= lag): lag 1, |5-5|;
    # series 0, origin 2 (2 rows): lag 1, |3-1| = 2
    np.testing.assert_allclose(got[:, 0], [[2.5, 6.5], [3, 9], [4, 16], [0, 0], [2, 4]])
    # no observed pair: NaN (GluonTS's masked mean), never a pair across series
    lone = SeasonalError(np.array([[1.0], [7.0], [np.nan]]), np.array([0, 1, 3]), 1)
    assert np.isnan(lone(np.array([0, 1]), np.array([1, 3]))).all()


# -- ForecastMetrics: hand-worked ------------------------------------------------------------
def _ones(*shape):
    return torch.ones(*shape, dtype=torch.bool)


def test_metrics_match_hand_computed_values_per_series_and_aggregated():
    # two windows of series 0, one of series 1; C = 1, Nh = 2; each history's seasonal error
    # that of 1, 3, 2, 6 at lag 1: mean |d| = 7/3, mean d^2 = 21/3
    seasonal = torch.tensor([[[7 / 3, 7.0]]] * 3)
    target = torch.tensor([[6.0, 8.0], [2.0, 4.0], [10.0, 0.0]])[..., None]
    pred = torch.tensor([[5.0, 5.0], [2.0, 2.0], [7.0, 9.0]])[..., None]
    observed = torch.tensor([[True, True], [True, True], [True, False]])[..., None]
    quant = torch.stack([pred - 1, pred, pred + 1], -1)          # levels 0.1, 0.5, 0.9
    metric = ForecastMetrics([0.1, 0.5, 0.9])
    metric.update(pred, target, observed, torch.tensor([0, 0, 1]), _ones(3, 4, 1), seasonal,
                  quant)
    # abs errors: series 0: 1, 3, 0, 2 (4 points); series 1: 3 (the 9 is unobserved)
    per = metric.per_series()
    torch.testing.assert_close(per["mae"], torch.tensor([6 / 4, 3.0], dtype=torch.float64))
    torch.testing.assert_close(per["rmse"], torch.tensor([math.sqrt(14 / 4), 3.0],
                                                         dtype=torch.float64))
    # window MASEs: (2 / (7/3)), (1 / (7/3)); series 1: 3 / (7/3)
    torch.testing.assert_close(per["mase"], torch.tensor([1.5 / (7 / 3), 3 / (7 / 3)],
                                                         dtype=torch.float64))
    # rows' RMSSE: sqrt(5 / 7), sqrt(2 / 7); sMAPE: 2 * (1/11 + 3/13) / 2, 2 * (0/4 + 2/6) / 2
    assert per["rmsse"][0].item() == pytest.approx((math.sqrt(5 / 7) + math.sqrt(2 / 7)) / 2)
    assert per["smape"].tolist() == pytest.approx([(1 / 11 + 3 / 13 + 1 / 3) / 2, 6 / 17])
    assert per["rmsse"][1].item() == pytest.approx(math.sqrt(9 / 7))
    assert per["windows"].tolist() == [2.0, 1.0] and per["points"].tolist() == [4.0, 1.0]
    # pinball per point at q (e = y - yhat_q): computed by hand for series 1 (y=10, yhat 6,7,8)
    wql_1 = np.mean([2 * 0.1 * 4 / 10, 2 * 0.5 * 3 / 10, 2 * 0.9 * 2 / 10])
    assert per["wql"][1].item() == pytest.approx(wql_1)
    # [yhat - 1, yhat + 1] holds the points with |error| <= 1: series 0's 1 and 0 of 1, 3, 0, 2
    assert per["coverage_80"].tolist() == [0.5, 0.0]
    out = metric.compute()
    assert out["mae"].item() == pytest.approx(9 / 5)
    assert out["rmse"].item() == pytest.approx(math.sqrt(23 / 5))
    assert out["mase"].item() == pytest.approx((2 + 1 + 3) / 3 / (7 / 3))
    assert set(out) == {"mae", "rmse", "mase", "rmsse", "smape", "wql", "coverage_80",
                        "unscored"}
    assert out["mae"].dtype == torch.float32 and out["unscored"].item() == 0
    assert out["coverage_80"].item() == pytest.approx(2 / 5)


def test_central_intervals_pair_each_level_below_one_half_with_its_mirror():
    assert central_intervals([0.1, 0.25, 0.5, 0.75, 0.9]) == {"coverage_80": (0, 4),
                                                              "coverage_50": (1, 3)}
    assert central_intervals([0.05, 0.5, 0.95]) == {"coverage_90": (0, 2)}
    assert central_intervals([0.2, 0.5, 0.9]) == {} == central_intervals([])
    metric = ForecastMetrics([0.2, 0.5, 0.9])           # no symmetric pair: no coverage
    ones = torch.ones(1, 2, 1)
    metric.update(ones, ones, _ones(1, 2, 1), torch.tensor([0]), _ones(1, 3, 1),
                  torch.ones(1, 1, 2), ones[..., None].expand(1, 2, 1, 3))
    assert not any(name.startswith("coverage") for name in metric.compute())


def _gluonts_quantile_loss(target, forecast, q):
    """gluonts.evaluation.metrics.quantile_loss, transcribed."""
    return 2 * np.sum(np.abs((forecast - target) * ((target <= forecast) - q)))


def _random_windows(seed, w=23, nh=4, nc=9, channels=2, levels=(0.1, 0.5, 0.9), series=5):
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(w, nh, channels, generator=g) * 3 + 10
    pred = target + torch.randn(w, nh, channels, generator=g)
    quant = pred[..., None] + torch.tensor(levels) - 0.5 + 0.3 * torch.randn(
        w, nh, channels, len(levels), generator=g)
    observed = torch.rand(w, nh, channels, generator=g) < 0.8
    context_observed = torch.rand(w, nc, channels, generator=g) < 0.9
    seasonal = torch.rand(w, channels, 2, generator=g) + 0.5
    seasonal[1, 0] = float("nan")                       # a history without a pair
    ids = torch.randint(0, series, (w,), generator=g)
    ids[ids == 3] = 2                                   # series 3 has no window
    return pred, target, observed, ids, context_observed, seasonal, quant


def _direct(windows, levels, num_series):
    """Per-series metrics straight from the definitions, window by window in numpy."""
    pred, target, observed, ids, cobs, seasonal, quant = (t.double().numpy() for t in windows)
    observed = observed.astype(bool) & cobs.astype(bool).any(1, keepdims=True)
    rows = {}
    for s in range(num_series):
        err, ys, qls, n, inside = [], [], np.zeros(len(levels)), 0, 0
        ratios = {"mase": [], "rmsse": [], "smape": []}
        for w in np.flatnonzero(ids == s):
            for c in range(pred.shape[2]):
                m = observed[w, :, c]
                e, y = pred[w, m, c] - target[w, m, c], target[w, m, c]
                err += list(e)
                ys += list(y)
                for i, q in enumerate(levels):
                    qls[i] += _gluonts_quantile_loss(y, quant[w, m, c, i], q)
                low, high = quant[w, m, c, levels.index(0.1)], quant[w, m, c, levels.index(0.9)]
                inside += int(np.sum((low <= y) & (y <= high)))
                if m.any():
                    ratios["smape"].append(2 * np.mean(np.abs(e) / (np.abs(y)
                                                                    + np.abs(pred[w, m, c]))))
                    if not np.isnan(seasonal[w, c, 0]):
                        ratios["mase"].append(np.abs(e).mean() / seasonal[w, c, 0])
                        ratios["rmsse"].append(np.sqrt((e ** 2).mean() / seasonal[w, c, 1]))
            n += 1
        err = np.array(err)
        rows[s] = {"mae": np.abs(err).mean() if n else np.nan,
                   "rmse": np.sqrt((err ** 2).mean()) if n else np.nan,
                   **{k: np.mean(v) if v else np.nan for k, v in ratios.items()},
                   "wql": np.mean(qls / np.abs(ys).sum()) if n else np.nan,
                   "coverage_80": inside / len(err) if n else np.nan, "inside": inside,
                   "err": err, "ratios": ratios, "ql": qls, "abs_y": np.abs(ys).sum()}
    return rows


def _feed(metric, windows, bounds):
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        if b > a:
            *point, quant = (t[a:b] for t in windows)
            metric.update(*point, quantile_prediction=quant)


@pytest.mark.parametrize("bounds", [[0, 23], list(range(24)), [0, 4, 5, 17, 23],
                                    [0, 0, 11, 23]])
def test_accumulation_equals_a_direct_computation_however_windows_are_batched(bounds):
    levels = [0.1, 0.5, 0.9]
    windows = _random_windows(0, levels=tuple(levels))
    metric = ForecastMetrics(levels)
    _feed(metric, windows, bounds)
    direct = _direct(windows, levels, 5)
    per = metric.per_series(num_series=5)
    for name in ("mae", "rmse", "mase", "rmsse", "smape", "wql", "coverage_80"):
        np.testing.assert_allclose(per[name].numpy(), [direct[s][name] for s in range(5)],
                                   rtol=1e-5)
    assert math.isnan(per["mae"][3]) and per["windows"][3] == 0
    rows = direct.values()
    err = np.concatenate([r["err"] for r in rows])
    ratios = {k: sum((r["ratios"][k] for r in rows), []) for k in ("mase", "rmsse", "smape")}
    wql = np.mean(sum(r["ql"] for r in rows) / sum(r["abs_y"] for r in rows))
    out = metric.compute()
    assert out["mae"].item() == pytest.approx(np.abs(err).mean(), rel=1e-5)
    assert out["rmse"].item() == pytest.approx(np.sqrt((err ** 2).mean()), rel=1e-5)
    for name, values in ratios.items():
        assert out[name].item() == pytest.approx(np.mean(values), rel=1e-5)
    assert out["wql"].item() == pytest.approx(wql, rel=1e-5)
    coverage = sum(r["inside"] for r in rows) / len(err)
    assert 0.2 < coverage < 0.9                         # the data has points on both sides
    assert out["coverage_80"].item() == pytest.approx(coverage, rel=1e-6)


def test_zero_denominators_give_inf_or_are_left_out_as_gluonts_does():
    # row 0: error 1 over a zero seasonal error -> MASE inf; row 1: a perfect forecast of
    # zeros over a zero seasonal error -> 0 / 0, and every sMAPE term 0 / 0: both left out
    pred = torch.tensor([[[1.0]], [[0.0]]])
    metric = ForecastMetrics(None)
    metric.update(pred, torch.zeros(2, 1, 1), _ones(2, 1, 1), torch.tensor([0, 1]),
                  _ones(2, 3, 1), torch.zeros(2, 1, 2))
    per, out = metric.per_series(), metric.compute()
    assert math.isinf(out["mase"].item()) and math.isinf(out["rmsse"].item())
    assert out["smape"].item() == 2.0 and "wql" not in out
    assert math.isnan(per["mase"][1]) and math.isnan(per["smape"][1])


def test_per_series_frame_names_each_series_by_its_key():
    metric = ForecastMetrics(None)
    pred = torch.zeros(2, 1, 1)
    metric.update(pred, pred + torch.tensor([1.0, 3.0])[:, None, None], _ones(2, 1, 1),
                  torch.tensor([2, 0]), _ones(2, 2, 1), torch.ones(2, 1, 2))
    frame = metric.per_series_frame([("CA", 1), ("NY", 1), ("TX", 2)], ["state", "group"])
    assert list(frame.columns) == ["state", "group", "mae", "rmse", "mase", "rmsse", "smape",
                                   "windows", "points", "unscored"]
    assert frame["state"].tolist() == ["CA", "NY", "TX"]
    assert frame["mae"].tolist()[::2] == [3.0, 1.0] and math.isnan(frame["mae"][1])
    assert frame["windows"].tolist() == [1, 0, 1]
    single = ForecastMetrics(None)
    single.update(pred[:1], pred[:1] + 2, _ones(1, 1, 1), torch.tensor([0]),
                  _ones(1, 2, 1), torch.ones(1, 1, 2))
    assert single.per_series_frame([()], []).to_dict("list") == {
        "mae": [2.0], "rmse": [2.0], "mase": [2.0], "rmsse": [2.0], "smape": [2.0],
        "windows": [1], "points": [1],
        "unscored": [0]}


def test_the_seasonal_naive_baseline_is_scored_on_the_same_windows():
    days = EPOCH + torch.arange(12) * DAY
    y = torch.tensor([1.0, 2, 3, 4, 5, 6, 7, 2, 3, 4, 5, 9])[None, :, None]
    ct, cv, co, valid = _window(days[:9], y[0, :9])
    naive = seasonal_naive(ct, cv, co, valid, days[None, 9:], 7 * DAY)   # y[2], y[3], y[4]
    metric = ForecastMetrics([0.5])
    # the history's lag-7 errors |2-1|, |3-2| -> 1
    seasonal = SeasonalError(y[0].double().numpy(), np.array([0, 12]), 7)(np.array([0]),
                                                                         np.array([9]))
    metric.update(naive, y[:, 9:], _ones(1, 3, 1), torch.tensor([0]), co,
                  torch.from_numpy(seasonal).float(), naive[..., None])
    # |4-3|, |5-4|, |9-5| -> MAE 2, over 1 -> MASE 2; wQL 2*0.5*6/18
    out = metric.compute()
    assert naive[0, :, 0].tolist() == [3.0, 4.0, 5.0]
    assert (out["mae"].item(), out["mase"].item()) == (2.0, 2.0)
    assert out["wql"].item() == pytest.approx(6 / 18)


def test_points_without_context_history_are_left_out_of_model_and_naive_alike():
    # window 0: context observed, MAE 1 (model) and 2 (naive); window 1: the channel is never
    # observed in its context (an outage longer than the context) -> naive NaN: both drop it
    context = torch.tensor([[1.0, 2.0], [0.0, 0.0]])[..., None]
    context_observed = torch.tensor([[True, True], [False, False]])[..., None]
    target = torch.tensor([[3.0, 4.0], [5.0, 6.0]])[..., None]
    observed = torch.tensor([[True, True], [True, False]])[..., None]
    times = EPOCH + torch.arange(4)[None].expand(2, 4) * DAY
    naive = seasonal_naive(times[:, :2], context, context_observed, _ones(2, 2), times[:, 2:],
                           DAY)
    assert naive[0, :, 0].tolist() == [2.0, 2.0] and torch.isnan(naive[1]).all()
    model = target - 1
    results = {}
    for name, pred in (("model", model), ("naive", naive)):
        metric = ForecastMetrics([0.5])
        metric.update(pred, target, observed, torch.tensor([0, 1]), context_observed,
                      torch.ones(2, 1, 2), pred[..., None])
        results[name] = (metric.compute(), metric.per_series())
    (model_out, model_per), (naive_out, naive_per) = results["model"], results["naive"]
    assert (model_out["mae"].item(), naive_out["mae"].item()) == (1.0, 1.5)   # |3-2|, |4-2|
    assert naive_out["rmse"].item() == pytest.approx(math.sqrt(5 / 2))
    assert naive_out["wql"].item() == pytest.approx(2 * 0.5 * 3 / 7)        # sum |y| = 7
    assert model_out["unscored"].item() == naive_out["unscored"].item() == 1.0
    for per in (model_per, naive_per):
        assert per["points"].tolist() == [2.0, 0.0] and per["unscored"].tolist() == [0.0, 1.0]
        assert math.isnan(per["mae"][1]) and per["windows"].tolist() == [1.0, 1.0]


def test_an_outage_longer_than_the_context_leaves_naive_test_metrics_finite(tmp_path):
    from posenc.tasks import Forecaster, TimeSeriesDataModule

    from ..conftest import cpu_trainer

    # "gap" (y = day index) misses days 44-51, longer than the 4-day context: the test window
    # of days 52-53 has no context observation. "full" is y = 2 * day index.
    days = pd.date_range("2021-01-01", periods=60, freq="D")
    gap = np.arange(60.0)
    gap[44:52] = np.nan
    frame = pd.concat([pd.DataFrame({"id": "gap", "ts": days, "y": gap}),
                       pd.DataFrame({"id": "full", "ts": days, "y": 2 * np.arange(60.0)})])
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="y",
                              series_column="id", context_length=4, horizon=2, stride=2,
                              val_start="2021-02-01", test_start="2021-02-10")
    model = Forecaster(**dm.model_sizes(), dim=16, depth=1, num_heads=2)
    [result] = cpu_trainer(tmp_path).test(model, dm, verbose=False)
    # test horizons start on days 40, 42, ..., 58. The 1-day naive repeats the last observed
    # context value. full: errors 2, 4 in 10 windows; gap: 1, 2 in the 5 windows with
    # observed targets and context (40, 42, 54, 56, 58); 52-53 left out (2 points).
    assert result["test/mae_naive"] == pytest.approx((10 * 6 + 5 * 3) / 30, abs=1e-4)
    assert result["test/rmse_naive"] == pytest.approx(math.sqrt((10 * 20 + 5 * 5) / 30),
                                                      abs=1e-4)
    assert result["test/unscored"] == result["test/unscored_naive"] == 2
    per = model.test_per_series
    assert per["id"].tolist() == ["full", "gap"]
    assert per["points"].tolist() == per["points_naive"].tolist() == [20, 10]
    assert per["unscored"].tolist() == [0, 2]
    # the model is scored on the same 30 points
    errors = []
    for batch in dm.test_dataloader():
        pred = model.predict_step(batch)["prediction"]
        truth = batch["target_value"] * batch["scale"][:, None] + batch["loc"][:, None]
        scored = batch["target_observed"] & batch["context_observed"].any(1, keepdim=True)
        errors.append((pred - truth).abs()[scored])
    errors = torch.cat(errors)
    assert len(errors) == 30 and result["test/mae"] == pytest.approx(errors.mean().item(),
                                                                     rel=1e-5)


# -- ForecastMetrics under DDP ---------------------------------------------------------------
def _halves(seed):
    windows = _random_windows(seed)
    first, second = ForecastMetrics([0.1, 0.5, 0.9]), ForecastMetrics([0.1, 0.5, 0.9])
    _feed(first, windows, [0, 5, 11])
    _feed(second, windows, [11, 23])
    whole = ForecastMetrics([0.1, 0.5, 0.9])
    _feed(whole, windows, [0, 23])
    return first, second, whole


def _assert_same(metric, whole):
    for name, value in whole.compute().items():
        torch.testing.assert_close(metric.compute()[name], value)
    for name, value in whole.per_series(5).items():
        torch.testing.assert_close(metric.per_series(5)[name], value, equal_nan=True)


def test_merging_two_processes_states_equals_one_process_seeing_everything():
    first, second, whole = _halves(2)
    first.merge_state(second)
    _assert_same(first, whole)


def _fake_gather(other):
    """A two-rank all-gather in one process: this rank's tensor, then ``other``'s state of the
    same name (torchmetrics gathers the states in registration order, one tensor each)."""
    names = iter(other._reductions)

    def gather(tensor, group=None):
        value = getattr(other, next(names))
        if isinstance(value, list):
            value = torch.cat(value) if value else torch.tensor([])  # as torchmetrics pads
        return [tensor, value]
    return gather


@pytest.mark.filterwarnings("ignore:The ``compute`` method of metric ForecastMetrics")
@pytest.mark.parametrize("empty_rank", [False, True])
def test_cat_reduction_across_ranks_equals_one_process_seeing_everything(empty_rank):
    first, second, whole = _halves(3)
    if empty_rank:   # a rank that saw no window: torchmetrics sends a 1D float empty state
        second, first = first, ForecastMetrics([0.1, 0.5, 0.9])
        whole = second
    for method in ("compute", "per_series"):
        rank = ForecastMetrics([0.1, 0.5, 0.9], distributed_available_fn=lambda: True)
        if first.update_called:
            rank.merge_state(first)
        rank.dist_sync_fn = _fake_gather(second)
        got = rank.compute() if method == "compute" else rank.per_series(5)
        want = whole.compute() if method == "compute" else whole.per_series(5)
        for name, value in want.items():
            torch.testing.assert_close(got[name], value, equal_nan=True)
        assert all(isinstance(getattr(rank, n), list) for n in rank._reductions)  # unsynced


# -- ForecastMetrics: hostile input ----------------------------------------------------------
def _update_args():
    pred = torch.zeros(2, 3, 1)
    return dict(prediction=pred, target=pred + 1, observed=_ones(2, 3, 1),
                series=torch.tensor([0, 1]), context_observed=_ones(2, 4, 1),
                seasonal_error=torch.ones(2, 1, 2))


@pytest.mark.parametrize("key, bad, error, match", [
    ("prediction", lambda t: t.long(), TypeError, "prediction must be a floating point"),
    ("target", lambda t: t[:, :2], ValueError, r"target must be \(B, Nh, C\) as prediction"),
    ("observed", lambda t: t.float(), TypeError, "observed must be a bool tensor"),
    ("series", lambda t: t.float(), TypeError, r"series must be a integer \(series indices\)"),
    ("series", lambda t: t[:1], ValueError, r"series must be \(B,\) = \(2,\)"),
    ("context_observed", lambda t: t.expand(2, 4, 2), ValueError,
     r"context_observed must be \(B, Nc, C\)"),
    ("seasonal_error", lambda t: t.long(), TypeError, "seasonal_error must be a floating"),
    ("seasonal_error", lambda t: t[..., :1], ValueError, r"seasonal_error must be \(B, C, 2\)"),
])
def test_update_rejects_bad_tensors_naming_them(key, bad, error, match):
    args = _update_args()
    args[key] = bad(args[key])
    with pytest.raises(error, match=match):
        ForecastMetrics(None).update(**args)


def test_quantile_predictions_must_match_the_levels():
    args = _update_args()
    with pytest.raises(ValueError, match=r"quantile_prediction is required.*\[0.1, 0.9\]"):
        ForecastMetrics([0.1, 0.9]).update(**args)
    with pytest.raises(ValueError, match="quantile_prediction was given but the metric has"):
        ForecastMetrics(None).update(**args, quantile_prediction=torch.zeros(2, 3, 1, 1))
    with pytest.raises(ValueError, match=r"quantile_prediction must be \(B, Nh, C, Q = 2\)"):
        ForecastMetrics([0.1, 0.9]).update(**args, quantile_prediction=torch.zeros(2, 3, 1, 3))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"quantiles": [0.9, 0.1]}, ValueError, "increasing levels in"),
    ({"quantiles": [0.0, 0.5]}, ValueError, "increasing levels in"),
    ({"quantiles": []}, ValueError, "increasing levels in"),
    ({"quantiles": "0.5"}, TypeError, "quantiles must be a list"),
    ({"quantiles": [True]}, TypeError, "quantiles must be numbers"),
])
def test_bad_metric_arguments_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        ForecastMetrics(**kwargs)


def test_bad_series_indices_are_named_when_computed():
    metric = ForecastMetrics(None)
    metric.update(**dict(_update_args(), series=torch.tensor([0, 4])))
    with pytest.raises(ValueError, match="num_series=3 but series index 4 was seen"):
        metric.per_series(3)
    with pytest.raises(ValueError, match=r"series_keys\[1\] = \('b', 2\) must be a tuple of 1"):
        metric.per_series_frame([("a",), ("b", 2)], ["state"])
    metric.update(**dict(_update_args(), series=torch.tensor([-1, 0])))
    with pytest.raises(ValueError, match="series indices must be >= 0, got -1"):
        metric.compute()


def test_half_precision_inputs_are_scored_in_float32_and_nan_at_missing_is_ignored():
    args = _update_args()
    args["prediction"] = args["prediction"].bfloat16()
    args["target"] = args["target"].masked_fill(torch.tensor([True, False, False])[:, None],
                                                float("nan"))
    args["observed"] = ~torch.isnan(args["target"])
    args["context_observed"][:, 0] = False
    metric = ForecastMetrics(None)
    metric.update(**args)
    out = metric.compute()
    assert out["mae"].item() == 1.0 and out["rmse"].item() == 1.0
    assert out["mase"].item() == 1.0 and out["smape"].item() == 2.0


def test_naive_and_update_never_read_tensor_values_on_the_host(monkeypatch):
    """Each of these is a host synchronisation on a GPU (as tests/test_host_sync.py counts)."""
    windows = _random_windows(4)
    ct = EPOCH + torch.arange(9)[None].expand(23, 9) * HOUR
    tt = ct[:, -1:] + torch.arange(1, 5)[None] * HOUR
    metric = ForecastMetrics([0.1, 0.5, 0.9])

    def refuse(*args, **kwargs):
        raise AssertionError("host read")
    for name in ("item", "__bool__", "__int__", "__float__", "__index__", "tolist", "cpu",
                 "numpy"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    context = torch.randn(23, 9, 2)
    naive = seasonal_naive(ct, context, windows[4], _ones(23, 9), tt, 24 * HOUR)
    local = seasonal_naive(ct, context, windows[4], _ones(23, 9), tt, 24 * HOUR,
                           context_local=ct - 5 * HOUR, target_local=tt - 5 * HOUR)
    metric.update(naive, *windows[1:6], quantile_prediction=windows[6])
    monkeypatch.undo()
    torch.testing.assert_close(local, naive)   # a fixed offset: the same lookups
    assert naive.shape == (23, 4, 2) and metric.compute()["mae"] > 0


def test_test_mase_is_the_fields_mase_and_every_natural_naive_is_logged(tmp_path):
    from posenc.tasks import Forecaster, TimeSeriesDataModule

    from ..conftest import cpu_trainer

    hours = pd.date_range("2021-01-01", periods=24 * 12, freq="h")
    rng = np.random.default_rng(0)
    frames = []
    for name, amplitude in (("a", 3.0), ("b", 10.0)):
        y = 20 + amplitude * np.sin(2 * np.pi * np.arange(len(hours)) / 24)
        y += rng.normal(0, 1, len(hours))
        y[rng.random(len(hours)) < 0.1] = np.nan
        frames.append(pd.DataFrame({"id": name, "ts": hours, "y": y}))
    frame = pd.concat(frames)
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="y",
                              series_column="id", context_length=168, horizon=12, stride=12)
    model = Forecaster(**dm.model_sizes(), dim=16, depth=1, num_heads=2)
    [result] = cpu_trainer(tmp_path).test(model, dm, verbose=False)
    # the field's MASE from the raw table: each (series, window)'s MAE over the seasonal
    # error (lag 24, GluonTS's hourly seasonality) of the series' whole history
    ratios = []
    for batch in dm.test_dataloader():
        with torch.no_grad():
            out = model.eval().predict_step(batch)
        for b, s in enumerate(out["series"].tolist()):
            rows = frame[frame.id == dm.series_keys[s][0]].set_index("ts").y
            times = pd.to_datetime(out["time"][b][out["valid"][b]].numpy())
            truth = rows.loc[times].to_numpy()
            error = np.abs(out["prediction"][b, : len(times), 0].numpy() - truth)
            past = rows[rows.index < times[0]].to_numpy()
            ratios.append(np.nanmean(error) / np.nanmean(np.abs(past[24:] - past[:-24])))
    assert len(ratios) > 2 and result["test/mase"] == pytest.approx(np.mean(ratios), rel=1e-5)
    # hourly data with a week of context: the daily and the weekly naive, and the stronger
    assert dm.naive_seasons == [str(pd.Timedelta("1D")), str(pd.Timedelta("7D"))]
    daily, weekly = result["test/mae_naive_1d"], result["test/mae_naive_7d"]
    assert daily != weekly and result["test/mae_naive"] == min(daily, weekly)
    assert {"mae_naive_1d", "mase_naive_7d", "smape_naive"} <= set(model.test_per_series)
