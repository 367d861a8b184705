"""Float64 buffers that follow a module across devices but never across dtypes."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

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
    """

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
        super()._apply(fn, recurse)
        rebuild_on = None
        for n, t in kept.items():
            self._buffers[n] = t
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
        return self


def _target_device(fn: Callable[[Tensor], Tensor], t: Tensor) -> torch.device:
    """The device ``fn`` (a ``Module._apply`` function) moves ``t`` to, read off an empty
    probe so ``fn`` never casts the float64 buffer itself."""
    try:
        return fn(torch.empty(0, dtype=t.dtype, device=t.device)).device
    except NotImplementedError:  # fn copies out of a meta tensor: it moves to a real device
        return fn(torch.empty(0, dtype=t.dtype)).device
