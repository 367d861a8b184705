"""Wall-clock readings -> instants: :func:`localize`, exact across DST gaps and repeats and
across a zone's other offset changes (30-minute and whole-day gaps, a 23-hour repeat)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pandas as pd

from .timestamps import UNITS, Timestamps, _check_tz, _is_aware, datetime_index

__all__ = ["localize"]

_SHIFTS = ("shift_forward", "shift_backward")


def _check_ambiguous(ambiguous: Any, count: int) -> Any:
    """``ambiguous`` as pandas takes it, or raise: pandas ignores a misspelt string or an int
    array wherever no wall time repeats."""
    if isinstance(ambiguous, str):
        if ambiguous not in ("raise", "infer", "NaT"):
            raise ValueError(f"ambiguous must be 'raise', 'infer', 'NaT', a bool or a bool "
                             f"array, got {ambiguous!r}")
        return ambiguous
    if isinstance(ambiguous, bool | np.bool_):
        return bool(ambiguous)
    if not isinstance(ambiguous, list | tuple | np.ndarray | pd.Series | pd.Index):
        raise TypeError(f"ambiguous must be 'raise', 'infer', 'NaT', a bool or a bool array, "
                        f"got {type(ambiguous).__name__} {ambiguous!r}")
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
    if isinstance(nonexistent, str):
        if nonexistent not in ("raise", "NaT", *_SHIFTS):
            raise ValueError(f"nonexistent must be 'raise', 'NaT', 'shift_forward', "
                             f"'shift_backward' or a timedelta, got {nonexistent!r}")
        return nonexistent
    if isinstance(nonexistent, dt.timedelta | np.timedelta64):
        delta = pd.Timedelta(nonexistent)
        if delta is not pd.NaT:
            return delta
    raise TypeError(f"nonexistent must be 'raise', 'NaT', 'shift_forward', 'shift_backward' "
                    f"or a timedelta, got {nonexistent!r}")


def _wall_of(utc_ticks: np.ndarray, unit: str, tz: Any) -> np.ndarray:
    """Wall-clock ticks of ``tz`` at the given UTC ticks (UTC -> local is never ambiguous)."""
    index = pd.DatetimeIndex(utc_ticks.view(f"M8[{unit}]")).tz_localize("UTC")
    return index.tz_convert(tz).tz_localize(None).asi8


def _gap_ends(walls: np.ndarray, unit: str, tz: Any) -> np.ndarray:
    """UTC ticks of the instant each nonexistent wall time's gap ends.

    pandas' own shifts assume one-hour gaps on the hour (its "shift_forward" moves a wall time
    to the next full hour); whole-day gaps (Pacific/Kiritimati 1994-12-31, Pacific/Apia
    2011-12-30) then land a day early and Lord Howe's 30-minute gap half an hour late. The
    end of a gap is instead found from UTC -> local conversions alone: it is the first
    instant whose wall time passes ``wall``, searched between ``wall`` -/+ one day (UTC
    offsets are under a day, so the wall time there lies before/after ``wall``).
    """
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
    """ambiguous='infer' reads a repeated hour by order: a result out of order means the input
    was not sorted in time, and the inference (pandas' silent or obscure) is not to be
    trusted."""
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
    """Read tz-naive wall-clock timestamps as local times of ``tz``.

    Around DST changes (and a zone's other offset changes) some wall times do not exist (a
    gap: an hour in spring, 30 minutes on Lord Howe, a whole day in Kiritimati 1994 and Apia
    2011) and some occur twice (a repeat). By default both raise; the options follow pandas'
    ``DatetimeIndex.tz_localize``, with gaps of any length shifted exactly (pandas' own shifts
    assume one-hour gaps on the hour and misplace the others):

    Args:
        timestamps: tz-naive timestamps, 1D.
        tz: the zone (e.g. ``"America/Los_Angeles"``).
        ambiguous: ``"raise"``; ``"infer"`` (from the order of repeated readings: input not
            sorted in time raises); ``True``/``False`` or a bool array (True = the first
            of the two readings, e.g. DST); ``"NaT"``.
        nonexistent: ``"raise"``; ``"shift_forward"`` (to the instant the gap ends, i.e.
            the first existing wall time after it); ``"shift_backward"`` (to one tick of the
            timestamps' resolution before the gap: the last existing time before it); a
            ``timedelta`` to move the wall time by (landing in the gap again raises);
            ``"NaT"``. NaT results must be dropped before encoding (every encoder rejects
            NaT).

    Returns:
        ``(N,)`` tz-aware ``DatetimeIndex`` (same resolution).
    """
    index, shape = datetime_index(timestamps)
    if len(shape) != 1:
        raise ValueError(f"timestamps must be 1D to localize, got shape {shape}")
    if _is_aware(index):
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
            # NaT here marks the nonexistent times and, with ambiguous="NaT", repeated ones;
            # localizing with every repeat resolved marks the nonexistent ones alone.
            gap = index.tz_localize(tz, ambiguous=np.ones(len(index), bool),
                                    nonexistent="NaT").isna()
    except (KeyError, TypeError, ValueError) as err:
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
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"nonexistent={nonexistent!r} moves a nonexistent wall time to one that "
                f"still falls in a gap or in a repeated hour of tz={tz!r}: {err}; use "
                f"'shift_forward'/'shift_backward' or another timedelta") from err
    else:
        shifted = _gap_ends(walls, index.unit, tz) - (nonexistent == "shift_backward")
    utc = result.asi8.copy()
    utc[gap] = shifted
    return pd.DatetimeIndex(utc.view(f"M8[{index.unit}]")).tz_localize("UTC").tz_convert(
        result.tz)
