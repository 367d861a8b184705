"""Age features: how long a series has been running at each observation (GluonTS's
``AddAgeFeature``), in real elapsed time so that irregular sampling ages a series by its gaps.

The age in ``unit`` since the series start is transformed
([`TRANSFORMS`][posenc.temporal.age.TRANSFORMS]): ``"gluonts"`` ``log10(2 + age)`` (with the index
as age, ``AddAgeFeature``), ``"log1p"`` ``ln(1 + age)`` or ``"linear"``
(``AddAgeFeature(log_scale=False)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from posenc.core import PositionEncoding
from posenc.core._checks import check_choice, check_output_dtype
from posenc.core.encoding import wide_dtype
from torch import Tensor

from .timestamps import (
    UNITS,
    Timestamps,
    _elapsed,
    _in_unit,
    _origin,
    check_no_nat,
    datetime_index,
    real_tensor,
    timestamp_argument,
)

__all__ = ["TRANSFORMS", "AgeFeature", "age_feature", "series_age"]

TRANSFORMS = ("gluonts", "log1p", "linear")
"""The transforms of an age ([`age_feature`][posenc.temporal.age.age_feature]; module docstring)."""


def _negative_error(first: int, origin: str = "start") -> ValueError:
    hint = ("give the series' first time as start, or start=None for the earliest timestamp"
            if origin == "start" else "each series' start must be its first observation")
    return ValueError(f"timestamps must not precede {origin} (a series has no negative age), "
                      f"but flat position {first} does; {hint}")


def series_age(timestamps: Timestamps, start: Any = None, *, unit: str = "D") -> np.ndarray:
    """float64 ages ``>= 0`` in ``unit`` since the series start, in the input's shape; each row
    of ``(..., N)`` input is one series. ``start``: a timestamp of the same naive/aware kind
    (earlier timestamps raise); None: each row's earliest timestamp.
    """
    check_choice(unit, "unit", tuple(UNITS))
    index, shape = datetime_index(timestamps)
    if start is not None:
        age = _elapsed(index, _origin(start, index, "start"), unit)
        if age.size and age.min() < 0:
            raise _negative_error(int(np.flatnonzero(age < 0)[0]))
        return age.reshape(shape)
    ticks = index.asi8.reshape(shape)
    if not ticks.size or not ticks.ndim:
        return np.zeros(shape, dtype=np.float64)
    delta = ticks - ticks.min(axis=-1, keepdims=True)
    if delta.min() < 0:  # wrapped: a row spans more than int64 ticks
        raise ValueError(f"timestamps span more than int64 {index.unit!r} ticks hold (292 "
                         f"years in ns); give them a coarser resolution, e.g. .as_unit('s')")
    return _in_unit(delta, index.unit, unit)


def age_feature(age: np.ndarray | Tensor, transform: str = "gluonts") -> np.ndarray | Tensor:
    """``age`` (``>= 0``, any shape) transformed by ``transform``: float64 (float32 on devices
    without it), numpy or torch as given."""
    check_choice(transform, "transform", TRANSFORMS)
    values = real_tensor(age, "age", "ages")
    wide = values.to(wide_dtype(values.device))
    if (values.device.type == "cpu" and values.numel() and not torch.compiler.is_compiling()
            and not bool((wide >= 0).all())):
        bad = (~(wide >= 0)).reshape(-1).nonzero()[0, 0]
        raise ValueError(f"age must be >= 0 and not NaN (time since the series start), got "
                         f"{wide.reshape(-1)[bad].item()} at flat position {int(bad)}")
    if transform == "gluonts":
        out = torch.log10(2 + wide)
    elif transform == "log1p":
        out = torch.log1p(wide)
    else:
        out = wide
    return out if isinstance(age, Tensor) else out.numpy()


class AgeFeature(PositionEncoding):
    """Module form of [`series_age`][posenc.temporal.age.series_age] +
    [`age_feature`][posenc.temporal.age.age_feature] (no parameters): ``(...)`` timestamps ->
    ``(..., 1)``.

    ``start`` is a fixed origin for every series, winning over ``series_start`` (a Forecaster
    passes each window's series start); None: ages count from ``series_start``, else from each
    row's earliest timestamp. An int64 tensor is nanoseconds on the clock of ``start``, stays
    on its device and is differenced exactly; values are checked on CPU only.
    """

    kind = "additive"
    reads = "series_start"
    dim = 1

    def __init__(self, start: Any = None, unit: str = "D", transform: str = "gluonts") -> None:
        super().__init__()
        self.start = None if start is None else timestamp_argument(start, "start")
        self.unit = check_choice(unit, "unit", tuple(UNITS))
        self.transform = check_choice(transform, "transform", TRANSFORMS)
        self._start_ns = None if self.start is None else int(self.start.as_unit("ns").value)

    @property
    def feature_names(self) -> list[str]:
        return ["age"]

    def forward(self, timestamps: Timestamps, series_start: Tensor | None = None, *,
                dtype: torch.dtype = torch.float32) -> Tensor:
        """``(...)`` timestamps -> ``(..., 1)`` of ``dtype``; ``series_start``: ``(..., 1)`` int64
        ns, the first observation of each row's series."""
        check_output_dtype(dtype)
        if not (isinstance(timestamps, Tensor) and timestamps.dtype == torch.int64):
            if series_start is not None:
                raise TypeError("series_start goes with int64 nanosecond timestamps (a "
                                "tensor, as the Forecaster passes); for other input give "
                                "AgeFeature(start=...)")
            age = torch.from_numpy(series_age(timestamps, self.start, unit=self.unit))
            return age_feature(age, self.transform)[..., None].to(dtype)
        if timestamps.ndim == 0:
            raise ValueError("timestamps must have at least one dim (a series), got a 0-d "
                             "tensor")
        if series_start is not None and (
                not isinstance(series_start, Tensor) or series_start.dtype != torch.int64
                or series_start.shape != (*timestamps.shape[:-1], 1)):
            raise TypeError(f"series_start must be an int64 tensor of shape "
                            f"{(*timestamps.shape[:-1], 1)} (one start per row of timestamps), "
                            f"got {getattr(series_start, 'dtype', type(series_start).__name__)}"
                            f" of shape {tuple(getattr(series_start, 'shape', ()))}")
        if not timestamps.numel():
            return torch.zeros((*timestamps.shape, 1), dtype=dtype, device=timestamps.device)
        checks = timestamps.device.type == "cpu" and not torch.compiler.is_compiling()
        if checks:
            check_no_nat(timestamps)
            check_no_nat(series_start, "series_start")
        origin = "series_start" if self._start_ns is None and series_start is not None \
            else "start"
        if self._start_ns is not None:
            if checks and series_start is not None and bool((series_start < self._start_ns).any()):
                earliest = pd.Timestamp(int(series_start.min()), unit="ns")
                raise ValueError(f"start={self.start} is after the first observation of a "
                                 f"series ({earliest}); a series has no negative age: give a "
                                 f"start on or before the data's first time, or start=None for "
                                 f"the age of each series")
            first = self._start_ns
        elif series_start is not None:
            first = series_start
        else:
            first = timestamps.amin(dim=-1, keepdim=True)
        delta = timestamps - first
        if checks and bool((delta < 0).any()):
            raise _negative_error(int((delta < 0).reshape(-1).nonzero()[0, 0]), origin)
        age = delta.to(wide_dtype(timestamps.device)) / UNITS[self.unit]
        return age_feature(age, self.transform)[..., None].to(dtype)

    def extra_repr(self) -> str:
        return f"start={self.start}, unit={self.unit!r}, transform={self.transform!r}"
