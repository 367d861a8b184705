"""posenc.core: 1D position encodings over scalar coordinates, and the attention module.

Three kinds, by where an encoding enters a transformer (every encoding class, in core, spatial
and temporal, is a :class:`PositionEncoding` that declares its ``kind``, :func:`encoding_kind`):

- additive (``positions -> (..., dim)``): :class:`SinusoidalEncoding`, :class:`LearnedEncoding`
- rotary (``rotation(positions)`` applied to q and k): :class:`RotaryEncoding`, :class:`XPos`
- bias (``(q_positions, k_positions) -> (B, H, Nq, Nk)``): :class:`ALiBi`,
  :class:`T5RelativeBias`, :class:`ClippedRelativeBias`, :class:`FIRE`, :class:`Kerple`

and :class:`NoPE` (or ``None``) as the baseline. :class:`MultiheadAttention` takes any rotary
and any bias encoding.

Output dtypes, for every encoding in posenc: fixed additive encodings (sinusoidal, 2D sin-cos,
calendar, Fourier, elapsed time, time deltas) return float32 unless their ``forward`` is given
``dtype=`` (pass the dtype of the tokens they are added to); learned ones return their
parameters' dtype. Rotations are applied to q and k in their dtype, biases are cast to the
logits'. The positions' dtype never sets the output's: float64 positions buy precise angles,
not a float64 output. Frequencies and angles are float64 (float32 on MPS) whatever the
module's dtype (:class:`~posenc.core.encoding.Float64Buffers`).

``__all__`` is the public API. The building blocks stay importable from their modules: the
argument checks and helpers for writing encodings (:mod:`posenc.core.encoding`, which also
names the channel layouts) and the functions behind the classes
(``posenc.core.bias.alibi_slopes``, ``posenc.core.rope.rotation_from_angles``, ...).
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
    RotaryEncoding,
    YarnScaling,
    apply_rotation,
    convert_rotary_layout,
)
from .xpos import XPos

__all__ = [
    "ALiBi", "ClippedRelativeBias", "DynamicNTKScaling", "FIRE", "InputEmbedding", "KVCache",
    "Kerple", "LearnedEncoding", "LinearScaling", "Llama3Scaling", "LongRopeScaling",
    "MultiheadAttention", "NTKScaling", "NoPE", "PositionEncoding", "ProportionalScaling",
    "RotaryEncoding", "SinusoidalEncoding", "T5RelativeBias", "XPos", "YarnScaling",
    "apply_rotation", "convert_rotary_layout", "encoding_kind", "incremental_positions",
    "packed_attention_mask", "packed_positions", "positions_from_padding_mask",
]
