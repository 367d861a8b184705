"""Timestamps in: the one conversion every temporal encoding and table reader goes through.

Accepted wherever a ``timestamps`` argument appears
([`Timestamps`][posenc.temporal.timestamps.Timestamps]): a ``DatetimeIndex`` or datetime ``Series``
(naive or aware, any resolution); a ``PeriodIndex`` or period ``Series``, each period read as its
naive ``start_time`` (pandas' own fields of a period are its *last* day's); a ``datetime64`` array;
int64 nanoseconds since the epoch as a numpy array or torch tensor (other integers have no known
unit and raise); a list of ``datetime``/``date``/ ``Timestamp``/ISO strings. Aware timestamps are
instants, naive ones wall-clock readings; no zone is guessed: naive input with a ``tz``, NaT and
mixed naive/aware values raise. Table columns go through
[`parse_timestamps`][posenc.temporal.parse_timestamps] and
[`utc_and_local`][posenc.temporal.timestamps.utc_and_local], as in every posenc table reader.

Durations and frequency strings (``"15min"``, ``"1h30min"``, ``"1.5h"``, ``"W-SUN"``, ``"ME"``)
are parsed here too, without pandas' offset machinery (its aliases changed in pandas 3). A
frequency means what pandas 3's ``to_offset`` reads (tests/temporal/test_frequency_strings.py
checks it): fixed units ``D, h, min, s, ms, us, ns`` take decimals and combine (``"1h30min"`` ->
90 ``min``); calendar offsets (``W``, ``ME``, ``QE``, ``B``, ...) take whole multiples and an
anchor (``"QE-NOV"``); pandas < 2.2 aliases (``H, T, S, A, Q, Y``) keep their meaning, and
``"M"`` is refused as ambiguous. [`parse_duration`][posenc.temporal.timestamps.parse_duration] also
reads ``pd.Timedelta``'s spellings (``"7 days"``) but refuses months, quarters, years and business
days (no fixed length).
"""

from __future__ import annotations

import datetime as dt
import math
import re
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple, TypeAlias

import numpy as np
import pandas as pd
import torch
from pandas.tseries import offsets
from pandas.tseries.api import guess_datetime_format
from pandas.tseries.frequencies import to_offset
from torch import Tensor

from ._compat import LOCAL_TIME_ERRORS, to_datetime

__all__ = ["AMBIGUOUS", "NONEXISTENT", "UNITS", "check_no_nat", "check_tz_name", "datetime_index",
           "Frequency", "frequency_fields", "frequency_nanoseconds", "local_wall_time", "localize",
           "parse_duration", "parse_frequency", "parse_timestamps", "real_tensor", "row_label",
           "time_positions", "Timestamps", "to_nanoseconds", "to_seconds", "utc_and_local"]


Timestamps: TypeAlias = (pd.DatetimeIndex | pd.PeriodIndex | pd.Series | np.ndarray | Tensor
                         | Sequence[Any])
"""The accepted timestamp inputs (module docstring)."""

UNITS: dict[str, int] = {"ns": 1, "us": 10**3, "ms": 10**6, "s": 10**9, "min": 60 * 10**9,
                         "h": 3600 * 10**9, "D": 86400 * 10**9, "W": 7 * 86400 * 10**9}
"""Length of each unit in nanoseconds; the names are pandas 3's."""


def check_no_nat(values: Tensor | None, name: str = "timestamps") -> None:
    """Raise if an int64 nanosecond tensor holds NaT (reads values: a host sync)."""
    if values is not None and bool((values == torch.iinfo(torch.int64).min).any()):
        raise ValueError(f"{name} contains NaT (int64 min); drop or fill missing timestamps "
                         f"before encoding them")


def real_tensor(values: np.ndarray | Tensor, name: str, what: str) -> Tensor:
    """``values`` (numpy or torch) as a tensor if it holds ints or floats, else ``TypeError``."""
    out = values if isinstance(values, Tensor) else torch.from_numpy(np.asarray(values))
    ints = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    if not (out.is_floating_point() or out.dtype in ints):  # bool and complex are neither
        raise TypeError(f"{name} must hold int or float {what}, got dtype {out.dtype}")
    return out


def _describe(timestamps: object) -> str:
    dtype = getattr(timestamps, "dtype", None)
    return type(timestamps).__name__ + (f" of dtype {dtype}" if dtype is not None else "")


_CLOCK_WORDS = ("now", "today")  # pandas reads these as the time of the call


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
            # pandas would read an int as nanoseconds: a guess.
            raise TypeError(f"{name} must hold datetimes or date strings, but flat position "
                            f"{i} holds {type(value).__name__} ({value!r}); convert it first "
                            f"(e.g. pd.to_datetime(values, unit='s'), pd.PeriodIndex(values))")
    # One zone per array keeps "local time" well defined.
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
    """Any accepted input -> ``(flat DatetimeIndex, input shape)``, resolution and zone as given.
    ``TypeError`` for types without a unit and mixed naive/aware values, ``ValueError`` for NaT,
    unparsable values and dates beyond pandas' range; ``name`` is the argument named in errors."""
    if isinstance(getattr(timestamps, "dtype", None), pd.PeriodDtype):
        timestamps = pd.PeriodIndex(timestamps).start_time  # the instant each period starts
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
        # Only an int64 array (or tensor) is nanoseconds; a list of ints could be seconds.
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


