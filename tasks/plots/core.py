"""The plots' shared plumbing, and the plots of the 1D encodings of ``posenc.core``.

Every plot draws on a constrained-layout ``Figure`` with its own Agg canvas (no pyplot), and
imports matplotlib only when it is made. Titles default to [`describe`][posenc.tasks.plots.describe]
of the encoding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from posenc.core import apply_rotation
from posenc.core._checks import check_int, check_positive_int
from torch import Tensor, nn

__all__ = ["cosine_matrix", "describe", "new_figure", "plot_additive_1d", "plot_bias_comparison",
           "plot_bias_vs_distance", "plot_rope_scores", "plot_xpos_decay", "require_matplotlib",
           "save_png"]


def require_matplotlib() -> None:
    """Raise an ImportError naming the ``plot`` extra if matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as err:
        raise ImportError("posenc plots need matplotlib, which the 'plot' extra installs: "
                          "pip install 'posenc[plot]'") from err


def new_figure(figsize: tuple[float, float], dpi: int) -> Any:
    """A constrained-layout matplotlib ``Figure`` on an Agg canvas."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=check_positive_int(dpi, "dpi"), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` as a PNG, creating its folder; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.canvas.print_png(path)  # one draw at the figure's dpi (savefig lays out twice)
    return path


def describe(module: nn.Module) -> str:
    """``ClassName(extra_repr)``."""
    return f"{type(module).__name__}({module.extra_repr()})"


def cosine_matrix(enc: Tensor) -> np.ndarray:
    """``(N, dim)`` -> ``(N, N)`` cosine similarities (float64 numpy)."""
    unit = torch.nn.functional.normalize(enc.detach().double(), dim=-1)
    return (unit @ unit.T).cpu().numpy()


def check_encodings(encodings: Sequence[nn.Module], most: int, what: str,
                    accept: Callable[[nn.Module], bool] = lambda e: True) -> None:
    """Raise a TypeError unless ``encodings`` is a list of 1 to ``most`` modules ``accept``
    takes (``what`` names them in the message)."""
    if isinstance(encodings, nn.Module) or not 1 <= len(encodings) <= most or not all(
            isinstance(e, nn.Module) and accept(e) for e in encodings):
        raise TypeError(f"encodings must be a list of 1 to {most} {what}, got "
                        f"{encodings!r}"[:300])


def panel_axes(fig: Any, panels: int, max_columns: int, **subplots: Any) -> np.ndarray:
    """``(rows * columns,)`` axes of a grid of at most ``max_columns`` columns, spares off."""
    ncols = min(panels, max_columns)
    axes = fig.subplots(-(-panels // ncols), ncols, squeeze=False, **subplots).ravel()
    for ax in axes[panels:]:
        ax.set_axis_off()
    return axes


def _head_colors(num_heads: int) -> list:
    from matplotlib import colormaps

    return [colormaps["viridis"](h / max(num_heads - 1, 1) * 0.9) for h in range(num_heads)]


def plot_additive_1d(encoding: nn.Module, path: str | Path, *, num_positions: int = 128,
                     title: str | None = None, figsize: tuple[float, float] = (12, 5),
                     dpi: int = 100) -> Path:
    """Heatmap of ``encoding(0..num_positions-1)`` (position x dimension) and the cosine
    similarity of every pair of positions.

    Args:
        encoding: a 1D additive encoding, ``(N,) positions -> (N, dim)``.
        num_positions: positions ``0 .. num_positions - 1`` (at least 2).
    """
    check_int(num_positions, "num_positions", ge=2)
    with torch.no_grad():
        enc = encoding(torch.arange(num_positions)).float()
    if enc.ndim != 2 or enc.shape[0] != num_positions:
        raise ValueError(f"encoding must map ({num_positions},) positions to "
                         f"({num_positions}, dim), got shape {tuple(enc.shape)}")
    values = enc.cpu().numpy()
    fig = new_figure(figsize, dpi)
    ax_enc, ax_sim = fig.subplots(1, 2, width_ratios=(1.2, 1))
    vmax = float(np.abs(values).max()) or 1.0
    for ax, image, limit, label, axes_text in (
            (ax_enc, values, vmax, "value", ("dimension", "position", "encoding value")),
            (ax_sim, cosine_matrix(enc), 1, "cosine similarity",
             ("position j", "position i", "cosine similarity of positions i and j"))):
        shown = ax.imshow(image, aspect="auto" if ax is ax_enc else None, cmap="RdBu_r",
                          vmin=-limit, vmax=limit, interpolation="nearest")
        ax.set(xlabel=axes_text[0], ylabel=axes_text[1], title=axes_text[2])
        fig.colorbar(shown, ax=ax, label=label)
    fig.suptitle(title or describe(encoding))
    return save_png(fig, path)


def _rotary_scores(encoding: nn.Module, vectors: Tensor, distance: Tensor) -> Tensor:
    """``(S, head_dim)`` vectors ``q = k`` -> ``(S, D)`` scores ``q_d . k_0 / head_dim``; keys
    turn by ``key_rotation`` where the encoding has one (xPos)."""
    x = vectors[:, None, None, :]
    key_rotation = getattr(encoding, "key_rotation", encoding.rotation)
    with torch.no_grad():
        q = apply_rotation(x.expand(-1, 1, len(distance), -1), encoding.rotation(distance))
        k = apply_rotation(x, key_rotation(torch.zeros(1, dtype=torch.long)))
    return (q * k).sum(-1)[:, 0] / encoding.head_dim


def plot_rope_scores(encoding: nn.Module, path: str | Path, *, max_distance: int = 256,
                     num_samples: int = 256, seed: int = 0, title: str | None = None,
                     figsize: tuple[float, float] = (9, 5), dpi: int = 100) -> Path:
    """RoPE's score ``rotate(q, m) . rotate(k, n) / head_dim`` against ``m - n`` (1 at 0).

    Shown for ``q = k = ones`` (RoFormer's long-term-decay figure) and as the mean +-1 std band
    over ``num_samples`` Gaussian vectors ``q = k`` drawn from ``seed``.

    Args:
        encoding: ``RotaryEncoding`` or ``XPos`` (``head_dim``, ``rotation(positions (N,))``).
        max_distance: largest relative distance shown.
    """
    check_positive_int(max_distance, "max_distance")
    check_positive_int(num_samples, "num_samples")
    distance = torch.arange(max_distance + 1)
    gen = torch.Generator().manual_seed(seed)
    ones_score = _rotary_scores(encoding, torch.ones(1, encoding.head_dim), distance)[0]
    scores = _rotary_scores(encoding, torch.randn(num_samples, encoding.head_dim, generator=gen),
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
    ax.set_title(title or f"{name} score vs relative distance\n{describe(encoding)}",
                 fontsize="medium")
    ax.legend()
    return save_png(fig, path)


def plot_xpos_decay(encoding: nn.Module, path: str | Path, *, rope: nn.Module | None = None,
                    max_distance: int = 1024, title: str | None = None,
                    figsize: tuple[float, float] = (13, 5), dpi: int = 100) -> Path:
    """xPos next to RoPE against the distance ``m - n`` (query after key, the causal case).

    Left: the ``q = k = ones`` scores of RoPE and xPos, and xPos's mean decay over pairs (its
    envelope). Right: each pair's decay ``zeta_i ** ((m - n) / scale_base)`` by wavelength.

    Args:
        encoding: a ``posenc.core.XPos``.
        rope: the RoPE compared; None: ``RotaryEncoding`` of the same ``head_dim``, ``base``,
            ``rotary_dim`` and ``layout``.
        max_distance: largest distance shown (within ``encoding.max_offset(torch.float32)``).
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
    decay = (encoding.scale(distance) / encoding.scale(distance[:1])).numpy()  # (D, pairs)
    x = distance.numpy()
    fig = new_figure(figsize, dpi)
    ax_score, ax_pairs = fig.subplots(1, 2)
    ax_score.plot(x, _rotary_scores(rope, ones, distance)[0].numpy(), color="0.55", lw=1.2,
                  label=f"RoPE (base {float(rope.base):g}), q = k = ones")
    ax_score.plot(x, _rotary_scores(encoding, ones, distance)[0].numpy(), color="C0", lw=1.5,
                  label="xPos, q = k = ones")
    ax_score.plot(x, decay.mean(1), color="C3", ls="--", lw=1.2,
                  label="xPos mean decay over pairs (its envelope)")
    ax_score.axhline(0, color="0.5", lw=0.8)
    xlabel = "relative distance m - n (tokens, query after key)"
    ax_score.set(xlabel=xlabel, ylabel="q_m . k_n / head_dim  (q = k = ones)",
                 xlim=(0, max_distance), title="score vs distance")
    ax_score.legend(fontsize="small", loc="upper right")
    wavelength = (2 * torch.pi / encoding.inv_freq64).numpy()
    norm = LogNorm(wavelength.min(), wavelength.max())
    cmap = colormaps["viridis"]
    for pair in range(decay.shape[1]):
        ax_pairs.plot(x, decay[:, pair], color=cmap(norm(wavelength[pair])), lw=0.9)
    ax_pairs.set(xlabel=xlabel, ylabel="zeta_i ** ((m - n) / scale_base)",
                 xlim=(0, max_distance), ylim=(0, 1.02), title="decay of each rotary pair")
    fig.colorbar(ScalarMappable(norm, cmap), ax=ax_pairs, label="wavelength of the pair (tokens)")
    fig.suptitle(title or describe(encoding), fontsize="medium")
    return save_png(fig, path)


