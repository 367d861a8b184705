"""Give a timm ``VisionTransformer`` any posenc 2D encoding, at any image size.

:func:`attach` changes the model in place, keeping every timm parameter name:

- ``model.pos_embed`` becomes None; timm's ``_pos_embed`` then only prepends the prefix
  tokens (cls, registers).
- ``model.patch_embed`` becomes a :class:`GridPatchEmbed` (same ``proj``/``norm``): it checks
  that the image divides into patches, adds an additive encoding for the current grid, and
  records the patch positions of this forward in a small shared state.
- ``model.patch_drop`` becomes a :class:`GridTokenDropout`: timm's ``pos_drop`` and patch
  dropout, which also keeps the positions of the kept patches.
- for rotary and bias encodings each ``block.attn`` becomes a :class:`GridAttention`, i.e.
  :class:`posenc.core.MultiheadAttention` holding the block's ``qkv``/``q_norm``/``k_norm``/
  ``proj`` modules, which reads the positions recorded for this forward.

Positions travel as a plain attribute set before the blocks run, so the model works with
``forward``, ``forward_features``, ``forward_intermediates``, ``torch.compile`` and
``torch.export`` (grid sizes come from tensor shapes; nothing calls ``.item()``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from posenc.core import MultiheadAttention
from timm.layers import Attention, PatchDropout, PatchEmbed
from timm.layers.patch_dropout import patch_dropout_forward
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor, nn

from .coords import GridPositions, patch_coords
from .factory import ENCODINGS, encoding_from_name, encoding_kind
from .learned import Learned2D

__all__ = ["attach", "GridPatchEmbed", "GridTokenDropout", "GridAttention", "GridState"]

SUPPORTED = ("timm.models.vision_transformer.VisionTransformer (vit_*, deit_* without a "
             "distillation token; with or without class token, reg_tokens, no_embed_class, "
             "dynamic_img_size) with timm's PatchEmbed and Attention")
PER_BLOCK = ("rope_mixed", "relbias", "cpb")  # learnable: one module per block, as the papers


class GridState:
    """The patch positions of the current forward, shared by a model's modules."""

    def __init__(self) -> None:
        self.positions: GridPositions | None = None


class GridPatchEmbed(PatchEmbed):
    """timm ``PatchEmbed`` that enforces divisible image sizes and applies posenc encodings.

    Made from a model's own patch embed by :func:`attach` (same ``proj`` and ``norm``).
    Always returns ``(B, rows * cols, dim)`` tokens.

    Attributes set by attach:
        pos_encoding: additive encoding with ``encode_grid(grid_size)``, or None.
        grid_state: :class:`GridState` to record positions in, or None.
        num_prefix_tokens: prefix tokens the model prepends (recorded with the positions).
        coord_normalize: coordinate system of the recorded positions (see ``patch_coords``).
    """

    pos_encoding: nn.Module | None
    grid_state: GridState | None
    num_prefix_tokens: int
    coord_normalize: str | None

    @classmethod
    def convert(cls, patch_embed: PatchEmbed, pos_encoding: nn.Module | None,
                grid_state: GridState | None, num_prefix_tokens: int,
                coord_normalize: str | None) -> GridPatchEmbed:
        """Turn ``patch_embed`` (a timm PatchEmbed) into a GridPatchEmbed, in place."""
        patch_embed.__class__ = cls
        patch_embed.strict_img_size = False
        patch_embed.pos_encoding = pos_encoding
        patch_embed.grid_state = grid_state
        patch_embed.num_prefix_tokens = num_prefix_tokens
        patch_embed.coord_normalize = coord_normalize
        return patch_embed

    def forward(self, x: Tensor) -> Tensor:
        """``(B, C, H, W)`` images -> ``(B, rows * cols, dim)`` patch tokens."""
        height, width = x.shape[-2], x.shape[-1]
        ph, pw = self.patch_size
        if self.dynamic_img_pad:
            x = F.pad(x, (0, (pw - width % pw) % pw, 0, (ph - height % ph) % ph))
        elif height % ph or width % pw:
            raise ValueError(f"image size ({height}, {width}) is not divisible by the patch size "
                             f"({ph}, {pw}); resize or crop the image to a multiple of it")
        x = self.proj(x)
        grid = (x.shape[-2], x.shape[-1])
        x = self.norm(x.flatten(2).transpose(1, 2))
        if self.pos_encoding is not None:
            x = x + self.pos_encoding.encode_grid(grid).to(x.dtype)
        if self.grid_state is not None:
            coords = patch_coords(grid, self.coord_normalize, device=x.device)
            # A fresh cache per forward: blocks share what they derive from these positions.
            self.grid_state.positions = GridPositions(coords, grid, self.num_prefix_tokens, {})
        return x


