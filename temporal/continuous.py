"""Sinusoidal encoding of real elapsed time: core's
:func:`~posenc.core.sinusoidal.sinusoidal_encoding` (the one sin/cos implementation), with
periods in time units instead of token steps."""

from __future__ import annotations

import math

import numpy as np
import torch
from posenc.core.angles import LAYOUTS
from posenc.core.buffers import Float64Buffers
from posenc.core.sinusoidal import sinusoidal_encoding
from posenc.core.validation import (
    check_choice,
    check_even,
    check_output_dtype,
    check_position_shape,
    check_position_values,
    check_positive_float,
    check_positive_int,
)
from torch import Tensor

__all__ = ["ContinuousSinusoidal", "geometric_periods"]

def geometric_periods(count: int, min_period: float, max_period: float) -> Tensor:
    """``(count,)`` float64 periods from ``min_period`` to ``max_period``, evenly spaced in
    log (the classic encoding's wavelengths, with chosen end points)."""
    check_positive_int(count, "count")
    low = check_positive_float(min_period, "min_period")
    high = check_positive_float(max_period, "max_period")
    if low > high:
        raise ValueError(f"periods must satisfy 0 < min_period <= max_period (finite), got "
                         f"min_period={min_period!r}, max_period={max_period!r}")
    return torch.from_numpy(np.geomspace(low, high, count))


class ContinuousSinusoidal(Float64Buffers):
    """Sin/cos of elapsed time at ``dim // 2`` periods between two bounds.

    Irregular samples get the encoding of their actual time, not of their index: two
    observations an hour apart are encoded an hour apart whatever lies between them.
    Choosing ``min_period = 2*pi`` and ``max_period = 2*pi * 10000 ** ((dim - 2) / dim)``
    reproduces core's :class:`~posenc.core.SinusoidalEncoding` exactly (with time in steps).

    Args:
        dim: output width (even).
        min_period: shortest period, in the unit of the times passed in.
        max_period: longest period; make it exceed the span to be told apart.
        layout: ``"interleaved"`` ([sin p0, cos p0, sin p1, ...]) or ``"half"`` ([sin p0, sin
            p1, ..., cos p0, ...]), as :class:`~posenc.core.SinusoidalEncoding`.
    """

    kind = "additive"
    reads = "elapsed"

    def __init__(self, dim: int, min_period: float, max_period: float,
                 layout: str = "interleaved") -> None:
        super().__init__()
        self.dim = check_even(dim, "dim")
        self.layout = check_choice(layout, "layout", LAYOUTS)
        geometric_periods(dim // 2, min_period, max_period)  # validates the bounds
        self.min_period, self.max_period = float(min_period), float(max_period)
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        periods = geometric_periods(self.dim // 2, self.min_period, self.max_period)
        return {"inv_freq64": 2 * math.pi / periods}

    def forward(self, times: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
        """``(N,)`` or ``(B, N)`` elapsed times (float64 from :func:`time_positions` keeps
        full precision far from the origin) -> ``(..., dim)`` of ``dtype`` (pass the dtype of
        the tokens it is added to)."""
        check_position_values(times, "times")
        return self._forward(times, dtype=dtype)

    def _forward(self, times: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
        times = check_position_shape(times, "times")
        check_output_dtype(dtype)
        return sinusoidal_encoding(times, self.inv_freq64, self.layout).to(dtype)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, min_period={self.min_period}, max_period={self.max_period}, "
                f"layout={self.layout!r}")
