"""timm weight I/O of the grid model: a timm weights file loaded into a ViT before
[`attach`][posenc.spatial.attach] ([`load_timm_file`][posenc.spatial.timm_io.load_timm_file]), the
[`AttachReport`][posenc.spatial.AttachReport] of what changed, and
[`timm_state_dict`][posenc.spatial.timm_state_dict] back to timm's names."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor

from .additive import Learned2D
from .vit import GridVisionTransformer

__all__ = ["AttachReport", "LEARNED_TABLE", "load_timm_file", "attach_report",
           "timm_state_dict"]

_logger = logging.getLogger(__name__)

#: Where attach's "learned" keeps a timm ``pos_embed``.
LEARNED_TABLE = "patch_embed.pos_encoding.weight"


@dataclass(frozen=True)
class AttachReport:
    """What [`attach`][posenc.spatial.attach] did to a model's tensors (``state_dict`` names),
    relative to its source (the ``checkpoint_path`` file, else the model as given); every other
    tensor holds the source's values unchanged.

    Attributes:
        source: the file's path, or ``"model"``.
        new: tensors that hold nothing of the source: the encoding's, and a classifier head the
            file does not fit (or lacks), left as initialized.
        dropped: source tensors the attached model does not hold: the ``pos_embed`` an encoding
            replaces, a file's head of another ``num_classes``.
        moved: source name -> attached name (``"learned"`` keeps ``pos_embed``'s patch entries
            as ``LEARNED_TABLE``).
        changed: kept tensors whose values changed: the class/register tokens into which
            ``"learned"`` folds ``pos_embed``'s prefix entries (same function).
        resampled: file name -> ``(file shape, loaded shape)`` for tensors timm's
            ``checkpoint_filter_fn`` resampled to the model.
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


def _describe_layout(cls_token: bool, registers: int, no_embed_class: bool | None) -> str:
    """A ViT's token layout for a message: its prefix tokens, and whether ``pos_embed`` leaves
    them out (``no_embed_class``; None: unknown, or moot without prefix tokens)."""
    count = int(cls_token) + registers
    text = (f"{count} prefix token{'' if count == 1 else 's'} ({'a' if cls_token else 'no'} "
            f"class token, {registers} register tokens)")
    return text if not count or no_embed_class is None else \
        f"{text}, no_embed_class={no_embed_class}"


def _token_layouts(state: Mapping[str, Tensor], model: VisionTransformer,
                   where: str) -> str | None:
    """A message naming the token layouts of the timm state dict ``state`` (read from its
    ``cls_token``, ``reg_token`` and ``pos_embed``) and of ``model`` where they differ, else
    None (also for a file without ``pos_embed``: not in timm's ViT names). The file's
    ``no_embed_class`` is the reading of ``pos_embed``'s length that leaves the model's number
    of patches or a square grid, if exactly one of the two does (as timm reads it, so a
    non-square grid of another size may be read wrong: the message gives the length too)."""
    pos_embed, reg = state.get("pos_embed"), state.get("reg_token")
    if pos_embed is None or pos_embed.ndim != 3:
        return None
    cls_token = "cls_token" in state
    registers = reg.shape[1] if reg is not None and reg.ndim == 3 else 0
    prefix, no_embed_class = int(cls_token) + registers, None
    if prefix:
        fits = [flag for flag in (False, True)
                if _is_grid(pos_embed.shape[1] - (0 if flag else prefix),
                            model.patch_embed.num_patches)]
        no_embed_class = fits[0] if len(fits) == 1 else None
    ours = (model.cls_token is not None,
            0 if model.reg_token is None else model.reg_token.shape[1], model.no_embed_class)
    if (cls_token, registers) == ours[:2] and no_embed_class in (None, ours[2]):
        return None
    theirs = _describe_layout(cls_token, registers, no_embed_class)
    return (f"{where} was saved from a ViT with {theirs} (pos_embed of {pos_embed.shape[1]} "
            f"entries); the model has "
            f"{_describe_layout(*ours)}: a timm checkpoint loads into a ViT of the same "
            f"class_token, reg_tokens and no_embed_class")


def _is_grid(entries: int, patches: int) -> bool:
    """Whether ``entries`` patch entries are the model's ``patches`` or a square grid (what
    timm's ``resample_abs_pos_embed`` reads without a given size)."""
    return entries == patches or (entries > 0 and math.isqrt(entries) ** 2 == entries)


def load_timm_file(model: VisionTransformer, path: str | os.PathLike) -> tuple[
        set[str], set[str], dict[str, tuple[tuple[int, ...], tuple[int, ...]]]]:
    """Load the timm weights file ``path`` into ``model`` by timm's ``load_state_dict``
    (``weights_only=True``) and ``checkpoint_filter_fn`` (resampling ``pos_embed``). The file
    must hold every tensor of the model with its shape, except the classifier head (``head.*``),
    else a ValueError lists the names. Returns ``(head tensors not loaded, file head tensors
    dropped, resampled)``."""
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
    layouts = _token_layouts(raw, model, where)
    try:
        state = checkpoint_filter_fn(raw, model)
    except RuntimeError as err:  # timm reads pos_embed in the model's token layout
        raise ValueError(layouts or f"{where}: timm could not resample its pos_embed to the "
                         f"model's {tuple(model.patch_embed.grid_size)} grid ({err})") from err
    resampled = {k: (tuple(raw[k].shape), tuple(v.shape)) for k, v in state.items()
                 if k in raw and raw[k].shape != v.shape}
    own = model.state_dict()
    head = {n for n in own if n.split(".")[0] == "head"}
    unexpected = sorted(set(state) - set(own))
    mismatched = sorted(k for k in set(state) & set(own) if state[k].shape != own[k].shape)
    missing = set(own) - set(state)
    if layouts and (unexpected or set(mismatched) - head or missing - head):
        raise ValueError(layouts)
    if unexpected:
        raise ValueError(f"{where} holds tensors this {type(model).__name__} does not have: "
                         f"{_name_list(unexpected)} (another architecture, or not a timm ViT "
                         f"state dict)")
    if set(mismatched) - head:
        bad = [k for k in mismatched if k not in head]
        raise ValueError(f"{where} does not fit the model's sizes (file vs model): "
                         f"{_shape_list(bad, state, own)}")
    dropped = set(mismatched)
    for name in dropped:
        del state[name]
    missing |= dropped
    if missing - head:
        raise ValueError(f"{where} lacks tensors of the model: "
                         f"{_name_list(sorted(missing - head))}")
    model.load_state_dict(state, strict=False)
    if dropped:
        _logger.warning("%s: the head does not fit the model (file vs model: %s); it is left "
                        "as initialized", where, _shape_list(sorted(dropped), raw, own))
    return missing, dropped, resampled



def attach_report(model: GridVisionTransformer, source: str, before: set[str],
                  keeps_pos_embed: bool, fresh: set[str], file_dropped: set[str],
                  resampled: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]) -> AttachReport:
    """The [`AttachReport`][posenc.spatial.AttachReport] of an attach: ``before`` are the state-dict
    names once the file (if any) was loaded, ``fresh``/``file_dropped`` the head tensors it did
    not/could not give."""
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
    ``timm.create_model(<same architecture>)`` loads with ``strict=True`` and which computes the
    same function at ``model.patch_embed.grid_size``: the table resampled to that grid becomes
    ``pos_embed`` ``(1, P + rows * cols, dim)`` with zero prefix entries; every other tensor is
    the model's own, detached. Other encodings (no timm counterpart) raise a ValueError."""
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

