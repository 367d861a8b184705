"""Learned-rotation 2D rotary encodings: LieRE and ComRoPE.

Both rotate q and k of head ``h`` at patch coordinate ``p = (row, col)`` by the block-diagonal
orthogonal ``R_h(p) = exp(p_row * A_h,row + p_col * A_h,col)``, each block of ``b`` consecutive
channels with its own ``b x b`` skew-symmetric generators ``A``: free ones, ``A = P - P^T``
(Ostmeier et al. 2024, LieRE), or commuting ones, ``A_axis = theta[axis, block] * (P - P^T)``
(Yu et al. 2025, ComRoPE-LD). The score depends only on the offset exactly when the two axes'
generators commute: ComRoPE's always do (RoPE-Mixed in a learned orthogonal basis); LieRE's
``init="mixed"`` starts there (RoPE-Mixed's draw) and training moves it off.

Numerics: ``sum p_a A_a`` and its exponential are formed in float64 (float32 on MPS), never
under autocast. The exponential is [`linear_expm`][posenc.spatial.liere.linear_expm], not
``torch.linalg.matrix_exp``, whose CUDA kernel synchronises with the host on every call.

Which path runs where: on the CPU outside ``torch.compile``, LieRE takes one exponential per
distinct coordinate and ComRoPE none: ``exp(t S) = I + U (T(w t) - I) U^T`` from one
``torch.linalg.eigh`` of ``-iS`` per head and block (float64), an angle ``w t`` per token and
plane, applied with the shared ``U`` (a [`BlockRotation`][posenc.spatial.liere.BlockRotation]
in planes); where two of ``S``'s eigenvalues (nearly) coincide (a zero block; a repeated turn),
whose eigenvectors have no gradient, it takes the exponentials instead (one per distinct row
and column value). On a GPU and while compiling, where eigh and the distinct values would
synchronise with the host, every token takes its exponential (ComRoPE's of the summed
generators).
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from posenc.core._checks import check_base, check_choice, check_positive_float, check_positive_int
from posenc.core.encoding import wide_dtype
from posenc.core.rope import check_rotation_device
from torch import Tensor, nn

from .coords import NORMALIZE, GridPositions
from .rope import _Rotary, init_mixed_freqs

__all__ = ["BlockRotation", "LieRE", "linear_expm", "taylor_degree"]

VARIANTS = ("liere", "comrope")
INITS = ("mixed", "random")

# Scaling and squaring: every set ``g`` of generators is scaled by ``2**-s_g`` so that ``sum_a
# |p_a| |A_a|_1 <= 1`` at every point, its Taylor series is cut after the degree the precision
# wanted needs (truncation <= e / (m + 1)!: 1/17! ~ 3e-15 for float64; 1/13! ~ 2e-10 for
# float32, whose results are rounded from float64), then squared s_g times. Off the CPU and while
# compiling, the loop runs a fixed _MAX_SQUARINGS times (masked, no host read); on the CPU it
# stops after the largest s_g, with the same result.
_MAX_SQUARINGS = 20  # exact up to a 1-norm of 2**20 ~ 1e6 rad; beyond that: NaN
# Per token, q and k are turned by one product where each one's products would have fewer
# multiply-adds than this (torch's CPU bmm's plain loop; BlockRotation.for_scores).
_SMALL_PRODUCT = 400
# ComRoPE on the CPU: generators whose eigenvalues are closer than this (relative to the
# largest) take the exponential rather than their planes (see _planes).
_PLANE_GAP = 1e-6


def _reads_are_free(t: Tensor) -> bool:
    """Whether reading ``t``'s values costs no device synchronisation (a CPU tensor, outside
    ``torch.compile``/``torch.export``)."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def taylor_degree(dtype: torch.dtype) -> int:
    """The Taylor degree [`linear_expm`][posenc.spatial.liere.linear_expm] needs for results
    rounded to ``dtype``: 16 for float64, 12 for narrower types."""
    return 16 if dtype == torch.float64 else 12


_MONOMIALS: dict[tuple[int, torch.device], tuple[Tensor, Tensor]] = {}


