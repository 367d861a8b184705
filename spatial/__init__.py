"""posenc.spatial: 2D patch-grid position encodings and their timm ViT integration.

Coordinates are per-token ``(row, col)`` patch positions, ``(N, 2)`` or ``(B, N, 2)``
(:func:`patch_coords`); prefix tokens (cls, registers) carry none. By kind:

- additive (``coords -> (..., N, dim)``): :class:`SinCos2D`, :class:`Learned2D`,
  :class:`Factorized2D`
- rotary (``rotation(coords)``): :class:`RoPE2D` (axial, mixed; DINOv3 and pixel-frequency
  options), :class:`LieRE` (LieRE, ComRoPE-LD: learned rotation generators)
- bias (``(q_coords, k_coords) -> (B or 1, H, Nq, Nk)``): :class:`RelativeBias2D`,
  :class:`ContinuousBias2D`, :class:`ALiBi2D`

:data:`ENCODINGS` is the one registry of names (:class:`SpatialEncodingSpec`: class, kind,
arguments inferred from a model, one module per block or shared), :func:`encoding_from_name`
builds any of them by name and :func:`attach` plugs one into a timm ``VisionTransformer``,
which then runs at any image size divisible by its patch size (optionally loading a timm weights
file first, with an :class:`AttachReport` of the new and dropped tensors; :func:`timm_state_dict`
writes a ``"learned"`` model back under timm's names).

Video and image sequences: ``(t, row, col)`` coordinates (:func:`video_coords`; ``t`` a frame
index or a real time), :class:`MRoPE` (Qwen2-VL / Qwen3-VL sections), :class:`RoPE3D` (axial,
mixed), :class:`SinCos3D`, and :class:`VideoVisionTransformer` (a timm ViT fed frames;
:data:`VIDEO_ENCODINGS` names them).

``__all__`` is the public API. The building blocks stay importable from their modules only:
the positions an attached model passes its blocks (:mod:`posenc.spatial.coords`,
:mod:`posenc.spatial.coords`), the attached model and its attention
(:mod:`posenc.spatial.vit`), the registry's helpers (:mod:`posenc.spatial.factory`) and
the functions behind the classes (``posenc.spatial.liere.skew_expm``, ...).
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
