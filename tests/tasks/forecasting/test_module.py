"""Forecaster: every encoding option builds and runs, no future values leak in, queries are
independent, losses and metrics equal their formulas, checkpoints reload exactly."""

from __future__ import annotations

import copy
import re

import numpy as np
import pandas as pd
import pytest
import torch
from lightning.pytorch import Trainer, seed_everything
from posenc.core import RotaryEncoding
from posenc.tasks import Forecaster, ForecastWriter, TimeSeriesDataModule, make_batch
from posenc.tasks.forecasting.metrics import (
    SeasonalError,
    masked_point_loss,
    quantile_loss,
)
from posenc.tasks.forecasting.network import TimeFeatures, encoding_dim, encoding_reads
from posenc.tasks.forecasting.windows import local_time_fields

from ..conftest import synthetic_series
from .conftest import collate_windows

TINY = {"dim": 16, "depth": 1, "num_heads": 2}


def _trainer(tmp_path, **kwargs) -> Trainer:
    return Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, default_root_dir=tmp_path,
                   num_sanity_val_steps=0, **kwargs)


@pytest.mark.parametrize("encodings", [
    ["calendar"], ["calendar_embedding"], ["fourier"], ["continuous"], ["time2vec"],
    ["timedelta"], [], ["calendar", "fourier", "continuous", "time2vec", "timedelta"],
    [{"class_path": "posenc.temporal.CalendarFeatures",
      "init_args": {"fields": ["hour", "day_of_week"], "cyclic": False}}],
    [{"class_path": "posenc.temporal.ContinuousSinusoidal",
      "init_args": {"min_period": 2.0, "max_period": 500.0}}],
])
@pytest.mark.parametrize("relative", ["rope", "alibi", None])
def test_every_encoding_runs_forward_and_backward(batch, encodings, relative):
    model = Forecaster(encodings=encodings, relative=relative, **TINY)
    out = model(batch)
    assert out.shape == (*batch["target_valid"].shape, 1, 1)
    out.sum().backward()
    assert torch.isfinite(out).all()


def test_dict_relative_encoding_gets_head_dim_filled_in(batch):
    model = Forecaster(relative={"class_path": "posenc.core.RotaryEncoding",
                                 "init_args": {"base": 100.0}}, **TINY)
    rotary = model.model.blocks[0].attn.rotary
    assert isinstance(rotary, RotaryEncoding) and rotary.head_dim == 8 and rotary.base == 100.0
    assert torch.isfinite(model(batch)).all()


def test_future_values_never_reach_the_prediction(batch):
    seed_everything(0)
    model = Forecaster(encodings=["calendar", "continuous", "timedelta"], **TINY).eval()
    poisoned = dict(batch, target_value=torch.randn_like(batch["target_value"]) * 100,
                    target_observed=~batch["target_observed"])
    assert torch.equal(model(batch), model(poisoned))


def test_predictions_depend_on_query_timestamps(batch):
    seed_everything(0)
    model = Forecaster(encodings=["calendar"], relative=None, **TINY).eval()
    later = batch["target_local"] + 5 * 3600 * 10**9
    moved = dict(batch, target_local=later, target_fields=local_time_fields(later))
    assert not torch.allclose(model(batch), model(moved))


def test_calendar_encodings_read_the_fields_the_batch_carries(batch):
    """The data pipeline computes the calendar fields; the model reads them, not the local
    times (whose calendar it no longer computes in forward)."""
    seed_everything(0)
    model = Forecaster(encodings=["calendar"], relative=None, **TINY).eval()
    later = batch["target_local"] + 5 * 3600 * 10**9
    torch.testing.assert_close(model(dict(batch, target_local=later)), model(batch))
    moved = dict(batch, target_fields=local_time_fields(later))
    assert not torch.allclose(model(moved), model(batch))
    with pytest.raises(ValueError, match=r"^batch has no \['context_fields'\]; make batches "
                                         r"with a TimeSeriesDataModule, Forecaster.forecast"):
        model({k: v for k, v in batch.items() if k != "context_fields"})
    expected = re.escape(str((*batch["target_valid"].shape, 11)))
    with pytest.raises(ValueError, match=rf"^batch\['target_fields'\] must be the {expected} "
                                         r"int calendar fields of batch\['target_local'\]"):
        model(dict(batch, target_fields=batch["target_fields"][:, :, :4]))
    with pytest.raises(TypeError, match=r"^batch\['context_time'\] must be int64 nanoseconds, "
                                        r"got torch.float64"):
        model(dict(batch, context_time=batch["context_time"].double()))
    # Encodings that read no fields need none.
    elapsed_only = Forecaster(encodings=["continuous"], **TINY).eval()
    elapsed_only({k: v for k, v in batch.items() if not k.endswith("_fields")})


def test_each_query_is_independent_of_the_other_queries(batch):
    seed_everything(0)
    model = Forecaster(encodings=["calendar", "continuous"], relative="rope", **TINY).eval()
    full = model(batch)
    keep = [0, 2]  # ask for a subset of the future times only
    subset = dict(batch)
    for key in ("target_time", "target_local", "target_fields", "target_valid",
                "target_value", "target_observed"):
        subset[key] = batch[key][:, keep]
    torch.testing.assert_close(model(subset), full[:, keep], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [{"relative": "alibi"},
                                     {"patch_size": 3, "lags": ["3h"]}],  # patches, lags
                         ids=["alibi", "patches_lags"])
