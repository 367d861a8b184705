"""xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE with a per-pair decay.

Queries are rotated and scaled by ``s(m) = zeta ** ((m - c) / scale_base)``, keys by ``1 / s(n)``,
with ``zeta_i = (2i + 0.4 R) / (1.4 R)`` (``R = rotary_dim``), so a logit is damped by
``zeta_i ** ((m - n) / scale_base)``; the references use it in causal attention only. The centre
``c`` cancels in every logit (``center=N // 2`` reproduces rotary-embedding-torch's q and k) and
is fixed so that cached keys keep their scale. Positions beyond
[`XPos.max_offset`][posenc.core.XPos.max_offset] of the dtype raise rather than let a scale overflow
(at ``scale_base=512``: 2266 in float16).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._checks import (
    check_base,
    check_choice,
    check_even,
    check_float,
    check_positions,
    check_positive_float,
)
from .encoding import LAYOUTS, Float64Buffers, angles, wide_dtype
from .rope import Rotation, apply_rotation, check_rotary_dim, rope_inv_freq, rotation_from_angles

__all__ = ["XPos", "xpos_zeta"]

# zeta_0 = 0.4 R / (1.4 R) for every R: the fastest-growing scale sets the range.
_LOG_ZETA_MIN = math.log(1.4 / 0.4)


def xpos_zeta(rotary_dim: int) -> Tensor:
    """``(rotary_dim // 2,)`` float64 per-pair decay bases ``(2i + 0.4 R) / (1.4 R)``."""
    check_even(rotary_dim, "rotary_dim")
    pairs = torch.arange(0, rotary_dim, 2, dtype=torch.float64)
    return (pairs + 0.4 * rotary_dim) / (1.4 * rotary_dim)


class XPos(Float64Buffers):
    """xPos rotary encoding for q and k of shape ``(B, H, N, head_dim)``: queries turn by
    [`rotation`][posenc.core.XPos.rotation], keys by
    [`key_rotation`][posenc.core.XPos.key_rotation], or ``q, k = xpos(q, k, positions)``.

    Args:
        head_dim: channels per head.
        base: wavelength base of the rotation, as [`RotaryEncoding`][posenc.core.RotaryEncoding]'s.
        scale_base: decay length in positions (the references' ``xpos_scale_base``).
        rotary_dim: channels that rotate and scale (even, <= head_dim; default ``head_dim``).
        layout: ``"half"`` or ``"interleaved"`` channel pairing.
        center: position where every scale is 1 (the references' ``seq_len // 2``).
    """

    kind = "rotary"

    def __init__(self, head_dim: int, base: float = 10000.0, scale_base: float = 512.0,
                 rotary_dim: int | None = None, layout: str = "half", center: float = 0.0) -> None:
        super().__init__()
        self.head_dim = check_even(head_dim, "head_dim")
        self.rotary_dim = check_rotary_dim(head_dim, rotary_dim)
        self.base = check_base(base)
        self.scale_base = check_positive_float(scale_base, "scale_base")
        self.layout = check_choice(layout, "layout", LAYOUTS)
        self.center = check_float(center, "center")
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        return {"inv_freq64": rope_inv_freq(self.rotary_dim, self.base),
                "log_zeta64": xpos_zeta(self.rotary_dim).log()}

    @property
    def inv_freq(self) -> Tensor:
        """``(rotary_dim // 2,)`` float32 inverse frequencies."""
        return self.inv_freq64.float()

    @property
    def zeta(self) -> Tensor:
        """``(rotary_dim // 2,)`` float64 per-pair decay bases
        ([`xpos_zeta`][posenc.core.xpos.xpos_zeta])."""
        return self.log_zeta64.exp()

    def max_offset(self, dtype: torch.dtype = torch.float16) -> float:
        """Largest ``|position - center|`` whose scales ``s`` and ``1 / s`` lie within
        ``[max ** -0.5, max ** 0.5]``, ``max`` being ``dtype``'s (at most float32's)."""
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
        largest = min(torch.finfo(dtype).max, torch.finfo(torch.float32).max)
        return 0.5 * math.log(largest) * self.scale_base / _LOG_ZETA_MIN

    def check_range(self, positions: Tensor, dtype: torch.dtype = torch.float32,
                    name: str = "positions") -> None:
        """Raise ``ValueError`` if a position lies more than
        [`max_offset`][posenc.core.XPos.max_offset] (``dtype``) from the centre; reads the values
        (skipped under ``torch.compile``)."""
        limit = self.max_offset(dtype)
        if not isinstance(positions, Tensor) or positions.numel() == 0 \
                or torch.compiler.is_compiling():
            return
        offset = (positions.to(wide_dtype(positions.device)) - self.center).abs().max()
        if bool(offset > limit):
            raise ValueError(
                f"{name} lie up to {float(offset):g} positions from the xPos center="
                f"{self.center:g}, beyond max_offset={limit:.1f} for {dtype} (scale_base="
                f"{self.scale_base:g}): the scales zeta ** (offset / scale_base) would leave "
                f"{dtype}'s range. Set center= to the middle of the positions (the references "
                "use seq_len // 2), raise scale_base, or attend in bfloat16/float32")

    def scale(self, positions: Tensor) -> Tensor:
        """Query-side scales ``zeta ** ((positions - center) / scale_base)``:
        ``(*positions.shape, rotary_dim // 2)`` float64; keys use the reciprocal."""
        positions = check_positions(positions)
        return self._log_scale(positions).exp()

    def _log_scale(self, positions: Tensor) -> Tensor:
        wide = wide_dtype(positions.device)
        power = (positions.to(wide) - self.center) / self.scale_base
        return power[..., None] * self.log_zeta64.to(device=positions.device, dtype=wide)

    def _scaled_rotation(self, positions: Tensor, sign: float) -> Rotation:
        """The rotation of checked ``positions``, scaled by ``s`` (``sign=1``, queries) or
        ``1 / s`` (``sign=-1``, keys)."""
        wide = wide_dtype(positions.device)
        theta = angles(positions, self.inv_freq64).to(wide)
        return rotation_from_angles(theta, self.layout, (sign * self._log_scale(positions)).exp())

    def rotation(self, positions: Tensor) -> Rotation:
        """Queries' rotation: ``(N,)`` or ``(B, N)`` positions -> [`Rotation`][posenc.core.Rotation]
        whose ``cos``/``sin`` include the scale; positions beyond float32's
        [`max_offset`][posenc.core.XPos.max_offset] raise."""
        positions = check_positions(positions)
        self.check_range(positions, torch.float32)
        return self._scaled_rotation(positions, 1.0)

    def key_rotation(self, positions: Tensor) -> Rotation:
        """Keys' rotation: as [`rotation`][posenc.core.XPos.rotation], with the reciprocal scale."""
        positions = check_positions(positions)
        self.check_range(positions, torch.float32)
        return self._scaled_rotation(positions, -1.0)

    def forward(self, q: Tensor, k: Tensor, query_positions: Tensor,
                key_positions: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Rotate and scale ``(B, H, Nq, head_dim)`` queries and ``(B, H_kv, Nk, head_dim)``
        keys (``key_positions`` defaults to ``query_positions``); both keep their dtype."""
        key_positions = query_positions if key_positions is None else key_positions
        rotated = []
        for name, x, positions, sign in (("query_positions", q, query_positions, 1.0),
                                         ("key_positions", k, key_positions, -1.0)):
            if not isinstance(x, Tensor) or x.ndim != 4 or x.shape[-1] != self.head_dim:
                got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
                raise ValueError(f"{'q' if name[0] == 'q' else 'k'} must have shape (B, H, N, "
                                 f"head_dim={self.head_dim}), got {got}")
            positions = check_positions(positions, name)
            if positions.shape[-1] != x.shape[-2]:
                raise ValueError(f"{name} of shape {tuple(positions.shape)} do not match "
                                 f"{tuple(x.shape)}: expected (N,) or (B, N) with "
                                 f"N={x.shape[-2]}")
            self.check_range(positions, x.dtype, name)  # the dtype q and k are rotated in
            rotated.append((x, positions, sign))
        q, k = (apply_rotation(x, self._scaled_rotation(p, sign)) for x, p, sign in rotated)
        return q, k

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base}, "
                f"scale_base={self.scale_base}, layout={self.layout!r}, center={self.center}")
