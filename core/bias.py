"""Attention biases from 1D positions: ``bias(query_positions, key_positions)`` gives float32
logits ``(B or 1, H, Nq, Nk)`` to add: ALiBi (Press et al. 2022), KERPLE (Chi et al. 2022),
FIRE (Li et al. 2023), and learned tables of integer offsets (T5 buckets; Shaw et al. 2018).

Positions are explicit (for ALiBi, KERPLE and FIRE also times in any unit), and ``causal=True``
masks keys after the query by position. Every bias encoding derives from
[`PairBias`][posenc.core.bias.PairBias]; those FlexAttention can evaluate per pair also have a
``score_mod`` that gives a [`ScoreMod`][posenc.core.bias.ScoreMod] (the attention module uses the
bias encodings, never the other way round).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import (
    check_bool,
    check_choice,
    check_float,
    check_pair_values,
    check_position_shape,
    check_positive_float,
    check_positive_int,
)
from .encoding import Float64Buffers, PositionEncoding
from .positions import relative_positions

__all__ = ["ScoreMod", "pair_batch", "token_lookup", "PairBias", "alibi_slopes",
           "ALiBi", "t5_relative_bucket", "check_t5_buckets", "T5RelativeBias",
           "ClippedRelativeBias", "FIRE", "KERPLE_KERNELS", "kerple_bias", "Kerple"]


BiasFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


class ScoreMod(NamedTuple):
    """An attention bias as a function of token indices, FlexAttention's ``score_mod``.

    Attributes:
        bias: ``(b, h, q_idx, kv_idx) -> bias`` elementwise (0-d or broadcastable indices).
        batch: the positions' batch (``B``, or 1 when shared by the batch).
        num_queries, num_keys: the tokens the positions cover (``Nq``, ``Nk``).
        device: the positions' device.
    """

    bias: BiasFn
    batch: int
    num_queries: int
    num_keys: int
    device: torch.device

    def __call__(self, score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor,
                 kv_idx: Tensor) -> Tensor:
        return score + self.bias(b, h, q_idx, kv_idx).to(score.dtype)

    def dense(self, num_heads: int) -> Tensor:
        """The bias at every pair, ``(batch, num_heads, Nq, Nk)``."""
        index = [torch.arange(n, device=self.device) for n in
                 (self.batch, num_heads, self.num_queries, self.num_keys)]
        b, h, q, k = (t.view([-1 if i == d else 1 for i in range(4)]) for d, t in enumerate(index))
        return self.bias(b, h, q, k).expand(self.batch, num_heads, self.num_queries, self.num_keys)


def pair_batch(query_positions: Tensor, key_positions: Tensor, coord_dims: int = 0) -> int:
    """The batch (``B`` or 1) of the pairs of these positions, checked as
    [`relative_positions`][posenc.core.positions.relative_positions] checks it."""
    empty = (..., slice(0, 0), *(slice(None),) * coord_dims)
    return relative_positions(query_positions[empty], key_positions[empty],
                              coord_dims=coord_dims).shape[0]


def token_lookup(positions: Tensor, coord_dims: int = 0) -> Callable[[Tensor, Tensor], Tensor]:
    """``(b, idx) -> positions[b, idx]`` for ``(N, *C)`` or ``(B, N, *C)`` positions."""
    if positions.ndim == 1 + coord_dims:
        return lambda b, idx: positions[idx]
    if positions.shape[0] == 1:
        return lambda b, idx: positions[0][idx]
    return lambda b, idx: positions[b, idx]


class PairBias(PositionEncoding):
    """Base of the bias encodings: ``forward(query_positions, key_positions)`` gives ``(B or 1,
    H, Nq, Nk)`` logits; those FlexAttention can evaluate per pair also have ``score_mod``
    with the same arguments, giving a [`ScoreMod`][posenc.core.bias.ScoreMod]."""

    kind = "bias"


def _checked(query_positions: Tensor, key_positions: Tensor) -> tuple[Tensor, Tensor]:
    """Both positions checked (values, read once per distinct tensor; then shapes), integers
    widened to int64."""
    query_positions, key_positions = check_pair_values(query_positions, key_positions)
    return (check_position_shape(query_positions, "query_positions"),
            check_position_shape(key_positions, "key_positions"))


def _pair_score_mod(query_positions: Tensor, key_positions: Tensor,
                    bias: Callable[[Tensor, Tensor, Tensor], Tensor]) -> ScoreMod:
    """ScoreMod of ``bias(query position, key position, h)``."""
    q_at, k_at = token_lookup(query_positions), token_lookup(key_positions)
    return ScoreMod(lambda b, h, q_idx, kv_idx: bias(q_at(b, q_idx), k_at(b, kv_idx), h),
                    pair_batch(query_positions, key_positions), query_positions.shape[-1],
                    key_positions.shape[-1], query_positions.device)


class _DistanceBias(PairBias, Float64Buffers):
    """A per-head function of ``|key - query|`` (subclasses give ``_of_distance() -> (distance,
    h) -> bias``), ``-inf`` for keys after the query when ``causal``."""

    def _bias(self) -> Callable[[Tensor, Tensor], Tensor]:
        """``(rel, h) -> bias`` of float32 offsets ``rel = key - query`` and head indices."""
        of_distance, causal = self._of_distance(), self.causal

        def bias(rel: Tensor, h: Tensor) -> Tensor:
            out = of_distance(rel.abs(), h)
            return torch.where(rel > 0, float("-inf"), out) if causal else out

        return bias

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Positions ``(Nq,)``/``(B, Nq)`` and ``(Nk,)``/``(B, Nk)`` -> float32 bias ``(B or 1,
        H, Nq, Nk)``."""
        rel = relative_positions(*_checked(query_positions, key_positions)).float()[:, None]
        with torch.autocast(rel.device.type, enabled=False):
            return self._bias()(rel, torch.arange(self.num_heads, device=rel.device)[:, None, None])

    def score_mod(self, query_positions: Tensor, key_positions: Tensor) -> ScoreMod:
        """`forward`'s bias as FlexAttention's score_mod, computed per pair."""
        bias = self._bias()
        return _pair_score_mod(*_checked(query_positions, key_positions),
                               lambda q, k, h: bias((k - q).float(), h))

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, causal={self.causal}"


