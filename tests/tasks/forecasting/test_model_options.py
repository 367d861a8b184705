"""Forecaster's model options from the NHITS/PatchTST study (issue 20): seasonal lag inputs on
the query tokens, robust (median / MAD) instance normalisation and patch tokens. Each is off
by default and then changes nothing; on, its numbers equal a hand computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lightning.pytorch import seed_everything
from posenc.tasks import Forecaster
from posenc.tasks.forecasting.metrics import seasonal_naive
from posenc.tasks.forecasting.network import latest_tokens, window_statistics

TINY = {"dim": 16, "depth": 1, "num_heads": 2}
HOUR = 3_600_000_000_000


def _hand_batch() -> dict[str, torch.Tensor]:
    """Two windows of two channels at hours 0..7, values 10 * hour (channel 1: 10 * hour +
    1). Window 0: hour 5 unobserved, channel 1 never observed; 8 real tokens, targets at
    hours 8..11. Window 1: 6 real tokens (hours 0..5, all observed) and 2 of padding (time
    repeated, value 0, unobserved: collate_windows' convention); targets at hours 6..9."""
    hours = torch.arange(8)
    time = torch.stack([hours, hours.clamp_max(5)]) * HOUR
    value = torch.stack([10.0 * hours, 10.0 * hours + 1], dim=-1).repeat(2, 1, 1)
    observed = torch.ones(2, 8, 2, dtype=torch.bool)
    observed[0, 5, 0] = False
    observed[0, :, 1] = False
    valid = torch.ones(2, 8, dtype=torch.bool)
    valid[1, 6:] = False
    observed[1, 6:] = False
    value[1, 6:] = 0.0
    target_time = torch.stack([torch.arange(8, 12), torch.arange(6, 10)]) * HOUR
    # Local time 10 h ahead of UTC (a fixed zone: whole-day lookups give the same rows).
    return {"context_time": time, "context_local": time + 10 * HOUR,
            "target_time": target_time, "target_local": target_time + 10 * HOUR,
            "context_value": value, "context_observed": observed, "context_valid": valid}


def test_lag_inputs_are_the_hand_computed_seasonal_naive_values():
    model = Forecaster(lags=["3h", "1D"], instance_norm=False, num_targets=2, **TINY).model
    batch = _hand_batch()
    lags = model.lag_inputs(batch, batch["context_value"])
    assert lags.shape == (2, 4, 8)
    # Season 3 h, window 0 (origin hour 7): t=8 -> hour 5, unobserved -> hour 4 (40);
    # t=9 -> 6 (60); t=10 -> 7 (70); t=11 is 4 h ahead: k=2 -> hour 5 -> hour 4 (40).
    # Window 1 (origin hour 5, the padding after it ignored): t=6 -> 3, 7 -> 4, 8 -> 5,
    # 9 -> k=2 -> 3; channel 1 the same hours, + 1.
    three_h = torch.tensor([[[40.0, 0.0], [60, 0], [70, 0], [40, 0]],
                            [[30.0, 31.0], [40, 41], [50, 51], [30, 31]]])
    flags = torch.tensor([[1.0, 0.0], [1.0, 1.0]])[:, None].expand(2, 4, 2)
    # Season 1 D: every lookup is before the context: the last observed value (naive).
    one_day = torch.tensor([[[70.0, 0.0]] * 4, [[50.0, 51.0]] * 4])
    expected = torch.cat([three_h, flags, one_day, flags], dim=-1)
    torch.testing.assert_close(lags, expected)


def test_a_persistence_lag_is_the_last_observed_context_value():
    model = Forecaster(lags=["persistence", "3h"], instance_norm=False, num_targets=2,
                       **TINY).model
    batch = _hand_batch()
    lags = model.lag_inputs(batch, batch["context_value"])
    # Window 0: channel 0's last observed value is hour 7's (70), channel 1 none; window 1:
    # hour 5's (50, 51), its padding ignored; the same at every time to predict.
    last = torch.tensor([[[70.0, 0.0]] * 4, [[50.0, 51.0]] * 4])
    flags = torch.tensor([[1.0, 0.0], [1.0, 1.0]])[:, None].expand(2, 4, 2)
    torch.testing.assert_close(lags[..., :4], torch.cat([last, flags], dim=-1))
    with pytest.raises(ValueError, match="lags"):
        Forecaster(lags=["persistance"], **TINY)


def test_lag_inputs_enter_in_instance_normalised_units(batch):
    seed_everything(0)
    model = Forecaster(lags=["1D", "3h"], **TINY).eval()
    seen = {}
    model.model.lag_proj.register_forward_hook(lambda m, args, out: seen.update(x=args[0]))
    model(batch)
    value, observed = batch["context_value"].double(), batch["context_observed"]
    weight = observed.double()
    mean = (value * weight).sum(1, keepdim=True) / weight.sum(1, keepdim=True)
    std = ((((value - mean) * weight) ** 2).sum(1, keepdim=True)
           / weight.sum(1, keepdim=True) + 1e-5).sqrt()
    normalised = ((value - mean) / std).float()
    day = 24 * HOUR
    for i, season in enumerate((day, 3 * HOUR)):
        naive = seasonal_naive(batch["context_time"], normalised, observed,
                               batch["context_valid"], batch["target_time"], season,
                               context_local=batch["context_local"],
                               target_local=batch["target_local"])
        torch.testing.assert_close(seen["x"][..., 2 * i], naive[..., 0], rtol=1e-4, atol=1e-4)
        assert (seen["x"][..., 2 * i + 1] == 1).all()
    assert seen["x"].shape == (*batch["target_valid"].shape, 4)


def test_without_lags_the_model_is_the_one_before_them(batch):
    """Lags are built last (a seed gives every other parameter its old value) and only add
    to the query tokens: zeroing their map gives the model without lags exactly."""
    seed_everything(0)
    plain = Forecaster(**TINY).eval()
    seed_everything(0)
    lagged = Forecaster(lags=["1D"], **TINY).eval()
    assert plain.model.lag_proj is None
    ours = {k: v for k, v in lagged.state_dict().items() if not k.startswith("model.lag_proj")}
    assert ours.keys() == plain.state_dict().keys()
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(ours[key], value, rtol=0, atol=0)
    assert not torch.allclose(lagged(batch), plain(batch), atol=1e-4)  # lags do reach it
    with torch.no_grad():
        lagged.model.lag_proj.weight.zero_()
        lagged.model.lag_proj.bias.zero_()
    torch.testing.assert_close(lagged(batch), plain(batch), rtol=0, atol=0)


def test_lags_keep_queries_independent_and_future_values_out(batch):
    seed_everything(0)
    model = Forecaster(lags=["1D", "3h"], **TINY).eval()
    full = model(batch)
    poisoned = dict(batch, target_value=torch.randn_like(batch["target_value"]) * 100,
                    target_observed=~batch["target_observed"])
    torch.testing.assert_close(model(poisoned), full, rtol=0, atol=0)
    keep = [0, 2]
    subset = dict(batch)
    for key in ("target_time", "target_local", "target_fields", "target_valid",
                "target_value", "target_observed"):
        subset[key] = batch[key][:, keep]
    torch.testing.assert_close(model(subset), full[:, keep], rtol=1e-5, atol=1e-5)
    model(batch).sum().backward()
    assert model.model.lag_proj.weight.grad.abs().sum() > 0


def test_robust_statistics_are_the_median_and_the_median_absolute_deviation():
    # Window 0: 5 observed values with an outlier, 2 padding tokens (value 0, unobserved).
    # Window 1: over half the values equal: MAD 0 -> 0.6745 standard deviations.
    values = torch.tensor([[3.0, 1.0, 100.0, 2.0, 4.0, 0.0, 0.0],
                           [1.0, 1.0, 1.0, 1.0, 6.0, 1.0, 1.0]])[..., None]
    observed = torch.ones(2, 7, 1, dtype=torch.bool)
    observed[0, 5:] = False
    loc, scale = window_statistics(values, observed, "robust")
    assert loc.shape == scale.shape == (2, 1, 1)
    # median(1, 2, 3, 4, 100) = 3; |x - 3| = 0, 2, 97, 1, 1 -> MAD 1.
    assert loc[0, 0, 0].item() == pytest.approx(3.0)
    assert scale[0, 0, 0].item() == pytest.approx(np.sqrt(1.0 + 1e-5))
    std = np.std([1, 1, 1, 1, 6, 1, 1])
    assert loc[1, 0, 0].item() == pytest.approx(1.0)
    assert scale[1, 0, 0].item() == pytest.approx(np.sqrt((0.6744897501960817 * std) ** 2
                                                          + 1e-5), rel=1e-6)
    # The standard statistics of window 0 are the outlier's.
    mean, std0 = window_statistics(values, observed, "standard")
    assert mean[0, 0, 0].item() == pytest.approx(22.0)
    assert std0[0, 0, 0].item() == pytest.approx(np.sqrt(np.var([3, 1, 100, 2, 4]) + 1e-5))


def test_last_statistics_are_the_last_observed_value_and_the_standard_spread():
    # Window 0: its last real token (index 4) unobserved, then padding: the last observed
    # value is index 3's; window 1 all observed; channel 1 of window 0 never observed.
    values = torch.tensor([[3.0, 1.0, 100.0, 2.0, 4.0, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
    values = torch.stack([values, values + 10], -1)
    observed = torch.ones(2, 6, 2, dtype=torch.bool)
    observed[0, 4:] = False
    observed[0, :, 1] = False
    loc, scale = window_statistics(values, observed, "last")
    torch.testing.assert_close(loc, torch.tensor([[[2.0, 0.0]], [[6.0, 16.0]]]))
    _, std = window_statistics(values, observed, "standard")
    torch.testing.assert_close(scale, std)


def test_last_instance_norm_forecasts_persistence_when_the_network_outputs_zero(batch):
    model = Forecaster(instance_norm_stats="last", **TINY).eval()
    with torch.no_grad():
        model.model.head.weight.zero_()
        model.model.head.bias.zero_()
    observed = batch["context_observed"]
    index = torch.where(observed, torch.arange(observed.shape[1])[None, :, None], -1).amax(1)
    last = batch["context_value"].gather(1, index[:, None].clamp_min(0))       # (B, 1, C)
    expected = last[..., None].expand(-1, batch["target_time"].shape[1], -1, 1)
    torch.testing.assert_close(model(batch), expected)


def test_robust_instance_norm_makes_forecasts_follow_the_context_level_and_scale(batch):
    seed_everything(0)
    model = Forecaster(encodings=["calendar"], instance_norm_stats="robust", **TINY).eval()
    moved = dict(batch, context_value=batch["context_value"] * 3.0 + 5.0)
    torch.testing.assert_close(model(moved), model(batch) * 3.0 + 5.0, rtol=1e-3, atol=1e-3)
    seed_everything(0)
    standard = Forecaster(encodings=["calendar"], **TINY).eval()
    assert not torch.allclose(model(batch), standard(batch), atol=1e-3)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"instance_norm_stats": "median"}, ValueError,
     r"instance_norm_stats must be one of \['standard', 'robust', 'last'\], got 'median'"),
    ({"instance_norm_stats": "robust", "instance_norm": False}, ValueError,
     "instance_norm_stats='robust' needs instance_norm=True"),
    ({"lags": "1D"}, TypeError, "lags must be a list of durations or None, got str"),
    ({"lags": ["1MS"]}, ValueError, r"lags\[0\]"),
    ({"lags": ["1D", "24h"]}, ValueError, "repeats a season"),
    ({"patch_size": 0}, ValueError, "patch_size must be"),
    ({"patch_size": 2.0}, TypeError, "patch_size must be an int"),
    ({"patch_size": 4, "patch_stride": 0}, ValueError, "patch_stride must be"),
    ({"patch_size": 4, "patch_stride": 2.0}, TypeError, "patch_stride must be an int"),
    ({"patch_size": 4, "patch_stride": 5}, ValueError,
     "patch_stride=5 must be at most patch_size=4"),
    ({"patch_stride": 2}, ValueError, "patch_stride=2 must be at most patch_size=1"),
    ({"origin_tokens": -1}, ValueError, "origin_tokens must be >= 0"),
    ({"origin_tokens": True}, TypeError, "origin_tokens must be an int"),
])
def test_bad_model_options_raise_naming_the_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        Forecaster(**kwargs, **TINY)


