"""The forecasts table (forecast_frame) and its file (ForecastWriter), on hand-made outputs."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from lightning.pytorch import LightningModule, Trainer
from posenc.tasks.forecasting import output
from posenc.tasks.forecasting.output import (
    ORIGIN_COLUMN,
    ForecastWriter,
    forecast_frame,
    quantile_column,
    quantile_columns,
)
from posenc.tasks.forecasting.schema import Columns, Fitted
from torch.utils.data import DataLoader

HOUR = 3_600_000_000_000
# 2024-11-03 05:00 UTC is 01:00 EDT; an hour later New York is back at 01:00, now EST.
T0 = pd.Timestamp("2024-11-03 05:00", tz="UTC").value


def _schema(**kw) -> Fitted:
    args = dict(timestamp_column="when", target_columns=["load", "temp"],
                series_columns=["state", "site"], tz="America/New_York")
    return Fitted(Columns(**{**args, **kw}), series_keys=(("CA", 1), ("CA", 2), ("NY", 1)))


def _output(series, origin=None, nh=3, valid=None, levels=3, start=T0):
    """``B`` windows of ``nh`` hourly steps from ``start``; prediction = 10 * window + step
    (+ 0.5 for the second target), quantile ``j`` = prediction + j - 1."""
    b = len(series)
    time = start + HOUR * torch.arange(nh).repeat(b, 1)
    pred = (10.0 * torch.arange(b)[:, None] + torch.arange(nh)[None]).float()
    pred = torch.stack([pred, pred + 0.5], -1)
    out = {"series": torch.tensor(series), "time": time,
           "valid": torch.ones(b, nh, dtype=torch.bool) if valid is None else valid,
           "prediction": pred,
           "quantiles": pred[..., None] + torch.arange(levels).float() - 1}
    if origin is not None:
        out["origin"] = torch.full((b,), origin, dtype=torch.int64)
    return out


def test_frame_values_zone_dst_and_padding_dropped():
    valid = torch.tensor([[True, True, True], [True, False, False]])
    frame = forecast_frame([_output([2, 0], valid=valid)], _schema(), [0.1, 0.5, 0.9])
    assert list(frame.columns) == ["state", "site", "when", "load", "temp", "load_q0.1",
                                   "load_q0.5", "load_q0.9", "temp_q0.1", "temp_q0.5",
                                   "temp_q0.9"]
    # Sorted by series: ("CA", 1) (window 1, one valid step) before ("NY", 1) (window 0).
    assert frame["state"].tolist() == ["CA", "NY", "NY", "NY"]
    assert frame["site"].tolist() == [1, 1, 1, 1]
    assert frame["site"].dtype == np.int64
    assert str(frame["when"].dt.tz) == "America/New_York"
    assert [t.isoformat() for t in frame["when"]] == [
        "2024-11-03T01:00:00-04:00", "2024-11-03T01:00:00-04:00",
        "2024-11-03T01:00:00-05:00", "2024-11-03T02:00:00-05:00"]  # the repeated hour kept
    assert frame["load"].tolist() == [10.0, 0.0, 1.0, 2.0]
    assert frame["temp"].tolist() == [10.5, 0.5, 1.5, 2.5]
    assert frame["load_q0.1"].tolist() == [9.0, -1.0, 0.0, 1.0]
    assert frame["temp_q0.9"].tolist() == [11.5, 1.5, 2.5, 3.5]
    assert frame.index.equals(pd.RangeIndex(4))


def test_frame_single_series_naive_points_only():
    schema = Fitted(Columns(timestamp_column="ts", target_columns=["y"], tz=None), aware=False)
    out = _output([0, 0])
    out["prediction"] = out["prediction"][..., :1]
    out["time"][1] += 3 * HOUR  # the second window follows the first
    frame = forecast_frame([out], schema, None)
    assert list(frame.columns) == ["ts", "y"]  # no series columns, no quantiles
    assert frame["ts"].dt.tz is None
    # Naive data without a zone: the int64 clock is the wall clock itself.
    assert frame["ts"].tolist() == list(pd.date_range("2024-11-03 05:00", periods=6, freq="h"))
    assert frame["y"].tolist() == [0, 1, 2, 10, 11, 12]


def test_frame_origin_column_and_sort_by_series_origin_time():
    late, early = T0 + HOUR, T0
    outputs = [_output([0], origin=late, start=T0 + 2 * HOUR),
               _output([0, 1], origin=early, start=T0 + HOUR)]
    frame = forecast_frame(outputs, _schema(), None)
    assert list(frame.columns) == ["state", "site", "when", ORIGIN_COLUMN, "load", "temp"]
    first = frame[frame["site"].eq(1)]
    assert first[ORIGIN_COLUMN].map(lambda t: t.value).tolist() == [early] * 3 + [late] * 3
    assert first["when"].map(lambda t: t.value).tolist() == [
        T0 + HOUR * k for k in (1, 2, 3, 2, 3, 4)]
    assert str(frame[ORIGIN_COLUMN].dt.tz) == "America/New_York"
    assert frame["site"].tolist() == [1] * 6 + [2] * 3


def test_frame_numpy_outputs_and_batches_of_different_horizons():
    a = {k: v.numpy() for k, v in _output([0], nh=2).items()}
    b = _output([1], nh=4)
    frame = forecast_frame([a, b], _schema(), [0.1, 0.5, 0.9])
    assert len(frame) == 6
    assert frame["site"].tolist() == [1, 1, 2, 2, 2, 2]


def test_frame_empty_outputs_keep_the_columns():
    frame = forecast_frame([], _schema(), [0.25, 0.75])
    assert len(frame) == 0
    assert list(frame.columns) == ["state", "site", "when", "load", "temp", "load_q0.25",
                                   "load_q0.75", "temp_q0.25", "temp_q0.75"]


@pytest.mark.parametrize("change, error, match", [
    (lambda o: o.pop("valid"), ValueError, r"outputs\[0\] has no \['valid'\]"),
    (lambda o: o.pop("quantiles"), ValueError, "quantile_levels are given"),
    (lambda o: o.update(series=torch.tensor([3])), ValueError,
     r"holds 3, but the model has 3 series \(indexes 0..2\)"),
    (lambda o: o.update(series=torch.tensor([-1])), ValueError, "holds -1"),
    (lambda o: o.update(time=o["time"].double()), TypeError,
     r"\['time'\] holds float64 values, expected int64"),
    (lambda o: o.update(valid=o["valid"].int()), TypeError, r"\['valid'\] holds int32"),
    (lambda o: o.update(prediction=o["prediction"][..., :1]), ValueError,
     r"\['prediction'\] has shape \(1, 3, 1\), expected \(1, 3, 2\) \(2 target"),
    (lambda o: o.update(quantiles=o["quantiles"][..., :2]), ValueError,
     r"\['quantiles'\] has shape \(1, 3, 2, 2\), expected \(1, 3, 2, 3\)"),
    (lambda o: o.update(time=o["time"][0]), ValueError, r"\['time'\] has shape \(3,\)"),
    (lambda o: o.update(series=[0]), TypeError, r"\['series'\] must be a tensor"),
    (lambda o: o["time"].__setitem__((0, 1), np.iinfo(np.int64).min), ValueError, "NaT"),
])
def test_frame_bad_outputs_name_the_key(change, error, match):
    out = _output([0])
    change(out)
    with pytest.raises(error, match=match):
        forecast_frame([out], _schema(), [0.1, 0.5, 0.9])


def test_frame_bad_arguments():
    with pytest.raises(TypeError, match="list of predict_step outputs"):
        forecast_frame(_output([0]), _schema(), None)
    with pytest.raises(TypeError, match=r"outputs\[1\] must be a dict"):
        forecast_frame([_output([0]), 3], _schema(), None)
    with pytest.raises(ValueError, match=r"outputs\[1\] has no 'origin' but outputs\[0\] has"):
        forecast_frame([_output([0], origin=T0), _output([0])], _schema(), None)
    with pytest.raises(ValueError, match=r"increasing levels in \(0, 1\).*\[0.9, 0.1\]"):
        forecast_frame([_output([0], levels=2)], _schema(), [0.9, 0.1])
    with pytest.raises(TypeError, match="fitted must be a Fitted state"):
        forecast_frame([], {"timestamp_column": "when"}, None)
    # A target named like another target's quantile column would be overwritten.
    schema = _schema(target_columns=["load", "load_q0.5"])
    with pytest.raises(ValueError, match="2 columns named 'load_q0.5'"):
        forecast_frame([], schema, [0.5])
    with pytest.raises(ValueError, match=f"2 columns named '{ORIGIN_COLUMN}'"):
        forecast_frame([_output([0], origin=T0)], _schema(series_columns=[ORIGIN_COLUMN, "x"]),
                       None)


def test_quantile_column_names_read_back():
    assert quantile_column("load", 0.1) == "load_q0.1"
    assert quantile_column("load", np.float32(0.05).item()) == "load_q0.05000000074505806"
    assert quantile_column("load", np.float64(0.025)) == "load_q0.025"
    columns = ["load", "load_q0.9", "load_q0.1", "load_q0.10", "load_q1.5", "xload_q0.5"]
    assert quantile_columns(columns, "load") == [(0.1, "load_q0.1"), (0.9, "load_q0.9")]


class FakeForecaster(LightningModule):
    """Returns :func:`_output`-style forecasts for series ``batch`` (so the Forecaster's own
    changes do not matter here), with a schema and quantile levels like a trained one."""

    def __init__(self, schema, levels=(0.1, 0.5, 0.9)):
        super().__init__()
        self.fitted, self.quantile_levels = schema, list(levels) if levels else None
        self.layer = torch.nn.Linear(1, 1)

    def predict_step(self, batch, batch_idx=0, dataloader_idx=0):
        out = _output(batch.tolist(), origin=T0 - HOUR, start=T0 + batch_idx * 10 * HOUR)
        out["valid"][:, -1] = batch_idx != 1  # padding in the second batch
        return out


def _predict(model, tmp_path, path, **kwargs):
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path,
                      callbacks=[ForecastWriter(path, **kwargs)])
    trainer.predict(model, DataLoader([2, 0, 1], batch_size=2), return_predictions=False)


def _expected(model) -> pd.DataFrame:
    """The forecasts table of :func:`_predict`'s two batches."""
    outputs = [model.predict_step(torch.tensor([2, 0]), 0),
               model.predict_step(torch.tensor([1]), 1)]
    return forecast_frame(outputs, model.fitted, model.quantile_levels)


