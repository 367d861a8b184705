"""Fine-tuning an ImageClassifier from a timm weights file: the weight sources, layer-wise
learning-rate decay, a learning rate for the encoding, the freeze warm-up, and the shipped
configs/finetune_mnist.yaml run end to end (tiny)."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Callback
from posenc.spatial import timm_state_dict
from posenc.tasks import DigitsDataModule, ImageClassifier
from posenc.tasks.cli import posenc_cli
from posenc.tasks.config import finetune_param_groups

from ..conftest import CONFIGS, ONE_EPOCH, cpu_trainer

TINY = {"img_size": 8, "patch_size": 4, "embed_dim": 16, "num_heads": 2}


def _lr_of(model, name: str, lr: float, depth: int, decay: float, position_lr: float) -> float:
    """The learning rate layer-wise decay gives parameter ``name`` of a ViT of ``depth``
    blocks, written out from BEiT's rule and timm's ViT grouping (stem = layer 0, block i =
    layer i + 1, the final norm with the last block, the head = layer depth + 1)."""
    if ".rotary." in name:
        return position_lr
    if name.startswith(("patch_embed.", "cls_token")):
        layer = 0
    elif name.startswith("blocks."):
        layer = int(name.split(".")[1]) + 1
    elif name.startswith("norm."):
        layer = depth
    else:
        assert name.startswith("head."), name
        layer = depth + 1
    return lr * decay ** (depth + 1 - layer)


def test_layer_decay_and_position_lr_give_each_parameter_its_rate():
    depth, lr, decay, position_lr = 3, 2e-3, 0.6, 7e-3
    model = ImageClassifier(encoding="rope_mixed", depth=depth, **TINY).model
    groups = finetune_param_groups(model, 0.05, lr, layer_decay=decay, position_lr=position_lr)
    by_id = {id(p): g for g in groups for p in g["params"]}
    names = [n for n, _ in model.named_parameters()]
    assert len(by_id) == len(names) == sum(len(g["params"]) for g in groups)
    for name, param in model.named_parameters():
        group = by_id[id(param)]
        assert group["lr"] == pytest.approx(_lr_of(model, name, lr, depth, decay, position_lr),
                                            rel=1e-12), name
        decayed = param.ndim > 1 and ".rotary." not in name and name != "cls_token"
        assert group["weight_decay"] == (0.05 if decayed else 0.0), name
    assert by_id[id(model.blocks[0].attn.qkv.weight)]["lr"] == pytest.approx(2e-3 * 0.6 ** 3)


def test_without_layer_decay_position_lr_alone_splits_the_encoding_off():
    model = ImageClassifier(encoding="relbias", depth=2, **TINY).model
    groups = finetune_param_groups(model, 0.05, 1e-3, position_lr=3e-3)
    tables = {id(b.attn.bias.table) for b in model.blocks}
    for group in groups:
        ids = {id(p) for p in group["params"]}
        assert group["lr"] == (3e-3 if ids <= tables else 1e-3)
        assert ids <= tables or ids.isdisjoint(tables)
    assert sum(g["lr"] == 3e-3 for g in groups) == 1


@pytest.mark.parametrize("kwargs, error, match", [
    ({"layer_decay": 0.0}, ValueError, "layer_decay"),
    ({"layer_decay": 1.5}, ValueError, r"layer_decay must be in \(0, 1\]"),
    ({"layer_decay": "0.7"}, TypeError, "layer_decay"),
    ({"position_lr": -1e-3}, ValueError, "position_lr"),
    ({"position_lr": float("nan")}, ValueError, "position_lr"),
    ({"freeze_steps": -1}, ValueError, "freeze_steps"),
    ({"freeze_epochs": 1.5}, TypeError, "freeze_epochs"),
    ({"freeze_steps": 2, "freeze_epochs": 1}, ValueError, "not both"),
    ({"pretrained": "yes"}, TypeError, "pretrained"),
    ({"pretrained_cfg_overlay": {"file": "x.pth"}}, ValueError, "needs pretrained=True"),
    ({"pretrained": True, "pretrained_cfg_overlay": ["x.pth"]}, TypeError,
     "pretrained_cfg_overlay must be a dict"),
    ({"pretrained": True, "checkpoint_path": "x.pth"}, ValueError, "not both"),
    ({"checkpoint_path": ""}, TypeError, "checkpoint_path must be a non-empty path"),
    ({"checkpoint_path": 3}, TypeError, "checkpoint_path must be a non-empty path"),
])
def test_bad_finetune_arguments_name_themselves(kwargs, error, match):
    with pytest.raises(error, match=match):
        ImageClassifier(**TINY, **kwargs)


class _Snapshots(Callback):
    """The module's parameters after every optimizer step."""

    def __init__(self) -> None:
        self.states: list[dict[str, torch.Tensor]] = []

    def on_train_start(self, trainer, module) -> None:
        self.states.append({n: p.detach().clone() for n, p in module.named_parameters()})

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.states.append({n: p.detach().clone() for n, p in module.named_parameters()})


