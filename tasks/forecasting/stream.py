"""Partitioned Parquet datasets read lazily: panels larger than memory, on many processes.

A [`TimeSeriesDataModule`][posenc.tasks.TimeSeriesDataModule] given a directory, a glob or an
fsspec URL (``s3://bucket/panel/``, ``memory://``) of Parquet files reads it with
``pyarrow.dataset``, never as one table, yet as the table ``pd.concat`` makes of its files
([`ParquetFiles`][posenc.tasks.forecasting.stream.ParquetFiles]: hidden names skipped, one type per
column, or an error naming the file and the column):
[`DatasetPanel.scan`][posenc.tasks.forecasting.stream.DatasetPanel.scan] reads the series and
timestamp columns (keys, row counts, span); chunks of consecutive series (at most ``chunk_rows``
rows, or one longer series) go through the in-memory path's ``read_panel`` and ``scale_panel``;
[`DatasetPanel.fit`][posenc.tasks.forecasting.stream.DatasetPanel.fit] makes the same ``Fitted`` as
``fit`` on the whole table (every fitted number is per series, or combined from them in series
order); [`DatasetWindows`][posenc.tasks.forecasting.stream.DatasetWindows] yields one split's
batches chunk by chunk. Under DDP both passes are shared
([`across_ranks`][posenc.tasks.distributed.across_ranks]) and chunks are dealt to ranks
and loader workers round-robin; every rank yields the same number of batches (uneven iterable
datasets hang DDP), padding with batches whose ``real`` flag is False. Memory per process: the
per-series state and two chunks (the next read ahead in a thread).
"""

from __future__ import annotations

import dataclasses
import math
import os
import posixpath
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from posenc.temporal.timestamps import parse_timestamps, utc_and_local
from torch import Tensor
from torch.utils.data import IterableDataset, get_worker_info

from ..distributed import across_ranks
from .output import request_dataset
from .panel import (
    Panel,
    fit_state,
    local_steps,
    read_panel,
    scale_panel,
    series_codes,
    series_moments,
)
from .schema import Columns, Fitted, check_unique_columns
from .windows import (
    WindowDataset,
    batch_of_series,
    count_plan,
    count_windows,
    duration_windows,
    origins_from_first,
)

__all__ = ["CHUNK_ROWS", "GLOB_CHARACTERS", "DatasetPanel", "DatasetWindows", "ParquetFiles",
           "is_dataset"]

PARQUET_SUFFIXES = (".parquet", ".pq")
#: Characters that make a ``data`` path a glob of Parquet files.
GLOB_CHARACTERS = "*?["
# Rows of a Parquet dataset read at a time (whole series): ~50 MB for a few channels.
CHUNK_ROWS = 500_000
_NAT = np.iinfo(np.int64).min


def is_dataset(data: Any) -> bool:
    """Whether ``data`` names a Parquet dataset read lazily: a directory, a glob or a URL
    (``scheme://``); a single ``.csv``/``.parquet`` path is read in memory."""
    if not isinstance(data, (str, os.PathLike)):
        return False
    text = os.fspath(data)
    return "://" in text or any(c in text for c in GLOB_CHARACTERS) or Path(text).is_dir()


