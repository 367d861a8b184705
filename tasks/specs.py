"""Build a module from a config value: a registered name, or ``{class_path, init_args}``.

Configs keep encodings as plain values (a string or a dict), so ``save_hyperparameters()``
stores text, checkpoints load with ``torch.load(weights_only=True)``, and the module is
rebuilt from the same value on reload.

A checkpoint is untrusted input, and so is its ``class_path``: ``weights_only=True`` only
stops pickled objects, not a string that names ``os.system``. So a ``class_path`` resolves
only to a class that subclasses ``torch.nn.Module`` (every encoding is one), never to a
function, a builtin or another kind of class, and resolving it imports nothing but posenc's
own modules: importing a module runs its top-level code, so any other module must already be
imported (``import mypkg.encodings`` before building the model or loading the checkpoint).
This is Lightning's rule for a checkpoint's ``_class_path`` (it reads ``sys.modules`` only),
plus the ``nn.Module`` check. (The ``posenc`` CLI's parser imports the modules named in the
user's own config file; the hyperparameters of a ``--ckpt_path`` checkpoint are checked with
:func:`check_class_path` before it reads them.) ``init_args`` are passed as plain values: a nested
``{class_path: ...}`` dict is data to the constructor, which builds it (if at all) through
:func:`instantiate` again.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

__all__ = ["check_class_path", "fill_from_defaults", "import_class", "instantiate"]

# Packages whose modules a class_path may import (their imports have no side effects).
IMPORTABLE = ("posenc",)


def check_class_path(class_path: object, argument: str = "class_path") -> tuple[str, str]:
    """``(module, name)`` of a dotted ``class_path`` whose module may be resolved: already
    imported, or in an :data:`IMPORTABLE` package; else a ``ValueError`` naming ``argument``.
    Imports nothing (for checking a checkpoint before anything else reads it)."""
    parts = class_path.split(".") if isinstance(class_path, str) else []
    if len(parts) < 2 or not all(part.isidentifier() for part in parts):
        raise ValueError(f"{argument}: class_path must be a dotted path such as "
                         f"'posenc.spatial.RoPE2D', got {class_path!r}")
    module_name = ".".join(parts[:-1])
    if sys.modules.get(module_name) is None and parts[0] not in IMPORTABLE:
        raise ValueError(
            f"{argument}: class_path {class_path!r}: module {module_name!r} is not imported, "
            f"and posenc imports only its own modules to resolve a class_path (importing runs "
            f"the module's code); if you trust it, import {module_name} before building the "
            f"model or loading the checkpoint")
    return module_name, parts[-1]


def import_class(class_path: str, argument: str = "class_path") -> type[nn.Module]:
    """``"package.module.Class"`` -> the ``nn.Module`` subclass, with errors that name
    ``argument`` and the path.

    The module is taken from ``sys.modules``; only modules of :data:`IMPORTABLE` packages are
    imported when missing (:func:`check_class_path`). The class is read from the module's
    namespace (a module-level ``__getattr__`` hook is not called: it may import).
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
    if not issubclass(obj, nn.Module):
        raise ValueError(f"{where}: {obj.__module__}.{obj.__qualname__} is not a "
                         f"torch.nn.Module subclass: only those can be built from a config or "
                         f"checkpoint")
    return obj


def fill_from_defaults(cls: Callable, init_args: Mapping[str, Any],
                       defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``init_args`` plus every parameter of ``cls`` that ``defaults`` knows and the config
    left out (e.g. ``dim``/``num_heads`` inferred from the model)."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return dict(init_args)
    kwargs = dict(init_args)
    for name, value in defaults.items():
        if name in params and name not in kwargs:
            kwargs[name] = value
    return kwargs


def instantiate(spec: Any, registry: Mapping[str, Callable[..., Any]], argument: str,
                defaults: Mapping[str, Any] | None = None) -> Any:
    """Build what ``spec`` names.

    Args:
        spec: a key of ``registry``; or ``{"class_path": ..., "init_args": {...}}`` naming a
            ``torch.nn.Module`` subclass (see :func:`import_class` and the module docstring),
            whose missing constructor arguments are taken from ``defaults`` when their names
            match.
        registry: name -> factory called with ``defaults`` as keywords it accepts.
        argument: the config argument's name, for error messages.
        defaults: values inferred from the surrounding model (``dim``, ``num_heads``, ...).
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