def test_patches_are_consecutive_tokens_counted_back_from_the_origin():
    model = Forecaster(patch_size=2, **TINY).model
    tokens = torch.arange(1.0, 6.0).repeat(2, 1)[..., None]            # (2, 5, 1): 1..5
    elapsed = torch.arange(-4.0, 1.0).repeat(2, 1) * 10                  # -40 .. 0
    valid = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    patches, patch_elapsed, patch_valid = model.patches(tokens, elapsed, valid)
    # Window 0 (5 tokens): [pad, 1], [2, 3], [4, 5]; window 1 (3 tokens, then padding):
    # [pad, pad], [pad, 1], [2, 3].
    torch.testing.assert_close(patches, torch.tensor([[[0.0, 1], [2, 3], [4, 5]],
                                                      [[0.0, 0], [0, 1], [2, 3]]]))
    # Each patch at its latest token's time (an empty patch at the first token's).
    torch.testing.assert_close(patch_elapsed, torch.tensor([[-40.0, -20, 0], [-40, -40, -20]]))
    assert patch_valid.tolist() == [[True, True, True], [False, True, True]]


@pytest.mark.parametrize("size, stride", [(3, 1), (3, 2), (4, 2), (2, 2), (5, 3), (8, 4)])
def test_overlapping_patches_end_every_stride_tokens_back_from_the_origin(size, stride):
    model = Forecaster(patch_size=size, patch_stride=stride, **TINY).model
    nc = 7
    tokens = torch.arange(1.0, nc + 1).repeat(2, 1)[..., None]          # (2, 7, 1): 1..7
    elapsed = torch.arange(-(nc - 1.0), 1.0).repeat(2, 1)
    valid = torch.tensor([[True] * nc, [True] * 4 + [False] * 3])
    patches, patch_elapsed, patch_valid = model.patches(tokens, elapsed, valid)
    for w, length in enumerate((nc, 4)):
        # Written out: patch ends at the last token, then every `stride` tokens back until the
        # context (all nc slots) is covered; tokens before the first are 0.
        ends = [length - 1 - k * stride for k in range(1 + max(0, -(-(nc - size) // stride)))]
        expect = [[float(tokens[w, i]) if i >= 0 else 0.0 for i in range(end - size + 1, end + 1)]
                  for end in reversed(ends)]
        assert patches[w].tolist() == expect
        assert patch_valid[w].tolist() == [end >= 0 for end in reversed(ends)]
        assert patch_elapsed[w].tolist() == [float(elapsed[w, max(end, 0)])
                                             for end in reversed(ends)]


@pytest.mark.parametrize("patch_size, count", [(1, 1), (1, 3), (4, 1), (4, 2)])
def test_origin_tokens_add_a_map_of_the_latest_context_tokens_to_every_query(batch, patch_size,
                                                                            count):
    batch = dict(batch)
    for key in ("context_valid", "context_observed"):  # window 0: two tokens of padding
        batch[key] = batch[key].clone()
        batch[key][0, -2:] = False
    model = Forecaster(origin_tokens=count, patch_size=patch_size, **TINY).model
    seen = []
    model.blocks[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    proj = model.origin_proj
    with torch.no_grad():
        model(batch)
        weight, bias = proj.weight.clone(), proj.bias.clone()
        proj.weight.zero_(), proj.bias.zero_()
        model(batch)
    with_map, without = seen
    nh = batch["target_valid"].shape[1]
    nc = without.shape[1] - nh
    # The origin: the last real context token, or the last patch (patches end at the origin).
    last = ((batch["context_valid"].sum(1) - 1).tolist() if patch_size == 1
            else [nc - 1] * len(without))
    latest = torch.stack([without[w, end - count + 1:end + 1].flatten()
                          for w, end in enumerate(last)])
    torch.testing.assert_close(with_map[:, :nc], without[:, :nc], rtol=0, atol=0)
    torch.testing.assert_close(with_map[:, nc:],
                               without[:, nc:] + (latest @ weight.T + bias)[:, None])


def test_latest_tokens_are_zero_before_the_first_valid_one():
    tokens = torch.arange(1.0, 6.0).repeat(2, 1)[..., None]             # (2, 5, 1): 1..5
    prefix = torch.tensor([[True] * 5, [True] * 2 + [False] * 3])       # padding at the end
    suffix = torch.tensor([[True] * 5, [False] * 3 + [True] * 2])       # patches: at the start
    assert latest_tokens(tokens, prefix, 3).tolist() == [[3.0, 4, 5], [0, 1, 2]]
    assert latest_tokens(tokens, suffix, 3).tolist() == [[3.0, 4, 5], [0, 4, 5]]


def test_patches_keep_the_other_parameters_and_shorten_the_context(batch):
    seed_everything(0)
    plain = Forecaster(lags=["1D"], **TINY)
    seed_everything(0)
    patched = Forecaster(lags=["1D"], patch_size=4, **TINY)
    assert plain.model.patch_embed is None
    assert patched.model.patch_embed.in_features == 4 * 16
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(patched.state_dict()[key], value, rtol=0, atol=0)
    seen = {}
    patched.model.blocks[0].register_forward_hook(lambda m, args, out: seen.update(x=out))
    out = patched(batch)
    nc, nh = batch["context_valid"].shape[1], batch["target_valid"].shape[1]
    assert seen["x"].shape == (len(out), -(-nc // 4) + nh, 16)
    assert out.shape == (*batch["target_valid"].shape, 1, 1)
    out.sum().backward()
    assert patched.model.patch_embed.weight.grad.abs().sum() > 0


def test_the_ablation_table_is_rebuilt_from_its_csv_and_the_script_s_variants():
    """docs/studies/forecast_ablation_table.md is benchmarks/forecast_ablation.py's table of
    the committed CSV, and every row's overrides are its variant's as the script runs it."""
    import csv
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "forecast_ablation.py"
    spec = importlib.util.spec_from_file_location("forecast_ablation", path)
    ablation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ablation)
    assert ablation.TABLE.read_text() == ablation.table() + "\n"
    with ablation.RESULTS.open() as f:
        rows = list(csv.DictReader(f))
    assert rows and list(rows[0]) == ablation.COLUMNS
    for row in rows:
        assert row["overrides"] == " ".join(ablation.overrides(row["dataset"], row["variant"]))
