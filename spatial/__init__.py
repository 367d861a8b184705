"""posenc.spatial: patch-grid (2D) and video (3D) position encodings and their timm ViT
integration.

Coordinates are per-token ``(row, col)`` patch positions
([`patch_coords`][posenc.spatial.patch_coords]) or ``(t, row, col)`` for clips
([`video_coords`][posenc.spatial.video_coords]), ``(N, D)`` or ``(B, N, D)``. By
kind: additive ([`SinCos2D`][posenc.spatial.SinCos2D], [`Learned2D`][posenc.spatial.Learned2D],
[`Factorized2D`][posenc.spatial.Factorized2D], [`SinCos3D`][posenc.spatial.SinCos3D]), rotary
([`RoPE2D`][posenc.spatial.RoPE2D], [`LieRE`][posenc.spatial.LieRE],
[`RoPE3D`][posenc.spatial.RoPE3D], [`MRoPE`][posenc.spatial.MRoPE]) and bias
([`RelativeBias2D`][posenc.spatial.RelativeBias2D],
[`ContinuousBias2D`][posenc.spatial.ContinuousBias2D], [`ALiBi2D`][posenc.spatial.ALiBi2D]).
[`attach`][posenc.spatial.attach] plugs any of [`ENCODINGS`][posenc.spatial.ENCODINGS] into a timm
``VisionTransformer``, returning a [`GridVisionTransformer`][posenc.spatial.GridVisionTransformer]
that runs at any image size; [`VideoVisionTransformer`][posenc.spatial.VideoVisionTransformer] runs
one on clips ([`VIDEO_ENCODINGS`][posenc.spatial.VIDEO_ENCODINGS]).
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
