"""Calendar fields as embeddings: one table per field, summed (Informer's temporal
embedding, ``embed="timeF"`` aside)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from posenc.core import PositionEncoding
from posenc.core.sinusoidal import sinusoidal_encoding, sinusoidal_inv_freq
from posenc.core.validation import check_choice, check_even, check_positive_int
from torch import Tensor, nn

from .calendar import FIELDS, check_field_range, field_column
from .cyclic import DEFAULT_FIELDS, check_calendar_fields

__all__ = ["CalendarEmbedding"]

EMBED_TYPES = ("learned", "fixed")


class CalendarEmbedding(PositionEncoding):
    """Sum of per-field embedding tables, indexed by the raw field value.

    ``embed_type="learned"`` is Informer's ``TemporalEmbedding(embed_type="learned")``:
    trainable ``nn.Embedding`` tables. ``embed_type="fixed"`` is its ``FixedEmbedding``:
    frozen sinusoidal tables, row ``v`` = the classic interleaved sinusoidal encoding of
    position ``v`` (base 10000). Tables have ``last + 1`` rows (e.g. 13 for months 1..12), as
    Informer's do, so a value indexes its row directly. (Informer buckets minutes by quarter
    hour; here ``"minute"`` is the minute itself, 0..59.)

    Args:
        dim: embedding width (even for ``embed_type="fixed"``).
        fields: names from :data:`~posenc.temporal.cyclic.CYCLE_PERIODS`.
        embed_type: ``"learned"`` or ``"fixed"`` (Informer's argument name).
    """

    kind = "additive"
    reads = "fields"

    def __init__(self, dim: int, fields: Sequence[str] = DEFAULT_FIELDS,
                 embed_type: str = "learned") -> None:
        super().__init__()
        self.embed_type = check_choice(embed_type, "embed_type", EMBED_TYPES)
        self.dim = (check_even(dim, "dim") if embed_type == "fixed"
                    else check_positive_int(dim, "dim"))
        self.fields = check_calendar_fields(fields)
        self.tables = nn.ModuleDict(
            {name: nn.Embedding(FIELDS[name][1] + 1, dim) for name in self.fields})
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for table in self.tables.values():
            if self.embed_type == "learned":
                table.reset_parameters()
                continue
            rows = torch.arange(table.num_embeddings, dtype=torch.float64)
            with torch.no_grad():
                table.weight.copy_(sinusoidal_encoding(rows, sinusoidal_inv_freq(self.dim)))
            table.weight.requires_grad_(False)

    def forward(self, fields: Mapping[str, np.ndarray | Tensor]) -> Tensor:
        """``{name: (...) ints}`` (from :func:`calendar_fields` or a data loader) ->
        ``(..., dim)`` in the tables' dtype, on their device."""
        device = next(iter(self.tables.values())).weight.device
        out = None
        for name, table in self.tables.items():
            column = check_field_range(field_column(fields, name), name)
            column = torch.as_tensor(column, device=device).long()
            out = table(column) if out is None else out + table(column)
        return out

    def extra_repr(self) -> str:
        return f"dim={self.dim}, fields={list(self.fields)}, embed_type={self.embed_type!r}"
