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

``attach(..., checkpoint_path=path)`` first loads a timm weights file into the model (timm's own
reader and ``checkpoint_filter_fn``, so a ``pos_embed`` of another grid is resampled by
``resample_abs_pos_embed``), and every attach leaves ``model.attach_report``
(:class:`AttachReport`): exactly which tensors are new (the encoding's) and which were dropped
(the ``pos_embed`` an encoding replaces). :func:`timm_state_dict` goes the other way for a model
trained with ``"learned"``: a state dict that timm's ``VisionTransformer`` loads strictly.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from .coords import check_grid_size
from .factory import ENCODINGS, encoding_kind, encoding_spec, encodings_for_blocks
from .grid_vit import GridVisionTransformer, check_vit, use_grid_attention
from .learned import Learned2D
from .sincos import SinCos2D

__all__ = ["AttachReport", "attach", "timm_state_dict"]

_logger = logging.getLogger(__name__)

#: Where attach's "learned" keeps a timm ``pos_embed`` (see :func:`_learned_from_model`).
LEARNED_TABLE = "patch_embed.pos_encoding.weight"


@dataclass(frozen=True)
class AttachReport:
    """What :func:`attach` did to a model's tensors (``state_dict`` names), relative to its
    source: the weights file of ``checkpoint_path``, else the model as it was given (e.g. built
    by ``timm.create_model(..., pretrained=True)``).

    Attributes:
        source: the file's path, or ``"model"``.
        new: tensors of the attached model that hold nothing of the source: the encoding's
            parameters and buffers, and a classifier head whose shape the file does not match
            (or that it lacks), left as initialized.
        dropped: tensors of the source that the attached model does not hold: the
            ``pos_embed`` an encoding replaces, a file's head of another ``num_classes``.
        moved: source name -> attached name, for a tensor kept under another name
            (``"learned"`` keeps ``pos_embed``'s patch entries as ``LEARNED_TABLE``).
        changed: kept tensors whose values the attach changed: the class/register tokens into
            which ``"learned"`` folds ``pos_embed``'s prefix entries (same function).
        resampled: file name -> ``(file shape, loaded shape)`` for tensors timm's
            ``checkpoint_filter_fn`` resampled to the model (``pos_embed`` to another grid by
            ``resample_abs_pos_embed``, a patch embedding to another patch size).

    Every other tensor of the attached model holds the source's values unchanged.
    """

    source: str
    new: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    moved: dict[str, str] = field(default_factory=dict)
    changed: tuple[str, ...] = ()
    resampled: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=dict)

    def __str__(self) -> str:
        parts = [f"new {list(self.new)}", f"dropped {list(self.dropped)}"]
        parts += [f"moved {self.moved}"] if self.moved else []
        parts += [f"changed {list(self.changed)}"] if self.changed else []
        parts += [f"resampled {self.resampled}"] if self.resampled else []
        return f"attach from {self.source}: " + ", ".join(parts)


def _name_list(names: Sequence[str], show: int = 6) -> str:
    """The first ``show`` of ``names``, and how many more."""
    more = f" and {len(names) - show} more" if len(names) > show else ""
    return f"{list(names[:show])}{more}"


def _shape_list(names: Sequence[str], first: dict, second: dict, show: int = 6) -> str:
    """``name (shape) vs (shape)`` of the first ``show`` names, and how many more."""
    listed = ", ".join(f"{n} {tuple(first[n].shape)} vs {tuple(second[n].shape)}"
                       for n in names[:show])
    return listed + (f" and {len(names) - show} more" if len(names) > show else "")


