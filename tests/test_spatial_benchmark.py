"""benchmarks/bench_spatial.py: its floor rows time what they say (the encoding's own rotation or
bias, computed once), and one round of it runs."""

from __future__ import annotations

import time

import torch
from benchmark_scripts import load
from posenc.spatial import RelativeBias2D, patch_coords
from posenc.spatial.coords import GridPositions


def test_the_given_bias_is_the_tables_kept_as_a_parameter_that_learns():
    bench = load("bench_spatial")
    given, table = bench._GivenBias(3, 4), RelativeBias2D(3, 4)
    given.load_state_dict(table.state_dict(), strict=False)
    positions = GridPositions(patch_coords(4), (4, 4), num_prefix_tokens=1)
    bias = given(positions, positions)
    assert isinstance(bias, torch.nn.Parameter) and given.given is bias
    torch.testing.assert_close(bias, table(positions, positions), rtol=0, atol=0)
    assert given(positions, positions) is bias  # not gathered again
    (bias * torch.randn_like(bias)).sum().backward()
    assert bias.grad is not None and bias.grad.abs().sum() > 0


def test_one_round_times_every_row_with_its_floor():
    bench = load("bench_spatial")
    results = bench.run(32, 1, 2, time.process_time, ["relbias", "liere"])
    assert list(results) == [bench.BASELINE, bench.PEER, "relbias", "liere", bench.LIERE_FLOOR,
                             bench.RELBIAS_FLOOR]
    assert results[bench.BASELINE][0] == 1.0
    assert all(ratio > 0 and seconds > 0 for ratio, seconds in results.values())
    kinds = {name: bench.row_kind(name) for name in results}
    assert kinds[bench.LIERE_FLOOR] == kinds[bench.RELBIAS_FLOOR] == "floor"
    assert (kinds["relbias"], kinds["liere"]) == ("bias", "rotary")