def test_padding_does_not_change_a_window_forecast(datamodule, options):
    seed_everything(0)
    model = Forecaster(encodings=["calendar", "timedelta"], **options, **TINY).eval()
    ds = datamodule.datasets["train"]
    items = [ds[i] for i in range(len(ds))]
    short = min(range(len(items)), key=lambda i: len(items[i]["context_time"]))
    longest = max(range(len(items)), key=lambda i: len(items[i]["context_time"]))
    assert len(items[short]["context_time"]) < len(items[longest]["context_time"])
    alone = model(collate_windows([items[short]]))
    padded = model(collate_windows([items[short], items[longest]]))[:1]
    n = alone.shape[1]
    torch.testing.assert_close(padded[:, :n], alone, rtol=1e-5, atol=1e-5)


def test_relative_time_encodings_are_shift_invariant(batch):
    """With only elapsed-time encodings, moving every timestamp by the same amount changes
    nothing; calendar features (absolute local time) would."""
    seed_everything(0)
    model = Forecaster(encodings=["continuous", "time2vec"], relative="rope", **TINY).eval()
    week = 7 * 86400 * 10**9 + 12345
    shifted = dict(batch)
    for key in ("context_time", "context_local", "target_time", "target_local"):
        shifted[key] = batch[key] + week
    torch.testing.assert_close(model(shifted), model(batch), rtol=1e-5, atol=1e-5)


def test_rope_sees_real_time_gaps(batch):
    seed_everything(0)
    model = Forecaster(encodings=[], relative="rope", **TINY).eval()
    moved = dict(batch)
    moved["context_time"] = batch["context_time"].clone()
    moved["context_time"][:, 0] -= 3 * 3600 * 10**9  # an earlier first observation
    assert not torch.allclose(model(batch), model(moved))


# -- losses and metrics against their formulas ---------------------------------------------
def test_point_losses_are_masked_means():
    pred = torch.tensor([[1.0, 2.0, 3.0]])
    target = torch.tensor([[2.0, 0.0, 7.0]])
    mask = torch.tensor([[True, True, False]])
    assert masked_point_loss(pred, target, mask, "mae").item() == pytest.approx(1.5)
    assert masked_point_loss(pred, target, mask, "mse").item() == pytest.approx(2.5)


def test_quantile_loss_is_the_pinball_loss():
    pred = torch.tensor([[[1.0, 2.0, 4.0]]])      # quantiles 0.1, 0.5, 0.9 of one target
    target = torch.tensor([[3.0]])
    q = torch.tensor([0.1, 0.5, 0.9])
    # e = 2, 1, -1 -> 0.1*2, 0.5*1, (0.9-1)*(-1) = 0.2, 0.5, 0.1 -> mean 0.2667
    loss = quantile_loss(pred, target, torch.tensor([[True]]), q)
    assert loss.item() == pytest.approx((0.2 + 0.5 + 0.1) / 3)


def test_logged_metrics_equal_an_independent_computation(datamodule, tmp_path):
    seed_everything(0)
    model = Forecaster(encodings=["calendar"], loss="quantile", quantiles=[0.2, 0.5, 0.8],
                       **TINY)
    [result] = _trainer(tmp_path).validate(model, datamodule, verbose=False)
    errors, scaled_ratios, losses = [], [], []
    # MASE's denominator: GluonTS's seasonal error of the whole history before each origin
    # (hourly: lag 24 observations), from the raw table
    times = pd.to_datetime(datamodule.data["timestamp"]).to_numpy().astype("datetime64[ns]")
    values = datamodule.data["value"].to_numpy(float)
    assert datamodule.mase_season == 24
    model.eval()
    with torch.no_grad():
        for batch in datamodule.val_dataloader():
            pred = model(batch)
            point = pred[..., 1]                                   # the 0.5 quantile
            obs = batch["target_observed"]
            unscaled = point * batch["scale"][:, None] + batch["loc"][:, None]
            truth = batch["target_value"] * batch["scale"][:, None] + batch["loc"][:, None]
            errors.append((unscaled - truth)[obs])
            for b in range(point.shape[0]):
                past = values[times < np.datetime64(int(batch["target_time"][b, 0]), "ns")]
                lag = 24 if 24 < len(past) else 1
                naive = np.nanmean(np.abs(past[lag:] - past[:-lag]))
                tgt = obs[b, :, 0]
                mae = (unscaled[b, tgt, 0] - truth[b, tgt, 0]).abs().mean()
                scaled_ratios.append(float(mae) / naive)
            losses.append(quantile_loss(pred, batch["target_value"], obs,
                                        torch.tensor([0.2, 0.5, 0.8])))
    errors = torch.cat(errors)
    assert result["val/mae"] == pytest.approx(errors.abs().mean().item(), rel=1e-4)
    assert result["val/rmse"] == pytest.approx(errors.square().mean().sqrt().item(), rel=1e-4)
    assert result["val/mase"] == pytest.approx(np.mean(scaled_ratios), rel=1e-4)
    assert result["val/mae"] > 0.05  # in data units, not scaled ones