def _monomials(degree: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """The monomials ``r^i c^j`` with ``i + j <= degree``, by degree ``k`` and then ``j``
    (``(k, 0), (k - 1, 1), ..., (0, k)``): their exponents ``(n, 2)`` and ``1 / (i + j)!``
    (float64), made once per device (a copy from the host on every call would synchronise a GPU
    with it; a dict: ``torch.compile`` warns about ``lru_cache``)."""
    key = (degree, torch.device(device))
    if key not in _MONOMIALS:
        exponents = [(k - j, j) for k in range(degree + 1) for j in range(k + 1)]
        _MONOMIALS[key] = (
            torch.tensor(exponents, dtype=torch.long, device=device),
            torch.tensor([1 / math.factorial(sum(m)) for m in exponents], dtype=torch.float64,
                         device=device))
    return _MONOMIALS[key]


def linear_expm(points: Tensor, generators: Tensor, degree: int = 16) -> Tensor:
    """``exp(r A + c B)`` for every point ``(r, c)`` and every set of generators ``(A, B)``:
    points ``(K, 2)``, (skew-symmetric) generators ``(G, 2, b, b)`` -> ``(G, K, b, b)``, in the
    points' dtype, without a host synchronisation; a set whose scaled 1-norm exceeds ``2**20`` at
    some point, or that is not finite, comes back NaN at every point rather than inaccurate.

    The Taylor series of ``exp(r A + c B)``, its terms grouped by how often each generator
    occurs, is a polynomial in the coordinates, ``sum r^i c^j W_ij / (i + j)!``, ``W_ij`` the sum
    of the words with ``i`` letters ``A`` and ``j`` letters ``B``, shared by all points (``W_ij =
    A W_(i-1)j + B W_i(j-1)``). So the coefficients are built once per set, then one batched GEMM
    with the points' monomials gives every point's polynomial, which is squared as scaling and
    squaring does. ``degree``: where the series is cut
    ([`taylor_degree`][posenc.spatial.liere.taylor_degree] of the precision wanted).
    """
    for name, tensor, ndim in (("points", points, 2), ("generators", generators, 4)):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.ndim != ndim:
            raise ValueError(f"{name} must have {ndim} dimensions, got shape "
                             f"{tuple(tensor.shape)}")
    if points.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"points must be float32 or float64 (the exponential's precision), got "
                        f"{points.dtype}")
    if points.shape[1] != 2 or generators.shape[1] != 2 \
            or generators.shape[2] != generators.shape[3]:
        raise ValueError(f"points must have shape (K, 2) and generators (G, 2, b, b), got "
                         f"{tuple(points.shape)} and {tuple(generators.shape)}")
    r, order = _sorted_linear_expm(points, generators, check_positive_int(degree, "degree"))
    return r if order is None else r.index_select(0, torch.argsort(order))


def _sorted_linear_expm(points: Tensor, generators: Tensor, degree: int
                        ) -> tuple[Tensor, Tensor | None]:
    """[`linear_expm`][posenc.spatial.liere.linear_expm] with its sets where the squarings left
    them: ``(r, order)``, ``r[i]`` set ``order[i]``'s exponentials (on the CPU, sorted by their
    squaring counts), ``order`` None where the sets keep theirs (no value read). Arguments as
    `linear_expm` checks them (LieRE's and ComRoPE's are made so; they take this every block
    and forward)."""
    r, s, order = _scaled_taylor(points, generators, degree)
    if order is not None:
        return _square_sorted(r, s), order
    for step in range(_MAX_SQUARINGS):
        r = torch.where((s > step)[:, None, None, None], r @ r, r)
    return r, None


