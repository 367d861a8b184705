"""Rotary position embeddings of patch grids (2D) and of clips (3D).

Every encoding here turns rotary pair ``j`` of head ``h`` by ``sum_a coord_a * freqs[a, h, j]``
over the coordinate axes (``(row, col)`` or ``(t, row, col)``), so a query-key score depends
only on their offset. They differ in ``freqs``: [`RoPE2D`][posenc.spatial.RoPE2D] axial or mixed
(Heo et al. 2024, RoPE-ViT; DINOv3's and pixel frequencies), [`MRoPE`][posenc.spatial.MRoPE]
(Qwen2-VL / Qwen3-VL) and [`RoPE3D`][posenc.spatial.RoPE3D] axial or mixed. Each takes coordinates,
or a [`GridPositions`][posenc.spatial.coords.GridPositions] /
[`VideoPositions`][posenc.spatial.coords.VideoPositions] whose prefix tokens (cls, registers) stay
unrotated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from posenc.core import apply_rotation
from posenc.core._checks import (
    check_base,
    check_bool,
    check_choice,
    check_even,
    check_float,
    check_position_values,
    check_positive_float,
    check_positive_int,
)
from posenc.core.encoding import LAYOUTS, Float64Buffers, angles
from posenc.core.rope import Rotation, rope_inv_freq, rotation_from_angles
from torch import Tensor, nn

from .coords import (
    COORD_NORMALIZE,
    CoordAugment,
    GridPositions,
    VideoPositions,
    check_generator,
    check_rotate_inputs,
    grid_position_shape,
    video_position_shape,
)

__all__ = ["RoPE2D", "init_mixed_freqs", "MRoPE", "RoPE3D", "default_sections", "check_sections",
           "init_mixed_freqs_3d", "mrope_axes"]


VARIANTS = ("axial", "mixed")
DEFAULT_BASE = {"axial": 100.0, "mixed": 10.0}
FREQS_FOR = ("lang", "pixel")
#: DINOv3's ``normalize_coords`` -> the coordinate system (``patch_coords``'s ``normalize``).
NORMALIZE_COORDS = {"separate": "unit", "min": "unit_min", "max": "unit_max"}
UNIT = tuple(NORMALIZE_COORDS.values())
DEFAULT_MAX_FREQ = 10.0  # rotary-embedding-torch's default
AXIS_LAYOUTS = ("chunked", "strided")


def _axis_angles(coords: Tensor, freqs: Tensor) -> Tensor:
    """``(B, N, A)`` coordinates, ``(A, H or 1, P)`` frequencies -> ``(B, H or 1, N, P)`` angles,
    one axis at a time (a ``(B, H, N, A, P)`` product would hold ``A`` times the angles)."""
    return sum(angles(coords[:, None, :, a], freqs[a][:, None, :]) for a in range(len(freqs)))


class _Rotary(Float64Buffers):
    """What the spatial rotary encodings share: `rotation` and `rotate` check the
    positions' values (none of a model's: ``known_finite``) and shapes, then compute."""

    kind = "rotary"
    # A bf16 frequency is off by up to 0.4%, i.e. whole radians a few hundred patches away.
    fixed_dtype_parameters = ("freqs",)
    head_dim: int
    num_heads: int
    layout: str
    _position_shape = staticmethod(grid_position_shape)

    def rotation(self, positions: Tensor | GridPositions | VideoPositions, *,
                 augment: bool = True) -> Rotation:
        """``(N, D)``/``(B, N, D)`` coordinates (or positions) -> the rotation of their
        ``num_prefix_tokens + N`` tokens, ``(B or 1, H or 1, P + N, ...)``; prefix tokens get
        the identity. ``augment``: draw the coordinate augmentation (RoPE2D's, training mode),
        one per call; False for positions that carry it already (a grid model draws one per
        forward for all its blocks)."""
        check_position_values(positions)
        positions = self._position_shape(positions)
        return self._compute(self._augmented(positions) if check_bool(augment, "augment")
                             else positions)

    def _augmented(self, positions: GridPositions | VideoPositions
                   ) -> GridPositions | VideoPositions:
        """The positions this encoding rotates by: the given ones (RoPE2D augments them)."""
        return positions

    def _compute(self, positions: GridPositions | VideoPositions) -> Rotation:
        """The rotation at ``positions.coords`` as given (checked)."""
        theta = self.angles(positions.coords)
        if positions.num_prefix_tokens:
            theta = F.pad(theta, (0, 0, positions.num_prefix_tokens, 0))
        return rotation_from_angles(theta, self.layout)

    def rotate(self, x: Tensor, positions: Tensor | GridPositions | VideoPositions) -> Tensor:
        """Rotate ``x`` of shape ``(B, H, P + N, head_dim)`` by ``(N, D)``/``(B, N, D)``
        coordinates, or positions with ``P`` prefix tokens (left unrotated)."""
        check_position_values(positions)
        positions = self._position_shape(positions)
        # Only learned frequencies (per head) fix the number of heads.
        heads = self.num_heads if next(self.parameters(), None) is not None else None
        check_rotate_inputs(x, positions.coords, positions.num_prefix_tokens, self.head_dim, heads)
        return apply_rotation(x, self._compute(self._augmented(positions)))

    forward = rotate

    def _make_freqs(self) -> None:
        """Axial: the float64 frequency buffers; mixed: the learned ``freqs``."""
        if self.variant == "axial":
            self.register_parameter("freqs", None)
            self.reset_float64_buffers()
        else:
            self.freqs = nn.Parameter(self._initial_freqs())

    def _initial_freqs(self) -> Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Redraw the mixed frequencies, recompute the axial ones (after ``to_empty()``)."""
        self.reset_float64_buffers()
        if getattr(self, "freqs", None) is not None:
            self.freqs.copy_(self._initial_freqs())


def init_mixed_freqs(head_dim: int, num_heads: int, base: float = 10.0, *,
                     rotate: bool = True, generator: torch.Generator | None = None) -> Tensor:
    """RoPE-Mixed initial frequencies ``(2, num_heads, head_dim // 2)`` float32: the paper's
    ``init_random_2d_freqs(head_dim, num_heads, theta=base, rotate)`` in ``(row, col)`` order,
    drawn as its loop draws, so a seeded run reproduces it."""
    _check_head_dim(head_dim)
    check_positive_int(num_heads, "num_heads")
    mag = rope_inv_freq(head_dim // 2, check_base(base))  # base ** (-4i / head_dim), float64
    check_generator(generator)
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


class RoPE2D(_Rotary):
    """2D rotary encoding for q and k of shape ``(B, H, P + N, head_dim)``, on ``(N, 2)``/``(B,
    N, 2)`` coordinates or a [`GridPositions`][posenc.spatial.coords.GridPositions] in the system
    `normalize` names.

    ``"axial"`` (RoPE-ViT): the first half of the pairs reads the row, the second the column, at
    ``base ** (-4i / head_dim)``, DINOv3's periods ``min_period * (max_period / min_period) **
    linspace(0, 1, head_dim / 4)`` (angle ``2 pi coord / period`` on unit coordinates) or pixel
    frequencies ``linspace(1, max_freq / 2, head_dim / 4) * pi`` (rotary-embedding-torch) or
    ``2 ** linspace(0, log2(max_freq) - 1, head_dim / 4) * pi`` (timm, ``linear_bands=False``).
    ``"mixed"`` (RoPE-Mixed): a learnable float32 ``freqs`` ``(2, H, head_dim / 2)`` (``[0]``
    rows, ``[1]`` columns), initialised by
    [`init_mixed_freqs`][posenc.spatial.rope.init_mixed_freqs].

    Args:
        head_dim: channels per head (divisible by 4); all of them rotate.
        num_heads: attention heads.
        variant: ``"axial"`` or ``"mixed"``.
        base: frequency base; None: 100 for axial, 10 for mixed (none with periods or pixels).
        normalize: one of `COORD_NORMALIZE`; DINOv3's RoPE is
            ``RoPE2D(d, h, "axial", base=100, normalize="unit", layout="half")``.
        layout: ``"interleaved"`` (channels ``2i, 2i+1``, as RoPE-ViT and timm) or ``"half"``
            (``i, i + head_dim/2``, as DINOv3).
        normalize_coords: DINOv3's ``"separate"``, ``"min"`` or ``"max"``, refining
            ``normalize="unit"``; `normalize` then holds the system.
        min_period: with ``max_period`` (both or neither), DINOv3's periods instead of ``base``.
        max_period: see ``min_period``.
        freqs_for: ``"lang"`` or ``"pixel"`` (axial, coordinates in ``[-1, 1]``).
        max_freq: the pixel frequencies' ``max_freq`` (timm's ``max_res``); default 10.
        linear_bands: pixel frequencies linearly (True, default) or log-spaced (False).
        shift_coords: with ``jitter_coords`` and ``rescale_coords``, DINOv3's coordinate
            augmentation in training mode ([`CoordAugment`][posenc.spatial.coords.CoordAugment]),
            drawn once per call, and by a grid model once per forward for all its blocks.
        jitter_coords: see ``shift_coords``.
        rescale_coords: see ``shift_coords``.
    """

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
        # DINOv3's periods are in units of the unit coordinates: 2 pi per period.
        self.scale = 2 * math.pi if freqs_for == "lang" and self.normalize in UNIT else 1.0
        self._make_freqs()

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

    def _initial_freqs(self) -> Tensor:
        return init_mixed_freqs(self.head_dim, self.num_heads, self.base)

    def angles(self, coords: Tensor) -> Tensor:
        """Rotation angles of ``(N, 2)``/``(B, N, 2)`` coordinates: ``(B or 1, 1, N, D/2)``
        for axial (shared by all heads), ``(B or 1, H, N, D/2)`` for mixed."""
        if coords.ndim == 2:
            coords = coords[None]
        if self.freqs is None:
            # (B, N, 2, D/4) -> (B, 1, N, D/2): row pairs first, then column pairs.
            return angles(coords, self.inv_freq64).flatten(-2)[:, None]
        return _axis_angles(coords, self.freqs.float() * self.scale)

    def _augmented(self, positions: GridPositions) -> GridPositions:
        augment = self.coord_augment
        if augment is None or not augment.training:
            return positions
        return positions._replace(coords=augment(positions.coords))

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
    max_freq = DEFAULT_MAX_FREQ if max_freq is None else check_positive_float(max_freq, "max_freq")
    linear = True if linear_bands is None else check_bool(linear_bands, "linear_bands")
    return max_freq, linear


def default_sections(pairs: int) -> tuple[int, int, int]:
    """``(t, row, col)`` pairs for ``pairs`` rotary (or sin/cos) pairs: rows and columns
    ``3 * pairs // 8`` each, time the rest (Qwen2-VL's ``[16, 24, 24]`` for head_dim 128)."""
    space = 3 * pairs // 8
    return pairs - 2 * space, space, space


def check_sections(sections: object, pairs: int, name: str = "sections",
                   what: str = "head_dim // 2") -> tuple[int, int, int]:
    """``sections`` (or [`default_sections`][posenc.spatial.rope.default_sections] for None) as
    three positive ints summing to ``pairs``."""
    if sections is None:
        sections = default_sections(pairs)
        if min(sections) < 1:
            raise ValueError(f"{what}={pairs} pairs are too few for the three axes (t, row, "
                             f"col): need at least 3")
        return sections
    if not isinstance(sections, Sequence) or isinstance(sections, str) or len(sections) != 3:
        raise TypeError(f"{name} must be three ints (pairs for t, row, col), got "
                        f"{type(sections).__name__} ({sections!r})")
    for s in sections:
        if isinstance(s, bool) or not isinstance(s, int):
            raise TypeError(f"{name} must hold ints, got {type(s).__name__} in {sections!r}")
    if min(sections) < 1 or sum(sections) != pairs:
        raise ValueError(f"{name} must be three positive ints (t, row, col) summing to "
                         f"{what}={pairs}, got {tuple(sections)!r}")
    return tuple(sections)


def mrope_axes(sections: tuple[int, int, int], axis_layout: str = "chunked") -> Tensor:
    """``(sum(sections),)`` int64: the axis (0 = t, 1 = row, 2 = col) each rotary pair reads.
    ``"chunked"``: ``[0] * s_t + [1] * s_row + [2] * s_col`` (Qwen2-VL); ``"strided"``: pair
    ``j`` reads the row if ``j % 3 == 1 and j < 3 * s_row``, the column if ``j % 3 == 2 and j <
    3 * s_col``, else ``t`` (Qwen3-VL); sections that do not fit so raise."""
    check_choice(axis_layout, "axis_layout", AXIS_LAYOUTS)
    pairs = sum(sections)
    # Plain Python, on the CPU: a module built under torch.device("meta") checks it too.
    if axis_layout == "chunked":
        axis = [a for a, s in enumerate(sections) for _ in range(s)]
    else:
        axis = [1 if j % 3 == 1 and j < 3 * sections[1] else
                2 if j % 3 == 2 and j < 3 * sections[2] else 0 for j in range(pairs)]
        counts = tuple(axis.count(a) for a in range(3))
        if counts != tuple(sections):
            raise ValueError(f"sections={tuple(sections)!r} cannot be laid out strided over "
                             f"{pairs} pairs (t, row, col would get {counts}): the row and col "
                             f"sections must fit in the first pairs (3 * sections[1] <= "
                             f"{pairs} + 2)")
    return torch.tensor(axis, dtype=torch.int64, device="cpu")


def init_mixed_freqs_3d(head_dim: int, num_heads: int, base: float = 10.0,
                        sections: tuple[int, int, int] | None = None, *, rotate: bool = True,
                        generator: torch.Generator | None = None) -> Tensor:
    """RoPE-Mixed 3D initial frequencies ``(3, num_heads, head_dim // 2)`` float32: per head an
    orthonormal frame ``U`` (Haar-random with ``rotate``, else the identity, giving the axial
    frequencies); pair ``i`` of axis ``a``'s block gets ``U[:, a] * base ** (-i / sections[a])``.
    """
    pairs = check_even(head_dim, "head_dim") // 2
    check_positive_int(num_heads, "num_heads")
    sections = check_sections(sections, pairs)
    base = check_base(base)
    check_generator(generator)
    rotate = check_bool(rotate, "rotate")
    device = torch.get_default_device()
    # Drawn on the CPU (a CPU generator; QR needs values, not a meta device), then placed.
    with torch.device("cpu"):
        if rotate:
            q, r = torch.linalg.qr(torch.randn(num_heads, 3, 3, generator=generator,
                                               dtype=torch.float64))
            frames = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1))[:, None, :]
        else:
            frames = torch.eye(3, dtype=torch.float64).expand(num_heads, 3, 3)
        mag = torch.cat([rope_inv_freq(2 * s, base) for s in sections])  # (pairs,)
        # frames[h, :, a] is u_a of head h; pair j turns along u_{axis[j]}.
        directions = frames[:, :, mrope_axes(sections)]  # (H, 3, pairs)
        freqs = (directions * mag).permute(1, 0, 2).float()
    return freqs.to(device)


