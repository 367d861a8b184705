"""Frequency strings (``"15min"``, ``"h"``, ``"W-SUN"``, ``"ME"``) and what they imply.

Parsed here, without pandas' offset machinery (its aliases changed in pandas 3), so a
frequency means the same thing whatever pandas is installed.
"""

from __future__ import annotations

import re

__all__ = ["frequency_fields"]

# GluonTS's ``time_features_from_frequency_str``: offset family -> features, in its order.
_DAY = ("day_of_week", "day_of_month", "day_of_year")
_GLUONTS_FIELDS: dict[str, tuple[str, ...]] = {
    "year": (),
    "quarter": ("month",),
    "month": ("month",),
    "week": ("day_of_month", "week_of_year"),
    "day": _DAY,
    "business_day": _DAY,
    "hour": ("hour", *_DAY),
    "minute": ("minute", "hour", *_DAY),
    "second": ("second", "minute", "hour", *_DAY),
}
# pandas 3 aliases and the ones pandas < 2.2 used (case matters: "MS" month start, "ms"
# milliseconds, old "S" seconds). Business year/quarter/month ends and sub-second
# frequencies have no GluonTS feature set, as in GluonTS.
_ALIASES: dict[str, str] = {
    **dict.fromkeys(("YE", "YS", "Y", "A", "AS"), "year"),
    **dict.fromkeys(("QE", "QS", "Q"), "quarter"),
    **dict.fromkeys(("ME", "MS", "M"), "month"),
    "W": "week",
    "D": "day",
    "d": "day",
    "B": "business_day",
    "C": "business_day",
    **dict.fromkeys(("h", "H"), "hour"),
    **dict.fromkeys(("min", "T"), "minute"),
    **dict.fromkeys(("s", "S"), "second"),
}
_FREQUENCY = re.compile(r"^\s*(\d*)\s*([A-Za-z]+)(-[A-Za-z]+)?\s*$")


def frequency_fields(freq: str) -> tuple[str, ...]:
    """Fields GluonTS's ``time_features_from_frequency_str(freq)`` uses, in its order.

    Parsed without pandas' offset machinery, so old (``"H"``, ``"T"``, ``"M"``, ``"A"``) and
    new (``"h"``, ``"min"``, ``"ME"``, ``"YE"``) aliases both work, with multiples
    (``"15min"``) and anchors (``"W-SUN"``, ``"QE-NOV"``).
    """
    if not isinstance(freq, str):
        raise TypeError(f"freq must be a pandas frequency string (e.g. '15min', 'W-SUN'), got "
                        f"{type(freq).__name__} ({freq!r})")
    match = _FREQUENCY.match(freq)
    if match is None or match.group(2) not in _ALIASES:
        raise ValueError(f"freq must be a pandas frequency string with a GluonTS feature set "
                         f"(multiple + one of {sorted(_ALIASES)}, e.g. '15min', 'W-SUN'), "
                         f"got {freq!r}")
    return _GLUONTS_FIELDS[_ALIASES[match.group(2)]]
