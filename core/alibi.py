"""ALiBi: attention with linear biases (Press et al. 2022)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .buffers import Float64Buffers
from .flex_attention import ScoreMod, pair_batch, token_lookup
from .positions import relative_positions
from .validation import check_bool, check_pair_values, check_position_shape, check_positive_int

__all__ = ["alibi_slopes", "ALiBi"]


def alibi_slopes(num_heads: int) -> Tensor:
    """``(num_heads,)`` float32 head slopes, exactly the official recipe.

    For a power of two ``n`` the slopes are the geometric sequence starting at and with ratio
    ``2 ** (-8 / n)``; otherwise the ``2 ** floor(log2 n)`` sequence is followed by every
    other slope of the sequence for twice that count.
    """
    check_positive_int(num_heads, "num_heads")

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_2(closest)
    if closest != num_heads:
        slopes += alibi_slopes(2 * closest).tolist()[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBi(Float64Buffers):
    """Linear distance penalty per head, from explicit positions.

    ``bias[b, h, i, j] = -slope_h * |pos_q[i] - pos_k[j]|``. With ``causal=True`` keys whose
    position is after the query's get ``-inf``, so the module also enforces causality by
    position (correct for packed sequences and KV caches, whatever the token order).

    Args:
        num_heads: attention heads.
        causal: mask keys after the query (decoder use); False gives the symmetric bias.
    """

    kind = "bias"

    def __init__(self, num_heads: int, causal: bool = True) -> None:
        super().__init__()
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.causal = check_bool(causal, "causal")
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        # Kept out of .to(bfloat16): a bf16 slope is off by up to 0.4%, whole logits at
        # distance 1000 (like a rotary frequency, it is a constant of the encoding).
        return {"slopes": alibi_slopes(self.num_heads)}

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Positions ``(Nq,)``/``(B, Nq)`` and ``(Nk,)``/``(B, Nk)`` -> float32 bias
        ``(B or 1, H, Nq, Nk)``."""
        check_pair_values(query_positions, key_positions)
        return self._forward(query_positions, key_positions)

    def _forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        query_positions = check_position_shape(query_positions, "query_positions")
        key_positions = check_position_shape(key_positions, "key_positions")
        rel = relative_positions(query_positions, key_positions).float()
        bias = -self.slopes.float()[:, None, None] * rel.abs()[:, None]
        if self.causal:
            bias = bias.masked_fill(rel[:, None] > 0, float("-inf"))
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
        slopes, causal = self.slopes.float(), self.causal

        def bias(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            rel = (k_at(b, kv_idx) - q_at(b, q_idx)).float()
            out = -slopes[h] * rel.abs()
            return torch.where(rel > 0, float("-inf"), out) if causal else out

        return ScoreMod(bias, batch, query_positions.shape[-1], key_positions.shape[-1],
                        query_positions.device)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, causal={self.causal}"
