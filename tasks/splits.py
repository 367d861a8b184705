"""The held-out fractions every data module splits by (time for series, stratified for
images)."""

from __future__ import annotations

from posenc.core import check_float

__all__ = ["check_split_fractions"]


def check_split_fractions(val_fraction: object, test_fraction: object) -> tuple[float, float]:
    """``(val_fraction, test_fraction)`` as floats, each in ``(0, 1)`` and summing to < 1,
    else raise naming the argument (``TypeError`` for a non-number or bool)."""
    val_fraction = check_float(val_fraction, "val_fraction", gt=0, lt=1)
    test_fraction = check_float(test_fraction, "test_fraction", gt=0, lt=1)
    if val_fraction + test_fraction >= 1:
        raise ValueError(f"val_fraction + test_fraction must be < 1, got "
                         f"{val_fraction} + {test_fraction}")
    return val_fraction, test_fraction
