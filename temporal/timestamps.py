"""Timestamps in: one conversion that every temporal encoding goes through.

Accepted everywhere a ``timestamps`` argument appears:

- ``pandas.DatetimeIndex`` or a datetime ``pandas.Series``, tz-naive or tz-aware, any
  resolution (pandas 3 parses strings to microseconds, numpy gives seconds for dates);
- ``pandas.PeriodIndex`` or a period ``pandas.Series`` (GluonTS's index type): each period
  is the instant it starts, its ``start_time`` (what ``to_timestamp()`` gives), as naive
  wall-clock time. pandas' (and so GluonTS's) own fields of a period longer than a day are
  those of its *last* day (``Period("2020-01", "M").day`` is 31); pass
  ``periods.asfreq("D", "end").to_timestamp()`` to encode those days instead;
- a ``numpy`` ``datetime64`` array of any shape;
- int64 nanoseconds since the Unix epoch, as a numpy array or a torch tensor of any shape
  (other integers, e.g. a list of ints or an int32 array, have no known unit and raise);
- a list of ``datetime``/``date``/``Timestamp``/ISO strings (an empty list is no timestamps).

tz-aware timestamps are instants; tz-naive ones are wall-clock readings (or UTC, if that is
what the data means: then say so with ``localize(ts, "UTC")``). Nothing here guesses a zone:
naive input with a ``tz`` raises, and so do NaT, mixed naive/aware values and, in
:func:`localize`, wall times that a DST change makes ambiguous or nonexistent (unless an
explicit ``ambiguous=``/``nonexistent=`` option says what to do).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import pandas as pd
import torch
from posenc.core.validation import check_output_dtype  # noqa: F401 (its old import path)
from torch import Tensor

__all__ = [
    "Timestamps",
    "UNITS",
    "datetime_index",
    "local_wall_time",
    "to_nanoseconds",
    "to_seconds",
    "time_positions",
]

Timestamps: TypeAlias = (pd.DatetimeIndex | pd.PeriodIndex | pd.Series | np.ndarray | Tensor
                         | Sequence[Any])
"""The timestamp inputs accepted wherever a ``timestamps`` argument appears (module
docstring).
"""

UNITS: dict[str, int] = {
    "ns": 1,
    "us": 10**3,
    "ms": 10**6,
    "s": 10**9,
    "min": 60 * 10**9,
    "h": 3600 * 10**9,
    "D": 86400 * 10**9,
    "W": 7 * 86400 * 10**9,
}
"""Length of each unit in nanoseconds; the names are pandas 3's."""


def _describe(timestamps: object) -> str:
    dtype = getattr(timestamps, "dtype", None)
    return type(timestamps).__name__ + (f" of dtype {dtype}" if dtype is not None else "")


# pandas reads these as the time of the call, which no data means.
_CLOCK_WORDS = ("now", "today")


def _clock_word_error(name: str) -> ValueError:
    return ValueError(f"{name} must be dates, not {'/'.join(map(repr, _CLOCK_WORDS))}, which "
                      f"pandas reads as the time of the call; pass pd.Timestamp.now() "
                      f"explicitly if that is meant")


def _from_objects(values: np.ndarray, name: str) -> pd.DatetimeIndex:
    """Parse datetime objects / strings, refusing a mix of naive and aware values."""
    if values.dtype.kind == "U" and np.isin(values, _CLOCK_WORDS).any():
        raise _clock_word_error(name)
    if values.dtype.kind == "O":
        for i, value in enumerate(values):
            if isinstance(value, str) and value in _CLOCK_WORDS:
                raise _clock_word_error(name)
            if isinstance(value, str | bytes | dt.date | np.datetime64) or value is None or (
                    value is pd.NaT or isinstance(value, float) and math.isnan(value)):
                continue  # missing values are reported as NaT by the caller
            # pandas would read an int as nanoseconds (a guess); Periods of one frequency
            # come as a PeriodIndex, whose frequency is checked.
            raise TypeError(f"{name} must hold datetimes or date strings, but flat position "
                            f"{i} holds {type(value).__name__} ({value!r}); convert it first "
                            f"(e.g. pd.to_datetime(values, unit='s'), pd.PeriodIndex(values))")
    # One zone per array keeps "local time" well defined; pandas' own message for a mix
    # ("unless utc=True") suggests a silent conversion instead.
    kinds = {getattr(v, "tzinfo", None) is not None for v in values if isinstance(v, dt.datetime)}
    if len(kinds) > 1:
        raise TypeError(
            f"{name} mixes tz-naive and tz-aware values; make them all naive or all aware "
            f"(e.g. localize the naive ones) before encoding")
    try:
        return pd.DatetimeIndex(values)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{name} could not be read as datetimes (several time zones or offsets in one "
            f"array, unparsable values, or dates out of range): {err}") from err


