"""Learned absolute table, the classic input layer, and NoPE."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from core_refs import core_settings
from hypothesis import given
from hypothesis import strategies as st
from posenc.core import InputEmbedding, LearnedEncoding, NoPE, SinusoidalEncoding


def test_integer_positions_index_the_table():
    enc = LearnedEncoding(10, 4)
    pos = torch.tensor([[0, 9, 3], [2, 2, 5]])
    out = enc(pos)
    assert out.shape == (2, 3, 4)
    for b in range(2):
        for i in range(3):
            assert torch.equal(out[b, i], enc.weight[pos[b, i]])


@pytest.mark.parametrize("bad", [-1, 10, 100])
def test_out_of_range_integer_positions_raise(bad):
    enc = LearnedEncoding(10, 4)
    with pytest.raises(ValueError, match=r"positions must lie in \[0, 9\].*num_positions=10"):
        enc(torch.tensor([0, bad]))


@pytest.mark.parametrize("bad", [-0.5, 9.01])
def test_out_of_range_fractional_positions_raise(bad):
    with pytest.raises(ValueError, match="positions must lie in"):
        LearnedEncoding(10, 4)(torch.tensor([bad]))


@core_settings
@given(st.floats(0, 9, allow_nan=False))
def test_fractional_positions_interpolate_linearly(p):
    enc = LearnedEncoding(10, 3)
    lo = math.floor(p)
    hi = min(lo + 1, 9)
    w = p - lo
    expected = (1 - w) * enc.weight[lo].double() + w * enc.weight[hi].double()
    out = enc(torch.tensor([p], dtype=torch.float64))[0]
    torch.testing.assert_close(out.double(), expected, atol=1e-6, rtol=0)


def test_fractional_hand_worked_value():
    enc = LearnedEncoding(4, 2)
    with torch.no_grad():
        enc.weight.copy_(torch.tensor([[0.0, 10.0], [1.0, 20.0], [2.0, 40.0], [3.0, 80.0]]))
    out = enc(torch.tensor([1.25, 2.5, 3.0]))
    torch.testing.assert_close(out, torch.tensor([[1.25, 25.0], [2.5, 60.0], [3.0, 80.0]]))
    # Integer-valued float positions equal integer lookups.
    assert torch.equal(enc(torch.tensor([0.0, 3.0])), enc(torch.tensor([0, 3])))


def test_resize_hand_worked_upsampling_keeps_endpoints():
    """align_corners=False: row i of the new table samples old coordinate
    (i + 0.5) * old / new - 0.5, clamped to the table. Upsampling [0, 1] to 4 rows gives
    coordinates -0.25, 0.25, 0.75, 1.25 -> [0, 0.25, 0.75, 1]: the endpoints are kept."""
    enc = LearnedEncoding(2, 1)
    with torch.no_grad():
        enc.weight.copy_(torch.tensor([[0.0], [1.0]]))
    enc.resize(4)
    assert enc.num_positions == 4 and enc.weight.shape == (4, 1)
    torch.testing.assert_close(enc.weight[:, 0], torch.tensor([0.0, 0.25, 0.75, 1.0]))
    assert isinstance(enc.weight, torch.nn.Parameter) and enc.weight.requires_grad
    enc(torch.tensor([3]))  # the new range is accepted


@pytest.mark.parametrize("new", [7, 32, 64, 5])
def test_resize_follows_interpolate_align_corners_false(new):
    """Against the closed form of linear interpolation with half-pixel centres."""
    old = 16
    enc = LearnedEncoding(old, 3)
    table = enc.weight.detach().double().clone()
    enc.resize(new)
    coords = ((torch.arange(new, dtype=torch.float64) + 0.5) * old / new - 0.5).clamp(0, old - 1)
    lo = coords.floor().long()
    hi = (lo + 1).clamp(max=old - 1)
    w = (coords - lo)[:, None]
    expected = (1 - w) * table[lo] + w * table[hi]
    torch.testing.assert_close(enc.weight.double(), expected, atol=1e-6, rtol=0)
    ref = F.interpolate(table.T[None], size=new, mode="linear", align_corners=False)[0].T
    torch.testing.assert_close(enc.weight.double(), ref, atol=1e-6, rtol=0)


def test_resize_keeps_dtype():
    enc = LearnedEncoding(8, 4).to(torch.bfloat16)
    enc.resize(16)
    assert enc.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("encoding", ["learned", "sinusoidal", None])
def test_input_embedding_is_scaled_token_embedding_plus_encoding(encoding):
    dim = 16
    enc = {"learned": LearnedEncoding(12, dim), "sinusoidal": SinusoidalEncoding(dim),
           None: None}[encoding]
    layer = InputEmbedding(50, dim, enc)
    tokens = torch.randint(0, 50, (2, 12))
    expected = layer.token.weight[tokens] * 4.0  # sqrt(16)
    if enc is not None:
        expected = expected + enc(torch.arange(12))
    torch.testing.assert_close(layer(tokens), expected)
    # Explicit positions are used instead of 0..N-1.
    if enc is not None:
        pos = torch.arange(12).flip(0)
        torch.testing.assert_close(layer(tokens, pos),
                                   layer.token.weight[tokens] * 4.0 + enc(pos))


def test_input_embedding_dropout_applies_after_the_sum():
    layer = InputEmbedding(10, 8, SinusoidalEncoding(8), dropout=0.5).train()
    out = layer(torch.zeros(1, 1000, dtype=torch.long))
    zero_fraction = (out == 0).float().mean().item()
    assert 0.4 < zero_fraction < 0.6
    layer.eval()
    assert (layer(torch.zeros(1, 10, dtype=torch.long)) != 0).any()


def test_nope_is_the_identity_encoding():
    x = torch.randn(2, 5, 8)
    assert torch.equal(x + NoPE()(torch.arange(5)), x)
    layer = InputEmbedding(10, 8, NoPE())
    tokens = torch.randint(0, 10, (2, 5))
    torch.testing.assert_close(layer(tokens), layer.token.weight[tokens] * math.sqrt(8))