def alibi_slopes(num_heads: int) -> Tensor:
    """``(num_heads,)`` float32 head slopes, as the official recipe: ``2 ** (-8 (i + 1) / n)``, and
    for ``n`` not a power of two, every other slope of the next power's sequence appended."""
    check_positive_int(num_heads, "num_heads")

    def power_of_2(n: int) -> Tensor:
        # float64 powers in torch (not a Python list): a size is allocated where a bound on
        # allocations (a checkpoint's, posenc.tasks) sees it
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return start * start ** torch.arange(n, dtype=torch.float64)

    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = power_of_2(closest).float()
    if closest != num_heads:
        slopes = torch.cat((slopes, alibi_slopes(2 * closest)[0::2][: num_heads - closest]))
    return slopes


class ALiBi(_DistanceBias):
    """Linear distance penalty per head: ``bias[b, h, i, j] = -slope_h * |pos_q[i] - pos_k[j]|``
    ([`alibi_slopes`][posenc.core.bias.alibi_slopes]); ``causal`` masks keys after the query."""

    def __init__(self, num_heads: int, causal: bool = True) -> None:
        super().__init__()
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.causal = check_bool(causal, "causal")
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        return {"slopes": alibi_slopes(self.num_heads)}

    def _of_distance(self) -> Callable[[Tensor, Tensor], Tensor]:
        slopes = self.slopes.float()
        return lambda distance, h: -slopes[h] * distance


