"""Spatial encodings by name (for configs and :func:`attach`)."""

from __future__ import annotations

from collections.abc import Callable

from posenc.core import NoPE
from torch import nn

from .bias2d import ALiBi2D, ContinuousBias2D, RelativeBias2D
from .factorized import Factorized2D
from .learned import Learned2D
from .rope2d import RoPE2D
from .sincos import SinCos2D

__all__ = ["ENCODINGS", "encoding_from_name", "encoding_kind"]


def _rope(variant: str) -> Callable[..., RoPE2D]:
    def build(head_dim: int, num_heads: int, **kwargs) -> RoPE2D:
        return RoPE2D(head_dim, num_heads, variant, **kwargs)

    build.__doc__ = f"``RoPE2D(head_dim, num_heads, variant={variant!r}, ...)``"
    return build


#: name -> (constructor, kind). Kinds: "none", "additive", "rotary", "bias".
ENCODINGS: dict[str, tuple[Callable[..., nn.Module], str]] = {
    "none": (NoPE, "none"),
    "learned": (Learned2D, "additive"),
    "sincos2d": (SinCos2D, "additive"),
    "factorized": (Factorized2D, "additive"),
    "rope_axial": (_rope("axial"), "rotary"),
    "rope_mixed": (_rope("mixed"), "rotary"),
    "relbias": (RelativeBias2D, "bias"),
    "cpb": (ContinuousBias2D, "bias"),
    "alibi2d": (ALiBi2D, "bias"),
}


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (a spatial encoding name), got "
                        f"{type(name).__name__} ({name!r}); valid names: {list(ENCODINGS)}")
    if name not in ENCODINGS:
        raise ValueError(f"unknown spatial encoding {name!r}; valid names: {list(ENCODINGS)}")
    return name


def encoding_from_name(name: str, **kwargs) -> nn.Module:
    """Build a spatial encoding by name; ``kwargs`` go to its constructor.

    Names: ``none`` (NoPE), ``learned`` (Learned2D), ``sincos2d`` (SinCos2D), ``factorized``
    (Factorized2D), ``rope_axial`` / ``rope_mixed`` (RoPE2D), ``relbias`` (RelativeBias2D),
    ``cpb`` (ContinuousBias2D), ``alibi2d`` (ALiBi2D).

    Example: ``encoding_from_name("rope_mixed", head_dim=64, num_heads=6)``.
    """
    build, _ = ENCODINGS[_check_name(name)]
    return build(**kwargs)


def encoding_kind(encoding: str | nn.Module | None) -> str:
    """``"none"``, ``"additive"``, ``"rotary"`` or ``"bias"`` for a name or an encoding.

    Modules declare their kind with a ``kind`` attribute; modules without one are classified
    by what they provide (``rotation`` -> rotary). None and NoPE are ``"none"``.
    """
    if isinstance(encoding, str):
        return ENCODINGS[_check_name(encoding)][1]
    if encoding is None or isinstance(encoding, NoPE):
        return "none"
    kind = getattr(encoding, "kind", None)
    if kind in ("additive", "rotary", "bias"):
        return kind
    if hasattr(encoding, "rotation"):
        return "rotary"
    raise TypeError(f"cannot tell how {type(encoding).__name__} enters attention: give it a "
                    "kind attribute ('additive', 'rotary' or 'bias') or use a name from "
                    f"{list(ENCODINGS)}")
