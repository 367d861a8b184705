"""Learned absolute position grid (ViT), resampled to any other grid."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from posenc.core import PositionEncoding
from posenc.core.validation import (
    check_bool,
    check_choice,
    check_finite,
    check_positions,
    check_positive_int,
)
from torch import Tensor, nn

from .coords import check_grid_size

__all__ = ["Learned2D"]

INTERPOLATIONS = ("bicubic", "bilinear", "nearest")


class Learned2D(PositionEncoding):
    """A trainable ``(rows, cols, dim)`` grid of embeddings, as ViT's ``pos_embed``.

    On another grid the table is resampled like an image (``F.interpolate``, centres aligned,
    as timm's ``resample_abs_pos_embed``), so a patch keeps the embedding of the same relative
    image location. Individual coordinates index the stored grid: integers exactly, fractions
    by bilinear interpolation; coordinates outside it raise.

    Args:
        grid_size: ``rows`` or ``(rows, cols)`` of the stored grid.
        dim: embedding width.
        interpolation: resampling mode for other grids (``"bicubic"`` as timm).
        antialias: antialias when shrinking (timm's default is True).
    """

    kind = "additive"

    def __init__(self, grid_size: int | tuple[int, int], dim: int, *,
                 interpolation: str = "bicubic", antialias: bool = True) -> None:
        super().__init__()
        self.grid_size = check_grid_size(grid_size)
        self.dim = check_positive_int(dim, "dim")
        self.interpolation = check_choice(interpolation, "interpolation", INTERPOLATIONS)
        self.antialias = check_bool(antialias, "antialias") and interpolation != "nearest"
        self.weight = nn.Parameter(torch.empty(*self.grid_size, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.weight, std=0.02)

    def forward(self, coords: Tensor) -> Tensor:
        """``(N, 2)``/``(B, N, 2)`` coordinates on the stored grid -> ``(..., N, dim)``."""
        coords = check_positions(coords, "coords", trailing=(2,))  # integers as int64
        rows, cols = self.grid_size
        if not torch.compiler.is_compiling() and coords.numel():
            low, high = coords.amin(dim=tuple(range(coords.ndim - 1))), coords.amax(
                dim=tuple(range(coords.ndim - 1)))
            if bool((low < 0).any()) or high[0] > rows - 1 or high[1] > cols - 1:
                raise ValueError(
                    f"coords must lie in the stored grid [0, {rows - 1}] x [0, {cols - 1}], got "
                    f"rows in [{low[0].item()}, {high[0].item()}] and cols in "
                    f"[{low[1].item()}, {high[1].item()}]; use encode_grid() for another grid")
        if not coords.is_floating_point():
            return self.weight[coords[..., 0], coords[..., 1]]
        r, c = coords[..., 0], coords[..., 1]
        r0, c0 = r.floor().long(), c.floor().long()
        r1, c1 = (r0 + 1).clamp(max=rows - 1), (c0 + 1).clamp(max=cols - 1)
        fr = (r - r0).unsqueeze(-1).to(self.weight.dtype)
        fc = (c - c0).unsqueeze(-1).to(self.weight.dtype)
        w = self.weight
        top = torch.lerp(w[r0, c0], w[r0, c1], fc)
        bottom = torch.lerp(w[r1, c0], w[r1, c1], fc)
        return torch.lerp(top, bottom, fr)

    def resample(self, grid_size: int | tuple[int, int]) -> Tensor:
        """The table resampled to ``grid_size``: ``(rows', cols', dim)``, differentiable.

        Equals ``timm.layers.resample_abs_pos_embed`` with this module's interpolation and
        antialias (computed in float32, returned in the table dtype).
        """
        size = check_grid_size(grid_size)
        exporting = torch.compiler.is_exporting()
        if not exporting and tuple(size) == tuple(self.grid_size):
            return self.weight
        table = self.weight.float().permute(2, 0, 1)[None]
        align = None if self.interpolation == "nearest" else False
        out = F.interpolate(table, size=size, mode=self.interpolation, align_corners=align,
                            antialias=self.antialias)
        return out[0].permute(1, 2, 0).to(self.weight.dtype)

    def encode_grid(self, grid_size: int | tuple[int, int]) -> Tensor:
        """``(rows' * cols', dim)`` encoding of a whole grid in row-major order."""
        return self.resample(grid_size).flatten(0, 1)

    @torch.no_grad()
    def load_timm_pos_embed(self, pos_embed: Tensor, num_prefix_tokens: int = 0,
                            grid_size: int | tuple[int, int] | None = None) -> Tensor:
        """Copy a timm ``pos_embed`` ``(1, P + rows * cols, dim)`` into this grid.

        The source grid is resampled to this module's grid when the sizes differ.

        Args:
            pos_embed: e.g. ``model.pos_embed`` or ``state_dict["pos_embed"]``.
            num_prefix_tokens: leading entries that belong to prefix tokens (1 for a class
                token with timm's default ``no_embed_class=False``; 0 with
                ``no_embed_class=True``).
            grid_size: source grid; inferred as square when None.

        Returns:
            The ``(1, P, dim)`` prefix entries (empty when P = 0); add them to the class/register
            tokens to keep the model's function unchanged.
        """
        _check_pos_embed(pos_embed, num_prefix_tokens)
        if pos_embed.shape[-1] != self.dim:
            raise ValueError(f"pos_embed has dim {pos_embed.shape[-1]}, this Learned2D has "
                             f"dim={self.dim}")
        prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[0, num_prefix_tokens:]
        src = _infer_grid(grid.shape[0], grid_size)
        source = Learned2D(src, self.dim, interpolation=self.interpolation,
                           antialias=self.antialias).to(grid.device)
        source.weight.copy_(grid.reshape(*src, self.dim))
        self.weight.copy_(source.resample(self.grid_size))
        return prefix

    @classmethod
    def from_timm_pos_embed(cls, pos_embed: Tensor, num_prefix_tokens: int = 0,
                            grid_size: int | tuple[int, int] | None = None,
                            **kwargs) -> Learned2D:
        """A Learned2D holding a timm ``pos_embed`` (prefix entries dropped; see
        :meth:`load_timm_pos_embed`). ``kwargs`` go to the constructor."""
        n = _check_pos_embed(pos_embed, num_prefix_tokens).shape[1] - num_prefix_tokens
        module = cls(_infer_grid(n, grid_size), pos_embed.shape[-1], **kwargs)
        module = module.to(device=pos_embed.device, dtype=pos_embed.dtype)
        module.load_timm_pos_embed(pos_embed, num_prefix_tokens, grid_size)
        return module

    def extra_repr(self) -> str:
        return (f"grid_size={self.grid_size}, dim={self.dim}, "
                f"interpolation={self.interpolation!r}, antialias={self.antialias}")


def _check_pos_embed(pos_embed: object, num_prefix_tokens: object) -> Tensor:
    """A finite floating ``(1, P + rows * cols, dim)`` tensor with ``0 <= P <= `` its length."""
    if not isinstance(pos_embed, Tensor):
        raise TypeError(f"pos_embed must be a torch.Tensor, got {type(pos_embed).__name__}")
    if pos_embed.ndim != 3 or pos_embed.shape[0] != 1:
        raise ValueError("pos_embed must be a (1, num_prefix_tokens + rows * cols, dim) "
                         f"tensor, got shape {tuple(pos_embed.shape)}")
    if not pos_embed.is_floating_point():
        raise TypeError(f"pos_embed must be a floating tensor, got {pos_embed.dtype}")
    check_finite(pos_embed, "pos_embed")
    if isinstance(num_prefix_tokens, bool) or not isinstance(num_prefix_tokens, int):
        raise TypeError(f"num_prefix_tokens must be an int, got "
                        f"{type(num_prefix_tokens).__name__} ({num_prefix_tokens!r})")
    length = pos_embed.shape[1]
    if not 0 <= num_prefix_tokens < length:
        raise ValueError(f"num_prefix_tokens must be in [0, {length - 1}], got "
                         f"{num_prefix_tokens} (pos_embed has {length} entries)")
    return pos_embed


def _infer_grid(num_patches: int, grid_size: int | tuple[int, int] | None) -> tuple[int, int]:
    if grid_size is None:
        side = math.isqrt(num_patches)
        if side * side != num_patches:
            raise ValueError(f"cannot infer a square grid from {num_patches} patch entries; "
                             "pass grid_size=(rows, cols)")
        return side, side
    grid = check_grid_size(grid_size)
    if grid[0] * grid[1] != num_patches:
        raise ValueError(f"grid_size={grid} holds {grid[0] * grid[1]} patches, pos_embed has "
                         f"{num_patches} patch entries")
    return grid
