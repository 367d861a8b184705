"""The tasks' DDP helpers: this process's rank, work shared by ranks, and gathers.

The only ``torch.distributed`` checks of the tasks: a Parquet dataset's set-up
([`stream`][posenc.tasks.forecasting.stream]) and the prediction writers
([`ForecastWriter`][posenc.tasks.ForecastWriter],
[`ClassPredictionWriter`][posenc.tasks.ClassPredictionWriter]) use them; without a process group
everything runs in this process.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["across_ranks", "distributed_rank", "gather_to_rank_zero", "on_every_rank",
           "process_group_up"]


def process_group_up() -> bool:
    """Whether torch.distributed's process group is up (ranks to gather over)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def distributed_rank() -> tuple[int, int]:
    """``(rank, world size)`` of this process: torch.distributed's once initialized."""
    if process_group_up():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def across_ranks(compute: Callable[[list[int]], list[tuple[int, Any]]], count: int,
                 rank: int = 0, world_size: int = 1) -> list[Any]:
    """Items ``0..count-1`` shared by DDP ranks: ``compute(mine)`` of this rank's items
    (``rank::world_size``) gives ``(item, result)`` pairs; -> every rank's results in item
    order, on every rank (``all_gather_object``). An error on one rank is raised on all (one
    raising alone would leave the others in the gather). Without a process group this process
    computes every item."""
    if world_size == 1 or not process_group_up():
        return [result for _, result in compute(list(range(count)))]
    mine = list(range(rank, count, world_size))
    try:
        local: tuple[Exception | None, list] = (None, compute(mine))
    except Exception as error:  # noqa: BLE001  (raised on every rank below)
        try:
            pickle.dumps(error)
        except Exception:  # noqa: BLE001  (an error that does not pickle: its text)
            error = RuntimeError(f"{type(error).__name__}: {error}")
        local = (error, [])
    gathered: list[Any] = [None] * world_size
    torch.distributed.all_gather_object(gathered, local)
    for error, _ in gathered:
        if error is not None:
            raise error
    return [result for _, result in sorted((pair for _, part in gathered for pair in part),
                                           key=lambda pair: pair[0])]


def on_every_rank(value: Any, trainer: Any) -> list[Any]:
    """Every rank's ``value``, in rank order, on every rank (``[value]`` without a process
    group)."""
    if trainer.world_size <= 1 or not process_group_up():
        return [value]
    values: list[Any] = [None] * trainer.world_size
    torch.distributed.all_gather_object(values, value)
    return values


def gather_to_rank_zero(value: Any, trainer: Any) -> list[Any]:
    """Every rank's ``value``, in rank order, on rank 0 (``[value]`` without a process group;
    ``[]`` on the other ranks)."""
    if trainer.world_size <= 1 or not process_group_up():
        return [value]
    parts: list[Any] | None = [None] * trainer.world_size if trainer.is_global_zero else None
    torch.distributed.gather_object(value, parts, dst=0)
    return parts or []
