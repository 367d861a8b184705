"""posenc.temporal: timestamps -> coordinates, calendar and seasonal features.

Timestamps (numpy, pandas-compatible, DST-correct) become elapsed time
([`to_seconds`][posenc.temporal.to_seconds], [`time_positions`][posenc.temporal.time_positions]),
local times ([`localize`][posenc.temporal.localize]) and calendar fields
([`calendar_fields`][posenc.temporal.calendar_fields]); torch modules encode calendar fields,
absolute time, elapsed time, series age and holidays. Relative time in attention is core's
``RotaryEncoding`` / ``ALiBi`` with ``time_positions(...)`` as positions. Helpers stay importable
from their modules only.
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