@dataclasses.dataclass(frozen=True)
class ParquetFiles:
    """The Parquet files of a dataset and the one schema they are read with: the dataset reads
    as the table ``pd.concat`` makes of its files, or is refused naming a file and a column.

    Attributes:
        data: the directory, glob or fsspec URL as given.
        paths: the files, sorted; below ``base``, names starting with ``.`` or ``_`` are
            skipped at every level (pyarrow's and ``pd.read_parquet``'s rule: Spark's
            ``_temporary/``, Jupyter's ``.ipynb_checkpoints/``); after
            [`conform`][posenc.tasks.forecasting.stream.ParquetFiles.conform], only files with rows.
        base: the folder hive partitions (``region=north/``) are read below; None for one file.
        schema: a ``pyarrow.Schema`` of the columns read
            ([`conform`][posenc.tasks.forecasting.stream.ParquetFiles.conform]); None: pyarrow's,
            the first file's.
    """

    data: str
    paths: tuple[str, ...]
    base: str | None
    schema: Any = None

    @classmethod
    def find(cls, data: str | os.PathLike) -> ParquetFiles:
        """The Parquet files of a directory, glob or URL. ``FileNotFoundError`` without one,
        ``ValueError`` for a glob matching other files."""
        import fsspec

        text = os.fspath(data)
        fs, path = fsspec.core.url_to_fs(text)
        if any(c in path for c in GLOB_CHARACTERS):
            found = sorted(f for f in fs.glob(path) if fs.isfile(f))
            first = min(path.find(c) for c in GLOB_CHARACTERS if c in path)
            base = path[:first].rsplit("/", 1)[0] or "/"
        elif fs.isdir(path):
            found = sorted(f for f in fs.find(path) if f.lower().endswith(PARQUET_SUFFIXES))
            base = path
        else:
            found, base = ([path] if fs.isfile(path) else []), None
        files = [f for f in found if base is None or not _hidden(f, base)]
        if not files:
            skipped = (f" ({len(found)} skipped: below {base!r}, names that start with '.' or "
                       "'_' are not data)" if found else "")
            raise FileNotFoundError(f"data={text!r}: no Parquet files found{skipped} (expected "
                                    "a directory, a glob or a URL of .parquet files)")
        bad = [f for f in files if not f.lower().endswith(PARQUET_SUFFIXES)]
        if bad:
            raise ValueError(f"data={text!r} matches {bad[0]!r}, not a .parquet file: a dataset "
                             "is read as Parquet (a CSV is read in memory: give its path)")
        return cls(text, tuple(files), base)

    def open(self, hive: bool = True) -> Any:
        """The files as a ``pyarrow.dataset.Dataset`` (with ``hive``, partition folders such
        as ``region=north/`` become columns), with `schema` where set."""
        import fsspec
        import pyarrow.dataset as ds
        from fsspec.implementations.local import LocalFileSystem

        fs, _ = fsspec.core.url_to_fs(self.data)
        return ds.dataset(list(self.paths), schema=self.schema, format="parquet",
                          filesystem=None if isinstance(fs, LocalFileSystem) else fs,
                          partitioning="hive" if hive else None,
                          partition_base_dir=self.base if hive else None)

    def conform(self, needed: list[str]) -> ParquetFiles:
        """These files with rows, read with one type per column of ``needed``: the type of
        that column in the concatenated table (`_common_type`). Reads every file's
        footer. ``ValueError`` naming the file and the column where a file lacks a column
        (a hive partition key counts as one), holds a hive key's column too, or no one table
        holds its values."""
        import pyarrow as pa

        # Hive keys, from the folder names (pyarrow's partitioning schema is the whole
        # dataset's when there are none).
        keys = {step.split("=", 1)[0] for path in self.paths if self.base is not None
                for step in posixpath.relpath(path, self.base).split("/")[:-1] if "=" in step}
        read = [name for name in dict.fromkeys(needed) if name not in keys]
        kept, typed = [], {name: [] for name in read}
        for fragment in self.open(hive=False).get_fragments():  # each file's own columns
            if not fragment.metadata.num_rows:
                continue  # an empty file adds no rows, so none of its types
            schema, path = fragment.physical_schema, fragment.path
            check_unique_columns(schema.names, f"{path!r} (a file of data={self.data!r})")
            clash = sorted(keys & set(schema.names))
            if clash:
                raise ValueError(f"column {clash[0]!r} is in {path!r} and in its folder names "
                                 f"({clash[0]}=...) (files of data={self.data!r}): a hive key "
                                 "is a column of its folders only; keep one")
            for name in read:
                if name not in schema.names:
                    raise ValueError(f"column {name!r} not found in {path!r} (a file of "
                                     f"data={self.data!r}); it has columns {schema.names}: "
                                     "every file of a dataset holds every column read")
                typed[name].append((path, schema.field(name).type))
            kept.append(path)
        if not kept:
            raise ValueError(f"data={self.data!r} has no rows ({len(self.paths)} Parquet files, "
                             "all empty)")
        files = dataclasses.replace(self, paths=tuple(kept))
        # The keys' types are pyarrow's, inferred from the folder names.
        partitions = [field for field in files.open().schema if field.name in keys]
        fields = [pa.field(name, _common_type(name, typed[name], self.data)) for name in read]
        fields += [pa.field(f.name, _values(f.type)) for f in partitions]
        return dataclasses.replace(files, schema=pa.schema(fields))


def _hidden(path: str, base: str) -> bool:
    """Whether a name on the way from ``base`` to the file ``path`` starts with ``.`` or
    ``_``."""
    return any(step.startswith((".", "_"))
               for step in posixpath.relpath(path, base).split("/"))


