"""Plots of the image and video encodings of ``posenc.spatial``: additive ones by cosine
similarity between patches (the ViT paper's figure), rotary ones by the score of a query and a
key turned at their positions, divided by the squared norm (1 at zero offset)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from posenc.core._checks import check_int, check_positive_int
from posenc.spatial import ENCODINGS
from posenc.spatial.coords import check_grid_size
from torch import Tensor, nn

from .core import check_encodings, cosine_matrix, describe, new_figure, panel_axes, save_png

__all__ = ["GRID_ENCODINGS", "plot_grid_similarity", "plot_liere_relative",
           "plot_rope_dinov3_coords", "plot_rope_mixed_frequencies", "plot_video_irregular",
           "plot_video_similarity"]

#: The names whose encodings have a grid to plot: the additive ones of the spatial registry.
GRID_ENCODINGS = tuple(name for name, spec in ENCODINGS.items() if spec.kind == "additive")


def _similarity_image(ax: object, image: np.ndarray, low: float) -> object:
    """``image`` on the colour scale ``low .. 1`` (one that is not empty), without ticks."""
    shown = ax.imshow(image, cmap="viridis", vmin=min(low, 1 - 1e-6), vmax=1,
                      interpolation="nearest")
    ax.tick_params(length=0)
    return shown


def plot_grid_similarity(encoding: nn.Module, path: str | Path,
                         grid_size: int | tuple[int, int] = 7, *, vmin: float | None = None,
                         title: str | None = None, figsize: tuple[float, float] | None = None,
                         dpi: int = 100) -> Path:
    """The ViT paper's position-embedding similarity figure: tile ``(i, j)`` is a ``rows x
    cols`` map of the cosine similarity of patch ``(i, j)``'s encoding to every patch's.

    Args:
        encoding: a 2D additive encoding with ``encode_grid(grid_size) -> (rows * cols, dim)``.
        grid_size: ``rows`` or ``(rows, cols)`` patch grid (a learned grid is resampled to it).
        vmin: bottom of the colour scale (top is 1); default the smallest similarity. Pass -1
            to compare encodings on one scale.
        figsize: default 8 inches wide, as tall as the grid's aspect needs.
    """
    rows, cols = check_grid_size(grid_size)
    if not hasattr(encoding, "encode_grid"):
        raise TypeError(f"encoding must be an additive 2D encoding with encode_grid() (one of "
                        f"{list(GRID_ENCODINGS)}), got {type(encoding).__name__}")
    with torch.no_grad():
        sim = cosine_matrix(encoding.encode_grid((rows, cols)).float())
    sim = sim.reshape(rows, cols, rows, cols)
    mosaic = np.full((rows * (rows + 1) - 1, cols * (cols + 1) - 1), np.nan)  # 1-pixel gaps
    for i in range(rows):
        for j in range(cols):
            mosaic[i * (rows + 1):i * (rows + 1) + rows, j * (cols + 1):j * (cols + 1) + cols] = (
                sim[i, j])
    height = min(max(6.4 * mosaic.shape[0] / mosaic.shape[1] + 1.2, 3.0), 12.0)
    fig = new_figure(figsize or (8, round(height, 1)), dpi)
    ax = fig.subplots()
    image = _similarity_image(ax, mosaic, float(sim.min()) if vmin is None else vmin)
    ax.set_xticks([j * (cols + 1) + (cols - 1) / 2 for j in range(cols)],
                  [str(j + 1) for j in range(cols)])
    ax.set_yticks([i * (rows + 1) + (rows - 1) / 2 for i in range(rows)],
                  [str(i + 1) for i in range(rows)])
    ax.set(xlabel="input patch column", ylabel="input patch row")
    for spine in ax.spines.values():
        spine.set_visible(False)
    fig.colorbar(image, ax=ax, label="cosine similarity", shrink=0.8)
    fig.suptitle(title or f"Position embedding similarity, {rows}x{cols} grid\n"
                 f"{describe(encoding)}", fontsize="medium")
    return save_png(fig, path)


def _video_similarity(encoding: nn.Module, coords: Tensor, query: int) -> np.ndarray:
    """``(N,)`` similarity of token ``query`` to each of the ``(N, 3)`` coordinates: rotary,
    the ``q = k = ones`` score ``/ head_dim`` (head 0); additive, the cosine similarity."""
    with torch.no_grad():
        if getattr(encoding, "kind", None) != "rotary":
            return cosine_matrix(encoding(coords))[query]
        heads = encoding.num_heads if getattr(encoding, "freqs", None) is not None else 1
        ones = torch.ones(1, heads, coords.shape[0], encoding.head_dim)
        turned = encoding.rotate(ones, coords)[0, 0].double()
        return (turned @ turned[query] / encoding.head_dim).numpy()


def plot_video_similarity(encodings: Sequence[nn.Module], path: str | Path,
                          grid_size: int | tuple[int, int] = 8, frames: int = 5, *,
                          frame_times: Sequence[float] | None = None, time_scale: float = 1.0,
                          query: tuple[int, int, int] | None = None, vmin: float | None = None,
                          title: str | None = None, figsize: tuple[float, float] | None = None,
                          dpi: int = 100) -> Path:
    """Similarity of one ``(t, row, col)`` token to every token of a clip (rotary: the
    ``q = k = ones`` score / ``head_dim``; additive: cosine): a row of maps per encoding, a
    column per frame, on one colour scale from ``vmin`` to 1.

    Args:
        encodings: 1 to 6 video encodings of ``(N, 3)`` coordinates: rotary
            (``rotate((1, H, N, head_dim), coords)``) or additive (``coords -> (N, dim)``).
        grid_size: ``rows`` or ``(rows, cols)`` patches per frame.
        frames: the number of frames.
        frame_times: the frames' times (seconds, increasing; irregular spacing is the point),
            ``t = frame_times * time_scale``; default the indices ``0 .. frames - 1``.
        time_scale: multiplies ``frame_times`` (e.g. frames per second), as
            [`VideoVisionTransformer`][posenc.spatial.VideoVisionTransformer]'s.
        query: ``(frame, row, col)`` of the token compared; default the clip's centre.
        vmin: bottom of the colour scale; default the smallest similarity shown.
        figsize: default ``(1.9 * frames + 2.5, 1.9 * len(encodings) * rows / cols + 1)``.
    """
    from posenc.spatial import video_coords

    rows, cols = check_grid_size(grid_size)
    frames = check_positive_int(frames, "frames")
    check_encodings(encodings, 6, "video encodings (nn.Module)")
    times = _frame_times(frame_times, frames)
    query = _video_query(query, frames, rows, cols)
    coords = video_coords((rows, cols), times, time_scale=time_scale).float()
    index = (query[0] * rows + query[1]) * cols + query[2]
    fig = new_figure(figsize or (round(1.9 * frames + 2.5, 1),
                                 round(1.9 * len(encodings) * rows / cols + 1, 1)), dpi)
    # Fixed-aspect maps: "compressed" lays them out at their real size, so the row labels keep
    # their margin ("constrained" sized the margins for the unshrunk axes and cut them off).
    fig.set_layout_engine("compressed")
    axes = fig.subplots(len(encodings), frames, squeeze=False)
    sims = [_video_similarity(e, coords, index).reshape(frames, rows, cols) for e in encodings]
    low = min(float(s.min()) for s in sims) if vmin is None else vmin
    for r, (row_axes, encoding, sim) in enumerate(zip(axes, encodings, sims, strict=True)):
        for t, ax in enumerate(row_axes):
            image = _frame_map(ax, sim[t], low, query if t == query[0] else None)
            if r == 0:
                when = (f"frame t = {t}" if frame_times is None else
                        f"frame {t}: {float(times[t]):.2f} s")
                ax.set_title(when + (" (query)" if t == query[0] else ""), fontsize="small")
        row_axes[0].set_ylabel(_encoding_label(encoding), fontsize="small")
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8,
                 label="similarity to the query (rotary: ones score / head_dim)")
    timing = ("" if frame_times is None else
              f" at irregular frame times, t = seconds x {time_scale:g}")
    fig.suptitle(title or f"Similarity of token (t, row, col) = {query} to every token, "
                 f"{frames} frames of {rows}x{cols} patches{timing}", fontsize="medium")
    return save_png(fig, path)


def _encoding_label(encoding: nn.Module) -> str:
    """A row label: the class and what tells the rows apart (layout, variant, sections)."""
    label = type(encoding).__name__
    if hasattr(encoding, "sections"):
        details = [getattr(encoding, "axis_layout", None), getattr(encoding, "variant", None)]
        label += f" {' '.join(d for d in details if d)}\nsections {tuple(encoding.sections)}"
    return label


def plot_video_irregular(encodings: Sequence[nn.Module], path: str | Path,
                         grid_size: int | tuple[int, int], frame_times: Sequence[float], *,
                         time_scale: float = 1.0, query: tuple[int, int, int] | None = None,
                         title: str | None = None, figsize: tuple[float, float] | None = None,
                         dpi: int = 100) -> Path:
    """A 3D encoding's similarity across space and time for frames at irregular times: per
    encoding, a row of maps (the similarity of the ``query`` token to every token of each frame,
    ``t = frame_times * time_scale``) and a panel of the similarity to the query's own patch in
    every frame against the frame's time, with ``t`` from the real times and from the frame index
    (which puts frames far apart in time next to each other).

    Args:
        encodings: 1 to 6 video encodings (as
            [`plot_video_similarity`][posenc.tasks.plots.spatial.plot_video_similarity]'s).
        grid_size: ``rows`` or ``(rows, cols)`` patches per frame.
        frame_times: the frames' times in seconds, increasing.
        time_scale: multiplies the times (e.g. frames per second).
        query: ``(frame, row, col)``; default the middle frame's centre.
        figsize: default ``(1.9 * frames + 4.5, 1.9 * len(encodings) + 1)``.
    """
    from posenc.spatial import video_coords

    rows, cols = check_grid_size(grid_size)
    check_encodings(encodings, 6, "video encodings (nn.Module)")
    frames = len(frame_times) if isinstance(frame_times, Sequence) else -1
    if frames < 2:
        raise ValueError(f"frame_times must be a sequence of at least 2 times, got "
                         f"{frame_times!r}")
    times = _frame_times(frame_times, frames)
    query = _video_query(query, frames, rows, cols)
    index = (query[0] * rows + query[1]) * cols + query[2]
    real = video_coords((rows, cols), times, time_scale=time_scale).float()
    by_index = video_coords((rows, cols), frames)
    sims = [(_video_similarity(e, real, index).reshape(frames, rows, cols),
             _video_similarity(e, by_index, index).reshape(frames, rows, cols))
            for e in encodings]
    low = min(float(min(a.min(), b.min())) for a, b in sims)
    fig = new_figure(figsize or (round(1.9 * frames + 4.5, 1),
                                 round(1.9 * len(encodings) + 1, 1)), dpi)
    fig.set_layout_engine("compressed")  # fixed-aspect maps (see plot_video_similarity)
    axes = fig.subplots(len(encodings), frames + 1, squeeze=False,
                        width_ratios=[1] * frames + [2])
    seconds = times.numpy()
    for r, (row_axes, encoding, (sim, sim_index)) in enumerate(zip(axes, encodings, sims,
                                                                   strict=True)):
        for t, ax in enumerate(row_axes[:-1]):
            image = _frame_map(ax, sim[t], low, query if t == query[0] else None)
            if r == 0:
                ax.set_title(f"{seconds[t]:.2f} s" + (" (query)" if t == query[0] else ""),
                             fontsize="small")
        row_axes[0].set_ylabel(_encoding_label(encoding), fontsize="small")
        line = row_axes[-1]
        line.plot(seconds, sim[:, query[1], query[2]], "o-", label="t from the frame times")
        line.plot(seconds, sim_index[:, query[1], query[2]], "s--",
                  label="t from the frame index")
        line.set_box_aspect(1 / 2)
        line.grid(alpha=0.3)
        line.tick_params(labelsize="small")
        if r == 0:
            line.set_title("the query's patch in each frame", fontsize="small")
            line.legend(fontsize="x-small")
        if r == len(encodings) - 1:
            line.set_xlabel("frame time (s)", fontsize="small")
    fig.colorbar(image, ax=axes[:, :-1].ravel().tolist(), shrink=0.8, location="left",
                 label="similarity to the query")
    fig.suptitle(title or f"Similarity to token (frame, row, col) = {query} at irregular frame "
                 f"times, t = seconds x {time_scale:g}", fontsize="medium")
    return save_png(fig, path)


def _frame_map(ax: object, sim: Tensor, low: float, query: tuple[int, int, int] | None) -> object:
    """One frame's ``(rows, cols)`` similarity map without ticks; ``query``'s patch marked
    when the frame holds it."""
    image = _similarity_image(ax, sim, low)
    ax.set_xticks([])
    ax.set_yticks([])
    if query is not None:
        ax.plot(query[2], query[1], marker="x", color="w", ms=6)
    return image


def _video_query(query: Sequence[int] | None, frames: int, rows: int,
                 cols: int) -> tuple[int, int, int]:
    """The query patch ``(t, row, col)`` of a clip, by default its centre, checked inside it."""
    query = (frames // 2, rows // 2, cols // 2) if query is None else tuple(query)
    if len(query) != 3 or not all(isinstance(q, int) and 0 <= q < n for q, n in
                                  zip(query, (frames, rows, cols), strict=False)):
        raise ValueError(f"query must be (t, row, col) ints inside the clip of {frames} "
                         f"frames of {rows}x{cols} patches, got {query!r}")
    return query


def _frame_times(frame_times: Sequence[float] | None, frames: int) -> Tensor | int:
    """``frame_times`` as a float64 ``(frames,)`` tensor of increasing finite times, or
    ``frames`` (the indices) for None."""
    if frame_times is None:
        return frames
    times = torch.as_tensor(frame_times, dtype=torch.float64)
    if times.shape != (frames,):
        raise ValueError(f"frame_times must hold one time per frame ({frames}), got shape "
                         f"{tuple(times.shape)}")
    if not torch.isfinite(times).all() or (times.diff() <= 0).any():
        raise ValueError(f"frame_times must be finite and increasing, got {list(frame_times)}")
    return times


def plot_rope_mixed_frequencies(encoding: nn.Module, path: str | Path, *,
                                title: str | None = None, figsize: tuple[float, float] | None
                                = None, dpi: int = 100) -> Path:
    """RoPE-Mixed frequency vectors ``(f_col, f_row)`` of every rotary pair, a panel per head
    (a pair turns by ``row * f_row + col * f_col`` radians).

    Args:
        encoding: ``posenc.spatial.RoPE2D`` with ``variant="mixed"`` (initial or trained).
        figsize: default ``(3 * columns + 1, 3 * rows + 0.8)`` for at most 4 columns.
    """
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    freqs = getattr(encoding, "freqs", None)
    if not isinstance(freqs, Tensor) or freqs.ndim != 3 or freqs.shape[0] != 2:
        raise TypeError("encoding must be a RoPE2D with variant='mixed' (learnable freqs of "
                        f"shape (2, heads, pairs)), got {describe(encoding)}")
    f_row, f_col = freqs.detach().float().cpu().numpy() * float(getattr(encoding, "scale", 1.0))
    num_heads, pairs = f_row.shape
    ncols = min(num_heads, 4)
    nrows = -(-num_heads // ncols)
    fig = new_figure(figsize or (3 * ncols + 1, 3 * nrows + 0.8), dpi)
    axes = panel_axes(fig, num_heads, 4)
    norm = Normalize(0, pairs - 1)
    colors = colormaps["viridis"](norm(np.arange(pairs)))
    lim = 1.1 * float(np.hypot(f_row, f_col).max() or 1.0)
    zeros = np.zeros(pairs)
    for h, ax in enumerate(axes[:num_heads]):
        ax.quiver(zeros, zeros, f_col[h], f_row[h], color=colors, angles="xy",
                  scale_units="xy", scale=1, width=0.012)
        ax.set(xlim=(-lim, lim), ylim=(-lim, lim), aspect="equal", title=f"head {h}")
        ax.axhline(0, color="0.8", lw=0.6)
        ax.axvline(0, color="0.8", lw=0.6)
        if h % ncols == 0:
            ax.set_ylabel("row frequency (rad/patch)")
        if h // ncols == nrows - 1 or h + ncols >= num_heads:
            ax.set_xlabel("column frequency (rad/patch)")
    fig.colorbar(ScalarMappable(norm, "viridis"), ax=axes.tolist(), label="rotary pair index",
                 shrink=0.8)
    fig.suptitle(title or f"RoPE-Mixed frequencies per head: {describe(encoding)}",
                 fontsize="medium")
    return save_png(fig, path)


def _rotary_label(encoding: nn.Module) -> str:
    """A panel title: ``LieRE (mixed init)``, ``ComRoPE (random init)``, ``RoPE2D axial``."""
    from posenc.spatial import LieRE

    if isinstance(encoding, LieRE):
        name = "ComRoPE" if encoding.variant == "comrope" else "LieRE"
        return f"{name} ({encoding.init} init)"
    return f"{type(encoding).__name__} {getattr(encoding, 'variant', '')}".strip()


def plot_liere_relative(encodings: Sequence[nn.Module], path: str | Path, *, window: int = 7,
                        anchors: Sequence[tuple[int, int]] = ((0, 0), (5, 9), (11, 3)),
                        seed: int = 0, title: str | None = None,
                        figsize: tuple[float, float] | None = None, dpi: int = 100) -> Path:
    """Is the ``q . k`` score a function of the 2D offset alone? One random ``q = k`` (from
    ``seed``), the query turned at ``anchor + (d_row, d_col)``, the key at ``anchor``.

    A heat map per encoding of the score / ``|q|^2`` at the first anchor, and bars (log scale)
    of ``max |map(anchor_i) - map(anchor_0)|``: float32 rounding for a relative encoding.

    Args:
        encodings: 1 to 4 2D rotary encodings with ``rotate((B, H, N, head_dim), (N, 2))``
            and ``num_heads``; head 0 is shown.
        window: offsets ``-window .. window`` along each axis.
        anchors: at least two ``(row, col)`` key positions, compared with the first.
        figsize: default ``(3.6 * len(encodings) + 5, 4.4)``.
    """
    from matplotlib.ticker import MaxNLocator
    from posenc.spatial import patch_coords

    check_encodings(encodings, 4, "2D rotary encodings (LieRE, RoPE2D)",
                    lambda e: getattr(e, "kind", None) == "rotary" and hasattr(e, "num_heads"))
    window = check_positive_int(window, "window")
    try:
        anchors = [tuple(a) for a in anchors]
    except TypeError:  # not a sequence of pairs: the check below names it
        pass
    if not isinstance(anchors, list) or len(anchors) < 2 or not all(
            len(a) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in a)
            for a in anchors):
        raise ValueError(f"anchors must be at least two (row, col) int pairs, got {anchors!r}")
    check_int(seed, "seed")
    side = 2 * window + 1
    offsets = patch_coords(side) - window  # (side * side, 2) row-major (d_row, d_col)
    maps = []  # per encoding (anchors, side, side)
    for encoding in encodings:
        q = torch.randn(encoding.head_dim, generator=torch.Generator().manual_seed(seed))
        vectors = q.expand(1, encoding.num_heads, len(offsets), -1)
        scores = []
        for anchor in torch.tensor(anchors, dtype=torch.float32):
            with torch.no_grad():
                query = encoding.rotate(vectors, anchor + offsets)[0, 0].double()
                key = encoding.rotate(vectors[:, :, :1], anchor[None])[0, 0, 0].double()
            scores.append((query @ key).numpy().reshape(side, side) / float(q.norm()) ** 2)
        maps.append(np.stack(scores))
    change = np.array([np.abs(m[1:] - m[0]).reshape(len(anchors) - 1, -1).max(1)
                       for m in maps])  # (encodings, anchors - 1)
    fig = new_figure(figsize or (3.6 * len(encodings) + 5, 4.4), dpi)
    *axes, ax_bar = fig.subplots(1, len(encodings) + 1, width_ratios=[1] * len(encodings) + [1.4])
    vmax = max(float(np.abs(m[0]).max()) for m in maps)
    extent = (-window - 0.5, window + 0.5, window + 0.5, -window - 0.5)
    for ax, encoding, score, worst in zip(axes, encodings, maps, change.max(1), strict=True):
        image = ax.imshow(score[0], cmap="RdBu_r", vmin=-vmax, vmax=vmax, extent=extent,
                          interpolation="nearest")
        ax.plot(0, 0, marker="x", color="k", ms=5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel="column offset d_col (patches)",
               title=f"{_rotary_label(encoding)}\nmax change across anchors {worst:.1e}")
    axes[0].set_ylabel("row offset d_row (patches)")
    fig.colorbar(image, ax=axes, shrink=0.8, label="q . k / |q|^2  (q = k)")
    x = np.arange(len(encodings))
    width = 0.8 / change.shape[1]
    for i, anchor in enumerate(anchors[1:]):
        bars = ax_bar.bar(x + (i - (change.shape[1] - 1) / 2) * width, change[:, i], width,
                          label=f"anchor {anchor} vs {anchors[0]}", color=f"C{i}")
        ax_bar.bar_label(bars, fmt="%.0e", fontsize="x-small")
    eps = float(torch.finfo(torch.float32).eps)
    ax_bar.axhline(eps, color="0.4", ls="--", lw=0.8, label=f"float32 eps ({eps:.1e})")
    ax_bar.set_yscale("log")
    ax_bar.set_ylim(min(1e-8, float(change[change > 0].min(initial=1.0)) / 3), 3)
    ax_bar.set_xticks(x, [_rotary_label(e).replace(" (", "\n(") for e in encodings],
                      fontsize="small")
    ax_bar.set(ylabel="max over offsets of |score map change|",
               title="change of the map between anchors")
    ax_bar.legend(fontsize="x-small", loc="upper left")
    fig.suptitle(title or f"Score of one random q = k ~ N(0, I): query at anchor + (d_row, "
                 f"d_col), key at anchor; maps at anchor {anchors[0]}, head 0", fontsize="medium")
    return save_png(fig, path)


#: Per augmentation step: its range in the panel title, its draws' legend title.
_AUGMENT_TEXT = {"shift_coords": ("+ U[-{v:g}, {v:g}] per axis", "draw: shift (row, col)"),
                 "jitter_coords": ("x [1/{v:g}, {v:g}] per axis", "draw: scale (row, col)"),
                 "rescale_coords": ("x [1/{v:g}, {v:g}], both axes", "draw: scale of both axes")}


def _draw_coords(ax: object, coords: Tensor, color: object, label: str | None) -> None:
    """Patch centres ``(row, col)`` as points and the box through the outer ones."""
    from matplotlib.patches import Rectangle

    row, col = coords.double().numpy().T
    ax.scatter(col, row, s=9, color=color, label=label, zorder=3)
    ax.add_patch(Rectangle((col.min(), row.min()), np.ptp(col), np.ptp(row), fill=False,
                           ec=color, lw=1.2, zorder=2))


def _affine_label(step: str, draw: int, base: Tensor, moved: Tensor) -> str:
    """The shift or scale that took ``base`` to ``moved``, read back from the points."""
    base, moved = base.double().numpy(), moved.double().numpy()
    if step == "shift_coords":
        shift = (moved - base).mean(0)
        return f"{draw}: ({shift[0]:+.2f}, {shift[1]:+.2f})"
    slope = np.ptp(moved, 0) / np.ptp(base, 0)
    if step == "jitter_coords":
        return f"{draw}: ({slope[0]:.2f}, {slope[1]:.2f})"
    return f"{draw}: {slope[0]:.2f}"


def plot_rope_dinov3_coords(path: str | Path, grid_size: int | tuple[int, int] = (6, 10), *,
                            shift_coords: float = 0.5, jitter_coords: float = 1.5,
                            rescale_coords: float = 2.0, normalize_coords: str = "separate",
                            num_draws: int = 3, seed: int = 0, title: str | None = None,
                            figsize: tuple[float, float] = (14, 8.5), dpi: int = 100) -> Path:
    """The patch coordinates RoPE sees under DINOv3's options (row down, ``[-1, 1]^2`` dashed).

    Top: ``normalize_coords`` ``"separate"``, ``"min"`` and ``"max"``. Bottom: one step of
    [`RoPE2D`][posenc.spatial.RoPE2D]'s ``coord_augment`` per panel (``shift_coords >= 0``,
    ``jitter_coords`` and ``rescale_coords`` factors ``>= 1``) on the ``normalize_coords`` system:
    the eval points in grey and ``num_draws`` (1 to 6) draws seeded with ``seed``.

    Args:
        grid_size: ``(rows, cols)`` patches, each at least 2.
    """
    from matplotlib.patches import Rectangle
    from posenc.spatial import RoPE2D, patch_coords
    from posenc.spatial.rope import NORMALIZE_COORDS

    rows, cols = check_grid_size(grid_size)
    if min(rows, cols) < 2:
        raise ValueError(f"grid_size must be at least 2 x 2 patches, got {(rows, cols)}")
    if not 1 <= check_positive_int(num_draws, "num_draws") <= 6:
        raise ValueError(f"num_draws must be 1 to 6, got {num_draws}")
    check_int(seed, "seed")

    def coords_of(option: str, **augment: float) -> tuple[nn.Module, Tensor]:
        rope = RoPE2D(8, 1, normalize="unit", normalize_coords=option, **augment)
        return rope, patch_coords((rows, cols), rope.normalize)

    normalized = [coords_of(option)[1] for option in NORMALIZE_COORDS]
    augmented = []
    for step, value in (("shift_coords", shift_coords), ("jitter_coords", jitter_coords),
                        ("rescale_coords", rescale_coords)):
        rope, base = coords_of(normalize_coords, **{step: value})
        if rope.coord_augment is None:
            raise TypeError(f"{step} must be a number (the plot shows its draws), got None")
        gen = torch.Generator().manual_seed(seed)
        augmented.append((step, value, base, [rope.coord_augment.train()(base, generator=gen)
                                              for _ in range(num_draws)]))
    fig = new_figure(figsize, dpi)
    grid = fig.add_gridspec(3, 3, height_ratios=(1, 1, 0.2))  # the last row: legends
    axes = np.array([[fig.add_subplot(grid[i, j]) for j in range(3)] for i in range(2)])
    every = torch.cat([*normalized, *(d for *_, draws in augmented for d in draws)]).double()
    low = every.amin(0).clamp(max=-1.0).numpy() - 0.15  # (row, col) limits, [-1, 1] inside
    high = every.amax(0).clamp(min=1.0).numpy() + 0.15
    divides = {"separate": "each axis by its own size", "min": "both by the shorter side",
               "max": "both by the longer side"}
    for ax, option, coords in zip(axes[0], NORMALIZE_COORDS, normalized, strict=True):
        _draw_coords(ax, coords, "C0", None)
        ax.set_title(f'normalize_coords="{option}"\n{divides[option]}', fontsize="medium")
    for j, (ax, (step, value, base, draws)) in enumerate(zip(axes[1], augmented, strict=True)):
        _draw_coords(ax, base, "0.6", "eval (no augmentation)")
        for i, moved in enumerate(draws):
            _draw_coords(ax, moved, f"C{i + 1}", _affine_label(step, i + 1, base, moved))
        span, legend = _AUGMENT_TEXT[step]
        ax.set_title(f"{step}={value:g}: {span.format(v=value)}", fontsize="medium")
        key = fig.add_subplot(grid[2, j])
        key.set_axis_off()
        key.legend(*ax.get_legend_handles_labels(), ncol=2, loc="upper center", frameon=False,
                   title=legend, fontsize="small", title_fontsize="small")
    for (i, j), ax in np.ndenumerate(axes):
        ax.add_patch(Rectangle((-1, -1), 2, 2, fill=False, ec="0.5", ls="--", lw=0.8))
        ax.set_aspect("equal", adjustable="box")
        ax.set(xlim=(low[1], high[1]), ylim=(high[0], low[0]))  # row 0 at the top
        ax.tick_params(labelbottom=i == 1, labelleft=j == 0)  # labels on the outer edges
        ax.set_xlabel("column coordinate" if i == 1 else "")
        ax.set_ylabel("row coordinate" if j == 0 else "")
    fig.suptitle(title or f"Patch coordinates RoPE sees, {rows}x{cols} grid (DINOv3 options; "
                 f'augmentation on normalize_coords="{normalize_coords}", seed {seed}); '
                 "dashed: [-1, 1]^2", fontsize="medium")
    return save_png(fig, path)
