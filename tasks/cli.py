"""The ``posenc`` command: Lightning's CLI over every posenc task and data module.

    posenc fit --config configs/quickstart.yaml  # ends with the checkpoints it wrote
    posenc fit --config configs/vit_mnist.yaml --model.init_args.encoding=relbias
    posenc test --config configs/quickstart.yaml --ckpt_path=checkpoints/quickstart/last.ckpt
    posenc fit --config configs/quickstart.yaml --print_config
    posenc export --config configs/quickstart.yaml --ckpt_path=CKPT --out model.onnx
    posenc fit --config configs/forecast_csv.yaml --refit_epochs 10
    posenc plot --help

Models and data modules are chosen with ``class_path``/``init_args`` (subclass mode), so any
importable ``LightningModule``/``LightningDataModule`` works. Also ``python -m posenc.tasks.cli``.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningDataModule, LightningModule, Trainer, seed_everything
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.utilities.model_registry import _is_registry

# Imported so that short class names resolve in configs and checkpoints find their classes.
from . import forecasting, vision  # noqa: F401
from .config import check_checkpoint, class_paths, read_checkpoint, register_module
from .export import export_onnx
from .forecasting.datamodule import MODEL_SIZES

__all__ = ["EXTRA_COMMANDS", "LINKED_SIZES", "PosencCLI", "main", "posenc_cli"]

# Data module properties passed to the model's argument of the same name on instantiation.
LINKED_SIZES = MODEL_SIZES

# Subcommands that are not Lightning's: name -> module whose ``main(argv)`` runs them.
EXTRA_COMMANDS = {"plot": "posenc.tasks.plots", "study": "posenc.tasks.studies"}
EXPORT_HELP = ("Write a trained ImageClassifier or Forecaster as an ONNX graph (inputs, "
               "outputs and dynamic axes: posenc.tasks.export).")
EXTRA_HELP = {"plot": "Write PNG plots of what position encodings do, and of forecasts.",
              "study": "Run a study (several encodings x seeds) and tabulate the results."}


class PosencCLI(LightningCLI):
    """``LightningCLI`` in subclass mode with the model's data sizes (`LINKED_SIZES`)
    linked from the data module, an ``export`` subcommand (the model built as ``test
    --ckpt_path`` builds it, written by
    [`posenc.tasks.export.export_onnx`][posenc.tasks.export.export_onnx]) and two options of
    ``fit``:

    - ``test_after_fit: true``: finish by testing the trained weights on the test split (a
      Forecaster's ``keep_best``: the best validation run's, which the printout names).
    - ``refit_epochs: N``: then train a fresh model (same config and seed) for ``N`` epochs on
      train + validation (the data module's ``train_on_val``, which refits its scaling too),
      without validation, and keep it. The refit is a run of its own: a new logger version, a
      config file that reproduces it, checkpoints under ``dirpath/refit/``.

    ``fit`` ends by printing the checkpoints its ``ModelCheckpoint`` callbacks kept (the
    refit's after a refit): the paths that ``--ckpt_path`` of ``fit`` (resume), ``test``,
    ``predict`` and ``export`` take.
    """

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        """Lightning's subcommands, ``export``, and ``plot``/``study`` for ``posenc --help``
        ([`posenc_cli`][posenc.tasks.cli.posenc_cli] runs those two before this parser is built)."""
        super()._add_subcommands(parser, **kwargs)
        export = self.init_parser(description=EXPORT_HELP)
        self._add_arguments(export)  # model, data, trainer: what a config holds
        self._subcommand_method_arguments["export"] = export.add_function_arguments(
            export_onnx, skip={"model", "datamodule"}, as_group=False)
        self._subcommand_parsers["export"] = export
        parser._subcommands_action.add_subcommand("export", export, help=EXPORT_HELP)
        for name, help in EXTRA_HELP.items():
            parser._subcommands_action.add_subcommand(
                name, self.init_parser(description=help), help=f"{help} (see posenc {name} --help)")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        if subcommand in EXTRA_COMMANDS:
            parser.error(f"{subcommand!r} must come first: posenc {subcommand} ... (see "
                         f"posenc {subcommand} --help)")
        refit = self.config[subcommand].get("refit_epochs") if subcommand else None
        if refit is not None:
            data = self.config[subcommand].get("data")
            init_args = getattr(data, "init_args", None)
            if subcommand != "fit" or refit < 1:
                where = ("" if subcommand == "fit"
                         else f" and is an option of fit, not of {subcommand}")
                parser.error(f"--refit_epochs={refit} must be a positive number of epochs{where}")
            if init_args is None or "train_on_val" not in init_args:
                parser.error(f"--refit_epochs needs a data module with a train_on_val "
                             f"argument (a posenc.tasks.TimeSeriesDataModule), got "
                             f"{getattr(data, 'class_path', data)!r}")
        # The command-line config is trusted: register the module classes it names (the parser
        # has imported them), also for a --ckpt_path checkpoint that names them again.
        for _, class_path in class_paths(self.config.as_dict()):
            cls = _imported_class(class_path)
            if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
                register_module(cls)

    def _parse_ckpt_path(self) -> None:
        """Check a ``--ckpt_path`` file before Lightning merges its hyperparameters into the
        config (jsonargparse imports every ``class_path`` in them): it must be readable, name
        an imported ``LightningModule``, and pass
        [`posenc.tasks.config.check_checkpoint`][posenc.tasks.config.check_checkpoint]; else a usage
        error. Its allocation bound is kept for
        [`instantiate_classes`][posenc.tasks.cli.PosencCLI.instantiate_classes]."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        # Lightning's names for checkpoints it finds itself, and remote paths, are its own.
        if ckpt_path and not (ckpt_path in ("best", "last", "hpc") or _is_registry(ckpt_path)
                              or "://" in str(ckpt_path)):
            where = f"--ckpt_path={ckpt_path!r}"
            try:
                ckpt = read_checkpoint(ckpt_path, "--ckpt_path")
            except ValueError as err:
                self.parser.error(str(err))
            class_path = ckpt.get("hyper_parameters", {}).get("_class_path")
            model_class = _imported_class(class_path)
            if class_path is not None and not (isinstance(model_class, type)
                                               and issubclass(model_class, LightningModule)):
                self.parser.error(
                    f"{where} names the model class {class_path!r}, which is not an imported "
                    f"LightningModule subclass; it is not imported from a checkpoint (that "
                    f"would run its module's code)")
            try:
                self._build_bound = check_checkpoint(ckpt, where)
            except ValueError as err:
                self.parser.error(str(err))
        super()._parse_ckpt_path()

    def instantiate_classes(self) -> None:
        """Lightning's, under the allocation bound of the ``--ckpt_path`` checkpoint whose
        hyperparameters the model is built from
        ([`posenc.tasks.config.check_checkpoint`][posenc.tasks.config.check_checkpoint])."""
        bound = getattr(self, "_build_bound", None)
        if bound is None:
            super().instantiate_classes()
            return
        with bound:
            super().instantiate_classes()

    def before_instantiate_classes(self) -> None:
        """Evaluating a checkpoint (``validate``, ``test``, ``predict``, ``export`` with a
        ``--ckpt_path`` file), a data module that takes ``fitted`` and is given none reads its
        table with the checkpoint's state: a trained model's state is never refitted on the
        data it is evaluated on, and Lightning restores the checkpoint after the data is set
        up."""
        subcommand = self.config.get("subcommand")
        if subcommand in (None, "fit"):  # a fit fits the data's state (a resume: the same)
            return
        ckpt_path = self.config[subcommand].get("ckpt_path")
        init_args = getattr(self.config[subcommand].get("data"), "init_args", None)
        if (ckpt_path and Path(ckpt_path).is_file() and init_args is not None
                and "fitted" in init_args and init_args.fitted is None):
            init_args.fitted = ckpt_path

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The model's sizes are read from the instantiated data module (when both have them).
        for name in LINKED_SIZES:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}",
                                  apply_on="instantiate")
        parser.add_argument(
            "--test_after_fit", type=bool, default=False,
            help="After fit, run the test loop with the weights fit ends with: the final ones, "
                 "or a Forecaster's keep_best validation run's (fit only).")
        parser.add_argument(
            "--refit_epochs", type=int | None, default=None,
            help="After fit, train a fresh model (same config and seed) for this many epochs "
                 "on the training and validation spans (the data module's train_on_val) and "
                 "keep it; test_after_fit tests it. Checkpoints of a ModelCheckpoint with a "
                 "dirpath go to dirpath/refit/ (fit only).")

    def _run_subcommand(self, subcommand: str) -> None:
        if subcommand != "export":  # Lightning's run a Trainer method of that name
            super()._run_subcommand(subcommand)
            return
        path = export_onnx(**self._prepare_subcommand_kwargs(subcommand))
        print(f"Wrote {path}", flush=True)

    def after_fit(self) -> None:
        epochs = self.config[self.subcommand].get("refit_epochs")
        if epochs is not None:
            self._refit(epochs)
        if self.config[self.subcommand].get("test_after_fit"):
            self._test_after_fit(epochs)
        saved = _saved_checkpoints(self.trainer)
        if saved and self.trainer.is_global_zero:
            print("Checkpoints (--ckpt_path):", *saved, sep="\n", flush=True)

    def _test_after_fit(self, epochs: int | None) -> None:
        results = self.trainer.test(self.model, datamodule=self.datamodule, verbose=False)
        if self.trainer.is_global_zero:  # once, not in each column of a per-loader table
            merged = {k: v for result in results for k, v in result.items()}
            width = max(map(len, merged), default=0)
            lines = [f"  {k:<{width}}  {v:.4f}" for k, v in sorted(merged.items())]
            kept = getattr(self.model, "kept_best", None)  # a Forecaster's keep_best
            if epochs is not None:
                weights = f"refit on train + validation for {epochs} epochs"
            elif kept is not None:
                weights = (f"best validation weights: epoch {kept['epoch']}, step "
                           f"{kept['step']}, {kept['metric']} {kept['value']:.4f}")
            else:
                weights = "final weights"
            print(f"Test results ({weights}):", *lines, sep="\n", flush=True)

    def _refit(self, epochs: int) -> None:
        """Replace the fitted model, data module and trainer by a fresh one trained for
        ``epochs`` epochs on train + validation; ``self.config`` becomes the refit's."""
        config = copy.deepcopy(self.config)
        sub = config[self.subcommand]
        sub.refit_epochs = None
        sub.data.init_args.train_on_val = True
        for name, value in (("max_epochs", epochs), ("max_steps", -1),
                            ("limit_val_batches", 0), ("num_sanity_val_steps", 0)):
            sub.trainer[name] = value
        if sub.get("seed_everything") is not False:  # the seed the fit ran with (_set_seed)
            seed_everything(sub.seed_everything, workers=True)
        self.config = config
        self.config_init = self.parser.instantiate_classes(config)
        self.datamodule = self._get(self.config_init, "data")
        self.model = self._get(self.config_init, "model")
        self._add_configure_optimizers_method_to_model(self.subcommand)
        self.trainer = self.instantiate_trainer()
        for callback in self.trainer.checkpoint_callbacks:
            if getattr(callback, "dirpath", None) is not None:
                callback.dirpath = os.path.join(callback.dirpath, "refit")
        self.trainer.fit(self.model, datamodule=self.datamodule)


