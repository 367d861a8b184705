"""Angles ``position * frequency`` computed without losing precision at large positions.

Every sinusoidal and rotary encoding in posenc goes through :func:`angles`: a float32
product ``1e6 * inv_freq`` is only good to ~0.06 rad, so the product is formed in float64
and reduced modulo 2*pi before it is narrowed to float32.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .validation import check_position_dtype

__all__ = ["angles", "wide_dtype"]


def wide_dtype(device: torch.device) -> torch.dtype:
    """float64 wherever the backend has it (Apple MPS does not; it gets float32)."""
    return torch.float32 if device.type == "mps" else torch.float64


def angles(positions: Tensor, inv_freq: Tensor) -> Tensor:
    """Angles ``positions[..., None] * inv_freq``.

    Args:
        positions: ``(...)`` int or float coordinates.
        inv_freq: ``(F,)`` angular frequencies (float64 for full precision), or any shape that
            broadcasts against ``(..., F)``, e.g. per-head ``(H, 1, F)``.

    Returns:
        ``(..., F)`` float32 angles reduced to ``[0, 2*pi)``; float64 (unreduced) when
        ``positions`` is float64, so callers that need float64 sin/cos get them.
    """
    check_position_dtype(positions)
    wide = wide_dtype(positions.device)
    theta = positions.to(wide)[..., None] * inv_freq.to(device=positions.device, dtype=wide)
    if positions.dtype == torch.float64:
        return theta
    return torch.remainder(theta, 2 * math.pi).float()
