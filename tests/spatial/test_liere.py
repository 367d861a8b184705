"""LieRE / ComRoPE (posenc.spatial.liere): learned block rotations exp(sum_a p_a A_a).

No library ships either encoding, so the checks are the papers' properties, checked against
independent references: ``torch.linalg.matrix_exp`` for the exponential, posenc's RoPE2D
(itself checked against timm's ``init_random_2d_freqs``) for LieRE at initialisation, and the
relative-position property where the generators commute.
"""

from __future__ import annotations

import pytest
import torch
from posenc.core import MultiheadAttention, apply_rotation
from posenc.core.encoding import no_weight_decay_names
from posenc.spatial import RoPE2D, attach, patch_coords
from posenc.spatial.coords import GridPositions
from posenc.spatial.liere import BlockRotation, LieRE, linear_expm, taylor_degree
from spatial_models import make_vit

HEAD_DIM, HEADS = 16, 3


def _score(enc: LieRE, q: torch.Tensor, k: torch.Tensor, pq, pk) -> torch.Tensor:
    """Per-head (R(pq) q) . (R(pk) k) for q, k of shape (H, D): (H,)."""
    rot = enc.rotation(torch.tensor([pq, pk], dtype=torch.float32))
    r = rot.apply(torch.stack([q, k], dim=1)[None])[0]
    return (r[:, 0] * r[:, 1]).sum(-1)


def _shift_gap(enc: LieRE, shift=(5.0, -3.0)) -> float:
    """Largest change of the score when both positions move by ``shift``."""
    torch.manual_seed(1)
    gap = 0.0
    for _ in range(4):
        q, k = torch.randn(HEADS, HEAD_DIM), torch.randn(HEADS, HEAD_DIM)
        pq, pk = torch.randn(2).tolist(), (torch.randn(2) * 3).tolist()
        moved = [(a + shift[0], b + shift[1]) for a, b in (pq, pk)]
        change = _score(enc, q, k, *moved) - _score(enc, q, k, pq, pk)
        gap = max(gap, change.abs().max().item())
    return gap


def _random_skew(*shape: int) -> torch.Tensor:
    p = torch.randn(*shape, dtype=torch.float64)
    return p - p.mT


def _summed(points: torch.Tensor, generators: torch.Tensor) -> torch.Tensor:
    """(G, K, b, b) sums sum_a points[k, a] generators[g, a] (the reference's input)."""
    return torch.einsum("ka,gaxy->gkxy", points, generators).contiguous()


@pytest.mark.parametrize("block_size", [2, 3, 8])
def test_linear_expm_matches_torch_matrix_exp(block_size):
    torch.manual_seed(block_size)
    points = torch.randn(30, 2, dtype=torch.float64) * 3
    for scale in (1e-3, 0.3, 3.0, 100.0):
        g = _random_skew(5, 2, block_size, block_size) * scale
        ref = torch.linalg.matrix_exp(_summed(points, g))
        bound = 1e-13 * max(scale * 9, 1.0) * 8
        torch.testing.assert_close(linear_expm(points, g), ref, rtol=0, atol=bound)
        # Cut at float32's degree: float32's precision, with room to spare.
        torch.testing.assert_close(linear_expm(points, g, taylor_degree(torch.float32)), ref,
                                   rtol=0, atol=1e-8 * max(scale, 1.0))
    g = _random_skew(4, 2, 4, 4)
    torch.testing.assert_close(linear_expm(points.float(), g.float()),
                               torch.linalg.matrix_exp(_summed(points, g)).float(), rtol=0,
                               atol=1e-5)  # float32 in, float32 out
    assert torch.equal(linear_expm(points, torch.zeros(3, 2, 4, 4, dtype=torch.float64)),
                       torch.eye(4, dtype=torch.float64).expand(3, 30, 4, 4))
    assert torch.equal(linear_expm(torch.zeros(6, 2, dtype=torch.float64), g),
                       torch.eye(4, dtype=torch.float64).expand(4, 6, 4, 4))
    assert linear_expm(points[:0], g).shape == (4, 0, 4, 4)
    # Past 2**20 (1-norm) the fixed squaring loop would be inaccurate: NaN, not a wrong matrix;
    # only for the set that reaches it.
    huge = torch.cat((g[:1] * 1e7, g[1:]))
    out = linear_expm(points, huge)
    assert out[0].isnan().all() and not out[1:].isnan().any()