def t5_relative_bucket(relative_position: Tensor, bidirectional: bool = True,
                       num_buckets: int = 32, max_distance: int = 128) -> Tensor:
    """T5's int64 bucket in ``[0, num_buckets)`` of each integer offset ``key - query``
    (exactly Mesh TensorFlow / HF T5): half exact, half log-spaced up to ``max_distance``."""
    if not isinstance(relative_position, Tensor) or relative_position.is_floating_point() \
            or relative_position.is_complex() or relative_position.dtype == torch.bool:
        got = relative_position.dtype if isinstance(relative_position, Tensor) else type(
            relative_position).__name__
        raise TypeError("relative_position must be an integer tensor (T5 buckets are defined on "
                        f"integer offsets), got {got}")
    check_t5_buckets(bidirectional, num_buckets, max_distance)
    relative_position = relative_position.long()
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).long() * num_buckets
        relative_position = relative_position.abs()
    else:
        relative_position = -relative_position.clamp(max=0)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    # clamp_min avoids log(0) in the branch that torch.where discards.
    large = max_exact + (
        torch.log(relative_position.float().clamp_min(1) / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, relative_position, large)


def check_t5_buckets(bidirectional: bool, num_buckets: int, max_distance: int) -> None:
    """Refuse T5 bucket settings whose ids would leave ``[0, num_buckets)``: the exact
    buckets ``e`` (a quarter of them bidirectional, else half) need ``e >= 1`` and
    ``max_distance > e``."""
    check_bool(bidirectional, "bidirectional")
    check_positive_int(num_buckets, "num_buckets")
    check_positive_int(max_distance, "max_distance")
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    max_exact = per_direction // 2
    if max_exact < 1:
        raise ValueError(f"num_buckets must be >= {4 if bidirectional else 2} with "
                         f"bidirectional={bidirectional} (half of each direction's buckets "
                         f"hold exact offsets), got {num_buckets}")
    if max_distance <= max_exact:
        raise ValueError(f"max_distance must be > {max_exact} (the offsets that num_buckets="
                         f"{num_buckets} with bidirectional={bidirectional} already hold "
                         f"exactly), got {max_distance}")


class _OffsetTable(PairBias):
    """A learned ``(R, H)`` table, read at row ``_rows()(key - query)`` of integer positions
    (subclasses give ``_rows``)."""

    def __init__(self, num_heads: int, rows: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.table = nn.Parameter(torch.empty(rows, num_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.table, std=0.02)

    @staticmethod
    def _integers(query_positions: Tensor, key_positions: Tensor) -> tuple[Tensor, Tensor]:
        pair = _checked(query_positions, key_positions)
        for name, positions in zip(("query_positions", "key_positions"), pair, strict=True):
            if positions.is_floating_point():
                raise TypeError(f"{name} must be integer token positions for a learned relative "
                                f"table, got {positions.dtype}")
        return pair

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Integer positions ``(Nq,)``/``(B, Nq)`` and ``(Nk,)``/``(B, Nk)`` -> bias ``(B or 1,
        H, Nq, Nk)`` in the table's dtype."""
        rel = relative_positions(*self._integers(query_positions, key_positions))
        return self.table[self._rows()(rel)].permute(0, 3, 1, 2)

    def score_mod(self, query_positions: Tensor, key_positions: Tensor) -> ScoreMod:
        """`forward`'s bias as FlexAttention's score_mod, read per pair."""
        table, rows = self.table, self._rows()
        return _pair_score_mod(*self._integers(query_positions, key_positions),
                               lambda q, k, h: table[rows(k - q), h])


class T5RelativeBias(_OffsetTable):
    """T5 relative attention bias: one learned scalar per (bucket, head) of
    [`t5_relative_bucket`][posenc.core.bias.t5_relative_bucket], for integer positions."""

    def __init__(self, num_heads: int, bidirectional: bool = True, num_buckets: int = 32,
                 max_distance: int = 128) -> None:
        check_positive_int(num_heads, "num_heads")
        check_t5_buckets(bidirectional, num_buckets, max_distance)
        super().__init__(num_heads, num_buckets)
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance

    def _rows(self) -> Callable[[Tensor], Tensor]:
        settings = (self.bidirectional, self.num_buckets, self.max_distance)
        return lambda rel: t5_relative_bucket(rel, *settings)

    def extra_repr(self) -> str:
        return (f"num_heads={self.num_heads}, bidirectional={self.bidirectional}, "
                f"num_buckets={self.num_buckets}, max_distance={self.max_distance}")


class ClippedRelativeBias(_OffsetTable):
    """Shaw et al. (2018) relative positions as a per-head scalar bias, for integer positions:
    offsets ``key - query`` clipped to ``[-max_distance, max_distance]``, one scalar each."""

    def __init__(self, num_heads: int, max_distance: int) -> None:
        check_positive_int(num_heads, "num_heads")
        super().__init__(num_heads, 2 * check_positive_int(max_distance, "max_distance") + 1)
        self.max_distance = max_distance

    def _rows(self) -> Callable[[Tensor], Tensor]:
        distance = self.max_distance
        return lambda rel: rel.clamp(-distance, distance) + distance

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, max_distance={self.max_distance}"


class FIRE(PairBias, Float64Buffers):
    """FIRE bias per head (Li et al. 2023): an MLP of the log-transformed offset.

    ``bias[b, h, i, j] = f(psi(d) / (psi(max(L, p_i, p_j)) + eps))[h]`` with ``d = p_i - p_j``,
    ``psi(x) = log(1 + |c| x)`` (for ``d < 0``: ``-psi(-d)``), ``L = |threshold_multiplier| *
    init_threshold``, learned ``c`` and ``threshold_multiplier``, and ``f = Linear(1, mlp_width)
    -> ReLU -> Linear(mlp_width, H)``. With ``causal=True`` it is the paper's listing;
    ``causal=False`` (posenc's extension) keeps the offset's sign. Positions count from the
    start of the context (token indices or times, ``init_threshold`` in their unit). ``c``,
    ``threshold_multiplier`` and the MLP stay float32 (in bf16 long offsets would collide).
    """

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
        does (in construction order)."""
        self.mlp[0].reset_parameters()
        self.mlp[2].reset_parameters()
        self._reset_scalars()

    @property
    def threshold(self) -> Tensor:
        """``L``, a 0-d float32 tensor (in position units)."""
        return self.threshold_multiplier.float().abs() * self.init_threshold

    def _mlp_weights(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``f``'s weights and biases, ``(W,)``, ``(W,)``, ``(H, W)``, ``(H,)``, in float32."""
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
        """Positions ``(Nq,)``/``(B, Nq)`` and ``(Nk,)``/``(B, Nk)`` -> float32 bias ``(B or 1,
        H, Nq, Nk)``."""
        query_positions, key_positions = _checked(query_positions, key_positions)
        offset = -relative_positions(query_positions, key_positions).float()  # (B, Nq, Nk)
        query = query_positions.float()[..., :, None]
        key = key_positions.float()[..., None, :]
        w1, b1, w2, b2 = self._mlp_weights()
        with torch.autocast(offset.device.type, enabled=False):
            x = self.interpolated(offset, query, key)
            hidden = torch.relu(x[..., None] * w1 + b1)  # (B, Nq, Nk, W)
            bias = F.linear(hidden, w2, b2).permute(0, 3, 1, 2)
        if self.causal:
            bias = bias.masked_fill(offset[:, None] < 0, float("-inf"))
        return bias

    def score_mod(self, query_positions: Tensor, key_positions: Tensor) -> ScoreMod:
        """[`forward`][posenc.core.FIRE.forward]'s bias as FlexAttention's score_mod, computed per
        pair."""
        w1, b1, w2, b2 = self._mlp_weights()
        causal, width, interpolated = self.causal, self.mlp_width, self.interpolated

        def bias(q: Tensor, k: Tensor, h: Tensor) -> Tensor:
            offset = (q - k).float()
            x = interpolated(offset, q.float(), k.float())
            out = b2[h]
            for unit in range(width):
                out = out + w2[h, unit] * torch.relu(x * w1[unit] + b1[unit])
            return torch.where(offset < 0, float("-inf"), out) if causal else out

        return _pair_score_mod(*_checked(query_positions, key_positions), bias)

    def extra_repr(self) -> str:
        return (f"num_heads={self.num_heads}, mlp_width={self.mlp_width}, "
                f"causal={self.causal}, init_c={self.init_c}, "
                f"init_threshold={self.init_threshold}, eps={self.eps}")


KERPLE_KERNELS = ("log", "power")
"""KERPLE's kernels: ``"log"``, ``-r1 * log(1 + r2 d)``; ``"power"``, ``-r1 * d ** r2``."""

# The official code (chijames/KERPLE) clamps r1 and r2 (and its initial draws) to >= 1e-2.
_FLOOR = 1e-2


def kerple_bias(distance: Tensor, r1: Tensor, r2: Tensor, kernel: str) -> Tensor:
    """The KERPLE bias of float distances ``|i - j|``
    ([`KERPLE_KERNELS`][posenc.core.bias.KERPLE_KERNELS]), for positive ``r1``, ``r2`` that
    broadcast against ``distance``."""
    if kernel == "log":
        return -r1 * torch.log1p(r2 * distance)
    # torch's pow backward gives 0 (not 0 * log 0 = NaN) for the exponent at distance 0.
    return -r1 * distance.pow(r2)


def _inverse_softplus(value: Tensor) -> Tensor:
    return value + torch.log(-torch.expm1(-value))


class Kerple(_DistanceBias):
    """KERPLE bias per head ([`kerple_bias`][posenc.core.bias.kerple_bias]) of explicit positions
    (tokens or times).

    ``r1 = softplus(raw_r1)``, ``r2 = softplus(raw_r2)`` (log) or ``2 * sigmoid(raw_r2)`` (power),
    so the paper's constraints hold without the official code's in-place clamps. Initial values
    are the official draws (log: ``r1 ~ U(0, 2)``, ``r2 ~ U(0, 1)``; power: ``U(0, 1)``,
    ``U(0, 2)``; floored at 0.01) unless ``r1``/``r2`` are given. ``raw_r1``/``raw_r2`` are
    ``(H,)`` float32 parameters that stay float32 when the module is cast.
    """

    fixed_dtype_parameters = ("raw_r1", "raw_r2")

    def __init__(self, num_heads: int, kernel: str = "log", causal: bool = True, *,
                 r1: float | None = None, r2: float | None = None) -> None:
        super().__init__()
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.kernel = check_choice(kernel, "kernel", KERPLE_KERNELS)
        self.causal = check_bool(causal, "causal")
        self.init_r1 = None if r1 is None else check_positive_float(r1, "r1")
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
        # On the CPU (a reset after a meta build draws the same), in float64 (exact inverses).
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

    def _of_distance(self) -> Callable[[Tensor, Tensor], Tensor]:
        r1, r2, kernel = self.r1, self.r2, self.kernel
        return lambda distance, h: kerple_bias(distance, r1[h], r2[h], kernel)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, kernel={self.kernel!r}, causal={self.causal}"
