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

Axial frequency families (``freqs_for``):

- ``"lang"``: ``base ** (-4i / head_dim)`` (RoPE-ViT), or DINOv3's periods
  ``min_period * (max_period / min_period) ** linspace(0, 1, head_dim / 4)`` (frequency
  ``1 / period``); on unit coordinates the angle is ``2 pi coord freq``, as in DINOv3.
- ``"pixel"``: ``linspace(1, max_freq / 2, head_dim / 4) * pi`` on coordinates in ``[-1, 1]``
  (rotary-embedding-torch ``freqs_for="pixel"``; timm ``RotaryEmbedding(in_pixels=True,
  linear_bands=True)`` with ``max_res=max_freq``), or timm's log-spaced default
  ``2 ** linspace(0, log2(max_freq) - 1, head_dim / 4) * pi`` (``linear_bands=False``).

DINOv3's training-time coordinate augmentation (:class:`~posenc.spatial.coords.CoordAugment`)
is an option too: ``shift_coords``/``jitter_coords``/``rescale_coords``, applied in training
mode only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from posenc.core import apply_rotation
from posenc.core.angles import LAYOUTS, angles
from posenc.core.buffers import Float64Buffers
from posenc.core.rope import Rotation, rotation_from_angles
from posenc.core.rope_scaling import rope_inv_freq
from posenc.core.validation import (
    check_base,
    check_bool,
    check_choice,
    check_float,
    check_position_values,
    check_positive_float,
    check_positive_int,
)
from torch import Tensor, nn

from .coords import (
    COORD_NORMALIZE,
    CoordAugment,
    GridPositions,
    cached,
    check_rotate_inputs,
    grid_position_shape,
)

__all__ = ["RoPE2D", "init_mixed_freqs"]

