"""A timm ``VisionTransformer`` fed video: per-frame patches, one sequence, 3D positions.

:class:`VideoVisionTransformer` wraps a timm ViT (built with ``pretrained=False`` or loaded
from an image checkpoint) and runs it on clips. Shapes, for ``B`` clips of ``T`` frames of
``C x H x W`` pixels, patch size ``p``, ``h = H / p``, ``w = W / p``, ``P`` prefix tokens
(cls, registers):

=====================================  ==============================================
``video``                              ``(B, T, C, H, W)``
``frame_times`` (optional)             ``(T,)`` shared or ``(B, T)`` per clip; default
                                       the frame indices ``0 .. T-1``
the ViT's own patch embed, per frame   ``(B * T, h * w, dim)``
tokens, frame-major then row-major     ``(B, T * h * w, dim)``
coordinates (:func:`video_coords`)     ``(T * h * w, 3)`` or ``(B, T * h * w, 3)``:
                                       ``(t, row, col)``, ``t = frame_times * time_scale``
+ prefix tokens, into the blocks       ``(B, P + T * h * w, dim)``
:meth:`forward_features`               ``(B, P + n, dim)`` (``n`` patches kept by
                                       patch dropout, ``T * h * w`` in eval)
:meth:`forward`                        ``(B, num_classes)`` (the ViT's own head)
=====================================  ==============================================

The position encoding is a 3D one: :class:`SinCos3D` (added to the patch tokens) or a 3D
rotary encoding (:class:`RoPE3D`, :class:`MRoPE`), with which each ``block.attn`` becomes a
:class:`posenc.spatial.grid_vit.GridAttention` (posenc's attention holding the block's ``qkv``,
``q_norm``, ``k_norm``, ``proj``) and each block a :class:`posenc.spatial.grid_vit.GridBlock` that
receives the clip's :class:`VideoPositions` explicitly, by the same path
(:mod:`posenc.spatial.grid_vit`) as :func:`posenc.spatial.attach` for images. Frames may
be irregularly timed: give their times (any unit, e.g. ``posenc.temporal.time_positions``)
and the rotary score of two patches depends on their true time gap. The ViT is changed in
place: its 2D ``pos_embed`` is dropped (a checkpoint then loads with ``strict=False``,
reporting only ``pos_embed``), image size checks follow the clip's frame size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import torch
from posenc.core import NoPE
from posenc.core.encoding import unchecked
from posenc.core.validation import check_positions, check_positive_float
from torch import Tensor, nn

from .factory import SpatialEncodingSpec, encoding_kind, encodings_for_blocks
from .grid_vit import (
    GridAttention,
    check_vit,
    enter_blocks,
    patch_grid,
    run_block,
    use_grid_attention,
)
from .rope3d import MRoPE, RoPE3D, _Rotary3D
from .sincos3d import SinCos3D
from .video import VideoPositions, _video_coords

__all__ = ["VIDEO_ENCODINGS", "VideoVisionTransformer"]

_SPECS = (
    SpatialEncodingSpec("none", NoPE),
    SpatialEncodingSpec("sincos3d", SinCos3D, ("dim",)),
    SpatialEncodingSpec("rope3d_axial", RoPE3D, ("head_dim", "num_heads"), {"variant": "axial"}),
    SpatialEncodingSpec("rope3d_mixed", RoPE3D, ("head_dim", "num_heads"), {"variant": "mixed"}),
    SpatialEncodingSpec("mrope", MRoPE, ("head_dim",)),
)

VIDEO_ENCODINGS: Mapping[str, SpatialEncodingSpec] = MappingProxyType(
    {s.name: s for s in _SPECS})
"""3D encoding name -> :class:`SpatialEncodingSpec` (sizes inferred from the ViT), read-only."""


def _video_encoding_spec(name: str) -> SpatialEncodingSpec:
    if not isinstance(name, str) or name not in VIDEO_ENCODINGS:
        raise ValueError(f"unknown video encoding {name!r}; valid names: "
                         f"{list(VIDEO_ENCODINGS)}")
    return VIDEO_ENCODINGS[name]


class VideoVisionTransformer(nn.Module):
    """A timm ``VisionTransformer`` over clips, with a 3D position encoding (module docstring
    gives every shape).

    Args:
        vit: a timm ``VisionTransformer`` (e.g. ``timm.create_model("vit_small_patch16_224",
            pretrained=False)``); changed in place and kept as ``self.vit``, so its parameter
            names are ``vit.<timm name>``.
        encoding: a name from :data:`VIDEO_ENCODINGS` (sizes taken from ``vit``; ``kwargs``
            override them, e.g. ``sections=(4, 6, 6)``), a :class:`SinCos3D` (added to the
            patch tokens), a 3D rotary module (:class:`RoPE3D`, :class:`MRoPE`; shared by all
            blocks), a sequence of one 3D rotary module per block, or None (no position).
        time_scale: multiplies the frame times (or indices) to give ``t`` (see
            :func:`video_coords`).

    With a rotary encoding, prefix tokens (cls, registers) are unrotated, i.e. they sit at
    ``(0, 0, 0)``: patch-to-patch scores depend only on offsets, but a cls token sees where
    a clip lies in time, so give frame times from the clip's start
    (``time_positions(stamps, stamps[0], unit=...)``) unless absolute time should matter.
    """

    def __init__(self, vit: nn.Module, encoding: str | nn.Module | Sequence[nn.Module] | None,
                 *, time_scale: float = 1.0, **kwargs) -> None:
        super().__init__()
        vit = check_vit(vit, "vit")
        self.time_scale = check_positive_float(time_scale, "time_scale")
        if isinstance(encoding, str):
            spec = _video_encoding_spec(encoding)
            params = {**spec.infer(vit), **kwargs}
            encoding = encodings_for_blocks(lambda: spec.build(**params), len(vit.blocks))
        elif kwargs:
            raise TypeError(f"keyword arguments {sorted(kwargs)} are only accepted with an "
                            f"encoding name from {list(VIDEO_ENCODINGS)}")
        if isinstance(encoding, (list, tuple)) and not encoding:
            raise ValueError("encoding must not be an empty sequence")
        first = encoding[0] if isinstance(encoding, (list, tuple)) else encoding
        kind = encoding_kind(first)
        self.pos_encoding: SinCos3D | None = None
        rotary = None
        if kind == "additive":
            if not isinstance(encoding, SinCos3D):
                raise TypeError(f"an additive video encoding must be a SinCos3D, got "
                                f"{type(encoding).__name__}")
            if encoding.dim != vit.embed_dim:
                raise ValueError(f"encoding dim={encoding.dim} does not match the ViT's "
                                 f"embed_dim={vit.embed_dim}")
            self.pos_encoding = encoding
        elif kind == "rotary":
            depth = len(vit.blocks)
            per_block = list(encoding) if isinstance(encoding, (list, tuple)) \
                else [encoding] * depth
            if len(per_block) != depth:
                raise ValueError(f"expected one rotary encoding per block ({depth}), got "
                                 f"{len(per_block)}")
            for enc in per_block:
                if not isinstance(enc, _Rotary3D):
                    raise TypeError(f"a rotary video encoding must be a 3D one (RoPE3D, MRoPE) "
                                    f"reading (t, row, col) coordinates, got "
                                    f"{type(enc).__name__}")
            param = next(vit.parameters())
            rotary = [enc.to(param.device) for enc in per_block]
        elif kind != "none":
            raise TypeError(f"video encodings are additive (SinCos3D) or rotary (RoPE3D, "
                            f"MRoPE), got a {kind} encoding {type(first).__name__}")
        use_grid_attention(vit, rotary)
        self.vit = vit

    def _frames(self, video: Tensor, frame_times: Tensor | None) -> Tensor | int:
        batch, num_frames = video.shape[0], video.shape[1]
        if frame_times is None:
            return num_frames
        times = check_positions(frame_times, "frame_times")  # read once, at the model's edge
        if times.shape[-1] != num_frames or (times.ndim == 2 and times.shape[0] != batch):
            raise ValueError(f"frame_times of shape {tuple(times.shape)} do not match video of "
                             f"shape {tuple(video.shape)}: expected (T,) or (B, T) with "
                             f"T={num_frames}, B={batch}")
        if times.device != video.device:
            raise ValueError(f"frame_times are on {times.device} but video is on "
                             f"{video.device}")
        return times

    def _embed(self, video: Tensor, frame_times: Tensor | None
               ) -> tuple[Tensor, VideoPositions | None]:
        """Clips -> ``(B, P + n, dim)`` tokens and their positions (None without a rotary
        encoding)."""
        if not isinstance(video, Tensor) or video.ndim != 5:
            got = tuple(video.shape) if isinstance(video, Tensor) else type(video).__name__
            raise ValueError(f"video must be a (B, T, C, H, W) tensor of clips, got {got}")
        vit = self.vit
        batch, num_frames = video.shape[:2]
        if batch < 1 or num_frames < 1:
            raise ValueError(f"video must hold at least one clip of one frame, got shape "
                             f"{tuple(video.shape)}")
        grid = patch_grid(self.vit.patch_embed, video.shape[-2], video.shape[-1], "frame")
        frames = self._frames(video, frame_times)
        x = vit.patch_embed(video.flatten(0, 1))  # (B * T, h * w, dim), NHWC if dynamic
        x = x.reshape(batch, num_frames * grid[0] * grid[1], x.shape[-1])
        rotary = any(isinstance(block.attn, GridAttention) for block in vit.blocks)
        coords = None
        if rotary or self.pos_encoding is not None:
            # Unchecked: frame_times were read once above, the grid comes from the shape.
            coords = _video_coords(grid, frames, self.time_scale, x.device, torch.float32)
        if self.pos_encoding is not None:  # coords made above: the unchecked forward
            x = x + unchecked(self.pos_encoding)(coords, dtype=x.dtype)
        positions = VideoPositions(coords, vit.num_prefix_tokens, {}) if rotary else None
        x, positions, _ = enter_blocks(vit, vit.blocks, x, positions, "clip")
        return x, positions

    def forward_features(self, video: Tensor, frame_times: Tensor | None = None, *,
                         attn_mask: Tensor | None = None) -> Tensor:
        """``(B, T, C, H, W)`` clips (frame times ``(T,)``/``(B, T)``, default ``0 .. T-1``)
        -> ``(B, P + n, dim)`` normed tokens. ``attn_mask``: bool (True = attend) or additive,
        broadcastable to ``(B, heads, P + n, P + n)``."""
        x, positions = self._embed(video, frame_times)
        for block in self.vit.blocks:
            x = run_block(self.vit, block, x, positions, attn_mask, False)
        return self.vit.norm(x)

    def forward(self, video: Tensor, frame_times: Tensor | None = None, *,
                attn_mask: Tensor | None = None) -> Tensor:
        """``(B, T, C, H, W)`` clips -> ``(B, num_classes)`` (the ViT's pooling and head)."""
        return self.vit.forward_head(self.forward_features(video, frame_times,
                                                           attn_mask=attn_mask))
