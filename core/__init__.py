"""posenc.core: 1D position encodings over scalar coordinates, and the attention module.

Every encoding is a :class:`PositionEncoding` declaring its ``kind`` (:func:`encoding_kind`):
additive (:class:`SinusoidalEncoding`, :class:`LearnedEncoding`), rotary
(:class:`RotaryEncoding`, :class:`XPos`), bias (:class:`ALiBi`, :class:`T5RelativeBias`,
:class:`ClippedRelativeBias`, :class:`FIRE`, :class:`Kerple`), or :class:`NoPE` (or ``None``).
:class:`MultiheadAttention` takes any rotary and any bias encoding. A rotary encoding's
``rotation(positions)`` is a :class:`Rotation`, which :func:`apply_rotation` applies; RoPE's
context extensions derive from :class:`RopeScaling` (as a scaling of one's own can). Fixed
additive encodings return float32 unless ``forward`` is given ``dtype=``; frequencies and
angles are float64.
"""

from .additive import InputEmbedding, LearnedEncoding, NoPE, SinusoidalEncoding
from .attention import KVCache, MultiheadAttention
from .bias import FIRE, ALiBi, ClippedRelativeBias, Kerple, T5RelativeBias
from .encoding import PositionEncoding, encoding_kind
from .positions import (
    incremental_positions,
    packed_attention_mask,
    packed_positions,
    positions_from_padding_mask,
)
from .rope import (
    DynamicNTKScaling,
    LinearScaling,
    Llama3Scaling,
    LongRopeScaling,
    NTKScaling,
    ProportionalScaling,
    RopeScaling,
    RotaryEncoding,
    Rotation,
    YarnScaling,
    apply_rotation,
    convert_rotary_layout,
)
from .xpos import XPos

__all__ = ["ALiBi", "ClippedRelativeBias", "DynamicNTKScaling", "FIRE", "InputEmbedding", "KVCache",
           "Kerple", "LearnedEncoding", "LinearScaling", "Llama3Scaling", "LongRopeScaling",
           "MultiheadAttention", "NTKScaling", "NoPE", "PositionEncoding", "ProportionalScaling",
           "RopeScaling", "RotaryEncoding", "Rotation", "SinusoidalEncoding", "T5RelativeBias",
           "XPos", "YarnScaling", "apply_rotation", "convert_rotary_layout", "encoding_kind",
           "incremental_positions", "packed_attention_mask", "packed_positions",
           "positions_from_padding_mask"]
