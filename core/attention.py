"""Multi-head attention with any rotary and bias encoding, and its FlexAttention path.

Rotary encodings provide ``rotation(positions)`` (and ``key_rotation`` where keys turn
differently, [`XPos`][posenc.core.XPos]); bias encodings give ``bias(query_positions,
key_positions) -> (B or 1, H, Nq, Nk)``. Parameter names match timm's ``Attention``.
The SDPA path materialises a bias; the FlexAttention path evaluates it per pair through the
encoding's ``score_mod`` ([`ScoreMod`][posenc.core.bias.ScoreMod]) and takes block masks.
FlexAttention has no backward on CPU, so CPU training takes the SDPA path
([`use_flex`][posenc.core.attention.use_flex] chooses).
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import (
    check_bool,
    check_choice,
    check_float,
    check_pair_values,
    check_positive_int,
    known_finite,
)
from .additive import NoPE
from .bias import ScoreMod
from .positions import _check_lengths, incremental_positions
from .rope import apply_rotation

__all__ = ["BACKENDS", "causal_block_mask", "flex_attend", "flex_available", "packed_block_mask",
           "use_flex", "KVCache", "MultiheadAttention"]


try:
    from torch.nn.attention.flex_attention import BlockMask, and_masks, create_block_mask
    from torch.nn.attention.flex_attention import flex_attention as _flex_attention
except ImportError:  # torch without FlexAttention: every forward takes the SDPA path
    BlockMask = _flex_attention = and_masks = create_block_mask = None


BACKENDS = ("auto", "sdpa", "flex")


def flex_available() -> bool:
    """Whether this torch has ``torch.nn.attention.flex_attention``."""
    return _flex_attention is not None


def _causal(num_queries: int, num_keys: int):
    shift = num_keys - num_queries  # bottom-right aligned, as with a KV cache
    return lambda b, h, q_idx, kv_idx: q_idx + shift >= kv_idx


_CAUSAL_MASKS: dict[tuple[int, int, str], BlockMask] = {}


def causal_block_mask(num_queries: int, num_keys: int,
                      device: torch.device | str | None = None) -> BlockMask:
    """Block mask where query ``i`` attends keys ``j <= i + (Nk - Nq)``, shared by batch and
    heads; cached per size and device (outside ``torch.compile``)."""
    device = torch.device("cpu" if device is None else device)
    key = (num_queries, num_keys, str(device))
    if key in _CAUSAL_MASKS and not torch.compiler.is_compiling():
        return _CAUSAL_MASKS[key]
    mask = create_block_mask(_causal(num_queries, num_keys), None, None, num_queries,
                             num_keys, device=device)
    if not torch.compiler.is_compiling():
        if len(_CAUSAL_MASKS) >= 64:  # keep it bounded
            _CAUSAL_MASKS.clear()
        _CAUSAL_MASKS[key] = mask
    return mask


def packed_block_mask(lengths: Tensor | list[int], *, causal: bool = False,
                      device: torch.device | str | None = None) -> BlockMask:
    """Block mask ``(1, 1, N, N)``, ``N = sum(lengths)``, where tokens of ``(D,)`` packed
    document ``lengths`` attend only within their document (only earlier tokens if
    ``causal``): [`posenc.core.packed_attention_mask`][posenc.core.packed_attention_mask] as a block
    mask on ``device`` (default ``lengths``' device)."""
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


def use_flex(backend: str, bias: object, attn_mask: object, q: Tensor, k: Tensor, v: Tensor,
             dropout_p: float) -> bool:
    """Whether one forward of [`MultiheadAttention`][posenc.core.MultiheadAttention] takes the
    FlexAttention path.

    ``"auto"`` takes it on CUDA for a bias with ``score_mod``, no dense ``attn_mask`` and no
    dropout; a ``BlockMask`` ``attn_mask`` needs it; ``"flex"`` forces it (raising where it
    cannot run); ``"sdpa"`` never takes it. ``q``, ``k``, ``v`` are ``(B, H, N, head_dim)``.
    """
    block_mask = BlockMask is not None and isinstance(attn_mask, BlockMask)
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


def flex_attend(q: Tensor, k: Tensor, v: Tensor, score_mod: ScoreMod | None = None, *,
                block_mask: BlockMask | None = None, is_causal: bool = False) -> Tensor:
    """FlexAttention of ``(B, H, Nq, head_dim)`` queries over ``(B, H, Nk, head_dim)``
    keys/values (scaled as SDPA) with a ``score_mod`` bias, a ``block_mask`` and, if
    ``is_causal``, keys ``j > i + (Nk - Nq)`` masked.

    Returns:
        ``(B, H, Nq, head_dim)``; a query whose keys are all masked gets 0 (SDPA gives NaN).
    """
    batch, num_q, num_k = q.shape[0], q.shape[-2], k.shape[-2]
    if block_mask is not None:
        mask_batch, _, mask_q, mask_k = block_mask.shape
        if (mask_q, mask_k) != (num_q, num_k) or mask_batch not in (1, batch):
            raise ValueError(f"attn_mask is a BlockMask of shape {tuple(block_mask.shape)}, "
                             f"expected (1 or B={batch}, 1 or H, Nq={num_q}, Nk={num_k})")
        if block_mask.kv_num_blocks.device != q.device:
            raise ValueError(f"attn_mask is a BlockMask on {block_mask.kv_num_blocks.device} for "
                             f"queries on {q.device}: build it with device= the queries' device")
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
        # Eager on CPU (inference and tests): a 20 s compile is not worth it there.
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return _flex_attention(q, k, v, score_mod=score, block_mask=block_mask)


@functools.cache
def _compiled_flex():
    """``torch.compile(flex_attention)``, built on first use."""
    return torch.compile(_flex_attention, dynamic=False)


class KVCache:
    """Rotated keys, values and key positions of earlier decoding steps; ``coord_dims`` is the
    number of trailing coordinate dims of a position (0 for token indices, 1 for (row, col))."""

    def __init__(self, coord_dims: int = 0) -> None:
        if isinstance(coord_dims, bool) or not isinstance(coord_dims, int) or coord_dims < 0:
            raise ValueError(f"coord_dims must be an int >= 0, got {coord_dims!r}")
        self.coord_dims = coord_dims
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self.positions: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: Tensor, v: Tensor,
               positions: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        """Add ``(B, H, n, head_dim)`` keys/values at ``positions`` (``(n, *C)``, ``(B, n, *C)``
        or None) and return everything cached."""
        if k.ndim != 4 or v.shape != k.shape:
            raise ValueError(f"kv_cache takes keys and values of the same shape (B, H, n, "
                             f"head_dim), got {tuple(k.shape)} and {tuple(v.shape)}")
        if self.k is None:
            self.k, self.v, self.positions = k, v, positions
            return k, v, positions
        (batch, heads, _, head_dim), (b, h, _, d) = self.k.shape, k.shape
        if b != batch:
            raise ValueError(f"kv_cache holds a batch of {batch} sequences, got keys for a "
                             f"batch of {b}: use a new KVCache for a new batch")
        if (h, d) != (heads, head_dim):
            raise ValueError(f"kv_cache holds {heads} heads of head_dim={head_dim}, got keys "
                             f"with {h} heads of head_dim={d}")
        if (k.dtype, k.device) != (self.k.dtype, self.k.device):
            raise ValueError(f"kv_cache holds {self.k.dtype} keys on {self.k.device}, got "
                             f"{k.dtype} keys on {k.device}: keep one dtype and device for "
                             "every decoding step")
        old = self.positions
        token_axis = -1 - self.coord_dims
        if (positions is None) != (old is None) or (positions is not None and (
                positions.ndim != old.ndim
                or positions.shape[:token_axis] != old.shape[:token_axis])):
            raise ValueError("positions must have the same form at every decoding step, got "
                             f"{None if positions is None else tuple(positions.shape)} after "
                             f"{None if old is None else tuple(old.shape)}")
        if positions is not None and positions.device != old.device:
            raise ValueError(f"kv_cache holds positions on {old.device}, got new positions on "
                             f"{positions.device}")
        self.k = torch.cat((self.k, k), dim=-2)
        self.v = torch.cat((self.v, v), dim=-2)
        if positions is not None:
            self.positions = torch.cat((old, positions), dim=token_axis)
        return self.k, self.v, self.positions


def biased_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """``softmax(q k^T / sqrt(head_dim) + bias) v`` of ``(B, H, N, head_dim)`` queries, keys and
    values and a finite ``(B or 1, H or 1, Nq, Nk)`` bias: SDPA's arithmetic for a learned
    bias on the CPU. There SDPA's fused kernel takes no mask gradient, so SDPA runs its math
    kernel, whose softmax spends three more passes over the scores (and their backward)
    guarding rows whose keys are all masked, which a finite bias never leaves."""
    scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-2, -1))
    scores += bias  # in the product's memory: its backward keeps q and k, not the product
    return torch.matmul(scores.softmax(dim=-1), v)


