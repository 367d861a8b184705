"""posenc.core: 1D position encodings over scalar coordinates, and the attention module.

Three kinds, by where an encoding enters a transformer:

- additive (``positions -> (..., dim)``): :class:`SinusoidalEncoding`, :class:`LearnedEncoding`
- rotary (``rotation(positions)`` applied to q and k): :class:`RotaryEncoding`
- bias (``(q_positions, k_positions) -> (B, H, Nq, Nk)``): :class:`ALiBi`,
  :class:`T5RelativeBias`, :class:`ClippedRelativeBias`

and :class:`NoPE` (or ``None``) as the baseline. :class:`MultiheadAttention` takes any rotary
and any bias encoding.
"""

from .alibi import ALiBi, alibi_slopes
from .angles import angles, wide_dtype
from .attention import KVCache, MultiheadAttention
from .buffers import Float64Buffers
from .encoding import KINDS, PositionEncoding, encoding_kind, no_weight_decay_names
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
    check_t5_buckets,
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
    NTKScaling,
    RopeScaling,
    YarnScaling,
    rope_inv_freq,
)
from .sinusoidal import SinusoidalEncoding, sinusoidal_encoding, sinusoidal_inv_freq
from .validation import (
    check_base,
    check_bool,
    check_choice,
    check_even,
    check_finite,
    check_float,
    check_int,
    check_positions,
    check_positive_float,
    check_positive_int,
    widen_positions,
)

__all__ = [
    "ALiBi",
    "KINDS",
    "ClippedRelativeBias",
    "DynamicNTKScaling",
    "Float64Buffers",
    "InputEmbedding",
    "KVCache",
    "LearnedEncoding",
    "LinearScaling",
    "Llama3Scaling",
    "MultiheadAttention",
    "NTKScaling",
    "NoPE",
    "PositionEncoding",
    "RopeScaling",
    "RotaryEncoding",
    "Rotation",
    "SinusoidalEncoding",
    "T5RelativeBias",
    "YarnScaling",
    "alibi_slopes",
    "angles",
    "apply_rotation",
    "check_base",
    "check_bool",
    "check_choice",
    "check_even",
    "check_finite",
    "check_float",
    "check_int",
    "check_positions",
    "check_positive_float",
    "check_positive_int",
    "check_t5_buckets",
    "convert_rotary_layout",
    "encoding_kind",
    "incremental_positions",
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
    "wide_dtype",
    "widen_positions",
]
