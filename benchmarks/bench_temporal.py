"""Speed of posenc.temporal's timestamp path against its pandas/numpy baseline.

10 million irregular timestamps (sorted, random gaps, 2000-2030, nanoseconds). Every ratio
is measured in this run: each case and its baseline alternate, best of N each.

    python benchmarks/bench_temporal.py [--n 10000000] [--repeats 3] [--cyclic-only]

Cases (targets from issue 4):
- calendar_fields vs pandas accessors (the same 10 fields), UTC and America/New_York:
  baseline / ours >= 2.
- timestamps -> float32 sin/cos pairs of hour, day of week, day of month (on the days of
  that month), month, end to end, vs pandas accessors + np.sin/np.cos: baseline / ours >= 3.
- the cyclic step alone (fields already computed -> the 4 pairs) vs one np.sin over 10M
  float32: ours / baseline <= 3. Two rows measure the floors under that step, against the
  same np.sin: allocating and writing its (N, 8) float32 output; and that plus reading
  each field it takes once (five int32 columns: the least any step that reads the fields
  moves through memory). ``--cyclic-only`` runs these three rows alone (seconds instead of
  minutes).
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from posenc.temporal import CalendarFeatures, calendar_fields


def pandas_fields(index: pd.DatetimeIndex) -> dict[str, np.ndarray]:
    """The pandas route to calendar_fields' ten fields."""
    return {
        "second": index.second.to_numpy(),
        "minute": index.minute.to_numpy(),
        "hour": index.hour.to_numpy(),
        "day_of_week": index.day_of_week.to_numpy(),
        "day_of_month": index.day.to_numpy(),
        "day_of_year": index.day_of_year.to_numpy(),
        "month": index.month.to_numpy(),
        "week_of_year": index.isocalendar().week.to_numpy(dtype=np.int64),
        "days_in_month": index.days_in_month.to_numpy(),
        "days_in_year": 365 + index.is_leap_year.astype(np.int32),
    }


def pandas_cyclic(index: pd.DatetimeIndex) -> np.ndarray:
    """The pandas route to the four float32 pairs: accessors, then np.sin/np.cos."""
    phases = [index.hour.to_numpy() / np.float32(24),
              index.day_of_week.to_numpy() / np.float32(7),
              (index.day.to_numpy() - 1) / index.days_in_month.to_numpy().astype(np.float32),
              (index.month.to_numpy() - 1) / np.float32(12)]
    out = np.empty((len(index), 8), dtype=np.float32)
    for i, phase in enumerate(phases):
        theta = np.float32(2 * np.pi) * phase.astype(np.float32)
        out[:, 2 * i], out[:, 2 * i + 1] = np.sin(theta), np.cos(theta)
    return out


def best_of(ours: Callable[[], object], baseline: Callable[[], object], repeats: int
            ) -> tuple[float, float]:
    """Best wall time of each, alternating so both see the same machine conditions."""
    times = {ours: [], baseline: []}
    for _ in range(repeats):
        for fn in (ours, baseline):
            gc.collect()
            start = time.perf_counter()
            fn()
            times[fn].append(time.perf_counter() - start)
    return min(times[ours]), min(times[baseline])