def _saved_checkpoints(trainer: Trainer) -> list[str]:
    """One line per checkpoint the fit's ``ModelCheckpoint`` callbacks kept: ``last``, the
    best by their monitor, and without a monitor the latest top-k file where no ``last`` holds
    the same weights; relative to the working directory when they lie under it (Lightning keeps
    some paths absolute)."""
    cwd = Path.cwd().resolve()

    def shown(path: str) -> Path:
        path = Path(path).resolve()
        return path.relative_to(cwd) if path.is_relative_to(cwd) else path

    lines = []
    for callback in trainer.checkpoint_callbacks:
        if callback.last_model_path:
            lines.append(f"  last: {shown(callback.last_model_path)}")
        best = callback.best_model_path
        if best and best != callback.last_model_path and (callback.monitor
                                                          or not callback.last_model_path):
            kind = f"best {callback.monitor}" if callback.monitor else "latest"
            lines.append(f"  {kind}: {shown(best)}")
    return lines


def _imported_class(class_path: Any) -> Any:
    """What ``class_path`` names in its module if that is imported, else None. Reads
    ``sys.modules`` and the module's namespace only (a module ``__getattr__`` may import)."""
    module_name, _, name = str(class_path).rpartition(".")
    return getattr(sys.modules.get(module_name), "__dict__", {}).get(name)


def posenc_cli(args: list[str] | None = None, run: bool = True) -> PosencCLI | object:
    """Run the ``posenc`` command in-process and return the CLI object (or, for ``plot`` and
    ``study``, what that module's ``main`` returns).

    Args:
        args: command line without the program name (default ``sys.argv[1:]``); with
            ``run=False``, no subcommand: ``["--config", path]`` only builds ``cli.trainer``,
            ``cli.model`` and ``cli.datamodule``.
        run: run the subcommand (``fit``, ``validate``, ``test``, ``predict``).
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
    """Entry point of the ``posenc`` console script; returns None (exit status 0). A ``plot``
    or ``study`` that fails on its input prints ``posenc NAME: error: ...`` and exits with 1."""
    argv = sys.argv[1:] if args is None else list(args)
    if argv and argv[0] in EXTRA_COMMANDS:
        try:
            posenc_cli(argv)
        except (ValueError, TypeError, OSError, ImportError) as err:
            message = " ".join(str(err).split())  # one line
            print(f"posenc {argv[0]}: error: {message}", file=sys.stderr)
            raise SystemExit(1) from None
        return
    posenc_cli(args)


if __name__ == "__main__":
    main()
