"""Plots of the 2D rotary encodings in ``posenc.spatial`` (each renders a PNG and returns its
path): :func:`plot_rope_mixed_frequencies` (RoPE-Mixed frequency vectors per head),
:func:`plot_liere_relative` (whether a learned-rotation encoding's score depends only on the 2D
offset: LieRE, ComRoPE) and :func:`plot_rope_dinov3_coords` (the patch coordinates DINOv3's
``normalize_coords`` and coordinate augmentation give RoPE).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from .figure import describe, new_figure, save_png

__all__ = ["plot_liere_relative", "plot_rope_dinov3_coords", "plot_rope_mixed_frequencies"]


def plot_rope_mixed_frequencies(encoding: nn.Module, path: str | Path, *,
                                title: str | None = None, figsize: tuple[float, float] | None
                                = None, dpi: int = 100) -> Path:
    """RoPE-Mixed frequency vectors ``(column freq, row freq)`` of every rotary pair, one
    panel per head; a pair turns by ``row * f_row + col * f_col`` radians, so its arrow is
    the direction in the image along which it rotates fastest.

    Args:
        encoding: ``posenc.spatial.RoPE2D`` with ``variant="mixed"`` (initial or trained).
        figsize: default ``(3 * columns, 3 * rows + 0.8)`` for a grid of at most 4 columns.
    """
    freqs = getattr(encoding, "freqs", None)
    if not isinstance(freqs, Tensor) or freqs.ndim != 3 or freqs.shape[0] != 2:
        raise TypeError("encoding must be a RoPE2D with variant='mixed' (learnable freqs of "
                        f"shape (2, heads, pairs)), got {describe(encoding)}")
    freqs = freqs.detach().float().cpu().numpy()
    scale = float(getattr(encoding, "scale", 1.0))
    f_row, f_col = freqs[0] * scale, freqs[1] * scale
    num_heads, pairs = f_row.shape
    ncols = min(num_heads, 4)
    nrows = -(-num_heads // ncols)
    fig = new_figure(figsize or (3 * ncols + 1, 3 * nrows + 0.8), dpi)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    norm = Normalize(0, pairs - 1)
    colors = colormaps["viridis"](norm(np.arange(pairs)))
    lim = 1.1 * float(np.hypot(f_row, f_col).max() or 1.0)
    for h, ax in enumerate(axes):
        if h >= num_heads:
            ax.set_axis_off()
            continue
        zeros = np.zeros(pairs)
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


def _offset_scores(encoding: nn.Module, q: Tensor, anchor: Tensor, offsets: Tensor
                   ) -> np.ndarray:
    """``(N,)`` score ``q . k / |q|^2`` of head 0 with ``q = k`` (``(head_dim,)``), the query
    turned at ``anchor + offsets`` and the key at ``anchor``: 1 at offset 0, as rotations keep
    norms."""
    heads, n = encoding.num_heads, offsets.shape[0]
    with torch.no_grad():
        turned_q = encoding.rotate(q.expand(1, heads, n, -1), anchor + offsets)[0, 0]
        turned_k = encoding.rotate(q.expand(1, heads, 1, -1), anchor[None])[0, 0, 0]
    return (turned_q.double() @ turned_k.double()).numpy() / float(q.norm()) ** 2


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
    """Is the ``q . k`` score a function of the 2D offset alone? One random vector ``q = k ~
    N(0, I)`` (from ``seed``), the query turned at ``anchor + (d_row, d_col)`` and the key at
    ``anchor``, for every offset in ``[-window, window]^2``.

    One heat map per encoding of the score (divided by ``|q|^2``: 1 at offset 0, in
    ``[-1, 1]``) at the first anchor, and a bar panel (log scale) of ``max |map(anchor_i) -
    map(anchor_0)|`` over the offsets for each further anchor: float32 rounding (~1e-7) for a
    relative encoding (ComRoPE, LieRE at its RoPE-Mixed init, RoPE2D), far more where the
    generators do not commute (LieRE with ``init="random"``, or trained).

    Args:
        encodings: 1 to 4 2D rotary encodings with ``rotate((B, H, N, head_dim), (N, 2))``
            and ``num_heads`` (``LieRE``, ``RoPE2D``); head 0 is shown.
        window: offsets ``-window .. window`` along each axis.
        anchors: at least two ``(row, col)`` patch positions of the key; the maps are compared
            with the first one's.
        figsize: default ``(3.6 * len(encodings) + 5, 4.4)``.
    """
    from matplotlib.ticker import MaxNLocator
    from posenc.core.encoding import check_int, check_positive_int
    from posenc.spatial import patch_coords

    if isinstance(encodings, nn.Module) or not 1 <= len(encodings) <= 4 or not all(
            getattr(e, "kind", None) == "rotary" and hasattr(e, "num_heads") for e in encodings):
        raise TypeError(f"encodings must be a list of 1 to 4 2D rotary encodings (LieRE, "
                        f"RoPE2D), got {encodings!r}"[:300])
    window = check_positive_int(window, "window")
    try:
        anchors = [tuple(a) for a in anchors]
    except TypeError:  # not a sequence of pairs
        pass
    if not isinstance(anchors, list) or len(anchors) < 2 or not all(
            len(a) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in a)
            for a in anchors):
        raise ValueError(f"anchors must be at least two (row, col) int pairs, got {anchors!r}")
    check_int(seed, "seed")
    side = 2 * window + 1
    offsets = patch_coords(side) - window  # (side * side, 2) row-major (d_row, d_col)
    maps = []
    for encoding in encodings:
        q = torch.randn(encoding.head_dim, generator=torch.Generator().manual_seed(seed))
        maps.append(np.stack([_offset_scores(encoding, q, torch.tensor(a, dtype=torch.float32),
                                             offsets).reshape(side, side) for a in anchors]))
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
                 f"d_col), key at anchor; maps at anchor {anchors[0]}, head 0",
                 fontsize="medium")
    return save_png(fig, path)


#: What each DINOv3 ``normalize_coords`` divides the centred patch indices by (panel titles).
_NORMALIZE_COORDS_TEXT = {"separate": "each axis by its own size", "min": "both by the shorter "
                          "side", "max": "both by the longer side"}


def _draw_coords(ax: object, coords: Tensor, color: object, label: str | None) -> None:
    """Patch centres ``(row, col)`` as points (x = column, y = row) and the box through the
    outer ones."""
    from matplotlib.patches import Rectangle

    row, col = coords.double().numpy().T
    ax.scatter(col, row, s=9, color=color, label=label, zorder=3)
    ax.add_patch(Rectangle((col.min(), row.min()), np.ptp(col), np.ptp(row), fill=False,
                           ec=color, lw=1.2, zorder=2))


#: The legend title of each augmentation panel: what its draw labels give.
_DRAW_LEGEND = {"shift_coords": "draw: shift (row, col)", "jitter_coords": "draw: scale "
                "(row, col)", "rescale_coords": "draw: scale of both axes"}


def _affine_label(step: str, draw: int, base: Tensor, moved: Tensor) -> str:
    """``k: (+s_row, +s_col)`` / ``k: (j_row, j_col)`` / ``k: r``: the per-axis transform that
    took ``base`` to ``moved`` (a shift, or a scale), read back from the points."""
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
    """The patch coordinates RoPE sees under DINOv3's options, points ``(row, col)`` (row
    down, as in the image) with the box through the outer patch centres and ``[-1, 1]^2``
    dashed.

    Top: ``normalize_coords`` ``"separate"``, ``"min"`` and ``"max"`` (eval:
    ``patch_coords(grid_size, RoPE2D(..., normalize_coords=...).normalize)``). Bottom: the
    training-time coordinate augmentation of :class:`RoPE2D`, one step per panel (shift,
    jitter, rescale: its ``coord_augment``, a :class:`~posenc.spatial.coords.CoordAugment`), on the
    ``normalize_coords`` system: the eval points in grey and ``num_draws`` draws from a
    generator seeded with ``seed`` (one generator per panel).

    Args:
        grid_size: ``(rows, cols)`` patches, each at least 2; non-square shows what
            ``"min"``/``"max"`` do to the aspect ratio.
        shift_coords: RoPE2D's augmentation argument (``>= 0``).
        jitter_coords: RoPE2D's augmentation argument (a factor ``>= 1``).
        rescale_coords: RoPE2D's augmentation argument (a factor ``>= 1``).
        normalize_coords: the system the augmentation panels start from.
        num_draws: 1 to 6 draws per augmentation panel.
    """
    from matplotlib.patches import Rectangle
    from posenc.core.encoding import check_int, check_positive_int
    from posenc.spatial import RoPE2D, patch_coords
    from posenc.spatial.coords import check_grid_size
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
    for ax, option, coords in zip(axes[0], NORMALIZE_COORDS, normalized, strict=True):
        _draw_coords(ax, coords, "C0", None)
        ax.set_title(f'normalize_coords="{option}"\n{_NORMALIZE_COORDS_TEXT[option]}',
                     fontsize="medium")
    ranges = {"shift_coords": "+ U[-{v:g}, {v:g}] per axis",
              "jitter_coords": "x [1/{v:g}, {v:g}] per axis",
              "rescale_coords": "x [1/{v:g}, {v:g}], both axes"}
    for j, (ax, (step, value, base, draws)) in enumerate(zip(axes[1], augmented, strict=True)):
        _draw_coords(ax, base, "0.6", "eval (no augmentation)")
        for i, moved in enumerate(draws):
            _draw_coords(ax, moved, f"C{i + 1}", _affine_label(step, i + 1, base, moved))
        ax.set_title(f"{step}={value:g}: {ranges[step].format(v=value)}", fontsize="medium")
        key = fig.add_subplot(grid[2, j])
        key.set_axis_off()
        key.legend(*ax.get_legend_handles_labels(), ncol=2, loc="upper center", frameon=False,
                   title=_DRAW_LEGEND[step], fontsize="small", title_fontsize="small")
    for ax in axes.ravel():
        ax.add_patch(Rectangle((-1, -1), 2, 2, fill=False, ec="0.5", ls="--", lw=0.8))
        ax.set_aspect("equal", adjustable="box")
        ax.set(xlim=(low[1], high[1]), ylim=(high[0], low[0]))  # row 0 at the top
    for ax in axes[1]:
        ax.set_xlabel("column coordinate")
    for ax in axes[:, 0]:
        ax.set_ylabel("row coordinate")
    for ax in axes[0]:
        ax.tick_params(labelbottom=False)
    for ax in axes[:, 1:].ravel():
        ax.tick_params(labelleft=False)
    fig.suptitle(title or f"Patch coordinates RoPE sees, {rows}x{cols} grid (DINOv3 options; "
                 f'augmentation on normalize_coords="{normalize_coords}", seed {seed}); '
                 "dashed: [-1, 1]^2", fontsize="medium")
    return save_png(fig, path)