def repeat_kv(t: Tensor, num_heads: int) -> Tensor:
    """``(B, num_kv_heads, N, head_dim)`` -> ``(B, num_heads, N, head_dim)``: each key/value
    head repeated for its group of query heads (``t`` itself without groups)."""
    groups = num_heads // t.shape[1]
    if groups == 1:
        return t
    return t[:, :, None].expand(-1, -1, groups, -1, -1).flatten(1, 2)


def attend(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
           bias: Tensor | None = None, *, dropout_p: float = 0.0,
           is_causal: bool = False) -> Tensor:
    """``softmax(q k^T / sqrt(head_dim) + mask + bias) v``: SDPA with a mask and a bias.

    Args:
        q: ``(B, H, Nq, head_dim)`` queries.
        k, v: ``(B, H_kv, Nk, head_dim)`` keys and values, ``H`` a multiple of ``H_kv``.
        attn_mask: bool (True = attend) or float additive mask broadcastable to ``(B, H, Nq,
            Nk)`` (checked here), or None.
        bias: attention-logit bias broadcastable to ``(B, H, Nq, Nk)``, or None.
        dropout_p: attention dropout.
        is_causal: query ``i`` attends keys ``j <= i + (Nk - Nq)`` (bottom-right aligned).

    A learned bias on the CPU without a mask or dropout goes through ``biased_attention`` (SDPA
    would run its math kernel there); otherwise mask, causal mask and bias are summed into
    SDPA's one additive mask.

    Returns:
        ``(B, H, Nq, head_dim)``.
    """
    num_q, num_k = q.shape[-2], k.shape[-2]
    mask = None
    if attn_mask is not None:
        _check_mask(attn_mask, (q.shape[0], q.shape[1], num_q, num_k))
        # SDPA wants a >= 2-D float mask in the queries' dtype
        mask = _as_additive(attn_mask[(None,) * (4 - attn_mask.ndim)], q.dtype)
    if is_causal and (mask is not None or bias is not None or num_k != num_q):
        causal = _as_additive(torch.ones(num_q, num_k, dtype=torch.bool, device=q.device)
                              .tril(num_k - num_q), q.dtype)
        mask, is_causal = causal if mask is None else mask + causal, False
    if bias is not None:
        bias = bias.to(q.dtype)
        if torch.onnx.is_in_onnx_export():
            # Inference only: a learned bias with grad makes the exporter re-run SDPA by the
            # math kernel, whose output strides fail the callers' reshape.
            bias = bias.detach()
        if mask is None and bias.requires_grad and not dropout_p and q.device.type == "cpu":
            num_heads = q.shape[1]
            return biased_attention(q, repeat_kv(k, num_heads), repeat_kv(v, num_heads), bias)
        mask = bias if mask is None else mask + bias
    gqa = k.shape[1] != q.shape[1]
    if gqa and not _gqa_in_kernel(q, k, v, mask, dropout_p, is_causal):
        k, v, gqa = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1]), False
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                          is_causal=is_causal, enable_gqa=gqa)