VARIANTS = ("axial", "mixed")
DEFAULT_BASE = {"axial": 100.0, "mixed": 10.0}
FREQS_FOR = ("lang", "pixel")
#: DINOv3's ``normalize_coords`` -> the coordinate system (``patch_coords``'s ``normalize``).
NORMALIZE_COORDS = {"separate": "unit", "min": "unit_min", "max": "unit_max"}
UNIT = tuple(NORMALIZE_COORDS.values())
DEFAULT_MAX_FREQ = 10.0  # rotary-embedding-torch's default


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
    (:meth:`rotate`, as :class:`posenc.core.RotaryEncoding`) on q or k. The coordinates are
    expected in the system :attr:`normalize` names (``patch_coords(grid, rope.normalize)``;
    :func:`~posenc.spatial.attach` makes them so).

    Args:
        head_dim: channels per head (divisible by 4); all of them rotate.
        num_heads: attention heads (mixed has frequencies per head).
        variant: ``"axial"`` or ``"mixed"`` (see module docstring).
        base: frequency base; None takes the paper's value: 100 for axial, 10 for mixed (and
            nothing with ``min_period``/``max_period`` or ``freqs_for="pixel"``).
        normalize: coordinate system, one of :data:`~posenc.spatial.coords.COORD_NORMALIZE`
            (see :func:`patch_coords`): ``None`` (patch indices, RoPE-ViT), ``"unit"``
            (``[-1, 1]``; with ``"lang"`` frequencies angles are ``2 pi coord freq`` as in
            DINOv3, whose RoPE is ``RoPE2D(d, h, "axial", base=100, normalize="unit",
            layout="half")``), ``"unit_min"``/``"unit_max"`` or ``"pixel"`` (``linspace(-1,
            1)``, for ``freqs_for="pixel"``).
        layout: channel pairing of :class:`posenc.core.rope.Rotation`: ``"interleaved"`` (pair ``i``
            is channels ``2i, 2i+1``, as RoPE-ViT and timm's ``RotaryEmbedding``; the faster
            one on CPU) or ``"half"`` (``i, i + head_dim/2``, as DINOv3).
        normalize_coords: DINOv3's name for the unit systems, with ``normalize="unit"``:
            ``"separate"`` (each axis by its own size; ``"unit"``), ``"min"`` (``"unit_min"``)
            or ``"max"`` (``"unit_max"``); :attr:`normalize` then holds the system. None keeps
            ``normalize`` as given.
        min_period: with ``max_period``, DINOv3's period schedule instead of ``base`` (axial,
            ``"lang"``): periods
            ``min_period * (max_period / min_period) ** linspace(0, 1, head_dim / 4)`` in
            coordinate units, ``0 < min_period <= max_period``; give both or neither.
        max_period: see ``min_period``.
        freqs_for: ``"lang"`` or ``"pixel"`` frequencies (module docstring; pixel: axial only,
            coordinates in ``[-1, 1]``).
        max_freq: the pixel frequencies' ``max_freq`` (timm's ``max_res``); default 10.
        linear_bands: pixel frequencies linearly (True, default: rotary-embedding-torch) or
            log-spaced (False: timm's ``RotaryEmbedding`` default).
        shift_coords: with ``jitter_coords`` and ``rescale_coords``, DINOv3's coordinate
            augmentation in training mode (:class:`~posenc.spatial.coords.CoordAugment`; timm's
            ``RotaryEmbeddingDinoV3`` arguments). One transform is drawn per positions object
            and kept in its cache, so every encoding with the same augmentation that reads the
            positions of one forward (all blocks of an attached ViT, per-block mixed modules
            included) sees the same transform. Positions without a cache draw on each
            :meth:`rotation` call: in cross-attention give q and k coordinates augmented once
            by a :class:`~posenc.spatial.coords.CoordAugment` instead.
        jitter_coords: see ``shift_coords``.
        rescale_coords: see ``shift_coords``.

    The mixed frequencies are a float32 parameter ``freqs`` of shape ``(2, H, head_dim / 2)``
    (``[0]`` multiplies rows, ``[1]`` columns) that stays float32 when the module is cast.
    """

    kind = "rotary"
    # A bf16 frequency is off by up to 0.4%, i.e. whole radians a few hundred patches away.
    fixed_dtype_parameters = ("freqs",)

    def __init__(self, head_dim: int, num_heads: int, variant: str = "axial",
                 base: float | None = None, *, normalize: str | None = None,
                 layout: str = "interleaved", normalize_coords: str | None = None,
                 min_period: float | None = None, max_period: float | None = None,
                 freqs_for: str = "lang", max_freq: float | None = None,
                 linear_bands: bool | None = None, shift_coords: float | None = None,
                 jitter_coords: float | None = None,
                 rescale_coords: float | None = None) -> None:
        super().__init__()
        self.head_dim = _check_head_dim(head_dim)
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.variant = check_choice(variant, "variant", VARIANTS)
        self.freqs_for = check_choice(freqs_for, "freqs_for", FREQS_FOR)
        self.normalize = _coord_system(normalize, normalize_coords, freqs_for)
        self.layout = check_choice(layout, "layout", LAYOUTS)
        self.min_period, self.max_period = _check_periods(min_period, max_period, base,
                                                          variant, freqs_for)
        self.max_freq, self.linear_bands = _check_pixel(max_freq, linear_bands, base, variant,
                                                        freqs_for)
        if self.min_period is not None or freqs_for == "pixel":
            self.base = None
        else:
            self.base = DEFAULT_BASE[variant] if base is None else check_base(base)
        augment = CoordAugment(shift_coords, jitter_coords, rescale_coords)
        self.coord_augment = augment if augment.active else None
        # DINOv3's periods are in units of the unit coordinates: 2 pi turns per period.
        self.scale = 2 * math.pi if freqs_for == "lang" and self.normalize in UNIT else 1.0
        if variant == "axial":
            self.register_parameter("freqs", None)
            self.reset_float64_buffers()
        else:
            self.freqs = nn.Parameter(init_mixed_freqs(head_dim, num_heads, self.base))

    @property
    def normalize_coords(self) -> str | None:
        """DINOv3's ``normalize_coords`` of the unit systems (``"separate"``, ``"min"``,
        ``"max"``); None for the others."""
        return {v: k for k, v in NORMALIZE_COORDS.items()}.get(self.normalize)

    def float64_buffers(self) -> dict[str, Tensor]:
        if self.variant != "axial":
            return {}
        count = self.head_dim // 4
        if self.freqs_for == "pixel":
            if self.linear_bands:
                bands = torch.linspace(1.0, self.max_freq / 2, count, dtype=torch.float64)
            else:
                bands = 2 ** torch.linspace(0.0, math.log2(self.max_freq) - 1, count,
                                            dtype=torch.float64)
            return {"inv_freq64": bands * math.pi}
        if self.min_period is not None:
            exponents = torch.linspace(0.0, 1.0, count, dtype=torch.float64)
            periods = self.min_period * (self.max_period / self.min_period) ** exponents
            return {"inv_freq64": self.scale / periods}
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
        check_position_values(positions)
        return self._rotation(positions)

    def _rotation(self, positions: Tensor | GridPositions) -> Rotation:
        positions = grid_position_shape(positions)

        def compute() -> Rotation:
            coords = positions.coords
            augment = self.coord_augment
            if augment is not None and augment.training:
                # Keyed by the augmentation, not the module: every encoding of a forward
                # with this augmentation gets the same transform of the same positions.
                coords = cached(positions, ("coord_augment", *augment.config),
                                lambda: augment(coords))
            theta = self.angles(coords)
            if positions.num_prefix_tokens:
                theta = F.pad(theta, (0, 0, positions.num_prefix_tokens, 0))
            return rotation_from_angles(theta, self.layout)

        return cached(positions, (id(self), "rotation"), compute)

    def rotate(self, x: Tensor, positions: Tensor | GridPositions) -> Tensor:
        """Rotate ``x`` of shape ``(B, H, P + N, head_dim)`` by ``(N, 2)``/``(B, N, 2)``
        coordinates or a :class:`GridPositions` with ``P`` prefix tokens (left unrotated)."""
        check_position_values(positions)
        positions = grid_position_shape(positions)
        # Only per-head (mixed) frequencies fix the number of heads.
        check_rotate_inputs(x, positions.coords, positions.num_prefix_tokens, self.head_dim,
                            self.num_heads if self.freqs is not None else None)
        return apply_rotation(x, self._rotation(positions))

    forward = rotate

    def extra_repr(self) -> str:
        text = (f"head_dim={self.head_dim}, num_heads={self.num_heads}, "
                f"variant={self.variant!r}, base={self.base}, normalize={self.normalize!r}, "
                f"layout={self.layout!r}")
        if self.min_period is not None:
            text += f", min_period={self.min_period}, max_period={self.max_period}"
        if self.freqs_for == "pixel":
            text += (f", freqs_for='pixel', max_freq={self.max_freq}, "
                     f"linear_bands={self.linear_bands}")
        return text


def _coord_system(normalize: object, normalize_coords: object, freqs_for: str) -> str | None:
    """``normalize`` refined by DINOv3's ``normalize_coords`` -> the coordinate system."""
    normalize = check_choice(normalize, "normalize", COORD_NORMALIZE)
    if normalize_coords is not None:
        check_choice(normalize_coords, "normalize_coords", tuple(NORMALIZE_COORDS))
        system = NORMALIZE_COORDS[normalize_coords]
        if normalize not in UNIT or (normalize != "unit" and normalize != system):
            raise ValueError(f"normalize_coords={normalize_coords!r} refines unit coordinates: "
                             f"give normalize='unit' (or normalize={system!r} alone), got "
                             f"normalize={normalize!r}")
        normalize = system
    if freqs_for == "pixel" and normalize is None:
        raise ValueError("freqs_for='pixel' needs coordinates in [-1, 1]: give normalize='pixel' "
                         "(timm in_pixels=True, rotary-embedding-torch) or a unit system "
                         f"{list(UNIT)}, got normalize=None (patch indices)")
    if freqs_for == "lang" and normalize == "pixel":
        raise ValueError("normalize='pixel' (linspace(-1, 1) coordinates) goes with "
                         "freqs_for='pixel'; for 'lang' frequencies on [-1, 1] use one of "
                         f"{list(UNIT)} (DINOv3)")
    return normalize


