"""Prediction tables on disk: a ``.csv`` or ``.parquet`` file, the suffix picks the format.

[`ForecastWriter`][posenc.tasks.ForecastWriter] and
[`ClassPredictionWriter`][posenc.tasks.ClassPredictionWriter] write their tables with
[`write_table`][posenc.tasks.tables.write_table].
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["TABLE_SUFFIXES", "table_path", "write_table"]

TABLE_SUFFIXES = (".csv", ".parquet", ".pq")


def table_path(path: Any, name: str) -> Path:
    """``path`` as a ``Path`` if it names a ``.csv`` or ``.parquet``/``.pq`` file, else a
    ``TypeError``/``ValueError`` naming the argument ``name``."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path (str), got {type(path).__name__}")
    path = Path(path)
    if path.suffix.lower() not in TABLE_SUFFIXES:
        raise ValueError(f"{name}={str(path)!r}: expected a .csv or .parquet file name (the "
                         "suffix picks the format)")
    return path


def write_table(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write ``frame`` to ``path`` (``.csv``, or ``.parquet``/``.pq``), creating its folder;
    no index column. A CSV holds tz-aware times as ISO text with their UTC offset."""
    path = table_path(path, "path")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path
