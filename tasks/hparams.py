"""Hyperparameters as builtins, so that checkpoints load with ``torch.load(weights_only=True)``.

``save_hyperparameters()`` stores the constructor's arguments as given; a ``pathlib.Path``, a
numpy scalar or a ``pd.Timestamp`` among them would be pickled into the checkpoint, which
``weights_only=True`` then refuses to load.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import MutableMapping
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["plain", "make_hparams_plain"]


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