def _bias_rows(encoding: nn.Module, query: Tensor, keys: Tensor) -> np.ndarray:
    """``(H, Nk)`` bias of the one query against ``keys``."""
    with torch.no_grad():
        return encoding(query, keys)[0, :, 0, :].float().numpy()


def plot_bias_vs_distance(encoding: nn.Module, path: str | Path, *, max_distance: int = 64,
                          title: str | None = None, figsize: tuple[float, float] = (10, 5),
                          dpi: int = 100) -> Path:
    """Attention-logit bias of each head against the offset ``key - query``.

    ALiBi as one line per head, learned tables as a heads x offset map; ``T5RelativeBias``
    adds a panel with the bucket of each offset (symlog axis).

    Args:
        encoding: a 1D bias encoding ``(q_positions, k_positions) -> (1, H, Nq, Nk)``.
        max_distance: offsets ``-max_distance .. max_distance``.
    """
    from posenc.core import ALiBi, T5RelativeBias
    from posenc.core.bias import t5_relative_bucket

    check_positive_int(max_distance, "max_distance")
    query = torch.tensor([max_distance])
    keys = torch.arange(2 * max_distance + 1)
    bias = _bias_rows(encoding, query, keys)
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
    else:  # one row per head, so bucket plateaus line up across heads
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
        exact = encoding.num_buckets // (4 if encoding.bidirectional else 2)
        ticks = [0] + [exact * 4**i for i in range(8) if exact * 4**i <= max_distance]
        ticks = sorted({sign * t for t in ticks for sign in (-1, 1)})
        for a in axes:
            a.set_xscale("symlog", linthresh=exact)
            a.set_xticks(ticks, [str(t) for t in ticks], fontsize="small")
    fig.suptitle(title or describe(encoding))
    return save_png(fig, path)


