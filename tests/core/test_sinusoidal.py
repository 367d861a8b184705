"""Sinusoidal encoding: the Transformer table, its shift property, layouts and precision."""

from __future__ import annotations

import math

import pytest
import torch
from core_refs import classic_sinusoidal_table, core_settings, ref_angles, ref_inv_freq
from hypothesis import given
from hypothesis import strategies as st
from posenc.core import SinusoidalEncoding
from posenc.core.additive import sinusoidal_encoding, sinusoidal_inv_freq


def shift_matrix(dim: int, k: float, base: float = 10000.0) -> torch.Tensor:
    """The fixed map M_k with PE(p + k) = M_k PE(p) for the interleaved layout.

    Per pair (s, c) = (sin pw, cos pw): sin((p+k)w) = s cos kw + c sin kw and
    cos((p+k)w) = c cos kw - s sin kw, a 2x2 rotation that does not depend on p.
    """
    m = torch.zeros(dim, dim, dtype=torch.float64)
    for i, w in enumerate(ref_inv_freq(dim, base).tolist()):
        ck, sk = math.cos(k * w), math.sin(k * w)
        m[2 * i, 2 * i], m[2 * i, 2 * i + 1] = ck, sk
        m[2 * i + 1, 2 * i], m[2 * i + 1, 2 * i + 1] = -sk, ck
    return m


@core_settings
@given(k=st.integers(-5000, 5000))
def test_pe_of_p_plus_k_is_a_fixed_linear_map_of_pe_of_p(k):
    enc = SinusoidalEncoding(32)
    p = torch.cat((torch.arange(0, 200), torch.tensor([10_000, 123_457, 999_999])))
    m = shift_matrix(32, k)
    shifted = enc(p + k).double()
    mapped = enc(p).double() @ m.T
    # Float32 outputs round to 6e-8 and carry <= 3e-7 angle error; a map that depended on p,
    # or a wrong frequency, is off by O(1).
    torch.testing.assert_close(mapped, shifted, atol=2e-6, rtol=0)


def test_shift_map_is_unique_least_squares_fit():
    """Fit M from data alone: the best linear map PE(p) -> PE(p + k) is exact and equals M_k."""
    enc = SinusoidalEncoding(16)
    p = torch.arange(2000)
    a, b = enc(p).double(), enc(p + 37).double()
    fit = torch.linalg.lstsq(a, b).solution.T
    assert (a @ fit.T - b).abs().max() < 1e-5
    torch.testing.assert_close(fit, shift_matrix(16, 37), atol=1e-4, rtol=0)


@core_settings
@given(st.lists(st.floats(-1e7, 1e7, allow_nan=False), min_size=1, max_size=20))
def test_values_lie_in_unit_interval(values):
    out = SinusoidalEncoding(64)(torch.tensor(values, dtype=torch.float64),
                                 dtype=torch.float64)
    assert out.abs().max() <= 1.0
    # Each (sin, cos) pair lies on the unit circle.
    pairs = out.unflatten(-1, (32, 2))
    torch.testing.assert_close(pairs.pow(2).sum(-1), torch.ones(len(values), 32,
                                                                dtype=torch.float64))


@pytest.mark.parametrize("dim", [16, 512])
def test_equals_classic_pytorch_buffer_recipe(dim):
    """The tutorial's buffer, run in float64, to 1e-6 over 5000 positions.

    The verbatim float32 recipe is itself off from exact by ~p * 6e-8 rad (its float32
    exponent constant and product): measured 3.9e-4 at p < 5000 and 3e-6 already at p < 64
    for dim 512. So the long comparison uses the recipe in float64, and the float32 recipe is
    compared only over the first 16 positions, where its own error is below 1e-6.
    """
    length = 5000
    expected = classic_sinusoidal_table(length, dim, torch.float64)
    out = SinusoidalEncoding(dim)(torch.arange(length))
    assert out.shape == (length, dim) and out.dtype == torch.float32
    assert (out.double() - expected).abs().max() <= 1e-6
    expected32 = classic_sinusoidal_table(16, dim, torch.float32)
    torch.testing.assert_close(out[:16], expected32, atol=1e-6, rtol=0)


def test_hand_worked_values():
    # dim 4: frequencies 1 and 1/100; PE(p) = [sin p, cos p, sin(p/100), cos(p/100)].
    out = SinusoidalEncoding(4)(torch.tensor([0, 1, 50]))
    expected = torch.tensor([[0.0, 1.0, 0.0, 1.0],
                             [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
                             [math.sin(50), math.cos(50), math.sin(0.5), math.cos(0.5)]])
    # float32 angles reduced mod 2*pi round to <= 2.4e-7 rad.
    torch.testing.assert_close(out, expected, atol=5e-7, rtol=0)


def test_half_layout_is_sin_block_then_cos_block():
    p = torch.arange(100) * 13
    theta = ref_angles(p, ref_inv_freq(32))
    out = SinusoidalEncoding(32, layout="half")(p).double()
    torch.testing.assert_close(out, torch.cat((theta.sin(), theta.cos()), -1), atol=1e-6, rtol=0)
    interleaved = SinusoidalEncoding(32)(p)
    assert torch.equal(out.float(), torch.cat((interleaved[:, 0::2], interleaved[:, 1::2]), -1))


@core_settings
@given(st.lists(st.floats(0, 1e5, allow_nan=False), min_size=1, max_size=10))
def test_continuous_positions_evaluate_the_formula(values):
    p = torch.tensor(values, dtype=torch.float32)
    theta = ref_angles(p, ref_inv_freq(32))  # at the float32 positions actually given
    out = SinusoidalEncoding(32)(p).double()
    expected = torch.stack((theta.sin(), theta.cos()), -1).flatten(-2)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)


def test_fractional_positions_lie_between_neighbours_on_the_circle():
    # PE(p + 0.5) for the fastest pair is the half-way rotation of PE(p): angle p + 0.5.
    out = SinusoidalEncoding(8)(torch.tensor([2.5]))
    assert out[0, 0].item() == pytest.approx(math.sin(2.5), abs=1e-7)
    assert out[0, 1].item() == pytest.approx(math.cos(2.5), abs=1e-7)


def test_precision_within_1e6_up_to_position_1e6():
    p = torch.cat((torch.arange(999_000, 1_000_001, 7), torch.tensor([123_457, 654_321])))
    inv_freq = sinusoidal_inv_freq(256)
    out = sinusoidal_encoding(p, inv_freq)
    theta = ref_angles(p, ref_inv_freq(256))
    expected = torch.stack((theta.sin(), theta.cos()), -1).flatten(-2)
    assert out.dtype == torch.float32
    assert (out.double() - expected).abs().max() <= 1e-6


def test_batched_positions_shape_and_float64_output():
    enc = SinusoidalEncoding(8)
    assert enc(torch.zeros(3, 5, dtype=torch.long)).shape == (3, 5, 8)
    out = enc(torch.tensor([1e9 + 0.5], dtype=torch.float64), dtype=torch.float64)
    assert out.dtype == torch.float64
    theta = (1e9 + 0.5) * ref_inv_freq(8)
    torch.testing.assert_close(out[0, 0::2], theta.sin(), atol=1e-9, rtol=0)


def test_bf16_cast_keeps_float64_frequencies_and_output():
    enc = SinusoidalEncoding(64)
    p = torch.arange(999_000, 1_000_000, 3)
    expected = enc(p)
    enc.to(torch.bfloat16)
    assert enc.inv_freq64.dtype == torch.float64
    assert torch.equal(enc(p), expected)
    assert "inv_freq64" not in enc.state_dict()
