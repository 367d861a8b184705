"""The FlexAttention path equals the SDPA path with the materialised bias.

Two levels: every bias encoding's ``score_mod`` evaluated on the full index grid
(``ScoreMod.dense``, no kernel) equals its ``forward`` (fast, many cases); and
``MultiheadAttention(backend="flex")`` equals ``backend="sdpa"`` through torch's FlexAttention
on CPU (eager FlexAttention: forward only, torch has no CPU backward; marked slow because the
first call in a process traces for several seconds). The backward and the compiled kernel
run only on CUDA (benchmarks/gpu.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from posenc.core import (
    ALiBi,
    ClippedRelativeBias,
    KVCache,
    MultiheadAttention,
    T5RelativeBias,
    packed_attention_mask,
    packed_positions,
)
from posenc.core.attention import (
    causal_block_mask,
    flex_attend,
    packed_block_mask,
    use_flex,
)
from torch import nn

HEADS = 2
ZERO = torch.tensor(0)  # batch and head index of a mask_mod evaluated on a grid


def _biases():
    return {
        "alibi_causal": ALiBi(HEADS),
        "alibi": ALiBi(HEADS, causal=False),
        "t5": T5RelativeBias(HEADS, num_buckets=8, max_distance=12),
        "t5_decoder": T5RelativeBias(HEADS, bidirectional=False, num_buckets=8, max_distance=12),
        "clipped": ClippedRelativeBias(HEADS, max_distance=3),
    }


POSITIONS = {
    "self": lambda: (torch.arange(9), torch.arange(9)),
    "batched": lambda: (torch.randint(0, 40, (3, 7)), torch.randint(0, 40, (3, 7))),
    "cross_broadcast": lambda: (torch.randint(0, 40, (5,)), torch.randint(0, 40, (3, 11))),
    "packed": lambda: (packed_positions([4, 3, 2]), packed_positions([4, 3, 2])),
}


@pytest.mark.parametrize("positions", list(POSITIONS))
@pytest.mark.parametrize("name", list(_biases()))
def test_score_mod_on_index_grid_equals_materialised_bias(name, positions):
    bias = _biases()[name]
    for table in bias.parameters():  # spread values: a wrong row reads a different one
        nn.init.normal_(table)
    qp, kp = POSITIONS[positions]()
    expected = bias(qp, kp)
    mod = bias.score_mod(qp, kp)
    assert (mod.batch, mod.num_queries, mod.num_keys) == (expected.shape[0], *expected.shape[2:])
    torch.testing.assert_close(mod.dense(HEADS), expected.expand(-1, HEADS, -1, -1),
                               rtol=0, atol=1e-6)


def test_alibi_score_mod_of_fractional_positions_equals_materialised_bias():
    qp, kp = torch.rand(2, 6) * 50, torch.rand(2, 8) * 50
    bias = ALiBi(3, causal=True)
    torch.testing.assert_close(bias.score_mod(qp, kp).dense(3), bias(qp, kp), rtol=0, atol=1e-5)


def test_score_mod_refuses_what_forward_refuses():
    with pytest.raises(TypeError, match="integer token positions"):
        T5RelativeBias(HEADS).score_mod(torch.arange(4.0), torch.arange(4))
    with pytest.raises(ValueError, match="batches 2 and 3"):
        ALiBi(HEADS).score_mod(torch.zeros(2, 4), torch.zeros(3, 4))


def _pair(bias: nn.Module | None, **kwargs) -> tuple[MultiheadAttention, MultiheadAttention]:
    sdpa = MultiheadAttention(16, HEADS, bias=bias, backend="sdpa", **kwargs).eval()
    flex = MultiheadAttention(16, HEADS, bias=bias, backend="flex", **kwargs).eval()
    flex.load_state_dict(sdpa.state_dict())
    return sdpa, flex


def _qkv(requires_grad: bool = False, device: str = "cpu"):
    return [torch.randn(2, HEADS, 5, 8, device=device, requires_grad=requires_grad)
            for _ in range(3)]


def test_backend_argument_is_checked():
    with pytest.raises(ValueError, match=r"backend must be one of \['auto', 'sdpa', 'flex'\]"):
        MultiheadAttention(16, HEADS, backend="triton")


def test_auto_takes_flex_only_on_cuda_with_a_score_mod_and_no_dense_mask_or_dropout():
    cuda = SimpleNamespace(is_cuda=True)  # the decision reads only the device of q in auto

    class NoScoreMod(nn.Module):
        pass

    assert use_flex("auto", ALiBi(HEADS), None, cuda, cuda, cuda, 0.0)
    assert not use_flex("auto", ALiBi(HEADS), None, cuda, cuda, cuda, 0.1)
    assert not use_flex("auto", ALiBi(HEADS), torch.ones(5, 5, dtype=torch.bool), cuda, cuda,
                        cuda, 0.0)
    assert not use_flex("auto", NoScoreMod(), None, cuda, cuda, cuda, 0.0)
    assert not use_flex("auto", None, None, cuda, cuda, cuda, 0.0)
    assert not use_flex("sdpa", ALiBi(HEADS), None, cuda, cuda, cuda, 0.0)
    q, k, v = _qkv()
    assert not use_flex("auto", ALiBi(HEADS), None, q, k, v, 0.0)  # CPU: SDPA


def test_forced_flex_refuses_what_it_cannot_run():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="takes attn_mask as a BlockMask"):
        use_flex("flex", ALiBi(HEADS), torch.ones(5, 5, dtype=torch.bool), q, k, v, 0.0)
    with pytest.raises(ValueError, match="attn_drop=0.1"):
        use_flex("flex", ALiBi(HEADS), None, q, k, v, 0.1)
    with pytest.raises(ValueError, match="ContinuousLike has none"):
        use_flex("flex", type("ContinuousLike", (nn.Module,), {})(), None, q, k, v, 0.0)
    with pytest.raises(ValueError, match="no backward on CPU"):
        use_flex("flex", ALiBi(HEADS), None, *_qkv(requires_grad=True), 0.0)
    with torch.no_grad():
        assert use_flex("flex", ALiBi(HEADS), None, *_qkv(requires_grad=True), 0.0)


BLOCK_MASKS = "the first create_block_mask of a process loads torch._dynamo (about 4 s)"


@pytest.mark.slow  # BLOCK_MASKS
def test_a_block_mask_needs_the_flex_path():
    q, k, v = _qkv()
    block = packed_block_mask([3, 2])
    with pytest.raises(ValueError, match="only backend='flex'"):
        use_flex("sdpa", None, block, q, k, v, 0.0)
    assert use_flex("auto", None, block, q, k, v, 0.0)  # a BlockMask needs flex


@pytest.mark.slow  # BLOCK_MASKS
def test_block_mask_on_another_device_than_the_queries_is_refused():
    q = torch.empty(1, HEADS, 5, 8, device="meta")
    with pytest.raises(ValueError, match="BlockMask on cpu for queries on meta"):
        flex_attend(q, q, q, block_mask=packed_block_mask([2, 3]))


@pytest.mark.slow  # BLOCK_MASKS
def test_packed_block_mask_equals_packed_attention_mask():
    lengths = [3, 1, 4]
    dense = packed_attention_mask(lengths)
    block = packed_block_mask(lengths)
    assert block.shape == (1, 1, 8, 8)
    index = torch.arange(8)
    torch.testing.assert_close(block.mask_mod(ZERO, ZERO, index[:, None], index[None, :]), dense)
    causal = packed_block_mask(lengths, causal=True)
    torch.testing.assert_close(causal.mask_mod(ZERO, ZERO, index[:, None], index[None, :]),
                               dense & torch.ones(8, 8, dtype=torch.bool).tril())
    with pytest.raises(ValueError, match="all >= 1"):
        packed_block_mask([3, 0])
    with pytest.raises(TypeError, match="causal"):
        packed_block_mask([3], causal=1)


@pytest.mark.slow  # BLOCK_MASKS
def test_causal_block_mask_is_bottom_right_aligned():
    mask = causal_block_mask(2, 5)
    index_q, index_k = torch.arange(2)[:, None], torch.arange(5)[None, :]
    expected = torch.ones(2, 5, dtype=torch.bool).tril(3)
    torch.testing.assert_close(mask.mask_mod(ZERO, ZERO, index_q, index_k), expected)
    assert causal_block_mask(2, 5) is mask  # built once per size and device


@pytest.mark.slow  # eager FlexAttention traces on first use (several seconds per process)
@pytest.mark.parametrize("name", ["alibi_causal", "t5", "clipped"])
def test_flex_path_equals_sdpa_path(name):
    sdpa, flex = _pair(_biases()[name])
    x = torch.randn(2, 10, 16)
    positions = torch.randint(0, 30, (2, 10))
    with torch.no_grad():
        for kwargs in ({}, {"query_positions": positions}, {"is_causal": True}):
            torch.testing.assert_close(flex(x, **kwargs), sdpa(x, **kwargs), rtol=0, atol=1e-5)


@pytest.mark.slow
def test_flex_packed_block_mask_equals_sdpa_packed_dense_mask():
    lengths = [4, 3, 5]
    sdpa, flex = _pair(ALiBi(HEADS))
    x, positions = torch.randn(2, 12, 16), packed_positions(lengths)
    with torch.no_grad():
        for causal in (False, True):
            dense = packed_attention_mask(lengths)
            dense = dense & torch.ones_like(dense).tril() if causal else dense
            expected = sdpa(x, query_positions=positions, attn_mask=dense)
            got = flex(x, query_positions=positions,
                       attn_mask=packed_block_mask(lengths, causal=causal))
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
            # is_causal on top of a block mask combines the two
            got = flex(x, query_positions=positions, attn_mask=packed_block_mask(lengths),
                       is_causal=causal)
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_flex_kv_cache_decoding_equals_sdpa():
    sdpa, flex = _pair(ClippedRelativeBias(HEADS, 4))
    x = torch.randn(1, 7, 16)
    caches = KVCache(), KVCache()
    with torch.no_grad():
        for chunk in (x[:, :4], x[:, 4:6], x[:, 6:]):
            outs = [m(chunk, is_causal=True, kv_cache=c)
                    for m, c in zip((sdpa, flex), caches, strict=True)]
            torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_flex_path_checks_positions_like_sdpa_path():
    _, flex = _pair(ALiBi(HEADS))
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        with pytest.raises(ValueError, match="give 5 positions for 6 tokens"):
            flex(x, query_positions=torch.arange(5))
        with pytest.raises(ValueError, match="give a batch of 3"):
            flex(x, query_positions=torch.zeros(3, 6, dtype=torch.long))
        with pytest.raises(ValueError, match=r"BlockMask of shape \(1, 1, 5, 5\)"):
            flex(x, attn_mask=packed_block_mask([2, 3]))


@pytest.mark.slow  # torch.compile of FlexAttention on CPU: about 20 s
def test_compiled_flex_kernel_equals_sdpa_bias():
    q, k, v = _qkv()
    positions = torch.randint(0, 20, (2, 5))
    bias = T5RelativeBias(HEADS, num_buckets=8, max_distance=12)
    mod = bias.score_mod(positions, positions)
    compiled = torch.compile(flex_attend, fullgraph=True)
    with torch.no_grad():
        expected = nn.functional.scaled_dot_product_attention(q, k, v,
                                                              attn_mask=bias(positions, positions))
        torch.testing.assert_close(compiled(q, k, v, mod), expected, rtol=0, atol=1e-5)