_TIME_UNITS = ("s", "ms", "us", "ns")


def _values(kind: Any) -> Any:
    """A dictionary type's value type (a pandas categorical's values), else ``kind``."""
    import pyarrow as pa

    return kind.value_type if pa.types.is_dictionary(kind) else kind


def _common_type(name: str, typed: list[tuple[str, Any]], data: str) -> Any:
    """The Arrow type of column ``name`` in the table ``pd.concat`` makes of files with the
    ``(file, type)`` pairs ``typed``: categoricals as their values; all-null files take the
    others' type; integers with floats are float64 and strings large (Arrow's permissive
    promotion); timestamps in the finest unit, in UTC where the zones differ (as the
    in-memory path reads a column of several zones). ``ValueError`` naming the column and two
    files where no one type holds the values: tz-naive beside tz-aware, text beside numbers."""
    import pyarrow as pa

    common = first = None
    for path, kind in typed:
        kind = _values(kind)
        if pa.types.is_null(kind):
            continue
        if common is None:
            common, first = kind, path
            continue
        if pa.types.is_timestamp(common) and pa.types.is_timestamp(kind):
            if (common.tz is None) != (kind.tz is None):
                aware, naive = (first, path) if kind.tz is None else (path, first)
                raise ValueError(f"timestamp column {name!r} is tz-aware in {aware!r} and "
                                 f"tz-naive in {naive!r} (files of data={data!r}); one table "
                                 "of both mixes tz-naive and tz-aware values: use one form")
            unit = max(common.unit, kind.unit, key=_TIME_UNITS.index)
            common = pa.timestamp(unit, common.tz if common.tz == kind.tz else "UTC")
            continue
        try:
            common = pa.unify_schemas([pa.schema([(name, common)]), pa.schema([(name, kind)])],
                                      promote_options="permissive").field(name).type
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            raise ValueError(f"column {name!r} is {common} in {first!r} but {kind} in {path!r} "
                             f"(files of data={data!r}); no one type holds both: write the "
                             "column with one type") from None
    return pa.null() if common is None else common


def _row_groups(dataset: Any, cache: dict | None = None) -> list[Any]:
    """Every row group of the dataset as a fragment, files in order (the same in every
    process)."""
    if cache is not None and "_row_groups" in cache:
        return cache["_row_groups"]
    groups = [group for fragment in dataset.get_fragments()
              for group in fragment.split_by_row_group()]
    if cache is not None:
        cache["_row_groups"] = groups
    return groups


