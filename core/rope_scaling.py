"""Context extension for RoPE: frequency rescaling methods.

Each method maps the base inverse frequencies of a rotary encoding to new ones (and, for
YaRN and LongRoPE, an attention scaling). The formulas follow Hugging Face transformers'
``modeling_rope_utils`` (``linear``, ``dynamic``, ``yarn``, ``llama3``, ``longrope``,
``proportional``); the static NTK-aware rule is bloc97's ``base * factor ** (dim / (dim - 2))``.
Everything is computed in float64.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from .validation import check_base, check_bool, check_even, check_float, check_positive_int

__all__ = [
    "RopeScaling",
    "LinearScaling",
    "NTKScaling",
    "DynamicNTKScaling",
    "YarnScaling",
    "Llama3Scaling",
    "LongRopeScaling",
    "ProportionalScaling",
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
    # Made on the base's device: a CPU arange copied to a GPU in every forward (dynamic NTK)
    # would wait for the GPU each time.
    device = base.device if isinstance(base, Tensor) else None
    exponent = torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim
    if isinstance(base, Tensor):
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

    ``truncate=False`` (gpt-oss) keeps the ramp's ends where the rotation counts put them
    instead of flooring/ceiling them to whole pairs. ``attention_factor`` (finite, > 0), when
    given, is the attention scaling as is, whatever ``mscale``/``mscale_all_dim`` say (as in
    Hugging Face).
    """

    factor: float
    original_max_positions: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    attention_factor: float | None = None

    def __post_init__(self) -> None:
        _check_factor(self.factor)
        _check_original(self.original_max_positions)
        check_bool(self.truncate, "truncate")
        if self.attention_factor is not None:
            check_float(self.attention_factor, "attention_factor", gt=0)
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


def _check_factor_list(value: object, name: str) -> tuple[float, ...]:
    """``value`` (a list/tuple of numbers, or a 1-D tensor/array) as a tuple of finite floats
    > 0; a frozen dataclass keeps a tuple (hashable, and a caller's list cannot change it)."""
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
    """LongRoPE (Ding et al. 2024; Phi-3 "su", Hugging Face ``"longrope"``): a searched
    rescale factor per rotary pair, one set for short and one for long sequences.

    Pair ``i`` turns at ``base ** (-2i / rotary_dim) / f_i`` with ``f = short_factor`` while
    the sequence fits the original context, ``f = long_factor`` once it is longer: a sequence
    of ``seq_len = max(positions) + 1`` tokens uses the long set when ``seq_len >
    original_max_positions``, for every token and every row of the batch (Hugging Face's
    Phi-3 switch). ``inv_freq`` are the short ones.

    Both sets scale cos and sin by ``attention_factor``; when not given it is Hugging Face's
    default ``sqrt(1 + ln(factor) / ln(original_max_positions))`` (1 for ``factor == 1``),
    with ``factor`` the context ratio: given as is, or as ``max_positions /
    original_max_positions`` (Phi-3 configs give ``max_position_embeddings`` instead of a
    factor). Give one of the two (both only when they agree), or ``attention_factor``.

    Args:
        short_factor: ``rotary_dim // 2`` finite factors > 0 (a list, tuple or 1-D tensor;
            stored as a tuple).
        long_factor: the same, for sequences beyond ``original_max_positions``.
        original_max_positions: the pre-training context (Phi-3's
            ``original_max_position_embeddings``).
        factor: context extension ratio (>= 1), for the default attention factor.
        max_positions: the extended context (``max_position_embeddings``), >= the original.
        attention_factor: the cos/sin scaling as is (finite, > 0).
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
        original = _check_original(self.original_max_positions)
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
            raise ValueError(
                f"short_factor and long_factor must have rotary_dim // 2 = {rotary_dim // 2} "
                f"values (one per rotary pair), got {len(factors)}: the factors were made "
                f"for rotary_dim={2 * len(factors)}")
        return rope_inv_freq(rotary_dim, base) / torch.tensor(factors, dtype=torch.float64)

    def inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        """``(rotary_dim // 2,)`` float64 frequencies of the short factors."""
        return self._scaled(self.short_factor, rotary_dim, base)

    def long_inv_freq(self, rotary_dim: int, base: float) -> Tensor:
        """``(rotary_dim // 2,)`` float64 frequencies of the long factors."""
        return self._scaled(self.long_factor, rotary_dim, base)

    def select_inv_freq(self, seq_len: Tensor, short: Tensor, long: Tensor) -> Tensor:
        """``long`` if ``seq_len > original_max_positions`` else ``short``; ``seq_len`` is a
        0-d tensor, so this is traceable and needs no host synchronisation."""
        return torch.where(seq_len > self.original_max_positions, long, short)

    def dynamic_inv_freq(self, rotary_dim: int, base: float, seq_len: Tensor) -> Tensor:
        # RotaryEncoding keeps both sets as buffers (no copy per forward); this builds them.
        short = self.inv_freq(rotary_dim, base).to(seq_len.device)
        long = self.long_inv_freq(rotary_dim, base).to(seq_len.device)
        return self.select_inv_freq(seq_len, short, long)


@dataclass(frozen=True)
class ProportionalScaling(RopeScaling):
    """Hugging Face's ``"proportional"`` RoPE (Gemma 4's global layers): only the first
    ``int(partial_rotary_factor * rotary_dim // 2)`` pairs turn, at the frequencies they have
    in a full ``rotary_dim`` rotation, ``base ** (-2i / rotary_dim) / factor``; the other
    pairs get frequency 0 (they pass through).

    Unlike ``RotaryEncoding(rotary_dim=...)`` (partial rotary: the rotating pairs spread over
    ``base ** (-2i / rotary_dim)`` up to ``1 / base``, channels past ``rotary_dim`` pass
    through), the spectrum is cut, not squeezed, and in the ``"half"`` layout the pairs are
    channels ``(i, i + rotary_dim / 2)`` of the whole rotation. Use it with ``rotary_dim``
    left to ``head_dim``. ``partial_rotary_factor`` is in ``[0, 1]``; ``factor`` >= 1 divides
    every frequency (linear interpolation; Hugging Face's default 1).
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
        # Hugging Face's own expression, so the count of turning pairs rounds the same way.
        turning = int(self.partial_rotary_factor * rotary_dim // 2)
        inv_freq[turning:] = 0.0
        return inv_freq / self.factor
