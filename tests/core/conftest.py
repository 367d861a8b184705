"""Shared fixtures for tests/core.

Independent references and hypothesis strategies live in ``core_refs.py`` next to this file;
this conftest puts that folder on ``sys.path`` so test modules can ``from core_refs import ...``
(pytest runs with ``--import-mode=importlib``, which does not).
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
