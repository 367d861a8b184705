"""KERPLE: kernelized relative positional biases (Chi et al. 2022, "KERPLE: Kernelized Relative
Positional Embedding for Length Extrapolation"), logarithmic and power variants."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .buffers import Float64Buffers
from .flex_attention import ScoreMod, pair_batch, token_lookup
from .positions import relative_positions
from .validation import (
    check_bool,
    check_choice,
    check_float,
    check_pair_values,
    check_position_shape,
    check_positive_float,
    check_positive_int,
)

__all__ = ["KERPLE_KERNELS", "kerple_bias", "Kerple"]

KERPLE_KERNELS = ("log", "power")
"""The two conditionally positive definite kernels of the paper: ``"log"``,
``-r1 * log(1 + r2 |i - j|)``, and ``"power"``, ``-r1 * |i - j| ** r2``.
"""

# The official code (chijames/KERPLE, megatron/mpu/layers.py) projects r1 and r2 onto
# [1e-2, inf) (power r2: [1e-2, 2]) after each step; its initial draws are clamped alike.
_FLOOR = 1e-2


def kerple_bias(distance: Tensor, r1: Tensor, r2: Tensor, kernel: str) -> Tensor:
    """The KERPLE bias of non-negative distances.

    Args:
        distance: ``|i - j|`` of any shape (float).
        r1: positive kernel parameter that broadcasts against ``distance`` (e.g. ``(H, 1, 1)``
            per head).
        r2: the same; for ``"power"`` ``0 < r2 <= 2``.
        kernel: ``"log"``, ``-r1 * log(1 + r2 * distance)``, or ``"power"``,
            ``-r1 * distance ** r2``.

    Returns:
        the bias, broadcast shape of the inputs (0 at distance 0 for both kernels).
    """
    if kernel == "log":
        return -r1 * torch.log1p(r2 * distance)
    # torch's pow backward gives 0 (not 0 * log 0 = NaN) for the exponent at distance 0.
    return -r1 * distance.pow(r2)


def _inverse_softplus(value: Tensor) -> Tensor:
    return value + torch.log(-torch.expm1(-value))


class Kerple(Float64Buffers):
    """KERPLE bias per head from explicit positions: token indices or real times.

    ``bias[b, h, i, j] = -r1_h * log(1 + r2_h * |pos_q[i] - pos_k[j]|)`` (``kernel="log"``) or
    ``-r1_h * |pos_q[i] - pos_k[j]| ** r2_h`` (``kernel="power"``), with learned ``r1_h, r2_h``.
    With ``causal=True`` keys whose position is after the query's get ``-inf``, as
    :class:`~posenc.core.ALiBi` (the paper's decoder use); ``causal=False`` gives the symmetric
    bias. Distances are in the positions' unit (tokens, or e.g. hours from
    ``posenc.temporal.time_positions(..., unit="h")``), any finite float.

    The paper's constraints (``r1, r2 > 0``; power: ``r2 <= 2``) hold by construction:
    ``r1 = softplus(raw_r1)``, ``r2 = softplus(raw_r2)`` (log) or ``2 * sigmoid(raw_r2)``
    (power, so ``0 < r2 < 2``: the endpoint 2 is approached, not reached). The official code
    instead clamps the parameters in place inside its forward (a projected gradient step onto
    ``[0.01, inf)``, ``[0.01, 2]``), which mutates the module during a forward and cannot be
    compiled; the values it can express are the same. Initial values are the official draws,
    ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)`` (log) and ``r1 ~ U(0, 1)``, ``r2 ~ U(0, 2)`` (power),
    clamped to its floor 0.01, unless ``r1``/``r2`` give one value for every head.

    Args:
        num_heads: attention heads.
        kernel: ``"log"`` or ``"power"``.
        causal: mask keys after the query (decoder use); False gives the symmetric bias.
        r1: initial value for every head instead of the random draw (``r1 > 0``).
        r2: the same for ``r2`` (``r2 > 0`` and, for ``"power"``, ``r2 < 2``).

    ``raw_r1``/``raw_r2`` are ``(H,)`` float32 parameters that stay float32 when the module is
    cast (like RoPE frequencies: a bf16 exponent of distance 1000 is off by whole logits).
    """

    kind = "bias"
    fixed_dtype_parameters = ("raw_r1", "raw_r2")

    def __init__(self, num_heads: int, kernel: str = "log", causal: bool = True, *,
                 r1: float | None = None, r2: float | None = None) -> None:
        super().__init__()
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.kernel = check_choice(kernel, "kernel", KERPLE_KERNELS)
        self.causal = check_bool(causal, "causal")
        self.init_r1 = None if r1 is None else check_positive_float(r1, "r1")
        # 2 * sigmoid keeps the power exponent below 2, so r2=2 could not be stored.
        self.init_r2 = None if r2 is None else (
            check_float(r2, "r2", gt=0, lt=2) if kernel == "power"
            else check_positive_float(r2, "r2"))
        self.raw_r1 = nn.Parameter(torch.empty(num_heads, dtype=torch.float32))
        self.raw_r2 = nn.Parameter(torch.empty(num_heads, dtype=torch.float32))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Redraw ``r1`` and ``r2`` (the official initialisation, or the given values)."""
        scale_r1, scale_r2 = (2.0, 1.0) if self.kernel == "log" else (1.0, 2.0)
        r1 = self._initial(self.init_r1, scale_r1)
        r2 = self._initial(self.init_r2, scale_r2)
        self.raw_r1.copy_(_inverse_softplus(r1))
        self.raw_r2.copy_(_inverse_softplus(r2) if self.kernel == "log" else torch.logit(r2 / 2))

    def _initial(self, value: float | None, scale: float) -> Tensor:
        # Drawn on the CPU (also under a meta device: a reset after to_empty() then draws what
        # a normal build does), in float64 so the inverse maps are exact.
        if value is not None:
            return torch.full((self.num_heads,), value, dtype=torch.float64, device="cpu")
        draw = torch.rand(self.num_heads, dtype=torch.float64, device="cpu")
        return (draw * scale).clamp_(min=_FLOOR)

    @property
    def r1(self) -> Tensor:
        """``(H,)`` float32 scale of each head's kernel, ``> 0``."""
        return F.softplus(self.raw_r1.float())

    @property
    def r2(self) -> Tensor:
        """``(H,)`` float32 rate (log) or exponent (power, in ``(0, 2)``) of each head."""
        raw = self.raw_r2.float()
        return F.softplus(raw) if self.kernel == "log" else 2 * torch.sigmoid(raw)

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Positions ``(Nq,)``/``(B, Nq)`` and ``(Nk,)``/``(B, Nk)`` -> float32 bias
        ``(B or 1, H, Nq, Nk)`` (cast to the logits' dtype by the attention)."""
        check_pair_values(query_positions, key_positions)
        return self._forward(query_positions, key_positions)

    def _forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        query_positions = check_position_shape(query_positions, "query_positions")
        key_positions = check_position_shape(key_positions, "key_positions")
        rel = relative_positions(query_positions, key_positions).float()[:, None]
        with torch.autocast(rel.device.type, enabled=False):
            bias = kerple_bias(rel.abs(), self.r1[:, None, None], self.r2[:, None, None],
                               self.kernel)
        if self.causal:
            bias = bias.masked_fill(rel > 0, float("-inf"))
        return bias

    def score_mod(self, query_positions: Tensor, key_positions: Tensor) -> ScoreMod:
        """:meth:`forward`'s bias as FlexAttention's score_mod: the same value at every
        ``[b, h, i, j]``, computed per pair from the positions (nothing materialised)."""
        check_pair_values(query_positions, key_positions)
        return self._score_mod(query_positions, key_positions)

    def _score_mod(self, query_positions: Tensor, key_positions: Tensor) -> ScoreMod:
        query_positions = check_position_shape(query_positions, "query_positions")
        key_positions = check_position_shape(key_positions, "key_positions")
        batch = pair_batch(query_positions, key_positions)
        q_at, k_at = token_lookup(query_positions), token_lookup(key_positions)
        r1, r2, kernel, causal = self.r1, self.r2, self.kernel, self.causal

        def bias(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            rel = (k_at(b, kv_idx) - q_at(b, q_idx)).float()
            out = kerple_bias(rel.abs(), r1[h], r2[h], kernel)
            return torch.where(rel > 0, float("-inf"), out) if causal else out

        return ScoreMod(bias, batch, query_positions.shape[-1], key_positions.shape[-1],
                        query_positions.device)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, kernel={self.kernel!r}, causal={self.causal}"

