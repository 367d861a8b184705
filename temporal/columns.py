"""Timestamp columns of a table -> instants and local wall-clock times.

:func:`parse_timestamps` reads one column (datetime values, ``datetime`` objects or text in
one format) and refuses what it cannot read exactly; :func:`utc_and_local` turns the result
into the two int64 clocks a forecaster needs, through :func:`~posenc.temporal.localize`.
Every table reader in posenc (the data modules, ``make_batch``, ``Forecaster.forecast``)
goes through these two functions, so a timestamp means the same thing everywhere.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format

from .timestamps import local_wall_time
from .zones import localize

__all__ = ["AMBIGUOUS", "NONEXISTENT", "check_tz_name", "parse_timestamps", "row_label",
           "utc_and_local"]

AMBIGUOUS = ("raise", "earliest", "latest", "infer")
NONEXISTENT = ("raise", "shift_forward", "shift_backward")

_NULL_TEXT = ("", "nat", "nan", "none", "null")


def row_label(position: int, source: str | None) -> str:
    """``"row 3"``, plus its line in ``source`` when that is a CSV file (for messages)."""
    where = f"row {position}"
    if source is not None and source.lower().endswith(".csv"):
        where += f" (line {position + 2} of {source})"
    return where


def _aware(value: str, fmt: str | None) -> bool | None:
    """Whether one timestamp string parses to a tz-aware time (None: it does not parse)."""
    try:
        stamp = pd.to_datetime(value, format=fmt)
    except (ValueError, TypeError, OverflowError):
        try:
            stamp = pd.Timestamp(value)
        except (ValueError, TypeError, OverflowError):
            return None
    return None if pd.isna(stamp) else stamp.tzinfo is not None


def _mixed_zones(name: str, naive_row: int, aware_row: int, column: pd.Series,
                 source: str | None) -> ValueError:
    return ValueError(
        f"timestamp column {name!r} mixes tz-naive and tz-aware values: "
        f"{row_label(naive_row, source)} is {column.iloc[naive_row]!r} (no UTC offset) but "
        f"{row_label(aware_row, source)} is {column.iloc[aware_row]!r}; use one form")


def _parse_objects(column: pd.Series, name: str, source: str | None) -> pd.DatetimeIndex:
    """An object column of ``datetime``/``Timestamp`` values (no text)."""
    values = column.to_numpy()
    aware = [i for i, v in enumerate(values) if isinstance(v, dt.datetime) and v.tzinfo]
    naive = [i for i, v in enumerate(values) if isinstance(v, dt.datetime) and not v.tzinfo]
    if aware and naive:
        raise _mixed_zones(name, naive[0], aware[0], column, source)
    try:
        # One zone (or offset) is kept, as a datetime column keeps it: its wall clock is the
        # local time. Several have no one zone: UTC (pandas refuses them without utc=True).
        return pd.DatetimeIndex(pd.to_datetime(values))
    except ValueError:
        return pd.DatetimeIndex(pd.to_datetime(values, utc=True))


def _first_kinds(text: pd.Series, fmt: str) -> dict[bool, int]:
    """First row of each kind (False naive, True aware) among the rows of ``text``."""
    # Parse one row per shape (digits masked), in row order: few shapes, whatever N.
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
    present = np.flatnonzero(~null_like)
    # pandas reads "", "nan", "NaT" as missing: skip them when looking for the first row.
    first = next((int(i) for i in present
                  if str(text.iloc[int(i)]).strip().lower() not in _NULL_TEXT), None)
    if first is None:
        return pd.DatetimeIndex(np.full(len(text), np.datetime64("NaT", "ns")))
    sample = text.iloc[first]
    fmt = timestamp_format
    if fmt is None:
        # pandas infers a format from the first row too, but on a mismatch its retry
        # (format="mixed") guesses every row: one "01/02/2021" among ISO rows became 2 Jan.
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
        # One UTC offset keeps its fixed-offset zone, as a datetime column (a DataFrame's,
        # a Parquet file's) holds it: the text's wall clock is the local time in every
        # format. pandas refuses several offsets unless utc=True: those are read in UTC.
        try:
            parsed = pd.to_datetime(text, format=fmt, errors="coerce")
        except ValueError:
            if fmt in ("ISO8601", "mixed"):
                # These take naive and offset rows alike; utc=True would read naive rows as
                # UTC.
                kinds = _first_kinds(text[~null_like], fmt)
                if len(kinds) == 2:
                    raise _mixed_zones(name, kinds[False], kinds[True], column, source
                                       ) from None
            parsed = pd.to_datetime(text, format=fmt, errors="coerce", utc=True)
    except (ValueError, TypeError) as err:
        if isinstance(err, ValueError) and str(err).startswith("timestamp column"):
            raise
        raise ValueError(f"timestamp_format={fmt!r} is not a usable format for timestamp "
                         f"column {name!r}: {err}") from err
    unread = pd.isna(parsed).to_numpy() & ~null_like
    if unread.any():
        # Text that pandas reads as missing is reported as missing (NaT) by the caller.
        rows = np.flatnonzero(unread)
        blank = text.iloc[rows].str.strip().str.lower().isin(_NULL_TEXT).to_numpy(dtype=bool)
        rows = rows[~blank]
    else:
        rows = np.zeros(0, np.int64)
    if len(rows):
        row = int(rows[0])
        value = column.iloc[row]
        forms = (_aware(sample, fmt), _aware(text.iloc[row], None))
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


def _first_value(column: pd.Series) -> Any:
    """The first non-missing value of ``column`` (None if there is none)."""
    position = np.flatnonzero(column.notna().to_numpy())
    return column.iloc[int(position[0])] if len(position) else None


def parse_timestamps(column: pd.Series, name: str, source: str | None = None,
                     timestamp_format: str | None = None) -> pd.DatetimeIndex:
    """A timestamp column -> ``(N,)`` ``DatetimeIndex`` (naive, or tz-aware in its own zone
    or UTC), at any resolution; ``parsed[i]`` is row ``i``.

    Args:
        column: ``(N,)`` datetime values, periods (read as their start times, naive),
            ``datetime`` objects or text.
        name: the column's name, for messages.
        source: the file it came from (rows of a ``.csv`` are also named by line).
        timestamp_format: ``pd.to_datetime`` format of text timestamps (``"%d/%m/%Y %H:%M"``,
            ``"ISO8601"``, ``"mixed"``); None takes the format pandas infers from the first
            row, and every row must match it.

    Raises ``ValueError`` naming the column and the first bad row for missing (NaT),
    unparseable, differently formatted or mixed naive/offset timestamps, and ``TypeError``
    for numeric columns (their unit is ambiguous: convert with ``pd.to_datetime(..., unit=)``).
    """
    if not isinstance(column, pd.Series):
        raise TypeError(f"column must be a pandas Series, got {type(column).__name__}")
    if timestamp_format is not None and not isinstance(timestamp_format, str):
        raise TypeError(f"timestamp_format must be a str or None, got "
                        f"{type(timestamp_format).__name__} ({timestamp_format!r})")
    if isinstance(column.dtype, pd.PeriodDtype):
        # A period is the instant it starts, as datetime_index reads every PeriodIndex (its
        # text, "2020Q1" or "2019-12-30/2020-01-05" for a week, is no timestamp).
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
    elif column.dtype == object and isinstance(_first_value(column), pd.Period):
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
        raise ValueError(f"timestamp column {name!r}: {row_label(int(outside[0]), source)} value "
                         f"{column.iloc[int(outside[0])]!r} is outside the nanosecond range "
                         f"({pd.Timestamp.min} to {pd.Timestamp.max})")
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
    """Parsed timestamps -> the two clocks of a forecaster.

    Args:
        index: ``(N,)`` timestamps (:func:`parse_timestamps`), naive or tz-aware.
        tz: zone name. Naive timestamps are local times there, localized with
            :func:`~posenc.temporal.localize` (in the given order: sort by wall clock first
            for ``ambiguous="infer"``); aware ones are converted to it. None keeps naive data
            as its own clock (no zone, no DST) and aware data in its zone.
        ambiguous: one of :data:`AMBIGUOUS` (``earliest`` = the DST reading).
        nonexistent: one of :data:`NONEXISTENT`.
        name: the column, for messages.

    Returns:
        ``(utc, local)``: ``(N,)`` int64 UTC nanoseconds since the epoch (real elapsed time)
        and ``(N,)`` int64 naive local wall-clock nanoseconds (calendar features).
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
    # tz-aware asi8 is UTC; naive data is taken as its own clock (no zone, no DST).
    utc = np.asarray(index.asi8, np.int64)
    local = np.asarray(local_wall_time(index), np.int64)
    return utc, local
