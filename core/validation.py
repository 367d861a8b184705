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
    "check_int",
    "check_positions",
    "check_position_shape",
    "check_position_values",
    "check_pair_values",
    "check_position_dtype",
    "widen_positions",
    "check_finite",
    "check_positive_int",
    "check_positive_float",
    "check_float",
    "check_bool",
    "check_base",
    "check_even",
    "check_choice",
    "check_output_dtype",
]

# Positions keep float32 or float64: bfloat16 has 8 significant bits (1001 rounds to 1000) and
# float16 11, so a half-precision position is already the wrong position.
POSITION_FLOAT_DTYPES = (torch.float32, torch.float64)


def check_int(value: object, name: str, *, ge: int | None = None) -> int:
    """Return ``value`` if it is an ``int`` (not a bool) that is ``>= ge`` when given, else
    raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if ge is not None and value < ge:
        raise ValueError(f"{name} must be >= {ge}, got {value}")
    return value


def check_positive_int(value: object, name: str) -> int:
    """Return ``value`` if it is an ``int`` >= 1, else raise naming ``name``."""
    return check_int(value, name, ge=1)


def check_bool(value: object, name: str) -> bool:
    """Return ``value`` if it is a ``bool``; anything else (``"no"``, ``0``, ``None``) raises,
    since Python would take a non-empty string for True."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__} "
                        f"({value!r})")
    return value


def _as_float(value: object, name: str) -> float:
    """``value`` as a float (ints and numpy scalars are accepted; bools, numpy bools included,
    are not); an int beyond float range becomes inf."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    try:
        return float(value)
    except OverflowError:
        return math.inf


def check_positive_float(value: object, name: str) -> float:
    """Return ``value`` as a ``float`` if it is a finite real number > 0, else raise naming
    ``name`` (ints and numpy scalars are accepted; bools, numpy bools included, are not)."""
    number = _as_float(value, name)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a positive number (finite, > 0), got {value!r}")
    return number


def check_float(
    value: object, name: str, *, gt: float | None = None, ge: float | None = None,
    lt: float | None = None,
) -> float:
    """Return ``value`` as a finite ``float`` within the given bounds (``> gt``, ``>= ge``,
    ``< lt``), else raise naming ``name`` (``TypeError`` for a non-number or a bool,
    ``ValueError`` for NaN, inf or a value out of bounds), e.g. ``check_float(base, "base",
    gt=1)`` or ``check_float(dropout, "dropout", ge=0, lt=1)``."""
    number = _as_float(value, name)
    bounds = [f"> {gt:g}"] if gt is not None else []
    bounds += [f">= {ge:g}"] if ge is not None else []
    bounds += [f"< {lt:g}"] if lt is not None else []
    if not (math.isfinite(number) and (gt is None or number > gt)
            and (ge is None or number >= ge) and (lt is None or number < lt)):
        raise ValueError(f"{name} must be a finite number {' and '.join(bounds)}, "
                         f"got {value!r}".replace("number , ", "number, "))
    return number


def check_base(base: object, name: str = "base") -> float:
    """Return a sinusoidal or rotary wavelength base as a float: a finite number > 1 (base 1
    gives every pair the same frequency; inf, NaN, bools and strings raise)."""
    return check_float(base, name, gt=1)


def check_even(value: object, name: str) -> int:
    """Return ``value`` if it is a positive even ``int`` (sin/cos or rotation pairs)."""
    value = check_positive_int(value, name)
    if value % 2:
        raise ValueError(f"{name} must be even (it is split into sin/cos pairs), got {value}")
    return value


def check_choice(value: object, name: str, choices: tuple[object, ...]) -> object:
    """Return ``value`` if it is one of ``choices``, else raise listing them: ``TypeError``
    when its type is none of the choices' types (``variant=["axial"]``, ``normalize=1``;
    ``None`` is of the right type only where it is a choice), ``ValueError`` otherwise."""
    types = tuple({type(c) for c in choices})
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise TypeError(f"{name} must be one of {list(choices)}, got {type(value).__name__} "
                        f"({value!r})")
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_output_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    """Return ``dtype`` if it is a floating ``torch.dtype``: an integer output would round
    every sin/cos feature to -1, 0 or 1."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype (e.g. torch.float32), got "
                        f"{dtype!r}")
    return dtype


def check_finite(tensor: Tensor, name: str) -> Tensor:
    """Return ``tensor`` if every value is finite, else raise ``ValueError`` naming ``name``.

    The check reads the values (a host synchronisation, and a graph break under
    ``torch.compile``, where it is skipped): call it where the data enters (a data module, a
    function that builds positions, a public encoding method), not once per block. Integer
    tensors are always finite.
    """
    if tensor.is_floating_point() and not torch.compiler.is_compiling():
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{name} must be finite, got NaN or inf values")
    return tensor


