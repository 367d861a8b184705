"""Forecasts out of a trained panel model: one row per series and query time in the data's
zone, the same numbers from a weights-only checkpoint, new series scaled by their own history,
clear refusals; the seasonal-naive baseline logged beside the model's test metrics."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from lightning.pytorch import seed_everything
from posenc.tasks import ExtrapolationWarning, Forecaster, TimeSeriesDataModule
from posenc.tasks.forecasting.output import request_dataset

from ..conftest import cpu_trainer, fit_and_save

TINY = {"dim": 16, "depth": 1, "num_heads": 2}
ZONE = "Europe/Paris"


def panel_frame(n=72, keys=("a", "b"), start="2021-01-01", freq="1h") -> pd.DataFrame:
    """Hourly naive wall-clock times; ``b`` is ``a`` shifted up by 50 and doubled."""
    stamps = pd.date_range(start, periods=n, freq=freq)
    base = 10 + 3 * np.sin(2 * np.pi * np.arange(n) / 24)
    parts = [pd.DataFrame({"site": key, "ts": stamps, "load": base * (1 + j) + 50 * j,
                           "temp": np.cos(np.arange(n) / 5.0) + j,
                           "kind": ["house", "shop", "farm"][j % 3]})
             for j, key in enumerate(keys)]
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A quantile model fitted for two steps on a two-series panel, and its checkpoint."""
    tmp = tmp_path_factory.mktemp("forecast")
    seed_everything(0)
    frame = panel_frame()
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="load",
                              series_column="site", past_covariates=["temp"],
                              static_columns=["kind"], tz=ZONE, context_length=12, horizon=4,
                              stride=4, batch_size=8)
    model = Forecaster(loss="quantile", quantiles=[0.1, 0.5, 0.9], **dm.model_sizes(), **TINY)
    path = fit_and_save(model, dm, tmp, max_steps=2, limit_val_batches=1)
    return model.eval(), path, frame, dm


def test_forecast_is_one_row_per_series_and_time_in_the_data_zone(trained):
    model, _, frame, _ = trained
    future = pd.DataFrame({"site": ["b", "a", "a"],
                           "ts": pd.to_datetime(["2021-01-04 05:00", "2021-01-04 00:00",
                                                 "2021-01-04 09:30"])})
    out = model.forecast(frame, future)
    assert list(out.columns) == ["site", "ts", "forecast_origin", "load", "load_q0.1",
                                 "load_q0.5", "load_q0.9"]
    assert out["site"].tolist() == ["a", "a", "b"]
    expected = pd.to_datetime(["2021-01-04 00:00", "2021-01-04 09:30", "2021-01-04 05:00"])
    assert (out["ts"] == expected.tz_localize(ZONE)).all()
    assert str(out["ts"].dt.tz) == ZONE
    last = pd.Timestamp("2021-01-03 23:00", tz=ZONE)
    assert (out["forecast_origin"] == last).all()
    np.testing.assert_array_equal(out["load"], out["load_q0.5"])  # point = median
    assert np.isfinite(out[["load", "load_q0.1", "load_q0.9"]].to_numpy()).all()


def test_a_weights_only_checkpoint_forecasts_the_same_numbers(trained):
    model, path, frame, _ = trained
    loaded = Forecaster.load_from_checkpoint(path, weights_only=True)
    assert loaded.fitted == model.fitted
    pd.testing.assert_frame_equal(loaded.forecast(frame, 5), model.forecast(frame, 5))


def test_future_none_is_the_trained_horizon_and_an_int_that_many_steps(trained):
    model, _, frame, _ = trained
    default = model.forecast(frame)
    assert len(default) == 2 * 4
    first = default[default.site == "a"]["ts"]
    expected = pd.date_range("2021-01-04 00:00", periods=4, freq="1h", tz=ZONE)
    assert first.tolist() == expected.tolist()
    assert len(model.forecast(frame, 7)) == 2 * 7
    with pytest.raises(ValueError, match="future must be >= 1"):
        model.forecast(frame, 0)