def _check_periods(min_period: object, max_period: object, base: object, variant: str,
                   freqs_for: str) -> tuple[float | None, float | None]:
    if min_period is None and max_period is None:
        return None, None
    if min_period is None or max_period is None:
        missing = "min_period" if min_period is None else "max_period"
        raise ValueError(f"give both min_period and max_period (DINOv3's period schedule), "
                         f"{missing} is None")
    low = check_positive_float(min_period, "min_period")
    high = check_float(max_period, "max_period", ge=low)
    if base is not None:
        raise ValueError(f"give base or min_period/max_period, not both (got base={base!r})")
    if variant != "axial" or freqs_for != "lang":
        raise ValueError(f"min_period/max_period set the axial 'lang' frequencies, got "
                         f"variant={variant!r}, freqs_for={freqs_for!r}")
    return low, high


def _check_pixel(max_freq: object, linear_bands: object, base: object, variant: str,
                 freqs_for: str) -> tuple[float | None, bool | None]:
    if freqs_for != "pixel":
        for name, value in (("max_freq", max_freq), ("linear_bands", linear_bands)):
            if value is not None:
                raise ValueError(f"{name} sets the pixel frequencies: give freqs_for='pixel' "
                                 f"or leave {name} None, got {name}={value!r}")
        return None, None
    if variant != "axial":
        raise ValueError(f"freqs_for='pixel' is axial; variant={variant!r} learns its own "
                         f"frequencies from base")
    if base is not None:
        raise ValueError(f"freqs_for='pixel' takes max_freq, not base (got base={base!r})")
    max_freq = DEFAULT_MAX_FREQ if max_freq is None else check_positive_float(max_freq,
                                                                              "max_freq")
    linear = True if linear_bands is None else check_bool(linear_bands, "linear_bands")
    return max_freq, linear