@dataclasses.dataclass
class DatasetPanel:
    """A Parquet dataset's series, read chunk by chunk
    ([`scan`][posenc.tasks.forecasting.stream.DatasetPanel.scan] builds it).

    Attributes:
        data: the path, glob or URL.
        columns: the column roles.
        series_keys: the ``S`` keys, sorted (a trained model's first where it has some).
        lengths: ``(S,)`` int64 rows per series.
        span: ``(first, last)`` UTC ns of the whole dataset.
        aware: whether the timestamps are tz-aware.
        zone: the zone aware timestamps are read in: the concatenated column's (text in
            several UTC offsets parses to UTC, in every chunk); None if naive.
        chunks: lists of consecutive series indexes, each read at once.
        files: the files and their schema (reopened in each process: datasets do not pickle).
        first_time: ``(S,)`` int64 UTC ns of each series' first row (after
            [`fit`][posenc.tasks.forecasting.stream.DatasetPanel.fit]).
        before: ``(S, 2)`` int64 rows of each series before the two ``split_times`` (after
            [`fit`][posenc.tasks.forecasting.stream.DatasetPanel.fit]).
        groups: ``(offsets (S + 1,), row groups)``: series ``s`` is in the row groups
            ``groups[1][offsets[s]:offsets[s + 1]]`` (in file order).
    """

    data: str
    columns: Columns
    series_keys: tuple[tuple, ...]
    lengths: np.ndarray
    span: tuple[int, int]
    aware: bool
    zone: str | None
    chunks: list[np.ndarray]
    files: ParquetFiles
    first_time: np.ndarray | None = None
    before: np.ndarray | None = None
    split_times: tuple[int, int] | None = None
    groups: tuple[np.ndarray, np.ndarray] | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_dataset", None)
        state.pop("_row_groups", None)
        return state

    @property
    def dataset(self) -> Any:
        if "_dataset" not in self.__dict__:
            self.__dict__["_dataset"] = self.files.open()
        return self.__dict__["_dataset"]

    @classmethod
    def scan(cls, data: str | os.PathLike, columns: Columns, known: Fitted | None = None,
             chunk_rows: int = CHUNK_ROWS, rank: int = 0, world_size: int = 1
             ) -> DatasetPanel:
        """Read the series and timestamp columns row group by row group: keys, row counts,
        span. With ``world_size`` > 1 each DDP rank reads the row groups ``rank::world_size``
        and the ranks gather what they found. ``ValueError`` naming the column on bad data."""
        import pyarrow as pa

        text = os.fspath(data)
        if columns.ambiguous == "infer":
            raise ValueError("ambiguous='infer' reads the order of a whole table; a Parquet "
                             "dataset is read in chunks: give ambiguous='earliest' or 'latest'")
        files = ParquetFiles.find(text).conform(_needed(columns))
        dataset = files.open()
        series_columns = list(columns.series_columns)
        row_groups = _row_groups(dataset)
        scanned = across_ranks(
            lambda mine: [(g, part) for g in mine
                          if (part := _scan_group(row_groups[g], g, dataset.schema, columns,
                                                  text)) is not None],
            len(row_groups), rank, world_size)
        aware_in = {part["aware"]: part["file"] for part in scanned}
        if len(aware_in) > 1:  # text timestamps (a timestamp type is checked per file)
            raise ValueError(f"timestamp column {columns.timestamp_column!r} is tz-aware in "
                             f"{aware_in[True]!r} and tz-naive in {aware_in[False]!r} (files "
                             f"of data={text!r}); use one form")
        counts = [part["count"] for part in scanned]
        lo, hi = min(p["lo"] for p in scanned), max(p["hi"] for p in scanned)
        aware, total = scanned[0]["aware"], sum(p["rows"] for p in scanned)
        zones = {part["zone"] for part in scanned}
        zone = zones.pop() if len(zones) == 1 else "UTC"
        if series_columns:
            # (series, row group, rows) for every series in every row group.
            frame = pa.concat_tables(counts).to_pandas()
            unique = frame[series_columns].drop_duplicates().reset_index(drop=True)
            codes, keys = series_codes(unique, columns.series_columns, None, None)
            unique["_code"] = codes
            code = frame.merge(unique, on=series_columns, how="left")["_code"].to_numpy()
            group = frame["row_group"].to_numpy(np.int64)
            count = frame["count_all"].to_numpy(np.int64)
        else:
            keys, code = ((),), np.zeros(len(row_groups), np.int64)
            group, count = np.arange(len(code)), np.ones(len(code), np.int64)
        if known is not None:
            # A trained model's series keep their indexes; new ones follow, sorted.
            known_keys = set(known.series_keys)
            order = [*known.series_keys, *(key for key in keys if key not in known_keys)]
            position = {key: i for i, key in enumerate(order)}
            code = np.array([position[keys[c]] for c in range(len(keys))], np.int64)[code]
            keys = tuple(order)
        rows = np.bincount(code, count, len(keys)).astype(np.int64)
        if not series_columns:
            rows = np.array([total], np.int64)
        # Each series' row groups, series by series (CSR): a chunk reads only its own.
        by_series = np.lexsort((group, code))
        groups = (np.concatenate(([0], np.cumsum(np.bincount(code, minlength=len(keys)))))
                  .astype(np.int64), group[by_series])
        return cls(text, columns, tuple(keys), rows, (lo, hi), bool(aware), zone,
                   _chunks(rows, chunk_rows), files, groups=groups)

    def frame(self, series: np.ndarray) -> pd.DataFrame:
        """The raw rows of some series (``(k,)`` indexes): only the row groups that hold
        them (`groups`), filtered on the series columns where one holds other series."""
        import pyarrow as pa
        import pyarrow.compute as pc

        names = list(self.columns.series_columns)
        keys = [self.series_keys[int(s)] for s in series]
        schema = self.dataset.schema
        offsets, groups = self.groups
        wanted_groups = np.unique(np.concatenate([groups[offsets[s]:offsets[s + 1]]
                                                  for s in series]))
        expression = None
        for j, name in enumerate(names):
            values = pa.array(sorted({key[j] for key in keys}, key=repr),
                              type=schema.field(name).type)
            term = pc.field(name).isin(values)
            expression = term if expression is None else expression & term
        row_groups = _row_groups(self.dataset, self.__dict__)
        own = self._own_groups()
        chosen = set(int(s) for s in series)
        tables = [_read_group(row_groups[g], schema, _needed(self.columns), self.data,
                              None if own[g] <= chosen else expression) for g in wanted_groups]
        frame = pa.concat_tables(tables).to_pandas()
        if self.zone is not None:  # a chunk's own offsets may parse to another zone
            time = self.columns.timestamp_column
            frame[time] = parse_timestamps(frame[time], time, self.data,
                                           self.columns.timestamp_format).tz_convert(self.zone)
        if len(names) > 1:  # the filter above holds every combination of the values
            wanted = pd.MultiIndex.from_tuples(keys, names=names)
            frame = frame[pd.MultiIndex.from_frame(frame[names]).isin(wanted)]
        return frame.reset_index(drop=True)

    def read(self, series: np.ndarray) -> tuple[Panel, np.ndarray]:
        """The rows of some series -> their [`Panel`][posenc.tasks.forecasting.panel.Panel]
        (``read_panel``) and the ``(S_chunk,)`` dataset index of each of its series."""
        panel = read_panel(self.frame(series), self.columns, None, self.data)
        lookup = self._lookup()
        return panel, np.array([lookup[key] for key in panel.series_keys], np.int64)

    def _own_groups(self) -> list[set[int]]:
        """The series of each row group (sets: whether a chunk needs a filter there)."""
        if "_own" not in self.__dict__:
            offsets, groups = self.groups
            series = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
            own: list[set[int]] = [set() for _ in range(int(groups.max(initial=-1)) + 1)]
            for s, g in zip(series.tolist(), groups.tolist(), strict=True):
                own[g].add(s)
            self.__dict__["_own"] = own
        return self.__dict__["_own"]

    def _lookup(self) -> dict[tuple, int]:
        if "_keys" not in self.__dict__:
            self.__dict__["_keys"] = {key: i for i, key in enumerate(self.series_keys)}
        return self.__dict__["_keys"]

    def chunk_stats(self, chunk: int, train_end: int, split_times: tuple[int, int]
                    ) -> dict[str, Any]:
        """What chunk ``chunk`` adds to the fitted state (arrays of its ``S_chunk`` series)."""
        panel, index = self.read(self.chunks[chunk])
        series = panel.series_of_rows()
        within = local_steps(panel)  # counted: their median is fit()'s median step
        return {"index": index, "moments": series_moments(panel, train_end),
                "first_local": panel.series_starts(), "first_time": panel.utc[panel.starts[:-1]],
                "before": np.stack([np.bincount(series, panel.utc < t, len(index))
                                    for t in split_times], 1),
                "static": panel.static,
                "steps": np.unique(within, return_counts=True)}

    def fit(self, train_end: int, split_times: tuple[int, int], known: Fitted | None, *,
            context_length: Any = None, horizon: Any = None, workers: int = 0,
            rank: int = 0, world_size: int = 1) -> Fitted:
        """One pass over the chunks -> the [`Fitted`][posenc.tasks.Fitted] state of the rows before
        ``train_end`` (UTC ns), as ``fit`` makes it of the whole table; also each series'
        first time and rows before each of ``split_times`` (the windows' plan). The chunks are
        read by ``workers`` loader processes, shared by DDP ranks
        ([`across_ranks`][posenc.tasks.distributed.across_ranks])."""
        from torch.utils.data import DataLoader

        def fit_chunks(mine: list[int]) -> list[tuple[int, dict[str, Any]]]:
            stats = DataLoader(_ChunkStats(self, train_end, tuple(split_times), mine),
                               batch_size=None, num_workers=workers, collate_fn=_same)
            return list(zip(mine, stats, strict=True))

        num, channels = len(self.series_keys), len(self.columns.channels)
        moments = [np.zeros((num, channels)) for _ in range(3)]
        moments[1][:], moments[2][:] = np.nan, np.nan
        first_local = np.full(num, _NAT, np.int64)
        self.first_time = np.full(num, _NAT, np.int64)
        self.before = np.zeros((num, 2), np.int64)
        static: dict[str, np.ndarray] = {}
        steps: Counter = Counter()
        for part in across_ranks(fit_chunks, len(self.chunks), rank, world_size):
            index = part["index"]
            for total, value in zip(moments, part["moments"], strict=True):
                total[index] = value
            first_local[index] = part["first_local"]
            self.first_time[index] = part["first_time"]
            self.before[index] = part["before"]
            for name, values in part["static"].items():
                if name not in static:
                    static[name] = np.full(num, None if values.dtype == object else np.nan,
                                           values.dtype)
                static[name][index] = values
            steps.update(dict(zip(*part["steps"], strict=True)))
        self.split_times = tuple(split_times)
        return fit_state(self.columns, self.series_keys, tuple(moments), first_local, train_end,
                         known, static=static, step_ns=_median(steps), aware=self.aware,
                         zone=self.zone, context_length=context_length, horizon=horizon)

    def slots(self, lo: int, hi: int, lengths: tuple[int, int, int], by_time: bool
              ) -> np.ndarray:
        """``(S,)`` window slots per series of the split ``[lo, hi)``: its windows in count
        mode; in time mode its origins (a gap drops some windows: their slots pad)."""
        if by_time:
            return origins_from_first(self.first_time, self.lengths > 0, lo, hi, *lengths)[1]
        starts = np.concatenate(([0], np.cumsum(self.lengths))).astype(np.int64)
        return count_plan(starts, self._rows_before(lo), self._rows_before(hi), *lengths)[1]

    def _rows_before(self, t: int) -> np.ndarray:
        """``(S,)`` rows per series before ``t``: a split time or past an end of the data."""
        if t <= self.span[0]:
            return np.zeros_like(self.lengths)
        if t > self.span[1]:
            return self.lengths
        return self.before[:, self.split_times.index(t)]

    def rows_in(self, lo: int, hi: int) -> int:
        """Observations in ``[lo, hi)`` (bounds: the split times or the data's ends)."""
        return int(self._rows_before(hi).sum() - self._rows_before(lo).sum())


