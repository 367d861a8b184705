"""Additive encodings of patch (and video) coordinates, ``coords -> (..., N, dim)``: sin-cos
([`SinCos2D`][posenc.spatial.SinCos2D], [`SinCos3D`][posenc.spatial.SinCos3D]) and learned
([`Factorized2D`][posenc.spatial.Factorized2D], [`Learned2D`][posenc.spatial.Learned2D])."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from posenc.core import LearnedEncoding, PositionEncoding
from posenc.core._checks import (
    check_base,
    check_bool,
    check_choice,
    check_even,
    check_finite,
    check_int,
    check_output_dtype,
    check_position_shape,
    check_position_values,
    check_positions,
    check_positive_int,
    known_finite,
)
from posenc.core.additive import sinusoidal_encoding, sinusoidal_inv_freq
from posenc.core.encoding import Float64Buffers
from torch import Tensor, nn

from .coords import NORMALIZE, check_grid_size, patch_coords, video_coords
from .rope import check_sections

__all__ = ["SinCos2D", "SinCos3D", "Factorized2D", "Learned2D"]


LAYOUTS = ("rows_cols", "cols_rows", "half")
LAYOUTS_3D = ("t_rows_cols", "t_cols_rows")
# The coordinate axes in the order of their blocks, per layout.
_AXIS_ORDER = {"rows_cols": (0, 1), "cols_rows": (1, 0), "half": (0, 1),
               "t_rows_cols": (0, 1, 2), "t_cols_rows": (0, 2, 1)}


class _SinCos(Float64Buffers):
    """A 1D sinusoidal encoding of each coordinate axis, ``sections[a]`` frequencies ``base **
    (-i / sections[a])`` as a ``"half"`` block ``[sin(p f_0), ..., cos(p f_0), ...]``, the
    blocks concatenated in the order ``layout`` names
    ([`sinusoidal_encoding`][posenc.core.additive.sinusoidal_encoding])."""

    kind = "additive"
    sections: tuple[int, ...]
    base: float
    layout: str

    def float64_buffers(self) -> dict[str, Tensor]:
        return {"inv_freq64": torch.cat([sinusoidal_inv_freq(2 * s, self.base)
                                         for s in self.sections])}

    def forward(self, coords: Tensor, *, dtype: torch.dtype = torch.float32) -> Tensor:
        """``(N, A)``/``(B, N, A)`` coordinates of the ``A`` axes (``(row, col)`` or ``(t, row,
        col)``) -> ``(..., N, dim)`` of ``dtype`` (that of the tokens it is added to)."""
        check_position_values(coords, "coords")
        coords = check_position_shape(coords, "coords", trailing=(len(self.sections),))
        check_output_dtype(dtype)
        freqs = self.inv_freq64.split(self.sections)
        blocks = [sinusoidal_encoding(coords[..., a], freqs[a], "half")
                  for a in _AXIS_ORDER[self.layout]]
        if self.layout == "half":  # the sines of all axes, then their cosines
            sines, cosines = zip(*(b.chunk(2, -1) for b in blocks), strict=True)
            blocks = [*sines, *cosines]
        return torch.cat(blocks, dim=-1).to(dtype)


class SinCos2D(_SinCos):
    """Additive 2D sin-cos encoding (MAE, timm's ``build_sincos2d_pos_embed``).

    Each axis gets ``dim / 4`` frequencies ``base ** (-4i / dim)``, in the channel order of
    ``layout``: ``"rows_cols"`` ``[sin(row f), cos(row f), sin(col f), cos(col f)]`` (timm's
    ``build_sincos2d_pos_embed(..., interleave_sin_cos=True)``), ``"cols_rows"`` ``[sin(col f),
    cos(col f), sin(row f), cos(row f)]`` (MAE's ``get_2d_sincos_pos_embed``) or ``"half"``
    ``[sin(row f), sin(col f), cos(row f), cos(col f)]`` (timm's default).

    Args:
        dim: embedding width (divisible by 4).
        base: wavelength base (``temperature`` in timm).
        layout: channel order, see above.
        normalize: coordinates of [`encode_grid`][posenc.spatial.SinCos2D.encode_grid]: ``None``
            (patch indices, as MAE/timm) or ``"unit"`` (see
            [`patch_coords`][posenc.spatial.patch_coords]).
    """

    def __init__(self, dim: int, base: float = 10000.0, *, layout: str = "rows_cols",
                 normalize: str | None = None) -> None:
        super().__init__()
        if check_positive_int(dim, "dim") % 4:
            raise ValueError(f"dim must be a positive multiple of 4 (a sin and a cos per axis), "
                             f"got {dim!r}")
        self.dim, self.sections = dim, (dim // 4, dim // 4)
        self.base = check_base(base)
        self.layout = check_choice(layout, "layout", LAYOUTS)
        self.normalize = check_choice(normalize, "normalize", NORMALIZE)
        self.reset_float64_buffers()

    def encode_grid(self, grid_size: int | tuple[int, int], *,
                    dtype: torch.dtype = torch.float32) -> Tensor:
        """``(rows * cols, dim)`` encoding of a whole grid in row-major order, of ``dtype``."""
        return self(known_finite(patch_coords(grid_size, self.normalize,
                                              device=self.inv_freq64.device)), dtype=dtype)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, base={self.base}, layout={self.layout!r}, "
                f"normalize={self.normalize!r}")


class SinCos3D(_SinCos):
    """Additive 3D sin-cos encoding of ``(t, row, col)`` video coordinates (absolute: give
    times from a fixed origin, in a unit that keeps them O(1..1000)).

    Args:
        dim: embedding width (even, >= 6).
        base: wavelength base.
        sections: sin/cos pairs per axis ``(t, row, col)``, summing to ``dim // 2``; None:
            [`default_sections`][posenc.spatial.rope.default_sections].
        layout: block order, ``"t_rows_cols"`` or ``"t_cols_rows"`` (with the default sections
            diffusers' ``get_3d_sincos_pos_embed``, without its interpolation scales).
    """

    def __init__(self, dim: int, base: float = 10000.0, *,
                 sections: tuple[int, int, int] | None = None, layout: str = "t_rows_cols") -> None:
        super().__init__()
        self.dim = check_even(dim, "dim")
        self.sections = check_sections(sections, dim // 2, what="dim // 2")
        self.base = check_base(base)
        self.layout = check_choice(layout, "layout", LAYOUTS_3D)
        self.reset_float64_buffers()

    def encode_video(self, grid_size: int | tuple[int, int], frames: int | Tensor, *,
                     time_scale: float = 1.0, dtype: torch.dtype = torch.float32) -> Tensor:
        """The encoding of [`video_coords`][posenc.spatial.video_coords]
        ``(grid_size, frames, time_scale=...)``: ``(T * rows * cols, dim)``, or
        ``(B, T * rows * cols, dim)`` for ``(B, T)`` times."""
        device = frames.device if isinstance(frames, Tensor) else self.inv_freq64.device
        coords = video_coords(grid_size, frames, time_scale=time_scale, device=device)
        return self(coords, dtype=dtype)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, base={self.base}, sections={self.sections}, "
                f"layout={self.layout!r}")


class Factorized2D(PositionEncoding):
    """``encoding(row, col) = rows[row] + cols[col]`` with two learned 1D tables (NaViT), each a
    [`posenc.core.LearnedEncoding`][posenc.core.LearnedEncoding] (fractions interpolate; outside
    ``[0, max - 1]`` raise).

    Args:
        max_grid_size: ``max`` or ``(max_rows, max_cols)``, the table lengths.
        dim: embedding width.
    """

    kind = "additive"

    def __init__(self, max_grid_size: int | tuple[int, int], dim: int) -> None:
        super().__init__()
        self.max_grid_size = check_grid_size(max_grid_size, "max_grid_size")
        self.dim = check_positive_int(dim, "dim")
        self.rows = LearnedEncoding(self.max_grid_size[0], dim)
        self.cols = LearnedEncoding(self.max_grid_size[1], dim)

    def reset_parameters(self) -> None:
        self.rows.reset_parameters()
        self.cols.reset_parameters()

    def forward(self, coords: Tensor) -> Tensor:
        """``(N, 2)``/``(B, N, 2)`` (row, col) coordinates -> ``(..., N, dim)``."""
        coords = check_positions(coords, "coords", trailing=(2,))  # integers as int64
        if not torch.compiler.is_compiling() and coords.numel():
            for axis, name in enumerate(("row", "col")):
                low, high = coords[..., axis].min().item(), coords[..., axis].max().item()
                size = self.max_grid_size[axis]
                if low < 0 or high > size - 1:
                    raise ValueError(
                        f"coords {name}s must lie in [0, {size - 1}] for "
                        f"max_grid_size={self.max_grid_size}, got values in [{low}, {high}]")
        return self.rows(coords[..., 0]) + self.cols(coords[..., 1])

    def encode_grid(self, grid_size: int | tuple[int, int]) -> Tensor:
        """``(rows * cols, dim)`` encoding of a whole grid in row-major order: an axis that fits
        in its table at patch indices ``0 .. n-1`` (NaViT), a longer one at ``linspace(0, max -
        1, n)`` (NaViT's fractional variant)."""
        rows, cols = check_grid_size(grid_size)
        device = self.rows.weight.device
        row_pos, col_pos = (_axis_positions(n, size, device)
                            for n, size in zip((rows, cols), self.max_grid_size, strict=True))
        return (self.rows(row_pos)[:, None] + self.cols(col_pos)[None, :]).flatten(0, 1)

    def extra_repr(self) -> str:
        return f"max_grid_size={self.max_grid_size}, dim={self.dim}"


def _axis_positions(n: int, size: int, device: torch.device) -> Tensor:
    """``(n,)`` float32 positions of ``n`` patches on a table of ``size`` rows (see
    [`Factorized2D.encode_grid`][posenc.spatial.Factorized2D.encode_grid])."""
    steps = torch.arange(n, device=device, dtype=torch.float32)
    # A tensor, not a Python comparison, so export keeps n dynamic; >= 1 for n = 1.
    last = steps[-1:].clamp(min=1)
    return torch.where(last > size - 1, steps * (size - 1) / last, steps)


INTERPOLATIONS = ("bicubic", "bilinear", "nearest")


class Learned2D(PositionEncoding):
    """A trainable ``(rows, cols, dim)`` grid of embeddings, as ViT's ``pos_embed``, resampled
    like an image to another grid (timm's ``resample_abs_pos_embed``). Coordinates index the
    stored grid: integers exactly, fractions bilinearly; coordinates outside it raise.

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
        """The table resampled to ``grid_size``, ``(rows', cols', dim)``, differentiable: timm's
        ``resample_abs_pos_embed`` (in float32, returned in the table dtype)."""
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
        """Copy a timm ``pos_embed`` ``(1, P + rows * cols, dim)`` into this grid (resampled
        when the sizes differ).

        Args:
            pos_embed: e.g. ``model.pos_embed`` or ``state_dict["pos_embed"]``.
            num_prefix_tokens: leading entries of prefix tokens (1 for a class token with timm's
                default ``no_embed_class=False``).
            grid_size: source grid; inferred as square when None.

        Returns:
            The ``(1, P, dim)`` prefix entries; add them to the class/register tokens to keep
            the model's function.
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
        [`load_timm_pos_embed`][posenc.spatial.Learned2D.load_timm_pos_embed]). ``kwargs`` go to the
        constructor."""
        n = _check_pos_embed(pos_embed, num_prefix_tokens).shape[1] - num_prefix_tokens
        module = cls(_infer_grid(n, grid_size), pos_embed.shape[-1], **kwargs)
        module = module.to(device=pos_embed.device, dtype=pos_embed.dtype)
        module.load_timm_pos_embed(pos_embed, num_prefix_tokens, grid_size)
        return module

    def extra_repr(self) -> str:
        return (f"grid_size={self.grid_size}, dim={self.dim}, "
                f"interpolation={self.interpolation!r}, antialias={self.antialias}")


def _check_pos_embed(pos_embed: object, num_prefix_tokens: object) -> Tensor:
    """A finite floating ``(1, P + rows * cols, dim)`` tensor with ``0 <= P <`` its length."""
    if not isinstance(pos_embed, Tensor):
        raise TypeError(f"pos_embed must be a torch.Tensor, got {type(pos_embed).__name__}")
    if pos_embed.ndim != 3 or pos_embed.shape[0] != 1:
        raise ValueError("pos_embed must be a (1, num_prefix_tokens + rows * cols, dim) "
                         f"tensor, got shape {tuple(pos_embed.shape)}")
    if not pos_embed.is_floating_point():
        raise TypeError(f"pos_embed must be a floating tensor, got {pos_embed.dtype}")
    check_finite(pos_embed, "pos_embed")
    check_int(num_prefix_tokens, "num_prefix_tokens")
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
