"""posenc's argument and position checks (private: every package imports them from here).

Each raises ``ValueError``/``TypeError`` naming the argument, the value and what was expected.
Configuration is checked in constructors, position values where they enter (a read of values
is a host synchronisation on a GPU): a value check that passes hands the positions on as a
`known_finite` view, and a model marks the positions it makes itself (from int64
timestamps, from a grid's sizes) the same way. A check of such a view reads nothing, so the
paths inside a model are plain calls of the public methods.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import torch
from torch import Tensor

__all__ = ["check_int", "check_positive_int", "check_bool", "check_positive_float", "check_float",
           "check_base", "check_even", "check_choice", "check_output_dtype", "check_finite",
           "known_finite", "widen_positions", "check_position_dtype", "check_position_shape",
           "check_positions", "check_position_values", "check_pair_values"]


def check_int(value: object, name: str, *, ge: int | None = None) -> int:
    """Return ``value`` as an ``int`` if it is an integer (Python or numpy; not a bool) that
    fits in int64 (every size and index becomes a torch or numpy integer), ``>= ge`` when
    given."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if not -2**63 <= value < 2**63:
        raise ValueError(f"{name} must fit in int64 (-2**63 to 2**63 - 1), got {value}")
    if ge is not None and value < ge:
        raise ValueError(f"{name} must be >= {ge}, got {value}")
    return int(value)


def check_positive_int(value: object, name: str) -> int:
    """Return ``value`` if it is an ``int`` >= 1."""
    return check_int(value, name, ge=1)


def check_bool(value: object, name: str) -> bool:
    """Return ``value`` if it is a ``bool`` (``"no"``, ``0`` or ``None`` raise)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__} "
                        f"({value!r})")
    return value


def _as_float(value: object, name: str) -> float:
    """``value`` as a float (bools refused); an int beyond float range becomes inf."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    try:
        return float(value)
    except OverflowError:
        return math.inf


def check_positive_float(value: object, name: str) -> float:
    """Return ``value`` as a ``float`` if it is a finite real number > 0."""
    number = _as_float(value, name)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a positive number (finite, > 0), got {value!r}")
    return number


def check_float(value: object, name: str, *, gt: float | None = None,
                ge: float | None = None, lt: float | None = None) -> float:
    """Return ``value`` as a finite ``float`` within the given bounds (``> gt``, ``>= ge``,
    ``< lt``): ``TypeError`` for a non-number or a bool, ``ValueError`` otherwise."""
    number = _as_float(value, name)
    bounds = [f"{op} {bound:g}" for op, bound in ((">", gt), (">=", ge), ("<", lt))
              if bound is not None]
    if not (math.isfinite(number) and (gt is None or number > gt)
            and (ge is None or number >= ge) and (lt is None or number < lt)):
        raise ValueError(f"{name} must be a finite number {' and '.join(bounds)}, "
                         f"got {value!r}".replace("number , ", "number, "))
    return number


def check_base(base: object, name: str = "base") -> float:
    """Return a sinusoidal or rotary wavelength base as a float: a finite number > 1."""
    return check_float(base, name, gt=1)


def check_even(value: object, name: str) -> int:
    """Return ``value`` if it is a positive even ``int`` (sin/cos or rotation pairs)."""
    value = check_positive_int(value, name)
    if value % 2:
        raise ValueError(f"{name} must be even (it is split into sin/cos pairs), got {value}")
    return value