def test_linear_expm_refuses_what_it_cannot_compute_exactly():
    g, points = _random_skew(2, 2, 4, 4), torch.randn(3, 2, dtype=torch.float64)
    with pytest.raises(TypeError, match="float32 or float64"):
        linear_expm(points.half(), g)
    with pytest.raises(TypeError, match="points must be a torch.Tensor"):
        linear_expm(points.tolist(), g)
    with pytest.raises(ValueError, match=r"points must have 2 dimensions"):
        linear_expm(points[0], g)
    with pytest.raises(ValueError, match=r"points must have shape \(K, 2\)"):
        linear_expm(torch.randn(3, 3, dtype=torch.float64), _random_skew(2, 3, 4, 4))
    with pytest.raises(ValueError, match=r"generators \(G, 2, b, b\)"):
        linear_expm(points, g[:, :1])
    with pytest.raises(ValueError, match=r"generators \(G, 2, b, b\)"):
        linear_expm(points, g[..., :3])
    for degree in (0, 2.5, True):
        with pytest.raises((TypeError, ValueError), match="degree"):
            linear_expm(points, g, degree)


def test_linear_expm_gradients_are_those_of_matrix_exp():
    torch.manual_seed(0)
    g = (_random_skew(4, 2, 4, 4) * 0.5).requires_grad_()
    points = torch.randn(9, 2, dtype=torch.float64).mul(2).requires_grad_()
    points_with_zero = torch.cat((points, points.new_zeros(1, 2)))  # 0 ** 0 has no gradient
    weight = torch.randn(4, 10, 4, 4, dtype=torch.float64)
    ours = torch.autograd.grad((linear_expm(points_with_zero, g) * weight).sum(), (g, points))
    ref = torch.autograd.grad(
        (torch.linalg.matrix_exp(_summed(points_with_zero, g)) * weight).sum(), (g, points))
    for got, want in zip(ours, ref, strict=True):
        assert got.isfinite().all()
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-11)


def _fixed_loop(monkeypatch) -> None:
    """Take the path of a GPU and of torch.compile: all 20 masked squarings, no value read."""
    monkeypatch.setattr("posenc.spatial.liere._reads_are_free", lambda t: False)


@pytest.mark.parametrize("scale", [0.0, 1e-3, 0.3, 3.0, 100.0, 3e5, 1e7])
def test_linear_expm_on_the_cpu_stops_early_with_the_fixed_loops_result_bit_for_bit(
        scale, monkeypatch):
    """The CPU squares each set only as often as it needs (the sets in order of their counts);
    the values and the gradients are those of the fixed-length loop exactly (NaN past 2**20
    included: the set's scale is NaN)."""
    torch.manual_seed(0)
    g = (_random_skew(40, 2, 8, 8) * torch.logspace(-3, 0, 40, dtype=torch.float64)[:, None,
                                                                                    None, None]
         * scale).requires_grad_()
    points = torch.randn(7, 2, dtype=torch.float64)
    weight = torch.randn(40, 7, 8, 8, dtype=torch.float64)
    early = linear_expm(points, g)
    (grad_early,) = torch.autograd.grad((early.nan_to_num() * weight).sum(), g)
    _fixed_loop(monkeypatch)
    fixed = linear_expm(points, g)
    (grad_fixed,) = torch.autograd.grad((fixed.nan_to_num() * weight).sum(), g)
    assert torch.equal(early.isnan(), fixed.isnan())
    assert torch.equal(early.nan_to_num(), fixed.nan_to_num())
    torch.testing.assert_close(grad_early, grad_fixed, rtol=0, atol=0, equal_nan=True)
    # Past 2**20 a set is NaN at every point, and its generators' gradient NaN; only that set's.
    bad = early.isnan().flatten(1).all(1)
    assert torch.equal(early.isnan().flatten(1).any(1), bad)
    assert torch.equal(grad_early.isnan().flatten(1).any(1), bad)
    assert bool(bad.any()) == (scale >= 3e5)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_linear_expm_of_a_non_finite_generator_or_point_is_nan_on_both_paths(bad, monkeypatch):
    g = _random_skew(3, 2, 4, 4)
    g[1, 0, 0, 1], g[1, 0, 1, 0] = bad, -bad
    points = torch.randn(5, 2, dtype=torch.float64)
    early = linear_expm(points, g)
    assert early[1].isnan().all() and not early[[0, 2]].isnan().any()
    broken = points.clone()
    broken[2, 1] = bad
    assert linear_expm(broken, g).isnan().all()  # every set reaches the point
    _fixed_loop(monkeypatch)
    fixed = linear_expm(points, g)
    assert torch.equal(early.isnan(), fixed.isnan())
    assert torch.equal(early.nan_to_num(), fixed.nan_to_num())
    assert linear_expm(broken, g).isnan().all()


