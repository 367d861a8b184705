"""Token positions for padded, packed and incrementally decoded sequences."""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import check_position_dtype, check_positive_int, widen_positions

__all__ = ["positions_from_padding_mask", "packed_positions", "packed_attention_mask",
           "incremental_positions", "relative_positions"]


def positions_from_padding_mask(mask: Tensor) -> Tensor:
    """``(B, N)`` int64 positions counting only the real tokens (True) of a ``(B, N)`` bool
    ``mask``, for left or right padding; padding gets 0."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.ndim != 2:
        got = f"{mask.dtype} tensor of shape {tuple(mask.shape)}" if isinstance(
            mask, Tensor) else type(mask).__name__
        raise TypeError(f"mask must be a (B, N) bool tensor (True = real token), got {got}")
    return (mask.cumsum(-1) - 1).masked_fill(~mask, 0)


def _check_lengths(lengths: Tensor | list[int]) -> Tensor:
    lengths = torch.as_tensor(lengths)
    if lengths.ndim != 1 or lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be a 1D integer sequence, got {lengths.dtype} "
                        f"of shape {tuple(lengths.shape)}")
    if lengths.numel() == 0 or bool((lengths < 1).any()):
        raise ValueError(f"lengths must be non-empty and all >= 1, got {lengths.tolist()}")
    return lengths


def packed_positions(lengths: Tensor | list[int]) -> Tensor:
    """``(sum(lengths),)`` int64 positions of documents of ``(D,)`` ``lengths`` packed into
    one sequence, restarting at 0 for each: ``[3, 2] -> [0, 1, 2, 0, 1]``."""
    lengths = _check_lengths(lengths)
    starts = torch.repeat_interleave(lengths.cumsum(0) - lengths, lengths)
    return torch.arange(int(lengths.sum()), device=lengths.device) - starts


def packed_attention_mask(lengths: Tensor | list[int]) -> Tensor:
    """``(N, N)`` bool block-diagonal mask, ``N = sum(lengths)``, True where attention is
    allowed: packed documents do not attend to each other."""
    lengths = _check_lengths(lengths)
    doc = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)
    return doc[:, None] == doc[None, :]


def incremental_positions(num_tokens: int, offset: int | Tensor,
                          device: torch.device | str | None = None) -> Tensor:
    """Positions of ``num_tokens`` new tokens appended after ``offset`` cached ones (an int,
    or ``(B,)`` per sequence): ``(num_tokens,)``, or ``(B, num_tokens)`` for a tensor offset."""
    check_positive_int(num_tokens, "num_tokens")
    if isinstance(offset, Tensor):
        if offset.ndim != 1 or offset.is_floating_point() or offset.dtype == torch.bool:
            raise TypeError(f"offset must be an int or a (B,) integer tensor, got "
                            f"{offset.dtype} of shape {tuple(offset.shape)}")
        offset = widen_positions(offset, "offset")
        if not torch.compiler.is_compiling() and bool((offset < 0).any()):
            raise ValueError(f"offset must be >= 0 (tokens already cached), got "
                             f"{offset.tolist()}")
        return offset[:, None] + torch.arange(num_tokens, device=offset.device)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an int >= 0 or a (B,) integer tensor, got "
                        f"{type(offset).__name__} ({offset!r})")
    if offset < 0:
        raise ValueError(f"offset must be an int >= 0 or a (B,) tensor, got {offset!r}")
    return torch.arange(offset, offset + num_tokens, device=device)


def relative_positions(query_positions: Tensor, key_positions: Tensor, *,
                       coord_dims: int = 0) -> Tensor:
    """Offsets ``key - query`` of ``(Nq, *C)``/``(B, Nq, *C)`` and ``(Nk, *C)``/``(B, Nk, *C)``
    positions (``coord_dims`` trailing dims ``C``): ``(B or 1, Nq, Nk, *C)``, int64 for
    integer positions, else the promoted floating dtype."""
    check_position_dtype(query_positions, "query_positions")
    check_position_dtype(key_positions, "key_positions")
    query_positions = widen_positions(query_positions, "query_positions")
    key_positions = widen_positions(key_positions, "key_positions")
    batches = [p.shape[0] for p in (query_positions, key_positions) if p.ndim == 2 + coord_dims]
    if len(batches) == 2 and 1 not in batches and batches[0] != batches[1]:
        raise ValueError(
            f"query_positions of shape {tuple(query_positions.shape)} and key_positions of "
            f"shape {tuple(key_positions.shape)} have batches {batches[0]} and {batches[1]}: "
            "expected equal batches, or 1, or unbatched positions")
    tail = (slice(None),) * coord_dims
    q = query_positions[(..., slice(None), None, *tail)]
    k = key_positions[(..., None, slice(None), *tail)]
    rel = k - q
    return rel if rel.ndim == 3 + coord_dims else rel[None]
