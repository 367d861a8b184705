"""The grid model: a timm ``VisionTransformer`` for images of any size with a posenc position
encoding ([`GridVisionTransformer`][posenc.spatial.GridVisionTransformer], what
[`attach`][posenc.spatial.attach] returns).

It is built from a timm ViT, taking over its modules under their names (so checkpoint keys stay
timm's), with timm's blocks as [`GridBlock`][posenc.spatial.blocks.GridBlock] s where an encoding is
rotary or bias. Each forward makes the patch positions from the image shape (valid by
construction), computes each distinct encoding once and passes every block its rotation and
bias ([`encode_blocks`][posenc.spatial.blocks.encode_blocks]), as timm's Eva passes ``rope=``. No
value is read on the host, so the model runs under ``torch.compile`` and ``torch.export``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from posenc.core._checks import known_finite
from timm.layers import PatchDropout, PatchEmbed
from timm.layers.format import Format
from timm.layers.patch_dropout import patch_dropout_forward
from timm.models._features import feature_take_indices
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .blocks import SUPPORTED, Bias, GridAttention, GridBlock, Rope, encode_blocks, grid_blocks
from .coords import GridPositions, VideoPositions, patch_coords

__all__ = ["GridVisionTransformer", "check_vit", "patch_grid"]

#: nn.Module's own bookkeeping (registries, hooks, training flag): a model's, not adopted.
_MODULE_STATE = frozenset(vars(nn.Module()))


def check_vit(vit: object, name: str) -> VisionTransformer:
    """``vit`` if it is a fresh timm ``VisionTransformer`` posenc can give positions, else
    raise naming the argument ``name``."""
    if isinstance(vit, GridVisionTransformer):
        raise ValueError(f"{name} already has a posenc 2D encoding attached "
                         f"(posenc.spatial.attach); use a fresh timm VisionTransformer (or one "
                         f"loaded from a timm checkpoint)")
    # Exactly VisionTransformer: a subclass's own methods would not reach the grid model.
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
    """A timm ``VisionTransformer`` for ``(B, C, H, W)`` images of any size divisible by the
    patch size, with a posenc position encoding; made by [`attach`][posenc.spatial.attach].

    Built from ``vit``: its settings, parameters and modules (shared, not copied, under their
    names), except ``pos_embed`` (None), a ``patch_embed`` that takes any image size (timm's
    ``PatchEmbed`` with ``vit``'s settings and modules, holding an additive encoding as
    ``pos_encoding``) and, with rotary or bias encodings, ``blocks`` of
    [`GridBlock`][posenc.spatial.blocks.GridBlock] s. ``vit`` itself is left as it was.

    Args:
        vit: a timm ``VisionTransformer`` (see [`check_vit`][posenc.spatial.vit.check_vit]).
        rotary: one rotary encoding per block, or None.
        bias: one bias encoding per block, or None.
        pos_encoding: an additive encoding with ``encode_grid(grid_size)`` (a ``SinCos2D`` with
            ``ref_grid_size``), or None.
        coord_normalize: the ``patch_coords`` system of the positions the model makes.
        ref_grid_size: the reference grid ``(R, C)`` patch indices are rescaled to, or None.
    """

    def __init__(self, vit: VisionTransformer, *, rotary: Sequence[nn.Module] | None = None,
                 bias: Sequence[nn.Module] | None = None, pos_encoding: nn.Module | None = None,
                 coord_normalize: str | None = None,
                 ref_grid_size: tuple[int, int] | None = None) -> None:
        vit = check_vit(vit, "vit")
        blocks = grid_blocks(vit.blocks, rotary, bias)  # checks, before anything is built
        patch_embed = _any_size_patch_embed(vit.patch_embed)
        # nn.Module's, not VisionTransformer's constructor: the modules are vit's.
        nn.Module.__init__(self)
        for name, value in vars(vit).items():
            if name not in _MODULE_STATE:  # timm's settings: num_prefix_tokens, global_pool, ...
                setattr(self, name, value)
        for registry in ("_parameters", "_buffers", "_non_persistent_buffers_set", "_modules"):
            getattr(self, registry).update(getattr(vit, registry))  # names and order: timm's
        self.training = vit.training
        self.pos_embed = None
        self.patch_embed = patch_embed
        self.patch_embed.pos_encoding = pos_encoding
        self.blocks = blocks
        self.coord_normalize = coord_normalize
        self.ref_grid_size = ref_grid_size

    def grid_coords(self, grid_size: tuple[int, int], *,
                    device: torch.device | str | None = None) -> Tensor:
        """The ``(rows * cols, 2)`` float32 coordinates this model gives its encodings:
        ``patch_coords(grid_size, coord_normalize)``, with a ``ref_grid_size`` ``(R, C)``
        rescaled to ``(row / rows * R, col / cols * C)`` as timm's ``_build_grid``."""
        coords = known_finite(patch_coords(grid_size, self.coord_normalize, device=device))
        if self.ref_grid_size is None:
            return coords
        (rows, cols), (ref_rows, ref_cols) = grid_size, self.ref_grid_size
        return known_finite(torch.stack((coords[:, 0] / rows * ref_rows,
                                         coords[:, 1] / cols * ref_cols), dim=-1))

    def _embed(self, x: Tensor, blocks: Sequence[nn.Module], attn_mask: object
               ) -> tuple[Tensor, list[tuple[Rope, Bias]], tuple[int, int], bool]:
        """Images -> ``(B, P + n, dim)`` tokens for ``blocks`` and each block's ``(rope, bias)``
        (`_enter_blocks`), the ``(rows, cols)`` grid, and whether patches were dropped."""
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
                else encoding(self.grid_coords(grid, device=x.device))
            x = x + table.to(x.dtype)
        positions = None
        if any(isinstance(getattr(block, "attn", None), GridAttention) for block in blocks):
            # Rescaled coordinates are off the integer grid that grid_size promises.
            positions = GridPositions(self.grid_coords(grid, device=x.device),
                                      grid if self.ref_grid_size is None else None,
                                      self.num_prefix_tokens)
        x, encodings, dropped = self._enter_blocks(x, positions, blocks, attn_mask, "image")
        return x, encodings, grid, dropped

    def _enter_blocks(self, x: Tensor, positions: GridPositions | VideoPositions | None,
                      blocks: Sequence[nn.Module], attn_mask: object, what: str
                      ) -> tuple[Tensor, list[tuple[Rope, Bias]], bool]:
        """``(B, n, dim)`` patch tokens (additive encoding added) at ``positions`` -> the ``(B,
        P + k, dim)`` tokens ``blocks`` take (prefix tokens prepended here, as timm <= 1.0.25's
        ``_pos_embed`` does not without a ``pos_embed``; patch dropout; ``norm_pre``), each
        block's ``(rope, bias)`` for the ``k`` patches kept, and whether any was dropped."""
        batch = x.shape[0]
        prefix = [t.expand(batch, -1, -1) for t in (self.cls_token, self.reg_token)
                  if t is not None]
        x = self.pos_drop(torch.cat([*prefix, x], dim=1) if prefix else x)
        drop = self.patch_drop
        dropped = isinstance(drop, PatchDropout) and drop.training and drop.prob > 0.0
        if dropped:
            x, keep = patch_dropout_forward(x, drop.prob, self.num_prefix_tokens, drop.ordered,
                                            True)
            if positions is not None:  # (B, k, C) coordinates of the kept patches
                coords = positions.coords
                coords = coords.expand(batch, *coords.shape[-2:]).gather(
                    1, keep[..., None].expand(-1, -1, coords.shape[-1]))
                positions = positions._replace(coords=known_finite(coords))
        x = self.norm_pre(x)
        return x, encode_blocks(blocks, positions, x, attn_mask, what), dropped

    def _run_block(self, block: nn.Module, x: Tensor, rope: Rope, bias: Bias,
                   attn_mask: Tensor | None, is_causal: bool) -> Tensor:
        """``block(x, rope, bias, attn_mask=..., is_causal=...)``, gradient-checkpointed when
        set to; timm's own blocks get only what is set (older timm's ``Block.forward(x,
        attn_mask)``)."""
        args = (x, rope, bias) if isinstance(block, GridBlock) else (x,)
        kwargs = {"attn_mask": attn_mask} if attn_mask is not None else {}
        if is_causal:
            kwargs["is_causal"] = True
        if self.grad_checkpointing and torch.is_grad_enabled():
            # Reentrant checkpointing drops the gradients of tensors inside the rotation tuple.
            return checkpoint(block, *args, use_reentrant=False, **kwargs)
        return block(*args, **kwargs)

    def forward_features(self, x: Tensor, attn_mask: Tensor | None = None,
                         is_causal: bool = False) -> Tensor:
        """``(B, C, H, W)`` images -> ``(B, P + n, dim)`` normed tokens (``n`` patches kept)."""
        x, encodings, _, _ = self._embed(x, self.blocks, attn_mask)
        for block, (rope, bias) in zip(self.blocks, encodings, strict=True):
            x = self._run_block(block, x, rope, bias, attn_mask, is_causal)
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
        x, encodings, (rows, cols), dropped = self._embed(x, blocks, attn_mask)
        if dropped and output_fmt == "NCHW":
            raise ValueError("output_fmt='NCHW' needs every patch, but patch dropout (training "
                             "mode) dropped some: use output_fmt='NLC' or model.eval()")
        intermediates = []
        for i, (block, (rope, bias)) in enumerate(zip(blocks, encodings, strict=True)):
            x = self._run_block(block, x, rope, bias, attn_mask, is_causal)
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


def _any_size_patch_embed(patch_embed: PatchEmbed) -> PatchEmbed:
    """A timm ``PatchEmbed`` with ``patch_embed``'s settings and ``proj``/``norm`` (shared) that
    takes any image size (``strict_img_size`` off: [`patch_grid`][posenc.spatial.vit.patch_grid]
    checks sizes)."""
    fmt = patch_embed.output_fmt
    with torch.device("meta"):  # proj and norm are replaced by patch_embed's below
        new = PatchEmbed(patch_embed.img_size, patch_embed.patch_size,
                         patch_embed.proj.in_channels, patch_embed.proj.out_channels,
                         flatten=patch_embed.flatten,
                         output_fmt=None if fmt == Format.NCHW else fmt.value,
                         bias=patch_embed.proj.bias is not None, strict_img_size=False,
                         dynamic_img_pad=patch_embed.dynamic_img_pad)
    new.proj, new.norm = patch_embed.proj, patch_embed.norm
    new.train(patch_embed.training)
    return new
