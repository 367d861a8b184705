"""TimeDelta: time since the previous observation (GRU-D), since the start, and the mask."""

from __future__ import annotations

import math

import pytest
import torch
from posenc.temporal import TimeDelta
from posenc.temporal.continuous import time_delta_features


def test_hand_worked_example_with_mask():
    times = torch.tensor([0.0, 1.0, 3.0, 4.0, 10.0])
    mask = torch.tensor([True, False, True, False, False])
    out = time_delta_features(times, mask)
    # since_previous skips unobserved positions: 1-0, 3-0, 4-3, 10-3.
    assert out[:, 0].tolist() == [0.0, 1.0, 3.0, 1.0, 7.0]
    assert out[:, 1].tolist() == [0.0, 1.0, 3.0, 4.0, 10.0]
    assert out[:, 2].tolist() == [1.0, 0.0, 1.0, 0.0, 0.0]
    plain = time_delta_features(times)
    assert plain[:, 0].tolist() == [0.0, 1.0, 2.0, 1.0, 6.0]
    assert plain[:, 2].tolist() == [1.0] * 5


def test_log_scale():
    times = torch.tensor([0.0, 2.0, 8.0], dtype=torch.float64)
    out = TimeDelta(log=True, scale=2.0)(times, dtype=torch.float64)
    torch.testing.assert_close(out[:, 0], torch.tensor([0.0, math.log(2.0), math.log(4.0)],
                                                       dtype=torch.float64))
    torch.testing.assert_close(out[:, 1], torch.tensor([0.0, math.log(2.0), math.log(5.0)],
                                                       dtype=torch.float64))


def test_batched_rows_are_independent_and_prefixes_are_causal():
    times = torch.tensor([[0.0, 5.0, 6.0, 9.0], [100.0, 100.0, 101.0, 130.0]])
    mask = torch.tensor([[True, True, False, True], [False, True, True, False]])
    out = time_delta_features(times, mask)
    for row in range(2):
        torch.testing.assert_close(out[row], time_delta_features(times[row], mask[row]))
        for n in range(1, 5):
            torch.testing.assert_close(out[row, :n],
                                       time_delta_features(times[row, :n], mask[row, :n]))
    assert out[1, :, 0].tolist() == [0.0, 0.0, 1.0, 29.0]  # 130 - 101: 101 is the last seen


def test_nanosecond_integers_are_differenced_exactly():
    ns = torch.tensor([1_700_000_000_000_000_000, 1_700_000_000_000_000_001])
    assert time_delta_features(ns, dtype=torch.float64)[1, 0].item() == 1.0


def test_errors():
    with pytest.raises(ValueError, match=r"non-decreasing .* index \[0, 1\]"):
        time_delta_features(torch.tensor([[0.0, 2.0, 1.0]]))
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        time_delta_features(torch.zeros(3), torch.ones(3))
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        time_delta_features(torch.zeros(3), torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="scale must be a positive number"):
        TimeDelta(log=True, scale=0.0)
    with pytest.raises(TypeError, match="scale must be a number, got bool"):
        time_delta_features(torch.zeros(3), log=True, scale=True)
    assert TimeDelta.dim == 3 and TimeDelta.feature_names == [
        "since_previous", "since_start", "observed"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_times_raise(dtype):
    # Elapsed hours in half precision are already off by whole hours (2049 -> 2048).
    times = torch.tensor([0.0, 2049.0, 2050.0], dtype=dtype)
    for call in (lambda: time_delta_features(times), lambda: TimeDelta()(times)):
        with pytest.raises(TypeError, match=f"times .*{str(dtype).split('.')[1]}"):
            call()


def test_integer_times_of_any_width_are_exact():
    times = torch.tensor([0, 5, 2**31 + 7], dtype=torch.int64)
    expected = torch.tensor([[0.0, 0.0, 1.0], [5.0, 5.0, 1.0], [2**31 + 2, 2**31 + 7, 1.0]],
                            dtype=torch.float64)
    torch.testing.assert_close(time_delta_features(times, dtype=torch.float64), expected,
                               rtol=0, atol=0)
    torch.testing.assert_close(time_delta_features(times[:2].int(), dtype=torch.float64),
                               expected[:2], rtol=0, atol=0)


def test_integer_span_beyond_int64_raises_instead_of_wrapping():
    # 1700 to 2200 in nanoseconds is 500 years: the difference exceeds int64 (292 years).
    ns = torch.tensor([[-(2**62) - 5, 2**62 + 5]])
    with pytest.raises(ValueError, match="times span more than int64"):
        time_delta_features(ns)
    ok = time_delta_features(torch.tensor([-(2**62), 2**62 - 1]), dtype=torch.float64)
    assert ok[1, 1].item() == float(2**63 - 1)


def test_non_float_output_dtype_raises():
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        time_delta_features(torch.zeros(2), dtype=torch.int32)


@pytest.mark.parametrize("flag", ["no", 1, None])
def test_log_must_be_a_bool(flag):
    with pytest.raises(TypeError, match="log must be a bool"):
        TimeDelta(log=flag)
    with pytest.raises(TypeError, match="log must be a bool"):
        time_delta_features(torch.zeros(2), log=flag)


@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 0), (4, 300)])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_previous_observation_equals_the_cumulative_maximum(shape, fraction):
    """The last observation before each position (found with ONNX's operators) is the
    cumulative maximum of the observed positions, the definition."""
    generator = torch.Generator().manual_seed(0)
    times = torch.rand(shape, generator=generator).cumsum(-1)
    mask = torch.rand(shape, generator=generator) < fraction
    positions = torch.arange(shape[-1]).expand(shape)
    latest = torch.where(mask, positions, -1).cummax(-1).values
    previous = torch.cat((torch.full_like(latest[..., :1], -1), latest[..., :-1]), -1)
    want = torch.where(previous >= 0, times - times.gather(-1, previous.clamp(min=0)), 0)
    assert torch.equal(time_delta_features(times, mask)[..., 0], want)