def _as_additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A bool (True = attend) or float mask as an additive float mask in ``dtype``."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)  # SDPA wants a float mask in the queries' dtype
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, float("-inf"))


def _shape(positions: object) -> str:
    """``positions``' (or its ``.coords``') shape for a message."""
    tensor = getattr(positions, "coords", positions)
    return str(tuple(tensor.shape)) if isinstance(tensor, Tensor) else type(positions).__name__


def _check_fit(name: str, positions: object, encoded_tokens: int, tokens: int) -> None:
    """Raise naming ``name`` when the encoding of ``positions`` covers the wrong token count."""
    if encoded_tokens != tokens:
        raise ValueError(f"{name} of shape {_shape(positions)} give {encoded_tokens} "
                         f"positions for {tokens} tokens: expected (N, *C) or (B, N, *C) "
                         f"with N={tokens}")


def _check_batch(names: str, positions: tuple[object, ...], encoded_batch: int, batch: int) -> None:
    if encoded_batch not in (1, batch):
        shapes = " and ".join(_shape(p) for p in positions)
        raise ValueError(f"{names} of shape {shapes} give a batch of {encoded_batch}, "
                         f"expected 1 or B={batch}")


def _check_tokens(name: str, t: object, dim: int, batch: int | None = None) -> None:
    """Raise unless ``t`` is a floating ``(B, N, dim)`` tensor (``B == batch`` when given)."""
    if not isinstance(t, Tensor) or not t.is_floating_point():
        got = t.dtype if isinstance(t, Tensor) else type(t).__name__
        raise TypeError(f"{name} must be a floating tensor of shape (B, N, dim={dim}), got {got}")
    if t.ndim != 3 or t.shape[-1] != dim:
        raise ValueError(f"{name} must have shape (B, N, dim={dim}), got {tuple(t.shape)}")
    if batch is not None and t.shape[0] != batch:
        raise ValueError(f"{name} of shape {tuple(t.shape)} has a batch of {t.shape[0]}, "
                         f"expected B={batch} (the batch of x)")


