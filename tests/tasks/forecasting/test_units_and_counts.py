"""Forecaster options: calendar-month time units (elapsed months of the local clock) and
non-negative forecasts for counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from lightning.pytorch import seed_everything
from posenc.tasks import Forecaster, TimeSeriesDataModule

from ..conftest import cpu_trainer

TINY = {"dim": 16, "depth": 1, "num_heads": 2}


def _pandas_months(local_ns: np.ndarray) -> np.ndarray:
    """Months since 1970-01 plus the fraction of the month elapsed, from pandas' fields."""
    stamps = pd.DatetimeIndex(local_ns.ravel().view("M8[ns]"))
    start = stamps.to_period("M").start_time.as_unit("ns")
    fraction = (stamps - start) / (stamps.days_in_month.to_numpy() * pd.Timedelta("1D"))
    months = (stamps.year.to_numpy() - 1970) * 12 + stamps.month.to_numpy() - 1 + fraction
    return np.asarray(months).reshape(local_ns.shape)


def _monthly(tz: str | None = None, day: int = 1) -> TimeSeriesDataModule:
    stamps = pd.date_range("2001-01-01", periods=96, freq="MS") + pd.Timedelta(days=day - 1)
    frame = pd.DataFrame({"timestamp": stamps, "value": np.sin(np.arange(96) / 1.9)})
    dm = TimeSeriesDataModule(frame, tz=tz, context_length=24, horizon=6, stride=6,
                              batch_size=16)
    dm.setup("fit")
    return dm


def _elapsed_expected(batch, months_per_unit):
    local = torch.cat((batch["context_local"], batch["target_local"]), 1).numpy()
    last = batch["context_valid"].sum(1).numpy() - 1
    origin = batch["context_local"].numpy()[np.arange(len(last)), last]
    return (_pandas_months(local) - _pandas_months(origin)[:, None]) / months_per_unit


@pytest.mark.parametrize(("time_unit", "months"), [("MS", 1), ("QS", 3), ("YS", 12),
                                                   ("2 months", 2)])
def test_calendar_time_units_measure_elapsed_local_months(time_unit, months):
    dm = _monthly(day=11)  # mid-month dates: fractions of months of different lengths
    batch = next(iter(dm.train_dataloader()))
    model = Forecaster(**TINY, time_unit=time_unit)
    elapsed = model.model.elapsed(batch)
    assert elapsed.dtype == torch.float64
    np.testing.assert_allclose(elapsed.numpy(), _elapsed_expected(batch, months), rtol=0,
                               atol=1e-12)


def test_month_starts_in_a_dst_zone_are_whole_months_apart_and_fixed_units_are_real_time():
    dm = _monthly(tz="Europe/Berlin")
    batch = next(iter(dm.train_dataloader()))
    months = Forecaster(**TINY, time_unit="MS").model.elapsed(batch)
    steps = torch.arange(-23, 7, dtype=torch.float64).expand_as(months)
    assert torch.equal(months, steps)  # exact integers: DST changes nothing
    # A fixed unit stays real elapsed time: summer months are an hour short in UTC.
    days = Forecaster(**TINY, time_unit="1D").model.elapsed(batch)
    time = torch.cat((batch["context_time"], batch["target_time"]), 1)
    expected = (time - batch["context_time"][:, -1:]).double() / (86400 * 1e9)
    assert torch.equal(days, expected)
    assert (days % 1 != 0).any()


def test_a_monthly_model_trains_and_predicts_with_a_calendar_unit(tmp_path):
    seed_everything(0)
    dm = _monthly(day=15)
    model = Forecaster(**TINY, time_unit="month", encodings=["calendar", "continuous"])
    trainer = cpu_trainer(tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1)
    trainer.fit(model, dm)
    out = trainer.predict(model, dm.predict_dataloader())
    assert torch.isfinite(out[0]["prediction"]).all()


