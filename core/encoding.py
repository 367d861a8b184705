"""What every posenc encoding shares: the base class, the argument checks, and the angles.

:class:`PositionEncoding` declares where an encoding enters a transformer (its ``kind``) and
that its parameters are position parameters; :class:`Float64Buffers` keeps frequencies in
float64 when the module is cast.

The checks raise ``ValueError``/``TypeError`` naming the argument, the value received and what
was expected, so a bad call fails where it is made rather than deep inside a kernel. Values
(finiteness) are read where positions enter (a data module, a function that builds positions,
a public encoding method): a read is a host synchronisation on a GPU, so blocks check shapes
only and call the encodings' unchecked methods (:func:`unchecked`).

Every sinusoidal and rotary encoding goes through :func:`angles`: a float32 product
``1e6 * inv_freq`` is only good to ~0.06 rad, so the product is formed in float64 and reduced
modulo 2*pi before it is narrowed to float32. An angle ``theta_i`` (``i < F``) fills two
channels, its sin and cos (sinusoidal) or the two channels a rotation turns together (rotary);
:data:`LAYOUTS` names where they sit in a width ``2F``:

- ``"interleaved"``: channels ``2i`` and ``2i + 1``, ``[sin t0, cos t0, sin t1, cos t1, ...]``
  (the sinusoidal paper's PE(p, 2i), PE(p, 2i+1); GPT-J/RoFormer rotary).
- ``"half"``: channels ``i`` and ``i + F``, ``[sin t0, sin t1, ..., cos t0, cos t1, ...]``
  (tensor2tensor's sinusoid; GPT-NeoX/Llama ``rotate_half`` rotary).

2D encodings add the order of the axes: :class:`posenc.spatial.SinCos2D` names
``"rows_cols"``/``"cols_rows"`` (each axis a ``"half"`` block of its own) and ``"half"`` (the
1D layout over the angles of both axes, rows then columns: timm's ``build_sincos2d_pos_embed``).
No layout is named after a library.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real
from typing import ClassVar

import torch
from torch import Tensor, nn

__all__ = [
    "check_int", "check_positions", "check_position_shape", "check_position_values",
    "check_pair_values", "check_position_dtype", "widen_positions", "check_finite",
    "check_positive_int", "check_positive_float", "check_float", "check_bool", "check_base",
    "check_even", "check_choice", "check_output_dtype", "LAYOUTS", "angles", "wide_dtype", "KINDS",
    "PositionEncoding", "encoding_kind", "no_weight_decay_names", "unchecked", "Float64Buffers",
]


# Positions keep float32 or float64: bfloat16 has 8 significant bits (1001 rounds to 1000) and
# float16 11, so a half-precision position is already the wrong position.
POSITION_FLOAT_DTYPES = (torch.float32, torch.float64)


def check_int(value: object, name: str, *, ge: int | None = None) -> int:
    """Return ``value`` if it is an ``int`` (not a bool), ``>= ge`` when given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if ge is not None and value < ge:
        raise ValueError(f"{name} must be >= {ge}, got {value}")
    return value


def check_positive_int(value: object, name: str) -> int:
    """Return ``value`` if it is an ``int`` >= 1."""
    return check_int(value, name, ge=1)


def check_bool(value: object, name: str) -> bool:
    """Return ``value`` if it is a ``bool``; anything else (``"no"``, ``0``, ``None``) raises,
    since Python would take a non-empty string for True."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__} "
                        f"({value!r})")
    return value


def _as_float(value: object, name: str) -> float:
    """``value`` as a float (ints and numpy scalars are accepted; bools, numpy bools included,
    are not); an int beyond float range becomes inf."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    try:
        return float(value)
    except OverflowError:
        return math.inf


def check_positive_float(value: object, name: str) -> float:
    """Return ``value`` as a ``float`` if it is a finite real number > 0."""
    number = _as_float(value, name)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a positive number (finite, > 0), got {value!r}")
    return number


