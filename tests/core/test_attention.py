"""MultiheadAttention with every encoding: symmetry, padding, packing, KV cache, compile."""

from __future__ import annotations

import pytest
import torch
from posenc.core import (
    ALiBi,
    ClippedRelativeBias,
    KVCache,
    LearnedEncoding,
    MultiheadAttention,
    NoPE,
    RotaryEncoding,
    SinusoidalEncoding,
    T5RelativeBias,
    incremental_positions,
    packed_attention_mask,
    packed_positions,
    positions_from_padding_mask,
)
from torch import nn

DIM, HEADS, HEAD_DIM = 32, 4, 8
ATOL = 1e-5  # float32 attention of O(1) values; position errors show up as O(0.1)


def _randomize_tables(module: nn.Module) -> nn.Module:
    """Learned tables start near zero (std 0.02); make position effects O(1) for the tests."""
    for name, p in module.named_parameters():
        if name.endswith("table") or name.endswith("encoding.weight"):
            with torch.no_grad():
                p.normal_()
    return module


class AdditiveThenAttention(nn.Module):
    """An additive encoding added to the tokens before attention (the classic Transformer)."""

    def __init__(self, encoding: nn.Module) -> None:
        super().__init__()
        self.encoding = encoding
        self.attn = MultiheadAttention(DIM, HEADS)

    def forward(self, x, **kwargs):
        pos = torch.arange(x.shape[1])
        return self.attn(x + self.encoding(pos).to(x.dtype), **kwargs)


def _model(name: str) -> nn.Module:
    makers = {
        "none": lambda: MultiheadAttention(DIM, HEADS),
        "nope": lambda: MultiheadAttention(DIM, HEADS, rotary=NoPE(), bias=NoPE()),
        "sinusoidal": lambda: AdditiveThenAttention(SinusoidalEncoding(DIM)),
        "learned": lambda: AdditiveThenAttention(LearnedEncoding(64, DIM)),
        "rope_half": lambda: MultiheadAttention(DIM, HEADS, rotary=RotaryEncoding(HEAD_DIM)),
        "rope_interleaved": lambda: MultiheadAttention(
            DIM, HEADS, rotary=RotaryEncoding(HEAD_DIM, layout="interleaved")),
        "alibi": lambda: MultiheadAttention(DIM, HEADS, bias=ALiBi(HEADS, causal=False)),
        "t5": lambda: MultiheadAttention(DIM, HEADS, bias=T5RelativeBias(HEADS)),
        "clipped": lambda: MultiheadAttention(DIM, HEADS, bias=ClippedRelativeBias(HEADS, 4)),
    }
    return _randomize_tables(makers[name]()).eval()


PERM = torch.tensor([3, 0, 7, 1, 6, 2, 5, 4, 9, 8, 11, 10])


@pytest.mark.parametrize("name", ["none", "nope"])
def test_self_attention_without_encoding_is_permutation_equivariant(name):
    model = _model(name)
    x = torch.randn(2, 12, DIM)
    with torch.no_grad():
        torch.testing.assert_close(model(x[:, PERM]), model(x)[:, PERM], atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["sinusoidal", "learned", "rope_half", "rope_interleaved",
                                  "alibi", "t5", "clipped"])
def test_self_attention_with_encoding_is_not_permutation_equivariant(name):
    model = _model(name)
    x = torch.randn(2, 12, DIM)
    with torch.no_grad():
        gap = (model(x[:, PERM]) - model(x)[:, PERM]).abs().max()
    assert gap > 100 * ATOL


# ---- padding, packing, incremental decoding ---------------------------------------------------

ENCODED = {
    "rope": lambda: MultiheadAttention(DIM, HEADS, rotary=RotaryEncoding(HEAD_DIM)),
    "rope_interleaved_partial": lambda: MultiheadAttention(
        DIM, HEADS, rotary=RotaryEncoding(HEAD_DIM, rotary_dim=4, layout="interleaved")),
    "alibi": lambda: MultiheadAttention(DIM, HEADS, bias=ALiBi(HEADS)),
    "t5": lambda: MultiheadAttention(DIM, HEADS, bias=T5RelativeBias(HEADS, bidirectional=False,
                                                                     max_distance=32)),
    "rope_and_clipped": lambda: MultiheadAttention(
        DIM, HEADS, rotary=RotaryEncoding(HEAD_DIM), bias=ClippedRelativeBias(HEADS, 3)),
}


