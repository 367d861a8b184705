"""FlexAttention for bias encodings: the bias computed from positions inside the kernel.

The SDPA path of :class:`MultiheadAttention` materialises a bias encoding's
``(B or 1, H, Nq, Nk)`` logits in memory (and their gradient in the backward). On a GPU,
``torch.nn.attention.flex_attention`` can instead call the bias as a ``score_mod`` per
(query, key) pair, from the positions and the encoding's table or slopes, so no bias tensor
is ever written. Bias encodings that can be evaluated this way offer
``score_mod(query_positions, key_positions) -> ScoreMod`` next to their materialised
``forward``; a :class:`ScoreMod` computes exactly the value the forward puts at
``[b, h, q, k]``.

Masks are block masks (``create_block_mask``): :func:`causal_block_mask` (bottom-right
aligned, as ``MultiheadAttention``'s ``is_causal``) and :func:`packed_block_mask` (packed
documents, optionally causal), which skip whole blocks of masked pairs.

torch's FlexAttention has no backward on CPU, so CPU training always takes the SDPA path;
on CPU this path serves inference and the tests that prove it equals the SDPA path.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from .positions import _check_lengths, relative_positions
from .validation import check_bool, check_choice

try:
    from torch.nn.attention.flex_attention import BlockMask, and_masks, create_block_mask
    from torch.nn.attention.flex_attention import flex_attention as _flex_attention
except ImportError:  # torch without FlexAttention: every forward takes the SDPA path
    BlockMask = _flex_attention = and_masks = create_block_mask = None

__all__ = [
    "BACKENDS",
    "ScoreMod",
    "causal_block_mask",
    "check_backend",
    "flex_attend",
    "flex_available",
    "packed_block_mask",
    "pair_batch",
    "token_lookup",
    "use_flex",
]

BACKENDS = ("auto", "sdpa", "flex")
BiasFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]


def flex_available() -> bool:
    """Whether this torch has ``torch.nn.attention.flex_attention``."""
    return _flex_attention is not None


class ScoreMod(NamedTuple):
    """An attention bias as a function of token indices, FlexAttention's ``score_mod``.

    Attributes:
        bias: ``(b, h, q_idx, kv_idx) -> bias`` elementwise: FlexAttention calls it with 0-d
            index tensors; with broadcastable index tensors it gives every pair at once
            (:meth:`dense`).
        batch: the positions' batch (``B``, or 1 when shared by the batch).
        num_queries, num_keys: the tokens the positions cover (``Nq``, ``Nk``).
        device: the positions' device (the queries' must match).
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
        """The bias at every pair, ``(batch, num_heads, Nq, Nk)`` (what the encoding's
        materialised forward gives, broadcast over heads and batch)."""
        index = [torch.arange(n, device=self.device) for n in
                 (self.batch, num_heads, self.num_queries, self.num_keys)]
        b, h, q, k = (t.view([-1 if i == d else 1 for i in range(4)])
                      for d, t in enumerate(index))
        return self.bias(b, h, q, k).expand(self.batch, num_heads, self.num_queries,
                                            self.num_keys)


def pair_batch(query_positions: Tensor, key_positions: Tensor, coord_dims: int = 0) -> int:
    """The batch of every (query, key) pair of these positions (``B`` or 1), checked as
    :func:`posenc.core.positions.relative_positions` checks it (no pair is computed)."""
    tail = (slice(None),) * coord_dims
    empty = (..., slice(0, 0), *tail)
    return relative_positions(query_positions[empty], key_positions[empty],
                              coord_dims=coord_dims).shape[0]


def token_lookup(positions: Tensor, coord_dims: int = 0) -> Callable[[Tensor, Tensor], Tensor]:
    """``(b, idx) -> positions[b, idx]`` for ``(N, *C)`` or ``(B, N, *C)`` positions (a
    batch of 1 is shared by every ``b``)."""
    if positions.ndim == 1 + coord_dims:
        return lambda b, idx: positions[idx]
    if positions.shape[0] == 1:
        return lambda b, idx: positions[0][idx]
    return lambda b, idx: positions[b, idx]


def _causal(num_queries: int, num_keys: int):
    shift = num_keys - num_queries  # bottom-right aligned, as with a KV cache

    def causal(b, h, q_idx, kv_idx):
        return q_idx + shift >= kv_idx

    return causal


