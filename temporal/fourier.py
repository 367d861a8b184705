"""Prophet-style Fourier seasonality on absolute time, with exact phases.

A float32 count of seconds since 1970 is only good to ~128 s, and even float64 nanoseconds
lose the phase of a short period; so each timestamp's integer nanoseconds are reduced modulo
the integer period first, and only that remainder (< one period) becomes a float.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from posenc.core import check_positive_float, wide_dtype
from torch import Tensor, nn

from .timestamps import Timestamps, to_nanoseconds

__all__ = ["DEFAULT_PERIODS", "FourierSeasonality", "fourier_features"]

# Seconds; the year is the mean Gregorian year (365.2425 days), as in Prophet.
DEFAULT_PERIODS: dict[str, float] = {"day": 86400, "week": 604800, "year": 31556952}
_NAT = torch.iinfo(torch.int64).min  # pandas' NaT as int64


def fourier_features(nanoseconds: Tensor, periods_ns: Sequence[int], harmonics: Sequence[int],
                     *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Sin/cos of ``2*pi*k*t/P`` for each period ``P`` and harmonic ``k = 1..K``.

    Args:
        nanoseconds: ``(...)`` int64 nanoseconds since the epoch (:func:`to_nanoseconds`).
        periods_ns: whole-nanosecond periods.
        harmonics: number of harmonics ``K`` of each period.
        dtype: output dtype.

    Returns:
        ``(..., 2 * sum(harmonics))``: per period, ``[sin k=1, cos k=1, sin k=2, ...]``
        (Prophet's column order). The phase ``(t mod P) / P`` is exact to 1e-16 cycles;
        harmonic ``k`` multiplies that error by ``k``.
    """
    if nanoseconds.dtype != torch.int64:
        raise TypeError(f"nanoseconds must be an int64 tensor, got {nanoseconds.dtype}")
    wide = wide_dtype(nanoseconds.device)
    blocks = []
    for period, count in zip(periods_ns, harmonics, strict=True):
        cycles = torch.remainder(nanoseconds, period).to(wide) / period  # [0, 1)
        k = torch.arange(1, count + 1, device=nanoseconds.device, dtype=wide)
        theta = (2 * math.pi) * torch.remainder(cycles[..., None] * k, 1.0)
        blocks.append(torch.stack((theta.sin(), theta.cos()), dim=-1).flatten(-2))
    return torch.cat(blocks, dim=-1).to(dtype)


class FourierSeasonality(nn.Module):
    """Fourier terms of absolute time for a set of named periods (Prophet's seasonalities).

    Phases are of absolute time since the epoch: UTC instants for tz-aware timestamps, the
    wall-clock readings for tz-naive ones (pass naive local times, e.g.
    ``ts.tz_localize(None)``, for seasonality that follows the local clock across DST; or use
    :class:`CalendarFeatures`).

    Args:
        periods: ``{name: period in seconds}``, rounded to whole nanoseconds.
        harmonics: harmonics per period (Prophet uses 4 daily, 3 weekly, 10 yearly), one int
            for all or ``{name: int}`` for each.
    """

    def __init__(self, periods: Mapping[str, float] | None = None,
                 harmonics: int | Mapping[str, int] = 4) -> None:
        super().__init__()
        periods = dict(DEFAULT_PERIODS if periods is None else periods)
        if not periods:
            raise ValueError("periods must name at least one period, got {}")
        for name, seconds in periods.items():
            if round(check_positive_float(seconds, f"periods[{name!r}]") * 10**9) < 1:
                raise ValueError(f"periods[{name!r}] must be a positive number of seconds "
                                 f"(>= 1 ns), got {seconds!r}")
        if isinstance(harmonics, Mapping):
            if set(harmonics) != set(periods):
                raise ValueError(f"harmonics must have the keys of periods {sorted(periods)}, "
                                 f"got {sorted(harmonics)}")
            counts = [harmonics[name] for name in periods]
        else:
            counts = [harmonics] * len(periods)
        for name, count in zip(periods, counts, strict=True):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"harmonics for {name!r} must be an int >= 1, got {count!r}")
        self.periods = periods
        self.periods_ns = [round(s * 10**9) for s in periods.values()]
        self.harmonics = counts

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

    def forward(self, timestamps: Timestamps, *,
                dtype: torch.dtype = torch.float32) -> Tensor:
        """Timestamps (any accepted input; an int64 nanosecond tensor stays on its device)
        of shape ``(...)`` -> ``(..., dim)``."""
        if not (isinstance(timestamps, Tensor) and timestamps.dtype == torch.int64):
            timestamps = torch.from_numpy(to_nanoseconds(timestamps))
        elif not torch.compiler.is_compiling() and bool((timestamps == _NAT).any()):
            raise ValueError("timestamps contains NaT (int64 min); drop or fill missing "
                             "timestamps before encoding them")
        return fourier_features(timestamps, self.periods_ns, self.harmonics, dtype=dtype)

    def extra_repr(self) -> str:
        return f"periods={self.periods}, harmonics={self.harmonics}"
