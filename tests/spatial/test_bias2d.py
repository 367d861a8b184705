from __future__ import annotations

import pytest
import torch
from posenc.core import MultiheadAttention
from posenc.core.bias import alibi_slopes
from posenc.spatial import ALiBi2D, ContinuousBias2D, RelativeBias2D, patch_coords
from posenc.spatial.coords import GridPositions
from timm.layers.pos_embed_rel import resize_rel_pos_bias_table_simple
from timm.models.swin_transformer import get_relative_position_index
from timm.models.swin_transformer_v2 import WindowAttention

HEADS = 3


def _grid(grid, prefix=0):
    return GridPositions(patch_coords(grid), tuple(grid), prefix)


def _assert_shift_invariant(bias: torch.Tensor, coords: torch.Tensor):
    """bias (H, N, N) takes one value per head for each distinct offset q - k."""
    offsets = coords[:, None] - coords[None, :]
    keys = offsets.reshape(-1, 2)
    values = bias.reshape(bias.shape[0], -1)
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    for group in range(int(inverse.max()) + 1):
        members = values[:, inverse == group]
        torch.testing.assert_close(members, members[:, :1].expand_as(members), rtol=0, atol=1e-6)


def test_relbias_uses_swin_table_layout():
    enc = RelativeBias2D(HEADS, (3, 4))
    bias = enc(patch_coords((3, 4)), patch_coords((3, 4)))
    index = get_relative_position_index(3, 4)
    expected = enc.table.detach()[index.reshape(-1)].reshape(12, 12, HEADS).permute(2, 0, 1)
    assert bias.shape == (1, HEADS, 12, 12)
    torch.testing.assert_close(bias[0], expected, rtol=0, atol=0)


def test_relbias_reads_each_pair_at_its_offset_under_half_patch_shifts_and_prefixes():
    # Queries and keys of two samples, each moved by its own half-integer shift: the offsets
    # stay integers though no coordinate is one (rounding each coordinate would not do).
    enc = RelativeBias2D(HEADS, (3, 4))
    grid = patch_coords((3, 4))
    shifts = torch.tensor([[0.5, 0.5], [-2.5, 3.5]])[:, None]
    q, k = grid[[0, 5, 11, 7]] + shifts, grid[[2, 3, 8]] + shifts  # (2, 4, 2), (2, 3, 2)
    offsets = (q[:, :, None] - k[:, None]).long()  # exact: both carry the same shift
    rows = (offsets[..., 0] + 2) * 7 + offsets[..., 1] + 3
    expected = enc.table.detach()[rows].permute(0, 3, 1, 2)  # (2, H, 4, 3)
    torch.testing.assert_close(enc(q, k), expected, rtol=0, atol=0)
    bias = enc(GridPositions(q, num_prefix_tokens=2), GridPositions(k, num_prefix_tokens=1))
    assert bias.shape == (2, HEADS, 6, 4)
    assert not bias[:, :, :2].any() and not bias[:, :, :, :1].any()
    torch.testing.assert_close(bias[:, :, 2:, 1:], expected, rtol=0, atol=0)
    assert enc(q, k[:, :0]).shape == (2, HEADS, 4, 0) and enc(q[:, :0], k).shape == (2, HEADS, 0, 3)


@pytest.mark.parametrize("enc", [RelativeBias2D(HEADS, 4), ContinuousBias2D(HEADS, 32),
                                 ALiBi2D(HEADS)], ids=["relbias", "cpb", "alibi2d"])
@pytest.mark.parametrize("grid", [(4, 4), (3, 6)])
def test_biases_are_shift_invariant_on_the_grid(enc, grid):
    coords = patch_coords(grid)
    _assert_shift_invariant(enc(_grid(grid), _grid(grid))[0].detach(), coords)
    # Moving every token by the same offset changes nothing.
    moved = GridPositions(coords + torch.tensor([1.0, 2.0]), grid)
    torch.testing.assert_close(enc(moved, moved), enc(_grid(grid), _grid(grid)))


def test_relbias_resizes_its_table_for_another_grid_like_timm():
    enc = RelativeBias2D(HEADS, 3)  # 5 x 5 offsets
    resized = enc.table_for_grid((5, 5))
    expected = resize_rel_pos_bias_table_simple(enc.table.detach(), (5, 5), (81, HEADS))
    torch.testing.assert_close(resized, expected, rtol=0, atol=1e-6)
    bias = enc(_grid((5, 5)), _grid((5, 5)))
    index = get_relative_position_index(5, 5)
    torch.testing.assert_close(bias[0], resized[index.reshape(-1)].reshape(25, 25, HEADS)
                               .permute(2, 0, 1))


