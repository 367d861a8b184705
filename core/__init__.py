"""posenc.core: 1D position encodings over scalar coordinates, and the attention module.

Three kinds, by where an encoding enters a transformer:

- additive (``positions -> (..., dim)``): :class:`SinusoidalEncoding`, :class:`LearnedEncoding`
- rotary (``rotation(positions)`` applied to q and k): :class:`RotaryEncoding`, :class:`XPos`
- bias (``(q_positions, k_positions) -> (B, H, Nq, Nk)``): :class:`ALiBi`,
  :class:`T5RelativeBias`, :class:`ClippedRelativeBias`, :class:`FIRE`, :class:`Kerple`

and :class:`NoPE` (or ``None``) as the baseline. :class:`MultiheadAttention` takes any rotary
and any bias encoding. Every encoding class (core, spatial, temporal) is a
:class:`PositionEncoding` and declares its ``kind`` (:func:`encoding_kind`).

Output dtype, for every encoding in posenc:

- additive encodings with fixed values (sinusoidal, 2D sin-cos, calendar, Fourier, elapsed
  time, time deltas) return float32 unless their ``forward`` is given ``dtype=``: pass the
  dtype of the tokens the output is added to. Learned additive encodings return their
  parameters' dtype, which follows the model's ``.to(dtype)``. The positions' dtype never
  sets the output's: float64 positions buy precise angles, not a float64 output.
- rotary and bias outputs take the dtype of the tensor they are applied to: a rotation is
  applied to q and k in their dtype (the arithmetic runs in at least float32), a bias is
  cast to the attention logits' dtype.
- frequencies and angles are float64 (float32 on MPS) whatever the module's dtype
  (:class:`~posenc.core.buffers.Float64Buffers`).

Channel layouts are named by one vocabulary, ``"half"`` and ``"interleaved"``
(:data:`posenc.core.angles.LAYOUTS`; see :mod:`posenc.core.angles`).

``__all__`` is the public API. The argument checks (``check_*``, ``widen_positions``,
:mod:`posenc.core.validation`) and the helpers for writing encodings
(:class:`~posenc.core.buffers.Float64Buffers`, ``wide_dtype``, ``check_t5_buckets``) stay
importable from ``posenc.core`` and from their modules, but are not part of it.
"""

from .alibi import ALiBi, alibi_slopes
from .angles import angles
from .attention import KVCache, MultiheadAttention
from .encoding import KINDS, PositionEncoding, encoding_kind, no_weight_decay_names
from .fire import FIRE
from .kerple import KERPLE_KERNELS, Kerple, kerple_bias
from .learned import InputEmbedding, LearnedEncoding
from .nope import NoPE
from .positions import (
    incremental_positions,
    packed_attention_mask,
    packed_positions,
    positions_from_padding_mask,
    relative_positions,
)
from .relative_bias import (
    ClippedRelativeBias,
    T5RelativeBias,
    t5_relative_bucket,
)
from .rope import (
    RotaryEncoding,
    Rotation,
    apply_rotation,
    convert_rotary_layout,
    rotary_layout_permutation,
    rotation_from_angles,
)
from .rope_scaling import (
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    NTKScaling,
    ProportionalScaling,
    RopeScaling,
    YarnScaling,
    rope_inv_freq,
)
from .sinusoidal import SinusoidalEncoding, sinusoidal_encoding, sinusoidal_inv_freq
from .xpos import XPos, xpos_zeta

__all__ = [
    "ALiBi",
    "KINDS",
    "ClippedRelativeBias",
    "DynamicNTKScaling",
    "FIRE",
    "InputEmbedding",
    "KERPLE_KERNELS",
    "KVCache",
    "Kerple",
    "LearnedEncoding",
    "LinearScaling",
    "Llama3Scaling",
    "LongRopeScaling",
    "MultiheadAttention",
    "NTKScaling",
    "NoPE",
    "PositionEncoding",
    "ProportionalScaling",
    "RopeScaling",
    "RotaryEncoding",
    "Rotation",
    "SinusoidalEncoding",
    "T5RelativeBias",
    "XPos",
    "YarnScaling",
    "alibi_slopes",
    "angles",
    "apply_rotation",
    "convert_rotary_layout",
    "encoding_kind",
    "incremental_positions",
    "kerple_bias",
    "no_weight_decay_names",
    "packed_attention_mask",
    "packed_positions",
    "positions_from_padding_mask",
    "relative_positions",
    "rope_inv_freq",
    "rotary_layout_permutation",
    "rotation_from_angles",
    "sinusoidal_encoding",
    "sinusoidal_inv_freq",
    "t5_relative_bucket",
    "xpos_zeta",
]

# Importable from posenc.core (and their modules) for writing encodings, but not the API.
from .angles import wide_dtype  # noqa: F401, E402
from .buffers import Float64Buffers  # noqa: F401, E402
from .relative_bias import check_t5_buckets  # noqa: F401, E402
from .validation import (  # noqa: F401, E402
    check_base,
    check_bool,
    check_choice,
    check_even,
    check_finite,
    check_float,
    check_int,
    check_output_dtype,
    check_positions,
    check_positive_float,
    check_positive_int,
    widen_positions,
)
