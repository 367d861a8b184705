"""benchmarks/bench_spatial.py: its floor rows time what they say (the encoding's own rotation,
polynomials or bias, computed once), and one round of it runs."""

from __future__ import annotations

import time

import torch
from benchmark_scripts import load
from posenc.spatial import LieRE, RelativeBias2D, patch_coords
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


def test_the_given_polynomials_square_into_lieres_rotation_and_learn():
    bench = load("bench_spatial")
    torch.manual_seed(0)
    liere, given = LieRE(16, 2, init="random", init_std=0.3), bench._GivenPolynomial(16, 2)
    given.load_state_dict(liere.state_dict(), strict=False)
    positions = GridPositions(patch_coords(5), (5, 5), num_prefix_tokens=1)
    expected, rotation = liere.rotation(positions), given.rotation(positions)
    polynomials = given.given
    assert isinstance(polynomials, torch.nn.Parameter) and polynomials.shape == (4, 25, 8, 8)
    assert given.counts.max() > 0  # the sets are squared, not merely kept
    torch.testing.assert_close(rotation.turns, expected.turns, rtol=0, atol=0)
    given.rotation(positions).turns.sum().backward()
    assert given.given is polynomials  # not computed again
    assert polynomials.grad is not None and polynomials.grad.abs().sum() > 0
    assert given.generators.grad is None  # no polynomial built from the generators


def test_one_round_times_every_row_with_its_floor():
    bench = load("bench_spatial")
    results = bench.run(32, 1, 2, time.process_time, ["relbias", "liere"])
    assert list(results) == [bench.BASELINE, bench.PEER, "relbias", "liere", bench.LIERE_FLOOR,
                             bench.LIERE_SQUARINGS, bench.RELBIAS_FLOOR]
    assert results[bench.BASELINE][0] == 1.0
    assert all(ratio > 0 and seconds > 0 for ratio, seconds in results.values())
    kinds = {name: bench.row_kind(name) for name in results}
    assert kinds[bench.LIERE_FLOOR] == kinds[bench.LIERE_SQUARINGS] == kinds[bench.RELBIAS_FLOOR] \
        == "floor"
    assert (kinds["relbias"], kinds["liere"]) == ("bias", "rotary")
