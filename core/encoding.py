"""What every posenc encoding shares: the base class, its kind, and the angles.

The argument and position checks live in ``posenc.core._checks``. :func:`angles` are formed
in float64 and reduced modulo 2*pi before narrowing (a float32 ``1e6 * inv_freq`` is off by
~0.06 rad). :data:`LAYOUTS`: angle ``i < F`` fills channels ``2i, 2i + 1`` (``"interleaved"``: the
sinusoidal paper, GPT-J) or ``i, i + F`` (``"half"``: tensor2tensor, GPT-NeoX/Llama).
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
    :data:`KINDS`); :meth:`no_weight_decay` names every parameter (they place tokens, so decay
    would pull positions together; timm's convention, read by :func:`no_weight_decay_names`).
    """

    kind: ClassVar[str]

    def no_weight_decay(self) -> set[str]:
        """Names (relative to this module) of the parameters to keep out of weight decay."""
        return {name for name, _ in self.named_parameters()}


def encoding_kind(encoding: object) -> str:
    """The ``kind`` (one of :data:`KINDS`) that ``encoding`` (a module or a class) declares;
    None is ``"none"``, anything without one raises ``TypeError``."""
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
    """Base for modules whose frequencies keep float64 when cast (a bf16 inverse frequency is
    off by whole radians at position 1000).

    The buffers of :meth:`float64_buffers` (not in the state dict) follow the module across
    devices but keep float64; subclasses call :meth:`reset_float64_buffers` in ``__init__``.
    ``to_empty()`` after a meta-device build recomputes them. Parameters named in
    :attr:`fixed_dtype_parameters` move across devices in place but keep their dtype.
    """

    #: Names of parameters that move across devices but keep their dtype.
    fixed_dtype_parameters: tuple[str, ...] = ()

    def float64_buffers(self) -> dict[str, Tensor]:
        """The float64 buffers, from the constructor's arguments (run on CPU); to override."""
        return {}

    def reset_float64_buffers(self) -> None:
        """(Re)compute :meth:`float64_buffers` on the current buffers' (or default) device."""
        names = getattr(self, "_float64_buffer_names", ())
        device = next((self._buffers[n].device for n in names if self._buffers.get(n) is not None),
                      torch.get_default_device())
        self._rebuild(device)

    def reset_parameters(self) -> None:
        """Recompute the float64 buffers; call it after ``to_empty()`` (meta-device init)."""
        self.reset_float64_buffers()

    def _rebuild(self, device: torch.device) -> None:
        # On CPU even under a meta device (some builders read values, e.g. ALiBi's slopes).
        with torch.device("cpu"):
            built = self.float64_buffers()
        for name, tensor in built.items():
            self.register_buffer(name, tensor.to(device, torch.float64), persistent=False)
        names = getattr(self, "_float64_buffer_names", ())
        self._float64_buffer_names = (*names, *(n for n in built if n not in names))

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True):
        names = getattr(self, "_float64_buffer_names", ())
        kept = {n: self._buffers.pop(n) for n in names}
        params = {n: self._parameters.pop(n) for n in self.fixed_dtype_parameters
                  if n in self._parameters}
        try:
            super()._apply(fn, recurse)
        finally:  # an _apply that fails leaves these unchanged, not missing
            self._buffers.update(kept)
            self._parameters.update(params)
        rebuild_on = None
        for n, t in kept.items():
            if t is None:
                continue
            device = _target_device(fn, t)
            if t.is_meta and device.type != "meta":
                # A meta buffer has no values to copy (to_empty after a meta-device build).
                rebuild_on = device
            else:
                self._buffers[n] = t.to(device)
        if rebuild_on is not None:
            self._rebuild(rebuild_on)
        for n, p in params.items():
            if p is None:
                continue
            device = _target_device(fn, p)
            if p.is_meta and device.type != "meta":
                # A meta tensor cannot become a real parameter's .data: reset_parameters() fills.
                self._parameters[n] = nn.Parameter(torch.empty_like(p, device=device),
                                                   requires_grad=p.requires_grad)
            elif device != p.device:  # in place: optimizers hold the object
                p.data = p.data.to(device)
                if p.grad is not None:
                    p.grad = p.grad.to(device)
        return self


def _target_device(fn: Callable[[Tensor], Tensor], t: Tensor) -> torch.device:
    """The device ``fn`` (a ``Module._apply`` function) moves ``t`` to, read off an empty probe."""
    try:
        return fn(torch.empty(0, dtype=t.dtype, device=t.device)).device
    except NotImplementedError:  # fn copies out of a meta tensor: it moves to a real device
        return fn(torch.empty(0, dtype=t.dtype)).device
