"""Partitioned Parquet datasets read lazily (posenc.tasks.forecasting.stream): the same fitted
state, the same windows (tensor by tensor) and the same metrics as the in-memory path on the
same data, written both ways; ranks and workers split the windows exactly; bad datasets are
refused naming the argument."""

from __future__ import annotations

import dataclasses

import lightning.pytorch as pl
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import torch
from posenc.tasks import Forecaster, TimeSeriesDataModule
from posenc.tasks.forecasting.stream import DatasetWindows, _median, _row_groups, is_dataset

HOUR = 3600 * 10**9


def panel_frame(seed: int = 0, num_series: int = 7) -> pd.DataFrame:
    """Series of 40-140 hourly rows starting at different times, gaps, NaN targets and past
    covariates, a future covariate, a categorical and a numeric static column, tz-aware
    timestamps read in a DST zone; rows shuffled (the readers must sort)."""
    rng = np.random.default_rng(seed)
    parts = []
    for s in range(num_series):
        n = int(rng.integers(40, 140))
        steps = 1 + (rng.random(n) < 0.05) * rng.integers(1, 5, n)
        hours = int(rng.integers(0, 60)) + np.cumsum(steps)
        stamps = pd.Timestamp("2021-03-25", tz="UTC") + pd.to_timedelta(hours, "h")
        value = 10 * s + np.sin(hours / 4) + rng.normal(0, 0.1, n)
        value[rng.random(n) < 0.05] = np.nan
        past = rng.normal(0, 1, n)
        past[rng.random(n) < 0.1] = np.nan
        parts.append(pd.DataFrame({
            "store": f"s{s:02d}", "time": stamps, "sales": value, "temp": past,
            "promo": (rng.random(n) < 0.3).astype(float), "region": "north" if s % 2 else "south",
            "size": float(100 + 7 * s)}))
    frame = pd.concat(parts, ignore_index=True)
    return frame.iloc[rng.permutation(len(frame))].reset_index(drop=True)


ARGS = {"timestamp_column": "time", "target_columns": "sales", "series_column": "store",
        "past_covariates": ["temp"], "future_covariates": ["promo"],
        "static_columns": ["region", "size"], "tz": "Europe/Berlin", "context_length": 12,
        "horizon": 4, "stride": 3, "batch_size": 16, "eval_batch_size": 8}


