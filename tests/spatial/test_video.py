"""Video coordinates and the 3D encodings: RoPE3D (axial, mixed), MRoPE's relative property,
SinCos3D, irregularly timed frames, MultiheadAttention with (B, N, 3) positions."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from posenc.core import KVCache, MultiheadAttention, apply_rotation
from posenc.core.encoding import no_weight_decay_names
from posenc.spatial import patch_coords
from posenc.spatial.additive import SinCos3D
from posenc.spatial.coords import GridPositions, VideoPositions, as_video_positions, video_coords
from posenc.spatial.rope import MRoPE, RoPE3D, init_mixed_freqs_3d
from posenc.temporal import time_positions

HEAD_DIM, HEADS = 16, 3


@functools.cache
def _encodings() -> dict[str, torch.nn.Module]:
    """One module per 3D rotary encoding (built once; the tests do not change them)."""
    torch.manual_seed(1)
    return {
        "axial": RoPE3D(HEAD_DIM, HEADS, "axial"),
        "axial_half": RoPE3D(HEAD_DIM, HEADS, "axial", layout="half"),
        "mixed": RoPE3D(HEAD_DIM, HEADS, "mixed"),
        "mrope": MRoPE(HEAD_DIM, (2, 3, 3)),
        "mrope_strided": MRoPE(HEAD_DIM, (4, 2, 2), axis_layout="strided", layout="interleaved"),
    }


def _score(enc, q: torch.Tensor, k: torch.Tensor, pq, pk) -> torch.Tensor:
    """Per-head q.k after rotating q at 3D position pq and k at pk: (H,)."""
    rot = enc.rotation(torch.tensor([pq, pk], dtype=torch.float64))
    r = apply_rotation(torch.stack([q, k], dim=1)[None], rot)[0]
    return (r[:, 0] * r[:, 1]).sum(-1)


# ---- coordinates -----------------------------------------------------------------------------

def test_video_coords_are_frame_major_then_row_major():
    coords = video_coords((2, 3), 2)
    expected = [[t, r, c] for t in range(2) for r in range(2) for c in range(3)]
    assert coords.dtype == torch.float32 and coords.tolist() == expected
    # A frame's spatial part is patch_coords of the grid.
    torch.testing.assert_close(coords[6:, 1:], patch_coords((2, 3)))


def test_video_coords_take_irregular_frame_times_per_clip():
    times = torch.tensor([[0.0, 0.04, 0.2], [1.5, 1.6, 9.0]], dtype=torch.float64)
    coords = video_coords(2, times, time_scale=25.0)
    assert coords.shape == (2, 12, 3) and coords.dtype == torch.float64
    torch.testing.assert_close(coords[:, ::4, 0], times * 25.0)
    assert coords[1, 4:8, 0].tolist() == [40.0] * 4  # every patch of a frame shares its t
    torch.testing.assert_close(coords[0, :, 1:], video_coords(2, 3, dtype=torch.float64)[:, 1:])
    # integer frame times: float64 coordinates, exact beyond float32's 2**24
    big = video_coords(1, torch.tensor([2**40, 2**40 + 1]))
    assert big.dtype == torch.float64 and big[:, 0].tolist() == [2.0**40, 2.0**40 + 1]


def test_video_coords_bad_inputs():
    with pytest.raises(ValueError, match="frames must be >= 1, got 0"):
        video_coords(2, 0)
    with pytest.raises(TypeError, match="frames must be an int"):
        video_coords(2, 2.0)
    with pytest.raises(ValueError, match="frames must be finite"):
        video_coords(2, torch.tensor([0.0, float("nan")]))
    with pytest.raises(TypeError, match="frames must be an integer or floating tensor"):
        video_coords(2, torch.tensor([True, False]))
    with pytest.raises(TypeError, match="frames must be an integer, float32 or float64"):
        video_coords(2, torch.tensor([0.0, 1.0], dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"frames must have shape \(N\) or \(B, N\)"):
        video_coords(2, torch.zeros(2, 3, 1))
    with pytest.raises(ValueError, match="at least one frame time"):
        video_coords(2, torch.zeros(0))
    with pytest.raises(ValueError, match="time_scale must be a positive number"):
        video_coords(2, 3, time_scale=-1.0)
    with pytest.raises(ValueError, match="grid_size must hold positive ints"):
        video_coords((0, 2), 3)
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        video_coords(2, 3, dtype=torch.int64)


def test_as_video_positions_refuses_2d_coordinates():
    with pytest.raises(TypeError, match="got a GridPositions of 2D"):
        as_video_positions(GridPositions(patch_coords(2)))
    with pytest.raises(ValueError, match=r"positions must have shape \(N, 3\) or \(B, N, 3\)"):
        as_video_positions(patch_coords(2))
    with pytest.raises(ValueError, match="num_prefix_tokens must be >= 0"):
        as_video_positions(VideoPositions(video_coords(2, 1), -1))


# ---- the relative property -------------------------------------------------------------------

# Multiples of 1/8 up to 2**10: sums stay exact, so the offset of the moved pair is exact.
coord = st.integers(-2**13, 2**13).map(lambda v: v / 8)
point = st.tuples(coord, coord, coord)


@settings(max_examples=25, deadline=None)
@given(pq=point, pk=point, shift=point, name=st.sampled_from(sorted(_encodings())))
def test_score_depends_only_on_the_3d_offset(pq, pk, shift, name):
    enc = _encodings()[name]
    torch.manual_seed(2)
    q, k = torch.randn(HEADS, HEAD_DIM), torch.randn(HEADS, HEAD_DIM)
    moved = [tuple(a + s for a, s in zip(p, shift, strict=True)) for p in (pq, pk)]
    torch.testing.assert_close(_score(enc, q, k, *moved), _score(enc, q, k, pq, pk),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(_encodings()))
def test_score_changes_along_each_axis(name):
    enc = _encodings()[name]
    q, k = torch.randn(HEADS, HEAD_DIM), torch.randn(HEADS, HEAD_DIM)
    base = _score(enc, q, k, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    # Chunked mRoPE leaves the columns the slowest frequencies of the 1D spectrum (10000 **
    # (-10/16) and below here): they turn visibly only over tens of patches.
    step = 50.0 if name == "mrope" else 2.0
    for offset in [(step, 0.0, 0.0), (0.0, step, 0.0), (0.0, 0.0, step)]:
        assert (_score(enc, q, k, (0.0, 0.0, 0.0), offset) - base).abs().max() > 1e-2, offset


def test_irregular_frame_times_set_the_scores_not_the_frame_indices():
    # Frames at 0, 40, 200, 240 ms (dropped frames at 25 fps): t = time in frame steps.
    start = pd.Timestamp("2024-05-01 12:00:00", tz="UTC")
    stamps = pd.DatetimeIndex([start + pd.Timedelta(milliseconds=m) for m in (0, 40, 200, 240)])
    t = time_positions(stamps, stamps[0], unit="ms") / 40.0
    assert t.tolist() == [0.0, 1.0, 5.0, 6.0]
    coords = video_coords((2, 2), t)  # (16, 3), float64
    enc = RoPE3D(HEAD_DIM, HEADS, "axial")
    q, k = torch.randn(HEADS, HEAD_DIM), torch.randn(HEADS, HEAD_DIM)

    def score(frame_q, frame_k):  # the same patch (row 1, col 0) in two frames
        return _score(enc, q, k, coords[4 * frame_q + 2].tolist(), coords[4 * frame_k + 2].tolist())

    torch.testing.assert_close(score(0, 1), score(2, 3))  # both 40 ms apart
    assert (score(1, 2) - score(0, 1)).abs().max() > 1e-2  # 160 ms is not one frame step


def test_frames_across_a_dst_change_are_equally_spaced():
    # An hourly time-lapse over Europe/Berlin's spring-forward: the wall clock skips 02:00, the
    # frames are still one hour apart.
    stamps = pd.date_range("2024-03-31 00:00", periods=4, freq="h", tz="Europe/Berlin")
    t = video_coords(1, time_positions(stamps, stamps[0], unit="h"))[:, 0]
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]


# ---- RoPE3D by hand --------------------------------------------------------------------------

def test_axial_angles_are_a_1d_rope_per_axis_in_t_row_col_blocks():
    enc = RoPE3D(HEAD_DIM, HEADS, "axial", sections=(2, 3, 3))  # base 100
    coords = torch.tensor([[3.0, 7.0, -2.0], [0.5, 2.0, 11.0]])
    theta = torch.cat([coords[:, a:a + 1].double() * 100.0 ** (-torch.arange(s) / s)
                       for a, s in enumerate((2, 3, 3))], dim=-1)
    rot = enc.rotation(coords)
    assert rot.cos.shape == (1, 1, 2, HEAD_DIM // 2)
    torch.testing.assert_close(rot.cos[0, 0].double(), theta.cos(), rtol=0, atol=1e-6)
    torch.testing.assert_close(rot.sin[0, 0].double(), theta.sin(), rtol=0, atol=1e-6)


def test_default_sections_give_time_a_quarter_of_the_pairs():
    assert RoPE3D(64, 2).sections == (8, 12, 12)
    assert RoPE3D(16, 2).sections == (2, 3, 3)
    assert RoPE3D(6, 2).sections == (1, 1, 1)


def test_mixed_init_is_an_orthonormal_frame_per_head_with_axial_magnitudes():
    sections = (2, 3, 3)
    freqs = init_mixed_freqs_3d(HEAD_DIM, HEADS, 10.0, sections).double()  # (3, H, P)
    axial = RoPE3D(HEAD_DIM, HEADS, "axial", 10.0, sections=sections).freqs64[:, 0]
    mag = axial.sum(0)  # (P,): each pair's axial frequency
    starts = (0, 2, 5)
    for h in range(HEADS):
        frame = torch.stack([freqs[:, h, s] / mag[s] for s in starts], dim=1)  # columns u_a
        torch.testing.assert_close(frame.T @ frame, torch.eye(3, dtype=torch.float64))
        for a, (s, n) in enumerate(zip(starts, sections, strict=True)):
            torch.testing.assert_close(freqs[:, h, s:s + n], frame[:, a:a + 1] * mag[s:s + n])
    still = init_mixed_freqs_3d(HEAD_DIM, HEADS, 10.0, sections, rotate=False)
    torch.testing.assert_close(still, axial.float()[:, None].expand(3, HEADS, -1))


def test_mixed_init_is_reproducible_with_a_generator():
    a = init_mixed_freqs_3d(HEAD_DIM, HEADS, generator=torch.Generator().manual_seed(3))
    b = init_mixed_freqs_3d(HEAD_DIM, HEADS, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        init_mixed_freqs_3d(HEAD_DIM, HEADS, generator=3)
    with pytest.raises(TypeError, match="rotate must be a bool"):
        init_mixed_freqs_3d(HEAD_DIM, HEADS, rotate="yes")


def test_prefix_tokens_are_not_rotated():
    enc = RoPE3D(HEAD_DIM, HEADS, "mixed")
    positions = VideoPositions(video_coords(2, 2), 2)
    x = torch.randn(2, HEADS, 2 + 8, HEAD_DIM)
    out = enc.rotate(x, positions)
    assert torch.equal(out[:, :, :2], x[:, :, :2])
    torch.testing.assert_close(out[:, :, 2:], enc.rotate(x[:, :, 2:], positions.coords))


def test_batched_coordinates_rotate_each_clip():
    enc = RoPE3D(HEAD_DIM, HEADS)
    coords = video_coords(2, torch.tensor([[0.0, 1.0], [0.0, 3.5]]))  # (2, 8, 3)
    x = torch.randn(2, HEADS, 8, HEAD_DIM)
    out = enc.rotate(x, coords)
    for b in range(2):
        torch.testing.assert_close(out[b:b + 1], enc.rotate(x[b:b + 1], coords[b]))


def test_mixed_frequencies_are_learned_float32_and_not_weight_decayed():
    enc = RoPE3D(HEAD_DIM, HEADS, "mixed")
    attn = MultiheadAttention(HEAD_DIM * HEADS, HEADS, rotary=enc)
    x = torch.randn(2, 8, HEAD_DIM * HEADS)
    attn(x, query_positions=video_coords(2, 2)).square().sum().backward()
    assert enc.freqs.grad is not None and enc.freqs.grad.abs().sum() > 0
    assert no_weight_decay_names(attn) == {"rotary.freqs"}
    attn.to(torch.bfloat16)
    assert enc.freqs.dtype == torch.float32
    assert RoPE3D(HEAD_DIM, HEADS).to(torch.bfloat16).freqs64.dtype == torch.float64


def test_rope3d_bad_arguments_and_inputs():
    with pytest.raises(ValueError, match="head_dim must be even"):
        RoPE3D(15, 3)
    with pytest.raises(ValueError, match="variant must be one of"):
        RoPE3D(HEAD_DIM, HEADS, "diagonal")
    with pytest.raises(ValueError, match=r"summing to head_dim // 2=8, got \(0, 4, 4\)"):
        RoPE3D(HEAD_DIM, HEADS, sections=(0, 4, 4))
    with pytest.raises(TypeError, match="sections must be three ints"):
        RoPE3D(HEAD_DIM, HEADS, sections="248")
    with pytest.raises(ValueError, match="base"):
        RoPE3D(HEAD_DIM, HEADS, base=float("inf"))
    enc = RoPE3D(HEAD_DIM, HEADS, "mixed")
    with pytest.raises(ValueError, match=r"x must have shape \(B, H=3, N, head_dim=16\)"):
        enc.rotate(torch.randn(1, 2, 8, HEAD_DIM), video_coords(2, 2))
    with pytest.raises(ValueError, match="prefix \\+ N = 9"):
        enc.rotate(torch.randn(1, HEADS, 9, HEAD_DIM), video_coords(2, 2))
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        enc.rotate([1.0], video_coords(2, 2))
    with pytest.raises(ValueError, match=r"\(N, 3\) or \(B, N, 3\)"):
        enc.rotation(torch.zeros(4, 2))
    with pytest.raises(TypeError, match="half-precision positions"):
        enc.rotation(video_coords(2, 2).half())
    with pytest.raises(ValueError, match="must be finite"):
        enc.rotation(torch.tensor([[0.0, float("inf"), 0.0]]))


# ---- in MultiheadAttention -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["axial", "mixed", "mrope"])
def test_attention_with_video_positions_is_shift_invariant(name):
    attn = MultiheadAttention(HEAD_DIM * HEADS, HEADS, rotary=_encodings()[name])
    times = torch.tensor([[0.0, 0.3, 2.0], [1.0, 1.1, 1.2]], dtype=torch.float64)
    coords = video_coords((2, 2), times, time_scale=10.0)  # (2, 12, 3)
    x = torch.randn(2, 12, HEAD_DIM * HEADS)
    out = attn(x, query_positions=coords)
    shift = torch.tensor([1e4, -7.0, 3.0], dtype=torch.float64)
    torch.testing.assert_close(attn(x, query_positions=coords + shift), out,
                               rtol=1e-4, atol=1e-4)
    other = coords.clone()
    other[..., 0] *= 2  # other time gaps: another output
    assert (attn(x, query_positions=other) - out).abs().max() > 1e-3


def test_kv_cache_decoding_with_3d_positions_equals_one_causal_pass():
    attn = MultiheadAttention(HEAD_DIM * HEADS, HEADS, rotary=MRoPE(HEAD_DIM, (2, 3, 3)))
    coords = video_coords((2, 2), 3)[None]  # (1, 12, 3)
    x = torch.randn(1, 12, HEAD_DIM * HEADS)
    full = attn(x, query_positions=coords, is_causal=True)
    cache = KVCache(coord_dims=1)
    steps = [attn(x[:, i:i + 4], query_positions=coords[:, i:i + 4], is_causal=True,
                  kv_cache=cache) for i in range(0, 12, 4)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


# ---- SinCos3D --------------------------------------------------------------------------------

def _sincos_1d(p: np.ndarray, pairs: int, base: float = 10000.0) -> np.ndarray:
    """[sin(p w_i)..., cos(p w_i)...], w_i = base ** (-i / pairs) (the Transformer's
    sinusoid of width 2 * pairs in tensor2tensor's sin-then-cos order)."""
    w = base ** (-np.arange(pairs, dtype=np.float64) / pairs)
    return np.concatenate([np.sin(np.outer(p, w)), np.cos(np.outer(p, w))], axis=1)


def test_sincos3d_equals_the_hand_formula_t_rows_cols():
    coords = np.array([[0.0, 0.0, 0.0], [2.0, 1.0, 3.0], [0.37, 5.0, 0.5], [-4.0, 2.0, 9.0]])
    got = SinCos3D(32, sections=(4, 6, 6))(torch.from_numpy(coords)).double().numpy()
    expected = np.concatenate([_sincos_1d(coords[:, 0], 4), _sincos_1d(coords[:, 1], 6),
                               _sincos_1d(coords[:, 2], 6)], axis=1)
    assert got.shape == (4, 32)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_sincos3d_t_cols_rows_is_the_cogvideox_layout():
    # diffusers' get_3d_sincos_pos_embed (CogVideoX): a quarter of the channels for time, then
    # MAE's 2D sin-cos (column half first) in the other three quarters; tokens frame-major.
    dim, frames, rows, cols = 64, 3, 2, 4
    t, r, c = (a.reshape(-1) for a in np.meshgrid(np.arange(frames), np.arange(rows),
                                                  np.arange(cols), indexing="ij"))
    expected = np.concatenate([_sincos_1d(t, dim // 8), _sincos_1d(c, 3 * dim // 16),
                               _sincos_1d(r, 3 * dim // 16)], axis=1)
    got = SinCos3D(dim, layout="t_cols_rows").encode_video((rows, cols), frames)
    assert got.shape == (frames * rows * cols, dim) and got.dtype == torch.float32
    np.testing.assert_allclose(got.double().numpy(), expected, rtol=0, atol=1e-6)


def test_sincos3d_keeps_float64_time_precise_and_outputs_the_given_dtype():
    enc = SinCos3D(48)
    assert enc.sections == (6, 9, 9)
    seconds = torch.tensor([1.7e9, 1.7e9 + 0.04], dtype=torch.float64)  # epoch seconds
    got = enc.encode_video(1, seconds, dtype=torch.float64)
    w = 10000.0 ** (-torch.arange(6, dtype=torch.float64) / 6)
    expected = torch.cat([torch.sin(seconds[:, None] * w), torch.cos(seconds[:, None] * w)], -1)
    torch.testing.assert_close(got[:, :12], expected, rtol=0, atol=1e-6)
    assert enc(video_coords(2, 2), dtype=torch.bfloat16).dtype == torch.bfloat16
    batched = enc.encode_video(2, torch.tensor([[0.0, 1.0], [0.0, 2.5]]))
    assert batched.shape == (2, 8, 48)


def test_sincos3d_bad_arguments():
    with pytest.raises(ValueError, match="dim must be even"):
        SinCos3D(33)
    with pytest.raises(ValueError, match="dim // 2=2 pairs are too few"):
        SinCos3D(4)
    with pytest.raises(ValueError, match=r"summing to dim // 2=16, got \(4, 4, 4\)"):
        SinCos3D(32, sections=(4, 4, 4))
    with pytest.raises(ValueError, match="layout must be one of"):
        SinCos3D(32, layout="rows_cols")
    enc = SinCos3D(32)
    with pytest.raises(ValueError, match=r"coords must have shape \(N, 3\) or \(B, N, 3\)"):
        enc(torch.zeros(4, 2))
    with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
        enc(video_coords(2, 1), dtype=torch.int32)
    with pytest.raises(ValueError, match="coords must be finite"):
        enc(torch.tensor([[float("nan"), 0.0, 0.0]]))



@pytest.mark.parametrize("make", [lambda: RoPE3D(HEAD_DIM, HEADS, "mixed"),
                                  lambda: RoPE3D(HEAD_DIM, HEADS, "axial"),
                                  lambda: MRoPE(HEAD_DIM, (4, 2, 2), axis_layout="strided"),
                                  lambda: SinCos3D(32)], ids=["mixed", "axial", "mrope", "sincos"])
def test_meta_device_build_then_to_empty_and_reset_parameters(make):
    reference = make()
    with torch.device("meta"):
        enc = make()
    assert all(t.is_meta for t in [*enc.parameters(), *enc.buffers()])
    enc.to_empty(device="cpu")
    enc.reset_parameters()
    if getattr(reference, "freqs", None) is not None:  # a fresh random draw: copy it over
        assert enc.freqs.shape == reference.freqs.shape and torch.isfinite(enc.freqs).all()
        enc.load_state_dict(reference.state_dict())
    coords = video_coords(2, 3)
    if isinstance(enc, SinCos3D):
        torch.testing.assert_close(enc(coords), reference(coords))
    else:
        torch.testing.assert_close(enc.rotation(coords).cos, reference.rotation(coords).cos)
