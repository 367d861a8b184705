"""posenc.spatial: patch-grid (2D) and video (3D) position encodings and their timm ViT
integration.

Coordinates are per-token ``(row, col)`` patch positions (:func:`patch_coords`) or ``(t, row,
col)`` for clips (:func:`video_coords`), ``(N, D)`` or ``(B, N, D)``. By kind: additive
(:class:`SinCos2D`, :class:`Learned2D`, :class:`Factorized2D`, :class:`SinCos3D`), rotary
(:class:`RoPE2D`, :class:`LieRE`, :class:`RoPE3D`, :class:`MRoPE`) and bias
(:class:`RelativeBias2D`, :class:`ContinuousBias2D`, :class:`ALiBi2D`). :func:`attach` plugs
any of :data:`ENCODINGS` into a timm ``VisionTransformer``, returning a
:class:`GridVisionTransformer` that runs at any image size; :class:`VideoVisionTransformer`
runs one on clips (:data:`VIDEO_ENCODINGS`).
"""

from .additive import Factorized2D, Learned2D, SinCos2D, SinCos3D
from .bias import ALiBi2D, ContinuousBias2D, RelativeBias2D
from .builder import attach
from .coords import patch_coords, video_coords
from .factory import ENCODINGS, SpatialEncodingSpec, encoding_from_name
from .liere import LieRE
from .rope import MRoPE, RoPE2D, RoPE3D
from .timm_io import AttachReport, timm_state_dict
from .video import VIDEO_ENCODINGS, VideoVisionTransformer
from .vit import GridVisionTransformer

__all__ = [
    "ALiBi2D", "AttachReport", "ContinuousBias2D", "ENCODINGS", "Factorized2D",
    "GridVisionTransformer", "Learned2D", "LieRE", "MRoPE", "RelativeBias2D", "RoPE2D", "RoPE3D",
    "SinCos2D", "SinCos3D", "SpatialEncodingSpec", "VIDEO_ENCODINGS", "VideoVisionTransformer",
    "attach", "encoding_from_name", "patch_coords", "timm_state_dict", "video_coords",
]
