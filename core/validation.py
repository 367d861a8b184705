"""Argument checks shared by every encoding.

Each check raises ``ValueError``/``TypeError`` naming the argument, the value received and
what was expected, so a bad call fails where it is made rather than deep inside a kernel.
"""

from __future__ import annotations

import math
from numbers import Real

import torch
from torch import Tensor

__all__ = [
    "check_positions",
    "check_positive_int",
    "check_positive_float",
    "check_even",
    "check_choice",
]


def check_positive_int(value: object, name: str) -> int:
    """Return ``value`` if it is an ``int`` >= 1, else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def check_positive_float(value: object, name: str) -> float:
    """Return ``value`` as a ``float`` if it is a finite real number > 0, else raise naming
    ``name`` (ints and numpy scalars are accepted; bools, numpy bools included, are not)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    try:
        number = float(value)
    except OverflowError:  # an int beyond float range
        number = math.inf
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a positive number (finite, > 0), got {value!r}")
    return number


def check_even(value: object, name: str) -> int:
    """Return ``value`` if it is a positive even ``int`` (sin/cos or rotation pairs)."""
    value = check_positive_int(value, name)
    if value % 2:
        raise ValueError(f"{name} must be even (it is split into sin/cos pairs), got {value}")
    return value


def check_choice(value: str, name: str, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise listing them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_positions(
    positions: Tensor, name: str = "positions", *, trailing: tuple[int, ...] = ()
) -> Tensor:
    """Validate a coordinate tensor of shape ``(N, *trailing)`` or ``(B, N, *trailing)``.

    Integer and floating positions are both legal (fractional positions come from
    interpolation, packed images and continuous time); non-finite values are not.

    Args:
        positions: the coordinates.
        name: argument name used in error messages.
        trailing: fixed trailing dimensions, e.g. ``(2,)`` for (row, col) coordinates.
    """
    if not isinstance(positions, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{name} must be an integer or floating tensor, got {positions.dtype}")
    expected = ", ".join(["N", *map(str, trailing)])
    ndim = positions.ndim - len(trailing)
    if ndim not in (1, 2) or tuple(positions.shape[ndim:]) != trailing:
        raise ValueError(
            f"{name} must have shape ({expected}) or (B, {expected}), "
            f"got {tuple(positions.shape)}"
        )
    # A data-dependent check would break torch.compile graphs, so it is skipped while tracing.
    if positions.is_floating_point() and not torch.compiler.is_compiling():
        if not bool(torch.isfinite(positions).all()):
            raise ValueError(f"{name} must be finite, got NaN or inf values")
    return positions