def check_float(
    value: object, name: str, *, gt: float | None = None, ge: float | None = None,
    lt: float | None = None,
) -> float:
    """Return ``value`` as a finite ``float`` within the given bounds (``> gt``, ``>= ge``,
    ``< lt``): ``TypeError`` for a non-number or a bool, ``ValueError`` for NaN, inf or a value
    out of bounds, e.g. ``check_float(dropout, "dropout", ge=0, lt=1)``."""
    number = _as_float(value, name)
    bounds = [f"> {gt:g}"] if gt is not None else []
    bounds += [f">= {ge:g}"] if ge is not None else []
    bounds += [f"< {lt:g}"] if lt is not None else []
    if not (math.isfinite(number) and (gt is None or number > gt)
            and (ge is None or number >= ge) and (lt is None or number < lt)):
        raise ValueError(f"{name} must be a finite number {' and '.join(bounds)}, "
                         f"got {value!r}".replace("number , ", "number, "))
    return number


def check_base(base: object, name: str = "base") -> float:
    """Return a sinusoidal or rotary wavelength base as a float: a finite number > 1 (base 1
    gives every pair the same frequency)."""
    return check_float(base, name, gt=1)


def check_even(value: object, name: str) -> int:
    """Return ``value`` if it is a positive even ``int`` (sin/cos or rotation pairs)."""
    value = check_positive_int(value, name)
    if value % 2:
        raise ValueError(f"{name} must be even (it is split into sin/cos pairs), got {value}")
    return value