class Counting(FakeForecaster):
    """Counts its predict steps (a refusal comes before the first)."""

    steps = 0

    def predict_step(self, batch, batch_idx=0, dataloader_idx=0):
        type(self).steps += 1
        return super().predict_step(batch, batch_idx, dataloader_idx)


def test_writer_never_replaces_a_forecasts_file_unless_told(tmp_path):
    path = tmp_path / "forecasts.parquet"
    _predict(FakeForecaster(_schema()), tmp_path, path)
    before = path.read_bytes()
    Counting.steps = 0
    with pytest.raises(ValueError, match=rf"path='{path}' already holds forecasts.*another "
                                         r"path.*overwrite=True"):
        _predict(Counting(_schema(), levels=None), tmp_path, path)
    assert path.read_bytes() == before and Counting.steps == 0  # refused before predicting
    point = FakeForecaster(_schema(), levels=None)
    _predict(point, tmp_path, path, overwrite=True)
    pd.testing.assert_frame_equal(pd.read_parquet(path), _expected(point))
    with pytest.raises(TypeError, match="overwrite must be a bool"):
        ForecastWriter(path, overwrite="yes")
    (tmp_path / "folder.csv").mkdir()
    with pytest.raises(ValueError, match="folder.csv' exists and is not a .csv or .parquet file"):
        _predict(point, tmp_path, tmp_path / "folder.csv", overwrite=True)
    (tmp_path / "notes").write_text("")
    with pytest.raises(ValueError, match=r"notes' exists and is not a folder \(per_rank=True\)"):
        _predict(point, tmp_path, tmp_path / "notes", per_rank=True, overwrite=True)