def test_relbias_resizes_a_non_square_table_like_timm_simple_resize():
    enc = RelativeBias2D(HEADS, (3, 4))  # 5 x 7 offsets
    table = enc.table.detach()
    resized = enc.table_for_grid((5, 2))
    # timm's (num_heads, 2r-1, 2c-1) form (its flat form assumes a square source table).
    expected = resize_rel_pos_bias_table_simple(table.t().reshape(HEADS, 5, 7), (5, 2),
                                                (HEADS, 9, 3))
    assert resized.shape == (27, HEADS)
    torch.testing.assert_close(resized, expected.reshape(HEADS, -1).t(), rtol=0, atol=1e-6)


def test_relbias_offsets_outside_table_or_fractional_raise():
    enc = RelativeBias2D(HEADS, 3)
    with pytest.raises(ValueError, match="do not fit"):
        enc(patch_coords(4), patch_coords(4))
    with pytest.raises(ValueError, match="fractional"):
        enc(torch.tensor([[0.5, 0.0]]), patch_coords(2))


def test_cpb_equals_swinv2_window_attention_bias():
    grid, ref = (4, 5), (3, 3)
    swin = WindowAttention(dim=HEADS * 8, window_size=grid, num_heads=HEADS,
                           pretrained_window_size=ref)
    enc = ContinuousBias2D(HEADS, 512, ref_grid_size=ref)
    enc.mlp.load_state_dict(swin.cpb_mlp.state_dict())
    n = grid[0] * grid[1]
    table = swin.cpb_mlp(swin.relative_coords_table).view(-1, HEADS)
    expected = 16 * torch.sigmoid(table[swin.relative_position_index.view(-1)].view(n, n, -1)
                                  .permute(2, 0, 1))
    for positions in (_grid(grid), patch_coords(grid)):  # table fast path and pairwise path
        torch.testing.assert_close(enc(positions, positions)[0], expected, rtol=1e-5, atol=1e-5)


def test_cpb_is_defined_at_unseen_and_fractional_offsets():
    enc = ContinuousBias2D(HEADS, 64, ref_grid_size=4)
    q = torch.tensor([[0.0, 0.0], [40.0, -13.0], [2.5, 0.25]])
    bias = enc(q, q)
    assert bias.shape == (1, HEADS, 3, 3) and torch.isfinite(bias).all()
    assert ((bias > 0) & (bias < 16)).all()
    # Offsets beyond the reference grid give values that differ from the in-grid ones.
    assert (bias[0, :, 0, 1] - bias[0, :, 0, 2]).abs().max() > 0


def test_cpb_offsets_stay_float32_under_bf16_autocast_and_bf16_weights():
    enc = ContinuousBias2D(HEADS, 64)
    q, k = torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 40.0], [0.0, 60.0], [0.0, 61.0]])
    expected = enc(q, k)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = enc(q, k)
    # In bf16 the log-spaced offsets 60 and 61 round to one value: the same bias for both.
    assert (got[..., 1] - got[..., 2]).abs().min() > 1e-4
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    grid = _grid((4, 5))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(enc(grid, grid), enc(patch_coords((4, 5)), patch_coords((4, 5))),
                                   rtol=0, atol=1e-5)
    # A bf16-cast module evaluates its (bf16) weights in float32.
    rounded = ContinuousBias2D(HEADS, 64)
    rounded.load_state_dict({n: t.bfloat16().float() for n, t in enc.state_dict().items()})
    torch.testing.assert_close(enc.bfloat16()(q, k), rounded(q, k), rtol=0, atol=1e-6)


def test_alibi2d_is_minus_slope_times_euclidean_distance():
    enc = ALiBi2D(4)
    q, k = torch.tensor([[0.0, 0.0], [1.0, 2.0]]), torch.tensor([[3.0, 4.0]])
    bias = enc(q, k)
    slopes = alibi_slopes(4)
    expected = torch.stack([-slopes * 5.0, -slopes * (8.0 ** 0.5)], dim=-1)[None, :, :, None]
    torch.testing.assert_close(bias, expected)


def test_alibi2d_slopes_stay_float64_under_a_bf16_cast():
    coords = patch_coords((6, 7))
    reference = ALiBi2D(5)(coords, coords)
    enc = ALiBi2D(5).to(torch.bfloat16)
    assert enc.slopes.dtype == torch.float64
    torch.testing.assert_close(enc.slopes, alibi_slopes(5).double(), rtol=0, atol=0)
    bias = enc(coords, coords)
    assert bias.dtype == torch.float32
    torch.testing.assert_close(bias, reference, rtol=0, atol=0)
    torch.testing.assert_close(bias.bfloat16(), reference.bfloat16(), rtol=0, atol=0)
    assert "slopes" not in enc.state_dict()