def check_choice(value: object, name: str, choices: tuple[object, ...]) -> object:
    """Return ``value`` if it is one of ``choices``, else raise listing them: ``TypeError``
    when its type is none of the choices' types (``variant=["axial"]``, ``normalize=1``;
    ``None`` is of the right type only where it is a choice), ``ValueError`` otherwise."""
    types = tuple({type(c) for c in choices})
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise TypeError(f"{name} must be one of {list(choices)}, got {type(value).__name__} "
                        f"({value!r})")
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_output_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    """Return ``dtype`` if it is a floating ``torch.dtype``: an integer output would round
    every sin/cos feature to -1, 0 or 1."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype (e.g. torch.float32), got "
                        f"{dtype!r}")
    return dtype


def check_finite(tensor: Tensor, name: str) -> Tensor:
    """Return ``tensor`` if every value is finite (integer tensors always are). Reads the
    values: skipped under ``torch.compile`` (a graph break), called where data enters."""
    if tensor.is_floating_point() and not torch.compiler.is_compiling():
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{name} must be finite, got NaN or inf values")
    return tensor


def widen_positions(positions: Tensor, name: str = "positions") -> Tensor:
    """Integer positions as int64; floating ones unchanged.

    Narrow integers wrap in arithmetic (uint8 ``0 - 5`` is 251) and uint8 indexes a table as a
    boolean mask. uint64 values past the int64 range raise (outside ``torch.compile``).
    """
    if positions.is_floating_point() or positions.dtype == torch.int64:
        return positions
    wide = positions.long()
    if positions.dtype == torch.uint64 and not torch.compiler.is_compiling():
        if bool((wide < 0).any()):
            raise ValueError(f"{name} must fit in int64, got uint64 values >= 2**63")
    return wide


def check_position_dtype(positions: Tensor, name: str = "positions") -> None:
    """Refuse half-precision (float16, bfloat16, float8) positions with a ``TypeError``."""
    if positions.is_floating_point() and positions.dtype not in POSITION_FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be an integer, float32 or float64 tensor, got {positions.dtype}: "
            "half-precision positions are already off by whole units (bfloat16 rounds 1001 "
            "to 1000); pass int or float32/float64 positions (the encoding's output follows "
            "the dtype of the tensor it is applied to)")


def check_position_shape(
    positions: Tensor, name: str = "positions", *, trailing: tuple[int, ...] = ()
) -> Tensor:
    """Check the type, dtype and shape ``(N, *trailing)`` or ``(B, N, *trailing)`` (e.g.
    ``trailing=(2,)`` for (row, col)) of a coordinate tensor, reading no values: what blocks
    and the encodings' unchecked methods run. Returns ``positions`` with integer dtypes
    widened to int64 (use the returned tensor).

    Integer, float32 and float64 positions are legal (fractional positions come from
    interpolation, packed images and continuous time); bool, complex and half-precision
    positions raise ``TypeError``, a wrong shape ``ValueError``.
    """
    if not isinstance(positions, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{name} must be an integer or floating tensor, got {positions.dtype}")
    check_position_dtype(positions, name)
    expected = ", ".join(["N", *map(str, trailing)])
    ndim = positions.ndim - len(trailing)
    if ndim not in (1, 2) or tuple(positions.shape[ndim:]) != trailing:
        raise ValueError(
            f"{name} must have shape ({expected}) or (B, {expected}), "
            f"got {tuple(positions.shape)}"
        )
    return widen_positions(positions, name)


def check_positions(
    positions: Tensor, name: str = "positions", *, trailing: tuple[int, ...] = ()
) -> Tensor:
    """:func:`check_position_shape`, then non-finite values raise ``ValueError``: for where
    positions enter."""
    return check_finite(check_position_shape(positions, name, trailing=trailing), name)


def check_position_values(positions: object, name: str = "positions") -> None:
    """Refuse half-precision and non-finite ``positions`` (a tensor, or an object carrying one
    as ``.coords``: ``posenc.spatial.GridPositions``/``VideoPositions``); anything else is
    left to the shape checks that follow. The value check of a public encoding method, before
    it calls its unchecked twin (``rotation`` -> ``_rotation``)."""
    tensor = getattr(positions, "coords", positions)
    if isinstance(tensor, Tensor):
        name = name if tensor is positions else f"{name}.coords"
        check_position_dtype(tensor, name)  # a dtype error comes before a read of values
        check_finite(tensor, name)


def check_pair_values(query_positions: object, key_positions: object) -> None:
    """:func:`check_position_values` of ``query_positions`` and ``key_positions`` (read once
    when they are the same object, as in self-attention)."""
    check_position_values(query_positions, "query_positions")
    if key_positions is not query_positions:
        check_position_values(key_positions, "key_positions")


LAYOUTS = ("half", "interleaved")


def wide_dtype(device: torch.device) -> torch.dtype:
    """float64 wherever the backend has it (Apple MPS does not; it gets float32)."""
    return torch.float32 if device.type == "mps" else torch.float64


def angles(positions: Tensor, inv_freq: Tensor) -> Tensor:
    """Angles ``positions[..., None] * inv_freq`` of ``(...)`` int or float coordinates and
    ``(F,)`` angular frequencies (float64 for full precision; or any shape that broadcasts
    against ``(..., F)``, e.g. per-head ``(H, 1, F)``).

    Returns:
        ``(..., F)`` float32 angles reduced to ``[0, 2*pi)``; float64 (unreduced) when
        ``positions`` is float64, so callers that need float64 sin/cos get them.
    """
    for name, t in (("positions", positions), ("inv_freq", inv_freq)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    check_position_dtype(positions)
    wide = wide_dtype(positions.device)
    theta = positions.to(wide)[..., None] * inv_freq.to(device=positions.device, dtype=wide)
    if positions.dtype == torch.float64:
        return theta
    return torch.remainder(theta, 2 * math.pi).float()


KINDS = ("additive", "rotary", "bias", "none")
"""Where an encoding enters a transformer: added to the token embeddings, rotating q and k,
added to the attention logits, or nowhere (the NoPE baseline).
"""


class PositionEncoding(nn.Module):
    """Base of posenc's encoding modules.

    Every subclass declares its ``kind`` (one of :data:`KINDS`), so code that places an
    encoding (an attention module, ``posenc.spatial.attach``, the forecaster) asks the class
    rather than guessing from its name or methods. Every parameter an encoding owns places
    tokens rather than transforms their content, so weight decay would only pull positions
    towards each other: :meth:`no_weight_decay` names them all (timm's convention, read by
    :func:`no_weight_decay_names`).
    """

    kind: ClassVar[str]

    def no_weight_decay(self) -> set[str]:
        """Names (relative to this module) of the parameters to keep out of weight decay."""
        return {name for name, _ in self.named_parameters()}


def encoding_kind(encoding: object) -> str:
    """``"additive"``, ``"rotary"``, ``"bias"`` or ``"none"``: the ``kind`` that ``encoding``
    (a module or a class) declares; None is ``"none"``. Anything else raises a ``TypeError``
    naming the class."""
    if encoding is None:
        return "none"
    kind = getattr(encoding, "kind", None)
    if kind not in KINDS:
        name = encoding.__name__ if isinstance(encoding, type) else type(encoding).__name__
        raise TypeError(f"{name} does not declare how it enters a transformer: give the class "
                        f"a kind attribute, one of {list(KINDS)} (posenc's encodings derive "
                        f"from posenc.core.PositionEncoding and declare it), got {kind!r}")
    return kind


def no_weight_decay_names(model: nn.Module) -> set[str]:
    """Full names of the parameters of ``model`` that it or its submodules exclude from weight
    decay through a ``no_weight_decay()`` method (posenc encodings, timm models and layers).
    Names a module lists that it does not own (timm lists ``dist_token`` on every ViT) are
    ignored."""
    owned = {name for name, _ in model.named_parameters()}
    names: set[str] = set()
    for prefix, module in model.named_modules():
        declared = getattr(module, "no_weight_decay", None)
        if callable(declared):
            names.update(f"{prefix}.{name}" if prefix else name for name in declared())
    return names & owned


def unchecked(encoding: object, method: str = "forward") -> Callable:
    """``encoding``'s ``method`` without its value checks: the unchecked twin (``_rotation``,
    ``_key_rotation``, ``_forward``, ``_score_mod``) that checks shapes only, for callers whose
    positions were checked where they entered or made from shapes (a model's edge and its
    blocks, as timm's Eva builds its rotary embedding once and passes it to the blocks). An
    encoding of the user's own, without the twin, gets its public method."""
    internal = getattr(encoding, f"_{method}", None)
    if internal is not None:
        return internal
    return encoding if method == "forward" else getattr(encoding, method)


class Float64Buffers(PositionEncoding):
    """Base for modules that keep frequencies in float64: the one ``_apply`` override in posenc.

    ``model.to(torch.bfloat16)`` casts every floating buffer; a bf16 inverse frequency is off
    by up to 0.4%, whole radians at position 1000. The buffers returned by
    :meth:`float64_buffers` (computed from the constructor's arguments, so not in the state
    dict) follow the module across devices but keep float64. Subclasses call
    :meth:`reset_float64_buffers` in ``__init__``. Under ``torch.device("meta")`` the buffers
    have no values: ``to_empty(device=...)`` recomputes them there, and, as for every posenc
    encoding and torchtune's modules, ``reset_parameters()`` after ``to_empty`` restores the
    whole encoding (learned parameters included).

    Learnable frequencies follow the same rule: the parameters named in
    :attr:`fixed_dtype_parameters` (e.g. RoPE2D's mixed ``freqs``, float32) move across
    devices in place (an optimizer keeps holding them) but keep their dtype; unlike the
    buffers they are in the state dict.
    """

    #: Names of parameters that move across devices but keep their dtype.
    fixed_dtype_parameters: tuple[str, ...] = ()

    def float64_buffers(self) -> dict[str, Tensor]:
        """The float64 buffers, computed from the constructor's arguments (it runs under a CPU
        device context). Subclasses override it."""
        return {}

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
        for name, tensor in built.items():
            self.register_buffer(name, tensor.to(device, torch.float64), persistent=False)
        names = getattr(self, "_float64_buffer_names", ())
        self._float64_buffer_names = (*names, *(n for n in built if n not in names))

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True):
        names = getattr(self, "_float64_buffer_names", ())
        kept = {n: self._buffers.pop(n) for n in names}
        params = {n: self._parameters.pop(n) for n in self.fixed_dtype_parameters
                  if n in self._parameters}
        try:
            super()._apply(fn, recurse)
        finally:  # an _apply that fails leaves these unchanged, not missing
            self._buffers.update(kept)
            self._parameters.update(params)
        rebuild_on = None
        for n, t in kept.items():
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
        for n, p in params.items():
            if p is None:
                continue
            device = _target_device(fn, p)
            if p.is_meta and device.type != "meta":
                # No values to copy, and a meta tensor cannot become a real parameter's .data:
                # reset_parameters() fills the new one.
                self._parameters[n] = nn.Parameter(torch.empty_like(p, device=device),
                                                   requires_grad=p.requires_grad)
            elif device != p.device:  # in place: optimizers hold the object
                p.data = p.data.to(device)
                if p.grad is not None:
                    p.grad = p.grad.to(device)
        return self


def _target_device(fn: Callable[[Tensor], Tensor], t: Tensor) -> torch.device:
    """The device ``fn`` (a ``Module._apply`` function) moves ``t`` to, read off an empty
    probe so ``fn`` never casts the float64 buffer itself."""
    try:
        return fn(torch.empty(0, dtype=t.dtype, device=t.device)).device
    except NotImplementedError:  # fn copies out of a meta tensor: it moves to a real device
        return fn(torch.empty(0, dtype=t.dtype)).device
