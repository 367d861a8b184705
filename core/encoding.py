"""What every posenc encoding shares: the base class, the argument checks, and the angles.

The checks raise ``ValueError``/``TypeError`` naming the argument, the value and what was
expected. Values are read only where positions enter (a read is a host sync on a GPU); blocks
check shapes and call the unchecked methods ([`unchecked`][posenc.core.encoding.unchecked]).
[`angles`][posenc.core.encoding.angles] are formed in float64 and reduced modulo 2*pi before
narrowing (a float32 ``1e6 * inv_freq`` is off by ~0.06 rad). `LAYOUTS`: angle ``i < F`` fills
channels ``2i, 2i + 1`` (``"interleaved"``: the sinusoidal paper, GPT-J) or ``i, i + F``
(``"half"``: tensor2tensor, GPT-NeoX/Llama).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real
from typing import ClassVar

import torch
from torch import Tensor, nn

__all__ = ["check_int", "check_positions", "check_position_shape", "check_position_values",
           "check_pair_values", "check_position_dtype", "widen_positions", "check_finite",
           "check_positive_int", "check_positive_float", "check_float", "check_bool", "check_base",
           "check_even", "check_choice", "check_output_dtype", "LAYOUTS", "angles", "wide_dtype",
           "KINDS", "PositionEncoding", "encoding_kind", "no_weight_decay_names", "unchecked",
           "Float64Buffers"]


# bfloat16 rounds 1001 to 1000: a half-precision position is already the wrong position.
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
    """Return ``value`` if it is a ``bool`` (``"no"``, ``0`` or ``None`` raise)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {type(value).__name__} "
                        f"({value!r})")
    return value


def _as_float(value: object, name: str) -> float:
    """``value`` as a float (bools refused); an int beyond float range becomes inf."""
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


def check_float(value: object, name: str, *, gt: float | None = None,
                ge: float | None = None, lt: float | None = None) -> float:
    """Return ``value`` as a finite ``float`` within the given bounds (``> gt``, ``>= ge``,
    ``< lt``): ``TypeError`` for a non-number or a bool, ``ValueError`` otherwise."""
    number = _as_float(value, name)
    bounds = [f"{op} {bound:g}" for op, bound in ((">", gt), (">=", ge), ("<", lt))
              if bound is not None]
    if not (math.isfinite(number) and (gt is None or number > gt)
            and (ge is None or number >= ge) and (lt is None or number < lt)):
        raise ValueError(f"{name} must be a finite number {' and '.join(bounds)}, "
                         f"got {value!r}".replace("number , ", "number, "))
    return number


def check_base(base: object, name: str = "base") -> float:
    """Return a sinusoidal or rotary wavelength base as a float: a finite number > 1."""
    return check_float(base, name, gt=1)


def check_even(value: object, name: str) -> int:
    """Return ``value`` if it is a positive even ``int`` (sin/cos or rotation pairs)."""
    value = check_positive_int(value, name)
    if value % 2:
        raise ValueError(f"{name} must be even (it is split into sin/cos pairs), got {value}")
    return value


def check_choice(value: object, name: str, choices: tuple[object, ...]) -> object:
    """Return ``value`` if it is one of ``choices``, else raise listing them: ``TypeError``
    when its type is none of the choices' types, ``ValueError`` otherwise."""
    types = tuple({type(c) for c in choices})
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise TypeError(f"{name} must be one of {list(choices)}, got {type(value).__name__} "
                        f"({value!r})")
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_output_dtype(dtype: object, name: str = "dtype") -> torch.dtype:
    """Return ``dtype`` if it is a floating ``torch.dtype``."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating torch.dtype (e.g. torch.float32), got "
                        f"{dtype!r}")
    return dtype


def check_finite(tensor: Tensor, name: str) -> Tensor:
    """Return ``tensor`` if every value is finite; reads the values (skipped when compiling)."""
    if (tensor.is_floating_point() and not torch.compiler.is_compiling()
            and not bool(torch.isfinite(tensor).all())):
        raise ValueError(f"{name} must be finite, got NaN or inf values")
    return tensor


def widen_positions(positions: Tensor, name: str = "positions") -> Tensor:
    """Integer positions as int64 (narrow ones wrap: uint8 ``0 - 5`` is 251), floating ones
    unchanged; uint64 values past the int64 range raise (outside ``torch.compile``)."""
    if positions.is_floating_point() or positions.dtype == torch.int64:
        return positions
    wide = positions.long()
    if (positions.dtype == torch.uint64 and not torch.compiler.is_compiling()
            and bool((wide < 0).any())):
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


def check_position_shape(positions: Tensor, name: str = "positions", *,
                         trailing: tuple[int, ...] = ()) -> Tensor:
    """Check the type, dtype and shape ``(N, *trailing)`` or ``(B, N, *trailing)`` of a
    coordinate tensor without reading values; return it with integers widened to int64.

    Bool, complex and half-precision positions raise ``TypeError``, a wrong shape ``ValueError``.
    """
    if not isinstance(positions, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{name} must be an integer or floating tensor, got {positions.dtype}")
    check_position_dtype(positions, name)
    expected = ", ".join(["N", *map(str, trailing)])
    ndim = positions.ndim - len(trailing)
    if ndim not in (1, 2) or tuple(positions.shape[ndim:]) != trailing:
        raise ValueError(f"{name} must have shape ({expected}) or (B, {expected}), "
                         f"got {tuple(positions.shape)}")
    return widen_positions(positions, name)


def check_positions(positions: Tensor, name: str = "positions", *,
                    trailing: tuple[int, ...] = ()) -> Tensor:
    """[`check_position_shape`][posenc.core.encoding.check_position_shape], then non-finite values
    raise ``ValueError``."""
    return check_finite(check_position_shape(positions, name, trailing=trailing), name)


def check_position_values(positions: object, name: str = "positions") -> None:
    """Refuse half-precision and non-finite ``positions`` (a tensor, or an object carrying one
    as ``.coords``); anything else is left to the shape checks that follow."""
    tensor = getattr(positions, "coords", positions)
    if isinstance(tensor, Tensor):
        name = name if tensor is positions else f"{name}.coords"
        check_position_dtype(tensor, name)  # a dtype error comes before a read of values
        check_finite(tensor, name)


def check_pair_values(query_positions: object, key_positions: object) -> None:
    """[`check_position_values`][posenc.core.encoding.check_position_values] of both (read once when
    they are the same object)."""
    check_position_values(query_positions, "query_positions")
    if key_positions is not query_positions:
        check_position_values(key_positions, "key_positions")


LAYOUTS = ("half", "interleaved")


def wide_dtype(device: torch.device) -> torch.dtype:
    """float64 wherever the backend has it (Apple MPS does not; it gets float32)."""
    return torch.float32 if device.type == "mps" else torch.float64


def angles(positions: Tensor, inv_freq: Tensor) -> Tensor:
    """Angles ``positions[..., None] * inv_freq`` of ``(...)`` coordinates and ``(F,)`` (or
    broadcastable, e.g. per-head ``(H, 1, F)``) angular frequencies.

    Returns:
        ``(..., F)`` float32 angles reduced to ``[0, 2*pi)``; float64 (unreduced) when
        ``positions`` is float64.
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
"""Where an encoding enters: token embeddings, q and k, attention logits, or nowhere (NoPE)."""