def write_dataset(frame: pd.DataFrame, root, partition: bool = True, row_group: int = 50) -> str:
    """``frame`` as a Parquet dataset: hive partitions by region (a static column, decoded
    back to text), several files each with small row groups."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    ds.write_dataset(table, str(root), format="parquet",
                     partitioning=["region"] if partition else None,
                     partitioning_flavor="hive" if partition else None,
                     max_rows_per_file=120, max_rows_per_group=row_group,
                     min_rows_per_group=1)
    return str(root)


def windows_of(loader) -> dict[tuple[int, int], dict[str, torch.Tensor]]:
    """Every real window of a loader's batches, keyed by (series, first context, first and
    last horizon time, occurrence), its tensors without padding."""
    out = {}
    for batch in loader:
        real = batch.get("real", torch.ones(len(batch["series"]), dtype=torch.bool))
        for b in np.flatnonzero(real.numpy()):
            nc, nh = int(batch["context_valid"][b].sum()), int(batch["target_valid"][b].sum())
            window = {}
            for key, value in batch.items():
                if key in ("real",) or key.endswith("_valid"):
                    continue
                item = value[b]
                if key.startswith("context_"):
                    item = item[:nc]
                elif key.startswith("target_"):
                    item = item[:nh]
                window[key] = item
            # A gap can give two origins the same rows (time mode): count them apart.
            rows = (int(batch["series"][b]), int(window["context_time"][0]),
                    int(window["target_time"][0]), int(window["target_time"][-1]))
            key = (*rows, sum(1 for k in out if k[:4] == rows))
            out[key] = window
    return out


def same_windows(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].keys() == b[key].keys(), key
        for name in a[key]:
            x, y = a[key][name], b[key][name]
            assert x.dtype == y.dtype and x.shape == y.shape, (key, name)
            assert torch.equal(x.nan_to_num(-7.0) if x.is_floating_point() else x,
                               y.nan_to_num(-7.0) if y.is_floating_point() else y), (key, name)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("panel")
    frame = panel_frame()
    frame.to_parquet(root / "panel.parquet", index=False)
    return frame, str(root / "panel.parquet"), write_dataset(frame, root / "dataset")


def pair(written, **kwargs):
    _, path, dataset = written
    memory = TimeSeriesDataModule(path, **{**ARGS, **kwargs})
    lazy = TimeSeriesDataModule(dataset, **{**ARGS, "chunk_rows": 150, **kwargs})
    memory.setup("fit")
    lazy.setup("fit")
    return memory, lazy


def test_a_directory_glob_or_url_is_a_dataset_a_file_is_not(tmp_path, written):
    _, path, dataset = written
    assert is_dataset(dataset) and is_dataset(dataset + "/*/*.parquet")
    assert is_dataset("s3://bucket/panel/") and is_dataset("memory://panel")
    assert not is_dataset(path) and not is_dataset(pd.DataFrame())


def test_median_of_counted_steps_is_numpys_median():
    rng = np.random.default_rng(1)
    for n in (1, 2, 5, 6, 101):
        x = rng.integers(0, 9, n) * HOUR + rng.integers(0, 3, n)
        counts = dict(zip(*np.unique(x, return_counts=True), strict=True))
        assert _median(counts) == int(np.median(x))


@pytest.mark.parametrize("train_on_val", [False, True])
def test_dataset_fits_the_same_state_as_the_table(written, train_on_val):
    memory, lazy = pair(written, train_on_val=train_on_val)
    assert len(lazy._reading()[0].chunks) > 3  # read in several chunks
    assert lazy.fitted == memory.fitted  # every float exactly
    assert lazy.split_times == memory.split_times
    assert lazy.model_sizes() == memory.model_sizes()


@pytest.mark.parametrize("kwargs", [{}, {"context_length": "10h", "horizon": "5h",
                                          "stride": "3h"}, {"train_stride": 2}])
def test_dataset_windows_equal_the_tables_tensor_by_tensor(written, kwargs):
    memory, lazy = pair(written, **kwargs)
    for split in ("train", "val", "test"):
        expected = windows_of(memory._loader(memory.datasets[split]))
        got = windows_of(lazy._loader(lazy.datasets[split]))
        assert len(expected) >= 5
        same_windows(got, expected)
        # Count mode plans every window exactly; time mode may pad where a gap drops one.
        windows = lazy.datasets[split]
        assert windows.num_windows >= len(expected)
        if "stride" not in kwargs or not isinstance(kwargs.get("stride"), str):
            assert windows.num_windows == len(expected)


def test_evaluation_windows_come_in_key_and_time_order(written):
    memory, lazy = pair(written)
    for split in ("val", "test"):
        assert list(windows_of(lazy._loader(lazy.datasets[split]))) == \
            list(windows_of(memory._loader(memory.datasets[split])))


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_and_workers_share_the_windows_exactly_once_in_equal_batch_counts(written, world):
    memory, lazy = pair(written)
    dataset, fitted = lazy._reading()
    for split in ("train", "test"):
        lo, hi = lazy.split_bounds()[split]
        expected = windows_of(memory._loader(memory.datasets[split]))
        seen, counts = {}, []
        for rank in range(world):
            windows = DatasetWindows(dataset, fitted, (lo, hi), lazy._window_lengths(split),
                                     False, 8, shuffle=split == "train", rank=rank,
                                     world_size=world, seasonality=lazy.mase_season)
            batches = list(iter(windows))
            counts.append(len(batches))
            assert len(batches) == len(windows)
            part = windows_of(batches)
            assert not part.keys() & seen.keys()
            seen.update(part)
        assert len(set(counts)) == 1
        same_windows(seen, expected)


def test_two_loader_workers_fit_the_same_state_and_yield_every_window_once(written):
    memory, lazy = pair(written, num_workers=2)
    assert lazy.fitted == memory.fitted  # the fit pass read its chunks in the workers too
    loader = lazy.val_dataloader()
    batches = list(loader)
    assert len(batches) == len(loader)
    same_windows(windows_of(batches), windows_of(memory._loader(memory.datasets["val"])))


def test_shuffled_training_order_changes_between_epochs_the_windows_do_not(written):
    _, lazy = pair(written)
    loader = lazy.train_dataloader()
    first, second = windows_of(loader), windows_of(loader)
    assert list(first) != list(second) and set(first) == set(second)


def future_of(frame: pd.DataFrame) -> pd.DataFrame:
    """The times to predict: 3 hours after each series' end, with the future covariate."""
    last = frame.groupby("store", observed=True)["time"].max()
    return pd.DataFrame([{"store": str(store), "time": end + pd.Timedelta(hours=k + 1),
                          "promo": float(k % 2)} for store, end in last.items()
                         for k in range(3)])