def test_query_times_not_after_the_history_are_refused(trained):
    model, _, frame, _ = trained
    future = pd.DataFrame({"site": ["a", "b"],
                           "ts": pd.to_datetime(["2021-01-04 01:00", "2021-01-03 23:00"])})
    with pytest.raises(ValueError, match=r"future row 1 .* of series \('b',\) is not after its "
                                         r"last history time"):
        model.forecast(frame, future)


def test_a_new_series_is_scaled_by_its_own_history_and_gets_unknown_categories(trained):
    model, _, frame, _ = trained
    new = panel_frame(keys=("c",))
    new["load"] = new["load"] * 4.0 + 1000.0
    new["kind"] = "factory"                               # not seen in training
    history = pd.concat([frame, new], ignore_index=True)
    dataset = request_dataset(model.fitted, history, 3)
    assert dataset.fitted.series_keys == (("a",), ("b",), ("c",))
    assert model.fitted.series_keys == (("a",), ("b",))  # the model's state is untouched
    assert dataset.fitted.loc[2][0] == pytest.approx(new["load"].mean())
    assert dataset.fitted.scale[2][0] == pytest.approx(new["load"].std(ddof=0))
    assert dataset.fitted.loc[:2] == model.fitted.loc
    batch = dataset.__getitems__(list(range(len(dataset))))
    assert batch["series"].tolist() == [0, 1, 2]
    assert batch["static_cat"][:, 0].tolist() == [1, 2, 0]  # house, shop; 0 = unknown
    out = model.forecast(history, 3)
    assert out["site"].tolist() == ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    assert out[out.site == "c"]["load"].min() > 900      # in its own units


def test_history_row_order_does_not_change_the_forecast(trained):
    model, _, frame, _ = trained
    shuffled = frame.sample(frac=1.0, random_state=0).reset_index(drop=True)
    pd.testing.assert_frame_equal(model.forecast(shuffled, 3), model.forecast(frame, 3))


def test_daily_steps_keep_the_wall_clock_time_across_dst(tmp_path):
    stamps = pd.date_range("2021-01-01 09:00", "2021-03-26 09:00", freq="1D")
    frame = pd.DataFrame({"ts": stamps, "load": np.sin(np.arange(len(stamps)))})
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="load", tz=ZONE,
                              context_length=14, horizon=3)
    dm.setup("fit")
    model = Forecaster(**TINY).eval()
    model.fitted = dm.fitted
    out = model.forecast(frame)                           # 26 March + 3 days: DST on the 28th
    assert out["ts"].tolist() == [pd.Timestamp(f"2021-03-{d} 09:00", tz=ZONE)
                                  for d in (27, 28, 29)]


def _holiday_panel() -> tuple[pd.DataFrame, TimeSeriesDataModule]:
    """The two-site panel with a future covariate ``holiday``, and its data module."""
    frame = panel_frame()
    frame["holiday"] = (frame["ts"].dt.hour == 3).astype(float)
    return frame, TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="load",
                                       series_column="site", future_covariates=["holiday"],
                                       context_length=12, horizon=4)


def test_a_model_with_future_covariates_needs_a_future_table(tmp_path):
    frame, dm = _holiday_panel()
    dm.setup("fit")
    model = Forecaster(num_future_covariates=1, **TINY).eval()
    model.fitted = dm.fitted
    with pytest.raises(ValueError, match=r"future covariates \['holiday'\]: give the times to "
                                         r"predict as a DataFrame"):
        model.forecast(frame)
    future = pd.DataFrame({"site": ["a", "b"], "ts": pd.to_datetime(["2021-01-04"] * 2)})
    with pytest.raises(ValueError, match=r"column 'holiday' not found"):
        model.forecast(frame, future)
    future["holiday"] = [1.0, np.nan]
    with pytest.raises(ValueError, match=r"future covariate 'holiday': row 1 .*is missing"):
        model.forecast(frame, future)
    future["holiday"] = [1.0, 0.0]
    assert len(model.forecast(frame, future)) == 2


