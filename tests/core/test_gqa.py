"""Grouped-query attention: MultiheadAttention(num_kv_heads=...) against a float64 reference
that repeats k/v heads with Hugging Face's ``repeat_kv``, with every encoding kind, the KV
cache and the FlexAttention path; num_kv_heads == num_heads is the multi-head module bit for
bit."""

from __future__ import annotations

import math

import posenc.core.attention as attention_module
import pytest
import torch
import torch.nn.functional as F
from posenc.core import (
    ALiBi,
    ClippedRelativeBias,
    KVCache,
    MultiheadAttention,
    RotaryEncoding,
    T5RelativeBias,
    apply_rotation,
)
from posenc.core.attention import flex_available
from posenc.core.encoding import PositionEncoding
from posenc.core.rope import rotation_from_angles
from posenc.core.xpos import XPos
from torch import nn
from transformers.models.llama.modeling_llama import repeat_kv

DIM, HEADS, HEAD_DIM = 32, 4, 8


class PerHeadRotary(PositionEncoding):
    """A rotary encoding with one frequency set per query head (as RoPE-Mixed), built
    from posenc's public ``rotation_from_angles``: its rotation is ``(1, H, N, R/2)``."""

    kind = "rotary"

    def __init__(self, head_dim: int, num_heads: int) -> None:
        super().__init__()
        self.head_dim, self.num_heads = head_dim, num_heads
        self.register_buffer("freqs", torch.rand(num_heads, 1, head_dim // 2) + 0.1)

    def rotation(self, positions):
        theta = positions.double()[..., None, :, None] * self.freqs.double()  # (B?, H, N, R/2)
        return rotation_from_angles(theta if theta.ndim == 4 else theta[None], "half")


def reference(attn: MultiheadAttention, x, context=None, *, query_positions=None,
              key_positions=None, attn_mask=None, is_causal=False):
    """GQA the long way, in float64: project with the split qkv weight, repeat k/v to the
    query heads (HF ``repeat_kv``), rotate (keys by ``key_rotation`` where the encoding has
    one), add the bias per query head and a bottom-right causal mask, softmax."""
    heads, kv_heads, head_dim = attn.num_heads, attn.num_kv_heads, attn.head_dim
    dim, kv_dim = heads * head_dim, kv_heads * head_dim
    context = x if context is None else context
    w, b = attn.qkv.weight.double(), attn.qkv.bias.double()
    batch, num_q, num_k = x.shape[0], x.shape[1], context.shape[1]
    q = F.linear(x.double(), w[:dim], b[:dim]).view(batch, num_q, heads, head_dim)
    k = F.linear(context.double(), w[dim:dim + kv_dim], b[dim:dim + kv_dim])
    v = F.linear(context.double(), w[dim + kv_dim:], b[dim + kv_dim:])
    k = repeat_kv(k.view(batch, num_k, kv_heads, head_dim).transpose(1, 2), heads // kv_heads)
    v = repeat_kv(v.view(batch, num_k, kv_heads, head_dim).transpose(1, 2), heads // kv_heads)
    q = q.transpose(1, 2)
    if query_positions is None:
        query_positions = torch.arange(num_q)
    if key_positions is None:
        key_positions = query_positions if context is x else torch.arange(num_k)
    if attn.rotary is not None:
        key_rotation = getattr(attn.rotary, "key_rotation", attn.rotary.rotation)
        q = apply_rotation(q, attn.rotary.rotation(query_positions))
        k = apply_rotation(k, key_rotation(key_positions))
    logits = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
    if attn.bias is not None:
        logits = logits + attn.bias(query_positions, key_positions).double()
    if attn_mask is not None:
        logits = logits.masked_fill(~attn_mask, -math.inf)
    if is_causal:
        keep = torch.ones(num_q, num_k, dtype=torch.bool).tril(num_k - num_q)
        logits = logits.masked_fill(~keep, -math.inf)
    out = (logits.softmax(-1) @ v).transpose(1, 2).reshape(batch, num_q, dim)
    return F.linear(out, attn.proj.weight.double(), attn.proj.bias.double())


def t5_bias():
    bias = T5RelativeBias(HEADS, num_buckets=8, max_distance=16)
    nn.init.normal_(bias.table)  # visible biases (its default init is std 0.02)
    return bias


def clipped_bias():
    bias = ClippedRelativeBias(HEADS, max_distance=3)
    nn.init.normal_(bias.table)
    return bias


ENCODINGS = {
    "none": lambda: (None, None),
    "rope": lambda: (RotaryEncoding(HEAD_DIM), None),
    "rope_partial_interleaved": lambda: (
        RotaryEncoding(HEAD_DIM, rotary_dim=4, layout="interleaved"), None),
    "xpos": lambda: (XPos(HEAD_DIM, scale_base=8.0, center=4.0), None),
    "per_head_rotary": lambda: (PerHeadRotary(HEAD_DIM, HEADS), None),
    "alibi": lambda: (None, ALiBi(HEADS, causal=False)),
    "t5": lambda: (None, t5_bias()),
    "clipped": lambda: (None, clipped_bias()),
    "rope_and_alibi": lambda: (RotaryEncoding(HEAD_DIM), ALiBi(HEADS)),
}


def make(kv_heads, encoding="none", **kwargs):
    rotary, bias = ENCODINGS[encoding]()
    return MultiheadAttention(DIM, HEADS, rotary, bias, num_kv_heads=kv_heads, **kwargs).eval()


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("is_causal", [False, True])
def test_gqa_self_attention_equals_repeated_kv_reference(encoding, kv_heads, is_causal):
    attn = make(kv_heads, encoding)
    x = torch.randn(2, 7, DIM)
    got = attn(x, is_causal=is_causal)
    expected = reference(attn, x, is_causal=is_causal)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("encoding", ["rope", "xpos", "alibi", "per_head_rotary"])
def test_gqa_cross_attention_with_positions_and_mask_equals_reference(encoding):
    attn = make(2, encoding)
    x, context = torch.randn(2, 3, DIM), torch.randn(2, 6, DIM)
    q_pos = torch.tensor([[5, 6, 7], [2, 3, 4]])
    k_pos = torch.arange(6)
    mask = torch.rand(2, 1, 3, 6) > 0.3
    mask[..., 0] = True  # every query keeps a key
    got = attn(x, context, query_positions=q_pos, key_positions=k_pos, attn_mask=mask)
    expected = reference(attn, x, context, query_positions=q_pos, key_positions=k_pos,
                         attn_mask=mask)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)


def test_gqa_projects_fewer_key_value_channels():
    attn = make(2)
    assert attn.qkv.weight.shape == (DIM + 2 * 2 * HEAD_DIM, DIM)
    assert make(1).qkv.out_features == DIM + 2 * HEAD_DIM
    assert make(None).num_kv_heads == HEADS and make(None).qkv.out_features == 3 * DIM


def test_gqa_kernel_path_equals_repeating_kv(monkeypatch):
    # CPU SDPA takes the grouped k/v (enable_gqa); forcing the repeat path changes nothing.
    attn = make(2, "rope_and_alibi")
    x = torch.randn(2, 9, DIM)
    native = attn(x, is_causal=True)
    monkeypatch.setattr(attention_module, "_gqa_in_kernel", lambda *args: False)
    torch.testing.assert_close(attn(x, is_causal=True), native, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("encoding", ["rope", "xpos", "alibi", "none"])
def test_gqa_kv_cache_holds_kv_heads_and_decodes_as_one_pass(encoding):
    attn = make(2, encoding)
    x = torch.randn(1, 8, DIM)
    full = attn(x, is_causal=True)
    cache = KVCache()
    steps = [attn(x[:, :5], is_causal=True, kv_cache=cache)]
    steps += [attn(x[:, i:i + 1], is_causal=True, kv_cache=cache) for i in range(5, 8)]
    assert cache.k.shape == cache.v.shape == (1, 2, 8, HEAD_DIM)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-6)


def test_gqa_with_a_per_head_rotary_caches_keys_per_query_head():
    # Each query head turns its keys by its own frequencies: one key copy per query head.
    attn = make(2, "per_head_rotary")
    x = torch.randn(1, 4, DIM)
    cache = KVCache()
    attn(x, kv_cache=cache)
    assert cache.k.shape == (1, HEADS, 4, HEAD_DIM)
    torch.testing.assert_close(attn(x).double(), reference(attn, x), rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # eager FlexAttention on CPU: ~2 s
@pytest.mark.skipif(not flex_available(), reason="this torch has no FlexAttention")
@pytest.mark.parametrize("encoding", ["alibi", "t5"])
def test_gqa_flex_backend_equals_reference(encoding):
    attn = make(2, encoding, backend="flex")
    x = torch.randn(1, 16, DIM)
    with torch.no_grad():  # FlexAttention has no backward on CPU
        got = attn(x, is_causal=True)
    torch.testing.assert_close(got.double(), reference(attn, x, is_causal=True),
                               rtol=1e-5, atol=1e-5)


# ---- num_kv_heads == num_heads: the multi-head module unchanged -------------------------------

def multi_head_before_gqa(attn, x, context=None, *, query_positions=None, is_causal=False):
    """MultiheadAttention's computation before num_kv_heads existed (posenc b730f68): the
    fused (3, H, head_dim) split of qkv, one rotation shared by q and k, the bias as SDPA's
    float mask."""
    dim = attn.qkv.in_features
    batch, num_q, _ = x.shape

    def heads(t, groups):
        return t.unflatten(-1, (groups, attn.num_heads, attn.head_dim)).permute(
            2, 0, 3, 1, 4).unbind(0)

    if context is None:
        q, k, v = heads(attn.qkv(x), 3)
    else:
        w_q, w_kv = attn.qkv.weight.split((dim, 2 * dim))
        b_q, b_kv = attn.qkv.bias.split((dim, 2 * dim))
        (q,) = heads(F.linear(x, w_q, b_q), 1)
        k, v = heads(F.linear(context, w_kv, b_kv), 2)
    if query_positions is None:
        query_positions = torch.arange(num_q)
    key_positions = query_positions if context is None else torch.arange(k.shape[-2])
    if attn.rotary is not None:
        q = apply_rotation(q, attn.rotary.rotation(query_positions))
        k = apply_rotation(k, attn.rotary.rotation(key_positions))
    mask = None
    if is_causal and (attn.bias is not None or k.shape[-2] != num_q):
        causal = torch.ones(num_q, k.shape[-2], dtype=torch.bool).tril(k.shape[-2] - num_q)
        mask = torch.zeros(causal.shape).masked_fill(~causal, -math.inf)
        is_causal = False
    if attn.bias is not None:
        bias = attn.bias(query_positions, key_positions)
        mask = bias if mask is None else mask + bias
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
    return attn.proj(out.transpose(1, 2).reshape(batch, num_q, dim))


@pytest.mark.parametrize("encoding", ["none", "rope", "alibi", "t5", "rope_and_alibi"])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("cross", [False, True])
def test_num_kv_heads_equal_to_num_heads_is_the_multi_head_module_exactly(encoding, is_causal,
                                                                          cross):
    torch.manual_seed(5)
    attn = make(HEADS, encoding)
    torch.manual_seed(5)
    default = make(None, encoding)
    assert {n: p.shape for n, p in attn.state_dict().items()} == {
        n: p.shape for n, p in default.state_dict().items()}
    assert attn.qkv.weight.shape == (3 * DIM, DIM)
    x = torch.randn(2, 6, DIM)
    context = torch.randn(2, 6, DIM) if cross else None
    with torch.no_grad():
        got = attn(x, context, is_causal=is_causal)
        assert torch.equal(got, default(x, context, is_causal=is_causal))
        assert torch.equal(got, multi_head_before_gqa(attn, x, context, is_causal=is_causal))


# ---- bad arguments ---------------------------------------------------------------------------

@pytest.mark.parametrize("kv_heads, error, match", [
    (3, ValueError, r"num_kv_heads must divide num_heads=4 .* got num_kv_heads=3"),
    (8, ValueError, r"num_kv_heads must divide num_heads=4 .* got num_kv_heads=8"),
    (0, ValueError, "num_kv_heads must be >= 1, got 0"),
    (-2, ValueError, "num_kv_heads must be >= 1"),
    (2.0, TypeError, "num_kv_heads must be an int"),
    (True, TypeError, "num_kv_heads must be an int"),
    ("2", TypeError, "num_kv_heads must be an int"),
])
def test_num_kv_heads_refuses_bad_values(kv_heads, error, match):
    with pytest.raises(error, match=match):
        MultiheadAttention(DIM, HEADS, num_kv_heads=kv_heads)


def test_gqa_bias_needs_one_bias_per_query_head():
    with pytest.raises(ValueError, match="bias.num_heads=2 does not match num_heads=4"):
        MultiheadAttention(DIM, HEADS, bias=ALiBi(2), num_kv_heads=2)


def test_gqa_kv_cache_refuses_another_head_count():
    cache = KVCache()
    make(2)(torch.randn(1, 3, DIM), kv_cache=cache)
    with pytest.raises(ValueError, match="kv_cache holds 2 heads of head_dim=8, got keys with 1"):
        make(1)(torch.randn(1, 1, DIM), kv_cache=cache)


@pytest.mark.slow  # Dynamo tracing: a few seconds
def test_compiled_gqa_with_xpos_has_no_graph_break_and_matches_eager():
    # fullgraph=True raises on any graph break (no host read of positions in the forward);
    # aot_eager captures the same graph as inductor without the C++ build.
    attn = make(2, "xpos")
    x = torch.randn(2, 10, DIM)
    compiled = torch.compile(attn, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, is_causal=True), attn(x, is_causal=True),
                                   rtol=1e-6, atol=1e-6)
