"""posenc.temporal: timestamps -> coordinates, calendar and seasonal features.

Timestamps (numpy, pandas-compatible, DST-correct) become elapsed time (:func:`to_seconds`,
:func:`to_nanoseconds`, :func:`time_positions`), local times (:func:`localize`) and calendar
fields (:func:`calendar_fields`); a table's column is read by :func:`parse_timestamps`.
The encodings are torch modules over those coordinates: calendar fields
(:class:`CalendarFeatures`, :class:`CalendarEmbedding`), absolute time
(:class:`FourierSeasonality`), elapsed time (:class:`ContinuousSinusoidal`,
:class:`Time2Vec`, :class:`TimeDelta`), time since a series' start (:class:`AgeFeature`),
holidays (:class:`HolidayFeatures`, the ``holidays`` extra) and the equally-spaced baseline
(:class:`IndexSinusoidal`). Relative time in attention is core's ``RotaryEncoding`` /
``ALiBi`` / ``MultiheadAttention`` with ``time_positions(...)`` as positions.

The functions behind the classes, frequency strings (:mod:`posenc.temporal.frequencies`),
the field and unit tables and the argument checks stay importable from their modules only.
"""

from .age import AgeFeature
from .calendar import CalendarEmbedding, CalendarFeatures, calendar_fields
from .continuous import ContinuousSinusoidal, IndexSinusoidal, Time2Vec, TimeDelta
from .fourier import FourierSeasonality
from .holidays import HolidayFeatures
from .timestamps import localize, parse_timestamps, time_positions, to_nanoseconds, to_seconds

__all__ = ["AgeFeature", "CalendarEmbedding", "CalendarFeatures", "ContinuousSinusoidal",
           "FourierSeasonality", "HolidayFeatures", "IndexSinusoidal", "Time2Vec", "TimeDelta",
           "calendar_fields", "localize", "parse_timestamps", "time_positions", "to_nanoseconds",
           "to_seconds"]
