"""FourierSeasonality: Prophet's terms, phases exact to < 1e-6 cycles for 1900-2200."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from posenc.temporal import FourierSeasonality, to_nanoseconds, to_seconds
from posenc.temporal.fourier import DEFAULT_PERIODS, fourier_features
from temporal_refs import HIGH_NS, LOW_NS, nanoseconds


def exact_cycles(ns: np.ndarray, period_ns: int, k: int) -> np.ndarray:
    """Phase of harmonic k in cycles, from Python integers (exact up to the final division)."""
    return np.array([(k * int(t)) % period_ns / period_ns for t in ns])


def cycle_error(out: np.ndarray, cycles: np.ndarray) -> np.ndarray:
    """Circular distance, in cycles, between the phase encoded by (sin, cos) and ``cycles``."""
    got = np.arctan2(out[:, 0].astype(np.float64), out[:, 1].astype(np.float64)) / (2 * np.pi)
    diff = (got - cycles) % 1.0
    return np.minimum(diff, 1.0 - diff)


@settings(max_examples=20, deadline=None)
@given(nanoseconds(max_size=200))
def test_phase_error_below_1e6_cycles_in_float32(ns):
    enc = FourierSeasonality(harmonics={"day": 4, "week": 3, "year": 10})
    out = enc(ns).numpy()
    assert out.dtype == np.float32 and out.shape == (len(ns), 34)
    column = 0
    for name, count in zip(enc.periods, enc.harmonics, strict=True):
        for k in range(1, count + 1):
            cycles = exact_cycles(ns, round(DEFAULT_PERIODS[name] * 10**9), k)
            assert cycle_error(out[:, column:column + 2], cycles).max() < 1e-6
            column += 2


def test_naive_float_time_would_fail_the_precision_bound():
    # The bound above is not vacuous: float32 seconds since 1970 miss it by orders of
    # magnitude, which is what the integer reduction avoids.
    ns = np.random.default_rng(0).integers(LOW_NS, HIGH_NS, 1000)
    seconds = (ns / 1e9).astype(np.float32)
    theta = 2 * np.pi * seconds / np.float32(86400)
    naive = np.stack([np.sin(theta), np.cos(theta)], axis=-1)
    assert cycle_error(naive, exact_cycles(ns, 86400 * 10**9, 1)).max() > 1e-3
    ours = FourierSeasonality({"day": 86400}, harmonics=1)(ns).numpy()
    assert cycle_error(ours, exact_cycles(ns, 86400 * 10**9, 1)).max() < 1e-6


def test_equals_prophet_formula_and_column_order():
    ts = pd.date_range("2017-01-01", periods=100, freq="13h")
    enc = FourierSeasonality(harmonics={"day": 4, "week": 3, "year": 10})
    days = to_seconds(ts, unit="D")  # Prophet: t in days since the epoch, float64
    expected = []
    for name, count in zip(enc.periods, enc.harmonics, strict=True):
        period = DEFAULT_PERIODS[name] / 86400
        for i in range(count):
            for fun in (np.sin, np.cos):
                expected.append(fun(2.0 * (i + 1) * np.pi * days / period))
    out = enc(ts, dtype=torch.float64).numpy()
    np.testing.assert_allclose(out, np.stack(expected, axis=-1), rtol=0, atol=1e-9)
    assert enc.feature_names[:4] == ["day_sin1", "day_cos1", "day_sin2", "day_cos2"]
    assert enc.dim == 34


def prophet_fourier_series(ns: np.ndarray, period_days: float, order: int) -> np.ndarray:
    """Prophet's ``Prophet.fourier_series``: whole seconds since the epoch, in days."""
    t = ns // 10**9 / (3600 * 24.0)
    return np.stack([fun(2 * np.pi * t * (i + 1) / period_days)
                     for i in range(order) for fun in (np.sin, np.cos)], axis=-1)


def test_prophet_configuration_equals_prophets_features():
    ts = pd.date_range("1990-03-01 00:00:07", "2040-01-01", freq="977h")
    ns = to_nanoseconds(ts)
    expected = np.concatenate([prophet_fourier_series(ns, 365.25, 10),
                               prophet_fourier_series(ns, 7, 3),
                               prophet_fourier_series(ns, 1, 4)], axis=-1)
    enc = FourierSeasonality.prophet()
    out = enc(ts, dtype=torch.float64).numpy()
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-9)
    assert enc.feature_names[:2] == ["yearly_sin1", "yearly_cos1"] and enc.dim == 34
    # posenc's default year is the Gregorian 365.2425 days: a different feature.
    default_year = FourierSeasonality({"year": DEFAULT_PERIODS["year"]}, harmonics=10)
    assert np.abs(default_year(ts, dtype=torch.float64).numpy() - expected[:, :20]).max() > 0.05


