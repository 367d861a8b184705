"""Give a timm ``VisionTransformer`` any posenc 2D encoding, at any image size.

:func:`attach` changes the model in place, keeping every timm parameter name:

- the model becomes a :class:`GridVisionTransformer` (``model.__class__`` is swapped for this
  module-level subclass, so ``torch.save(model)``/``copy.deepcopy`` round-trip); its
  ``forward_features`` and ``forward_intermediates`` compute the patch grid from the image shape.
- ``model.pos_embed`` becomes None; an additive encoding lives at
  ``model.patch_embed.pos_encoding`` and is added for the current grid.
- for rotary and bias encodings each ``block.attn`` becomes a :class:`GridAttention`, i.e.
  :class:`posenc.core.MultiheadAttention` holding the block's ``qkv``/``q_norm``/``k_norm``/
  ``proj`` modules.

How positions reach the attention, and why. timm's ``Block.forward(x, attn_mask)`` hands
``attn_mask`` to ``block.attn`` untouched, so the model passes every block a per-forward
:class:`GridContext` (the patch positions, with the kept patches of patch dropout, plus the
caller's own mask) as that argument. Positions travel with the computation: a gradient-
checkpointed block (``set_grad_checkpointing``) recomputes in backward from the very context
object of its own forward, whatever other forwards (multi-crop: two image sizes in one step)
ran in between. Nothing is read from model state at recompute time.

Each distinct rotary/bias encoding of the blocks is computed once per forward, before the
blocks run, into the context's :class:`GridPositions` cache; blocks (and their recompute) only
read it. Blocks sharing an encoding (``rope_axial``, ``alibi2d``, one module passed for all
blocks) thus share its rotation/bias, and no cached value that needs a gradient is ever made
inside a checkpointed block, whose recompute would find it cached and save fewer tensors than
its forward did. Cache keys are Python values (module ids and names); sizes traced as
``torch.SymInt`` are never used as keys (see :func:`posenc.spatial.coords.cached`), so the
model runs under ``torch.compile`` and ``torch.export`` with dynamic image sizes (nothing
calls ``.item()``).

``attach(..., ref_grid_size=(h, w))`` is EVA's ``ref_feat_shape`` (timm's
``RotaryEmbeddingCat(ref_feat_shape=...)``): the patch indices of every grid are rescaled to the
reference grid, ``coord * ref / grid`` per axis, before any encoding sees them.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import NamedTuple

import torch
from posenc.core import MultiheadAttention
from posenc.core.validation import assume_finite
from timm.layers import Attention, PatchDropout, PatchEmbed
from timm.layers.patch_dropout import patch_dropout_forward
from timm.models._features import feature_take_indices
from timm.models.vision_transformer import Block, ResPostBlock, VisionTransformer
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .coords import GridPositions, check_grid_size, patch_coords
from .factory import ENCODINGS, encoding_kind, encoding_spec, encodings_for_blocks
from .learned import Learned2D
from .sincos import SinCos2D

__all__ = ["attach", "GridAttention", "GridContext", "GridVisionTransformer"]

SUPPORTED = ("timm.models.vision_transformer.VisionTransformer (vit_*, deit_* without a "
             "distillation token; with or without class token, reg_tokens, no_embed_class, "
             "dynamic_img_size, dynamic_img_pad) with timm's PatchEmbed, Block/ResPostBlock and "
             "Attention")


class GridContext(NamedTuple):
    """What the blocks of one forward need besides their tokens; passed to each block as its
    ``attn_mask`` argument, which timm's ``Block`` hands to :class:`GridAttention` unchanged.

    Attributes:
        positions: the ``P + N`` tokens' positions: ``(N, 2)`` (full grid) or ``(B, N, 2)``
            (kept patches of patch dropout) coordinates, the grid, ``P`` prefix tokens, and
            the cache holding this forward's rotations/biases.
        attn_mask: the caller's mask (bool, True = attend, or float additive), broadcastable
            to ``(B, H, P + N, P + N)``, or None.
        is_causal: the caller's causal flag.
    """

    positions: GridPositions
    attn_mask: Tensor | None = None
    is_causal: bool = False


class GridAttention(MultiheadAttention):
    """:class:`posenc.core.MultiheadAttention` with timm ``Attention``'s call signature.

    Its ``attn_mask`` argument is the :class:`GridContext` of the current forward, which
    :class:`GridVisionTransformer` passes to every block.
    """

    @classmethod
    def from_timm(cls, attn: Attention, rotary: nn.Module | None,
                  bias: nn.Module | None) -> GridAttention:
        """Wrap a timm ``Attention``'s modules (shared, not copied) with an encoding."""
        if type(attn) is not Attention:
            raise TypeError(f"attach supports blocks whose attn is timm.layers.Attention, got "
                            f"{type(attn).__name__}; supported models: {SUPPORTED}")
        dim = attn.qkv.in_features
        # gate (timm >= 1.0.28) and attn_dim (>= 1.0.23) are read with defaults, so the check
        # does not depend on the timm version's attribute set.
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

    def forward(self, x: Tensor, attn_mask: GridContext | None = None,
                is_causal: bool = False) -> Tensor:
        """``(B, P + N, dim)`` tokens -> ``(B, P + N, dim)``, as timm's ``Attention``."""
        if not isinstance(attn_mask, GridContext):
            raise TypeError(
                f"GridAttention takes the GridContext of its model's forward as attn_mask, got "
                f"{type(attn_mask).__name__}; call the model (forward, forward_features or "
                f"forward_intermediates), which passes it to every block")
        context = attn_mask
        # The model made the positions from the image shape (finite by construction), so the
        # block reads no values: nothing in it waits for the host.
        return super().forward(x, query_positions=context.positions,
                               attn_mask=context.attn_mask,
                               is_causal=is_causal or context.is_causal, positions_checked=True)