class _ChunkStats(torch.utils.data.Dataset):
    """Item ``i``:
    [`DatasetPanel.chunk_stats`][posenc.tasks.forecasting.stream.DatasetPanel.chunk_stats] of chunk
    ``chunks[i]`` (for loader workers)."""

    def __init__(self, panel: DatasetPanel, train_end: int, split_times: tuple[int, int],
                 chunks: list[int]) -> None:
        self.panel, self.train_end, self.split_times = panel, train_end, split_times
        self.chunks = chunks

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.panel.chunk_stats(self.chunks[i], self.train_end, self.split_times)


def _needed(columns: Columns) -> list[str]:
    """The columns a chunk reads."""
    return [columns.timestamp_column, *columns.series_columns, *columns.channels,
            *columns.static_columns]


def _read_group(group: Any, schema: Any, names: list[str], data: str, where: Any = None
                ) -> Any:
    """Columns ``names`` of a row group as an Arrow table of the dataset's ``schema`` (rows
    matching the expression ``where``, if given). ``ValueError`` naming the file and the
    column whose values that type cannot hold (an int64 beyond 2**53 beside floats)."""
    import pyarrow as pa

    try:
        return group.to_table(schema=schema, columns=names, filter=where)
    except pa.ArrowInvalid as err:
        for name in names:  # the column at fault, read alone
            try:
                group.to_table(schema=schema, columns=[name])
            except pa.ArrowInvalid:
                raise ValueError(f"column {name!r} of {group.path!r} (a file of data={data!r}) "
                                 f"does not fit {schema.field(name).type}, the type the files "
                                 f"share: {err}") from None
        raise


