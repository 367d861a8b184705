"""Prophet-style Fourier seasonality on absolute time, with exact phases.

Even float64 nanoseconds lose the phase of a short period, so each timestamp's integer
nanoseconds are reduced modulo the integer period first and only the remainder becomes a float:
the phase ``(t mod P) / P`` is exact to 1e-16 cycles (harmonic ``k``: ``k`` times that).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from posenc.core import PositionEncoding
from posenc.core._checks import (
    check_int,
    check_output_dtype,
    check_positive_float,
)
from posenc.core.encoding import wide_dtype
from torch import Tensor

from .timestamps import Timestamps, check_no_nat, to_nanoseconds

__all__ = ["DEFAULT_PERIODS", "PROPHET_HARMONICS", "PROPHET_PERIODS", "FourierSeasonality",
           "fourier_features"]

DEFAULT_PERIODS: dict[str, float] = {"day": 86400, "week": 604800, "year": 31556952}
"""name -> period in seconds; the year is the mean Gregorian year, 365.2425 days."""
PROPHET_PERIODS: dict[str, float] = {"yearly": 365.25 * 86400, "weekly": 604800, "daily": 86400}
"""Prophet's built-in seasonalities, in its column order (its year is 365.25 days)."""
PROPHET_HARMONICS: dict[str, int] = {"yearly": 10, "weekly": 3, "daily": 4}
"""Harmonics of each of Prophet's seasonalities."""
_MAX_PERIOD_NS = 2**63 - 1  # torch.remainder takes the period as an int64 scalar


def _check_harmonics(count: object, label: str) -> int:
    if check_int(count, label) < 1:
        raise ValueError(f"{label} must be an int >= 1, got {count!r}")
    return int(count)


def _check_counts(periods_ns: Sequence[int], harmonics: Sequence[int]) -> None:
    if len(periods_ns) != len(harmonics) or not len(periods_ns):
        raise ValueError(f"fourier_features needs one harmonics count per period (at least "
                         f"one), got periods_ns={list(periods_ns)}, harmonics={list(harmonics)}")
    for i, (period, count) in enumerate(zip(periods_ns, harmonics, strict=True)):
        if not 1 <= check_int(period, f"periods_ns[{i}]") <= _MAX_PERIOD_NS:
            raise ValueError(f"periods_ns[{i}] must lie in [1, 2**63 - 1] (int64 "
                             f"nanoseconds), got {period}")
        _check_harmonics(count, f"harmonics[{i}]")


def fourier_features(nanoseconds: Tensor, periods_ns: Sequence[int], harmonics: Sequence[int],
                     *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Sin/cos of ``2*pi*k*t/P`` for each period ``P`` (whole nanoseconds) and ``k = 1..K``.

    ``(...)`` int64 nanoseconds since the epoch -> ``(..., 2 * sum(harmonics))`` of ``dtype``:
    per period ``[sin k=1, cos k=1, sin k=2, ...]`` (Prophet's column order).
    """
    if nanoseconds.dtype != torch.int64:
        raise TypeError(f"nanoseconds must be an int64 tensor, got {nanoseconds.dtype}")
    _check_counts(periods_ns, harmonics)
    wide = wide_dtype(nanoseconds.device)
    blocks = []
    for period, count in zip(periods_ns, harmonics, strict=True):
        cycles = torch.remainder(nanoseconds, period).to(wide) / period  # [0, 1)
        k = torch.arange(1, count + 1, device=nanoseconds.device, dtype=wide)
        theta = (2 * math.pi) * torch.remainder(cycles[..., None] * k, 1.0)
        blocks.append(torch.stack((theta.sin(), theta.cos()), dim=-1).flatten(-2))
    return torch.cat(blocks, dim=-1).to(dtype)


class FourierSeasonality(PositionEncoding):
    """Fourier terms of absolute time for a set of named periods (Prophet's seasonalities):
    UTC instants for tz-aware timestamps, wall-clock readings for naive ones.

    Args:
        periods: ``{name: period in seconds}`` (default
            [`DEFAULT_PERIODS`][posenc.temporal.fourier.DEFAULT_PERIODS]), rounded to whole
            nanoseconds, at most ``2**63 - 1`` ns.
        harmonics: harmonics per period, one int for all or ``{name: int}`` for each.
    """

    kind = "additive"
    reads = "timestamps"

    def __init__(self, periods: Mapping[str, float] | None = None,
                 harmonics: int | Mapping[str, int] = 4) -> None:
        super().__init__()
        if not isinstance(periods, Mapping | None):
            raise TypeError(f"periods must be a mapping {{name: seconds}}, got "
                            f"{type(periods).__name__} {periods!r}")
        periods = dict(DEFAULT_PERIODS if periods is None else periods)
        if not periods:
            raise ValueError("periods must name at least one period, got {}")
        for name, seconds in periods.items():
            # As a Python float: a numpy float32 would round the nanoseconds to 24 bits.
            periods[name] = check_positive_float(seconds, f"periods[{name!r}]")
            period_ns = round(periods[name] * 10**9)
            if period_ns < 1:
                raise ValueError(f"periods[{name!r}] must be a positive number of seconds "
                                 f"(>= 1 ns), got {seconds!r}")
            if period_ns > _MAX_PERIOD_NS:
                raise ValueError(f"periods[{name!r}] must be at most 9223372036.854775807 s "
                                 f"(2**63 - 1 ns, about 292 years), got {seconds!r}")
        if isinstance(harmonics, Mapping):
            if set(harmonics) != set(periods):
                raise ValueError(f"harmonics must have the keys of periods {sorted(periods)}, "
                                 f"got {sorted(harmonics)}")
            counts = [harmonics[name] for name in periods]
        else:
            counts = [harmonics] * len(periods)
        self.periods = periods
        self.periods_ns = [round(s * 10**9) for s in periods.values()]
        self.harmonics = [_check_harmonics(count, f"harmonics for {name!r}")
                          for name, count in zip(periods, counts, strict=True)]

    @classmethod
    def prophet(cls) -> FourierSeasonality:
        """Prophet's default features ([`PROPHET_PERIODS`][posenc.temporal.fourier.PROPHET_PERIODS],
        [`PROPHET_HARMONICS`][posenc.temporal.fourier.PROPHET_HARMONICS]); Prophet also floors
        timestamps to whole seconds."""
        return cls(PROPHET_PERIODS, PROPHET_HARMONICS)

    @property
    def dim(self) -> int:
        """Output width, ``2 * sum(harmonics)``."""
        return 2 * sum(self.harmonics)

    @property
    def feature_names(self) -> list[str]:
        """Name of each output column, e.g. ``["day_sin1", "day_cos1", ...]``."""
        pairs = zip(self.periods, self.harmonics, strict=True)
        return [f"{name}_{f}{k}" for name, count in pairs for k in range(1, count + 1)
                for f in ("sin", "cos")]

    def forward(self, timestamps: Timestamps, *, dtype: torch.dtype = torch.float32) -> Tensor:
        """``(...)`` timestamps -> ``(..., dim)``; an int64 ns tensor stays on its device."""
        check_output_dtype(dtype)
        if not (isinstance(timestamps, Tensor) and timestamps.dtype == torch.int64):
            timestamps = torch.from_numpy(to_nanoseconds(timestamps))
        elif not torch.compiler.is_compiling():
            check_no_nat(timestamps)
        return fourier_features(timestamps, self.periods_ns, self.harmonics, dtype=dtype)

    def extra_repr(self) -> str:
        return f"periods={self.periods}, harmonics={self.harmonics}"