def _check_tz(tz: Any) -> None:
    if tz is None or isinstance(tz, bool | int | float | np.number):  # pandas: offset in seconds
        raise TypeError(f"tz must be a time zone name or tzinfo (e.g. 'Europe/Berlin'), got "
                        f"{type(tz).__name__} {tz!r}")


def local_wall_time(index: pd.DatetimeIndex, tz: Any = None, name: str = "timestamps"
                    ) -> np.ndarray:
    """``(N,)`` int64 wall-clock ticks of ``index.unit`` since 1970-01-01, DST-correct: naive
    ``index`` as it is (a ``tz`` then raises), aware ones in ``tz`` (None: their own zone)."""
    if tz is not None:
        _check_tz(tz)
        if index.tz is None:
            raise TypeError(
                f"{name} are tz-naive, so tz={tz!r} is ambiguous: if they are wall-clock times "
                f"in {tz!r}, call localize({name}, {tz!r}) (which handles DST gaps and "
                f"repeats explicitly); if they are UTC instants, call localize({name}, 'UTC') "
                f"and pass tz={tz!r}")
        try:
            index = index.tz_convert(tz)
        except (KeyError, ValueError, TypeError) as err:
            raise ValueError(f"tz must be a time zone name or tzinfo, got {tz!r}: {err}") from err
    if index.tz is None:
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
        wall = index.tz_localize(None).asi8
    except (OverflowError, ValueError) as err:
        raise out_of_range from err
    # pandas 2 wraps an overflow around silently; a real UTC offset is under a day.
    if len(wall) and np.abs(wall.astype(np.float64) - index.asi8).max() >= UNITS["D"] // UNITS[
            index.unit]:
        raise out_of_range
    return wall


def to_nanoseconds(timestamps: Timestamps) -> np.ndarray:
    """int64 nanoseconds since 1970-01-01 (UTC for tz-aware input), in the input's shape."""
    index, shape = datetime_index(timestamps)
    try:
        return index.as_unit("ns").asi8.reshape(shape)
    except (OverflowError, ValueError) as err:
        raise ValueError(f"timestamps outside the int64 nanosecond range (1677-09-21 to "
                         f"2262-04-11): {err}") from err


