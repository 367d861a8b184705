"""``ImageClassifier``: a timm Vision Transformer with a posenc spatial encoding attached.

The encoding is a config value (a name from [`posenc.spatial.ENCODINGS`][posenc.spatial.ENCODINGS]
or ``{class_path, init_args}``) whose sizes are filled in from the ViT, placed per block as
[`posenc.spatial.attach`][posenc.spatial.attach] places it. Validation and test run at every image
size the data module provides and log ``{stage}/acc_{size}`` and ``{stage}/loss_{size}``
(``{stage}/acc`` and ``{stage}/loss``: the training size). Fine-tuning: pretrained weights (never
saved in, nor taken from, a checkpoint), layer-wise learning-rate decay, a learning rate of the
encoding's own, and a warm-up training only the encoding and the head.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch.nn.functional as F
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities import rank_zero_info
from posenc.core._checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_positive_float,
    check_positive_int,
)
from torch import Tensor, nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from ..config import (
    WEIGHT_SOURCES,
    CheckedCheckpointLoading,
    check_finetune_args,
    check_optim_args,
    configure_adamw,
    finetune_param_groups,
    instantiate,
    position_parameter_names,
)

__all__ = ["ImageClassifier", "build_vit", "create_vit", "encoding_modules"]


def create_vit(model_name: str, *, num_classes: int, in_chans: int, img_size: int,
               patch_size: int, embed_dim: int, depth: int, num_heads: int, mlp_ratio: float,
               class_token: bool, global_pool: str, drop_path_rate: float,
               model_kwargs: dict | None = None, pretrained: bool = False,
               pretrained_cfg_overlay: dict | None = None) -> nn.Module:
    """``timm.create_model(model_name, ...)`` with these sizes and dynamic image sizes, before
    an encoding is attached; ``pretrained``/``pretrained_cfg_overlay`` go to timm."""
    import timm

    if img_size % patch_size:
        raise ValueError(f"img_size={img_size} must be divisible by patch_size={patch_size}")
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
    kwargs: dict[str, Any] = dict(
        pretrained=pretrained, num_classes=num_classes, in_chans=in_chans, img_size=img_size,
        patch_size=patch_size, embed_dim=embed_dim, depth=depth, num_heads=num_heads,
        mlp_ratio=mlp_ratio, class_token=class_token, global_pool=global_pool,
        drop_path_rate=drop_path_rate, dynamic_img_size=True)
    if pretrained_cfg_overlay is not None:
        kwargs["pretrained_cfg_overlay"] = pretrained_cfg_overlay
    kwargs.update(model_kwargs or {})
    try:
        model = timm.create_model(model_name, **kwargs)
    except RuntimeError as err:  # timm: "Unknown model (...)"
        raise ValueError(f"model_name={model_name!r}: {err}") from err
    return model


def encoding_modules(spec: dict, model: nn.Module) -> nn.Module | list[nn.Module]:
    """A ``{class_path, init_args}`` encoding built with its sizes from the timm ViT ``model``
    and placed per block as [`posenc.spatial.attach`][posenc.spatial.attach] places a name."""
    from posenc.spatial.factory import encodings_for_blocks, vit_size_arguments

    defaults = vit_size_arguments(model)
    return encodings_for_blocks(lambda: instantiate(spec, {}, "encoding", defaults=defaults),
                                len(model.blocks))


def build_vit(model_name: str, encoding: str | dict, *, num_classes: int, in_chans: int,
              img_size: int, patch_size: int, embed_dim: int, depth: int, num_heads: int,
              mlp_ratio: float, class_token: bool, global_pool: str, drop_path_rate: float,
              model_kwargs: dict | None = None, pretrained: bool = False,
              pretrained_cfg_overlay: dict | None = None,
              checkpoint_path: str | os.PathLike | None = None) -> nn.Module:
    """[`create_vit`][posenc.tasks.vision.classifier.create_vit] + ``posenc.spatial.attach``.

    ``pretrained``/``pretrained_cfg_overlay`` go to timm, ``checkpoint_path`` to ``attach``. The
    model's ``attach_report`` names the new and dropped tensors (a head timm re-initialized too).
    """
    from posenc import spatial

    model = create_vit(
        model_name, num_classes=num_classes, in_chans=in_chans, img_size=img_size,
        patch_size=patch_size, embed_dim=embed_dim, depth=depth, num_heads=num_heads,
        mlp_ratio=mlp_ratio, class_token=class_token, global_pool=global_pool,
        drop_path_rate=drop_path_rate, model_kwargs=model_kwargs, pretrained=pretrained,
        pretrained_cfg_overlay=pretrained_cfg_overlay)
    if not isinstance(encoding, str):
        encoding = encoding_modules(encoding, model)
    model = spatial.attach(model, encoding, checkpoint_path=checkpoint_path)
    if pretrained and model.pretrained_cfg.get("num_classes") != num_classes:
        # timm's load_pretrained dropped the file's head and kept the new one's initialization
        head = tuple(n for n in model.state_dict() if n.split(".")[0] == "head")
        report = model.attach_report
        model.attach_report = dataclasses.replace(
            report, new=tuple(sorted({*report.new, *head})),
            dropped=tuple(sorted({*report.dropped, *head})))
    return model


# timm VisionTransformer's pooling modes.
GLOBAL_POOLS = ("token", "avg", "avgmax", "max", "map", "")
# create_model keywords that load weights or configs, or that ImageClassifier sets itself: not
# in model_kwargs (weight sources are ImageClassifier's own arguments).
_RESERVED_MODEL_KWARGS = ("pretrained", "pretrained_cfg", "pretrained_cfg_overlay",
                          "pretrained_strict", "checkpoint_path", "cache_dir",
                          "dynamic_img_size")
_OWN_ARGUMENTS = ("num_classes", "in_chans", "img_size", "patch_size", "embed_dim", "depth",
                  "num_heads", "mlp_ratio", "class_token", "global_pool", "drop_path_rate")


def _check_timm_source(model_name: object, model_kwargs: object) -> None:
    """Untrusted hyperparameters may name an architecture, never make timm download or read
    weights or a config (``hf-hub:``/``local-dir:`` names, ``pretrained``, ...)."""
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
        raise ValueError(f"model_kwargs may not set {reserved}: models are built with dynamic "
                         f"image sizes, and weights are loaded only by ImageClassifier's own "
                         f"pretrained/pretrained_cfg_overlay/checkpoint_path arguments")
    own = sorted(k for k in model_kwargs if k in _OWN_ARGUMENTS)
    if own:
        raise ValueError(f"model_kwargs may not set {own}: they are ImageClassifier's own "
                         f"arguments (set them there, so the checks and the hparams see them)")


class ImageClassifier(CheckedCheckpointLoading, LightningModule):
    """Image classification with a ViT whose position encoding is one config line.

    Args:
        model_name: timm ViT architecture (``vit_*``, ``deit_*``), the sizes below overriding
            the architecture's.
        encoding: a name from ``posenc.spatial.ENCODINGS`` (``none``, ``learned``,
            ``rope_mixed``, ...) or ``{class_path, init_args}``, e.g. ``{class_path:
            posenc.spatial.RoPE2D, init_args: {normalize: unit, rescale_coords: 2.0}}``.
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
        model_kwargs: further ``timm.create_model`` keywords (e.g. ``reg_tokens: 4``), neither
            the arguments above nor ones that load weights.
        pretrained: load timm's pretrained weights of ``model_name`` (with a tag,
            ``vit_small_patch16_224.augreg_in21k``); the sizes above must be the
            architecture's. A head of another ``num_classes`` is re-initialized.
        pretrained_cfg_overlay: timm's overrides of the pretrained config (``{file:
            path.pth}``, ``{num_classes: 10}``); needs ``pretrained=True``.
        checkpoint_path: a local timm weights file loaded by ``posenc.spatial.attach``; not
            with ``pretrained``. The three weight sources are not saved in the checkpoint's
            hyperparameters; ``model.attach_report`` names the new and dropped tensors.
        lr: AdamW's peak learning rate.
        weight_decay: AdamW's weight decay (position parameters get none).
        warmup: fraction of training steps with linear warmup.
        scheduler: ``"cosine"`` or ``"constant"`` after warmup.
        min_lr_ratio: final learning rate of the cosine, relative to ``lr``.
        label_smoothing: cross-entropy label smoothing.
        layer_decay: None, or layer-wise learning-rate decay in ``(0, 1]``
            ([`finetune_param_groups`][posenc.tasks.config.finetune_param_groups]).
        position_lr: None, or the peak learning rate of the encoding's parameters (no layer
            decay).
        freeze_steps: train only the encoding's parameters and the head for the first
            ``freeze_steps`` optimizer steps (the others get no update, not even weight decay).
        freeze_epochs: the same for the first ``freeze_epochs`` epochs (not with
            ``freeze_steps``).
    """

    def __init__(
        self, model_name: str = "vit_tiny_patch16_224", encoding: str | dict = "learned",
        num_classes: int = 10, in_chans: int = 1, img_size: int = 28, patch_size: int = 7,
        embed_dim: int = 64, depth: int = 4, num_heads: int = 4, mlp_ratio: float = 2.0,
        class_token: bool = True, global_pool: str = "token", drop_path_rate: float = 0.0,
        model_kwargs: dict | None = None,
        lr: float = 1e-3, weight_decay: float = 0.05, warmup: float = 0.05,
        scheduler: str = "cosine", min_lr_ratio: float = 0.0, label_smoothing: float = 0.0,
        pretrained: bool = False, pretrained_cfg_overlay: dict | None = None,
        checkpoint_path: str | None = None, layer_decay: float | None = None,
        position_lr: float | None = None, freeze_steps: int = 0, freeze_epochs: int = 0,
    ) -> None:
        super().__init__()
        # They read files or reach the network: a checkpoint never stores them.
        self.save_hyperparameters(ignore=list(WEIGHT_SOURCES))
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
        _check_weight_sources(pretrained, pretrained_cfg_overlay, checkpoint_path)
        check_finetune_args(layer_decay, position_lr)
        check_int(freeze_steps, "freeze_steps", ge=0)
        check_int(freeze_epochs, "freeze_epochs", ge=0)
        if freeze_steps and freeze_epochs:
            raise ValueError(f"give freeze_steps={freeze_steps} or freeze_epochs="
                             f"{freeze_epochs}, not both")
        self.model = self.build_model(
            model_name, encoding, num_classes=num_classes, in_chans=in_chans,
            img_size=img_size, patch_size=patch_size, embed_dim=embed_dim, depth=depth,
            num_heads=num_heads, mlp_ratio=mlp_ratio, class_token=class_token,
            global_pool=global_pool, drop_path_rate=drop_path_rate, model_kwargs=model_kwargs,
            pretrained=pretrained, pretrained_cfg_overlay=pretrained_cfg_overlay,
            checkpoint_path=checkpoint_path)
        if pretrained or checkpoint_path is not None:
            rank_zero_info(f"ImageClassifier: {self.model.attach_report}")  # in the run's log
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        # One accuracy and mean loss per (stage, image size the loaders deliver), made on use.
        self.eval_metrics = nn.ModuleDict()

    def build_model(self, model_name: str, encoding: str | dict, **kwargs: Any) -> nn.Module:
        """The network: [`build_vit`][posenc.tasks.vision.classifier.build_vit] of the checked
        arguments."""
        return build_vit(model_name, encoding, **kwargs)

    def backbone(self) -> tuple[str, nn.Module]:
        """The timm ``VisionTransformer`` the network is (its name in this module and itself):
        its head, blocks and ``group_matcher`` serve fine-tuning."""
        return "model", self.model

    def forward(self, images: Tensor) -> Tensor:
        """``(B, C, H, W)`` images, ``H`` and ``W`` multiples of the patch -> ``(B, classes)``."""
        return self.model(images)

    def unpack(self, batch: Any) -> tuple[tuple[Tensor, ...], Tensor | None, str]:
        """A batch -> (the inputs of `forward`, labels or None, the name of its evaluation
        setting: the image size, ``"28"`` or ``"28x44"``)."""
        images, labels = ((batch[0], batch[1]) if isinstance(batch, (tuple, list))
                          else (batch, None))
        height, width = images.shape[-2:]
        return (images,), labels, str(height) if height == width else f"{height}x{width}"

    def main_setting(self) -> str:
        """The evaluation setting logged also as ``{stage}/acc``: the training image size."""
        return str(self.hparams.img_size)

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
    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        inputs, labels, _ = self.unpack(batch)
        logits = self(*inputs)
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

    def _eval_step(self, stage: str, batch: Any) -> None:
        inputs, labels, size = self.unpack(batch)
        logits = self(*inputs)
        metrics = self._metrics(stage, size)
        metrics["acc"].update(logits, labels)
        metrics["loss"].update(F.cross_entropy(logits.float(), labels, reduction="none"))

    def validation_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step("val", batch)

    def test_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        self._eval_step("test", batch)

    def predict_step(self, batch, batch_idx: int, dataloader_idx: int = 0) -> Tensor:
        """Class probabilities ``(B, num_classes)``."""
        inputs, _, _ = self.unpack(batch)
        return self(*inputs).float().softmax(-1)

    def _log_eval(self, stage: str) -> None:
        train_size = self.main_setting()
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

    # -- fine-tuning --------------------------------------------------------------------------
    def frozen_parameter_names(self) -> set[str]:
        """Names of the parameters the freeze warm-up holds: all but the encoding's and the
        head's."""
        prefix, vit = self.backbone()
        keep = {f"{prefix}.{n}" for n in position_parameter_names(vit)}
        keep |= {f"{prefix}.head.{n}" for n, _ in vit.head.named_parameters()}
        return {n for n, _ in self.named_parameters()} - keep

    def in_freeze_warmup(self) -> bool:
        """Whether this optimizer step is in the ``freeze_steps``/``freeze_epochs`` warm-up."""
        hp = self.hparams
        return self.global_step < hp.freeze_steps or self.current_epoch < hp.freeze_epochs

    def on_before_optimizer_step(self, optimizer) -> None:
        # No gradient, so no AdamW update, weight decay or moment state. They are still
        # computed, so every step runs the same graph (DDP needs no unused-parameter search).
        if not self.in_freeze_warmup():
            return
        frozen = self.frozen_parameter_names()
        for name, param in self.named_parameters():
            if name in frozen:
                param.grad = None

    def configure_optimizers(self) -> dict:
        hp = self.hparams
        groups = finetune_param_groups(self.backbone()[1], hp.weight_decay, hp.lr,
                                       layer_decay=hp.layer_decay, position_lr=hp.position_lr)
        return configure_adamw(self, hp.lr, hp.weight_decay, hp.warmup, hp.scheduler,
                               hp.min_lr_ratio, groups=groups)


def _check_weight_sources(pretrained: object, pretrained_cfg_overlay: object,
                          checkpoint_path: object) -> None:
    """``pretrained`` a bool, ``pretrained_cfg_overlay`` a dict (only with ``pretrained``),
    ``checkpoint_path`` a path (not with it)."""
    check_bool(pretrained, "pretrained")
    if pretrained_cfg_overlay is not None:
        if not isinstance(pretrained_cfg_overlay, dict):
            raise TypeError(f"pretrained_cfg_overlay must be a dict of timm pretrained-config "
                            f"entries (e.g. {{'file': 'vit.pth'}}), got "
                            f"{type(pretrained_cfg_overlay).__name__}")
        if not pretrained:
            raise ValueError("pretrained_cfg_overlay needs pretrained=True (timm reads it only "
                             "when loading pretrained weights)")
    if checkpoint_path is not None:
        if not isinstance(checkpoint_path, (str, os.PathLike)) or not os.fspath(checkpoint_path):
            raise TypeError(f"checkpoint_path must be a non-empty path to a timm weights file, "
                            f"got {checkpoint_path!r}")
        if pretrained:
            raise ValueError("give checkpoint_path (a local timm weights file) or "
                             "pretrained=True (timm's pretrained weights), not both")

