"""Encodings built under ``torch.device("meta")`` come back exact after ``to_empty()`` and
``reset_parameters()`` (issue 10: their float64 frequency buffers could not be recovered)."""

from __future__ import annotations

import posenc.core as core
import pytest
import torch
from torch import nn

POS = torch.tensor([0, 5, 1, 1000, 3])

# name -> (factory, call)
ENCODINGS = {
    "sinusoidal": (lambda: core.SinusoidalEncoding(16), lambda m: m(POS)),
    "rope": (lambda: core.RotaryEncoding(16), lambda m: m.rotation(POS).cos),
    "rope yarn": (lambda: core.RotaryEncoding(16, scaling=core.YarnScaling(4.0, 64)),
                  lambda m: m.rotation(POS).sin),
    "rope llama3": (lambda: core.RotaryEncoding(16, scaling=core.Llama3Scaling(8.0, 64)),
                    lambda m: m.rotation(POS).sin),
    "rope dynamic": (lambda: core.RotaryEncoding(16, scaling=core.DynamicNTKScaling(2.0, 64)),
                     lambda m: m.rotation(POS).sin),
    "alibi": (lambda: core.ALiBi(3), lambda m: m(POS, POS)),
    "t5": (lambda: core.T5RelativeBias(3), lambda m: m(POS, POS)),
    "clipped": (lambda: core.ClippedRelativeBias(3, 4), lambda m: m(POS, POS)),
    "kerple": (lambda: core.Kerple(3), lambda m: m(POS, POS)),
    "fire": (lambda: core.FIRE(3), lambda m: m(POS, POS)),
    "learned": (lambda: core.LearnedEncoding(1001, 4), lambda m: m(POS)),
    "attention": (
        lambda: core.MultiheadAttention(16, 2, rotary=core.RotaryEncoding(8), bias=core.ALiBi(2)),
        lambda m: m(torch.linspace(-1, 1, 80).reshape(1, 5, 16), query_positions=POS)),
}


def _reset_all(model: nn.Module) -> None:
    """torchtune's meta-device recipe: every submodule re-initialises itself."""
    for module in model.modules():
        if callable(getattr(module, "reset_parameters", None)):
            module.reset_parameters()


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_meta_build_then_to_empty_and_reset_parameters_equals_a_normal_build(name):
    build, call = ENCODINGS[name]
    reference = build()
    with torch.device("meta"):
        model = build()
    model.to_empty(device="cpu")
    _reset_all(model)
    model.load_state_dict(reference.state_dict())  # learned values are the user's to load
    torch.testing.assert_close(call(model), call(reference), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["sinusoidal", "rope", "rope yarn", "alibi"])
def test_to_empty_alone_recomputes_the_float64_buffers(name):
    build, call = ENCODINGS[name]
    with torch.device("meta"):
        model = build()
    assert all(b.is_meta for b in model.buffers())
    model.to_empty(device="cpu")
    assert all(b.dtype == torch.float64 and not b.is_meta for b in model.buffers())
    torch.testing.assert_close(call(model), call(build()), rtol=0, atol=0)


def test_reset_parameters_recomputes_overwritten_buffers():
    rope = core.RotaryEncoding(16)
    expected = rope.inv_freq64.clone()
    rope.inv_freq64.fill_(float("nan"))  # what to_empty from a real device leaves
    rope.reset_parameters()
    assert torch.equal(rope.inv_freq64, expected)


def test_float64_buffers_stay_float64_under_a_dtype_cast():
    rope = core.RotaryEncoding(16).to(torch.bfloat16)
    assert rope.inv_freq64.dtype == torch.float64


def test_a_cast_keeps_fixed_dtype_parameters_their_object_values_and_gradients():
    """Kerple's learned rates have no definition to recompute: a bf16 cast leaves the same
    float32 parameter (an optimizer holds it) with its values and its gradient."""
    kerple = core.Kerple(3)
    kerple(POS, POS.double()).sum().backward()
    raw = kerple.raw_r1
    values, grad = raw.detach().clone(), raw.grad.clone()
    kerple.to(torch.bfloat16)
    assert kerple.raw_r1 is raw and raw.dtype == torch.float32 == raw.grad.dtype
    assert torch.equal(raw.detach(), values) and torch.equal(raw.grad, grad)
    with torch.device("meta"):
        meta = core.Kerple(3)
    meta.to(torch.bfloat16).to_empty(device="cpu")  # cast while meta, then materialised
    assert meta.raw_r1.dtype == torch.float32 and not meta.raw_r1.is_meta