@pytest.mark.parametrize("freeze", [{"freeze_steps": 2}, {"freeze_epochs": 1}])
def test_the_freeze_warmup_trains_only_encoding_and_head_then_everything(tmp_path, freeze):
    torch.manual_seed(0)
    model = ImageClassifier(encoding="rope_mixed", depth=2, lr=1e-2, **TINY, **freeze)
    snapshots = _Snapshots()
    trainer = cpu_trainer(tmp_path, max_epochs=2, limit_train_batches=2, limit_val_batches=0,
                          callbacks=[snapshots])
    trainer.fit(model, DigitsDataModule(batch_size=16, eval_image_sizes=[8]))
    first, *steps = snapshots.states
    assert len(steps) == 4
    trained = {f"model.blocks.{i}.attn.rotary.freqs" for i in range(2)}
    trained |= {"model.head.weight", "model.head.bias"}
    assert model.frozen_parameter_names() == set(first) - trained
    for state in steps[:2]:  # the warm-up: frozen exactly, the encoding and head move
        for name in model.frozen_parameter_names():
            torch.testing.assert_close(state[name], first[name], rtol=0, atol=0)
    for name in trained:
        assert not torch.equal(steps[1][name], first[name]), name
    moved = {n for n in model.frozen_parameter_names() if not torch.equal(steps[2][n], first[n])}
    assert moved == model.frozen_parameter_names()  # the step after it trains everything


def test_the_optimizer_runs_the_fine_tuning_rates(tmp_path):
    model = ImageClassifier(encoding="rope_mixed", depth=2, lr=1e-3, layer_decay=0.5,
                            position_lr=4e-3, scheduler="constant", warmup=0.0, **TINY)
    trainer = cpu_trainer(tmp_path, max_steps=1, limit_val_batches=0)
    trainer.fit(model, DigitsDataModule(batch_size=16, eval_image_sizes=[8]))
    names = {id(p): n for n, p in model.model.named_parameters()}
    for group in trainer.optimizers[0].param_groups:
        for param in group["params"]:
            assert group["lr"] == pytest.approx(
                _lr_of(model.model, names[id(param)], 1e-3, 2, 0.5, 4e-3), rel=1e-12)


@pytest.mark.slow
def test_finetune_mnist_config_runs_from_a_pretrained_file(tmp_path, monkeypatch):
    """The shipped recipe, tiny: pretrain the vit_mnist config (learned APE) a few steps, save
    it as a timm file, fine-tune with rope_mixed; the frozen weights are still the file's."""
    monkeypatch.chdir(tmp_path)
    tiny = ["--model.init_args.embed_dim=16", "--model.init_args.depth=2",
            "--model.init_args.num_heads=2", "--trainer.logger=false",
            "--trainer.callbacks=[]", "--trainer.enable_checkpointing=false",
            "--data.init_args.batch_size=16", "--data.init_args.eval_image_sizes=[28]",
            *ONE_EPOCH]
    pre = posenc_cli(["fit", "--config", str(CONFIGS / "vit_mnist.yaml"), *tiny])
    assert pre.model.hparams.encoding == "learned"
    weights = tmp_path / "vit_mnist_timm.pth"
    torch.save(timm_state_dict(pre.model.model), weights)
    saved = torch.load(weights, weights_only=True)

    fine = posenc_cli(["fit", "--config", str(CONFIGS / "finetune_mnist.yaml"), *tiny,
                       f"--model.init_args.checkpoint_path={weights}",
                       "--model.init_args.freeze_steps=2"])
    vit = fine.model.model
    report = vit.attach_report
    assert fine.model.hparams.encoding == "rope_mixed" and report.source == str(weights)
    assert report.new == ("blocks.0.attn.rotary.freqs", "blocks.1.attn.rotary.freqs")
    assert report.dropped == ("pos_embed",)
    assert fine.trainer.global_step == 2
    state = vit.state_dict()
    for name in set(state) - set(report.new) - {"head.weight", "head.bias"}:
        torch.testing.assert_close(state[name], saved[name], rtol=0, atol=0)  # frozen
    assert not torch.equal(state["head.weight"], saved["head.weight"])  # trained
    assert "test/acc_28" in fine.trainer.callback_metrics  # test_after_fit
