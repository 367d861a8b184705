"""Calendar fields of timestamps in local time: vectorized integer arithmetic, no pandas
accessors, equal to them.

Local wall-clock ticks are split into days since 1970-01-01 and seconds of the day with one
``divmod``; the date fields come from the days with Howard Hinnant's ``civil_from_days``
algorithm (proleptic Gregorian, exact for any int64 day count). Timestamps of a real series
cover few distinct days, so the date fields are computed once per day of the covered span and
gathered, which costs less than the arithmetic per timestamp.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .timestamps import Timestamps, datetime_index, local_wall_time

__all__ = ["FIELDS", "calendar_fields", "check_field_range", "field_column"]

FIELDS: dict[str, tuple[int, int]] = {
    "second": (0, 59),
    "minute": (0, 59),
    "hour": (0, 23),
    "day_of_week": (0, 6),
    "day_of_month": (1, 31),
    "day_of_year": (1, 366),
    "month": (1, 12),
    "week_of_year": (1, 53),
    "days_in_month": (28, 31),
    "days_in_year": (365, 366),
    "weeks_in_year": (52, 53),
}
"""name -> (first, last) value. "week_of_year" is the ISO week; "weeks_in_year" the number of
ISO weeks (52 or 53) in that ISO week-year, the true period of "week_of_year".
"""
_TICKS_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_DAYS_IN_MONTH = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int32)


def _is_leap(year: np.ndarray) -> np.ndarray:
    return (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))


def _weeks_in_iso_year(year: np.ndarray) -> np.ndarray:
    """52, or 53 when the year starts on a Thursday (or a Wednesday in a leap year)."""
    def dec31_weekday(y: np.ndarray) -> np.ndarray:
        return (y + y // 4 - y // 100 + y // 400) % 7
    return 52 + ((dec31_weekday(year) == 4) | (dec31_weekday(year - 1) == 3))


def _date_fields(days: np.ndarray) -> dict[str, np.ndarray]:
    """All date fields of int64 ``days`` since 1970-01-01 (any shape), as int32 arrays."""
    z = days + 719468                      # days since 0000-03-01
    era = z // 146097                      # 400-year cycles
    doe = z - era * 146097                 # [0, 146096]
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365  # [0, 399]
    doy_march = doe - (365 * yoe + yoe // 4 - yoe // 100)           # [0, 365] from March 1
    mp = (5 * doy_march + 2) // 153        # month counted from March, [0, 11]
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    leap = _is_leap(year)
    # Jan 1 is day 306 of the March-based year; March 1 is day 60 (61 in a leap year).
    day_of_year = np.where(mp < 10, doy_march + 60 + leap, doy_march - 305)
    day_of_week = (days + 3) % 7           # 1970-01-01 was a Thursday; Monday = 0
    days_in_year = 365 + leap
    # ISO week: the week (Monday..Sunday) belongs to the year holding its Thursday.
    thursday = day_of_year - day_of_week + 3
    before = thursday < 1
    after = thursday > days_in_year
    iso_year = year - before + after
    thursday = thursday + np.where(before, 365 + _is_leap(year - 1), 0) - np.where(
        after, days_in_year, 0)
    fields = {
        "day_of_week": day_of_week,
        "day_of_month": doy_march - (153 * mp + 2) // 5 + 1,
        "day_of_year": day_of_year,
        "month": month,
        "week_of_year": (thursday - 1) // 7 + 1,
        "days_in_month": _DAYS_IN_MONTH[month - 1] + ((month == 2) & leap),
        "days_in_year": days_in_year,
        "weeks_in_year": _weeks_in_iso_year(iso_year),
    }
    return {k: v.astype(np.int32) for k, v in fields.items()}


def _check_names(names: Iterable[str], name: str) -> tuple[str, ...]:
    names = (names,) if isinstance(names, str) else tuple(names)
    unknown = [n for n in names if n not in FIELDS]
    if unknown or not names:
        raise ValueError(f"{name} must be a non-empty list of {list(FIELDS)}, got {names!r}")
    return names


def calendar_fields(timestamps: Timestamps, tz: Any = None, *,
                    fields: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Calendar fields of ``timestamps`` in local time.

    Args:
        timestamps: any accepted timestamp input (see :mod:`posenc.temporal.timestamps`),
            of any resolution.
        tz: read the wall clock of this zone (tz-aware input only); ``None`` uses the
            timestamps' own zone, or the naive readings as they are.
        fields: the subset of :data:`FIELDS` to compute; all of them by default.

    Returns:
        ``{name: int32 array of the input's shape}`` in :data:`FIELDS` order, equal to
        pandas' ``second, minute, hour, day_of_week`` (Monday = 0), ``day`` as
        ``day_of_month``, ``day_of_year``, ``month``, ``isocalendar().week`` as
        ``week_of_year``, ``days_in_month``, ``365 + is_leap_year`` as ``days_in_year``;
        plus ``weeks_in_year`` (ISO weeks, 52 or 53, of the ISO year).
    """
    names = set(_check_names(FIELDS if fields is None else fields, "fields"))
    index, shape = datetime_index(timestamps)
    local = local_wall_time(index, tz)
    per_second = _TICKS_PER_SECOND[index.unit]
    seconds = local // per_second if per_second > 1 else local
    days, second_of_day = np.divmod(seconds, 86400)
    out: dict[str, np.ndarray] = {}
    time_of_day = {"second", "minute", "hour"}
    if names & time_of_day:
        second_of_day = second_of_day.astype(np.int32)
    if "second" in names:
        out["second"] = second_of_day % 60
    if "minute" in names:
        out["minute"] = second_of_day // 60 % 60
    if "hour" in names:
        out["hour"] = second_of_day // 3600
    if names - time_of_day:
        first, last = (int(days.min()), int(days.max())) if days.size else (0, -1)
        if last - first < days.size:
            per_day = _date_fields(np.arange(first, last + 1, dtype=np.int64))
            offset = days - first
            out.update({k: np.take(v, offset) for k, v in per_day.items() if k in names})
        else:
            out.update(_date_fields(days))
    return {k: out[k].reshape(shape) for k in FIELDS if k in names}


def field_column(fields: Mapping[str, np.ndarray | Tensor], name: str
                 ) -> np.ndarray | Tensor:
    """``fields[name]``, checked to be present and integer (range: :func:`check_field_range`).

    Shared by the encoders that take calendar fields (from :func:`calendar_fields`, or
    collated by a data loader into tensors).
    """
    if name not in fields:
        raise ValueError(f"fields has no {name!r} (needed by this encoding); got keys "
                         f"{sorted(fields)}; compute it with calendar_fields(ts, fields=...)")
    column = fields[name]
    if isinstance(column, Tensor):
        integer = not (column.is_floating_point() or column.is_complex()
                       or column.dtype == torch.bool)
    else:
        column = np.asarray(column)
        integer = column.dtype.kind in "iu"
    if not integer:
        raise TypeError(f"fields[{name!r}] must hold integers, got dtype {column.dtype}")
    return column


def check_field_range(column: np.ndarray | Tensor, name: str) -> np.ndarray | Tensor:
    """Return ``column`` if its values lie in ``FIELDS[name]``, else raise naming them."""
    first, last = FIELDS[name]
    if isinstance(column, Tensor) and torch.compiler.is_compiling():
        return column  # a data-dependent read; fields are checked where they are made
    if column.numel() if isinstance(column, Tensor) else column.size:
        low, high = int(column.min()), int(column.max())
        if low < first or high > last:
            raise ValueError(f"fields[{name!r}] must lie in [{first}, {last}], got values in "
                             f"[{low}, {high}]")
    return column
