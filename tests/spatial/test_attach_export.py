"""Every encoding name exports once with dynamic height and width (README: torch.export) and
the exported program then runs at larger and non-square sizes, equal to eager."""

from __future__ import annotations

import pytest
import torch
from posenc.spatial import ENCODINGS, attach
from spatial_models import PATCH, TRAIN_SIZE, make_vit
from torch.export import Dim, export

# Larger than the training grid (4 x 4) on both axes, non-square, and smaller on one axis.
SIZES = ((48, 48), (32, 72), (80, 16))


@pytest.mark.slow  # about 2.5 s of CPU each (tracing)
@pytest.mark.parametrize("name", list(ENCODINGS))
def test_exported_with_dynamic_height_and_width_matches_eager(name):
    model = attach(make_vit("vit_reg4", embed_dim=32, num_heads=2, depth=1), name).eval()
    rows, cols = Dim("rows", min=2, max=16), Dim("cols", min=2, max=16)
    program = export(model, (torch.randn(2, 3, *TRAIN_SIZE),),
                     dynamic_shapes={"x": {2: PATCH * rows, 3: PATCH * cols}}).module()
    for size in SIZES:
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            torch.testing.assert_close(program(x), model(x), rtol=1e-5, atol=1e-5)
