"""Plots of what each encoding does (``posenc plot ...``; needs the ``plot`` extra).

Every ``plot_*`` function takes an encoding (or a time zone), computes what it shows through the
encoding's public API, renders a PNG of exactly ``figsize * dpi`` pixels with matplotlib's Agg
canvas (no pyplot, no global backend change) and returns the path:

- 1D additive: :func:`plot_additive_1d` (encoding heatmap, position x dimension, and the
  cosine-similarity matrix of positions), for ``SinusoidalEncoding`` / ``LearnedEncoding``.
- 1D rotary: :func:`plot_rope_scores` (q.k score vs relative distance) and
  :func:`plot_xpos_decay` (xPos's score and per-pair decay next to RoPE's score).
- 1D bias: :func:`plot_bias_vs_distance` (bias per head vs key - query; T5 adds its buckets)
  and :func:`plot_bias_comparison` (ALiBi, KERPLE log/power, FIRE side by side).
- 2D: :func:`plot_grid_similarity` (the ViT paper's figure: for each patch, the cosine
  similarity of its encoding to every patch), :func:`plot_rope_mixed_frequencies`
  (RoPE-Mixed frequency vectors per head), :func:`plot_liere_relative` (LieRE / ComRoPE
  score maps vs the 2D offset at several anchors: relative or not) and
  :func:`plot_rope_dinov3_coords` (the patch coordinates of DINOv3's ``normalize_coords``
  options and draws of its coordinate augmentation).
- Video: :func:`plot_video_similarity` (one (t, row, col) token against every token of every
  frame: MRoPE chunked / strided, RoPE3D, SinCos3D).
- Time: :func:`plot_calendar_features` and :func:`plot_fourier_features` over a week and a
  year in a time zone, with DST changes marked; :func:`plot_holiday_features` (holiday
  kernels and distances over a year of one country).
- Forecasts: :func:`plot_forecast` (history, truth, forecast and quantile band per series,
  from a :class:`~posenc.tasks.ForecastWriter` file; ``posenc plot forecast``).

They live in :mod:`.core` (1D), :mod:`.spatial` and :mod:`.rotary2d` (2D), :mod:`.temporal`
(time) and :mod:`.forecast`, over the shared plumbing of :mod:`.figure` (which the studies'
plots use too), and are all importable from here.

:func:`main` is the command line, ``posenc plot KIND --out DIR [options]``
(``posenc plot --help``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from posenc.core.encoding import LAYOUTS
from posenc.spatial.rope import NORMALIZE_COORDS
from torch import nn

from .core import (
    plot_additive_1d,
    plot_bias_comparison,
    plot_bias_vs_distance,
    plot_rope_scores,
    plot_xpos_decay,
)
from .figure import describe
from .forecast import add_forecast_arguments, plot_forecast, run_forecast
from .rotary2d import (
    plot_liere_relative,
    plot_rope_dinov3_coords,
    plot_rope_mixed_frequencies,
)
from .spatial import GRID_ENCODINGS, plot_grid_similarity, plot_video_similarity
from .temporal import (
    dst_changes,
    plot_calendar_features,
    plot_fourier_features,
    plot_holiday_features,
)

__all__ = [
    "KINDS",
    "dst_changes",
    "load_checkpoint_module",
    "main",
    "plot_additive_1d",
    "plot_bias_comparison",
    "plot_bias_vs_distance",
    "plot_calendar_features",
    "plot_forecast",
    "plot_fourier_features",
    "plot_grid_similarity",
    "plot_holiday_features",
    "plot_liere_relative",
    "plot_rope_dinov3_coords",
    "plot_rope_mixed_frequencies",
    "plot_rope_scores",
    "plot_video_similarity",
    "plot_xpos_decay",
]

#: The figures ``posenc plot all`` writes (every kind but ``forecast``), in order.
KINDS = ("sinusoidal", "learned", "rope", "xpos", "alibi", "t5", "bias-compare",
         "grid-similarity", "rope-mixed", "liere", "rope-dinov3", "video", "calendar",
         "fourier", "holidays")


# -- checkpoints -------------------------------------------------------------------------------
def load_checkpoint_module(path: str | Path) -> nn.Module:
    """The LightningModule saved in a checkpoint, on CPU.

    Checkpoints written by the ``posenc`` CLI name their class; others are read as
    :class:`posenc.tasks.vision.ImageClassifier`.
    """
    from lightning.pytorch import LightningModule

    from .. import cli  # noqa: F401  (imports every task module, so class paths resolve)
    from ..config import check_no_weight_sources, import_class, read_checkpoint
    from ..vision import ImageClassifier

    # A checkpoint is untrusted input: tensors and plain values only (posenc's hyperparameters
    # are plain config values), and its class paths go through Lightning's and posenc's checks.
    ckpt = read_checkpoint(path, "checkpoint")
    hparams = ckpt.get("hyper_parameters", {})
    where = f"checkpoint={str(path)!r}"
    # LightningModule.load_from_checkpoint (below, for a CLI checkpoint) builds the model
    # without ImageClassifier's own check.
    check_no_weight_sources(hparams, where)
    if "_class_path" in hparams:  # the model's class: posenc's own, or registered
        try:
            import_class(hparams["_class_path"], "_class_path", LightningModule)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from err
    elif "_instantiator" in hparams:  # Lightning would build it from a class path it lacks
        raise ValueError(f"{where} has an _instantiator but names no model class "
                         f"(_class_path)")
    cls = LightningModule if "_instantiator" in hparams else ImageClassifier
    try:
        model = cls.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    except RuntimeError as err:  # another model's weights (a Forecaster saved from Python)
        first = str(err).splitlines()[0]
        raise ValueError(f"{where} does not hold {cls.__name__} weights ({first}); posenc "
                         f"plot reads the checkpoints of ImageClassifier, or of the model "
                         f"class its _class_path names") from err
    return model.eval()


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
def _strided_sections(head_dim: int) -> tuple[int, int, int]:
    """Qwen3-VL's interleaved sections: rows and columns ``5 * pairs // 16`` each (its
    ``[24, 20, 20]`` for head_dim 128), time the rest."""
    pairs = head_dim // 2
    space = 5 * pairs // 16
    return pairs - 2 * space, space, space


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posenc plot",
        description="Write PNG plots of what position encodings do, and of forecasts.")
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
            p.add_argument("--layout", default="interleaved", choices=LAYOUTS)
    p = add("rope", "1D RoPE: q.k score vs relative distance")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--base", type=float, default=10000.0)
    p.add_argument("--max-distance", type=int, default=256)
    p.add_argument("--samples", type=int, default=256, help="random q vectors averaged")
    p = add("xpos", "xPos: q.k score and per-pair decay vs distance, next to RoPE's score")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--base", type=float, default=10000.0)
    p.add_argument("--scale-base", type=float, default=512.0, help="xPos decay length")
    p.add_argument("--max-distance", type=int, default=1024)
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
    p = add("bias-compare", "ALiBi, KERPLE log/power and FIRE (untrained init): bias per head "
                            "vs distance, side by side")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--max-distance", type=int, default=128)
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
    p = add("liere", "LieRE (RoPE-Mixed and random init) and ComRoPE: q.k score map vs the 2D "
                     "offset, and how much it changes between anchors")
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--block-size", type=int, default=8, help="size of the rotated blocks")
    p.add_argument("--window", type=int, default=7, help="offsets -window .. window per axis")
    p.add_argument("--init-std", type=float, default=1 / 16,
                   help="random init's std (about 1 / grid size for patch indices)")
    p = add("rope-dinov3", "DINOv3 RoPE coordinates: normalize_coords separate/min/max and "
                           "draws of the shift/jitter/rescale augmentation")
    p.add_argument("--grid", type=int, nargs=2, metavar=("ROWS", "COLS"), default=(6, 10))
    p.add_argument("--shift-coords", type=float, default=0.5)
    p.add_argument("--jitter-coords", type=float, default=1.5)
    p.add_argument("--rescale-coords", type=float, default=2.0)
    p.add_argument("--normalize-coords", default="separate", choices=tuple(NORMALIZE_COORDS),
                   help="the system the augmentation starts from")
    p.add_argument("--draws", type=int, default=3, help="augmentation draws per panel")
    p = add("video", "video encodings (MRoPE chunked/strided, RoPE3D, SinCos3D): similarity "
                     "of the centre token to every token of every frame")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--grid", type=int, nargs=2, metavar=("ROWS", "COLS"), default=(8, 8))
    p.add_argument("--frames", type=int, default=5)
    for name in ("calendar", "fourier"):
        p = add(name, f"{name} features over a week and a year in a time zone, DST marked")
        p.add_argument("--tz", default="America/New_York", help="IANA time zone name")
        p.add_argument("--start", default="2024-03-07", help="local start date/time (ISO)")
        p.add_argument("--days", type=int, default=7, help="length of the short window")
        if name == "fourier":
            p.add_argument("--harmonics", type=int, default=3)
    p = add("holidays", "HolidayFeatures of every day of a year: kernels and distance to the "
                        "nearest holiday (needs the holidays package)")
    p.add_argument("--country", default="US", help="holidays package country code")
    p.add_argument("--subdiv", default=None, help="subdivision code, e.g. CA")
    p.add_argument("--year", type=int, default=2024)
    p.add_argument("--alpha", type=float, default=0.5, help="rate of the smooth kernels")
    add_forecast_arguments(add("forecast", "history, truth, forecast and quantile band of "
                                           "chosen series, from a ForecastWriter file"))
    add("all", "every plot above but forecast (it needs your files) with default settings")
    return parser


def _run(kind: str, args: argparse.Namespace) -> Path:
    from posenc import core, spatial
    from posenc.spatial.factory import encoding_spec, size_arguments

    out, dpi = args.out, args.dpi
    if kind == "sinusoidal":
        enc = core.SinusoidalEncoding(args.dim, args.base, args.layout)
        return plot_additive_1d(enc, out / "sinusoidal.png", num_positions=args.positions,
                                dpi=dpi)
    if kind == "learned":
        enc = core.LearnedEncoding(args.positions, args.dim)
        return plot_additive_1d(enc, out / "learned.png", num_positions=args.positions, dpi=dpi,
                                title=f"{describe(enc)}, untrained (trunc-normal init)")
    if kind == "rope":
        enc = core.RotaryEncoding(args.head_dim, args.base)
        return plot_rope_scores(enc, out / "rope.png", max_distance=args.max_distance,
                                num_samples=args.samples, seed=args.seed, dpi=dpi)
    if kind == "xpos":
        enc = core.XPos(args.head_dim, args.base, args.scale_base)
        return plot_xpos_decay(enc, out / "xpos.png", max_distance=args.max_distance, dpi=dpi)
    if kind == "alibi":
        enc = core.ALiBi(args.heads, causal=args.causal)
        return plot_bias_vs_distance(enc, out / "alibi.png", max_distance=args.max_distance,
                                     dpi=dpi)
    if kind == "t5":
        enc = core.T5RelativeBias(args.heads, not args.unidirectional, args.buckets,
                                  args.bucket_max_distance)
        return plot_bias_vs_distance(enc, out / "t5.png", max_distance=args.max_distance,
                                     dpi=dpi, title=f"{describe(enc)}, untrained init")
    if kind == "bias-compare":
        encodings = [core.ALiBi(args.heads), core.Kerple(args.heads, "log"),
                     core.Kerple(args.heads, "power"), core.FIRE(args.heads)]
        return plot_bias_comparison(encodings, out / "bias-compare.png",
                                    max_distance=args.max_distance, dpi=dpi)
    if kind == "video":
        grid, dim = tuple(args.grid), args.head_dim
        encodings = [spatial.MRoPE(dim), spatial.MRoPE(dim, _strided_sections(dim),
                                                        axis_layout="strided"),
                     spatial.RoPE3D(dim, 1), spatial.SinCos3D(dim)]
        return plot_video_similarity(encodings, out / "video.png", grid, args.frames, dpi=dpi)
    if kind == "grid-similarity":
        grid = tuple(args.grid) if args.grid else None
        if args.checkpoint is not None:
            model = load_checkpoint_module(args.checkpoint)
            enc = _find(model, lambda m: getattr(m, "kind", None) == "additive"
                        and hasattr(m, "encode_grid"),
                        f"additive 2D encoding ({', '.join(GRID_ENCODINGS)})", args.checkpoint)
            grid = grid or _checkpoint_grid(model) or (7, 7)
            name, title = args.checkpoint.stem, (
                f"Position embedding similarity, {grid[0]}x{grid[1]} grid\n{describe(enc)} "
                f"from {args.checkpoint.name}")
        else:
            grid = grid or (7, 7)
            spec = encoding_spec(args.encoding)
            enc = spec.build(**spec.arguments(size_arguments(dim=args.dim,
                                                                     grid_size=grid)))
            name, title = args.encoding, None
            if args.encoding != "sincos2d":
                title = (f"Position embedding similarity, {grid[0]}x{grid[1]} grid\n"
                         f"{describe(enc)}, untrained init")
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
    if kind == "liere":
        dim, block, std = args.head_dim, args.block_size, args.init_std
        encodings = [spatial.LieRE(dim, 1, "liere", block_size=block),
                     spatial.LieRE(dim, 1, "comrope", block_size=block, init_std=std),
                     spatial.LieRE(dim, 1, "liere", block_size=block, init="random",
                                   init_std=std)]
        return plot_liere_relative(encodings, out / "liere.png", window=args.window,
                                   seed=args.seed, dpi=dpi)
    if kind == "rope-dinov3":
        return plot_rope_dinov3_coords(
            out / "rope-dinov3.png", tuple(args.grid), shift_coords=args.shift_coords,
            jitter_coords=args.jitter_coords, rescale_coords=args.rescale_coords,
            normalize_coords=args.normalize_coords, num_draws=args.draws, seed=args.seed,
            dpi=dpi)
    if kind == "forecast":
        return run_forecast(args)
    if kind == "holidays":
        return plot_holiday_features(args.country, out / "holidays.png", subdiv=args.subdiv,
                                     year=args.year, alpha=args.alpha, dpi=dpi)
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

