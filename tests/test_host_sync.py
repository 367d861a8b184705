"""A forward pass a GPU does not wait on: no host synchronisation inside the blocks.

Every way a tensor's values reach Python (``.item()``, ``bool()``, ``int()``, ``float()``,
``.tolist()``, ``.cpu()``, ``.numpy()``) is a host synchronisation on a GPU. Positions are
checked once where they are made (the model's edge); blocks check shapes and dtypes only.
The tensors here live on the CPU, where the same calls are counted by wrapping them.
"""

from __future__ import annotations

import collections
import contextlib
import traceback
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
import timm
import torch
from posenc.spatial.video import VIDEO_ENCODINGS, VideoVisionTransformer
from posenc.tasks import Forecaster, TimeSeriesDataModule
from posenc.tasks.forecasting.network import TIME_ENCODINGS

from posenc import core, spatial

# Tensor methods through which values reach the host.
READS = ("item", "__bool__", "__int__", "__float__", "__index__", "tolist", "cpu", "numpy")


def _call_site(name: str) -> tuple[str, str]:
    """``(name, "folder/file.py:line")`` of the code that called the wrapper calling this."""
    caller = traceback.extract_stack(limit=3)[0]
    return name, f"{caller.filename.rsplit('/', 2)[-2:]}:{caller.lineno}"


class HostReads:
    """Counts host reads, in total and while a block of ``blocks`` runs (forward hooks set a
    flag, so a gradient-checkpointed block's recompute in backward counts too)."""

    def __init__(self, blocks: list[torch.nn.Module] = ()) -> None:
        self.total: collections.Counter = collections.Counter()
        self.in_blocks: collections.Counter = collections.Counter()
        self._depth = 0
        for block in blocks:
            block.register_forward_pre_hook(self._enter)
            block.register_forward_hook(self._leave)

    def _enter(self, module, args) -> None:
        self._depth += 1

    def _leave(self, module, args, output) -> None:
        self._depth -= 1

    @contextlib.contextmanager
    def counting(self) -> Iterator[HostReads]:
        originals = {name: getattr(torch.Tensor, name) for name in READS}

        def wrap(name: str):
            def read(tensor, *args, **kwargs):
                where = _call_site(name)
                self.total[where] += 1
                if self._depth:
                    self.in_blocks[where] += 1
                return originals[name](tensor, *args, **kwargs)
            return read

        for name in READS:
            setattr(torch.Tensor, name, wrap(name))
        try:
            yield self
        finally:
            for name, original in originals.items():
                setattr(torch.Tensor, name, original)


# -- attached ViT ----------------------------------------------------------------------------
def _timm_vit(depth: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32,
                             patch_size=8, depth=depth, num_classes=3, embed_dim=32,
                             num_heads=2)


def _vit(name: str, depth: int) -> torch.nn.Module:
    return spatial.attach(_timm_vit(depth), name)


@pytest.fixture(autouse=True)
def _as_on_a_gpu(monkeypatch):
    """LieRE's exponential reads its loop length on the CPU only, where a read costs no
    synchronisation; count reads on the path a GPU takes."""
    monkeypatch.setattr("posenc.spatial.liere._reads_are_free", lambda t: False)


def _vit_reads(name: str, depth: int, *, checkpointing: bool = False) -> HostReads:
    model = _vit(name, depth).train()
    model.set_grad_checkpointing(checkpointing)
    images = torch.randn(2, 3, 32, 48)  # not the training size: tables resize, grids differ
    counter = HostReads(list(model.blocks))
    with counter.counting():
        model(images).square().mean().backward()
    return counter


@pytest.mark.parametrize("name", list(spatial.ENCODINGS))
def test_attached_vit_blocks_never_read_values(name):
    """Forward and backward, with gradient checkpointing (blocks recompute in backward):
    zero reads inside the blocks; what the edge reads is once per forward, whatever the
    depth (factorized's range check), and nothing at all for every other encoding (relative
    tables check offsets only when called directly: the model's positions lie on its grid)."""
    deep = _vit_reads(name, depth=3, checkpointing=True)
    assert dict(deep.in_blocks) == {}
    assert sum(_vit_reads(name, depth=1).total.values()) == sum(deep.total.values())
    if name != "factorized":  # its learned rows and columns check their range once
        assert dict(deep.total) == {}


# -- Forecaster ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def batch() -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(0)
    stamps = pd.date_range("2021-03-20", periods=400, freq="1h", tz="UTC")
    frame = pd.DataFrame({"timestamp": stamps, "value": rng.normal(size=400)})
    frame = frame[rng.random(400) < 0.8].reset_index(drop=True)  # irregular
    dm = TimeSeriesDataModule(frame, context_length="1D", horizon="6h", stride="4h",
                              batch_size=4, tz="Europe/Berlin")
    dm.setup("fit")
    return next(iter(dm.train_dataloader()))