def _from_datetime64(values: np.ndarray, name: str) -> pd.DatetimeIndex:
    unit = np.datetime_data(values.dtype)[0]
    if unit == "generic":
        raise TypeError(f"{name} are datetime64 without a unit (dtype {values.dtype}); give "
                        f"them one, e.g. values.astype('M8[s]')")
    if unit in ("ps", "fs", "as"):
        raise TypeError(f"{name} of dtype {values.dtype} are finer than nanoseconds, which "
                        f"pandas would truncate silently; round them to 'M8[ns]' first")
    try:
        return pd.DatetimeIndex(values)
    except (OverflowError, ValueError) as err:
        raise ValueError(f"{name} of dtype {values.dtype} are out of range for pandas "
                         f"(int64 seconds since 1970): {err}") from err


def datetime_index(timestamps: Timestamps, name: str = "timestamps"
                   ) -> tuple[pd.DatetimeIndex, tuple[int, ...]]:
    """Normalize any accepted timestamp input to a flat ``DatetimeIndex``.

    Args:
        timestamps: see the module docstring for the accepted kinds.
        name: argument name used in error messages.

    Returns:
        ``(index, shape)``: the timestamps flattened (same resolution and zone as given), and
        the input's shape, so callers can give their outputs the input's shape.

    Raises:
        TypeError: unsupported type or dtype (floats, and integers other than an int64 array
            or tensor, have no unit), datetime64 without a unit or finer than ns, values
            that are not datetimes, mixed naive/aware values.
        ValueError: NaT values (the position of the first is named), unparsable values,
            dates beyond pandas' range.
    """
    if isinstance(getattr(timestamps, "dtype", None), pd.PeriodDtype):
        # PeriodIndex, period Series or PeriodArray: a period is the instant it starts.
        periods = pd.PeriodIndex(timestamps)
        timestamps = periods.start_time
    if isinstance(timestamps, Tensor):
        if timestamps.dtype != torch.int64:
            raise TypeError(f"{name} as a tensor must hold int64 nanoseconds since the epoch, "
                            f"got dtype {timestamps.dtype}")
        timestamps = timestamps.detach().cpu().numpy()
    if isinstance(timestamps, pd.DatetimeIndex):
        index, shape = timestamps, (len(timestamps),)
    elif isinstance(timestamps, pd.Series) and timestamps.dtype.kind == "M":
        index, shape = pd.DatetimeIndex(timestamps), (len(timestamps),)
    else:
        # Only an int64 array (or tensor) is documented as nanoseconds; a list or Series of
        # ints could as well be epoch seconds.
        nanoseconds = isinstance(timestamps, np.ndarray | np.int64)
        if isinstance(timestamps, list | tuple) and not timestamps:
            timestamps = np.array([], dtype="M8[ns]")
        values = np.asarray(timestamps)
        shape, flat = values.shape, values.ravel()
        if values.dtype.kind == "M":
            index = _from_datetime64(flat, name)
        elif values.dtype == np.int64 and nanoseconds:
            index = pd.DatetimeIndex(flat.view("M8[ns]"))
        elif values.dtype.kind in "iu":
            raise TypeError(
                f"{name} as integers must be an int64 numpy array (or tensor) of nanoseconds "
                f"since the epoch; got {_describe(timestamps)}, whose unit is unknown: "
                f"convert with pd.to_datetime(values, unit=...) or np.asarray(values, "
                f"dtype=np.int64) if they are nanoseconds")
        elif values.dtype.kind in "OUS" and values.size:
            index = _from_objects(flat, name)
        else:
            raise TypeError(
                f"{name} must be a DatetimeIndex, a datetime Series, a datetime64 array, int64 "
                f"nanoseconds or a list of datetimes, got {_describe(timestamps)}")
    if index.hasnans:
        first = int(np.flatnonzero(index.isna())[0])
        raise ValueError(f"{name} contains NaT (first at flat position {first}); drop or fill "
                         f"missing timestamps before encoding them")
    return index, shape