class GridTokenDropout(nn.Module):
    """timm's ``pos_drop`` then patch dropout; the kept patches' positions are recorded.

    Args:
        pos_drop: the model's position dropout (timm skips it when ``pos_embed`` is None).
        prob: patch dropout probability (timm ``patch_drop_rate``).
        num_prefix_tokens: leading tokens that are never dropped.
        ordered: keep the kept patches in grid order.
        grid_state: where positions are recorded, or None.
    """

    def __init__(self, pos_drop: nn.Module, prob: float, num_prefix_tokens: int,
                 ordered: bool = False, grid_state: GridState | None = None) -> None:
        super().__init__()
        self.pos_drop = pos_drop
        self.prob = float(prob)
        self.num_prefix_tokens = num_prefix_tokens
        self.ordered = ordered
        self.grid_state = grid_state

    def forward(self, x: Tensor) -> Tensor:
        x = self.pos_drop(x)
        if not self.training or self.prob == 0.0:
            return x
        x, keep = patch_dropout_forward(x, self.prob, self.num_prefix_tokens, self.ordered, True)
        state = self.grid_state
        if keep is not None and state is not None and state.positions is not None:
            coords = state.positions.coords
            if coords.ndim == 2:
                kept = coords[keep]
            else:
                kept = coords.gather(1, keep[..., None].expand(-1, -1, 2))
            state.positions = state.positions._replace(coords=kept, cache={})
        return x

    def extra_repr(self) -> str:
        return f"prob={self.prob}, num_prefix_tokens={self.num_prefix_tokens}"


