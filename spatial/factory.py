"""The spatial encodings by name ([`ENCODINGS`][posenc.spatial.ENCODINGS]): for each, its class, the
constructor arguments the name fixes (``rope_axial`` is ``RoPE2D(variant="axial")``) and those taken
from a model's sizes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch
from posenc.core import NoPE, PositionEncoding
from posenc.core import encoding_kind as _core_encoding_kind
from torch import nn

from .additive import Factorized2D, Learned2D, SinCos2D
from .bias import ALiBi2D, ContinuousBias2D, RelativeBias2D
from .liere import LieRE
from .rope import RoPE2D

__all__ = ["ENCODINGS", "SpatialEncodingSpec", "encoding_from_name", "encoding_kind",
           "encoding_spec", "encodings_for_blocks", "one_module_per_block", "size_arguments",
           "vit_size_arguments"]

#: The keys of [`size_arguments`][posenc.spatial.factory.size_arguments].
SIZE_ARGUMENTS = ("dim", "num_heads", "head_dim", "grid_size", "max_grid_size", "ref_grid_size")


def size_arguments(*, dim: int | None = None, num_heads: int | None = None,
                   head_dim: int | None = None,
                   grid_size: tuple[int, int] | None = None) -> dict[str, Any]:
    """A model's sizes under the spatial encodings' argument names: the patch grid is
    ``grid_size`` (Learned2D, RelativeBias2D), ``max_grid_size`` (Factorized2D) and
    ``ref_grid_size`` (ContinuousBias2D: SwinV2's pretraining window); None stays None."""
    return {"dim": dim, "num_heads": num_heads, "head_dim": head_dim, "grid_size": grid_size,
            "max_grid_size": grid_size, "ref_grid_size": grid_size}


def vit_size_arguments(model: nn.Module) -> dict[str, Any]:
    """[`size_arguments`][posenc.spatial.factory.size_arguments] of a timm ``VisionTransformer``
    (the first block's heads, the grid at its configured image size)."""
    attn = model.blocks[0].attn
    # getattr: attach refuses another attention with a message naming it, later.
    return size_arguments(dim=model.embed_dim, num_heads=getattr(attn, "num_heads", None),
                          head_dim=getattr(attn, "head_dim", None),
                          grid_size=tuple(model.patch_embed.grid_size))


def one_module_per_block(encoding: nn.Module) -> bool:
    """True for a rotary or bias encoding with parameters (RoPE-Mixed frequencies, a bias table
    or MLP), which gets one module per block as in the papers; False for parameter-free and
    additive ones."""
    return _core_encoding_kind(encoding) in ("rotary", "bias") and next(
        encoding.parameters(), None) is not None


def encodings_for_blocks(build: Callable[[], nn.Module],
                         num_blocks: int) -> nn.Module | list[nn.Module]:
    """``build()`` once, or ``num_blocks`` times (a list) where
    [`one_module_per_block`][posenc.spatial.factory.one_module_per_block] says so."""
    first = build()
    if not one_module_per_block(first):
        return first
    return [first] + [build() for _ in range(num_blocks - 1)]


@dataclass(frozen=True)
class SpatialEncodingSpec:
    """What a spatial encoding name means.

    Attributes:
        name: the name (a config value, [`attach`][posenc.spatial.attach]'s argument).
        cls: the encoding class; its ``kind`` attribute is the name's
            [`kind`][posenc.spatial.SpatialEncodingSpec.kind].
        infers: the constructor arguments taken from a model's sizes (keys of
            [`size_arguments`][posenc.spatial.factory.size_arguments]); anything else keeps the
            constructor's default.
        fixed: constructor arguments the name itself sets (read-only).
    """

    name: str
    cls: type[PositionEncoding]
    infers: tuple[str, ...] = ()
    fixed: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.infers) - set(SIZE_ARGUMENTS))
        if unknown:
            raise ValueError(f"{self.name}: infers {unknown} are not size arguments; valid: "
                             f"{list(SIZE_ARGUMENTS)}")
        object.__setattr__(self, "fixed", MappingProxyType(dict(self.fixed)))

    @property
    def kind(self) -> str:
        """``"additive"``, ``"rotary"``, ``"bias"`` or ``"none"``: the class's ``kind``."""
        return _core_encoding_kind(self.cls)

    @property
    def per_block(self) -> bool:
        """Whether [`attach`][posenc.spatial.attach] gives every block its own module."""
        sizes = size_arguments(dim=8, num_heads=2, head_dim=8, grid_size=(2, 2))
        with torch.device("meta"):
            return one_module_per_block(self.build(**self.arguments(sizes)))

    def arguments(self, sizes: Mapping[str, Any]) -> dict[str, Any]:
        """The constructor arguments this name takes from a
        [`size_arguments`][posenc.spatial.factory.size_arguments] dict."""
        return {key: sizes[key] for key in self.infers}

    def infer(self, model: nn.Module) -> dict[str, Any]:
        """The constructor arguments this name takes from a timm ``VisionTransformer``."""
        return self.arguments(vit_size_arguments(model))

    def build(self, **kwargs: Any) -> nn.Module:
        """``cls(**fixed, **kwargs)``; a keyword the name fixes is a ``TypeError``."""
        clash = sorted(set(kwargs) & set(self.fixed))
        if clash:
            given = ", ".join(f"{key}={kwargs[key]!r}" for key in clash)
            fixed = ", ".join(f"{key}={self.fixed[key]!r}" for key in clash)
            raise TypeError(f"encoding {self.name!r} fixes {fixed}, got {given}: use another "
                            f"name or the class {self.cls.__name__} itself")
        return self.cls(**self.fixed, **kwargs)


