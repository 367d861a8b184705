"""IndexSinusoidal: the irregular-time study's equally-spaced baseline, as a library encoding."""

from __future__ import annotations

import pytest
import torch
from posenc.core import SinusoidalEncoding, encoding_kind
from posenc.temporal import IndexSinusoidal

# Context at -5 h, -2 h, 0 h (the last observation), a padded context token repeating 0,
# queries at +1.5 h and +3 h: indices -2, -1, 0, (0), 1, 2 whatever the gaps.
ELAPSED = torch.tensor([[-5.0, -2.0, 0.0, 0.0, 1.5, 3.0]], dtype=torch.float64)
OBSERVED = torch.tensor([[True, True, True, False, False, False]])
INDICES = [-2.0, -1.0, 0.0, 0.0, 1.0, 2.0]


def test_index_sinusoidal_counts_tokens_not_time():
    out = IndexSinusoidal(8)(ELAPSED, OBSERVED)
    expected = SinusoidalEncoding(8)(torch.tensor(INDICES))
    torch.testing.assert_close(out[0], expected, rtol=0, atol=0)
    # Stretching the gaps changes nothing: it does not see time.
    torch.testing.assert_close(IndexSinusoidal(8)(ELAPSED * 7, OBSERVED), out, rtol=0, atol=0)


def test_token_order_does_not_matter_only_times_do():
    order = torch.tensor([5, 0, 3, 1, 4, 2])
    shuffled = IndexSinusoidal(8)(ELAPSED[:, order], OBSERVED[:, order])
    expected = SinusoidalEncoding(8)(torch.tensor(INDICES)[order])
    torch.testing.assert_close(shuffled[0], expected, rtol=0, atol=0)


def test_unbatched_and_integer_elapsed_match_the_batched_float_result():
    batched = IndexSinusoidal(8, base=100.0)(ELAPSED, OBSERVED)
    unbatched = IndexSinusoidal(8, base=100.0)(ELAPSED[0], OBSERVED[0])
    as_int = IndexSinusoidal(8, base=100.0)((ELAPSED * 2).long(), OBSERVED)
    torch.testing.assert_close(unbatched, batched[0], rtol=0, atol=0)
    torch.testing.assert_close(as_int, batched, rtol=0, atol=0)
    assert batched.shape == (1, 6, 8) and batched.dtype == torch.float32


def test_it_is_an_additive_encoding_reading_deltas_with_no_parameters():
    module = IndexSinusoidal(8)
    assert encoding_kind(module) == "additive" and IndexSinusoidal.reads == "deltas"
    assert list(module.parameters()) == [] and module.state_dict() == {}


def test_odd_dim_is_refused():
    with pytest.raises(ValueError, match="dim must be even"):
        IndexSinusoidal(7)


@pytest.mark.parametrize("observed, match", [
    (OBSERVED.float(), r"observed must be a bool tensor of the shape of elapsed \(1, 6\), "
                       r"got torch.float32 of shape \(1, 6\)"),
    (OBSERVED[:, :5], r"got torch.bool of shape \(1, 5\)"),
    ([True] * 6, "got list"),
])
def test_a_wrong_observed_mask_is_refused(observed, match):
    with pytest.raises(TypeError, match=match):
        IndexSinusoidal(8)(ELAPSED, observed)


def test_non_finite_or_half_precision_elapsed_is_refused():
    with pytest.raises(ValueError, match="elapsed must be finite"):
        IndexSinusoidal(8)(ELAPSED.clone().index_fill_(1, torch.tensor([0]), float("nan")),
                           OBSERVED)
    with pytest.raises(TypeError, match="elapsed must be an integer, float32 or float64"):
        IndexSinusoidal(8)(ELAPSED.bfloat16(), OBSERVED)
