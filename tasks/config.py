"""Config values and checkpoints: build a module from a config value (a registered name, or
``{class_path, init_args}``), keep hyperparameters as builtins, read and check a checkpoint; and
the AdamW + warmup/cosine optimizers the task modules share.

Hyperparameters stay plain values ([`make_hparams_plain`][posenc.tasks.config.make_hparams_plain]),
so checkpoints load with ``torch.load(weights_only=True)``
([`read_checkpoint`][posenc.tasks.config.read_checkpoint]). A checkpoint is untrusted, and so is its
``class_path``: it resolves only to a ``torch.nn.Module`` subclass that posenc defines or that was
registered in this process with [`register_module`][posenc.tasks.register_module] (never a function
or a third-party class merely
imported: torchmetrics' ``_LPIPS(model_path=...)`` reads a file), and it imports no module but
posenc's own. A slot admits only the kind it holds: an encoding slot
([`instantiate`][posenc.tasks.config.instantiate]) builds posenc's encodings and registered classes,
never a LightningModule nor a class whose constructor takes a weight source
([`check_encoding_class`][posenc.tasks.config.check_encoding_class]). ``init_args`` are passed as
given (a nested ``{class_path}`` dict is data to the constructor). Register your classes before
building or loading::

    import mypkg.encodings
    posenc.tasks.register_module(mypkg.encodings.MyEncoding)

Arguments that load weights (`WEIGHT_SOURCES`) come from a trusted caller only: models do
not save them, and [`check_checkpoint`][posenc.tasks.config.check_checkpoint] refuses a checkpoint
that sets them at any depth, or names a class a slot does not admit, before anything is built from
it; the model is then built under an [`allocation_bound`][posenc.tasks.config.allocation_bound]
proportional to the checkpoint's own tensors, so a forged size (``dim: 1e12``) is refused before it
is allocated. ``load_from_checkpoint`` of posenc's models
([`CheckedCheckpointLoading`][posenc.tasks.config.CheckedCheckpointLoading]),
``posenc test/export --ckpt_path`` and ``posenc plot --checkpoint`` all load this way.
"""

from __future__ import annotations

import datetime as dt
import importlib
import inspect
import math
import os
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.core.saving import CHECKPOINT_PAST_HPARAMS_KEYS, pl_load
from posenc.core._checks import check_choice, check_float, check_positive_float
from posenc.core.encoding import KINDS, PositionEncoding, no_weight_decay_names
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["ALLOCATION_FACTOR", "ALLOCATION_FLOOR", "WEIGHT_SOURCES", "CheckedCheckpointLoading",
           "allocation_bound", "check_checkpoint", "checkpoint_allocation_bound",
           "check_class_path", "check_encoding_class", "check_no_weight_sources",
           "checkpoint_hparams", "class_paths", "fill_from_defaults", "import_class",
           "instantiate", "nested", "register_module", "plain", "make_hparams_plain",
           "read_checkpoint", "check_split_fractions", "SCHEDULERS", "param_groups",
           "finetune_param_groups", "position_parameter_names", "lr_factor", "configure_adamw",
           "configure_adamw_from_hparams"]


# Packages whose modules a class_path may import (no import side effects) and build from.
IMPORTABLE = ("posenc",)

# Classes outside posenc that a class_path may build (register_module).
REGISTERED: set[type[nn.Module]] = set()

REGISTER_HINT = "posenc.tasks.register_module(cls)"

#: Constructor arguments that read weights from a file or the network: never saved in a
#: checkpoint, refused when a checkpoint sets them.
WEIGHT_SOURCES = ("pretrained", "pretrained_cfg_overlay", "checkpoint_path")

# Where a Lightning checkpoint holds the hyperparameters its model is built from, in the order
# Lightning merges them (its old keys first).
HPARAMS_KEYS = (*CHECKPOINT_PAST_HPARAMS_KEYS, LightningModule.CHECKPOINT_HYPER_PARAMS_KEY)


