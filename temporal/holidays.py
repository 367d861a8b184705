"""Holiday features: is the local date a holiday, and how many days from the nearest one, for
any country (and subdivision) of the ``holidays`` package or dates of your own.

The kernels are GluonTS's ``SpecialDateFeatureSet``'s; the holidays are int64 day numbers found
around each local date by ``torch.searchsorted`` (10M timestamps: about a second). Distances are
GluonTS's ``(date - holiday).days`` in local calendar days, to the nearest holiday (ties: the
earlier); GluonTS takes the earliest within 200 days instead, for a yearly holiday the previous
one also where the next is nearer.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from posenc.core import PositionEncoding
from posenc.core._checks import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_output_dtype,
    check_positive_float,
)
from posenc.core.encoding import wide_dtype
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
"""The kernels of [`holiday_kernel`][posenc.temporal.holidays.holiday_kernel]."""
_NS_PER_DAY = UNITS["D"]
_FAR = 2**62  # frames every table: never the nearest date, and differences fit int64


def _holidays_package() -> Any:
    try:
        import holidays
    except ImportError as err:
        raise ImportError("holiday features need the holidays package: pip install "
                          "'posenc[holidays]' (or pip install holidays), or pass dates= "
                          "yourself") from err
    return holidays


class _Calendar(NamedTuple):
    """``holidays.country_holidays``'s arguments, built for the years asked."""

    country: str
    subdiv: str | None
    observed: bool
    categories: Any
    language: str | None

    def build(self, years: Iterable[int]) -> tuple[Any, list[str]]:
        """The calendar for ``years`` and the package's warnings (an incomplete calendar)."""
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
        """The years the package has this calendar for, after checking the arguments."""
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
        """The calendar for ``years``; years not (fully) covered raise: they miss holidays."""
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


def _name_groups(calendar: Any, names: Sequence[str] | None, check: bool) -> dict[str, np.ndarray]:
    """``{group: sorted unique datetime64[D]}``: one group of every holiday, or one per name."""
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
    """``(H,)`` sorted unique ``datetime64[D]`` holidays of ``country`` (ISO 3166 code, e.g.
    ``"US"``) and ``subdiv`` (``"CA"``) in ``years``.

    ``names`` keeps only the holidays of these names (the calendar's language, e.g.
    ``["Christmas Day"]``; observed days are named "... (observed)"); ``observed``,
    ``categories`` and ``language`` are passed to ``holidays.country_holidays``.
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
    """The groups holding the nearest holiday of every day of ``years``: the calendar widened
    (doubling, within the years fully covered) until each group has a date on or before their
    first day and one on or after their last (Inauguration Day needs up to four years)."""
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


def _day_numbers(timestamps: Timestamps, tz: Any, name: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """Flat int64 days since 1970-01-01 of each timestamp's local date, and the shape."""
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


def _given_dates(country: Any, dates: Any, names: Any, subdiv: Any) -> dict[str, np.ndarray] | None:
    """The groups of your own ``dates``, or None when ``country`` names a calendar."""
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
    """``features(days)``, computed once per day of the span where that is cheaper (CPU)."""
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
    """``(*timestamps.shape, G)`` int64 signed days ``date - nearest holiday`` of each
    timestamp's local date (in its zone, or ``tz``): > 0 after it, 0 on it.

    Args:
        country: the calendar, with ``subdiv``, ``observed``, ``categories`` and ``language``
            as in [`holiday_dates`][posenc.temporal.holidays.holiday_dates]; years the holidays
            package does not cover raise.
        names: one column per holiday name; None: one column for every holiday together.
        dates: instead of a country: dates at midnight, or ``{name: dates}`` for one column
            each.
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
    """GluonTS's holiday kernels of ``(...)`` days: ``"indicator"`` ``distance == 0``,
    ``"exponential"`` ``exp(-alpha * |distance|)``, ``"squared_exponential"``
    ``exp(-alpha * distance**2)`` (0 where not above ``tol``). float64 (float32 on devices
    without it), numpy or torch as given.
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

    Per group (every holiday, or one per name of ``names`` / key of ``dates``): the kernel of
    the signed distance to the nearest holiday, and with ``distance_scale`` that distance over
    it. The calendar (arguments as in
    [`holiday_distance`][posenc.temporal.holidays.holiday_distance] and
    [`holiday_kernel`][posenc.temporal.holidays.holiday_kernel]) is built once for ``years``,
    ``(first, last)`` (None: the package's years within 1900-2100); CPU timestamps outside them
    raise.

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

    def forward(self, timestamps: Timestamps, *, dtype: torch.dtype = torch.float32) -> Tensor:
        """``(...)`` timestamps -> ``(..., dim)``; an int64 tensor is wall-clock nanoseconds and
        stays on its device."""
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