def timestamp_argument(value: Any, name: str) -> pd.Timestamp:
    """One timestamp argument (string, datetime, Timestamp, datetime64) -> a Timestamp."""
    if isinstance(value, bool | int | float | np.number):
        raise TypeError(f"{name} must be a timestamp (string, datetime, Timestamp, datetime64), "
                        f"got {type(value).__name__} {value!r}, which has no unit")
    if isinstance(value, str) and value in _CLOCK_WORDS:
        raise _clock_word_error(name)
    try:
        stamp = pd.Timestamp(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a timestamp, got {value!r}: {err}") from err
    if stamp is pd.NaT:
        raise ValueError(f"{name} must be a timestamp, got NaT")
    return stamp


def _origin(origin: Any, index: pd.DatetimeIndex, name: str = "origin") -> pd.Timestamp:
    """``origin`` as a Timestamp, at the timestamps' resolution where that is exact (pandas
    subtracts in the finer unit, whose range may not reach the timestamps)."""
    if origin is None:
        return pd.Timestamp(0, tz="UTC" if index.tz is not None else None).as_unit(index.unit)
    stamp = timestamp_argument(origin, name)
    if (stamp.tz is not None) != (index.tz is not None):
        kind = {True: "aware", False: "naive"}
        raise TypeError(f"{name} is tz-{kind[stamp.tz is not None]} ({origin!r}) but timestamps "
                        f"are tz-{kind[index.tz is not None]}; give both the same kind")
    try:
        return stamp.as_unit(index.unit, round_ok=False)
    except ValueError:  # finer than the timestamps, or out of their unit's range
        return stamp


def to_seconds(timestamps: Timestamps, origin: Any = None, *, unit: str = "s") -> np.ndarray:
    """float64 elapsed time from ``origin`` in ``unit`` (one of
    [`UNITS`][posenc.temporal.timestamps.UNITS]), input's shape.

    Real elapsed time for tz-aware input, the difference of wall-clock readings for naive input.
    ``origin``: a timestamp of the same naive/aware kind; None is the Unix epoch. Formed in int64
    ticks and converted once: exact to the tick below 2**53 ticks (104 days in ns).
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {list(UNITS)}, got {unit!r}")
    index, shape = datetime_index(timestamps)
    return _elapsed(index, _origin(origin, index), unit).reshape(shape)


def _elapsed(index: pd.DatetimeIndex, start: pd.Timestamp, unit: str) -> np.ndarray:
    """``(N,)`` float64 ``index - start`` in ``unit``, formed in int64 ticks."""
    try:
        delta = index - start
    except (OverflowError, ValueError) as err:
        raise ValueError(
            f"timestamps minus origin ({start}) does not fit int64 ticks of "
            f"{'the finer of their units' if start.unit != index.unit else index.unit!r} ({err}); "
            f"choose an origin nearer the timestamps, at their resolution ({index.unit!r})"
        ) from err
    return _in_unit(delta.asi8, delta.unit, unit)


def _in_unit(ticks: np.ndarray, tick_unit: str, unit: str) -> np.ndarray:
    """int64 ``ticks`` of ``tick_unit`` as float64 ``unit``, converted once."""
    out, tick_ns = ticks.astype(np.float64), UNITS[tick_unit]
    # Unit lengths divide one another, so one of these factors is 1 and the other exact.
    if tick_ns > UNITS[unit]:
        out *= tick_ns // UNITS[unit]
    elif tick_ns < UNITS[unit]:
        out /= UNITS[unit] // tick_ns
    return out


def time_positions(timestamps: Timestamps, origin: Any = None, *, unit: str = "s") -> Tensor:
    """float64 tensor of [`to_seconds`][posenc.temporal.to_seconds]: real-time positions for core's
    attention. Pick ``unit`` so typical gaps are O(1): slopes and RoPE wavelengths are tuned to
    token steps."""
    return torch.from_numpy(to_seconds(timestamps, origin, unit=unit))


def _check_ambiguous(ambiguous: Any, count: int) -> Any:
    """``ambiguous`` as pandas takes it, or raise (pandas ignores bad values if nothing repeats)."""
    expected = "ambiguous must be 'raise', 'infer', 'NaT', a bool or a bool array"
    if isinstance(ambiguous, str):
        if ambiguous not in ("raise", "infer", "NaT"):
            raise ValueError(f"{expected}, got {ambiguous!r}")
        return ambiguous
    if isinstance(ambiguous, bool | np.bool_):
        return bool(ambiguous)
    if not isinstance(ambiguous, list | tuple | np.ndarray | pd.Series | pd.Index):
        raise TypeError(f"{expected}, got {type(ambiguous).__name__} {ambiguous!r}")
    values = np.asarray(ambiguous)
    if values.dtype != np.bool_:
        raise TypeError(f"ambiguous as an array must hold bools (True = the first of two "
                        f"readings, e.g. DST), got dtype {values.dtype}")
    if values.shape != (count,):
        raise ValueError(f"ambiguous as a bool array needs one entry per timestamp, shape "
                         f"({count},), got {values.shape}")
    return values


def _check_nonexistent(nonexistent: Any) -> Any:
    """``nonexistent`` as given, or a ``pd.Timedelta`` for a timedelta; else raise."""
    message = (f"nonexistent must be 'raise', 'NaT', 'shift_forward', 'shift_backward' or a "
               f"timedelta, got {nonexistent!r}")
    if isinstance(nonexistent, str):
        if nonexistent not in ("raise", "NaT", "shift_forward", "shift_backward"):
            raise ValueError(message)
        return nonexistent
    if isinstance(nonexistent, dt.timedelta | np.timedelta64):
        delta = pd.Timedelta(nonexistent)
        if delta is not pd.NaT:
            return delta
    raise TypeError(message)


def _wall_of(utc_ticks: np.ndarray, unit: str, tz: Any) -> np.ndarray:
    """Wall-clock ticks of ``tz`` at the given UTC ticks (UTC -> local is never ambiguous)."""
    index = pd.DatetimeIndex(utc_ticks.view(f"M8[{unit}]")).tz_localize("UTC")
    return index.tz_convert(tz).tz_localize(None).asi8


def _gap_ends(walls: np.ndarray, unit: str, tz: Any) -> np.ndarray:
    """UTC ticks of the instant each nonexistent wall time's gap ends, bisected between ``wall``
    -/+ one day from UTC -> local conversions (pandas' shifts assume one-hour gaps)."""
    day = UNITS["D"] // UNITS[unit]
    info = np.iinfo(np.int64)
    lo = np.maximum(walls, info.min + 1 + day) - day
    hi = np.minimum(walls, info.max - day) + day
    if not ((_wall_of(lo, unit, tz) < walls).all() and (_wall_of(hi, unit, tz) > walls).all()):
        raise ValueError(f"cannot locate the time-zone gap of nonexistent wall times in "
                         f"tz={tz!r}; use nonexistent='raise' or 'NaT' and fix them by hand")
    while (hi - lo > 1).any():
        mid = lo + (hi - lo) // 2
        after = _wall_of(mid, unit, tz) > walls
        hi, lo = np.where(after, mid, hi), np.where(after, lo, mid)
    return hi


def _check_sorted(index: pd.DatetimeIndex) -> None:
    """ambiguous='infer' reads repeats by order: a result out of order means unsorted input."""
    ticks = index.asi8[~index.isna()]
    backwards = np.flatnonzero(ticks[1:] < ticks[:-1])
    if len(backwards):
        where = int(np.flatnonzero(~index.isna())[backwards[0]])
        raise ValueError(
            f"ambiguous='infer' reads repeated wall times by their order, so it needs "
            f"timestamps sorted in time, but they go back in time after position {where} "
            f"({index[where]} then {index[where + 1]}); sort them first, or pass ambiguous "
            f"as a bool array")


def localize(timestamps: Timestamps, tz: Any, *, ambiguous: Any = "raise",
             nonexistent: Any = "raise") -> pd.DatetimeIndex:
    """Read ``(N,)`` tz-naive wall-clock timestamps as local times of ``tz``: a tz-aware
    ``DatetimeIndex`` of the same resolution. Options as pandas' ``tz_localize``, but gaps of
    any length (30 minutes on Lord Howe, a day in Kiritimati 1994) are shifted exactly.

    Args:
        ambiguous: ``"raise"``; ``"infer"`` (from the order of repeated readings: input not
            sorted in time raises); ``True``/``False`` or a bool array (True = the first
            of the two readings, e.g. DST); ``"NaT"``.
        nonexistent: ``"raise"``; ``"shift_forward"`` (to the instant the gap ends);
            ``"shift_backward"`` (one tick of the timestamps' resolution before the gap); a
            ``timedelta`` to move the wall time by (landing in a gap again raises); ``"NaT"``
            (drop those before encoding: every encoder rejects NaT).
    """
    index, shape = datetime_index(timestamps)
    if len(shape) != 1:
        raise ValueError(f"timestamps must be 1D to localize, got shape {shape}")
    if index.tz is not None:
        raise TypeError(f"timestamps are already tz-aware (tz={index.tz}); pass tz= to the "
                        f"encoder to read them in another zone")
    _check_tz(tz)
    ambiguous = _check_ambiguous(ambiguous, len(index))
    nonexistent = _check_nonexistent(nonexistent)
    passed = nonexistent if isinstance(nonexistent, str) and nonexistent in ("raise", "NaT") \
        else "NaT"
    try:
        result = index.tz_localize(tz, ambiguous=ambiguous, nonexistent=passed)
        if passed == "NaT" and len(index):
            # With every repeat resolved, NaT marks the nonexistent times alone.
            gap = index.tz_localize(tz, ambiguous=np.ones(len(index), bool),
                                    nonexistent="NaT").isna()
    except (KeyError, TypeError, *LOCAL_TIME_ERRORS) as err:
        raise ValueError(
            f"cannot localize timestamps to tz={tz!r} with ambiguous={ambiguous!r}, "
            f"nonexistent={nonexistent!r}: {err}. Choose ambiguous= (True/False/'infer'/"
            f"'NaT') for repeated fall-back times and nonexistent= ('shift_forward'/"
            f"'shift_backward'/timedelta/'NaT') for spring-forward gaps"
            + (" ('infer' needs timestamps sorted in time)"
               if isinstance(ambiguous, str) and ambiguous == "infer" else "")) from err
    if isinstance(ambiguous, str) and ambiguous == "infer":
        _check_sorted(result)
    if passed == nonexistent or not len(index) or not gap.any():
        return result
    walls = index.asi8[gap]
    if isinstance(nonexistent, pd.Timedelta):
        moved = index[gap] + nonexistent
        try:
            shifted = moved.tz_localize(tz, ambiguous="raise", nonexistent="raise").asi8
        except (TypeError, *LOCAL_TIME_ERRORS) as err:
            raise ValueError(
                f"nonexistent={nonexistent!r} moves a nonexistent wall time to one that "
                f"still falls in a gap or in a repeated hour of tz={tz!r}: {err}; use "
                f"'shift_forward'/'shift_backward' or another timedelta") from err
    else:
        shifted = _gap_ends(walls, index.unit, tz) - (nonexistent == "shift_backward")
    utc = result.asi8.copy()
    utc[gap] = shifted
    return pd.DatetimeIndex(utc.view(f"M8[{index.unit}]")).tz_localize("UTC").tz_convert(result.tz)


AMBIGUOUS = ("raise", "earliest", "latest", "infer")
NONEXISTENT = ("raise", "shift_forward", "shift_backward")

_NULL_TEXT = ("", "nat", "nan", "none", "null")


def row_label(position: int, source: str | None) -> str:
    """``"row 3"``, plus its line in ``source`` when that is a CSV file (for messages)."""
    where = f"row {position}"
    if source is not None and source.lower().endswith(".csv"):
        where += f" (line {position + 2} of {source})"
    return where


def _timestamp(value: str, fmt: str | None) -> pd.Timestamp | None:
    """One timestamp string in ``fmt`` or else as ``pd.Timestamp`` reads it (which keeps a
    " GMT" suffix that pandas 2's ``to_datetime`` drops); None if it does not parse."""
    try:
        stamp = pd.to_datetime(value, format=fmt) if fmt is not None else pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError):
        try:
            stamp = pd.Timestamp(value)
        except (ValueError, TypeError, OverflowError):
            return None
    return None if pd.isna(stamp) else stamp


def _aware(value: str, fmt: str | None) -> bool | None:
    """Whether a timestamp string parses to a tz-aware time (None: it does not parse)."""
    stamp = _timestamp(value, fmt)
    return None if stamp is None else stamp.tzinfo is not None


def _outside(name: str, position: int, column: pd.Series, source: str | None) -> ValueError:
    return ValueError(f"timestamp column {name!r}: {row_label(position, source)} value "
                      f"{column.iloc[position]!r} is outside the nanosecond range "
                      f"({pd.Timestamp.min} to {pd.Timestamp.max})")


def _mixed_zones(name: str, naive_row: int, aware_row: int, column: pd.Series,
                 source: str | None) -> ValueError:
    return ValueError(
        f"timestamp column {name!r} mixes tz-naive and tz-aware values: "
        f"{row_label(naive_row, source)} is {column.iloc[naive_row]!r} (no UTC offset) but "
        f"{row_label(aware_row, source)} is {column.iloc[aware_row]!r}; use one form")


def _parse_objects(column: pd.Series, name: str, source: str | None) -> pd.DatetimeIndex:
    """An object column of ``datetime``/``Timestamp`` values."""
    values = column.to_numpy()
    aware = [i for i, v in enumerate(values) if isinstance(v, dt.datetime) and v.tzinfo]
    naive = [i for i, v in enumerate(values) if isinstance(v, dt.datetime) and not v.tzinfo]
    if aware and naive:
        raise _mixed_zones(name, naive[0], aware[0], column, source)
    try:
        # One zone is kept, as a datetime column keeps it; several are read in UTC.
        return pd.DatetimeIndex(to_datetime(values))
    except ValueError:
        return pd.DatetimeIndex(to_datetime(values, utc=True))


def _first_kinds(text: pd.Series, fmt: str) -> dict[bool, int]:
    """First row of each kind (False naive, True aware), parsing one row per digit pattern."""
    shapes = text.str.replace(r"\d", "0", regex=True)
    kinds: dict[bool, int] = {}
    for position in shapes.drop_duplicates().index:
        kind = _aware(text.loc[position], fmt)
        if kind is not None:
            kinds.setdefault(kind, int(position))
    return kinds


def _parse_text(column: pd.Series, name: str, source: str | None,
                timestamp_format: str | None) -> pd.DatetimeIndex:
    """Text timestamps, all in one format: ``timestamp_format``, else the first row's."""
    text = column.reset_index(drop=True)
    if not pd.api.types.is_string_dtype(text) or text.dtype == object:
        text = text.astype("string")
    null_like = text.isna().to_numpy(dtype=bool)
    # pandas reads "", "nan", "NaT" as missing: skip them.
    first = next((int(i) for i in np.flatnonzero(~null_like)
                  if str(text.iloc[int(i)]).strip().lower() not in _NULL_TEXT), None)
    if first is None:
        return pd.DatetimeIndex(np.full(len(text), np.datetime64("NaT", "ns")))
    sample = text.iloc[first]
    fmt = timestamp_format
    if fmt is None:
        # pandas would retry a mismatch with format="mixed": "01/02/2021" among ISO became 2 Jan.
        fmt = guess_datetime_format(sample)
        if fmt is None:
            iso = pd.to_datetime(text[~null_like], format="ISO8601", errors="coerce", utc=True)
            hint = (" (every row is ISO 8601: timestamp_format='ISO8601' reads them)"
                    if iso.notna().all() else "")
            raise ValueError(
                f"timestamp column {name!r}: the format of {row_label(first, source)} value "
                f"{column.iloc[first]!r} cannot be inferred; pass timestamp_format (a strftime "
                f"format such as '%Y-%m-%d %H:%M:%S%z', or 'ISO8601'){hint}. Numbers since the "
                "epoch: convert them with pd.to_datetime(..., unit='s'/'ms'/'ns')")
    try:
        # One UTC offset keeps its fixed-offset zone (its wall clock is the local time);
        # several are read in UTC.
        try:
            parsed = to_datetime(text, format=fmt, errors="coerce")
        except ValueError:
            if fmt in ("ISO8601", "mixed"):
                # These take naive and offset rows alike; utc=True would read naive as UTC.
                kinds = _first_kinds(text[~null_like], fmt)
                if len(kinds) == 2:
                    raise _mixed_zones(name, kinds[False], kinds[True], column, source) from None
            parsed = to_datetime(text, format=fmt, errors="coerce", utc=True)
    except (ValueError, TypeError) as err:
        if isinstance(err, ValueError) and str(err).startswith("timestamp column"):
            raise
        raise ValueError(f"timestamp_format={fmt!r} is not a usable format for timestamp "
                         f"column {name!r}: {err}") from err
    # Unread rows, except those pandas reads as missing (the caller reports NaT).
    rows = np.flatnonzero(pd.isna(parsed).to_numpy() & ~null_like)
    rows = rows[~text.iloc[rows].str.strip().str.lower().isin(_NULL_TEXT).to_numpy(dtype=bool)]
    if len(rows):
        row = int(rows[0])
        value = column.iloc[row]
        alone = _timestamp(text.iloc[row], None)
        if alone is not None and not _NS_MIN[alone.tz is not None] <= alone <= _NS_MAX[
                alone.tz is not None]:  # pandas 2 reads text in nanoseconds only
            raise _outside(name, row, column, source)
        forms = (_aware(sample, fmt), None if alone is None else alone.tzinfo is not None)
        if None not in forms and forms[0] != forms[1]:
            naive, aware = (row, first) if forms[0] else (first, row)
            raise _mixed_zones(name, naive, aware, column, source)
        if timestamp_format is None:
            raise ValueError(
                f"timestamp column {name!r}: {row_label(row, source)} value {value!r} cannot be "
                f"parsed: it does not match the format {fmt!r} of {row_label(first, source)} "
                f"({column.iloc[first]!r}); a column holds one format: fix the row, or "
                f"pass timestamp_format ('ISO8601' reads every ISO 8601 variant, 'mixed' "
                f"guesses each row)")
        raise ValueError(f"timestamp column {name!r}: {row_label(row, source)} value {value!r} "
                         f"cannot be parsed as a timestamp with timestamp_format={fmt!r}")
    return pd.DatetimeIndex(parsed)


def parse_timestamps(column: pd.Series, name: str, source: str | None = None,
                     timestamp_format: str | None = None) -> pd.DatetimeIndex:
    """A timestamp column ``name`` -> ``(N,)`` ``DatetimeIndex`` (naive, or tz-aware in its own
    zone or UTC), any resolution.

    ``column`` holds datetimes, periods (their naive start times) or text in one format:
    ``timestamp_format`` (``"%d/%m/%Y %H:%M"``, ``"ISO8601"``, ``"mixed"``), else the one
    inferred from the first row. Errors name the first bad row (and its line in a ``.csv``
    ``source``): ``ValueError`` for missing, unparsable or mixed timestamps, ``TypeError`` for
    numbers (their unit is ambiguous).
    """
    if not isinstance(column, pd.Series):
        raise TypeError(f"column must be a pandas Series, got {type(column).__name__}")
    if timestamp_format is not None and not isinstance(timestamp_format, str):
        raise TypeError(f"timestamp_format must be a str or None, got "
                        f"{type(timestamp_format).__name__} ({timestamp_format!r})")
    if isinstance(column.dtype, pd.PeriodDtype):
        # A period is the instant it starts, as in datetime_index.
        parsed = pd.PeriodIndex(column).start_time
    elif isinstance(column.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(column):
        parsed = pd.DatetimeIndex(column)
    elif pd.api.types.is_timedelta64_dtype(column):
        raise TypeError(f"timestamp column {name!r} holds {column.dtype} durations, expected "
                        "timestamps (add them to a start time first)")
    elif pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column):
        raise TypeError(f"timestamp column {name!r} holds {column.dtype} numbers; their unit is "
                        "ambiguous: convert it with pd.to_datetime(..., unit='s'/'ms'/'ns') "
                        "or store timestamps as text")
    elif column.dtype == object and len(column) and all(
            isinstance(v, dt.datetime) or v is None or v is pd.NaT for v in column):
        parsed = _parse_objects(column, name, source)
    elif column.dtype == object and isinstance(next(iter(column.dropna()), None), pd.Period):
        try:
            parsed = pd.PeriodIndex(column.to_numpy()).start_time
        except (TypeError, ValueError) as err:  # several frequencies, or other values
            raise TypeError(f"timestamp column {name!r} holds Period values that form no "
                            f"single PeriodIndex ({err}); give them one frequency (.asfreq) "
                            "or convert them to timestamps") from None
    else:
        parsed = _parse_text(column, name, source, timestamp_format)
    missing = np.flatnonzero(parsed.isna())
    if len(missing):
        raise ValueError(f"timestamp column {name!r}: {row_label(int(missing[0]), source)} is "
                         f"missing (NaT); {len(missing)} row(s) without a timestamp")
    outside = np.flatnonzero((parsed < _NS_MIN[parsed.tz is not None])
                             | (parsed > _NS_MAX[parsed.tz is not None]))
    if len(outside):
        raise _outside(name, int(outside[0]), column, source)
    return parsed


_NS_MIN = {False: pd.Timestamp.min, True: pd.Timestamp.min.tz_localize("UTC")}
_NS_MAX = {False: pd.Timestamp.max, True: pd.Timestamp.max.tz_localize("UTC")}


def check_tz_name(tz: str | None) -> str | None:
    """``tz`` if it is None or a known IANA zone name, else ``TypeError``/``ValueError``."""
    if tz is not None and not isinstance(tz, str):
        raise TypeError(f"tz must be an IANA time zone name (str) or None, got "
                        f"{type(tz).__name__} ({tz!r})")
    if tz is not None:
        try:
            pd.Timestamp(0, tz=tz)
        except Exception as err:  # zoneinfo/pytz raise different types for unknown zones
            raise ValueError(f"tz={tz!r} is not a known time zone (use an IANA name such as "
                             "'Europe/Berlin')") from err
    return tz


def utc_and_local(index: pd.DatetimeIndex, tz: str | None, ambiguous: str = "raise",
                  nonexistent: str = "raise", name: str = "timestamps"
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(N,)`` parsed timestamps -> ``(utc, local)`` int64 nanoseconds: UTC since the epoch
    and naive local wall-clock time.

    Naive timestamps are local times of ``tz`` ([`localize`][posenc.temporal.localize],
    ``ambiguous`` one of `AMBIGUOUS`, ``earliest`` = the DST reading; ``nonexistent`` one of
    `NONEXISTENT`); aware ones are converted to ``tz``. ``tz=None`` keeps naive data as
    its own clock and aware data in its zone.
    """
    if index.tz is None and tz is not None:
        amb: Any = {"earliest": np.ones(len(index), bool),
                    "latest": np.zeros(len(index), bool)}.get(ambiguous, ambiguous)
        try:
            index = localize(index, tz, ambiguous=amb, nonexistent=nonexistent)
        except ValueError as err:
            raise ValueError(f"timestamp column {name!r}: {err}. Here: ambiguous is one of "
                             f"{list(AMBIGUOUS)}, nonexistent one of {list(NONEXISTENT)}"
                             ) from err
    elif index.tz is not None and tz is not None:
        index = index.tz_convert(tz)
    index = index.as_unit("ns")
    return np.asarray(index.asi8, np.int64), np.asarray(local_wall_time(index), np.int64)


# -- durations and frequency strings ---------------------------------------------------------------
# The offsets posenc reads, by pandas' class, under their pandas 3 aliases: fixed lengths
# (pandas' Ticks, and Day) first, then calendar offsets. The GluonTS feature set of each
# (``time_features_from_frequency_str``, in its order; none below seconds).
_FIXED: dict[type, str] = {offsets.Day: "D", offsets.Hour: "h", offsets.Minute: "min",
                           offsets.Second: "s", offsets.Milli: "ms", offsets.Micro: "us",
                           offsets.Nano: "ns"}
_CALENDAR: dict[type, str] = {
    offsets.YearEnd: "YE", offsets.YearBegin: "YS", offsets.QuarterEnd: "QE",
    offsets.QuarterBegin: "QS", offsets.MonthEnd: "ME", offsets.MonthBegin: "MS",
    offsets.Week: "W", offsets.BusinessDay: "B", offsets.CustomBusinessDay: "C"}
_DAY = ("day_of_week", "day_of_month", "day_of_year")
_GLUONTS_FIELDS: dict[str, tuple[str, ...]] = {
    "YE": (), "YS": (), "QE": ("month",), "QS": ("month",), "ME": ("month",), "MS": ("month",),
    "W": ("day_of_month", "week_of_year"), "D": _DAY, "B": _DAY, "C": _DAY,
    "h": ("hour", *_DAY), "min": ("minute", "hour", *_DAY),
    "s": ("second", "minute", "hour", *_DAY)}
# Spellings pandas 3 dropped (pandas 2.2 reads them with a warning), and case variants it warns
# about: they keep their meaning in both.
_SPELLINGS = {"H": "h", "T": "min", "S": "s", "L": "ms", "U": "us", "N": "ns", "A": "YE",
              "Y": "YE", "AS": "YS", "Q": "QE", "d": "D", "Min": "min", "MIN": "min"}
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_AMBIGUOUS = {"M": "'M' is month end to pandas < 2.2, refused by pandas 3 and minutes to many "
                   "readers: write 'ME' (month end), 'MS' (month start) or 'min' (minutes); "
                   "a PeriodIndex spells months 'M': pass its .freq.freqstr ('ME')",
              "m": "'m' is minutes to pd.Timedelta but refused by pandas' to_offset: write "
                   "'min' (minutes) or 'ME' (month end)"}
# One component: an optional multiple (whole or decimal) and an alias with an anchor.
_COMPONENT = re.compile(r"\s*(\d*\.?\d*)\s*([A-Za-z]+)(?:-([A-Z]+))?")


class Frequency(NamedTuple):
    """``n`` steps of ``alias`` (pandas 3 spelling): ``Frequency(2, "W", "MON")`` is "2W-MON"."""

    n: int
    alias: str
    anchor: str | None = None

    @property
    def fixed(self) -> bool:
        """Whether the step has a fixed length (pandas' Ticks, and Day)."""
        return self.alias in _FIXED.values()


def _components(text: str) -> list[tuple[str, str, str | None]] | None:
    """``(multiple, alias, anchor)`` of each component of ``text``, or None if it has others."""
    parts, position = [], 0
    while position < len(text):
        match = _COMPONENT.match(text, position)
        if match is None or not match.group(0).strip():
            return None
        parts.append(match.groups())
        position = match.end()
    return parts or None


def _refusal(freq: str, parts: list[tuple[str, str, str | None]], name: str,
             err: ValueError) -> ValueError:
    """Why pandas refused ``freq``, from what it reads of each component alone."""
    for multiple, alias, anchor in parts:
        unit = _SPELLINGS.get(alias, alias)
        fixed = type(to_offset(unit)) in _FIXED
        if multiple == ".":
            return ValueError(f"{name}={freq!r} has a multiple without digits")
        if anchor is not None:
            anchors = [a for a in (*_MONTHS, *_WEEKDAYS) if _reads(f"{unit}-{a}")]
            if anchor not in anchors:
                return ValueError(f"{name}={freq!r} has anchor {anchor!r}; {alias!r} takes "
                                  f"{'one of ' + str(anchors) if anchors else 'no anchor'}")
        if "." in multiple and not fixed:
            return ValueError(f"{name}={freq!r}: the calendar offset {alias!r} takes whole "
                              f"multiples only (as in pandas); use a fixed unit, e.g. '36h'")
        if not fixed and len(parts) > 1:
            return ValueError(f"{name}={freq!r} combines the calendar offset {alias!r} with "
                              f"other units, which pandas cannot add; give one offset or "
                              f"fixed units only (e.g. '1D12h')")
    if any("." in multiple for multiple, _, _ in parts):
        return ValueError(f"{name}={freq!r} is not a whole number of nanoseconds")
    return ValueError(f"{name}={freq!r} is not a frequency pandas reads: {err}")


def _reads(freq: str) -> bool:
    """Whether pandas' ``to_offset`` reads ``freq``."""
    try:
        to_offset(freq)
    except ValueError:
        return False
    return True


def parse_frequency(freq: str, name: str = "freq") -> Frequency:
    """``freq`` as pandas' ``to_offset(freq)`` reads it (``name``: the argument named in
    errors); the spellings pandas 3 dropped (``H, T, S, A, Y, Q``...) keep their meaning.
    ``ValueError`` for an unknown alias or anchor, ``"M"``, a step <= 0, a decimal or
    combined calendar offset (``"1.5W"``, ``"1W1D"``)."""
    if not isinstance(freq, str):
        raise TypeError(f"{name} must be a pandas frequency string (e.g. '15min', '1h30min', "
                        f"'W-SUN'), got {type(freq).__name__} ({freq!r})")
    text = freq.strip()
    if text.startswith("-"):
        raise ValueError(f"{name}={freq!r} must be a positive step (a negative frequency "
                         f"samples no series)")
    parts = _components(text.removeprefix("+"))
    known = sorted({*_FIXED.values(), *_CALENDAR.values()})

    def unknown(detail: str) -> ValueError:
        return ValueError(f"{name} must be a pandas frequency string (a multiple and one of "
                          f"{known}; fixed-length units combine and take decimals: "
                          f"'1h30min', '1.5h'; GluonTS's feature sets cover these units), "
                          f"got {freq!r}{detail}")

    if parts is None:
        raise unknown("")
    out_of_range = ValueError(f"{name}={freq!r} is out of range (a multiple beyond int64)")
    for multiple, alias, _ in parts:
        if alias in _AMBIGUOUS:
            raise ValueError(f"{name}={freq!r} is ambiguous: {_AMBIGUOUS[alias]}")
        if _SPELLINGS.get(alias, alias) not in known:
            raise unknown(f" (unknown unit {alias!r})")
        if int(multiple.partition(".")[0] or 0) >= 2**63:  # pandas 2 and 3 fail differently
            raise out_of_range
    spelled = " ".join(f"{multiple}{_SPELLINGS.get(alias, alias)}" + (f"-{anchor}" if anchor
                       else "") for multiple, alias, anchor in parts)
    try:
        offset = to_offset(spelled)
    except ValueError as err:
        raise _refusal(freq, parts, name, err) from None
    except OverflowError:  # a multiple in int64 whose step in nanoseconds is not
        raise out_of_range from None
    alias = _FIXED.get(type(offset)) or _CALENDAR[type(offset)]
    frequency = Frequency(offset.n, alias, parts[0][2] if len(parts) == 1 else None)
    if frequency.n < 1:
        raise ValueError(f"{name}={freq!r} must be a positive step, got " + (
            f"{frequency.n * UNITS[alias]} ns" if frequency.fixed else f"{frequency.n} steps"))
    return frequency


def frequency_nanoseconds(freq: str, name: str = "freq") -> int:
    """Nanoseconds of one step of a fixed-length ``freq`` (pandas' ``to_offset(freq).nanos``);
    calendar offsets raise."""
    frequency = parse_frequency(freq, name)
    if not frequency.fixed:
        raise ValueError(f"{name}={freq!r} has no fixed length (a calendar offset); give a "
                         f"fixed unit, e.g. '7D' for weeks")
    return frequency.n * UNITS[frequency.alias]


def frequency_fields(freq: str, name: str = "freq") -> tuple[str, ...]:
    """Fields GluonTS's ``time_features_from_frequency_str(freq)`` uses, in its order: those
    of pandas' resulting unit (``"1.5h"`` is 90 minutes: the minute fields)."""
    frequency = parse_frequency(freq, name)
    if frequency.alias not in _GLUONTS_FIELDS:
        raise ValueError(f"{name}={freq!r} is {frequency.n} {frequency.alias} steps, which "
                         f"have no GluonTS feature set (sub-second frequencies); GluonTS "
                         f"covers units from seconds to years")
    return _GLUONTS_FIELDS[frequency.alias]


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
# Calendar offsets as durations: name, about how many days one step is, months per step.
_CALENDAR_UNITS = {**dict.fromkeys(("YE", "YS"), ("year", 365, 12)),
                   **dict.fromkeys(("QE", "QS"), ("quarter", 91, 3)),
                   **dict.fromkeys(("ME", "MS"), ("month", 30, 1)),
                   **dict.fromkeys(("B", "C"), ("business day", 1, 0))}


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
            if _SPELLINGS.get(word, word) in _CALENDAR_UNITS:
                step = parse_frequency(text, name)
                label, days, _ = _CALENDAR_UNITS[step.alias]
                about = (step.n * 365) // 12 if label == "month" and step.n % 12 == 0 else (
                    step.n * days)
                raise ValueError(f"{name}={value!r} is {step.n} calendar {label}(s) "
                                 f"({step.alias!r}), which have no fixed length; {name} takes a "
                                 f"fixed duration (units W, D, h, min, s, ms, us, ns), e.g. "
                                 f"'{about}D' for about as long{or_else}")
        fixed = [_SPELLINGS.get(word, word) in _FIXED.values() for word in words]
        if words and all(fixed):
            ns = frequency_nanoseconds(text, name)
            if ns > np.iinfo(np.int64).max:
                raise ValueError(f"{name}={value!r} is out of range (durations reach about "
                                 f"292 years)")
            return ns
        if not all(is_fixed or word in ("W", "w") or word.lower() in _DURATION_WORDS
                   for word, is_fixed in zip(words, fixed, strict=True)):
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


_MONTHS_PER = {"month": 1, "quarter": 3, "year": 12}  # the words parse_time_unit reads
_CALENDAR_UNIT_WORDS = re.compile(r"\s*(\d+)?\s*(month|quarter|year)s?\s*", re.IGNORECASE)


def parse_time_unit(value: Any, name: str = "time_unit") -> TimeUnit:
    """A unit of elapsed time: a fixed duration
    ([`parse_duration`][posenc.temporal.timestamps.parse_duration]) or calendar months: month,
    quarter and year frequency strings (``"3MS"``, ``"QS-NOV"``: the anchor changes nothing) or
    words (``"2 months"``, ``"quarter"``, ``"year"``).

    Raises:
        TypeError: neither a string nor a timedelta.
        ValueError: what [`parse_duration`][posenc.temporal.timestamps.parse_duration] refuses that
            is no month, quarter or year (business days, a number without a unit, ...), or zero
            months.
    """
    if isinstance(value, str):
        words = _CALENDAR_UNIT_WORDS.fullmatch(value)
        if words is not None:
            months = int(words.group(1) or 1) * _MONTHS_PER[words.group(2).lower()]
            if months < 1:
                raise ValueError(f"{name}={value!r} must be a positive number of months")
            return TimeUnit(months=months)
        parts = _components(value.strip())
        first = _SPELLINGS.get(parts[0][1], parts[0][1]) if parts else ""
        if _CALENDAR_UNITS.get(first, ("", 0, 0))[2]:  # months, quarters or years
            frequency = parse_frequency(value, name)
            return TimeUnit(months=frequency.n * _CALENDAR_UNITS[frequency.alias][2])
    try:
        return TimeUnit(nanoseconds=parse_duration(value, name))
    except ValueError as err:
        raise ValueError(f"{err}; or calendar months, quarters or years ('MS', 'QS', 'YS', "
                         f"'3 months')") from None