def _axial_freqs(axis: Tensor, inv_freq: Tensor) -> Tensor:
    """``(3, 1, P)``: pair ``j``'s frequency in row ``axis[j]``, zeros elsewhere."""
    return (F.one_hot(axis, 3).T.double() * inv_freq)[:, None, :]


class _Rotary3D(_Rotary):
    """A rotary encoding of ``(t, row, col)`` coordinates, from ``(3, H or 1, P)`` frequencies."""

    _position_shape = staticmethod(video_position_shape)

    def frequencies(self) -> Tensor:
        """``(3, H or 1, head_dim // 2)`` angular frequencies per axis (t, row, col)."""
        raise NotImplementedError

    def angles(self, coords: Tensor) -> Tensor:
        """``(N, 3)``/``(B, N, 3)`` coordinates -> ``(B or 1, H or 1, N, head_dim // 2)``
        angles (float32, float64 for float64 coordinates)."""
        return _axis_angles(coords[None] if coords.ndim == 2 else coords, self.frequencies())


class MRoPE(_Rotary3D):
    """Qwen2-VL's multimodal rotary embedding (mRoPE) for q and k ``(B, H, P + N, head_dim)``.

    The 1D spectrum ``base ** (-2j / head_dim)`` over all pairs, each reading one axis (text
    tokens at ``(p, p, p)`` get the 1D RoPE of ``p``). Equals transformers'
    ``Qwen2VLRotaryEmbedding`` with ``apply_rotary_pos_emb`` (``axis_layout="chunked"``,
    ``layout="half"``) and ``Qwen3VLTextRotaryEmbedding`` (``"strided"``); their ``(3, B, N)``
    ``position_ids`` are these coordinates' ``permute(2, 0, 1)``.

    Args:
        head_dim: channels per head (even); all of them rotate.
        sections: rotary pairs per axis ``(t, row, col)``, summing to ``head_dim // 2``
            (``mrope_section``); None: [`default_sections`][posenc.spatial.rope.default_sections].
        base: wavelength base (``rope_theta``).
        axis_layout: ``"chunked"`` (contiguous blocks, ``t`` first: Qwen2-VL, Qwen2.5-VL) or
            ``"strided"`` (``t, row, col`` cycled over the first pairs: Qwen3-VL); see
            [`mrope_axes`][posenc.spatial.rope.mrope_axes].
        layout: channel pairing, ``"half"`` (Hugging Face's ``rotate_half``) or ``"interleaved"``.
    """

    def __init__(self, head_dim: int, sections: tuple[int, int, int] | None = None,
                 base: float = 10000.0, *, axis_layout: str = "chunked",
                 layout: str = "half") -> None:
        super().__init__()
        self.head_dim = check_even(head_dim, "head_dim")
        self.sections = check_sections(sections, head_dim // 2)
        self.base = check_base(base)
        self.axis_layout = check_choice(axis_layout, "axis_layout", AXIS_LAYOUTS)
        self.layout = check_choice(layout, "layout", LAYOUTS)
        mrope_axes(self.sections, axis_layout)  # refuse sections that cannot be strided now
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        axis = mrope_axes(self.sections, self.axis_layout)
        return {"freqs64": _axial_freqs(axis, rope_inv_freq(self.head_dim, self.base))}

    def frequencies(self) -> Tensor:
        return self.freqs64

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, sections={self.sections}, base={self.base}, "
                f"axis_layout={self.axis_layout!r}, layout={self.layout!r}")