def test_sorted_squaring_squares_each_set_as_often_as_its_count():
    from posenc.spatial import liere

    turn = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64) * 0.1
    r = torch.linalg.matrix_exp(turn).expand(3, 2, 2, 2)  # (G=3, K=2)
    out = liere._square_sorted(r, torch.tensor([3.0, 1.0, 0.0], dtype=torch.float64))
    for g, count in enumerate((3, 1, 0)):
        want = torch.linalg.matrix_exp(turn * 2 ** count).expand(2, 2, 2)
        torch.testing.assert_close(out[g], want, rtol=0, atol=1e-15)
    assert torch.equal(liere._square_sorted(r, torch.zeros(3, dtype=torch.float64)), r)


def test_linear_expm_compiles_whole_and_off_the_cpu_reads_no_value(monkeypatch):
    g, points = _random_skew(5, 2, 4, 4), torch.randn(6, 2, dtype=torch.float64)
    compiled = torch.compile(linear_expm, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(points, g), linear_expm(points, g), rtol=0, atol=1e-14)
    _fixed_loop(monkeypatch)
    for name in ("item", "__bool__", "__int__", "__float__", "__index__", "tolist"):
        monkeypatch.setattr(torch.Tensor, name, lambda *a, name=name: pytest.fail(name))
    assert linear_expm(points, g).shape == (5, 6, 4, 4)


def _coords_with_repeats() -> torch.Tensor:
    """(2, 7, 2) coordinates: repeats within and across the batch, shared rows and columns."""
    first = torch.tensor([[0.0, 0.0], [1.0, 2.0], [1.0, 2.0], [3.0, -1.5], [0.0, 2.0],
                          [1.0, -1.5], [2.5, 0.0]])
    return torch.stack((first, first.flip(0))) * 0.7


def _reference_rotation(enc: LieRE, coords: torch.Tensor, prefix: int) -> torch.Tensor:
    """(B, H, P + N, D/b, b, b): torch.linalg.matrix_exp of sum_a p_a A_a per token, float64."""
    p = enc.generators.double()
    a = p - p.mT
    if enc.axis_scales is not None:
        a = a[:, None] * enc.axis_scales.double()[None, :, :, None, None]
    g = torch.einsum("bna,hajxy->bhnjxy", coords.double(), a)
    r = torch.linalg.matrix_exp(g.contiguous())
    eye = torch.eye(enc.block_size, dtype=torch.float64).expand(*r.shape[:2], prefix,
                                                               *r.shape[3:])
    return torch.cat((eye, r), dim=2)


@pytest.mark.parametrize("reads_free", [True, False])
@pytest.mark.parametrize("variant", ["liere", "comrope"])
def test_rotation_is_the_matrix_exponential_of_each_token_with_its_gradient(
        variant, reads_free, monkeypatch):
    """Computed once per distinct coordinate (ComRoPE: per distinct row and column, as a
    product), the rotation and its gradient are those of torch.linalg.matrix_exp per token."""
    if not reads_free:
        _fixed_loop(monkeypatch)
    torch.manual_seed(7)
    enc = LieRE(HEAD_DIM, HEADS, variant, block_size=4, init="random", init_std=0.4)
    coords = _coords_with_repeats()
    rot = enc.rotation(GridPositions(coords, num_prefix_tokens=2))
    ours = rot.matrices().double()
    ref = _reference_rotation(enc, coords, prefix=2)
    torch.testing.assert_close(ours, ref, rtol=0, atol=2e-6)
    _assert_same_parameter_grads(ours, ref, enc, 1e-4)
    # Float64 coordinates: float64 all the way.
    wide = enc.rotation(coords.double())
    ours = wide.matrices()
    torch.testing.assert_close(ours, _reference_rotation(enc, coords, prefix=0), rtol=0,
                               atol=1e-12)


def _comrope(block_size: int, seed: int = 7) -> LieRE:
    torch.manual_seed(seed)
    head_dim = 4 * block_size
    return LieRE(head_dim, HEADS, "comrope", block_size=block_size, init="random", init_std=0.4)


def _assert_same_parameter_grads(out: torch.Tensor, ref: torch.Tensor, enc: LieRE,
                                 tol: float, weight: torch.Tensor | None = None) -> None:
    """The gradients of ``enc``'s parameters through ``out`` equal those through the reference
    ``ref`` (the same random weighting of both), and are finite."""
    weight = torch.randn(ref.shape, dtype=torch.float64) if weight is None else weight
    params = list(enc.parameters())
    grads = torch.autograd.grad((out.double() * weight).sum(), params, retain_graph=True)
    ref_grads = torch.autograd.grad((ref * weight).sum(), params, retain_graph=True)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        assert grad.isfinite().all()
        torch.testing.assert_close(grad, ref_grad, rtol=tol, atol=tol)


