"""Hostile inputs to every spatial encoding: narrow integer dtypes, meta-device construction,
empty, batched, NaN and out-of-table coordinates."""

from __future__ import annotations

import pytest
import torch
from posenc.spatial import (
    ALiBi2D,
    ContinuousBias2D,
    Factorized2D,
    Learned2D,
    RelativeBias2D,
    RoPE2D,
    SinCos2D,
    patch_coords,
)
from posenc.spatial.coords import GridPositions

GRID = (3, 4)
BUILDERS = {
    "sincos2d": lambda: SinCos2D(8),
    "learned": lambda: Learned2D(GRID, 8),
    "factorized": lambda: Factorized2D(GRID, 8),
    "rope_axial": lambda: RoPE2D(8, 2),
    "rope_mixed": lambda: RoPE2D(8, 2, "mixed"),
    "relbias": lambda: RelativeBias2D(2, GRID),
    "cpb": lambda: ContinuousBias2D(2, 16, ref_grid_size=GRID),
    "alibi2d": lambda: ALiBi2D(2),
}
SMALL_INTS = [torch.uint8, torch.int8, torch.int16, torch.uint16, torch.int32]


def _encode(enc, query, key=None):
    """The encoding's output for positions (a tensor, or a Rotation's cos and sin)."""
    if isinstance(enc, RoPE2D):
        rotation = enc.rotation(query)
        return torch.stack([rotation.cos, rotation.sin])
    if enc.kind == "bias":
        return enc(query, query if key is None else key)
    return enc(query)


@pytest.mark.parametrize("dtype", SMALL_INTS, ids=str)
@pytest.mark.parametrize("name", list(BUILDERS))
def test_every_integer_dtype_encodes_exactly_as_int64(name, dtype):
    enc = BUILDERS[name]()
    coords = patch_coords(GRID).long()
    expected = _encode(enc, coords)
    torch.testing.assert_close(_encode(enc, coords.to(dtype)), expected, rtol=0, atol=0)
    if enc.kind in ("bias", "rotary"):
        grid = GridPositions(coords.to(dtype), GRID, 1)
        torch.testing.assert_close(_encode(enc, grid), _encode(enc, GridPositions(coords, GRID, 1)),
                                   rtol=0, atol=0)


@pytest.mark.parametrize("name", ["relbias", "cpb", "alibi2d"])
def test_uint8_offsets_do_not_wrap(name):
    # uint8 0 - 5 is 251: the bias of a key 5 columns to the right must be that of offset -5.
    enc = BUILDERS[name]() if name != "relbias" else RelativeBias2D(2, (1, 6))
    q, k = torch.tensor([[0, 0]]), torch.tensor([[0, 5]])
    torch.testing.assert_close(enc(q.to(torch.uint8), k.to(torch.uint8)), enc(q, k),
                               rtol=0, atol=0)


@pytest.mark.parametrize("dtype", SMALL_INTS, ids=str)
def test_integer_coords_outside_a_table_still_raise(dtype):
    coords = torch.tensor([[2, 4]], dtype=dtype)
    with pytest.raises(ValueError, match=r"coords must lie in the stored grid \[0, 2\] x \[0, 3\]"):
        Learned2D(GRID, 8)(coords)
    with pytest.raises(ValueError, match=r"coords cols must lie in \[0, 3\]"):
        Factorized2D(GRID, 8)(coords)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_meta_device_build_then_reset_parameters_equals_a_normal_build(name):
    torch.manual_seed(3)
    reference = BUILDERS[name]()
    with torch.device("meta"):
        enc = BUILDERS[name]()
    enc = enc.to_empty(device="cpu")
    torch.manual_seed(3)
    enc.reset_parameters()
    for (key, got), (_, want) in zip(enc.named_buffers(), reference.named_buffers(), strict=True):
        assert got.dtype == want.dtype == torch.float64, key
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(enc.state_dict(), reference.state_dict(), rtol=0, atol=0)
    coords = patch_coords(GRID)
    torch.testing.assert_close(_encode(enc, coords), _encode(reference, coords), rtol=0, atol=0)