def _is_aware(index: pd.DatetimeIndex) -> bool:
    return index.tz is not None


def _check_tz(tz: Any) -> Any:
    if tz is None or isinstance(tz, bool | int | float | np.number):
        # pandas would read a number as a fixed offset in seconds.
        raise TypeError(f"tz must be a time zone name or tzinfo (e.g. 'Europe/Berlin'), got "
                        f"{type(tz).__name__} {tz!r}")
    return tz


def local_wall_time(index: pd.DatetimeIndex, tz: Any = None, name: str = "timestamps"
                    ) -> np.ndarray:
    """Wall-clock readings of ``index`` as int64 ticks of ``index.unit`` since 1970-01-01.

    Args:
        index: tz-naive (read as wall-clock already) or tz-aware timestamps.
        tz: zone whose wall clock to read (name or tzinfo); ``None`` keeps the timestamps'
            own zone. Naive timestamps with a ``tz`` raise: localize them first.

    Returns:
        ``(N,)`` int64 local ticks; DST-correct because the UTC offset of every instant is
        looked up in the zone's transition table (by pandas, once for all fields).
    """
    if tz is not None:
        _check_tz(tz)
        if not _is_aware(index):
            raise TypeError(
                f"{name} are tz-naive, so tz={tz!r} is ambiguous: if they are wall-clock times "
                f"in {tz!r}, call localize({name}, {tz!r}) (which handles DST gaps and "
                f"repeats explicitly); if they are UTC instants, call localize({name}, 'UTC') "
                f"and pass tz={tz!r}")
        try:
            index = index.tz_convert(tz)
        except (KeyError, ValueError, TypeError) as err:
            raise ValueError(f"tz must be a time zone name or tzinfo, got {tz!r}: {err}"
                             ) from err
    if not _is_aware(index):
        return index.asi8
    offset = index.tz.utcoffset(None)
    out_of_range = ValueError(
        f"{name} have a wall-clock time in {index.tz} out of range for int64 ticks of "
        f"{index.unit!r} (1677-09-21 to 2262-04-11 in ns); give them a coarser resolution, "
        f"e.g. .as_unit('s')")
    if offset is not None:
        # A fixed-offset zone (UTC included) needs no transition lookup.
        shift = offset // pd.Timedelta(1, unit=index.unit)
        ticks, info = index.asi8, np.iinfo(np.int64)
        if len(ticks) and (ticks.max() > info.max - max(shift, 0)
                           or ticks.min() < info.min + 1 - min(shift, 0)):
            raise out_of_range
        return ticks + shift
    try:
        return index.tz_localize(None).asi8
    except (OverflowError, ValueError) as err:
        raise out_of_range from err


def to_nanoseconds(timestamps: Timestamps) -> np.ndarray:
    """int64 nanoseconds since 1970-01-01 (UTC for tz-aware input), in the input's shape.

    The exact integer form of a timestamp, for phases reduced in integer arithmetic
    (:class:`FourierSeasonality`). Covers 1677-09-21 to 2262-04-11.
    """
    index, shape = datetime_index(timestamps)
    try:
        return index.as_unit("ns").asi8.reshape(shape)
    except (OverflowError, ValueError) as err:
        raise ValueError(f"timestamps outside the int64 nanosecond range (1677-09-21 to "
                         f"2262-04-11): {err}") from err


