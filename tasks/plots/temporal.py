"""Plots of the time features of ``posenc.temporal``: calendar and Fourier features over a week
(hourly) and a year (every 24 h of elapsed time) in a time zone, DST changes marked and each
feature compared with a fixed clock; holiday features over a year of one country.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import torch
from posenc.core._checks import check_int, check_positive_int
from posenc.temporal._compat import LOCAL_TIME_ERRORS

from .core import new_figure, save_png

__all__ = ["dst_changes", "plot_calendar_features", "plot_fourier_features",
           "plot_holiday_features"]


def _utc_offset_hours(index: Any) -> np.ndarray:
    import pandas as pd

    delta = index.tz_localize(None) - index.tz_convert("UTC").tz_localize(None)
    return np.asarray(delta / pd.Timedelta(hours=1), dtype=np.float64)


def dst_changes(first: Any, last: Any) -> list[tuple[Any, float, float]]:
    """UTC-offset changes between two tz-aware timestamps, found on an hourly scan.

    Returns:
        ``[(first hourly sample after the change, offset before, offset after)]``, offsets
        in hours (e.g. New York 2024: ``(2024-03-10 03:00-04:00, -5.0, -4.0)`` and
        ``(2024-11-03 01:00-05:00, -4.0, -5.0)``).
    """
    import pandas as pd

    hourly = pd.date_range(first, last, freq="h")
    offsets = _utc_offset_hours(hourly)
    return [(hourly[i], float(offsets[i - 1]), float(offsets[i]))
            for i in np.flatnonzero(np.diff(offsets)) + 1]


def _windows(tz: str, start: Any, days: int) -> list[tuple[str, Any, str]]:
    """``(title, index, tick frequency)`` of the week (hourly) and year (every 24 h) windows."""
    import pandas as pd

    check_positive_int(days, "days")
    try:
        first = pd.Timestamp(start)
        first = first.tz_convert(tz) if first.tz is not None else first.tz_localize(tz)
    except (TypeError, KeyError, *LOCAL_TIME_ERRORS) as err:  # unknown zone, bad or no such time
        raise ValueError(f"start={start!r} in tz={tz!r} is not a valid local time (give a "
                         f"time zone name such as 'America/New_York' and an ISO date): {err}"
                         ) from err
    week = pd.date_range(first, periods=days * 24 + 1, freq="h")
    year = pd.date_range(first, periods=366, freq="24h")
    return [(f"{days} days, hourly", week, "D"), ("one year, every 24 h", year, "MS")]


def _time_figure(path: str | Path, panels: list[dict], tz: str, map_title: str, title: str,
                 figsize: tuple[float, float], dpi: int) -> Path:
    """A column per panel dict; rows: feature curves, the features' heatmap, the UTC offset."""
    import pandas as pd

    fig = new_figure(figsize, dpi)
    grid = fig.add_gridspec(3, len(panels), height_ratios=(3, 3, 1))
    day = pd.Timedelta(days=1)
    for col, panel in enumerate(panels):
        index = panel["index"]
        x = np.asarray((index - index[0]) / day, dtype=np.float64)
        ax_line = fig.add_subplot(grid[0, col])
        ax_map = fig.add_subplot(grid[1, col], sharex=ax_line)
        ax_off = fig.add_subplot(grid[2, col], sharex=ax_line)
        for label, values, style in panel["lines"]:
            ax_line.plot(x, values, label=label, **style)
        ax_line.set(title=panel["title"], ylabel="feature value", ylim=(-2.0, 1.1))
        ax_line.legend(fontsize="x-small", ncol=2, loc="lower center")
        feats = panel["features"]
        dx = x[1] - x[0]
        image = ax_map.imshow(feats.T, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1,
                              interpolation="nearest",
                              extent=(x[0] - dx / 2, x[-1] + dx / 2, feats.shape[1] - 0.5, -0.5))
        ax_map.set_yticks(range(feats.shape[1]), panel["names"], fontsize="x-small")
        ax_map.set_title(map_title, fontsize="medium")
        fig.colorbar(image, ax=ax_map, label="value", pad=0.01)
        offsets = _utc_offset_hours(index)
        ax_off.step(x, offsets, where="post", color="k")
        ax_off.set(ylabel="UTC offset (h)", xlabel=f"local date ({tz})",
                   ylim=(offsets.min() - 0.6, offsets.max() + 0.6))
        # Ticks at local midnights (week) or month starts (year).
        dates = pd.date_range(index[0].tz_localize(None).normalize(),
                              index[-1].tz_localize(None), freq=panel["ticks"])
        dates = dates.tz_localize(tz, ambiguous=True, nonexistent="shift_forward")
        ticks = np.asarray((dates - index[0]) / day, dtype=np.float64)
        keep = (ticks >= x[0]) & (ticks <= x[-1])
        fmt = "%b %d" if panel["ticks"] == "D" else "%b"
        ax_off.set_xticks(ticks[keep], [d.strftime(fmt) for d in dates[keep]], fontsize="small")
        for ax in (ax_line, ax_map):
            ax.tick_params(labelbottom=False)
        ax_line.set_xlim(x[0], x[-1])
        for when, before, after in dst_changes(index[0], index[-1]):
            at = float((when - index[0]) / day)
            what = "DST starts" if after > before else "DST ends"
            for ax in (ax_line, ax_map, ax_off):
                ax.axvline(at, color="C3", ls="--", lw=1.2)
            left = at < x[-1] / 2
            ax_off.annotate(f"{what} {when.strftime('%b %d %H:%M')}\n"
                            f"UTC{before:+g} -> UTC{after:+g}", (at, (before + after) / 2),
                            fontsize="x-small", color="C3", va="center",
                            ha="left" if left else "right", xytext=(4 if left else -4, 0),
                            textcoords="offset points")
    fig.suptitle(title)
    return save_png(fig, path)