def _scan_group(group: Any, g: int, schema: Any, columns: Columns, text: str
                ) -> dict[str, Any] | None:
    """What row group ``g`` adds to
    [`DatasetPanel.scan`][posenc.tasks.forecasting.stream.DatasetPanel.scan]: ``count`` (an Arrow
    table of its series' row counts and ``g``; None without series columns), the first and last UTC
    ns, whether its timestamps are aware and their zone, its rows and file; None for an empty row
    group."""
    import pyarrow as pa

    series_columns = list(columns.series_columns)
    table = _read_group(group, schema, [*series_columns, columns.timestamp_column], text)
    if not table.num_rows:
        return None
    count = None
    if series_columns:
        count = table.select(series_columns).group_by(series_columns).aggregate(
            [([], "count_all")])
        count = count.append_column("row_group", pa.array(np.full(count.num_rows, g, np.int64)))
    index = parse_timestamps(table.select([columns.timestamp_column]).to_pandas()
                             .iloc[:, 0], columns.timestamp_column, text, columns.timestamp_format)
    aware = index.tz is not None
    if not aware and columns.tz is not None:
        utc, _ = utc_and_local(index, columns.tz, columns.ambiguous, columns.nonexistent,
                               columns.timestamp_column)
    else:  # the instant itself (aware) or the data's own clock (naive, no zone)
        utc = (index.tz_convert("UTC").tz_localize(None) if aware else index
               ).as_unit("ns").asi8
    return {"count": count, "lo": int(utc.min()), "hi": int(utc.max()), "aware": aware,
            "zone": str(index.tz) if aware else None, "rows": table.num_rows, "file": group.path}