def _encode_positions(blocks: Sequence[nn.Module], positions: GridPositions,
                      tokens: Tensor) -> None:
    """Compute each distinct rotary/bias encoding of ``blocks`` once into ``positions.cache``
    (posenc's encodings memoise their output there; see the module docstring), checking that
    it covers the ``(B, P + n, dim)`` ``tokens`` (a wrong one fails here, naming the encoding,
    rather than inside a block)."""
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
            out = enc.rotation(positions).cos if rotary else enc(positions, positions)
            # (B or 1, H or 1, P + n, D/2) cos of a rotation; (B or 1, H or 1, P + n, P + n) bias
            heads, last = (1, attn.num_heads), (out.shape[-1] if rotary else num_tokens)
            if out.ndim != 4 or out.shape[0] not in (1, batch) or out.shape[1] not in heads \
                    or out.shape[2] != num_tokens or out.shape[3] != last:
                what = "rotation cos" if rotary else "bias"
                raise ValueError(
                    f"{type(enc).__name__} gave a {what} of shape {tuple(out.shape)} for "
                    f"{batch} images of {num_tokens} tokens ({positions.num_prefix_tokens} "
                    f"prefix + patches) and {attn.num_heads} heads: expected (1 or {batch}, 1 or "
                    f"{attn.num_heads}, {num_tokens}, {'D/2' if rotary else num_tokens})")


