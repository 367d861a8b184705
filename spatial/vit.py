"""timm ``VisionTransformer`` with posenc positions: images ([`attach`][posenc.spatial.attach]) and
clips ([`VideoVisionTransformer`][posenc.spatial.VideoVisionTransformer]), by one path.

[`attach`][posenc.spatial.attach] changes a model in place, keeping every timm parameter name: its
class becomes [`GridVisionTransformer`][posenc.spatial.vit.GridVisionTransformer], which computes
the patch grid from the image shape; an additive encoding lives at
``model.patch_embed.pos_encoding``, a rotary or bias one in each block's
[`GridAttention`][posenc.spatial.vit.GridAttention]. As timm's Eva passes ``rope=`` to its blocks,
the model passes every block this forward's positions
([`GridPositions`][posenc.spatial.coords.GridPositions] or
[`VideoPositions`][posenc.spatial.coords.VideoPositions]), so a gradient-checkpointed block
recomputes from its own forward's positions; each distinct encoding is computed once per forward
into their cache before the blocks run (`enter_blocks`), never inside a checkpointed block. No value
is read on the host, so the models run under ``torch.compile`` and ``torch.export``.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

import torch
from posenc.core import MultiheadAttention, NoPE
from posenc.core.encoding import check_positions, check_positive_float, unchecked
from timm.layers import Attention, PatchDropout, PatchEmbed
from timm.layers.patch_dropout import patch_dropout_forward
from timm.models._features import feature_take_indices
from timm.models.vision_transformer import Block, ResPostBlock, VisionTransformer
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .additive import Learned2D, SinCos2D, SinCos3D
from .coords import GridPositions, VideoPositions, _video_coords, check_grid_size, patch_coords
from .factory import (
    ENCODINGS,
    SpatialEncodingSpec,
    encoding_kind,
    encoding_spec,
    encodings_for_blocks,
)
from .rope import MRoPE, RoPE3D, _Rotary3D

__all__ = ["GridAttention", "GridBlock", "GridResPostBlock", "GridVisionTransformer", "patch_grid",
           "AttachReport", "attach", "timm_state_dict", "VIDEO_ENCODINGS", "VideoVisionTransformer"]


SUPPORTED = ("timm.models.vision_transformer.VisionTransformer (vit_*, deit_* without a "
             "distillation token; with or without class token, reg_tokens, no_embed_class, "
             "dynamic_img_size, dynamic_img_pad) with timm's PatchEmbed, Block/ResPostBlock and "
             "Attention")

#: The positions of one forward, as the blocks receive them.
Positions = TypeVar("Positions", GridPositions, VideoPositions)


class GridAttention(MultiheadAttention):
    """[`posenc.core.MultiheadAttention`][posenc.core.MultiheadAttention] with timm ``Attention``'s
    call signature, plus the positions of the model's forward."""

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

    def forward(self, x: Tensor, positions: GridPositions | VideoPositions | None = None,
                attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """``(B, P + N, dim)`` tokens (``P`` prefix tokens, then ``N`` patches) -> ``(B, P + N,
        dim)``. ``positions``: the forward's (`enter_blocks`); ``attn_mask``: bool (True =
        attend) or additive, broadcastable to ``(B, H, P + N, P + N)``."""
        if not isinstance(positions, (GridPositions, VideoPositions)):
            raise TypeError(
                f"GridAttention takes the positions of its model's forward (GridPositions or "
                f"VideoPositions), got {type(positions).__name__}; call the model (forward, "
                f"forward_features or forward_intermediates), which passes them to every block")
        return self._attend(x, None, positions, positions, attn_mask, is_causal)


class GridBlock(Block):
    """timm's ``Block`` (same modules; its class is swapped) passing the forward's positions to
    its [`GridAttention`][posenc.spatial.vit.GridAttention]."""

    def forward(self, x: Tensor, positions: GridPositions | VideoPositions | None = None,
                attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), positions, attn_mask, is_causal)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class GridResPostBlock(ResPostBlock):
    """timm's ``ResPostBlock`` (post-norm), as [`GridBlock`][posenc.spatial.vit.GridBlock]."""

    def forward(self, x: Tensor, positions: GridPositions | VideoPositions | None = None,
                attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        x = x + self.drop_path1(self.norm1(self.attn(x, positions, attn_mask, is_causal)))
        return x + self.drop_path2(self.norm2(self.mlp(x)))


_GRID_BLOCKS = {Block: GridBlock, ResPostBlock: GridResPostBlock}


def check_vit(vit: object, name: str) -> VisionTransformer:
    """``vit`` if it is a fresh timm ``VisionTransformer`` posenc can give positions, else
    raise naming the argument ``name``."""
    if isinstance(vit, GridVisionTransformer):
        raise ValueError(f"{name} already has a posenc 2D encoding attached "
                         f"(posenc.spatial.attach); use a fresh timm VisionTransformer (or one "
                         f"loaded from a timm checkpoint)")
    # Exactly VisionTransformer: swapping a subclass's class would drop its own methods.
    if type(vit) is not VisionTransformer:
        raise TypeError(f"{name} must be a timm.models.vision_transformer.VisionTransformer, "
                        f"got {type(vit).__name__}; supported: {SUPPORTED}")
    if type(vit.patch_embed) is not PatchEmbed:
        raise TypeError(f"{name} must use timm's PatchEmbed, got "
                        f"{type(vit.patch_embed).__name__}; supported: {SUPPORTED}")
    if not isinstance(vit.patch_drop, (nn.Identity, PatchDropout)):
        raise TypeError(f"{name}.patch_drop must be timm's PatchDropout or Identity, got "
                        f"{type(vit.patch_drop).__name__}")
    drop_prefix = getattr(vit.patch_drop, "num_prefix_tokens", vit.num_prefix_tokens)
    if drop_prefix != vit.num_prefix_tokens:
        raise ValueError(f"{name}.patch_drop.num_prefix_tokens={drop_prefix} differs from its "
                         f"num_prefix_tokens={vit.num_prefix_tokens}")
    return vit


def use_grid_attention(vit: VisionTransformer, rotary: Sequence[nn.Module] | None = None,
                       bias: Sequence[nn.Module] | None = None) -> None:
    """Give each block of ``vit`` a [`GridAttention`][posenc.spatial.vit.GridAttention] with its
    ``rotary`` or ``bias`` encoding (one per block; neither: keep timm's attention) and drop
    ``vit.pos_embed``; all is checked before ``vit`` changes."""
    attentions = []
    if rotary is not None or bias is not None:
        for block in vit.blocks:
            if type(block) not in _GRID_BLOCKS:
                raise TypeError(f"rotary and bias encodings need timm's Block or ResPostBlock, "
                                f"got {type(block).__name__}; supported: {SUPPORTED}")
        none = [None] * len(vit.blocks)
        attentions = [GridAttention.from_timm(block.attn, r, b) for block, r, b in zip(
            vit.blocks, rotary or none, bias or none, strict=True)]
    for block, attn in zip(vit.blocks, attentions, strict=False):
        block.attn = attn
        block.__class__ = _GRID_BLOCKS[type(block)]
    vit.pos_embed = None
    vit.patch_embed.strict_img_size = False


def enter_blocks(vit: VisionTransformer, blocks: Sequence[nn.Module], x: Tensor,
                 positions: Positions | None, what: str) -> tuple[Tensor, Positions | None, bool]:
    """``(B, n, dim)`` patch tokens (additive encoding added) -> the ``(B, P + k, dim)`` tokens
    ``blocks`` take (prefix tokens prepended here, as timm <= 1.0.25's ``_pos_embed`` does not
    without a ``pos_embed``), the positions of the ``k`` patches patch dropout kept (or None),
    and whether it dropped any; the blocks' encodings are computed into the positions' cache."""
    batch = x.shape[0]
    prefix = [t.expand(batch, -1, -1) for t in (vit.cls_token, vit.reg_token) if t is not None]
    x = vit.pos_drop(torch.cat([*prefix, x], dim=1) if prefix else x)
    drop = vit.patch_drop
    dropped = isinstance(drop, PatchDropout) and drop.training and drop.prob > 0.0
    if dropped:
        x, keep = patch_dropout_forward(x, drop.prob, vit.num_prefix_tokens, drop.ordered, True)
        if positions is not None:  # (B, k, C) coordinates of the kept patches
            coords = positions.coords
            coords = coords.expand(batch, *coords.shape[-2:]).gather(
                1, keep[..., None].expand(-1, -1, coords.shape[-1]))
            positions = positions._replace(coords=coords)
    x = vit.norm_pre(x)
    if positions is not None:
        _encode_positions(blocks, positions, x, what)
    return x, positions, dropped


def run_block(vit: VisionTransformer, block: nn.Module, x: Tensor,
              positions: GridPositions | VideoPositions | None, attn_mask: Tensor | None,
              is_causal: bool) -> Tensor:
    """``block(x, positions, attn_mask=..., is_causal=...)``, gradient-checkpointed when
    ``vit`` is set to; timm's own blocks get only what is set (older timm's
    ``Block.forward(x, attn_mask)``)."""
    args = (x,) if positions is None else (x, positions)
    kwargs = {"attn_mask": attn_mask} if attn_mask is not None else {}
    if is_causal:
        kwargs["is_causal"] = True
    if vit.grad_checkpointing and torch.is_grad_enabled():
        # Reentrant checkpointing drops gradients of tensors inside the positions' cache.
        return checkpoint(block, *args, use_reentrant=False, **kwargs)
    return block(*args, **kwargs)


def _encode_positions(blocks: Sequence[nn.Module], positions: GridPositions | VideoPositions,
                      tokens: Tensor, what: str) -> None:
    """Compute each distinct rotary/bias encoding of ``blocks`` once into ``positions.cache``,
    checking that it covers the ``(B, P + n, dim)`` ``tokens``: a wrong encoding fails here,
    naming itself (``what``: ``"image"``/``"clip"``), not inside a block."""
    batch, num_tokens = tokens.shape[0], tokens.shape[1]
    done: list[nn.Module] = []
    for block in blocks:
        attn = block.attn
        if not isinstance(attn, GridAttention):
            continue
        for enc, rotary in ((attn.rotary, True), (attn.bias, False)):
            if enc is None or any(enc is seen for seen in done):
                continue
            done.append(enc)
            out = unchecked(enc, "rotation")(positions).cos if rotary \
                else unchecked(enc)(positions, positions)
            # (B or 1, H or 1, P + n, D/2) cos of a rotation; (B or 1, H or 1, P + n, P + n) bias
            heads, last = (1, attn.num_heads), (out.shape[-1] if rotary else num_tokens)
            if out.ndim != 4 or out.shape[0] not in (1, batch) or out.shape[1] not in heads \
                    or out.shape[2] != num_tokens or out.shape[3] != last:
                output = "rotation cos" if rotary else "bias"
                raise ValueError(
                    f"{type(enc).__name__} gave a {output} of shape {tuple(out.shape)} for "
                    f"{batch} {what}s of {num_tokens} tokens ({positions.num_prefix_tokens} "
                    f"prefix + patches) and {attn.num_heads} heads: expected (1 or {batch}, 1 or "
                    f"{attn.num_heads}, {num_tokens}, {'D/2' if rotary else num_tokens})")


def patch_grid(patch_embed: nn.Module, height: int, width: int, what: str = "image"
               ) -> tuple[int, int]:
    """The ``(rows, cols)`` patch grid ``patch_embed`` makes of a ``height x width`` ``what``
    (``"image"``, ``"frame"``): padded up with ``dynamic_img_pad``, else a size not divisible
    by the patch (never silently floored) or holding no patch is a ``ValueError``."""
    ph, pw = patch_embed.patch_size
    if patch_embed.dynamic_img_pad:
        grid = (-(-height // ph), -(-width // pw))  # timm pads up to whole patches
    elif height % ph or width % pw:
        raise ValueError(f"{what} size ({height}, {width}) is not divisible by the patch size "
                         f"({ph}, {pw}); resize or crop the {what}s to a multiple of it")
    else:
        grid = (height // ph, width // pw)
    if grid[0] < 1 or grid[1] < 1:
        raise ValueError(f"{what} size ({height}, {width}) holds no patch of size ({ph}, {pw})")
    return grid


class GridVisionTransformer(VisionTransformer):
    """A timm ``VisionTransformer`` after [`attach`][posenc.spatial.attach], for ``(B, C, H, W)``
    images of any size divisible by the patch size; ``coord_normalize`` is its positions'
    ``patch_coords`` system, ``ref_grid_size`` the reference grid they are rescaled to, or None."""

    coord_normalize: str | None
    ref_grid_size: tuple[int, int] | None

    def grid_coords(self, grid_size: tuple[int, int], *,
                    device: torch.device | str | None = None) -> Tensor:
        """The ``(rows * cols, 2)`` float32 coordinates this model gives its encodings:
        ``patch_coords(grid_size, coord_normalize)``, with a ``ref_grid_size`` ``(R, C)``
        rescaled to ``(row / rows * R, col / cols * C)`` as timm's ``_build_grid``."""
        coords = patch_coords(grid_size, self.coord_normalize, device=device)
        if self.ref_grid_size is None:
            return coords
        (rows, cols), (ref_rows, ref_cols) = grid_size, self.ref_grid_size
        return torch.stack((coords[:, 0] / rows * ref_rows, coords[:, 1] / cols * ref_cols), dim=-1)

    def _embed(self, x: Tensor, blocks: Sequence[nn.Module]
               ) -> tuple[Tensor, GridPositions | None, tuple[int, int], bool]:
        """Images -> ``(B, P + n, dim)`` tokens for ``blocks``, their positions (None without a
        [`GridAttention`][posenc.spatial.vit.GridAttention]), the ``(rows, cols)`` grid, and whether
        patches were dropped."""
        if not isinstance(x, Tensor) or x.ndim != 4:
            raise ValueError(f"x must be a (B, C, H, W) image tensor, got "
                             f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
        grid = patch_grid(self.patch_embed, x.shape[-2], x.shape[-1])
        x = self.patch_embed(x)
        if x.ndim == 4:  # (B, rows, cols, dim) with dynamic_img_size
            x = x.flatten(1, 2)
        encoding = self.patch_embed.pos_encoding
        if encoding is not None:  # with a ref_grid_size a SinCos2D (attach checks)
            table = encoding.encode_grid(grid) if self.ref_grid_size is None \
                else unchecked(encoding)(self.grid_coords(grid, device=x.device))
            x = x + table.to(x.dtype)
        positions = None
        if any(isinstance(block.attn, GridAttention) for block in blocks):
            # Rescaled coordinates are off the integer grid that grid_size promises.
            positions = GridPositions(self.grid_coords(grid, device=x.device),
                                      grid if self.ref_grid_size is None else None,
                                      self.num_prefix_tokens, {})
        x, positions, dropped = enter_blocks(self, blocks, x, positions, "image")
        return x, positions, grid, dropped

    def forward_features(self, x: Tensor, attn_mask: Tensor | None = None,
                         is_causal: bool = False) -> Tensor:
        """``(B, C, H, W)`` images -> ``(B, P + n, dim)`` normed tokens (``n`` patches kept)."""
        x, positions, _, _ = self._embed(x, self.blocks)
        for block in self.blocks:
            x = run_block(self, block, x, positions, attn_mask, is_causal)
        return self.norm(x)

    def forward_intermediates(self, x: Tensor, indices: int | list[int] | None = None,
                              return_prefix_tokens: bool = False, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NCHW",
                              intermediates_only: bool = False, output_dict: bool = False,
                              attn_mask: Tensor | None = None, is_causal: bool = False,
                              ) -> list[Tensor] | tuple[Tensor, list[Tensor]] | dict:
        """timm's ``VisionTransformer.forward_intermediates`` (timm 1.0.31's arguments and
        outputs) for images of any size; NCHW maps are ``(B, dim, rows, cols)``."""
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        blocks = self.blocks[:max_index + 1] if stop_early else self.blocks
        x, positions, (rows, cols), dropped = self._embed(x, blocks)
        if dropped and output_fmt == "NCHW":
            raise ValueError("output_fmt='NCHW' needs every patch, but patch dropout (training "
                             "mode) dropped some: use output_fmt='NLC' or model.eval()")
        intermediates = []
        for i, block in enumerate(blocks):
            x = run_block(self, block, x, positions, attn_mask, is_causal)
            if i in take_indices:
                intermediates.append(self.norm(x) if norm else x)
        prefix_tokens = [y[:, :self.num_prefix_tokens] for y in intermediates] \
            if self.num_prefix_tokens else None
        intermediates = [y[:, self.num_prefix_tokens:] for y in intermediates]
        if output_fmt == "NCHW":
            intermediates = [y.reshape(y.shape[0], rows, cols, -1).permute(0, 3, 1, 2)
                             .contiguous() for y in intermediates]
        if output_dict:
            result = {"image_intermediates": intermediates}
            if prefix_tokens is not None and return_prefix_tokens:
                result["image_intermediates_prefix"] = prefix_tokens
            if not intermediates_only:
                result["image_features"] = self.norm(x)
            return result
        if return_prefix_tokens and prefix_tokens is not None:
            intermediates = list(zip(intermediates, prefix_tokens, strict=True))
        if intermediates_only:
            return intermediates
        return self.norm(x), intermediates


_logger = logging.getLogger(__name__)

#: Where attach's "learned" keeps a timm ``pos_embed`` (see `_learned_from_model`).
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


def _load_timm_file(model: VisionTransformer, path: str | os.PathLike) -> tuple[
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
    per block or shared ([`one_module_per_block`][posenc.spatial.factory.one_module_per_block])."""
    spec = encoding_spec(name)
    params = {**spec.infer(model), **kwargs}
    if ref_grid_size is not None:  # checked on a meta build, before the model changes
        with torch.device("meta"):
            _check_ref_grid([spec.build(**params)], repr(name))
    if spec.cls is Learned2D and model.pos_embed is not None:
        return _learned_from_model(model, params)
    return encodings_for_blocks(lambda: spec.build(**params), len(model.blocks))


@torch.no_grad()
def _learned_from_model(model: VisionTransformer, params: dict) -> Learned2D:
    """The model's ``pos_embed`` as a Learned2D, its prefix entries moved into the
    class/register tokens: the same function at the model's grid."""
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
           *, checkpoint_path: str | os.PathLike | None = None, **kwargs: Any) -> nn.Module:
    """Give a timm ViT a posenc 2D position encoding; returns the same (modified) model, a
    [`GridVisionTransformer`][posenc.spatial.vit.GridVisionTransformer] that runs at any image size
    divisible by the patch size, with ``model.attach_report`` (an
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
            reference grid ([`grid_coords`][posenc.spatial.vit.GridVisionTransformer.grid_coords]),
            for rotary encodings and ``sincos2d`` on patch indices only (a ValueError naming any
            other); for ``"cpb"`` it is the constructor's ``ref_grid_size``.
        checkpoint_path: a timm weights file of this architecture (a state dict, a timm
            training checkpoint, ``.safetensors``), loaded into ``model`` before the encoding
            replaces its ``pos_embed`` (`_load_timm_file`). It reads a file: pass it from
            trusted code or a trusted config only.
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


_SPECS = (
    SpatialEncodingSpec("none", NoPE),
    SpatialEncodingSpec("sincos3d", SinCos3D, ("dim",)),
    SpatialEncodingSpec("rope3d_axial", RoPE3D, ("head_dim", "num_heads"), {"variant": "axial"}),
    SpatialEncodingSpec("rope3d_mixed", RoPE3D, ("head_dim", "num_heads"), {"variant": "mixed"}),
    SpatialEncodingSpec("mrope", MRoPE, ("head_dim",)),
)

VIDEO_ENCODINGS: Mapping[str, SpatialEncodingSpec] = MappingProxyType({s.name: s for s in _SPECS})
"""3D encoding name -> [`SpatialEncodingSpec`][posenc.spatial.SpatialEncodingSpec] (sizes inferred
from the ViT), read-only."""


class VideoVisionTransformer(nn.Module):
    """A timm ``VisionTransformer`` over ``(B, T, C, H, W)`` clips, with a 3D position encoding.

    Each frame goes through the ViT's own patch embed; the ``T * h * w`` patch tokens form one
    sequence at [`video_coords`][posenc.spatial.video_coords] ``(t, row, col)``,
    ``t = frame_times * time_scale`` (frame times ``(T,)`` or ``(B, T)`` in any unit and spacing;
    default the indices ``0 .. T-1``). With a rotary encoding prefix tokens sit at ``(0, 0, 0)``, so
    give frame times from the clip's start unless absolute time should matter.

    Args:
        vit: a timm ``VisionTransformer``, changed in place (its ``pos_embed`` dropped) and kept
            as ``self.vit``.
        encoding: a name from [`VIDEO_ENCODINGS`][posenc.spatial.VIDEO_ENCODINGS] (sizes taken from
            ``vit``; ``kwargs`` override them, e.g. ``sections=(4, 6, 6)``), a
            [`SinCos3D`][posenc.spatial.SinCos3D], a 3D rotary module
            ([`RoPE3D`][posenc.spatial.RoPE3D], [`MRoPE`][posenc.spatial.MRoPE]; shared by all
            blocks), a sequence of one 3D rotary module per block, or None.
        time_scale: multiplies the frame times (or indices) to give ``t``.
    """

    def __init__(self, vit: nn.Module, encoding: str | nn.Module | Sequence[nn.Module] | None,
                 *, time_scale: float = 1.0, **kwargs) -> None:
        super().__init__()
        vit = check_vit(vit, "vit")
        self.time_scale = check_positive_float(time_scale, "time_scale")
        if isinstance(encoding, str):
            if encoding not in VIDEO_ENCODINGS:
                raise ValueError(f"unknown video encoding {encoding!r}; valid names: "
                                 f"{list(VIDEO_ENCODINGS)}")
            spec = VIDEO_ENCODINGS[encoding]
            params = {**spec.infer(vit), **kwargs}
            encoding = encodings_for_blocks(lambda: spec.build(**params), len(vit.blocks))
        elif kwargs:
            raise TypeError(f"keyword arguments {sorted(kwargs)} are only accepted with an "
                            f"encoding name from {list(VIDEO_ENCODINGS)}")
        if isinstance(encoding, (list, tuple)) and not encoding:
            raise ValueError("encoding must not be an empty sequence")
        first = encoding[0] if isinstance(encoding, (list, tuple)) else encoding
        kind = encoding_kind(first)
        self.pos_encoding: SinCos3D | None = None
        rotary = None
        if kind == "additive":
            if not isinstance(encoding, SinCos3D):
                raise TypeError(f"an additive video encoding must be a SinCos3D, got "
                                f"{type(encoding).__name__}")
            if encoding.dim != vit.embed_dim:
                raise ValueError(f"encoding dim={encoding.dim} does not match the ViT's "
                                 f"embed_dim={vit.embed_dim}")
            self.pos_encoding = encoding
        elif kind == "rotary":
            depth = len(vit.blocks)
            per_block = list(encoding) if isinstance(encoding, (list, tuple)) \
                else [encoding] * depth
            if len(per_block) != depth:
                raise ValueError(f"expected one rotary encoding per block ({depth}), got "
                                 f"{len(per_block)}")
            for enc in per_block:
                if not isinstance(enc, _Rotary3D):
                    raise TypeError(f"a rotary video encoding must be a 3D one (RoPE3D, MRoPE) "
                                    f"reading (t, row, col) coordinates, got "
                                    f"{type(enc).__name__}")
            param = next(vit.parameters())
            rotary = [enc.to(param.device) for enc in per_block]
        elif kind != "none":
            raise TypeError(f"video encodings are additive (SinCos3D) or rotary (RoPE3D, "
                            f"MRoPE), got a {kind} encoding {type(first).__name__}")
        use_grid_attention(vit, rotary)
        self.vit = vit

    def _frames(self, video: Tensor, frame_times: Tensor | None) -> Tensor | int:
        batch, num_frames = video.shape[0], video.shape[1]
        if frame_times is None:
            return num_frames
        times = check_positions(frame_times, "frame_times")  # read once, at the model's edge
        if times.shape[-1] != num_frames or (times.ndim == 2 and times.shape[0] != batch):
            raise ValueError(f"frame_times of shape {tuple(times.shape)} do not match video of "
                             f"shape {tuple(video.shape)}: expected (T,) or (B, T) with "
                             f"T={num_frames}, B={batch}")
        if times.device != video.device:
            raise ValueError(f"frame_times are on {times.device} but video is on {video.device}")
        return times

    def _embed(self, video: Tensor, frame_times: Tensor | None
               ) -> tuple[Tensor, VideoPositions | None]:
        """Clips -> ``(B, P + n, dim)`` tokens (``n`` patches kept by patch dropout, ``T * h * w``
        in eval) and their positions (None without a rotary encoding)."""
        if not isinstance(video, Tensor) or video.ndim != 5:
            got = tuple(video.shape) if isinstance(video, Tensor) else type(video).__name__
            raise ValueError(f"video must be a (B, T, C, H, W) tensor of clips, got {got}")
        vit = self.vit
        batch, num_frames = video.shape[:2]
        if batch < 1 or num_frames < 1:
            raise ValueError(f"video must hold at least one clip of one frame, got shape "
                             f"{tuple(video.shape)}")
        grid = patch_grid(self.vit.patch_embed, video.shape[-2], video.shape[-1], "frame")
        frames = self._frames(video, frame_times)
        x = vit.patch_embed(video.flatten(0, 1))  # (B * T, h * w, dim), NHWC if dynamic
        x = x.reshape(batch, num_frames * grid[0] * grid[1], x.shape[-1])
        rotary = any(isinstance(block.attn, GridAttention) for block in vit.blocks)
        coords = None
        if rotary or self.pos_encoding is not None:  # frame_times were checked above
            coords = _video_coords(grid, frames, self.time_scale, x.device, torch.float32)
        if self.pos_encoding is not None:
            x = x + unchecked(self.pos_encoding)(coords, dtype=x.dtype)
        positions = VideoPositions(coords, vit.num_prefix_tokens, {}) if rotary else None
        x, positions, _ = enter_blocks(vit, vit.blocks, x, positions, "clip")
        return x, positions

    def forward_features(self, video: Tensor, frame_times: Tensor | None = None, *,
                         attn_mask: Tensor | None = None) -> Tensor:
        """Clips -> ``(B, P + n, dim)`` normed tokens. ``attn_mask``: bool (True = attend) or
        additive, broadcastable to ``(B, heads, P + n, P + n)``."""
        x, positions = self._embed(video, frame_times)
        for block in self.vit.blocks:
            x = run_block(self.vit, block, x, positions, attn_mask, False)
        return self.vit.norm(x)

    def forward(self, video: Tensor, frame_times: Tensor | None = None, *,
                attn_mask: Tensor | None = None) -> Tensor:
        """``(B, T, C, H, W)`` clips -> ``(B, num_classes)`` (the ViT's pooling and head)."""
        return self.vit.forward_head(self.forward_features(video, frame_times, attn_mask=attn_mask))
