"""Every encoding name on a timm ViT exports to ONNX (``torch.onnx.export(..., dynamo=True)``)
with dynamic batch, height and width, and onnxruntime's outputs equal eager PyTorch at three
image sizes and batch sizes; the README and docs/guide.md say so (checked here)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import onnxruntime
import pytest
import torch
from posenc.spatial import ENCODINGS, attach
from spatial_models import PATCH, TRAIN_SIZE, make_vit
from torch.export import Dim

REPO = Path(__file__).resolve().parents[2]
# (batch, height, width): smaller and larger than the traced 2 x 32 x 32, non-square both ways.
CASES = ((1, 16, 16), (3, 32, 48), (2, 48, 24))
TOL = 1e-4  # float32, absolute and relative; measured: below 2e-7


def export_vit(model: torch.nn.Module, path: Path) -> onnxruntime.InferenceSession:
    """``model`` (eval) as an ONNX file at ``path`` with dynamic batch, height and width."""
    rows, cols = Dim("rows", min=2, max=64), Dim("cols", min=2, max=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on its own internals
        program = torch.onnx.export(
            model, (torch.randn(2, 3, *TRAIN_SIZE),), dynamo=True, input_names=["images"],
            dynamic_shapes={"x": {0: Dim("batch", min=1, max=64), 2: PATCH * rows,
                                  3: PATCH * cols}}, verbose=False)
    program.save(path)
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])


@pytest.mark.slow  # 2-7 s each (tracing and ONNX translation), about 45 s for all
@pytest.mark.parametrize("name", list(ENCODINGS))
def test_every_encoding_exports_to_onnx_and_matches_eager(name, tmp_path):
    model = attach(make_vit("vit_reg4", embed_dim=32, num_heads=2, depth=1,
                            dynamic_img_size=True), name).eval()
    session = export_vit(model, tmp_path / f"{name}.onnx")
    for batch, height, width in CASES:
        x = torch.randn(batch, 3, height, width)
        [got] = session.run(None, {"images": x.numpy()})
        with torch.no_grad():
            want = model(x)
        torch.testing.assert_close(torch.from_numpy(got), want, rtol=TOL, atol=TOL)


@pytest.mark.slow  # one export, about 3 s
def test_rope_pixel_onnx_matches_eager_on_a_grid_one_patch_high_or_wide(tmp_path):
    """A grid one patch high or wide puts its single row or column at -1 (``linspace(-1, 1,
    1)``); the traced graph must not divide by ``rows - 1 = 0`` there (NaN logits before)."""
    model = attach(make_vit("vit_reg4", embed_dim=32, num_heads=2, depth=1,
                            dynamic_img_size=True), "rope_pixel").eval()
    session = export_vit(model, tmp_path / "rope_pixel.onnx")
    for size in ((PATCH, 4 * PATCH), (5 * PATCH, PATCH), (PATCH, PATCH)):
        x = torch.randn(2, 3, *size)
        [got] = session.run(None, {"images": x.numpy()})
        with torch.no_grad():
            want = model(x)
        assert want.isfinite().all()
        torch.testing.assert_close(torch.from_numpy(got), want, rtol=TOL, atol=TOL)


def _listed(text: str, label: str) -> list[str]:
    [line] = re.findall(rf"{label}: (.*?)(?:\.|;|$)", text, re.M)
    return [] if line.strip() == "none" else re.findall(r"`([a-z0-9_]+)`", line)


@pytest.mark.parametrize("doc", ["README.md", "docs/guide.md"])
def test_the_docs_list_what_the_export_test_checks(doc):
    """The names the docs say export are those the test above exports (every name), and
    none is said to be refused (an encoding ONNX lacks an operator for would be listed
    there, with its refusal tested)."""
    text = " ".join((REPO / doc).read_text().split())
    assert _listed(text, "ONNX exports") == list(ENCODINGS)
    assert _listed(text, "refused") == []
    assert f"within {TOL:.0e}".replace("e-0", "e-") in text  # "within 1e-4"