def irregular_timestamps(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    low, high = pd.Timestamp("2000-01-01").value, pd.Timestamp("2030-01-01").value
    return np.sort(rng.integers(low, high, n))


def run(n: int = 10_000_000, repeats: int = 3, *, cyclic_only: bool = False) -> list[dict]:
    """Measure every case; one dict per row: ``case``, ``posenc_s``, ``baseline_s``,
    ``baseline`` (what it is compared with), ``ratio`` (as the table prints it: speed-up
    baseline / posenc, or cost posenc / baseline for the last two rows), ``ratio_kind`` and
    ``target``. ``cyclic_only``: the last two rows alone."""
    ns = irregular_timestamps(n)
    encoder = CalendarFeatures(["hour", "day_of_week", "day_of_month", "month"])
    rows = []

    for zone in () if cyclic_only else ("UTC", "America/New_York"):
        index = pd.DatetimeIndex(ns, tz="UTC").tz_convert(zone)
        ours, expected = calendar_fields(index), pandas_fields(index)
        assert all(np.array_equal(ours[k], v) for k, v in expected.items()), zone
        del ours, expected
        t_ours, t_base = best_of(lambda index=index: calendar_fields(index),
                                 lambda index=index: pandas_fields(index), repeats)
        rows.append((f"calendar_fields, {zone}", t_ours, t_base, t_base / t_ours, ">= 2x"))

    index = pd.DatetimeIndex(ns, tz="UTC").tz_convert("America/New_York")

    def end_to_end() -> torch.Tensor:
        return encoder(calendar_fields(index, fields=encoder.required_fields))

    if not cyclic_only:
        np.testing.assert_allclose(end_to_end().numpy(), pandas_cyclic(index), atol=2e-6)
        t_ours, t_base = best_of(end_to_end, lambda: pandas_cyclic(index), repeats)
        rows.append(("timestamps -> 4 cyclic pairs, New York", t_ours, t_base,
                     t_base / t_ours, ">= 3x"))

    fields = calendar_fields(index, fields=encoder.required_fields)
    values = np.random.default_rng(1).random(n, dtype=np.float32)
    t_ours, t_base = best_of(lambda: encoder(fields), lambda: np.sin(values),
                             2 * repeats + 1)
    rows.append(("cyclic step alone vs one np.sin", t_ours, t_base, t_ours / t_base,
                 "<= 3x"))
    # The floor under any cyclic step: allocating and writing its (N, 8) float32 output.
    t_fill, t_base = best_of(lambda: np.empty((n, 8), np.float32).fill(0),
                             lambda: np.sin(values), 2 * repeats + 1)
    rows.append(("(floor: write (N, 8) float32) vs np.sin", t_fill, t_base, t_fill / t_base,
                 "-"))

    def read_and_write() -> None:
        for column in fields.values():
            np.maximum.reduce(column)  # one pass over the field, nothing written
        np.empty((n, 8), np.float32).fill(0)

    t_move, t_base = best_of(read_and_write, lambda: np.sin(values), 2 * repeats + 1)
    rows.append((f"(floor: read the {len(fields)} fields + write (N, 8)) vs np.sin", t_move,
                 t_base, t_move / t_base, "-"))

    kinds = ["speed-up"] * 3 + ["cost"] * 3
    baselines = ["pandas accessors"] * 2 + ["pandas accessors + np.sin/np.cos"] + \
        ["one np.sin over N float32"] * 3
    if cyclic_only:
        kinds, baselines = kinds[3:], baselines[3:]
    return [{"case": case, "posenc_s": ours_s, "baseline_s": base_s, "baseline": baseline,
             "ratio": ratio, "ratio_kind": kind, "target": target}
            for (case, ours_s, base_s, ratio, target), kind, baseline
            in zip(rows, kinds, baselines, strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cyclic-only", action="store_true",
                        help="only the cyclic step rows (seconds instead of minutes)")
    args = parser.parse_args()
    rows = run(args.n, args.repeats, cyclic_only=args.cyclic_only)
    print(f"{args.n:,} irregular timestamps, best of {args.repeats} (cyclic step: "
          f"{2 * args.repeats + 1})\n")
    print(f"| {'case':40s} | {'posenc ms':>9s} | {'baseline ms':>11s} | {'ratio':>6s} | target |")
    print(f"|{'-' * 42}|{'-' * 11}|{'-' * 13}|{'-' * 8}|--------|")
    for row in rows:
        case, ours_s, base_s, ratio, target = (row[k] for k in (
            "case", "posenc_s", "baseline_s", "ratio", "target"))
        print(f"| {case:40s} | {ours_s * 1e3:9.1f} | {base_s * 1e3:11.1f} | {ratio:5.2f}x | "
              f"{target:>6s} |")
    print("\nratio = baseline / posenc (speed-up) for the first three rows; posenc / np.sin "
          "(cost) for the last three.")
    step, fill, move = (next(r["posenc_s"] for r in rows if r["case"].startswith(prefix))
                        for prefix in ("cyclic step", "(floor: write", "(floor: read"))
    print(f"cyclic step = {step / fill:.2f}x writing its output alone (the floor), "
          f"{step / move:.2f}x reading its fields and writing its output; the <= 3x target is "
          f"below the floor wherever the floor row exceeds 3x.")


if __name__ == "__main__":
    main()
