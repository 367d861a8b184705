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
    off by up to 0.4%, which turns into whole radians at position 1000. Buffers registered
    with :meth:`register_float64_buffer` are moved to the new device but keep float64. They
    are derived from the constructor's arguments, so they are left out of the state dict.
    """

    def register_float64_buffer(self, name: str, tensor: Tensor) -> None:
        self.register_buffer(name, tensor.to(torch.float64), persistent=False)
        self._float64_buffer_names = (*getattr(self, "_float64_buffer_names", ()), name)

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True):
        names = getattr(self, "_float64_buffer_names", ())
        kept = {n: self._buffers.pop(n) for n in names}
        super()._apply(fn, recurse)
        for n, t in kept.items():
            # Applying fn to an empty probe tells which device it moves tensors to.
            device = fn(torch.empty(0, dtype=t.dtype, device=t.device)).device
            self._buffers[n] = t.to(device)
        return self
