"""Clips through a timm ViT with a 3D position encoding
([`VideoVisionTransformer`][posenc.spatial.VideoVisionTransformer]), by the grid model's path
([`GridVisionTransformer`][posenc.spatial.GridVisionTransformer])."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

import torch
from posenc.core import NoPE
from posenc.core._checks import check_positions, check_positive_float, known_finite
from torch import Tensor, nn

from .additive import SinCos3D
from .blocks import Bias, GridAttention, Rope
from .coords import VideoPositions, _video_coords
from .factory import SpatialEncodingSpec, encoding_kind, encodings_for_blocks
from .rope import MRoPE, RoPE3D, _Rotary3D
from .vit import GridVisionTransformer, check_vit, patch_grid

__all__ = ["VIDEO_ENCODINGS", "VideoVisionTransformer"]


_SPECS = (
    SpatialEncodingSpec("none", NoPE),
    SpatialEncodingSpec("sincos3d", SinCos3D, ("dim",)),
    SpatialEncodingSpec("rope3d_axial", RoPE3D, ("head_dim", "num_heads"), {"variant": "axial"}),
    SpatialEncodingSpec("rope3d_mixed", RoPE3D, ("head_dim", "num_heads"), {"variant": "mixed"}),
    SpatialEncodingSpec("mrope", MRoPE, ("head_dim",)),
)

VIDEO_ENCODINGS: Mapping[str, SpatialEncodingSpec] = MappingProxyType({s.name: s for s in _SPECS})
"""3D encoding name -> [`SpatialEncodingSpec`][posenc.spatial.SpatialEncodingSpec] (sizes inferred
from the ViT), read-only."""


class VideoVisionTransformer(nn.Module):
    """A timm ``VisionTransformer`` over ``(B, T, C, H, W)`` clips, with a 3D position encoding.

    Each frame goes through the ViT's own patch embed; the ``T * h * w`` patch tokens form one
    sequence at [`video_coords`][posenc.spatial.video_coords] ``(t, row, col)``,
    ``t = frame_times * time_scale`` (frame times ``(T,)`` or ``(B, T)`` in any unit and spacing;
    default the indices ``0 .. T-1``). With a rotary encoding prefix tokens sit at ``(0, 0, 0)``, so
    give frame times from the clip's start unless absolute time should matter.

    Args:
        vit: a timm ``VisionTransformer`` (left as it was), whose modules ``self.vit`` takes
            over: a [`GridVisionTransformer`][posenc.spatial.GridVisionTransformer] without
            ``pos_embed``, its blocks taking the 3D rotation (call this model, not ``self.vit``, on
            clips).
        encoding: a name from [`VIDEO_ENCODINGS`][posenc.spatial.VIDEO_ENCODINGS] (sizes taken from
            ``vit``; ``kwargs`` override them, e.g. ``sections=(4, 6, 6)``), a
            [`SinCos3D`][posenc.spatial.SinCos3D], a 3D rotary module
            ([`RoPE3D`][posenc.spatial.RoPE3D], [`MRoPE`][posenc.spatial.MRoPE]; shared by all
            blocks), a sequence of one 3D rotary module per block, or None.
        time_scale: multiplies the frame times (or indices) to give ``t``.
    """

    def __init__(self, vit: nn.Module, encoding: str | nn.Module | Sequence[nn.Module] | None,
                 *, time_scale: float = 1.0, **kwargs) -> None:
        super().__init__()
        vit = check_vit(vit, "vit")
        self.time_scale = check_positive_float(time_scale, "time_scale")
        if isinstance(encoding, str):
            if encoding not in VIDEO_ENCODINGS:
                raise ValueError(f"unknown video encoding {encoding!r}; valid names: "
                                 f"{list(VIDEO_ENCODINGS)}")
            spec = VIDEO_ENCODINGS[encoding]
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
        self.vit = GridVisionTransformer(vit, rotary=rotary)

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
            raise ValueError(f"frame_times are on {times.device} but video is on {video.device}")
        return times

    def _embed(self, video: Tensor, frame_times: Tensor | None, attn_mask: Tensor | None
               ) -> tuple[Tensor, list[tuple[Rope, Bias]]]:
        """Clips -> ``(B, P + n, dim)`` tokens (``n`` patches kept by patch dropout, ``T * h * w``
        in eval) and each block's ``(rope, bias)``."""
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
        rotary = any(isinstance(getattr(block, "attn", None), GridAttention)
                     for block in vit.blocks)
        coords = None
        if rotary or self.pos_encoding is not None:  # frame_times were checked above
            coords = known_finite(_video_coords(grid, frames, self.time_scale, x.device,
                                                torch.float32))
        if self.pos_encoding is not None:
            x = x + self.pos_encoding(coords, dtype=x.dtype)
        positions = VideoPositions(coords, vit.num_prefix_tokens) if rotary else None
        x, encodings, _ = vit._enter_blocks(x, positions, vit.blocks, attn_mask, "clip")
        return x, encodings

    def forward_features(self, video: Tensor, frame_times: Tensor | None = None, *,
                         attn_mask: Tensor | None = None) -> Tensor:
        """Clips -> ``(B, P + n, dim)`` normed tokens. ``attn_mask``: bool (True = attend) or
        additive, broadcastable to ``(B, heads, P + n, P + n)``."""
        x, encodings = self._embed(video, frame_times, attn_mask)
        for block, (rope, bias) in zip(self.vit.blocks, encodings, strict=True):
            x = self.vit._run_block(block, x, rope, bias, attn_mask, False)
        return self.vit.norm(x)

    def forward(self, video: Tensor, frame_times: Tensor | None = None, *,
                attn_mask: Tensor | None = None) -> Tensor:
        """``(B, T, C, H, W)`` clips -> ``(B, num_classes)`` (the ViT's pooling and head)."""
        return self.vit.forward_head(self.forward_features(video, frame_times, attn_mask=attn_mask))
