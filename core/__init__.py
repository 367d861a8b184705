"""posenc.core: 1D position encodings over scalar coordinates, and the attention module.

Every encoding is a [`PositionEncoding`][posenc.core.PositionEncoding] declaring its ``kind``
([`encoding_kind`][posenc.core.encoding_kind]): additive
([`SinusoidalEncoding`][posenc.core.SinusoidalEncoding],
[`LearnedEncoding`][posenc.core.LearnedEncoding]), rotary
([`RotaryEncoding`][posenc.core.RotaryEncoding], [`XPos`][posenc.core.XPos]), bias
([`ALiBi`][posenc.core.ALiBi], [`T5RelativeBias`][posenc.core.T5RelativeBias],
[`ClippedRelativeBias`][posenc.core.ClippedRelativeBias], [`FIRE`][posenc.core.FIRE],
[`Kerple`][posenc.core.Kerple]), or [`NoPE`][posenc.core.NoPE] (or ``None``).
[`MultiheadAttention`][posenc.core.MultiheadAttention] takes any rotary and any bias encoding. A
rotary encoding's ``rotation(positions)`` is a [`Rotation`][posenc.core.Rotation], which
[`apply_rotation`][posenc.core.apply_rotation] applies; RoPE's context extensions derive from
[`RopeScaling`][posenc.core.RopeScaling] (as a scaling of one's own can). Fixed additive encodings
return float32 unless ``forward`` is given ``dtype=``; frequencies and angles are float64.
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
