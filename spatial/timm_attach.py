"""Give a timm ``VisionTransformer`` any posenc 2D encoding, at any image size.

:func:`attach` changes the model in place, keeping every timm parameter name:

- the model becomes a :class:`GridVisionTransformer` (``model.__class__`` is swapped for this
  module-level subclass, so ``torch.save(model)``/``copy.deepcopy`` round-trip); its
  ``forward_features`` and ``forward_intermediates`` compute the patch grid from the image shape.
- ``model.pos_embed`` becomes None; an additive encoding lives at
  ``model.patch_embed.pos_encoding`` and is added for the current grid.
- for rotary and bias encodings each ``block.attn`` becomes a :class:`GridAttention`, i.e.
  :class:`posenc.core.MultiheadAttention` holding the block's ``qkv``/``q_norm``/``k_norm``/
  ``proj`` modules, and each block a :class:`~posenc.spatial.grid_vit.GridBlock` (or
  ``GridResPostBlock``), whose forward takes the forward's positions, as timm's
  ``EvaBlock.forward(x, rope=...)``.

How positions reach the blocks (passed explicitly to each, so gradient checkpointing and
multi-crop stay correct) is in :mod:`posenc.spatial.grid_vit`, which holds the model, block and
attention classes, shared with :class:`posenc.spatial.VideoVisionTransformer`.

``attach(..., ref_grid_size=(h, w))`` is EVA's ``ref_feat_shape`` (timm's
``RotaryEmbeddingCat(ref_feat_shape=...)``): the patch indices of every grid are rescaled to the
reference grid, ``coord * ref / grid`` per axis, before any encoding sees them.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from .coords import check_grid_size
from .factory import ENCODINGS, encoding_kind, encoding_spec, encodings_for_blocks
from .grid_vit import GridVisionTransformer, check_vit, use_grid_attention
from .learned import Learned2D
from .sincos import SinCos2D

__all__ = ["attach"]


def _from_name(model: VisionTransformer, name: str, kwargs: dict,
               ref_grid_size: tuple[int, int] | None) -> list[nn.Module] | nn.Module:
    """Encodings for ``name`` with sizes inferred from ``model`` (``kwargs`` override), one
    per block or shared as :func:`posenc.spatial.factory.one_module_per_block` rules."""
    spec = encoding_spec(name)
    params = {**spec.infer(model), **kwargs}
    if ref_grid_size is not None:
        # On a meta-device build, before "learned" folds the model's pos_embed into its
        # prefix tokens: a refused name leaves the model as it was.
        with torch.device("meta"):
            _check_ref_grid([spec.build(**params)], repr(name))
    if spec.cls is Learned2D and model.pos_embed is not None:
        return _learned_from_model(model, params)
    return encodings_for_blocks(lambda: spec.build(**params), len(model.blocks))


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


#: Why ``ref_grid_size`` is refused, by encoding class name (others get a generic reason).
_NO_REF_GRID = {
    "Learned2D": "a learned table is indexed by patch, and resampled to each grid instead",
    "Factorized2D": "its learned rows/columns are indexed by patch",
    "RelativeBias2D": "its table is indexed by integer offsets and resized to each grid instead "
                      "(RelativeBias2D(..., resize='bicubic' or 'geometric'))",
    "ContinuousBias2D": "its reference grid is a constructor argument (SwinV2's pretraining "
                        "window): attach(model, 'cpb', ref_grid_size=...) or "
                        "ContinuousBias2D(..., ref_grid_size=...)",
    "ALiBi2D": "its bias is a slope times the patch distance, meant to extrapolate unscaled",
    "NoPE": "it has no positions",
    "no encoding": "there are no positions",
}


def _check_ref_grid(encodings: Sequence[nn.Module | None], label: str) -> None:
    """Raise unless every one of ``encodings`` reads coordinates in which EVA's rescaling means
    what it does in timm: rotary encodings and SinCos2D on patch indices (``normalize=None``)."""
    for enc in encodings:
        kind, cls = encoding_kind(enc), "no encoding" if enc is None else type(enc).__name__
        normalize = getattr(enc, "normalize", None)
        if kind == "rotary" or isinstance(enc, SinCos2D):
            if normalize is not None:
                raise ValueError(
                    f"ref_grid_size rescales patch indices to a reference grid, but encoding "
                    f"{label} ({cls}) uses normalize={normalize!r} coordinates, already relative "
                    f"to the image size: leave ref_grid_size None, or use normalize=None")
            continue
        reason = _NO_REF_GRID.get(cls, f"it is a {kind} encoding")
        raise ValueError(f"ref_grid_size is not defined for encoding {label} ({cls}): {reason}; "
                         f"it rescales the coordinates of rotary encodings (RoPE2D) and sincos2d "
                         f"(EVA's ref_feat_shape)")


def _takes_ref_grid(encoding: object) -> bool:
    """Whether ``encoding`` names a class whose constructor takes ``ref_grid_size`` itself
    (``"cpb"``: SwinV2's pretraining window), which then gets attach's keyword."""
    return isinstance(encoding, str) and "ref_grid_size" in inspect.signature(
        encoding_spec(encoding).cls).parameters


def _move(module: nn.Module, like: nn.Module) -> nn.Module:
    param = next(like.parameters(), None)
    if param is None:
        return module
    return module.to(device=param.device, dtype=param.dtype)


def attach(model: nn.Module, encoding: str | nn.Module | Sequence[nn.Module] | None,
           **kwargs: Any) -> nn.Module:
    """Give a timm ViT a posenc 2D position encoding; returns the same (modified) model.

    Args:
        model: a timm ``VisionTransformer`` (e.g. ``timm.create_model("vit_small_patch16_224")``,
            deit, with registers, ``no_embed_class``, ``dynamic_img_size``).
        encoding: a name from :data:`posenc.spatial.ENCODINGS` (dims, heads and grid size are
            taken from the model; ``kwargs`` override them, e.g. ``base=10000.0``; learnable
            rotary/bias names get one module per block, parameter-free ones one shared module:
            :func:`posenc.spatial.factory.one_module_per_block`), an encoding module (rotary/bias
            modules are shared by all blocks), a sequence of one rotary or bias module per
            block, or None (no position encoding).
        **kwargs: the named encoding's constructor arguments (see ``encoding``), and
            ``ref_grid_size``: ``rows`` or ``(rows, cols)``, EVA's ``ref_feat_shape``: every
            grid's patch indices are rescaled to this reference grid, ``row * R / rows`` and
            ``col * C / cols`` (:meth:`GridVisionTransformer.grid_coords`), so a model trained
            at the reference grid and run at another sees the coordinate range it was trained
            on (position interpolation; timm's ``RotaryEmbeddingCat(in_pixels=False,
            ref_feat_shape=...)`` values for ``rope_axial`` with ``base=10000``). Defined for
            rotary encodings and ``sincos2d`` on patch indices (``normalize=None``); any other
            encoding (or None) is a ValueError naming it. For ``"cpb"`` it is the constructor's
            ``ref_grid_size`` (SwinV2's pretraining window; the model's grid by default) and no
            coordinate is rescaled. None (default): patch indices as they are.

    The model's own position encoding is replaced: ``"learned"`` starts from the model's
    ``pos_embed`` (same outputs at the training size; resampled like timm's
    ``dynamic_img_size`` elsewhere); rotary and bias encodings swap each block's attention for
    :class:`GridAttention` with the same parameter names, so a timm checkpoint loads with
    ``strict=False`` reporting only position parameters. Afterwards the model (a
    :class:`GridVisionTransformer`) runs at any image size divisible by the patch size (a
    ValueError otherwise; any size with ``dynamic_img_pad``), square or not, with gradient
    checkpointing and patch dropout. Load checkpoints before attaching "learned" (it folds
    ``pos_embed`` into the prefix tokens).
    """
    if isinstance(encoding, (list, tuple)) and not encoding:
        raise ValueError("encoding must not be an empty sequence")
    kind = encoding_kind(encoding if not isinstance(encoding, (list, tuple)) else encoding[0])
    ref_grid_size = None if _takes_ref_grid(encoding) else kwargs.pop("ref_grid_size", None)
    if ref_grid_size is not None:
        ref_grid_size = check_grid_size(ref_grid_size, "ref_grid_size")
    model = check_vit(model, "model")
    if isinstance(encoding, str):
        built = _from_name(model, encoding, kwargs, ref_grid_size)
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

    positional = kind in ("rotary", "bias")
    normalize = getattr(per_block[0], "normalize", None) if positional else None
    if positional and any(getattr(e, "normalize", None) != normalize for e in per_block):
        raise ValueError("all blocks' encodings must use the same coordinate normalize")
    if ref_grid_size is not None and not isinstance(encoding, str):  # names: in _from_name
        first = encoding[0] if isinstance(encoding, (list, tuple)) else encoding
        label = "None" if first is None else type(first).__name__
        _check_ref_grid(per_block if positional else [built], label)
    # Checked before anything changes, so a refused encoding leaves the model as it was.
    use_grid_attention(model, **({kind: per_block} if positional else {}))
    model.patch_embed.pos_encoding = built if kind == "additive" else None
    model.coord_normalize = normalize
    model.ref_grid_size = ref_grid_size
    model.__class__ = GridVisionTransformer
    return model
