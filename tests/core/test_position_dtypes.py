"""Every encoding of posenc.core gives the int64 result for positions of any integer dtype, and
refuses half-precision positions (issue 10: narrow integers wrapped, bf16 positions were off by
whole units)."""

from __future__ import annotations

import posenc.core as core
import pytest
import torch
from posenc.core._checks import check_positions
from posenc.core.encoding import angles
from posenc.core.positions import relative_positions

INT_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.uint16, torch.uint32,
              torch.uint64]
HEADS = 2
TABLE = 256  # rows of the learned tables: every uint8 value is a valid row


def _positions(dtype: torch.dtype, table: bool) -> tuple[list[int], list[int]]:
    """Query and key positions at the ends of ``dtype``'s range (their offsets overflow it),
    unsorted; within ``[0, TABLE)`` for a learned table."""
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -2**31), min(info.max, 2**32 - 1)
    if table:
        lo, hi = 0, min(hi, TABLE - 1)
    return [0, hi, lo, 3, hi - 1, lo + 1, 2], [5, lo, hi]


def _attention(rotary=None, bias=None):
    return core.MultiheadAttention(16, HEADS, rotary=rotary, bias=bias)


def _seeded(build):
    torch.manual_seed(0)
    return build()


# name -> (module factory, call(module, q_positions, k_positions) -> tensor); learned tables
# are marked by name ("learned", "embedding") and get positions inside the table.
ENCODINGS = {
    "sinusoidal": (lambda: core.SinusoidalEncoding(8), lambda m, q, k: m(q)),
    "rope cos": (lambda: core.RotaryEncoding(8), lambda m, q, k: m.rotation(q).cos),
    "rope sin": (lambda: core.RotaryEncoding(8), lambda m, q, k: m.rotation(q).sin),
    "rope dynamic ntk": (
        lambda: core.RotaryEncoding(8, scaling=core.DynamicNTKScaling(4.0, 16)),
        lambda m, q, k: m.rotation(q).cos),
    "alibi causal": (lambda: core.ALiBi(HEADS), lambda m, q, k: m(q, k)),
    "alibi symmetric": (lambda: core.ALiBi(HEADS, causal=False), lambda m, q, k: m(q, k)),
    "t5 encoder": (lambda: core.T5RelativeBias(HEADS), lambda m, q, k: m(q, k)),
    "t5 decoder": (lambda: core.T5RelativeBias(HEADS, bidirectional=False),
                   lambda m, q, k: m(q, k)),
    "clipped": (lambda: core.ClippedRelativeBias(HEADS, 4), lambda m, q, k: m(q, k)),
    "learned": (lambda: core.LearnedEncoding(TABLE, 4), lambda m, q, k: m(q)),
    "nope": (lambda: core.NoPE(), lambda m, q, k: m(q)),
    "input embedding": (lambda: core.InputEmbedding(10, 4, core.LearnedEncoding(TABLE, 4)),
                        lambda m, q, k: m(torch.zeros(1, len(q), dtype=torch.long), q)),
    "relative_positions": (lambda: None, lambda m, q, k: relative_positions(q, k)),
    "attention rope + alibi": (
        lambda: _attention(core.RotaryEncoding(8), core.ALiBi(HEADS, causal=False)),
        lambda m, q, k: m(torch.ones(1, len(q), 16), query_positions=q)),
    "attention t5 cross": (
        lambda: _attention(bias=core.T5RelativeBias(HEADS)),
        lambda m, q, k: m(torch.ones(1, len(q), 16), torch.ones(1, len(k), 16),
                          query_positions=q, key_positions=k)),
}


@pytest.mark.parametrize("dtype", INT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(ENCODINGS))
def test_every_integer_dtype_encodes_exactly_like_int64(name, dtype):
    build, call = ENCODINGS[name]
    q, k = _positions(dtype, table="learned" in name or "embedding" in name)
    q64, k64 = torch.tensor(q), torch.tensor(k)
    expected = call(_seeded(build), q64, k64)
    got = call(_seeded(build), q64.to(dtype), k64.to(dtype))
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)


