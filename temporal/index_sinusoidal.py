"""Sinusoidal encoding of each token's *index*: the equally-spaced baseline that continuous-time
encodings are measured against (the irregular-time study's ``index_sinusoidal`` row)."""

from __future__ import annotations

import torch
from posenc.core import PositionEncoding, SinusoidalEncoding
from posenc.core.validation import check_position_shape, check_position_values
from torch import Tensor

__all__ = ["IndexSinusoidal"]


class IndexSinusoidal(PositionEncoding):
    """Core's sinusoidal encoding of each token's index, as if samples were equally spaced.

    Context observations get ``0, -1, -2, ...`` counting back from the last one, query
    (future, unobserved) tokens ``1, 2, ...`` in time order; unobserved tokens at or before
    the origin (padding) get the index of the observations after them. The gaps of irregular
    sampling are invisible to it: stretching every gap gives the same output.

    It reads ``"deltas"`` (as :class:`TimeDelta`): elapsed time from the forecast origin and
    the observed-token mask.

    Args:
        dim: even output width.
        base: wavelength base of the sinusoids.
    """

    kind = "additive"
    reads = "deltas"

    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        self.encoding = SinusoidalEncoding(dim, base=base)
        self.dim = self.encoding.dim

    def forward(self, elapsed: Tensor, observed: Tensor, *,
                dtype: torch.dtype = torch.float32) -> Tensor:
        """``elapsed`` ``(N,)`` or ``(B, N)`` int or float time from the forecast origin (> 0
        in the future), ``observed`` of the same shape, bool (a value is present) ->
        ``(*elapsed.shape, dim)`` of ``dtype``."""
        check_position_values(elapsed, "elapsed")
        return self._forward(elapsed, observed, dtype=dtype)

    def _forward(self, elapsed: Tensor, observed: Tensor, *,
                 dtype: torch.dtype = torch.float32) -> Tensor:
        elapsed = check_position_shape(elapsed, "elapsed")
        if not isinstance(observed, Tensor) or observed.dtype != torch.bool \
                or observed.shape != elapsed.shape:
            got = f"{observed.dtype} of shape {tuple(observed.shape)}" if isinstance(
                observed, Tensor) else type(observed).__name__
            raise TypeError(f"observed must be a bool tensor of the shape of elapsed "
                            f"{tuple(elapsed.shape)}, got {got}")
        # Counted, not sorted: ties and any token order give the same indices.
        later = elapsed[..., None, :] > elapsed[..., :, None]  # [..., i, j]: j after i
        earlier = elapsed[..., None, :] < elapsed[..., :, None]
        future = (elapsed > 0) & ~observed
        back = -(later & observed[..., None, :]).sum(-1)
        ahead = 1 + (earlier & future[..., None, :]).sum(-1)
        index = torch.where(future, ahead, back).to(torch.float32)
        return self.encoding._forward(index, dtype=dtype)  # counts: finite by construction