def test_known_values_by_hand():
    enc = FourierSeasonality({"day": 86400, "week": 604800}, harmonics=2)
    # 06:00 UTC on Thursday 1970-01-01 is a quarter day; the week phase counts from the epoch.
    out = enc(pd.DatetimeIndex(["1970-01-01 06:00"]), dtype=torch.float64)[0].numpy()
    quarter, half = [1.0, 0.0], [0.0, -1.0]
    np.testing.assert_allclose(out[:4], quarter + half, atol=1e-12)
    week = 0.25 / 7
    np.testing.assert_allclose(out[4:6], [math.sin(2 * math.pi * week),
                                          math.cos(2 * math.pi * week)], atol=1e-12)


def test_aware_timestamps_are_utc_instants_and_tensors_stay_tensors():
    ts = pd.date_range("2021-03-13", periods=48, freq="h", tz="America/New_York")
    enc = FourierSeasonality()
    reference = enc(ts.tz_convert("UTC").tz_localize(None))
    torch.testing.assert_close(enc(ts), reference, rtol=0, atol=0)
    ns = torch.from_numpy(to_nanoseconds(ts)).reshape(4, 12)
    torch.testing.assert_close(enc(ns).reshape(48, -1), reference, rtol=0, atol=0)
    assert enc(ts, dtype=torch.bfloat16).dtype == torch.bfloat16


@pytest.mark.parametrize("kwargs, match", [
    ({"periods": {}}, "at least one"),
    ({"periods": {"day": 0}}, r"periods\['day'\] must be a positive"),
    ({"periods": {"day": float("nan")}}, "positive"),
    ({"periods": {"tick": 1e-10}}, r"periods\['tick'\] .*>= 1 ns"),
    ({"harmonics": 0}, "int >= 1"),
    ({"harmonics": {"day": 3}}, "keys of periods"),
])
def test_bad_configuration_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FourierSeasonality(**kwargs)


# The largest period whose whole nanoseconds fit int64 (2**63 - 1) as a float of seconds,
# and the next float up, which rounds to 2**63 ns.
LARGEST_SECONDS = 9223372036.854774
TOO_LARGE_SECONDS = float(np.nextafter(LARGEST_SECONDS, np.inf))


def test_largest_period_is_exact_and_the_next_float_raises():
    assert round(LARGEST_SECONDS * 10**9) <= 2**63 - 1 < round(TOO_LARGE_SECONDS * 10**9)
    enc = FourierSeasonality({"era": LARGEST_SECONDS}, harmonics=1)
    ns = np.array([10**18, -(10**18), HIGH_NS, LOW_NS])
    out = enc(ns, dtype=torch.float64).numpy()
    period_ns = round(LARGEST_SECONDS * 10**9)
    np.testing.assert_allclose(cycle_error(out, exact_cycles(ns, period_ns, 1)), 0, atol=1e-12)
    with pytest.raises(ValueError, match=r"periods\['era'\] .*at most 9223372036.85477"):
        FourierSeasonality({"era": TOO_LARGE_SECONDS})


@pytest.mark.parametrize("seconds, error", [
    (1e6 * 86400, ValueError), (1e10, ValueError), (float("inf"), ValueError),
    (float("nan"), ValueError), (0, ValueError), (-86400, ValueError), (10**30, ValueError),
    (True, TypeError), ("86400", TypeError), (None, TypeError),
])
def test_bad_period_raises_naming_it(seconds, error):
    with pytest.raises(error, match=r"periods\['p'\]"):
        FourierSeasonality({"p": seconds})


@pytest.mark.parametrize("periods_ns, harmonics, error, match", [
    ([2**63], [1], ValueError, r"periods_ns\[0\] .*2\*\*63 - 1"),
    ([0], [1], ValueError, r"periods_ns\[0\]"),
    ([86400.0 * 10**9], [1], TypeError, r"periods_ns\[0\] must be an int"),
    ([True], [1], TypeError, r"periods_ns\[0\]"),
    ([10**9], [0], ValueError, r"harmonics\[0\]"),
    ([10**9, 10**10], [1], ValueError, "one harmonics count per period"),
])
def test_fourier_features_checks_periods_and_harmonics(periods_ns, harmonics, error, match):
    with pytest.raises(error, match=match):
        fourier_features(torch.zeros(3, dtype=torch.int64), periods_ns, harmonics)


def test_nat_raises_for_every_input_kind():
    enc = FourierSeasonality()
    with pytest.raises(ValueError, match="NaT"):
        enc(pd.DatetimeIndex(["2021-01-01", None]))
    with pytest.raises(ValueError, match="NaT"):
        enc(torch.tensor([0, torch.iinfo(torch.int64).min]))


def test_numpy_periods_and_harmonics_are_read_exactly():
    enc = FourierSeasonality({"d": np.float32(86400.5)}, harmonics=np.int64(3))
    assert enc.periods_ns == [86400500000000] and enc.harmonics == [3]


def test_periods_must_be_a_mapping():
    with pytest.raises(TypeError, match=r"periods must be a mapping \{name: seconds\}"):
        FourierSeasonality([86400])


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64, "float32"])
def test_non_float_output_dtype_raises(dtype):
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        FourierSeasonality()(pd.DatetimeIndex(["2021-01-01"]), dtype=dtype)
