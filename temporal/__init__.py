"""posenc.temporal: timestamps -> coordinates, calendar and seasonal features.

Conversion (numpy, pandas-compatible, DST-correct):
:func:`to_seconds`, :func:`to_nanoseconds`, :func:`time_positions`, :func:`localize`,
:func:`calendar_fields`; table columns: :func:`parse_timestamps`.

Encodings (torch modules over those coordinates):

- calendar fields: :class:`CalendarFeatures` (sin/cos on true periods, or GluonTS ramps),
  :class:`CalendarEmbedding` (Informer-style learned/fixed tables);
- absolute time: :class:`FourierSeasonality` (Prophet-style, exact integer phases);
- elapsed time: :class:`ContinuousSinusoidal`, :class:`Time2Vec`, :class:`TimeDelta`;
  time since a start: :class:`AgeFeature`; holidays (the ``holidays`` extra):
  :class:`HolidayFeatures` (distance to the nearest holiday, GluonTS kernels);
  token index (the equally-spaced baseline): :class:`IndexSinusoidal`;
- relative time in attention: core's ``RotaryEncoding`` / ``ALiBi`` /
  ``MultiheadAttention`` with ``time_positions(...)`` as positions.

``__all__`` is the public API. The functions behind the classes (``fourier_features``,
``holiday_distance``, ``time_delta_features``, ...), frequency strings
(:mod:`posenc.temporal.frequencies`), the field and unit tables and the argument checks stay
importable from their modules only.
"""

from .age import AgeFeature
from .calendar import CalendarEmbedding, CalendarFeatures, calendar_fields
from .continuous import ContinuousSinusoidal, IndexSinusoidal, Time2Vec, TimeDelta
from .fourier import FourierSeasonality
from .holidays import HolidayFeatures
from .timestamps import localize, parse_timestamps, time_positions, to_nanoseconds, to_seconds

__all__ = [
    "AgeFeature",
    "CalendarEmbedding",
    "CalendarFeatures",
    "ContinuousSinusoidal",
    "FourierSeasonality",
    "HolidayFeatures",
    "IndexSinusoidal",
    "Time2Vec",
    "TimeDelta",
    "calendar_fields",
    "localize",
    "parse_timestamps",
    "time_positions",
    "to_nanoseconds",
    "to_seconds",
]