_CAUSAL_MASKS: dict[tuple[int, int, str], BlockMask] = {}


def causal_block_mask(num_queries: int, num_keys: int,
                      device: torch.device | str | None = None) -> BlockMask:
    """Block mask where query ``i`` attends keys ``j <= i + (Nk - Nq)`` (as
    ``MultiheadAttention``'s ``is_causal``), shared by batch and heads.

    Built once per size and device (outside ``torch.compile``): building evaluates the mask
    on every pair.
    """
    device = torch.device("cpu" if device is None else device)
    key = (num_queries, num_keys, str(device))
    if key in _CAUSAL_MASKS and not torch.compiler.is_compiling():
        return _CAUSAL_MASKS[key]
    mask = create_block_mask(_causal(num_queries, num_keys), None, None, num_queries,
                             num_keys, device=device)
    if not torch.compiler.is_compiling():
        if len(_CAUSAL_MASKS) >= 64:  # sizes seen by a long-running server: keep it bounded
            _CAUSAL_MASKS.clear()
        _CAUSAL_MASKS[key] = mask
    return mask


def packed_block_mask(lengths: Tensor | list[int], *, causal: bool = False,
                      device: torch.device | str | None = None) -> BlockMask:
    """Block mask for documents packed into one sequence: tokens attend only within their
    document (and, with ``causal``, only earlier tokens of it); the block-mask form of
    :func:`posenc.core.packed_attention_mask`.

    Args:
        lengths: ``(D,)`` document lengths.
        causal: also mask later tokens.
        device: of the mask (the queries' device); defaults to ``lengths``' device.

    Returns:
        a ``BlockMask`` of shape ``(1, 1, N, N)`` with ``N = sum(lengths)``.
    """
    check_bool(causal, "causal")
    lengths = _check_lengths(lengths)
    device = lengths.device if device is None else torch.device(device)
    document = torch.repeat_interleave(torch.arange(lengths.numel(), device=device),
                                       lengths.to(device))
    num_tokens = document.numel()

    def same_document(b, h, q_idx, kv_idx):
        return document[q_idx] == document[kv_idx]

    mask_mod = and_masks(same_document, _causal(num_tokens, num_tokens)) if causal \
        else same_document
    return create_block_mask(mask_mod, None, None, num_tokens, num_tokens, device=device)


def _is_block_mask(mask: object) -> bool:
    return BlockMask is not None and isinstance(mask, BlockMask)


def use_flex(backend: str, bias: object, attn_mask: object, q: Tensor, k: Tensor, v: Tensor,
             dropout_p: float) -> bool:
    """Whether one forward of :class:`MultiheadAttention` takes the FlexAttention path.

    ``"auto"`` takes it where it pays: a CUDA device, FlexAttention importable, a bias
    encoding that offers ``score_mod``, no dense ``attn_mask`` and no attention dropout (which
    FlexAttention lacks). A ``BlockMask`` given as ``attn_mask`` needs it; ``"flex"`` forces
    it (and raises where it cannot run); ``"sdpa"`` never takes it.

    Args:
        backend: one of :data:`BACKENDS`.
        bias: the module's bias encoding, or None.
        attn_mask: the caller's mask: None, a dense tensor or a ``BlockMask``.
        q: ``(B, H, N, head_dim)`` after projection (device and autograd tell).
        k: the keys, the same shape.
        v: the values, the same shape.
        dropout_p: the attention dropout of this forward (0 in eval mode).
    """
    block_mask = _is_block_mask(attn_mask)
    if backend == "sdpa" or (backend == "auto" and not block_mask):
        if block_mask and backend == "sdpa":
            raise ValueError("attn_mask is a BlockMask, which only backend='flex' (or "
                             "'auto') takes; give backend='sdpa' a dense mask, e.g. "
                             "posenc.core.packed_attention_mask(lengths)")
        return (backend == "auto" and flex_available() and q.is_cuda and attn_mask is None
                and hasattr(bias, "score_mod") and dropout_p == 0)
    what = f"backend={backend!r}" if backend == "flex" else "attn_mask as a BlockMask"
    if not flex_available():
        raise ValueError(f"{what} needs torch.nn.attention.flex_attention, which torch "
                         f"{torch.__version__} lacks; use backend='sdpa'")
    if attn_mask is not None and not block_mask:
        raise ValueError(f"{what} takes attn_mask as a BlockMask (e.g. packed_block_mask) or "
                         f"None, got a dense {type(attn_mask).__name__}; use backend='sdpa' "
                         "for dense masks")
    if bias is not None and not hasattr(bias, "score_mod"):
        raise ValueError(f"{what} needs a bias encoding with score_mod, "
                         f"{type(bias).__name__} has none; use backend='sdpa'")
    if dropout_p:
        raise ValueError(f"{what} has no attention dropout, got attn_drop={dropout_p}; use "
                         "backend='sdpa' or eval mode")
    if q.device.type == "cpu" and torch.is_grad_enabled() and any(
            t.requires_grad for t in (q, k, v)):
        raise ValueError(f"{what} has no backward on CPU (torch's FlexAttention): run it "
                         "under torch.no_grad() or use backend='sdpa' for CPU training")
    return True