def test_per_rank_writer_leaves_no_earlier_part_files(tmp_path):
    """A folder written by an earlier run with more ranks: refused; with overwrite the folder
    reads as this run's forecasts alone (hidden files, which readers skip, are kept)."""
    folder = tmp_path / "forecasts"
    folder.mkdir()
    stale = forecast_frame([_output([0], origin=T0)], _schema(), [0.1, 0.5, 0.9])
    for rank in range(3):
        stale.to_parquet(folder / f"part-{rank:05d}.parquet", index=False)
    (folder / "_SUCCESS").write_text("")
    model = FakeForecaster(_schema())
    with pytest.raises(ValueError, match=r"already holds forecasts \('.*part-00000\.parquet' "
                                         r"and 2 more\).*overwrite=True"):
        _predict(model, tmp_path, folder, per_rank=True)
    assert len(list(folder.glob("part-*.parquet"))) == 3
    _predict(model, tmp_path, folder, per_rank=True, overwrite=True)
    assert sorted(p.name for p in folder.iterdir()) == ["_SUCCESS", "part-00000.parquet"]
    pd.testing.assert_frame_equal(pd.read_parquet(folder), _expected(model))
    # Another file there would be read with the forecasts: refused even with overwrite.
    (folder / "notes.csv").write_text("a\n")
    with pytest.raises(ValueError, match=r"notes\.csv.*not a part file.*empty or new folder"):
        _predict(model, tmp_path, folder, per_rank=True, overwrite=True)


