"""Time2Vec: one linear and dim - 1 periodic components."""

from __future__ import annotations

import pytest
import torch
from posenc.temporal import Time2Vec


def test_formula():
    enc = Time2Vec(3)
    with torch.no_grad():
        enc.weight.copy_(torch.tensor([2.0, 0.5, -1.0]))
        enc.bias.copy_(torch.tensor([1.0, 0.25, 0.0]))
    t = torch.tensor([[0.0, 1.0], [2.0, -3.0]])
    expected = torch.stack([2 * t + 1, torch.sin(0.5 * t + 0.25), torch.sin(-t)], dim=-1)
    torch.testing.assert_close(enc(t), expected)
    assert Time2Vec(1)(t).shape == (2, 2, 1)


def test_gradients_reach_frequencies_and_phases():
    enc = Time2Vec(8)
    enc(torch.linspace(0, 10, 20)).pow(2).sum().backward()
    assert enc.weight.grad.abs().min() > 0 and enc.bias.grad.abs().min() > 0


def test_bfloat16_parameters_still_compute_angles_in_float32():
    enc = Time2Vec(4)
    times = torch.linspace(0, 500, 50)
    reference = enc(times)
    half = enc.to(torch.bfloat16)
    out = half(times)
    assert out.dtype == torch.bfloat16
    # Angles from the bf16 weights, computed in float32: only the final rounding is bf16.
    w, b = half.weight.float(), half.bias.float()
    z = times[:, None] * w + b
    expected = torch.cat((z[:, :1], torch.sin(z[:, 1:])), dim=-1).to(torch.bfloat16)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert reference.dtype == torch.float32


def test_errors():
    with pytest.raises(ValueError, match="dim must be >= 1"):
        Time2Vec(0)
    with pytest.raises(ValueError, match="times must have shape"):
        Time2Vec(2)(torch.zeros(2, 3, 4))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_times_raise(dtype):
    with pytest.raises(TypeError, match=f"times .*{str(dtype).split('.')[1]}"):
        Time2Vec(4)(torch.tensor([0.0, 2049.0], dtype=dtype))
