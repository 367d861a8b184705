"""Frequency strings (``"15min"``, ``"1h30min"``, ``"1.5h"``, ``"W-SUN"``, ``"ME"``) and
durations, parsed without pandas' offset machinery (its aliases changed in pandas 3).

A frequency means what pandas 3's ``to_offset`` reads (tests/temporal/test_frequency_strings.py
checks it): fixed units ``D, h, min, s, ms, us, ns`` take decimals and combine (``"1h30min"`` ->
90 ``min``); calendar offsets (``W``, ``ME``, ``QE``, ``B``, ...) take whole multiples and an
anchor (``"QE-NOV"``); pandas < 2.2 aliases (``H, T, S, A, Q, Y``) keep their meaning, and
``"M"`` is refused as ambiguous. :func:`parse_duration` also reads ``pd.Timedelta``'s spellings
(``"7 days"``) but refuses months, quarters, years and business days (no fixed length).
"""

from __future__ import annotations

import datetime as dt
import re
import warnings
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from .timestamps import UNITS

__all__ = ["Frequency", "frequency_fields", "frequency_nanoseconds", "parse_duration",
           "parse_frequency"]

# GluonTS's ``time_features_from_frequency_str``: offset family -> features, in its order.
_DAY = ("day_of_week", "day_of_month", "day_of_year")
_GLUONTS_FIELDS: dict[str, tuple[str, ...]] = {
    "year": (),
    "quarter": ("month",),
    "month": ("month",),
    "week": ("day_of_month", "week_of_year"),
    "day": _DAY,
    "business_day": _DAY,
    "hour": ("hour", *_DAY),
    "minute": ("minute", "hour", *_DAY),
    "second": ("second", "minute", "hour", *_DAY),
}
_TICK_NS = {unit: UNITS[unit] for unit in ("D", "h", "min", "s", "ms", "us", "ns")}  # pandas' Ticks
_TICK_FAMILY = {"D": "day", "h": "hour", "min": "minute", "s": "second"}
_TICK_ALIASES: dict[str, str] = {
    **{unit: unit for unit in _TICK_NS},
    "d": "D", "Min": "min", "MIN": "min",  # pandas 3 still reads these (some deprecated)
    "H": "h", "T": "min", "S": "s", "L": "ms", "U": "us", "N": "ns",  # pandas < 2.2
}
# Calendar offsets: alias -> (family, anchors it takes). "MS" month start, "ms" milliseconds.
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_CALENDAR: dict[str, tuple[str, tuple[str, ...]]] = {
    **dict.fromkeys(("YE", "YS", "Y", "A", "AS"), ("year", _MONTHS)),
    **dict.fromkeys(("QE", "QS", "Q"), ("quarter", _MONTHS)),
    **dict.fromkeys(("ME", "MS"), ("month", ())),
    "W": ("week", _WEEKDAYS),
    "B": ("business_day", ()),
    "C": ("business_day", ()),
}
_AMBIGUOUS = {"M": "'M' is month end to pandas < 2.2, refused by pandas 3 and minutes to many "
                   "readers: write 'ME' (month end), 'MS' (month start) or 'min' (minutes); "
                   "a PeriodIndex spells months 'M': pass its .freq.freqstr ('ME')",
              "m": "'m' is minutes to pd.Timedelta but refused by pandas' to_offset: write "
                   "'min' (minutes) or 'ME' (month end)"}
# One component: an optional multiple (whole or decimal) and an alias with an anchor.
_COMPONENT = re.compile(r"\s*(\d*\.?\d*)\s*([A-Za-z]+)(?:-([A-Za-z]+))?")
_NOT_CLOSE = 1e-8  # pandas: np.isclose(n % 1, 0), i.e. |n % 1| <= 1e-8


class Frequency(NamedTuple):
    """``n`` steps of ``alias`` (pandas 3 spelling): ``Frequency(2, "W", "MON")`` is "2W-MON"."""

    n: int
    alias: str
    anchor: str | None = None

    @property
    def fixed(self) -> bool:
        """Whether the step has a fixed length (pandas' Tick offsets)."""
        return self.alias in _TICK_NS