def test_posenc_predict_without_a_future_table_names_the_command_line_option():
    """``posenc predict`` reads the times to predict from ``--data.future_data``; the
    error says so (``forecast()`` names its own ``future`` argument, above)."""
    frame, dm = _holiday_panel()
    dm.setup("predict")
    with pytest.raises(ValueError, match=r"future covariates \['holiday'\]: give the times to "
                                         r"predict as a CSV/Parquet file .*--data.future_data"):
        dm.predict_dataloader()
    dm.future_data = pd.DataFrame({"site": ["a"], "ts": pd.to_datetime(["2021-01-04"])})
    with pytest.raises(ValueError, match=r"^--data.future_data: column 'holiday' not found"):
        dm.predict_dataloader()


def test_without_a_sampling_step_the_times_to_predict_are_asked_for_by_their_argument():
    """A model whose schema has no sampling step (a single observation per series in
    training) has no step to continue: the error names the argument the caller takes the
    times in."""
    import dataclasses

    frame = panel_frame()
    columns = {"timestamp_column": "ts", "target_columns": "load", "series_column": "site",
               "context_length": 12, "horizon": 4}
    model = Forecaster(**TINY).eval()
    model.fitted = dataclasses.replace(TimeSeriesDataModule(frame, **columns).fitted, step_ns=0)
    dm = TimeSeriesDataModule(frame, **columns, fitted=model.fitted)
    dm.setup("predict")
    with pytest.raises(ValueError, match=r"no sampling step .*give the times to predict as a "
                                         r"CSV/Parquet file .*--data.future_data"):
        dm.predict_dataloader()
    with pytest.raises(ValueError, match=r"no sampling step .*give the times to predict as a "
                                         r"DataFrame \(future="):
        model.forecast(frame)


# -- the seasonal-naive baseline -----------------------------------------------------------
def test_test_metrics_log_the_seasonal_naive_baseline_per_series(tmp_path):
    # "periodic" repeats every 24 h: its seasonal-naive error is 0. "trend" rises 0.5 an
    # hour: the value 24 h earlier is off by exactly 12 at every horizon step.
    stamps = pd.date_range("2021-01-01", periods=240, freq="1h")
    hours = np.arange(240)
    frame = pd.concat([
        pd.DataFrame({"id": "periodic", "ts": stamps, "y": np.sin(2 * np.pi * hours / 24)}),
        pd.DataFrame({"id": "trend", "ts": stamps, "y": 0.5 * hours}),
    ], ignore_index=True)
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="y",
                              series_column="id", context_length=30, horizon=6, stride=6,
                              batch_size=16)
    assert dm.naive_seasons == [str(pd.Timedelta("1D"))] and dm.mase_season == 24
    model = Forecaster(**dm.model_sizes(), **TINY)
    [result] = cpu_trainer(tmp_path).test(model, dm, verbose=False)
    assert result["test/mae_naive"] == pytest.approx(6.0, abs=1e-3)   # (0 + 12) / 2
    assert result["test/rmse_naive"] == pytest.approx(np.sqrt(72.0), abs=1e-3)
    per_series = model.test_per_series
    assert per_series["id"].tolist() == ["periodic", "trend"]
    assert per_series["mae_naive"].tolist() == pytest.approx([0.0, 12.0], abs=1e-3)
    assert result["test/mae"] == pytest.approx(per_series["mae"].mean(), rel=1e-5)


def test_bad_requests_name_the_argument(trained):
    model, _, frame, _ = trained
    with pytest.raises(TypeError, match=r"history must be a pandas DataFrame, got dict"):
        model.forecast(frame.to_dict())
    with pytest.raises(TypeError, match=r"future must be a DataFrame of the times to predict, "
                                        r"an int number of steps or None, got list"):
        model.forecast(frame, [1, 2])
    with pytest.raises(ValueError, match=r"^future: column 'ts' not found"):
        model.forecast(frame, pd.DataFrame({"site": ["a"], "time": ["2021-01-05"]}))
    with pytest.raises(ValueError, match=r"^future: the data has no rows"):
        model.forecast(frame, pd.DataFrame({"site": [], "ts": []}))
    with pytest.raises(ValueError, match=r"^history: column 'load' not found"):
        model.forecast(frame.drop(columns="load"))


