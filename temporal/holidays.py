"""Holiday features: is the local date a holiday, and how many days from the nearest one, for
any country (and subdivision) of the ``holidays`` package or a list of dates of your own.

GluonTS's ``SpecialDateFeatureSet`` loops over every timestamp and holiday in Python; here
the holiday dates are built once for the years spanned as int64 day numbers, each local date
becomes a day number by one floor division, and ``torch.searchsorted`` finds the holidays
around it (10M timestamps: about a second). The kernels are GluonTS's formulas.

Distances are signed like GluonTS's ``(date - holiday).days`` (positive after the holiday),
counted on local calendar days (23:00 the day before Christmas is -1), to the nearest holiday,
ties to the earlier one; GluonTS takes the earliest occurrence within 200 days instead, which
for a yearly holiday is the previous one also where the next is nearer (165-200 days after).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from posenc.core import PositionEncoding
from posenc.core.encoding import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_output_dtype,
    check_positive_float,
    wide_dtype,
)
from torch import Tensor

from .timestamps import (
    UNITS,
    Timestamps,
    check_no_nat,
    datetime_index,
    local_wall_time,
    real_tensor,
)

__all__ = ["KERNELS", "HolidayFeatures", "holiday_dates", "holiday_distance", "holiday_kernel"]

KERNELS = ("indicator", "exponential", "squared_exponential")
"""The kernels of :func:`holiday_kernel`."""
_NS_PER_DAY = UNITS["D"]
# Day numbers around every table: never the nearest while a table holds a real date, and far
# enough that no datetime64 day (even in seconds) reaches them; differences fit int64.
_FAR = 2**62


def _holidays_package() -> Any:
    try:
        import holidays
    except ImportError as err:
        raise ImportError("holiday features need the holidays package: pip install "
                          "'posenc[holidays]' (or pip install holidays), or pass dates= "
                          "yourself") from err
    return holidays


class _Calendar(NamedTuple):
    """A country's calendar in the ``holidays`` package (``holidays.country_holidays``'s
    arguments), built for the years asked."""

    country: str
    subdiv: str | None
    observed: bool
    categories: Any
    language: str | None

    def build(self, years: Iterable[int]) -> tuple[Any, list[str]]:
        """The calendar for ``years`` and the warnings the package gave (e.g. that some
        holidays exist only in some years: a calendar that is incomplete there)."""
        holidays = _holidays_package()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                calendar = holidays.country_holidays(
                    self.country, subdiv=self.subdiv, years=list(years), observed=self.observed,
                    categories=self.categories, language=self.language)
            except (NotImplementedError, ValueError, KeyError, TypeError) as err:
                raise ValueError(f"holidays.country_holidays({self.country!r}, subdiv="
                                 f"{self.subdiv!r}, categories={self.categories!r}, language="
                                 f"{self.language!r}) refused: {err}") from err
        return calendar, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]

    def span(self) -> tuple[int, int]:
        """The years the package has this calendar for (its start/end_year), after checking
        the arguments."""
        holidays, country, subdiv = _holidays_package(), self.country, self.subdiv
        if not isinstance(country, str):
            raise TypeError(f"country must be an ISO 3166 code string (e.g. 'US', 'DE'), got "
                            f"{type(country).__name__} ({country!r})")
        if subdiv is not None and not isinstance(subdiv, str):
            raise TypeError(f"subdiv must be a subdivision code string or None, got "
                            f"{type(subdiv).__name__} ({subdiv!r})")
        check_bool(self.observed, "observed")
        supported = holidays.list_supported_countries()
        if country not in supported:
            raise ValueError(f"country must be a code of holidays.list_supported_countries() "
                             f"(e.g. 'US', 'GB', 'DE'), got {country!r}")
        if subdiv is not None and subdiv not in supported[country]:
            raise ValueError(f"subdiv must be one of {country}'s subdivisions "
                             f"{supported[country]}, got {subdiv!r}")
        calendar, _ = self.build(())
        return int(calendar.start_year), int(calendar.end_year)

    def covering(self, years: range) -> Any:
        """The calendar for ``years``. Years the package does not cover, or covers only in
        part (it warns), raise: their features would miss holidays."""
        low, high = self.span()
        if years and (years[0] < low or years[-1] > high):
            raise ValueError(f"years {years[0]}-{years[-1]} are outside {self.country}"
                             f"{'-' + self.subdiv if self.subdiv else ''}'s holiday calendar in "
                             f"the holidays package ({low}-{high}); restrict the timestamps (or "
                             f"years) to it")
        calendar, messages = self.build(years)
        if messages:
            raise ValueError(f"the holidays package's {self.country} calendar is incomplete in "
                             f"{years[0]}-{years[-1]} ({'; '.join(sorted(set(messages)))}); "
                             f"restrict the timestamps (or years) to the years it covers")
        return calendar


def _name_groups(calendar: Any, names: Sequence[str] | None, check: bool
                 ) -> dict[str, np.ndarray]:
    """``{group: sorted unique datetime64[D]}``: one group of every holiday, or one per name
    (holidays joins the names of one day with "; ")."""
    by_name: dict[str, list] = {}
    for day in calendar:
        for holiday in calendar.get_list(day):
            by_name.setdefault(holiday, []).append(day)
    if names is None:
        return {"holiday": np.unique(np.array(list(calendar), dtype="M8[D]"))}
    if isinstance(names, str) or not all(isinstance(n, str) for n in names) or not names:
        raise TypeError(f"names must be a non-empty list of holiday names (strings), got "
                        f"{names!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"names must not repeat a name, got {list(names)}")
    missing = [n for n in names if n not in by_name]
    if check and missing:
        raise ValueError(f"names {missing} are not holidays of this calendar in the years "
                         f"spanned; its holidays there are {sorted(by_name)}")
    return {n: np.unique(np.array(by_name.get(n, []), dtype="M8[D]")) for n in names}


def holiday_dates(country: str, years: Iterable[int], *, subdiv: str | None = None,
                  names: Sequence[str] | None = None, observed: bool = True,
                  categories: Any = None, language: str | None = None) -> np.ndarray:
    """``(H,)`` ``datetime64[D]``: the holiday dates of ``country`` (and ``subdiv``) in
    ``years`` (e.g. ``range(2010, 2021)``), sorted, unique.

    Args:
        country: ISO 3166 code of ``holidays.list_supported_countries()`` (``"US"``).
        subdiv: a subdivision of the country (``"CA"`` for California), or None.
        names: keep only the holidays of these names (in the calendar's language, e.g.
            ``["Christmas Day"]``; an observed day is its own name, "... (observed)").
        observed: like ``categories`` and ``language``, passed to
            ``holidays.country_holidays``.
    """
    chosen = sorted({check_int(y, "years") for y in years})
    if not chosen:
        raise ValueError("years must name at least one year, got none")
    source = _Calendar(country, subdiv, observed, categories, language)
    calendar = source.covering(range(chosen[0], chosen[-1] + 1))
    groups = _name_groups(calendar, names, check=True)
    return np.unique(np.concatenate(list(groups.values())))


def _holiday_groups(source: _Calendar, years: range, names: Sequence[str] | None, *,
                    check: bool) -> dict[str, np.ndarray]:
    """The groups (:func:`_name_groups`) holding the nearest holiday of every day of ``years``:
    the calendar widened (doubling, within the years the package covers fully) until each
    group has a date on or before their first day and one on or after their last (Inauguration
    Day, every four years, needs up to four)."""
    calendar = source.covering(years)
    if not years:
        return _name_groups(calendar, names, check=False)
    low, high = source.span()
    first = np.datetime64(f"{years[0]:04d}-01-01", "D")
    last = np.datetime64(f"{years[-1]:04d}-12-31", "D")
    # At least one year either side: an observed day may fall in the year before its holiday.
    before, after, early, late = 0, 0, True, True
    while early or late:
        before, after = (max(1, 2 * before) if early else before,
                         max(1, 2 * after) if late else after)
        span = range(max(low, years[0] - before), min(high, years[-1] + after) + 1)
        wider, messages = source.build(span)
        if messages:  # incomplete beyond: the nearest is taken among the complete years
            break
        calendar = wider
        groups = _name_groups(calendar, names, check=False)
        early = span[0] > low and any(not len(v) or v[0] > first for v in groups.values())
        late = span[-1] < high and any(not len(v) or v[-1] < last for v in groups.values())
    return _name_groups(calendar, names, check=check)


def _day_numbers(timestamps: Timestamps, tz: Any, name: str
                 ) -> tuple[np.ndarray, tuple[int, ...]]:
    """Days since 1970-01-01 of each timestamp's local date (flat int64) and the shape."""
    index, shape = datetime_index(timestamps, name)
    local = local_wall_time(index, tz, name)
    return np.floor_divide(local, _NS_PER_DAY // UNITS[index.unit]), shape


def _date_groups(dates: Any) -> dict[str, np.ndarray]:
    """``dates=``: dates, or ``{name: dates}``, as ``{group: sorted unique datetime64[D]}``."""
    groups = dict(dates) if isinstance(dates, Mapping) else {"holiday": dates}
    if not groups:
        raise ValueError("dates must hold at least one group of dates, got an empty mapping")
    out = {}
    for key, values in groups.items():
        label = "dates" if not isinstance(dates, Mapping) else f"dates[{key!r}]"
        if not isinstance(key, str):
            raise TypeError(f"dates keys must be names (strings), got {key!r}")
        if isinstance(values, str):
            values = [values]
        index, _ = datetime_index(values, label)
        if index.tz is not None:
            raise TypeError(f"{label} must be calendar dates (tz-naive); a holiday is a "
                            f"local date, got zone {index.tz}")
        if not len(index):
            raise ValueError(f"{label} must hold at least one date, got none")
        if not (index == index.normalize()).all():
            raise ValueError(f"{label} must be dates at midnight, got times of day (first "
                             f"{index[index != index.normalize()][0]})")
        ticks = _NS_PER_DAY // UNITS[index.unit]
        out[key] = np.unique(index.asi8 // ticks).astype("M8[D]")
    return out


def _given_dates(country: Any, dates: Any, names: Any, subdiv: Any
                 ) -> dict[str, np.ndarray] | None:
    """Exactly one holiday source: the groups of your own ``dates``, or None when
    ``country`` names a calendar (``names``/``subdiv`` select within a country only)."""
    if (country is None) == (dates is None):
        raise ValueError(f"give exactly one of country (a holidays calendar) and dates (your "
                         f"own), got country={country!r}, dates={dates!r}"[:300])
    if dates is None:
        return None
    if names is not None or subdiv is not None:
        raise ValueError("names and subdiv select a country's holidays; with dates= give "
                         "{name: dates} instead")
    return _date_groups(dates)


def _table(groups: Mapping[str, np.ndarray]) -> Tensor:
    """``(G, L)`` int64 day numbers, each row sorted and framed by -FAR ... +FAR."""
    width = max(len(v) for v in groups.values()) + 2
    table = np.full((len(groups), width), _FAR, dtype=np.int64)
    table[:, 0] = -_FAR
    for row, values in enumerate(groups.values()):
        table[row, 1:len(values) + 1] = values.astype(np.int64)
    return torch.from_numpy(table)


def _nearest(days: Tensor, table: Tensor) -> Tensor:
    """``(M,)`` int64 day numbers, ``(G, L)`` framed table -> ``(M, G)`` signed distance to
    the nearest date of each row (ties: the earlier date)."""
    query = days.unsqueeze(0).expand(table.shape[0], -1).contiguous()
    after = torch.searchsorted(table, query, right=True)  # first date later than the day
    since = query - table.gather(1, after - 1)  # >= 0: the latest date on or before
    until = table.gather(1, after) - query  # > 0
    return torch.where(since <= until, since, -until).T


def _per_day(features: Callable[[Tensor], Tensor], days: Tensor) -> Tensor:
    """``features(days)``, computed once per day of the span and gathered where that is
    cheaper (a CPU series covering few distinct days: 10M minutes span 7000 days)."""
    if days.device.type != "cpu" or not days.numel() or torch.compiler.is_compiling():
        return features(days)
    first, last = int(days.min()), int(days.max())
    if last - first >= days.numel():
        return features(days)
    return features(torch.arange(first, last + 1, dtype=torch.int64))[days - first]


def _years_of(first_day: int, last_day: int) -> range:
    """The years from the one of ``first_day`` to the one of ``last_day`` (day numbers)."""
    first, last = (int(np.datetime64(d, "D").astype("M8[Y]").astype(np.int64)) + 1970
                   for d in (first_day, last_day))
    return range(first, last + 1)


def holiday_distance(timestamps: Timestamps, country: str | None = None, *,
                     subdiv: str | None = None, names: Sequence[str] | None = None,
                     dates: Any = None, tz: Any = None, observed: bool = True,
                     categories: Any = None, language: str | None = None) -> np.ndarray:
    """``(*timestamps.shape, G)`` int64 signed days ``date - nearest holiday`` from each
    timestamp's local date (read in its zone, or ``tz``): > 0 after it, 0 on it (GluonTS's
    sign; the indicator is ``distance == 0``, kernels: :func:`holiday_kernel`).

    Args:
        country: the calendar, with ``subdiv``, ``observed``, ``categories`` and ``language``
            as in :func:`holiday_dates`, built for the years spanned (and one either side);
            years the holidays package does not (fully) cover raise.
        names: one column per holiday name (GluonTS's one feature per holiday); None: one
            column (``G = 1``) for every holiday together.
        dates: instead of a country: dates (strings, ``date``, datetime64 at midnight), or
            ``{name: dates}`` for one column each. Their nearest is taken among them only.
    """
    days, shape = _day_numbers(timestamps, tz, "timestamps")
    groups = _given_dates(country, dates, names, subdiv)
    if groups is None:
        span = _years_of(int(days.min()), int(days.max())) if days.size else range(0)
        source = _Calendar(country, subdiv, observed, categories, language)
        groups = _holiday_groups(source, span, names, check=bool(days.size))
        if not all(len(v) for v in groups.values()) and days.size:
            raise ValueError(f"country {country!r} (subdiv {subdiv!r}) has no holidays in "
                             f"{span.start}-{span.stop - 1}")
    if not days.size:
        return np.zeros((*shape, len(groups)), dtype=np.int64)
    table = _table(groups)
    out = _per_day(lambda d: _nearest(d, table), torch.from_numpy(days)).numpy()
    return out.reshape(*shape, len(groups))


def holiday_kernel(distance: np.ndarray | Tensor, kernel: str = "indicator", *,
                   alpha: float = 1.0, tol: float = 1e-9) -> np.ndarray | Tensor:
    """GluonTS's holiday kernels of ``(...)`` int or float days (:func:`holiday_distance`),
    elementwise: ``"indicator"`` ``1.0 if distance == 0 else 0.0``, ``"exponential"``
    ``exp(-alpha * |distance|)``, ``"squared_exponential"`` ``exp(-alpha * distance**2)``, the
    last two set to 0 where not above ``tol``. ``(...)`` float64 (float32 on devices without
    it), numpy or torch as given.
    """
    check_choice(kernel, "kernel", KERNELS)
    alpha = check_positive_float(alpha, "alpha")
    tol = check_float(tol, "tol", ge=0)
    values = real_tensor(distance, "distance", "days")
    wide = wide_dtype(values.device)
    if kernel == "indicator":
        out = (values == 0).to(wide)
    else:
        x = values.to(wide).abs()
        out = torch.exp(-alpha * (x * x if kernel == "squared_exponential" else x))
        out = torch.where(out > tol, out, torch.zeros((), dtype=wide, device=out.device))
    return out if isinstance(distance, Tensor) else out.numpy()


class HolidayFeatures(PositionEncoding):
    """Holiday features of each timestamp's local date (no parameters).

    Per group (every holiday together, or one per name in ``names`` / key of ``dates``): the
    kernel of the signed distance to the nearest holiday (GluonTS's ``SpecialDateFeatureSet``
    row; the indicator by default), and with ``distance_scale`` also that distance divided by
    it (a signed ramp, e.g. ``distance_scale=30`` makes a month 1.0).

    ``country``, ``subdiv``, ``names``, ``observed``, ``categories`` and ``language`` choose
    the calendar as in :func:`holiday_dates` (or ``dates`` as in :func:`holiday_distance`);
    ``kernel``, ``alpha`` and ``tol`` are :func:`holiday_kernel`'s. The calendar is built once
    for ``years``, ``(first, last)`` inclusive (None: the package's years for the country,
    within 1900-2100); CPU timestamps outside them raise (on an accelerator the check would
    wait for the device).

    Example::

        enc = HolidayFeatures("US", "CA", kernel="squared_exponential", alpha=0.5)
        x = enc(local_ns)   # (B, N) int64 wall-clock ns -> (B, N, 1) float32
    """

    kind = "additive"
    reads = "timestamps"

    def __init__(self, country: str | None = None, subdiv: str | None = None, *,
                 names: Sequence[str] | None = None, dates: Any = None,
                 kernel: str = "indicator", alpha: float = 1.0, tol: float = 1e-9,
                 distance_scale: float | None = None, years: Sequence[int] | None = None,
                 observed: bool = True, categories: Any = None,
                 language: str | None = None) -> None:
        super().__init__()
        self.kernel = check_choice(kernel, "kernel", KERNELS)
        self.alpha = check_positive_float(alpha, "alpha")
        self.tol = check_float(tol, "tol", ge=0)
        self.distance_scale = None if distance_scale is None else check_positive_float(
            distance_scale, "distance_scale")
        source = _Calendar(country, subdiv, observed, categories, language)
        if years is None and country is not None:
            span = source.span()
            years = (max(1900, span[0]), min(2100, span[1]))
        elif years is None:
            years = (1, 9998)
        if (not isinstance(years, Sequence) or isinstance(years, str) or len(years) != 2):
            raise TypeError(f"years must be (first, last) ints, got {years!r}")
        first, last = (check_int(y, f"years[{i}]") for i, y in enumerate(years))
        if not 1 <= first <= last <= 9998:
            raise ValueError(f"years must be (first, last) with 1 <= first <= last <= 9998, "
                             f"got {tuple(years)}")
        self.years = (first, last)
        groups = _given_dates(country, dates, names, subdiv)
        self._range = None
        if groups is None:
            groups = _holiday_groups(source, range(first, last + 1), names, check=True)
            self._range = (int(np.datetime64(f"{first:04d}-01-01", "D").astype(np.int64)),
                           int(np.datetime64(f"{last:04d}-12-31", "D").astype(np.int64)))
        self.country, self.subdiv = country, subdiv
        self.groups = list(groups)
        # Rebuilt from the arguments, so not in the state dict.
        self.register_buffer("table", _table(groups), persistent=False)

    @property
    def dim(self) -> int:
        """Output width: one or two columns per group."""
        return len(self.groups) * (1 if self.distance_scale is None else 2)

    @property
    def feature_names(self) -> list[str]:
        """e.g. ``["holiday"]``, or ``["Christmas Day", "Christmas Day_distance", ...]``."""
        suffixes = [""] if self.distance_scale is None else ["", "_distance"]
        return [f"{g}{s}" for g in self.groups for s in suffixes]

    def forward(self, timestamps: Timestamps, *, dtype: torch.dtype = torch.float32
                ) -> Tensor:
        """``(...)`` timestamps -> ``(..., dim)``. An int64 tensor is read as wall-clock
        nanoseconds since 1970 (the forecaster's local times) and stays on its device; other
        input goes through :func:`datetime_index` (tz-aware: local dates in their own zone).
        """
        check_output_dtype(dtype)
        raw = isinstance(timestamps, Tensor) and timestamps.dtype == torch.int64
        if raw:
            shape = timestamps.shape
            days = torch.div(timestamps.reshape(-1), _NS_PER_DAY, rounding_mode="floor")
        else:
            flat, shape = _day_numbers(timestamps, None, "timestamps")
            days = torch.from_numpy(flat)
        if not torch.compiler.is_compiling() and days.device.type == "cpu" and days.numel():
            if raw:
                check_no_nat(timestamps)
            low, high = int(days.min()), int(days.max())
            if self._range is not None and (low < self._range[0] or high > self._range[1]):
                span = np.array([low, high]).astype("M8[D]")
                raise ValueError(f"timestamps have local dates {span[0]}..{span[1]}, outside "
                                 f"years={self.years} this calendar was built for; widen years")
        features = _per_day(lambda d: self._features(d).to(dtype), days)
        return features.reshape(*shape, self.dim)

    def _features(self, days: Tensor) -> Tensor:
        """``(M,)`` day numbers -> ``(M, dim)`` in the device's wide dtype."""
        distance = _nearest(days, self.table.to(days.device))  # (M, G)
        columns = [holiday_kernel(distance, self.kernel, alpha=self.alpha, tol=self.tol)]
        if self.distance_scale is not None:
            columns.append(distance.to(columns[0].dtype) / self.distance_scale)
        return torch.stack(columns, dim=-1).flatten(-2)  # per group: kernel, distance

    def extra_repr(self) -> str:
        source = (f"country={self.country!r}, subdiv={self.subdiv!r}" if self.country
                  else f"dates={self.groups}")
        return (f"{source}, groups={len(self.groups)}, kernel={self.kernel!r}, "
                f"alpha={self.alpha}, years={self.years}")