def small_forecaster(dm) -> Forecaster:
    torch.manual_seed(0)
    return Forecaster(**dm.model_sizes(), dim=16, depth=1, num_heads=2, lr=3e-3)


def trainer(**kwargs) -> pl.Trainer:
    return pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False, **kwargs)


@pytest.mark.slow
def test_metrics_and_checkpoint_forecasts_equal_the_in_memory_paths(written, tmp_path):
    memory, lazy = pair(written)
    model = small_forecaster(memory)
    fit = trainer(max_epochs=1, limit_val_batches=0)
    fit.fit(model, datamodule=lazy)
    assert model.fitted == memory.fitted
    fit.save_checkpoint(tmp_path / "m.ckpt")
    results = {}
    for name, dm in (("memory", memory), ("lazy", lazy)):
        loaded = Forecaster.load_from_checkpoint(tmp_path / "m.ckpt", weights_only=True)
        results[name] = trainer().test(loaded, datamodule=dm, verbose=False)[0]
        results[name + "_series"] = loaded.test_per_series
    assert results["memory"].keys() == results["lazy"].keys()
    for key, value in results["memory"].items():
        if key.endswith("/loss"):  # a mean of batch means: the batches differ
            continue
        np.testing.assert_allclose(results["lazy"][key], value, rtol=2e-5, err_msg=key)
    pd.testing.assert_frame_equal(results["lazy_series"], results["memory_series"],
                                  rtol=2e-5)
    # forecast() on the table vs the dataset's predict loader through the per-rank writer.
    from posenc.tasks import ForecastWriter

    loaded = Forecaster.load_from_checkpoint(tmp_path / "m.ckpt", weights_only=True)
    writer = ForecastWriter(str(tmp_path / "forecasts"), per_rank=True)
    future = future_of(written[0])
    predictor = TimeSeriesDataModule(written[2], **{**ARGS, "chunk_rows": 150,
                                                    "future_data": future})
    trainer(callbacks=[writer]).predict(loaded, datamodule=predictor,
                                        return_predictions=False)
    got = pd.read_parquet(tmp_path / "forecasts")
    expected = loaded.forecast(written[0], future)
    assert len(got) == len(expected) > 0
    got = got.sort_values(["store", "time"]).reset_index(drop=True)
    expected = expected.sort_values(["store", "time"]).reset_index(drop=True)
    assert (got["store"].astype(str) == expected["store"].astype(str)).all()
    assert (got["time"] == expected["time"]).all()
    np.testing.assert_allclose(got["sales"], expected["sales"], rtol=1e-5, atol=1e-5)


def test_fsspec_url_reads_the_same_state(written):
    import fsspec

    frame, path, _ = written
    fs = fsspec.filesystem("memory")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    for i, part in enumerate((table.slice(0, 300), table.slice(300))):
        with fs.open(f"/streamtest/part-{i}.parquet", "wb") as handle:
            pq.write_table(part, handle, row_group_size=64)
    lazy = TimeSeriesDataModule("memory://streamtest", **{**ARGS, "chunk_rows": 200})
    memory = TimeSeriesDataModule(path, **ARGS)
    assert lazy.fitted == memory.fitted
    glob = TimeSeriesDataModule("memory://streamtest/part-*.parquet", **ARGS)
    assert glob.fitted == memory.fitted


def test_a_dataset_is_read_without_a_table_in_memory(written):
    _, lazy = pair(written)
    with pytest.raises(TypeError, match="no in-memory panel"):
        lazy.panel()
    with pytest.raises(TypeError, match="chunk by chunk"):
        lazy.windows("train")