def _scaled_taylor(points: Tensor, generators: Tensor, degree: int
                   ) -> tuple[Tensor, Tensor, Tensor | None]:
    """`_sorted_linear_expm` before its squarings: ``(r, s, order)``, ``r`` ``(G, K, b, b)``
    every set's Taylor polynomial at its scaled points, ``s`` ``(G,)`` the squarings each set
    then takes (float; in descending order where the sets were sorted), ``order`` as
    `_sorted_linear_expm` returns it."""
    count = points.shape[0]
    groups, _, b, _ = generators.shape
    exponents, inverse_factorials = _monomials(degree, points.device)
    # Coordinates scaled into [-1, 1] per axis (the generators take the span): the monomials
    # stay bounded in float32 too.
    span = points.detach().abs().amax(0) if count else points.new_ones(2)
    span = torch.where(span > 0, span, 1.0)
    unit = points / span
    gens = generators.to(points.dtype) * span[:, None, None]
    # Detached: s only picks the scaling, and log2's gradient at a zero generator is NaN.
    norms = gens.detach().abs().sum(-2).amax(-1)  # (G, 2) 1-norms
    reach = (unit.detach().abs() @ norms.T).amax(0) if count else norms.sum(-1)
    s = torch.ceil(torch.log2(reach)).clamp(min=0)
    bad = ~(s <= _MAX_SQUARINGS)  # also NaN
    s = torch.where(bad, 0.0, s)
    sort = _reads_are_free(s)
    if sort:  # the sets needing most squarings first: each run of equal counts is a slice
        order = torch.argsort(s, descending=True, stable=True)
        gens, s, bad = (t.index_select(0, order) for t in (gens, s, bad))
    # A set that cannot be computed exactly is scaled by NaN: all its matrices come out NaN.
    scale = torch.where(bad, torch.nan, torch.exp2(-s))
    stacked = (gens * scale[:, None, None, None]).flatten(1, 2)  # (G, 2b, b): A over B
    # The W of one degree side by side, (G, b, k + 1, b), W_(k-j)j at j: A @ W and B @ W for all
    # of them are one product with (G, b, k b); W_(k-j)j = A W_(k-1-j)j (j < k) + B W_(k-j)(j-1)
    # (j > 0), the two shifted against each other by padding (whose backward is a view).
    level = torch.eye(b, dtype=points.dtype, device=points.device)[:, None].expand(groups, b, 1, b)
    words = [level]
    for k in range(1, degree + 1):
        by_a, by_b = (stacked @ level.reshape(groups, b, k * b)).view(groups, 2, b, k, b).unbind(1)
        level = F.pad(by_a, (0, 0, 0, 1)) + F.pad(by_b, (0, 0, 1, 0))
        words.append(level)
    words = torch.cat(words, 2).transpose(1, 2).flatten(2)  # (G, n, b b)
    # Powers by running products (pow's gradient at 0 ** 0 is NaN; ONNX has no prod), then
    # each monomial over its degree's factorial.
    powers = [torch.ones_like(unit)]
    for _ in range(degree):
        powers.append(powers[-1] * unit)
    powers = torch.stack(powers, -1)  # (K, 2, degree + 1)
    monomials = powers[:, 0, exponents[:, 0]] * powers[:, 1, exponents[:, 1]]  # (K, n)
    monomials = monomials * inverse_factorials.to(monomials.dtype)
    r = torch.matmul(monomials, words).view(groups, count, b, b)
    return r, s, order if sort else None


def _square_sorted(r: Tensor, s: Tensor) -> Tensor:
    """``r[g] ** (2 ** s[g])`` for ``(G, K, b, b)`` ``r`` and counts ``s`` in descending order
    (read): the sets split once into runs of equal counts, each run squared its count times
    (slices of ``r`` instead would cost their backward a full-size zero fill and sum each)."""
    runs = [(count, len(list(run))) for count, run in itertools.groupby(s.long().tolist())]
    squared = []
    for (count, _), group in zip(runs, r.split([size for _, size in runs]), strict=True):
        for _ in range(count):
            group = group @ group
        squared.append(group)
    return torch.cat(squared) if squared else r


def _planes(skew: Tensor) -> tuple[Tensor, Tensor] | None:
    """Real skew-symmetric ``(..., b, b)`` ``S`` -> its invariant planes: ``U`` ``(..., b, 2m)``
    (orthonormal columns, ``m = b // 2``) and ``w`` ``(..., m)`` with ``exp(t S) = I + U (T -
    I) U^T`` for every ``t``, ``T`` turning plane ``i`` (columns ``2i, 2i + 1``) by ``w_i t``;
    None where ``S`` is not finite or two of its eigenvalues are closer than ``_PLANE_GAP``
    times its largest (a repeated or a zero pair, the zero matrix), whose eigenvectors'
    gradient would divide by their distance. Reads values: for the CPU only."""
    # -iS is Hermitian with eigenvalues +-w (and 0 for an odd b); for w > 0, S v = i w v and
    # v = a + ic give S c = w a, S a = -w c: the plane of (c, a) turns by w (|a| = |c| =
    # 1/sqrt(2)).
    if not bool(skew.detach().isfinite().all()):  # eigh fails on them; exp gives NaN
        return None
    values, vectors = torch.linalg.eigh(-1j * skew.to(torch.promote_types(skew.dtype,
                                                                           torch.complex64)))
    gaps = values.detach().diff(dim=-1).amin(-1)
    if not bool((gaps > _PLANE_GAP * values.detach().abs().amax(-1)).all()):
        return None
    m = skew.shape[-1] // 2
    v = vectors[..., -m:]  # the positive eigenvalues (ascending order)
    # Each v's phase fixed (its largest entry real and positive): a basis that is a function
    # of S, so any loss of it has a gradient (eigh's refuses one that depends on the phase).
    # Then (c, a) = sqrt(2) * (Re, Im) of i conj(v), in one complex product.
    lead = v.gather(-2, v.detach().abs().argmax(-2, keepdim=True))
    basis = torch.view_as_real(v.conj() * (lead * (1j * math.sqrt(2)) / lead.abs()))
    return basis.flatten(-2), values[..., -m:]


