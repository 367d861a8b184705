"""Attention biases from 2D patch offsets: a learned table (Swin/BEiT), a continuous MLP (SwinV2)
and 2D ALiBi.

Every bias is called as ``bias(query_positions, key_positions)`` with ``(N, 2)``/``(B, N, 2)``
coordinates or [`GridPositions`][posenc.spatial.coords.GridPositions] and returns float32
``(B or 1, H, P + Nq, P + Nk)``, zero at the ``P`` prefix tokens (cls, registers). Offsets are
``query - key`` (Swin's convention).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from posenc.core._checks import (
    _KNOWN_FINITE,
    check_choice,
    check_finite,
    check_pair_values,
    check_positive_int,
)
from posenc.core.bias import (
    PairBias,
    ScoreMod,
    alibi_slopes,
    pair_batch,
    token_lookup,
)
from posenc.core.encoding import Float64Buffers
from posenc.core.positions import relative_positions
from torch import Tensor, nn

from .coords import GridPositions, check_grid_size, grid_position_shape

__all__ = ["RESIZE", "resize_relative_table", "RelativeBias2D", "ContinuousBias2D", "ALiBi2D"]


#: The ways a learned relative table is resized to another grid
#: ([`resize_relative_table`][posenc.spatial.bias.resize_relative_table]).
RESIZE = ("bicubic", "geometric")


def _geometric_axis(src: int, dst: int, device: torch.device) -> Tensor:
    """``(src,)`` float32 offsets at which BEiT places a table axis of ``src = 2n - 1`` entries
    stretched to ``dst = 2n' - 1``: ``0, +-1, +-(1 + q), ...``, ``q`` from timm's ``_calc``
    bisection step for step (the last midpoint tried)."""
    half = src // 2
    left, right = 1.01, 1.5
    while right - left > 1e-6:
        q = (left + right) / 2.0
        if (1.0 - q ** half) / (1.0 - q) > dst // 2:
            right = q
        else:
            left = q
    # Made on the device: a tensor from a Python list would wait for the device's queue.
    outer = torch.cumsum(q ** torch.arange(half, device=device, dtype=torch.float32), dim=0)
    return torch.cat((-outer.flip(0), outer.new_zeros(1), outer))


def _linear_weights(points: Tensor, targets: Tensor) -> Tensor:
    """``(T, S)`` weights of linear interpolation from the increasing ``(S,)`` ``points`` to
    ``(T,)`` ``targets``, the nearest end beyond them (as timm's ``RegularGridInterpolator``)."""
    size = points.shape[0]
    if size == 1:
        return targets.new_ones(targets.shape[0], 1)
    clamped = torch.minimum(torch.maximum(targets, points[0]), points[-1])
    right = torch.searchsorted(points, clamped).clamp(1, size - 1)
    low, high = points[right - 1], points[right]
    weight = (clamped - low) / (high - low)
    out = targets.new_zeros(targets.shape[0], size)
    out.scatter_(1, (right - 1)[:, None], (1.0 - weight)[:, None])
    return out.scatter_add(1, right[:, None], weight[:, None])


def resize_relative_table(table: Tensor, grid_size: int | tuple[int, int],
                          new_grid_size: int | tuple[int, int], mode: str = "bicubic") -> Tensor:
    """Resize a learned relative-position table to the offsets of another grid.

    Args:
        table: ``((2r - 1)(2c - 1), H)`` values per offset, in
            [`RelativeBias2D`][posenc.spatial.RelativeBias2D]'s (Swin's) layout, for
            ``grid_size = (r, c)``.
        grid_size: ``rows`` or ``(rows, cols)`` of the table's grid.
        new_grid_size: the same for the target grid ``(r', c')``.
        mode: ``"bicubic"``: the table as an image, ``F.interpolate(mode="bicubic",
            align_corners=False)`` to ``(2r' - 1, 2c' - 1)`` (timm's
            ``resize_rel_pos_bias_table_simple``). ``"geometric"``: BEiT's fine-tuning resize,
            timm 1.0.31's ``resize_rel_pos_bias_table`` without scipy: the entries placed at
            offsets ``0, +-1, +-(1 + q), ...`` and read linearly at the new grid's integer
            offsets; as there, an unchanged axis is placed too whenever the grid changes.

    Returns:
        ``((2r' - 1)(2c' - 1), H)``, ``table``'s dtype and device (computed in float32;
        differentiable in ``table``); ``"geometric"`` returns ``table`` itself for the same grid.
    """
    old, new = check_grid_size(grid_size, "grid_size"), check_grid_size(new_grid_size,
                                                                        "new_grid_size")
    check_choice(mode, "mode", RESIZE)
    if not isinstance(table, Tensor):
        raise TypeError(f"table must be a torch.Tensor, got {type(table).__name__}")
    rows, cols = old
    if table.ndim != 2 or table.shape[0] != (2 * rows - 1) * (2 * cols - 1):
        raise ValueError(f"table must have shape ((2 rows - 1) * (2 cols - 1), heads) = "
                         f"({(2 * rows - 1) * (2 * cols - 1)}, H) for grid_size {old}, got "
                         f"{tuple(table.shape)}")
    heads = table.shape[1]
    image = table.float().t().reshape(heads, 2 * rows - 1, 2 * cols - 1)
    if mode == "bicubic":
        resized = F.interpolate(image[None], size=(2 * new[0] - 1, 2 * new[1] - 1),
                                mode="bicubic", align_corners=False)[0]
    elif tuple(old) == tuple(new):
        return table
    else:
        # Bilinear on the rectilinear grid of placed offsets, one 1D interpolation per axis.
        row_w, col_w = (_linear_weights(
            _geometric_axis(2 * n - 1, 2 * m - 1, table.device),
            torch.arange(1 - m, m, device=table.device, dtype=torch.float32))
            for n, m in zip(old, new, strict=True))
        resized = torch.einsum("ij,hjk,lk->hil", row_w, image, col_w)
    return resized.reshape(heads, -1).t().to(table.dtype)


def _inputs(query_positions, key_positions) -> tuple[GridPositions, GridPositions, tuple | None]:
    """Shapes of the positions (values are checked by the public methods, before)."""
    q = grid_position_shape(query_positions, "query_positions")
    k = q if key_positions is query_positions else grid_position_shape(key_positions,
                                                                      "key_positions")
    grid = q.grid_size if q.grid_size is not None and k.grid_size == q.grid_size else None
    return q, k, grid


def _offsets(q: GridPositions, k: GridPositions) -> Tensor:
    """``(B or 1, Nq, Nk, 2)`` offsets ``query - key``."""
    return -relative_positions(q.coords, k.coords, coord_dims=1)


def _pad_prefix(bias: Tensor, q: GridPositions, k: GridPositions) -> Tensor:
    if q.num_prefix_tokens or k.num_prefix_tokens:
        bias = F.pad(bias, (k.num_prefix_tokens, 0, q.num_prefix_tokens, 0))
    return bias


def _lattice_offsets(grid: tuple[int, int], device: torch.device) -> Tensor:
    """All integer offsets of a grid, ``(2 rows - 1, 2 cols - 1, 2)``, from ``-(n-1)`` up."""
    axes = [torch.arange(1 - n, n, device=device, dtype=torch.float32) for n in grid]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)


