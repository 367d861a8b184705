"""Plots of the 1D encodings in ``posenc.core`` (each renders a PNG and returns its path):

- additive: :func:`plot_additive_1d` (encoding heatmap, position x dimension, and the
  cosine-similarity matrix of positions), for ``SinusoidalEncoding`` / ``LearnedEncoding``;
- rotary: :func:`plot_rope_scores` (q.k score vs relative distance; RoPE or xPos) and
  :func:`plot_xpos_decay` (xPos's score and per-pair decay next to RoPE's score);
- bias: :func:`plot_bias_vs_distance` (bias per head vs key - query; T5 adds its buckets) and
  :func:`plot_bias_comparison` (one panel per bias family, e.g. ALiBi, KERPLE log/power and
  FIRE at init, bias per head vs query - key).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from posenc.core import apply_rotation
from posenc.core.encoding import check_positive_int
from torch import Tensor, nn

from .figure import cosine_matrix, describe, new_figure, save_png

__all__ = ["plot_additive_1d", "plot_rope_scores", "plot_xpos_decay", "plot_bias_vs_distance",
           "plot_bias_comparison"]


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


def _rotary_scores(encoding: nn.Module, vectors: Tensor, distance: Tensor) -> Tensor:
    """``(S, head_dim)`` vectors ``q = k`` -> ``(S, D)`` scores ``q_d . k_0 / head_dim`` of a
    query at each of the ``(D,)`` positions ``distance`` against the key at position 0.

    Queries turn by ``encoding.rotation``, keys by ``encoding.key_rotation`` where it has one
    (xPos scales keys by the inverse), as :class:`~posenc.core.MultiheadAttention` turns them.
    """
    x = vectors[:, None, None, :]
    key_rotation = getattr(encoding, "key_rotation", encoding.rotation)
    with torch.no_grad():
        q = apply_rotation(x.expand(-1, 1, len(distance), -1), encoding.rotation(distance))
        k = apply_rotation(x, key_rotation(torch.zeros(1, dtype=torch.long)))
    return (q * k).sum(-1)[:, 0] / encoding.head_dim


def plot_rope_scores(encoding: nn.Module, path: str | Path, *, max_distance: int = 256,
                     num_samples: int = 256, seed: int = 0, title: str | None = None,
                     figsize: tuple[float, float] = (9, 5), dpi: int = 100) -> Path:
    """RoPE attention score ``rotate(q, m) . rotate(k, n)`` against ``m - n``, divided by
    ``head_dim`` so that both curves start at 1.

    Shown: ``q = k = ones`` (RoFormer's long-term-decay figure) and the mean and +-1 std band
    over ``num_samples`` Gaussian vectors ``q = k`` (the mean equals the ones curve in
    expectation; the band shows how far one vector strays from it).

    Args:
        encoding: a 1D rotary encoding with ``head_dim`` and ``rotation(positions (N,))``
            (``posenc.core.RotaryEncoding``; ``XPos``, whose keys turn by ``key_rotation``).
        max_distance: largest relative distance shown.
    """
    check_positive_int(max_distance, "max_distance")
    check_positive_int(num_samples, "num_samples")
    head_dim = encoding.head_dim
    distance = torch.arange(max_distance + 1)
    gen = torch.Generator().manual_seed(seed)
    ones_score = _rotary_scores(encoding, torch.ones(1, head_dim), distance)[0]
    scores = _rotary_scores(encoding, torch.randn(num_samples, head_dim, generator=gen),
                            distance)
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
    name = "xPos" if hasattr(encoding, "key_rotation") else "RoPE"
    ax.set_title(title or f"{name} score vs relative distance\n"
                 f"{describe(encoding)}", fontsize="medium")
    ax.legend()
    return save_png(fig, path)


def plot_xpos_decay(encoding: nn.Module, path: str | Path, *, rope: nn.Module | None = None,
                    max_distance: int = 1024, title: str | None = None,
                    figsize: tuple[float, float] = (13, 5), dpi: int = 100) -> Path:
    """xPos next to RoPE: the ``q = k = ones`` score against the distance ``m - n`` (query
    after key, the causal case) and the decay ``zeta_i ** ((m - n) / scale_base)`` of every
    rotary pair.

    Left: RoPE's score (RoFormer's long-term decay, which comes from the rotations alone),
    xPos's score, and xPos's mean decay over pairs (the score with the rotations taken out:
    its envelope). Right: each pair's decay, coloured by its wavelength ``2 pi / freq``.

    Args:
        encoding: a ``posenc.core.XPos``.
        rope: the RoPE it is compared with; None: ``RotaryEncoding`` of the same
            ``head_dim``, ``base``, ``rotary_dim`` and ``layout``.
        max_distance: largest distance shown (within ``encoding.max_offset(torch.float32)``
            of its centre, else the rotation raises).
    """
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import LogNorm
    from posenc.core import RotaryEncoding, XPos

    if not isinstance(encoding, XPos):
        raise TypeError(f"encoding must be a posenc.core.XPos, got {type(encoding).__name__}")
    check_positive_int(max_distance, "max_distance")
    if rope is None:
        rope = RotaryEncoding(encoding.head_dim, encoding.base, rotary_dim=encoding.rotary_dim,
                              layout=encoding.layout)
    distance = torch.arange(max_distance + 1)
    ones = torch.ones(1, encoding.head_dim)
    xpos_score = _rotary_scores(encoding, ones, distance)[0].numpy()
    rope_score = _rotary_scores(rope, ones, distance)[0].numpy()
    origin = torch.zeros(1, dtype=torch.long)
    decay = (encoding.scale(distance) / encoding.scale(origin)).numpy()  # (D, pairs)
    x = distance.numpy()
    fig = new_figure(figsize, dpi)
    ax_score, ax_pairs = fig.subplots(1, 2)
    ax_score.plot(x, rope_score, color="0.55", lw=1.2,
                  label=f"RoPE (base {float(rope.base):g}), q = k = ones")
    ax_score.plot(x, xpos_score, color="C0", lw=1.5, label="xPos, q = k = ones")
    ax_score.plot(x, decay.mean(1), color="C3", ls="--", lw=1.2,
                  label="xPos mean decay over pairs (its envelope)")
    ax_score.axhline(0, color="0.5", lw=0.8)
    ax_score.set(xlabel="relative distance m - n (tokens, query after key)",
                 ylabel="q_m . k_n / head_dim  (q = k = ones)", xlim=(0, max_distance),
                 title="score vs distance")
    ax_score.legend(fontsize="small", loc="upper right")
    wavelength = (2 * torch.pi / encoding.inv_freq64).numpy()
    norm = LogNorm(wavelength.min(), wavelength.max())
    cmap = colormaps["viridis"]
    for pair in range(decay.shape[1]):
        ax_pairs.plot(x, decay[:, pair], color=cmap(norm(wavelength[pair])), lw=0.9)
    ax_pairs.set(xlabel="relative distance m - n (tokens, query after key)",
                 ylabel="zeta_i ** ((m - n) / scale_base)", xlim=(0, max_distance),
                 ylim=(0, 1.02), title="decay of each rotary pair")
    fig.colorbar(ScalarMappable(norm, cmap), ax=ax_pairs, label="wavelength of the pair (tokens)")
    fig.suptitle(title or describe(encoding), fontsize="medium")
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
    from posenc.core import ALiBi, T5RelativeBias
    from posenc.core.bias import t5_relative_bucket

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


def _bias_family(encoding: nn.Module) -> str:
    """A short panel title: the class and what tells its curves apart."""
    from posenc.core import FIRE, Kerple

    if isinstance(encoding, Kerple):
        return f"KERPLE {encoding.kernel}: -r1 log(1 + r2 d)" if encoding.kernel == "log" \
            else "KERPLE power: -r1 d ** r2"
    if isinstance(encoding, FIRE):
        return (f"FIRE at init: MLP(log(1 + c d) / log(1 + c L)), L = "
                f"{float(encoding.threshold.detach()):g}")
    return type(encoding).__name__


def _head_labels(encoding: nn.Module) -> list[str]:
    """Legend entry of each head: the parameters that set its curve, where it has few."""
    from posenc.core import ALiBi, Kerple

    if isinstance(encoding, ALiBi):
        return [f"head {h}: slope {s:.3g}" for h, s in enumerate(encoding.slopes.tolist())]
    if isinstance(encoding, Kerple):
        return [f"head {h}: r1 {r1:.2f}, r2 {r2:.2f}" for h, (r1, r2) in
                enumerate(zip(encoding.r1.detach().tolist(), encoding.r2.detach().tolist(),
                                 strict=True))]
    return [f"head {h}" for h in range(encoding.num_heads)]


def plot_bias_comparison(encodings: Sequence[nn.Module], path: str | Path, *,
                         max_distance: int = 128, title: str | None = None,
                         figsize: tuple[float, float] | None = None, dpi: int = 100) -> Path:
    """Bias families side by side: one panel per encoding, its bias per head against the
    distance ``d = query - key`` of keys at or before the query (``0 .. max_distance``).

    The query sits at position ``max_distance`` and the keys at ``0 .. max_distance``, so a
    causal encoding masks none of them; symmetric ones (``causal=False`` ALiBi/KERPLE) give
    the same curves for keys after the query. FIRE depends on the offset alone while
    ``max_distance <= L`` (its threshold); beyond, on the offset relative to the position.

    Args:
        encodings: 1D bias encodings ``(q_positions, k_positions) -> (1, H, Nq, Nk)``
            (``ALiBi``, ``Kerple``, ``FIRE``, ``T5RelativeBias``, ...), at most 6.
        max_distance: largest distance shown.
        figsize: default ``(6 * columns, 4 * rows + 0.6)`` for 2 columns.
    """
    check_positive_int(max_distance, "max_distance")
    if isinstance(encodings, nn.Module) or not 1 <= len(encodings) <= 6 or not all(
            isinstance(e, nn.Module) for e in encodings):
        raise TypeError(f"encodings must be a list of 1 to 6 bias encodings (nn.Module), got "
                        f"{encodings!r}"[:300])
    query = torch.tensor([max_distance])
    keys = torch.arange(max_distance + 1)
    distance = (query - keys).numpy()  # max_distance .. 0
    ncols = min(len(encodings), 2)
    nrows = -(-len(encodings) // ncols)
    fig = new_figure(figsize or (6 * ncols, 4 * nrows + 0.6), dpi)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, sharex=True)).ravel()
    for ax, encoding in zip(axes, encodings, strict=False):
        with torch.no_grad():
            bias = encoding(query, keys)[0, :, 0, :].float().numpy()  # (H, Nk)
        labels = _head_labels(encoding)
        for h, color in enumerate(_head_colors(bias.shape[0])):
            ax.plot(distance, bias[h], color=color, label=labels[h])
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set(title=_bias_family(encoding), ylabel="bias added to the logit",
               xlim=(0, max_distance))
        ax.legend(fontsize="x-small", ncol=2 if bias.shape[0] > 4 else 1, loc="lower left")
    for ax in axes[len(encodings):]:
        ax.set_axis_off()
    for ax in axes[-ncols:]:
        ax.set_xlabel("distance query - key (tokens)")
    fig.suptitle(title or "Relative position biases vs distance (untrained init)",
                 fontsize="medium")
    return save_png(fig, path)
