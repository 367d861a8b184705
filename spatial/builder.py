"""[`attach`][posenc.spatial.attach]: a timm ViT with any posenc 2D encoding, by name or module, as
the grid model ([`GridVisionTransformer`][posenc.spatial.GridVisionTransformer]) built from it."""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Sequence
from typing import Any

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor, nn

from .additive import Learned2D, SinCos2D
from .coords import check_grid_size
from .factory import ENCODINGS, encoding_kind, encoding_spec, encodings_for_blocks
from .timm_io import attach_report, load_timm_file
from .vit import GridVisionTransformer, check_vit

__all__ = ["attach"]

_logger = logging.getLogger(__name__)


def _from_name(model: VisionTransformer, name: str, kwargs: dict,
               ref_grid_size: tuple[int, int] | None
               ) -> tuple[list[nn.Module] | nn.Module, Tensor | None]:
    """Encodings for ``name`` with sizes inferred from ``model`` (``kwargs`` override), one
    per block or shared ([`one_module_per_block`][posenc.spatial.factory.one_module_per_block]), and
    the ``pos_embed`` prefix entries ``"learned"`` moves into the tokens (`_fold_prefix`)."""
    spec = encoding_spec(name)
    params = {**spec.infer(model), **kwargs}
    if ref_grid_size is not None:  # checked on a meta build, before anything is built
        with torch.device("meta"):
            _check_ref_grid([spec.build(**params)], repr(name))
    if spec.cls is Learned2D and model.pos_embed is not None:
        return _learned_from_model(model, params)
    return encodings_for_blocks(lambda: spec.build(**params), len(model.blocks)), None


@torch.no_grad()
def _learned_from_model(model: VisionTransformer, params: dict
                        ) -> tuple[Learned2D, Tensor | None]:
    """The model's ``pos_embed`` as a Learned2D, and its ``(1, P, dim)`` prefix entries (None
    with ``no_embed_class``), which the class/register tokens take: the same function at the
    model's grid."""
    num_embed_prefix = 0 if model.no_embed_class else model.num_prefix_tokens
    grid = tuple(model.patch_embed.grid_size)
    target = params.pop("grid_size")
    if params.pop("dim") != model.embed_dim:
        raise ValueError(f"dim must equal the model's embed_dim={model.embed_dim}")
    encoding = Learned2D(target, model.embed_dim, **params).to(
        device=model.pos_embed.device, dtype=model.pos_embed.dtype)
    prefix = encoding.load_timm_pos_embed(model.pos_embed, num_embed_prefix, grid)
    return encoding, prefix if num_embed_prefix else None


@torch.no_grad()
def _fold_prefix(model: GridVisionTransformer, prefix: Tensor) -> None:
    """Give ``model`` new class/register tokens (those of the ViT it was built from stay as
    they were): theirs plus the ``(1, P, dim)`` ``pos_embed`` ``prefix`` entries."""
    for name in ("cls_token", "reg_token"):
        token = getattr(model, name)
        if token is not None:
            setattr(model, name, nn.Parameter(token + prefix[:, :token.shape[1]],
                                              requires_grad=token.requires_grad))
            prefix = prefix[:, token.shape[1]:]


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
    """Raise unless each of ``encodings`` is a rotary encoding or SinCos2D on patch indices
    (``normalize=None``), where EVA's rescaling means what it does in timm."""
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
    """Whether ``encoding`` names a class taking ``ref_grid_size`` itself (``"cpb"``)."""
    return isinstance(encoding, str) and "ref_grid_size" in inspect.signature(
        encoding_spec(encoding).cls).parameters


def _move(module: nn.Module, like: nn.Module) -> nn.Module:
    param = next(like.parameters(), None)
    return module if param is None else module.to(device=param.device, dtype=param.dtype)


def attach(model: nn.Module, encoding: str | nn.Module | Sequence[nn.Module] | None,
           *, checkpoint_path: str | os.PathLike | None = None,
           **kwargs: Any) -> GridVisionTransformer:
    """A timm ViT with a posenc 2D position encoding: ``model = attach(model, "rope_mixed")``.

    Returns a [`GridVisionTransformer`][posenc.spatial.GridVisionTransformer] built from ``model``
    (its modules and weights shared, not copied; ``model`` itself stays the timm model it was),
    which runs at any image size divisible by the patch size, with ``attach_report`` (an
    [`AttachReport`][posenc.spatial.AttachReport], also logged at INFO).

    Args:
        model: a timm ``VisionTransformer`` (e.g. ``timm.create_model("vit_small_patch16_224")``,
            deit, with registers, ``no_embed_class``, ``dynamic_img_size``).
        encoding: a name from [`posenc.spatial.ENCODINGS`][posenc.spatial.ENCODINGS] (sizes taken
            from the model, ``kwargs`` override them; learnable rotary/bias names get one module per
            block: [`one_module_per_block`][posenc.spatial.factory.one_module_per_block]), an
            encoding module (shared by all blocks), a sequence of one rotary or bias module per
            block, or None. ``"learned"`` starts from the model's ``pos_embed`` (same outputs at its
            grid).
        **kwargs: the named encoding's constructor arguments, and ``ref_grid_size``: ``rows`` or
            ``(rows, cols)``, EVA's ``ref_feat_shape``: patch indices are rescaled to this
            reference grid ([`grid_coords`][posenc.spatial.GridVisionTransformer.grid_coords]), for
            rotary encodings and ``sincos2d`` on patch indices only (a ValueError naming any
            other); for ``"cpb"`` it is the constructor's ``ref_grid_size``.
        checkpoint_path: a timm weights file of this architecture (a state dict, a timm
            training checkpoint, ``.safetensors``), loaded into ``model`` before the grid model
            is built ([`load_timm_file`][posenc.spatial.timm_io.load_timm_file]). It reads a file:
            pass it from trusted code or a trusted config only.
    """
    if isinstance(encoding, (list, tuple)) and not encoding:
        raise ValueError("encoding must not be an empty sequence")
    kind = encoding_kind(encoding if not isinstance(encoding, (list, tuple)) else encoding[0])
    ref_grid_size = None if _takes_ref_grid(encoding) else kwargs.pop("ref_grid_size", None)
    if ref_grid_size is not None:
        ref_grid_size = check_grid_size(ref_grid_size, "ref_grid_size")
    model = check_vit(model, "model")
    source, fresh, file_dropped, resampled = "model", set(), set(), {}
    if checkpoint_path is not None:
        if isinstance(encoding, str):
            encoding_spec(encoding)  # an unknown name is refused before the file is read
        source = os.fspath(checkpoint_path)
        fresh, file_dropped, resampled = load_timm_file(model, checkpoint_path)
    before = set(model.state_dict())
    keeps_pos_embed = (isinstance(encoding, str) and encoding_spec(encoding).cls is Learned2D
                       and model.pos_embed is not None)
    if isinstance(encoding, str):
        built, prefix = _from_name(model, encoding, kwargs, ref_grid_size)
    elif kwargs:
        raise TypeError(f"keyword arguments {sorted(kwargs)} are only accepted with an encoding "
                        f"name from {list(ENCODINGS)}")
    else:
        built, prefix = encoding, None
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
    grid = GridVisionTransformer(model, pos_encoding=built if kind == "additive" else None,
                                 coord_normalize=normalize, ref_grid_size=ref_grid_size,
                                 **({kind: per_block} if positional else {}))
    if prefix is not None:
        _fold_prefix(grid, prefix)
    grid.attach_report = attach_report(grid, source, before, keeps_pos_embed, fresh,
                                       file_dropped, resampled)
    _logger.info("%s", grid.attach_report)
    return grid