def nested(value: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """``(argument, item)`` for ``value`` and every item of the dicts and lists nested in it, depth
    first; arguments read as in error messages (``encodings[0].init_args.dim``). A container met
    again (pickles may share or nest one in itself) is not entered twice."""
    stack, seen = [(where, value)], set()
    while stack:
        where, value = stack.pop()
        yield where, value
        if isinstance(value, Mapping):
            items = [(f"{where}.{key}" if where else str(key), item)
                     for key, item in value.items()]
        elif isinstance(value, (list, tuple)):
            items = [(f"{where}[{i}]", item) for i, item in enumerate(value)]
        else:
            continue
        if id(value) not in seen:
            seen.add(id(value))
            stack.extend(reversed(items))


def class_paths(value: Any) -> list[tuple[str, Any]]:
    """``(argument, class_path)`` of every ``{"class_path": ...}`` dict nested in ``value``."""
    return [(where or "class_path", item["class_path"]) for where, item in nested(value)
            if isinstance(item, Mapping) and "class_path" in item]


def check_no_weight_sources(hparams: Mapping[str, Any], argument: str) -> None:
    """Raise a ``ValueError`` naming ``argument`` when ``hparams`` (a checkpoint's) set any of
    `WEIGHT_SOURCES` to something other than None/False, at any depth (in the
    ``init_args`` of a nested ``class_path``, a list, any dict)."""
    named = sorted(f"{where}.{key}" if where else str(key)
                   for where, item in nested(hparams) if isinstance(item, Mapping)
                   for key in WEIGHT_SOURCES
                   if key in item and item[key] is not None and item[key] is not False)
    if named:
        raise ValueError(
            f"{argument}: the checkpoint's hyperparameters set {named}, which load weights from "
            f"a file or the network; a checkpoint is untrusted and may not name them (models do "
            f"not save them: they come from Python or the config given on the command line; the "
            f"checkpoint's own weights are loaded anyway)")


def register_module(cls: type[nn.Module]) -> type[nn.Module]:
    """Let a ``class_path`` in configs and checkpoints build ``cls``, a ``torch.nn.Module``
    subclass that posenc does not define, in this process; returns ``cls`` (a class decorator).

    Any dotted path reaching the class object names it; its subclasses are not registered.
    The ``posenc`` CLI registers the classes named in its command-line config.
    """
    if not inspect.isclass(cls):
        raise TypeError(f"register_module(cls) takes a class, got {type(cls).__name__} "
                        f"({cls!r})")
    if not issubclass(cls, nn.Module):
        raise TypeError(f"register_module(cls) takes a torch.nn.Module subclass, got "
                        f"{cls.__module__}.{cls.__qualname__}")
    REGISTERED.add(cls)
    return cls


def _is_trusted(cls: type) -> bool:
    """Whether a ``class_path`` may build ``cls``: registered, or held under its name by the
    posenc module its ``__module__`` names (a string any code can set)."""
    if cls in REGISTERED:
        return True
    module = getattr(cls, "__module__", None)
    if not isinstance(module, str) or module.split(".")[0] not in IMPORTABLE:
        return False
    return getattr(sys.modules.get(module), "__dict__", {}).get(cls.__qualname__) is cls


def check_class_path(class_path: object, argument: str = "class_path") -> tuple[str, str]:
    """``(module, name)`` of a dotted ``class_path`` whose module is imported or posenc's;
    else a ``ValueError`` naming ``argument``. Imports nothing."""
    parts = class_path.split(".") if isinstance(class_path, str) else []
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        raise ValueError(f"{argument}: class_path must be a dotted path such as "
                         f"'posenc.spatial.RoPE2D', got {class_path!r}")
    module_name = ".".join(parts[:-1])
    if sys.modules.get(module_name) is None and parts[0] not in IMPORTABLE:
        raise ValueError(
            f"{argument}: class_path {class_path!r}: module {module_name!r} is not imported, "
            f"and posenc imports only its own modules to resolve a class_path (importing runs "
            f"the module's code); if you trust it, import {module_name} and call "
            f"{REGISTER_HINT} before building the model or loading the checkpoint")
    return module_name, parts[-1]


def import_class(class_path: str, argument: str = "class_path",
                 base: type[nn.Module] = nn.Module) -> type[nn.Module]:
    """``"package.module.Class"`` -> the subclass of ``base`` that posenc defines or that is
    registered ([`register_module`][posenc.tasks.register_module]), with errors naming ``argument``
    and the path.

    Only posenc's modules are imported when missing; the class is read from the module's
    namespace (a module-level ``__getattr__`` is not called: it may import).
    """
    module_name, name = check_class_path(class_path, argument)
    where = f"{argument}: class_path {class_path!r}"
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise ValueError(f"{where}: cannot import module {module_name!r} ({err})") from err
    namespace = getattr(module, "__dict__", {})
    if name not in namespace:
        raise ValueError(f"{where}: module {module_name!r} has no {name!r} class")
    obj = namespace[name]
    if not inspect.isclass(obj):
        raise ValueError(f"{where} names a {type(obj).__name__}, not a class: only "
                         f"torch.nn.Module subclasses can be built from a config or checkpoint")
    found = f"{obj.__module__}.{obj.__qualname__}"
    if not issubclass(obj, base):
        expected = "torch.nn.Module" if base is nn.Module else base.__qualname__
        raise ValueError(f"{where}: {found} is not a {expected} subclass: only those can be "
                         f"built from a config or checkpoint")
    if not _is_trusted(obj):
        raise ValueError(
            f"{where}: {found} is not defined by posenc and was not registered: a config or "
            f"checkpoint builds only posenc's classes and those registered in this process "
            f"(a checkpoint is untrusted; an imported library's module may read files or reach "
            f"the network when built); if you trust it, call {REGISTER_HINT} before building "
            f"the model or loading the checkpoint")
    return obj


def check_encoding_class(cls: type[nn.Module], class_path: str, argument: str,
                         kinds: tuple[str, ...] = KINDS) -> None:
    """Raise a ``ValueError`` naming ``argument`` unless an encoding slot holding ``kinds``
    ([`posenc.core.encoding.KINDS`][posenc.core.encoding.KINDS]) may build ``cls`` (named
    ``class_path``, trusted by [`import_class`][posenc.tasks.config.import_class]): posenc's
    encodings ([`posenc.core.PositionEncoding`][posenc.core.PositionEncoding] subclasses) of one of
    ``kinds`` and registered classes (of one of ``kinds`` where they declare a ``kind``), never a
    ``LightningModule`` nor a class whose constructor takes one of `WEIGHT_SOURCES`."""
    where = f"{argument}: class_path {class_path!r}: {cls.__module__}.{cls.__qualname__}"
    slot = (f"an encoding slot builds posenc's encodings and the classes registered with "
            f"{REGISTER_HINT}")
    if issubclass(cls, LightningModule):
        raise ValueError(f"{where} is a LightningModule, not an encoding: {slot}")
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # no signature: it takes no named weight source
        params = {}
    loads = sorted(name for name in params if name in WEIGHT_SOURCES)
    if loads:
        raise ValueError(f"{where} takes {loads}, which load weights: {slot}, never a class "
                         f"that reads weights from a file or the network")
    registered = cls in REGISTERED
    if not registered and not issubclass(cls, PositionEncoding):
        raise ValueError(f"{where} is not an encoding (a posenc.core.PositionEncoding): {slot}")
    kind = getattr(cls, "kind", None)
    if (kind is not None or not registered) and kind not in kinds:
        raise ValueError(f"{where} is of kind {kind!r}: the {argument.split('[')[0]} slot holds "
                         f"{' or '.join(kinds)} encodings")


def fill_from_defaults(cls: Callable, init_args: Mapping[str, Any],
                       defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``init_args`` plus the parameters of ``cls`` that only ``defaults`` give (``dim``...)."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return dict(init_args)
    return {**init_args, **{k: v for k, v in defaults.items()
                            if k in params and k not in init_args}}


def instantiate(spec: Any, registry: Mapping[str, Callable[..., Any]], argument: str,
                defaults: Mapping[str, Any] | None = None, kinds: tuple[str, ...] = KINDS) -> Any:
    """Build the encoding that ``spec`` names (the encoding slots of posenc's models).

    Args:
        spec: a key of ``registry``; or ``{"class_path": ..., "init_args": {...}}`` naming an
            encoding class ([`import_class`][posenc.tasks.config.import_class],
            [`check_encoding_class`][posenc.tasks.config.check_encoding_class]), whose missing
            constructor arguments are taken from ``defaults`` when their names match.
        registry: name -> factory called with ``defaults`` as keywords it accepts.
        argument: the config argument's name, for error messages.
        defaults: values inferred from the surrounding model (``dim``, ``num_heads``, ...).
        kinds: the kinds of encoding the slot holds
            ([`check_encoding_class`][posenc.tasks.config.check_encoding_class]).
    """
    defaults = dict(defaults or {})
    if isinstance(spec, str):
        if spec not in registry:
            raise ValueError(f"{argument}={spec!r} is not a known name; valid names: "
                             f"{sorted(registry)}, or a dict with class_path/init_args")
        factory = registry[spec]
        return factory(**fill_from_defaults(factory, {}, defaults))
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"class_path", "init_args"}
        if "class_path" not in spec or unknown:
            raise ValueError(f"{argument} as a dict needs the keys class_path (and optionally "
                             f"init_args), got keys {sorted(spec)}")
        init_args = spec.get("init_args") or {}
        if not isinstance(init_args, Mapping):
            raise TypeError(f"{argument}.init_args must be a dict, got "
                            f"{type(init_args).__name__}")
        if not all(isinstance(key, str) for key in init_args):
            raise TypeError(f"{argument}.init_args keys must be argument names (str), got "
                            f"{sorted(map(repr, init_args))}")
        cls = import_class(spec["class_path"], argument)
        check_encoding_class(cls, spec["class_path"], argument, kinds)
        kwargs = fill_from_defaults(cls, init_args, defaults)
        try:
            inspect.signature(cls).bind(**kwargs)
        except TypeError as err:
            raise TypeError(f"{argument}: class_path {spec['class_path']!r} does not take "
                            f"init_args {dict(init_args)} ({err})") from err
        except ValueError:  # no signature to check against: the call itself will tell
            pass
        return cls(**kwargs)
    raise TypeError(f"{argument} must be a name (str) or a dict with class_path/init_args, got "
                    f"{type(spec).__name__} ({spec!r})")


def plain(value: Any) -> Any:
    """``value`` as builtins: paths as ``str``, numpy scalars as numbers, timestamps as ISO
    strings, durations as pandas strings, arrays and indexes as lists (nested lists and tuples
    item by item); other values unchanged."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (pd.Timestamp, dt.datetime)):
        return pd.Timestamp(value).isoformat()
    if isinstance(value, (dt.timedelta, np.timedelta64)):
        return str(pd.Timedelta(value))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (pd.Index, np.ndarray)):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


def make_hparams_plain(hparams: MutableMapping[str, Any]) -> None:
    """Replace every value of a module's ``hparams`` by [`plain`][posenc.tasks.config.plain] of it,
    in place."""
    for key, value in list(hparams.items()):
        hparams[key] = plain(value)


def _load_checkpoint(path: str | os.PathLike) -> Any:
    """``torch.load`` of a local file on CPU with ``weights_only=True``, memory-mapped when the
    format allows (torch's errors as they are)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except RuntimeError:  # not the zip format: cannot be mapped
        return torch.load(path, map_location="cpu", weights_only=True)


def _check_checkpoint_dict(ckpt: Any, where: str) -> dict[str, Any]:
    """``ckpt`` if it is a dict whose hyperparameters (Lightning's keys, old ones too) are
    dicts; else a ``ValueError`` naming ``where``."""
    if not isinstance(ckpt, dict):
        raise ValueError(f"{where} is not a Lightning checkpoint (a dict), it holds a "
                         f"{type(ckpt).__name__}")
    for key in HPARAMS_KEYS:
        if not isinstance(ckpt.get(key, {}), dict):
            raise ValueError(f"{where} is not a Lightning checkpoint: its {key} are a "
                             f"{type(ckpt[key]).__name__}, not a dict")
    return ckpt


def read_checkpoint(path: str | os.PathLike, argument: str) -> dict[str, Any]:
    """The dict saved in the checkpoint file ``path``, loaded on CPU with ``weights_only=True``
    (memory-mapped when the format allows).

    Raises ``ValueError`` naming ``argument`` and the path when it is not a readable torch file
    of plain values holding a dict (with hyperparameters, if any, a dict).
    """
    where = f"{argument}={os.fspath(path)!r}"
    if not os.fspath(path):
        raise ValueError(f"{where} is an empty path; give the checkpoint file")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{where} is a directory, not a checkpoint file")
    if not path.is_file():
        raise ValueError(f"{where} is not a file")
    try:
        ckpt = _load_checkpoint(path)
    except Exception as err:  # EOFError, KeyError, IndexError, UnpicklingError...
        why = next((line.strip() for line in str(err).splitlines()
                    if "Unsupported global" in line), "")
        if why:  # a real pickle of objects that weights_only refuses
            raise ValueError(f"{where} holds objects other than tensors and plain values, "
                             f"which are not loaded (weights_only=True). {why}") from err
        raise ValueError(f"{where} is not a readable torch checkpoint "
                         f"({type(err).__name__}: {err})") from err
    return _check_checkpoint_dict(ckpt, where)


def checkpoint_hparams(ckpt: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters Lightning builds a model from: those under its old keys
    (``hparams``, ``module_arguments``) updated by ``hyper_parameters``."""
    merged: dict[str, Any] = {}
    for key in HPARAMS_KEYS:
        merged.update(ckpt.get(key, {}))
    return merged


#: While a model is built from an untrusted checkpoint, the tensors allocated (parameters,
#: buffers and the temporaries of construction) may take at most ``ALLOCATION_FACTOR`` times the
#: bytes, and the number, of the tensors the checkpoint holds, plus ``ALLOCATION_FLOOR`` (bytes,
#: tensors) for what a checkpoint does not save (non-persistent buffers): the model a checkpoint
#: holds the weights of fits well inside; a size forged in its hyperparameters (``dim: 1e12``,
#: ``depth: 1e9``) is refused before it is allocated
#: ([`allocation_bound`][posenc.tasks.config.allocation_bound]).
ALLOCATION_FACTOR = 4
ALLOCATION_FLOOR = (1 << 30, 10_000)


def checkpoint_allocation_bound(ckpt: Mapping[str, Any]) -> tuple[int, int]:
    """``(bytes, tensors)`` that building the model of ``ckpt`` may allocate: see
    `ALLOCATION_FACTOR`. Its tensors count by the storage they hold (a saved view or a
    meta tensor claims sizes it does not hold)."""
    storages = {}
    tensors = 0
    for _, item in nested(ckpt.get("state_dict")):
        if isinstance(item, torch.Tensor):
            tensors += 1
            if item.device.type != "meta":
                storage = item.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    return (ALLOCATION_FACTOR * sum(storages.values()) + ALLOCATION_FLOOR[0],
            ALLOCATION_FACTOR * tensors + ALLOCATION_FLOOR[1])


def _allocates(func: torch._ops.OpOverload) -> bool:
    """Whether ``func`` returns new tensors (not views, not its in-place or ``out=`` results)."""
    schema = func._schema
    return not schema.is_mutable and all(r.alias_info is None for r in schema.returns)


# The op that hands torch a tensor made from Python data or a numpy array (torch.tensor,
# torch.as_tensor, torch.from_numpy): made before torch sees it, so counted after.
_MADE_FROM_DATA = torch.ops.aten.lift_fresh.default


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of an op's argument or result (a tensor, or a list/tuple holding some)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


def _to_meta(value: Any) -> Any:
    """An op's argument with its tensors as meta tensors of their sizes (no memory)."""
    if isinstance(value, torch.Tensor):
        return value.to("meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_to_meta(item) for item in value)
    return value


def _on_meta(args: tuple, kwargs: dict) -> bool:
    """Whether an op of these arguments makes meta tensors (a meta input, or ``device``)."""
    device = kwargs.get("device")
    return (device is not None and torch.device(device).type == "meta") or any(
        t.is_meta for t in _tensors(args))


def _planned(func: torch._ops.OpOverload, args: tuple, kwargs: dict
             ) -> list[tuple[tuple[int, ...], torch.dtype]] | None:
    """``(shape, dtype)`` of the tensors ``func(*args, **kwargs)`` would return, from a run on
    meta copies of its inputs (no memory); for a factory that a size too large for torch fails,
    the size asked for; None where that cannot tell (an output sized by the data, or an op
    without a meta kernel)."""
    params = func._schema.arguments
    meta_kwargs = {key: _to_meta(value) for key, value in kwargs.items()}
    if any(param.name == "device" for param in params):  # a factory
        meta_kwargs["device"] = torch.device("meta")
    try:
        out = func(*_to_meta(args), **meta_kwargs)
    except Exception:  # noqa: BLE001 (any failure only means: not known before running)
        if params and params[0].name == "size" and isinstance(args[0], (list, tuple)):
            return [(tuple(args[0]), kwargs.get("dtype") or torch.get_default_dtype())]
        return None
    return [(tuple(t.shape), t.dtype) for t in _tensors(out)]


class allocation_bound(TorchDispatchMode):  # noqa: N801 (used as a context manager)
    """Within ``with allocation_bound(max_bytes, max_tensors, where, hparams):``, an operation
    whose new tensors would take the bytes or the number of tensors allocated so far past the
    bound raises ``ValueError`` before it runs (its output sizes come from a run on meta
    tensors; an output sized by its data, and a tensor made from Python data or numpy, are
    counted after they are made). The message starts with ``where``, names the tensor asked
    for, the module being built and its numeric arguments, and the largest numbers of
    ``hparams`` (the hyperparameters the model is built from)."""

    def __init__(self, max_bytes: int, max_tensors: int, where: str,
                 hparams: Mapping[str, Any]) -> None:
        super().__init__()
        self.max_bytes, self.max_tensors = max_bytes, max_tensors
        self.where, self.hparams = where, hparams
        self.bytes = self.tensors = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _MADE_FROM_DATA:
            self._count([(tuple(args[0].shape), args[0].dtype)])
        if not _allocates(func) or _on_meta(args, kwargs):  # meta tensors take no memory
            return func(*args, **kwargs)
        planned = _planned(func, args, kwargs)
        if planned is not None:
            self._count(planned)
        out = func(*args, **kwargs)
        if planned is None:
            self._count([(tuple(t.shape), t.dtype) for t in _tensors(out)])
        return out

    def _count(self, tensors: list[tuple[tuple[int, ...], torch.dtype]]) -> None:
        for shape, dtype in tensors:
            self.bytes += math.prod(shape) * dtype.itemsize
            self.tensors += 1
            if self.bytes > self.max_bytes or self.tensors > self.max_tensors:
                raise ValueError(self._refusal(shape, dtype))

    def _refusal(self, shape: tuple[int, ...], dtype: torch.dtype) -> str:
        building = "the model"
        frame = sys._getframe()
        while frame is not None:  # the innermost module constructor running
            if frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"),
                                                                  nn.Module):
                info = inspect.getargvalues(frame)
                numbers = ", ".join(f"{name}={info.locals[name]!r}" for name in info.args
                                    if _is_number(info.locals.get(name)))
                building = f"{type(info.locals['self']).__qualname__}({numbers})"
                break
            frame = frame.f_back
        largest = sorted(((abs(v), where, v) for where, v in nested(self.hparams)
                          if _is_number(v)), key=lambda t: t[0], reverse=True)[:3]
        return (f"{self.where}: the checkpoint's hyperparameters ask for more memory than a "
                f"checkpoint of its size may: building {building} allocates a "
                f"{shape} {str(dtype).removeprefix('torch.')} tensor, "
                f"{self.bytes / 2**30:.3g} GiB in {self.tensors} tensors so far, past the bound "
                f"of {self.max_bytes / 2**30:.3g} GiB in {self.max_tensors} tensors "
                f"(posenc.tasks.config.ALLOCATION_FACTOR x the checkpoint's tensors + "
                f"ALLOCATION_FLOOR); refused. Its largest numbers: "
                f"{', '.join(f'{where}={v!r}' for _, where, v in largest)}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_checkpoint(ckpt: Mapping[str, Any], where: str,
                     overrides: Mapping[str, Any] | None = None) -> allocation_bound:
    """Refuse, before anything is built from it, a checkpoint (a dict:
    [`read_checkpoint`][posenc.tasks.config.read_checkpoint]) whose hyperparameters
    ([`checkpoint_hparams`][posenc.tasks.config.checkpoint_hparams] updated by ``overrides``, the
    keyword arguments a caller adds) set a weight source at any depth
    ([`check_no_weight_sources`][posenc.tasks.config.check_no_weight_sources]), name a model class
    (``_class_path``) that is not a trusted ``LightningModule``, or name in any nested
    ``class_path`` a class that an encoding slot does not build
    ([`check_encoding_class`][posenc.tasks.config.check_encoding_class]): ``ValueError`` starting
    with ``where``.

    Returns the [`allocation_bound`][posenc.tasks.config.allocation_bound] to build its model under
    (enter it once)."""
    hparams = {**checkpoint_hparams(ckpt), **(overrides or {})}
    check_no_weight_sources(hparams, where)
    try:
        if "_class_path" in hparams:
            import_class(hparams["_class_path"], "_class_path", LightningModule)
        for argument, class_path in class_paths(hparams):
            check_encoding_class(import_class(class_path, argument), class_path, argument)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from err
    return allocation_bound(*checkpoint_allocation_bound(ckpt), where, hparams)


class CheckedCheckpointLoading:
    """Mixin of posenc's LightningModules (listed before ``LightningModule``): their
    ``load_from_checkpoint`` refuses what [`check_checkpoint`][posenc.tasks.config.check_checkpoint]
    refuses before Lightning builds anything from the checkpoint."""

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path: str | os.PathLike | IO[bytes],
                             map_location: Any = None, hparams_file: str | None = None,
                             strict: bool | None = None, weights_only: bool | None = None,
                             **kwargs: Any) -> Any:
        """Lightning's ``load_from_checkpoint`` (same arguments; ``kwargs`` override the
        checkpoint's hyperparameters), raising ``ValueError`` for hyperparameters or ``kwargs``
        that [`check_checkpoint`][posenc.tasks.config.check_checkpoint] refuses, before anything is
        built from them."""
        where = f"{cls.__name__}.load_from_checkpoint"
        if isinstance(checkpoint_path, (str, os.PathLike)) and "://" not in str(checkpoint_path):
            ckpt = _load_checkpoint(checkpoint_path)
        else:  # a URL or a file object, read as Lightning reads it
            start = checkpoint_path.tell() if hasattr(checkpoint_path, "tell") else None
            ckpt = pl_load(checkpoint_path, map_location="cpu", weights_only=True)
            if start is not None:
                checkpoint_path.seek(start)
        bound = check_checkpoint(_check_checkpoint_dict(ckpt, where), where, kwargs)
        del ckpt  # Lightning reads it again
        with bound:
            return super().load_from_checkpoint(checkpoint_path, map_location, hparams_file,
                                                strict, weights_only, **kwargs)


def check_split_fractions(val_fraction: object, test_fraction: object) -> tuple[float, float]:
    """``(val_fraction, test_fraction)`` as floats, each in ``(0, 1)``, summing to < 1."""
    val_fraction = check_float(val_fraction, "val_fraction", gt=0, lt=1)
    test_fraction = check_float(test_fraction, "test_fraction", gt=0, lt=1)
    if val_fraction + test_fraction >= 1:
        raise ValueError(f"val_fraction + test_fraction must be < 1, got "
                         f"{val_fraction} + {test_fraction}")
    return val_fraction, test_fraction


SCHEDULERS = ("cosine", "constant")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: weight decay for weight matrices only, not for 1D parameters
    nor those a module names in its ``no_weight_decay()`` (timm's convention; posenc's
    encodings name all of theirs)."""
    excluded = no_weight_decay_names(model)
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim <= 1 or name in excluded else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def position_parameter_names(model: nn.Module) -> set[str]:
    """Full names of the parameters of ``model`` owned by its
    [`posenc.core.PositionEncoding`][posenc.core.PositionEncoding] submodules."""
    return {f"{prefix}.{name}" if prefix else name
            for prefix, module in model.named_modules() if isinstance(module, PositionEncoding)
            for name, _ in module.named_parameters()}


def finetune_param_groups(model: nn.Module, weight_decay: float, lr: float, *,
                          layer_decay: float | None = None,
                          position_lr: float | None = None) -> list[dict]:
    """AdamW parameter groups of a timm ViT with a learning rate each (``"lr"``).

    Args:
        model: the ViT (``timm`` ``VisionTransformer``, attached or not): its
            ``group_matcher()`` assigns layers for ``layer_decay``.
        weight_decay: for weight matrices; none for 1D and ``no_weight_decay()`` parameters
            (as [`param_groups`][posenc.tasks.config.param_groups]).
        lr: base learning rate.
        layer_decay: None: ``lr`` for all. Else layer-wise decay (BEiT; timm's
            ``param_groups_layer_decay``): the embeddings are layer 0, block ``i`` layer
            ``i + 1`` (with the final norm for the last), the head ``depth + 1``, and layer
            ``l`` trains at ``lr * layer_decay ** (depth + 1 - l)``.
        position_lr: None: position parameters
            ([`position_parameter_names`][posenc.tasks.config.position_parameter_names]) are grouped
            as any other. Else their learning rate (no layer decay, no weight decay).
    """
    if layer_decay is None:
        groups = [{**g, "lr": lr} for g in param_groups(model, weight_decay)]
    else:
        from timm.optim import param_groups_layer_decay

        # Exact names: fnmatch patterns that match only themselves (no wildcards in names).
        excluded = sorted(no_weight_decay_names(model))
        groups = param_groups_layer_decay(model, weight_decay, no_weight_decay_list=excluded,
                                          layer_decay=layer_decay)
        groups = [{"params": g["params"], "weight_decay": g["weight_decay"],
                   "lr": lr * g["lr_scale"]} for g in groups]
    if position_lr is not None:
        position = {id(p) for n, p in model.named_parameters()
                    if n in position_parameter_names(model)}
        moved = [p for g in groups for p in g["params"] if id(p) in position]
        groups = [{**g, "params": [p for p in g["params"] if id(p) not in position]}
                  for g in groups]
        groups.append({"params": moved, "weight_decay": 0.0, "lr": position_lr})
    return [g for g in groups if g["params"]]


def lr_factor(step: int, total_steps: int, warmup_steps: int, schedule: str,
              min_lr_ratio: float) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (0-based): linear warmup
    from ``1 / (warmup_steps + 1)`` to 1, then constant or a cosine to ``min_lr_ratio``."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    if schedule == "constant":
        return 1.0
    span = max(total_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / span, 1.0)
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def check_optim_args(lr: float, weight_decay: float, warmup: float, scheduler: str,
                     min_lr_ratio: float) -> None:
    check_positive_float(lr, "lr")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    if not 0 <= warmup < 1:
        raise ValueError(f"warmup must be a fraction of the training steps in [0, 1), "
                         f"got {warmup!r}")
    check_choice(scheduler, "scheduler", SCHEDULERS)
    if not 0 <= min_lr_ratio <= 1:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio!r}")


def check_finetune_args(layer_decay: float | None, position_lr: float | None) -> None:
    """``layer_decay`` in ``(0, 1]`` and ``position_lr`` > 0, each or None."""
    if layer_decay is not None and check_float(layer_decay, "layer_decay", gt=0) > 1:
        raise ValueError(f"layer_decay must be in (0, 1] (1: no decay), got {layer_decay!r}")
    if position_lr is not None:
        check_positive_float(position_lr, "position_lr")


def configure_adamw(module, lr: float, weight_decay: float, warmup: float, scheduler: str,
                    min_lr_ratio: float, groups: list[dict] | None = None) -> dict:
    """``configure_optimizers`` body: AdamW over ``groups`` (default
    [`param_groups`][posenc.tasks.config.param_groups] of ``module``; a group's ``"lr"`` is its
    peak) and a per-step LambdaLR, ``warmup`` being a fraction of
    ``trainer.estimated_stepping_batches``."""
    if groups is None:
        groups = param_groups(module, weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=lr)
    estimated = float(module.trainer.estimated_stepping_batches)
    total = int(estimated) if math.isfinite(estimated) and estimated >= 1 else 1
    if not math.isfinite(estimated):  # no max_steps/max_epochs: nothing to decay towards
        scheduler = "constant"
    warmup_steps = int(warmup * total)
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, total, warmup_steps, scheduler, min_lr_ratio))
    return {"optimizer": optimizer,
            "lr_scheduler": {"scheduler": lr_scheduler, "interval": "step"}}


def configure_adamw_from_hparams(module) -> dict:
    """[`configure_adamw`][posenc.tasks.config.configure_adamw] with the settings a task module
    saved in its hyperparameters (``lr``, ``weight_decay``, ``warmup``, ``scheduler``,
    ``min_lr_ratio``)."""
    hp = module.hparams
    return configure_adamw(module, hp.lr, hp.weight_decay, hp.warmup, hp.scheduler,
                           hp.min_lr_ratio)