def check_choice(value: object, name: str, choices: tuple[object, ...]) -> object:
    """Return ``value`` if it is one of ``choices``, else raise listing them: ``TypeError``
    when its type is none of the choices' types, ``ValueError`` otherwise."""
    types = tuple({type(c) for c in choices})
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise TypeError(f"{name} must be one of {list(choices)}, got {type(value).__name__} "
                        f"({value!r})")
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_output_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    """Return ``dtype`` if it is a floating ``torch.dtype``."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype (e.g. torch.float32), got "
                        f"{dtype!r}")
    return dtype


# Set on a view by known_finite; a view lives as long as the call it was made for.
_KNOWN_FINITE = "_posenc_known_finite"


def known_finite(tensor: Tensor) -> Tensor:
    """``tensor`` as a view that `check_finite` passes without reading its values: for
    positions just checked, or made finite by construction (from int64 timestamps, from a
    grid's sizes). Integer tensors (always finite) and tensors under ``torch.compile`` (where
    checks are skipped) come back unchanged.

    A view, not a flag on ``tensor``: the caller's tensor, if edited later (in place, through
    numpy), is read again by its next check.
    """
    if not tensor.is_floating_point() or torch.compiler.is_compiling():
        return tensor
    view = tensor.view_as(tensor)
    setattr(view, _KNOWN_FINITE, True)
    return view


def check_finite(tensor: Tensor, name: str) -> Tensor:
    """Return ``tensor`` if every value is finite; reads the values, except of a
    `known_finite` view and under ``torch.compile`` (where the model's edge checks)."""
    if (tensor.is_floating_point() and not torch.compiler.is_compiling()
            and not getattr(tensor, _KNOWN_FINITE, False)
            and not bool(torch.isfinite(tensor).all())):
        raise ValueError(f"{name} must be finite, got NaN or inf values")
    return tensor


def widen_positions(positions: Tensor, name: str = "positions") -> Tensor:
    """Integer positions as int64 (narrow ones wrap: uint8 ``0 - 5`` is 251), floating ones
    unchanged; uint64 values past the int64 range raise (outside ``torch.compile``)."""
    if positions.is_floating_point() or positions.dtype == torch.int64:
        return positions
    wide = positions.long()
    if (positions.dtype == torch.uint64 and not torch.compiler.is_compiling()
            and bool((wide < 0).any())):
        raise ValueError(f"{name} must fit in int64, got uint64 values >= 2**63")
    return wide


# bfloat16 rounds 1001 to 1000: a half-precision position is already the wrong position.
POSITION_FLOAT_DTYPES = (torch.float32, torch.float64)


def check_position_dtype(positions: Tensor, name: str = "positions") -> None:
    """Refuse half-precision (float16, bfloat16, float8) positions with a ``TypeError``."""
    if positions.is_floating_point() and positions.dtype not in POSITION_FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be an integer, float32 or float64 tensor, got {positions.dtype}: "
            "half-precision positions are already off by whole units (bfloat16 rounds 1001 "
            "to 1000); pass int or float32/float64 positions (the encoding's output follows "
            "the dtype of the tensor it is applied to)")


def check_position_shape(positions: Tensor, name: str = "positions", *,
                         trailing: tuple[int, ...] = ()) -> Tensor:
    """Check the type, dtype and shape ``(N, *trailing)`` or ``(B, N, *trailing)`` of a
    coordinate tensor without reading values; return it with integers widened to int64.

    Bool, complex and half-precision positions raise ``TypeError``, a wrong shape ``ValueError``.
    """
    if not isinstance(positions, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{name} must be an integer or floating tensor, got {positions.dtype}")
    check_position_dtype(positions, name)
    expected = ", ".join(["N", *map(str, trailing)])
    ndim = positions.ndim - len(trailing)
    if ndim not in (1, 2) or tuple(positions.shape[ndim:]) != trailing:
        raise ValueError(f"{name} must have shape ({expected}) or (B, {expected}), "
                         f"got {tuple(positions.shape)}")
    return widen_positions(positions, name)


def check_positions(positions: Tensor, name: str = "positions", *,
                    trailing: tuple[int, ...] = ()) -> Tensor:
    """`check_position_shape`, then non-finite values raise ``ValueError``."""
    return check_finite(check_position_shape(positions, name, trailing=trailing), name)


def check_position_values(positions: object, name: str = "positions") -> object:
    """Refuse half-precision and non-finite ``positions`` (a tensor, or an object carrying one
    as ``.coords``) and return them, a tensor as a `known_finite` view; anything else is
    left to the shape checks that follow."""
    tensor = getattr(positions, "coords", positions)
    if not isinstance(tensor, Tensor):
        return positions
    name = name if tensor is positions else f"{name}.coords"
    check_position_dtype(tensor, name)  # a dtype error comes before a read of values
    check_finite(tensor, name)
    return known_finite(tensor) if tensor is positions else positions


def check_pair_values(query_positions: object, key_positions: object) -> tuple[object, object]:
    """`check_position_values` of both, read once (and returned as one view) when they
    are the same object."""
    query = check_position_values(query_positions, "query_positions")
    if key_positions is query_positions:
        return query, query
    return query, check_position_values(key_positions, "key_positions")
