"""2D bias encodings through FlexAttention: each ``score_mod`` equals the materialised bias.

``ScoreMod.dense`` evaluates a score_mod on the full index grid (no kernel, fast); the attached
ViT test runs torch's eager FlexAttention on CPU (forward only: torch has no CPU backward) and
is marked slow for its first-call tracing.
"""

from __future__ import annotations

import pytest
import torch
from posenc.spatial import ALiBi2D, ContinuousBias2D, attach, patch_coords
from posenc.spatial.bias import RelativeBias2D
from posenc.spatial.coords import GridPositions
from spatial_models import make_vit
from torch import nn

HEADS = 3


def _relbias():
    enc = RelativeBias2D(HEADS, (3, 4))
    nn.init.normal_(enc.table)  # spread values: a wrong row reads a different one
    return enc


def _kept(grid, keep, prefix):
    """GridPositions of a (B, n) subset of a grid's patches (patch dropout, MAE)."""
    return GridPositions(patch_coords(grid)[keep], grid, prefix)


CASES = {
    "grid": lambda: 2 * (GridPositions(patch_coords((3, 4)), (3, 4), 0),),
    "grid_prefix": lambda: 2 * (GridPositions(patch_coords((3, 4)), (3, 4), 2),),
    "other_grid": lambda: 2 * (GridPositions(patch_coords((4, 6)), (4, 6), 1),),
    "kept_batched": lambda: 2 * (_kept((3, 4), torch.stack([torch.randperm(12)[:7]
                                                             for _ in range(2)]), 1),),
    "cross": lambda: (GridPositions(patch_coords((3, 4))[:5], (3, 4), 1),
                      GridPositions(patch_coords((3, 4)), (3, 4), 0)),
    "tensor": lambda: 2 * (patch_coords((3, 4)) + 0.5,),  # shifted: offsets still integers
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("make", [_relbias, lambda: ALiBi2D(HEADS)], ids=["relbias", "alibi2d"])
def test_score_mod_on_index_grid_equals_materialised_bias(make, case):
    enc = make()
    q, k = CASES[case]()
    expected = enc(q, k)
    mod = enc.score_mod(q, k)
    assert (mod.batch, mod.num_queries, mod.num_keys) == (expected.shape[0], *expected.shape[2:])
    torch.testing.assert_close(mod.dense(HEADS), expected.expand(-1, HEADS, -1, -1),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize("coords, message", [
    (patch_coords((3, 4)) * 0.5, "fractional offsets"),
    (patch_coords((3, 5)), r"offsets up to \(2, 4\) do not fit a table for grid \(3, 4\)"),
])
def test_relbias_score_mod_refuses_what_forward_refuses(coords, message):
    enc = _relbias()
    for call in (enc, enc.score_mod):
        with pytest.raises(ValueError, match=message):
            call(coords, coords)


def test_relbias_score_mod_checks_every_offset_from_a_few():
    # Only the pair (last query, last key) is out of range, not one with the first query or
    # the first key: the per-axis extremes find it.
    enc = _relbias()
    q, k = torch.tensor([[0.0, 0.0], [2.0, 3.0]]), torch.tensor([[1.0, 1.0], [-1.0, 0.0]])
    for call in (enc, enc.score_mod):
        with pytest.raises(ValueError, match=r"offsets up to \(3, 3\)"):
            call(q, k)


@pytest.mark.slow  # eager FlexAttention traces on first use (several seconds per process)
@pytest.mark.parametrize("name", ["relbias", "alibi2d"])
def test_attached_vit_flex_path_equals_sdpa_path(name):
    model = attach(make_vit("vit_reg4"), name).eval()
    images = [torch.randn(2, 3, 32, 32), torch.randn(2, 3, 24, 40)]  # training and another grid
    with torch.no_grad():
        expected = [model(x) for x in images]
        for block in model.blocks:
            block.attn.backend = "flex"
        for x, want in zip(images, expected, strict=True):
            torch.testing.assert_close(model(x), want, rtol=0, atol=1e-5)


def test_continuous_bias_has_no_score_mod():
    # Its MLP per offset is not a per-pair lookup: it stays on the SDPA path (see use_flex).
    assert not hasattr(ContinuousBias2D(HEADS, 8), "score_mod")