def _check_lattice(q: GridPositions, k: GridPositions, grid: tuple[int, int] | None) -> None:
    """Raise unless every offset of ``q`` and ``k`` is an integer offset of ``grid`` (None:
    nothing to check), reading a few values (`_representative_offsets`) outside tracing.
    Coordinates a model made from the grid's sizes (``known_finite``, carrying that grid) lie
    on it by construction and are not read, as their finiteness is not."""
    made_on_grid = grid is not None and q.grid_size == k.grid_size == grid and all(
        getattr(p.coords, _KNOWN_FINITE, False) for p in (q, k))
    if grid is None or made_on_grid or torch.compiler.is_compiling():
        return
    rows, cols = grid
    offsets = _representative_offsets(q, k)
    if offsets.numel():
        if offsets.is_floating_point() and bool((offsets != offsets.round()).any()):
            raise ValueError("coordinates must be integer patch positions for a learned relative "
                             "table, got fractional offsets")
        span = offsets.abs().amax(dim=tuple(range(offsets.ndim - 1)))
        if span[0] > rows - 1 or span[1] > cols - 1:
            raise ValueError(
                f"offsets up to ({span[0].item():g}, {span[1].item():g}) do not fit a table for "
                f"grid {tuple(grid)} (offsets up to ({rows - 1}, {cols - 1})); pass "
                "GridPositions(coords, grid_size=...) to resize the table to the grid")


def _lattice_rows(offsets: Tensor, grid: tuple[int, int]) -> Tensor:
    """Row of each integer offset in a flattened ``(2 rows - 1) x (2 cols - 1)`` table (also
    per pair, inside a score_mod); the offsets are checked by `_check_lattice`."""
    rows, cols = grid
    offsets = offsets.round().long() if offsets.is_floating_point() else offsets.long()
    return (offsets[..., 0] + rows - 1) * (2 * cols - 1) + offsets[..., 1] + cols - 1