def _bias_family(encoding: nn.Module) -> tuple[str, list[str]]:
    """A panel's title and each head's legend entry (its parameters, where it has few)."""
    from posenc.core import FIRE, ALiBi, Kerple

    heads = [f"head {h}" for h in range(encoding.num_heads)]
    if isinstance(encoding, ALiBi):
        return "ALiBi", [f"{n}: slope {s:.3g}" for n, s in zip(heads, encoding.slopes.tolist(),
                                                                strict=True)]
    if isinstance(encoding, Kerple):
        family = ("KERPLE log: -r1 log(1 + r2 d)" if encoding.kernel == "log"
                  else "KERPLE power: -r1 d ** r2")
        return family, [f"{n}: r1 {r1:.2f}, r2 {r2:.2f}" for n, r1, r2 in
                        zip(heads, encoding.r1.tolist(), encoding.r2.tolist(), strict=True)]
    if isinstance(encoding, FIRE):
        return (f"FIRE at init: MLP(log(1 + c d) / log(1 + c L)), L = "
                f"{float(encoding.threshold.detach()):g}"), heads
    return type(encoding).__name__, heads


def plot_bias_comparison(encodings: Sequence[nn.Module], path: str | Path, *,
                         max_distance: int = 128, title: str | None = None,
                         figsize: tuple[float, float] | None = None, dpi: int = 100) -> Path:
    """One panel per bias encoding: its bias per head against the distance ``query - key``
    of keys at or before the query (``0 .. max_distance``, so causal ones mask none).

    Args:
        encodings: 1 to 6 1D bias encodings ``(q_positions, k_positions) -> (1, H, Nq, Nk)``.
        max_distance: largest distance shown.
        figsize: default ``(6 * columns, 4 * rows + 0.6)`` for 2 columns.
    """
    check_positive_int(max_distance, "max_distance")
    check_encodings(encodings, 6, "bias encodings (nn.Module)")
    query = torch.tensor([max_distance])
    keys = torch.arange(max_distance + 1)
    distance = (query - keys).numpy()  # max_distance .. 0
    ncols = min(len(encodings), 2)
    fig = new_figure(figsize or (6 * ncols, 4 * -(-len(encodings) // ncols) + 0.6), dpi)
    axes = panel_axes(fig, len(encodings), 2, sharex=True)
    for ax, encoding in zip(axes, encodings, strict=False):
        bias = _bias_rows(encoding, query, keys)
        family, labels = _bias_family(encoding)
        for h, color in enumerate(_head_colors(bias.shape[0])):
            ax.plot(distance, bias[h], color=color, label=labels[h])
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set(title=family, ylabel="bias added to the logit", xlim=(0, max_distance))
        ax.legend(fontsize="x-small", ncol=2 if bias.shape[0] > 4 else 1, loc="lower left")
    for ax in axes[-ncols:]:
        ax.set_xlabel("distance query - key (tokens)")
    fig.suptitle(title or "Relative position biases vs distance (untrained init)",
                 fontsize="medium")
    return save_png(fig, path)