class RoPE3D(_Rotary3D):
    """Axial or mixed 3D rotary encoding for q and k ``(B, H, P + N, head_dim)``, on ``(N,
    3)``/``(B, N, 3)`` ``(t, row, col)`` coordinates or a
    [`VideoPositions`][posenc.spatial.coords.VideoPositions].

    ``"axial"``: a 1D RoPE per axis over its block of pairs, ``base ** (-i / sections[a])``;
    ``"mixed"``: a learnable float32 ``freqs`` ``(3, H, head_dim / 2)``, initialised by
    [`init_mixed_freqs_3d`][posenc.spatial.rope.init_mixed_freqs_3d].

    Args:
        head_dim: channels per head (even); all of them rotate.
        num_heads: attention heads (mixed has frequencies per head).
        variant: ``"axial"`` or ``"mixed"``.
        base: frequency base; None: 100 for axial, 10 for mixed (as
            [`RoPE2D`][posenc.spatial.RoPE2D]).
        sections: rotary pairs per axis ``(t, row, col)`` summing to ``head_dim // 2``; None:
            [`default_sections`][posenc.spatial.rope.default_sections].
        layout: channel pairing, ``"interleaved"`` (as [`RoPE2D`][posenc.spatial.RoPE2D]) or
            ``"half"``.
    """

    def __init__(self, head_dim: int, num_heads: int, variant: str = "axial",
                 base: float | None = None, *, sections: tuple[int, int, int] | None = None,
                 layout: str = "interleaved") -> None:
        super().__init__()
        self.head_dim = check_even(head_dim, "head_dim")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.variant = check_choice(variant, "variant", VARIANTS)
        self.base = DEFAULT_BASE[variant] if base is None else check_base(base)
        self.sections = check_sections(sections, head_dim // 2)
        self.layout = check_choice(layout, "layout", LAYOUTS)
        self._make_freqs()

    def float64_buffers(self) -> dict[str, Tensor]:
        if self.variant != "axial":
            return {}
        inv_freq = torch.cat([rope_inv_freq(2 * s, self.base) for s in self.sections])
        return {"freqs64": _axial_freqs(mrope_axes(self.sections), inv_freq)}

    def _initial_freqs(self) -> Tensor:
        return init_mixed_freqs_3d(self.head_dim, self.num_heads, self.base, self.sections)

    def frequencies(self) -> Tensor:
        return self.freqs64 if self.freqs is None else self.freqs.float()

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, num_heads={self.num_heads}, "
                f"variant={self.variant!r}, base={self.base}, sections={self.sections}, "
                f"layout={self.layout!r}")