# -- non-negative forecasts -----------------------------------------------------------------
def _counts() -> TimeSeriesDataModule:
    """Two series of hourly counts, mostly zeros (intermittent demand)."""
    rng = np.random.default_rng(0)
    stamps = pd.date_range("2022-01-01", periods=400, freq="h")
    frames = [pd.DataFrame({"timestamp": stamps, "site": name,
                            "count": rng.poisson(rate * (1 + np.sin(np.arange(400) / 3.8)))})
              for name, rate in (("a", 0.25), ("b", 0.6))]
    dm = TimeSeriesDataModule(pd.concat(frames, ignore_index=True), series_column="site",
                              target_columns="count", context_length=48, horizon=12,
                              stride=12, batch_size=32, predict_split="test")
    dm.setup("fit")
    return dm


def _fit_predict(tmp_path, nonnegative):
    seed_everything(0)
    dm = _counts()
    assert (dm.load_frame()["count"] == 0).mean() > 0.5  # many zeros
    model = Forecaster(**TINY, loss="quantile", quantiles=[0.1, 0.5, 0.9],
                       nonnegative=nonnegative, lr=3e-3)
    trainer = cpu_trainer(tmp_path, max_epochs=1, limit_train_batches=20,
                          limit_val_batches=0)
    trainer.fit(model, dm)
    outputs = trainer.predict(model, dm.predict_dataloader())
    quantiles = torch.cat([o["quantiles"][o["valid"]] for o in outputs])
    return model, dm, quantiles


@pytest.mark.slow
def test_nonnegative_count_forecasts_are_never_negative_where_the_default_is(tmp_path):
    _, _, default = _fit_predict(tmp_path, False)
    assert (default < 0).any()  # the data pushes an unconstrained model below zero
    model, dm, quantiles = _fit_predict(tmp_path, True)
    assert quantiles.shape[-1] == 3 and len(quantiles) > 100
    assert (quantiles >= 0).all()
    forecasts = model.forecast(dm.load_frame())
    columns = [c for c in forecasts.columns if c.startswith("count")]
    assert len(columns) == 4 and (forecasts[columns].to_numpy() >= 0).all()


def _batch(dm):
    return next(iter(dm.train_dataloader()))


def test_default_output_is_the_raw_head_and_nonnegative_is_a_softplus_above_the_zero():
    dm = _counts()
    batch = _batch(dm)
    seed_everything(3)
    plain = Forecaster(**TINY, instance_norm=False, loss="quantile")
    seed_everything(3)
    positive = Forecaster(**TINY, instance_norm=False, loss="quantile", nonnegative=True)
    # No new parameters or buffers, the same draw: the option changes the output only.
    state, other = plain.state_dict(), positive.state_dict()
    assert state.keys() == other.keys()
    assert all(torch.equal(state[k], other[k]) for k in state)
    heads = []
    plain.model.head.register_forward_hook(lambda m, i, out: heads.append(out))
    with torch.no_grad():
        out = plain(batch)
        raw = heads[0].unflatten(-1, (1, 3))
        assert torch.equal(out, raw)  # the default adds nothing after the head
        got = positive(batch)
    zero = (-batch["loc"] / batch["scale"])[:, None, :, None]
    assert torch.equal(got, zero + torch.nn.functional.softplus(raw - zero))
    assert (out < zero).any() and (got > zero).all()
    units = positive._forecast_units(got, batch)
    assert (units >= 0).all()
    np.testing.assert_allclose(units.numpy(), (got * batch["scale"][:, None, :, None]
                                               + batch["loc"][:, None, :, None]).numpy(),
                               atol=1e-6)


def test_nonnegative_keeps_a_gradient_for_forecasts_far_below_zero():
    dm = _counts()
    batch = _batch(dm)
    model = Forecaster(**TINY, nonnegative=True)
    with torch.no_grad():
        model.model.head.bias.fill_(-8.0)  # every raw forecast well below the zero
    loss = model._loss(model(batch), batch)
    loss.backward()
    assert model.model.head.bias.grad.abs().item() > 1e-4  # a clamp would give 0 here


def test_nonnegative_must_be_a_bool():
    with pytest.raises(TypeError, match="nonnegative must be a bool"):
        Forecaster(**TINY, nonnegative="yes")
