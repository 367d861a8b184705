"""posenc.tasks.plots: every plot renders a non-blank PNG of the size asked for."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import lightning
import numpy as np
import pandas as pd
import pytest
import torch
from posenc.spatial.coords import CoordAugment
from posenc.tasks import plots
from posenc.tasks.plots import core as plots_core
from posenc.tasks.plots import spatial as plots_spatial
from posenc.tasks.plots import temporal as plots_temporal

from posenc import core, spatial

pytest.importorskip("matplotlib")

# Each kind renders once: through its function here or through main() below (both paths
# meet in the same plot function); rendering is most of this file's run time.

DPI = 40
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG signature and IHDR chunk."""
    header = path.read_bytes()[:24]
    assert header[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert header[12:16] == b"IHDR"
    return struct.unpack(">II", header[16:24])


def assert_png(path: Path, figsize: tuple[float, float], dpi: int = DPI) -> None:
    from matplotlib.image import imread

    assert path.is_file() and path.stat().st_size > 0
    assert png_size(path) == (round(figsize[0] * dpi), round(figsize[1] * dpi))
    pixels = imread(path)
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 10, f"{path} is (nearly) blank: {len(colours)} distinct colours"


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions save, in order (to read back what they drew)."""
    saved = []
    original = plots_core.save_png

    def keep(fig, path):
        saved.append(fig)
        return original(fig, path)

    for module in (plots_core, plots_spatial, plots_temporal):
        monkeypatch.setattr(module, "save_png", keep)
    return saved


# -- each plot function ------------------------------------------------------------------------
def test_additive_1d_renders_heatmap_and_similarity(tmp_path):
    path = plots.plot_additive_1d(core.LearnedEncoding(40, 16), tmp_path / "a.png",
                                  num_positions=40, figsize=(8, 4), dpi=DPI)
    assert_png(path, (8, 4))


@pytest.mark.parametrize("encoding", [core.ALiBi(6, causal=True), core.ClippedRelativeBias(2, 5)],
                         ids=["alibi-causal", "clipped"])
def test_bias_vs_distance_renders(tmp_path, encoding):
    path = plots.plot_bias_vs_distance(encoding, tmp_path / "b.png", max_distance=20,
                                       figsize=(7, 4), dpi=DPI)
    assert_png(path, (7, 4))


def test_bias_comparison_draws_each_familys_formula_per_head(tmp_path, figures):
    fire = core.FIRE(2, mlp_width=4, init_threshold=64.0)
    encodings = [core.ALiBi(2), core.Kerple(2, "log", r1=1.5, r2=0.5),
                 core.Kerple(2, "power", r1=0.5, r2=1.5), fire]
    path = plots.plot_bias_comparison(encodings, tmp_path / "c.png", max_distance=10,
                                      figsize=(8, 5), dpi=DPI)
    assert_png(path, (8, 5))
    d = np.arange(10, -1, -1.0)  # keys 0..10 against the query at 10
    c, width = 0.1, 4
    first, _, second = fire.mlp
    x = np.log1p(c * d) / (np.log1p(c * 64.0) + 1e-6)
    hidden = np.maximum(x[:, None] * first.weight.detach().numpy()[:, 0]
                        + first.bias.detach().numpy(), 0)
    fire_bias = hidden @ second.weight.detach().numpy().T + second.bias.detach().numpy()
    assert hidden.shape == (11, width)
    expected = [[-2**-4 * d, -2**-8 * d],  # ALiBi slopes 2 ** (-8 (h + 1) / H), H = 2
                [-1.5 * np.log1p(0.5 * d)] * 2, [-0.5 * d**1.5] * 2, fire_bias.T]
    axes = figures[0].axes
    for ax, want in zip(axes, expected, strict=True):
        for line, curve in zip(ax.lines[:2], want, strict=True):
            np.testing.assert_array_equal(line.get_xdata(), d)
            np.testing.assert_allclose(line.get_ydata(), curve, rtol=2e-6, atol=1e-6)
    assert axes[1].get_title() == "KERPLE log: -r1 log(1 + r2 d)"
    with pytest.raises(TypeError, match="list of 1 to 6 bias encodings"):
        plots.plot_bias_comparison(core.ALiBi(2), tmp_path / "c.png")


def test_xpos_decay_draws_score_envelope_and_pair_decay(tmp_path, figures):
    xpos = core.XPos(8, scale_base=16.0)
    path = plots.plot_xpos_decay(xpos, tmp_path / "x.png", max_distance=32, figsize=(8, 4),
                                 dpi=DPI)
    assert_png(path, (8, 4))
    d = np.arange(33.0)[:, None]
    i = np.arange(4)
    theta = d * 10000.0 ** (-2 * i / 8)  # (D, pairs)
    decay = ((2 * i + 0.4 * 8) / (1.4 * 8)) ** (d / 16)  # zeta_i ** (d / scale_base)
    score, pairs = figures[0].axes[:2]
    rope_line, xpos_line, envelope = score.lines[:3]
    np.testing.assert_allclose(rope_line.get_ydata(), np.cos(theta).mean(1), atol=1e-6)
    np.testing.assert_allclose(xpos_line.get_ydata(), (decay * np.cos(theta)).mean(1),
                               atol=1e-6)
    np.testing.assert_allclose(envelope.get_ydata(), decay.mean(1), rtol=1e-12)
    for pair, line in enumerate(pairs.lines):
        np.testing.assert_allclose(line.get_ydata(), decay[:, pair], rtol=1e-12)
    # The highest-frequency pair (shortest wavelength) has the smallest zeta: it decays first.
    assert pairs.lines[0].get_ydata()[-1] == pytest.approx((2 / 7) ** 2)
    with pytest.raises(TypeError, match="posenc.core.XPos"):
        plots.plot_xpos_decay(core.RotaryEncoding(8), tmp_path / "x.png")


def test_rope_scores_of_xpos_decay_with_distance(tmp_path, figures):
    plots.plot_rope_scores(core.XPos(8, scale_base=4.0), tmp_path / "r.png", max_distance=16,
                           num_samples=2, figsize=(6, 4), dpi=DPI)
    ones = figures[0].axes[0].lines[1].get_ydata()
    assert ones[0] == pytest.approx(1.0) and abs(ones[-1]) < (5 / 7) ** 4


def test_video_similarity_is_the_ones_score_of_the_3d_offset(tmp_path, figures):
    encodings = [spatial.MRoPE(16), spatial.SinCos3D(12)]
    path = plots.plot_video_similarity(encodings, tmp_path / "v.png", (2, 3), 2,
                                       query=(1, 0, 2), figsize=(6, 5), dpi=DPI)
    assert_png(path, (6, 5))
    t, r, c = np.meshgrid(np.arange(2), np.arange(2), np.arange(3), indexing="ij")
    offset = np.stack([t - 1, r - 0, c - 2])  # (3, T, rows, cols)
    axis = np.array([0, 0, 1, 1, 1, 2, 2, 2])  # default sections (2, 3, 3), chunked
    freqs = 10000.0 ** (-2 * np.arange(8) / 16)
    expected = np.cos(offset[axis] * freqs[:, None, None, None]).mean(0)
    axes = figures[0].axes
    for frame in range(2):
        np.testing.assert_allclose(axes[frame].images[0].get_array(), expected[frame],
                                   atol=1e-6)
    assert axes[3].images[0].get_array()[0, 2] == pytest.approx(1.0)  # SinCos3D at the query
    with pytest.raises(ValueError, match=r"query must be \(t, row, col\)"):
        plots.plot_video_similarity(encodings, tmp_path / "v.png", 2, 2, query=(2, 0, 0))


def test_video_similarity_row_labels_stay_inside_the_figure(tmp_path):
    """The row labels (left of fixed-aspect maps) were cut off at the left edge: the PNG's
    leftmost pixel columns held their ink."""
    from matplotlib.image import imread

    dim, space = 128, 5 * 64 // 16
    encodings = [spatial.MRoPE(dim), spatial.MRoPE(dim, (64 - 2 * space, space, space),
                                                  axis_layout="strided"),
                 spatial.RoPE3D(dim, 1), spatial.SinCos3D(dim)]
    path = plots.plot_video_similarity(encodings, tmp_path / "v.png", 8, 5, dpi=100)
    gray = imread(path)[..., :3].mean(-1)  # white 1, ink dark
    assert gray[:, :3].min() > 0.9


def test_video_irregular_similarity_follows_the_real_frame_times(tmp_path, figures):
    times, scale = [0.0, 0.1, 0.5], 2.0
    path = plots.plot_video_irregular([spatial.MRoPE(16)], tmp_path / "vi.png", (2, 3), times,
                                      time_scale=scale, query=(1, 0, 2), figsize=(9, 3),
                                      dpi=DPI)
    assert_png(path, (9, 3))
    t, r, c = np.meshgrid(np.array(times) * scale, np.arange(2), np.arange(3), indexing="ij")
    axis = np.array([0, 0, 1, 1, 1, 2, 2, 2])  # default sections (2, 3, 3), chunked
    freqs = 10000.0 ** (-2 * np.arange(8) / 16)

    def ones_score(offset):  # (3, T, rows, cols) -> the q = k = ones score / head_dim
        return np.cos(offset[axis] * freqs[:, None, None, None]).mean(0)

    real = ones_score(np.stack([t - t[1, 0, 2], r - 0, c - 2]))
    frame = np.arange(3)[:, None, None] + 0 * r
    index = ones_score(np.stack([frame - 1, r - 0, c - 2]))
    axes = figures[0].axes
    for f in range(3):
        np.testing.assert_allclose(axes[f].images[0].get_array(), real[f], atol=1e-6)
    by_time, by_index = axes[3].lines
    np.testing.assert_allclose(by_time.get_xdata(), times)
    np.testing.assert_allclose(by_time.get_ydata(), real[:, 0, 2], atol=1e-6)
    np.testing.assert_allclose(by_index.get_ydata(), index[:, 0, 2], atol=1e-6)
    assert not np.allclose(real[:, 0, 2], index[:, 0, 2], atol=1e-3)  # the gaps matter
    with pytest.raises(ValueError, match="frame_times must be finite and increasing"):
        plots.plot_video_irregular([spatial.MRoPE(16)], tmp_path / "vi.png", 2, [0.0, 0.3, 0.2])
    with pytest.raises(ValueError, match="at least 2 times"):
        plots.plot_video_irregular([spatial.MRoPE(16)], tmp_path / "vi.png", 2, [0.0])


def test_holiday_features_over_a_year_of_us_holidays(tmp_path, figures):
    pytest.importorskip("holidays")
    path = plots.plot_holiday_features("US", tmp_path / "h.png", year=2024, alpha=0.5,
                                       zoom_days=3, figsize=(10, 6), dpi=DPI)
    assert_png(path, (10, 6))
    year, dist = figures[0].axes[:2]
    indicator, exponential, squared = year.lines[:3]
    days = indicator.get_xdata()
    assert len(days) == 366 and days[0] == np.datetime64("2024-01-01")
    at = {day: int(np.flatnonzero(days == np.datetime64(day))[0])
          for day in ("2024-07-03", "2024-07-04", "2024-07-05", "2024-07-06")}
    assert indicator.get_ydata().sum() == 11  # the 11 federal holidays of 2024
    assert [indicator.get_ydata()[i] for i in at.values()] == [0, 1, 0, 0]
    np.testing.assert_allclose([exponential.get_ydata()[i] for i in at.values()],
                               np.exp(-0.5 * np.array([1, 0, 1, 2])), rtol=1e-12)
    np.testing.assert_allclose([squared.get_ydata()[i] for i in at.values()],
                               np.exp(-0.5 * np.array([1, 0, 1, 4])), rtol=1e-12)
    assert [dist.lines[0].get_ydata()[i] for i in at.values()] == [-1, 0, 1, 2]
    assert dist.lines[0].get_ydata()[0] == 0  # New Year's Day
    assert "Independence Day" in [text.get_text() for text in year.texts]


def test_grid_similarity_renders_a_resampled_grid(tmp_path):
    path = plots.plot_grid_similarity(spatial.Learned2D(3, 16), tmp_path / "g.png", (3, 5),
                                      figsize=(5, 5), dpi=DPI)
    assert_png(path, (5, 5))


def test_grid_similarity_rejects_non_additive_encodings(tmp_path):
    with pytest.raises(TypeError, match="encode_grid"):
        plots.plot_grid_similarity(spatial.RoPE2D(8, 2), tmp_path / "g.png", 3)


def test_rope_mixed_frequencies_renders_one_panel_per_head(tmp_path):
    path = plots.plot_rope_mixed_frequencies(spatial.RoPE2D(16, 5, "mixed"), tmp_path / "m.png",
                                             figsize=(8, 5), dpi=DPI)
    assert_png(path, (8, 5))
    with pytest.raises(TypeError, match="variant='mixed'"):
        plots.plot_rope_mixed_frequencies(spatial.RoPE2D(16, 2, "axial"), tmp_path / "x.png")


def _block_score_map(encoding, q, anchor, window):
    """Reference for plot_liere_relative: q^T R(anchor + d)^T R(anchor) q / |q|^2 with R the
    block-diagonal torch.linalg.matrix_exp of p_row A_row + p_col A_col, in float64."""
    a = encoding.axis_generators().detach().double()[0]  # head 0: (2, blocks, b, b)
    blocks = q.double().unflatten(-1, (a.shape[1], -1))

    def turn(row, col):
        return (torch.linalg.matrix_exp(row * a[0] + col * a[1]) @ blocks[..., None])[..., 0]

    key = turn(*anchor)
    d = range(-window, window + 1)
    return np.array([[float((turn(anchor[0] + r, anchor[1] + c) * key).sum()) for c in d]
                     for r in d]) / float(q.double().norm()) ** 2


def test_liere_relative_maps_and_anchor_changes(tmp_path, figures):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        encodings = [spatial.LieRE(8, 1, "liere", block_size=4),
                     spatial.LieRE(8, 1, "comrope", block_size=4, init_std=0.2),
                     spatial.LieRE(8, 1, "liere", block_size=4, init="random", init_std=0.2)]
    anchors = ((0, 0), (4, -2), (-3, 5))
    path = plots.plot_liere_relative(encodings, tmp_path / "l.png", window=3, anchors=anchors,
                                     seed=1, figsize=(10, 3.5), dpi=DPI)
    assert_png(path, (10, 3.5))
    q = torch.randn(8, generator=torch.Generator().manual_seed(1))
    *maps, bars, _ = figures[0].axes  # three heat maps, the bar panel, the colour bar
    refs = [[_block_score_map(e, q, a, 3) for a in anchors] for e in encodings]
    for ax, ref in zip(maps, refs, strict=True):
        np.testing.assert_allclose(ax.images[0].get_array(), ref[0], atol=2e-6)
        assert ax.images[0].get_array()[3, 3] == pytest.approx(1.0)  # offset (0, 0)
    # LieRE at its RoPE-Mixed init, by RoPE's formula: pair j turns by d_row f_row + d_col f_col.
    freqs = encodings[0].axis_generators().detach().double()[0, :, :, 1::2, ::2]
    freqs = torch.diagonal(freqs, dim1=-2, dim2=-1).flatten(1)  # (2, pairs): A[2i+1, 2i]
    d = torch.arange(-3, 4.0, dtype=torch.float64)
    angle = d[:, None, None] * freqs[0] + d[None, :, None] * freqs[1]  # (rows, cols, pairs)
    weight = q.double().unflatten(0, (-1, 2)).square().sum(-1) / q.double().square().sum()
    np.testing.assert_allclose(maps[0].images[0].get_array(),
                               (torch.cos(angle) * weight).sum(-1).numpy(), atol=2e-6)
    heights = np.array([[p.get_height() for p in c] for c in bars.containers])  # (anchor, enc)
    assert heights.shape == (2, 3)
    assert (heights[:, :2] < 1e-5).all()  # relative: float32 rounding only
    want = [np.abs(r - refs[2][0]).max() for r in refs[2][1:]]
    assert min(want) > 1e-2
    np.testing.assert_allclose(heights[:, 2], want, atol=1e-5)  # random LieRE: not relative
    assert maps[2].get_title().startswith("LieRE (random init)")


def test_liere_relative_rejects_bad_arguments(tmp_path):
    liere = [spatial.LieRE(8, 1, block_size=4)]
    with pytest.raises(TypeError, match="encodings must be a list of 1 to 4 2D rotary"):
        plots.plot_liere_relative([spatial.SinCos2D(8)], tmp_path / "l.png")
    with pytest.raises(TypeError, match="encodings must be a list"):
        plots.plot_liere_relative(liere[0], tmp_path / "l.png")
    with pytest.raises(ValueError, match="window must be >= 1"):
        plots.plot_liere_relative(liere, tmp_path / "l.png", window=0)
    for anchors in [((0, 0),), ((0, 0), (1, 0.5)), 3, ((0, 0, 0), (1, 1))]:
        with pytest.raises(ValueError, match="anchors must be at least two"):
            plots.plot_liere_relative(liere, tmp_path / "l.png", anchors=anchors)


def test_rope_dinov3_coords_are_what_rope2d_sees(tmp_path, figures):
    path = plots.plot_rope_dinov3_coords(tmp_path / "d.png", (6, 10), shift_coords=0.5,
                                         jitter_coords=1.5, rescale_coords=2.0, num_draws=2,
                                         seed=3, figsize=(12, 8), dpi=DPI)
    assert_png(path, (12, 8))
    axes = figures[0].axes

    def points(ax, i=0):  # scatter offsets are (x, y) = (col, row)
        return np.asarray(ax.collections[i].get_offsets())[:, ::-1].copy()

    def centres(size, side):  # patch centres (i + 0.5) of a side, over `side`, in [-1, 1]
        return (np.arange(size) + 0.5) * 2 / side - 1

    for ax, (row_side, col_side) in zip(axes[:3], [(6, 10), (6, 6), (10, 10)], strict=True):
        rows, cols = np.meshgrid(centres(6, row_side), centres(10, col_side), indexing="ij")
        np.testing.assert_allclose(points(ax), np.stack([rows, cols], -1).reshape(-1, 2),
                                   atol=1e-6)
    separate, by_min, by_max = (points(ax) for ax in axes[:3])
    np.testing.assert_allclose([separate.min(0), separate.max(0)],
                               [[-5 / 6, -0.9], [5 / 6, 0.9]], atol=1e-6)
    np.testing.assert_allclose(by_min[:, 1].max(), 13 / 6, atol=1e-6)  # the long side past 1
    np.testing.assert_allclose([by_max.min(0), by_max.max(0)],  # long side in [-1, 1],
                               [[-0.9, -0.9], [0.1, 0.9]], atol=1e-6)  # short side inside it
    for ax, step, value in zip(axes[3:6], ["shift_coords", "jitter_coords", "rescale_coords"],
                               [0.5, 1.5, 2.0], strict=True):
        augment = CoordAugment(**{step: value})
        gen = torch.Generator().manual_seed(3)
        base = torch.from_numpy(points(ax, 0)).float()
        np.testing.assert_allclose(base, separate, atol=0)
        for i in (1, 2):
            np.testing.assert_array_equal(points(ax, i), augment(base, generator=gen).numpy())
        # What RoPE2D turns by in training for the global seed 3 is the first draw's rotation.
        rope = spatial.RoPE2D(8, 1, normalize="unit", normalize_coords="separate",
                              **{step: value})
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(3)
            training = rope.rotation(base)
        seen = rope.eval().rotation(torch.from_numpy(points(ax, 1)).float())
        torch.testing.assert_close(training.cos, seen.cos, rtol=0, atol=1e-6)
        torch.testing.assert_close(training.sin, seen.sin, rtol=0, atol=1e-6)
    # By hand: a shift moves every point by one offset per axis, within +-0.5; jitter scales
    # each axis by its own factor in [1/1.5, 1.5]; rescale both axes by one factor in [1/2, 2].
    shift = points(axes[3], 1) - separate
    np.testing.assert_allclose(shift, np.broadcast_to(shift[0], shift.shape), atol=1e-6)
    assert (np.abs(shift[0]) <= 0.5).all() and (shift[0] != 0).all()
    jitter = points(axes[4], 1) / separate
    np.testing.assert_allclose(jitter, np.broadcast_to(jitter[0], jitter.shape), rtol=1e-5)
    assert ((1 / 1.5 <= jitter[0]) & (jitter[0] <= 1.5)).all() and jitter[0, 0] != jitter[0, 1]
    rescale = points(axes[5], 1) / separate
    np.testing.assert_allclose(rescale, rescale[0, 0], rtol=1e-5)
    assert 0.5 <= rescale[0, 0] <= 2
    legend = [t.get_text() for t in axes[6].get_legend().get_texts()]
    assert legend[1] == f"1: ({shift[0, 0]:+.2f}, {shift[0, 1]:+.2f})"


def test_rope_dinov3_coords_reject_bad_arguments(tmp_path):
    path = tmp_path / "d.png"
    with pytest.raises(TypeError, match="shift_coords must be a number"):
        plots.plot_rope_dinov3_coords(path, shift_coords=None)
    with pytest.raises(ValueError, match="jitter_coords"):
        plots.plot_rope_dinov3_coords(path, jitter_coords=0.5)
    with pytest.raises(ValueError, match="normalize_coords"):
        plots.plot_rope_dinov3_coords(path, normalize_coords="both")
    with pytest.raises(ValueError, match="grid_size must be at least 2 x 2"):
        plots.plot_rope_dinov3_coords(path, (1, 5))
    with pytest.raises(ValueError, match="num_draws must be 1 to 6"):
        plots.plot_rope_dinov3_coords(path, num_draws=7)
    with pytest.raises(TypeError, match="seed must be an int"):
        plots.plot_rope_dinov3_coords(path, seed=1.5)


def test_fourier_features_render(tmp_path):
    path = plots.plot_fourier_features("Europe/Berlin", tmp_path / "t.png", start="2024-03-28",
                                       days=5, harmonics=2, figsize=(10, 6), dpi=DPI)
    assert_png(path, (10, 6))


def test_time_plots_reject_bad_zone_and_nonexistent_start(tmp_path):
    with pytest.raises(ValueError, match="Nowhere/Land"):
        plots.plot_calendar_features("Nowhere/Land", tmp_path / "t.png")
    with pytest.raises(ValueError, match="not a valid local time"):
        plots.plot_fourier_features("America/New_York", tmp_path / "t.png",
                                    start="2024-03-10 02:30")


def test_dst_changes_are_the_zones_transitions():
    tz = "America/New_York"
    changes = plots.dst_changes(pd.Timestamp("2024-01-01", tz=tz),
                                pd.Timestamp("2025-01-01", tz=tz))
    assert changes == [(pd.Timestamp("2024-03-10 03:00", tz=tz), -5.0, -4.0),
                       (pd.Timestamp("2024-11-03 01:00-05:00").tz_convert(tz), -4.0, -5.0)]
    assert plots.dst_changes(pd.Timestamp("2024-01-01", tz="UTC"),
                             pd.Timestamp("2025-01-01", tz="UTC")) == []


def test_bad_sizes_name_the_argument(tmp_path):
    with pytest.raises(ValueError, match="num_positions must be >= 2"):
        plots.plot_additive_1d(core.SinusoidalEncoding(8), tmp_path / "a.png", num_positions=1)
    with pytest.raises(TypeError, match="dpi must be an int"):
        plots.plot_additive_1d(core.SinusoidalEncoding(8), tmp_path / "a.png", dpi=72.0)


def test_missing_matplotlib_names_the_plot_extra(tmp_path, monkeypatch):
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"posenc\[plot\]"):
        plots.plot_additive_1d(core.SinusoidalEncoding(8), tmp_path / "a.png")


# -- command line ------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,name,figsize", [
    (["sinusoidal", "--dim", "16", "--positions", "20"], "sinusoidal.png", (12, 5)),
    (["rope", "--head-dim", "8", "--max-distance", "16", "--samples", "4"], "rope.png", (9, 5)),
    (["alibi", "--heads", "3", "--max-distance", "16"], "alibi.png", (10, 5)),
    (["t5", "--heads", "2", "--max-distance", "16", "--unidirectional"], "t5.png", (10, 5)),
    (["xpos", "--head-dim", "8", "--max-distance", "64"], "xpos.png", (13, 5)),
    (["bias-compare", "--heads", "2", "--max-distance", "16"], "bias-compare.png", (12, 8.6)),
    (["video", "--head-dim", "16", "--grid", "3", "3", "--frames", "2"], "video.png",
     (6.3, 8.6)),
    (["video-irregular", "--head-dim", "16", "--grid", "2", "2", "--frame-times", "0", "0.3",
      "0.4"], "video-irregular.png", (10.2, 6.7)),
    (["liere", "--head-dim", "8", "--block-size", "4", "--window", "2", "--init-std", "0.2"],
     "liere.png", (15.8, 4.4)),
    (["rope-dinov3", "--grid", "3", "4", "--draws", "1", "--normalize-coords", "max"],
     "rope-dinov3.png", (14, 8.5)),
    (["holidays", "--country", "US", "--subdiv", "CA", "--year", "2023"], "holidays.png",
     (15, 9)),
    (["grid-similarity", "--encoding", "sincos2d", "--grid", "3", "3", "--dim", "8"],
     "grid-similarity-sincos2d.png", (8, 7.6)),
    (["calendar", "--tz", "America/New_York", "--start", "2024-03-07", "--days", "4"],
     "calendar.png", (15, 9)),
], ids=["sinusoidal", "rope", "alibi", "t5", "xpos", "bias-compare", "video", "video-irregular",
        "liere",
        "rope-dinov3", "holidays", "grid-similarity", "calendar"])
def test_main_writes_the_named_png(tmp_path, capsys, argv, name, figsize):
    paths = plots.main([*argv, "--out", str(tmp_path), "--dpi", str(DPI)])
    assert paths == [tmp_path / name]
    assert capsys.readouterr().out.split() == [str(tmp_path / name)]
    assert_png(paths[0], figsize)


def test_main_all_runs_every_kind_but_forecast(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(plots, "_run", lambda kind, args: ran.append(kind) or tmp_path / kind)
    plots.main(["all", "--out", str(tmp_path)])
    assert ran == list(plots.KINDS) and "forecast" not in ran
    assert {"xpos", "bias-compare", "video", "holidays", "liere", "rope-dinov3"} <= set(ran)


def test_main_rejects_unknown_kinds(capsys):
    with pytest.raises(SystemExit):
        plots.main(["nope", "--out", "x"])
    assert "invalid choice" in capsys.readouterr().err


# -- trained encodings from checkpoints --------------------------------------------------------
def _checkpoint(path: Path, encoding: str, *, cli: bool) -> torch.nn.Module:
    """A checkpoint as Lightning writes it (``cli``: with the LightningCLI class-path keys)."""
    from posenc.tasks.vision import ImageClassifier

    model = ImageClassifier(encoding=encoding, img_size=8, patch_size=2, embed_dim=16, depth=1,
                            num_heads=2)
    hparams = dict(model.hparams)
    if cli:
        hparams.update(_class_path="posenc.tasks.vision.ImageClassifier",
                       _instantiator="lightning.pytorch.cli.instantiate_module")
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": hparams,
                "pytorch-lightning_version": lightning.__version__}, path)
    return model


@pytest.mark.parametrize("cli", [True, False], ids=["cli", "plain"])
def test_checkpoint_loads_the_trained_encoding(tmp_path, cli):
    model = _checkpoint(tmp_path / "learned.ckpt", "learned", cli=cli)
    loaded = plots.load_checkpoint_module(tmp_path / "learned.ckpt")
    saved = next(m for m in model.modules() if isinstance(m, spatial.Learned2D))
    found = next(m for m in loaded.modules() if isinstance(m, spatial.Learned2D))
    torch.testing.assert_close(found.weight, saved.weight, rtol=0, atol=0)


def test_grid_similarity_of_a_trained_learned_grid(tmp_path):
    _checkpoint(tmp_path / "learned.ckpt", "learned", cli=True)
    (path,) = plots.main(["grid-similarity", "--checkpoint", str(tmp_path / "learned.ckpt"),
                          "--out", str(tmp_path), "--dpi", str(DPI)])
    assert path.name == "grid-similarity-learned.png"
    assert_png(path, (8, 7.6))  # the checkpoint's 4x4 training grid


def test_rope_mixed_frequencies_from_a_checkpoint(tmp_path):
    _checkpoint(tmp_path / "mixed.ckpt", "rope_mixed", cli=True)
    (path,) = plots.main(["rope-mixed", "--checkpoint", str(tmp_path / "mixed.ckpt"),
                          "--out", str(tmp_path), "--dpi", str(DPI)])
    assert_png(path, (7, 3.8))
    with pytest.raises(ValueError, match="encoding='rope_mixed'"):
        plots.main(["grid-similarity", "--checkpoint", str(tmp_path / "mixed.ckpt"),
                    "--out", str(tmp_path)])
