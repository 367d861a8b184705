"""Plots of what each encoding does, and of forecasts (``posenc plot ...``; the ``plot`` extra).

Every ``plot_*`` function computes what it shows through the public API, writes a PNG of
exactly ``figsize * dpi`` pixels and returns its path. [`main`][posenc.tasks.plots.main] is the
command line, ``posenc plot KIND --out DIR [options]``, which also reads trained encodings from
checkpoints.
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
    describe,
    plot_additive_1d,
    plot_bias_comparison,
    plot_bias_vs_distance,
    plot_rope_scores,
    plot_xpos_decay,
)
from .forecast import add_forecast_arguments, plot_forecast, run_forecast
from .spatial import (
    GRID_ENCODINGS,
    plot_grid_similarity,
    plot_liere_relative,
    plot_rope_dinov3_coords,
    plot_rope_mixed_frequencies,
    plot_video_irregular,
    plot_video_similarity,
)
from .temporal import (
    dst_changes,
    plot_calendar_features,
    plot_fourier_features,
    plot_holiday_features,
)

__all__ = ["KINDS", "dst_changes", "load_checkpoint_module", "main", "plot_additive_1d",
           "plot_bias_comparison", "plot_bias_vs_distance", "plot_calendar_features",
           "plot_forecast", "plot_fourier_features", "plot_grid_similarity",
           "plot_holiday_features", "plot_liere_relative", "plot_rope_dinov3_coords",
           "plot_rope_mixed_frequencies", "plot_rope_scores", "plot_video_irregular",
           "plot_video_similarity",
           "plot_xpos_decay"]

#: The figures ``posenc plot all`` writes (every kind but ``forecast``), in order.
KINDS = ("sinusoidal", "learned", "rope", "xpos", "alibi", "t5", "bias-compare", "grid-similarity",
         "rope-mixed", "liere", "rope-dinov3", "video", "video-irregular", "calendar", "fourier",
         "holidays")


def load_checkpoint_module(path: str | Path) -> nn.Module:
    """The LightningModule saved in a checkpoint, on CPU, in eval mode (a checkpoint that
    names no class, as the ``posenc`` CLI's do, is read as an ``ImageClassifier``)."""
    from lightning.pytorch import LightningModule

    from .. import cli  # noqa: F401  (imports every task module, so class paths resolve)
    from ..config import check_checkpoint, checkpoint_hparams, read_checkpoint
    from ..vision import ImageClassifier

    # A checkpoint is untrusted input: tensors and plain values only, hyperparameters checked
    # (LightningModule.load_from_checkpoint, which builds a _class_path, checks nothing).
    where = f"checkpoint={str(path)!r}"
    ckpt = read_checkpoint(path, "checkpoint")
    bound = check_checkpoint(ckpt, where)
    hparams = checkpoint_hparams(ckpt)
    if "_instantiator" in hparams and "_class_path" not in hparams:
        # Lightning would build it from a class path it lacks
        raise ValueError(f"{where} has an _instantiator but names no model class (_class_path)")
    cls = LightningModule if "_instantiator" in hparams else ImageClassifier
    try:
        with bound:
            model = cls.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    except RuntimeError as err:  # another model's weights (a Forecaster saved from Python)
        first = str(err).splitlines()[0]
        raise ValueError(f"{where} does not hold {cls.__name__} weights ({first}); posenc plot "
                         "reads the checkpoints of ImageClassifier, or of the model class its "
                         "_class_path names") from err
    return model.eval()


def _checkpoint_encoding(path: Path, accept: Any, what: str) -> tuple[nn.Module, nn.Module]:
    """The model in checkpoint ``path`` and its first submodule ``accept`` takes."""
    model = load_checkpoint_module(path)
    for module in model.modules():
        if accept(module):
            return model, module
    encoding = getattr(model, "hparams", {}).get("encoding", "?")
    raise ValueError(f"checkpoint {str(path)!r} holds no {what}: it is a "
                     f"{type(model).__name__} with encoding={encoding!r}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="posenc plot",
        description="Write PNG plots of what position encodings do, and of forecasts.")
    sub = parser.add_subparsers(dest="kind", required=True, metavar="KIND")

    def add(name: str, help: str, **numbers: Any) -> argparse.ArgumentParser:
        """A subcommand with the shared options; ``head_dim=64`` or ``(64, help)`` adds
        ``--head-dim`` of the default's type."""
        p = sub.add_parser(name, help=help, description=help)
        p.add_argument("--out", type=Path, default=Path("plots"),
                       help="output folder (default: plots)")
        p.add_argument("--dpi", type=int, default=100, help="pixels per inch (default: 100)")
        p.add_argument("--seed", type=int, default=0, help="seed for random initialisations")
        for dest, default in numbers.items():
            default, text = default if isinstance(default, tuple) else (default, None)
            p.add_argument(f"--{dest.replace('_', '-')}", type=type(default), default=default,
                           help=text)
        return p

    def grid(p: argparse.ArgumentParser, default: Any, help: str | None = None) -> None:
        p.add_argument("--grid", type=int, nargs=2, metavar=("ROWS", "COLS"), default=default,
                       help=help)

    rope = {"head_dim": 64, "base": 10000.0}
    for name, what in (("sinusoidal", "fixed sinusoidal"), ("learned", "learned (untrained)")):
        p = add(name, f"1D {what} encoding: heatmap and position similarity", dim=64, positions=128)
        if name == "sinusoidal":
            p.add_argument("--base", type=float, default=10000.0)
            p.add_argument("--layout", default="interleaved", choices=LAYOUTS)
    add("rope", "1D RoPE: q.k score vs relative distance", **rope, max_distance=256,
        samples=(256, "random q vectors averaged"))
    add("xpos", "xPos: q.k score and per-pair decay vs distance, next to RoPE's score", **rope,
        scale_base=(512.0, "xPos decay length"), max_distance=1024)
    p = add("alibi", "ALiBi: bias vs distance per head", heads=8, max_distance=64)
    p.add_argument("--causal", action="store_true", help="mask future keys (decoder ALiBi)")
    p = add("t5", "T5 relative bias (untrained init): bias and bucket vs distance per head",
            heads=8, buckets=32, bucket_max_distance=(
                128, "T5 max_distance: offsets beyond share the last bucket"),
            max_distance=(160, "largest offset plotted"))
    p.add_argument("--unidirectional", action="store_true", help="decoder bucketing")
    add("bias-compare", "ALiBi, KERPLE log/power and FIRE (untrained init): bias per head vs "
                        "distance, side by side", heads=8, max_distance=128)
    p = add("grid-similarity", "2D additive encoding: per-patch cosine-similarity grids")
    p.add_argument("--encoding", default="sincos2d", choices=GRID_ENCODINGS)
    grid(p, None, "patch grid (default 7 7, or the checkpoint's training grid)")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="a trained model's checkpoint: plot its additive encoding")
    p = add("rope-mixed", "RoPE-Mixed: frequency vectors per head", heads=6, head_dim=64, base=10.0)
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="a trained model's checkpoint: plot its learned frequencies")
    add("liere", "LieRE (RoPE-Mixed and random init) and ComRoPE: q.k score map vs the 2D "
                 "offset, and how much it changes between anchors", head_dim=32,
        block_size=(8, "size of the rotated blocks"),
        window=(7, "offsets -window .. window per axis"),
        init_std=(1 / 16, "random init's std (about 1 / grid size for patch indices)"))
    p = add("rope-dinov3", "DINOv3 RoPE coordinates: normalize_coords separate/min/max and "
                           "draws of the shift/jitter/rescale augmentation")
    grid(p, (6, 10))
    for step, default in (("shift", 0.5), ("jitter", 1.5), ("rescale", 2.0)):
        p.add_argument(f"--{step}-coords", type=float, default=default)
    p.add_argument("--normalize-coords", default="separate", choices=tuple(NORMALIZE_COORDS),
                   help="the system the augmentation starts from")
    p.add_argument("--draws", type=int, default=3, help="augmentation draws per panel")
    p = add("video", "video encodings (MRoPE chunked/strided, RoPE3D, SinCos3D): similarity "
                     "of the centre token to every token of every frame", head_dim=128)
    grid(p, (8, 8))
    p.add_argument("--frames", type=int, default=5)
    p = add("video-irregular", "video encodings (MRoPE, RoPE3D, SinCos3D) at irregular frame "
                               "times: similarity of a token to every token of every frame, "
                               "t from the frame index vs from the real times", head_dim=128,
            time_scale=(8.0, "multiplies the times (frames per second)"))
    grid(p, (6, 6))
    p.add_argument("--frame-times", type=float, nargs="+",
                   default=[0.0, 0.1, 0.15, 0.5, 0.55, 1.2], help="seconds, increasing")
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
    from posenc.spatial.factory import encoding_spec, size_arguments

    from posenc import core, spatial

    png, dpi = args.out / f"{kind}.png", args.dpi
    if kind == "sinusoidal":
        enc = core.SinusoidalEncoding(args.dim, args.base, args.layout)
        return plot_additive_1d(enc, png, num_positions=args.positions, dpi=dpi)
    if kind == "learned":
        enc = core.LearnedEncoding(args.positions, args.dim)
        return plot_additive_1d(enc, png, num_positions=args.positions, dpi=dpi,
                                title=f"{describe(enc)}, untrained (trunc-normal init)")
    if kind == "rope":
        return plot_rope_scores(core.RotaryEncoding(args.head_dim, args.base), png,
                                max_distance=args.max_distance, num_samples=args.samples,
                                seed=args.seed, dpi=dpi)
    if kind == "xpos":
        return plot_xpos_decay(core.XPos(args.head_dim, args.base, args.scale_base), png,
                               max_distance=args.max_distance, dpi=dpi)
    if kind == "alibi":
        return plot_bias_vs_distance(core.ALiBi(args.heads, causal=args.causal), png,
                                     max_distance=args.max_distance, dpi=dpi)
    if kind == "t5":
        enc = core.T5RelativeBias(args.heads, not args.unidirectional, args.buckets,
                                  args.bucket_max_distance)
        return plot_bias_vs_distance(enc, png, max_distance=args.max_distance, dpi=dpi,
                                     title=f"{describe(enc)}, untrained init")
    if kind == "bias-compare":
        encodings = [core.ALiBi(args.heads), core.Kerple(args.heads, "log"),
                     core.Kerple(args.heads, "power"), core.FIRE(args.heads)]
        return plot_bias_comparison(encodings, png, max_distance=args.max_distance, dpi=dpi)
    if kind == "video":
        # Qwen3-VL's interleaved sections: rows and columns 5 * pairs // 16 each (its
        # [24, 20, 20] for head_dim 128), time the rest.
        dim = args.head_dim
        space = 5 * (dim // 2) // 16
        encodings = [spatial.MRoPE(dim), spatial.MRoPE(dim, (dim // 2 - 2 * space, space, space),
                                                        axis_layout="strided"),
                     spatial.RoPE3D(dim, 1), spatial.SinCos3D(dim)]
        return plot_video_similarity(encodings, png, tuple(args.grid), args.frames, dpi=dpi)
    if kind == "video-irregular":
        return plot_video_irregular(
            [spatial.MRoPE(args.head_dim), spatial.RoPE3D(args.head_dim, 1),
             spatial.SinCos3D(args.head_dim)], png, tuple(args.grid), args.frame_times,
            time_scale=args.time_scale, dpi=dpi)
    if kind == "grid-similarity":
        grid = tuple(args.grid) if args.grid else None
        if args.checkpoint is not None:
            model, enc = _checkpoint_encoding(
                args.checkpoint, lambda m: getattr(m, "kind", None) == "additive"
                and hasattr(m, "encode_grid"),
                f"additive 2D encoding ({', '.join(GRID_ENCODINGS)})")
            hp = getattr(model, "hparams", {})
            if grid is None and {"img_size", "patch_size"} <= set(hp):  # its training grid
                grid = (hp["img_size"] // hp["patch_size"],) * 2
            name, title = args.checkpoint.stem, f"{describe(enc)} from {args.checkpoint.name}"
        else:
            spec = encoding_spec(args.encoding)
            enc = spec.build(**spec.arguments(size_arguments(dim=args.dim,
                                                             grid_size=grid or (7, 7))))
            name = args.encoding
            title = None if name == "sincos2d" else f"{describe(enc)}, untrained init"
        grid = grid or (7, 7)
        if title is not None:
            title = f"Position embedding similarity, {grid[0]}x{grid[1]} grid\n{title}"
        return plot_grid_similarity(enc, args.out / f"grid-similarity-{name}.png", grid,
                                    dpi=dpi, title=title)
    if kind == "rope-mixed":
        title = None
        if args.checkpoint is not None:
            _, enc = _checkpoint_encoding(
                args.checkpoint, lambda m: isinstance(m, spatial.RoPE2D) and m.variant == "mixed",
                "RoPE2D with variant='mixed'")
            title = f"RoPE-Mixed frequencies per head, trained: {args.checkpoint.name}"
        else:
            enc = spatial.RoPE2D(args.head_dim, args.heads, "mixed", args.base)
        return plot_rope_mixed_frequencies(enc, png, dpi=dpi, title=title)
    if kind == "liere":
        dim, block, std = args.head_dim, args.block_size, args.init_std
        encodings = [spatial.LieRE(dim, 1, "liere", block_size=block),
                     spatial.LieRE(dim, 1, "comrope", block_size=block, init_std=std),
                     spatial.LieRE(dim, 1, "liere", block_size=block, init="random", init_std=std)]
        return plot_liere_relative(encodings, png, window=args.window, seed=args.seed, dpi=dpi)
    if kind == "rope-dinov3":
        return plot_rope_dinov3_coords(
            png, tuple(args.grid), shift_coords=args.shift_coords, jitter_coords=args.jitter_coords,
            rescale_coords=args.rescale_coords, normalize_coords=args.normalize_coords,
            num_draws=args.draws, seed=args.seed, dpi=dpi)
    if kind == "forecast":
        return run_forecast(args)
    if kind == "holidays":
        return plot_holiday_features(args.country, png, subdiv=args.subdiv, year=args.year,
                                     alpha=args.alpha, dpi=dpi)
    if kind == "calendar":
        return plot_calendar_features(args.tz, png, start=args.start, days=args.days, dpi=dpi)
    return plot_fourier_features(args.tz, png, start=args.start, days=args.days,
                                 harmonics=args.harmonics, dpi=dpi)


def main(argv: Sequence[str] | None = None) -> list[Path]:
    """``posenc plot KIND --out DIR [options]``: write the plot(s), print and return paths.

    ``KIND`` is one of `KINDS` or ``all``; ``argv`` defaults to ``sys.argv[1:]``.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    shared = ["--out", str(args.out), "--dpi", str(args.dpi), "--seed", str(args.seed)]
    runs = [args] if args.kind != "all" else [parser.parse_args([kind, *shared]) for kind in KINDS]
    paths = []
    for run in runs:
        with torch.random.fork_rng(devices=[]):  # seeded inits leave the caller's RNG alone
            torch.manual_seed(run.seed)
            paths.append(_run(run.kind, run))
    for path in paths:
        print(path)
    return paths
