"""Shared fixtures and the hypothesis profile for tests/core.

Independent references and hypothesis strategies live in ``core_refs.py`` next to this file;
this conftest puts that folder on ``sys.path`` so test modules can ``from core_refs import ...``
(pytest runs with ``--import-mode=importlib``, which does not).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

# Modest example counts keep tests/core well under a minute and a half on two cores.
settings.register_profile(
    "posenc-core", max_examples=50, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture])
settings.load_profile("posenc-core")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