def _scaled_tick(multiple: str, unit: str, freq: str, name: str) -> tuple[int, str]:
    """pandas' ``Tick(1) * float(multiple)``: the first unit, from ``unit`` down, in which
    the multiple is whole, e.g. 1.5 h -> 90 min."""
    value, units = float(multiple), list(_TICK_NS)
    for finer in units[units.index(unit):]:
        product = value * (_TICK_NS[unit] // _TICK_NS[finer])
        if abs(product % 1) <= _NOT_CLOSE:
            return int(product), finer
    raise ValueError(f"{name}={freq!r} is not a whole number of nanoseconds")


def parse_frequency(freq: str, name: str = "freq") -> Frequency:
    """``freq`` as pandas 3's ``to_offset(freq)`` reads it (``name``: the argument named in
    errors). ``ValueError`` for an unknown alias or anchor, ``"M"``, a step <= 0, a decimal or
    combined calendar offset (``"1.5W"``, ``"1W1D"``)."""
    if not isinstance(freq, str):
        raise TypeError(f"{name} must be a pandas frequency string (e.g. '15min', '1h30min', "
                        f"'W-SUN'), got {type(freq).__name__} ({freq!r})")
    text, position, parts = freq.strip(), 0, []
    if text.startswith("-"):
        raise ValueError(f"{name}={freq!r} must be a positive step (a negative frequency "
                         f"samples no series)")
    text = text[1:] if text.startswith("+") else text
    while position < len(text):
        match = _COMPONENT.match(text, position)
        if match is None or not match.group(0).strip():
            break
        parts.append(match.groups())
        position = match.end()
    known = sorted({*_TICK_ALIASES, *_CALENDAR} - {"MIN", "L", "U", "N"})

    def unknown(detail: str) -> ValueError:
        return ValueError(f"{name} must be a pandas frequency string (a multiple and one of "
                          f"{known}; fixed-length units combine and take decimals: "
                          f"'1h30min', '1.5h'; GluonTS's feature sets cover these units), "
                          f"got {freq!r}{detail}")

    if position < len(text) or not parts:
        raise unknown("")
    for multiple, alias, _anchor in parts:
        if alias in _AMBIGUOUS:
            raise ValueError(f"{name}={freq!r} is ambiguous: {_AMBIGUOUS[alias]}")
        if alias not in _TICK_ALIASES and alias not in _CALENDAR:
            raise unknown(f" (unknown unit {alias!r})")
        if multiple == ".":
            raise ValueError(f"{name}={freq!r} has a multiple without digits")
    if len(parts) == 1 and parts[0][1] in _CALENDAR:
        multiple, alias, anchor = parts[0]
        anchors = _CALENDAR[alias][1]
        if "." in multiple:
            raise ValueError(f"{name}={freq!r}: the calendar offset {alias!r} takes whole "
                             f"multiples only (as in pandas); use a fixed unit, e.g. '36h'")
        if anchor is not None and anchor not in anchors:
            raise ValueError(f"{name}={freq!r} has anchor {anchor!r}; {alias!r} takes "
                             f"{'one of ' + str(list(anchors)) if anchors else 'no anchor'}")
        n = int(multiple) if multiple else 1
        if n < 1:
            raise ValueError(f"{name}={freq!r} must be a positive step, got {n} steps")
        return Frequency(n, alias, anchor)
    total_ns, result = 0, None
    for multiple, alias, anchor in parts:
        if alias in _CALENDAR:
            raise ValueError(f"{name}={freq!r} combines the calendar offset {alias!r} with "
                             f"other units, which pandas cannot add; give one offset or "
                             f"fixed units only (e.g. '1D12h')")
        if anchor is not None:
            raise ValueError(f"{name}={freq!r}: the fixed unit {alias!r} takes no anchor "
                             f"(-{anchor})")
        unit = _TICK_ALIASES[alias]
        if "." in multiple:
            part = _scaled_tick(multiple, unit, freq, name)
        else:
            part = (int(multiple) if multiple else 1, unit)
        total_ns += part[0] * _TICK_NS[part[1]]
        # pandas adds two ticks of one unit as they are, others through delta_to_tick.
        if result is None or result[1] == part[1]:
            result = part if result is None else (result[0] + part[0], part[1])
        else:  # pandas' delta_to_tick: the coarsest unit dividing the total
            unit = next(u for u, size in _TICK_NS.items() if total_ns % size == 0)
            result = (total_ns // _TICK_NS[unit], unit)
    if total_ns <= 0:
        raise ValueError(f"{name}={freq!r} must be a positive step, got {total_ns} ns")
    return Frequency(result[0], result[1])


def frequency_nanoseconds(freq: str, name: str = "freq") -> int:
    """Nanoseconds of one step of a fixed-length ``freq`` (pandas' ``to_offset(freq).nanos``);
    calendar offsets raise."""
    frequency = parse_frequency(freq, name)
    if not frequency.fixed:
        raise ValueError(f"{name}={freq!r} has no fixed length (a calendar offset); give a "
                         f"fixed unit, e.g. '7D' for weeks")
    return frequency.n * _TICK_NS[frequency.alias]


def frequency_fields(freq: str, name: str = "freq") -> tuple[str, ...]:
    """Fields GluonTS's ``time_features_from_frequency_str(freq)`` uses, in its order: those
    of pandas' resulting unit (``"1.5h"`` is 90 minutes: the minute fields)."""
    frequency = parse_frequency(freq, name)
    family = (_TICK_FAMILY.get(frequency.alias) if frequency.fixed
              else _CALENDAR[frequency.alias][0])
    if family is None:
        raise ValueError(f"{name}={freq!r} is {frequency.n} {frequency.alias} steps, which "
                         f"have no GluonTS feature set (sub-second frequencies); GluonTS "
                         f"covers units from seconds to years")
    return _GLUONTS_FIELDS[family]


# pd.Timedelta's own spellings beyond the frequency units, lower-cased ("7 days", "1 hour").
_DURATION_WORDS = {"day", "days", "hour", "hours", "hr", "minute", "minutes", "second",
                   "seconds", "sec", "millisecond", "milliseconds", "milli", "millis",
                   "microsecond", "microseconds", "micro", "micros", "\u00b5s", "nanosecond",
                   "nanoseconds", "nano", "nanos"}
_WORD = re.compile(r"[^\W\d_]+")
# A number without a unit, which pd.Timedelta reads as nanoseconds.
_UNITLESS = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")
# ISO 8601 durations: pd.Timedelta reads the months of "P1M" as minutes.
_ISO_CALENDAR = re.compile(r"\s*P[^T]*[YM]", re.IGNORECASE)
_ISO = re.compile(r"\s*P(?:\d|T\d)", re.IGNORECASE)
# A calendar family as a duration: its name and about how many days one step is.
_CALENDAR_DAYS = {"year": ("year", 365), "quarter": ("quarter", 91), "month": ("month", 30),
                  "business_day": ("business day", 1)}


def parse_duration(value: Any, name: str, *, alternative: str = "") -> int:
    """A fixed-length, positive duration -> nanoseconds (an int > 0).

    Args:
        value: fixed units (``"1h30min"``, ``"7D"``), weeks (``"2W"``), a ``pd.Timedelta``
            spelling (``"7 days"``, ISO ``"P1DT2H"``), a ``pd.Timedelta``, ``timedelta``,
            ``np.timedelta64`` with a unit, or a fixed-length pandas offset.
        name: the argument named in errors.
        alternative: what else the argument takes, appended to some messages.

    Raises:
        ValueError: a calendar unit (``"MS"``, ISO ``"P1M"``), ``"m"``/``"M"``, a number without
            a unit, an unknown unit, a non-positive, NaT or out-of-range duration.
    """
    or_else = f", or {alternative}" if alternative else ""
    unknown = ValueError(f"{name} must be {alternative + ' or ' if alternative else ''}a "
                         f"duration such as '1h', '30min', '7D' or '7 days', got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        words = _WORD.findall(text)
        if _UNITLESS.fullmatch(text):
            raise ValueError(f"{name}={value!r} has no unit (pandas would read it as "
                             f"nanoseconds): write a duration such as '{text}h'{or_else}")
        if text.lower() in ("nat", "nan"):
            raise ValueError(f"{name} must be a positive duration, got {value!r}")
        if _ISO.match(text):
            if _ISO_CALENDAR.match(text):
                raise ValueError(f"{name}={value!r} is an ISO 8601 duration in calendar months "
                                 f"or years, which have no fixed length (pandas would read "
                                 f"'M' as minutes); {name} takes a fixed duration, e.g. "
                                 f"'P30D'{or_else}")
            words = []  # "PT1M": ISO designators, read by pd.Timedelta
        for word in words:
            if word in _AMBIGUOUS:
                raise ValueError(f"{name}={value!r} is ambiguous: {word!r} is minutes to "
                                 f"pd.Timedelta, a month or month end to pandas' frequencies "
                                 f"and to many readers; {name} takes a fixed duration: write "
                                 f"'min' for minutes (e.g. '30min'), or about '30D' for a "
                                 f"month{or_else}")
            if word in _CALENDAR and word != "W":
                step = parse_frequency(text, name)
                label, days = _CALENDAR_DAYS[_CALENDAR[step.alias][0]]
                about = (step.n * 365) // 12 if label == "month" and step.n % 12 == 0 else (
                    step.n * days)
                raise ValueError(f"{name}={value!r} is {step.n} calendar {label}(s) "
                                 f"({step.alias!r}), which have no fixed length; {name} takes a "
                                 f"fixed duration (units W, D, h, min, s, ms, us, ns), e.g. "
                                 f"'{about}D' for about as long{or_else}")
        if words and all(word in _TICK_ALIASES for word in words):
            ns = frequency_nanoseconds(text, name)
            if ns > np.iinfo(np.int64).max:
                raise ValueError(f"{name}={value!r} is out of range (durations reach about "
                                 f"292 years)")
            return ns
        if not all(word in _TICK_ALIASES or word in ("W", "w")
                   or word.lower() in _DURATION_WORDS for word in words):
            raise unknown
    elif isinstance(value, np.timedelta64) and np.datetime_data(value.dtype)[0] == "generic":
        raise ValueError(f"{name}={value!r} has no unit: give np.timedelta64(n, 'h') or a "
                         f"string such as '24h'")
    elif isinstance(value, np.timedelta64) and np.datetime_data(value.dtype)[0] in ("M", "Y"):
        raise ValueError(f"{name}={value!r} is in calendar months or years, which have no "
                         f"fixed length; {name} takes a fixed duration, e.g. "
                         f"np.timedelta64(30, 'D'){or_else}")
    elif isinstance(value, pd.offsets.Tick):  # Hour(2), Minute(30): fixed lengths
        value = pd.Timedelta(value)
    elif isinstance(value, pd.offsets.BaseOffset):  # every other offset is a calendar one
        raise ValueError(f"{name}={value!r} is a calendar offset, which has no fixed length; "
                         f"{name} takes a fixed duration, e.g. '30D'{or_else}")
    elif not isinstance(value, (dt.timedelta, np.timedelta64)):
        raise TypeError(f"{name} must be a duration string (e.g. '1h', '7D') or a timedelta, "
                        f"got {type(value).__name__} ({value!r})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pandas 3 deprecates "H", "S", "d" it still reads
            delta = pd.Timedelta(value)
    except (OverflowError, pd.errors.OutOfBoundsTimedelta) as err:
        raise ValueError(f"{name}={value!r} is out of range (durations reach about 292 "
                         f"years)") from err
    except (ValueError, TypeError) as err:
        raise unknown from err
    if pd.isna(delta) or delta <= pd.Timedelta(0):
        raise ValueError(f"{name} must be a positive duration, got {value!r}")
    return int(delta.value)


class TimeUnit(NamedTuple):
    """A unit of elapsed time: fixed ``nanoseconds``, or calendar ``months``."""

    nanoseconds: int = 0
    months: int = 0


_MONTHS_PER = {"month": 1, "quarter": 3, "year": 12}
_CALENDAR_UNIT_WORDS = re.compile(r"\s*(\d+)?\s*(month|quarter|year)s?\s*", re.IGNORECASE)


def parse_time_unit(value: Any, name: str = "time_unit") -> TimeUnit:
    """A unit of elapsed time: a fixed duration (:func:`parse_duration`) or calendar months:
    month, quarter and year frequency strings (``"3MS"``, ``"QS-NOV"``: the anchor changes
    nothing) or words (``"2 months"``, ``"quarter"``, ``"year"``).

    Raises:
        TypeError: neither a string nor a timedelta.
        ValueError: what :func:`parse_duration` refuses that is no month, quarter or year
            (business days, a number without a unit, ...), or zero months.
    """
    if isinstance(value, str):
        words = _CALENDAR_UNIT_WORDS.fullmatch(value)
        if words is not None:
            months = int(words.group(1) or 1) * _MONTHS_PER[words.group(2).lower()]
            if months < 1:
                raise ValueError(f"{name}={value!r} must be a positive number of months")
            return TimeUnit(months=months)
        match = _COMPONENT.fullmatch(value.strip())
        family = _CALENDAR.get(match.group(2), ("",))[0] if match else ""
        if family in _MONTHS_PER:
            frequency = parse_frequency(value, name)
            return TimeUnit(months=frequency.n * _MONTHS_PER[family])
    try:
        return TimeUnit(nanoseconds=parse_duration(value, name))
    except ValueError as err:
        raise ValueError(f"{err}; or calendar months, quarters or years ('MS', 'QS', 'YS', "
                         f"'3 months')") from None
