"""The one attention module of posenc: multi-head attention with any rotary and bias encoding.

Rotary encodings provide ``rotation(positions) -> Rotation``; bias encodings are called as
``bias(query_positions, key_positions) -> (B or 1, H, Nq, Nk)``. Positions can be 1D token
indices, ``(N, 2)`` patch coordinates or seconds: this module only passes them through.
Parameter names (``qkv``, ``q_norm``, ``k_norm``, ``proj``) match timm's ``Attention`` so
timm checkpoints load into it unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .nope import NoPE
from .positions import incremental_positions
from .rope import apply_rotation
from .validation import check_positive_int

__all__ = ["KVCache", "MultiheadAttention"]


class KVCache:
    """Rotated keys, values and key positions of earlier decoding steps.

    Keys are cached after rotation, so each step rotates only its new tokens.

    Args:
        coord_dims: trailing coordinate dims of a position (0 for token indices, 1 for
            ``(row, col)`` or other vector coordinates); tells which axis is the token axis.
    """

    def __init__(self, coord_dims: int = 0) -> None:
        self.coord_dims = coord_dims
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self.positions: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(
        self, k: Tensor, v: Tensor, positions: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Add ``(B, H, n, head_dim)`` keys/values at ``positions`` (``(n, *C)`` or
        ``(B, n, *C)``, or None when no encoding uses them); return everything cached."""
        if self.k is None:
            self.k, self.v, self.positions = k, v, positions
            return k, v, positions
        if (positions is None) != (self.positions is None) or (
                positions is not None and positions.ndim != self.positions.ndim):
            raise ValueError("positions must have the same form at every decoding step, got "
                             f"{None if positions is None else tuple(positions.shape)} after "
                             f"{None if self.positions is None else tuple(self.positions.shape)}")
        self.k = torch.cat((self.k, k), dim=-2)
        self.v = torch.cat((self.v, v), dim=-2)
        if positions is not None:
            self.positions = torch.cat((self.positions, positions), dim=-1 - self.coord_dims)
        return self.k, self.v, self.positions


def _as_additive(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, float("-inf"))


def _check_fit(name: str, positions: Tensor, encoded_tokens: int, tokens: int) -> None:
    """Raise naming ``name`` when the encoding of ``positions`` covers the wrong token count
    (positions' shape is ``(N, *C)`` or ``(B, N, *C)``; only the encoding knows ``C``)."""
    if encoded_tokens != tokens:
        raise ValueError(f"{name} of shape {tuple(positions.shape)} give {encoded_tokens} "
                         f"positions for {tokens} tokens: expected (N, *C) or (B, N, *C) "
                         f"with N={tokens}")


def _check_batch(names: str, positions: tuple[Tensor, ...], encoded_batch: int,
                 batch: int) -> None:
    if encoded_batch not in (1, batch):
        shapes = " and ".join(str(tuple(p.shape)) for p in positions)
        raise ValueError(f"{names} of shape {shapes} give a batch of {encoded_batch}, "
                         f"expected 1 or B={batch}")