def _distinct(rows: Tensor) -> tuple[Tensor, Tensor]:
    """``(M, A)`` rows -> the distinct ones ``(K, A)`` and the index ``(M,)`` of each row's,
    so ``distinct[index] == rows``. Where reading values is not free (off the CPU, compiling)
    every row counts as distinct: the same values, computed once per row. The distinct rows
    are gathered from ``rows``, keeping their gradient."""
    count = rows.shape[0]
    order = torch.arange(count, device=rows.device)
    if not _reads_are_free(rows) or not count:
        return rows, order
    # One integer key per row from each column's rank (flat uniques: sorts, no row compares).
    key = torch.zeros_like(order)
    for column in rows.detach().unbind(-1):
        values, rank = torch.unique(column, return_inverse=True)
        key = key * values.numel() + rank
    keys, index = torch.unique(key, return_inverse=True)
    first = order.new_full(keys.shape, count).scatter_reduce(0, index, order, "amin")
    return rows.index_select(0, first), index


class BlockRotation(NamedTuple):
    """Per-token block-diagonal rotation (LieRE, ComRoPE), applied by
    [`apply`][posenc.spatial.liere.BlockRotation.apply]; its ``b x b`` blocks ``R`` (of the
    ``num_blocks = head_dim / b`` blocks of each head) by
    [`matrices`][posenc.spatial.liere.BlockRotation.matrices].

    Two forms of ``turns``, float32 (float64 for float64 coordinates), of shape ``(B or 1, H, N,
    F)``:

    - per token (``basis`` None): the blocks ``R`` themselves, row by row, ``F = num_blocks * b *
      b``;
    - in planes (``basis`` given: ComRoPE on the CPU): ``R = I + U (T - I) U^T`` with ``U`` the
      ``basis``, ``(H, num_blocks, b, 2m)`` orthonormal columns shared by every token (``m = b //
      2`` planes, each two consecutive columns), and ``T`` the turn of each plane by an angle,
      given as its ``(cos, sin)`` pair, ``F = num_blocks * m * 2`` (RoPE's interleaved layout in
      ``U``'s coordinates: a plane's ``(z1, z2)`` goes to ``(cos z1 - sin z2, sin z1 + cos
      z2)``).
    """

    turns: Tensor
    block_size: int
    basis: Tensor | None = None

    @property
    def extent(self) -> torch.Size:
        """``(B or 1, H, N)``: the samples, heads and tokens it turns."""
        return self.turns.shape[:-1]

    def _blocks(self) -> int:
        per = self.block_size ** 2 if self.basis is None else self.block_size // 2 * 2
        return self.turns.shape[-1] // per

    def apply(self, x: Tensor) -> Tensor:
        """Rotate ``x`` of shape ``(B, H, N, num_blocks * b)``; shaped and typed like ``x``
        (the arithmetic runs in at least float32)."""
        return self._turn(x, back=True)

    def for_scores(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """``q`` and ``k`` of one attention, each ``(B, H, N, num_blocks * b)``, made ready for
        its scores only: tensors whose dot products, token by token, are those of the rotated q
        and k (never for the values). In planes with an even ``b`` (``U`` square, so ``R = U T
        U^T``) that is ``T U^T x``, in ``U``'s coordinates: ``(T_i U^T q) . (T_j U^T k) = (R_i q)
        . (R_j k)``, one product with ``U`` fewer forward and backward; otherwise
        [`apply`][posenc.spatial.liere.BlockRotation.apply]'s tensors. Per token, with one
        rotation for the batch and products of fewer than 400 multiply-adds (``B b**2``), q and k
        are turned by one product of ``2B`` columns on the CPU (outside ``torch.compile``/export,
        which would specialise the batch size): torch's CPU ``bmm`` runs such small products in
        a plain loop, several times slower each than its GEMM path."""
        if self.basis is not None:
            back = self.basis.shape[-1] != self.block_size
            return self._turn(q, back), self._turn(k, back)
        if _reads_are_free(q) and q.shape == k.shape and q.dtype == k.dtype \
                and self.turns.shape[0] == 1 and q.shape[0] * self.block_size ** 2 < _SMALL_PRODUCT:
            return self.apply(torch.cat((q, k))).chunk(2)
        return self.apply(q), self.apply(k)

    def _turn(self, x: Tensor, back: bool) -> Tensor:
        """``x`` checked against this rotation, then turned in at least float32 (``back``:
        see `_turn_planes`)."""
        b, turns = self.block_size, self.turns
        blocks = self._blocks()
        if x.ndim != 4 or x.shape[-1] != blocks * b or turns.ndim != 4 \
                or turns.shape[-2] != x.shape[-2] or any(
                    r not in (1, n) for r, n in zip(turns.shape[:2], x.shape[:2], strict=True)):
            per = f"{b} * {b}" if self.basis is None else f"{b // 2} planes * 2"
            raise ValueError(f"a block rotation of shape {tuple(turns.shape)} (B or 1, H or 1, "
                             f"N, {blocks} blocks * {per}) does not fit x of shape "
                             f"{tuple(x.shape)} (B, H, N, head_dim={blocks * b})")
        check_rotation_device(turns, x)
        work = torch.promote_types(x.dtype, torch.float32)
        xb = x.to(work).unflatten(-1, (blocks, b))  # (B, H, N, blocks, b)
        # Autocast off: it would run the products below in bf16/fp16.
        with torch.autocast(x.device.type, enabled=False):
            y = self._turn_blocks(xb) if self.basis is None else self._turn_planes(xb, back)
        return y.to(x.dtype)

    def _turn_blocks(self, xb: Tensor) -> Tensor:
        """Per token: ``(B, H, N, num_blocks, b)`` -> each block times its ``R``, ``(B, H, N,
        D)``: one ``(B', b) @ R^T`` product per rotation, ``B'`` the samples that share it (all
        of them, or one where each has its own)."""
        batch, heads, tokens, blocks, b = xb.shape
        r = self.turns.to(xb.dtype).unflatten(-1, (blocks, b, b))
        own = r.shape[0]  # 1 or B rotations (0 only for an empty batch)
        shared = batch // max(own, 1)  # the samples each rotation turns
        count = own * heads * tokens * blocks
        r = r.expand(own, heads, tokens, blocks, b, b).reshape(count, b, b)
        xs = xb.unflatten(0, (own, shared)).permute(0, 2, 3, 4, 1, 5)
        y = torch.bmm(xs.reshape(count, shared, b), r.mT)
        y = y.view(own, heads, tokens, blocks, shared, b).permute(0, 4, 1, 2, 3, 5)
        return y.flatten(0, 1).flatten(-2)

    def _turn_planes(self, xb: Tensor, back: bool) -> Tensor:
        """In planes: ``(B, H, N, num_blocks, b)`` -> ``x + U (T - I) U^T x``, ``(B, H, N, D)``:
        two products with the shared ``U`` instead of one with a matrix per token, and the
        identity (a prefix token's ``T = I``) leaves ``x`` exactly as it is. ``back=False``
        (``U`` square): ``T U^T x``, in ``U``'s coordinates."""
        batch, heads, tokens, blocks, b = xb.shape
        # U block-diagonal per head, (H, D, num_blocks * 2m): one GEMM per head over all tokens
        # is faster than the blocks' b-wide ones without the zeros.
        u = self.basis.to(xb.dtype).permute(0, 2, 3, 1)  # (H, b, 2m, num_blocks)
        u = torch.diag_embed(u).permute(0, 3, 1, 4, 2).flatten(3).flatten(1, 2)
        xs = xb.transpose(0, 1).reshape(heads, batch * tokens, blocks * b)
        width = u.shape[-1]  # num_blocks * 2m; sizes spelled out: an empty batch has no -1
        z = torch.view_as_complex((xs @ u).view(heads, batch, tokens, width // 2, 2))
        turn = torch.view_as_complex(self.turns.to(xb.dtype).unflatten(-1, (-1, 2))).transpose(0, 1)
        if not back:
            turned = torch.view_as_real(z * turn)
            return turned.view(heads, batch, tokens, width).transpose(0, 1)
        moved = torch.view_as_real(z * (turn - 1)).view(heads, batch * tokens, width)
        y = torch.baddbmm(xs, moved, u.mT)  # (H, B N, D)
        return y.view(heads, batch, tokens, blocks * b).transpose(0, 1)

    def matrices(self) -> Tensor:
        """The blocks ``R``: ``(B or 1, H, N, num_blocks, b, b)``, in ``turns``'s dtype."""
        b, blocks = self.block_size, self._blocks()
        if self.basis is None:
            return self.turns.unflatten(-1, (blocks, b, b))
        u1, u2 = self.basis.unflatten(-1, (-1, 2)).unbind(-1)  # (H, blocks, b, m) each
        # A plane's share of U (T - I) U^T: (cos - 1) (u1 u1^T + u2 u2^T) + sin (u2 u1^T - u1 u2^T).
        sym = torch.einsum("hjxm,hjym->hjmxy", u1, u1) + torch.einsum("hjxm,hjym->hjmxy", u2, u2)
        anti = torch.einsum("hjxm,hjym->hjmxy", u2, u1)
        anti = anti - anti.mT
        cos, sin = self.turns.unflatten(-1, (blocks, -1, 2)).unbind(-1)
        eye = torch.eye(b, dtype=self.turns.dtype, device=self.turns.device)
        return (eye + torch.einsum("bhnjm,hjmxy->bhnjxy", cos - 1, sym)
                + torch.einsum("bhnjm,hjmxy->bhnjxy", sin, anti))


def _skew_pairs(freqs: Tensor, block_size: int) -> Tensor:
    """RoPE pair frequencies ``(..., D/2)`` -> the skew generators ``(..., D/b, b, b)`` that
    turn channels ``2i, 2i + 1`` by ``freqs[..., i]`` (the interleaved layout)."""
    pairs = freqs.unflatten(-1, (-1, block_size // 2))  # (..., blocks, b/2)
    g = freqs.new_zeros(*pairs.shape, 2, block_size // 2, 2)  # (..., blocks, b/2, 2, b/2, 2)
    index = torch.arange(block_size // 2, device=freqs.device)
    g[..., index, 1, index, 0] = pairs
    g[..., index, 0, index, 1] = -pairs
    return g.flatten(-4, -3).flatten(-2)


class LieRE(_Rotary):
    """Learned-rotation 2D rotary encoding for q and k of shape ``(B, H, P + N, head_dim)``,
    used as [`RoPE2D`][posenc.spatial.RoPE2D].

    Args:
        head_dim: channels per head, divisible by ``block_size``; all of them rotate.
        num_heads: attention heads (each has its own generators).
        variant: ``"liere"`` (free generators) or ``"comrope"`` (ComRoPE-LD, commuting).
        block_size: ``b``, the size of the rotated blocks (>= 2; with 2, LieRE stays RoPE-Mixed).
        init: ``"mixed"`` (LieRE only, its default; an even ``block_size``): RoPE-Mixed's
            frequencies ([`init_mixed_freqs`][posenc.spatial.rope.init_mixed_freqs], drawn as RoPE2D
            does) on the 2 x 2 diagonal of each block. ``"random"`` (the papers'):
            ``P ~ N(0, init_std**2)`` (and ComRoPE's ``theta ~ N(0, 1)``).
        init_std: standard deviation of the random init; the papers' 1.0 is for coordinates in
            [0, 1], with patch indices choose about ``1 / grid size``.
        base: RoPE-Mixed frequency base of the mixed init.
        normalize: coordinate system, as [`RoPE2D`][posenc.spatial.RoPE2D]'s: ``None`` (patch
            indices) or ``"unit"``.

    Parameters (float32 under any ``.to(dtype)``): ``generators``, the ``P``: ``(H, 2, D/b, b,
    b)`` for LieRE (``[:, 0]`` rows, ``[:, 1]`` columns), ``(H, D/b, b, b)`` for ComRoPE;
    ``axis_scales`` (ComRoPE only), the ``theta``: ``(2, D/b)``.
    """

    fixed_dtype_parameters = ("generators", "axis_scales")

    def __init__(self, head_dim: int, num_heads: int, variant: str = "liere", *,
                 block_size: int = 8, init: str | None = None, init_std: float = 1.0,
                 base: float = 10.0, normalize: str | None = None) -> None:
        super().__init__()
        self.head_dim = check_positive_int(head_dim, "head_dim")
        self.num_heads = check_positive_int(num_heads, "num_heads")
        self.variant = check_choice(variant, "variant", VARIANTS)
        self.block_size = check_positive_int(block_size, "block_size")
        if block_size < 2 or head_dim % block_size:
            raise ValueError(f"block_size must be >= 2 and divide head_dim={head_dim}, got "
                             f"{block_size}")
        init = ("mixed" if variant == "liere" else "random") if init is None else init
        self.init = check_choice(init, "init", INITS)
        if init == "mixed" and (variant != "liere" or block_size % 2):
            raise ValueError(f"init='mixed' (RoPE-Mixed's 2 x 2 rotations) needs "
                             f"variant='liere' and an even block_size, got variant={variant!r}, "
                             f"block_size={block_size}; use init='random'")
        self.init_std = check_positive_float(init_std, "init_std")
        self.base = check_base(base)
        self.normalize = check_choice(normalize, "normalize", NORMALIZE)
        blocks = head_dim // block_size
        shape = (num_heads, 2) if variant == "liere" else (num_heads,)
        self.generators = nn.Parameter(torch.empty(*shape, blocks, block_size, block_size))
        if variant == "comrope":
            self.axis_scales = nn.Parameter(torch.empty(2, blocks))
        else:
            self.register_parameter("axis_scales", None)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Draw the initial generators (as the constructor does; after ``to_empty()``)."""
        if self.init == "mixed":
            freqs = init_mixed_freqs(self.head_dim, self.num_heads, self.base).double()
            if self.normalize == "unit":
                freqs = freqs * (2 * torch.pi)  # RoPE2D turns unit coordinates by 2 pi freq
            # P = A / 2 gives P - P^T = A for a skew A. (2, H, D/2) -> (H, 2, D/b, b, b).
            skew = _skew_pairs(freqs.transpose(0, 1), self.block_size)
            self.generators.copy_(skew / 2)
            return
        self.generators.normal_(0.0, self.init_std)
        if self.axis_scales is not None:
            self.axis_scales.normal_(0.0, 1.0)

    def _skew(self, dtype: torch.dtype | None) -> Tensor:
        """``P - P^T`` of the parameters ``generators``, formed in ``dtype``: LieRE's generators
        ``(H, 2, D/b, b, b)``, ComRoPE's shared ``S`` ``(H, D/b, b, b)``."""
        generators = self.generators.to(dtype)
        return generators - generators.mT

    def axis_generators(self, dtype: torch.dtype | None = None) -> Tensor:
        """The skew-symmetric generators ``A``: ``(H, 2, D/b, b, b)``, axis 0 rows, 1 columns,
        formed in ``dtype`` (default the parameters', float32): in float64, ComRoPE's two axes
        commute to float64 rounding."""
        skew = self._skew(dtype)
        if self.axis_scales is None:
            return skew
        return skew[:, None] * self.axis_scales.to(dtype)[None, :, :, None, None]

    def _generator_sets(self, dtype: torch.dtype) -> Tensor:
        """`axis_generators` by head and block, the sets whose exponentials `_rotations` takes:
        ``(H D/b, 2, b, b)``."""
        return self.axis_generators(dtype).transpose(1, 2).flatten(0, 1)

    def _compute(self, positions: GridPositions) -> BlockRotation:
        coords = positions.coords
        if coords.ndim == 2:
            coords = coords[None]
        # Prefix tokens at coordinate 0, whose exp(0) = I exactly.
        coords = F.pad(coords, (0, 0, positions.num_prefix_tokens, 0))
        batch, tokens = coords.shape[:2]
        wide = wide_dtype(coords.device)
        out = torch.float64 if coords.dtype == torch.float64 else torch.float32
        with torch.autocast(coords.device.type, enabled=False):
            if self.variant == "comrope" and _reads_are_free(coords):
                planes = self._plane_rotation(coords.to(wide), out)
                if planes is not None:
                    return planes
            points, index = _distinct(coords.flatten(0, 1).to(wide))  # (K, 2), (B N,)
            turns, order = self._rotations(points, out)  # (H D/b, K, b, b)
        # One gather puts every head's and block's rotation at its tokens, (H, B N, D/b, b, b):
        # row (position of the set) * K + (the token's point).
        sets, count = turns.shape[:2]
        position = (torch.arange(sets, device=index.device) if order is None
                    else torch.argsort(order))
        rows = position.view(self.num_heads, 1, -1) * count + index[None, :, None]
        at_tokens = turns.flatten(0, 1).index_select(0, rows.flatten())
        # (H, B, N, F) -> (B, H, N, F); sizes spelled out: an empty batch has no -1
        at_tokens = at_tokens.view(self.num_heads, batch, tokens, self.head_dim * self.block_size)
        return BlockRotation(at_tokens.transpose(0, 1), self.block_size)

    def _plane_rotation(self, coords: Tensor, dtype: torch.dtype) -> BlockRotation | None:
        """ComRoPE's rotation of ``(B, N, 2)`` coordinates (float64) in planes: its generators
        ``A_a = theta_a S`` share ``S``'s invariant planes, so ``exp(sum_a p_a A_a)`` turns them
        by ``w (theta_row p_row + theta_col p_col)``: one decomposition per head and block, an
        angle per token and plane (None where ``S``'s planes are not well separated)."""
        planes = _planes(self._skew(coords.dtype))  # (H, D/b, b, 2m), (H, D/b, m)
        if planes is None:
            return None
        basis, freqs = planes
        t = coords @ self.axis_scales.to(coords.dtype)  # (B, N, D/b)
        angles = (t[:, None, :, :, None] * freqs[:, None]).flatten(-2)  # (B, H, N, D/b m)
        turns = torch.stack((angles.cos(), angles.sin()), -1).flatten(-2)
        return BlockRotation(turns.to(dtype), self.block_size, basis.to(dtype))

    def _rotations(self, points: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
        """``(K, 2)`` coordinates (float64) -> ``exp(sum_a p_a A_a)`` per head and block (a set):
        ``(H D/b, K, b, b)`` in ``dtype`` ([`linear_expm`][posenc.spatial.liere.linear_expm] to
        ``dtype``'s precision), and the order of the sets (row ``i`` is set ``order[i]``; None:
        head-major). ComRoPE's generators commute (``A_a = theta_a S``), so its exponential is
        the product ``exp(p_row A_row) exp(p_col A_col)`` of one exponential per distinct value
        per axis (a grid's rows and columns: ``rows + cols`` instead of ``rows * cols``), the
        product of two orthogonal matrices taken in ``dtype`` (within a few of its ulps), where
        distinct values are found (the CPU, for generators whose planes are not separated:
        `_plane_rotation` takes the others)."""
        sets = self._generator_sets(points.dtype)
        degree = taylor_degree(dtype)
        # Where no value is read to find the distinct rows and columns (off the CPU, compiling),
        # ComRoPE's product would take two exponentials a token: one of the sum takes one.
        if self.variant == "liere" or not _reads_are_free(points):
            turns, order = _sorted_linear_expm(points, sets, degree)
            return turns.to(dtype), order
        (rows, row_index), (cols, col_index) = (_distinct(points[:, axis:axis + 1])
                                                for axis in (0, 1))
        # Both axes' exponentials in one call: rows at (r, 0), columns at (0, c).
        turns, order = _sorted_linear_expm(torch.block_diag(rows, cols), sets, degree)
        turns = turns.to(dtype)
        return (turns.index_select(1, row_index)
                @ turns.index_select(1, rows.shape[0] + col_index)), order

    def extra_repr(self) -> str:
        return (f"head_dim={self.head_dim}, num_heads={self.num_heads}, "
                f"variant={self.variant!r}, block_size={self.block_size}, init={self.init!r}, "
                f"normalize={self.normalize!r}")
