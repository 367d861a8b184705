"""Plots of what each encoding does (``posenc plot ...``; needs the ``plot`` extra).

Every ``plot_*`` function takes an encoding (or a time zone), computes what it shows through the
encoding's public API, renders a PNG of exactly ``figsize * dpi`` pixels with matplotlib's Agg
canvas (no pyplot, no global backend change) and returns the path:

- 1D additive: :func:`plot_additive_1d` (encoding heatmap, position x dimension, and the
  cosine-similarity matrix of positions), for ``SinusoidalEncoding`` / ``LearnedEncoding``.
- 1D rotary: :func:`plot_rope_scores` (q.k score vs relative distance).
- 1D bias: :func:`plot_bias_vs_distance` (bias per head vs key - query; T5 adds its buckets).
- 2D: :func:`plot_grid_similarity` (the ViT paper's figure: for each patch, the cosine
  similarity of its encoding to every patch) and :func:`plot_rope_mixed_frequencies`
  (RoPE-Mixed frequency vectors per head).
- Time: :func:`plot_calendar_features` and :func:`plot_fourier_features` over a week and a
  year in a time zone, with DST changes marked.

:func:`main` is the command line, ``posenc plot KIND --out DIR [options]``
(``python -m posenc.tasks.plots --help``).
"""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from posenc.core import check_positive_int
from torch import Tensor, nn

__all__ = [
    "KINDS",
    "dst_changes",
    "load_checkpoint_module",
    "main",
    "plot_additive_1d",
    "plot_bias_vs_distance",
    "plot_calendar_features",
    "plot_fourier_features",
    "plot_grid_similarity",
    "plot_rope_mixed_frequencies",
    "plot_rope_scores",
]

KINDS = ("sinusoidal", "learned", "rope", "alibi", "t5", "grid-similarity", "rope-mixed",
         "calendar", "fourier")
GRID_ENCODINGS = ("sincos2d", "learned", "factorized")


