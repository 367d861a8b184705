"""AdamW with a warmup + cosine (or constant) schedule, shared by the task modules.

The settings are plain numbers in the module's constructor, so they land in the checkpoint's
hyperparameters. LightningCLI's own ``optimizer:`` / ``lr_scheduler:`` config keys still
override them when given.
"""

from __future__ import annotations

import math

import torch
from posenc.core.encoding import check_choice, check_positive_float, no_weight_decay_names
from torch import nn

__all__ = ["SCHEDULERS", "param_groups", "lr_factor", "configure_adamw",
           "configure_adamw_from_hparams"]

SCHEDULERS = ("cosine", "constant")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: weight decay for weight matrices only.

    No decay for 1D parameters (biases, norms) and for every parameter that a module of
    ``model`` names in its ``no_weight_decay()`` (timm's convention): posenc's encodings name
    all of theirs (learned tables, RoPE-Mixed frequencies, relative tables, cpb MLPs), timm's
    ViT its ``pos_embed`` and prefix tokens.
    """
    excluded = no_weight_decay_names(model)
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim <= 1 or name in excluded else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def lr_factor(step: int, total_steps: int, warmup_steps: int, schedule: str,
              min_lr_ratio: float) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (0-based).

    Linear warmup from ``1 / (warmup_steps + 1)`` to 1 over ``warmup_steps``, then constant
    or a cosine decay reaching ``min_lr_ratio`` at ``total_steps``.
    """
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if schedule == "constant":
        return 1.0
    span = max(total_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / span, 1.0)
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def check_optim_args(lr: float, weight_decay: float, warmup: float, scheduler: str,
                     min_lr_ratio: float) -> None:
    check_positive_float(lr, "lr")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    if not 0 <= warmup < 1:
        raise ValueError(f"warmup must be a fraction of the training steps in [0, 1), "
                         f"got {warmup!r}")
    check_choice(scheduler, "scheduler", SCHEDULERS)
    if not 0 <= min_lr_ratio <= 1:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio!r}")


def configure_adamw(module, lr: float, weight_decay: float, warmup: float, scheduler: str,
                    min_lr_ratio: float) -> dict:
    """``configure_optimizers`` body: AdamW over ``module`` and a per-step LambdaLR.

    ``warmup`` is a fraction of all training steps (``trainer.estimated_stepping_batches``).
    """
    optimizer = torch.optim.AdamW(param_groups(module, weight_decay), lr=lr)
    estimated = float(module.trainer.estimated_stepping_batches)
    total = int(estimated) if math.isfinite(estimated) and estimated >= 1 else 1
    if not math.isfinite(estimated):  # no max_steps/max_epochs: nothing to decay towards
        scheduler = "constant"
    warmup_steps = int(warmup * total)

    def factor(step: int) -> float:
        return lr_factor(step, total, warmup_steps, scheduler, min_lr_ratio)

    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return {"optimizer": optimizer,
            "lr_scheduler": {"scheduler": lr_scheduler, "interval": "step"}}


def configure_adamw_from_hparams(module) -> dict:
    """:func:`configure_adamw` with the settings a task module saved in its hyperparameters
    (``lr``, ``weight_decay``, ``warmup``, ``scheduler``, ``min_lr_ratio``)."""
    hp = module.hparams
    return configure_adamw(module, hp.lr, hp.weight_decay, hp.warmup, hp.scheduler,
                           hp.min_lr_ratio)