@pytest.mark.parametrize("name", list(ENCODED))
@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batch_equals_unpadded_sequences(name, side):
    model = _randomize_tables(ENCODED[name]()).eval()
    lengths, width = [7, 3, 5], 7
    seqs = [torch.randn(1, n, DIM) for n in lengths]
    x = torch.zeros(len(lengths), width, DIM)
    mask = torch.zeros(len(lengths), width, dtype=torch.bool)
    for b, (seq, n) in enumerate(zip(seqs, lengths, strict=True)):
        span = slice(width - n, width) if side == "left" else slice(0, n)
        x[b, span], mask[b, span] = seq[0], True
    x[~mask] = 100.0  # garbage in the padding must not leak
    pos = positions_from_padding_mask(mask)
    with torch.no_grad():
        out = model(x, query_positions=pos, attn_mask=mask[:, None, None, :], is_causal=True)
        for b, (seq, n) in enumerate(zip(seqs, lengths, strict=True)):
            span = slice(width - n, width) if side == "left" else slice(0, n)
            torch.testing.assert_close(out[b, span], model(seq, is_causal=True)[0],
                                       atol=ATOL, rtol=0)


def test_positions_from_padding_mask_counts_real_tokens():
    mask = torch.tensor([[False, False, True, True, True], [True, True, True, False, False]])
    assert positions_from_padding_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 0, 0]]


@pytest.mark.parametrize("name", list(ENCODED))
@pytest.mark.parametrize("causal", [True, False])
def test_packed_sequence_equals_separate_sequences(name, causal):
    model = _randomize_tables(ENCODED[name]()).eval()
    if not causal and isinstance(model.bias, ALiBi):
        model.bias.causal = False
    lengths = [4, 1, 6, 3]
    docs = [torch.randn(1, n, DIM) for n in lengths]
    with torch.no_grad():
        packed = model(torch.cat(docs, dim=1), query_positions=packed_positions(lengths),
                       attn_mask=packed_attention_mask(lengths), is_causal=causal)
        separate = torch.cat([model(d, is_causal=causal) for d in docs], dim=1)
    torch.testing.assert_close(packed, separate, atol=ATOL, rtol=0)


def test_packed_positions_and_mask_hand_worked():
    assert packed_positions([3, 2]).tolist() == [0, 1, 2, 0, 1]
    assert packed_attention_mask([2, 1]).tolist() == [[True, True, False],
                                                      [True, True, False],
                                                      [False, False, True]]


@pytest.mark.parametrize("name", list(ENCODED))
def test_incremental_decode_with_kv_cache_equals_full_causal_forward(name):
    model = _randomize_tables(ENCODED[name]()).eval()
    x = torch.randn(2, 11, DIM)
    chunks = [4, 1, 1, 3, 1, 1]  # a prompt, single tokens, and a multi-token chunk
    with torch.no_grad():
        full = model(x, is_causal=True)
        cache, outs, start = KVCache(), [], 0
        for n in chunks:
            outs.append(model(x[:, start:start + n], is_causal=True, kv_cache=cache))
            start += n
    assert len(cache) == 11
    torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=ATOL, rtol=0)


def test_incremental_decode_with_explicit_offset_positions():
    """Positions from incremental_positions (per-sequence offsets) with a left-padded cache."""
    model = _randomize_tables(ENCODED["rope_and_clipped"]()).eval()
    x = torch.randn(1, 6, DIM)
    with torch.no_grad():
        full = model(x, is_causal=True)
        cache = KVCache()
        first = model(x[:, :4], query_positions=incremental_positions(4, 0), is_causal=True,
                      kv_cache=cache)
        rest = model(x[:, 4:], query_positions=incremental_positions(2, torch.tensor([4])),
                     is_causal=True, kv_cache=KVCache())  # fresh cache: must differ
        cache_rest = model(x[:, 4:], query_positions=incremental_positions(2, 4),
                           is_causal=True, kv_cache=cache)
    torch.testing.assert_close(torch.cat((first, cache_rest), 1), full, atol=ATOL, rtol=0)
    assert (rest - full[:, 4:]).abs().max() > 100 * ATOL
    assert incremental_positions(2, torch.tensor([4, 0])).tolist() == [[4, 5], [0, 1]]