def test_bad_datasets_are_refused_naming_the_argument(tmp_path, written):
    frame = written[0]
    root = write_dataset(frame.drop(columns=["temp"]), tmp_path / "no_temp", partition=False)
    with pytest.raises(ValueError, match="column 'temp' not found"):
        TimeSeriesDataModule(root, **ARGS).setup("fit")
    with pytest.raises(FileNotFoundError, match="no Parquet files"):
        TimeSeriesDataModule(str(tmp_path / "empty*"), **ARGS).setup("fit")
    with pytest.raises(ValueError, match="irregular"):
        TimeSeriesDataModule(root, **{**ARGS, "irregular": 0.5})
    with pytest.raises(ValueError, match="ambiguous='infer'"):
        TimeSeriesDataModule(written[2], **{**ARGS, "ambiguous": "infer"}).setup("fit")
    repeated = pd.concat([frame, frame.iloc[:1]], ignore_index=True)
    root = write_dataset(repeated, tmp_path / "repeat", partition=False)
    with pytest.raises(ValueError, match="repeats the timestamp"):
        TimeSeriesDataModule(root, **ARGS).setup("fit")
    with pytest.raises(ValueError, match="chunk_rows"):
        TimeSeriesDataModule(root, **{**ARGS, "chunk_rows": 0})


# -- a folder reads as its concatenated table, or is refused naming the file and column -------
def _thirds(frame: pd.DataFrame) -> list[pd.DataFrame]:
    """The shuffled rows in three files: every series spread over all of them, unsorted."""
    bounds = np.linspace(0, len(frame), 4).astype(int)
    return [frame.iloc[a:b].reset_index(drop=True) for a, b in zip(bounds[:-1], bounds[1:],
                                                                   strict=True)]


def _int_target_then_floats(parts):
    parts[0]["sales"] = parts[0]["sales"].fillna(0.0).round().astype("int64")
    return {f"part-{i}.parquet": p for i, p in enumerate(parts)}


def _ms_then_ns_timestamps(parts):
    for i, (unit, shift) in enumerate((("ms", 0), ("ns", 1), ("us", 1000))):  # ns past ms
        parts[i]["time"] = (parts[i]["time"] + pd.Timedelta(shift, "ns")).astype(
            f"datetime64[{unit}, UTC]")
    return {f"part-{i}.parquet": p for i, p in enumerate(parts)}


def _empty_files_first(parts):
    untyped = pd.DataFrame({name: pd.Series([], dtype=object) for name in parts[0]})
    return {"0-untyped.parquet": untyped, "1-no-columns.parquet": pd.DataFrame(),
            **{f"part-{i}.parquet": p for i, p in enumerate(parts)}}


def _a_column_of_nulls_in_one_file(parts):
    parts[0]["temp"] = pd.Series([None] * len(parts[0]), dtype=object)
    return {f"part-{i}.parquet": p for i, p in enumerate(parts)}


def _categorical_columns(parts):
    for column in ("store", "region"):
        parts[0][column] = parts[0][column].astype("category")
        parts[2][column] = parts[2][column].astype("category").cat.add_categories(["zz"])
    return {f"part-{i}.parquet": p for i, p in enumerate(parts)}


def _zones(parts):
    for i, zone in enumerate(("Europe/Berlin", "UTC", "America/New_York")):
        parts[i]["time"] = parts[i]["time"].dt.tz_convert(zone)
    return {f"part-{i}.parquet": p for i, p in enumerate(parts)}


def _series_partitions(parts):
    frame = pd.concat(parts, ignore_index=True)
    return {f"store={store}/part.parquet": rows.drop(columns="store")
            for store, rows in frame.groupby("store")}


def hidden_files(parts):
    """Spark's, Jupyter's and pyarrow's hidden files beside the data, holding other rows."""
    stale = parts[0].assign(sales=parts[0]["sales"] + 1000.0)
    other = parts[1][parts[1]["store"] == "s01"].assign(store="zz")
    return {**{f"part-{i}.parquet": p for i, p in enumerate(parts)},
            ".ipynb_checkpoints/part-0-checkpoint.parquet": stale,
            "_temporary/0/part-9.parquet": other, ".part-0.parquet": stale,
            "_metadata-copy.parquet": other, "sub/_tmp/part-8.parquet": other}