def _forecaster_reads(batch, encodings: list[str], relative: str | None, depth: int
                      ) -> HostReads:
    torch.manual_seed(0)
    model = Forecaster(encodings=encodings, relative=relative, dim=16, depth=depth,
                       num_heads=2)
    counter = HostReads(list(model.model.blocks))
    with counter.counting():
        model(batch).sum().backward()
    return counter


@pytest.mark.parametrize("relative", ["rope", "alibi", None])
@pytest.mark.parametrize("encoding", list(TIME_ENCODINGS))
def test_forecaster_blocks_never_read_values(batch, encoding, relative):
    """Relative positions are elapsed time made from int64 timestamps (finite by
    construction) and calendar fields come with the batch: zero reads in the blocks, and
    the time features' own checks run once per forward, whatever the depth."""
    deep = _forecaster_reads(batch, [encoding], relative, depth=3)
    assert dict(deep.in_blocks) == {}
    shallow = _forecaster_reads(batch, [encoding], relative, depth=1)
    assert sum(shallow.total.values()) == sum(deep.total.values())


@pytest.mark.parametrize("relative", ["rope", "alibi", None])
@pytest.mark.parametrize("encodings", [[], ["continuous"], ["time2vec"], ["index_sinusoidal"]])
def test_forecaster_on_elapsed_time_reads_nothing_at_all(batch, encodings, relative):
    assert dict(_forecaster_reads(batch, encodings, relative, depth=2).total) == {}


# -- a direct MultiheadAttention call is its own edge ------------------------------------------
def _attention() -> core.MultiheadAttention:
    torch.manual_seed(0)
    return core.MultiheadAttention(16, 2, rotary=core.RotaryEncoding(8),
                                   bias=core.ALiBi(2, causal=False))


def _reads(call) -> int:
    counter = HostReads()
    with counter.counting():
        call()
    return sum(counter.total.values())


def test_direct_attention_reads_each_positions_tensor_once_per_call():
    """Rotation and bias each check their positions; the call reads every distinct tensor
    once (before: 3 reads for self-attention with RoPE and ALiBi), and none of positions a
    model made finite by construction (``known_finite``, what a model's blocks are given)."""
    attn = _attention()
    x, context = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    q, k = torch.rand(5) * 10, torch.rand(7) * 10
    assert _reads(lambda: attn(x, query_positions=q)) == 1
    assert _reads(lambda: attn(x, context, query_positions=q, key_positions=k)) == 2
    made_q, made_k = core._checks.known_finite(q), core._checks.known_finite(k)
    assert _reads(lambda: attn(x, context, query_positions=made_q, key_positions=made_k)) == 0
    torch.testing.assert_close(attn(x, context, query_positions=made_q, key_positions=made_k),
                               attn(x, context, query_positions=q, key_positions=k))
    assert _reads(lambda: attn(x, query_positions=torch.arange(5))) == 0  # integers: finite


def test_a_checked_tensor_edited_afterwards_is_checked_again():
    """What a check passes on is a view for that call: the caller's tensor carries nothing, so
    its next use is read again (in place or through numpy, where no version counter sees it)."""
    attn = _attention()
    x = torch.randn(1, 3, 16)
    positions = torch.tensor([0.0, 1.0, 2.0])
    attn(x, query_positions=positions)
    positions[1] = float("nan")
    with pytest.raises(ValueError, match=r"^query_positions must be finite"):
        attn(x, query_positions=positions)
    positions[1] = 1.0
    attn.rotary.rotation(positions)
    positions.numpy()[2] = float("inf")
    with pytest.raises(ValueError, match=r"^positions must be finite"):
        attn.rotary.rotation(positions)


@pytest.mark.parametrize("method, args", [
    ("rotation", ("q",)), ("forward", ("q", "q")), ("score_mod", ("q", "k"))])
def test_encodings_read_where_called_and_not_what_a_model_made(method, args):
    """A public encoding method reads each positions tensor once; given positions a model
    made finite by construction (``known_finite``, as inside its forward) it reads nothing
    and gives the same."""
    attn = _attention()
    encoding = attn.rotary if method == "rotation" else attn.bias
    tensors = {"q": torch.rand(5) * 10, "k": torch.rand(7) * 10}
    positions = [tensors[a] for a in args]
    made = [core._checks.known_finite(p) for p in positions]
    assert _reads(lambda: getattr(encoding, method)(*positions)) == len(set(args))
    assert _reads(lambda: getattr(encoding, method)(*made)) == 0
    if method != "score_mod":
        out, expected = getattr(encoding, method)(*made), getattr(encoding, method)(*positions)
        if method == "rotation":
            out, expected = out.cos, expected.cos
        torch.testing.assert_close(out, expected)


