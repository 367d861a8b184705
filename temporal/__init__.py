"""posenc.temporal: timestamps -> coordinates, calendar and seasonal features.

Conversion (numpy, pandas-compatible, DST-correct):
:func:`to_seconds`, :func:`to_nanoseconds`, :func:`time_positions`, :func:`localize`,
:func:`calendar_fields`; table columns: :func:`parse_timestamps`, :func:`utc_and_local`.

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
"""

from .age import TRANSFORMS as AGE_TRANSFORMS
from .age import AgeFeature, age_feature, series_age
from .calendar import FIELDS, calendar_fields, check_field_range, field_column
from .calendar_embedding import CalendarEmbedding
from .calendar_features import CalendarFeatures
from .columns import parse_timestamps, utc_and_local
from .continuous import ContinuousSinusoidal, geometric_periods
from .cyclic import (
    CYCLE_PERIODS,
    calendar_features,
    check_calendar_fields,
    frequency_fields,
)
from .fourier import (
    DEFAULT_PERIODS,
    PROPHET_HARMONICS,
    PROPHET_PERIODS,
    FourierSeasonality,
    fourier_features,
)
from .frequencies import Frequency, frequency_nanoseconds, parse_duration, parse_frequency
from .holidays import KERNELS as HOLIDAY_KERNELS
from .holidays import HolidayFeatures, holiday_dates, holiday_distance, holiday_kernel
from .index_sinusoidal import IndexSinusoidal
from .time2vec import Time2Vec
from .time_delta import TimeDelta, time_delta_features
from .timestamps import (
    UNITS,
    Timestamps,
    datetime_index,
    local_wall_time,
    time_positions,
    to_nanoseconds,
    to_seconds,
)
from .zones import localize

__all__ = [
    "AGE_TRANSFORMS",
    "AgeFeature",
    "CYCLE_PERIODS",
    "CalendarEmbedding",
    "CalendarFeatures",
    "ContinuousSinusoidal",
    "DEFAULT_PERIODS",
    "FIELDS",
    "FourierSeasonality",
    "Frequency",
    "HOLIDAY_KERNELS",
    "HolidayFeatures",
    "IndexSinusoidal",
    "PROPHET_HARMONICS",
    "PROPHET_PERIODS",
    "Time2Vec",
    "TimeDelta",
    "Timestamps",
    "UNITS",
    "age_feature",
    "calendar_features",
    "calendar_fields",
    "check_calendar_fields",
    "check_field_range",
    "datetime_index",
    "field_column",
    "fourier_features",
    "frequency_fields",
    "frequency_nanoseconds",
    "geometric_periods",
    "holiday_dates",
    "holiday_distance",
    "holiday_kernel",
    "local_wall_time",
    "localize",
    "parse_duration",
    "parse_frequency",
    "parse_timestamps",
    "series_age",
    "time_delta_features",
    "time_positions",
    "to_nanoseconds",
    "to_seconds",
    "utc_and_local",
]
