"""Fixtures for tests/spatial.

Helpers live in uniquely named modules next to this file (``spatial_models.py``: tiny timm
ViTs; ``spatial_refs.py``: independent references re-derived from the papers' formulas); this
conftest puts the folder on ``sys.path`` so tests can import them under
``--import-mode=importlib``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
