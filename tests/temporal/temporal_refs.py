"""Independent references and hypothesis strategies for tests/temporal.

``conftest.py`` puts this folder on ``sys.path`` (pytest runs with ``--import-mode=importlib``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import strategies as st

# Zones the issue names: a US and a UK DST rule, southern-hemisphere DST, a +05:30 offset.
ZONES = ["America/New_York", "Europe/London", "Australia/Sydney", "Asia/Kolkata"]
LOW_NS = pd.Timestamp("1900-01-01").value
HIGH_NS = pd.Timestamp("2200-01-01").value
@st.composite
def nanoseconds(draw: st.DrawFn, min_size: int = 1, max_size: int = 300) -> np.ndarray:
    """int64 nanoseconds in 1900-2200: wide random instants plus a dense cluster (one
    day's worth around a random instant), so both of calendar_fields' paths are drawn."""
    seed = draw(st.integers(0, 2**32 - 1))
    size = draw(st.integers(min_size, max_size))
    rng = np.random.default_rng(seed)
    wide = rng.integers(LOW_NS, HIGH_NS, size)
    if draw(st.booleans()):
        centre = int(rng.integers(LOW_NS + 10**15, HIGH_NS - 10**15))
        return centre + rng.integers(-43_200 * 10**9, 43_200 * 10**9, size)
    return wide


def dst_transition_days(tz: str, year: int) -> list[pd.Timestamp]:
    """Midnight UTC of the days on which ``tz`` changes its UTC offset in ``year``."""
    hours = pd.date_range(f"{year}-01-01", f"{year + 1}-01-01", freq="h", tz="UTC")
    offsets = hours.tz_convert(tz).tz_localize(None) - hours.tz_localize(None)
    changes = hours[1:][np.diff(offsets.asi8) != 0]
    return [t.normalize() for t in changes]


def pandas_fields(index: pd.DatetimeIndex) -> dict[str, np.ndarray]:
    """calendar_fields' contract, read off pandas' own accessors."""
    return {
        "second": index.second.to_numpy(),
        "minute": index.minute.to_numpy(),
        "hour": index.hour.to_numpy(),
        "day_of_week": index.day_of_week.to_numpy(),
        "day_of_month": index.day.to_numpy(),
        "day_of_year": index.day_of_year.to_numpy(),
        "month": index.month.to_numpy(),
        "week_of_year": index.isocalendar().week.to_numpy(dtype=np.int64),
        "days_in_month": index.days_in_month.to_numpy(),
        "days_in_year": 365 + index.is_leap_year.astype(np.int64),
    }


def iso_weeks_in_year(iso_years: np.ndarray) -> np.ndarray:
    """ISO weeks of each ISO year: the ISO week of its December 28 (always in the last week)."""
    dec28 = pd.to_datetime([f"{y:04d}-12-28" for y in iso_years])
    return dec28.isocalendar().week.to_numpy(dtype=np.int64)


# GluonTS's time features (gluonts/time_feature/_base.py), written from its formulas:
# value / (number of values - 1) - 0.5 on pandas accessors (pandas 3 spellings).
GLUONTS_FEATURES = {
    "second": lambda i: i.second.to_numpy() / 59.0 - 0.5,
    "minute": lambda i: i.minute.to_numpy() / 59.0 - 0.5,
    "hour": lambda i: i.hour.to_numpy() / 23.0 - 0.5,
    "day_of_week": lambda i: i.day_of_week.to_numpy() / 6.0 - 0.5,
    "day_of_month": lambda i: (i.day.to_numpy() - 1) / 30.0 - 0.5,
    "day_of_year": lambda i: (i.day_of_year.to_numpy() - 1) / 365.0 - 0.5,
    "month": lambda i: (i.month.to_numpy() - 1) / 11.0 - 0.5,
    "week_of_year": lambda i: (i.isocalendar().week.to_numpy(dtype=np.int64) - 1) / 52.0 - 0.5,
}


def gluonts_fields(freq: str) -> tuple[str, ...]:
    """GluonTS's dispatch: ``isinstance(to_offset(freq), offset_type)`` in its table order."""
    from pandas.tseries import offsets
    from pandas.tseries.frequencies import to_offset

    day = ("day_of_week", "day_of_month", "day_of_year")
    table = [
        (offsets.YearBegin, ()), (offsets.YearEnd, ()),
        (offsets.QuarterBegin, ("month",)), (offsets.QuarterEnd, ("month",)),
        (offsets.MonthBegin, ("month",)), (offsets.MonthEnd, ("month",)),
        (offsets.Week, ("day_of_month", "week_of_year")),
        (offsets.Day, day), (offsets.BusinessDay, day),
        (offsets.Hour, ("hour", *day)),
        (offsets.Minute, ("minute", "hour", *day)),
        (offsets.Second, ("second", "minute", "hour", *day)),
    ]
    offset = to_offset(freq)
    for kind, fields in table:
        if isinstance(offset, kind):
            return fields
    raise RuntimeError(f"unsupported frequency {freq}")


def informer_fixed_table(rows: int, dim: int) -> np.ndarray:
    """Informer's ``FixedEmbedding`` weight (models/embed.py), in float64."""
    position = np.arange(rows, dtype=np.float64)[:, None]
    div_term = np.exp(np.arange(0, dim, 2, dtype=np.float64) * -(np.log(10000.0) / dim))
    table = np.zeros((rows, dim))
    table[:, 0::2] = np.sin(position * div_term)
    table[:, 1::2] = np.cos(position * div_term)
    return table
