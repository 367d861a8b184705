"""Float64 buffers (and fixed-dtype parameters) that follow a module across devices but never
across dtypes: the one ``_apply`` override in posenc."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from .encoding import PositionEncoding

__all__ = ["Float64Buffers"]


class Float64Buffers(PositionEncoding):
    """Base for modules that keep frequencies in float64.

    ``model.to(torch.bfloat16)`` casts every floating buffer; a bf16 inverse frequency is
    off by up to 0.4%, which turns into whole radians at position 1000. The buffers named by
    :meth:`float64_buffers` are moved to the new device but keep float64. They are derived
    from the constructor's arguments, so they are left out of the state dict.

    Subclasses return their buffers from :meth:`float64_buffers` and call
    :meth:`reset_float64_buffers` in ``__init__``; the buffers can then be rebuilt at any
    time. A module built under ``torch.device("meta")`` has meta buffers (no values):
    ``to_empty(device=...)`` recomputes them on the new device, and, as for every posenc
    encoding and torchtune's modules, ``reset_parameters()`` after ``to_empty`` restores the
    whole encoding (learned parameters included).

    Learnable frequencies follow the same rule: the parameters named in
    :attr:`fixed_dtype_parameters` (e.g. RoPE2D's mixed ``freqs``, float32) move with the
    module across devices, in place (an optimizer keeps holding them), but keep their dtype
    under ``.to(torch.bfloat16)``/``.half()``; unlike the buffers they are in the state dict.
    """

    #: Names of parameters that move across devices but keep their dtype.
    fixed_dtype_parameters: tuple[str, ...] = ()

    def float64_buffers(self) -> dict[str, Tensor]:
        """The float64 buffers, computed from the constructor's arguments (it runs under a CPU
        device context). Subclasses override it."""
        return {}

    def _register_float64_buffer(self, name: str, tensor: Tensor) -> None:
        self.register_buffer(name, tensor.to(torch.float64), persistent=False)
        names = getattr(self, "_float64_buffer_names", ())
        if name not in names:
            self._float64_buffer_names = (*names, name)

    def reset_float64_buffers(self) -> None:
        """(Re)compute every buffer of :meth:`float64_buffers` and place it on the device the
        current buffers live on (the default device, meta included, for a new module)."""
        names = getattr(self, "_float64_buffer_names", ())
        device = next((self._buffers[n].device for n in names if self._buffers.get(n)
                       is not None), torch.get_default_device())
        self._rebuild(device)

    def reset_parameters(self) -> None:
        """Recompute the float64 buffers; call it after ``to_empty()`` (meta-device init)."""
        self.reset_float64_buffers()

    def _rebuild(self, device: torch.device) -> None:
        # Computed on CPU even inside a meta-device context (some builders read values, e.g.
        # ALiBi's slopes), then placed: a few hundred numbers at most.
        with torch.device("cpu"):
            built = self.float64_buffers()
        for n, t in built.items():
            self._register_float64_buffer(n, t.to(device))

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
            if p is not None:
                self._parameters[n] = _move_parameter(p, _target_device(fn, p))
        return self


def _move_parameter(p: nn.Parameter, device: torch.device) -> nn.Parameter:
    """``p`` on ``device`` with its dtype, moved in place (optimizers hold the object)."""
    if p.is_meta and device.type != "meta":
        # No values to copy (to_empty after a meta-device build), and a meta tensor cannot
        # become a real parameter's .data: reset_parameters() fills the new one.
        return nn.Parameter(torch.empty_like(p, device=device), requires_grad=p.requires_grad)
    if device != p.device:
        p.data = p.data.to(device)
        if p.grad is not None:
            p.grad = p.grad.to(device)
    return p


def _target_device(fn: Callable[[Tensor], Tensor], t: Tensor) -> torch.device:
    """The device ``fn`` (a ``Module._apply`` function) moves ``t`` to, read off an empty
    probe so ``fn`` never casts the float64 buffer itself."""
    try:
        return fn(torch.empty(0, dtype=t.dtype, device=t.device)).device
    except NotImplementedError:  # fn copies out of a meta tensor: it moves to a real device
        return fn(torch.empty(0, dtype=t.dtype)).device