def test_uint8_offsets_do_not_wrap():
    q = torch.tensor([5], dtype=torch.uint8)
    k = torch.tensor([0, 250], dtype=torch.uint8)
    assert relative_positions(q, k).tolist() == [[[-5, 245]]]
    # ALiBi: -slope * |k - q|; the first head's slope for 2 heads is 1/16.
    assert core.ALiBi(2, causal=False)(q, k)[0, 0, 0].tolist() == [-5 / 16, -245 / 16]


def test_uint8_positions_index_rows_not_a_boolean_mask():
    table = core.LearnedEncoding(4, 2)
    out = table(torch.tensor([1, 0, 1], dtype=torch.uint8))
    assert out.shape == (3, 2)
    assert torch.equal(out, table.weight[[1, 0, 1]])


def test_check_positions_returns_int64_for_every_integer_dtype():
    for dtype in INT_DTYPES:
        assert check_positions(torch.tensor([0, 3]).to(dtype)).dtype == torch.int64
    floats = torch.tensor([0.5], dtype=torch.float32)
    assert check_positions(floats) is floats


def test_uint64_beyond_int64_raises():
    with pytest.raises(ValueError, match=r"positions must fit in int64, got uint64 values"):
        check_positions(torch.tensor([2**64 - 1], dtype=torch.uint64))


HALF = [torch.bfloat16, torch.float16]
HALF_CASES = {
    "sinusoidal": lambda p: core.SinusoidalEncoding(8)(p),
    "rope rotation": lambda p: core.RotaryEncoding(8).rotation(p),
    "rope rotate": lambda p: core.RotaryEncoding(8).rotate(torch.randn(1, 1, 2, 8), p),
    "learned": lambda p: core.LearnedEncoding(8, 2)(p),
    "check_positions": lambda p: check_positions(p),
}


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(HALF_CASES))
def test_half_precision_positions_are_refused(name, dtype):
    with pytest.raises(TypeError, match=rf"^positions must be an integer, float32 or float64 "
                                        rf"tensor, got {dtype}.*float32/float64"):
        HALF_CASES[name](torch.tensor([1.0, 1000.0], dtype=dtype))


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_bias_positions_are_refused_naming_the_argument(dtype):
    ints = torch.arange(2)
    with pytest.raises(TypeError, match=rf"^query_positions must be .* got {dtype}"):
        core.ALiBi(2)(ints.to(dtype), ints)
    with pytest.raises(TypeError, match=rf"^key_positions must be .* got {dtype}"):
        core.T5RelativeBias(2)(ints, ints.to(dtype))


def test_bf16_queries_with_integer_positions_rotate_with_float64_angles():
    rope = core.RotaryEncoding(16).to(torch.bfloat16)
    x = torch.randn(1, 2, 4, 16, dtype=torch.float64)
    positions = torch.tensor([0, 1000, 100_000, 1_000_000], dtype=torch.int32)
    out = rope.rotate(x.to(torch.bfloat16), positions)
    assert out.dtype == torch.bfloat16
    # Independent float64 reference: rotate_half RoPE with exact angles.
    inv_freq = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    theta = positions.double()[:, None] * inv_freq
    cos, sin = torch.cat((theta.cos(),) * 2, -1), torch.cat((theta.sin(),) * 2, -1)
    xb = x.to(torch.bfloat16).double()
    expected = xb * cos + torch.cat((-xb[..., 8:], xb[..., :8]), -1) * sin
    torch.testing.assert_close(out.double(), expected, atol=2e-2, rtol=1e-2)


def test_bf16_attention_with_integer_positions_keeps_the_dtype():
    attn = _attention(core.RotaryEncoding(8), core.ALiBi(HEADS)).to(torch.bfloat16)
    x = torch.randn(2, 5, 16, dtype=torch.bfloat16)
    out = attn(x, query_positions=torch.arange(1000, 1005, dtype=torch.int16))
    assert out.dtype == torch.bfloat16 and bool(torch.isfinite(out).all())


@pytest.mark.parametrize("positions, inv_freq, name", [
    ([1, 2], torch.ones(2), "positions"), (torch.arange(3), [1.0], "inv_freq")])
def test_angles_refuses_non_tensors_naming_the_argument(positions, inv_freq, name):
    with pytest.raises(TypeError, match=rf"^{name} must be a torch.Tensor, got list"):
        angles(positions, inv_freq)
