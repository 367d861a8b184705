"""BEiT's geometric resize of relative-position tables (RelativeBias2D(resize="geometric"),
resize_relative_table), value by value against timm 1.0.31's resize_rel_pos_bias_table."""

from __future__ import annotations

import copy

import pytest
import timm.layers.pos_embed_rel as timm_rel
import torch
from posenc.spatial import RelativeBias2D, attach, patch_coords
from posenc.spatial.bias import resize_relative_table
from posenc.spatial.coords import GridPositions
from spatial_models import OTHER_SIZES, PATCH, TRAIN_SIZE, make_vit
from timm.layers.pos_embed_rel import (
    gen_relative_position_index,
    resize_rel_pos_bias_table,
    resize_rel_pos_bias_table_simple,
)
from torch.export import Dim, export

# timm's RegularGridInterpolator warns about its own indexing; not posenc's.
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:timm.layers.interpolate")

HEADS = 3
# Grow (square, non-square from square, non-square from non-square), shrink, grow so far that
# BEiT's ratio stops at its 1.5 bound (the outer offsets take the edge value), a one-row grid,
# one axis unchanged (timm places it geometrically too).
CASES = [((4, 4), (6, 6)), ((4, 4), (7, 5)), ((3, 5), (6, 4)), ((6, 6), (4, 4)),
         ((2, 2), (12, 12)), ((1, 4), (3, 4)), ((4, 4), (4, 6))]


@pytest.fixture(autouse=True)
def _timm_without_scipy(monkeypatch):
    # timm's default path (TIMM_USE_SCIPY_INTERP unset): its own linear RegularGridInterpolator.
    monkeypatch.setattr(timm_rel, "_USE_SCIPY", False)


def _length(grid):
    return (2 * grid[0] - 1) * (2 * grid[1] - 1)


def _timm_geometric(table, old, new):
    return resize_rel_pos_bias_table(table, new_window_size=new,
                                     new_bias_shape=(_length(new), table.shape[1]),
                                     old_window_size=old)


@pytest.mark.parametrize(("old", "new"), CASES)
def test_geometric_resize_equals_timm_resize_rel_pos_bias_table(old, new):
    table = torch.randn(_length(old), HEADS)
    got = resize_relative_table(table, old, new, "geometric")
    assert got.shape == (_length(new), HEADS)
    # timm places the offsets in float64 and rounds them to float32; posenc sums them on the
    # device in float32: a few float32 ulps (a wrong placement is off by ~0.1).
    torch.testing.assert_close(got, _timm_geometric(table, old, new), rtol=1e-5, atol=2e-6)


def test_geometric_resize_equals_timm_on_a_square_checkpoint_table_without_old_size():
    table = torch.randn(_length((7, 7)), HEADS)  # what timm's BEiT checkpoint filter passes
    expected = resize_rel_pos_bias_table(table, new_window_size=(12, 12),
                                         new_bias_shape=(_length((12, 12)), HEADS))
    torch.testing.assert_close(resize_relative_table(table, 7, 12, "geometric"), expected,
                               rtol=1e-5, atol=2e-6)


def test_geometric_resize_keeps_the_centre_and_reads_grown_offsets_between_entries():
    table = torch.arange(_length((3, 3)), dtype=torch.float32)[:, None]  # (25, 1), 5 x 5
    grown = resize_relative_table(table, 3, 5, "geometric").reshape(9, 9)
    assert grown[4, 4] == table.reshape(5, 5)[2, 2]  # offset (0, 0) stays where it was
    assert grown[4, 5] == table.reshape(5, 5)[2, 3]  # offset 1 is an entry too
    # 2 entries per side reaching offset 4 would need 1 + q = 4; BEiT's q stops at 1.5, so the
    # outer entries sit at +-2.5 and offsets past them take the edge entry.
    assert grown[0, 0] == table.reshape(5, 5)[0, 0] and grown[1, 8] == table.reshape(5, 5)[0, 4]


def test_bicubic_resize_equals_timm_simple_and_is_the_default():
    table = torch.randn(_length((4, 4)), HEADS)
    expected = resize_rel_pos_bias_table_simple(table, (6, 6), (_length((6, 6)), HEADS))
    torch.testing.assert_close(resize_relative_table(table, 4, 6), expected)
    assert RelativeBias2D(HEADS, 4).resize == "bicubic"


