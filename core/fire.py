"""FIRE: functional interpolation for relative positions (Li et al. 2023, "Functional
Interpolation for Relative Positions Improves Long Context Transformers", ICLR 2024)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .buffers import Float64Buffers
from .flex_attention import ScoreMod, pair_batch, token_lookup
from .positions import relative_positions
from .validation import (
    check_bool,
    check_float,
    check_pair_values,
    check_position_shape,
    check_positive_float,
    check_positive_int,
)

__all__ = ["FIRE"]


class FIRE(Float64Buffers):
    """FIRE bias per head: an MLP of the log-transformed offset, progressively interpolated.

    ``bias[b, h, i, j] = f(psi(d) / (psi(max(L, p_i, p_j)) + eps))[h]`` with ``d = p_i - p_j``
    (query minus key position), ``psi(x) = log(1 + |c| x)`` (for ``d < 0``: ``-psi(-d)``),
    ``L = |threshold_multiplier| * init_threshold`` and ``f = Linear(1, mlp_width) -> ReLU ->
    Linear(mlp_width, H)``. ``c`` and ``threshold_multiplier`` are learned scalars.

    With ``causal=True`` keys after the query get ``-inf`` (as :class:`~posenc.core.ALiBi`) and
    every other pair has ``p_j <= p_i``, so the bias is exactly the paper's
    ``f(psi(i - j) / psi(max(L, i)))`` and its listing's (``|c|``, ``L`` as a learned multiple
    of its initial value, ``eps`` added to the normaliser; ``init_c=0.1``, ``init_threshold=
    512``, ``mlp_width=32`` are its defaults). ``causal=False`` is posenc's extension (the paper
    defines FIRE for causal attention): the MLP gets the offset's sign, so a key 3 ahead and
    one 3 behind can differ (the listing's ``|c (i - j)|`` would make them equal), and the
    normaliser covers the later of the two positions, which keeps the MLP's input in
    ``[-1, 1]`` for positions ``>= 0`` as the causal form keeps it in ``[0, 1]``.

    The bias depends only on ``p_i - p_j`` while ``max(p_i, p_j) <= L`` (the threshold makes
    short contexts purely relative); beyond, it depends on the offset relative to the context
    length, which is what lets FIRE interpolate to longer inputs. Positions count from the
    start of the context: token indices, or times (e.g. hours from the first observation,
    ``posenc.temporal.time_positions(ts, origin=ts[0], unit="h")``; give ``init_threshold`` in
    that unit). Positions below 0 never raise the normaliser above ``L``.

    Args:
        num_heads: attention heads.
        mlp_width: hidden width of ``f``.
        causal: mask keys after the query (decoder use).
        init_c: initial ``c`` (> 0).
        init_threshold: initial ``L`` (> 0), in position units.
        eps: added to the normaliser (> 0): keeps ``|c| -> 0`` or ``L -> 0`` finite.

    ``c`` and ``threshold_multiplier`` stay float32 when the module is cast (like RoPE
    frequencies); the MLP runs in float32 whatever its parameters' dtype (in bf16,
    ``psi`` of neighbouring long offsets would round to one value). :meth:`forward` returns
    float32, cast to the logits' dtype by the attention; it holds ``B * Nq * Nk *
    mlp_width`` hidden values, which :meth:`score_mod` never materialises.
    """

    kind = "bias"
    fixed_dtype_parameters = ("c", "threshold_multiplier")

    def __init__(self, num_heads: int, mlp_width: int = 32, causal: bool = True, *,
                 init_c: float = 0.1, init_threshold: float = 512.0, eps: float = 1e-6) -> None:
        super().__init__()
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.mlp_width = check_positive_int(mlp_width, "mlp_width")
        self.causal = check_bool(causal, "causal")
        self.init_c = check_positive_float(init_c, "init_c")
        self.init_threshold = check_positive_float(init_threshold, "init_threshold")
        self.eps = check_float(eps, "eps", gt=0)
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(),
                                 nn.Linear(mlp_width, num_heads))
        self.c = nn.Parameter(torch.empty((), dtype=torch.float32))
        self.threshold_multiplier = nn.Parameter(torch.empty((), dtype=torch.float32))
        self._reset_scalars()  # the MLP was just initialised by nn.Linear

    @torch.no_grad()
    def _reset_scalars(self) -> None:
        self.c.fill_(self.init_c)
        self.threshold_multiplier.fill_(1.0)

    def reset_parameters(self) -> None:
        """``c``, ``L`` back to their initial values; the MLP re-initialised as ``nn.Linear``
        does (in construction order: a seeded reset after a meta-device build equals a seeded
        normal build)."""
        self.mlp[0].reset_parameters()
        self.mlp[2].reset_parameters()
        self._reset_scalars()

    @property
    def threshold(self) -> Tensor:
        """``L``, a 0-d float32 tensor (in position units)."""
        return self.threshold_multiplier.float().abs() * self.init_threshold

    def _mlp_weights(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``f``'s ``(W,)`` first weights and biases, ``(H, W)`` second weights, ``(H,)``
        biases, in float32."""
        first, _, second = self.mlp
        return (first.weight[:, 0].float(), first.bias.float(), second.weight.float(),
                second.bias.float())

    def interpolated(self, offset: Tensor, query: Tensor, key: Tensor) -> Tensor:
        """The MLP's input ``sign(d) psi(|d|) / (psi(max(L, p_i, p_j)) + eps)`` for float32
        offsets ``d = p_i - p_j`` and the positions ``p_i``, ``p_j`` (broadcast shapes)."""
        c = self.c.float().abs()
        normaliser = torch.maximum(torch.maximum(query, key), self.threshold)
        psi = torch.log1p(c * offset.abs()) * offset.sign()
        return psi / (torch.log1p(c * normaliser) + self.eps)

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Positions ``(Nq,)``/``(B, Nq)`` and ``(Nk,)``/``(B, Nk)`` -> float32 bias
        ``(B or 1, H, Nq, Nk)``."""
        check_pair_values(query_positions, key_positions)
        return self._forward(query_positions, key_positions)

    def _forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        query_positions = check_position_shape(query_positions, "query_positions")
        key_positions = check_position_shape(key_positions, "key_positions")
        offset = -relative_positions(query_positions, key_positions).float()  # (B, Nq, Nk)
        query = query_positions.float()[..., :, None]
        key = key_positions.float()[..., None, :]
        w1, b1, w2, b2 = self._mlp_weights()
        with torch.autocast(offset.device.type, enabled=False):
            x = self.interpolated(offset, query, key)
            hidden = torch.relu(x[..., None] * w1 + b1)  # (B, Nq, Nk, W)
            bias = torch.nn.functional.linear(hidden, w2, b2).permute(0, 3, 1, 2)
        if self.causal:
            bias = bias.masked_fill(offset[:, None] < 0, float("-inf"))
        return bias

    def score_mod(self, query_positions: Tensor, key_positions: Tensor) -> ScoreMod:
        """:meth:`forward`'s bias as FlexAttention's score_mod: the MLP evaluated per pair
        (its ``mlp_width`` hidden units unrolled, so the function stays pointwise), nothing
        materialised."""
        check_pair_values(query_positions, key_positions)
        return self._score_mod(query_positions, key_positions)

    def _score_mod(self, query_positions: Tensor, key_positions: Tensor) -> ScoreMod:
        query_positions = check_position_shape(query_positions, "query_positions")
        key_positions = check_position_shape(key_positions, "key_positions")
        batch = pair_batch(query_positions, key_positions)
        q_at, k_at = token_lookup(query_positions), token_lookup(key_positions)
        w1, b1, w2, b2 = self._mlp_weights()
        causal, width, interpolated = self.causal, self.mlp_width, self.interpolated

        def bias(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            query, key = q_at(b, q_idx).float(), k_at(b, kv_idx).float()
            offset = (q_at(b, q_idx) - k_at(b, kv_idx)).float()
            x = interpolated(offset, query, key)
            out = b2[h]
            for unit in range(width):
                out = out + w2[h, unit] * torch.relu(x * w1[unit] + b1[unit])
            return torch.where(offset < 0, float("-inf"), out) if causal else out

        return ScoreMod(bias, batch, query_positions.shape[-1], key_positions.shape[-1],
                        query_positions.device)

    def extra_repr(self) -> str:
        return (f"num_heads={self.num_heads}, mlp_width={self.mlp_width}, "
                f"causal={self.causal}, init_c={self.init_c}, "
                f"init_threshold={self.init_threshold}, eps={self.eps}")
