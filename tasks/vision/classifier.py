"""``ImageClassifier``: a timm Vision Transformer with a posenc spatial encoding attached.

The encoding is a config value: a name from :data:`posenc.spatial.ENCODINGS`
(``encoding: rope_mixed``; sizes are inferred from the ViT) or a dict
``{class_path: posenc.spatial.RoPE2D, init_args: {...}}`` whose missing size arguments
(:func:`posenc.spatial.factory.size_arguments`: ``dim``, ``head_dim``, ``num_heads``, the grid) are
filled in from the ViT; either way learnable rotary/bias encodings get one module per block
and parameter-free ones are shared (:func:`posenc.spatial.factory.one_module_per_block`). Validation
and test run at every image size the data module provides (one loader per size) and log
``{stage}/acc_{size}`` and ``{stage}/loss_{size}``; ``{stage}/acc`` and ``{stage}/loss`` are
at the training size.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from lightning.pytorch import LightningModule
from posenc.core.encoding import (
    check_bool,
    check_choice,
    check_float,
    check_positive_float,
    check_positive_int,
)
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from ..config import instantiate
from ..optim import check_optim_args, configure_adamw_from_hparams

__all__ = ["ImageClassifier", "build_vit"]


def build_vit(
    model_name: str,
    encoding: str | dict,
    *,
    num_classes: int,
    in_chans: int,
    img_size: int,
    patch_size: int,
    embed_dim: int,
    depth: int,
    num_heads: int,
    mlp_ratio: float,
    class_token: bool,
    global_pool: str,
    drop_path_rate: float,
    model_kwargs: dict | None = None,
) -> nn.Module:
    """``timm.create_model(model_name, pretrained=False, ...)`` + ``posenc.spatial.attach``."""
    import timm
    from posenc import spatial
    from posenc.spatial.factory import encodings_for_blocks, vit_size_arguments

    if img_size % patch_size:
        raise ValueError(f"img_size={img_size} must be divisible by patch_size={patch_size}")
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
    kwargs: dict[str, Any] = dict(
        pretrained=False, num_classes=num_classes, in_chans=in_chans, img_size=img_size,
        patch_size=patch_size, embed_dim=embed_dim, depth=depth, num_heads=num_heads,
        mlp_ratio=mlp_ratio, class_token=class_token, global_pool=global_pool,
        drop_path_rate=drop_path_rate, dynamic_img_size=True)
    kwargs.update(model_kwargs or {})
    try:
        model = timm.create_model(model_name, **kwargs)
    except RuntimeError as err:  # timm: "Unknown model (...)"
        raise ValueError(f"model_name={model_name!r}: {err}") from err
    if isinstance(encoding, str):
        return spatial.attach(model, encoding)
    # A class path is filled in and placed as attach places a name: the same inferred sizes,
    # the same per-block rule.
    defaults = vit_size_arguments(model)
    return spatial.attach(model, encodings_for_blocks(
        lambda: instantiate(encoding, {}, "encoding", defaults=defaults), len(model.blocks)))


# timm VisionTransformer's pooling modes.
GLOBAL_POOLS = ("token", "avg", "avgmax", "max", "map", "")
# create_model keywords that load weights or configs (from the network or a file) or that
# ImageClassifier sets itself: a config or checkpoint may not pass them in model_kwargs.
_RESERVED_MODEL_KWARGS = ("pretrained", "pretrained_cfg", "pretrained_cfg_overlay",
                          "pretrained_strict", "checkpoint_path", "cache_dir",
                          "dynamic_img_size")
_OWN_ARGUMENTS = ("num_classes", "in_chans", "img_size", "patch_size", "embed_dim", "depth",
                  "num_heads", "mlp_ratio", "class_token", "global_pool", "drop_path_rate")


def _check_timm_source(model_name: object, model_kwargs: object) -> None:
    """A checkpoint's hyperparameters are untrusted: they may name an architecture, never
    make timm download or read weights or a config (``hf-hub:``/``local-dir:`` names,
    ``pretrained``, ``checkpoint_path``, ...)."""
    if not isinstance(model_name, str):
        raise TypeError(f"model_name must be a str, got {type(model_name).__name__}")
    if ":" in model_name:
        raise ValueError(f"model_name={model_name!r} must be a timm architecture name such as "
                         f"'vit_tiny_patch16_224' (no 'hf-hub:'/'local-dir:' source: models "
                         f"are built untrained, nothing is downloaded or read)")
    if model_kwargs is None:
        return
    if not isinstance(model_kwargs, dict):
        raise TypeError(f"model_kwargs must be a dict of timm.create_model keywords, got "
                        f"{type(model_kwargs).__name__} ({model_kwargs!r})")
    reserved = sorted(k for k in model_kwargs if k in _RESERVED_MODEL_KWARGS)
    if reserved:
        raise ValueError(f"model_kwargs may not set {reserved}: models are built untrained "
                         f"with dynamic image sizes, nothing is downloaded or read")
    own = sorted(k for k in model_kwargs if k in _OWN_ARGUMENTS)
    if own:
        raise ValueError(f"model_kwargs may not set {own}: they are ImageClassifier's own "
                         f"arguments (set them there, so the checks and the hparams see them)")


class ImageClassifier(LightningModule):
    """Image classification with a ViT whose position encoding is one config line.

    Args:
        model_name: timm ViT architecture (``vit_*``, ``deit_*``); built with
            ``pretrained=False`` and the sizes below overriding the architecture's.
        encoding: spatial encoding: a name from ``posenc.spatial.ENCODINGS`` (``none``,
            ``learned``, ``rope_mixed``, ...; a wrong one lists them) or
            ``{class_path, init_args}``, whose ``init_args`` reach the encoding as given,
            e.g. DINOv3's training-time coordinate augmentation ``{class_path:
            posenc.spatial.RoPE2D, init_args: {normalize: unit, rescale_coords: 2.0}}``
            (``shift_coords``/``jitter_coords``/``rescale_coords``: training mode only, so
            validation and test see the plain coordinates).
        num_classes: output classes.
        in_chans: image channels.
        img_size: training image size (the model runs at any multiple of ``patch_size``).
        patch_size: ViT patch size.
        embed_dim: token width.
        depth: transformer blocks.
        num_heads: attention heads.
        mlp_ratio: MLP hidden width / ``embed_dim``.
        class_token: use a class token (else ``global_pool`` must be ``"avg"``).
        global_pool: ``"token"`` (class token) or ``"avg"`` (mean of patch tokens).
        drop_path_rate: stochastic depth.
        model_kwargs: further ``timm.create_model`` keywords (e.g. ``reg_tokens: 4``); not
            the arguments above, nor ones that load weights (``pretrained``,
            ``checkpoint_path``, ...): models are built untrained, nothing is downloaded.
        lr: AdamW's peak learning rate.
        weight_decay: AdamW's weight decay (position parameters get none).
        warmup: fraction of training steps with linear warmup.
        scheduler: ``"cosine"`` or ``"constant"`` after warmup.
        min_lr_ratio: final learning rate of the cosine, relative to ``lr``.
        label_smoothing: cross-entropy label smoothing.
    """

    def __init__(
        self,
        model_name: str = "vit_tiny_patch16_224",
        encoding: str | dict = "learned",
        num_classes: int = 10,
        in_chans: int = 1,
        img_size: int = 28,
        patch_size: int = 7,
        embed_dim: int = 64,
        depth: int = 4,
        num_heads: int = 4,
        mlp_ratio: float = 2.0,
        class_token: bool = True,
        global_pool: str = "token",
        drop_path_rate: float = 0.0,
        model_kwargs: dict | None = None,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        warmup: float = 0.05,
        scheduler: str = "cosine",
        min_lr_ratio: float = 0.0,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        for name in ("num_classes", "in_chans", "img_size", "patch_size", "embed_dim", "depth",
                     "num_heads"):
            check_positive_int(locals()[name], name)
        check_optim_args(lr, weight_decay, warmup, scheduler, min_lr_ratio)
        check_positive_float(mlp_ratio, "mlp_ratio")
        check_float(drop_path_rate, "drop_path_rate", ge=0, lt=1)
        check_float(label_smoothing, "label_smoothing", ge=0, lt=1)
        check_bool(class_token, "class_token")
        check_choice(global_pool, "global_pool", GLOBAL_POOLS)
        if global_pool == "token" and not class_token:
            raise ValueError("global_pool='token' needs class_token=True; use "
                             "global_pool='avg' without a class token")
        _check_timm_source(model_name, model_kwargs)
        self.model = build_vit(
            model_name, encoding, num_classes=num_classes, in_chans=in_chans,
            img_size=img_size, patch_size=patch_size, embed_dim=embed_dim, depth=depth,
            num_heads=num_heads, mlp_ratio=mlp_ratio, class_token=class_token,
            global_pool=global_pool, drop_path_rate=drop_path_rate, model_kwargs=model_kwargs)
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        # One accuracy and one mean loss per (stage, image size), created on first use: the
        # sizes are whatever the data module's evaluation loaders deliver.
        self.eval_metrics = nn.ModuleDict()

    def forward(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` images, ``H`` and ``W`` multiples of the patch -> ``(B, classes)``."""
        return self.model(images)

    # -- checks against the data -------------------------------------------------------------
    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer else None
        if datamodule is None:
            return
        hp = self.hparams
        for attr, mine in (("num_classes", hp.num_classes), ("in_chans", hp.in_chans)):
            theirs = getattr(datamodule, attr, None)
            if theirs is not None and theirs != mine:
                raise ValueError(f"model {attr}={mine} does not match the data module's "
                                 f"{attr}={theirs} ({type(datamodule).__name__})")
        sizes = [("image_size", getattr(datamodule, "image_size", None))] + [
            (f"eval_image_sizes[{i}]", s)
            for i, s in enumerate(getattr(datamodule, "eval_image_sizes", None) or [])]
        for name, size in sizes:
            sides = size if isinstance(size, (tuple, list)) else [size]
            if size is not None and any(side % hp.patch_size for side in sides):
                raise ValueError(f"data {name}={size} is not divisible by the model's "
                                 f"patch_size={hp.patch_size}")

    # -- steps ---------------------------------------------------------------------------------
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels, label_smoothing=self.hparams.label_smoothing)
        self.train_acc(logits.detach(), labels)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        return loss

    def _metrics(self, stage: str, size: str) -> nn.ModuleDict:
        key = f"{stage}_{size}"
        if key not in self.eval_metrics:
            self.eval_metrics[key] = nn.ModuleDict({
                "acc": MulticlassAccuracy(self.hparams.num_classes, average="micro"),
                "loss": MeanMetric(),
            }).to(self.device)
        return self.eval_metrics[key]

    def _eval_step(self, stage: str, batch: tuple[Tensor, Tensor]) -> None:
        images, labels = batch
        height, width = images.shape[-2:]
        size = str(height) if height == width else f"{height}x{width}"
        logits = self(images)
        metrics = self._metrics(stage, size)
        metrics["acc"].update(logits, labels)
        metrics["loss"].update(F.cross_entropy(logits.float(), labels, reduction="none"))

    def validation_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step("val", batch)

    def test_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step("test", batch)

    def predict_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> Tensor:
        """Class probabilities ``(B, num_classes)``."""
        images = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self(images).float().softmax(-1)

    def _log_eval(self, stage: str) -> None:
        train_size = str(self.hparams.img_size)
        keys = sorted(k for k in self.eval_metrics if k.startswith(f"{stage}_"))
        sizes = [k[len(stage) + 1:] for k in keys]
        main = train_size if train_size in sizes else (sizes[0] if sizes else None)
        for key, size in zip(keys, sizes, strict=True):
            metrics = self.eval_metrics[key]
            # compute() gathers the states of every rank, so all ranks log the same numbers.
            acc, loss = metrics["acc"].compute(), metrics["loss"].compute()
            self.log(f"{stage}/acc_{size}", acc, sync_dist=True)
            self.log(f"{stage}/loss_{size}", loss, sync_dist=True)
            if size == main:
                self.log(f"{stage}/acc", acc, prog_bar=True, sync_dist=True)
                self.log(f"{stage}/loss", loss, sync_dist=True)
            metrics["acc"].reset()
            metrics["loss"].reset()

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val")

    def on_test_epoch_end(self) -> None:
        self._log_eval("test")

    def configure_optimizers(self) -> dict:
        return configure_adamw_from_hparams(self)

