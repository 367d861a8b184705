"""Step time of a vit_tiny-sized model with each posenc spatial encoding, as a ratio to timm.

Forward + backward of a ViT with width 192, depth 12, 3 heads and patch size 4 at 32x32 and
64x64 images. Every row is relative to timm's own learned ``pos_embed`` (an untouched
``vit_tiny_patch16_224``) measured in the same run; timm's RoPE ViT (``eva02_tiny_patch14_224``
at the same width, depth, image and patch size) is reported as a peer. Steps of all models
are interleaved round-robin and each row is the median, so slow drift on a shared machine
hits every row alike.

    python benchmarks/bench_spatial.py [--repeats 9] [--threads N] [--sizes 32 64]
"""

from __future__ import annotations

import argparse
import statistics
import time

import timm
import torch
from posenc.spatial import ENCODINGS, attach, encoding_kind
from torch import nn

TARGETS = {"none": 1.05, "additive": 1.05, "rotary": 1.15, "bias": 1.10}
BATCH = {32: 32, 64: 8}  # 64 and 256 patch tokens: similar work per step


def vit(img_size: int) -> nn.Module:
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=img_size,
                             patch_size=4, num_classes=10)


def eva(img_size: int) -> nn.Module:
    return timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=img_size,
                             patch_size=4, num_classes=10)


def models(img_size: int) -> dict[str, nn.Module]:
    out = {"timm learned pos_embed": vit(img_size), "timm eva02 RoPE (peer)": eva(img_size)}
    for name in ENCODINGS:
        out[name] = attach(vit(img_size), name)
    return out


def step_time(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    start = time.perf_counter()
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(x), y).backward()
    return time.perf_counter() - start


def run(img_size: int, repeats: int, batch: int) -> dict[str, float]:
    torch.manual_seed(0)
    variants = models(img_size)
    x = torch.randn(batch, 3, img_size, img_size)
    y = torch.randint(0, 10, (batch,))
    times: dict[str, list[float]] = {name: [] for name in variants}
    for model in variants.values():  # warm-up
        model.train()
        step_time(model, x, y)
    for _ in range(repeats):
        for name, model in variants.items():
            times[name].append(step_time(model, x, y))
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {size: run(size, args.repeats, BATCH.get(size, 8)) for size in args.sizes}

    base = "timm learned pos_embed"
    header = f"{'encoding':<24}{'kind':<10}" + "".join(
        f"{f'{s}x{s} (B={BATCH.get(s, 8)})':>18}" for s in args.sizes) + f"{'target':>9}"
    print(f"torch {torch.__version__}, timm {timm.__version__}, {torch.get_num_threads()} "
          f"threads, median of {args.repeats} interleaved fwd+bwd steps")
    print(header)
    print("-" * len(header))
    for name in results[args.sizes[0]]:
        kind = "baseline" if name == base else "peer" if "peer" in name else encoding_kind(name)
        cells = []
        for size in args.sizes:
            ratio = results[size][name] / results[size][base]
            ms = results[size][name] * 1e3
            cells.append(f"{ratio:6.3f}x {ms:7.1f}ms")
        target = TARGETS.get(kind)
        print(f"{name:<24}{kind:<10}" + "".join(f"{c:>18}" for c in cells)
              + (f"{'<= ' + format(target, '.2f'):>9}" if target else f"{'':>9}"))


if __name__ == "__main__":
    main()
