"""Fixtures for tests/temporal; references and strategies live in ``temporal_refs.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def seattle() -> pd.DataFrame:
    """Hourly Seattle temperatures of 2010: naive local time (America/Los_Angeles), with a
    reading at the nonexistent 02:00 of 2010-03-14 and one reading for the repeated 01:00
    of 2010-11-07. Ships inside vega_datasets (no download)."""
    from vega_datasets import data

    return data.seattle_temps()
