"""Hyperparameters as builtins, so that checkpoints load with ``torch.load(weights_only=True)``;
and reading such a checkpoint, with errors that name the file.

``save_hyperparameters()`` stores the constructor's arguments as given; a ``pathlib.Path``, a
numpy scalar or a ``pd.Timestamp`` among them would be pickled into the checkpoint, which
``weights_only=True`` then refuses to load.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

__all__ = ["plain", "make_hparams_plain", "read_checkpoint"]


def plain(value: Any) -> Any:
    """``value`` as builtins: paths as ``str``, numpy scalars as Python numbers, timestamps as
    ISO strings, durations as pandas duration strings, arrays and indexes as lists (nested
    lists and tuples are converted item by item); other values unchanged."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (pd.Timestamp, dt.datetime)):
        return pd.Timestamp(value).isoformat()
    if isinstance(value, (dt.timedelta, np.timedelta64)):
        return str(pd.Timedelta(value))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (pd.Index, np.ndarray)):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


def make_hparams_plain(hparams: MutableMapping[str, Any]) -> None:
    """Replace every value of a module's ``hparams`` by :func:`plain` of it, in place."""
    for key, value in list(hparams.items()):
        hparams[key] = plain(value)


def read_checkpoint(path: str | os.PathLike, argument: str) -> dict[str, Any]:
    """The dict saved in the checkpoint file ``path``, loaded on CPU with
    ``weights_only=True`` (tensors and plain values only; memory-mapped when the file's format
    allows, so a large checkpoint is not read whole).

    Raises ``ValueError`` naming ``argument`` and the path when it is empty, missing or a
    directory, not a torch file (empty, text, CSV, ...), holds pickled objects, holds no dict,
    or holds ``hyper_parameters`` that are not a dict (Lightning reads them as one).
    """
    where = f"{argument}={os.fspath(path)!r}"
    if not os.fspath(path):
        raise ValueError(f"{where} is an empty path; give the checkpoint file")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{where} is a directory, not a checkpoint file")
    if not path.is_file():
        raise ValueError(f"{where} is not a file")
    try:
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # not the zip format (legacy or not torch): cannot be mapped
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # EOFError, KeyError, IndexError, UnpicklingError...
        why = next((line.strip() for line in str(err).splitlines()
                    if "Unsupported global" in line), "")
        if why:  # a real pickle of objects that weights_only refuses
            raise ValueError(f"{where} holds objects other than tensors and plain values, "
                             f"which are not loaded (weights_only=True). {why}") from err
        raise ValueError(f"{where} is not a readable torch checkpoint "
                         f"({type(err).__name__}: {err})") from err
    if not isinstance(ckpt, dict):
        raise ValueError(f"{where} is not a Lightning checkpoint (a dict), it holds a "
                         f"{type(ckpt).__name__}")
    hparams = ckpt.get("hyper_parameters", {})
    if not isinstance(hparams, dict):
        raise ValueError(f"{where} is not a Lightning checkpoint: its hyper_parameters are a "
                         f"{type(hparams).__name__}, not a dict")
    return ckpt
