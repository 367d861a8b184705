"""Plots of the 2D and video encodings in ``posenc.spatial`` (each renders a PNG and returns
its path): :func:`plot_grid_similarity` (the ViT paper's figure: for each patch, the cosine
similarity of its encoding to every patch) and :func:`plot_video_similarity` (one
``(t, row, col)`` token against every token of every frame, for MRoPE, RoPE3D and SinCos3D).
The 2D rotary encodings' own plots are in :mod:`.rotary2d`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from posenc.spatial import ENCODINGS
from torch import Tensor, nn

from .figure import cosine_matrix, describe, new_figure, save_png

__all__ = ["GRID_ENCODINGS", "plot_grid_similarity", "plot_video_similarity"]

#: The names whose encodings have a grid to plot: the additive ones of the spatial registry.
GRID_ENCODINGS = tuple(name for name, spec in ENCODINGS.items() if spec.kind == "additive")


def plot_grid_similarity(encoding: nn.Module, path: str | Path,
                         grid_size: int | tuple[int, int] = 7, *, vmin: float | None = None,
                         title: str | None = None, figsize: tuple[float, float] | None = None,
                         dpi: int = 100) -> Path:
    """The ViT paper's position-embedding similarity figure.

    Tile ``(i, j)`` is a ``rows x cols`` map of the cosine similarity between the encoding of
    patch ``(i, j)`` and that of every patch.

    Args:
        encoding: a 2D additive encoding with ``encode_grid(grid_size) -> (rows * cols, dim)``
            (``SinCos2D``, ``Learned2D``, ``Factorized2D``), fixed or trained.
        grid_size: ``rows`` or ``(rows, cols)`` patch grid (a learned grid is resampled to it).
        vmin: bottom of the colour scale (top is 1); default the smallest similarity, so a
            fixed sin-cos encoding, whose similarities on a small grid all lie near 1, still
            shows its structure. Pass -1 to compare encodings on one scale.
        figsize: default 8 inches wide, as tall as the grid's aspect needs.
    """
    from posenc.spatial.coords import check_grid_size

    rows, cols = check_grid_size(grid_size)
    if not hasattr(encoding, "encode_grid"):
        raise TypeError(f"encoding must be an additive 2D encoding with encode_grid() (one of "
                        f"{list(GRID_ENCODINGS)}), got {type(encoding).__name__}")
    with torch.no_grad():
        enc = encoding.encode_grid((rows, cols)).float()
    sim = cosine_matrix(enc).reshape(rows, cols, rows, cols)
    pad = 1
    mosaic = np.full((rows * (rows + pad) - pad, cols * (cols + pad) - pad), np.nan)
    for i in range(rows):
        for j in range(cols):
            top, left = i * (rows + pad), j * (cols + pad)
            mosaic[top:top + rows, left:left + cols] = sim[i, j]
    height = min(max(6.4 * mosaic.shape[0] / mosaic.shape[1] + 1.2, 3.0), 12.0)
    fig = new_figure(figsize or (8, round(height, 1)), dpi)
    ax = fig.subplots()
    low = float(sim.min()) if vmin is None else vmin
    image = ax.imshow(mosaic, cmap="viridis", vmin=min(low, 1 - 1e-6), vmax=1,
                      interpolation="nearest")
    ax.set_xticks([j * (cols + pad) + (cols - 1) / 2 for j in range(cols)],
                  [str(j + 1) for j in range(cols)])
    ax.set_yticks([i * (rows + pad) + (rows - 1) / 2 for i in range(rows)],
                  [str(i + 1) for i in range(rows)])
    ax.tick_params(length=0)
    ax.set(xlabel="input patch column", ylabel="input patch row")
    for spine in ax.spines.values():
        spine.set_visible(False)
    fig.colorbar(image, ax=ax, label="cosine similarity", shrink=0.8)
    fig.suptitle(title or f"Position embedding similarity, {rows}x{cols} grid\n"
                 f"{describe(encoding)}", fontsize="medium")
    return save_png(fig, path)


def _video_similarity(encoding: nn.Module, coords: Tensor, query: int) -> np.ndarray:
    """``(N,)`` similarity of token ``query`` to each of the ``(N, 3)`` coordinates: the
    ``q = k = ones`` score ``/ head_dim`` (the mean cosine of the pairs' angle differences) of
    a rotary encoding (of head 0 where frequencies are per head), the cosine similarity of an
    additive one."""
    with torch.no_grad():
        if getattr(encoding, "kind", None) == "rotary":
            heads = encoding.num_heads if getattr(encoding, "freqs", None) is not None else 1
            ones = torch.ones(1, heads, coords.shape[0], encoding.head_dim)
            turned = encoding.rotate(ones, coords)[0, 0].double()
            return (turned @ turned[query] / encoding.head_dim).numpy()
        return cosine_matrix(encoding(coords))[query]


def _video_label(encoding: nn.Module) -> str:
    """A row label: the class and what tells the rows apart (describe() is too long)."""
    name = type(encoding).__name__
    details = [getattr(encoding, "axis_layout", None), getattr(encoding, "variant", None)]
    words = " ".join(d for d in details if d)
    return f"{name} {words}\nsections {tuple(encoding.sections)}" if hasattr(
        encoding, "sections") else name


def plot_video_similarity(encodings: Sequence[nn.Module], path: str | Path,
                          grid_size: int | tuple[int, int] = 8, frames: int = 5, *,
                          query: tuple[int, int, int] | None = None, vmin: float | None = None,
                          title: str | None = None, figsize: tuple[float, float] | None = None,
                          dpi: int = 100) -> Path:
    """Similarity of one ``(t, row, col)`` token to every token of a clip, frame by frame:
    one row of ``rows x cols`` maps per encoding, one column per frame, the query marked.

    Rotary encodings show the ``q = k = ones`` attention score divided by ``head_dim`` (1 at
    zero offset, a function of the 3D offset only); additive ones the cosine similarity of
    the encodings. Both lie in ``[-1, 1]`` and share one colour scale, from ``vmin`` to 1.

    Args:
        encodings: at most 6 video encodings of ``(N, 3)`` coordinates: rotary (``MRoPE``,
            ``RoPE3D``: ``rotate((1, H, N, head_dim), coords)``, head 0 shown) or additive
            (``SinCos3D``: ``coords -> (N, dim)``).
        grid_size: ``rows`` or ``(rows, cols)`` patches per frame.
        frames: frames ``0 .. frames - 1`` (``t`` is the frame index).
        query: ``(t, row, col)`` of the token compared; default the clip's centre.
        vmin: bottom of the colour scale; default the smallest similarity shown (on a small
            clip they all lie near 1). Pass -1 for the full range.
        figsize: default ``(1.9 * frames + 2.5, 1.9 * len(encodings) * rows / cols + 1)``.
    """
    from posenc.core.encoding import check_positive_int
    from posenc.spatial import video_coords
    from posenc.spatial.coords import check_grid_size

    rows, cols = check_grid_size(grid_size)
    frames = check_positive_int(frames, "frames")
    if isinstance(encodings, nn.Module) or not 1 <= len(encodings) <= 6 or not all(
            isinstance(e, nn.Module) for e in encodings):
        raise TypeError(f"encodings must be a list of 1 to 6 video encodings (nn.Module), "
                        f"got {encodings!r}"[:300])
    query = (frames // 2, rows // 2, cols // 2) if query is None else tuple(query)
    if len(query) != 3 or not all(isinstance(q, int) and 0 <= q < n for q, n in
                                  zip(query, (frames, rows, cols), strict=False)):
        raise ValueError(f"query must be (t, row, col) ints inside the clip of {frames} "
                         f"frames of {rows}x{cols} patches, got {query!r}")
    coords = video_coords((rows, cols), frames)
    index = (query[0] * rows + query[1]) * cols + query[2]
    fig = new_figure(figsize or (round(1.9 * frames + 2.5, 1),
                                 round(1.9 * len(encodings) * rows / cols + 1, 1)), dpi)
    axes = fig.subplots(len(encodings), frames, squeeze=False)
    sims = [_video_similarity(e, coords, index).reshape(frames, rows, cols) for e in encodings]
    low = min(float(s.min()) for s in sims) if vmin is None else vmin
    for r, (row_axes, encoding, sim) in enumerate(zip(axes, encodings, sims, strict=True)):
        for t, ax in enumerate(row_axes):
            image = ax.imshow(sim[t], cmap="viridis", vmin=min(low, 1 - 1e-6), vmax=1,
                              interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if t == query[0]:
                ax.plot(query[2], query[1], marker="x", color="w", ms=6)
            if r == 0:
                ax.set_title(f"frame t = {t}" + (" (query)" if t == query[0] else ""),
                             fontsize="small")
        row_axes[0].set_ylabel(_video_label(encoding), fontsize="small")
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8,
                 label="similarity to the query (rotary: ones score / head_dim)")
    fig.suptitle(title or f"Similarity of token (t, row, col) = {query} to every token, "
                 f"{frames} frames of {rows}x{cols} patches", fontsize="medium")
    return save_png(fig, path)
