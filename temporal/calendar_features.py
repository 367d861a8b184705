"""The calendar-field encoding module: :class:`CalendarFeatures`.

The lookup it runs on (joint tables, the blocked numpy gather, the field checks) is
:func:`~posenc.temporal.calendar_features` in :mod:`posenc.temporal.cyclic`, whose field
names and defaults :class:`~posenc.temporal.CalendarEmbedding` shares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from posenc.core.buffers import Float64Buffers
from posenc.core.validation import check_bool
from torch import Tensor

from .calendar import field_column
from .cyclic import (
    CYCLE_PERIODS,
    DEFAULT_FIELDS,
    _field_table,
    _joint_index,
    calendar_features,
    check_calendar_fields,
)
from .frequencies import frequency_fields
from .timestamps import check_output_dtype

__all__ = ["CalendarFeatures"]


class CalendarFeatures(Float64Buffers):
    """Fixed features of calendar fields (no parameters).

    ``cyclic=True``: each field becomes ``(sin, cos)`` of ``2*pi*(value - first) / period``
    on its true period: 60 s, 60 min, 24 h, 7 days, 12 months, the days of *that* month for
    the day of month, the days of that year for the day of year, the ISO weeks of that ISO
    year for the week of year; so Jan 31 and Feb 1 (or Dec 31 and Jan 1) are neighbours.
    ``cyclic=False``: GluonTS's ramps, ``(value - first) / (values - 1) - 0.5`` in
    [-0.5, 0.5] (days of month over 31 values, days of year over 366, ISO weeks over 53).

    Args:
        fields: names from :data:`CYCLE_PERIODS`, in output order.
        cyclic: sin/cos pairs or ramps.

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
        """Each field's features for every value (and period value): ``table_<field>`` of
        shape ``(values, width)``, a few hundred numbers; the compiled path gathers from them
        (the eager path's joint tables and numpy gather cannot be traced)."""
        tables = {}
        for name in self.fields:
            table = _field_table(name, self.cyclic)[1]
            tables[f"table_{name}"] = torch.from_numpy(table.reshape(-1, table.shape[-1]))
        return tables

    @classmethod
    def from_frequency(cls, freq: str, *, cyclic: bool = False) -> CalendarFeatures:
        """GluonTS's field set for ``freq`` (see :func:`frequency_fields`).

        ``cyclic`` defaults to False here, so the output equals GluonTS's
        ``np.vstack([f(index) for f in time_features_from_frequency_str(freq)]).T``.
        Yearly frequencies have no fields in GluonTS; that raises here (an encoder of width
        0 is almost certainly a mistake).
        """
        names = frequency_fields(freq)
        if not names:
            raise ValueError(f"freq={freq!r} has no calendar fields in GluonTS (yearly data); "
                             f"use FourierSeasonality or no calendar encoding")
        return cls(names, cyclic=cyclic)

    @property
    def required_fields(self) -> tuple[str, ...]:
        """Fields that :meth:`forward` reads: the encoded ones plus their periods."""
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
        """``{name: (...) ints}`` -> ``(..., dim)`` features (see :func:`calendar_features`).

        Under ``torch.compile`` the features are gathered per field from this module's
        tables (same float64 values, rounded once to ``dtype``), in one graph; the range
        checks that read values are then the data pipeline's (see ``check_field_range``).
        """
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