@pytest.mark.parametrize("enc", [RelativeBias2D(HEADS, 4), ContinuousBias2D(HEADS, 32),
                                 ALiBi2D(HEADS)], ids=["relbias", "cpb", "alibi2d"])
def test_prefix_tokens_get_zero_bias(enc):
    positions = _grid((4, 4), prefix=2)
    bias = enc(positions, positions)
    assert bias.shape == (1, HEADS, 18, 18)
    assert (bias[:, :, :2] == 0).all() and (bias[:, :, :, :2] == 0).all()
    torch.testing.assert_close(bias[:, :, 2:, 2:], enc(_grid((4, 4)), _grid((4, 4))))


@pytest.mark.parametrize("enc", [RelativeBias2D(HEADS, 4), ContinuousBias2D(HEADS, 32),
                                 ALiBi2D(HEADS)], ids=["relbias", "cpb", "alibi2d"])
def test_mae_keep_indices_equal_bias_of_all_then_gathering(enc):
    grid = (4, 4)
    keep = torch.stack([torch.randperm(16)[:6] for _ in range(2)])  # (B, K)
    kept = GridPositions(patch_coords(grid)[keep], grid)
    got = enc(kept, kept)
    full = enc(_grid(grid), _grid(grid))[0]
    expected = torch.stack([full[:, idx][:, :, idx] for idx in keep])
    assert got.shape == (2, HEADS, 6, 6)
    torch.testing.assert_close(got, expected)


def test_bias_tables_learn_through_attention():
    for enc in (RelativeBias2D(HEADS, 3), ContinuousBias2D(HEADS, 16)):
        attn = MultiheadAttention(HEADS * 8, HEADS, bias=enc)
        attn(torch.randn(2, 9, HEADS * 8), query_positions=_grid((3, 3))).sum().backward()
        grads = [p.grad for p in enc.parameters()]
        assert all(g is not None and g.abs().sum() > 0 for g in grads)


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_heads"):
        MultiheadAttention(24, 3, bias=ALiBi2D(4))
    with pytest.raises(ValueError, match="ref_grid_size"):
        ContinuousBias2D(2, ref_grid_size=1)
    with pytest.raises(TypeError, match="num_heads"):
        RelativeBias2D(2.0, 3)
    with pytest.raises(ValueError, match="query_positions"):
        ALiBi2D(2)(torch.zeros(3, 1), torch.zeros(3, 2))


def test_cpb_bias_of_offsets_checks_its_offsets():
    enc = ContinuousBias2D(HEADS, 16)
    assert enc.bias_of_offsets(torch.zeros(2, 3, 4, 2)).shape == (2, 3, 4, HEADS)
    with pytest.raises(ValueError, match=r"offsets must have shape \(\.\.\., 2\), got \(3,\)"):
        enc.bias_of_offsets(torch.zeros(3))
    with pytest.raises(ValueError, match="offsets must be finite"):
        enc.bias_of_offsets(torch.tensor([[float("nan"), 0.0]]))
    with pytest.raises(TypeError, match="offsets must be a torch.Tensor, got list"):
        enc.bias_of_offsets([[1.0, 2.0]])


@pytest.mark.parametrize("make", [lambda: RelativeBias2D(HEADS, 3),
                                  lambda: ContinuousBias2D(HEADS, 16)], ids=["relbias", "cpb"])
def test_off_lattice_positions_raise_inside_multihead_attention_too(make):
    """MultiheadAttention checks only finiteness before the encodings see the positions; a
    lattice-indexed table checks the rest itself (a grid model's positions, made on its grid,
    are not read: tests/test_host_sync.py)."""
    attn = MultiheadAttention(4 * HEADS, HEADS, bias=make())
    x = torch.randn(1, 9, 4 * HEADS)
    fractional = GridPositions(patch_coords(3) * 0.5, (3, 3))
    with pytest.raises(ValueError, match="fractional offsets"):
        attn(x, query_positions=fractional)
    if isinstance(attn.bias, RelativeBias2D):  # a table for (3, 3): offsets up to (2, 2)
        with pytest.raises(ValueError, match=r"offsets up to \(4, 4\) do not fit"):
            attn(x, query_positions=patch_coords(3) * 2)
    attn(x, query_positions=GridPositions(patch_coords(3), (3, 3)))  # on the grid: fine