def patch_grid(patch_embed: nn.Module, height: int, width: int, what: str = "image"
               ) -> tuple[int, int]:
    """The ``(rows, cols)`` patch grid timm's ``patch_embed`` makes of a ``height x width``
    ``what`` (``"image"``, ``"frame"``): padded up to whole patches with
    ``dynamic_img_pad``, else a size not divisible by the patch is a ``ValueError`` (never
    silently floored), and so is one holding no patch."""
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
    """A timm ``VisionTransformer`` after :func:`attach` (made by swapping ``__class__``).

    ``forward_features`` and ``forward_intermediates`` take ``(B, C, H, W)`` images of any
    size divisible by the patch size (any size with ``dynamic_img_pad``) and give every block
    the forward's :class:`GridContext`. ``model.coord_normalize`` is the coordinate system of
    the positions (``patch_coords``'s ``normalize``); ``model.ref_grid_size`` the reference grid
    they are rescaled to, or None (:meth:`grid_coords`).
    """

    coord_normalize: str | None
    ref_grid_size: tuple[int, int] | None = None  # also for models pickled before it existed

    def grid_coords(self, grid_size: tuple[int, int], *,
                    device: torch.device | str | None = None) -> Tensor:
        """The ``(rows * cols, 2)`` float32 coordinates this model gives its encodings for a
        ``(rows, cols)`` patch grid, in row-major order: ``patch_coords(grid_size,
        coord_normalize)``, and with a ``ref_grid_size`` ``(R, C)`` the patch indices rescaled
        to it, ``(row / rows * R, col / cols * C)``, in timm's order of operations
        (``_build_grid`` with ``ref_feat_shape``), so an image at twice the reference size gets
        half-patch steps spanning the reference grid's range.

        RoPE2D's coordinate augmentation (``shift_coords`` etc., training mode) transforms these
        coordinates afterwards, as timm augments the rescaled grid."""
        coords = patch_coords(grid_size, self.coord_normalize, device=device)
        if self.ref_grid_size is None:
            return coords
        (rows, cols), (ref_rows, ref_cols) = grid_size, self.ref_grid_size
        return torch.stack((coords[:, 0] / rows * ref_rows, coords[:, 1] / cols * ref_cols),
                           dim=-1)

    def _embed(self, x: Tensor, blocks: Sequence[nn.Module], attn_mask: Tensor | None,
               is_causal: bool) -> tuple[Tensor, GridContext | Tensor | None, tuple, bool]:
        """Images -> ``(B, P + n, dim)`` tokens for the blocks, the blocks' ``attn_mask``
        argument (a :class:`GridContext` when they hold :class:`GridAttention`), the
        ``(rows, cols)`` grid, and whether patch dropout dropped patches."""
        if not isinstance(x, Tensor) or x.ndim != 4:
            raise ValueError(f"x must be a (B, C, H, W) image tensor, got "
                             f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
        grid = patch_grid(self.patch_embed, x.shape[-2], x.shape[-1])
        x = self.patch_embed(x)
        if x.ndim == 4:  # (B, rows, cols, dim) with dynamic_img_size
            x = x.flatten(1, 2)
        encoding = self.patch_embed.pos_encoding
        if encoding is not None:
            with assume_finite():  # the grid's positions come from the image shape
                # attach allows a ref_grid_size only for additive encodings of coordinates
                # (SinCos2D), whose forward takes them.
                table = encoding.encode_grid(grid) if self.ref_grid_size is None \
                    else encoding(self.grid_coords(grid, device=x.device))
                x = x + table.to(x.dtype)
        # Prefix tokens are prepended here, not by timm's _pos_embed: without a pos_embed, timm
        # <= 1.0.25 returns before prepending them.
        prefix = [t.expand(x.shape[0], -1, -1) for t in (self.cls_token, self.reg_token)
                  if t is not None]
        x = self.pos_drop(torch.cat([*prefix, x], dim=1) if prefix else x)
        needs_positions = any(isinstance(block.attn, GridAttention) for block in blocks)
        coords = self.grid_coords(grid, device=x.device) if needs_positions else None
        drop = self.patch_drop
        dropped = isinstance(drop, PatchDropout) and drop.training and drop.prob > 0.0
        if dropped:
            x, keep = patch_dropout_forward(x, drop.prob, self.num_prefix_tokens, drop.ordered,
                                            True)
            coords = None if coords is None else coords[keep]  # (B, kept, 2)
        x = self.norm_pre(x)
        if not needs_positions:
            return x, attn_mask, grid, dropped
        # Rescaled coordinates are not integer positions on the grid, which GridPositions'
        # grid_size promises (bias tables index by it); only rotary encodings read them.
        positions = GridPositions(coords, grid if self.ref_grid_size is None else None,
                                  self.num_prefix_tokens, {})
        with assume_finite():  # patch_coords of the grid: finite by construction
            _encode_positions(blocks, positions, x)
        return x, GridContext(positions, attn_mask, is_causal), grid, dropped

    def _block(self, block: nn.Module, x: Tensor, mask: GridContext | Tensor | None,
               is_causal: bool) -> Tensor:
        # is_causal travels in the GridContext; timm's own blocks take it as a keyword (timm
        # >= 1.0.26), given only when set, so the older Block.forward(x, attn_mask) works too.
        kwargs = {"is_causal": True} if is_causal and not isinstance(mask, GridContext) else {}
        args = (x,) if mask is None else (x, mask)  # block(x) alone, as timm's blocks(x) calls
        if self.grad_checkpointing and torch.is_grad_enabled():
            # Non-reentrant always (timm's default can be set to reentrant): reentrant
            # checkpointing drops gradients of tensors inside non-tensor arguments such as the
            # context's learnable rotations and biases.
            return checkpoint(block, *args, use_reentrant=False, **kwargs)
        return block(*args, **kwargs)

    def forward_features(self, x: Tensor, attn_mask: Tensor | None = None,
                         is_causal: bool = False) -> Tensor:
        """``(B, C, H, W)`` images -> ``(B, P + n, dim)`` normed tokens (``n`` patches kept)."""
        x, mask, _, _ = self._embed(x, self.blocks, attn_mask, is_causal)
        for block in self.blocks:
            x = self._block(block, x, mask, is_causal)
        return self.norm(x)

    def forward_intermediates(
            self,
            x: Tensor,
            indices: int | list[int] | None = None,
            return_prefix_tokens: bool = False,
            norm: bool = False,
            stop_early: bool = False,
            output_fmt: str = "NCHW",
            intermediates_only: bool = False,
            output_dict: bool = False,
            attn_mask: Tensor | None = None,
            is_causal: bool = False,
    ) -> list[Tensor] | tuple[Tensor, list[Tensor]] | dict:
        """timm's ``VisionTransformer.forward_intermediates`` (timm 1.0.31's arguments and
        outputs) for images of any size; NCHW maps are ``(B, dim, rows, cols)``."""
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(f"output_fmt must be 'NCHW' or 'NLC', got {output_fmt!r}")
        take_indices, max_index = feature_take_indices(len(self.blocks), indices)
        blocks = self.blocks[:max_index + 1] if stop_early else self.blocks
        x, mask, (rows, cols), dropped = self._embed(x, blocks, attn_mask, is_causal)
        if dropped and output_fmt == "NCHW":
            raise ValueError("output_fmt='NCHW' needs every patch, but patch dropout (training "
                             "mode) dropped some: use output_fmt='NLC' or model.eval()")
        intermediates = []
        for i, block in enumerate(blocks):
            x = self._block(block, x, mask, is_causal)
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


def _check_model(model: nn.Module, kind: str) -> VisionTransformer:
    if isinstance(model, GridVisionTransformer):
        raise ValueError("this model already has a posenc encoding attached; attach to a fresh "
                         "model (or one loaded from a timm checkpoint)")
    # Exactly VisionTransformer: the model's class is swapped for GridVisionTransformer, which
    # would silently drop a subclass's own methods.
    if type(model) is not VisionTransformer:
        raise TypeError(f"attach does not support {type(model).__name__}; supported: "
                        f"{SUPPORTED}")
    if type(model.patch_embed) is not PatchEmbed:
        raise TypeError(f"attach needs timm's PatchEmbed, got {type(model.patch_embed).__name__};"
                        f" supported: {SUPPORTED}")
    if not isinstance(model.patch_drop, (nn.Identity, PatchDropout)):
        raise TypeError(f"attach needs patch_drop to be timm's PatchDropout or Identity, got "
                        f"{type(model.patch_drop).__name__}")
    drop_prefix = getattr(model.patch_drop, "num_prefix_tokens", model.num_prefix_tokens)
    if drop_prefix != model.num_prefix_tokens:
        raise ValueError(f"patch_drop.num_prefix_tokens={drop_prefix} differs from the model's "
                         f"num_prefix_tokens={model.num_prefix_tokens}")
    if kind in ("rotary", "bias"):
        for block in model.blocks:
            if type(block) not in (Block, ResPostBlock):
                raise TypeError(f"attach with a {kind} encoding needs timm's Block or "
                                f"ResPostBlock (they pass attn_mask to attn), got "
                                f"{type(block).__name__}; supported: {SUPPORTED}")
    return model


def _from_name(model: VisionTransformer, name: str, kwargs: dict,
               ref_grid_size: tuple[int, int] | None) -> list[nn.Module] | nn.Module:
    """Encodings for ``name`` with sizes inferred from ``model`` (``kwargs`` override), one
    per block or shared as :func:`posenc.spatial.one_module_per_block` rules."""
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
           **kwargs) -> nn.Module:
    """Give a timm ViT a posenc 2D position encoding; returns the same (modified) model.

    Args:
        model: a timm ``VisionTransformer`` (e.g. ``timm.create_model("vit_small_patch16_224")``,
            deit, with registers, ``no_embed_class``, ``dynamic_img_size``).
        encoding: a name from :data:`posenc.spatial.ENCODINGS` (dims, heads and grid size are
            taken from the model; ``kwargs`` override them, e.g. ``base=10000.0``; learnable
            rotary/bias names get one module per block, parameter-free ones one shared module:
            :func:`posenc.spatial.one_module_per_block`), an encoding module (rotary/bias
            modules are shared by all blocks), a sequence of one rotary or bias module per
            block, or None (no position encoding).
        ref_grid_size (keyword): ``rows`` or ``(rows, cols)``, EVA's ``ref_feat_shape``: every
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
    model = _check_model(model, kind)
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
    attentions = [GridAttention.from_timm(block.attn, *((e, None) if kind == "rotary"
                                                          else (None, e)))
                  for block, e in zip(model.blocks, per_block, strict=True)] if positional else []
    model.patch_embed.strict_img_size = False
    model.patch_embed.pos_encoding = built if kind == "additive" else None
    model.pos_embed = None
    model.coord_normalize = normalize
    model.ref_grid_size = ref_grid_size
    for block, attn in zip(model.blocks, attentions, strict=False):
        block.attn = attn
    model.__class__ = GridVisionTransformer
    return model