def _rotated_by_reference(enc: LieRE, x: torch.Tensor, coords: torch.Tensor,
                          prefix: int) -> torch.Tensor:
    """x (B, H, P + N, D) turned per token by torch.linalg.matrix_exp's blocks, float64."""
    r = _reference_rotation(enc, coords, prefix)
    xb = x.double().unflatten(-1, (-1, enc.block_size))
    return torch.einsum("bhnjxy,bhnjy->bhnjx", r, xb).flatten(-2)


@pytest.mark.parametrize("block_size", [2, 3, 4, 8])
def test_comrope_on_the_cpu_turns_its_planes_as_the_matrix_exponential_does(block_size):
    """ComRoPE on the CPU: one basis per head and block, an angle per token and plane; the
    rotated q/k and their gradients are those of torch.linalg.matrix_exp per token (float64
    coordinates: to float64 rounding; float32: to float32's)."""
    enc = _comrope(block_size)
    coords = _coords_with_repeats()
    x = torch.randn(2, HEADS, 9, enc.head_dim, dtype=torch.float64)
    ref = _rotated_by_reference(enc, x, coords, prefix=2)
    weight = torch.randn(ref.shape, dtype=torch.float64)
    for dtype, atol, grad_tol in ((torch.float64, 1e-12, 1e-10), (torch.float32, 2e-6, 1e-4)):
        rot = enc.rotation(GridPositions(coords.to(dtype), num_prefix_tokens=2))
        m = block_size // 2
        assert rot.basis is not None and rot.basis.shape == (HEADS, 4, block_size, 2 * m)
        assert rot.turns.shape == (2, HEADS, 9, 4 * m * 2) and rot.turns.dtype == dtype
        assert rot.extent == (2, HEADS, 9)
        out = rot.apply(x.to(dtype))
        torch.testing.assert_close(out.double(), ref, rtol=0, atol=atol * 4)
        assert torch.equal(out[:, :, :2], x[:, :, :2].to(dtype))  # prefix tokens: exactly x
        _assert_same_parameter_grads(out, ref, enc, grad_tol, weight)


@pytest.mark.parametrize("block_size", [2, 3, 4, 8])
def test_for_scores_keeps_every_score_of_the_rotated_q_and_k(block_size):
    """``BlockRotation.for_scores``: q and k in the planes' basis (even blocks, ``T U^T x``)
    give the rotated tensors' scores token by token, with the same parameter gradients; an
    odd block (``U`` not square) returns ``apply``'s tensors."""
    enc = _comrope(block_size)
    coords = GridPositions(_coords_with_repeats().double(), num_prefix_tokens=2)
    q, k = torch.randn(2, 2, HEADS, 9, enc.head_dim, dtype=torch.float64)
    rot = enc.rotation(coords)
    want = rot.apply(q) @ rot.apply(k).mT                                   # (B, H, N, N)
    q_for, k_for = rot.for_scores(q, k)
    got = q_for @ k_for.mT
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    _assert_same_parameter_grads(got, want, enc, 1e-10)
    if block_size % 2:
        assert torch.equal(q_for, rot.apply(q)) and torch.equal(k_for, rot.apply(k))
    else:  # in U's coordinates: not the rotated tensor itself
        assert not torch.allclose(q_for, rot.apply(q))