@pytest.mark.parametrize("name", ["deep/er/forecasts.csv", "forecasts.parquet"])
def test_writer_round_trip(tmp_path, name):
    schema = _schema()
    model = FakeForecaster(schema)
    _predict(model, tmp_path, tmp_path / name)
    outputs = [model.predict_step(torch.tensor([2, 0]), 0),
               model.predict_step(torch.tensor([1]), 1)]
    expected = forecast_frame(outputs, schema, [0.1, 0.5, 0.9])
    assert len(expected) == 3 + 3 + 2
    path = tmp_path / name
    if path.suffix == ".csv":
        read = pd.read_csv(path)
        assert read["when"].iloc[0] == "2024-11-03 01:00:00-04:00"  # offset kept in the text
        for column in ("when", ORIGIN_COLUMN):
            read[column] = pd.to_datetime(read[column], utc=True).dt.tz_convert(schema.columns.tz)
        expected[["load", "temp"]] = expected[["load", "temp"]].astype("float64")
        read = read.astype({c: "float32" for c in read.columns if "_q" in c})
    else:
        read = pd.read_parquet(path)
    pd.testing.assert_frame_equal(read, expected, check_dtype=False, check_exact=True)
    assert str(read["when"].dt.tz) == "America/New_York"


def test_writer_bad_path_and_missing_schema(tmp_path):
    with pytest.raises(ValueError, match=r"ForecastWriter path='out.txt': expected a .csv or "
                                         r".parquet"):
        ForecastWriter("out.txt")
    with pytest.raises(TypeError, match="ForecastWriter path must be a file path"):
        ForecastWriter(3)
    with pytest.raises(ValueError, match="needs pl_module.fitted, a Fitted state; "
                                         "FakeForecaster.fitted is NoneType"):
        _predict(FakeForecaster(None), tmp_path, tmp_path / "f.csv")
    assert not (tmp_path / "f.csv").exists()


def test_writer_point_model_writes_no_quantile_columns(tmp_path):
    _predict(FakeForecaster(_schema(), levels=None), tmp_path, tmp_path / "f.csv")
    read = pd.read_csv(tmp_path / "f.csv")
    assert list(read.columns) == ["state", "site", "when", ORIGIN_COLUMN, "load", "temp"]


def test_writer_gathers_every_rank_on_rank_zero(tmp_path, monkeypatch):
    """Two ranks: rank 0 writes its rows and rank 1's (sorted together); rank 1 writes none.
    torch.distributed is faked here; the real 2-process run is the slow test below."""
    schema = _schema()
    rank1 = output._rows([_output([0], origin=T0)], schema, None)
    calls = []

    def gather_object(obj, object_gather_list=None, dst=0):
        calls.append(dst)
        if object_gather_list is not None:
            object_gather_list[:] = [obj, rank1]

    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "gather_object", gather_object)
    model = FakeForecaster(schema, levels=None)
    for rank in (1, 0):
        barriers = []
        trainer = types.SimpleNamespace(
            world_size=2, is_global_zero=rank == 0,
            strategy=types.SimpleNamespace(barrier=barriers.append))
        path = tmp_path / f"rank{rank}.csv"
        ForecastWriter(path).write_on_epoch_end(
            trainer, model, [[_output([2], origin=T0 + HOUR)]], [[[0]]])
        assert barriers == ["ForecastWriter"]
        assert path.exists() == (rank == 0)
    assert calls == [0, 0]
    read = pd.read_csv(tmp_path / "rank0.csv")
    assert list(zip(read["state"], read["site"], strict=True)) == [("CA", 1)] * 3 + [("NY", 1)] * 3
    assert read["load"].tolist() == [0, 1, 2, 0, 1, 2]


@pytest.mark.slow
def test_writer_under_ddp_writes_every_rank_once(tmp_path):
    script = Path(__file__).with_name("forecast_writer_ddp.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "f.csv")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    read = pd.read_csv(tmp_path / "f.csv")
    origins = pd.to_datetime(read[ORIGIN_COLUMN], utc=True).map(lambda t: t.value)
    windows = ((origins - T0) // HOUR).tolist()
    assert sorted(windows) == sorted(w for w in range(7) for _ in range(3))
    assert (read["site"] == [_schema().series_keys[w % 3][1] for w in windows]).all()