def timestamp_argument(value: Any, name: str) -> pd.Timestamp:
    """One timestamp argument (string, datetime, Timestamp, datetime64) -> a Timestamp;
    numbers (no unit), the clock words and NaT raise, naming ``name``."""
    if isinstance(value, bool | int | float | np.number):
        raise TypeError(f"{name} must be a timestamp (string, datetime, Timestamp, "
                        f"datetime64), got {type(value).__name__} {value!r}, which has no "
                        f"unit")
    if isinstance(value, str) and value in _CLOCK_WORDS:
        raise _clock_word_error(name)
    try:
        stamp = pd.Timestamp(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a timestamp, got {value!r}: {err}") from err
    if stamp is pd.NaT:
        raise ValueError(f"{name} must be a timestamp, got NaT")
    return stamp


def _origin(origin: Any, index: pd.DatetimeIndex) -> pd.Timestamp:
    """``origin`` as a Timestamp, at the timestamps' resolution where that is exact (pandas
    subtracts in the finer of the two, which may not reach the timestamps' dates)."""
    if origin is None:
        return pd.Timestamp(0, tz="UTC" if _is_aware(index) else None).as_unit(index.unit)
    stamp = timestamp_argument(origin, "origin")
    if (stamp.tz is not None) != _is_aware(index):
        raise TypeError(
            f"origin is tz-{'aware' if stamp.tz is not None else 'naive'} ({origin!r}) but "
            f"timestamps are tz-{'aware' if _is_aware(index) else 'naive'}; give both the "
            f"same kind")
    try:
        return stamp.as_unit(index.unit, round_ok=False)
    except ValueError:  # finer than the timestamps, or out of their unit's range
        return stamp


def to_seconds(timestamps: Timestamps, origin: Any = None, *, unit: str = "s") -> np.ndarray:
    """Elapsed time from ``origin`` as float64, in the input's shape.

    Args:
        timestamps: see the module docstring. For tz-aware input this is real elapsed time
            (DST changes do not add or remove an hour); for naive input it is the difference
            of wall-clock readings.
        origin: a timestamp (string, datetime, ``Timestamp``, datetime64; not a number,
            which has no unit) of the same naive/aware kind as ``timestamps``; ``None`` is
            the Unix epoch.
        unit: one of :data:`UNITS` (``"ns", "us", "ms", "s", "min", "h", "D", "W"``).

    Returns:
        float64 array. The difference is formed in int64 ticks of the timestamps' resolution
        (of the origin's, if finer) and converted once, so it is exact to the tick while
        below 2**53 ticks (104 days in ns, 285 years in us); dates beyond 1677-2262 work at
        a resolution coarser than ns. A difference beyond int64 ticks raises.
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {list(UNITS)}, got {unit!r}")
    index, shape = datetime_index(timestamps)
    start = _origin(origin, index)
    try:
        delta = index - start
    except (OverflowError, ValueError) as err:
        raise ValueError(
            f"timestamps minus origin ({start}) does not fit int64 ticks of "
            f"{'the finer of their units' if start.unit != index.unit else index.unit!r} "
            f"({err}); choose an origin nearer the timestamps, at their resolution "
            f"({index.unit!r})") from err
    return _in_unit(delta.asi8, delta.unit, unit).reshape(shape)


def _in_unit(ticks: np.ndarray, tick_unit: str, unit: str) -> np.ndarray:
    """int64 ``ticks`` of ``tick_unit`` as float64 ``unit`` (both in :data:`UNITS`), converted
    once: exact while below 2**53 ticks."""
    out, tick_ns = ticks.astype(np.float64), UNITS[tick_unit]
    # Unit lengths divide one another, so one of these factors is 1 and the other exact.
    if tick_ns > UNITS[unit]:
        out *= tick_ns // UNITS[unit]
    elif tick_ns < UNITS[unit]:
        out /= UNITS[unit] // tick_ns
    return out


def time_positions(timestamps: Timestamps, origin: Any = None, *, unit: str = "s") -> Tensor:
    """float64 tensor of :func:`to_seconds`, for coordinates of core's encodings.

    Feed it to ``RotaryEncoding.rotate`` / ``ALiBi`` / ``MultiheadAttention(query_positions=
    ...)`` so attention sees real time gaps: the RoPE score of a (query, key) pair then
    depends only on their time difference, and ALiBi's bias is ``-slope * |dt|`` in ``unit``.
    Pick ``unit`` so typical gaps are O(1) (hours for hourly data): ALiBi slopes and RoPE
    wavelengths are tuned to token steps.
    """
    return torch.from_numpy(to_seconds(timestamps, origin, unit=unit))