@pytest.mark.parametrize("freq, tz, expected", [
    ("MS", None, ["2010-01-01", "2010-02-01", "2010-03-01"]),
    ("MS", ZONE, ["2010-01-01", "2010-02-01", "2010-03-01"]),
    ("ME", None, ["2010-01-31", "2010-02-28", "2010-03-31"]),
    ("B", None, ["2010-01-04", "2010-01-05", "2010-01-06"]),  # after Friday 1 January
], ids=["month-start", "month-start-zone", "month-end", "business-days"])
def test_future_steps_follow_the_calendar_rhythm_of_the_history(freq, tz, expected):
    # The median step of monthly data is 31 days: adding it drifts off the month starts.
    end = {"MS": "2009-12-01", "ME": "2009-12-31", "B": "2010-01-01"}[freq]
    stamps = pd.date_range(end=end, periods=60, freq=freq)
    frame = pd.DataFrame({"ts": stamps, "load": np.arange(60.0)})
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="load", tz=tz,
                              context_length=12, horizon=3)
    dm.setup("fit")
    model = Forecaster(**TINY).eval()
    model.fitted = dm.fitted
    got = model.forecast(frame)["ts"]
    want = pd.DatetimeIndex(expected)
    assert got.tolist() == (want.tz_localize(tz) if tz else want).tolist()


def _future(stamps: pd.DatetimeIndex, tz: str | None, steps: int) -> list[pd.Timestamp]:
    """The ``steps`` future times a model forecasts after a one-series history at ``stamps``."""
    frame = pd.DataFrame({"ts": stamps, "load": np.arange(len(stamps), dtype=float)})
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="load", tz=tz,
                              context_length=12, horizon=3)
    dm.setup("fit")
    model = Forecaster(**TINY).eval()
    model.fitted = dm.fitted
    return model.forecast(frame, steps)["ts"].tolist()


def test_a_missing_month_near_the_end_keeps_the_future_on_month_starts():
    # The last eight months have a gap: their rhythm is no single frequency, and the median
    # step (31 days) drifts to 2010-03-04.
    stamps = pd.date_range(end="2009-12-01", periods=60, freq="MS").delete(-3)
    assert _future(stamps, None, 3) == list(pd.date_range("2010-01-01", periods=3, freq="MS"))


def test_a_holiday_near_the_end_of_business_days_keeps_the_future_on_weekdays():
    # Friday 25 December is missing; a daily step would forecast Saturday 2 January.
    stamps = pd.date_range(end="2010-01-01", periods=60, freq="B").drop(
        pd.Timestamp("2009-12-25"))
    got = _future(stamps, None, 6)
    assert got == list(pd.date_range("2010-01-04", periods=6, freq="B"))
    assert all(t.day_of_week < 5 for t in got)


def test_daily_data_with_a_missing_day_stays_at_local_midnight_across_dst():
    stamps = pd.date_range("2021-01-01", "2021-03-26", freq="D").drop(
        pd.Timestamp("2021-03-24"))
    want = [pd.Timestamp(f"2021-03-{d}", tz=ZONE) for d in (27, 28, 29)]  # DST on the 28th
    assert _future(stamps, ZONE, 3) == want


@pytest.mark.parametrize("offset", ["+02:00", "-05:30"])
def test_calendar_steps_of_data_with_a_utc_offset_continue_its_wall_clock(offset):
    # Month starts at local midnight in a fixed offset, read without tz=: the rhythm is read
    # on the offset's wall clock, so the future must continue there too (2024-12-01 22:00 UTC
    # would be the first of the month at 22:00 in UTC, a month late at +02:00).
    stamps = pd.DatetimeIndex([f"{t:%Y-%m-%d} 00:00:00{offset}"
                               for t in pd.date_range("2022-01-01", "2024-10-01", freq="MS")])
    got = _future(stamps, None, 3)
    want = [pd.Timestamp(f"{day} 00:00:00{offset}") for day in
            ("2024-11-01", "2024-12-01", "2025-01-01")]
    assert [t.value for t in got] == [t.value for t in want]
    assert [t.utcoffset() for t in got] == [t.utcoffset() for t in want]  # the data's offset


