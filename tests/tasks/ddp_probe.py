"""A callback for the DDP test: each rank writes the metrics it ends ``fit`` with.

Imported by the CLI subprocesses through ``PYTHONPATH`` (this folder), as
``ddp_probe.DumpMetrics``.
"""

from __future__ import annotations

import json
from pathlib import Path

from lightning.pytorch import Callback


class DumpMetrics(Callback):
    """Write ``trainer.callback_metrics`` to ``{out_dir}/rank{global_rank}.json`` after fit."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)

    def on_fit_end(self, trainer, pl_module) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        metrics["world_size"] = trainer.world_size
        path = self.out_dir / f"rank{trainer.global_rank}.json"
        path.write_text(json.dumps(metrics, indent=1))
