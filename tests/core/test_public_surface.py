"""posenc.core exports the types users receive or implement (issue 29): the rotation that
``rotation()`` gives and ``apply_rotation`` takes, and the base of the RoPE scalings."""

from __future__ import annotations

import math
from dataclasses import dataclass

import posenc.core as core
import torch


def test_a_scaling_of_ones_own_derives_from_the_exported_base():
    @dataclass(frozen=True)
    class HalfFrequencies(core.RopeScaling):
        def inv_freq(self, rotary_dim: int, base: float) -> torch.Tensor:
            return super().inv_freq(rotary_dim, base) / 2

    rope = core.RotaryEncoding(8, base=100.0, scaling=HalfFrequencies())
    positions = torch.tensor([0, 3, 50])
    # Independent: pair i turns at 100 ** (-2i / 8) / 2 radians per position.
    theta = torch.tensor([[p * 100.0 ** (-2 * i / 8) / 2 for i in range(4)] for p in (0, 3, 50)],
                         dtype=torch.float64)
    torch.testing.assert_close(rope.rotation(positions).cos[0, 0], theta.cos().float(),
                               rtol=0, atol=1e-6)


def test_apply_rotation_takes_a_rotation_built_by_hand():
    x = torch.randn(1, 2, 3, 4, dtype=torch.float64)
    theta = torch.tensor([[0.0, 0.0], [math.pi / 2, 0.25], [math.pi, 1.0]], dtype=torch.float64)
    rotation = core.Rotation(theta.cos()[None, None].float(), theta.sin()[None, None].float(),
                             "interleaved")
    out = core.apply_rotation(x, rotation)
    # Independent: pair (2i, 2i + 1) as a complex number times exp(i theta).
    pairs = torch.view_as_complex(x.unflatten(-1, (2, 2)).contiguous())
    expected = torch.view_as_real(pairs * torch.polar(torch.ones_like(theta), theta)).flatten(-2)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
    assert isinstance(core.RotaryEncoding(4).rotation(torch.arange(3)), core.Rotation)
