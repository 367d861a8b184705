"""MultiheadAttention and KVCache turn bad inputs into errors that name the argument and the
expected shape (issue 10: they used to crash inside a matmul, a cat or SDPA)."""

from __future__ import annotations

import posenc.core as core
import pytest
import torch

DIM, HEADS = 32, 4
x = torch.randn(2, 5, DIM)


def _attn(**kwargs):
    return core.MultiheadAttention(DIM, HEADS, rotary=core.RotaryEncoding(DIM // HEADS), **kwargs)


BAD_CALLS = {
    "2-D x": (lambda a: a(x[0]), ValueError, r"^x must have shape \(B, N, dim=32\), got \(5, 32\)"),
    "x width": (lambda a: a(x[..., :16]), ValueError,
                r"^x must have shape \(B, N, dim=32\), got \(2, 5, 16\)"),
    "int x": (lambda a: a(x.long()), TypeError, r"^x must be a floating tensor.*torch.int64"),
    "context width": (lambda a: a(x, torch.randn(2, 7, 16)), ValueError,
                      r"^context must have shape \(B, N, dim=32\), got \(2, 7, 16\)"),
    "context batch": (lambda a: a(x, torch.randn(3, 7, DIM)), ValueError,
                      r"^context of shape \(3, 7, 32\) has a batch of 3, expected B=2"),
    "int mask": (lambda a: a(x, attn_mask=torch.ones(5, 5, dtype=torch.long)), TypeError,
                 r"^attn_mask must be a bool \(True = attend\) or floating \(additive\) tensor, "
                 r"got torch.int64"),
    "bool mask shape": (lambda a: a(x, attn_mask=torch.ones(4, 5, dtype=torch.bool)), ValueError,
                        r"^attn_mask of shape \(4, 5\) does not broadcast to \(B, H, Nq, Nk\) = "
                        r"\(2, 4, 5, 5\)"),
    "float mask batch": (lambda a: a(x, attn_mask=torch.zeros(3, 1, 5, 5)), ValueError,
                         r"^attn_mask of shape \(3, 1, 5, 5\) does not broadcast"),
    "5-D mask": (lambda a: a(x, attn_mask=torch.zeros(1, 1, 1, 5, 5)), ValueError,
                 r"^attn_mask of shape \(1, 1, 1, 5, 5\)"),
    "kv_cache type": (lambda a: a(x, kv_cache={}), TypeError,
                      r"^kv_cache must be a KVCache or None, got dict"),
}


@pytest.mark.parametrize("name", list(BAD_CALLS))
def test_bad_attention_inputs_raise_naming_the_argument(name):
    call, exc, match = BAD_CALLS[name]
    with pytest.raises(exc, match=match):
        call(_attn())


@pytest.mark.parametrize("shape", [(5, 5), (1, 5), (2, 1, 1, 5), (1, HEADS, 5, 5), (5,)])
def test_masks_broadcastable_to_the_logits_are_legal(shape):
    attn = _attn()
    keep = torch.rand(shape) > 0.3
    keep[..., 0] = True  # every query keeps a key
    additive = torch.zeros(shape).masked_fill(~keep, float("-inf"))
    expected = attn(x, attn_mask=keep)
    torch.testing.assert_close(attn(x, attn_mask=additive), expected)
    # A float64 mask with float32 queries is cast (SDPA refused it).
    torch.testing.assert_close(attn(x, attn_mask=additive.double()), expected)


def test_float32_mask_with_bf16_queries_is_cast():
    attn = _attn().to(torch.bfloat16)
    out = attn(x.bfloat16(), attn_mask=torch.zeros(5, 5))
    assert out.dtype == torch.bfloat16


def _filled_cache(batch=2):
    attn, cache = _attn(), core.KVCache()
    attn(torch.randn(batch, 3, DIM), kv_cache=cache)
    return attn, cache


def test_kv_cache_refuses_a_new_batch_size_naming_both():
    attn, cache = _filled_cache()
    with pytest.raises(ValueError, match=r"^kv_cache holds a batch of 2 sequences, got keys for "
                                         r"a batch of 3"):
        attn(torch.randn(3, 1, DIM), kv_cache=cache)
    assert len(cache) == 3  # the failed step left the cache as it was


def test_kv_cache_refuses_another_dtype_or_head_layout():
    _, cache = _filled_cache()
    k = torch.randn(2, HEADS, 1, DIM // HEADS, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^kv_cache holds torch.float32 keys on cpu, got "
                                         r"torch.float64 keys on cpu"):
        cache.append(k, k, torch.tensor([3]))
    k = torch.randn(2, 2, 1, DIM // HEADS)
    with pytest.raises(ValueError, match=r"^kv_cache holds 4 heads of head_dim=8, got keys with "
                                         r"2 heads of head_dim=8"):
        cache.append(k, k, torch.tensor([3]))
    k = torch.randn(2, HEADS, 1, DIM // HEADS)
    with pytest.raises(ValueError, match=r"^kv_cache takes keys and values of the same shape"):
        cache.append(k, k[..., :4], torch.tensor([3]))


def test_kv_cache_refuses_positions_of_another_batch():
    cache = core.KVCache()
    k = torch.randn(2, HEADS, 1, 8)
    cache.append(k, k, torch.zeros(2, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^positions must have the same form at every decoding "
                                         r"step, got \(3, 1\) after \(2, 1\)"):
        cache.append(k, k, torch.ones(3, 1, dtype=torch.long))


def test_kv_cache_refuses_a_bad_coord_dims():
    with pytest.raises(ValueError, match=r"^coord_dims must be an int >= 0, got -1"):
        core.KVCache(-1)


@pytest.mark.parametrize("name, value, exc", [("attn_drop", 2.0, ValueError),
                                              ("proj_drop", -0.1, ValueError),
                                              ("attn_drop", "0.1", TypeError)])
def test_dropout_probabilities_are_checked(name, value, exc):
    with pytest.raises(exc, match=rf"^{name} must be "):
        core.MultiheadAttention(DIM, HEADS, **{name: value})


def test_apply_rotation_refuses_a_rotation_for_other_tokens_or_another_device():
    rotation = core.RotaryEncoding(8).rotation(torch.arange(5))
    with pytest.raises(ValueError, match=r"^a rotation of shape \(1, 1, 5, 4\) .* does not fit x "
                                         r"of shape \(2, 4, 6, 8\)"):
        core.apply_rotation(torch.randn(2, 4, 6, 8), rotation)
    with pytest.raises(ValueError, match=r"does not fit x of shape \(2, 4, 5, 4\)"):
        core.apply_rotation(torch.randn(2, 4, 5, 4), rotation)
    with pytest.raises(ValueError, match=r"^the rotation is on cpu but x is on meta"):
        core.apply_rotation(torch.randn(2, 4, 5, 8, device="meta"), rotation)


class _CPUBias(torch.nn.Module):
    num_heads = HEADS

    def forward(self, q, k):
        return torch.zeros(1, HEADS, q.shape[-1], k.shape[-1])


def test_attention_refuses_a_bias_on_another_device():
    with torch.device("meta"):
        attn = core.MultiheadAttention(DIM, HEADS, bias=_CPUBias())
    with pytest.raises(ValueError, match=r"^bias _CPUBias gave logits on cpu for queries on meta"):
        attn(torch.randn(2, 5, DIM, device="meta"), query_positions=torch.arange(5))
