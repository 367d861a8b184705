"""3D rotary position embedding over ``(t, row, col)`` video coordinates.

The ``head_dim / 2`` rotary pairs are divided among the three axes by ``sections`` (pairs per
axis, in the order ``t, row, col``; Qwen2-VL's ``mrope_section``). Pair ``j`` of head ``h``
turns by ``sum_a coord_a * freqs[a, h, j]``; the variants differ in ``freqs``:

- :class:`MRoPE` (Qwen2-VL's multimodal RoPE): the 1D RoPE spectrum ``base ** (-2j /
  head_dim)`` over all pairs, each pair reading one axis. ``axis_layout="chunked"`` gives the
  axes contiguous blocks of pairs, ``t`` first (Qwen2-VL, Qwen2.5-VL); ``"strided"`` cycles
  ``t, row, col, t, row, col, ...`` over the first ``3 * sections`` pairs, the rest reading
  ``t`` (Qwen3-VL's interleaved mRoPE). Text tokens at ``(p, p, p)`` get exactly the 1D RoPE
  of position ``p``, which is what lets text and vision tokens share one sequence. Chunked
  leaves the columns only the slowest frequencies (with head_dim 128, ``10000 ** (-80/128)``
  and below: visible turns only over tens of patches); strided gives every axis the whole
  range, which is why Qwen3-VL moved to it.
- :class:`RoPE3D` ``"axial"``: each axis is a 1D RoPE of its own over its block of pairs,
  frequencies ``base ** (-i / sections[a])`` (RoPE-ViT's axial RoPE with a third axis).
- :class:`RoPE3D` ``"mixed"``: learnable per-head 3D frequencies (RoPE-Mixed with a third
  axis), so a head can attend along space-time diagonals (motion). Initialised per head with a
  random orthonormal frame ``u_t, u_row, u_col``: the pairs of axis ``a``'s block turn along
  ``u_a`` with the axial magnitudes; without rotation (``rotate=False``) it starts as axial.

In all of them the attention score of a query and a key depends only on their 3D offset, so
with frame times as ``t`` it depends on the true time gap between frames.
"""

from __future__ import annotations

from collections.abc import Sequence

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
    check_even,
    check_position_values,
    check_positive_int,
)
from torch import Tensor, nn

from .coords import cached, check_rotate_inputs
from .video import VideoPositions, video_position_shape

__all__ = ["MRoPE", "RoPE3D", "default_sections", "check_sections", "init_mixed_freqs_3d",
           "mrope_axes"]

AXIS_LAYOUTS = ("chunked", "strided")
VARIANTS = ("axial", "mixed")
DEFAULT_BASE = {"axial": 100.0, "mixed": 10.0}


def default_sections(pairs: int) -> tuple[int, int, int]:
    """``(t, row, col)`` pairs for ``pairs`` rotary (or sin/cos) pairs: rows and columns
    ``3 * pairs // 8`` each, time the rest (a quarter when ``pairs % 8 == 0``: Qwen2-VL's
    ``[16, 24, 24]`` for head_dim 128, GLM-4V's and timm's ``(8, 12, 12)`` for 64)."""
    space = 3 * pairs // 8
    return pairs - 2 * space, space, space


