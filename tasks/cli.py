"""The ``posenc`` command: Lightning's CLI over every posenc task and data module.

    posenc fit --config configs/quickstart.yaml
    posenc fit --config configs/vit_mnist_rope_mixed.yaml --model.init_args.encoding=relbias
    posenc test --config configs/quickstart.yaml --ckpt_path=path/to/last.ckpt
    posenc fit --config configs/quickstart.yaml --print_config
    posenc plot --help

Models and data modules are chosen in the config with ``class_path``/``init_args`` (subclass
mode), so any ``LightningModule``/``LightningDataModule`` importable by its path works,
including your own. Same command on a laptop CPU, a GPU (``trainer.precision: bf16-mixed``)
or many (``trainer.devices``, ``trainer.num_nodes``, ``trainer.strategy: ddp``).

Also runnable as ``python -m posenc.tasks.cli``.
"""

from __future__ import annotations

import importlib
import sys

from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

# Imported so that short class names resolve in configs and checkpoints find their classes.
from . import forecasting, timeseries_data, vision, vision_data  # noqa: F401

__all__ = ["EXTRA_COMMANDS", "PosencCLI", "main", "posenc_cli"]


class PosencCLI(LightningCLI):
    """``LightningCLI`` in subclass mode with one extra option, ``test_after_fit``.

    ``test_after_fit: true`` in a config makes ``fit`` finish by testing the trained weights
    on the data module's test split, so one command reports a held-out score.
    """

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--test_after_fit", type=bool, default=False,
            help="After fit, run the test loop with the final weights (fit only).")

    def after_fit(self) -> None:
        if not self.config[self.subcommand].get("test_after_fit"):
            return
        results = self.trainer.test(self.model, datamodule=self.datamodule, verbose=False)
        if self.trainer.is_global_zero:
            # Metrics logged per image size would repeat in every column of Lightning's
            # per-dataloader table; print them once.
            merged = {k: v for result in results for k, v in result.items()}
            width = max(map(len, merged), default=0)
            lines = [f"  {k:<{width}}  {v:.4f}" for k, v in sorted(merged.items())]
            print("Test results (final weights):", *lines, sep="\n", flush=True)


# Subcommands that are not Lightning's: name -> module whose ``main(argv)`` runs them.
EXTRA_COMMANDS = {"plot": "posenc.tasks.plots", "study": "posenc.tasks.studies"}


def posenc_cli(args: list[str] | None = None, run: bool = True) -> PosencCLI | object:
    """Run the ``posenc`` command in-process and return the CLI object (for Python use/tests).

    Args:
        args: command line without the program name (default ``sys.argv[1:]``); with
            ``run=False`` no subcommand is given: ``["--config", path, ...]`` only builds the
            trainer, model and data (``cli.trainer``, ``cli.model``, ``cli.datamodule``).
        run: run the subcommand (``fit``, ``validate``, ``test``, ``predict``).

    ``posenc plot ...`` (and any name in ``EXTRA_COMMANDS``) goes to that module's ``main``,
    whose result is returned.
    """
    argv = sys.argv[1:] if args is None else list(args)
    if argv and argv[0] in EXTRA_COMMANDS:
        return importlib.import_module(EXTRA_COMMANDS[argv[0]]).main(argv[1:])
    return PosencCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        save_config_kwargs={"overwrite": True},
        args=args,
        run=run,
    )


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``posenc`` console script (``posenc.tasks.cli:main``).

    Returns None so that the console-script wrapper's ``sys.exit(main())`` exits with 0.
    """
    posenc_cli(args)


if __name__ == "__main__":
    main()