def test_calendar_steps_of_aware_data_in_a_named_zone_keep_its_wall_clock_across_dst():
    # tz-aware Berlin month starts read without tz=: the offset is +02:00 in October and
    # +01:00 after, so continuing at a fixed offset would land at 23:00 on the day before
    stamps = pd.date_range("2022-01-01", "2024-10-01", freq="MS", tz="Europe/Berlin")
    got = _future(stamps, None, 3)
    assert got == list(pd.date_range("2024-11-01", periods=3, freq="MS", tz="Europe/Berlin"))


@pytest.mark.parametrize("start, months, tz", [
    ("2005-01-10", 1, None),                # monthly on the 10th
    ("2005-01-10 09:30", 3, None),          # quarterly on the 10th, at 09:30
    ("2005-02-28", 12, None),               # yearly on 28 February (2008 is a leap year)
    ("2004-02-29", 12, None),               # yearly on the leap day: 28 February between
    ("2005-01-30", 1, None),                # the 30th: 28 or 29 February
    ("2005-01-31", 1, None),                # the 31st: every month's end
    ("2005-01-10", 1, "Europe/Berlin"),     # across DST: local midnight stays
    ("2005-01-10 06:00", 1, "America/New_York"),
], ids=["monthly-10th", "quarterly-10th", "yearly-feb-28", "yearly-feb-29", "monthly-30th",
        "monthly-31st", "monthly-zone", "monthly-zone-6am"])
def test_month_steps_keep_the_day_of_month_and_month_of_year_of_the_series(start, months, tz):
    # pandas' DateOffset(months=n) from the first time keeps its day, clipped to a month's end.
    first = pd.Timestamp(start)
    wall = [first + pd.DateOffset(months=months * k) for k in range(40 + 3)]
    stamps = pd.DatetimeIndex(wall[:40])
    if tz is not None:
        stamps = stamps.tz_localize(tz)
    want = pd.DatetimeIndex(wall[40:])
    if tz is not None:
        want = want.tz_localize(tz)
    assert _future(stamps, tz, 3) == list(want)


def test_irregular_times_step_by_the_median_interval():
    rng = np.random.default_rng(0)
    jitter = pd.to_timedelta(rng.integers(0, 40, 80), unit="min")
    stamps = pd.date_range("2021-01-01", periods=80, freq="1h") + jitter
    step = pd.Series(stamps).diff().median()
    assert _future(stamps, None, 3) == [stamps[-1] + k * step for k in (1, 2, 3)]


def test_multi_column_series_ids_are_sorted_keys_and_survive_a_checkpoint(tmp_path):
    stamps = pd.date_range("2021-01-01", periods=60, freq="1h")
    frame = pd.concat([pd.DataFrame({"state": s, "store": k, "ts": stamps,
                                     "y": np.arange(60.0) + 100.0 * j})
                       for j, (s, k) in enumerate([("NY", 2), ("NY", 1), ("CA", 1)])],
                      ignore_index=True)
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="y",
                              series_column=["state", "store"], context_length=8, horizon=2)
    dm.setup("fit")
    assert dm.series_keys == [("CA", 1), ("NY", 1), ("NY", 2)]
    model = Forecaster(**TINY).eval()
    model.fitted = dm.fitted
    path = tmp_path / "schema.pt"
    torch.save(dm.fitted.to_dict(), path)
    assert type(dm.fitted).from_dict(torch.load(path, weights_only=True)) == dm.fitted
    # store read back as floats (a CSV with a gap) still names the trained series
    out = model.forecast(frame.assign(store=frame["store"].astype(float)), 1)
    assert list(zip(out["state"], out["store"], strict=True)) == dm.series_keys


