"""Calendar fields of timestamps in local time, and the encodings that read them.

[`calendar_fields`][posenc.temporal.calendar_fields] computes the fields with integer arithmetic
(Howard Hinnant's ``civil_from_days``, proleptic Gregorian), equal to pandas' accessors, once per
day of the span. [`CalendarFeatures`][posenc.temporal.CalendarFeatures] looks its features up: every
field takes at most 366 values, so their features are formed once in float64 in joint tables of
consecutive fields, and one gather writes whole output rows.
[`CalendarEmbedding`][posenc.temporal.CalendarEmbedding] sums one table per field (Informer's).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from posenc.core import PositionEncoding
from posenc.core._checks import (
    check_bool,
    check_choice,
    check_even,
    check_output_dtype,
    check_positive_int,
)
from posenc.core.additive import sinusoidal_encoding, sinusoidal_inv_freq
from posenc.core.encoding import Float64Buffers
from torch import Tensor, nn

from .timestamps import UNITS, Timestamps, datetime_index, frequency_fields, local_wall_time

__all__ = ["CYCLE_PERIODS", "FIELDS", "CalendarEmbedding", "CalendarFeatures", "calendar_features",
           "calendar_fields", "check_calendar_fields", "check_field_range", "field_column",
           "month_positions"]


FIELDS: dict[str, tuple[int, int]] = {
    "second": (0, 59), "minute": (0, 59), "hour": (0, 23), "day_of_week": (0, 6),
    "day_of_month": (1, 31), "day_of_year": (1, 366), "month": (1, 12), "week_of_year": (1, 53),
    "days_in_month": (28, 31), "days_in_year": (365, 366), "weeks_in_year": (52, 53)}
"""name -> (first, last) value. "week_of_year" is the ISO week; "weeks_in_year" the number of
ISO weeks (52 or 53) in that ISO week-year, the true period of "week_of_year"."""
_DAYS_IN_MONTH = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int32)


def _is_leap(year: Any) -> Any:
    return (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))


def _civil_from_days(days: Any, where: Any) -> tuple[Any, Any, Any, Any]:
    """Hinnant's ``civil_from_days`` of int64 day numbers (numpy, or torch with
    ``where=torch.where``): ``(day of the March-based year, month from March, month, year)``."""
    z = days + 719468                      # days since 0000-03-01
    era = z // 146097                      # 400-year cycles
    doe = z - era * 146097                 # [0, 146096]
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365  # [0, 399]
    doy_march = doe - (365 * yoe + yoe // 4 - yoe // 100)           # [0, 365] from March 1
    mp = (5 * doy_march + 2) // 153        # month counted from March, [0, 11]
    month = where(mp < 10, mp + 3, mp - 9)
    return doy_march, mp, month, yoe + era * 400 + (month <= 2)


def _date_fields(days: np.ndarray) -> dict[str, np.ndarray]:
    """All date fields of int64 ``days`` since 1970-01-01 (any shape), as int32 arrays."""
    doy_march, mp, month, year = _civil_from_days(days, np.where)
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
    # 53 ISO weeks when the year starts on a Thursday (a Wednesday in a leap year): when
    # Dec 31 of the year is a Thursday, or Dec 31 of the year before a Wednesday.
    dec31 = [(y + y // 4 - y // 100 + y // 400) % 7 for y in (iso_year, iso_year - 1)]
    fields = {
        "day_of_week": day_of_week,
        "day_of_month": doy_march - (153 * mp + 2) // 5 + 1,
        "day_of_year": day_of_year,
        "month": month,
        "week_of_year": (thursday - 1) // 7 + 1,
        "days_in_month": _DAYS_IN_MONTH[month - 1] + ((month == 2) & leap),
        "days_in_year": days_in_year,
        "weeks_in_year": 52 + ((dec31[0] == 4) | (dec31[1] == 3)),
    }
    return {k: v.astype(np.int32) for k, v in fields.items()}


def calendar_fields(timestamps: Timestamps, tz: Any = None, *,
                    fields: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """``{name: int32 array of the input's shape}`` of ``fields`` (default: all of
    [`FIELDS`][posenc.temporal.calendar.FIELDS]) on the wall clock of ``tz`` (tz-aware input only;
    None: the timestamps' own zone, or naive readings as they are). Equal to pandas' accessors
    (Monday = 0, ISO weeks).
    """
    asked = (fields,) if isinstance(fields, str) else tuple(FIELDS if fields is None else fields)
    if not asked or any(n not in FIELDS for n in asked):
        raise ValueError(f"fields must be a non-empty list of {list(FIELDS)}, got {asked!r}")
    names = set(asked)
    index, shape = datetime_index(timestamps)
    local = local_wall_time(index, tz)
    per_second = UNITS["s"] // UNITS[index.unit]
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


def field_column(fields: Mapping[str, np.ndarray | Tensor], name: str) -> np.ndarray | Tensor:
    """``fields[name]``, checked to be present and integer."""
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


CYCLE_PERIODS: dict[str, int | str] = {
    "second": 60, "minute": 60, "hour": 24, "day_of_week": 7, "day_of_month": "days_in_month",
    "day_of_year": "days_in_year", "month": 12, "week_of_year": "weeks_in_year"}
"""The period each field cycles over: a number, or the field that holds it per timestamp."""
_SPEED = ("month", "week_of_year", "day_of_year", "day_of_month", "day_of_week", "hour",
          "minute", "second")  # slowest- to fastest-changing along a sorted series
DEFAULT_FIELDS = ("hour", "day_of_week", "day_of_month", "month")
_MAX_TABLE_ROWS = 2**18  # a joint table stays cache-resident (8 MiB for the default fields)
_BLOCK = 2**15  # elements per block of the numpy path: its int32 fields and index fit in L2

class _Axis(NamedTuple):
    column: str   # the calendar field indexing this axis
    first: int    # its first value
    size: int     # its number of values


class _Group(NamedTuple):
    axes: tuple[_Axis, ...]
    table: Tensor  # (prod of axis sizes, width): row = the group's features, concatenated


def _field_table(name: str, cyclic: bool) -> tuple[tuple[_Axis, ...], np.ndarray]:
    """float64 features of every value of one field: ``(axes, (*sizes, width))``."""
    first, last = FIELDS[name]
    values = np.arange(first, last + 1, dtype=np.float64)
    axes = (_Axis(name, first, last - first + 1),)
    if not cyclic:
        # GluonTS: (value - first) / (number of values - 1) - 0.5
        return axes, ((values - first) / (last - first) - 0.5)[:, None]
    period = CYCLE_PERIODS[name]
    if isinstance(period, str):
        p_first, p_last = FIELDS[period]
        axes += (_Axis(period, p_first, p_last - p_first + 1),)
        phase = (values[:, None] - first) / np.arange(p_first, p_last + 1, dtype=np.float64)
    else:
        phase = (values - first) / period
    theta = 2 * math.pi * phase
    return axes, np.stack((np.sin(theta), np.cos(theta)), axis=-1)


def _joint_table(parts: list[tuple[tuple[_Axis, ...], np.ndarray]]) -> tuple[
        tuple[_Axis, ...], np.ndarray]:
    """Each field's table broadcast over the other fields' axes: the joint axes, slowest- to
    fastest-changing, and the ``(rows, total width)`` table whose columns follow ``parts``."""
    order = sorted(range(len(parts)), key=lambda i: _SPEED.index(parts[i][0][0].column))
    axes = tuple(a for i in order for a in parts[i][0])
    starts = dict(zip(order, np.cumsum([0] + [len(parts[i][0]) for i in order])[:-1], strict=True))
    sizes = [a.size for a in axes]
    columns = []
    for i, (part_axes, table) in enumerate(parts):
        shape = [1] * len(sizes) + [table.shape[-1]]
        shape[starts[i]:starts[i] + len(part_axes)] = table.shape[:-1]
        columns.append(np.broadcast_to(table.reshape(shape), (*sizes, table.shape[-1])))
    return axes, np.concatenate(columns, axis=-1).reshape(math.prod(sizes), -1)


@functools.lru_cache(maxsize=32)
def _groups(names: tuple[str, ...], cyclic: bool, dtype: torch.dtype,
            device: torch.device) -> tuple[_Group, ...]:
    """Joint lookup tables for ``names``, built once per configuration, dtype and device."""
    groups: list[list[tuple[tuple[_Axis, ...], np.ndarray]]] = []
    rows = _MAX_TABLE_ROWS + 1
    for name in names:
        part = _field_table(name, cyclic)
        size = math.prod(a.size for a in part[0])
        if rows * size > _MAX_TABLE_ROWS:
            groups.append([])
            rows = 1
        groups[-1].append(part)
        rows *= size
    joint = [_joint_table(parts) for parts in groups]
    return tuple(_Group(axes, torch.from_numpy(table).to(device=device, dtype=dtype))
                 for axes, table in joint)


def _joint_index(columns: Mapping[str, Tensor], axes: Sequence[_Axis]) -> Tensor:
    """Row of the joint table for every element (Horner's rule over the axes)."""
    first, *rest = axes
    index = columns[first.column] - first.first
    for axis in rest:
        index = index * axis.size + (columns[axis.column] - axis.first)
    return index


def _period_pairs(axes: Sequence[_Axis]) -> tuple[tuple[int, int], ...]:
    """``(field axis, period axis)`` positions of the fields whose period is the next axis."""
    return tuple((i, i + 1) for i, axis in enumerate(axes[:-1])
                 if CYCLE_PERIODS.get(axis.column) == axes[i + 1].column)


def _past_period(field: str, period: str) -> ValueError:
    # Day 31 of a 30-day month would read as day 1 of the next (hand-made fields).
    return ValueError(f"fields[{field!r}] must not exceed fields[{period!r}] (its period), "
                      f"but some value does")


def _lookup(group: _Group, columns: Mapping[str, Tensor]) -> Tensor:
    """Features of one group from tensors on any device."""
    for axis in group.axes:
        check_field_range(columns[axis.column], axis.column)
    if not torch.compiler.is_compiling():
        for i, j in _period_pairs(group.axes):
            field, period = group.axes[i].column, group.axes[j].column
            if bool((columns[field] > columns[period]).any()):
                raise _past_period(field, period)
    return group.table[_joint_index(columns, group.axes)]


def _block_rows(columns: Sequence[np.ndarray], axes: Sequence[_Axis], start: int,
                stop: int, periods: Sequence[tuple[int, int]] = ()) -> np.ndarray:
    """Checked intp joint-table rows of elements ``start:stop`` of ``columns`` (one per axis),
    with the ``periods`` pairs checked while the block is in cache. Per field: a range check
    (one unsigned max where the range starts at 0) and an in-place int32 step of Horner's rule.
    """
    offset = 0
    blocks = []
    for i, (axis, column) in enumerate(zip(axes, columns, strict=True)):
        values = column[start:stop]
        if values.dtype != np.int32:
            if not np.can_cast(values.dtype, np.int32):
                check_field_range(values, axis.column)  # before the cast could wrap values
            values = values.astype(np.int32)
        if axis.first:
            bad = (int(np.minimum.reduce(values)) < axis.first
                   or int(np.maximum.reduce(values)) >= axis.first + axis.size)
        else:
            bad = int(np.maximum.reduce(values.view(np.uint32))) >= axis.size
        if bad:
            for a, c in zip(axes, columns, strict=True):
                check_field_range(c[start:stop], a.column)
        blocks.append(values)
        offset = offset * axis.size + axis.first
        if i == 0:
            index = values  # may be a view of the input: the next step makes a new array
        else:
            index = np.multiply(index, axis.size, out=None if i == 1 else index)
            index += values
    for i, j in periods:
        if np.greater(blocks[i], blocks[j]).any():
            raise _past_period(axes[i].column, axes[j].column)
    return np.subtract(index, offset, dtype=np.intp)


def _lookup_blocks(group: _Group, columns: Mapping[str, np.ndarray]) -> Tensor:
    """Features of one group from numpy arrays, a block at a time; the gather moves whole rows
    as bytes (any dtype, bfloat16 included) straight into the output."""
    rows = group.table.view(torch.uint8).numpy()  # (table rows, row bytes)
    flat = [columns[axis.column].reshape(-1) for axis in group.axes]
    shape = columns[group.axes[0].column].shape
    out = np.empty((math.prod(shape), rows.shape[1]), dtype=np.uint8)
    periods = _period_pairs(group.axes)
    for start in range(0, len(out), _BLOCK):
        stop = min(start + _BLOCK, len(out))
        # mode="clip" skips numpy's buffered bounds check; _block_rows checked the fields.
        np.take(rows, _block_rows(flat, group.axes, start, stop, periods), axis=0,
                out=out[start:stop], mode="clip")
    features = torch.from_numpy(out.reshape(-1)).view(group.table.dtype)
    return features.reshape(*shape, group.table.shape[1])


def calendar_features(fields: Mapping[str, np.ndarray | Tensor],
                      names: Sequence[str] = DEFAULT_FIELDS, *, cyclic: bool = True,
                      dtype: torch.dtype = torch.float32) -> Tensor:
    """[`CalendarFeatures`][posenc.temporal.CalendarFeatures]' features of ``names`` from
    ``{name: (...) ints}`` (with the period fields if ``cyclic``): ``(..., 2 * len(names))``
    ``[sin f0, cos f0, sin f1, ...]`` or ``(..., len(names))`` ramps, rounded once from float64 to
    ``dtype``, on the fields' device.
    """
    names = check_calendar_fields(names)
    cyclic = check_bool(cyclic, "cyclic")
    check_output_dtype(dtype)
    groups = _groups(names, cyclic, dtype, torch.device("cpu"))
    columns = {a.column: field_column(fields, a.column) for g in groups for a in g.axes}
    shapes = {tuple(c.shape) for c in columns.values()}
    if len(shapes) > 1:
        raise ValueError(f"fields must all have one shape, got {sorted(shapes)}")
    device = next((c.device for c in columns.values() if isinstance(c, Tensor)
                   and c.device.type != "cpu"), None)
    if device is None:
        arrays = {k: v.numpy() if isinstance(v, Tensor) else v for k, v in columns.items()}
        parts = [_lookup_blocks(g, arrays) for g in groups]
    else:
        tensors = {k: torch.as_tensor(v, device=device).long() for k, v in columns.items()}
        parts = [_lookup(g, tensors) for g in _groups(names, cyclic, dtype, device)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def check_calendar_fields(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` as a tuple if they are distinct encodable fields, else ``ValueError``."""
    names = (names,) if isinstance(names, str) else tuple(names)
    if not names or len(set(names)) != len(names) or not set(names) <= set(CYCLE_PERIODS):
        raise ValueError(f"fields must be distinct names from {list(CYCLE_PERIODS)}, got "
                         f"{names!r}")
    return names


class CalendarFeatures(Float64Buffers):
    """Fixed features of calendar ``fields`` (names from
    [`CYCLE_PERIODS`][posenc.temporal.calendar.CYCLE_PERIODS], in output order).

    ``cyclic=True``: ``(sin, cos)`` of ``2*pi*(value - first) / period`` on each field's true
    period (the days of *that* month for the day of month, so Jan 31 and Feb 1 are neighbours).
    ``cyclic=False``: GluonTS's ramps, ``(value - first) / (values - 1) - 0.5`` in [-0.5, 0.5].

    Example::

        enc = CalendarFeatures(["hour", "day_of_week"])
        x = enc(calendar_fields(ts, fields=enc.required_fields))   # (N, 4) float32
    """

    kind = "additive"
    reads = "fields"

    def __init__(self, fields: Sequence[str] = DEFAULT_FIELDS, cyclic: bool = True) -> None:
        super().__init__()
        self.fields = check_calendar_fields(fields)
        self.cyclic = check_bool(cyclic, "cyclic")
        self._axes = {name: _field_table(name, self.cyclic)[0] for name in self.fields}
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        """``table_<field>``: features of each field's every value, for the compiled path."""
        tables = {}
        for name in self.fields:
            table = _field_table(name, self.cyclic)[1]
            tables[f"table_{name}"] = torch.from_numpy(table.reshape(-1, table.shape[-1]))
        return tables

    @classmethod
    def from_frequency(cls, freq: str, *, cyclic: bool = False) -> CalendarFeatures:
        """GluonTS's field set for ``freq``; with ``cyclic=False`` the output equals GluonTS's
        ``time_features_from_frequency_str(freq)``. Yearly frequencies (no fields) raise."""
        names = frequency_fields(freq)
        if not names:
            raise ValueError(f"freq={freq!r} has no calendar fields in GluonTS (yearly data); "
                             f"use FourierSeasonality or no calendar encoding")
        return cls(names, cyclic=cyclic)

    @property
    def required_fields(self) -> tuple[str, ...]:
        """Fields that [`forward`][posenc.temporal.CalendarFeatures.forward] reads: the encoded ones
        plus their periods."""
        periods = [CYCLE_PERIODS[n] for n in self.fields] if self.cyclic else []
        return self.fields + tuple(p for p in periods if isinstance(p, str))

    @property
    def dim(self) -> int:
        """Output width."""
        return len(self.fields) * (2 if self.cyclic else 1)

    @property
    def feature_names(self) -> list[str]:
        """Name of each output column, e.g. ``["hour_sin", "hour_cos", ...]``."""
        if not self.cyclic:
            return list(self.fields)
        return [f"{n}_{f}" for n in self.fields for f in ("sin", "cos")]

    def forward(self, fields: Mapping[str, np.ndarray | Tensor], *,
                dtype: torch.dtype = torch.float32) -> Tensor:
        """``{name: (...) ints}`` -> ``(..., dim)``. Under ``torch.compile`` the features are
        gathered per field from this module's tables, without the range checks."""
        if not torch.compiler.is_compiling():
            return calendar_features(fields, self.fields, cyclic=self.cyclic, dtype=dtype)
        check_output_dtype(dtype)
        parts = []
        for name in self.fields:
            axes = self._axes[name]
            columns = {a.column: field_column(fields, a.column).long() for a in axes}
            parts.append(getattr(self, f"table_{name}")[_joint_index(columns, axes)])
        return torch.cat(parts, dim=-1).to(dtype)

    def extra_repr(self) -> str:
        return f"fields={list(self.fields)}, cyclic={self.cyclic}"


EMBED_TYPES = ("learned", "fixed")


class CalendarEmbedding(PositionEncoding):
    """Sum of per-field embedding tables indexed by the raw field value (Informer's
    ``TemporalEmbedding``; its minutes are quarter hours, here 0..59).

    ``embed_type="learned"``: trainable tables of width ``dim``; ``"fixed"``: frozen interleaved
    sinusoidal tables (``dim`` even, base 10000), Informer's ``FixedEmbedding``. A table has
    ``last + 1`` rows, as Informer's. ``fields``: names from
    [`CYCLE_PERIODS`][posenc.temporal.calendar.CYCLE_PERIODS].
    """

    kind = "additive"
    reads = "fields"

    def __init__(self, dim: int, fields: Sequence[str] = DEFAULT_FIELDS,
                 embed_type: str = "learned") -> None:
        super().__init__()
        self.embed_type = check_choice(embed_type, "embed_type", EMBED_TYPES)
        self.dim = (check_even(dim, "dim") if embed_type == "fixed"
                    else check_positive_int(dim, "dim"))
        self.fields = check_calendar_fields(fields)
        self.tables = nn.ModuleDict(
            {name: nn.Embedding(FIELDS[name][1] + 1, dim) for name in self.fields})
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for table in self.tables.values():
            if self.embed_type == "learned":
                table.reset_parameters()
                continue
            rows = torch.arange(table.num_embeddings, dtype=torch.float64)
            with torch.no_grad():
                table.weight.copy_(sinusoidal_encoding(rows, sinusoidal_inv_freq(self.dim)))
            table.weight.requires_grad_(False)

    def forward(self, fields: Mapping[str, np.ndarray | Tensor]) -> Tensor:
        """``{name: (...) ints}`` -> ``(..., dim)`` in the tables' dtype, on their device."""
        device = next(iter(self.tables.values())).weight.device
        out = None
        for name, table in self.tables.items():
            column = check_field_range(field_column(fields, name), name)
            column = torch.as_tensor(column, device=device).long()
            out = table(column) if out is None else out + table(column)
        return out

    def extra_repr(self) -> str:
        return f"dim={self.dim}, fields={list(self.fields)}, embed_type={self.embed_type!r}"


def month_positions(local: Tensor, dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """Positions of local wall-clock times in calendar months (a month counts as one whatever
    its length), computed on the tensor's device without host reads.

    Args:
        local: ``(...)`` int64 naive local wall-clock nanoseconds since 1970-01-01.
        dtype: floating dtype of the fraction (float32 where the device lacks float64).

    Returns:
        ``(months, fraction)``: ``(...)`` int64 ``12 * (year - 1970) + month - 1``, and
        ``(...)`` ``dtype`` in ``[0, 1)``.
    """
    if not isinstance(local, Tensor) or local.dtype != torch.int64:
        raise TypeError(f"local must be an int64 tensor of wall-clock nanoseconds, got "
                        f"{getattr(local, 'dtype', type(local).__name__)}")
    day_ns = 86400 * 10**9
    days = torch.div(local, day_ns, rounding_mode="floor")
    doy_march, mp, month, year = _civil_from_days(days, torch.where)
    month_start = (153 * mp + 2) // 5  # its first day, counted from March 1
    # March-based months run 31, 30, 31, ... to January; February (mp 11) ends the year.
    length = torch.where(mp == 11, 28 + _is_leap(year).long(),
                         (153 * (mp + 1) + 2) // 5 - month_start)
    into = (doy_march - month_start) * day_ns + (local - days * day_ns)  # exact int64 ns
    months = 12 * (year - 1970) + month - 1
    return months, into.to(dtype) / (length * day_ns).to(dtype)