def _same(item: Any) -> Any:
    """The identity ``collate_fn``: chunk statistics stay numpy arrays."""
    return item


def _chunks(lengths: np.ndarray, chunk_rows: int) -> list[np.ndarray]:
    """Consecutive series with rows, at most ``chunk_rows`` rows a chunk (or one series)."""
    chunks, current, rows = [], [], 0
    for s in np.flatnonzero(lengths > 0):
        if current and rows + lengths[s] > chunk_rows:
            chunks.append(np.array(current, np.int64))
            current, rows = [], 0
        current.append(int(s))
        rows += int(lengths[s])
    if current:
        chunks.append(np.array(current, np.int64))
    return chunks


def _median(counts: Counter) -> int:
    """``int(np.median(x))`` of the values ``x`` counted in ``counts`` (value -> count), as
    ``fit`` takes the median step; 0 without values."""
    if not counts:
        return 0
    values = np.array(sorted(counts), np.int64)
    cumulative = np.cumsum([counts[v] for v in values])
    total = int(cumulative[-1])
    middle = sorted({(total - 1) // 2, total // 2})
    return int(np.median(values[np.searchsorted(cumulative, middle, "right")]))


def subset_state(fitted: Fitted, index: np.ndarray) -> Fitted:
    """``fitted`` for some of its series (``(S_chunk,)`` indexes): a chunk's state."""
    index = [int(i) for i in index]
    return dataclasses.replace(
        fitted, series_keys=tuple(fitted.series_keys[i] for i in index),
        loc=tuple(fitted.loc[i] for i in index), scale=tuple(fitted.scale[i] for i in index),
        series_start=tuple(fitted.series_start[i] for i in index) if fitted.series_start
        else ())


class DatasetWindows(IterableDataset):
    """One split's batches of a Parquet dataset, chunk by chunk (module docstring).

    Yields whole batches (``DataLoader(batch_size=None)``): the keys of
    [`windows`][posenc.tasks.forecasting.windows] plus ``real`` ``(B,)`` bool; ``series`` indexes
    ``fitted.series_keys``. ``len()`` is the number of batches of every rank.

    Args:
        panel: the dataset ([`DatasetPanel`][posenc.tasks.forecasting.stream.DatasetPanel], fitted).
        fitted: the state the batches are scaled with (all series).
        bounds: the split's ``[lo, hi)`` UTC ns; None: forecast requests (one window per
            series after its end,
            [`request_dataset`][posenc.tasks.forecasting.output.request_dataset]).
        lengths: ``(context, horizon, stride)`` in rows or ns (``by_time``).
        batch_size: windows per batch.
        shuffle: a new order of chunks and of windows within each chunk every epoch
            (seeded by ``seed``, the epoch, rank and worker); else key and time order.
        seasonality: MASE's lag in rows.
        rank: this process's DDP rank.
        world_size: the number of ranks.
        future: with ``bounds`` None, the times to predict (series and timestamp columns and
            future covariates); None: the trained horizon after each series' end.
    """

    def __init__(self, panel: DatasetPanel, fitted: Fitted, bounds: tuple[int, int] | None,
                 lengths: tuple[int, int, int], by_time: bool, batch_size: int,
                 shuffle: bool = False, seed: int = 0, seasonality: int = 1, rank: int = 0,
                 world_size: int = 1, future: pd.DataFrame | None = None) -> None:
        self.panel, self.fitted, self.bounds = panel, fitted, bounds
        self.lengths, self.by_time = lengths, by_time
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.seasonality, self.rank, self.world_size = seasonality, rank, world_size
        self.future = future
        self.epoch = 0
        slots = (panel.slots(*bounds, lengths, by_time) if bounds is not None
                 else (panel.lengths > 0).astype(np.int64))
        self.num_windows = int(slots.sum())  # slots: in time mode some pad
        # Chunks with a window, dealt to ranks round-robin (every process deals the same).
        self.chunks = [c for c in panel.chunks if slots[c].sum() > 0]
        self.planned = [math.ceil(int(slots[c].sum()) / batch_size) for c in self.chunks]
        per_rank = [sum(self.planned[r::world_size]) for r in range(world_size)]
        self.num_batches = max(per_rank) if per_rank else 0
        self.mine = list(range(len(self.chunks)))[rank::world_size]
        self.short = self.num_batches - per_rank[rank] if per_rank else 0

    def __len__(self) -> int:
        return self.num_batches

    def _windows(self, chunk: np.ndarray) -> tuple[WindowDataset | list, np.ndarray | None]:
        """A chunk's [`WindowDataset`][posenc.tasks.forecasting.windows.WindowDataset] and the
        dataset index of its series (None: a forecast request's, indexed already)."""
        if self.bounds is None:
            future = self._future_of(chunk)
            if future is not None and not len(future):  # no times to predict here
                return [], None
            return request_dataset(self.fitted, self.panel.frame(chunk), future), None
        panel, index = self.panel.read(chunk)
        state = subset_state(self.fitted, index)
        panel = scale_panel(panel, state, self.panel.data)
        make = duration_windows if self.by_time else count_windows
        windows = make(panel.starts, panel.utc, *self.bounds, *self.lengths)
        return WindowDataset(panel, state, windows, self.seasonality), index

    def _future_of(self, chunk: np.ndarray) -> pd.DataFrame | None:
        if self.future is None:
            return None
        names = list(self.panel.columns.series_columns)
        if not names:
            return self.future
        keys = pd.MultiIndex.from_tuples([self.panel.series_keys[int(s)] for s in chunk],
                                         names=names)
        rows = pd.MultiIndex.from_frame(self.future[names]).isin(keys)
        return self.future[rows].reset_index(drop=True)

    def _padding(self) -> dict[str, Tensor]:
        """A batch of one window that is no window (``real`` False, nothing observed in its
        horizon): made by the batch builder from two zero rows, no reading."""
        state = subset_state(self.fitted, np.array([0]))
        width = len(state.columns.channels)
        batch = batch_of_series(np.array([0, 1], np.int64), np.array([0, 1], np.int64),
                                np.zeros((2, width), np.float32), np.array([1]), np.array([1]),
                                state, np.zeros((1, len(state.static_real_columns)), np.float32),
                                np.zeros((1, len(state.static_cat_columns)), np.int64),
                                targets=np.zeros((2, len(state.columns.target_columns))))
        for key in [k for k in batch if k.startswith("target_") and batch[k].dtype == torch.bool
                    and k != "target_valid"]:
            batch[key] = torch.zeros_like(batch[key])
        batch["seasonal_error"] = torch.nan_to_num(batch["seasonal_error"], nan=1.0)
        batch["real"] = torch.zeros(1, dtype=torch.bool)
        return batch

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        mine = self.mine[worker::workers]
        # Worker 0 also yields the rank's padding batches: the rank's total is exact.
        planned = sum(self.planned[i] for i in mine) + (self.short if worker == 0 else 0)
        rng = np.random.default_rng([self.seed, self.epoch, self.rank, worker])
        self.epoch += 1
        if self.shuffle:
            mine = [mine[i] for i in rng.permutation(len(mine))]
        done = 0
        # The next chunk is read in a thread while this one's batches are drawn (Arrow's
        # reads and numpy release the GIL): two chunks in memory at most.
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            ahead = pool.submit(self._windows, self.chunks[mine[0]]) if mine else None
            for k in range(len(mine)):
                windows, index = ahead.result()
                ahead = (pool.submit(self._windows, self.chunks[mine[k + 1]])
                         if k + 1 < len(mine) else None)
                count = len(windows)
                order = rng.permutation(count) if self.shuffle else np.arange(count)
                for a in range(0, count, self.batch_size):
                    batch = windows.__getitems__(order[a:a + self.batch_size])
                    if index is not None:  # the chunk's series from 0 -> the dataset's
                        batch["series"] = torch.from_numpy(index[batch["series"].numpy()])
                    batch["real"] = torch.ones(len(batch["series"]), dtype=torch.bool)
                    done += 1
                    yield batch
                del windows  # before the chunk after next is read
        finally:  # an epoch cut short (limit_train_batches) does not wait for the read
            pool.shutdown(wait=False, cancel_futures=True)
        for _ in range(planned - done):
            yield self._padding()