def _check_mask(mask: object, shape: tuple[int, int, int, int]) -> None:
    """A bool (True = attend) or float (additive) mask broadcastable to ``(B, H, Nq, Nk)``."""
    if not isinstance(mask, Tensor) or not (mask.dtype == torch.bool or mask.is_floating_point()):
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(f"attn_mask must be a bool (True = attend) or floating (additive) "
                        f"tensor, got {got}")
    fits = mask.ndim <= 4 and all(
        m in (1, s) for m, s in zip(reversed(mask.shape), reversed(shape), strict=False))
    if not fits:
        raise ValueError(f"attn_mask of shape {tuple(mask.shape)} does not broadcast to "
                         f"(B, H, Nq, Nk) = {shape}")


def _gqa_in_kernel(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float,
                   is_causal: bool) -> bool:
    """Whether SDPA takes unrepeated keys/values (``enable_gqa``): always on CPU (faster); on
    CUDA only for the flash kernel, as transformers' ``use_gqa_in_sdpa`` (others fall back to
    the math kernel, slower than repeating k/v)."""
    if q.device.type == "cpu":
        return True
    if q.device.type != "cuda" or mask is not None or torch.compiler.is_compiling():
        return False
    params = torch.backends.cuda.SDPAParams(q, k, v, None, dropout_p, is_causal, True)
    return torch.backends.cuda.can_use_flash_attention(params)


