"""Build a module from a config value: a registered name, or ``{class_path, init_args}``.

Configs keep encodings as plain values (a string or a dict), so ``save_hyperparameters()``
stores text, checkpoints load with ``torch.load(weights_only=True)``, and the module is
rebuilt from the same value on reload.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["import_class", "instantiate", "fill_from_defaults"]


def import_class(class_path: str) -> type:
    """``"package.module.Class"`` -> the class, with an error that names the path."""
    if not isinstance(class_path, str) or "." not in class_path:
        raise ValueError(f"class_path must be a dotted path such as "
                         f"'posenc.spatial.RoPE2D', got {class_path!r}")
    module_name, _, name = class_path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"class_path {class_path!r}: cannot import module {module_name!r} "
                         f"({err})") from err
    if not hasattr(module, name):
        raise ValueError(f"class_path {class_path!r}: module {module_name!r} has no {name!r}")
    return getattr(module, name)


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
        spec: a key of ``registry``; or ``{"class_path": ..., "init_args": {...}}``, whose
            missing constructor arguments are taken from ``defaults`` when their names match.
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
        cls = import_class(spec["class_path"])
        return cls(**fill_from_defaults(cls, init_args, defaults))
    raise TypeError(f"{argument} must be a name (str) or a dict with class_path/init_args, got "
                    f"{type(spec).__name__} ({spec!r})")