def plot_calendar_features(tz: str, path: str | Path, *, start: Any = "2024-03-07",
                           days: int = 7, title: str | None = None,
                           figsize: tuple[float, float] = (15, 9), dpi: int = 100) -> Path:
    """``CalendarFeatures`` (sin/cos on each field's true period, local wall clock) over
    ``days`` days and a year from ``start`` in zone ``tz``; ``hour_sin`` is also drawn on the
    fixed clock (dashed)."""
    from posenc.temporal import CalendarFeatures, calendar_fields

    panels = []
    for (label, index, ticks), names in zip(
            _windows(tz, start, days),
            (("hour", "day_of_week", "day_of_month", "month"),
             ("hour", "day_of_week", "day_of_month", "day_of_year", "week_of_year", "month")),
            strict=True):
        enc = CalendarFeatures(names)
        feats = enc(calendar_fields(index, fields=enc.required_fields)).numpy()
        fixed_tz = dt.timezone(index[0].utcoffset())
        fixed = CalendarFeatures(["hour"])(calendar_fields(index, tz=fixed_tz,
                                                           fields=["hour"])).numpy()
        col = {n: i for i, n in enumerate(enc.feature_names)}
        lines = [("hour_sin (local clock)", feats[:, col["hour_sin"]], {"color": "C0"}),
                 (f"hour_sin (fixed clock, UTC{_utc_offset_hours(index[:1])[0]:+g})",
                  fixed[:, 0], {"color": "C0", "ls": ":", "lw": 2})]
        more = (("day_of_year_sin", "month_cos") if "day_of_year_sin" in col
                else ("hour_cos", "day_of_week_sin"))
        lines += [(name + (" (local clock)" if name == "hour_cos" else ""),
                   feats[:, col[name]], {"color": f"C{i + 1}"}) for i, name in enumerate(more)]
        panels.append({"title": label, "index": index, "ticks": ticks, "lines": lines,
                       "features": feats, "names": enc.feature_names})
    return _time_figure(path, panels, tz, "all features (local wall clock)",
                        title or f"CalendarFeatures in {tz} from {panels[0]['index'][0]}",
                        figsize, dpi)


def plot_fourier_features(tz: str, path: str | Path, *, start: Any = "2024-03-07",
                          days: int = 7, harmonics: int = 3, title: str | None = None,
                          figsize: tuple[float, float] = (15, 9), dpi: int = 100) -> Path:
    """``FourierSeasonality`` (day, week, year periods) over ``days`` days and a year from
    ``start`` in zone ``tz``: ``day_sin1`` of the local wall clock, of the fixed clock and of
    UTC instants (which ignore DST); the heatmap shows the tz-aware input's features."""
    from posenc.temporal import FourierSeasonality

    enc = FourierSeasonality(harmonics=harmonics)
    col = {n: i for i, n in enumerate(enc.feature_names)}
    day = col["day_sin1"]
    panels = []
    for label, index, ticks in _windows(tz, start, days):
        feats = enc(index).numpy()
        offset = index[0].utcoffset()
        fixed = enc(index.tz_convert(dt.timezone(offset)).tz_localize(None)).numpy()
        lines = [("day_sin1, local wall clock (naive input)",
                  enc(index.tz_localize(None)).numpy()[:, day], {"color": "C0"}),
                 (f"day_sin1, fixed clock UTC{offset / dt.timedelta(hours=1):+g} "
                  "(naive input)", fixed[:, day], {"color": "C0", "ls": ":", "lw": 2}),
                 ("day_sin1, UTC instants (tz-aware input)", feats[:, day],
                  {"color": "0.5", "lw": 1})]
        if ticks == "MS":
            lines += [(name, feats[:, col[name]], {"color": f"C{i + 1}"})
                      for i, name in enumerate(("year_sin1", "year_cos1"))]
        panels.append({"title": label, "index": index, "ticks": ticks, "lines": lines,
                       "features": feats, "names": enc.feature_names})
    return _time_figure(path, panels, tz, "all features, tz-aware input (phases of UTC instants)",
                        title or f"FourierSeasonality({enc.extra_repr()}) in {tz} from "
                        f"{panels[0]['index'][0]}", figsize, dpi)