_SPECS = (
    SpatialEncodingSpec("none", NoPE),
    SpatialEncodingSpec("learned", Learned2D, ("grid_size", "dim")),
    SpatialEncodingSpec("sincos2d", SinCos2D, ("dim",)),
    SpatialEncodingSpec("factorized", Factorized2D, ("max_grid_size", "dim")),
    SpatialEncodingSpec("rope_axial", RoPE2D, ("head_dim", "num_heads"), {"variant": "axial"}),
    SpatialEncodingSpec("rope_mixed", RoPE2D, ("head_dim", "num_heads"), {"variant": "mixed"}),
    SpatialEncodingSpec("relbias", RelativeBias2D, ("num_heads", "grid_size")),
    SpatialEncodingSpec("cpb", ContinuousBias2D, ("num_heads", "ref_grid_size")),
    SpatialEncodingSpec("alibi2d", ALiBi2D, ("num_heads",)),
    SpatialEncodingSpec("rope_dinov3", RoPE2D, ("head_dim", "num_heads"),
                        {"variant": "axial", "normalize": "unit"}),
    SpatialEncodingSpec("rope_pixel", RoPE2D, ("head_dim", "num_heads"),
                        {"variant": "axial", "freqs_for": "pixel", "normalize": "pixel"}),
    SpatialEncodingSpec("liere", LieRE, ("head_dim", "num_heads"), {"variant": "liere"}),
    SpatialEncodingSpec("comrope", LieRE, ("head_dim", "num_heads"),
                        {"variant": "comrope", "normalize": "unit"}),
)

ENCODINGS: Mapping[str, SpatialEncodingSpec] = MappingProxyType({s.name: s for s in _SPECS})
"""name -> [`SpatialEncodingSpec`][posenc.spatial.SpatialEncodingSpec], read-only; iterating gives
the names."""


def encoding_spec(name: str) -> SpatialEncodingSpec:
    """The [`SpatialEncodingSpec`][posenc.spatial.SpatialEncodingSpec] of ``name``; a ``ValueError``
    (``TypeError`` for a non-str) listing the valid names otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (a spatial encoding name), got "
                        f"{type(name).__name__} ({name!r}); valid names: {list(ENCODINGS)}")
    if name not in ENCODINGS:
        raise ValueError(f"unknown spatial encoding {name!r}; valid names: {list(ENCODINGS)}")
    return ENCODINGS[name]


def encoding_from_name(name: str, **kwargs) -> nn.Module:
    """Build the encoding [`ENCODINGS`][posenc.spatial.ENCODINGS] names; ``kwargs`` go to its
    constructor, e.g. ``encoding_from_name("rope_mixed", head_dim=64, num_heads=6)``."""
    return encoding_spec(name).build(**kwargs)


def encoding_kind(encoding: str | nn.Module | type | None) -> str:
    """[`posenc.core.encoding_kind`][posenc.core.encoding_kind], also of a registry name."""
    if isinstance(encoding, str):
        return encoding_spec(encoding).kind
    return _core_encoding_kind(encoding)
