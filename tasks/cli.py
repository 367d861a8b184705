"""The ``posenc`` command: Lightning's CLI over every posenc task and data module.

    posenc fit --config configs/quickstart.yaml
    posenc fit --config configs/vit_mnist.yaml --model.init_args.encoding=relbias
    posenc test --config configs/quickstart.yaml --ckpt_path=path/to/last.ckpt
    posenc fit --config configs/quickstart.yaml --print_config
    posenc export --config configs/quickstart.yaml --ckpt_path=last.ckpt --out model.onnx
    posenc fit --config configs/forecast_csv.yaml --refit_epochs 10
    posenc plot --help

Models and data modules are chosen in the config with ``class_path``/``init_args`` (subclass
mode), so any ``LightningModule``/``LightningDataModule`` importable by its path works,
including your own. Same command on a laptop CPU, a GPU (``trainer.precision: bf16-mixed``)
or many (``trainer.devices``, ``trainer.num_nodes``, ``trainer.strategy: ddp``).

Also runnable as ``python -m posenc.tasks.cli``.
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
from typing import Any

import torch
from lightning.pytorch import LightningDataModule, LightningModule, seed_everything
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.core.saving import _is_imported_subclass
from lightning.pytorch.utilities.model_registry import _is_registry

# Imported so that short class names resolve in configs and checkpoints find their classes.
from . import forecasting, vision  # noqa: F401
from .config import check_no_weight_sources, import_class, read_checkpoint, register_module
from .export import export_onnx
from .forecasting.data import MODEL_SIZES

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
    """``LightningCLI`` in subclass mode with two extra options of ``fit``,
    ``test_after_fit`` and ``refit_epochs``, one extra subcommand, ``export``, and the model's
    data sizes (:data:`LINKED_SIZES`) linked from the data module.

    ``test_after_fit: true`` in a config makes ``fit`` finish by testing the trained weights
    on the data module's test split, so one command reports a held-out score. ``export
    --ckpt_path CKPT --out model.onnx`` builds the model as ``test --ckpt_path`` does (the
    same checks of the checkpoint's class paths) and writes it with
    :func:`posenc.tasks.export.export_onnx`.
    ``refit_epochs: N`` (or ``--refit_epochs N``): after the fit, a fresh model of the same
    config and seed is trained for ``N`` epochs on the training and validation spans (the
    data module's ``train_on_val``: its fitted state, e.g. the scaling, is refitted on that
    span too), without validation, and replaces the fitted one, so the test backtest sees a
    model trained on all the data before the test start. ``test_after_fit`` then tests it.
    The refit is a run of its own: its logger writes a new version, its config file (the
    fit's with ``train_on_val: true`` and ``max_epochs: N``) reproduces it directly, and a
    ``ModelCheckpoint`` with a ``dirpath`` writes under ``dirpath/refit/`` (one without, in
    the refit's log directory), never over the fit's checkpoints.
    """

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        """Lightning's subcommands and ``export``, plus ``plot`` and ``study`` so that
        ``posenc --help`` and the error for an unknown subcommand list them too
        (:func:`posenc_cli` runs them before this parser is built)."""
        super()._add_subcommands(parser, **kwargs)
        export = self.init_parser(description=EXPORT_HELP)
        self._add_arguments(export)  # model, data, trainer: what a config holds
        self._subcommand_method_arguments["export"] = export.add_function_arguments(
            export_onnx, skip={"model", "datamodule"}, as_group=False)
        self._subcommand_parsers["export"] = export
        parser._subcommands_action.add_subcommand("export", export, help=EXPORT_HELP)
        for name, help in EXTRA_HELP.items():
            parser._subcommands_action.add_subcommand(
                name, self.init_parser(description=help), help=f"{help} (see posenc {name} "
                                                               f"--help)")

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
                parser.error(f"--refit_epochs={refit} must be a positive number of epochs "
                             f"and is an option of fit, not of {subcommand}"
                             if subcommand != "fit" else
                             f"--refit_epochs={refit} must be a positive number of epochs")
            if init_args is None or "train_on_val" not in init_args:
                parser.error(f"--refit_epochs needs a data module with a train_on_val "
                             f"argument (a posenc.tasks.TimeSeriesDataModule), got "
                             f"{getattr(data, 'class_path', data)!r}")
        # The command-line config is the user's (trusted): the module classes it names (its
        # model, encodings) may be built, also when a --ckpt_path checkpoint names them again.
        # The parser has imported their modules; what does not resolve is left to it.
        for _, class_path in _class_paths(self.config.as_dict()):
            module_name, _, name = str(class_path).rpartition(".")
            cls = getattr(sys.modules.get(module_name), "__dict__", {}).get(name)
            if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
                register_module(cls)

    def _parse_ckpt_path(self) -> None:
        """A ``--ckpt_path`` file that is missing, a directory or not a torch checkpoint is a
        usage error naming it (:func:`posenc.tasks.config.read_checkpoint`).

        Lightning merges the checkpoint's hyperparameters into the config, and jsonargparse
        imports every ``class_path`` in them while parsing (running the named module's code)
        before any check. So first: the model's ``_class_path`` must be an already imported
        ``LightningModule`` (the rule of Lightning's ``load_from_checkpoint``), and it and every
        nested ``class_path`` (an encoding) must be posenc's or registered
        (:func:`posenc.tasks.config.import_class`; the classes named in the command-line config
        are registered by :meth:`parse_arguments`), and the hyperparameters may not load
        weights (:func:`posenc.tasks.config.check_no_weight_sources`)."""
        subcommand = self.config.get("subcommand")
        ckpt_path = self.config[subcommand].get("ckpt_path") if subcommand else None
        # Lightning's names for checkpoints it finds itself, and remote paths, are its own.
        if ckpt_path and not (ckpt_path in ("best", "last", "hpc") or _is_registry(ckpt_path)
                              or "://" in str(ckpt_path)):
            try:
                ckpt = read_checkpoint(ckpt_path, "--ckpt_path")
            except ValueError as err:
                self.parser.error(str(err))
            hparams = ckpt.get("hyper_parameters", {})
            try:
                check_no_weight_sources(hparams, f"--ckpt_path={ckpt_path!r}")
            except ValueError as err:
                self.parser.error(str(err))
            class_path = hparams.get("_class_path")
            if class_path is not None and not _is_imported_subclass(class_path,
                                                                    LightningModule):
                self.parser.error(
                    f"--ckpt_path={ckpt_path!r} names the model class {class_path!r}, which is "
                    f"not an imported LightningModule subclass; it is not imported from a "
                    f"checkpoint (that would run its module's code)")
            checks = [(argument, nested, torch.nn.Module)
                      for argument, nested in _class_paths(hparams)]
            if class_path is not None:
                checks.insert(0, ("_class_path", class_path, LightningModule))
            for argument, nested, base in checks:
                try:
                    import_class(nested, argument, base)
                except ValueError as err:
                    self.parser.error(f"--ckpt_path={ckpt_path!r}: {err} (or name the class in "
                                      f"the --config given to posenc)")
        super()._parse_ckpt_path()

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The model's sizes follow the data: read from the instantiated data module, so a
        # config never repeats them. A model or data module without the name is left alone.
        for name in LINKED_SIZES:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}",
                                  apply_on="instantiate")
        parser.add_argument(
            "--test_after_fit", type=bool, default=False,
            help="After fit, run the test loop with the final weights (fit only).")
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
        if not self.config[self.subcommand].get("test_after_fit"):
            return
        results = self.trainer.test(self.model, datamodule=self.datamodule, verbose=False)
        if self.trainer.is_global_zero:
            # Metrics logged per image size would repeat in every column of Lightning's
            # per-dataloader table; print them once.
            merged = {k: v for result in results for k, v in result.items()}
            width = max(map(len, merged), default=0)
            lines = [f"  {k:<{width}}  {v:.4f}" for k, v in sorted(merged.items())]
            weights = ("final weights" if epochs is None else
                       f"refit on train + validation for {epochs} epochs")
            print(f"Test results ({weights}):", *lines, sep="\n", flush=True)

    def _refit(self, epochs: int) -> None:
        """Replace the fitted model, data module and trainer by a fresh model of the same
        config and seed trained for ``epochs`` epochs on train + validation (see the class
        docstring); ``self.config`` becomes the refit's config, the one its run saves."""
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


def _class_paths(value: Any, where: str = "") -> list[tuple[str, Any]]:
    """``(argument, class_path)`` of every ``{"class_path": ...}`` dict nested in ``value``."""
    found = []
    if isinstance(value, dict):
        if "class_path" in value:
            found.append((where or "class_path", value["class_path"]))
        for key, item in value.items():
            found += _class_paths(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found += _class_paths(item, f"{where}[{i}]")
    return found


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

    Returns None so that the console-script wrapper's ``sys.exit(main())`` exits with 0. A
    ``plot`` or ``study`` that fails on its input (a missing config or checkpoint, a bad
    value) prints ``posenc NAME: error: ...`` and exits with 1, without a traceback.
    """
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