def _load_timm_file(model: VisionTransformer, path: str | os.PathLike) -> tuple[
        set[str], set[str], dict[str, tuple[tuple[int, ...], tuple[int, ...]]]]:
    """Load the timm weights file ``path`` into ``model`` (before its encoding is replaced).

    Read by ``timm.models.load_state_dict`` (``weights_only=True``; safetensors too; a
    ``state_dict``/``model``/EMA entry of a training checkpoint) and mapped onto the model by
    timm's ``checkpoint_filter_fn`` (resampling ``pos_embed`` to the model's grid). The file must
    hold every tensor of the model with its shape, except the classifier head (``head.*``), which
    a fine-tune to other classes re-initializes; anything else is a ValueError listing the names.

    Returns ``(head tensors not loaded, file head tensors dropped, resampled)``.
    """
    from timm.models import load_state_dict
    from timm.models.vision_transformer import checkpoint_filter_fn

    where = f"checkpoint_path={os.fspath(path)!r}"
    if not os.path.isfile(path):
        raise ValueError(f"{where} is not a file (a timm state dict: torch.save(model."
                         f"state_dict(), path), or .safetensors)")
    try:
        raw = load_state_dict(os.fspath(path), weights_only=True)
    except Exception as err:  # UnpicklingError, EOFError, safetensors' errors, ...
        raise ValueError(f"{where} is not a readable timm state dict "
                         f"({type(err).__name__}: {err})") from err
    if not isinstance(raw, dict) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in raw.items()):
        raise ValueError(f"{where} does not hold a state dict (names -> tensors)")
    state = checkpoint_filter_fn(raw, model)
    resampled = {k: (tuple(raw[k].shape), tuple(v.shape)) for k, v in state.items()
                 if k in raw and raw[k].shape != v.shape}
    own = model.state_dict()
    head = {n for n in own if n.split(".")[0] == "head"}
    unexpected = sorted(set(state) - set(own))
    if unexpected:
        raise ValueError(f"{where} holds tensors this {type(model).__name__} does not have: "
                         f"{_name_list(unexpected)} (another architecture, or not a timm ViT "
                         f"state dict)")
    mismatched = sorted(k for k in state if state[k].shape != own[k].shape)
    if set(mismatched) - head:
        bad = [k for k in mismatched if k not in head]
        raise ValueError(f"{where} does not fit the model's sizes (file vs model): "
                         f"{_shape_list(bad, state, own)}")
    dropped = set(mismatched)
    for name in dropped:
        del state[name]
    missing = set(own) - set(state)
    if missing - head:
        raise ValueError(f"{where} lacks tensors of the model: "
                         f"{_name_list(sorted(missing - head))}")
    model.load_state_dict(state, strict=False)
    if dropped:
        _logger.warning("%s: the head does not fit the model (file vs model: %s); it is left "
                        "as initialized", where, _shape_list(sorted(dropped), raw, own))
    return missing, dropped, resampled


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
           *, checkpoint_path: str | os.PathLike | None = None, **kwargs: Any) -> nn.Module:
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
        checkpoint_path: a timm weights file of this architecture (``torch.save(vit.state_dict(),
            path)``, a timm training checkpoint, ``.safetensors``) loaded into ``model`` before
            the encoding replaces its ``pos_embed`` (see :func:`_load_timm_file`: a ``pos_embed``
            of another grid is resampled, a head of another ``num_classes`` re-initialized, any
            other mismatch is a ValueError). It reads a file: pass it from trusted code or a
            trusted config only. A refused encoding then leaves the model with the file's
            weights.

    The model's own position encoding is replaced: ``"learned"`` starts from the model's
    ``pos_embed`` (same outputs at the training size; resampled like timm's
    ``dynamic_img_size`` elsewhere); rotary and bias encodings swap each block's attention for
    :class:`GridAttention` with the same parameter names, so a timm checkpoint loads with
    ``strict=False`` reporting only position parameters. Afterwards the model (a
    :class:`GridVisionTransformer`) runs at any image size divisible by the patch size (a
    ValueError otherwise; any size with ``dynamic_img_pad``), square or not, with gradient
    checkpointing and patch dropout. Load checkpoints before attaching "learned" (it folds
    ``pos_embed`` into the prefix tokens), or pass ``checkpoint_path``.

    ``model.attach_report`` is an :class:`AttachReport` (also logged at INFO): the tensors that
    are new and those dropped, relative to the file or to the model as given.
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
        fresh, file_dropped, resampled = _load_timm_file(model, checkpoint_path)
    before = set(model.state_dict())
    keeps_pos_embed = (isinstance(encoding, str) and encoding_spec(encoding).cls is Learned2D
                       and model.pos_embed is not None)
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
    model.attach_report = _report(model, source, before, keeps_pos_embed, fresh, file_dropped,
                                  resampled)
    _logger.info("%s", model.attach_report)
    return model


def _report(model: GridVisionTransformer, source: str, before: set[str], keeps_pos_embed: bool,
            fresh: set[str], file_dropped: set[str],
            resampled: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]) -> AttachReport:
    """The :class:`AttachReport` of an attach: ``before`` are the state-dict names of the model
    once the file (if any) was loaded, ``fresh``/``file_dropped`` the head tensors the file did
    not give/could not give."""
    after = set(model.state_dict())
    moved = {"pos_embed": LEARNED_TABLE} if keeps_pos_embed else {}
    changed = ()
    if keeps_pos_embed and not model.no_embed_class:
        changed = tuple(n for n in ("cls_token", "reg_token") if getattr(model, n) is not None)
    new = (after - before - set(moved.values())) | fresh
    dropped = (before - after - set(moved)) | file_dropped
    return AttachReport(source, tuple(sorted(new)), tuple(sorted(dropped)), moved, changed,
                        resampled)


@torch.no_grad()
def timm_state_dict(model: GridVisionTransformer) -> dict[str, torch.Tensor]:
    """The state dict of a model attached with ``"learned"`` under timm's names, which
    ``timm.create_model(<same architecture and sizes>)`` loads with ``strict=True`` and which
    computes the same function at the model's training grid (``model.patch_embed.grid_size``).

    The learned table, resampled to the training grid, becomes ``pos_embed`` ``(1, P + rows *
    cols, dim)`` with zero prefix entries (attach folded them into the class/register tokens);
    every other tensor is the model's own (detached, same dtype and device). For pretraining a
    model with posenc and fine-tuning it from the file (``attach(..., checkpoint_path=...)``,
    ``ImageClassifier(checkpoint_path=...)``). Other encodings have no timm counterpart: a
    ValueError naming the encoding.
    """
    if not isinstance(model, GridVisionTransformer):
        raise TypeError(f"model must be a ViT attached by posenc.spatial.attach, got "
                        f"{type(model).__name__}")
    table = model.patch_embed.pos_encoding
    rotary_or_bias = any(getattr(getattr(b, "attn", None), name, None) is not None
                         for b in model.blocks for name in ("rotary", "bias"))
    if not isinstance(table, Learned2D) or rotary_or_bias:
        found = type(table).__name__ if table is not None else "a rotary/bias or no encoding"
        raise ValueError(f"timm_state_dict needs a model attached with 'learned' (a Learned2D "
                         f"table is timm's pos_embed), this one has {found}")
    state = {k: v.detach() for k, v in model.state_dict().items() if k != LEARNED_TABLE}
    grid = tuple(model.patch_embed.grid_size)
    patches = table.resample(grid).reshape(1, grid[0] * grid[1], table.dim)
    prefix = 0 if model.no_embed_class else model.num_prefix_tokens
    state["pos_embed"] = torch.cat([patches.new_zeros(1, prefix, table.dim), patches], 1)
    return state
