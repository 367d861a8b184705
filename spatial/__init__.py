"""posenc.spatial: 2D patch-grid position encodings and their timm ViT integration.

Coordinates are per-token ``(row, col)`` patch positions, ``(N, 2)`` or ``(B, N, 2)``
(:func:`patch_coords`); prefix tokens (cls, registers) carry none. By kind:

- additive (``coords -> (..., N, dim)``): :class:`SinCos2D`, :class:`Learned2D`,
  :class:`Factorized2D`
- rotary (``rotation(coords)``): :class:`RoPE2D` (axial, mixed)
- bias (``(q_coords, k_coords) -> (B or 1, H, Nq, Nk)``): :class:`RelativeBias2D`,
  :class:`ContinuousBias2D`, :class:`ALiBi2D`

:data:`ENCODINGS` is the one registry of names (:class:`SpatialEncodingSpec`: class, kind,
arguments inferred from a model, one module per block or shared), :func:`encoding_from_name`
builds any of them by name and :func:`attach` plugs one into a timm ``VisionTransformer``,
which then runs at any image size divisible by its patch size.
"""

from .bias2d import ALiBi2D, ContinuousBias2D, RelativeBias2D
from .coords import GridPositions, as_grid_positions, check_grid_size, patch_coords
from .factorized import Factorized2D
from .factory import (
    ENCODINGS,
    SpatialEncodingSpec,
    encoding_from_name,
    encoding_kind,
    encoding_spec,
    encodings_for_blocks,
    one_module_per_block,
    size_arguments,
    vit_size_arguments,
)
from .learned import Learned2D
from .rope2d import RoPE2D, init_mixed_freqs
from .sincos import SinCos2D
from .timm_attach import GridAttention, GridContext, GridVisionTransformer, attach

__all__ = [
    "ALiBi2D",
    "ContinuousBias2D",
    "ENCODINGS",
    "Factorized2D",
    "GridAttention",
    "GridContext",
    "GridPositions",
    "GridVisionTransformer",
    "Learned2D",
    "RelativeBias2D",
    "RoPE2D",
    "SinCos2D",
    "SpatialEncodingSpec",
    "as_grid_positions",
    "attach",
    "check_grid_size",
    "encoding_from_name",
    "encoding_kind",
    "encoding_spec",
    "encodings_for_blocks",
    "init_mixed_freqs",
    "one_module_per_block",
    "patch_coords",
    "size_arguments",
    "vit_size_arguments",
]
