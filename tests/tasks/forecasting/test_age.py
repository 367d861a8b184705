"""The age feature in a Forecaster (GluonTS's AddAgeFeature): every window, of every split and
of every forecast request, ages its tokens from its series' first observation, which the
window itself does not hold; a checkpoint keeps each series' start."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from lightning.pytorch import seed_everything
from posenc.tasks import Forecaster, TimeSeriesDataModule, make_batch
from posenc.temporal import AgeFeature
from posenc.temporal.age import age_feature, series_age

from ..conftest import fit_and_save

TINY = {"dim": 16, "depth": 1, "num_heads": 2}
ZONE = "America/New_York"
# Three hourly series with gaps that start on different days (and hours), across the autumn
# DST change, given unsorted.
STARTS = {"s0": ("2023-10-20 00:00", 500), "s1": ("2023-10-26 07:00", 360),
          "s2": ("2023-10-23 13:00", 430)}


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    parts = []
    for k, (site, (start, n)) in enumerate(STARTS.items()):
        stamps = pd.date_range(start, periods=n, freq="1h", tz=ZONE)
        keep = rng.random(n) < 0.9
        keep[0] = True
        hours = np.arange(n)[keep]
        parts.append(pd.DataFrame({"site": site, "ts": stamps[keep],
                                   "load": 10 * k + np.sin(2 * np.pi * hours / 24)}))
    return pd.concat(parts, ignore_index=True).sample(frac=1.0, random_state=0)


def _wall(stamps) -> np.ndarray:
    """The data's wall clock (what the Forecaster's timestamps and ages are read on)."""
    return pd.DatetimeIndex(stamps).tz_convert(ZONE).tz_localize(None).as_unit("ns").asi8


def _expected(frame: pd.DataFrame, site: str, local_ns: np.ndarray) -> np.ndarray:
    """By hand from the raw table: days since the series' first row, GluonTS's log10(2 + age)."""
    first = frame.loc[frame["site"] == site, "ts"].min()
    wall = pd.DatetimeIndex(local_ns.view("M8[ns]"))
    return age_feature(series_age(wall, first.tz_localize(None), unit="D"))


class _Ages:
    """Records what a Forecaster's AgeFeature is given and gives."""

    def __init__(self, model: Forecaster) -> None:
        [self.encoding] = model.model.time_features.encodings
        assert isinstance(self.encoding, AgeFeature)
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.encoding.register_forward_hook(
            lambda module, args, out: self.calls.append((args[0], out[..., 0])))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A Forecaster with the age feature (by name), trained for one step; its checkpoint."""
    tmp = tmp_path_factory.mktemp("age")
    seed_everything(0)
    frame = _frame()
    dm = TimeSeriesDataModule(frame, timestamp_column="ts", target_columns="load",
                              series_column="site", tz=ZONE, context_length=24, horizon=6,
                              stride=6, batch_size=16)
    model = Forecaster(encodings=["age"], relative=None, **dm.model_sizes(), **TINY)
    before = model.model.time_proj.weight.detach().clone()
    path = fit_and_save(model, dm, tmp, max_steps=1, limit_val_batches=0)
    assert not torch.equal(model.model.time_proj.weight, before)  # the step reached it
    return model.eval(), path, frame, dm


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_batch_ages_count_from_the_series_first_observation(fitted, split):
    model, _, frame, dm = fitted
    ages = _Ages(model)
    dataset = dm.datasets[split]
    batch = dataset.__getitems__(range(len(dataset)))
    assert batch["series_start_local"].dtype == torch.int64
    with torch.no_grad():
        model(batch)
    [(local, got)] = ages.calls
    valid = torch.cat((batch["context_valid"], batch["target_valid"]), 1)
    sites = [dm.series_keys[int(s)][0] for s in batch["series"]]
    assert set(sites) == set(STARTS)  # every series has windows in every split
    for b, site in enumerate(sites):
        tokens = local[b][valid[b]].numpy()
        np.testing.assert_allclose(got[b][valid[b]].numpy(), _expected(frame, site, tokens),
                                   rtol=1e-6)
    if split != "train":  # far from the window's own first token
        assert (got[:, 0] > np.log10(2 + 3)).all()


def test_forecast_and_a_reloaded_checkpoint_age_a_short_history_from_the_series_start(
        fitted):
    model, path, frame, dm = fitted
    history = frame.sort_values("ts").groupby("site").tail(30)  # the last 30 rows each
    new = frame[frame["site"] == "s1"].sort_values("ts").head(30).assign(site="s9")
    history = pd.concat([history, new])
    seen = {}
    for name, forecaster in (("model", model),
                             ("loaded", Forecaster.load_from_checkpoint(path,
                                                                        weights_only=True))):
        ages = _Ages(forecaster)
        out = forecaster.forecast(history, 3)
        [(local, got)] = ages.calls
        seen[name] = (out, got)
        # Rows: the series in code order, the new one last; 24 context + 3 query tokens each.
        assert got.shape == (4, 27)
        for b, site in enumerate(["s0", "s1", "s2"]):
            np.testing.assert_allclose(got[b].numpy(),
                                       _expected(frame, site, local[b].numpy()), rtol=1e-6)
        # A series new to the model starts at its own history.
        np.testing.assert_allclose(got[3].numpy(),
                                   _expected(new, "s9", local[3].numpy()), rtol=1e-6)
        assert got[3, 0] > np.log10(2)  # its context is the last 24 of its 30 rows
    loaded = Forecaster.load_from_checkpoint(path, weights_only=True)
    assert loaded.fitted.series_start == model.fitted.series_start
    assert model.fitted.series_start == tuple(
        int(_wall([frame.loc[frame["site"] == s, "ts"].min()])[0]) for s in STARTS)
    torch.testing.assert_close(seen["loaded"][1], seen["model"][1], rtol=0, atol=0)
    pd.testing.assert_frame_equal(seen["loaded"][0], seen["model"][0])


def test_a_schema_without_series_starts_ages_from_the_history(fitted):
    model, _, frame, _ = fitted
    history = frame.sort_values("ts").groupby("site").tail(30)
    old = Forecaster(encodings=["age"], relative=None, **TINY).eval()
    old.load_state_dict(model.state_dict())
    old.fitted = type(model.fitted).from_dict({**model.fitted.to_dict(), "series_start": []})
    ages = _Ages(old)
    old.forecast(history, 2)
    [(local, got)] = ages.calls
    for b, site in enumerate(["s0", "s1", "s2"]):
        np.testing.assert_allclose(
            got[b].numpy(), _expected(history, site, local[b].numpy()), rtol=1e-6)


def test_a_fixed_start_wins_and_one_after_a_series_start_is_refused(fitted):
    _, _, _, dm = fitted
    batch = dm.datasets["test"].__getitems__([0, 1])
    spec = {"class_path": "posenc.temporal.AgeFeature",
            "init_args": {"start": "2023-10-01", "unit": "h", "transform": "linear"}}
    model = Forecaster(encodings=[spec], relative=None, **TINY).eval()
    ages = _Ages(model)
    model(batch)
    [(local, got)] = ages.calls
    origin = pd.Timestamp("2023-10-01").value
    np.testing.assert_allclose(got.numpy(), (local.numpy() - origin) / 3.6e12, rtol=1e-6)
    late = {**spec, "init_args": {"start": "2023-10-21"}}
    with pytest.raises(ValueError, match=r"^start=2023-10-21 00:00:00 is after the first "
                                         r"observation of a series \(2023-10-20 00:00:00\)"):
        Forecaster(encodings=[late], relative=None, **TINY)(batch)


def test_make_batch_ages_from_its_context_and_the_batch_key_is_checked():
    ctx = pd.date_range("2024-03-30", periods=12, freq="2h", tz="Europe/Berlin")
    batch = make_batch(ctx, np.sin(np.arange(12.0)), ctx[-1:] + pd.Timedelta("3h"))
    assert batch["series_start_local"].tolist() == [int(_wall_in(ctx[:1], "Europe/Berlin"))]
    model = Forecaster(encodings=["age"], **TINY).eval()
    assert torch.isfinite(model(batch)).all()
    with pytest.raises(ValueError, match=r"^batch has no \['series_start_local'\]"):
        model({k: v for k, v in batch.items() if k != "series_start_local"})
    with pytest.raises(ValueError, match=r"^batch\['series_start_local'\] must be the \(1,\) "
                                         r"int64 wall-clock ns .*got torch.float32"):
        model(dict(batch, series_start_local=batch["series_start_local"].float()))


def _wall_in(stamps, zone: str) -> int:
    return pd.DatetimeIndex(stamps).tz_convert(zone).tz_localize(None).as_unit("ns").asi8[0]
