"""2D rotary position embedding for patch grids: axial and RoPE-Mixed.

Heo et al. 2024, "Rotary Position Embedding for Vision Transformer" (RoPE-ViT):

- axial: the rotary pairs are split in two; the first half rotates with the row, the second
  with the column, each at frequencies ``base ** (-4i / head_dim)`` (``base=100``).
- mixed: every head has learnable 2D frequencies; pair ``j`` of head ``h`` turns by
  ``row * freqs[0, h, j] + col * freqs[1, h, j]``, so heads can attend along diagonals.
  Initialised as the paper's ``init_random_2d_freqs`` (``theta=10``): per head a random
  direction ``phi ~ U[0, 2pi)``; the first half of the pairs use direction ``phi``, the second
  ``phi + pi/2``, with magnitudes ``base ** (-4i / head_dim)``.

In both, the attention score of a query and a key depends only on their 2D offset.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from posenc.core import (
    Float64Buffers,
    Rotation,
    angles,
    apply_rotation,
    check_base,
    check_bool,
    check_choice,
    check_positive_int,
    rope_inv_freq,
    rotation_from_angles,
)
from posenc.core.angles import LAYOUTS
from torch import Tensor, nn

from .coords import NORMALIZE, GridPositions, as_grid_positions, cached

__all__ = ["RoPE2D", "init_mixed_freqs"]

VARIANTS = ("axial", "mixed")
DEFAULT_BASE = {"axial": 100.0, "mixed": 10.0}


def init_mixed_freqs(head_dim: int, num_heads: int, base: float = 10.0, *,
                     rotate: bool = True, generator: torch.Generator | None = None) -> Tensor:
    """RoPE-Mixed initial frequencies ``(2, num_heads, head_dim // 2)`` float32.

    The paper's ``init_random_2d_freqs(head_dim, num_heads, theta=base, rotate)``, with the
    axes in posenc's ``(row, col)`` order: ``[0]`` is the paper's ``freqs_y`` (rows) and
    ``[1]`` its ``freqs_x`` (columns). The per-head angles are drawn exactly as the paper's
    loop does (one ``torch.rand`` value per head, in order), so a seeded run reproduces it.
    """
    _check_head_dim(head_dim)
    check_positive_int(num_heads, "num_heads")
    mag = rope_inv_freq(head_dim // 2, check_base(base))  # base ** (-4i / head_dim), float64
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got "
                        f"{type(generator).__name__}")
    if check_bool(rotate, "rotate"):
        phi = (torch.rand(num_heads, 1, generator=generator) * 2 * torch.pi).double()
    else:
        phi = torch.zeros(num_heads, 1, dtype=torch.float64)
    phi = torch.cat((phi, phi + torch.pi / 2), dim=-1).repeat_interleave(mag.numel(), dim=-1)
    mag = mag.repeat(2)
    return torch.stack((mag * phi.sin(), mag * phi.cos())).float()


def _check_head_dim(head_dim: int) -> int:
    check_positive_int(head_dim, "head_dim")
    if head_dim % 4:
        raise ValueError(f"head_dim must be divisible by 4 (rotary pairs are split between rows "
                         f"and columns), got {head_dim}")
    return head_dim


class RoPE2D(Float64Buffers):
    """2D rotary encoding for q and k of shape ``(B, H, P + N, head_dim)``.

    Use it as the ``rotary`` of :class:`posenc.core.MultiheadAttention` with ``(N, 2)``/
    ``(B, N, 2)`` patch coordinates or a :class:`GridPositions` as positions, or call it
    (:meth:`rotate`, as :class:`posenc.core.RotaryEncoding`) on q or k.

    Args:
        head_dim: channels per head (divisible by 4); all of them rotate.
        num_heads: attention heads (mixed has frequencies per head).
        variant: ``"axial"`` or ``"mixed"`` (see module docstring).
        base: frequency base; None takes the paper's value: 100 for axial, 10 for mixed.
        normalize: coordinate system: ``None`` (patch indices, RoPE-ViT) or ``"unit"``
            (coordinates in [-1, 1] from :func:`patch_coords`; angles are ``2 pi coord freq``
            as in DINOv3, whose RoPE is ``RoPE2D(d, h, "axial", base=100, normalize="unit",
            layout="half")``).
        layout: channel pairing of :class:`posenc.core.Rotation`: ``"interleaved"`` (pair ``i``
            is channels ``2i, 2i+1``, as RoPE-ViT; the faster one on CPU) or ``"half"``
            (``i, i + head_dim/2``, as DINOv3).

    The mixed frequencies are a float32 parameter ``freqs`` of shape ``(2, H, head_dim / 2)``
    (``[0]`` multiplies rows, ``[1]`` columns) that stays float32 when the module is cast.
    """

    kind = "rotary"
    # A bf16 frequency is off by up to 0.4%, i.e. whole radians a few hundred patches away.
    fixed_dtype_parameters = ("freqs",)

    def __init__(self, head_dim: int, num_heads: int, variant: str = "axial",
                 base: float | None = None, *, normalize: str | None = None,
                 layout: str = "interleaved") -> None:
        super().__init__()
        self.head_dim = _check_head_dim(head_dim)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.variant = check_choice(variant, "variant", VARIANTS)
        self.base = DEFAULT_BASE[variant] if base is None else check_base(base)
        self.normalize = check_choice(normalize, "normalize", NORMALIZE)
        self.layout = check_choice(layout, "layout", LAYOUTS)
        self.scale = 2 * math.pi if normalize == "unit" else 1.0
        if variant == "axial":
            self.register_parameter("freqs", None)
            self.reset_float64_buffers()
        else:
            self.freqs = nn.Parameter(init_mixed_freqs(head_dim, num_heads, self.base))

    def float64_buffers(self) -> dict[str, Tensor]:
        if self.variant != "axial":
            return {}
        return {"inv_freq64": rope_inv_freq(self.head_dim // 2, self.base) * self.scale}

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Redraw the mixed frequencies, recompute the axial ones (after ``to_empty()``)."""
        self.reset_float64_buffers()
        if self.freqs is not None:
            self.freqs.copy_(init_mixed_freqs(self.head_dim, self.num_heads, self.base))

    def angles(self, coords: Tensor) -> Tensor:
        """Rotation angles of ``(N, 2)``/``(B, N, 2)`` coordinates: ``(B or 1, 1, N, D/2)``
        for axial (shared by all heads), ``(B or 1, H, N, D/2)`` for mixed."""
        if coords.ndim == 2:
            coords = coords[None]
        if self.freqs is None:
            # (B, N, 2, D/4) -> (B, 1, N, D/2): row pairs first, then column pairs.
            return angles(coords, self.inv_freq64).flatten(-2)[:, None]
        freqs = self.freqs.float() * self.scale  # (2, H, D/2)
        per_axis = [angles(coords[:, None, :, a], freqs[a][:, None, :]) for a in range(2)]
        return per_axis[0] + per_axis[1]

    def rotation(self, positions: Tensor | GridPositions) -> Rotation:
        """Coordinates -> :class:`Rotation` over ``num_prefix_tokens + N`` tokens.

        Prefix tokens (``GridPositions.num_prefix_tokens``) get the identity rotation.
        """
        positions = as_grid_positions(positions)

        def compute() -> Rotation:
            theta = self.angles(positions.coords)
            if positions.num_prefix_tokens:
                theta = F.pad(theta, (0, 0, positions.num_prefix_tokens, 0))
            return rotation_from_angles(theta, self.layout)

        return cached(positions, (id(self), "rotation"), compute)

    def rotate(self, x: Tensor, positions: Tensor | GridPositions) -> Tensor:
        """Rotate ``x`` of shape ``(B, H, P + N, head_dim)`` by ``(N, 2)``/``(B, N, 2)``
        coordinates or a :class:`GridPositions` with ``P`` prefix tokens (left unrotated)."""
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        positions = as_grid_positions(positions)
        tokens = positions.num_prefix_tokens + positions.coords.shape[-2]
        if x.ndim != 4 or x.shape[-1] != self.head_dim or (
                self.freqs is not None and x.shape[1] != self.num_heads):
            heads = "H" if self.freqs is None else f"H={self.num_heads}"
            raise ValueError(f"x must have shape (B, {heads}, N, head_dim={self.head_dim}), got "
                             f"{tuple(x.shape)}")
        coords = positions.coords
        if tokens != x.shape[-2] or (coords.ndim == 3 and coords.shape[0] not in (1, x.shape[0])):
            raise ValueError(f"positions of shape {tuple(coords.shape)} with "
                             f"{positions.num_prefix_tokens} prefix tokens do not match x of "
                             f"shape {tuple(x.shape)}: expected (N, 2) or (B, N, 2) with "
                             f"prefix + N = {x.shape[-2]}, B = {x.shape[0]}")
        return apply_rotation(x, self.rotation(positions))

    forward = rotate

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, num_heads={self.num_heads}, "
                f"variant={self.variant!r}, base={self.base}, normalize={self.normalize!r}, "
                f"layout={self.layout!r}")
