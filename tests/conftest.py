"""Puts this folder on ``sys.path``, so the tests at this level can import their helper
``benchmark_scripts.py`` under ``--import-mode=importlib`` (which does not)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
