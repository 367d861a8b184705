"""The shared path by which :func:`posenc.spatial.attach` (images) and
:class:`posenc.spatial.VideoVisionTransformer` (clips) run a timm ``VisionTransformer``'s blocks
with posenc positions: :class:`GridAttention`, the blocks :class:`GridBlock` and
:class:`GridResPostBlock`, and the image model :class:`GridVisionTransformer`.

How positions reach the attention, and why. As timm's Eva passes ``rope=`` to each
``EvaBlock.forward(x, rope=None, attn_mask=None)``, the model passes every block this forward's
positions (a :class:`~.coords.GridPositions` or :class:`~.video.VideoPositions`:
the patch coordinates, with the kept patches of patch dropout, the prefix-token count and the
cache of this forward's rotations/biases) as ``block(x, positions, attn_mask=...)``; the block
hands them to its :class:`GridAttention`. Positions travel with the computation: a gradient-
checkpointed block (``set_grad_checkpointing``) recomputes in backward from the very positions
object of its own forward, whatever other forwards (multi-crop: two image sizes in one step)
ran in between. Nothing is read from model state at recompute time.

Each distinct rotary/bias encoding of the blocks is computed once per forward, before the
blocks run, into the positions' cache (:func:`enter_blocks`); blocks (and their recompute) only
read it. Blocks sharing an encoding (``rope_axial``, ``alibi2d``, one module passed for all
blocks) thus share its rotation/bias, and no cached value that needs a gradient is ever made
inside a checkpointed block, whose recompute would find it cached and save fewer tensors than
its forward did. Cache keys are Python values (module ids and names); sizes traced as
``torch.SymInt`` are never used as keys (see :func:`posenc.spatial.coords.cached`), so the
models run under ``torch.compile`` and ``torch.export`` with dynamic sizes (nothing calls
``.item()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch
from posenc.core import MultiheadAttention
from posenc.core.encoding import unchecked
from timm.layers import Attention, PatchDropout, PatchEmbed
from timm.layers.patch_dropout import patch_dropout_forward
from timm.models._features import feature_take_indices
from timm.models.vision_transformer import Block, ResPostBlock, VisionTransformer
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .coords import GridPositions, patch_coords
from .video import VideoPositions

__all__ = ["GridAttention", "GridBlock", "GridResPostBlock", "GridVisionTransformer",
           "patch_grid"]

SUPPORTED = ("timm.models.vision_transformer.VisionTransformer (vit_*, deit_* without a "
             "distillation token; with or without class token, reg_tokens, no_embed_class, "
             "dynamic_img_size, dynamic_img_pad) with timm's PatchEmbed, Block/ResPostBlock and "
             "Attention")

#: The positions of one forward, as the blocks receive them.
Positions = TypeVar("Positions", GridPositions, VideoPositions)


class GridAttention(MultiheadAttention):
    """:class:`posenc.core.MultiheadAttention` with timm ``Attention``'s call signature.

    Its ``positions`` argument is what the model's forward made for this input (see the module
    docstring), which the model passes to every block and the block to its attention.
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

    def forward(self, x: Tensor, positions: GridPositions | VideoPositions | None = None,
                attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """``(B, P + N, dim)`` tokens -> ``(B, P + N, dim)``, as timm's ``Attention``.

        Args:
            x: the block's normed tokens, ``P`` prefix tokens then ``N`` patches.
            positions: this forward's positions of the ``N`` patches, their rotations/biases
                already in its cache (its model made them: :func:`enter_blocks`).
            attn_mask: bool (True = attend) or float additive mask broadcastable to
                ``(B, H, P + N, P + N)``, or None.
            is_causal: causal attention over the ``P + N`` tokens.
        """
        if not isinstance(positions, (GridPositions, VideoPositions)):
            raise TypeError(
                f"GridAttention takes the positions of its model's forward (GridPositions or "
                f"VideoPositions), got {type(positions).__name__}; call the model (forward, "
                f"forward_features or forward_intermediates), which passes them to every block")
        # The model made the positions from the image shape (finite by construction) and
        # computed their rotations/biases into the cache (enter_blocks): the block attends
        # unchecked and reads no values, so nothing in it waits for the host.
        return self._attend(x, None, positions, positions, attn_mask, is_causal)


class GridBlock(Block):
    """timm's ``Block`` taking this forward's positions for its :class:`GridAttention`, as
    timm's ``EvaBlock.forward(x, rope=None, attn_mask=None)`` takes its rotary embedding (same
    modules and parameter names: :func:`use_grid_attention` swaps a ``Block``'s class)."""

    def forward(self, x: Tensor, positions: GridPositions | VideoPositions | None = None,
                attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """``(B, P + N, dim)`` tokens -> ``(B, P + N, dim)``."""
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x), positions, attn_mask,
                                                   is_causal)))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class GridResPostBlock(ResPostBlock):
    """timm's ``ResPostBlock`` (post-norm) taking this forward's positions, as
    :class:`GridBlock`."""

    def forward(self, x: Tensor, positions: GridPositions | VideoPositions | None = None,
                attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        """``(B, P + N, dim)`` tokens -> ``(B, P + N, dim)``."""
        x = x + self.drop_path1(self.norm1(self.attn(x, positions, attn_mask, is_causal)))
        return x + self.drop_path2(self.norm2(self.mlp(x)))


_GRID_BLOCKS = {Block: GridBlock, ResPostBlock: GridResPostBlock}


def check_vit(vit: object, name: str) -> VisionTransformer:
    """Raise unless ``vit`` is a fresh timm ``VisionTransformer`` that posenc can give
    positions (``name``: the argument, for messages)."""
    if isinstance(vit, GridVisionTransformer):
        raise ValueError(f"{name} already has a posenc 2D encoding attached "
                         f"(posenc.spatial.attach); use a fresh timm VisionTransformer (or one "
                         f"loaded from a timm checkpoint)")
    # Exactly VisionTransformer: attach swaps the model's class for GridVisionTransformer,
    # which would silently drop a subclass's own methods.
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
    """Give each block of ``vit`` a :class:`GridAttention` (its timm modules, shared) with the
    block's ``rotary`` or ``bias`` encoding (one per block; neither: keep timm's attention),
    the block's class becoming :class:`GridBlock`/:class:`GridResPostBlock` (same modules);
    drop ``vit.pos_embed``, and leave image sizes to :func:`patch_grid`. Everything is checked
    before ``vit`` changes, so a refused encoding leaves it as it was."""
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
    """``(B, n, dim)`` patch tokens (with any additive encoding added) -> the ``(B, P + k,
    dim)`` tokens ``blocks`` take, the positions of the ``k`` patches patch dropout kept (from
    ``positions`` of all ``n``, or None), and whether it dropped any.

    Prefix tokens are prepended here, not by timm's ``_pos_embed``: without a ``pos_embed``,
    timm <= 1.0.25 returns before prepending them. Each distinct rotary/bias encoding of
    ``blocks`` is computed into the positions' cache here, before any block runs (see the
    module docstring), and its output's shape checked against the tokens (``what``:
    ``"image"``/``"clip"``, for messages): a wrong encoding fails here, naming itself.
    """
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
    ``vit`` is set to; a block of timm's own (no positions) gets only what is set, so an
    older timm ``Block.forward(x, attn_mask)`` works too."""
    args = (x,) if positions is None else (x, positions)
    kwargs = {"attn_mask": attn_mask} if attn_mask is not None else {}
    if is_causal:
        kwargs["is_causal"] = True
    if vit.grad_checkpointing and torch.is_grad_enabled():
        # Non-reentrant always (timm's default can be set to reentrant): reentrant
        # checkpointing drops gradients of tensors inside non-tensor arguments such as the
        # positions' learnable rotations and biases.
        return checkpoint(block, *args, use_reentrant=False, **kwargs)
    return block(*args, **kwargs)


def _encode_positions(blocks: Sequence[nn.Module], positions: GridPositions | VideoPositions,
                      tokens: Tensor, what: str) -> None:
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
            # Unchecked (no value read): the model made the positions from the image shape.
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
    the forward's :class:`~posenc.spatial.coords.GridPositions`. ``model.coord_normalize`` is the
    coordinate system of the positions (``patch_coords``'s ``normalize``);
    ``model.ref_grid_size`` the reference grid they are rescaled to, or None
    (:meth:`grid_coords`).
    """

    coord_normalize: str | None
    ref_grid_size: tuple[int, int] | None

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

    def _embed(self, x: Tensor, blocks: Sequence[nn.Module]
               ) -> tuple[Tensor, GridPositions | None, tuple[int, int], bool]:
        """Images -> ``(B, P + n, dim)`` tokens for ``blocks``, their positions (None when
        they hold no :class:`GridAttention`), the ``(rows, cols)`` grid, and whether patch
        dropout dropped patches."""
        if not isinstance(x, Tensor) or x.ndim != 4:
            raise ValueError(f"x must be a (B, C, H, W) image tensor, got "
                             f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}")
        grid = patch_grid(self.patch_embed, x.shape[-2], x.shape[-1])
        x = self.patch_embed(x)
        if x.ndim == 4:  # (B, rows, cols, dim) with dynamic_img_size
            x = x.flatten(1, 2)
        encoding = self.patch_embed.pos_encoding
        if encoding is not None:
            # attach allows a ref_grid_size only for additive encodings of coordinates
            # (SinCos2D), whose forward takes them; made from the image shape, they need no
            # value check.
            table = encoding.encode_grid(grid) if self.ref_grid_size is None \
                else unchecked(encoding)(self.grid_coords(grid, device=x.device))
            x = x + table.to(x.dtype)
        positions = None
        if any(isinstance(block.attn, GridAttention) for block in blocks):
            # Rescaled coordinates are not integer positions on the grid, which GridPositions'
            # grid_size promises (bias tables index by it); only rotary encodings read them.
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
