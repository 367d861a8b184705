"""``torch.compile(fullgraph=True)`` traces posenc's models in one graph (no graph breaks) and
computes what eager computes.

``backend="eager"`` runs dynamo's tracing (where graph breaks arise) without code generation,
which keeps these CPU tests short; one case goes through inductor. What compiled code skips
(data-dependent checks) is checked where positions are made: the models make them from image
shapes and int64 timestamps (see tests/test_host_sync.py).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import timm
import torch
from posenc.tasks import Forecaster, TimeSeriesDataModule
from posenc.tasks.forecasting.network import TIME_ENCODINGS

from posenc import spatial, temporal

pytestmark = pytest.mark.slow  # each case compiles a model on the CPU (a few seconds)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _vit(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32,
                              patch_size=8, depth=2, num_classes=3, embed_dim=32, num_heads=2)
    return spatial.attach(model, name).eval()


@pytest.mark.parametrize("name", list(spatial.ENCODINGS))
def test_attached_vit_compiles_in_one_graph_and_matches_eager(name):
    model = _vit(name)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        for size in ((32, 32), (24, 40)):  # the training grid and another one
            images = torch.randn(2, 3, *size)
            torch.testing.assert_close(compiled(images), model(images), rtol=1e-5, atol=1e-5)


def test_attached_vit_through_inductor_matches_eager():
    model = _vit("rope_mixed")
    compiled = torch.compile(model, fullgraph=True)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(compiled(images), model(images), rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def batch() -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(0)
    stamps = pd.date_range("2021-03-20", periods=300, freq="1h", tz="UTC")
    frame = pd.DataFrame({"timestamp": stamps, "value": rng.normal(size=300)})
    frame = frame[rng.random(300) < 0.8].reset_index(drop=True)
    dm = TimeSeriesDataModule(frame, context_length="1D", horizon="6h", stride="4h",
                              batch_size=4, tz="Europe/Berlin")
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))


CASES = [pytest.param([name], "rope", id=f"{name}-rope") for name in TIME_ENCODINGS]
CASES += [pytest.param(["continuous", "timedelta"], relative, id=f"elapsed-{relative}")
          for relative in ("alibi", None)]


@pytest.mark.parametrize("encodings, relative", CASES)
def test_forecaster_compiles_in_one_graph_and_matches_eager(batch, encodings, relative):
    torch.manual_seed(0)
    model = Forecaster(encodings=encodings, relative=relative, dim=16, depth=2,
                       num_heads=2).eval()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(batch), model(batch), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cyclic", [True, False])
def test_calendar_features_compile_in_one_graph_and_equal_eager(cyclic):
    stamps = pd.date_range("2020-12-28", periods=500, freq="7h13min", tz="America/New_York")
    names = ("minute", "hour", "day_of_week", "day_of_month", "day_of_year", "week_of_year",
             "month")
    encoding = temporal.CalendarFeatures(names, cyclic=cyclic).to(torch.bfloat16)
    fields = {k: torch.from_numpy(v).reshape(5, 100) for k, v in temporal.calendar_fields(
        stamps, fields=encoding.required_fields).items()}
    compiled = torch.compile(encoding, backend="eager", fullgraph=True)
    for dtype in (torch.float32, torch.float64):
        assert torch.equal(compiled(fields, dtype=dtype), encoding(fields, dtype=dtype))
