"""NoPE: no position encoding, the baseline every encoding is measured against."""

from __future__ import annotations

import torch
from torch import Tensor

from .encoding import PositionEncoding

__all__ = ["NoPE"]


class NoPE(PositionEncoding):
    """Identity encoding. Usable wherever an encoding is accepted (``None`` works too).

    As an additive encoding it returns a 0-d zero that broadcasts against any embedding;
    :class:`~posenc.core.MultiheadAttention` treats it like ``None`` as rotary or bias.
    """

    kind = "none"

    def forward(self, positions: Tensor) -> Tensor:
        """Any positions -> 0-d zero of float32 on the positions' device."""
        return positions.new_zeros((), dtype=torch.float32)