def _lattice_index(q: GridPositions, k: GridPositions, grid: tuple[int, int]) -> Tensor:
    """``(B or 1, P + Nq, P + Nk)``: one more than the table row (`_lattice_rows`) of every
    pair's offset ``query - key``, and 0 at a pair with a prefix token (where `_gather` reads
    zero; a constant, so that an export keeps the grid dynamic). A row is linear in the
    offset, so it is the query's row minus the key's plus the centre's, each token's taken
    from its coordinates less the first key's (integers, by `_check_lattice`): per-token
    arithmetic and one broadcast subtraction instead of per-pair offsets."""
    base = (k.coords if k.coords.shape[-2] else q.coords)[..., :1, :]
    centre = _lattice_rows(base.new_zeros(2), grid)
    row_q, row_k = (_lattice_rows(p.coords - base, grid) for p in (q, k))
    index = (row_q + (centre + 1))[..., :, None] - row_k[..., None, :]
    index = index if index.ndim == 3 else index[None]
    if q.num_prefix_tokens or k.num_prefix_tokens:
        index = F.pad(index, (k.num_prefix_tokens, 0, q.num_prefix_tokens, 0))
    return index


def _representative_offsets(q: GridPositions, k: GridPositions) -> Tensor:
    """``(M, 2)`` offsets of ``O(Nq + Nk)`` pairs whose check by `_check_lattice` holds for
    all ``Nq * Nk``: the extremes per axis, ``q_i - k_0`` and ``q_0 - k_j`` (``q_i - k_j`` is
    their sum minus ``q_0 - k_0``)."""
    qc, kc = q.coords, k.coords
    if not qc.shape[-2] or not kc.shape[-2]:
        return qc.new_zeros(0, 2)
    extremes = torch.stack((qc.amax(-2) - kc.amin(-2), qc.amin(-2) - kc.amax(-2)), dim=-2)
    parts = (qc - kc[..., :1, :], qc[..., :1, :] - kc, extremes)
    return torch.cat([part.reshape(-1, 2) for part in parts])