@pytest.mark.parametrize("batch", [0, 1, 7, 24, 25])
@pytest.mark.parametrize("per_sample", [False, True])
def test_per_token_for_scores_is_apply_joined_or_not(batch, per_sample, monkeypatch):
    """LieRE's per-token form: ``for_scores`` gives ``apply``'s q and k (one product of both
    where the batch shares the rotation and ``B b**2 < 400``) and their gradients; ``apply`` is
    the reference's blocks times x."""
    torch.manual_seed(batch)
    enc = LieRE(HEAD_DIM, HEADS, block_size=4, init="random", init_std=0.4)
    coords = _coords_with_repeats()
    coords = coords[0] if not per_sample else torch.randn(batch, 7, 2)  # (N, 2): one grid
    rot = enc.rotation(GridPositions(coords, num_prefix_tokens=2))
    q, k = torch.randn(2, batch, HEADS, 9, HEAD_DIM).requires_grad_().unbind()
    turned = []
    original = BlockRotation.apply
    monkeypatch.setattr(BlockRotation, "apply",
                        lambda self, x: turned.append(x.shape[0]) or original(self, x))
    q_for, k_for = rot.for_scores(q, k)
    monkeypatch.undo()
    joined = (not per_sample or batch == 1) and batch * 4 ** 2 < 400
    assert turned == ([2 * batch] if joined else [batch, batch])
    want = torch.einsum("bhnjxy,bhnjy->bhnjx", rot.matrices().expand(batch, -1, -1, -1, -1, -1),
                        q.unflatten(-1, (-1, 4))).flatten(-2)
    torch.testing.assert_close(q_for, want, rtol=0, atol=1e-6)
    torch.testing.assert_close(q_for, rot.apply(q), rtol=0, atol=1e-6)
    torch.testing.assert_close(k_for, rot.apply(k), rtol=0, atol=1e-6)
    weight = torch.randn(2, *q.shape)
    got = torch.autograd.grad((torch.stack((q_for, k_for)) * weight).sum(),
                              [q, k, enc.generators], retain_graph=True)
    ref = torch.autograd.grad((torch.stack((rot.apply(q), rot.apply(k))) * weight).sum(),
                              [q, k, enc.generators])
    for g, r in zip(got, ref, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_a_comrope_vit_gives_the_outputs_of_rotated_q_and_k(monkeypatch):
    """GridAttention feeds ComRoPE's q and k to the scores in the planes' basis: the model's
    logits and gradients are those of q and k rotated back."""
    from posenc.spatial import blocks

    torch.manual_seed(0)
    model = attach(make_vit(), "comrope")
    x = torch.randn(2, 3, 32, 32)
    out = model(x)
    grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    monkeypatch.setattr(blocks, "_for_scores",
                        lambda q, k, rope: (apply_rotation(q, rope), apply_rotation(k, rope)))
    want = model(x)
    want_grads = torch.autograd.grad(want.square().sum(), list(model.parameters()))
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    for got_grad, want_grad in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-4, atol=1e-5)


def test_comrope_planes_gradcheck_in_float64():
    from posenc.spatial.liere import _planes

    enc = _comrope(3, seed=2)  # odd: each block also has a direction no plane turns
    coords = (_coords_with_repeats()[:1] * 0.5).double()
    x = torch.randn(1, HEADS, 7, enc.head_dim, dtype=torch.float64)
    p = enc.generators.detach().double().requires_grad_()
    theta = enc.axis_scales.detach().double().requires_grad_()

    def turned(p, theta):
        params = {"generators": p, "axis_scales": theta}
        return torch.func.functional_call(enc, params, (x, coords))

    assert enc.rotation(coords).basis is not None
    assert torch.autograd.gradcheck(turned, (p, theta))
    # The basis itself, each plane's phase fixed, is a function of S with a gradient.
    assert torch.autograd.gradcheck(lambda p: _planes(p - p.mT)[0], (p[:1, :2],))


@pytest.mark.parametrize("case", ["zero block", "repeated turn", "near repeat"])
def test_comrope_generators_without_separate_planes_take_the_exponential(case):
    """A block whose S has a repeated eigenvalue (a zero block; two planes turning alike) has
    no unique planes and eigh's gradient would divide by zero: the rotation is the
    exponential's, per token, with the reference's values and finite gradients. Planes barely
    apart (1e-4) are separate: they are used, with the same values and gradients."""
    enc = _comrope(4)
    q = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64))[0]
    second = {"zero block": 0.0, "repeated turn": 0.7, "near repeat": 0.7 + 1e-4}[case]
    planes = torch.zeros(4, 4, dtype=torch.float64)
    planes[1, 0], planes[3, 2] = 0.7, second
    skew = q @ (planes - planes.mT) @ q.T
    with torch.no_grad():
        enc.generators[1, 2] = (torch.zeros(4, 4) if case == "zero block" else skew / 2).float()
    coords = _coords_with_repeats().double()
    rot = enc.rotation(GridPositions(coords, num_prefix_tokens=2))
    assert (rot.basis is None) == (case != "near repeat")
    x = torch.randn(2, HEADS, 9, enc.head_dim, dtype=torch.float64)
    out = rot.apply(x)
    ref = _rotated_by_reference(enc, x, coords, prefix=2)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-11)
    _assert_same_parameter_grads(out, ref, enc, 1e-6)


