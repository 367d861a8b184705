"""Video coordinates: a ``(t, row, col)`` position per patch token of a sequence of frames.

A video (or any image sequence) of ``T`` frames, each cut into a ``rows x cols`` patch grid,
becomes ``T * rows * cols`` tokens in frame-major, then row-major order (all patches of frame
0, then of frame 1, ...); token ``i`` sits at frame ``i // (rows * cols)`` and patch
``(i // cols % rows, i % cols)``. Its coordinate is ``(t, row, col)``:

- ``row``, ``col``: patch indices, as :func:`posenc.spatial.patch_coords` gives them;
- ``t``: the frame index ``0 .. T-1``, or the frame's real time in any unit, e.g.
  ``posenc.temporal.time_positions(timestamps, origin, unit="s")`` (float64 seconds).
  Frames need not be equally spaced: ``t`` is a float coordinate, so irregularly timed
  frames (dropped frames, variable frame rate, sparse key frames) are encoded at their true
  times.

The 3D encodings (:class:`posenc.spatial.RoPE3D`, :class:`posenc.spatial.MRoPE`,
:class:`posenc.spatial.SinCos3D`) are functions of these ``(N, 3)``/``(B, N, 3)`` coordinates;
rotary ones also take a :class:`VideoPositions`, which adds the prefix tokens (cls,
registers) and a per-forward cache, as :class:`posenc.spatial.coords.GridPositions` does in 2D.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from posenc.core.validation import (
    check_int,
    check_output_dtype,
    check_position_shape,
    check_position_values,
    check_positions,
    check_positive_float,
)
from torch import Tensor

from .coords import GridPositions, check_grid_size, patch_coords

__all__ = ["AXES", "VideoPositions", "as_video_positions", "video_coords", "video_position_shape"]

#: The coordinate axes, in the order of the last dimension of video coordinates.
AXES = ("t", "row", "col")


def video_coords(
    grid_size: int | tuple[int, int],
    frames: int | Tensor,
    *,
    time_scale: float = 1.0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``(t, row, col)`` coordinates of every patch of every frame, frame-major then row-major.

    Args:
        grid_size: the patch grid of one frame, ``rows`` (square) or ``(rows, cols)``.
        frames: ``T`` (then ``t`` is the frame index ``0 .. T-1``), or the frames' times: a
            ``(T,)`` tensor shared by the batch or ``(B, T)`` per video, in any unit and any
            spacing (e.g. ``posenc.temporal.time_positions(...)``: float64 seconds).
        time_scale: multiplies ``t``, to put time in the units of a patch step (RoPE
            wavelengths are tuned to steps of 1): e.g. ``fps`` for times in seconds, or
            Qwen2.5-VL's ``tokens_per_second``.
        device: of the result (with ``frames`` a tensor: its device).
        dtype: of the result when ``frames`` is an int. With frame times the result keeps
            their floating dtype (float64 seconds keep float64 coordinates, so angles stay
            exact far from the origin); integer times give float64 (exact to 2**53).

    Returns:
        ``(T * rows * cols, 3)``, or ``(B, T * rows * cols, 3)`` for ``(B, T)`` times.
    """
    grid_size = check_grid_size(grid_size)
    scale = check_positive_float(time_scale, "time_scale")
    if isinstance(frames, Tensor):
        frames = check_positions(frames, "frames")
        if frames.shape[-1] < 1:
            raise ValueError(f"frames must hold at least one frame time, got shape "
                             f"{tuple(frames.shape)}")
    else:
        check_int(frames, "frames", ge=1)
        check_output_dtype(dtype)
    return _video_coords(grid_size, frames, scale, device, dtype)


def _video_coords(grid_size: tuple[int, int], frames: int | Tensor, scale: float,
                  device: torch.device | str | None, dtype: torch.dtype) -> Tensor:
    """:func:`video_coords` of checked arguments (frame times checked where they entered,
    e.g. :class:`~posenc.spatial.VideoVisionTransformer`'s forward): reads no values."""
    rows, cols = grid_size
    if isinstance(frames, Tensor):
        work = frames.dtype if frames.is_floating_point() else torch.float64
        times, device = frames.to(work), frames.device
    else:
        work = dtype
        times = torch.arange(frames, device=device, dtype=work)
    if scale != 1.0:
        times = times * scale
    spatial = patch_coords((rows, cols), device=device, dtype=work)  # (rows * cols, 2)
    per_frame = spatial.shape[0]
    t = times[..., :, None, None].expand(*times.shape, per_frame, 1)
    space = spatial.expand(*times.shape, per_frame, 2)
    return torch.cat((t, space), dim=-1).flatten(-3, -2)


class VideoPositions(NamedTuple):
    """Video coordinates plus what a ViT's attention needs to know about them.

    Attributes:
        coords: ``(N, 3)`` or ``(B, N, 3)`` ``(t, row, col)`` coordinates of the N patch tokens
            (:func:`video_coords`, or a subset of them: kept patches of patch dropout).
        num_prefix_tokens: tokens without a position (cls, registers) that precede the patch
            tokens; rotary encodings leave them unrotated, so a rotation covers
            ``num_prefix_tokens + N`` tokens.
        cache: an optional dict in which encodings keep what they derive from these positions
            (a rotation), so blocks sharing an encoding compute it once per forward. Give a
            fresh dict per forward.
    """

    coords: Tensor
    num_prefix_tokens: int = 0
    cache: dict | None = None


def as_video_positions(positions: Tensor | VideoPositions,
                       name: str = "positions") -> VideoPositions:
    """Validate ``(N, 3)``/``(B, N, 3)`` coordinates or a :class:`VideoPositions`: non-finite
    coordinates raise (a read of their values), then :func:`video_position_shape`.

    Integer coordinates come back as int64 (:func:`posenc.core.validation.check_positions`); a
    :class:`VideoPositions` whose coordinates need no change comes back as the same object.
    A 2D :class:`GridPositions` is a ``TypeError`` (a 3D encoding needs ``t``).
    """
    check_position_values(positions, name)
    return video_position_shape(positions, name)


def video_position_shape(positions: Tensor | VideoPositions,
                         name: str = "positions") -> VideoPositions:
    """:func:`as_video_positions` without reading values (types and shapes only): what the
    encodings' unchecked methods run, on positions their model made or checked once."""
    if isinstance(positions, GridPositions):
        raise TypeError(f"{name} must be (N, 3)/(B, N, 3) (t, row, col) coordinates or a "
                        f"VideoPositions, got a GridPositions of 2D (row, col) coordinates: "
                        f"make them with posenc.spatial.video_coords")
    if isinstance(positions, VideoPositions):
        coords = check_position_shape(positions.coords, f"{name}.coords", trailing=(3,))
        check_int(positions.num_prefix_tokens, f"{name}.num_prefix_tokens", ge=0)
        if positions.cache is not None and not isinstance(positions.cache, dict):
            raise TypeError(f"{name}.cache must be a dict or None, got "
                            f"{type(positions.cache).__name__}")
        return positions if coords is positions.coords else positions._replace(coords=coords)
    return VideoPositions(check_position_shape(positions, name, trailing=(3,)))
