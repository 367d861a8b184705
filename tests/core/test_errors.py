"""Every bad input of shared/design.md section 4 that applies to core raises a clear error
naming the argument (and, where there is one, the value and what was expected)."""

from __future__ import annotations

import pytest
import torch
from posenc.core import (
    ALiBi,
    ClippedRelativeBias,
    DynamicNTKScaling,
    InputEmbedding,
    KVCache,
    LearnedEncoding,
    LinearScaling,
    Llama3Scaling,
    MultiheadAttention,
    NTKScaling,
    RotaryEncoding,
    SinusoidalEncoding,
    T5RelativeBias,
    YarnScaling,
    convert_rotary_layout,
    incremental_positions,
    packed_positions,
    positions_from_padding_mask,
)
from posenc.core.additive import sinusoidal_encoding, sinusoidal_inv_freq
from posenc.core.bias import t5_relative_bucket
from posenc.core.rope import rotary_layout_permutation

NAN, INF = float("nan"), float("inf")
x4 = torch.randn(2, 4, 5, 16)


CASES = {
    # odd dims where pairs are needed
    "sinusoidal odd dim": (lambda: SinusoidalEncoding(7), ValueError, r"dim must be even.*7"),
    "sinusoidal_inv_freq odd dim": (lambda: sinusoidal_inv_freq(5), ValueError,
                                    r"dim must be even.*5"),
    "rope odd head_dim": (lambda: RotaryEncoding(63), ValueError, r"head_dim must be even.*63"),
    "rope odd rotary_dim": (lambda: RotaryEncoding(64, rotary_dim=31), ValueError,
                            r"rotary_dim must be even.*31"),
    "rope rotary_dim > head_dim": (lambda: RotaryEncoding(16, rotary_dim=32), ValueError,
                                   r"rotary_dim must be <= head_dim=16.*32"),
    "rope float head_dim": (lambda: RotaryEncoding(64.0), TypeError,
                            r"head_dim must be an int.*float"),
    "rope zero head_dim": (lambda: RotaryEncoding(0), ValueError, r"head_dim must be >= 1"),
    "permutation odd rotary_dim": (lambda: rotary_layout_permutation(8, 3), ValueError,
                                   "rotary_dim must be even"),
    "rope base <= 1": (lambda: RotaryEncoding(8, base=1.0), ValueError,
                       r"base must be a finite number > 1, got 1.0"),
    "sinusoidal base <= 1": (lambda: SinusoidalEncoding(8, base=0.5), ValueError,
                             r"base must be a finite number > 1, got 0.5"),
    # non-finite positions
    "sinusoidal nan": (lambda: SinusoidalEncoding(8)(torch.tensor([0.0, NAN])), ValueError,
                       "positions must be finite"),
    "rope inf": (lambda: RotaryEncoding(8).rotation(torch.tensor([INF])), ValueError,
                 "positions must be finite"),
    "rope rotate nan": (lambda: RotaryEncoding(16).rotate(x4, torch.full((5,), NAN)),
                        ValueError, "positions must be finite"),
    "learned nan": (lambda: LearnedEncoding(4, 2)(torch.tensor([NAN])), ValueError,
                    "positions must be finite"),
    "alibi nan query": (lambda: ALiBi(2)(torch.tensor([NAN]), torch.tensor([0.0])), ValueError,
                        "query_positions must be finite"),
    "alibi inf key": (lambda: ALiBi(2)(torch.tensor([0.0]), torch.tensor([-INF])), ValueError,
                      "key_positions must be finite"),
    # positions outside a learned table
    "learned negative": (lambda: LearnedEncoding(4, 2)(torch.tensor([-1])), ValueError,
                         r"positions must lie in \[0, 3\].*got values in \[-1, -1\]"),
    "learned past end": (lambda: LearnedEncoding(4, 2)(torch.tensor([0, 4])), ValueError,
                         r"num_positions=4.*resize"),
    "learned fractional past end": (lambda: LearnedEncoding(4, 2)(torch.tensor([3.5])),
                                    ValueError, r"positions must lie in \[0, 3\]"),
    "input embedding past table": (
        lambda: InputEmbedding(10, 4, LearnedEncoding(3, 4))(torch.zeros(1, 5, dtype=torch.long)),
        ValueError, "positions must lie in"),
    # heads mismatch
    "attention alibi heads": (lambda: MultiheadAttention(32, 4, bias=ALiBi(8)), ValueError,
                              r"bias.num_heads=8 does not match num_heads=4"),
    "attention t5 heads": (lambda: MultiheadAttention(32, 4, bias=T5RelativeBias(2)),
                           ValueError, r"bias.num_heads=2 does not match num_heads=4"),
    "attention rotary head_dim": (
        lambda: MultiheadAttention(32, 4, rotary=RotaryEncoding(16)), ValueError,
        r"rotary.head_dim=16 does not match dim // num_heads = 8"),
    "attention dim % heads": (lambda: MultiheadAttention(30, 4), ValueError,
                              r"dim=30 must be divisible by num_heads=4"),
    "attention rotary type": (lambda: MultiheadAttention(32, 4, rotary=ALiBi(4)), TypeError,
                              r"rotary must provide rotation"),
    "convert heads": (lambda: convert_rotary_layout(torch.randn(30, 4), 4, "half",
                                                    "interleaved"),
                      ValueError, r"weight.shape\[0\]=30 is not divisible by num_heads=4"),
    "alibi zero heads": (lambda: ALiBi(0), ValueError, "num_heads must be >= 1"),
    # bad layout / encoding names (the valid ones are listed)
    "rope layout": (lambda: RotaryEncoding(8, layout="neox"), ValueError,
                    r"layout must be one of \['half', 'interleaved'\], got 'neox'"),
    "sinusoidal layout": (lambda: SinusoidalEncoding(8, layout="concat"), ValueError,
                          r"layout must be one of \['half', 'interleaved'\], got 'concat'"),
    "sinusoidal_encoding layout": (
        lambda: sinusoidal_encoding(torch.arange(3), sinusoidal_inv_freq(4), "cat"),
        ValueError, "layout must be one of"),
    "convert src": (lambda: convert_rotary_layout(torch.randn(8, 2), 1, "gptj", "half"),
                    ValueError, r"src must be one of \['half', 'interleaved'\]"),
    "convert dst": (lambda: convert_rotary_layout(torch.randn(8, 2), 1, "half", "complex"),
                    ValueError, r"dst must be one of"),
    "rope scaling type": (lambda: RotaryEncoding(8, scaling="yarn"), TypeError,
                          r"scaling must be a RopeScaling.*str"),
    # bad scaling factors
    "linear factor < 1": (lambda: LinearScaling(0.5), ValueError, r"factor must be .*>= 1.*0.5"),
    "ntk factor 0": (lambda: NTKScaling(0), ValueError, r"factor must be .*>= 1, got 0"),
    "yarn factor nan": (lambda: YarnScaling(NAN, 2048), ValueError, r"factor must be .*nan"),
    "dynamic factor str": (lambda: DynamicNTKScaling("2", 2048), TypeError,
                           r"factor must be a number, got str"),
    "llama3 factor negative": (lambda: Llama3Scaling(-8.0, 8192), ValueError,
                               r"factor must be .*-8.0"),
    "yarn original 0": (lambda: YarnScaling(4.0, 0), ValueError,
                        r"original_max_positions must be >= 1, got 0"),
    "dynamic original float": (lambda: DynamicNTKScaling(2.0, 2048.0), TypeError,
                               r"original_max_positions must be an int, got float"),
    "yarn betas": (lambda: YarnScaling(4.0, 2048, beta_fast=1, beta_slow=32), ValueError,
                   r"beta_fast > beta_slow > 0.*beta_fast=1.*beta_slow=32"),
    "llama3 freq factors": (lambda: Llama3Scaling(8.0, 8192, low_freq_factor=4,
                                                  high_freq_factor=1),
                            ValueError, r"high_freq_factor=1.*low_freq_factor=4"),
    # wrong positions / tensor shapes
    "rope 3d positions": (lambda: RotaryEncoding(16).rotate(x4, torch.zeros(2, 1, 5)),
                          ValueError, r"positions must have shape \(N\) or \(B, N\)"),
    "rope 0-d positions": (lambda: RotaryEncoding(16).rotate(x4, torch.tensor(3)), ValueError,
                           r"positions must have shape \(N\) or \(B, N\), got \(\)"),
    "rope list positions": (lambda: RotaryEncoding(16).rotate(x4, [0, 1, 2, 3, 4]), TypeError,
                            r"positions must be a torch.Tensor, got list"),
    "rope length mismatch": (lambda: RotaryEncoding(16).rotate(x4, torch.arange(6)), ValueError,
                             r"positions of shape \(6,\) do not match x of shape \(2, 4, 5, 16\)"),
    "rope batch mismatch": (lambda: RotaryEncoding(16).rotate(x4, torch.zeros(3, 5)),
                            ValueError, r"positions of shape \(3, 5\) do not match x"),
    "rope x head_dim": (lambda: RotaryEncoding(8).rotate(x4, torch.arange(5)), ValueError,
                        r"x must have shape \(B, H, N, head_dim=8\), got \(2, 4, 5, 16\)"),
    "rope x 3d": (lambda: RotaryEncoding(16).rotate(x4[0], torch.arange(5)), ValueError,
                  r"x must have shape \(B, H, N, head_dim=16\)"),
    "rope bool positions": (lambda: RotaryEncoding(8).rotation(torch.ones(3, dtype=torch.bool)),
                            TypeError, r"positions must be an integer or floating tensor"),
    "sinusoidal 3d positions": (lambda: SinusoidalEncoding(8)(torch.zeros(1, 2, 3)), ValueError,
                                r"positions must have shape"),
    "alibi 3d key positions": (lambda: ALiBi(2)(torch.arange(3), torch.zeros(1, 1, 3)),
                               ValueError, r"key_positions must have shape"),
    "t5 float positions": (lambda: T5RelativeBias(2)(torch.tensor([0.5]), torch.tensor([1.0])),
                           TypeError, r"query_positions must be integer token positions"),
    "clipped float positions": (
        lambda: ClippedRelativeBias(2, 4)(torch.tensor([0]), torch.tensor([1.0])), TypeError,
        r"key_positions must be integer token positions"),
    "t5 bucket float offsets": (lambda: t5_relative_bucket(torch.tensor([0.5])), TypeError,
                                r"relative_position must be an integer tensor"),
    "padding mask not bool": (lambda: positions_from_padding_mask(torch.ones(2, 3)), TypeError,
                              r"mask must be a \(B, N\) bool tensor.*float32"),
    "padding mask 1d": (lambda: positions_from_padding_mask(torch.ones(3, dtype=torch.bool)),
                        TypeError, r"mask must be a \(B, N\) bool tensor.*\(3,\)"),
    "packed zero length": (lambda: packed_positions([3, 0]), ValueError,
                           r"lengths must be non-empty and all >= 1, got \[3, 0\]"),
    "packed float lengths": (lambda: packed_positions(torch.tensor([1.5])), TypeError,
                             "lengths must be a 1D integer sequence"),
    "incremental negative offset": (lambda: incremental_positions(2, -1), ValueError,
                                    r"offset must be an int >= 0.*-1"),
    "incremental float offsets": (lambda: incremental_positions(2, torch.tensor([1.0])),
                                  TypeError, r"offset must be an int or a \(B,\) integer"),
    "incremental zero tokens": (lambda: incremental_positions(0, 3), ValueError,
                                "num_tokens must be >= 1"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_raises_clear_error(name):
    call, exc, match = CASES[name]
    with pytest.raises(exc, match=match):
        call()


x_tokens = torch.randn(2, 5, 32)


ATTENTION_CASES = {
    "rotary query positions length": (
        dict(rotary=RotaryEncoding(8)), dict(query_positions=torch.arange(6)),
        r"query_positions .*\(6,\).*5"),
    "rotary query positions batch": (
        dict(rotary=RotaryEncoding(8)), dict(query_positions=torch.zeros(3, 5, dtype=torch.long)),
        r"query_positions .*\(3, 5\)"),
    "rotary key positions length": (
        dict(rotary=RotaryEncoding(8)),
        dict(context=torch.randn(2, 7, 32), query_positions=torch.arange(5),
             key_positions=torch.arange(6)),
        r"key_positions .*\(6,\).*7"),
    "bias query positions length": (
        dict(bias=ALiBi(4)), dict(query_positions=torch.arange(4)),
        r"query_positions .*\(4,\).*5"),
    "bias key positions batch": (
        dict(bias=T5RelativeBias(4)),
        dict(context=torch.randn(2, 7, 32), query_positions=torch.arange(5),
             key_positions=torch.zeros(4, 7, dtype=torch.long)),
        r"key_positions .*\(4, 7\)"),
}


@pytest.mark.parametrize("name", list(ATTENTION_CASES))
def test_attention_rejects_positions_that_do_not_match_the_tokens(name):
    encodings, kwargs, match = ATTENTION_CASES[name]
    attn = MultiheadAttention(32, 4, **encodings)
    kwargs = dict(kwargs)
    context = kwargs.pop("context", None)
    with pytest.raises(ValueError, match=match):
        attn(x_tokens, context, **kwargs)


def test_kv_cache_rejects_changing_position_form():
    attn = MultiheadAttention(32, 4, rotary=RotaryEncoding(8))
    cache = KVCache()
    attn(x_tokens, query_positions=torch.arange(5), kv_cache=cache)
    with pytest.raises(ValueError, match="positions must have the same form at every decoding"):
        attn(x_tokens[:, :1], query_positions=torch.tensor([[5], [5]]), kv_cache=cache)
