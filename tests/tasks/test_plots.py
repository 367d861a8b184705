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
from posenc import core, spatial
from posenc.tasks import plots

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
    (["grid-similarity", "--encoding", "sincos2d", "--grid", "3", "3", "--dim", "8"],
     "grid-similarity-sincos2d.png", (8, 7.6)),
    (["calendar", "--tz", "America/New_York", "--start", "2024-03-07", "--days", "4"],
     "calendar.png", (15, 9)),
], ids=["sinusoidal", "rope", "alibi", "t5", "grid-similarity", "calendar"])
def test_main_writes_the_named_png(tmp_path, capsys, argv, name, figsize):
    paths = plots.main([*argv, "--out", str(tmp_path), "--dpi", str(DPI)])
    assert paths == [tmp_path / name]
    assert capsys.readouterr().out.split() == [str(tmp_path / name)]
    assert_png(paths[0], figsize)


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
