"""Step time of a vit_tiny-sized model with each posenc spatial encoding, as a ratio to timm.

Forward + backward of a ViT with width 192, depth 12, 3 heads and patch size 4 at 32x32 and
64x64 images. Every row is relative to timm's own learned ``pos_embed`` (an untouched
``vit_tiny_patch16_224``) measured in the same run; timm's RoPE ViT (``eva02_tiny_patch14_224``
at the same width, depth, image and patch size) is reported as a peer. Floor rows: with
``liere``, LieRE with its rotation computed once before the timed steps (the per-token apply
without the exponentials), and LieRE with its Taylor polynomials computed once and kept as a
parameter (the exponentials' squarings, the gather and the apply: its step without building
the polynomials); with ``relbias``, a learned bias gathered once and kept as a parameter (the
biased attention and the bias's gradient without the index and gather).

Measurement: all models step round-robin (the order rotates every round); each round gives
every model a ratio to the baseline step of that round, and a row is the median of those
ratios, so drift and other load on a shared machine hit every row alike. By default the clock
is this process's CPU time with one thread (``--clock cpu --threads 1``): time during which
other processes hold the cores is not counted. ``--clock wall`` measures wall time.

    python benchmarks/bench_spatial.py [--rounds 15] [--threads 1] [--clock cpu] [--sizes 32 64]
        [--encodings liere comrope]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence

import timm
import torch
from posenc.spatial import ENCODINGS, LieRE, RelativeBias2D, attach
from posenc.spatial.factory import encoding_kind
from posenc.spatial.liere import _scaled_taylor, _square_sorted, taylor_degree
from torch import nn

TARGETS = {"none": 1.05, "additive": 1.05, "rotary": 1.15, "bias": 1.10}
BATCH = {32: 16, 64: 4}  # 64 x 16 and 256 x 4 patch tokens per step
BASELINE = "timm learned pos_embed"
PEER = "timm eva02 RoPE (peer)"
LIERE_FLOOR = "liere, rotation given"  # timed with "liere": its step without the exponentials
LIERE_SQUARINGS = "liere, polynomial given"  # ... and without building the polynomials
RELBIAS_FLOOR = "relbias, bias given"  # timed with "relbias": its step without the gather


class _GivenRotation(LieRE):
    """LieRE whose rotation is computed once, before the timed steps (without gradient): a
    step with it costs the per-token apply, forward and backward, but not the exponentials."""

    given = None

    def rotation(self, positions, *, augment=True):
        if self.given is None:
            with torch.no_grad():
                self.given = super().rotation(positions, augment=augment)
        return self.given


class _GivenPolynomial(LieRE):
    """LieRE whose Taylor polynomials (every set's at its scaled distinct points) are computed
    once, at the first forward, into a parameter: a step with it squares them (each set as
    often as LieRE does), gathers and applies the rotations, forward and backward, with LieRE's
    values, but builds no polynomial. CPU only (the squarings by sorted runs)."""

    def __init__(self, head_dim: int, num_heads: int) -> None:
        super().__init__(head_dim, num_heads)
        self.register_parameter("given", None)

    def _rotations(self, points, dtype):
        if self.given is None:
            with torch.no_grad():
                r, self.counts, self.order = _scaled_taylor(
                    points, self._generator_sets(points.dtype), taylor_degree(dtype))
            self.given = nn.Parameter(r)
        return _square_sorted(self.given, self.counts).to(dtype), self.order


class _GivenBias(RelativeBias2D):
    """A relative table whose bias is gathered once, at the first forward, into a parameter: a
    step with it costs what any learned bias does in attention (the scores written out, their
    softmax, the bias's gradient), not the table's index and gather."""

    def __init__(self, num_heads: int, grid_size: int) -> None:
        super().__init__(num_heads, grid_size)
        self.register_parameter("given", None)

    def forward(self, query_positions, key_positions):
        if self.given is None:
            with torch.no_grad():
                self.given = nn.Parameter(super().forward(query_positions, key_positions))
        return self.given


def row_kind(name: str) -> str:
    """A row's kind: baseline, peer, floor, or its encoding's (which picks its target)."""
    return ("baseline" if name == BASELINE else "peer" if name == PEER
            else "floor" if name in (LIERE_FLOOR, LIERE_SQUARINGS, RELBIAS_FLOOR)
            else encoding_kind(name))


def vit(img_size: int) -> nn.Module:
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=img_size,
                             patch_size=4, num_classes=10)


def eva(img_size: int) -> nn.Module:
    return timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=img_size,
                             patch_size=4, num_classes=10)


def models(img_size: int, encodings: Sequence[str] = ENCODINGS) -> dict[str, nn.Module]:
    out = {BASELINE: vit(img_size), PEER: eva(img_size)}
    for name in encodings:
        out[name] = attach(vit(img_size), name)
    if "liere" in encodings:
        for name, given in ((LIERE_FLOOR, _GivenRotation), (LIERE_SQUARINGS, _GivenPolynomial)):
            model = vit(img_size)
            attn = model.blocks[0].attn
            out[name] = attach(model, [given(attn.head_dim, attn.num_heads)
                                       for _ in model.blocks])
    if "relbias" in encodings:
        model = vit(img_size)
        grid = model.patch_embed.grid_size[0]
        out[RELBIAS_FLOOR] = attach(model, [_GivenBias(model.blocks[0].attn.num_heads, grid)
                                            for _ in model.blocks])
    return out


def step_time(model: nn.Module, x: torch.Tensor, y: torch.Tensor, clock) -> float:
    start = clock()
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), y).backward()
    return clock() - start


def run(img_size: int, rounds: int, batch: int, clock,
        encodings: Sequence[str] = ENCODINGS) -> dict[str, tuple[float, float]]:
    """name -> (median ratio to the baseline, median step seconds)."""
    torch.manual_seed(0)
    variants = models(img_size, encodings)
    x = torch.randn(batch, 3, img_size, img_size)
    y = torch.randint(0, 10, (batch,))
    names = list(variants)
    for model in variants.values():  # warm-up (allocator, oneDNN primitives)
        step_time(model.train(), x, y, clock)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            times[name].append(step_time(variants[name], x, y, clock))
    base = times[BASELINE]
    return {name: (statistics.median(t / b for t, b in zip(ts, base, strict=True)),
                   statistics.median(ts)) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--encodings", nargs="+", choices=ENCODINGS, default=list(ENCODINGS),
                        help="the posenc rows to time (default all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    results = {size: run(size, args.rounds, BATCH.get(size, 4), clock, args.encodings)
               for size in args.sizes}

    cols = "".join(f"{f'{s}x{s} B={BATCH.get(s, 4)}':>20}" for s in args.sizes)
    header = f"{'encoding':<24}{'kind':<10}{cols}{'target':>9}"
    print(f"torch {torch.__version__}, timm {timm.__version__}, {args.threads} thread(s), "
          f"{args.clock} clock, median of {args.rounds} round-robin rounds of fwd+bwd steps; "
          f"ratio to '{BASELINE}' (step ms)")
    print(header)
    print("-" * len(header))
    for name in results[args.sizes[0]]:
        kind = row_kind(name)
        cells = "".join(f"{f'{results[s][name][0]:.3f}x ({results[s][name][1] * 1e3:.0f})':>20}"
                        for s in args.sizes)
        target = TARGETS.get(kind)
        print(f"{name:<24}{kind:<10}{cells}{f'<= {target:.2f}' if target else '':>9}")


if __name__ == "__main__":
    main()