def test_cross_attention_uses_separate_query_and_key_positions():
    """Rotating q at m and k at n depends only on n - m: shifting both leaves the output."""
    model = _model("rope_half")
    x, ctx = torch.randn(1, 3, DIM), torch.randn(1, 5, DIM)
    with torch.no_grad():
        a = model(x, ctx, query_positions=torch.tensor([2, 3, 4]),
                  key_positions=torch.arange(5))
        b = model(x, ctx, query_positions=torch.tensor([102, 103, 104]),
                  key_positions=torch.arange(5) + 100)
        c = model(x, ctx, query_positions=torch.tensor([2, 3, 4]),
                  key_positions=torch.arange(5) + 100)
    torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    assert (a - c).abs().max() > 100 * ATOL


# ---- dtypes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["rope", "alibi", "t5"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_output_dtype_equals_input_dtype(name, dtype):
    model = _randomize_tables(ENCODED[name]()).eval()
    ref_x = torch.randn(2, 9, DIM)
    with torch.no_grad():
        ref = model(ref_x, is_causal=True)
        model.to(dtype)
        out = model(ref_x.to(dtype), is_causal=True)
    assert out.dtype == dtype
    # Weights and activations round to dtype; positions must not add error beyond that.
    tol = {torch.bfloat16: 0.05, torch.float16: 5e-3}.get(dtype, 1e-5)
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=0)
    if model.rotary is not None:
        assert model.rotary.inv_freq64.dtype == torch.float64
    if isinstance(model.bias, ALiBi):
        assert model.bias.slopes.dtype == torch.float64


# ---- torch.compile ---------------------------------------------------------------------------

@pytest.mark.parametrize(("layout", "backend"), [("half", "inductor"),
                                               ("interleaved", "aot_eager")])
def test_compiled_attention_with_rope_has_no_graph_break_and_matches_eager(layout, backend):
    """fullgraph=True raises on any graph break. Inductor (C++ codegen, ~30 s cold on this
    machine) runs for the real-valued "half" path; the "interleaved" path is a complex
    multiply, which inductor does not generate code for (it falls back to eager kernels), so
    it is traced with aot_eager: the same Dynamo graph capture, without the C++ build."""
    x = torch.randn(2, 16, DIM)
    model = MultiheadAttention(DIM, HEADS, rotary=RotaryEncoding(HEAD_DIM, layout=layout))
    model.eval()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, is_causal=True), model(x, is_causal=True),
                                   atol=ATOL, rtol=0)


def _reference_attention(q, k, v, additive):
    """softmax(q k^T / sqrt(d) + additive) v in float64, each key/value head repeated for its
    group of query heads (written out, not through SDPA)."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = q.double() @ k.double().transpose(-2, -1) / q.shape[-1] ** 0.5 + additive.double()
    return scores.softmax(-1) @ v.double()


@pytest.mark.parametrize("kv_heads", [4, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_attend_with_a_learned_bias_matches_softmax_attention_and_its_gradients(kv_heads, causal):
    # A bias with a gradient and no mask takes the CPU path around SDPA's math kernel; with a
    # causal mask it goes through SDPA: both must be softmax(q k^T / sqrt(d) + bias) v, GQA too.
    from posenc.core.attention import attend

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 8, generator=gen, requires_grad=True)
    k, v = (torch.randn(2, kv_heads, 5, 8, generator=gen, requires_grad=True) for _ in range(2))
    bias = torch.randn(1, 4, 5, 5, generator=gen, requires_grad=True)
    out = attend(q, k, v, None, bias, is_causal=causal)
    future = torch.ones(5, 5, dtype=torch.bool).triu(1)
    additive = bias.masked_fill(future, float("-inf")) if causal else bias
    expected = _reference_attention(q, k, v, additive)
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)
    weights = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    grads = torch.autograd.grad((out.double() * weights).sum(), (q, k, v, bias))
    expected_grads = torch.autograd.grad((expected * weights).sum(), (q, k, v, bias))
    for got, want in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
