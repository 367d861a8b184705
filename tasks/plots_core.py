"""Plots of the 1D encodings in ``posenc.core`` (each renders a PNG and returns its path):

- additive: :func:`plot_additive_1d` (encoding heatmap, position x dimension, and the
  cosine-similarity matrix of positions), for ``SinusoidalEncoding`` / ``LearnedEncoding``;
- rotary: :func:`plot_rope_scores` (q.k score vs relative distance);
- bias: :func:`plot_bias_vs_distance` (bias per head vs key - query; T5 adds its buckets).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from posenc.core import check_positive_int
from torch import nn

from .plots_figure import cosine_matrix, describe, new_figure, save_png

__all__ = ["plot_additive_1d", "plot_rope_scores", "plot_bias_vs_distance"]


def _head_colors(num_heads: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    return [cmap(h / max(num_heads - 1, 1) * 0.9) for h in range(num_heads)]


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
    fig = new_figure(figsize, dpi)
    ax_enc, ax_sim = fig.subplots(1, 2, width_ratios=(1.2, 1))
    vmax = float(np.abs(values).max()) or 1.0
    image = ax_enc.imshow(values, aspect="auto", cmap="RdBu_r", vmin=-vmax, vmax=vmax,
                          interpolation="nearest")
    ax_enc.set(xlabel="dimension", ylabel="position", title="encoding value")
    fig.colorbar(image, ax=ax_enc, label="value")
    image = ax_sim.imshow(cosine_matrix(enc), cmap="RdBu_r", vmin=-1, vmax=1,
                          interpolation="nearest")
    ax_sim.set(xlabel="position j", ylabel="position i",
               title="cosine similarity of positions i and j")
    fig.colorbar(image, ax=ax_sim, label="cosine similarity")
    fig.suptitle(title or describe(encoding))
    return save_png(fig, path)


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
    fig = new_figure(figsize, dpi)
    ax = fig.subplots()
    ax.fill_between(x, mean - std, mean + std, color="C1", alpha=0.25,
                    label=f"random q = k ~ N(0, I): +-1 std over {num_samples} draws")
    ax.plot(x, mean, color="C1", lw=1, ls="--",
            label="random q = k: mean (equals the ones curve in expectation)")
    ax.plot(x, ones_score.numpy(), color="C0", lw=1.5, label="q = k = ones")
    ax.axhline(0, color="0.5", lw=0.8)
    ax.set(xlabel="relative distance m - n (tokens)", ylabel="q_m . k_n / head_dim",
           xlim=(0, max_distance))
    ax.set_title(title or f"RoPE score vs relative distance\n{describe(encoding)}",
                 fontsize="medium")
    ax.legend()
    return save_png(fig, path)


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
    fig = new_figure(figsize, dpi)
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
    fig.suptitle(title or describe(encoding))
    return save_png(fig, path)
