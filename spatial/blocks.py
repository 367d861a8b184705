"""Transformer blocks that take the rotation and bias of their model's forward.

As timm's Eva computes its rotary embedding once per forward and passes it to every block
(``blk(x, rope=rot_pos_embed)``), a grid model
([`GridVisionTransformer`][posenc.spatial.GridVisionTransformer],
[`VideoVisionTransformer`][posenc.spatial.VideoVisionTransformer]) computes each distinct encoding
of its blocks once per forward ([`encode_blocks`][posenc.spatial.blocks.encode_blocks]) and passes
every block its rotation and bias: a gradient-checkpointed block recomputes from its own forward's
tensors, and no block reads a value (the model made the positions from the input's shape).
[`GridBlock`][posenc.spatial.blocks.GridBlock] and
[`GridResPostBlock`][posenc.spatial.blocks.GridResPostBlock] own timm's block's modules under their
names, [`GridAttention`][posenc.spatial.blocks.GridAttention] timm's attention's, so checkpoint keys
stay timm's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
from posenc.core import MultiheadAttention, apply_rotation
from posenc.core._checks import known_finite
from posenc.core.attention import attend, flex_attend, use_flex
from posenc.core.bias import ScoreMod
from posenc.core.rope import Rotation
from timm.layers import Attention
from timm.models.vision_transformer import Block, ResPostBlock
from torch import Tensor, nn

from .coords import GridPositions, VideoPositions
from .liere import BlockRotation
from .rope import _Rotary

__all__ = ["SUPPORTED", "GridAttention", "GridBlock", "GridResPostBlock", "grid_blocks",
           "encode_blocks"]

SUPPORTED = ("timm.models.vision_transformer.VisionTransformer (vit_*, deit_* without a "
             "distillation token; with or without class token, reg_tokens, no_embed_class, "
             "dynamic_img_size, dynamic_img_pad) with timm's PatchEmbed, Block/ResPostBlock and "
             "Attention")

#: A block's rotation of its ``P + N`` tokens, or None.
Rope = Rotation | BlockRotation | None
#: A block's bias: ``(B or 1, H or 1, P + N, P + N)`` float, a FlexAttention ScoreMod, or None.
Bias = Tensor | ScoreMod | None


class GridAttention(MultiheadAttention):
    """[`posenc.core.MultiheadAttention`][posenc.core.MultiheadAttention]'s modules and encodings
    with timm ``Attention``'s call, taking the rotation and bias its model computed for this
    forward."""

    @classmethod
    def from_timm(cls, attn: Attention, rotary: nn.Module | None,
                  bias: nn.Module | None) -> GridAttention:
        """Wrap a timm ``Attention``'s modules (shared, not copied) with an encoding."""
        if type(attn) is not Attention:
            raise TypeError(f"attach supports blocks whose attn is timm.layers.Attention, got "
                            f"{type(attn).__name__}; supported models: {SUPPORTED}")
        dim = attn.qkv.in_features
        # gate (timm >= 1.0.28) and attn_dim (>= 1.0.23) read with defaults: any timm version.
        attn_dim = getattr(attn, "attn_dim", attn.num_heads * attn.head_dim)
        if getattr(attn, "gate", None) is not None \
                or not isinstance(getattr(attn, "norm", nn.Identity()), nn.Identity) \
                or attn_dim != dim or attn.proj.out_features != dim:
            raise ValueError("attach supports timm Attention without gated, scale_norm, "
                             "attn_head_dim or dim_out (the settings of vit_*/deit_* models)")
        for enc in (rotary, bias):
            heads = getattr(enc, "num_heads", attn.num_heads)
            if heads != attn.num_heads:
                raise ValueError(f"{type(enc).__name__} has num_heads={heads}, the model's "
                                 f"attention has num_heads={attn.num_heads}")
        with torch.device("meta"):  # the projections are replaced by the timm modules below
            new = cls(dim, attn.num_heads, rotary, bias, qkv_bias=attn.qkv.bias is not None,
                      attn_drop=attn.attn_drop.p)
        new.qkv, new.q_norm, new.k_norm = attn.qkv, attn.q_norm, attn.k_norm
        new.proj, new.proj_drop = attn.proj, attn.proj_drop
        new.train(attn.training)
        return new

    def forward(self, x: Tensor, rope: Rope = None, bias: Bias = None,
                attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """``(B, N, dim)`` tokens -> ``(B, N, dim)``. ``rope``: the rotation of the ``N`` tokens
        by `rotary`, ``bias``: [`bias`][posenc.spatial.bias]'s
        ([`encode_blocks`][posenc.spatial.blocks.encode_blocks]), both given exactly when the
        encoding is set; ``attn_mask``: bool (True = attend) or additive, broadcastable to
        ``(B, H, N, N)``, or a FlexAttention ``BlockMask``."""
        if (rope is None) != (self.rotary is None) or (bias is None) != (self.bias is None):
            wanted = " and ".join(name for name, enc in (("rope", self.rotary),
                                                         ("bias", self.bias)) if enc is not None)
            raise TypeError(f"GridAttention takes {wanted or 'no rope or bias'} computed by its "
                            f"model for this forward; call the model (forward, forward_features "
                            f"or forward_intermediates), which passes them to every block")
        batch, num_tokens, dim = x.shape
        q, k, v = (self._heads(t, self.num_heads) for t in self.qkv(x).split(dim, dim=-1))
        q, k = self.q_norm(q), self.k_norm(k)
        if rope is not None:
            q, k = _for_scores(q, k, rope)
        dropout_p = self.attn_drop if self.training else 0.0
        if use_flex(self.backend, self.bias, attn_mask, q, k, v, dropout_p):
            out = flex_attend(q, k, v, bias, block_mask=attn_mask, is_causal=is_causal)
        else:
            out = attend(q, k, v, attn_mask, bias, dropout_p=dropout_p, is_causal=is_causal)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(batch, num_tokens, dim)))


