"""Independent references and hypothesis strategies shared by the tests in tests/core.

The references are written from the papers / reference code, not from posenc, so a test that
compares posenc against them checks something posenc could get wrong.
"""

from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Per-test settings (not a global profile, which would also change other folders' tests):
# modest example counts keep tests/core near a minute on two cores.
core_settings = settings(max_examples=50, deadline=None,
                         suppress_health_check=[HealthCheck.function_scoped_fixture])

# ---- hypothesis strategies -------------------------------------------------------------------

int_positions = st.integers(min_value=0, max_value=1_000_000)
shifts = st.integers(min_value=-100_000, max_value=100_000)
# Multiples of 1/16 below 2**19 are exact in float32, and so are their sums with such shifts:
# the offset (n + s) - (m + s) is then exactly n - m, which the property needs.
dyadic_positions = st.integers(min_value=0, max_value=2**23).map(lambda v: v / 16)
dyadic_shifts = st.integers(min_value=-2**21, max_value=2**21).map(lambda v: v / 16)


# ---- independent references ------------------------------------------------------------------

def ref_inv_freq(dim: int, base: float = 10000.0) -> torch.Tensor:
    """``1 / base ** (2i / dim)`` in float64 (RoFormer eq. 15, the Transformer's wavelengths)."""
    return torch.tensor([1.0 / base ** (2 * i / dim) for i in range(dim // 2)],
                        dtype=torch.float64)


def ref_angles(positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """float64 ``positions[..., None] * inv_freq`` with no reduction."""
    return positions.double()[..., None] * inv_freq.double()


def hf_rotate(x: torch.Tensor, theta: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """Hugging Face Llama's ``x * cos + rotate_half(x) * sin`` (partial rotary: tail passes
    through), computed in float64. ``theta`` is ``(N, rotary_dim // 2)`` or ``(B, N, R/2)``."""
    from transformers.models.llama.modeling_llama import rotate_half

    if theta.ndim == 3:
        theta = theta[:, None]
    emb = torch.cat((theta, theta), dim=-1).double()
    x64 = x.double()
    rot, tail = x64[..., :rotary_dim], x64[..., rotary_dim:]
    out = rot * emb.cos() + rotate_half(rot) * emb.sin()
    return torch.cat((out, tail), dim=-1)


def complex_rotate(x: torch.Tensor, theta: torch.Tensor, rotary_dim: int) -> torch.Tensor:
    """Meta Llama's ``view_as_complex(x) * polar(1, theta)`` on channel pairs (2i, 2i+1),
    in complex128; channels past ``rotary_dim`` pass through."""
    if theta.ndim == 3:
        theta = theta[:, None]
    x64 = x.double()
    pairs = torch.view_as_complex(x64[..., :rotary_dim].reshape(*x.shape[:-1], -1, 2)
                                  .contiguous())
    cis = torch.polar(torch.ones_like(theta, dtype=torch.float64), theta.double())
    out = torch.view_as_real(pairs * cis).flatten(-2)
    return torch.cat((out, x64[..., rotary_dim:]), dim=-1)


def classic_sinusoidal_table(length: int, dim: int, dtype=torch.float64) -> torch.Tensor:
    """The PyTorch tutorial's ``PositionalEncoding`` buffer, verbatim apart from ``dtype``."""
    position = torch.arange(length, dtype=dtype).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=dtype) * (-math.log(10000.0) / dim))
    pe = torch.zeros(length, dim, dtype=dtype)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def official_alibi_slopes(n: int) -> list[float]:
    """``get_slopes`` from github.com/ofirpress/attention_with_linear_biases (fairseq
    multihead_attention.py), verbatim."""
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + official_alibi_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2])
