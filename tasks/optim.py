"""AdamW with a warmup + cosine (or constant) schedule, shared by the task modules.

The settings are plain numbers in the module's constructor, so they land in the checkpoint's
hyperparameters. LightningCLI's own ``optimizer:`` / ``lr_scheduler:`` config keys still
override them when given.
"""

from __future__ import annotations

import math

import torch
from posenc.core.encoding import (
    PositionEncoding,
    check_choice,
    check_float,
    check_positive_float,
    no_weight_decay_names,
)
from torch import nn

__all__ = ["SCHEDULERS", "param_groups", "finetune_param_groups", "position_parameter_names",
           "lr_factor", "configure_adamw", "configure_adamw_from_hparams"]

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


def position_parameter_names(model: nn.Module) -> set[str]:
    """Full names of the parameters of ``model`` that posenc encodings own (the submodules
    that are :class:`posenc.core.PositionEncoding`: learned tables, RoPE-Mixed frequencies,
    relative-bias tables, cpb MLPs, ...)."""
    return {f"{prefix}.{name}" if prefix else name
            for prefix, module in model.named_modules() if isinstance(module, PositionEncoding)
            for name, _ in module.named_parameters()}


def finetune_param_groups(model: nn.Module, weight_decay: float, lr: float, *,
                          layer_decay: float | None = None,
                          position_lr: float | None = None) -> list[dict]:
    """AdamW parameter groups of a timm ViT with a learning rate each (``"lr"``).

    Args:
        model: the ViT (``timm`` ``VisionTransformer``, attached or not): its
            ``group_matcher()`` assigns layers for ``layer_decay``.
        weight_decay: for weight matrices; none for 1D and ``no_weight_decay()`` parameters
            (as :func:`param_groups`).
        lr: base learning rate.
        layer_decay: None: ``lr`` for all. Else layer-wise decay (BEiT; timm's
            ``param_groups_layer_decay``): the embedding layer (patch embedding, class and
            register tokens, an additive encoding) is layer 0, block ``i`` layer ``i + 1``
            (the final norm goes with the last block: timm's ``group_matcher``), the head layer
            ``depth + 1``, and layer ``l`` trains at ``lr * layer_decay ** (depth + 1 - l)``.
        position_lr: None: position parameters (:func:`position_parameter_names`) are grouped
            as any other. Else they train at this learning rate (no layer decay, no weight
            decay), e.g. higher, for an encoding that starts from its initialization.
    """
    if layer_decay is None:
        groups = [{**g, "lr": lr} for g in param_groups(model, weight_decay)]
    else:
        from timm.optim import param_groups_layer_decay

        # Exact names: fnmatch patterns that match only themselves (no wildcards in names).
        excluded = sorted(no_weight_decay_names(model))
        groups = param_groups_layer_decay(model, weight_decay, no_weight_decay_list=excluded,
                                          layer_decay=layer_decay)
        groups = [{"params": g["params"], "weight_decay": g["weight_decay"],
                   "lr": lr * g["lr_scale"]} for g in groups]
    if position_lr is not None:
        position = {id(p) for n, p in model.named_parameters()
                    if n in position_parameter_names(model)}
        moved = [p for g in groups for p in g["params"] if id(p) in position]
        groups = [{**g, "params": [p for p in g["params"] if id(p) not in position]}
                  for g in groups]
        groups.append({"params": moved, "weight_decay": 0.0, "lr": position_lr})
    return [g for g in groups if g["params"]]


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


def check_finetune_args(layer_decay: float | None, position_lr: float | None) -> None:
    """``layer_decay`` in ``(0, 1]`` and ``position_lr`` > 0, each or None."""
    if layer_decay is not None and check_float(layer_decay, "layer_decay", gt=0) > 1:
        raise ValueError(f"layer_decay must be in (0, 1] (1: no decay), got {layer_decay!r}")
    if position_lr is not None:
        check_positive_float(position_lr, "position_lr")


def configure_adamw(module, lr: float, weight_decay: float, warmup: float, scheduler: str,
                    min_lr_ratio: float, groups: list[dict] | None = None) -> dict:
    """``configure_optimizers`` body: AdamW over ``module`` and a per-step LambdaLR.

    ``warmup`` is a fraction of all training steps (``trainer.estimated_stepping_batches``).
    ``groups``: parameter groups (a group's ``"lr"`` is its peak learning rate, the schedule
    scales each); default :func:`param_groups` of ``module`` at ``lr``.
    """
    if groups is None:
        groups = param_groups(module, weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=lr)
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
