"""What a study writes and reads back: ``results.csv`` rows, the configuration hashes stored in
them, metrics looked up by name (a missing one is an error, never a NaN), and mean ± std over
seeds, computed in one place for the table and the plot."""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["append_row", "fingerprint", "format_mean_std", "logged_metrics", "mean_std",
           "metric", "read_rows", "row_key"]


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of the CSV at ``path`` (none if it does not exist yet)."""
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def append_row(path: Path, row: Mapping[str, Any]) -> None:
    """Add ``row`` to the CSV at ``path``; columns it adds go after the existing ones."""
    rows = read_rows(path)
    fields = list(rows[0]) if rows else []
    fields += [k for k in row if k not in fields]
    rows.append({k: str(v) for k, v in row.items()})
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)  # atomic: an interrupted study never leaves a half-written CSV


def fingerprint(value: Any) -> str:
    """A 12-hex-digit hash of a JSON-able configuration (key order does not matter)."""
    return hashlib.sha1(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:12]


def row_key(row: Mapping[str, Any], columns: Sequence[str]) -> tuple[str, ...]:
    """The identity of a run, the same whether read from the CSV (strings) or made by the
    study (``keep`` as a float: ``"0.5"`` and ``0.5`` are one run)."""
    return tuple(str(float(row[c])) if c == "keep" else str(row[c]) for c in columns)


def metric(row: Mapping[str, str], name: str) -> float:
    """The value of metric ``name`` in a ``results.csv`` row.

    A column that is absent or empty raises a ``ValueError`` naming the metric and the
    row's columns: a renamed metric must not turn into a blank table cell.
    """
    text = row.get(name)
    if text is None or text == "":
        key = {k: row[k] for k in ("encoding", "keep", "seed") if k in row}
        raise ValueError(f"results row {key} has no value for metric {name!r}; its columns: "
                         f"{sorted(k for k, v in row.items() if v not in (None, ''))}")
    return float(text)


def logged_metrics(logged: Iterable[Mapping[str, float]], names: Mapping[str, str]
                   ) -> dict[str, float]:
    """``{column: value}`` of the metrics a ``Trainer.test`` call logged, ``names`` mapping
    each results column to its logged name (``{"mae": "test/mae"}``).

    A name that was not logged raises a ``ValueError`` listing the ones that were: a study
    reading a label the model no longer logs would otherwise record NaN for every run.
    """
    merged = {k: v for result in logged for k, v in result.items()}
    missing = [logged_name for logged_name in names.values() if logged_name not in merged]
    if missing:
        raise ValueError(f"the test run logged no metric {missing[0]!r} (wanted "
                         f"{list(names.values())}); it logged {sorted(merged)}")
    return {column: float(merged[logged_name]) for column, logged_name in names.items()}


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (n - 1) of ``values``; the std of one value is 0,
    both are NaN for none. A NaN value (a diverged run) makes both NaN: it is not dropped."""
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    if len(values) == 1:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def format_mean_std(values: Sequence[float], scale: float, digits: int) -> str:
    """``"mean ± std"`` of ``values * scale`` at ``digits`` decimals; the mean alone for one
    value, ``"–"`` for none."""
    if not values:
        return "–"
    mean, std = mean_std([v * scale for v in values])
    if len(values) == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"