class MultiheadAttention(nn.Module):
    """Multi-head (self or cross) attention with pluggable position encodings.

    Args:
        dim: model width.
        num_heads: attention heads (``dim`` must be divisible by it).
        rotary: rotary encoding applied to q and k (e.g. ``RotaryEncoding``), or None.
        bias: attention-bias encoding added to the logits (e.g. ``ALiBi``), or None.
        qkv_bias: bias in the fused q/k/v projection.
        qk_norm: LayerNorm q and k per head (as timm's ``qk_norm``).
        attn_drop: dropout on attention weights (training only).
        proj_drop: dropout after the output projection.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        rotary: nn.Module | None = None,
        bias: nn.Module | None = None,
        *,
        qkv_bias: bool = True,
        qk_norm: bool = False,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        norm_layer: type[nn.Module] = nn.LayerNorm,
    ) -> None:
        super().__init__()
        check_positive_int(dim, "dim")
        check_positive_int(num_heads, "num_heads")
        if dim % num_heads:
            raise ValueError(f"dim={dim} must be divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
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
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def _heads(self, t: Tensor, groups: int) -> tuple[Tensor, ...]:
        """``(B, N, groups * dim)`` -> ``groups`` tensors of ``(B, H, N, head_dim)``."""
        return t.unflatten(-1, (groups, self.num_heads, self.head_dim)).permute(
            2, 0, 3, 1, 4).unbind(0)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        query_positions: Tensor | None = None,
        key_positions: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        kv_cache: KVCache | None = None,
    ) -> Tensor:
        """Attend from ``x`` to ``context`` (``x`` itself when None).

        Args:
            x: ``(B, Nq, dim)`` queries' tokens.
            context: ``(B, Nk, dim)`` keys' and values' tokens; defaults to ``x``.
            query_positions: ``(Nq, *C)``/``(B, Nq, *C)`` coordinates of ``x``; default
                ``0..Nq-1`` (continuing after the cache when ``kv_cache`` is given).
            key_positions: coordinates of ``context``; defaults to ``query_positions`` for
                self-attention and to ``0..Nk-1`` otherwise.
            attn_mask: bool (True = attend) or float additive mask broadcastable to
                ``(B, H, Nq, Nk)``.
            is_causal: query ``i`` attends keys ``j <= i + (Nk - Nq)`` (bottom-right aligned,
                so it also holds with a KV cache).
            kv_cache: a :class:`KVCache`; new keys/values are appended and attention covers
                all of them.

        Returns:
            ``(B, Nq, dim)``.
        """
        batch, num_q, dim = x.shape
        self_attention = context is None
        if self_attention:
            q, k, v = self._heads(self.qkv(x), 3)
        else:
            w_q, w_kv = self.qkv.weight.split((dim, 2 * dim))
            b_q, b_kv = (None, None) if self.qkv.bias is None else self.qkv.bias.split(
                (dim, 2 * dim))
            (q,) = self._heads(F.linear(x, w_q, b_q), 1)
            k, v = self._heads(F.linear(context, w_kv, b_kv), 2)
        q, k = self.q_norm(q), self.k_norm(k)

        if query_positions is None and (self.rotary is not None or self.bias is not None):
            offset = 0 if kv_cache is None else len(kv_cache)
            query_positions = incremental_positions(num_q, offset, device=x.device)
        if key_positions is None and query_positions is not None:
            key_positions = (query_positions if self_attention
                             else torch.arange(k.shape[-2], device=x.device))

        if self.rotary is not None:
            q_rotation = self.rotary.rotation(query_positions)
            k_rotation = (q_rotation if key_positions is query_positions
                          else self.rotary.rotation(key_positions))
            _check_fit("query_positions", query_positions, q_rotation.cos.shape[-2], num_q)
            _check_fit("key_positions", key_positions, k_rotation.cos.shape[-2], k.shape[-2])
            _check_batch("query_positions", (query_positions,), q_rotation.cos.shape[0], batch)
            _check_batch("key_positions", (key_positions,), k_rotation.cos.shape[0], batch)
            q, k = apply_rotation(q, q_rotation), apply_rotation(k, k_rotation)
        if kv_cache is not None:
            k, v, key_positions = kv_cache.append(k, v, key_positions)

        mask = _as_additive(attn_mask, q.dtype)
        num_k = k.shape[-2]
        if is_causal and (mask is not None or self.bias is not None or num_k != num_q):
            causal = torch.ones(num_q, num_k, dtype=torch.bool, device=x.device).tril(num_k - num_q)
            mask = _as_additive(causal, q.dtype) if mask is None else mask + _as_additive(
                causal, q.dtype)
            is_causal = False
        if self.bias is not None:
            bias = self.bias(query_positions, key_positions).to(q.dtype)
            _check_fit("query_positions", query_positions, bias.shape[-2], num_q)
            _check_fit("key_positions", key_positions, bias.shape[-1], num_k)
            _check_batch("query_positions and key_positions", (query_positions, key_positions),
                         bias.shape[0], batch)
            mask = bias if mask is None else mask + bias

        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.attn_drop if self.training else 0.0,
            is_causal=is_causal)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(batch, num_q, dim)))
