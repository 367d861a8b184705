"""ONNX export of a trained posenc model, run by ``posenc export``::

    posenc export --config configs/vit_mnist.yaml --ckpt_path last.ckpt --out model.onnx

Written by ``torch.onnx.export(..., dynamo=True)`` (``pip install posenc[onnx]``) in eval mode,
traced with an example input from the data module.

- [`ImageClassifier`][posenc.tasks.ImageClassifier]: input ``images`` ``(B, in_chans, H, W)``
  float32, ``H`` and ``W`` multiples of ``patch_size`` (at least two patches); output ``logits``
  ``(B, num_classes)`` float32. ``B``, ``H``, ``W`` dynamic.
- [`VideoClassifier`][posenc.tasks.VideoClassifier]: inputs ``video`` ``(B, T, in_chans, H, W)``
  float32 and ``frame_times`` ``(B, T)`` float32 seconds (not read with ``frame_time="index"``);
  output ``logits`` ``(B, num_classes)``. ``B``, ``T`` (at least 2), ``H``, ``W`` dynamic.
- [`Forecaster`][posenc.tasks.Forecaster]: inputs
  [`forecast_input_names`][posenc.tasks.export.forecast_input_names], each shaped and typed as in a
  [`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule] batch; output ``quantiles``
  ``(B, Nh, C, Q)`` float32 in data units (``Forecaster.predict_step``'s; ``Q = 1`` for point
  losses). ``B``, the context length and the horizon (axis 1 of ``context_*``/``target_*``) dynamic.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from torch import Tensor, nn
from torch.export import Dim

from .config import read_checkpoint
from .forecasting import Forecaster
from .forecasting.schema import Fitted
from .vision import ImageClassifier, VideoClassifier

__all__ = ["export_onnx", "forecast_input_names"]

# Upper bound of the dynamic axes (torch.export needs one; ONNX does not keep it).
_MAX = 1 << 20


def forecast_input_names(model: Forecaster) -> list[str]:
    """The ONNX input names of an exported ``model``, in order: the batch keys its network
    reads, then ``loc`` and ``scale`` (which a ``nonnegative`` network reads itself)."""
    keys = model.model.input_keys()
    return keys + [key for key in ("loc", "scale") if key not in keys]


class _Forecasts(nn.Module):
    """A Forecaster's forecasts in data units, from the tensors it reads."""

    def __init__(self, forecaster: Forecaster) -> None:
        super().__init__()
        self.forecaster = forecaster

    def forward(self, batch: Mapping[str, Tensor]) -> Tensor:
        return self.forecaster._unscale(self.forecaster(batch).float(), batch)


