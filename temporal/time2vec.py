"""Time2Vec (Kazemi et al. 2019, "Time2Vec: Learning a Vector Representation of Time")."""

from __future__ import annotations

import torch
from posenc.core import PositionEncoding
from posenc.core.validation import check_position_shape, check_position_values, check_positive_int
from torch import Tensor, nn

__all__ = ["Time2Vec"]


class Time2Vec(PositionEncoding):
    """``t2v(t)[0] = w0 * t + b0`` and ``t2v(t)[i] = sin(wi * t + bi)`` for ``i = 1..dim-1``.

    One linear (trend) component and ``dim - 1`` periodic ones with learned frequencies and
    phases. Frequencies start at N(0, 1), so express times in a unit where the periods of
    interest are a few units to a few hundred (e.g. days), from a nearby origin
    (``time_positions(ts, origin=ts[0], unit="D")``).

    Args:
        dim: output width (>= 1).
    """

    kind = "additive"
    reads = "elapsed"

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = check_positive_int(dim, "dim")
        self.weight = nn.Parameter(torch.empty(dim))
        self.bias = nn.Parameter(torch.empty(dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight)
        nn.init.normal_(self.bias)

    def forward(self, times: Tensor) -> Tensor:
        """``(N,)`` or ``(B, N)`` times -> ``(..., dim)`` in the parameters' dtype.

        The affine map and the sine run in at least float32 (float64 for float64 times),
        even for bfloat16 parameters.
        """
        check_position_values(times, "times")
        return self._forward(times)

    def _forward(self, times: Tensor) -> Tensor:
        check_position_shape(times, "times")
        wide = torch.promote_types(torch.promote_types(times.dtype, self.weight.dtype),
                                   torch.float32)
        z = times.to(wide)[..., None] * self.weight.to(wide) + self.bias.to(wide)
        return torch.cat((z[..., :1], torch.sin(z[..., 1:])), dim=-1).to(self.weight.dtype)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