def check_sections(sections: object, pairs: int, name: str = "sections",
                   what: str = "head_dim // 2") -> tuple[int, int, int]:
    """``sections`` (or :func:`default_sections` for None) as three positive ints summing to
    ``pairs``."""
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

    ``"chunked"``: ``[0] * s_t + [1] * s_row + [2] * s_col`` (Qwen2-VL). ``"strided"``: pair
    ``j`` reads the row if ``j % 3 == 1 and j < 3 * s_row``, the column if ``j % 3 == 2 and j <
    3 * s_col``, else ``t`` (Qwen3-VL); sections whose strided counts differ from the sections
    themselves raise.
    """
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
    """RoPE-Mixed 3D initial frequencies ``(3, num_heads, head_dim // 2)`` float32.

    Per head an orthonormal frame ``U`` (random, Haar-distributed, with ``rotate``; the
    identity without): pair ``j`` in axis ``a``'s block (of ``sections``) gets ``U[:, a] *
    base ** (-i / sections[a])``, ``i`` its index in the block. ``rotate=False`` gives
    exactly the axial frequencies.
    """
    pairs = check_even(head_dim, "head_dim") // 2
    check_positive_int(num_heads, "num_heads")
    sections = check_sections(sections, pairs)
    base = check_base(base)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got "
                        f"{type(generator).__name__}")
    rotate = check_bool(rotate, "rotate")
    device = torch.get_default_device()
    # Drawn on the CPU (a CPU generator, QR and indexing need values: not under a meta
    # device), then placed: 3 * H * head_dim / 2 numbers.
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


class _Rotary3D(Float64Buffers):
    """What the 3D rotary encodings share: angles from ``(3, H or 1, P)`` frequencies,
    rotations over prefix + patch tokens, :meth:`rotate`."""

    kind = "rotary"
    head_dim: int
    layout: str

    def frequencies(self) -> Tensor:
        """``(3, H or 1, head_dim // 2)`` angular frequencies per axis (t, row, col)."""
        raise NotImplementedError

    def angles(self, coords: Tensor) -> Tensor:
        """``(N, 3)``/``(B, N, 3)`` coordinates -> ``(B or 1, H or 1, N, head_dim // 2)``
        angles (float32, float64 for float64 coordinates)."""
        if coords.ndim == 2:
            coords = coords[None]
        freqs = self.frequencies()
        # One axis at a time: a (B, H, N, 3, P) product would hold three times the angles.
        # A zero frequency gives an exact 0, so fixed layouts sum to exactly their one axis.
        return sum(angles(coords[:, None, :, a], freqs[a][:, None, :]) for a in range(3))

    def rotation(self, positions: Tensor | VideoPositions) -> Rotation:
        """``(N, 3)``/``(B, N, 3)`` coordinates or a :class:`VideoPositions` ->
        :class:`posenc.core.rope.Rotation` over ``num_prefix_tokens + N`` tokens (prefix tokens
        unrotated)."""
        check_position_values(positions)
        return self._rotation(positions)

    def _rotation(self, positions: Tensor | VideoPositions) -> Rotation:
        positions = video_position_shape(positions)

        def compute() -> Rotation:
            theta = self.angles(positions.coords)
            if positions.num_prefix_tokens:
                theta = F.pad(theta, (0, 0, positions.num_prefix_tokens, 0))
            return rotation_from_angles(theta, self.layout)

        return cached(positions, (id(self), "rotation"), compute)

    def rotate(self, x: Tensor, positions: Tensor | VideoPositions) -> Tensor:
        """Rotate ``x`` of shape ``(B, H, P + N, head_dim)`` by ``(N, 3)``/``(B, N, 3)``
        coordinates or a :class:`VideoPositions` with ``P`` prefix tokens."""
        check_position_values(positions)
        positions = video_position_shape(positions)
        # Only per-head (mixed) frequencies fix the number of heads.
        heads = self.num_heads if getattr(self, "freqs", None) is not None else None
        check_rotate_inputs(x, positions.coords, positions.num_prefix_tokens, self.head_dim,
                            heads)
        return apply_rotation(x, self._rotation(positions))

    forward = rotate


class MRoPE(_Rotary3D):
    """Qwen2-VL's multimodal rotary embedding (mRoPE) for q and k ``(B, H, P + N, head_dim)``.

    Equal to transformers' ``Qwen2VLRotaryEmbedding`` (``rope_type="default"``) applied with
    ``apply_rotary_pos_emb`` (``axis_layout="chunked"``, ``layout="half"``) and to
    ``Qwen3VLTextRotaryEmbedding`` (``"strided"``); Hugging Face's ``position_ids`` of shape
    ``(3, B, N)`` are this module's ``position_ids.permute(1, 2, 0)``.

    Args:
        head_dim: channels per head (even); all of them rotate.
        sections: rotary pairs per axis ``(t, row, col)``, summing to ``head_dim // 2``
            (``mrope_section``); None: :func:`default_sections`.
        base: wavelength base (``rope_theta``).
        axis_layout: ``"chunked"`` (Qwen2-VL, Qwen2.5-VL) or ``"strided"`` (Qwen3-VL); see the
            module docstring.
        layout: channel pairing of the rotation, ``"half"`` (Hugging Face's ``rotate_half``)
            or ``"interleaved"``.
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
    """Axial or mixed 3D rotary encoding for q and k ``(B, H, P + N, head_dim)``.

    Use it as the ``rotary`` of :class:`posenc.core.MultiheadAttention` with ``(N, 3)``/
    ``(B, N, 3)`` ``(t, row, col)`` positions (:func:`posenc.spatial.video_coords`) or a
    :class:`VideoPositions`, or call :meth:`rotate` on q or k.

    Args:
        head_dim: channels per head (even); all of them rotate.
        num_heads: attention heads (mixed has frequencies per head).
        variant: ``"axial"`` or ``"mixed"`` (see the module docstring).
        base: frequency base; None: RoPE-ViT's, 100 for axial, 10 for mixed (as
            :class:`RoPE2D`).
        sections: rotary pairs per axis ``(t, row, col)`` summing to ``head_dim // 2``; None:
            :func:`default_sections`.
        layout: channel pairing, ``"interleaved"`` (as :class:`RoPE2D`; the faster on CPU) or
            ``"half"``.

    The mixed frequencies are a float32 parameter ``freqs`` of shape ``(3, H, head_dim / 2)``
    (``[0]`` multiplies t, ``[1]`` rows, ``[2]`` columns) that stays float32 when the module
    is cast. Choose ``t``'s unit so a frame step is about a patch step (see
    :func:`video_coords`' ``time_scale``).
    """

    # A bf16 frequency is off by up to 0.4%, i.e. whole radians a few hundred steps away.
    fixed_dtype_parameters = ("freqs",)

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
        if variant == "axial":
            self.register_parameter("freqs", None)
            self.reset_float64_buffers()
        else:
            self.freqs = nn.Parameter(init_mixed_freqs_3d(head_dim, num_heads, self.base,
                                                          self.sections))

    def float64_buffers(self) -> dict[str, Tensor]:
        if self.variant != "axial":
            return {}
        inv_freq = torch.cat([rope_inv_freq(2 * s, self.base) for s in self.sections])
        return {"freqs64": _axial_freqs(mrope_axes(self.sections), inv_freq)}

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Redraw the mixed frequencies, recompute the axial ones (after ``to_empty()``)."""
        self.reset_float64_buffers()
        if self.freqs is not None:
            self.freqs.copy_(init_mixed_freqs_3d(self.head_dim, self.num_heads, self.base,
                                                 self.sections))

    def frequencies(self) -> Tensor:
        return self.freqs64 if self.freqs is None else self.freqs.float()

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, num_heads={self.num_heads}, "
                f"variant={self.variant!r}, base={self.base}, sections={self.sections}, "
                f"layout={self.layout!r}")