class PositionEncoding(nn.Module):
    """Base of posenc's encoding modules: every subclass declares its ``kind`` (one of
    [`KINDS`][posenc.core.encoding.KINDS]);
    [`no_weight_decay`][posenc.core.PositionEncoding.no_weight_decay] names every parameter (they
    place tokens, so decay would pull positions together; timm's convention, read by
    [`no_weight_decay_names`][posenc.core.encoding.no_weight_decay_names]).
    """

    kind: ClassVar[str]

    def no_weight_decay(self) -> set[str]:
        """Names (relative to this module) of the parameters to keep out of weight decay."""
        return {name for name, _ in self.named_parameters()}


def encoding_kind(encoding: object) -> str:
    """The ``kind`` (one of [`KINDS`][posenc.core.encoding.KINDS]) that ``encoding`` (a module or a
    class) declares; None is ``"none"``, anything without one raises ``TypeError``."""
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
    """Full names of the parameters of ``model`` that it or its submodules list in a
    ``no_weight_decay()`` method (names a module does not own are ignored)."""
    owned = {name for name, _ in model.named_parameters()}
    names: set[str] = set()
    for prefix, module in model.named_modules():
        declared = getattr(module, "no_weight_decay", None)
        if callable(declared):
            names.update(f"{prefix}.{name}" if prefix else name for name in declared())
    return names & owned


def unchecked(encoding: object, method: str = "forward") -> Callable:
    """``encoding``'s ``method`` without its value checks: the twin (``_rotation``,
    ``_forward``, ...) that checks shapes only, else the public method."""
    internal = getattr(encoding, f"_{method}", None)
    if internal is not None:
        return internal
    return encoding if method == "forward" else getattr(encoding, method)


class Float64Buffers(PositionEncoding):
    """Base for modules whose frequencies keep float64 when cast (a bf16 inverse frequency is
    off by whole radians at position 1000).

    The buffers of [`float64_buffers`][posenc.core.encoding.Float64Buffers.float64_buffers] (not in
    the state dict) follow the module across devices but keep float64; subclasses call
    [`reset_float64_buffers`][posenc.core.encoding.Float64Buffers.reset_float64_buffers] in
    ``__init__``. ``to_empty()`` after a meta-device build recomputes them. Parameters named in
    `fixed_dtype_parameters` move across devices in place but keep their dtype.
    """

    #: Names of parameters that move across devices but keep their dtype.
    fixed_dtype_parameters: tuple[str, ...] = ()

    def float64_buffers(self) -> dict[str, Tensor]:
        """The float64 buffers, from the constructor's arguments (run on CPU); to override."""
        return {}

    def reset_float64_buffers(self) -> None:
        """(Re)compute [`float64_buffers`][posenc.core.encoding.Float64Buffers.float64_buffers] on
        the current buffers' (or default) device."""
        names = getattr(self, "_float64_buffer_names", ())
        device = next((self._buffers[n].device for n in names if self._buffers.get(n) is not None),
                      torch.get_default_device())
        self._rebuild(device)

    def reset_parameters(self) -> None:
        """Recompute the float64 buffers; call it after ``to_empty()`` (meta-device init)."""
        self.reset_float64_buffers()

    def _rebuild(self, device: torch.device) -> None:
        # On CPU even under a meta device (some builders read values, e.g. ALiBi's slopes).
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
                # A meta tensor cannot become a real parameter's .data: reset_parameters() fills.
                self._parameters[n] = nn.Parameter(torch.empty_like(p, device=device),
                                                   requires_grad=p.requires_grad)
            elif device != p.device:  # in place: optimizers hold the object
                p.data = p.data.to(device)
                if p.grad is not None:
                    p.grad = p.grad.to(device)
        return self


def _target_device(fn: Callable[[Tensor], Tensor], t: Tensor) -> torch.device:
    """The device ``fn`` (a ``Module._apply`` function) moves ``t`` to, read off an empty probe."""
    try:
        return fn(torch.empty(0, dtype=t.dtype, device=t.device)).device
    except NotImplementedError:  # fn copies out of a meta tensor: it moves to a real device
        return fn(torch.empty(0, dtype=t.dtype)).device
