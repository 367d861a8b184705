"""What every posenc encoding shares: the base class, its kind, and the angles.

The argument and position checks live in ``posenc.core._checks``.
[`angles`][posenc.core.encoding.angles] are formed in float64 and reduced modulo 2*pi before
narrowing (a float32 ``1e6 * inv_freq`` is off by ~0.06 rad). `LAYOUTS`: angle ``i < F`` fills
channels ``2i, 2i + 1`` (``"interleaved"``: the sinusoidal paper, GPT-J) or ``i, i + F``
(``"half"``: tensor2tensor, GPT-NeoX/Llama).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import torch
from torch import Tensor, nn

from ._checks import check_position_dtype

__all__ = ["LAYOUTS", "angles", "wide_dtype", "KINDS", "PositionEncoding", "encoding_kind",
           "no_weight_decay_names", "Float64Buffers"]


LAYOUTS = ("half", "interleaved")


def wide_dtype(device: torch.device) -> torch.dtype:
    """float64 wherever the backend has it (Apple MPS does not; it gets float32)."""
    return torch.float32 if device.type == "mps" else torch.float64


def angles(positions: Tensor, inv_freq: Tensor) -> Tensor:
    """Angles ``positions[..., None] * inv_freq`` of ``(...)`` coordinates and ``(F,)`` (or
    broadcastable, e.g. per-head ``(H, 1, F)``) angular frequencies.

    Returns:
        ``(..., F)`` float32 angles reduced to ``[0, 2*pi)``; float64 (unreduced) when
        ``positions`` is float64.
    """
    for name, t in (("positions", positions), ("inv_freq", inv_freq)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    check_position_dtype(positions)
    wide = wide_dtype(positions.device)
    theta = positions.to(wide)[..., None] * inv_freq.to(device=positions.device, dtype=wide)
    if positions.dtype == torch.float64:
        return theta
    return torch.remainder(theta, 2 * math.pi).float()


KINDS = ("additive", "rotary", "bias", "none")
"""Where an encoding enters: token embeddings, q and k, attention logits, or nowhere (NoPE)."""


class PositionEncoding(nn.Module):
    """Base of posenc's encoding modules: every subclass declares its ``kind`` (one of
    [`KINDS`][posenc.core.encoding.KINDS]);
    [`no_weight_decay`][posenc.core.PositionEncoding.no_weight_decay] names every parameter (they
    place tokens, so decay would pull positions together; timm's convention, read by
    [`no_weight_decay_names`][posenc.core.encoding.no_weight_decay_names]).
    """

    kind: ClassVar[str]

    def no_weight_decay(self) -> set[str]:
        """Names (relative to this module) of the parameters to keep out of weight decay."""
        return {name for name, _ in self.named_parameters()}


def encoding_kind(encoding: object) -> str:
    """The ``kind`` (one of [`KINDS`][posenc.core.encoding.KINDS]) that ``encoding`` (a module or a
    class) declares; None is ``"none"``, anything without one raises ``TypeError``."""
    if encoding is None:
        return "none"
    kind = getattr(encoding, "kind", None)
    if kind not in KINDS:
        name = encoding.__name__ if isinstance(encoding, type) else type(encoding).__name__
        raise TypeError(f"{name} does not declare how it enters a transformer: give the class "
                        f"a kind attribute, one of {list(KINDS)} (posenc's encodings derive "
                        f"from posenc.core.PositionEncoding and declare it), got {kind!r}")
    return kind


def no_weight_decay_names(model: nn.Module) -> set[str]:
    """Full names of the parameters of ``model`` that it or its submodules list in a
    ``no_weight_decay()`` method (names a module does not own are ignored)."""
    owned = {name for name, _ in model.named_parameters()}
    names: set[str] = set()
    for prefix, module in model.named_modules():
        declared = getattr(module, "no_weight_decay", None)
        if callable(declared):
            names.update(f"{prefix}.{name}" if prefix else name for name in declared())
    return names & owned


class Float64Buffers(PositionEncoding):
    """Base for modules whose frequencies are float64 buffers (a bf16 inverse frequency is off
    by whole radians at position 1000), recomputed from their definition as timm's
    ``RotaryEmbeddingDinoV3`` does.

    [`float64_buffers`][posenc.core.encoding.Float64Buffers.float64_buffers] defines them (not in
    the state dict);
    [`reset_float64_buffers`][posenc.core.encoding.Float64Buffers.reset_float64_buffers] computes
    them (subclasses call it in ``__init__``), and so does
    [`reset_parameters`][posenc.core.encoding.Float64Buffers.reset_parameters] (meta-device init:
    ``to_empty()`` then ``reset_parameters()``). They follow the module across devices; a cast
    (``.to(torch.bfloat16)``, ``.half()``) or ``to_empty()`` after a meta-device build recomputes
    them. Parameters named in `fixed_dtype_parameters` keep their dtype and values through a cast.
    """

    #: Names of learned parameters that keep their dtype when the module is cast.
    fixed_dtype_parameters: tuple[str, ...] = ()
    _float64_buffer_names: tuple[str, ...] = ()

    def float64_buffers(self) -> dict[str, Tensor]:
        """The float64 buffers, from the constructor's arguments (run on CPU); to override."""
        return {}

    def reset_float64_buffers(self) -> None:
        """(Re)compute [`float64_buffers`][posenc.core.encoding.Float64Buffers.float64_buffers] on
        the device they are on (the default device when there are none yet)."""
        device = next((getattr(self, n).device for n in self._float64_buffer_names),
                      torch.get_default_device())
        # On CPU even under a meta device (some definitions read values, e.g. ALiBi's slopes).
        with torch.device("cpu"):
            built = self.float64_buffers()
        for name, tensor in built.items():
            self.register_buffer(name, tensor.to(device, torch.float64), persistent=False)
        self._float64_buffer_names = tuple(built)

    def reset_parameters(self) -> None:
        """Recompute the float64 buffers; call it after ``to_empty()`` (meta-device init)."""
        self.reset_float64_buffers()

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True):
        # nn.Module casts every floating tensor; afterwards, as timm's RotaryEmbeddingDinoV3,
        # frequencies left in another dtype (or uninitialised by to_empty() after a meta build)
        # are recomputed from their definition, and learned fixed-dtype parameters, which have
        # no definition to recompute, get their values back.
        # .data: the storage itself (nn.Module swaps the storage of a parameter and its grad).
        kept = {name: (p.data, None if p.grad is None else p.grad.data)
                for name, p in self.named_parameters(recurse=False)
                if name in self.fixed_dtype_parameters}
        was_meta = any(getattr(self, n).is_meta for n in self._float64_buffer_names)
        super()._apply(fn, recurse)
        for name, (data, grad) in kept.items():
            param = getattr(self, name)  # the same object unless torch made a new one
            if param.dtype != data.dtype:  # in place: optimizers hold the object
                param.grad = None  # a grad must match its parameter's dtype
                param.data = data.to(param.device)
                if grad is not None:
                    param.grad = grad.to(param.device)
        buffers = [getattr(self, n) for n in self._float64_buffer_names]
        if any(b.dtype != torch.float64 for b in buffers) or (
                was_meta and not any(b.is_meta for b in buffers)):
            self.reset_float64_buffers()
        return self
