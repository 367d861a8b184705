"""Patch-grid coordinates: what every 2D encoding in posenc.spatial is a function of.

A patch token's coordinate is its ``(row, col)`` on the patch grid. Coordinates are explicit
per token, ``(N, 2)`` or ``(B, N, 2)``, so subsets (MAE keep indices, patch dropout) and
packed batches are just other coordinate tensors.

Rotary and bias encodings also accept :class:`GridPositions`, which adds two facts a bare
tensor cannot carry: how many prefix tokens (cls, registers) precede the patch tokens, and
the regular grid the coordinates lie on (which lets grid-based tables resize and lets bias
encodings evaluate each distinct offset once).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import NamedTuple, TypeVar

import torch
from posenc.core import check_choice, check_int, check_output_dtype, check_positions
from torch import Tensor

__all__ = [
    "NORMALIZE",
    "GridPositions",
    "as_grid_positions",
    "cached",
    "check_grid_size",
    "patch_coords",
]

NORMALIZE = (None, "unit")
T = TypeVar("T")


def check_grid_size(grid_size: object, name: str = "grid_size") -> tuple[int, int]:
    """``int`` or ``(rows, cols)`` -> ``(rows, cols)``, each a positive int.

    ``TypeError`` for anything but an int or a pair of ints (``3.0``, ``("a", 3)``, a bool,
    three sizes); ``ValueError`` for sizes < 1. Symbolic sizes
    (``torch.SymInt``, from ``torch.export``/``torch.compile``) pass unchecked.
    """
    if isinstance(grid_size, (int, torch.SymInt)) and not isinstance(grid_size, bool):
        grid_size = (grid_size, grid_size)
    if not isinstance(grid_size, (tuple, list, torch.Size)) or len(grid_size) != 2:
        raise TypeError(f"{name} must be an int or a (rows, cols) pair, got "
                        f"{type(grid_size).__name__} ({grid_size!r})")
    for value in grid_size:
        if isinstance(value, torch.SymInt):
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must hold ints, got {type(value).__name__} in "
                            f"{tuple(grid_size)!r}")
        if value < 1:
            raise ValueError(f"{name} must hold positive ints, got {tuple(grid_size)!r}")
    return grid_size[0], grid_size[1]


def patch_coords(
    grid_size: int | tuple[int, int],
    normalize: str | None = None,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``(rows * cols, 2)`` patch coordinates ``(row, col)`` in row-major order.

    Row-major is the order in which timm (and every ViT) flattens the patch grid, so token
    ``i`` sits at ``(i // cols, i % cols)``.

    Args:
        grid_size: ``rows`` (square) or ``(rows, cols)``.
        normalize: ``None`` gives patch indices ``0 .. rows-1``; ``"unit"`` maps patch centres
            to ``(2 * (i + 0.5) / rows) - 1`` in ``[-1, 1]`` per axis (DINOv3), so an image at two
            resolutions gets the same coordinates.
        device, dtype: of the result (a floating dtype).

    Returns:
        ``(rows * cols, 2)`` tensor; column 0 is the row, column 1 the column.
    """
    rows, cols = check_grid_size(grid_size)
    check_choice(normalize, "normalize", NORMALIZE)
    check_output_dtype(dtype)
    axes = []
    for size in (rows, cols):
        axis = torch.arange(size, device=device, dtype=dtype)
        if normalize == "unit":
            axis = (axis + 0.5) * (2.0 / size) - 1.0
        axes.append(axis)
    grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)
    return grid.reshape(-1, 2)


class GridPositions(NamedTuple):
    """Patch coordinates plus what a ViT's attention needs to know about them.

    Attributes:
        coords: ``(N, 2)`` or ``(B, N, 2)`` coordinates of the N patch tokens.
        grid_size: the regular ``(rows, cols)`` grid the coordinates come from, or None. When
            given, every coordinate must be an integer position on that grid (a full grid or
            a subset of it, e.g. MAE keep indices); grid-based tables then resize to it.
        num_prefix_tokens: tokens without a grid position (cls, registers) that precede the
            patch tokens in the sequence. Rotary encodings leave them unrotated and bias
            encodings give them zero bias, so outputs cover ``num_prefix_tokens + N`` tokens.
        cache: an optional dict in which encodings keep what they derive from these positions
            (a rotation, a bias, offset indices), so that the blocks of one forward that share
            an encoding or the positions compute it once. Give a fresh dict per forward.
    """

    coords: Tensor
    grid_size: tuple[int, int] | None = None
    num_prefix_tokens: int = 0
    cache: dict | None = None


def as_grid_positions(positions: Tensor | GridPositions, name: str = "positions") -> GridPositions:
    """Validate ``(N, 2)``/``(B, N, 2)`` coordinates or a :class:`GridPositions`.

    Integer coordinates come back as int64 (:func:`posenc.core.check_positions`). A
    :class:`GridPositions` with a cache is validated once: the blocks of a forward all get the
    same object, and checking finiteness reads the values (a host synchronisation per block).
    It comes back as the same object when nothing changed, so encodings can tell self-attention
    (``query is key``) from cross-attention.
    """
    if isinstance(positions, GridPositions):
        def check() -> tuple[Tensor, Tensor]:
            return positions.coords, check_positions(positions.coords, f"{name}.coords",
                                                     trailing=(2,))

        given, coords = cached(positions, "checked coords", check)
        if given is not positions.coords:  # the cache came with other coordinates
            given, coords = check()
        if positions.grid_size is not None:
            check_grid_size(positions.grid_size, f"{name}.grid_size")
        check_int(positions.num_prefix_tokens, f"{name}.num_prefix_tokens", ge=0)
        return positions if coords is positions.coords else positions._replace(coords=coords)
    return GridPositions(check_positions(positions, name, trailing=(2,)))


def _symbolic(key: object) -> bool:
    if isinstance(key, tuple):
        return any(_symbolic(part) for part in key)
    return isinstance(key, (torch.SymInt, torch.SymFloat, torch.SymBool))


def cached(positions: GridPositions, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, memoised in ``positions.cache`` under ``key`` when there is a cache.

    ``key`` is a tuple of Python values, e.g. ``(id(self), "rotation")``. A key holding a
    symbolic size (``torch.export``/``torch.compile`` with dynamic shapes trace grid sizes as
    ``torch.SymInt``, which has no hash) is not memoised: the value is computed again, with the
    same result.
    """
    cache = positions.cache
    if cache is None or _symbolic(key):
        return compute()
    if key not in cache:
        cache[key] = compute()
    return cache[key]