def write_files(root, files: dict[str, pd.DataFrame]) -> str:
    for name, part in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        part.to_parquet(root / name, index=False)
    return str(root)


def visible_table(files: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """What pd.concat makes of the files a reader does not skip (hive keys as columns). An
    empty file adds no rows and no types (pandas would make float columns object beside an
    empty file's object columns)."""
    tables = []
    for name, part in files.items():
        *folders, _ = name.split("/")
        if any(step.startswith((".", "_")) for step in name.split("/")) or not len(part):
            continue
        keys = dict(folder.split("=") for folder in folders if "=" in folder)
        tables.append(part.assign(**keys))
    return pd.concat(tables, ignore_index=True)


@pytest.mark.parametrize("layout", [_int_target_then_floats, _ms_then_ns_timestamps,
                                    _empty_files_first, _a_column_of_nulls_in_one_file,
                                    _categorical_columns, _zones, _series_partitions,
                                    hidden_files], ids=lambda f: f.__name__.strip("_"))
def test_a_folder_reads_as_its_concatenated_table(tmp_path, layout):
    files = layout(_thirds(panel_frame(seed=5, num_series=4)))
    root = write_files(tmp_path, files)
    memory = TimeSeriesDataModule(visible_table(files), **ARGS)
    lazy = TimeSeriesDataModule(root, **{**ARGS, "chunk_rows": 150})
    memory.setup("fit")
    lazy.setup("fit")
    assert lazy.fitted == memory.fitted
    assert len(lazy._reading()[0].chunks) > 1
    for split in ("train", "test"):
        same_windows(windows_of(lazy._loader(lazy.datasets[split])),
                     windows_of(memory._loader(memory.datasets[split])))


def test_text_times_with_an_offset_per_file_read_in_the_whole_columns_zone(tmp_path):
    """Text timestamps, each series' file in its own fixed UTC offset: the concatenated column
    parses to UTC, so every chunk reads its local times in UTC, not in its own offset."""
    files = {}
    for s, (store, rows) in enumerate(panel_frame(seed=5, num_series=4).groupby("store")):
        local = rows["time"].dt.tz_convert(f"Etc/GMT-{s + 1}")
        files[f"{store}.parquet"] = rows.assign(time=local.dt.strftime("%Y-%m-%d %H:%M:%S%z"))
    root = write_files(tmp_path, files)
    memory = TimeSeriesDataModule(visible_table(files), **{**ARGS, "tz": None})
    lazy = TimeSeriesDataModule(root, **{**ARGS, "tz": None, "chunk_rows": 150})
    memory.setup("fit")
    lazy.setup("fit")
    assert memory.fitted.zone == "UTC"
    assert lazy.fitted == memory.fitted
    for split in ("train", "test"):
        same_windows(windows_of(lazy._loader(lazy.datasets[split])),
                     windows_of(memory._loader(memory.datasets[split])))

def test_hidden_files_are_skipped_in_a_glob_and_an_fsspec_url_too(tmp_path):
    import fsspec

    files = hidden_files(_thirds(panel_frame(seed=5, num_series=4)))
    expected = TimeSeriesDataModule(visible_table(files), **ARGS).fitted
    root = write_files(tmp_path, files)
    fs = fsspec.filesystem("memory")
    for name, part in files.items():
        with fs.open(f"/hidden28/{name}", "wb") as handle:
            part.to_parquet(handle, index=False)
    for data in (f"{root}/**/*.parquet", "memory://hidden28", "memory://hidden28/**/*.parquet"):
        assert TimeSeriesDataModule(data, **{**ARGS, "chunk_rows": 150}).fitted == expected, data
    # A file named outright, or a folder given by a hidden name, is read as given.
    lone = TimeSeriesDataModule(f"{root}/_temporary/0/part-9.parquet", **ARGS).fitted
    assert lone.series_keys == (("zz",),)


def _refused(case: str) -> tuple[list[pd.DataFrame], str]:
    """Three files no one table reads as they are, and the error naming the file and column."""
    parts = _thirds(panel_frame(seed=5, num_series=4))
    text = [p.assign(time=p["time"].dt.strftime("%Y-%m-%d %H:%M:%S%z")) for p in parts]
    naive = r"'time' is tz-aware in .*part-[12]\.parquet.* and tz-naive in .*part-0\.parquet"
    return {
        "naive": ([parts[0].assign(time=parts[0]["time"].dt.tz_localize(None)), *parts[1:]],
                  naive),
        "naive_text": ([text[0].assign(time=text[0]["time"].str[:19]), *text[1:]], naive),
        "no_target": ([*parts[:2], parts[2].drop(columns="sales")],
                      r"column 'sales' not found in .*part-2\.parquet"),
        "no_covariate": ([parts[0].drop(columns="temp"), *parts[1:]],
                         r"column 'temp' not found in .*part-0\.parquet"),
        "huge_int": ([parts[0].assign(sales=2**53 + 1 + np.arange(len(parts[0]))), *parts[1:]],
                     r"column 'sales' of .*part-0\.parquet.* does not fit double"),
        # pandas 3 writes text as Arrow large_string, pandas 2 as string
        "text_target": ([parts[0], parts[1].assign(sales=parts[1]["sales"].astype(str)),
                         parts[2]], r"column 'sales' is double in .*part-0\.parquet.* but "
                                    r"(large_)?string in .*part-1\.parquet"),
    }[case]


@pytest.mark.parametrize("case", ["naive", "naive_text", "no_target", "no_covariate",
                                  "huge_int", "text_target"])
def test_files_no_table_reads_as_one_are_refused_naming_the_file_and_column(tmp_path, case):
    files, message = _refused(case)
    if case.startswith("naive"):  # the in-memory path refuses the concatenated table too
        with pytest.raises(ValueError, match="mixes tz-naive and tz-aware"):
            TimeSeriesDataModule(pd.concat(files, ignore_index=True), **ARGS).setup("fit")
    root = write_files(tmp_path, {f"part-{i}.parquet": p for i, p in enumerate(files)})
    with pytest.raises(ValueError, match=message):
        TimeSeriesDataModule(root, **ARGS).setup("fit")


def test_a_hive_key_that_is_also_a_files_column_is_refused_naming_both(tmp_path):
    frame = panel_frame(seed=5, num_series=4)
    root = write_files(tmp_path, {f"store={store}/part.parquet": rows
                                  for store, rows in frame.groupby("store")})
    with pytest.raises(ValueError, match=r"column 'store' is in .*store=s00/part\.parquet' and "
                                         r"in its folder names \(store=\.\.\.\)"):
        TimeSeriesDataModule(root, **ARGS).setup("fit")

def test_fitted_round_trips_and_a_known_state_is_kept(written):
    memory, lazy = pair(written)
    known = dataclasses.replace(memory.fitted)
    given = [TimeSeriesDataModule(dm.data, **{**ARGS, "chunk_rows": dm.chunk_rows}, fitted=known)
             for dm in (lazy, memory)]
    assert given[0].fitted == given[1].fitted == known


@pytest.mark.slow
def test_two_ddp_processes_see_each_window_once_per_epoch_and_agree_with_one(written,
                                                                            tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    frame, path, dataset = written
    stale = tmp_path / "forecasts" / "part-00002.parquet"  # an earlier 3-rank run's forecasts
    stale.parent.mkdir()
    frame.head().to_parquet(stale)
    script = Path(__file__).with_name("stream_ddp.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(script), dataset, str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # The predictor's set-up inside the trainer, one pass with the model's state: each rank
    # scanned every other row group and read every other chunk; gathered, both hold the
    # model's state and one process's window plan.
    lazy = TimeSeriesDataModule(dataset, **{**ARGS, "chunk_rows": 150})
    lazy.setup("fit")
    panel = lazy._reading()[0]
    num_groups, num_chunks = len(_row_groups(panel.dataset)), len(panel.chunks)
    assert num_groups > 4 and num_chunks > 2
    setups = [json.loads((tmp_path / f"setup-{r}.json").read_text()) for r in range(2)]
    for rank, setup in enumerate(setups):
        assert setup["scan"] == list(range(rank, num_groups, 2))
        assert setup["fit"] == list(range(rank, num_chunks, 2))
        assert setup["model_state"] and setup["plan"] == panel.before.tolist()
    memory = TimeSeriesDataModule(path, **ARGS)
    memory.setup("fit")
    expected = sorted(
        [key[0], key[1], key[2], key[3], len(w["context_time"])]
        for key, w in windows_of(memory._loader(memory.datasets["train"])).items())
    ranks = [json.loads((tmp_path / f"train-{r}.json").read_text()) for r in range(2)]
    for epoch in range(2):
        assert ranks[0][epoch]["batches"] == ranks[1][epoch]["batches"]
        assert all(len(rank[epoch]["windows"]) > 20 for rank in ranks)  # both ranks train
        seen = sorted(w for rank in ranks for w in rank[epoch]["windows"])
        assert seen == expected  # every window, once
    # The ranks' test metrics (synchronised) equal one process's on the in-memory path.
    got = json.loads((tmp_path / "test.json").read_text())
    loaded = Forecaster.load_from_checkpoint(tmp_path / "m.ckpt", weights_only=True)
    one = trainer().test(loaded, datamodule=memory, verbose=False)[0]
    for key, value in one.items():
        if not key.endswith("/loss"):
            np.testing.assert_allclose(got[key], value, rtol=2e-5, err_msg=key)
    # One forecast file per rank (the stale one removed: overwrite), together every series
    # once, as one process's forecast().
    parts = sorted((tmp_path / "forecasts").glob("part-*.parquet"))
    assert [p.name for p in parts] == ["part-00000.parquet", "part-00001.parquet"]
    got = pd.concat([pd.read_parquet(p) for p in parts]).sort_values(["store", "time"])
    future = future_of(frame)
    want = loaded.forecast(frame, future).sort_values(["store", "time"])
    assert len(got) == len(want) == len(future)
    assert (got["store"].astype(str).to_numpy() == want["store"].astype(str).to_numpy()).all()
    np.testing.assert_allclose(got["sales"], want["sales"], rtol=1e-5, atol=1e-5)


def test_a_dataset_sorted_by_series_reads_only_its_row_groups_and_the_same_windows(
        written, tmp_path):
    frame, path, _ = written
    root = write_dataset(frame.sort_values(["store", "time"]), tmp_path / "sorted",
                         partition=False, row_group=40)
    memory = TimeSeriesDataModule(path, **ARGS)
    lazy = TimeSeriesDataModule(root, **{**ARGS, "chunk_rows": 150})
    memory.setup("fit")
    lazy.setup("fit")
    dataset = lazy._reading()[0]
    offsets, groups = dataset.groups
    # A series spans a few consecutive row groups of 40 rows, not all of them.
    spans = np.diff(offsets)
    assert (spans <= dataset.lengths // 40 + 2).all() and groups.max() > 10
    assert lazy.fitted == memory.fitted
    for split in ("train", "test"):
        same_windows(windows_of(lazy._loader(lazy.datasets[split])),
                     windows_of(memory._loader(memory.datasets[split])))


@pytest.mark.parametrize("kwargs", [
    {"series_column": ["region", "store"], "static_columns": ["size"]},  # a hive partition key
    {"series_column": None, "static_columns": []}])
def test_several_series_columns_or_none_give_the_tables_state_and_windows(tmp_path, kwargs):
    frame = panel_frame(seed=3, num_series=5)
    if kwargs["series_column"] is None:
        frame = frame[frame["store"] == "s02"].drop(columns=["store"])
    path = tmp_path / "panel.parquet"
    frame.to_parquet(path, index=False)
    root = write_dataset(frame, tmp_path / "dataset")
    memory = TimeSeriesDataModule(str(path), **{**ARGS, **kwargs})
    lazy = TimeSeriesDataModule(root, **{**ARGS, **kwargs, "chunk_rows": 100})
    memory.setup("fit")
    lazy.setup("fit")
    assert lazy.fitted == memory.fitted
    for split in ("train", "val", "test"):
        same_windows(windows_of(lazy._loader(lazy.datasets[split])),
                     windows_of(memory._loader(memory.datasets[split])))


def test_a_trained_models_state_reads_a_dataset_with_new_series(written, tmp_path):
    frame, path, dataset = written
    old = frame[~frame["store"].isin(["s01", "s04"])]
    trained = TimeSeriesDataModule(old, **ARGS).fitted
    memory = TimeSeriesDataModule(path, **ARGS, fitted=trained)
    lazy = TimeSeriesDataModule(dataset, **{**ARGS, "chunk_rows": 150}, fitted=trained)
    ours, theirs = lazy.fitted, memory.fitted
    n = len(trained.series_keys)
    assert ours.series_keys[:n] == trained.series_keys
    assert ours.loc[:n] == trained.loc and ours.scale[:n] == trained.scale
    # New series: after the model's, sorted here (the in-memory path numbers them in table
    # order), each scaled on its own training rows exactly as the table path does.
    assert ours.series_keys[n:] == (("s01",), ("s04",))
    scaling = {key: (theirs.loc[i], theirs.scale[i], theirs.series_start[i])
               for i, key in enumerate(theirs.series_keys)}
    assert {key: (ours.loc[i], ours.scale[i], ours.series_start[i])
            for i, key in enumerate(ours.series_keys)} == scaling


def test_forecast_requests_only_for_some_series_read_those_and_pad_the_rest(written):
    frame, _, dataset = written
    future = future_of(frame)
    future = future[future["store"].isin(["s00", "s06"])]
    dm = TimeSeriesDataModule(dataset, **{**ARGS, "chunk_rows": 150, "future_data": future})
    loader = dm.predict_dataloader()
    batches = list(loader)
    assert len(batches) == len(loader)
    real = [(int(b["series"][i]), int(t)) for b in batches for i in np.flatnonzero(b["real"])
            for t in b["target_time"][i]]
    keys = dm.fitted.series_keys
    assert sorted({keys[s][0] for s, _ in real}) == ["s00", "s06"] and len(real) == 6


def test_work_shared_by_ranks_comes_back_in_item_order_and_errors_reach_every_rank(monkeypatch):
    """``across_ranks`` with the other rank's gathered part faked: results in item order; the
    other rank's error raised here too (a rank raising alone would hang the gather); an
    error that does not pickle is sent as its text."""
    from posenc.tasks.distributed import across_ranks

    sent = []

    def gather_with(other):
        def all_gather_object(out, local):
            sent.append(local)
            out[:] = [local, other]
        return all_gather_object

    letters = lambda mine: [(i, "abcde"[i]) for i in mine]  # noqa: E731
    assert across_ranks(letters, 5, 0, 2) == ["a", "b", "c", "d", "e"]  # no group: all here
    assert sent == []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "all_gather_object",
                        gather_with((None, [(1, "b"), (3, "d")])))
    assert across_ranks(letters, 5, 0, 2) == ["a", "b", "c", "d", "e"]
    assert sent[-1] == (None, [(0, "a"), (2, "c"), (4, "e")])
    assert across_ranks(letters, 5) == ["a", "b", "c", "d", "e"]  # one process: no gather
    assert len(sent) == 1
    monkeypatch.setattr(torch.distributed, "all_gather_object",
                        gather_with((ValueError("row group 3: bad timestamps"), [])))
    with pytest.raises(ValueError, match="row group 3: bad timestamps"):
        across_ranks(letters, 5, 0, 2)

    class Unpicklable(Exception):
        def __reduce__(self):
            raise TypeError("no pickling")

    def fails(mine):
        raise Unpicklable("chunk 0 is broken")

    monkeypatch.setattr(torch.distributed, "all_gather_object", gather_with((None, [])))
    with pytest.raises(RuntimeError, match="Unpicklable: chunk 0 is broken"):
        across_ranks(fails, 5, 0, 2)
    assert isinstance(sent[-1][0], RuntimeError) and sent[-1][1] == []


@pytest.mark.slow
def test_an_error_on_one_gloo_rank_is_raised_on_both_and_the_group_goes_on():
    """Two real processes: rank 1 fails on its row groups; both raise its error instead of
    one waiting in the gather forever, and a later shared call still works."""
    import ast
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = str(free.getsockname()[1])
    script = Path(__file__).with_name("across_ranks_ddp.py")
    proc = subprocess.run([sys.executable, str(script), port], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    assert results == [(rank, "row group 1: bad timestamps", [0, 10, 20, 30, 40])
                       for rank in (0, 1)]