# -- figure plumbing ---------------------------------------------------------------------------
def _figure(figsize: tuple[float, float], dpi: int) -> Any:
    """A constrained-layout matplotlib ``Figure`` on an Agg canvas (imported lazily)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("posenc plots need matplotlib, which the 'plot' extra installs: "
                          "pip install 'posenc[plot]'") from err
    check_positive_int(dpi, "dpi")
    fig = Figure(figsize=figsize, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.canvas.print_png(path)  # one draw at the figure's dpi (savefig lays out twice)
    return path


def _describe(module: nn.Module) -> str:
    return f"{type(module).__name__}({module.extra_repr()})"


def _cosine_matrix(enc: Tensor) -> np.ndarray:
    """``(N, dim)`` -> ``(N, N)`` cosine similarities (float64 numpy)."""
    unit = torch.nn.functional.normalize(enc.detach().double(), dim=-1)
    return (unit @ unit.T).cpu().numpy()


def _head_colors(num_heads: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(h / max(num_heads - 1, 1) * 0.9) for h in range(num_heads)]


# -- 1D ----------------------------------------------------------------------------------------
def plot_additive_1d(encoding: nn.Module, path: str | Path, *, num_positions: int = 128,
                     title: str | None = None, figsize: tuple[float, float] = (12, 5),
                     dpi: int = 100) -> Path:
    """Heatmap of ``encoding(0..num_positions-1)`` (position x dimension) and the cosine
    similarity of every pair of positions.

    Args:
        encoding: a 1D additive encoding, ``(N,) positions -> (N, dim)`` (e.g.
            ``SinusoidalEncoding``, ``LearnedEncoding``).
        path: PNG file to write.
        num_positions: positions ``0 .. num_positions - 1``.
    """
    if check_positive_int(num_positions, "num_positions") < 2:
        raise ValueError(f"num_positions must be >= 2, got {num_positions}")
    with torch.no_grad():
        enc = encoding(torch.arange(num_positions)).float()
    if enc.ndim != 2 or enc.shape[0] != num_positions:
        raise ValueError(f"encoding must map ({num_positions},) positions to "
                         f"({num_positions}, dim), got shape {tuple(enc.shape)}")
    values = enc.cpu().numpy()
    fig = _figure(figsize, dpi)
    ax_enc, ax_sim = fig.subplots(1, 2, width_ratios=(1.2, 1))
    vmax = float(np.abs(values).max()) or 1.0
    image = ax_enc.imshow(values, aspect="auto", cmap="RdBu_r", vmin=-vmax, vmax=vmax,
                          interpolation="nearest")
    ax_enc.set(xlabel="dimension", ylabel="position", title="encoding value")
    fig.colorbar(image, ax=ax_enc, label="value")
    image = ax_sim.imshow(_cosine_matrix(enc), cmap="RdBu_r", vmin=-1, vmax=1,
                          interpolation="nearest")
    ax_sim.set(xlabel="position j", ylabel="position i",
               title="cosine similarity of positions i and j")
    fig.colorbar(image, ax=ax_sim, label="cosine similarity")
    fig.suptitle(title or _describe(encoding))
    return _save(fig, path)


def plot_rope_scores(encoding: nn.Module, path: str | Path, *, max_distance: int = 256,
                     num_samples: int = 256, seed: int = 0, title: str | None = None,
                     figsize: tuple[float, float] = (9, 5), dpi: int = 100) -> Path:
    """RoPE attention score ``rotate(q, m) . rotate(k, n)`` against ``m - n``, divided by
    ``head_dim`` so that both curves start at 1.

    Shown: ``q = k = ones`` (RoFormer's long-term-decay figure) and the mean and +-1 std band
    over ``num_samples`` Gaussian vectors ``q = k`` (the mean equals the ones curve in
    expectation; the band shows how far one vector strays from it).

    Args:
        encoding: a rotary encoding with ``head_dim`` and ``rotate(x (B, H, N, head_dim),
            positions (N,))`` (``posenc.core.RotaryEncoding``).
        max_distance: largest relative distance shown.
    """
    check_positive_int(max_distance, "max_distance")
    check_positive_int(num_samples, "num_samples")
    head_dim = encoding.head_dim
    distance = torch.arange(max_distance + 1)
    origin = torch.zeros(1, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    random = torch.randn(num_samples, 1, 1, head_dim, generator=gen)
    with torch.no_grad():
        ones = torch.ones(1, 1, 1, head_dim)
        q = encoding.rotate(ones.expand(1, 1, max_distance + 1, head_dim), distance)
        ones_score = (q * encoding.rotate(ones, origin)).sum(-1)[0, 0] / head_dim
        q = encoding.rotate(random.expand(-1, -1, max_distance + 1, -1), distance)
        scores = (q * encoding.rotate(random, origin)).sum(-1)[:, 0] / head_dim
    mean, std = scores.mean(0).numpy(), scores.std(0).numpy()
    x = distance.numpy()
    fig = _figure(figsize, dpi)
    ax = fig.subplots()
    ax.fill_between(x, mean - std, mean + std, color="C1", alpha=0.25,
                    label=f"random q = k ~ N(0, I): +-1 std over {num_samples} draws")
    ax.plot(x, mean, color="C1", lw=1, ls="--",
            label="random q = k: mean (equals the ones curve in expectation)")
    ax.plot(x, ones_score.numpy(), color="C0", lw=1.5, label="q = k = ones")
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set(xlabel="relative distance m - n (tokens)", ylabel="q_m . k_n / head_dim",
           xlim=(0, max_distance))
    ax.set_title(title or f"RoPE score vs relative distance\n{_describe(encoding)}",
                 fontsize="medium")
    ax.legend()
    return _save(fig, path)


def plot_bias_vs_distance(encoding: nn.Module, path: str | Path, *, max_distance: int = 64,
                          title: str | None = None, figsize: tuple[float, float] = (10, 5),
                          dpi: int = 100) -> Path:
    """Attention-logit bias of each head against the offset ``key - query``.

    Args:
        encoding: a 1D bias encoding ``(q_positions, k_positions) -> (1, H, Nq, Nk)``
            (``ALiBi``, ``T5RelativeBias``, ``ClippedRelativeBias``). Masked keys (causal
            ALiBi) are left out of the curves. ALiBi is drawn as one line per head, learned
            tables as a heads x offset map; ``T5RelativeBias`` adds a panel with the bucket of
            each offset, on a symlog axis (exact buckets near 0, log-spaced beyond).
        max_distance: offsets ``-max_distance .. max_distance``.
    """
    from posenc.core import ALiBi, T5RelativeBias, t5_relative_bucket

    check_positive_int(max_distance, "max_distance")
    query = torch.tensor([max_distance])
    keys = torch.arange(2 * max_distance + 1)
    with torch.no_grad():
        bias = encoding(query, keys)[0, :, 0, :].float().numpy()
    bias = np.where(np.isfinite(bias), bias, np.nan)
    offsets = (keys - query).numpy()
    is_t5 = isinstance(encoding, T5RelativeBias)
    num_heads = bias.shape[0]
    fig = _figure(figsize, dpi)
    axes = fig.subplots(1, 2, width_ratios=(2, 1)) if is_t5 else [fig.subplots()]
    ax = axes[0]
    if isinstance(encoding, ALiBi):
        slopes = encoding.slopes.float().tolist()
        for h, color in enumerate(_head_colors(num_heads)):
            ax.plot(offsets, bias[h], color=color, label=f"head {h} (slope {slopes[h]:.3g})")
        if np.isnan(bias).any():
            ax.axvspan(0.5, max_distance, color="0.85", label="future keys: -inf (causal)")
        ax.axvline(0, color="0.5", lw=0.8)
        ax.set(ylabel="bias added to the logit", title="bias per head")
        ax.legend(fontsize="small", ncol=2 if num_heads > 8 else 1,
                  loc="lower right" if encoding.causal else "lower center")
    else:
        # Learned tables: one row per head, so bucket plateaus line up across heads.
        vmax = float(np.nanmax(np.abs(bias))) or 1.0
        mesh = ax.pcolormesh(np.append(offsets - 0.5, offsets[-1] + 0.5),
                             np.arange(num_heads + 1) - 0.5, bias, cmap="RdBu_r", vmin=-vmax,
                             vmax=vmax)
        ax.set(ylabel="head", title="bias per head", yticks=range(num_heads))
        ax.invert_yaxis()
        fig.colorbar(mesh, ax=ax, label="bias added to the logit")
    ax.set(xlabel="relative distance key - query (tokens)",
           xlim=(-max_distance - 0.5, max_distance + 0.5))
    if is_t5:
        buckets = t5_relative_bucket(keys - query, encoding.bidirectional,
                                     encoding.num_buckets, encoding.max_distance)
        axes[1].plot(offsets, buckets.numpy(), drawstyle="steps-mid", color="C3")
        axes[1].set(xlabel="relative distance key - query (tokens)", ylabel="bucket id",
                    title="T5 bucket of each offset", xlim=ax.get_xlim())
        # Exact buckets near 0, log-spaced beyond: a symlog axis shows both.
        exact = encoding.num_buckets // (4 if encoding.bidirectional else 2)
        ticks = [0] + [exact * 4**i for i in range(8) if exact * 4**i <= max_distance]
        ticks = sorted({sign * t for t in ticks for sign in (-1, 1)})
        for a in axes:
            a.set_xscale("symlog", linthresh=exact)
            a.set_xticks(ticks, [str(t) for t in ticks], fontsize="small")
    fig.suptitle(title or _describe(encoding))
    return _save(fig, path)


# -- 2D ----------------------------------------------------------------------------------------
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
    from posenc.spatial import check_grid_size

    rows, cols = check_grid_size(grid_size)
    if not hasattr(encoding, "encode_grid"):
        raise TypeError(f"encoding must be an additive 2D encoding with encode_grid() (one of "
                        f"{list(GRID_ENCODINGS)}), got {type(encoding).__name__}")
    with torch.no_grad():
        enc = encoding.encode_grid((rows, cols)).float()
    sim = _cosine_matrix(enc).reshape(rows, cols, rows, cols)
    pad = 1
    mosaic = np.full((rows * (rows + pad) - pad, cols * (cols + pad) - pad), np.nan)
    for i in range(rows):
        for j in range(cols):
            top, left = i * (rows + pad), j * (cols + pad)
            mosaic[top:top + rows, left:left + cols] = sim[i, j]
    height = min(max(6.4 * mosaic.shape[0] / mosaic.shape[1] + 1.2, 3.0), 12.0)
    fig = _figure(figsize or (8, round(height, 1)), dpi)
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
                 f"{_describe(encoding)}", fontsize="medium")
    return _save(fig, path)


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
                        f"shape (2, heads, pairs)), got {_describe(encoding)}")
    freqs = freqs.detach().float().cpu().numpy()
    scale = float(getattr(encoding, "scale", 1.0))
    f_row, f_col = freqs[0] * scale, freqs[1] * scale
    num_heads, pairs = f_row.shape
    ncols = min(num_heads, 4)
    nrows = -(-num_heads // ncols)
    fig = _figure(figsize or (3 * ncols + 1, 3 * nrows + 0.8), dpi)
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
    fig.suptitle(title or f"RoPE-Mixed frequencies per head: {_describe(encoding)}",
                 fontsize="medium")
    return _save(fig, path)


# -- time --------------------------------------------------------------------------------------
def _start_time(start: Any, tz: str) -> Any:
    """``start`` (anything ``pandas.Timestamp`` reads) as a timestamp in zone ``tz``."""
    import pandas as pd

    try:
        stamp = pd.Timestamp(start)
        return stamp.tz_convert(tz) if stamp.tz is not None else stamp.tz_localize(tz)
    except (ValueError, TypeError, KeyError) as err:  # unknown zone, bad or nonexistent time
        raise ValueError(f"start={start!r} in tz={tz!r} is not a valid local time (give a "
                         f"time zone name such as 'America/New_York' and an ISO date): {err}"
                         ) from err


def _utc_offset_hours(index: Any) -> np.ndarray:
    import pandas as pd

    delta = index.tz_localize(None) - index.tz_convert("UTC").tz_localize(None)
    return np.asarray(delta / pd.Timedelta(hours=1), dtype=np.float64)


def dst_changes(first: Any, last: Any) -> list[tuple[Any, float, float]]:
    """UTC-offset changes between two tz-aware timestamps, found on an hourly scan.

    Returns:
        ``[(first hourly sample after the change, offset before, offset after)]``, offsets
        in hours (e.g. New York 2024: ``(2024-03-10 03:00-04:00, -5.0, -4.0)`` and
        ``(2024-11-03 01:00-05:00, -4.0, -5.0)``).
    """
    import pandas as pd

    hourly = pd.date_range(first, last, freq="h")
    offsets = _utc_offset_hours(hourly)
    return [(hourly[i], float(offsets[i - 1]), float(offsets[i]))
            for i in np.flatnonzero(np.diff(offsets)) + 1]


def _windows(tz: str, start: Any, days: int) -> list[tuple[str, Any, str]]:
    """The week (hourly samples) and year (one sample every 24 h) windows from ``start``."""
    import pandas as pd

    check_positive_int(days, "days")
    first = _start_time(start, tz)
    week = pd.date_range(first, periods=days * 24 + 1, freq="h")
    year = pd.date_range(first, periods=366, freq="24h")
    return [(f"{days} days, hourly", week, "D"), ("one year, every 24 h", year, "MS")]


def _draw_time_panels(fig: Any, panels: list[dict], tz: str) -> None:
    """Three rows per window column: feature curves, feature heatmap, UTC offset; vertical
    lines mark each DST change (found on an hourly scan of the window)."""
    import pandas as pd

    grid = fig.add_gridspec(3, len(panels), height_ratios=(3, 3, 1))
    for col, panel in enumerate(panels):
        index = panel["index"]
        day = pd.Timedelta(days=1)
        x = np.asarray((index - index[0]) / day, dtype=np.float64)
        ax_line = fig.add_subplot(grid[0, col])
        ax_map = fig.add_subplot(grid[1, col], sharex=ax_line)
        ax_off = fig.add_subplot(grid[2, col], sharex=ax_line)
        for label, values, style in panel["lines"]:
            ax_line.plot(x, values, label=label, **style)
        ax_line.set(title=panel["title"], ylabel="feature value", ylim=(-2.0, 1.1))
        ax_line.legend(fontsize="x-small", ncol=2, loc="lower center")
        feats = panel["features"]
        dx = x[1] - x[0]
        image = ax_map.imshow(feats.T, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1,
                              interpolation="nearest",
                              extent=(x[0] - dx / 2, x[-1] + dx / 2, feats.shape[1] - 0.5, -0.5))
        ax_map.set_yticks(range(feats.shape[1]), panel["names"], fontsize="x-small")
        ax_map.set_title(panel["map_title"], fontsize="medium")
        fig.colorbar(image, ax=ax_map, label="value", pad=0.01)
        offsets = _utc_offset_hours(index)
        ax_off.step(x, offsets, where="post", color="k")
        ax_off.set(ylabel="UTC offset (h)", xlabel=f"local date ({tz})",
                   ylim=(offsets.min() - 0.6, offsets.max() + 0.6))
        # Ticks at local midnights (week) or month starts (year).
        dates = pd.date_range(index[0].tz_localize(None).normalize(),
                              index[-1].tz_localize(None), freq=panel["ticks"])
        dates = dates.tz_localize(tz, ambiguous=True, nonexistent="shift_forward")
        ticks = np.asarray((dates - index[0]) / day, dtype=np.float64)
        keep = (ticks >= x[0]) & (ticks <= x[-1])
        fmt = "%b %d" if panel["ticks"] == "D" else "%b"
        ax_off.set_xticks(ticks[keep], [d.strftime(fmt) for d in dates[keep]],
                          fontsize="small")
        for ax in (ax_line, ax_map):
            ax.tick_params(labelbottom=False)
        ax_line.set_xlim(x[0], x[-1])
        for when, before, after in dst_changes(index[0], index[-1]):
            at = float((when - index[0]) / day)
            what = "DST starts" if after > before else "DST ends"
            for ax in (ax_line, ax_map, ax_off):
                ax.axvline(at, color="C3", ls="--", lw=1.2)
            ax_off.annotate(f"{what} {when.strftime('%b %d %H:%M')}\n"
                            f"UTC{before:+g} -> UTC{after:+g}", (at, (before + after) / 2),
                            fontsize="x-small", color="C3", va="center",
                            ha="left" if at < x[-1] / 2 else "right",
                            xytext=(4 if at < x[-1] / 2 else -4, 0), textcoords="offset points")


def plot_calendar_features(tz: str, path: str | Path, *, start: Any = "2024-03-07",
                           days: int = 7, title: str | None = None,
                           figsize: tuple[float, float] = (15, 9), dpi: int = 100) -> Path:
    """``CalendarFeatures`` (sin/cos on each field's true period, local wall clock) over
    ``days`` days (hourly) and over a year (one sample every 24 h of elapsed time, so the
    local hour steps at each DST change) from ``start`` in zone ``tz``.

    The curves compare ``hour_sin`` on the zone's clock with the same feature on a fixed
    clock at the zone's UTC offset at ``start`` (dashed): they part at a DST change.
    """
    from posenc.temporal import CalendarFeatures, calendar_fields

    panels = []
    for (label, index, ticks), names in zip(
            _windows(tz, start, days),
            (("hour", "day_of_week", "day_of_month", "month"),
             ("hour", "day_of_week", "day_of_month", "day_of_year", "week_of_year", "month")),
            strict=True):
        enc = CalendarFeatures(names)
        feats = enc(calendar_fields(index, fields=enc.required_fields)).numpy()
        fixed_tz = dt.timezone(index[0].utcoffset())
        hour = CalendarFeatures(["hour"])
        fixed = hour(calendar_fields(index, tz=fixed_tz, fields=["hour"])).numpy()
        col = {n: i for i, n in enumerate(enc.feature_names)}
        lines = [("hour_sin (local clock)", feats[:, col["hour_sin"]], {"color": "C0"}),
                 (f"hour_sin (fixed clock, UTC{_utc_offset_hours(index[:1])[0]:+g})",
                  fixed[:, 0], {"color": "C0", "ls": ":", "lw": 2})]
        if "day_of_year_sin" in col:
            lines += [("day_of_year_sin", feats[:, col["day_of_year_sin"]], {"color": "C1"}),
                      ("month_cos", feats[:, col["month_cos"]], {"color": "C2"})]
        else:
            lines += [("hour_cos (local clock)", feats[:, col["hour_cos"]], {"color": "C1"}),
                      ("day_of_week_sin", feats[:, col["day_of_week_sin"]], {"color": "C2"})]
        panels.append({"title": label, "index": index, "ticks": ticks, "lines": lines,
                       "features": feats, "names": enc.feature_names,
                       "map_title": "all features (local wall clock)"})
    fig = _figure(figsize, dpi)
    _draw_time_panels(fig, panels, tz)
    fig.suptitle(title or f"CalendarFeatures in {tz} from {panels[0]['index'][0]}")
    return _save(fig, path)


def plot_fourier_features(tz: str, path: str | Path, *, start: Any = "2024-03-07",
                          days: int = 7, harmonics: int = 3, title: str | None = None,
                          figsize: tuple[float, float] = (15, 9), dpi: int = 100) -> Path:
    """``FourierSeasonality`` (day, week, year periods) over ``days`` days (hourly) and a
    year (every 24 h) from ``start`` in zone ``tz``.

    Its phases are of absolute time: of UTC instants for tz-aware input (which ignore DST),
    of the wall clock for naive local input (which follows it). The curves show ``day_sin1``
    of the local wall clock, of a fixed clock at the zone's UTC offset at ``start`` (dotted;
    the two part at a DST change) and of UTC instants; the heatmap shows all features of the
    tz-aware input.
    """
    from posenc.temporal import FourierSeasonality

    enc = FourierSeasonality(harmonics=harmonics)
    col = {n: i for i, n in enumerate(enc.feature_names)}
    panels = []
    for label, index, ticks in _windows(tz, start, days):
        feats = enc(index).numpy()
        local = enc(index.tz_localize(None)).numpy()
        offset = index[0].utcoffset()
        fixed = enc(index.tz_convert(dt.timezone(offset)).tz_localize(None)).numpy()
        day = col["day_sin1"]
        lines = [("day_sin1, local wall clock (naive input)", local[:, day], {"color": "C0"}),
                 (f"day_sin1, fixed clock UTC{offset / dt.timedelta(hours=1):+g} "
                  "(naive input)", fixed[:, day], {"color": "C0", "ls": ":", "lw": 2}),
                 ("day_sin1, UTC instants (tz-aware input)", feats[:, day],
                  {"color": "0.5", "lw": 1})]
        if ticks == "MS":
            lines += [(name, feats[:, col[name]], {"color": f"C{i + 1}"})
                      for i, name in enumerate(("year_sin1", "year_cos1"))]
        panels.append({"title": label, "index": index, "ticks": ticks, "lines": lines,
                       "features": feats, "names": enc.feature_names,
                       "map_title": "all features, tz-aware input (phases of UTC instants)"})
    fig = _figure(figsize, dpi)
    _draw_time_panels(fig, panels, tz)
    fig.suptitle(title or f"FourierSeasonality({enc.extra_repr()}) in {tz} from "
                 f"{panels[0]['index'][0]}")
    return _save(fig, path)


# -- checkpoints -------------------------------------------------------------------------------
def load_checkpoint_module(path: str | Path) -> nn.Module:
    """The LightningModule saved in a checkpoint, on CPU.

    Checkpoints written by the ``posenc`` CLI name their class; others are read as
    :class:`posenc.tasks.vision.ImageClassifier`.
    """
    from lightning.pytorch import LightningModule

    from . import cli  # noqa: F401  (imports every task module, so class paths resolve)
    from .vision import ImageClassifier

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"checkpoint={str(path)!r} is not a file")
    # The checkpoint's own hyper-parameters may hold arbitrary objects: trust it as Lightning
    # does when it loads it.
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    cls = LightningModule if "_instantiator" in ckpt.get("hyper_parameters", {}) else (
        ImageClassifier)
    return cls.load_from_checkpoint(path, map_location="cpu").eval()


def _find(model: nn.Module, accept: Any, what: str, path: Path) -> nn.Module:
    """The first submodule ``accept`` takes (shared by all blocks when built by name)."""
    for module in model.modules():
        if accept(module):
            return module
    encoding = getattr(model, "hparams", {}).get("encoding", "?")
    raise ValueError(f"checkpoint {str(path)!r} holds no {what}: it is a "
                     f"{type(model).__name__} with encoding={encoding!r}")


def _checkpoint_grid(model: nn.Module) -> tuple[int, int] | None:
    hp = getattr(model, "hparams", {})
    if "img_size" in hp and "patch_size" in hp:
        side = hp["img_size"] // hp["patch_size"]
        return side, side
    return None


# -- command line ------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posenc plot", description="Write PNG plots of what position encodings do.")
    sub = parser.add_subparsers(dest="kind", required=True, metavar="KIND")

    def add(name: str, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--out", type=Path, default=Path("plots"),
                       help="output folder (default: plots)")
        p.add_argument("--dpi", type=int, default=100, help="pixels per inch (default: 100)")
        p.add_argument("--seed", type=int, default=0, help="seed for random initialisations")
        return p

    for name, what in (("sinusoidal", "fixed sinusoidal"), ("learned", "learned (untrained)")):
        p = add(name, f"1D {what} encoding: heatmap and position similarity")
        p.add_argument("--dim", type=int, default=64)
        p.add_argument("--positions", type=int, default=128)
        if name == "sinusoidal":
            p.add_argument("--base", type=float, default=10000.0)
            p.add_argument("--layout", default="interleaved", choices=("interleaved", "concat"))
    p = add("rope", "1D RoPE: q.k score vs relative distance")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--base", type=float, default=10000.0)
    p.add_argument("--max-distance", type=int, default=256)
    p.add_argument("--samples", type=int, default=256, help="random q vectors averaged")
    p = add("alibi", "ALiBi: bias vs distance per head")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--max-distance", type=int, default=64)
    p.add_argument("--causal", action="store_true", help="mask future keys (decoder ALiBi)")
    p = add("t5", "T5 relative bias (untrained init): bias and bucket vs distance per head")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--buckets", type=int, default=32)
    p.add_argument("--bucket-max-distance", type=int, default=128,
                   help="T5 max_distance: offsets beyond share the last bucket")
    p.add_argument("--max-distance", type=int, default=160, help="largest offset plotted")
    p.add_argument("--unidirectional", action="store_true", help="decoder bucketing")
    p = add("grid-similarity", "2D additive encoding: per-patch cosine-similarity grids")
    p.add_argument("--encoding", default="sincos2d", choices=GRID_ENCODINGS)
    p.add_argument("--grid", type=int, nargs=2, metavar=("ROWS", "COLS"), default=None,
                   help="patch grid (default 7 7, or the checkpoint's training grid)")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="a trained model's checkpoint: plot its additive encoding")
    p = add("rope-mixed", "RoPE-Mixed: frequency vectors per head")
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--base", type=float, default=10.0)
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="a trained model's checkpoint: plot its learned frequencies")
    for name in ("calendar", "fourier"):
        p = add(name, f"{name} features over a week and a year in a time zone, DST marked")
        p.add_argument("--tz", default="America/New_York", help="IANA time zone name")
        p.add_argument("--start", default="2024-03-07", help="local start date/time (ISO)")
        p.add_argument("--days", type=int, default=7, help="length of the short window")
        if name == "fourier":
            p.add_argument("--harmonics", type=int, default=3)
    add("all", "every plot above with default settings")
    return parser


def _run(kind: str, args: argparse.Namespace) -> Path:
    from posenc import core, spatial

    out, dpi = args.out, args.dpi
    if kind == "sinusoidal":
        enc = core.SinusoidalEncoding(args.dim, args.base, args.layout)
        return plot_additive_1d(enc, out / "sinusoidal.png", num_positions=args.positions,
                                dpi=dpi)
    if kind == "learned":
        enc = core.LearnedEncoding(args.positions, args.dim)
        return plot_additive_1d(enc, out / "learned.png", num_positions=args.positions, dpi=dpi,
                                title=f"{_describe(enc)}, untrained (trunc-normal init)")
    if kind == "rope":
        enc = core.RotaryEncoding(args.head_dim, args.base)
        return plot_rope_scores(enc, out / "rope.png", max_distance=args.max_distance,
                                num_samples=args.samples, seed=args.seed, dpi=dpi)
    if kind == "alibi":
        enc = core.ALiBi(args.heads, causal=args.causal)
        return plot_bias_vs_distance(enc, out / "alibi.png", max_distance=args.max_distance,
                                     dpi=dpi)
    if kind == "t5":
        enc = core.T5RelativeBias(args.heads, not args.unidirectional, args.buckets,
                                  args.bucket_max_distance)
        return plot_bias_vs_distance(enc, out / "t5.png", max_distance=args.max_distance,
                                     dpi=dpi, title=f"{_describe(enc)}, untrained init")
    if kind == "grid-similarity":
        grid = tuple(args.grid) if args.grid else None
        if args.checkpoint is not None:
            model = load_checkpoint_module(args.checkpoint)
            enc = _find(model, lambda m: getattr(m, "kind", None) == "additive"
                        and hasattr(m, "encode_grid"),
                        "additive 2D encoding (learned, sincos2d, factorized)", args.checkpoint)
            grid = grid or _checkpoint_grid(model) or (7, 7)
            name, title = args.checkpoint.stem, (
                f"Position embedding similarity, {grid[0]}x{grid[1]} grid\n{_describe(enc)} "
                f"from {args.checkpoint.name}")
        else:
            grid = grid or (7, 7)
            kwargs = {"sincos2d": {}, "learned": {"grid_size": grid},
                      "factorized": {"max_grid_size": grid}}[args.encoding]
            enc = spatial.encoding_from_name(args.encoding, dim=args.dim, **kwargs)
            name, title = args.encoding, None
            if args.encoding != "sincos2d":
                title = (f"Position embedding similarity, {grid[0]}x{grid[1]} grid\n"
                         f"{_describe(enc)}, untrained init")
        return plot_grid_similarity(enc, out / f"grid-similarity-{name}.png", grid, dpi=dpi,
                                    title=title)
    if kind == "rope-mixed":
        title = None
        if args.checkpoint is not None:
            model = load_checkpoint_module(args.checkpoint)
            enc = _find(model, lambda m: isinstance(m, spatial.RoPE2D) and m.variant == "mixed",
                        "RoPE2D with variant='mixed'", args.checkpoint)
            title = f"RoPE-Mixed frequencies per head, trained: {args.checkpoint.name}"
        else:
            enc = spatial.RoPE2D(args.head_dim, args.heads, "mixed", args.base)
        return plot_rope_mixed_frequencies(enc, out / "rope-mixed.png", dpi=dpi, title=title)
    if kind == "calendar":
        return plot_calendar_features(args.tz, out / "calendar.png", start=args.start,
                                      days=args.days, dpi=dpi)
    return plot_fourier_features(args.tz, out / "fourier.png", start=args.start,
                                 days=args.days, harmonics=args.harmonics, dpi=dpi)


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """``posenc plot KIND --out DIR [options]``: write the plot(s), print and return paths.

    ``argv`` defaults to ``sys.argv[1:]``; ``KIND`` is one of :data:`KINDS` or ``all``.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    runs = [args] if args.kind != "all" else [
        parser.parse_args([kind, "--out", str(args.out), "--dpi", str(args.dpi),
                           "--seed", str(args.seed)]) for kind in KINDS]
    paths = []
    for run in runs:
        with torch.random.fork_rng(devices=[]):  # seeded inits leave the caller's RNG alone
            torch.manual_seed(run.seed)
            paths.append(_run(run.kind, run))
    for path in paths:
        print(path)
    return paths


if __name__ == "__main__":
    main()
