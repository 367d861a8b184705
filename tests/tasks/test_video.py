"""Moving-digit clips at irregular frame times and the VideoClassifier that reads them.

The clips' labels are checked against a simulation written here (bounces found event by event,
not by posenc's triangle-wave formula); the model's frame times against its output and its
attention logits.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from posenc.spatial import VIDEO_ENCODINGS
from posenc.tasks import ClassPredictionWriter, MovingDigitsDataModule, VideoClassifier
from posenc.tasks.vision.clips import DIRECTIONS, ClipBatch, make_clips, render_clips

from .conftest import CONFIGS, ONE_EPOCH, TINY_VIT, run_cli

SLOW, FAST = (4.0, 8.0), (12.0, 24.0)
TINY = dict(embed_dim=16, depth=2, num_heads=2, img_size=8, patch_size=4, time_scale=8.0)


def _blobs(count: int, size: int) -> torch.Tensor:
    """``(count, size, size)`` lopsided blobs in [0, 1] (a stand-in for digits)."""
    gen = torch.Generator().manual_seed(0)
    return torch.rand(count, size, size, generator=gen) ** 2


def _clips(num_digits: int, seed: int = 0, **kwargs):
    pool = _blobs(5, 4)
    args = dict(num_frames=5, image_size=12, frame_rate=(4.0, 12.0), drop=0.3, slow=SLOW,
                fast=FAST, num_digits=num_digits)
    return pool, make_clips(pool, 64, np.random.default_rng(seed), **{**args, **kwargs})


def _simulate(start: np.ndarray, velocity: np.ndarray, times: np.ndarray, room: float
              ) -> np.ndarray:
    """Positions at ``times`` (ascending) by moving one interval at a time and reflecting at
    each wall crossed (position and velocity), one axis at a time."""
    pos, vel, now, out = start.astype(float).copy(), velocity.astype(float).copy(), 0.0, []
    for t in times:
        pos = pos + vel * (t - now)
        now = t
        for axis in range(2):
            while not 0 <= pos[axis] <= room:
                wall = 0.0 if pos[axis] < 0 else room
                pos[axis] = 2 * wall - pos[axis]
                vel[axis] = -vel[axis]
        out.append(pos.copy())
    return np.array(out)


@pytest.mark.parametrize("num_digits", [1, 2])
def test_positions_and_labels_match_an_independent_simulation(num_digits):
    pool, clips = _clips(num_digits)
    room = 12 - 4
    times = clips.times.double().numpy()
    for n in range(len(clips.labels)):
        for d in range(num_digits):
            expected = _simulate(clips.start[n, d], clips.velocity[n, d], times[n], room)
            np.testing.assert_allclose(clips.positions[n, :, d], expected, atol=1e-4)
    # The label, from the velocities at t = 0: the fastest digit's nearest direction (by the
    # largest dot product with the unit vectors right, down, left, up) and its speed band.
    units = np.array([[0, 1], [1, 0], [0, -1], [-1, 0]])
    speed = np.linalg.norm(clips.velocity, axis=-1)
    lead = clips.velocity[np.arange(len(speed)), speed.argmax(1)]
    direction = (lead @ units.T).argmax(1)
    fast = speed.max(1) > (SLOW[1] + FAST[0]) / 2
    np.testing.assert_array_equal(clips.labels.numpy(), direction + 4 * fast)
    assert set(clips.labels.tolist()) == set(range(2 * len(DIRECTIONS)))  # every class drawn
    if num_digits == 2:  # the other digit is clearly slower, so "the fastest" is well defined
        assert (speed.min(1) <= 0.6 * speed.max(1) + 1e-9).all()


def test_frames_show_the_digit_where_the_trajectory_puts_it():
    """A bilinear shift moves a digit's centre of mass exactly by its position."""
    pool, clips = _clips(1)
    frames = clips.video[:, :, 0].double()  # (N, T, H, W)
    axis = torch.arange(12, dtype=torch.float64)
    mass = frames.sum((-1, -2))
    centre = torch.stack([(frames.sum(-1) * axis).sum(-1), (frames.sum(-2) * axis).sum(-1)],
                         -1) / mass[..., None]
    digit = pool[torch.as_tensor(clips.digits[:, 0])].double()  # (N, 4, 4)
    small = torch.arange(4, dtype=torch.float64)
    own = torch.stack([(digit.sum(-1) * small).sum(-1), (digit.sum(-2) * small).sum(-1)],
                      -1) / digit.sum((-1, -2))[..., None]
    expected = torch.as_tensor(clips.positions[:, :, 0]) + own[:, None]
    torch.testing.assert_close(centre, expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(mass, digit.sum((-1, -2))[:, None].expand_as(mass), atol=1e-4,
                               rtol=0)


def test_frame_times_are_irregular_and_start_at_zero():
    _, clips = _clips(1)
    times = clips.times.double()
    assert (times[:, 0] == 0).all() and (times.diff(dim=1) > 0).all()
    gaps = times.diff(dim=1) * torch.as_tensor(clips.frame_rate)[:, None]  # in frames
    torch.testing.assert_close(gaps, gaps.round(), atol=1e-4, rtol=0)
    assert (gaps > 1.5).any()  # frames were dropped
    assert clips.frame_rate.max() / clips.frame_rate.min() > 2


def test_the_frame_index_cannot_tell_the_speed():
    """Per-frame displacement of slow clips at low frame rates exceeds that of fast clips at
    high rates: without the times the speed classes overlap."""
    _, clips = _clips(1)
    step = np.linalg.norm(clips.velocity[:, 0], axis=-1) / clips.frame_rate  # px per frame
    fast = clips.labels.numpy() >= 4
    assert step[~fast].max() > step[fast].min()


def _module(seed: int, **kwargs) -> MovingDigitsDataModule:
    data = MovingDigitsDataModule(source="digits", num_frames=4, image_size=12, digit_size=6,
                                  train_clips=16, eval_clips=8, batch_size=8, seed=seed,
                                  eval_variants=[[1, 1], [2, 1], [1, 2]], **kwargs)
    data.setup("fit")
    return data


def test_clips_are_the_same_for_a_seed_and_differ_across_seeds():
    first, again, other = _module(0), _module(0), _module(1)
    for split, variants in first.clips.items():
        for name, clips in variants.items():
            torch.testing.assert_close(clips.video, again.clips[split][name].video, rtol=0,
                                       atol=0)
            torch.testing.assert_close(clips.times, again.clips[split][name].times, rtol=0,
                                       atol=0)
            assert not torch.equal(clips.video, other.clips[split][name].video)


def test_splits_paint_disjoint_digits_and_variants_change_rate_and_length():
    data = _module(0)
    parts = [set(data.split_indices[s].tolist()) for s in ("train", "val", "test")]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    pools = data._pools()
    for split, variants in data.clips.items():  # each split painted from its own pool
        for clips in variants.values():
            again = render_clips(pools[split][torch.as_tensor(clips.digits)], clips.positions,
                                 12)
            torch.testing.assert_close(again, clips.video)
    test = data.clips["test"]
    assert data.variant_names == ["1x", "rate2x", "len2x"]
    assert [test[v].times.shape[1] for v in data.variant_names] == [4, 8, 8]
    rate = {v: float(np.median(test[v].frame_rate)) for v in data.variant_names}
    assert rate["rate2x"] > 1.5 * rate["1x"] and rate["len2x"] < 1.5 * rate["1x"]
    batch = next(iter(data.test_dataloader()[1]))
    assert isinstance(batch, ClipBatch) and batch.variant == "rate2x"
    assert batch.video.shape == (8, 8, 1, 12, 12) and batch.frame_times.shape == (8, 8)


@pytest.mark.parametrize("bad, match", [
    (dict(num_digits=3), "num_digits must be 1 or 2"),
    (dict(digit_size=24), "digit_size=24 must be less than image_size=24"),
    (dict(fast=(6.0, 9.0)), "must lie above slow"),
    (dict(eval_variants=[[1.25, 1]]), "whole number"),
    (dict(eval_variants=[[1, 1], [1.0, 1.0]]), "twice"),
    (dict(drop=1.0), "drop must be a finite number"),
    (dict(source="cifar"), "source"),
])
def test_bad_arguments_are_refused_by_name(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        MovingDigitsDataModule(**{"image_size": 24, **bad})


@pytest.mark.parametrize("encoding", [e for e in VIDEO_ENCODINGS if e != "none"])
def test_frame_times_reach_the_encoding(encoding):
    torch.manual_seed(0)
    model = VideoClassifier(encoding=encoding, **TINY).eval()
    with torch.no_grad():  # timm's init (std 0.02) gives near-uniform attention: sharpen it
        for block in model.model.vit.blocks:
            block.attn.qkv.weight.mul_(20)
    video = torch.randn(2, 3, 1, 8, 8)
    times = torch.tensor([[0.0, 0.1, 0.3], [0.0, 0.25, 0.3]])
    with torch.no_grad():  # the tokens (an untrained head's pooled output barely moves)
        out = model.model.forward_features(video, times)
        stretched = model.model.forward_features(video, 2 * times)
        assert (out - stretched).abs().max() > 1e-2
        torch.testing.assert_close(model(video, times[0]), model(video, times[[0, 0]]))
    index = VideoClassifier(encoding=encoding, frame_time="index", **TINY).eval()
    index.load_state_dict(model.state_dict())
    with torch.no_grad():  # the index model does not read the times
        torch.testing.assert_close(index(video, times), index(video, 2 * times))


def _logits(model, video, times, monkeypatch) -> list[torch.Tensor]:
    """Each block's attention logits ``q k^T / sqrt(d)``, ``(B, H, N, N)``."""
    seen, sdpa = [], F.scaled_dot_product_attention

    def spy(q, k, v, *args, **kwargs):
        seen.append(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))
        return sdpa(q, k, v, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    with torch.no_grad():
        model(video, times)
    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    return seen


@pytest.mark.parametrize("encoding", ["rope3d_axial", "rope3d_mixed", "mrope"])
def test_permuting_frames_with_their_times_keeps_rope_attention_logits(encoding, monkeypatch):
    torch.manual_seed(0)
    video = torch.randn(2, 4, 1, 8, 8)
    times = torch.tensor([[0.0, 0.1, 0.35, 0.4], [0.0, 0.3, 0.45, 0.9]])
    perm = torch.tensor([2, 0, 3, 1])
    per_frame = 4  # (8 / 4) ** 2 patches
    # Token j of the permuted clip is token old[j] of the original one.
    old = (perm[:, None] * per_frame + torch.arange(per_frame)).flatten()
    results = {}
    for frame_time in ("real", "index"):
        torch.manual_seed(1)
        model = VideoClassifier(encoding=encoding, frame_time=frame_time, **TINY).eval()
        before = _logits(model, video, times, monkeypatch)
        after = _logits(model, video[:, perm], times[:, perm], monkeypatch)
        assert len(before) == len(after) == TINY["depth"]
        results[frame_time] = max((a - b[..., old[:, None], old]).abs().max().item()
                                  for a, b in zip(after, before, strict=True))
    assert results["real"] < 1e-4
    assert results["index"] > 1e-2  # the index follows the position, not the frame


def test_video_classifier_trains_and_logs_each_setting(tmp_path):
    from lightning.pytorch import Trainer

    torch.manual_seed(0)
    data = _module(0)
    model = VideoClassifier(encoding="rope3d_mixed", num_classes=8, **{**TINY, "img_size": 12})
    writer = ClassPredictionWriter(tmp_path / "clips.csv")
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path, callbacks=[writer])
    trainer.fit(model, data)
    [result] = [{k: v for r in trainer.test(model, data, verbose=False) for k, v in r.items()}]
    assert {"test/acc", "test/acc_1x", "test/acc_rate2x", "test/acc_len2x"} <= set(result)
    assert result["test/acc"] == result["test/acc_1x"]
    probs = torch.cat(trainer.predict(model, data))
    assert probs.shape == (8, 8)
    torch.testing.assert_close(probs.sum(-1), torch.ones(8))
    # The writer names clips by position and classes by label (the clips have no names).
    written = pd.read_csv(tmp_path / "clips.csv")
    assert written["input"].tolist() == list(range(8))
    np.testing.assert_allclose(written[[f"p_{k}" for k in range(8)]], probs.numpy(), atol=1e-6)
    with pytest.raises(TypeError, match="ClipBatch"):
        model.training_step((torch.zeros(1, 2, 1, 12, 12), torch.zeros(1)), 0)


def test_video_onnx_equals_eager(tmp_path):
    from posenc.tasks.export import export_onnx

    torch.manual_seed(0)
    model = VideoClassifier(encoding="rope3d_mixed", **{**TINY, "depth": 1})
    path = export_onnx(model, tmp_path / "video.onnx")
    session = ort.InferenceSession(str(path))
    assert [i.name for i in session.get_inputs()] == ["video", "frame_times"]
    for batch, frames, height, width in ((1, 2, 8, 8), (3, 7, 12, 16)):  # every axis dynamic
        video = torch.randn(batch, frames, 1, height, width)
        times = torch.rand(batch, frames).cumsum(1)
        [got] = session.run(None, {"video": video.numpy(), "frame_times": times.numpy()})
        with torch.no_grad():
            expected = model.eval()(video, times)
        torch.testing.assert_close(torch.from_numpy(got), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.slow
def test_video_config_fits_predicts_and_exports_from_the_command_line(tmp_path):
    tiny = [*TINY_VIT, "--data.init_args.source=digits", "--data.init_args.num_frames=4",
            "--data.init_args.image_size=12", "--data.init_args.digit_size=6",
            "--data.init_args.train_clips=16", "--data.init_args.eval_clips=8",
            "--data.init_args.batch_size=8"]
    config = ["--config", str(CONFIGS / "video_digits.yaml"), *tiny]
    fit = run_cli(["fit", *config, *ONE_EPOCH, "--trainer.check_val_every_n_epoch=1"],
                  cwd=tmp_path)
    printed = dict(line.split() for line in fit.stdout.splitlines()
                   if line.startswith("  test/acc"))
    assert {"test/acc_1x", "test/acc_rate2x", "test/acc_len2x"} <= set(printed)
    [last] = tmp_path.rglob("last.ckpt")
    run_cli(["predict", *config, "--ckpt_path", str(last)], cwd=tmp_path)
    run_cli(["export", *config, "--ckpt_path", str(last), "--out", "video.onnx"], cwd=tmp_path)
    session = ort.InferenceSession(str(tmp_path / "video.onnx"))
    model = VideoClassifier.load_from_checkpoint(last, weights_only=True).eval()
    video, times = torch.randn(2, 5, 1, 12, 8), torch.rand(2, 5).cumsum(1)
    [got] = session.run(None, {"video": video.numpy(), "frame_times": times.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(got), model(video, times), atol=1e-4,
                                   rtol=1e-4)