@pytest.mark.parametrize("variant", ["liere", "comrope"])
def test_rotation_applies_in_float32_under_autocast(variant):
    """Both forms turn q/k in float32 under a bf16 autocast (its products would run in bf16)."""
    enc = LieRE(HEAD_DIM, HEADS, variant, block_size=4, init="random", init_std=0.5)
    coords = patch_coords((3, 4))
    x = torch.randn(2, HEADS, 12, HEAD_DIM)
    rot = enc.rotation(coords)
    assert (rot.basis is None) == (variant == "liere")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = rot.apply(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, rot.apply(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_comrope_non_finite_generators_give_nan_where_they_act_not_an_error(bad):
    enc = _comrope(4)
    with torch.no_grad():
        enc.generators[0, 1, 0, 1] = bad
    x = torch.randn(1, HEADS, 12, enc.head_dim)
    out = enc(x, patch_coords((3, 4)) + 1)
    assert out[:, 0, :, 4:8].isnan().all()  # head 0, block 1
    assert out[:, 1:].isfinite().all() and out[:, 0, :, :4].isfinite().all()


@pytest.mark.parametrize("variant", ["liere", "comrope"])
def test_exponentials_are_taken_once_per_distinct_coordinate(variant, monkeypatch):
    """A batch of grids with a prefix token: LieRE exponentiates each distinct point once,
    ComRoPE, where its generators' planes are not separated (else none: it turns its planes),
    each distinct row and column value once (exp of a sum = product of exps)."""
    from posenc.spatial import liere

    sizes = []
    original = liere._sorted_linear_expm  # every exponential, linear_expm's too

    def counting(points, generators, degree):
        sizes.append(points.shape[0] * generators.shape[0])
        return original(points, generators, degree)

    monkeypatch.setattr(liere, "_sorted_linear_expm", counting)
    enc = LieRE(HEAD_DIM, HEADS, variant, block_size=4, init="random")
    grid = patch_coords((3, 5))
    coords = torch.stack((grid, grid, grid.flip(0)))  # the same 15 points per batch item
    if variant == "comrope":
        enc.rotation(GridPositions(coords, num_prefix_tokens=1))
        assert sizes == []
        monkeypatch.setattr(liere, "_PLANE_GAP", float("inf"))
    enc.rotation(GridPositions(coords, num_prefix_tokens=1))
    per_point = HEADS * HEAD_DIM // 4
    # The prefix token sits at 0, which is also the grid's first point and row and column.
    expected = 15 if variant == "liere" else 3 + 5
    assert sizes == [expected * per_point]


@pytest.mark.parametrize("normalize", [None, "unit"])
@pytest.mark.parametrize("block_size", [2, 4, 16])
def test_liere_at_init_is_rope_mixed_with_the_same_draw(normalize, block_size):
    torch.manual_seed(3)
    liere = LieRE(HEAD_DIM, HEADS, block_size=block_size, normalize=normalize)
    torch.manual_seed(3)
    mixed = RoPE2D(HEAD_DIM, HEADS, "mixed", normalize=normalize, layout="interleaved")
    coords = patch_coords((5, 7), normalize)
    x = torch.randn(2, HEADS, 35, HEAD_DIM)
    torch.testing.assert_close(liere(x, coords), mixed(x, coords), rtol=0, atol=1e-5)


@pytest.mark.parametrize("block_size", [2, 4, 8])
def test_comrope_score_depends_only_on_the_offset(block_size):
    torch.manual_seed(0)
    enc = LieRE(HEAD_DIM, HEADS, "comrope", block_size=block_size, init_std=0.5)
    assert _shift_gap(enc) < 1e-4
    q, k = torch.randn(HEADS, HEAD_DIM), torch.randn(HEADS, HEAD_DIM)
    base = _score(enc, q, k, (0.0, 0.0), (0.0, 0.0))
    for offset in [(2.0, 0.0), (0.0, 2.0)]:  # ... and does depend on it, along both axes
        assert (_score(enc, q, k, (0.0, 0.0), offset) - base).abs().max() > 1e-2


def test_liere_is_relative_when_its_generators_commute():
    enc = LieRE(HEAD_DIM, HEADS, block_size=8)
    assert _shift_gap(enc) < 1e-4  # the mixed init: 2 x 2 rotations in shared planes
    # Dense commuting generators: one orthogonal basis U per head and block, A_a = U L_a U^T.
    blocks = HEAD_DIM // 8
    u = torch.linalg.qr(torch.randn(HEADS, blocks, 8, 8, dtype=torch.float64))[0]
    planes = torch.zeros(HEADS, 2, blocks, 8, 8, dtype=torch.float64)
    for i in range(4):
        t = torch.randn(HEADS, 2, blocks, dtype=torch.float64)
        planes[..., 2 * i + 1, 2 * i], planes[..., 2 * i, 2 * i + 1] = t, -t
    a = u[:, None] @ planes @ u[:, None].mT
    with torch.no_grad():
        enc.generators.copy_(a / 2)
    assert (a[:, 0] @ a[:, 1] - a[:, 1] @ a[:, 0]).abs().max() < 1e-12
    assert (a[:, 0] @ a[:, 1]).abs().max() > 1e-1  # dense: not RoPE-Mixed's planes
    assert _shift_gap(enc) < 1e-4


def test_liere_with_non_commuting_generators_is_not_relative():
    # The general case (the papers' random init, or LieRE after training): the score also
    # depends on where the pair sits, not only on its offset.
    torch.manual_seed(0)
    enc = LieRE(HEAD_DIM, HEADS, init="random", init_std=0.3)
    a = enc.axis_generators().detach()
    assert (a[:, 0] @ a[:, 1] - a[:, 1] @ a[:, 0]).abs().max() > 1e-1
    assert _shift_gap(enc) > 1e-1


@pytest.mark.parametrize("variant", ["liere", "comrope"])
def test_rotations_are_orthogonal_and_keep_norms(variant):
    enc = LieRE(HEAD_DIM, HEADS, variant, block_size=4, init="random")
    rot = enc.rotation(patch_coords((3, 4)) * 1.7)
    r = rot.matrices().double()
    eye = torch.eye(4, dtype=torch.float64).expand_as(r)
    torch.testing.assert_close(r.mT @ r, eye, rtol=0, atol=1e-6)
    if rot.basis is not None:  # in planes: cos and sin of each plane's angle
        cos, sin = rot.turns.unflatten(-1, (-1, 2)).unbind(-1)
        torch.testing.assert_close(cos.square() + sin.square(), torch.ones_like(cos))
    x = torch.randn(2, HEADS, 12, HEAD_DIM)
    out = enc(x, patch_coords((3, 4)) * 1.7)
    torch.testing.assert_close(out.unflatten(-1, (4, 4)).norm(dim=-1),
                               x.unflatten(-1, (4, 4)).norm(dim=-1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["liere", "comrope"])
def test_zero_generators_and_prefix_tokens_are_the_identity(variant):
    enc = LieRE(HEAD_DIM, HEADS, variant)
    x = torch.randn(2, HEADS, 10, HEAD_DIM)
    positions = GridPositions(patch_coords(3), (3, 3), num_prefix_tokens=1)
    assert torch.equal(enc(x, positions)[:, :, 0], x[:, :, 0])
    assert not torch.allclose(enc(x, positions)[:, :, 1:], x[:, :, 1:])
    with torch.no_grad():
        enc.generators.zero_()
    assert torch.equal(enc(x, positions), x)


@pytest.mark.parametrize("variant", ["liere", "comrope"])
def test_generators_are_learned_through_attention_with_prefix_tokens(variant):
    enc = LieRE(HEAD_DIM, HEADS, variant)
    attn = MultiheadAttention(HEAD_DIM * HEADS, HEADS, rotary=enc)
    positions = GridPositions(patch_coords((2, 3)), (2, 3), num_prefix_tokens=1)
    out = attn(torch.randn(2, 7, HEAD_DIM * HEADS), query_positions=positions)
    out.square().sum().backward()
    for p in enc.parameters():
        assert p.grad is not None and p.grad.isfinite().all() and p.grad.abs().sum() > 0
    names = {"generators"} | ({"axis_scales"} if variant == "comrope" else set())
    assert enc.no_weight_decay() == names == set(enc.state_dict())
    assert no_weight_decay_names(attn) == {f"rotary.{n}" for n in names}


def test_shapes_and_dtypes():
    enc = LieRE(HEAD_DIM, HEADS, block_size=4).to(torch.bfloat16)
    assert enc.generators.dtype == torch.float32  # kept under a module cast
    rot = enc.rotation(GridPositions(patch_coords(2), num_prefix_tokens=2))
    assert isinstance(rot, BlockRotation) and rot.block_size == 4
    assert rot.turns.shape == (1, HEADS, 6, 4 * 4 * 4) and rot.extent == (1, HEADS, 6)
    assert rot.turns.dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert enc.rotation(patch_coords(2)).turns.dtype == torch.float32
    x = torch.randn(2, HEADS, 4, HEAD_DIM, dtype=torch.bfloat16)
    out = enc(x, patch_coords(2))
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    assert torch.equal(out, apply_rotation(x, enc.rotation(patch_coords(2))))
    wide = enc.rotation(patch_coords(2, dtype=torch.float64))
    assert wide.turns.dtype == torch.float64
    # Batched coordinates: one rotation per batch element.
    coords = torch.stack((patch_coords(2), patch_coords(2).flip(0) * 3))
    x = torch.randn(2, HEADS, 4, HEAD_DIM)
    batched = enc(x, coords)
    torch.testing.assert_close(batched[1], enc(x[1:], coords[1])[0])


@pytest.mark.parametrize("variant", ["liere", "comrope"])
def test_meta_build_then_to_empty_and_reset_parameters_equals_a_normal_build(variant):
    torch.manual_seed(5)
    reference = LieRE(HEAD_DIM, HEADS, variant)
    with torch.device("meta"):
        meta = LieRE(HEAD_DIM, HEADS, variant)
    assert all(p.is_meta for p in meta.parameters())
    meta.to_empty(device="cpu")
    torch.manual_seed(5)
    meta.reset_parameters()
    for name, p in reference.named_parameters():
        assert torch.equal(getattr(meta, name), p) and getattr(meta, name).dtype == torch.float32


def test_attach_gives_a_timm_vit_one_liere_per_block():
    model = make_vit()
    attn = model.blocks[0].attn
    encodings = [LieRE(attn.head_dim, attn.num_heads, "comrope", normalize="unit")
                 for _ in model.blocks]
    model = attach(model, encodings)
    assert model.coord_normalize == "unit"
    out = model(torch.randn(2, 3, 32, 32))
    out.sum().backward()
    assert encodings[1].generators.grad.abs().sum() > 0
    assert model(torch.randn(1, 3, 32, 56)).shape == (1, 5)  # another grid, non-square


def test_bad_arguments():
    with pytest.raises(ValueError, match="block_size must be >= 2 and divide head_dim=16, got 6"):
        LieRE(16, 2, block_size=6)
    with pytest.raises(ValueError, match="block_size must be >= 2"):
        LieRE(16, 2, block_size=1)
    with pytest.raises(TypeError, match="block_size must be an int"):
        LieRE(16, 2, block_size=4.0)
    with pytest.raises(ValueError, match="variant"):
        LieRE(16, 2, "comrope_ap")
    with pytest.raises(ValueError, match="init='mixed'.*variant='comrope'"):
        LieRE(16, 2, "comrope", init="mixed")
    with pytest.raises(ValueError, match="init='mixed'.*block_size=3"):
        LieRE(12, 2, block_size=3)
    assert LieRE(12, 2, block_size=3, init="random").generators.shape == (2, 2, 4, 3, 3)
    with pytest.raises(ValueError, match="init"):
        LieRE(16, 2, init="orthogonal")
    with pytest.raises(ValueError, match="init_std"):
        LieRE(16, 2, init="random", init_std=0.0)
    with pytest.raises(ValueError, match="normalize"):
        LieRE(16, 2, normalize="pixels")
    with pytest.raises(ValueError, match="head_dim"):
        MultiheadAttention(64, 4, rotary=LieRE(8, 4))


def test_rotate_names_what_does_not_fit():
    enc = LieRE(HEAD_DIM, HEADS)
    coords = patch_coords(2)
    with pytest.raises(TypeError, match="^x must be a torch.Tensor, got list"):
        enc([1.0], coords)
    with pytest.raises(ValueError, match=r"x must have shape \(B, H=3, N, head_dim=16\), got "
                                         r"\(1, 2, 4, 16\)"):
        enc(torch.zeros(1, 2, 4, HEAD_DIM), coords)
    with pytest.raises(ValueError, match=r"with 1 prefix tokens do not match x of shape "
                                         r"\(1, 3, 4, 16\).*prefix \+ N = 4, B = 1"):
        enc(torch.zeros(1, HEADS, 4, HEAD_DIM), GridPositions(coords, num_prefix_tokens=1))
    with pytest.raises(ValueError, match=r"\(N, 2\)"):
        enc.rotation(torch.zeros(5))
    with pytest.raises(ValueError, match=r"a block rotation of shape \(1, 3, 4, 128\).*does "
                                         r"not fit x of shape \(1, 3, 5, 16\)"):
        enc.rotation(coords).apply(torch.zeros(1, HEADS, 5, HEAD_DIM))
    attn = MultiheadAttention(HEAD_DIM * HEADS, HEADS, rotary=enc)
    with pytest.raises(ValueError, match=r"query_positions of shape \(4, 2\) give 4 positions "
                                         r"for 5 tokens"):
        attn(torch.zeros(1, 5, HEAD_DIM * HEADS), query_positions=coords)


@pytest.mark.slow
def test_rotation_traces_as_one_graph():
    # fullgraph=True fails on any graph break, e.g. a .item() (a host synchronisation on GPUs);
    # the eager backend traces with Dynamo without generating code, which keeps this fast.
    # Compiled, ComRoPE takes the exponential per token (eager on the CPU: its planes), so the
    # two are compared as the rotation matrices they give.
    enc = LieRE(HEAD_DIM, HEADS, "comrope")
    coords = patch_coords((3, 4))
    compiled = torch.compile(lambda c: enc.rotation(c).matrices(), backend="eager",
                             fullgraph=True)
    torch.testing.assert_close(compiled(coords), enc.rotation(coords).matrices())