class MultiheadAttention(nn.Module):
    """Multi-head (self or cross) attention with pluggable position encodings.

    Args:
        dim: model width.
        num_heads: attention (query) heads (``dim`` must be divisible by it).
        rotary: rotary encoding applied to q and k (e.g. ``RotaryEncoding``), or None.
        bias: attention-bias encoding with one bias per query head (e.g. ``ALiBi``), or None.
        num_kv_heads: key/value heads (grouped-query attention, as Hugging Face's
            ``repeat_kv``), dividing ``num_heads``; None is ``num_heads``.
        qkv_bias: bias in the fused q/k/v projection.
        qk_norm: LayerNorm q and k per head (as timm's ``qk_norm``).
        attn_drop: dropout on attention weights (training only).
        proj_drop: dropout after the output projection.
        backend: ``"auto"``, ``"sdpa"`` or ``"flex"``
            ([`posenc.core.attention.use_flex`][posenc.core.attention.use_flex]).
    """

    def __init__(self, dim: int, num_heads: int, rotary: nn.Module | None = None,
                 bias: nn.Module | None = None, *, qkv_bias: bool = True, qk_norm: bool = False,
                 attn_drop: float = 0.0, proj_drop: float = 0.0,
                 norm_layer: type[nn.Module] = nn.LayerNorm, backend: str = "auto",
                 num_kv_heads: int | None = None) -> None:
        super().__init__()
        self.backend = check_choice(backend, "backend", BACKENDS)
        check_positive_int(dim, "dim")
        check_positive_int(num_heads, "num_heads")
        if dim % num_heads:
            raise ValueError(f"dim={dim} must be divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_positive_int(num_kv_heads, "num_kv_heads")
        if num_kv_heads > num_heads or num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads must divide num_heads={num_heads} (each key/value "
                             f"head serves num_heads // num_kv_heads query heads), got "
                             f"num_kv_heads={num_kv_heads}")
        self.num_kv_heads = num_kv_heads
        check_bool(qkv_bias, "qkv_bias")
        check_bool(qk_norm, "qk_norm")
        for name, p in (("attn_drop", attn_drop), ("proj_drop", proj_drop)):
            if check_float(p, name, ge=0) > 1:
                raise ValueError(f"{name} must be a probability in [0, 1], got {p!r}")
        self.rotary = None if isinstance(rotary, NoPE) else rotary
        self.bias = None if isinstance(bias, NoPE) else bias
        if self.rotary is not None:
            if not hasattr(self.rotary, "rotation"):
                raise TypeError("rotary must provide rotation(positions) (e.g. RotaryEncoding), "
                                f"got {type(rotary).__name__}")
            rotary_head_dim = getattr(self.rotary, "head_dim", self.head_dim)
            if rotary_head_dim != self.head_dim:
                raise ValueError(f"rotary.head_dim={rotary_head_dim} does not match "
                                 f"dim // num_heads = {self.head_dim}")
        bias_heads = getattr(self.bias, "num_heads", num_heads)
        if bias_heads != num_heads:
            raise ValueError(f"bias.num_heads={bias_heads} does not match num_heads={num_heads}")
        self.qkv = nn.Linear(dim, dim + 2 * self.num_kv_heads * self.head_dim, bias=qkv_bias)
        self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def _heads(self, t: Tensor, heads: int) -> Tensor:
        """``(B, N, heads * head_dim)`` -> ``(B, heads, N, head_dim)`` (a view)."""
        return t.unflatten(-1, (heads, self.head_dim)).transpose(1, 2)

    def _check_bias(self, what: str, device: torch.device, shape: tuple[int, int, int], q: Tensor,
                    num_k: int, query_positions: object, key_positions: object) -> None:
        """Raise unless the bias's ``what`` on ``device`` covering ``shape = (batch, Nq, Nk)``
        fits the queries ``q`` and ``num_k`` keys."""
        if device != q.device:
            raise ValueError(f"bias {type(self.bias).__name__} gave {what} on {device} for "
                             f"queries on {q.device}: make the positions on the queries' device")
        _check_fit("query_positions", query_positions, shape[1], q.shape[-2])
        _check_fit("key_positions", key_positions, shape[2], num_k)
        _check_batch("query_positions and key_positions", (query_positions, key_positions),
                     shape[0], q.shape[0])

    def forward(self, x: Tensor, context: Tensor | None = None, *,
                query_positions: Tensor | None = None, key_positions: Tensor | None = None,
                attn_mask: Tensor | None = None, is_causal: bool = False,
                kv_cache: KVCache | None = None) -> Tensor:
        """Attend from ``x`` to ``context`` (``x`` itself when None).

        Args:
            x: ``(B, Nq, dim)`` queries' tokens.
            context: ``(B, Nk, dim)`` keys' and values' tokens; defaults to ``x``.
            query_positions: ``(Nq, *C)``/``(B, Nq, *C)`` coordinates of ``x``; default
                ``0..Nq-1`` (continuing after the cache when ``kv_cache`` is given).
            key_positions: coordinates of ``context``; defaults to ``query_positions`` for
                self-attention and to ``0..Nk-1`` otherwise.
            attn_mask: bool (True = attend) or float additive mask broadcastable to
                ``(B, H, Nq, Nk)``, or a FlexAttention ``BlockMask``.
            is_causal: query ``i`` attends keys ``j <= i + (Nk - Nq)`` (bottom-right aligned).
            kv_cache: a [`KVCache`][posenc.core.KVCache]; new keys/values are appended and attended.

        Positions' values are read here, once per distinct tensor (NaN, inf or out of a
        rotary's ``check_range`` raise ``ValueError``), and reach the encodings as views their
        own checks do not read again; positions a model made finite by construction (marked
        where it made them) are read nowhere, so a model's blocks call this as plain code.

        Returns:
            ``(B, Nq, dim)``.
        """
        query_positions, key_positions = check_pair_values(query_positions, key_positions)
        dim = self.qkv.in_features
        _check_tokens("x", x, dim)
        batch, num_q, _ = x.shape
        if context is not None:
            _check_tokens("context", context, dim, batch)
        check_bool(is_causal, "is_causal")
        if kv_cache is not None and not isinstance(kv_cache, KVCache):
            raise TypeError(f"kv_cache must be a KVCache or None, got {type(kv_cache).__name__}")
        if query_positions is None and (self.rotary is not None or self.bias is not None):
            offset = 0 if kv_cache is None else len(kv_cache)
            query_positions = incremental_positions(num_q, offset, device=x.device)
        if key_positions is None and query_positions is not None:
            key_positions = (query_positions if context is None
                             else torch.arange(context.shape[1], device=x.device))
        if hasattr(self.rotary, "check_range"):
            # The dtype q and k are attended in: SDPA runs in the autocast dtype.
            device = x.device.type
            work = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                    else x.dtype)
            self.rotary.check_range(query_positions, work, "query_positions")
            if key_positions is not query_positions:
                self.rotary.check_range(key_positions, work, "key_positions")
        kv_dim = self.num_kv_heads * self.head_dim
        if context is None:
            q, k, v = self.qkv(x).split((dim, kv_dim, kv_dim), dim=-1)
        else:
            w_q, w_kv = self.qkv.weight.split((dim, 2 * kv_dim))
            b_q, b_kv = (None, None) if self.qkv.bias is None else self.qkv.bias.split(
                (dim, 2 * kv_dim))
            q = F.linear(x, w_q, b_q)
            k, v = F.linear(context, w_kv, b_kv).split((kv_dim, kv_dim), dim=-1)
        q = self._heads(q, self.num_heads)
        k, v = self._heads(k, self.num_kv_heads), self._heads(v, self.num_kv_heads)
        q, k = self.q_norm(q), self.k_norm(k)

        if self.rotary is not None:
            q_rotation = self.rotary.rotation(query_positions)
            if hasattr(self.rotary, "key_rotation"):  # keys turn differently (xPos)
                k_rotation = self.rotary.key_rotation(key_positions)
            else:
                k_rotation = (q_rotation if key_positions is query_positions
                              else self.rotary.rotation(key_positions))
            _check_fit("query_positions", query_positions, q_rotation.extent[-1], num_q)
            _check_fit("key_positions", key_positions, k_rotation.extent[-1], k.shape[-2])
            _check_batch("query_positions", (query_positions,), q_rotation.extent[0], batch)
            _check_batch("key_positions", (key_positions,), k_rotation.extent[0], batch)
            if k_rotation.extent[1] != 1:  # per-head rotation: one key copy per query head
                k, v = repeat_kv(k, self.num_heads), repeat_kv(v, self.num_heads)
            q, k = apply_rotation(q, q_rotation), apply_rotation(k, k_rotation)
        if kv_cache is not None:
            k, v, key_positions = kv_cache.append(k, v, key_positions)
            if isinstance(key_positions, Tensor):  # each step's positions were checked by it
                key_positions = known_finite(key_positions)

        num_k = k.shape[-2]
        dropout_p = self.attn_drop if self.training else 0.0
        if use_flex(self.backend, self.bias, attn_mask, q, k, v, dropout_p):
            score_mod = None
            if self.bias is not None:
                score_mod = self.bias.score_mod(query_positions, key_positions)
                shape = (score_mod.batch, score_mod.num_queries, score_mod.num_keys)
                self._check_bias("a score_mod", score_mod.device, shape, q, num_k,
                                 query_positions, key_positions)
            # flex_attend takes as many kv heads as query heads (its score_mod sees query heads)
            k, v = repeat_kv(k, self.num_heads), repeat_kv(v, self.num_heads)
            out = flex_attend(q, k, v, score_mod, block_mask=attn_mask, is_causal=is_causal)
            return self.proj_drop(self.proj(out.transpose(1, 2).reshape(batch, num_q, dim)))
        bias = None
        if self.bias is not None:
            bias = self.bias(query_positions, key_positions)
            self._check_bias("logits", bias.device, (bias.shape[0], *bias.shape[-2:]), q, num_k,
                             query_positions, key_positions)
        out = attend(q, k, v, attn_mask, bias, dropout_p=dropout_p, is_causal=is_causal)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(batch, num_q, dim)))