def _check_block_mask(mask: BlockMask, q: Tensor, num_k: int) -> None:
    batch, num_q = q.shape[0], q.shape[-2]
    mask_batch, _, mask_q, mask_k = mask.shape
    if (mask_q, mask_k) != (num_q, num_k) or mask_batch not in (1, batch):
        raise ValueError(f"attn_mask is a BlockMask of shape {tuple(mask.shape)}, expected "
                         f"(1 or B={batch}, 1 or H, Nq={num_q}, Nk={num_k})")
    if mask.kv_num_blocks.device != q.device:
        raise ValueError(f"attn_mask is a BlockMask on {mask.kv_num_blocks.device} for queries "
                         f"on {q.device}: build it with device= the queries' device")


def flex_attend(q: Tensor, k: Tensor, v: Tensor, score_mod: ScoreMod | None = None, *,
                block_mask: BlockMask | None = None, is_causal: bool = False) -> Tensor:
    """FlexAttention of ``(B, H, Nq, head_dim)`` queries over ``(B, H, Nk, head_dim)``
    keys/values, scaled by ``head_dim ** -0.5`` as SDPA, with a bias and masks.

    Args:
        score_mod: the bias (e.g. ``ALiBi(...).score_mod(query_positions, key_positions)``).
        block_mask: e.g. :func:`packed_block_mask`.
        is_causal: also mask keys ``j > i + (Nk - Nq)`` (bottom-right aligned).

    Returns:
        ``(B, H, Nq, head_dim)``. A query whose keys are all masked gets 0 (SDPA gives NaN).
    """
    num_q, num_k = q.shape[-2], k.shape[-2]
    if block_mask is not None:
        _check_block_mask(block_mask, q, num_k)
    if is_causal:
        block_mask = causal_block_mask(num_q, num_k, q.device) if block_mask is None else \
            create_block_mask(and_masks(block_mask.mask_mod, _causal(num_q, num_k)),
                              block_mask.shape[0], block_mask.shape[1], num_q, num_k,
                              device=q.device)
    score = None if score_mod is None else (
        lambda s, b, h, q_idx, kv_idx: score_mod(s, b, h, q_idx, kv_idx))
    if torch.compiler.is_compiling():  # the caller's compile fuses it
        return _flex_attention(q, k, v, score_mod=score, block_mask=block_mask)
    if q.is_cuda:
        return _compiled_flex()(q, k, v, score_mod=score, block_mask=block_mask)
    with warnings.catch_warnings():
        # Eager FlexAttention materialises the scores (it warns so); on CPU it has no
        # backward and serves inference and tests, where a 20 s compile is not worth it.
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return _flex_attention(q, k, v, score_mod=score, block_mask=block_mask)


_COMPILED: list = []


def _compiled_flex():
    """``torch.compile(flex_attention)``, built on first use: the fused kernel (eager
    FlexAttention computes the full score matrix)."""
    if not _COMPILED:
        _COMPILED.append(torch.compile(_flex_attention, dynamic=False))
    return _COMPILED[0]


def check_backend(backend: object) -> str:
    """``backend`` if it is one of :data:`BACKENDS`, else ``TypeError``/``ValueError``."""
    return check_choice(backend, "backend", BACKENDS)
