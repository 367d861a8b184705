"""Context extension for RoPE: frequency rescaling methods.

Each method maps the base inverse frequencies of a rotary encoding to new ones (and, for
YaRN, an attention scaling). The formulas follow Hugging Face transformers'
``modeling_rope_utils`` (``linear``, ``dynamic``, ``yarn``, ``llama3``); the static NTK-aware
rule is bloc97's ``base * factor ** (dim / (dim - 2))``. Everything is computed in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .validation import check_base, check_even, check_float, check_positive_int

__all__ = [
    "RopeScaling",
    "LinearScaling",
    "NTKScaling",
    "DynamicNTKScaling",
    "YarnScaling",
    "Llama3Scaling",
    "rope_inv_freq",
]


def rope_inv_freq(rotary_dim: int, base: float | Tensor) -> Tensor:
    """``(rotary_dim // 2,)`` float64 inverse frequencies ``base ** (-2i / rotary_dim)``.

    ``base`` may be a 0-d tensor (dynamic NTK), which keeps the computation traceable; a
    number must be finite and > 1.
    """
    check_even(rotary_dim, "rotary_dim")
    if not isinstance(base, Tensor):
        base = check_base(base)
    exponent = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim
    if isinstance(base, Tensor):
        exponent = exponent.to(base.device)
        base = base.to(torch.float64)
    return 1.0 / base**exponent


def _check_factor(factor: float) -> float:
    # Every method extends the context: factor < 1 would shrink it (and makes YaRN's and
    # Llama 3's "interpolated" band extrapolate instead).
    return check_float(factor, "factor", ge=1)


def _check_original(original_max_positions: int) -> int:
    return check_positive_int(original_max_positions, "original_max_positions")


def _ntk_exponent(rotary_dim: int) -> float:
    """bloc97's ``d / (d - 2)``; with one pair (``d = 2``) the only frequency is
    ``base ** 0 = 1`` whatever the base, so NTK scaling cannot act and is refused."""
    check_even(rotary_dim, "rotary_dim")
    if rotary_dim < 4:
        raise ValueError("rotary_dim must be >= 4 for NTK scaling (with one rotary pair the "
                         f"frequency is base ** 0 = 1 for every base), got {rotary_dim}")
    return rotary_dim / (rotary_dim - 2)


@dataclass(frozen=True)
class RopeScaling:
    """No rescaling; base class of the methods below.

    Subclasses override :meth:`inv_freq` (static methods) or set ``dynamic`` and override
    :meth:`dynamic_inv_freq` (methods that depend on the current sequence length).
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
class LinearScaling(RopeScaling):
    """Position interpolation (Chen et al. 2023): every frequency divided by ``factor``."""

    factor: float

    def __post_init__(self) -> None:
        _check_factor(self.factor)

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        return rope_inv_freq(rotary_dim, base) / self.factor


@dataclass(frozen=True)
class NTKScaling(RopeScaling):
    """Static NTK-aware scaling: ``base * factor ** (d / (d - 2))``.

    High frequencies stay almost unchanged, the lowest one is interpolated by ``factor``.
    """

    factor: float

    def __post_init__(self) -> None:
        _check_factor(self.factor)

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        return rope_inv_freq(rotary_dim, base * self.factor ** _ntk_exponent(rotary_dim))


@dataclass(frozen=True)
class DynamicNTKScaling(RopeScaling):
    """Dynamic NTK scaling: the NTK base grows with the current length past the original.

    For ``L = max(seq_len, original_max_positions)`` the base becomes
    ``base * (factor * L / original - (factor - 1)) ** (d / (d - 2))``, so sequences within
    the original context are encoded exactly as without scaling. Unlike transformers' module,
    which caches the largest length seen, this depends only on the current positions.
    """

    factor: float
    original_max_positions: int
    dynamic = True

    def __post_init__(self) -> None:
        _check_factor(self.factor)
        _check_original(self.original_max_positions)

    def dynamic_inv_freq(self, rotary_dim: int, base: float, seq_len: Tensor) -> Tensor:
        exponent = _ntk_exponent(rotary_dim)
        length = seq_len.to(torch.float64).clamp_min(self.original_max_positions)
        ratio = self.factor * length / self.original_max_positions - (self.factor - 1)
        return rope_inv_freq(rotary_dim, base * ratio ** exponent)

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        """Frequencies at the original context length (i.e. unscaled)."""
        _ntk_exponent(rotary_dim)  # refuse rotary_dim=2 when the encoding is built
        return rope_inv_freq(rotary_dim, base)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class YarnScaling(RopeScaling):
    """YaRN (Peng et al. 2023): interpolate low frequencies, keep high ones, ramp between.

    Frequencies that turn fewer than ``beta_slow`` times over the original context are divided
    by ``factor``; those turning more than ``beta_fast`` times are kept; a linear ramp over
    the (floored/ceiled) dimension range blends the two. ``attention_scaling`` is
    ``0.1 ln(factor) + 1``, or the DeepSeek ratio when ``mscale`` and ``mscale_all_dim`` are
    both given (DeepSeek-V2/V3; one given alone is ignored, as in Hugging Face, so ported
    configs encode as they were trained). ``mscale`` and ``mscale_all_dim`` must be finite
    and > 0 (Hugging Face reads 0 as "not given"; posenc asks for None). ``beta_fast`` and
    ``beta_slow`` are rotation counts over the original context (Hugging Face's defaults 32
    and 1), finite with ``beta_fast > beta_slow > 0``.
    """

    factor: float
    original_max_positions: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None

    def __post_init__(self) -> None:
        _check_factor(self.factor)
        _check_original(self.original_max_positions)
        check_float(self.beta_fast, "beta_fast", gt=0)
        check_float(self.beta_slow, "beta_slow", gt=0)
        if not self.beta_fast > self.beta_slow:
            raise ValueError(
                f"beta_fast and beta_slow must satisfy beta_fast > beta_slow > 0, got "
                f"beta_fast={self.beta_fast!r}, beta_slow={self.beta_slow!r}")
        for name in ("mscale", "mscale_all_dim"):
            if getattr(self, name) is not None:
                # 0.1 * mscale * ln(factor) + 1 must stay > 0 (it divides, and scales cos/sin).
                check_float(getattr(self, name), name, gt=0)

    @property
    def attention_scaling(self) -> float:
        if self.mscale is not None and self.mscale_all_dim is not None:
            return _yarn_mscale(self.factor, self.mscale) / _yarn_mscale(
                self.factor, self.mscale_all_dim)
        return _yarn_mscale(self.factor)

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        def correction_dim(num_rotations: float) -> float:
            turns = self.original_max_positions / (num_rotations * 2 * math.pi)
            return rotary_dim * math.log(turns) / (2 * math.log(base))

        low = max(math.floor(correction_dim(self.beta_fast)), 0)
        high = min(math.ceil(correction_dim(self.beta_slow)), rotary_dim - 1)
        if low == high:
            high += 0.001  # the ramp would divide by zero
        ramp = (torch.arange(rotary_dim // 2, dtype=torch.float64) - low) / (high - low)
        ramp = ramp.clamp(0, 1)
        extrapolation = rope_inv_freq(rotary_dim, base)
        return extrapolation / self.factor * ramp + extrapolation * (1 - ramp)


@dataclass(frozen=True)
class Llama3Scaling(RopeScaling):
    """Llama 3.1 scaling: long wavelengths divided by ``factor``, short ones kept, smooth blend.

    Wavelengths above ``original_max_positions / low_freq_factor`` are interpolated, those
    below ``original_max_positions / high_freq_factor`` kept, the band between blended
    linearly in ``original / wavelength``.
    """

    factor: float
    original_max_positions: int
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0

    def __post_init__(self) -> None:
        _check_factor(self.factor)
        _check_original(self.original_max_positions)
        check_float(self.low_freq_factor, "low_freq_factor", gt=0)
        check_float(self.high_freq_factor, "high_freq_factor", gt=0)
        if not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                "high_freq_factor and low_freq_factor must satisfy high > low > 0, got "
                f"high_freq_factor={self.high_freq_factor!r}, "
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