def widen_positions(positions: Tensor, name: str = "positions") -> Tensor:
    """Integer positions as int64; floating ones unchanged.

    Narrow integers wrap in arithmetic (uint8 ``0 - 5`` is 251) and uint8 indexes a table as a
    boolean mask, so every integer dtype is widened before offsets are taken or a table is
    indexed. uint64 values past the int64 range raise (outside ``torch.compile``).
    """
    if positions.is_floating_point() or positions.dtype == torch.int64:
        return positions
    wide = positions.long()
    if positions.dtype == torch.uint64 and not torch.compiler.is_compiling():
        if bool((wide < 0).any()):
            raise ValueError(f"{name} must fit in int64, got uint64 values >= 2**63")
    return wide


def check_position_dtype(positions: Tensor, name: str = "positions") -> None:
    """Refuse half-precision (float16, bfloat16, float8) positions with a ``TypeError``: they
    are already the wrong positions (bfloat16 rounds 1001 to 1000)."""
    if positions.is_floating_point() and positions.dtype not in POSITION_FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be an integer, float32 or float64 tensor, got {positions.dtype}: "
            "half-precision positions are already off by whole units (bfloat16 rounds 1001 "
            "to 1000); pass int or float32/float64 positions (the encoding's output follows "
            "the dtype of the tensor it is applied to)")


def check_position_shape(
    positions: Tensor, name: str = "positions", *, trailing: tuple[int, ...] = ()
) -> Tensor:
    """Validate the type, dtype and shape of a coordinate tensor of shape ``(N, *trailing)``
    or ``(B, N, *trailing)`` and return it with integer dtypes widened to int64 (use the
    returned tensor). Reads no values: what a block, or an encoding's unchecked method, runs.

    Integer, float32 and float64 positions are legal (fractional positions come from
    interpolation, packed images and continuous time); bool, complex and half-precision
    (float16, bfloat16, float8) positions raise ``TypeError``; a wrong shape ``ValueError``.
    Encodings compute their angles from the returned tensor in float64, so integer positions
    are exact at any dtype of the tensor the encoding is applied to.

    Args:
        positions: the coordinates.
        name: argument name used in error messages.
        trailing: fixed trailing dimensions, e.g. ``(2,)`` for (row, col) coordinates.

    Returns:
        ``positions``, as int64 if it was any integer dtype.
    """
    if not isinstance(positions, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{name} must be an integer or floating tensor, got {positions.dtype}")
    check_position_dtype(positions, name)
    expected = ", ".join(["N", *map(str, trailing)])
    ndim = positions.ndim - len(trailing)
    if ndim not in (1, 2) or tuple(positions.shape[ndim:]) != trailing:
        raise ValueError(
            f"{name} must have shape ({expected}) or (B, {expected}), "
            f"got {tuple(positions.shape)}"
        )
    return widen_positions(positions, name)


def check_positions(
    positions: Tensor, name: str = "positions", *, trailing: tuple[int, ...] = ()
) -> Tensor:
    """:func:`check_position_shape`, then non-finite values raise ``ValueError``.

    For where positions enter (a data module, a function that builds positions, a model's
    forward that takes them): the finiteness check reads the values (a host synchronisation
    on a GPU), so blocks take positions checked once there and check shapes only.
    """
    return check_finite(check_position_shape(positions, name, trailing=trailing), name)


def check_position_values(positions: object, name: str = "positions") -> None:
    """Refuse half-precision and non-finite ``positions`` (a tensor, or an object carrying one
    as ``.coords``: ``posenc.spatial.GridPositions``/``VideoPositions``) by name; anything
    else is left to the shape checks that follow.

    The value check of a public encoding method and of
    :class:`~posenc.core.MultiheadAttention`'s forward, before they call the unchecked
    method (``rotation`` -> ``_rotation``) that blocks call with positions checked at the
    model's edge. Reads the values once (a host synchronisation on a GPU).
    """
    tensor = getattr(positions, "coords", positions)
    if isinstance(tensor, Tensor):
        name = name if tensor is positions else f"{name}.coords"
        check_position_dtype(tensor, name)  # a dtype error comes before a read of values
        check_finite(tensor, name)


def check_pair_values(query_positions: object, key_positions: object) -> None:
    """:func:`check_position_values` of ``query_positions`` and ``key_positions`` (read once
    when they are the same object, as in self-attention)."""
    check_position_values(query_positions, "query_positions")
    if key_positions is not query_positions:
        check_position_values(key_positions, "key_positions")