def test_persistence_baseline_is_the_last_observed_value(tmp_path):
    # y rises 0.5 an hour: persisting the last value is off by 0.5 * h at horizon step h
    # (h = 1..6): a mean absolute error of 0.5 * 3.5 = 1.75, whatever the window.
    stamps = pd.date_range("2021-01-01", periods=240, freq="1h")
    frame = pd.DataFrame({"ts": stamps, "y": 0.5 * np.arange(240)})
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="y",
                              context_length=30, horizon=6, stride=6, batch_size=16,
                              season="persistence")
    assert dm.naive_seasons == [str(pd.Timedelta(1, "ns"))] and dm.mase_season == 24
    model = Forecaster(**dm.model_sizes(), **TINY)
    [result] = cpu_trainer(tmp_path).test(model, dm, verbose=False)
    assert result["test/mae_naive"] == pytest.approx(1.75, abs=1e-4)
    # the in-sample seasonal error (lag 24, hourly) of every history is 12: MASE = 1.75 / 12
    assert result["test/mase_naive"] == pytest.approx(1.75 / 12, abs=1e-4)


def _untrained(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, ExtrapolationWarning)]


def test_forecast_beyond_the_trained_horizon_warns_naming_both_lengths(trained):
    model, _, frame, _ = trained                         # horizon 4, context 12
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model.forecast(frame)                            # the trained horizon: no word
        model.forecast(frame, 4)
    assert _untrained(record) == []
    with pytest.warns(ExtrapolationWarning) as record:
        model.forecast(frame, 7)
    [message] = _untrained(record)
    assert "series ('a',) asks for 7 steps after its history, beyond the trained horizon of " \
           "4 steps (2 of 2 series)" in message
    # A few times far ahead are as many steps ahead as their distance (hourly data: 30).
    future = pd.DataFrame({"site": ["b"], "ts": pd.to_datetime(["2021-01-04 05:00"])})
    with pytest.warns(ExtrapolationWarning, match=r"series \('b',\) asks for 6 steps .*horizon "
                                                  r"of 4 steps \(1 of 1 series\)"):
        model.forecast(frame, future)


def test_forecast_from_a_history_shorter_than_the_context_warns_naming_both_lengths(trained):
    model, _, frame, _ = trained
    short = pd.concat([frame[frame.site == "a"].tail(5), frame[frame.site == "b"].tail(20)])
    with pytest.warns(ExtrapolationWarning) as record:
        out = model.forecast(short, 2)
    [message] = _untrained(record)
    assert "series ('a',) has a history of 5 observations, short of the trained " \
           "context_length of 12 observations (1 of 2 series)" in message
    assert len(out) == 4                                 # still forecast


def test_posenc_predict_beyond_the_horizon_warns_too(trained, tmp_path):
    model, _, frame, dm = trained
    future = pd.DataFrame({"site": ["a"] * 6,
                           "ts": pd.date_range("2021-01-04 00:00", periods=6, freq="1h")})
    predict = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="load",
                                   series_column="site", past_covariates=["temp"],
                                   static_columns=["kind"], tz=ZONE, context_length=12,
                                   horizon=4, future_data=future)
    with pytest.warns(ExtrapolationWarning, match=r"asks for 6 steps after its history, beyond "
                                                  r"the trained horizon of 4 steps"):
        cpu_trainer(tmp_path).predict(model, datamodule=predict)


def test_a_duration_model_warns_in_durations(tmp_path):
    frame = panel_frame(n=96)
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="load",
                              series_column="site", tz=ZONE, context_length="12h",
                              horizon="4h", stride="4h", batch_size=8)
    model = Forecaster(**dm.model_sizes(), **TINY)
    fit_and_save(model, dm, tmp_path, max_steps=1, limit_val_batches=0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model.forecast(frame[frame.ts >= frame.ts.max() - pd.Timedelta("11h")], 4)
    assert _untrained(record) == []                      # 12 hourly readings: 12 h
    with pytest.warns(ExtrapolationWarning) as record:
        model.forecast(frame[frame.ts >= frame.ts.max() - pd.Timedelta("5h")], 5)
    horizon, context = _untrained(record)
    assert "asks for 0 days 05:00:00 after its history, beyond the trained horizon of " \
           "0 days 04:00:00 (2 of 2 series)" in horizon
    assert "has a history of 0 days 06:00:00, short of the trained context_length of " \
           "0 days 12:00:00 (2 of 2 series)" in context
