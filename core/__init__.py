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
  (:class:`~posenc.core.encoding.Float64Buffers`).

Channel layouts are named by one vocabulary, ``"half"`` and ``"interleaved"``
(:data:`posenc.core.encoding.LAYOUTS`; see :mod:`posenc.core.encoding`).

``__all__`` is the public API. The building blocks stay importable from their modules only:
the argument checks (:mod:`posenc.core.encoding`), the helpers for writing encodings
(:class:`~posenc.core.encoding.Float64Buffers`, :mod:`posenc.core.encoding`), and the functions
behind the classes (``posenc.core.bias.alibi_slopes``, ``posenc.core.rope.Rotation`` and
``rotation_from_angles``, ``posenc.core.additive.sinusoidal_encoding``, ...).
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