@pytest.mark.parametrize(("old", "new"), [((4, 4), (6, 6)), ((3, 5), (6, 4))])
def test_relbias_geometric_bias_is_the_timm_resized_table_at_the_new_grid(old, new):
    enc = RelativeBias2D(HEADS, old, resize="geometric")
    positions = GridPositions(patch_coords(new), new, num_prefix_tokens=0)
    bias = enc(positions, positions)
    index = gen_relative_position_index(new)  # (N, N) rows of timm's table, Swin's layout
    expected = _timm_geometric(enc.table.detach(), old, new)[index].permute(2, 0, 1)[None]
    torch.testing.assert_close(bias, expected, rtol=1e-5, atol=2e-6)


def test_geometric_at_the_tables_own_grid_is_the_table_and_learns_elsewhere():
    enc = RelativeBias2D(HEADS, (4, 4), resize="geometric")
    assert enc.table_for_grid((4, 4)) is enc.table
    enc.table_for_grid((6, 5)).square().sum().backward()
    assert enc.table.grad is not None and enc.table.grad.abs().sum() > 0


def test_geometric_resize_keeps_a_bf16_tables_dtype():
    table = torch.randn(_length((4, 4)), HEADS).bfloat16()
    got = resize_relative_table(table, 4, 6, "geometric")
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), _timm_geometric(table.float(), (4, 4), (6, 6)),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.slow  # about 2.5 s on the shared 2-core machine (three ViTs, four forwards)
def test_attached_vit_at_another_size_uses_the_timm_resized_tables():
    """The geometric model at a new grid computes what a model whose tables timm resized
    beforehand computes there (at the training grid: what the bicubic model computes)."""
    vit = make_vit(embed_dim=32, num_heads=2).eval()
    geometric = attach(copy.deepcopy(vit), "relbias", resize="geometric")
    assert all(b.attn.bias.resize == "geometric" for b in geometric.blocks)
    with torch.no_grad():  # tables of order 1 (init is std 0.02), so a wrong resize shows
        for block in geometric.blocks:
            block.attn.bias.table.normal_()
    tables = [b.attn.bias.table.detach() for b in geometric.blocks]
    bicubic = attach(copy.deepcopy(vit), "relbias")
    for block, table in zip(bicubic.blocks, tables, strict=True):
        block.attn.bias.table.data.copy_(table)
    x = torch.randn(2, 3, *TRAIN_SIZE)
    torch.testing.assert_close(geometric(x), bicubic(x), rtol=0, atol=0)
    size = OTHER_SIZES[1]  # 4 x 7: one axis grows, the other is placed anew as in timm
    grid = (size[0] // PATCH, size[1] // PATCH)
    resized = attach(copy.deepcopy(vit), "relbias", grid_size=grid)
    for block, table in zip(resized.blocks, tables, strict=True):
        block.attn.bias.table.data.copy_(_timm_geometric(table, (4, 4), grid))
    x = torch.randn(2, 3, *size)
    # A bicubic resize differs by about 0.02 here.
    torch.testing.assert_close(geometric.forward_features(x), resized.forward_features(x),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: RelativeBias2D(HEADS, 4, resize="nearest"), ValueError,
     "resize must be one of \\['bicubic', 'geometric'\\], got 'nearest'"),
    (lambda: RelativeBias2D(HEADS, 4, resize=None), TypeError, "resize must be one of"),
    (lambda: resize_relative_table(torch.zeros(48, 2), 4, 6), ValueError,
     "table must have shape .*\\(49, H\\) for grid_size \\(4, 4\\), got \\(48, 2\\)"),
    (lambda: resize_relative_table(torch.zeros(49), 4, 6), ValueError, "table must have shape"),
    (lambda: resize_relative_table([[0.0]], 1, 2), TypeError, "table must be a torch.Tensor"),
    (lambda: resize_relative_table(torch.zeros(49, 2), 4, 6, mode="linear"), ValueError,
     "mode must be one of"),
    (lambda: resize_relative_table(torch.zeros(49, 2), 4, (6, 0)), ValueError,
     "new_grid_size must hold positive ints"),
])
def test_bad_arguments_name_themselves(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.slow  # about 3 s of tracing
def test_geometric_export_needs_static_sizes():
    model = attach(make_vit(embed_dim=32, num_heads=2, depth=1), "relbias",
                   resize="geometric").eval()
    x = torch.randn(2, 3, 48, 40)
    torch.testing.assert_close(export(model, (x,)).module()(x), model(x))
    rows, cols = Dim("rows", min=2, max=16), Dim("cols", min=2, max=16)
    with pytest.raises(ValueError, match="resize='geometric'\\) needs concrete grid sizes"):
        export(model, (torch.randn(2, 3, *TRAIN_SIZE),),
               dynamic_shapes={"x": {2: PATCH * rows, 3: PATCH * cols}})