def _image_export(model: ImageClassifier) -> tuple[nn.Module, dict, dict, list[str], str]:
    hp = model.hparams
    patch = hp.patch_size
    side = max(hp.img_size // patch, 2) * patch  # a 1-patch example would pin the size to 1
    images = torch.zeros(2, hp.in_chans, side, side)
    rows, cols = Dim("rows", min=2, max=_MAX), Dim("cols", min=2, max=_MAX)
    shapes = {"images": {0: Dim("batch", min=1, max=_MAX), 2: patch * rows, 3: patch * cols}}
    return model, {"images": images}, shapes, ["images"], "logits"


def _video_export(model: VideoClassifier) -> tuple[nn.Module, dict, dict, list[str], str]:
    hp = model.hparams
    patch = hp.patch_size
    side = max(hp.img_size // patch, 2) * patch
    video = torch.zeros(2, 3, hp.in_chans, side, side)  # 3 frames: none of the axes pinned
    times = torch.tensor([[0.0, 0.1, 0.3], [0.0, 0.2, 0.25]])
    batch, frames = Dim("batch", min=1, max=_MAX), Dim("frames", min=2, max=_MAX)
    rows, cols = Dim("rows", min=2, max=_MAX), Dim("cols", min=2, max=_MAX)
    shapes = {"video": {0: batch, 1: frames, 3: patch * rows, 4: patch * cols},
              "frame_times": {0: batch, 1: frames}}
    return (model, {"video": video, "frame_times": times}, shapes, ["video", "frame_times"],
            "logits")


def _forecast_export(model: Forecaster, datamodule: LightningDataModule | None
                     ) -> tuple[nn.Module, dict, dict, list[str], str]:
    if datamodule is None or not hasattr(datamodule, "val_dataloader"):
        raise ValueError("exporting a Forecaster needs its data module (the config's data) "
                         "for an example batch of its windows")
    state = getattr(datamodule, "fitted", None)
    if model.fitted is not None and isinstance(state, Fitted):  # an example of the model's data
        model.fitted.check_data(state)
    datamodule.setup("validate")
    batch = next(iter(datamodule.val_dataloader()))
    names = forecast_input_names(model)
    example = {name: batch[name] for name in names}
    if len(batch["context_valid"]) < 2:  # a batch of 1 would pin B to 1
        example = {name: torch.cat((t, t)) for name, t in example.items()}
    size, context, horizon = (Dim(name, min=1, max=_MAX) for name in ("batch", "context",
                                                                        "horizon"))

    def axes(name: str) -> dict[int, Dim]:
        length = context if name.startswith("context_") else (
            horizon if name.startswith("target_") else None)
        # A length of 1 in the example stays static (tracing would pin it to 1 anyway).
        if length is None or example[name].shape[1] < 2:
            return {0: size}
        return {0: size, 1: length}

    return (_Forecasts(model), {"batch": example},
            {"batch": {name: axes(name) for name in names}}, names, "quantiles")


def _check_exportable(model: ImageClassifier) -> None:
    """Refuse, by name, what cannot enter an ONNX graph of dynamic image sizes (the exporter
    would fail with an unrelated message)."""
    from posenc.spatial import RelativeBias2D

    for name, module in model.named_modules():
        if isinstance(module, RelativeBias2D) and module.resize == "geometric":
            raise ValueError(f"{name} is RelativeBias2D(resize='geometric'): BEiT's geometric "
                             f"table resize is a Python bisection over the grid size, which no "
                             f"ONNX operator (any opset) expresses for a dynamic image size; "
                             f"export with resize='bicubic'")


def export_onnx(model: LightningModule, out: str | os.PathLike,
                ckpt_path: str | os.PathLike | None = None,
                datamodule: LightningDataModule | None = None) -> Path:
    """Write ``model`` (an [`ImageClassifier`][posenc.tasks.ImageClassifier],
    [`VideoClassifier`][posenc.tasks.VideoClassifier] or [`Forecaster`][posenc.tasks.Forecaster])
    as an ONNX graph to ``out`` (see the module docstring); returns its path.

    Args:
        model: the model, built as the checkpoint's was.
        out: the ``.onnx`` file to write (its folder is made).
        ckpt_path: a checkpoint whose ``state_dict`` is loaded into ``model`` first
            ([`posenc.tasks.config.read_checkpoint`][posenc.tasks.config.read_checkpoint]); None:
            the weights as they are.
        datamodule: the model's data module (a Forecaster's example batch comes from it).
    """
    if not isinstance(model, (ImageClassifier, Forecaster)):
        raise TypeError(f"posenc export writes an ImageClassifier or a Forecaster, got "
                        f"{type(model).__name__}")
    if not os.fspath(out):
        raise ValueError("out is an empty path; give the .onnx file to write")
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"out={str(out)!r} is a directory; give the .onnx file to write")
    if ckpt_path is not None:
        ckpt = read_checkpoint(ckpt_path, "--ckpt_path")
        if not isinstance(ckpt.get("state_dict"), Mapping):
            raise ValueError(f"--ckpt_path={os.fspath(ckpt_path)!r} holds no state_dict (not "
                             f"a Lightning checkpoint)")
        try:
            model.load_state_dict(ckpt["state_dict"])
        except RuntimeError as err:
            first = str(err).splitlines()[0]
            raise ValueError(f"--ckpt_path={os.fspath(ckpt_path)!r} does not hold this "
                             f"{type(model).__name__}'s weights ({first})") from err
        model.on_load_checkpoint(ckpt)
    model = model.cpu().eval()
    if isinstance(model, VideoClassifier):
        module, inputs, shapes, names, output = _video_export(model)
    elif isinstance(model, ImageClassifier):
        _check_exportable(model)
        module, inputs, shapes, names, output = _image_export(model)
    else:
        module, inputs, shapes, names, output = _forecast_export(model, datamodule)
    out.parent.mkdir(parents=True, exist_ok=True)
    program = torch.onnx.export(module, (), kwargs=inputs, dynamo=True,
                                dynamic_shapes=shapes, input_names=names,
                                output_names=[output], verbose=False)
    program.save(out)
    return out
