"""Reading and checking a table for forecasting: files, column names, numbers, lengths.

Timestamp columns are read by :func:`posenc.temporal.parse_timestamps`; this module holds the
rest of what a data module checks before any window exists.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from posenc.core import check_positive_int
from posenc.temporal.columns import row_label
from posenc.temporal.frequencies import parse_duration

__all__ = ["check_unique_columns", "numeric_column", "parse_length", "read_table"]


def parse_length(value: Any, name: str) -> int | pd.Timedelta:
    """An observation count (int) or a fixed duration with a unit (str or timedelta, read by
    :func:`~posenc.temporal.frequencies.parse_duration`: calendar months are refused)."""
    count = "an int (a count of observations)"
    expected = f"{name} must be {count} or a duration with a unit such as '7D' or '36h'"
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{expected}, got {value!r}")
    # np.timedelta64 is a numpy integer subclass: test it first.
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.timedelta64):
        return check_positive_int(int(value), name)
    if not isinstance(value, (str, dt.timedelta, np.timedelta64)):
        raise TypeError(f"{expected}, got {type(value).__name__} ({value!r})")
    return pd.Timedelta(parse_duration(value, name, alternative=count))


def check_unique_columns(columns: list[Any], where: str) -> None:
    seen: set[Any] = set()
    for name in columns:
        if name in seen:
            count = sum(1 for c in columns if c == name)
            raise ValueError(f"{where} has {count} columns named {name!r}; column names must "
                             "be unique")
        seen.add(name)


def numeric_column(column: pd.Series, name: str, source: str | None) -> np.ndarray:
    """A target column -> ``(N,)`` float64, NaN where missing; non-numbers raise."""
    if pd.api.types.is_bool_dtype(column):
        raise TypeError(f"target column {name!r} is boolean, expected numbers")
    if (pd.api.types.is_datetime64_any_dtype(column) or pd.api.types.is_timedelta64_dtype(column)
            or isinstance(column.dtype, pd.PeriodDtype)):
        raise TypeError(f"target column {name!r} holds {column.dtype} values, expected numbers")
    if pd.api.types.is_complex_dtype(column):
        raise TypeError(f"target column {name!r} holds complex numbers, expected real numbers")
    numeric = pd.to_numeric(column, errors="coerce")
    bad = np.flatnonzero(numeric.isna().to_numpy() & column.notna().to_numpy())
    if not len(bad) and numeric.dtype == object:
        bad = np.array([0])
    if len(bad):
        raise ValueError(f"target column {name!r}: {row_label(int(bad[0]), source)} value "
                         f"{column.iloc[int(bad[0])]!r} is not numeric")
    values = numeric.to_numpy(dtype=np.float64, na_value=np.nan)
    infinite = np.flatnonzero(np.isinf(values))
    if len(infinite):
        raise ValueError(f"target column {name!r}: {row_label(int(infinite[0]), source)} is "
                         "infinite")
    huge = np.flatnonzero(np.abs(values) > np.finfo(np.float32).max)
    if len(huge):
        raise ValueError(f"target column {name!r}: {row_label(int(huge[0]), source)} value "
                         f"{float(values[int(huge[0])])!r} does not fit float32 (batches are "
                         "float32)")
    return values


def read_table(data: str | os.PathLike) -> pd.DataFrame:
    """A ``.csv`` or ``.parquet`` file -> its DataFrame; names must be unique (a CSV's raw
    header is checked, since ``read_csv`` renames a repeated ``load`` to ``load.1``)."""
    if not isinstance(data, (str, os.PathLike)):
        raise TypeError(f"data must be a path or a pandas DataFrame, got "
                        f"{type(data).__name__}")
    path = Path(data)
    if not path.is_file():
        raise FileNotFoundError(f"data={str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        try:
            frame = pd.read_csv(path)
            # read_csv renames a repeated "load" to "load.1": read the raw header too.
            header = pd.read_csv(path, header=None, nrows=1, dtype=str).iloc[0].tolist()
        except pd.errors.EmptyDataError as err:
            raise ValueError(f"data={str(path)!r} is empty (no header, no rows)") from err
        except (pd.errors.ParserError, UnicodeDecodeError) as err:
            raise ValueError(f"data={str(path)!r} cannot be read as CSV: {err}") from err
        check_unique_columns(header, f"data={str(path)!r}")
        return frame
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path)
    raise ValueError(f"data={str(path)!r}: expected a .csv or .parquet file")
