"""Where a supported dependency version changes what posenc does (docs/versions.md lists the
floors). Only pandas does: 2.2 and 3.x are both supported, and posenc reads time the same on
both except for the first two points below.

- Text and Python ``datetime`` values parse to nanoseconds in pandas 2 and to the resolution
  they need in pandas 3 (microseconds unless finer): `TEXT_UNIT`. Under pandas 2 they
  must therefore lie in 1677-09-21..2262-04-11 (posenc's error names that range); ``datetime64``
  arrays and ``DatetimeIndex`` keep their own resolution on both.
- pandas 2 reads a whole frequency multiple through a float, so beyond 2**53 it is rounded
  (``"9007199254740993ns"`` is ...992 ns): `EXACT_MULTIPLES`. pandas 3 dropped the
  spellings ``H, T, S, L, U, N, A, Y, Q`` that pandas 2.2 still reads; posenc maps them itself
  (``timestamps._SPELLINGS``), so both read every frequency string alike.
- A nonexistent or repeated local time raises ``ValueError`` in pandas 3 and pytz's
  ``InvalidTimeError`` (not a ``ValueError``) in pandas 2: `LOCAL_TIME_ERRORS`.
- Several UTC offsets in one column without ``utc=True`` raise in pandas 3; pandas 2 returns
  object values with a ``FutureWarning``: `to_datetime` raises on both.
- A zone given by name is pytz's in pandas 2, whose rules stop in 2037 (no DST after it); pass
  a ``zoneinfo.ZoneInfo`` to get the same local times as pandas 3 after 2037.
- pandas 2 also drops a ``" GMT"`` suffix in ``to_datetime`` and wraps an overflowing
  ``tz_localize(None)`` around silently; posenc's readers avoid both without a version check
  (``timestamps._timestamp``, ``timestamps.local_wall_time``).
"""

from __future__ import annotations

import warnings
from typing import Any

import pandas as pd

__all__ = ["EXACT_MULTIPLES", "LOCAL_TIME_ERRORS", "PANDAS_3", "TEXT_UNIT", "to_datetime"]

PANDAS_3: bool = int(pd.__version__.split(".")[0]) >= 3
"""Whether the installed pandas is 3.x (else 2.2.x, the floor)."""

TEXT_UNIT: str = "us" if PANDAS_3 else "ns"
"""The resolution pandas parses text and ``datetime`` objects to (finer input stays finer)."""

EXACT_MULTIPLES: bool = PANDAS_3
"""Whether ``to_offset`` reads a whole multiple exactly (pandas 2: through a float)."""

if PANDAS_3:
    LOCAL_TIME_ERRORS: tuple[type[Exception], ...] = (ValueError,)
else:
    from pytz import InvalidTimeError  # a dependency of pandas 2

    LOCAL_TIME_ERRORS = (ValueError, InvalidTimeError)
"""What ``tz_localize`` raises for a nonexistent or ambiguous local time."""


def to_datetime(values: Any, **kwargs: Any) -> Any:
    """``pd.to_datetime(values, **kwargs)``, raising ``ValueError`` for several UTC offsets
    without ``utc=True`` as pandas 3 does (pandas 2 returns them as objects)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "In a future version of pandas, parsing datetimes "
                                "with mixed time zones", FutureWarning)
        parsed = pd.to_datetime(values, **kwargs)
    if parsed.dtype == object:
        raise ValueError("several UTC offsets in one column: pass utc=True to read them as UTC")
    return parsed