class GridBlock(nn.Module):
    """timm's pre-norm ``Block``, its modules (the attention a
    [`GridAttention`][posenc.spatial.blocks.GridAttention]), taking its model's rotation and
    bias."""

    def __init__(self, block: nn.Module, attn: GridAttention) -> None:
        super().__init__()
        for name, module in block.named_children():  # timm's names and order: its state dict
            self.add_module(name, attn if name == "attn" else module)
        self.train(block.training)

    def forward(self, x: Tensor, rope: Rope = None, bias: Bias = None,
                attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """``(B, N, dim)`` -> ``(B, N, dim)``; the arguments as
        [`GridAttention.forward`][posenc.spatial.blocks.GridAttention.forward]."""
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), rope, bias, attn_mask,
                                                   is_causal)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class GridResPostBlock(GridBlock):
    """timm's post-norm ``ResPostBlock``, as [`GridBlock`][posenc.spatial.blocks.GridBlock]."""

    def forward(self, x: Tensor, rope: Rope = None, bias: Bias = None,
                attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """``(B, N, dim)`` -> ``(B, N, dim)``; the arguments as
        [`GridAttention.forward`][posenc.spatial.blocks.GridAttention.forward]."""
        x = x + self.drop_path1(self.norm1(self.attn(x, rope, bias, attn_mask, is_causal)))
        return x + self.drop_path2(self.norm2(self.mlp(x)))


_GRID_BLOCKS = {Block: GridBlock, ResPostBlock: GridResPostBlock}


def grid_blocks(blocks: Sequence[nn.Module], rotary: Sequence[nn.Module | None] | None = None,
                bias: Sequence[nn.Module | None] | None = None) -> nn.Sequential:
    """timm ``blocks`` as [`GridBlock`][posenc.spatial.blocks.GridBlock] s, each with its ``rotary``
    and ``bias`` encoding (one per block); neither: the blocks themselves (timm's attention). Their
    modules are shared, not copied; everything is checked before anything is built."""
    if rotary is None and bias is None:
        return nn.Sequential(*blocks)
    for block in blocks:
        if type(block) not in _GRID_BLOCKS:
            raise TypeError(f"rotary and bias encodings need timm's Block or ResPostBlock, "
                            f"got {type(block).__name__}; supported: {SUPPORTED}")
    for name, given in (("rotary", rotary), ("bias", bias)):
        if given is not None and len(given) != len(blocks):
            raise ValueError(f"{name} must hold one encoding (or None) per block "
                             f"({len(blocks)}), got {len(given)}")
    none = [None] * len(blocks)
    attentions = [GridAttention.from_timm(block.attn, r, b) for block, r, b in zip(
        blocks, rotary or none, bias or none, strict=True)]
    return nn.Sequential(*(_GRID_BLOCKS[type(block)](block, attn)
                           for block, attn in zip(blocks, attentions, strict=True)))


def encode_blocks(blocks: Sequence[nn.Module], positions: GridPositions | VideoPositions | None,
                  tokens: Tensor, attn_mask: object, what: str) -> list[tuple[Rope, Bias]]:
    """Each block's ``(rope, bias)`` for this forward: every distinct rotary and bias encoding
    of ``blocks`` computed once from ``positions`` (the bias as a ScoreMod for a block that
    takes the FlexAttention path), ``(None, None)`` for timm's own blocks. Each result is
    checked against the ``(B, P + n, dim)`` ``tokens``, so a wrong encoding fails here, naming
    itself (``what``: ``"image"``/``"clip"``), not inside a block."""
    computed: list[tuple[nn.Module, bool, object]] = []  # (encoding, as ScoreMod, value)
    drawn: list[tuple[tuple, Tensor]] = []  # coordinate augmentations of this forward

    def once(enc: nn.Module, flex: bool, compute: Callable[[], object], heads: int) -> object:
        for seen, seen_flex, value in computed:
            if seen is enc and seen_flex == flex:
                return value
        value = compute()
        _check_fit(enc, value, tokens, heads, positions, what)
        computed.append((enc, flex, value))
        return value

    out = []
    for block in blocks:
        attn = getattr(block, "attn", None)
        if not isinstance(attn, GridAttention):
            out.append((None, None))
            continue
        rope = bias = None
        if attn.rotary is not None:
            rope = once(attn.rotary, False, partial(_rotation, attn.rotary, positions, drawn),
                        attn.num_heads)
        if attn.bias is not None:
            dropout = attn.attn_drop if attn.training else 0.0
            # q, k, v stand in as tokens: use_flex reads only their device and requires_grad.
            flex = use_flex(attn.backend, attn.bias, attn_mask, tokens, tokens, tokens, dropout)
            bias = once(attn.bias, flex, partial(_bias, attn.bias, positions, flex), attn.num_heads)
        out.append((rope, bias))
    return out


def _for_scores(q: Tensor, k: Tensor, rope: Rotation | BlockRotation) -> tuple[Tensor, Tensor]:
    """q and k rotated for the attention scores alone (what ``GridAttention`` does with them):
    ComRoPE's planes may leave them in their basis, one product fewer, and a per-token rotation
    may turn both in one product
    ([`BlockRotation.for_scores`][posenc.spatial.liere.BlockRotation.for_scores])."""
    if isinstance(rope, BlockRotation):
        return rope.for_scores(q, k)
    return apply_rotation(q, rope), apply_rotation(k, rope)


def _rotation(enc: nn.Module, positions: GridPositions | VideoPositions,
              drawn: list[tuple[tuple, Tensor]]) -> Rope:
    """``enc``'s rotation at the model's ``positions`` by its public ``rotation``; a RoPE2D's
    coordinate augmentation (training mode) is drawn once per configuration and forward
    (``drawn``), so every block of the forward rotates by the same transform."""
    augment = getattr(enc, "coord_augment", None)
    if not isinstance(enc, _Rotary) or augment is None or not augment.training:
        return enc.rotation(positions)
    coords = next((c for config, c in drawn if config == augment.config), None)
    if coords is None:
        coords = known_finite(augment(positions.coords))  # finite, shifted and scaled
        drawn.append((augment.config, coords))
    return enc.rotation(positions._replace(coords=coords), augment=False)


def _bias(enc: nn.Module, positions: GridPositions, flex: bool) -> Bias:
    """``enc``'s self-attention bias at the model's ``positions`` (a ScoreMod if ``flex``)."""
    return enc.score_mod(positions, positions) if flex else enc(positions, positions)


def _check_fit(enc: nn.Module, value: object, tokens: Tensor, heads: int,
               positions: GridPositions | VideoPositions, what: str) -> None:
    """Raise unless an encoding's rotation (its ``extent``), dense bias or ScoreMod covers the
    ``(B, P + n, dim)`` ``tokens`` and ``heads`` heads."""
    batch, num_tokens = tokens.shape[0], tokens.shape[1]
    if isinstance(value, ScoreMod):
        shape, output = (value.batch, value.num_queries, value.num_keys), "score_mod over"
        expected = f"(1 or {batch}, {num_tokens}, {num_tokens})"
        fits = value.batch in (1, batch) and value.num_queries == value.num_keys == num_tokens
    elif isinstance(value, Tensor):
        shape, output = tuple(value.shape), "bias of shape"
        expected = f"(1 or {batch}, 1 or {heads}, {num_tokens}, {num_tokens})"
        fits = value.ndim == 4 and value.shape[0] in (1, batch) and value.shape[1] in (1, heads) \
            and value.shape[2] == value.shape[3] == num_tokens
    else:
        shape, output = tuple(value.extent), "rotation over (samples, heads, tokens)"
        expected = f"(1 or {batch}, 1 or {heads}, {num_tokens})"
        fits = len(shape) == 3 and shape[0] in (1, batch) and shape[1] in (1, heads) \
            and shape[2] == num_tokens
    if not fits:
        raise ValueError(
            f"{type(enc).__name__} gave a {output} {shape} for {batch} {what}s of {num_tokens} "
            f"tokens ({positions.num_prefix_tokens} prefix + patches) and {heads} heads: "
            f"expected {expected}")
