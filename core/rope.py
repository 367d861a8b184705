"""Rotary position embedding (RoPE, Su et al. 2021) and its context-extension scalings.

A rotation turns channel pairs of q and k by ``position * inv_freq``, paired as ``"half"``
(GPT-NeoX, Llama ``rotate_half``: ``i`` with ``i + rotary_dim / 2``) or ``"interleaved"``
(GPT-J, RoFormer: ``2i`` with ``2i + 1``);
[`convert_rotary_layout`][posenc.core.convert_rotary_layout] converts weights. The
[`RopeScaling`][posenc.core.RopeScaling] formulas follow Hugging Face's ``modeling_rope_utils``
(static NTK: bloc97's ``base * factor ** (dim / (dim - 2))``), computed in float64; every
``factor`` >= 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from ._checks import (
    check_base,
    check_bool,
    check_choice,
    check_even,
    check_float,
    check_position_shape,
    check_positions,
    check_positive_int,
)
from .encoding import LAYOUTS, Float64Buffers, angles

__all__ = ["RopeScaling", "LinearScaling", "NTKScaling", "DynamicNTKScaling", "YarnScaling",
           "Llama3Scaling", "LongRopeScaling", "ProportionalScaling", "rope_inv_freq", "Rotation",
           "rotation_from_angles", "apply_rotation", "RotaryEncoding", "rotary_layout_permutation",
           "convert_rotary_layout"]


def rope_inv_freq(rotary_dim: int, base: float | Tensor) -> Tensor:
    """``(rotary_dim // 2,)`` float64 inverse frequencies ``base ** (-2i / rotary_dim)``;
    ``base`` is a number > 1 or a 0-d tensor (dynamic NTK, traceable)."""
    check_even(rotary_dim, "rotary_dim")
    base = base.to(torch.float64) if isinstance(base, Tensor) else check_base(base)
    # On the base's device: a CPU arange copied to a GPU every forward would wait for the GPU.
    device = base.device if isinstance(base, Tensor) else None
    exponent = torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim
    return 1.0 / base**exponent


def _check_factor(factor: float) -> float:
    return check_float(factor, "factor", ge=1)


def _ntk_exponent(rotary_dim: int) -> float:
    """bloc97's ``d / (d - 2)``; ``d = 2`` (frequency ``base ** 0`` for any base) is refused."""
    check_even(rotary_dim, "rotary_dim")
    if rotary_dim < 4:
        raise ValueError("rotary_dim must be >= 4 for NTK scaling (with one rotary pair the "
                         f"frequency is base ** 0 = 1 for every base), got {rotary_dim}")
    return rotary_dim / (rotary_dim - 2)


@dataclass(frozen=True)
class RopeScaling:
    """No rescaling, and the base of every scaling (``RotaryEncoding(scaling=...)``).

    A scaling of one's own is a frozen dataclass deriving from it that overrides
    [`inv_freq`][posenc.core.RopeScaling.inv_freq] (frequencies fixed at construction) or sets
    ``dynamic = True`` and overrides [`dynamic_inv_freq`][posenc.core.RopeScaling.dynamic_inv_freq]
    (frequencies of each forward's length), and
    [`attention_scaling`][posenc.core.RopeScaling.attention_scaling] when cos and sin are to be
    scaled.
    """

    dynamic = False

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        """``(rotary_dim // 2,)`` float64 rescaled inverse frequencies."""
        return rope_inv_freq(rotary_dim, base)

    def dynamic_inv_freq(self, rotary_dim: int, base: float, seq_len: Tensor) -> Tensor:
        """Inverse frequencies for a sequence of ``seq_len`` tokens (0-d tensor)."""
        return self.inv_freq(rotary_dim, base).to(seq_len.device)

    @property
    def attention_scaling(self) -> float:
        """Factor applied to cos and sin (so q.k is scaled by its square)."""
        return 1.0


@dataclass(frozen=True)
class _Factor(RopeScaling):
    """A scaling by a context-extension ``factor`` >= 1."""

    factor: float

    def __post_init__(self) -> None:
        _check_factor(self.factor)


@dataclass(frozen=True)
class _FactorOfContext(_Factor):
    """A scaling by ``factor`` of a model trained on ``original_max_positions`` tokens."""

    original_max_positions: int

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive_int(self.original_max_positions, "original_max_positions")


@dataclass(frozen=True)
class LinearScaling(_Factor):
    """Position interpolation (Chen et al. 2023): every frequency divided by ``factor``."""

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        return rope_inv_freq(rotary_dim, base) / self.factor


@dataclass(frozen=True)
class NTKScaling(_Factor):
    """Static NTK-aware scaling: ``base * factor ** (d / (d - 2))``."""

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        return rope_inv_freq(rotary_dim, base * self.factor ** _ntk_exponent(rotary_dim))


@dataclass(frozen=True)
class DynamicNTKScaling(_FactorOfContext):
    """Dynamic NTK scaling: for ``L = max(seq_len, original_max_positions)`` the base is
    ``base * (factor * L / original - (factor - 1)) ** (d / (d - 2))`` (the current positions
    only; transformers caches the largest length seen)."""

    dynamic = True

    def dynamic_inv_freq(self, rotary_dim: int, base: float, seq_len: Tensor) -> Tensor:
        exponent = _ntk_exponent(rotary_dim)
        length = seq_len.to(torch.float64).clamp_min(self.original_max_positions)
        ratio = self.factor * length / self.original_max_positions - (self.factor - 1)
        return rope_inv_freq(rotary_dim, base * ratio ** exponent)

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        """Frequencies at the original context length (unscaled)."""
        _ntk_exponent(rotary_dim)  # refuse rotary_dim=2 when the encoding is built
        return rope_inv_freq(rotary_dim, base)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class YarnScaling(_FactorOfContext):
    """YaRN (Peng et al. 2023): frequencies turning fewer than ``beta_slow`` times over the
    original context are divided by ``factor``, those over ``beta_fast`` kept, a linear ramp
    between (ends floored/ceiled unless ``truncate=False``, as gpt-oss). ``attention_scaling``
    is ``attention_factor``, else the DeepSeek ratio when ``mscale`` and ``mscale_all_dim`` are
    both given (one alone is ignored, as in Hugging Face), else ``0.1 ln(factor) + 1``.
    """

    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    attention_factor: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bool(self.truncate, "truncate")
        check_float(self.beta_fast, "beta_fast", gt=0)
        check_float(self.beta_slow, "beta_slow", gt=0)
        if not self.beta_fast > self.beta_slow:
            raise ValueError(f"beta_fast and beta_slow must satisfy beta_fast > beta_slow > 0, "
                             f"got beta_fast={self.beta_fast!r}, beta_slow={self.beta_slow!r}")
        for name in ("attention_factor", "mscale", "mscale_all_dim"):
            if getattr(self, name) is not None:
                check_float(getattr(self, name), name, gt=0)

    @property
    def attention_scaling(self) -> float:
        if self.attention_factor is not None:
            return float(self.attention_factor)
        if self.mscale is not None and self.mscale_all_dim is not None:
            return _yarn_mscale(self.factor, self.mscale) / _yarn_mscale(
                self.factor, self.mscale_all_dim)
        return _yarn_mscale(self.factor)

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        def correction_dim(num_rotations: float) -> float:
            turns = self.original_max_positions / (num_rotations * 2 * math.pi)
            return rotary_dim * math.log(turns) / (2 * math.log(base))

        low, high = correction_dim(self.beta_fast), correction_dim(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, rotary_dim - 1)
        if low == high:
            high += 0.001  # the ramp would divide by zero
        pairs = torch.arange(rotary_dim // 2, dtype=torch.float64)
        ramp = ((pairs - low) / (high - low)).clamp(0, 1)
        extrapolation = rope_inv_freq(rotary_dim, base)
        return extrapolation / self.factor * ramp + extrapolation * (1 - ramp)


@dataclass(frozen=True)
class Llama3Scaling(_FactorOfContext):
    """Llama 3.1 scaling: wavelengths above ``original_max_positions / low_freq_factor``
    divided by ``factor``, those below ``original / high_freq_factor`` kept, a linear blend
    in ``original / wavelength`` between."""

    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_float(self.low_freq_factor, "low_freq_factor", gt=0)
        check_float(self.high_freq_factor, "high_freq_factor", gt=0)
        if not self.high_freq_factor > self.low_freq_factor:
            raise ValueError("high_freq_factor and low_freq_factor must satisfy high > low > 0, "
                             f"got high_freq_factor={self.high_freq_factor!r}, "
                             f"low_freq_factor={self.low_freq_factor!r}")

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        inv_freq = rope_inv_freq(rotary_dim, base)
        wavelen = 2 * math.pi / inv_freq
        original = self.original_max_positions
        smooth = (original / wavelen - self.low_freq_factor) / (
            self.high_freq_factor - self.low_freq_factor)
        blended = (1 - smooth) * inv_freq / self.factor + smooth * inv_freq
        scaled = torch.where(wavelen > original / self.low_freq_factor, inv_freq / self.factor,
                             inv_freq)
        medium = (wavelen >= original / self.high_freq_factor) & (
            wavelen <= original / self.low_freq_factor)
        return torch.where(medium, blended, scaled)


def _check_factor_list(value: object, name: str) -> tuple[float, ...]:
    """A sequence or 1-D tensor/array of finite numbers > 0 as a (hashable) tuple."""
    if hasattr(value, "ndim") and hasattr(value, "tolist"):  # torch / numpy arrays
        if value.ndim != 1:
            raise ValueError(f"{name} must be 1-D (one factor per rotary pair), got shape "
                             f"{tuple(value.shape)}")
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a sequence of numbers (one factor per rotary pair), "
                        f"got {type(value).__name__} ({value!r})")
    if not value:
        raise ValueError(f"{name} must hold one factor per rotary pair, got an empty sequence")
    return tuple(check_float(v, f"{name}[{i}]", gt=0) for i, v in enumerate(value))


@dataclass(frozen=True)
class LongRopeScaling(RopeScaling):
    """LongRoPE (Ding et al. 2024; Hugging Face ``"longrope"``): pair ``i`` turns at
    ``base ** (-2i / rotary_dim) / f_i``, ``f = short_factor`` while ``max(positions) + 1 <=
    original_max_positions``, else ``long_factor`` (for the whole batch, as Hugging Face).

    cos and sin are scaled by ``attention_factor``, by default
    ``sqrt(1 + ln(factor) / ln(original_max_positions))`` of ``factor`` or of
    ``max_positions / original_max_positions`` (give one, both only when they agree).
    """

    short_factor: tuple[float, ...]
    long_factor: tuple[float, ...]
    original_max_positions: int
    factor: float | None = None
    max_positions: int | None = None
    attention_factor: float | None = None
    dynamic = True

    def __post_init__(self) -> None:
        for name in ("short_factor", "long_factor"):
            object.__setattr__(self, name, _check_factor_list(getattr(self, name), name))
        if len(self.short_factor) != len(self.long_factor):
            raise ValueError(
                f"short_factor and long_factor must have the same length (one factor per "
                f"rotary pair), got {len(self.short_factor)} and {len(self.long_factor)}")
        original = check_positive_int(self.original_max_positions, "original_max_positions")
        if self.factor is not None:
            _check_factor(self.factor)
        if self.max_positions is not None:
            check_positive_int(self.max_positions, "max_positions")
            if self.max_positions < original:
                raise ValueError(f"max_positions must be >= original_max_positions={original} "
                                 f"(it extends the context), got {self.max_positions}")
            if self.factor is not None and not math.isclose(
                    self.factor, self.max_positions / original, rel_tol=1e-12):
                raise ValueError(
                    f"factor={self.factor!r} disagrees with max_positions / "
                    f"original_max_positions = {self.max_positions} / {original}: give one")
        if self.attention_factor is not None:
            check_float(self.attention_factor, "attention_factor", gt=0)
        elif self.factor is None and self.max_positions is None:
            raise ValueError("LongRopeScaling needs factor or max_positions (for the default "
                             "attention factor), or attention_factor itself")
        elif self._context_ratio() > 1 and original < 2:
            raise ValueError("original_max_positions must be >= 2 for the default attention "
                             "factor (it divides by ln(original_max_positions)), got 1")

    def _context_ratio(self) -> float:
        if self.factor is not None:
            return float(self.factor)
        return self.max_positions / self.original_max_positions

    @property
    def attention_scaling(self) -> float:
        if self.attention_factor is not None:
            return float(self.attention_factor)
        ratio = self._context_ratio()
        if ratio <= 1:
            return 1.0
        return math.sqrt(1 + math.log(ratio) / math.log(self.original_max_positions))

    def _scaled(self, factors: tuple[float, ...], rotary_dim: int, base: float) -> Tensor:
        check_even(rotary_dim, "rotary_dim")
        if len(factors) != rotary_dim // 2:
            raise ValueError(f"short_factor and long_factor must have rotary_dim // 2 = "
                             f"{rotary_dim // 2} values (one per rotary pair), got {len(factors)}: "
                             f"the factors were made for rotary_dim={2 * len(factors)}")
        return rope_inv_freq(rotary_dim, base) / torch.tensor(factors, dtype=torch.float64)

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        """``(rotary_dim // 2,)`` float64 frequencies of the short factors."""
        return self._scaled(self.short_factor, rotary_dim, base)

    def long_inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        """``(rotary_dim // 2,)`` float64 frequencies of the long factors."""
        return self._scaled(self.long_factor, rotary_dim, base)

    def select_inv_freq(self, seq_len: Tensor, short: Tensor, long: Tensor) -> Tensor:
        """``long`` if the 0-d ``seq_len > original_max_positions`` else ``short`` (traced,
        no host synchronisation)."""
        return torch.where(seq_len > self.original_max_positions, long, short)

    def dynamic_inv_freq(self, rotary_dim: int, base: float, seq_len: Tensor) -> Tensor:
        short = self.inv_freq(rotary_dim, base).to(seq_len.device)
        long = self.long_inv_freq(rotary_dim, base).to(seq_len.device)
        return self.select_inv_freq(seq_len, short, long)


@dataclass(frozen=True)
class ProportionalScaling(RopeScaling):
    """Hugging Face's ``"proportional"`` RoPE (Gemma 4): the first
    ``int(partial_rotary_factor * rotary_dim // 2)`` pairs turn at their full-rotation
    frequencies ``base ** (-2i / rotary_dim) / factor``, the others get frequency 0 (the
    spectrum is cut, not squeezed as by ``RotaryEncoding(rotary_dim=...)``).
    """

    partial_rotary_factor: float
    factor: float = 1.0

    def __post_init__(self) -> None:
        fraction = check_float(self.partial_rotary_factor, "partial_rotary_factor", ge=0)
        if fraction > 1:
            raise ValueError("partial_rotary_factor must be a finite number >= 0 and <= 1 (the "
                             "fraction of the pairs that turn), got "
                             f"{self.partial_rotary_factor!r}")
        _check_factor(self.factor)

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        inv_freq = rope_inv_freq(rotary_dim, base)
        turning = int(self.partial_rotary_factor * rotary_dim // 2)
        inv_freq[turning:] = 0.0
        return inv_freq / self.factor


class Rotation(NamedTuple):
    """Per-token rotation, what a rotary encoding's ``rotation(positions)`` gives and
    [`apply_rotation`][posenc.core.apply_rotation] applies: float32 ``cos`` and ``sin`` of shape
    ``(B or 1, H or 1, N, rotary_dim // 2)`` (the encoding's attention scaling included) and the
    channel pairing ``layout``, ``"half"`` or ``"interleaved"``."""

    cos: Tensor
    sin: Tensor
    layout: str

    @property
    def extent(self) -> torch.Size:
        """``(B or 1, H or 1, N)``: the samples, heads and tokens it turns."""
        return self.cos.shape[:-1]


def rotation_from_angles(theta: Tensor, layout: str, scale: float | Tensor = 1.0) -> Rotation:
    """Build a [`Rotation`][posenc.core.Rotation] from angles ``(N, R/2)``, ``(B, N, R/2)`` or ``(B
    or 1, H or 1, N, R/2)``; ``scale`` (a number or a tensor of the angles' shape) multiplies cos
    and sin."""
    cos, sin = theta.cos(), theta.sin()
    if isinstance(scale, Tensor) or scale != 1.0:
        cos, sin = cos * scale, sin * scale
    lead = {2: (None, None), 3: (slice(None), None)}.get(theta.ndim, ())  # to 4-D
    return Rotation(cos[lead].float(), sin[lead].float(), layout)


def check_rotation_device(cos: Tensor, x: Tensor) -> None:
    """Raise unless a rotation's ``cos`` is on the device of the queries or keys ``x``."""
    if cos.device != x.device:
        raise ValueError(f"the rotation is on {cos.device} but x is on {x.device}: make the "
                         "positions on the device of the queries and keys")


def apply_rotation(x: Tensor, rotation: Rotation) -> Tensor:
    """Rotate the leading ``rotary_dim`` channels of ``(B, H, N, head_dim)`` queries or keys
    ``x`` (in at least float32; returned in ``x``'s dtype); the rest pass through.

    ``rotation`` is a [`Rotation`][posenc.core.Rotation], or an object that applies itself through
    ``apply(x)`` (e.g. [`posenc.spatial.liere.BlockRotation`][posenc.spatial.liere.BlockRotation]).
    """
    if not isinstance(rotation, Rotation) and callable(getattr(rotation, "apply", None)):
        return rotation.apply(x)
    cos, sin, layout = rotation
    half = cos.shape[-1]
    rot = 2 * half
    if x.ndim != 4 or rot > x.shape[-1] or cos.ndim != 4 or cos.shape[-2] != x.shape[-2] or any(
            r not in (1, n) for r, n in zip(cos.shape[:2], x.shape[:2], strict=True)):
        raise ValueError(f"a rotation of shape {tuple(cos.shape)} (B or 1, H or 1, N, "
                         f"rotary_dim/2) does not fit x of shape {tuple(x.shape)} (B, H, N, "
                         f"head_dim >= rotary_dim)")
    check_rotation_device(cos, x)
    work = torch.promote_types(x.dtype, torch.float32)
    if layout == "interleaved":
        # A complex multiply reads and writes x once.
        pairs = torch.view_as_complex(x[..., :rot].to(work).unflatten(-1, (half, 2)))
        turn = torch.complex(cos.to(work), sin.to(work))
        if rot < x.shape[-1] and not torch.compiler.is_compiling() and not (
                torch.is_grad_enabled()
                and (x.requires_grad or cos.requires_grad or sin.requires_grad)):
            # Partial rotary written in place (a cat is one more pass over x); out= has no
            # autograd, and Dynamo breaks the graph on a strided out=.
            out = torch.empty(x.shape, dtype=work, device=x.device)
            torch.mul(pairs, turn,
                      out=torch.view_as_complex(out[..., :rot].unflatten(-1, (half, 2))))
            out[..., rot:] = x[..., rot:]
            return out.to(x.dtype)
        out = torch.view_as_real(pairs * turn).flatten(-2)
        if rot < x.shape[-1]:
            out = torch.cat((out, x[..., rot:].to(work)), dim=-1)
        return out.to(x.dtype)
    # "half": x * [cos, cos, 1...], then two fused multiply-adds on the halves (no cat).
    scale = torch.cat((cos, cos, cos.new_ones(cos.shape[:-1] + (x.shape[-1] - rot,))), dim=-1)
    out = x * scale.to(work)
    out[..., :half].addcmul_(x[..., half:rot], sin, value=-1)
    out[..., half:rot].addcmul_(x[..., :half], sin)
    return out.to(x.dtype)


def check_rotary_dim(head_dim: int, rotary_dim: int | None) -> int:
    """``rotary_dim`` (even, <= ``head_dim``), or ``head_dim`` when None."""
    rotary_dim = head_dim if rotary_dim is None else check_even(rotary_dim, "rotary_dim")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be <= head_dim={head_dim}, got {rotary_dim}")
    return rotary_dim


class RotaryEncoding(Float64Buffers):
    """Rotary position embedding for q and k ``(B, H, N, head_dim)`` from ``(N,)`` or ``(B, N)``
    int or float positions (float64 positions keep float64 angles).

    Args:
        head_dim: channels per head.
        base: wavelength base (``rope_theta``).
        rotary_dim: channels that rotate (even, <= head_dim; default ``head_dim``); the rest
            pass through (partial rotary, as in GPT-NeoX/Phi).
        layout: ``"half"`` or ``"interleaved"`` channel pairing.
        scaling: a context-extension method ([`RopeScaling`][posenc.core.RopeScaling]), or None.
    """

    kind = "rotary"

    def __init__(self, head_dim: int, base: float = 10000.0, rotary_dim: int | None = None,
                 layout: str = "half", scaling: RopeScaling | None = None) -> None:
        super().__init__()
        self.head_dim = check_even(head_dim, "head_dim")
        self.rotary_dim = check_rotary_dim(head_dim, rotary_dim)
        self.base = check_base(base)
        if scaling is not None and not isinstance(scaling, RopeScaling):
            raise TypeError(f"scaling must be a RopeScaling (e.g. YarnScaling) or None, got "
                            f"{type(scaling).__name__}")
        self.layout = check_choice(layout, "layout", LAYOUTS)
        self.scaling = scaling or RopeScaling()
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        buffers = {"inv_freq64": self.scaling.inv_freq(self.rotary_dim, self.base)}
        if isinstance(self.scaling, LongRopeScaling):
            buffers["long_inv_freq64"] = self.scaling.long_inv_freq(self.rotary_dim, self.base)
        return buffers

    @property
    def inv_freq(self) -> Tensor:
        """``(rotary_dim // 2,)`` float32 effective inverse frequencies (at the original
        length for dynamic scaling)."""
        return self.inv_freq64.float()

    @property
    def attention_scaling(self) -> float:
        """Factor folded into cos and sin (1.0 unless the scaling method defines one)."""
        return self.scaling.attention_scaling

    def rotation(self, positions: Tensor) -> Rotation:
        """``(N,)`` or ``(B, N)`` positions (finite) -> [`Rotation`][posenc.core.Rotation]."""
        positions = check_positions(positions)
        inv_freq = self.inv_freq64
        if self.scaling.dynamic and positions.numel():
            seq_len = positions.detach().max() + 1
            if isinstance(self.scaling, LongRopeScaling):
                inv_freq = self.scaling.select_inv_freq(seq_len, inv_freq, self.long_inv_freq64)
            else:
                inv_freq = self.scaling.dynamic_inv_freq(self.rotary_dim, self.base, seq_len)
        return rotation_from_angles(angles(positions, inv_freq), self.layout,
                                    self.attention_scaling)

    def rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate ``x`` of shape ``(B, H, N, head_dim)`` by ``positions`` ``(N,)``/``(B, N)``."""
        shape = check_position_shape(positions).shape  # rotation() reads the values
        if x.ndim != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(f"x must have shape (B, H, N, head_dim={self.head_dim}), got "
                             f"{tuple(x.shape)}")
        if shape[-1] != x.shape[-2] or (len(shape) == 2 and shape[0] not in (1, x.shape[0])):
            raise ValueError(f"positions of shape {tuple(shape)} do not match x of "
                             f"shape {tuple(x.shape)}: expected (N,) or (B, N) with "
                             f"N={x.shape[-2]}, B={x.shape[0]}")
        return apply_rotation(x, self.rotation(positions))

    forward = rotate

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base}, "
                f"layout={self.layout!r}, scaling={self.scaling}")


def rotary_layout_permutation(head_dim: int, rotary_dim: int | None = None, src: str = "half",
                              dst: str = "interleaved") -> Tensor:
    """Channel index ``perm`` with ``x_dst = x_src[..., perm]`` for one head (pass-through
    channels keep their place)."""
    check_even(head_dim, "head_dim")
    rotary_dim = check_rotary_dim(head_dim, rotary_dim)
    check_choice(src, "src", LAYOUTS)
    check_choice(dst, "dst", LAYOUTS)
    half = rotary_dim // 2
    interleaved_from_half = torch.stack(
        (torch.arange(half), torch.arange(half) + half), dim=-1).flatten()
    perm = torch.arange(head_dim)
    if src == "half" and dst == "interleaved":
        perm[:rotary_dim] = interleaved_from_half
    elif src == "interleaved" and dst == "half":
        perm[:rotary_dim] = torch.argsort(interleaved_from_half)
    return perm


def convert_rotary_layout(weight: Tensor, num_heads: int, src: str, dst: str,
                          rotary_dim: int | None = None) -> Tensor:
    """Permute the output channels of a q or k projection's ``(num_heads * head_dim,
    in_features)`` weight or ``(num_heads * head_dim,)`` bias from layout ``src`` to ``dst``
    (``rotary_dim`` rotating channels per head, default all)."""
    check_positive_int(num_heads, "num_heads")
    if weight.ndim not in (1, 2):
        raise ValueError(f"weight must be a (num_heads * head_dim, in_features) weight or a "
                         f"(num_heads * head_dim,) bias, got shape {tuple(weight.shape)}")
    if weight.shape[0] % num_heads:
        raise ValueError(f"weight.shape[0]={weight.shape[0]} is not divisible by "
                         f"num_heads={num_heads}")
    head_dim = weight.shape[0] // num_heads
    perm = rotary_layout_permutation(head_dim, rotary_dim, src, dst).to(weight.device)
    per_head = weight.reshape(num_heads, head_dim, *weight.shape[1:])
    return per_head.index_select(1, perm).reshape(weight.shape)  # 10x faster than [:, perm] on CPU
