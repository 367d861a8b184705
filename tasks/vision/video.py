"""``VideoClassifier``: an [`ImageClassifier`][posenc.tasks.ImageClassifier] over clips, a timm ViT
with a 3D space-time encoding
([`VideoVisionTransformer`][posenc.spatial.VideoVisionTransformer]).

Batches are [`ClipBatch`][posenc.tasks.vision.clips.ClipBatch] es: ``(B, T, C, H, W)`` clips and
their ``(B, T)`` frame times in seconds. The encoding reads ``t`` from the real frame times
(``frame_time="real"``, ``t = seconds * time_scale``) or from the frame index
(``frame_time="index"``, ``t = 0, 1, ..., T - 1``, as if the frames were evenly spaced).
Validation and test log ``{stage}/acc_{setting}`` per evaluation setting of the data module
(``1x``, ``rate2x``, ``len2x``; ``{stage}/acc``: ``1x``). Training, optimizer and fine-tuning
options are [`ImageClassifier`][posenc.tasks.ImageClassifier]'s (no pretrained weights: timm has
none for clips).
"""

from __future__ import annotations

from typing import Any

from posenc.core._checks import check_choice, check_positive_float
from torch import Tensor, nn

from .classifier import ImageClassifier, create_vit, encoding_modules
from .clips import ClipBatch

__all__ = ["FRAME_TIMES", "VideoClassifier"]

FRAME_TIMES = ("real", "index")
"""Where the encoding's ``t`` comes from: the real frame times, or the frame index."""


class VideoClassifier(ImageClassifier):
    """Clip classification with a ViT whose 3D position encoding is one config line.

    Args:
        model_name: timm ViT architecture, the sizes below overriding the architecture's.
        encoding: a name from ``posenc.spatial.VIDEO_ENCODINGS`` (``none``, ``sincos3d``,
            ``rope3d_axial``, ``rope3d_mixed``, ``mrope``) or ``{class_path, init_args}`` (e.g.
            ``{class_path: posenc.spatial.MRoPE, init_args: {sections: [2, 3, 3]}}``).
        frame_time: ``"real"``: ``t`` is the frame time in seconds times ``time_scale``;
            ``"index"``: ``t`` is the frame's index in the clip (the times are not read).
        time_scale: multiplies the frame times (``"real"`` only), e.g. the training frame rate,
            so that ``t`` advances about one per frame as the index does.
        num_classes: output classes.
        in_chans: frame channels.
        img_size: training frame size (the model runs at any multiple of ``patch_size``).
        patch_size: ViT patch size (per frame).
        embed_dim: token width.
        depth: transformer blocks.
        num_heads: attention heads.
        mlp_ratio: MLP hidden width / ``embed_dim``.
        class_token: use a class token (else ``global_pool`` must be ``"avg"``).
        global_pool: ``"token"`` (class token) or ``"avg"`` (mean of all patch tokens).
        drop_path_rate: stochastic depth.
        model_kwargs: further ``timm.create_model`` keywords.
        lr: AdamW's peak learning rate.
        weight_decay: AdamW's weight decay (position parameters get none).
        warmup: fraction of training steps with linear warmup.
        scheduler: ``"cosine"`` or ``"constant"`` after warmup.
        min_lr_ratio: final learning rate of the cosine, relative to ``lr``.
        label_smoothing: cross-entropy label smoothing.
        layer_decay: None, or layer-wise learning-rate decay in ``(0, 1]``.
        position_lr: None, or the peak learning rate of the encoding's parameters.
        freeze_steps: train only the encoding and the head for the first ``freeze_steps`` steps.
        freeze_epochs: the same for the first ``freeze_epochs`` epochs.
    """

    def __init__(
        self, model_name: str = "vit_tiny_patch16_224", encoding: str | dict = "rope3d_mixed",
        frame_time: str = "real", time_scale: float = 1.0, num_classes: int = 8,
        in_chans: int = 1, img_size: int = 24, patch_size: int = 4, embed_dim: int = 64,
        depth: int = 2, num_heads: int = 4, mlp_ratio: float = 2.0, class_token: bool = False,
        global_pool: str = "avg", drop_path_rate: float = 0.0, model_kwargs: dict | None = None,
        lr: float = 1e-3, weight_decay: float = 0.05, warmup: float = 0.05,
        scheduler: str = "cosine", min_lr_ratio: float = 0.0, label_smoothing: float = 0.0,
        layer_decay: float | None = None, position_lr: float | None = None,
        freeze_steps: int = 0, freeze_epochs: int = 0,
    ) -> None:
        # Read by build_model, which the base class calls.
        self._frame_time = check_choice(frame_time, "frame_time", FRAME_TIMES)
        self._time_scale = check_positive_float(time_scale, "time_scale")
        super().__init__(
            model_name=model_name, encoding=encoding, num_classes=num_classes,
            in_chans=in_chans, img_size=img_size, patch_size=patch_size, embed_dim=embed_dim,
            depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio, class_token=class_token,
            global_pool=global_pool, drop_path_rate=drop_path_rate, model_kwargs=model_kwargs,
            lr=lr, weight_decay=weight_decay, warmup=warmup, scheduler=scheduler,
            min_lr_ratio=min_lr_ratio, label_smoothing=label_smoothing, layer_decay=layer_decay,
            position_lr=position_lr, freeze_steps=freeze_steps, freeze_epochs=freeze_epochs)

    def build_model(self, model_name: str, encoding: str | dict, *, checkpoint_path: None,
                    **kwargs: Any) -> nn.Module:
        """A [`VideoVisionTransformer`][posenc.spatial.VideoVisionTransformer] over
        [`create_vit`][posenc.tasks.vision.classifier.create_vit] of the checked arguments."""
        from posenc.spatial import VideoVisionTransformer

        vit = create_vit(model_name, **kwargs)
        if not isinstance(encoding, str):
            encoding = encoding_modules(encoding, vit)
        scale = self._time_scale if self._frame_time == "real" else 1.0
        return VideoVisionTransformer(vit, encoding, time_scale=scale)

    def backbone(self) -> tuple[str, nn.Module]:
        return "model.vit", self.model.vit

    def forward(self, video: Tensor, frame_times: Tensor | None = None) -> Tensor:
        """``(B, T, C, H, W)`` clips and their ``(B, T)`` or ``(T,)`` frame times in seconds
        -> ``(B, classes)``; with ``frame_time="index"`` the times are not read (None is
        fine)."""
        return self.model(video, frame_times if self._frame_time == "real" else None)

    def unpack(self, batch: Any) -> tuple[tuple[Tensor, ...], Tensor | None, str]:
        """A [`ClipBatch`][posenc.tasks.vision.clips.ClipBatch] -> ``((video, frame_times),
        labels, variant)``."""
        if not isinstance(batch, ClipBatch):
            raise TypeError(f"VideoClassifier reads ClipBatch batches (video, frame_times, "
                            f"labels, variant), got {type(batch).__name__}")
        return (batch.video, batch.frame_times), batch.labels, batch.variant

    def main_setting(self) -> str:
        """The training setting, ``"1x"``."""
        return "1x"
