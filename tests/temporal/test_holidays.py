"""Holiday features: GluonTS's distances and kernels (values stored in gluonts_refs.py), the
`holidays` package's calendars by country and subdivision, and a brute-force nearest
holiday on random timestamps."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
import torch
from gluonts_refs import DISTANCE, KERNELS, STAMPS
from pandas.tseries.holiday import Easter, Holiday, USThanksgivingDay
from pandas.tseries.offsets import Day
from posenc.temporal.holidays import (
    KERNELS as KERNEL_NAMES,
)
from posenc.temporal.holidays import (
    HolidayFeatures,
    holiday_dates,
    holiday_distance,
    holiday_kernel,
)

# GluonTS's holidays, from the same pandas rules it uses (gluonts/time_feature/holiday.py).
_RULES = {
    "christmas_day": Holiday("Christmas", month=12, day=25),
    "easter_sunday": Holiday("Easter Sunday", month=1, day=1, offset=[Easter(), Day(0)]),
    "thanksgiving": USThanksgivingDay,
}


def _rule_dates(rule: Holiday) -> pd.DatetimeIndex:
    return rule.dates(pd.Timestamp("2014-01-01"), pd.Timestamp("2019-12-31"))


@pytest.mark.parametrize("name", list(DISTANCE))
def test_signed_distances_equal_gluonts_except_where_gluonts_takes_a_farther_one(name):
    out = holiday_distance(pd.DatetimeIndex(STAMPS), dates=_rule_dates(_RULES[name]))[:, 0]
    expected = np.array(DISTANCE[name])
    # 2017-07-05 is 192 days after Christmas 2016 and 173 before Christmas 2017: GluonTS
    # takes the earliest within its 200-day window, posenc the nearest.
    quirk = STAMPS.index("2017-07-05 00:00:00")
    if name == "christmas_day":
        assert (expected[quirk], out[quirk]) == (192, -173)
        expected[quirk] = -173
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("kernel, alpha", [("indicator", 1.0), ("exponential", 0.5),
                                           ("squared_exponential", 1.0)])
def test_kernels_equal_gluonts_special_date_feature_set(kernel, alpha):
    days = pd.date_range("2016-12-20", "2017-01-05", freq="D")
    christmas = _rule_dates(_RULES["christmas_day"])
    distance = holiday_distance(days, dates={"eve": christmas - pd.Timedelta(days=1),
                                             "day": christmas})
    out = holiday_kernel(distance, kernel, alpha=alpha)
    np.testing.assert_allclose(out.T, KERNELS[kernel], rtol=1e-15, atol=0)
    assert out.dtype == np.float64


def test_subdaily_timestamps_count_local_calendar_days():
    # 23:00 on Christmas Eve in Los Angeles is 07:00 UTC on Christmas Day: the local date.
    stamps = pd.DatetimeIndex(["2020-12-24 23:00", "2020-12-25 00:00", "2020-12-25 23:59"],
                              tz="America/Los_Angeles")
    out = holiday_distance(stamps, dates=["2020-12-25"])[:, 0]
    np.testing.assert_array_equal(out, [-1, 0, 0])
    np.testing.assert_array_equal(
        holiday_distance(stamps, dates=["2020-12-25"], tz="UTC")[:, 0], [0, 0, 1])


def test_brute_force_nearest_on_random_timestamps():
    rng = np.random.default_rng(0)
    ns = rng.integers(pd.Timestamp("2001-01-01").value, pd.Timestamp("2019-12-31").value, 3000)
    ns = ns.reshape(30, 100)  # any shape
    out = holiday_distance(ns, "DE", subdiv="BY")
    assert out.shape == (30, 100, 1) and out.dtype == np.int64
    dates = holiday_dates("DE", range(2000, 2021), subdiv="BY").astype(np.int64)
    day = ns.reshape(-1) // (86400 * 10**9)
    gaps = day[:, None] - dates[None, :]  # signed, every holiday
    nearest = np.abs(gaps).min(axis=1)
    # The nearest in absolute days; of two at equal distance, the earlier (positive).
    expected = np.where((gaps == nearest[:, None]).any(axis=1), nearest, -nearest)
    np.testing.assert_array_equal(out.reshape(-1), expected)


def test_country_and_subdivision_calendars_of_the_holidays_package():
    days = pd.DatetimeIndex(["2020-03-31", "2020-07-03", "2020-07-04", "2020-07-06"])
    national = holiday_distance(days, "US")[:, 0]
    california = holiday_distance(days, "US", subdiv="CA")[:, 0]
    # Cesar Chavez Day is a California holiday; July 4, 2020 (a Saturday) is observed Friday.
    np.testing.assert_array_equal(national, [43, 0, 0, 2])  # Presidents' Day: Feb 17
    np.testing.assert_array_equal(california, [0, 0, 0, 2])
    assert (holiday_distance(days, "US", observed=False)[:, 0] == [43, -1, 0, 2]).all()
    # Epiphany (Jan 6) is a holiday in Bavaria, not in Germany as a whole.
    epiphany = pd.DatetimeIndex(["2021-01-06"])
    assert holiday_distance(epiphany, "DE", subdiv="BY")[0, 0] == 0
    assert holiday_distance(epiphany, "DE")[0, 0] == 5


def test_the_nearest_of_a_holiday_every_four_years_may_lie_beyond_the_padded_years():
    # Inauguration Day (US-DC) fell on 2021-01-20 and 2025-01-20; one year of padding around
    # 2022-2023 holds neither the next one nor, for 2023 alone, any.
    stamps = pd.DatetimeIndex(["2022-06-01", "2023-06-01", "2023-12-31"])
    inaugurations = pd.DatetimeIndex(["2021-01-20", "2025-01-20"])
    gaps = (stamps.values[:, None] - inaugurations.values[None, :]) // np.timedelta64(1, "D")
    expected = gaps[np.arange(len(stamps)), np.abs(gaps).argmin(1)]
    assert expected.tolist() == [497, -599, -386]
    calendar = {"country": "US", "subdiv": "DC", "names": ["Inauguration Day"]}
    np.testing.assert_array_equal(holiday_distance(stamps, **calendar)[:, 0], expected)
    assert holiday_distance(stamps[-1:], **calendar)[0, 0] == -386
    module = HolidayFeatures(**calendar, distance_scale=1.0, years=(2023, 2023))
    assert module(stamps[1:]).numpy()[:, 1].tolist() == [-599, -386]


def test_names_give_one_column_each_like_special_date_feature_set():
    days = pd.date_range("2019-11-20", "2019-12-31", freq="D")
    out = holiday_distance(days, "US", names=["Thanksgiving Day", "Christmas Day"])
    assert out.shape == (42, 2)
    np.testing.assert_array_equal(out[:, 0], holiday_distance(
        days, dates=_rule_dates(USThanksgivingDay))[:, 0])
    np.testing.assert_array_equal(out[:, 1], holiday_distance(
        days, dates=_rule_dates(_RULES["christmas_day"]))[:, 0])
    with pytest.raises(ValueError, match=r"names \['Xmas'\] are not holidays .*'Christmas Day'"):
        holiday_distance(days, "US", names=["Christmas Day", "Xmas"])


def test_module_reads_local_wall_clock_nanoseconds_and_matches_the_functions():
    enc = HolidayFeatures("US", names=["Christmas Day", "Thanksgiving Day"],
                          kernel="squared_exponential", alpha=0.5, distance_scale=30.0)
    assert (enc.kind, enc.reads, enc.dim) == ("additive", "timestamps", 4)
    assert enc.feature_names == ["Christmas Day", "Christmas Day_distance",
                                 "Thanksgiving Day", "Thanksgiving Day_distance"]
    stamps = pd.date_range("2016-11-01", periods=24 * 70, freq="h")
    local = torch.from_numpy(stamps.as_unit("ns").asi8).reshape(7, -1)
    out = enc(local, dtype=torch.float64)
    assert out.shape == (7, 240, 4)
    distance = holiday_distance(stamps, "US", names=["Christmas Day", "Thanksgiving Day"])
    expected = np.stack([holiday_kernel(distance, "squared_exponential", alpha=0.5),
                         distance / 30.0], axis=-1).reshape(7, 240, 4)
    np.testing.assert_array_equal(out.numpy(), expected)
    # Any timestamp input; float32 by default; nothing in the state dict (rebuilt from args).
    torch.testing.assert_close(enc(stamps), out.reshape(-1, 4).float(), rtol=0, atol=0)
    assert enc.state_dict() == {}
    assert enc(local, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_module_without_the_span_shortcut_gives_the_same_rows():
    # Few timestamps over many days take the direct search (the accelerator path).
    enc = HolidayFeatures("GB", kernel="exponential")
    ns = torch.tensor([pd.Timestamp(t).value for t in
                       ["1999-12-27", "2012-06-04 13:00", "2022-09-19", "2030-01-02"]])
    expected = holiday_kernel(holiday_distance(ns.numpy(), "GB"), "exponential")[:, 0]
    np.testing.assert_array_equal(enc(ns, dtype=torch.float64).numpy()[:, 0], expected)
    assert enc(ns)[2, 0] == 1.0  # the Queen's state funeral, a one-off bank holiday


def test_module_refuses_timestamps_outside_its_years_and_nat():
    enc = HolidayFeatures("US", years=(2000, 2010))
    with pytest.raises(ValueError, match=r"local dates 2011-01-01\.\.2011-01-01, outside "
                                         r"years=\(2000, 2010\)"):
        enc(torch.tensor([pd.Timestamp("2011-01-01").value]))
    with pytest.raises(ValueError, match="timestamps contains NaT"):
        enc(torch.tensor([pd.Timestamp("2005-01-01").value, torch.iinfo(torch.int64).min]))


def test_dates_of_your_own_are_checked():
    with pytest.raises(ValueError, match=r"dates must be dates at midnight, .*12:00"):
        holiday_distance(["2020-01-01"], dates=["2020-12-25 12:00"])
    with pytest.raises(TypeError, match="dates must be calendar dates"):
        holiday_distance(["2020-01-01"], dates=pd.DatetimeIndex(["2020-12-25"], tz="UTC"))
    with pytest.raises(ValueError, match=r"dates\['x'\] must hold at least one date"):
        holiday_distance(["2020-01-01"], dates={"x": []})
    with pytest.raises(ValueError, match="dates contains NaT"):
        holiday_distance(["2020-01-01"], dates=["2020-12-25", None])
    out = holiday_distance(["2020-01-01"], dates=[dt.date(2019, 12, 25), "2020-12-25"])
    assert out[0, 0] == 7


@pytest.mark.parametrize("kwargs, error, match", [
    ({"country": "XX"}, ValueError, r"country must be a code .*got 'XX'"),
    ({"country": "US", "subdiv": "ZZ"}, ValueError, r"subdiv must be one of US's .*'CA'"),
    ({"country": 840}, TypeError, "country must be an ISO 3166 code string"),
    ({}, ValueError, "give exactly one of country"),
    ({"country": "US", "dates": ["2020-01-01"]}, ValueError, "give exactly one of country"),
    ({"dates": ["2020-01-01"], "names": ["x"]}, ValueError, "with dates= give"),
    ({"country": "US", "names": "Christmas Day"}, TypeError, "names must be a non-empty list"),
    ({"country": "US", "observed": "yes"}, TypeError, "observed must be a bool"),
])
def test_bad_calendars_are_refused_naming_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        holiday_distance(["2020-01-01"], **kwargs)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"kernel": "gaussian"}, ValueError, r"kernel must be one of \['indicator'"),
    ({"alpha": 0.0}, ValueError, "alpha must be a positive number"),
    ({"tol": -1.0}, ValueError, "tol must be a finite number >= 0"),
])
def test_bad_kernels_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        holiday_kernel(np.array([0, 1]), **kwargs)
    with pytest.raises(error, match=match):
        HolidayFeatures("US", years=(2020, 2020), **kwargs)


def test_kernel_keeps_tensors_and_refuses_bools():
    out = holiday_kernel(torch.tensor([0, -2, 3]), "exponential", alpha=0.5)
    torch.testing.assert_close(out, torch.exp(-0.5 * torch.tensor([0.0, 2.0, 3.0],
                                                                  dtype=torch.float64)))
    with pytest.raises(TypeError, match="distance must hold int or float days, got dtype "
                                        "torch.bool"):
        holiday_kernel(torch.tensor([True]))
    assert KERNEL_NAMES == ("indicator", "exponential", "squared_exponential")


def test_bad_years_are_refused():
    with pytest.raises(ValueError, match=r"years must be \(first, last\) with 1 <= first"):
        HolidayFeatures("US", years=(2020, 2010))
    with pytest.raises(TypeError, match=r"years must be \(first, last\) ints"):
        HolidayFeatures("US", years=2020)


def test_empty_input_gives_empty_output():
    assert holiday_distance([], "US").shape == (0, 1)
    assert holiday_distance(np.array([], dtype=np.int64), "US", names=["Labor Day"]).shape == (
        0, 1)
    assert HolidayFeatures("US", years=(2020, 2021))(torch.zeros(0, dtype=torch.int64)).shape \
        == (0, 1)


def test_years_the_holidays_package_does_not_fully_cover_are_refused():
    # Germany's calendar starts at reunification; India's lunar holidays cover 2001-2035 only.
    with pytest.raises(ValueError, match=r"years 1985-1985 are outside DE's holiday calendar "
                                         r"in the holidays package \(1991-2100\)"):
        holiday_distance(["1985-06-01"], "DE")
    with pytest.raises(ValueError, match=r"IN calendar is incomplete in 1990-1990 .*2001 to "
                                         r"2035"):
        holiday_distance(["1990-06-01"], "IN")
    assert holiday_distance(["2010-01-26"], "IN")[0, 0] == 0  # Republic Day
    assert HolidayFeatures("DE").years == (1991, 2100)
    assert HolidayFeatures("US").years == (1900, 2100)
    with pytest.raises(ValueError, match=r"outside DE's holiday calendar"):
        HolidayFeatures("DE", years=(1980, 2000))
    with pytest.raises(ValueError, match=r"outside US-CA's holiday calendar"):
        holiday_dates("US", [2101], subdiv="CA")