def plot_holiday_features(country: str, path: str | Path, *, subdiv: str | None = None,
                          year: int = 2024, alpha: float = 0.5, zoom_days: int = 10,
                          title: str | None = None, figsize: tuple[float, float] = (15, 9),
                          dpi: int = 100) -> Path:
    """``HolidayFeatures`` of every day of ``year`` in ``country`` (and ``subdiv``).

    Top: each kernel of the signed distance ``d`` to the nearest holiday; middle: ``d`` in
    days; bottom: ``zoom_days`` either side of the holiday nearest mid-year and of the last.

    Args:
        country: a ``holidays`` package code (e.g. ``"US"``); ``subdiv`` one of its
            subdivisions (e.g. ``"CA"``), or None.
        alpha: the rate of both smooth kernels (``> 0``).
    """
    import pandas as pd
    from posenc.temporal import HolidayFeatures
    from posenc.temporal.holidays import KERNELS

    year = check_int(year, "year", ge=1)
    check_positive_int(zoom_days, "zoom_days")
    days = pd.date_range(f"{year:04d}-01-01", f"{year:04d}-12-31", freq="D")
    values = {kernel: HolidayFeatures(country, subdiv, kernel=kernel, alpha=alpha,
                                      distance_scale=1.0 if kernel == "indicator" else None,
                                      years=(year, year))(days, dtype=torch.float64).numpy()
              for kernel in KERNELS}
    distance = values["indicator"][:, 1]  # distance_scale=1: the signed distance in days
    from holidays import country_holidays  # names for labels only: values come from above

    names = {np.datetime64(day, "D"): name for day, name in sorted(
        country_holidays(country, subdiv=subdiv, years=[year]).items())}
    x = days.to_numpy().astype("M8[D]")
    styles = {"indicator": ("indicator (d == 0)", {"color": "k", "lw": 1.0}),
              "exponential": (f"exponential exp(-{alpha:g} |d|)", {"color": "C0", "lw": 1.2}),
              "squared_exponential": (f"squared_exponential exp(-{alpha:g} d^2)",
                                      {"color": "C1", "lw": 1.2})}

    fig = new_figure(figsize, dpi)
    grid = fig.add_gridspec(3, 2, height_ratios=(3, 2, 3))
    ax_year = fig.add_subplot(grid[0, :])
    ax_dist = fig.add_subplot(grid[1, :], sharex=ax_year)
    for kernel, (label, style) in styles.items():
        steps = {"drawstyle": "steps-mid"} if kernel == "indicator" else {}
        ax_year.plot(x, values[kernel][:, 0], label=label, **style, **steps)
    ax_dist.plot(x, distance, color="C2", lw=1.2, drawstyle="steps-mid")
    ax_year.set(ylabel="kernel of d", ylim=(-0.02, 1.05), xlim=(x[0], x[-1]))
    for day, name in names.items():
        for ax in (ax_year, ax_dist):
            ax.axvline(day, color="0.8", lw=0.8, zorder=0)
        ax_year.annotate(name, (day, 1.07), rotation=90, fontsize="x-small", ha="center",
                         va="bottom", annotation_clip=False)
    ax_year.legend(fontsize="small", loc="center left", bbox_to_anchor=(0.3, 0.5))
    ax_year.tick_params(labelbottom=False)
    ax_dist.axhline(0, color="0.5", lw=0.8)
    ax_dist.set(ylabel="d (days)", xlabel="date",
                title="signed distance d to the nearest holiday (> 0 after it)")
    if names:
        middle = np.datetime64(f"{year:04d}-07-01", "D")
        centres = [min(names, key=lambda d: abs(d - middle)), max(names)]
        for col, centre in enumerate(dict.fromkeys(centres)):  # one if they are the same
            ax = fig.add_subplot(grid[2, col])
            keep = (x >= centre - zoom_days) & (x <= centre + zoom_days)
            offsets = (x[keep] - centre).astype(np.int64)
            for kernel, (_, style) in styles.items():
                ax.plot(offsets, values[kernel][keep, 0], marker="o", ms=3, **style, label=kernel)
            twin = ax.twinx()
            twin.plot(offsets, distance[keep], color="C2", ls=":", marker=".", label="d")
            twin.set_ylabel("d (days)", color="C2")
            ax.set(xlabel=f"days from {names[centre]} ({centre})", ylabel="feature value",
                   title=f"around {names[centre]}, day by day", ylim=(-0.05, 1.05))
            ax.legend(fontsize="x-small", loc="upper left")
    fig.suptitle(title or f"HolidayFeatures(country={country!r}, subdiv={subdiv!r}, "
                 f"alpha={alpha:g}) on every day of {year}: kernels of the signed distance d "
                 "to the nearest holiday")
    return save_png(fig, path)
