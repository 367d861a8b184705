"""Griffe extension for the API reference: an object is documented once, where users import it.

A package (``posenc.core``) re-exports its modules' classes and functions in its ``__all__``,
and mkdocs.yml's ``show_submodules`` renders each module (``posenc.core.bias``) with its own
``__all__`` below the package's names: every exported class appeared twice on its page, with
heading, signature and docstring. This extension hides a module's member that a package above
it already shows, so a module's section keeps what only the module exports (validators,
helpers, the functions behind the classes). Links to either path still resolve: mkdocstrings
registers the module path as the shown object's second name.
"""

from __future__ import annotations

from typing import Any

import griffe


class OnePlacePerObject(griffe.Extension):
    """Mark ``public = False`` each module member whose object a package above shows."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        _hide_shown(pkg, shown=set())


def _hide_shown(module: griffe.Module, shown: set[str]) -> None:
    """Hide ``module``'s members that an enclosing package shows (their objects' paths are in
    ``shown``), then do the same in its submodules, adding what ``module`` shows."""
    here = set()
    for member in module.members.values():
        try:
            target = member.final_target if member.is_alias else member
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue  # an import from outside posenc (torch, timm): never shown by a package
        if target.is_module:
            continue
        path = target.path
        if path in shown:
            member.public = False
        elif member.is_public:
            here.add(path)
    for submodule in module.modules.values():
        _hide_shown(submodule, shown | here)
