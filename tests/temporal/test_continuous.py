"""ContinuousSinusoidal: core's sinusoidal encoding on real elapsed time."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from posenc.core import SinusoidalEncoding
from posenc.core.additive import sinusoidal_encoding
from posenc.temporal import ContinuousSinusoidal, time_positions
from posenc.temporal.continuous import geometric_periods


def classic(dim: int) -> ContinuousSinusoidal:
    """Bounds that give the classic wavelengths 2*pi * 10000 ** (2i / dim)."""
    return ContinuousSinusoidal(dim, 2 * math.pi, 2 * math.pi * 10000 ** ((dim - 2) / dim))


def test_matches_core_sinusoidal_on_token_steps():
    positions = torch.arange(0, 3000, 7, dtype=torch.float64)
    torch.testing.assert_close(classic(32)(positions, dtype=torch.float64),
                               SinusoidalEncoding(32)(positions, dtype=torch.float64),
                               rtol=0, atol=1e-9)
    half = ContinuousSinusoidal(8, 1.0, 100.0, layout="half")(positions)
    interleaved = ContinuousSinusoidal(8, 1.0, 100.0)(positions)
    torch.testing.assert_close(half[:, :4], interleaved[:, 0::2])


def test_geometric_periods():
    np.testing.assert_allclose(geometric_periods(4, 1.0, 1000.0).numpy(), [1, 10, 100, 1000])
    assert geometric_periods(1, 3.0, 5.0).tolist() == [3.0]


def test_irregular_times_differ_from_index_encoding_exactly_at_the_gaps():
    # Hourly observations with two gaps (3 h and 26 h).
    hours = np.array([0, 1, 2, 3, 6, 7, 8, 34, 35, 36])
    ts = pd.Timestamp("2021-05-01") + pd.to_timedelta(hours, unit="h")
    enc = classic(16)
    by_time = enc(time_positions(ts, ts[0], unit="h"), dtype=torch.float64).numpy()
    by_index = enc(torch.arange(len(ts), dtype=torch.float64), dtype=torch.float64).numpy()
    # Same rows while no gap has occurred, different rows from the first gap on.
    same_row = np.isclose(by_time, by_index, atol=1e-9).all(axis=1)
    np.testing.assert_array_equal(same_row, hours == np.arange(len(hours)))
    # The step between consecutive rows is the index step exactly where no gap lies.
    step_time = np.linalg.norm(np.diff(by_time, axis=0), axis=1)
    step_index = np.linalg.norm(np.diff(by_index, axis=0), axis=1)
    np.testing.assert_array_equal(np.isclose(step_time, step_index, atol=1e-9),
                                  np.diff(hours) == 1)


def test_float64_times_keep_relative_precision_far_from_the_origin():
    ts = pd.Timestamp("2150-01-01") + pd.to_timedelta(np.cumsum(np.arange(1, 40)), unit="s")
    enc = ContinuousSinusoidal(32, 1.0, 1e6)
    far = enc(time_positions(ts), dtype=torch.float64)          # ~5.7e9 s since 1970
    near = enc(time_positions(ts, ts[0]), dtype=torch.float64)  # same gaps, origin nearby
    # Sinusoidal encodings are shift-invariant in their inner products.
    torch.testing.assert_close(far @ far.T, near @ near.T, rtol=0, atol=1e-5)
    assert far.dtype == torch.float64 and enc(time_positions(ts)).dtype == torch.float32


@pytest.mark.parametrize("args, error, match", [
    ((7, 1.0, 2.0), ValueError, "dim must be even"),
    ((8, 0.0, 2.0), ValueError, r"min_period must be a positive number .*got 0\.0"),
    ((8, 1.0, float("inf")), ValueError, "max_period must be a positive number"),
    ((8, "1", 2.0), TypeError, "min_period must be a number, got str"),
    ((8, 3.0, 2.0), ValueError, "0 < min_period <= max_period"),
])
def test_bad_configuration_raises(args, error, match):
    with pytest.raises(error, match=match):
        ContinuousSinusoidal(*args)


def test_non_finite_times_raise():
    with pytest.raises(ValueError, match="times must be finite"):
        ContinuousSinusoidal(8, 1.0, 2.0)(torch.tensor([0.0, float("nan")]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_times_raise(dtype):
    # 1001 h is 1000 h in bfloat16 (and 2049 h is 2048 h in float16): whole hours lost.
    assert torch.tensor(2049.0, dtype=dtype).item() != 2049.0
    with pytest.raises(TypeError, match=f"times .*{str(dtype).split('.')[1]}"):
        ContinuousSinusoidal(8, 1.0, 2.0)(torch.tensor([0.0, 2049.0], dtype=dtype))


@pytest.mark.parametrize("count, error", [(0, ValueError), (-1, ValueError), (2.5, TypeError)])
def test_geometric_periods_needs_a_positive_count(count, error):
    with pytest.raises(error, match="count"):
        geometric_periods(count, 1.0, 2.0)


def test_non_float_output_dtype_raises():
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        ContinuousSinusoidal(4, 1.0, 10.0)(torch.zeros(2), dtype=torch.int64)


def test_meta_device_build_then_to_empty_equals_a_normal_build():
    with torch.device("meta"):
        meta = ContinuousSinusoidal(8, min_period=1.0, max_period=1000.0)
    meta.to_empty(device="cpu")
    meta.reset_parameters()
    normal = ContinuousSinusoidal(8, min_period=1.0, max_period=1000.0)
    assert meta.inv_freq64.dtype == torch.float64
    assert torch.equal(meta.inv_freq64, normal.inv_freq64)
    times = torch.tensor([0.0, 1.5, 1e6], dtype=torch.float64)
    assert torch.equal(meta(times), normal(times))


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_is_core_sinusoidal_encoding_of_time_at_geometric_periods(layout):
    times = torch.tensor([[0.0, 0.25, 1e9 + 0.5]], dtype=torch.float64)
    inv_freq = 2 * math.pi / geometric_periods(4, 1.0, 100.0)
    got = ContinuousSinusoidal(8, 1.0, 100.0, layout=layout)(times, dtype=torch.float64)
    assert torch.equal(got, sinusoidal_encoding(times, inv_freq, layout))
