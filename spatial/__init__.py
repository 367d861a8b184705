"""posenc.spatial: patch-grid (2D) and video (3D) position encodings and their timm ViT
integration.

Coordinates are per-token ``(row, col)`` patch positions, ``(N, 2)`` or ``(B, N, 2)``
(:func:`patch_coords`), or ``(t, row, col)`` for clips (:func:`video_coords`; ``t`` a frame
index or a real time); prefix tokens (cls, registers) carry none. By kind:

- additive (``coords -> (..., N, dim)``): :class:`SinCos2D`, :class:`Learned2D`,
  :class:`Factorized2D`, :class:`SinCos3D`
- rotary (``rotation(coords)``): :class:`RoPE2D` (axial, mixed; DINOv3 and pixel-frequency
  options), :class:`LieRE` (LieRE, ComRoPE-LD: learned rotation generators), :class:`RoPE3D`,
  :class:`MRoPE` (Qwen2-VL / Qwen3-VL sections)
- bias (``(q_coords, k_coords) -> (B or 1, H, Nq, Nk)``): :class:`RelativeBias2D`,
  :class:`ContinuousBias2D`, :class:`ALiBi2D`

:func:`attach` plugs any of :data:`ENCODINGS` (names -> :class:`SpatialEncodingSpec`;
:func:`encoding_from_name` builds one) into a timm ``VisionTransformer``, which then runs at any
image size divisible by its patch size (optionally loading a timm weights file first,
with an :class:`AttachReport` of the new and dropped tensors; :func:`timm_state_dict` writes
a ``"learned"`` model back under timm's names); :class:`VideoVisionTransformer` runs one on clips
(:data:`VIDEO_ENCODINGS`). ``__all__`` is the public API; the building blocks (positions,
attention, registry helpers, the functions behind the classes) stay in their modules.
"""

from .additive import Factorized2D, Learned2D, SinCos2D, SinCos3D
from .bias import ALiBi2D, ContinuousBias2D, RelativeBias2D
from .coords import patch_coords, video_coords
from .factory import ENCODINGS, SpatialEncodingSpec, encoding_from_name
from .liere import LieRE
from .rope import MRoPE, RoPE2D, RoPE3D
from .vit import VIDEO_ENCODINGS, AttachReport, VideoVisionTransformer, attach, timm_state_dict

__all__ = [
    "ALiBi2D",
    "AttachReport",
    "ContinuousBias2D",
    "ENCODINGS",
    "Factorized2D",
    "Learned2D",
    "LieRE",
    "MRoPE",
    "RelativeBias2D",
    "RoPE2D",
    "RoPE3D",
    "SinCos2D",
    "SinCos3D",
    "SpatialEncodingSpec",
    "VIDEO_ENCODINGS",
    "VideoVisionTransformer",
    "attach",
    "encoding_from_name",
    "patch_coords",
    "timm_state_dict",
    "video_coords",
]
