"""``python across_ranks_ddp.py PORT``: two gloo processes share items through
``distributed.across_ranks``; rank 1 fails on its items the first time. Prints, per rank, the
error each raised and the results of a second, clean call (run by test_stream.py)."""

from __future__ import annotations

import os
import sys

import torch.distributed as dist
import torch.multiprocessing as mp
from posenc.tasks.distributed import across_ranks


def work(rank: int, port: str, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)

    def failing(mine):
        if rank == 1:
            raise ValueError(f"row group {mine[0]}: bad timestamps")
        return [(i, 10 * i) for i in mine]

    try:
        across_ranks(failing, 5, rank, 2)
        error = None
    except ValueError as raised:
        error = str(raised)
    clean = across_ranks(lambda mine: [(i, 10 * i) for i in mine], 5, rank, 2)
    queue.put((rank, error, clean))
    dist.destroy_process_group()


if __name__ == "__main__":
    context = mp.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=work, args=(r, sys.argv[1], queue)) for r in range(2)]
    for w in workers:
        w.start()
    results = sorted(queue.get(timeout=120) for _ in workers)
    for w in workers:
        w.join(30)
    print(results)