def _offset_score_mod(q: GridPositions, k: GridPositions,
                      offset_bias: Callable[[Tensor, Tensor], Tensor]) -> ScoreMod:
    """ScoreMod of ``offset_bias(query - key, h)`` at patch pairs and 0 at prefix tokens'."""
    q_at, k_at = token_lookup(q.coords, coord_dims=1), token_lookup(k.coords, coord_dims=1)
    q_prefix, k_prefix = q.num_prefix_tokens, k.num_prefix_tokens

    def bias(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        offset = q_at(b, (q_idx - q_prefix).clamp(min=0)) - k_at(b, (kv_idx - k_prefix).clamp(
            min=0))
        value = offset_bias(offset, h)
        if q_prefix or k_prefix:
            value = torch.where((q_idx < q_prefix) | (kv_idx < k_prefix), 0.0, value)
        return value

    return ScoreMod(bias, pair_batch(q.coords, k.coords, coord_dims=1),
                    q_prefix + q.coords.shape[-2], k_prefix + k.coords.shape[-2], q.coords.device)


def _gather(table_t: Tensor, index: Tensor) -> Tensor:
    """``table_t`` ``(H, L)`` (per head, a value per lattice offset) at ``index``
    ``(B, Nq, Nk)`` (`_lattice_index`: row ``i`` at ``i + 1``, zero at 0) -> ``(B, H, Nq,
    Nk)``."""
    batch, nq, nk = index.shape
    out = F.pad(table_t, (1, 0)).index_select(1, index.reshape(-1)).unflatten(1, (batch, nq, nk))
    return out.transpose(0, 1)


class RelativeBias2D(PairBias):
    """Learned relative-position bias per head (Swin, BEiT), from 2D patch offsets.

    ``table`` has one row per offset ``(dr, dc) = query - key`` with ``|dr| < rows`` and
    ``|dc| < cols``, at row ``(dr + rows - 1) * (2 cols - 1) + dc + cols - 1`` (Swin's
    ``relative_position_bias_table``), resized for a
    [`GridPositions`][posenc.spatial.coords.GridPositions] on another grid. Coordinates must be
    integers; fractional offsets and offsets beyond the grid raise.

    Args:
        num_heads: attention heads.
        grid_size: ``rows`` or ``(rows, cols)`` of the grid the table is learned for.
        resize: [`resize_relative_table`][posenc.spatial.bias.resize_relative_table]'s ``mode``,
            ``"bicubic"`` or ``"geometric"`` (which needs static image sizes under
            ``torch.export``).
    """

    def __init__(self, num_heads: int, grid_size: int | tuple[int, int], *,
                 resize: str = "bicubic") -> None:
        super().__init__()
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.grid_size = check_grid_size(grid_size)
        self.resize = check_choice(resize, "resize", RESIZE)
        rows, cols = self.grid_size
        self.table = nn.Parameter(torch.empty((2 * rows - 1) * (2 * cols - 1), num_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.table, std=0.02)

    def table_for_grid(self, grid_size: int | tuple[int, int]) -> Tensor:
        """The table resized to ``grid_size``'s offsets, ``((2r'-1)(2c'-1), H)``."""
        size = check_grid_size(grid_size)
        if self.resize == "geometric":
            if torch.compiler.is_exporting() and any(isinstance(n, torch.SymInt) for n in size):
                # BEiT's placement is a Python bisection over the sizes.
                raise ValueError("RelativeBias2D(resize='geometric') needs concrete grid sizes: "
                                 "export with a static image size, or use resize='bicubic'")
        elif not torch.compiler.is_exporting() and tuple(size) == tuple(self.grid_size):
            return self.table
        # Exporting, bicubic resizes even at the table's own grid: a comparison would pin it.
        return resize_relative_table(self.table, self.grid_size, size, self.resize)

    def forward(self, query_positions: Tensor | GridPositions,
                key_positions: Tensor | GridPositions) -> Tensor:
        """Positions ``(Nq, 2)``/``(B, Nq, 2)`` (or
        [`GridPositions`][posenc.spatial.coords.GridPositions]) and the keys' -> float32 bias
        ``(B or 1, H, P + Nq, P + Nk)``."""
        q, k, size, table = self._lattice(query_positions, key_positions)
        return _gather(table.float().t(), _lattice_index(q, k, size))

    def score_mod(self, query_positions: Tensor | GridPositions,
                  key_positions: Tensor | GridPositions) -> ScoreMod:
        """[`forward`][posenc.spatial.RelativeBias2D.forward]'s bias as FlexAttention's score_mod,
        per pair."""
        q, k, size, table = self._lattice(query_positions, key_positions)
        return _offset_score_mod(q, k, lambda offset, h: table[_lattice_rows(offset, size), h])

    def _lattice(self, query_positions: Tensor | GridPositions,
                 key_positions: Tensor | GridPositions
                 ) -> tuple[GridPositions, GridPositions, tuple[int, int], Tensor]:
        """The checked positions, the grid their offsets index and the table resized to it."""
        check_pair_values(query_positions, key_positions)
        q, k, grid = _inputs(query_positions, key_positions)
        size = self.grid_size if grid is None else grid
        _check_lattice(q, k, size)
        return q, k, size, self.table if grid is None else self.table_for_grid(grid)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, grid_size={self.grid_size}, resize={self.resize!r}"


class ContinuousBias2D(PairBias):
    """SwinV2 continuous position bias: an MLP of log-spaced 2D offsets, ``16 * sigmoid``.

    ``bias = 16 * sigmoid(mlp(f(dr), f(dc)))`` with ``f(d) = sign(d) * log2(1 + s |d|) / log2(8)``
    and ``mlp = Linear(2, hidden) -> ReLU -> Linear(hidden, H, bias=False)`` (SwinV2's
    ``cpb_mlp``). Defined for any offset, fractional or beyond the training grid.

    Args:
        num_heads: attention heads.
        hidden: MLP width (512 in SwinV2).
        ref_grid_size: SwinV2's (pretrained) window: ``s = 8 / (n - 1)`` per axis, so its
            offsets span [-8, 8]. None keeps raw patch offsets (``s = 1``).
    """

    def __init__(self, num_heads: int, hidden: int = 512, *,
                 ref_grid_size: int | tuple[int, int] | None = None) -> None:
        super().__init__()
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.hidden = check_positive_int(hidden, "hidden")
        self.ref_grid_size = None if ref_grid_size is None else check_grid_size(
            ref_grid_size, "ref_grid_size")
        if self.ref_grid_size is not None and min(self.ref_grid_size) < 2:
            raise ValueError(f"ref_grid_size must be >= 2 per axis, got {self.ref_grid_size}")
        self.offset_scale = (1.0, 1.0) if self.ref_grid_size is None else tuple(
            8.0 / (n - 1) for n in self.ref_grid_size)
        self.mlp = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(inplace=True),
                                 nn.Linear(hidden, num_heads, bias=False))

    def reset_parameters(self) -> None:
        """Re-initialise the MLP as ``nn.Linear`` does (in construction order, so a seeded
        reset after a meta-device build equals a seeded normal build)."""
        self.mlp[0].reset_parameters()
        self.mlp[2].reset_parameters()

    def log_offsets(self, offsets: Tensor) -> Tensor:
        """SwinV2's log-spaced coordinates of ``(..., 2)`` offsets (float32)."""
        # Scalars, not a tensor made from them: a host-to-device copy would synchronise a GPU.
        rows, cols = (offsets[..., axis].float() * scale
                      for axis, scale in enumerate(self.offset_scale))
        scaled = torch.stack((rows, cols), dim=-1)
        return torch.sign(scaled) * torch.log2(scaled.abs() + 1.0) / math.log2(8)

    def bias_of_offsets(self, offsets: Tensor) -> Tensor:
        """``(..., 2)`` offsets ``query - key`` -> ``(..., H)`` float32 bias."""
        if not isinstance(offsets, Tensor):
            raise TypeError(f"offsets must be a torch.Tensor, got {type(offsets).__name__}")
        if offsets.ndim < 1 or offsets.shape[-1] != 2:
            raise ValueError(f"offsets must have shape (..., 2), got {tuple(offsets.shape)}")
        return self._bias_of_offsets(check_finite(offsets, "offsets"))

    def _bias_of_offsets(self, offsets: Tensor) -> Tensor:
        bias_t = self._bias_t(offsets.reshape(-1, 2))
        return bias_t.t().reshape(*offsets.shape[:-1], self.num_heads)

    def _bias_t(self, offsets: Tensor) -> Tensor:
        """``(M, 2)`` offsets -> ``(H, M)`` float32 bias, transposed so every matmul of the
        backward is ``M`` columns wide (a third faster on CPU)."""
        first, _, second = self.mlp
        # Float32 even under autocast: in bf16 the log offsets of far patches 60 and 61 collide.
        with torch.autocast(offsets.device.type, enabled=False):
            x_t = self.log_offsets(offsets).t()
            hidden_t = torch.relu(torch.addmm(first.bias.float()[:, None], first.weight.float(),
                                              x_t))
            return 16 * torch.sigmoid(second.weight.float() @ hidden_t)

    def forward(self, query_positions: Tensor | GridPositions,
                key_positions: Tensor | GridPositions) -> Tensor:
        """Positions ``(Nq, 2)``/``(B, Nq, 2)`` (or
        [`GridPositions`][posenc.spatial.coords.GridPositions]) and the keys' -> float32 bias
        ``(B or 1, H, P + Nq, P + Nk)``. Positions on a shared grid must lie on
        it: its lattice's bias is computed once and gathered."""
        check_pair_values(query_positions, key_positions)
        q, k, grid = _inputs(query_positions, key_positions)
        _check_lattice(q, k, grid)
        if grid is None:
            return _pad_prefix(self._bias_of_offsets(_offsets(q, k)).permute(0, 3, 1, 2), q, k)
        offsets = _lattice_offsets(grid, q.coords.device).flatten(0, 1)
        return _gather(self._bias_t(offsets), _lattice_index(q, k, grid))

    def extra_repr(self) -> str:
        return (f"num_heads={self.num_heads}, hidden={self.hidden}, "
                f"ref_grid_size={self.ref_grid_size}")


class ALiBi2D(PairBias, Float64Buffers):
    """2D ALiBi: ``bias = -slope_h * ||query - key||`` (Euclidean patch distance), with ALiBi's
    slopes ([`posenc.core.bias.alibi_slopes`][posenc.core.bias.alibi_slopes], float64 under any
    cast) for ``num_heads``."""

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.reset_float64_buffers()

    def float64_buffers(self) -> dict[str, Tensor]:
        return {"slopes": alibi_slopes(self.num_heads)}

    def forward(self, query_positions: Tensor | GridPositions,
                key_positions: Tensor | GridPositions) -> Tensor:
        check_pair_values(query_positions, key_positions)
        q, k, _ = _inputs(query_positions, key_positions)
        distance = torch.linalg.vector_norm(_offsets(q, k).float(), dim=-1)
        return _pad_prefix(distance[:, None] * -self.slopes.float()[:, None, None], q, k)

    def score_mod(self, query_positions: Tensor | GridPositions,
                  key_positions: Tensor | GridPositions) -> ScoreMod:
        check_pair_values(query_positions, key_positions)
        q, k, _ = _inputs(query_positions, key_positions)
        slopes = self.slopes.float()
        return _offset_score_mod(q, k, lambda offset, h: torch.linalg.vector_norm(
            offset.float(), dim=-1) * -slopes[h])

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}"