class GridAttention(MultiheadAttention):
    """:class:`posenc.core.MultiheadAttention` with timm ``Attention``'s call signature.

    Positions come from the model's :class:`GridState` (set by :class:`GridPatchEmbed` in
    the same forward), so timm's blocks call it unchanged.
    """

    grid_state: GridState

    @classmethod
    def from_timm(cls, attn: Attention, rotary: nn.Module | None, bias: nn.Module | None,
                  grid_state: GridState) -> GridAttention:
        """Wrap a timm ``Attention``'s modules (shared, not copied) with an encoding."""
        if type(attn) is not Attention:
            raise TypeError(f"attach supports blocks whose attn is timm.layers.Attention, got "
                            f"{type(attn).__name__}; supported models: {SUPPORTED}")
        dim = attn.qkv.in_features
        if attn.gate is not None or not isinstance(attn.norm, nn.Identity) \
                or attn.attn_dim != dim or attn.proj.out_features != dim:
            raise ValueError("attach supports timm Attention without gate, scale_norm, "
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
        new.grid_state = grid_state
        new.train(attn.training)
        return new

    def forward(self, x: Tensor, attn_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        """``(B, P + N, dim)`` tokens -> ``(B, P + N, dim)``; as timm's ``Attention``."""
        positions = self.grid_state.positions
        if positions is None:
            raise RuntimeError("GridAttention has no patch positions: run it through the model's "
                               "forward (its patch_embed records them)")
        return super().forward(x, query_positions=positions, attn_mask=attn_mask,
                               is_causal=is_causal)


def _check_model(model: nn.Module) -> VisionTransformer:
    supported = isinstance(model, VisionTransformer) and (
        type(model)._pos_embed is VisionTransformer._pos_embed)
    if not supported:
        raise TypeError(f"attach does not support {type(model).__name__}; supported: "
                        f"{SUPPORTED}")
    if isinstance(model.patch_embed, GridPatchEmbed):
        raise ValueError("this model already has a posenc encoding attached; attach to a fresh "
                         "model (or one loaded from a timm checkpoint)")
    if type(model.patch_embed) is not PatchEmbed:
        raise TypeError(f"attach needs timm's PatchEmbed, got {type(model.patch_embed).__name__};"
                        f" supported: {SUPPORTED}")
    if not isinstance(model.patch_drop, (nn.Identity, PatchDropout)):
        raise TypeError(f"attach needs patch_drop to be timm's PatchDropout or Identity, got "
                        f"{type(model.patch_drop).__name__}")
    return model


def _from_name(model: VisionTransformer, name: str, kwargs: dict) -> list[nn.Module] | nn.Module:
    """Encodings for ``name`` with dims inferred from ``model`` (``kwargs`` override)."""
    attn = model.blocks[0].attn
    grid = tuple(model.patch_embed.grid_size)
    dim = model.embed_dim
    num_heads, head_dim = getattr(attn, "num_heads", None), getattr(attn, "head_dim", None)
    inferred = {
        "none": {},
        "learned": {"grid_size": grid, "dim": dim},
        "sincos2d": {"dim": dim},
        "factorized": {"max_grid_size": grid, "dim": dim},
        "rope_axial": {"head_dim": head_dim, "num_heads": num_heads},
        "rope_mixed": {"head_dim": head_dim, "num_heads": num_heads},
        "relbias": {"num_heads": num_heads, "grid_size": grid},
        "cpb": {"num_heads": num_heads, "ref_grid_size": grid},
        "alibi2d": {"num_heads": num_heads},
    }[name]
    params = {**inferred, **kwargs}
    if name == "learned" and model.pos_embed is not None:
        return _learned_from_model(model, params)
    if name in PER_BLOCK:
        return [encoding_from_name(name, **params) for _ in model.blocks]
    return encoding_from_name(name, **params)


@torch.no_grad()
def _learned_from_model(model: VisionTransformer, params: dict) -> Learned2D:
    """The model's own ``pos_embed`` as a Learned2D; its prefix entries move into the
    class/register tokens, so the model computes the same function at its grid."""
    num_embed_prefix = 0 if model.no_embed_class else model.num_prefix_tokens
    grid = tuple(model.patch_embed.grid_size)
    target = params.pop("grid_size")
    if params.pop("dim") != model.embed_dim:
        raise ValueError(f"dim must equal the model's embed_dim={model.embed_dim}")
    encoding = Learned2D(target, model.embed_dim, **params).to(
        device=model.pos_embed.device, dtype=model.pos_embed.dtype)
    prefix = encoding.load_timm_pos_embed(model.pos_embed, num_embed_prefix, grid)
    tokens = [t for t in (model.cls_token, model.reg_token) if t is not None]
    for token in tokens if num_embed_prefix else ():
        token.add_(prefix[:, :token.shape[1]])
        prefix = prefix[:, token.shape[1]:]
    return encoding


def _move(module: nn.Module, like: nn.Module) -> nn.Module:
    param = next(like.parameters(), None)
    if param is None:
        return module
    return module.to(device=param.device, dtype=param.dtype)


def attach(model: nn.Module, encoding: str | nn.Module | Sequence[nn.Module] | None,
           **kwargs) -> nn.Module:
    """Give a timm ViT a posenc 2D position encoding; returns the same (modified) model.

    Args:
        model: a timm ``VisionTransformer`` (e.g. ``timm.create_model("vit_small_patch16_224")``,
            deit, with registers, ``no_embed_class``, ``dynamic_img_size``).
        encoding: a name from :func:`encoding_from_name` (dims, heads and grid size are taken
            from the model; ``kwargs`` override them, e.g. ``base=10000.0``), an encoding
            module (rotary/bias modules are shared by all blocks), a sequence of one rotary or
            bias module per block, or None (no position encoding).

    The model's own position encoding is replaced: ``"learned"`` starts from the model's
    ``pos_embed`` (same outputs at the training size; resampled like timm's
    ``dynamic_img_size`` elsewhere); rotary and bias encodings swap each block's attention for
    :class:`GridAttention` with the same parameter names, so a timm checkpoint loads with
    ``strict=False`` reporting only position parameters. Afterwards the model runs at any
    image size divisible by the patch size (a ValueError otherwise), square or not.
    Load checkpoints before attaching "learned" (it folds ``pos_embed`` into the prefix tokens).
    """
    model = _check_model(model)
    if isinstance(encoding, (list, tuple)) and not encoding:
        raise ValueError("encoding must not be an empty sequence")
    kind = encoding_kind(encoding if not isinstance(encoding, (list, tuple)) else encoding[0])
    if isinstance(encoding, str):
        built = _from_name(model, encoding, kwargs)
    elif kwargs:
        raise TypeError(f"keyword arguments {sorted(kwargs)} are only accepted with an encoding "
                        f"name from {list(ENCODINGS)}")
    else:
        built = encoding
    depth = len(model.blocks)
    if kind in ("rotary", "bias"):
        per_block = list(built) if isinstance(built, (list, tuple)) else [built] * depth
        if len(per_block) != depth or any(encoding_kind(e) != kind for e in per_block):
            raise ValueError(f"expected one {kind} encoding per block ({depth}), got "
                             f"{len(per_block)}")
        per_block = [_move(e, model) for e in per_block]
    elif isinstance(built, (list, tuple)):
        raise TypeError("a sequence of encodings (one per block) must hold rotary or bias "
                        f"encodings, got {kind}")
    if kind == "additive":
        built = _move(built, model)
        if getattr(built, "dim", model.embed_dim) != model.embed_dim:
            raise ValueError(f"encoding dim={built.dim} does not match the model's "
                             f"embed_dim={model.embed_dim}")
        if not hasattr(built, "encode_grid"):
            raise TypeError(f"additive encodings for attach need encode_grid(grid_size); "
                            f"{type(built).__name__} has none")

    state = GridState() if kind in ("rotary", "bias") else None
    normalize = getattr(per_block[0], "normalize", None) if state is not None else None
    if state is not None and any(getattr(e, "normalize", None) != normalize for e in per_block):
        raise ValueError("all blocks' encodings must use the same coordinate normalize")
    prefix = model.num_prefix_tokens
    GridPatchEmbed.convert(model.patch_embed, built if kind == "additive" else None, state,
                           prefix, normalize)
    patch_drop = model.patch_drop
    model.patch_drop = GridTokenDropout(
        model.pos_drop, getattr(patch_drop, "prob", 0.0), prefix,
        getattr(patch_drop, "ordered", False), state)
    model.pos_embed = None
    if state is not None:
        for block, enc in zip(model.blocks, per_block, strict=True):
            rotary, bias = (enc, None) if kind == "rotary" else (None, enc)
            block.attn = GridAttention.from_timm(block.attn, rotary, bias, state)
    return model
