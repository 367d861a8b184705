"""Angles ``position * frequency`` computed without losing precision at large positions.

Every sinusoidal and rotary encoding in posenc goes through :func:`angles`: a float32
product ``1e6 * inv_freq`` is only good to ~0.06 rad, so the product is formed in float64
and reduced modulo 2*pi before it is narrowed to float32.

Channel layouts, one vocabulary for every encoding built on these angles. An angle ``theta_i``
(``i < F``) fills two channels, its sin and cos (sinusoidal) or the two channels a rotation
turns together (rotary); :data:`LAYOUTS` names where they sit in a width ``2F``:

- ``"interleaved"``: side by side, channels ``2i`` and ``2i + 1``: ``[sin t0, cos t0, sin t1,
  cos t1, ...]`` (the sinusoidal paper's PE(p, 2i), PE(p, 2i+1); GPT-J/RoFormer rotary).
- ``"half"``: half the width apart, channels ``i`` and ``i + F``: ``[sin t0, sin t1, ...,
  cos t0, cos t1, ...]`` (tensor2tensor's sinusoid; GPT-NeoX/Llama ``rotate_half`` rotary).

2D encodings add the order of the axes: :class:`posenc.spatial.SinCos2D` names
``"rows_cols"``/``"cols_rows"`` (each axis a ``"half"`` block of its own, rows or columns
first) and ``"half"`` (the 1D ``"half"`` layout over the angles of both axes, rows then
columns: timm's ``build_sincos2d_pos_embed`` default). No layout is named after a library.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .validation import check_position_dtype

__all__ = ["LAYOUTS", "angles", "wide_dtype"]

LAYOUTS = ("half", "interleaved")


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
    for name, t in (("positions", positions), ("inv_freq", inv_freq)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    check_position_dtype(positions)
    wide = wide_dtype(positions.device)
    theta = positions.to(wide)[..., None] * inv_freq.to(device=positions.device, dtype=wide)
    if positions.dtype == torch.float64:
        return theta
    return torch.remainder(theta, 2 * math.pi).float()
