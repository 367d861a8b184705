"""Learned relative-position biases: T5 buckets and Shaw-style clipped offsets."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from .encoding import PositionEncoding
from .flex_attention import ScoreMod, pair_batch, token_lookup
from .positions import relative_positions
from .validation import check_bool, check_positions, check_positive_int

__all__ = ["t5_relative_bucket", "check_t5_buckets", "T5RelativeBias", "ClippedRelativeBias"]


def t5_relative_bucket(
    relative_position: Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    """T5's bucket of each offset ``key - query`` (exactly Mesh TensorFlow / HF T5).

    Half the buckets hold exact small offsets, the rest are log-spaced up to
    ``max_distance``; farther offsets share the last bucket. With ``bidirectional`` the
    buckets are split between negative and positive offsets; otherwise positive offsets
    (future keys) map to bucket 0.

    Args:
        relative_position: integer tensor of offsets, any shape.
        bidirectional: split the buckets between negative and positive offsets (else positive
            offsets map to bucket 0).
        num_buckets: the number of buckets.
        max_distance: the offset the log-spaced buckets reach; see :func:`check_t5_buckets` for
            the valid combinations of the three.

    Returns:
        int64 tensor of bucket ids in ``[0, num_buckets)``, same shape.
    """
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
    """Refuse T5 bucket settings whose ids would leave ``[0, num_buckets)``.

    Each direction has ``n = num_buckets // 2`` buckets (bidirectional) or ``n = num_buckets``;
    the first ``e = n // 2`` hold exact offsets and offsets ``r >= e`` get
    ``e + floor(ln(r / e) / ln(max_distance / e) * (n - e))``, capped at ``n - 1``. That needs
    ``e >= 1`` (``num_buckets >= 4`` bidirectional, ``>= 2`` otherwise) and
    ``max_distance > e``: at ``max_distance == e`` the log divides by zero, below it the
    ids fall under ``e`` and turn negative.
    """
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


def _check_integer_positions(positions: Tensor, name: str) -> Tensor:
    positions = check_positions(positions, name)
    if positions.is_floating_point():
        raise TypeError(f"{name} must be integer token positions for a learned relative "
                        f"table, got {positions.dtype}")
    return positions


def _table_score_mod(table: Tensor, query_positions: Tensor, key_positions: Tensor,
                     row: Callable[[Tensor], Tensor]) -> ScoreMod:
    """ScoreMod of ``table[row(key - query), h]`` for an ``(R, H)`` table."""
    q_at, k_at = token_lookup(query_positions), token_lookup(key_positions)

    def bias(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return table[row(k_at(b, kv_idx) - q_at(b, q_idx)), h]

    return ScoreMod(bias, pair_batch(query_positions, key_positions),
                    query_positions.shape[-1], key_positions.shape[-1], query_positions.device)


class T5RelativeBias(PositionEncoding):
    """T5 relative attention bias: one learned scalar per (bucket, head).

    Args:
        num_heads: attention heads.
        bidirectional: encoder (True) or decoder (False) bucketing.
        num_buckets: see :func:`t5_relative_bucket`.
        max_distance: see :func:`t5_relative_bucket`.
    """

    kind = "bias"

    def __init__(self, num_heads: int, bidirectional: bool = True, num_buckets: int = 32,
                 max_distance: int = 128) -> None:
        super().__init__()
        self.num_heads = check_positive_int(num_heads, "num_heads")
        check_t5_buckets(bidirectional, num_buckets, max_distance)
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.table = nn.Parameter(torch.empty(num_buckets, num_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.table, std=0.02)

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Integer positions ``(Nq,)``/``(B, Nq)``, ``(Nk,)``/``(B, Nk)`` -> bias
        ``(B or 1, H, Nq, Nk)``."""
        query_positions = _check_integer_positions(query_positions, "query_positions")
        key_positions = _check_integer_positions(key_positions, "key_positions")
        rel = relative_positions(query_positions, key_positions)
        buckets = t5_relative_bucket(rel, self.bidirectional, self.num_buckets, self.max_distance)
        return self.table[buckets].permute(0, 3, 1, 2)

    def score_mod(self, query_positions: Tensor, key_positions: Tensor) -> ScoreMod:
        """:meth:`forward`'s bias as FlexAttention's score_mod (the bucket of each pair is
        computed per pair, nothing materialised)."""
        query_positions = _check_integer_positions(query_positions, "query_positions")
        key_positions = _check_integer_positions(key_positions, "key_positions")
        settings = (self.bidirectional, self.num_buckets, self.max_distance)
        return _table_score_mod(self.table, query_positions, key_positions,
                                lambda rel: t5_relative_bucket(rel, *settings))

    def extra_repr(self) -> str:
        return (f"num_heads={self.num_heads}, bidirectional={self.bidirectional}, "
                f"num_buckets={self.num_buckets}, max_distance={self.max_distance}")


class ClippedRelativeBias(PositionEncoding):
    """Shaw et al. (2018) relative positions as a per-head scalar bias.

    Offsets ``key - query`` are clipped to ``[-max_distance, max_distance]`` and each of the
    ``2 * max_distance + 1`` values has a learned scalar per head.
    """

    kind = "bias"

    def __init__(self, num_heads: int, max_distance: int) -> None:
        super().__init__()
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.max_distance = check_positive_int(max_distance, "max_distance")
        self.table = nn.Parameter(torch.empty(2 * max_distance + 1, num_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.table, std=0.02)

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """Integer positions -> bias ``(B or 1, H, Nq, Nk)``."""
        query_positions = _check_integer_positions(query_positions, "query_positions")
        key_positions = _check_integer_positions(key_positions, "key_positions")
        rel = relative_positions(query_positions, key_positions)
        index = rel.clamp(-self.max_distance, self.max_distance) + self.max_distance
        return self.table[index].permute(0, 3, 1, 2)

    def score_mod(self, query_positions: Tensor, key_positions: Tensor) -> ScoreMod:
        """:meth:`forward`'s bias as FlexAttention's score_mod (nothing materialised)."""
        query_positions = _check_integer_positions(query_positions, "query_positions")
        key_positions = _check_integer_positions(key_positions, "key_positions")
        distance = self.max_distance
        return _table_score_mod(self.table, query_positions, key_positions,
                                lambda rel: rel.clamp(-distance, distance) + distance)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, max_distance={self.max_distance}"
