"""Calendar fields as fixed features: sin/cos pairs on each field's true period, or
GluonTS-compatible ramps.

Every field takes few distinct values (at most 366, or 366 x 2 with its period), so the
features are looked up rather than computed: sin/cos (or the ramp) of every possible value is
formed once in float64, and consecutive fields share one joint table whose row holds all
their features, so a single gather writes whole output rows: well under one ``np.sin`` per
output column, most of it the cost of writing the output at all.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch
from posenc.core.validation import check_bool
from torch import Tensor

from .calendar import FIELDS, check_field_range, field_column
from .timestamps import check_output_dtype

__all__ = [
    "CYCLE_PERIODS",
    "calendar_features",
    "check_calendar_fields",
]

CYCLE_PERIODS: dict[str, int | str] = {
    "second": 60,
    "minute": 60,
    "hour": 24,
    "day_of_week": 7,
    "day_of_month": "days_in_month",
    "day_of_year": "days_in_year",
    "month": 12,
    "week_of_year": "weeks_in_year",
}
"""The period each field cycles over: a number, or the field that holds it per timestamp."""
# Slowest- to fastest-changing along a sorted series.
_SPEED = ("month", "week_of_year", "day_of_year", "day_of_month", "day_of_week", "hour",
          "minute", "second")
DEFAULT_FIELDS = ("hour", "day_of_week", "day_of_month", "month")
# A joint table row holds the features of several fields; capping its rows (8 MiB of
# float32 for the default fields) keeps it cache-resident and cheap to build.
_MAX_TABLE_ROWS = 2**18
# Elements per block of the numpy path: a block's int32 fields and index fit in L2.
_BLOCK = 2**15

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
    """Broadcast each field's table over the other fields' axes.

    Returns the joint axes and the ``(rows, total width)`` table whose columns follow
    ``parts``. The axes are ordered from slowest- to fastest-changing field (month before
    hour), so sorted timestamps read neighbouring rows.
    """
    order = sorted(range(len(parts)), key=lambda i: _SPEED.index(parts[i][0][0].column))
    axes = tuple(a for i in order for a in parts[i][0])
    starts = dict(zip(order, np.cumsum([0] + [len(parts[i][0]) for i in order])[:-1],
                      strict=True))
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


def _joint_index(columns: Mapping[str, np.ndarray | Tensor], axes: Sequence[_Axis]
                 ) -> np.ndarray | Tensor:
    """Row of the joint table for every element (Horner's rule over the axes, in place)."""
    first, *rest = axes
    if not rest:
        return columns[first.column] - first.first
    index = columns[first.column] * rest[0].size  # a fresh array: the steps below are in place
    offset = first.first * rest[0].size
    for axis, following in zip(rest, [*rest[1:], None], strict=True):
        index += columns[axis.column]
        offset += axis.first
        if following is not None:
            index *= following.size
            offset *= following.size
    index -= offset
    return index


def _period_pairs(axes: Sequence[_Axis]) -> tuple[tuple[int, int], ...]:
    """``(field axis, period axis)`` positions of the fields whose period is another field
    (a field's period axis follows it: :func:`_field_table`)."""
    return tuple((i, i + 1) for i, axis in enumerate(axes[:-1])
                 if CYCLE_PERIODS.get(axis.column) == axes[i + 1].column)


def _past_period(field: str, period: str) -> ValueError:
    """A field whose period is another field (the day of month's days in that month) must
    not pass it: day 31 of a 30-day month would read as day 1 of the next. The fields of
    :func:`calendar_fields` always agree; this catches hand-made or mis-collated ones."""
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
    """Checked joint-table rows (intp, what ``np.take`` uses) of elements ``start:stop`` of
    ``columns``, one column per axis.

    Runs on cache-resident blocks: per field one or two reductions for the range check (one
    unsigned max where the range starts at 0: negative values wrap to huge ones) and a
    multiply-add of Horner's rule in int32, in place; the last step subtracts the offset of
    the first values and widens to intp at once. A failed check raises what
    :func:`check_field_range` says about the block, the axes checked in order. ``periods``
    (from :func:`_period_pairs`) are the ``(field, period)`` axes whose values must not
    exceed their period's; checked here too, while the block is in cache.
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
    """Features of one group from numpy arrays, a block at a time.

    The range checks and the index arithmetic run on blocks that stay in cache, so memory
    sees one read of each field and one write of the output; the gather moves whole rows
    as bytes (one pass, any dtype, bfloat16 included), straight into the output.
    """
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
    """Features of calendar fields; see :class:`CalendarFeatures`.

    Args:
        fields: ``{name: (...) int array or tensor}`` from :func:`calendar_fields` (or the
            same collated by a data loader); must hold ``names`` and, if ``cyclic``, their
            period fields (``days_in_month``, ``days_in_year``, ``weeks_in_year``).
        names: fields to encode, in output order.
        cyclic: sin/cos pairs (True) or GluonTS ramps in [-0.5, 0.5] (False).
        dtype: output dtype; values are computed in float64 and rounded once.

    Returns:
        ``(..., 2 * len(names))`` ``[sin f0, cos f0, sin f1, ...]`` if cyclic, else
        ``(..., len(names))``; on the fields' device (CPU for numpy input).
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