def test_direct_attention_still_refuses_non_finite_positions_by_name():
    attn = _attention()
    x, context = torch.randn(2, 3, 16), torch.randn(2, 3, 16)
    good, bad = torch.zeros(3), torch.tensor([0.0, float("nan"), 1.0])
    with pytest.raises(ValueError, match=r"^query_positions must be finite, got NaN or inf"):
        attn(x, query_positions=bad)
    with pytest.raises(ValueError, match=r"^key_positions must be finite, got NaN or inf"):
        attn(x, context, query_positions=good, key_positions=bad * float("inf"))
    with pytest.raises(TypeError, match=r"^query_positions must be an integer, float32 or "
                                        r"float64 tensor, got torch.bfloat16"):
        attn(x, query_positions=bad.bfloat16())
    with pytest.raises(TypeError, match="positions_checked"):  # no flag skips the check
        attn(x, query_positions=good, positions_checked=True)
    grid = spatial.coords.GridPositions(torch.tensor([[0.0, 0.0], [0.0, float("inf")], [1.0, 0.0]]))
    rope2d = core.MultiheadAttention(16, 2, rotary=spatial.RoPE2D(8, 2, "axial"))
    with pytest.raises(ValueError, match=r"^query_positions.coords must be finite"):
        rope2d(x, query_positions=grid)


def test_check_position_shape_skips_only_the_finiteness_read():
    bad = torch.tensor([float("nan")])
    assert _reads(lambda: core._checks.check_position_shape(bad)) == 0
    assert core._checks.check_position_shape(bad) is bad
    with pytest.raises(TypeError, match=r"^positions must be an integer, float32"):
        core._checks.check_position_shape(bad.half())  # dtype and shape checks still run
    with pytest.raises(ValueError, match=r"^positions must have shape \(N\)"):
        core._checks.check_position_shape(bad[None, None])
    with pytest.raises(ValueError, match=r"^positions must be finite"):
        core._checks.check_positions(bad)
    assert _reads(lambda: core._checks.check_positions(bad[:0] + 1.0)) == 1


# -- tensors made from host data -------------------------------------------------------------
# On a GPU each is a host-to-device copy, which synchronises (CUDA's sync debug mode raises).
MAKERS = ((torch, "tensor"), (torch, "as_tensor"), (torch.Tensor, "new_tensor"))


@contextlib.contextmanager
def _host_data_tensors() -> Iterator[collections.Counter]:
    """Count the tensors made from host data (lists, scalars, arrays; not from a tensor) while
    the block runs, by call site."""
    made: collections.Counter = collections.Counter()
    originals = [(owner, name, getattr(owner, name)) for owner, name in MAKERS]

    def wrap(name, original):
        def make(*args, **kwargs):
            data = args[1] if name == "new_tensor" else args[0]
            if not isinstance(data, torch.Tensor):  # a tensor given stays where it is
                made[_call_site(name)] += 1
            return original(*args, **kwargs)
        return make

    for owner, name, original in originals:
        setattr(owner, name, wrap(name, original))
    try:
        yield made
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


@pytest.mark.parametrize("name", list(spatial.ENCODINGS))
def test_attached_vit_makes_no_tensor_from_host_data_after_its_first_pass(name):
    """After a first pass (which may build and keep what it needs per device), a training
    pass makes no tensor from host data anywhere."""
    model = _vit(name, depth=2).train()
    images = torch.randn(2, 3, 32, 48)
    model(images).square().mean().backward()
    with _host_data_tensors() as made:
        model(images).square().mean().backward()
    assert dict(made) == {}


@pytest.mark.parametrize("name", list(VIDEO_ENCODINGS))
def test_video_vit_makes_no_tensor_from_host_data_after_its_first_pass(name):
    torch.manual_seed(0)
    model = VideoVisionTransformer(_timm_vit(depth=2), name).train()
    clip, times = torch.randn(2, 3, 3, 32, 48), torch.tensor([0.0, 0.5, 2.0])
    model(clip, times).square().mean().backward()
    with _host_data_tensors() as made:
        model(clip, times).square().mean().backward()
    assert dict(made) == {}


@pytest.mark.parametrize("relative", ["rope", "alibi", None])
@pytest.mark.parametrize("encoding", list(TIME_ENCODINGS))
def test_forecaster_makes_no_tensor_from_host_data_after_its_first_pass(batch, encoding,
                                                                        relative):
    torch.manual_seed(0)
    model = Forecaster(encodings=[encoding], relative=relative, dim=16, depth=1, num_heads=2)
    model(batch).sum().backward()
    with _host_data_tensors() as made:
        model(batch).sum().backward()
    assert dict(made) == {}