def test_checkpoint_reloads_with_weights_only_and_predicts_identically(datamodule, tmp_path):
    seed_everything(0)
    model = Forecaster(encodings=["calendar", "fourier", "time2vec"], relative="rope",
                       loss="mse", **TINY)
    trainer = _trainer(tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(model, datamodule)
    path = tmp_path / "forecaster.ckpt"
    trainer.save_checkpoint(path)
    loaded = Forecaster.load_from_checkpoint(path, weights_only=True)
    assert loaded.hparams.encodings == ["calendar", "fourier", "time2vec"]
    batch = next(iter(datamodule.test_dataloader()))
    model.eval(), loaded.eval()
    torch.testing.assert_close(loaded.predict_step(batch)["prediction"],
                               model.predict_step(batch)["prediction"], rtol=0, atol=0)


def test_predict_at_irregular_future_times_returns_data_units(datamodule):
    seed_everything(0)
    model = Forecaster(**TINY).eval()
    history = synthetic_series(48)
    future = pd.DatetimeIndex(["2021-01-03 00:10", "2021-01-03 05:00", "2021-01-04 12:00"])
    batch = make_batch(history["timestamp"], history["value"], future,
                       loc=datamodule.loc, scale=datamodule.scale)
    out = model.predict_step(batch)
    assert out["prediction"].shape == (1, 3, 1)
    scaled = model(batch)[..., 0, 0]
    expected = scaled * float(datamodule.scale[0]) + float(datamodule.loc[0])
    torch.testing.assert_close(out["prediction"][..., 0], expected)


@pytest.mark.parametrize("kwargs, match", [
    ({"loss": "huber"}, "loss must be one of"),
    ({"loss": "quantile", "quantiles": [0.5, 0.1]}, "increasing levels"),
    ({"quantiles": [0.1, 0.9]}, "need loss='quantile'"),
    ({"encodings": ["calender"]}, r"encodings\[0\]='calender' is not a known name; valid"),
    ({"relative": "t5"}, "relative='t5' is not a known name"),
    ({"relative": {"init_args": {}}}, "needs the keys class_path"),
    ({"time_unit": "fortnightly"}, "time_unit must be a duration"),
    ({"dim": 30, "num_heads": 4}, "divisible by num_heads"),
])
def test_bad_arguments_raise_clear_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Forecaster(**{**TINY, **kwargs})


# Calendar months are a time_unit (test_units_and_counts.py), never a naive season.
@pytest.mark.parametrize(("argument", "value"), [
    *(("naive_seasons", v) for v in ["12MS", "1m", "1M", "1MS", "ME", "3600"]),
    *(("time_unit", v) for v in ["1m", "1M", "3600"])])
def test_calendar_and_unitless_durations_are_refused_by_the_forecaster(argument, value):
    # pd.Timedelta read "1MS" as 0.001 s and "1m" as a minute.
    name = re.escape("naive_seasons[0]") if argument == "naive_seasons" else argument
    with pytest.raises(ValueError, match=rf"^{name}={value!r} (is|has no unit).*"
                                         rf"(fixed duration|write a duration)"):
        Forecaster(**{**TINY, argument: [value] if argument == "naive_seasons" else value})


@pytest.mark.parametrize("value, seconds", [("1h", 3600), ("30min", 1800), ("7D", 604800),
                                            ("1W", 604800), ("1 days 00:00:00", 86400)])
def test_fixed_time_units_are_their_seconds(value, seconds):
    model = Forecaster(**{**TINY, "time_unit": value, "naive_seasons": [value]})
    assert model.model.unit_seconds == seconds
    assert list(model.naive_seasons.values()) == [seconds * 10**9]


def test_bad_sizes_name_the_argument():
    with pytest.raises(ValueError, match="mase_season must be >= 1"):
        TimeSeriesDataModule(synthetic_series(48), mase_season=0)
    with pytest.raises(ValueError, match=r"naive_seasons=\['1D', '24h'\] repeats the season"):
        Forecaster(**{**TINY, "naive_seasons": ["1D", "24h"]})
    with pytest.raises(TypeError, match="depth must be an int"):
        Forecaster(**{**TINY, "depth": 2.0})


def test_model_and_data_disagreeing_on_targets_is_an_error(datamodule, tmp_path):
    model = Forecaster(num_targets=2, **TINY)
    with pytest.raises(ValueError, match="num_targets=2 does not match"):
        _trainer(tmp_path, max_epochs=1).fit(model, datamodule)


def test_mase_falls_back_to_lag_one_for_short_contexts():
    history = np.array([[1.0], [3.0], [2.0]])
    scale = SeasonalError(history, np.array([0, 3]), 24)(np.array([0]), np.array([3]))
    assert scale[0, 0, 0] == pytest.approx(1.5)           # 3 rows <= 24: lag 1
    periodic = np.tile(history, (10, 1))
    scale = SeasonalError(periodic, np.array([0, 30]), 3)(np.array([0]), np.array([30]))
    assert scale[0, 0, 0] == 0.0  # period-3 data: zero seasonal error


def test_instance_norm_makes_forecasts_follow_the_context_level_and_scale(batch):
    """RevIN: an affine change of the observed values changes the forecast the same way."""
    seed_everything(0)
    model = Forecaster(encodings=["calendar"], **TINY).eval()
    moved = dict(batch, context_value=batch["context_value"] * 3.0 + 5.0)
    torch.testing.assert_close(model(moved), model(batch) * 3.0 + 5.0, rtol=1e-3, atol=1e-3)
    plain = Forecaster(encodings=["calendar"], instance_norm=False, **TINY).eval()
    assert not torch.allclose(plain(moved), plain(batch) * 3.0 + 5.0, atol=1e-2)


def test_what_an_encoding_reads_comes_from_its_class():
    """The forecaster asks each encoding's class what it reads (``reads``); a class that
    declares nothing is refused by name, never guessed."""
    model = Forecaster(encodings=["calendar", "fourier", "time2vec", "timedelta", "age"],
                       **TINY)
    assert model.model.time_features.reads == ["fields", "timestamps", "elapsed", "deltas",
                                               "series_start"]
    with pytest.raises(TypeError, match=r"^encodings\[1\] SinusoidalEncoding does not declare "
                                        r"what it reads: give the class a reads attribute, one "
                                        r"of \['fields', 'timestamps', 'elapsed', 'deltas', "
                                        r"'series_start'\], got None"):
        Forecaster(encodings=["calendar", {"class_path": "posenc.core.SinusoidalEncoding"}],
                   **TINY)
    with pytest.raises(TypeError, match=r"^encoding Time2Vec does not declare what it reads: "
                                        r".* got 'calendar'"):
        encoding_reads(type("Time2Vec", (torch.nn.Module,), {"reads": "calendar"})())


def test_the_time_features_width_is_what_each_encoding_declares():
    """The network sizes its projection from each encoding's declared ``dim`` (it never runs
    an encoding to measure it); a class without one is refused by name."""
    model = Forecaster(encodings=["calendar", "fourier", "timedelta", "age"], **TINY)
    encodings = model.model.time_features.encodings
    assert model.model.time_features.width == sum(e.dim for e in encodings)
    assert model.model.time_proj.in_features == model.model.time_features.width

    class Undeclared(torch.nn.Module):
        reads = "elapsed"

        def forward(self, elapsed):
            return elapsed[..., None]

    with pytest.raises(TypeError, match=r"^encodings\[1\] Undeclared does not declare its "
                                        r"width: give it a dim attribute, the positive int "
                                        r"size of its last output axis, got None"):
        TimeFeatures([encodings[0], Undeclared()], ["fields", "elapsed"])
    with pytest.raises(TypeError, match=r"got True"):
        encoding_dim(type("Flag", (torch.nn.Module,), {"dim": True})())


@pytest.mark.parametrize("relative", ["fire", "kerple_log", "kerple_power"])
def test_time_gap_biases_train_the_forecaster(relative):
    """FIRE and Kerple as biases of real elapsed time: built by name, one block each, and a
    training step reaches their parameters."""
    model = Forecaster(dim=16, depth=2, num_heads=2, encodings=[], relative=relative)
    biases = [block.attn.bias for block in model.model.blocks]
    assert len({id(b) for b in biases}) == 2 and all(b is not None for b in biases)
    ctx = pd.date_range("2024-03-30", periods=12, freq="2h", tz="Europe/Berlin")
    batch = make_batch(ctx, np.sin(np.arange(12.0)), ctx[-1:] + pd.Timedelta("3h"))
    batch["target_value"] = torch.ones(1, 1, 1)
    batch["target_observed"] = torch.ones(1, 1, 1, dtype=torch.bool)
    model.training_step(batch, 0).backward()
    grads = [p.grad for b in biases for p in b.parameters()]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


def test_the_public_surface_has_the_state_and_the_plain_network_and_demo_data_one_level_down(
        batch):
    """Users receive a Fitted state (``model.fitted``) and may run the network without
    Lightning: both are exported; the shipped data sets' modules live in
    ``posenc.tasks.datasets``, not at the top of ``posenc.tasks``."""
    import posenc.tasks as tasks
    from lightning.pytorch import LightningModule
    from posenc.tasks import forecasting
    from posenc.tasks.forecasting.network import ForecastTransformer
    from posenc.tasks.forecasting.schema import Fitted

    assert tasks.Fitted is forecasting.Fitted is Fitted
    assert tasks.ForecastTransformer is forecasting.ForecastTransformer is ForecastTransformer
    network = Forecaster(**TINY).eval().model
    assert isinstance(network, tasks.ForecastTransformer)
    assert isinstance(network, torch.nn.Module) and not isinstance(network, LightningModule)
    with torch.no_grad():
        assert network(batch).shape == (*batch["target_time"].shape, 1, 1)
    demo = {"BirthdaysDataModule", "ElecDemandDataModule", "GlucoseDataModule",
            "NYCWeatherDataModule", "SeattleTempsDataModule", "TaylorDataModule"}
    assert demo <= set(tasks.datasets.__all__)
    assert not demo & (set(tasks.__all__) | set(forecasting.__all__) | set(vars(tasks)))
    assert all(issubclass(getattr(tasks.datasets, name), tasks.TimeSeriesDataModule)
               for name in demo)


def test_testing_validating_and_predicting_on_other_data_keep_the_model_s_fitted_state(
        tmp_path):
    a = synthetic_series(200)
    b = a.assign(value=a["value"] * 10 + 50)  # other data, other scaling
    lengths = {"context_length": 24, "horizon": 6, "stride": 6, "batch_size": 8}
    dm_a = TimeSeriesDataModule(a, **lengths)
    seed_everything(0)
    model = Forecaster(instance_norm=False, **TINY)
    trainer = _trainer(tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(model, dm_a)
    path = tmp_path / "a.ckpt"
    trainer.save_checkpoint(path)
    schema, before = model.fitted, model.forecast(a)
    fitted = copy.deepcopy(schema)
    # The training span's statistics by pandas: what every reading for this model scales by.
    train = a.loc[a["timestamp"] < pd.Timestamp(dm_a.split_times["val"]), "value"]
    loc, scale = train.mean(), train.std(ddof=0)
    assert schema.loc[0][0] == pytest.approx(loc) and schema.scale[0][0] == pytest.approx(scale)

    dm_b = TimeSeriesDataModule(b, **lengths, predict_split="test", fitted=model.fitted)
    [result] = _trainer(tmp_path).test(model, dm_b, verbose=False)
    _trainer(tmp_path).validate(model, dm_b, verbose=False)
    predicted = _trainer(tmp_path).predict(model, dm_b)
    assert model.fitted is schema and model.fitted == fitted
    pd.testing.assert_frame_equal(model.forecast(a), before)
    # test/mae by hand: B's raw values scaled with A's statistics, the model, unscaled.
    raw = b.set_index("timestamp")["value"]
    errors = []
    model.eval()
    with torch.no_grad():
        for batch in dm_b.test_dataloader():
            context = pd.DatetimeIndex(batch["context_time"].flatten().numpy())
            values = torch.tensor(((raw[context].to_numpy() - loc) / scale), dtype=torch.float32)
            batch["context_value"] = values.reshape(batch["context_value"].shape)
            pred = model(batch)[..., 0, 0] * scale + loc
            target = pd.DatetimeIndex(batch["target_time"].flatten().numpy())
            truth = torch.tensor(raw[target].to_numpy()).reshape(pred.shape)
            errors.append((pred - truth).abs().flatten())
    assert result["test/mae"] == pytest.approx(torch.cat(errors).mean().item(), rel=1e-4)
    # predict on B's test windows = forecast() from each window's history (the model's path).
    first = predicted[0]
    origin = int(first["origin"][0])
    history = b[b["timestamp"] <= pd.Timestamp(origin)]
    future = pd.DataFrame({"timestamp": pd.DatetimeIndex(first["time"][0].numpy())})
    expected = model.forecast(history, future)["value"].to_numpy()
    np.testing.assert_allclose(first["prediction"][0, :, 0].numpy(), expected, rtol=1e-5)

    # A checkpoint restored by Trainer.test (after the data module's setup) is used too: the
    # data reads with the checkpoint's state, given its path.
    fresh = Forecaster(instance_norm=False, **TINY)
    [again] = _trainer(tmp_path).test(fresh, TimeSeriesDataModule(b, **lengths, fitted=path),
                                      ckpt_path=path, verbose=False)
    assert fresh.fitted == fitted
    assert again["test/mae"] == pytest.approx(result["test/mae"], rel=1e-5)


def test_the_data_reads_with_the_fitted_state_it_is_given_never_the_model_s_own():
    """One-way: a data module is given a trained model's state (``fitted=``, the state or its
    checkpoint's path); it never looks up the model of its trainer, and never changes the
    state it is given."""
    from types import SimpleNamespace

    a = synthetic_series(200)
    b = a.assign(value=a["value"] * 10 + 50)
    lengths = {"context_length": 24, "horizon": 6, "stride": 6}
    dm_a = TimeSeriesDataModule(a, **lengths)
    model = Forecaster(**TINY)
    model.fitted = dm_a.fitted
    own = TimeSeriesDataModule(b, **lengths)
    own.trainer = SimpleNamespace(lightning_module=model, datamodule=own)
    assert own.fitted.loc != dm_a.fitted.loc
    # B's own scaling: its training span's mean, as pandas computes it.
    train = b.loc[b["timestamp"] < pd.Timestamp(own.split_times["val"]), "value"]
    assert own.fitted.loc[0][0] == pytest.approx(train.mean())
    given = TimeSeriesDataModule(b, **lengths, fitted=model.fitted)
    assert given.fitted.loc == dm_a.fitted.loc and given.fitted.series_keys == ((),)
    assert model.fitted is dm_a.fitted and model.fitted.loc == dm_a.fitted.loc
    with pytest.raises(TypeError, match=r"^fitted must be a Fitted state \(model.fitted\), the "
                                        r"path of a checkpoint holding one, or None, got dict"):
        TimeSeriesDataModule(b, **lengths, fitted=model.fitted.to_dict())


def test_a_checkpoint_given_as_the_fitted_state_is_checked_naming_it(tmp_path):
    """``fitted=`` a path: a missing file, a folder, a file that is no checkpoint, a checkpoint
    without a fitted state or with a broken one are refused naming the argument and the
    path."""
    a = synthetic_series(200)
    lengths = {"context_length": 24, "horizon": 6}
    fitted = TimeSeriesDataModule(a, **lengths).fitted
    a.to_csv(tmp_path / "a.csv", index=False)
    torch.save({"state_dict": {}}, tmp_path / "vit.ckpt")
    torch.save({"fitted": {**fitted.to_dict(), "scaling": 1}}, tmp_path / "broken.ckpt")
    torch.save({"fitted": fitted.to_dict()}, tmp_path / "good.ckpt")
    for name, message in (("missing.ckpt", "is not a file"), (".", "is a directory"),
                          ("a.csv", "is not a readable torch checkpoint"),
                          ("vit.ckpt", "holds no fitted state"),
                          ("broken.ckpt", r": a fitted state has unknown keys \['scaling'\]")):
        path = str(tmp_path / name)
        with pytest.raises(ValueError, match=rf"^fitted={re.escape(repr(path))}.*{message}"):
            TimeSeriesDataModule(a, **lengths, fitted=path)
    with pytest.raises(TypeError, match=r"^fitted must be a Fitted state .* got int"):
        TimeSeriesDataModule(a, **lengths, fitted=3)
    given = TimeSeriesDataModule(a, **lengths, fitted=tmp_path / "good.ckpt")
    assert given.fitted == fitted and given.hparams.fitted == str(tmp_path / "good.ckpt")


def test_a_trained_model_refuses_data_read_with_a_state_of_its_own(tmp_path):
    """Testing, validating or predicting a trained model on a data module that fitted its own
    state (other data's scaling) is refused, before and after a checkpoint is restored; the
    error says how to give the model's."""
    a = synthetic_series(200)
    b = a.assign(value=a["value"] * 10 + 50)
    lengths = {"context_length": 24, "horizon": 6, "stride": 6, "batch_size": 8}
    model = Forecaster(**TINY)
    model.fitted = TimeSeriesDataModule(a, **lengths).fitted
    path = tmp_path / "a.ckpt"
    trainer = _trainer(tmp_path)
    trainer.strategy.connect(model)
    trainer.save_checkpoint(path)
    message = (r"^the data is read with a fitted state of its own .* not the model's: give the "
               r"data module the model's, TimeSeriesDataModule\(\.\.\., fitted=model.fitted\)")
    for run in ("test", "validate", "predict"):
        with pytest.raises(ValueError, match=message):
            getattr(_trainer(tmp_path), run)(model, TimeSeriesDataModule(b, **lengths))
    with pytest.raises(ValueError, match=message):  # restored after the data's setup
        _trainer(tmp_path).test(Forecaster(**TINY), TimeSeriesDataModule(b, **lengths),
                                ckpt_path=path, verbose=False)
    # The same data's own state is the model's: nothing to refuse.
    [result] = _trainer(tmp_path).test(model, TimeSeriesDataModule(a, **lengths), verbose=False)
    assert result["test/mae"] > 0


def test_a_trainer_reads_a_data_modules_table_once_with_the_state_it_is_given(
        tmp_path, table_reads):
    """Under a trainer a data module reads its table once, in its setup, with the state it
    was given (its own for a first fit, the model's for a trained model's test or predict);
    the loaders read nothing again."""
    reads = table_reads
    a = synthetic_series(200)
    lengths = {"context_length": 24, "horizon": 6, "stride": 6, "batch_size": 8}
    seed_everything(0)
    model = Forecaster(**TINY)
    _trainer(tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1).fit(
        model, TimeSeriesDataModule(a, **lengths))
    assert reads == [None]
    reads.clear()
    other = TimeSeriesDataModule(a.assign(value=a["value"] + 1), **lengths,
                                 predict_split="test", fitted=model.fitted)
    _trainer(tmp_path).test(model, other, verbose=False)
    assert len(reads) == 1 and reads[0] is model.fitted
    _trainer(tmp_path).predict(model, other)
    assert len(reads) == 1  # the same state: read already
    with pytest.raises(RuntimeError, match=r"setup\(\) must run before asking for data"):
        TimeSeriesDataModule(a, **lengths).train_dataloader()


def test_predicting_the_future_makes_no_split_windows(tmp_path):
    """A recent history too short for validation and test windows still forecasts its
    future: predict's set-up reads the table and makes no split's windows."""
    a = synthetic_series(200)
    lengths = {"context_length": 24, "horizon": 6}
    model = Forecaster(**TINY)
    model.fitted = TimeSeriesDataModule(a, **lengths).fitted
    recent = TimeSeriesDataModule(a.tail(30), **lengths, fitted=model.fitted)
    [out] = _trainer(tmp_path).predict(model, recent)
    assert int(out["valid"].sum()) == 6
    assert recent.datasets == {}
    with pytest.raises(ValueError, match=r"the train split .* fits no window"):
        recent.setup("test")


def _panel(names: list[str], level: dict[str, float]) -> pd.DataFrame:
    frames = [synthetic_series(150, seed=i).assign(id=name, value=lambda f, n=name:
                                                   f["value"] + level[n])
              for i, name in enumerate(names)]
    return pd.concat(frames, ignore_index=True)


def test_a_series_new_to_the_model_is_scaled_by_its_own_training_span(tmp_path):
    lengths = {"context_length": 24, "horizon": 6, "series_column": "id"}
    a = _panel(["x", "y"], {"x": 0.0, "y": 100.0})
    dm_a = TimeSeriesDataModule(a, **lengths)
    model = Forecaster(**TINY)
    _trainer(tmp_path, max_epochs=1, limit_train_batches=1, limit_val_batches=1).fit(model,
                                                                                     dm_a)
    b = _panel(["y", "z"], {"y": 500.0, "z": -40.0})
    dm_b = TimeSeriesDataModule(b, **lengths, fitted=model.fitted)
    _trainer(tmp_path).test(model, dm_b, verbose=False)
    assert model.fitted.series_keys == (("x",), ("y",))
    assert dm_b.fitted.series_keys == (("x",), ("y",), ("z",))
    assert dm_b.fitted.loc[:2] == model.fitted.loc  # known series: the model's scaling
    z = b[b["id"] == "z"]
    train = z.loc[z["timestamp"] < pd.Timestamp(dm_b.split_times["val"]), "value"]
    assert dm_b.fitted.loc[2][0] == pytest.approx(train.mean())
    assert dm_b.fitted.scale[2][0] == pytest.approx(train.std(ddof=0))
    per_series = model.test_per_series
    assert per_series["id"].tolist() == ["x", "y", "z"]
    assert per_series["windows"].tolist()[0] == 0 and min(per_series["windows"][1:]) > 0
    # The forecasts file names the new series too: its layout is the predicted data's state.
    path = tmp_path / "forecasts.csv"
    _trainer(tmp_path, callbacks=[ForecastWriter(str(path))]).predict(model, dm_b,
                                                                      return_predictions=False)
    written = pd.read_csv(path)
    assert written.groupby("id").size().to_dict() == {"y": 6, "z": 6}


def test_other_data_that_the_model_s_fitted_state_cannot_read_is_refused(tmp_path, datamodule):
    model = Forecaster(**TINY)
    model.fitted = datamodule.fitted
    frame = synthetic_series(200, columns=2)
    two = TimeSeriesDataModule(frame, target_columns=["value", "value2"], context_length=24,
                               horizon=6)
    with pytest.raises(ValueError, match=r"the model was trained on 1 target_columns "
                                         r"\['value'\]; this data has 2"):
        _trainer(tmp_path).test(model, two, verbose=False)


def _two_targets(seed: int = 0, n: int = 200, freq: str = "1h") -> pd.DataFrame:
    """Two targets of very different levels (x near 10, y near 1000) and two covariates."""
    frame = synthetic_series(n, columns=2, seed=seed, freq=freq).rename(
        columns={"value": "x", "value2": "y"})
    return frame.assign(y=frame["y"] * 100, p1=np.arange(n) % 7, p2=np.arange(n) % 5,
                        f1=np.arange(n) % 3, f2=np.arange(n) % 2, id="a")


@pytest.mark.parametrize("argument, trained, other", [
    ("target_columns", ["x", "y"], ["y", "x"]),
    ("target_columns", ["x", "y"], ["x", "p1"]),
    ("past_covariates", ["p1", "p2"], ["p2", "p1"]),
    ("future_covariates", ["f1", "f2"], ["f1", "p1"]),
    ("series_column", ["id", "f2"], ["f2", "id"]),
], ids=["targets-swapped", "target-renamed", "past-swapped", "future-renamed",
        "series-swapped"])
def test_data_whose_columns_differ_from_the_model_s_by_name_or_order_is_refused(
        tmp_path, argument, trained, other):
    # The model scales and reads channels by position: testing on ["y", "x"] with a model of
    # ["x", "y"] would scale y (near 1000) by x's mean (near 10), silently.
    frame = _two_targets()
    base = {"target_columns": ["x", "y"], "context_length": 24, "horizon": 6, "stride": 6}
    model = Forecaster(**TINY, num_targets=2)
    model.fitted = TimeSeriesDataModule(frame, **{**base, argument: trained}).fitted
    data = TimeSeriesDataModule(frame, **{**base, argument: other})
    field = {"series_column": "series_columns"}.get(argument, argument)
    message = (rf"^the model was trained on 2 {field} {re.escape(str(trained))}; this data has "
               rf"2: {re.escape(str(other))}")
    with pytest.raises(ValueError, match=message):
        TimeSeriesDataModule(frame, **{**base, argument: other}, fitted=model.fitted)
    with pytest.raises(ValueError, match=message):
        _trainer(tmp_path).test(model, data, verbose=False)


def test_data_sampled_at_another_step_is_refused_naming_both_steps(tmp_path):
    hourly = synthetic_series(300)
    lengths = {"context_length": 24, "horizon": 6, "stride": 6}
    model = Forecaster(**TINY)
    model.fitted = TimeSeriesDataModule(hourly, **lengths).fitted
    half_hourly = synthetic_series(300, freq="30min")
    message = (r"the model was trained on data sampled every 0 days 01:00:00 \(median step\); "
               r"this data's median step is 0 days 00:30:00")
    with pytest.raises(ValueError, match=message):
        TimeSeriesDataModule(half_hourly, **lengths, fitted=model.fitted).setup("test")
    with pytest.raises(ValueError, match=message):
        _trainer(tmp_path).test(model, TimeSeriesDataModule(half_hourly, **lengths),
                                verbose=False)
    with pytest.raises(ValueError, match=r"^history: " + message):
        model.forecast(half_hourly)
    (tmp_path / "parts").mkdir()  # a Parquet dataset: the state is fitted chunk by chunk
    half_hourly.to_parquet(tmp_path / "parts" / "part-0.parquet")
    with pytest.raises(ValueError, match=message):
        TimeSeriesDataModule(tmp_path / "parts", **lengths, fitted=model.fitted).setup("test")
    # The same sampling with other values, a jitter or another span reads as before.
    shifted = synthetic_series(300, seed=1, start="2022-03-01")
    hour = pd.Timedelta("1h").value
    assert TimeSeriesDataModule(shifted, **lengths, fitted=model.fitted).fitted.step_ns == hour
    assert len(model.forecast(shifted, 3)) == 3
    # Calendar months are 28 to 31 days: a short monthly history (median 30 days) is read by
    # a model of a long one (median 31 days).
    monthly = pd.DataFrame({"timestamp": pd.date_range("2000-01-01", periods=120, freq="MS"),
                            "value": np.arange(120.0)})
    model.fitted = TimeSeriesDataModule(monthly, context_length=12, horizon=3).fitted
    assert model.fitted.step_ns == pd.Timedelta("31D").value
    assert len(model.forecast(monthly[monthly.timestamp >= "2009-02-01"].head(4), 2)) == 2


@pytest.mark.parametrize("levels, below, above", [
    ([0.2, 0.7], 0, 1), ([0.1, 0.3, 0.6, 0.9], 1, 2), ([0.25, 0.5, 0.75], 1, 1)])
def test_the_point_forecast_is_the_median_interpolated_between_the_quantiles(
        datamodule, tmp_path, levels, below, above):
    # GluonTS's QuantileForecast.quantile(0.5) between levels x1 < 0.5 < x2:
    # (x2 - 0.5) / (x2 - x1) * y1 + (0.5 - x1) / (x2 - x1) * y2 (y1 itself at x1 = 0.5).
    seed_everything(0)
    model = Forecaster(loss="quantile", quantiles=levels, **TINY)
    [result] = _trainer(tmp_path).validate(model, datamodule, verbose=False)
    x1, x2 = levels[below], levels[above]
    weight = 0.0 if below == above else (0.5 - x1) / (x2 - x1)
    model.eval()
    errors = []
    with torch.no_grad():
        for batch in datamodule.val_dataloader():
            out = model.predict_step(batch)
            quantiles = out["quantiles"].double()
            median = (1 - weight) * quantiles[..., below] + weight * quantiles[..., above]
            torch.testing.assert_close(out["prediction"].double(), median, rtol=1e-6,
                                       atol=1e-5)
            truth = batch["target_value"] * batch["scale"][:, None] + batch["loc"][:, None]
            errors.append((median - truth)[batch["target_observed"]])
    assert result["val/mae"] == pytest.approx(torch.cat(errors).abs().mean().item(), rel=1e-4)


@pytest.mark.parametrize("levels", [[0.6, 0.9], [0.1, 0.2], [0.1]])
def test_quantile_levels_that_do_not_bracket_the_median_are_refused(levels):
    with pytest.raises(ValueError, match=rf"^quantiles={re.escape(str(levels))} must include "
                                         r"0\.5 or levels on both sides of it"):
        Forecaster(loss="quantile", quantiles=levels, **TINY)


def test_naive_smape_leaves_out_points_where_the_data_and_the_naive_are_both_zero(tmp_path):
    # Hourly counts, mostly zero, whose mean and spread do not round-trip 0 in float32:
    # scored on unscale(scale(y)), a 0/0 point became about 1e-7/1e-7 and counted as 0.
    rng = np.random.default_rng(14)
    n = 24 * 20
    stamps = pd.date_range("2021-01-01", periods=n, freq="1h")
    frame = pd.concat([pd.DataFrame({"id": key, "timestamp": stamps,
                                     "value": rng.poisson(rate, n) * 1.0})
                       for key, rate in (("a", 0.3), ("b", 0.7))], ignore_index=True)
    dm = TimeSeriesDataModule(frame, series_column="id", context_length=48, horizon=12,
                              stride=12, season="1D", batch_size=16)
    # The premise: 0 scaled in float64 to float32 (scale_panel), unscaled in float32 (a batch)
    zero = ((0 - np.asarray(dm.fitted.loc)) / np.asarray(dm.fitted.scale)).astype(np.float32)
    loc, scale = dm.fitted.target_scaling()
    assert (zero * scale + loc != 0).all()
    model = Forecaster(naive_seasons=dm.naive_seasons, **TINY)
    [result] = _trainer(tmp_path).test(model, dm, verbose=False)
    # GluonTS's sMAPE of the naive y[t - 24 h] from the table: per (window, target) the mean of
    # 2 |y - yhat| / (|y| + |yhat|) over points with a non-zero denominator, then the mean of
    # the rows that have one.
    panel = dm.panel()
    series, _, t0, t1 = dm.windows("test").locate(np.arange(len(dm.windows("test"))))
    values = frame["value"].to_numpy()[panel.rows]
    rows, both_zero = [], 0
    for a, b in zip(t0, t1, strict=True):
        truth, naive = values[a:b], values[a - 24:b - 24]
        kept = (np.abs(truth) + np.abs(naive)) > 0
        both_zero += int((~kept).sum())
        if kept.any():
            rows.append(np.mean(2 * np.abs(truth - naive)[kept]
                                / (np.abs(truth) + np.abs(naive))[kept]))
    assert set(series.tolist()) == {0, 1} and both_zero > 20
    assert result["test/smape_naive_1d"] == pytest.approx(np.mean(rows), rel=1e-6)


def test_every_block_gets_one_additive_mask_of_real_context_keys_and_itself(batch, monkeypatch):
    """The attention mask is made additive once per forward (not by each block's attention):
    every block receives the same float tensor, 0 where a token may attend (a real context
    token, or itself) and -inf elsewhere, and the forecasts equal those of the bool mask."""
    seed_everything(0)
    model = Forecaster(**{**TINY, "depth": 2}).eval()
    masks = []
    for block in model.model.blocks:
        block.register_forward_pre_hook(lambda module, args: masks.append(args[2]))
    with torch.no_grad():
        out = model(batch)
    assert len(masks) == 2 and masks[0] is masks[1] and masks[0].dtype == torch.float32
    ctx_valid = batch["context_valid"]
    b, nc = ctx_valid.shape
    total = nc + batch["target_valid"].shape[1]
    expected = torch.full((b, 1, total, total), float("-inf"))
    for w in range(b):
        for i in range(total):
            for j in range(total):
                if i == j or (j < nc and ctx_valid[w, j]):
                    expected[w, 0, i, j] = 0.0
    assert (ctx_valid == False).any()  # noqa: E712  (padding keys are part of the check)
    torch.testing.assert_close(masks[0], expected, rtol=0, atol=0)
    # The bool mask the blocks were given before: the same forecasts.
    monkeypatch.setattr("posenc.tasks.forecasting.network._as_additive",
                        lambda mask, dtype: mask)
    with torch.no_grad():
        torch.testing.assert_close(model(batch), out)
