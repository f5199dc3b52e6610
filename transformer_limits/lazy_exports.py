"""The lazy public API of a subpackage (PEP 562): one mechanism for ``verify``, ``numeric`` and
``symbolic``.

A subpackage lists its public names in a table ``name -> submodule`` and calls
:func:`install_lazy_exports` at the end of its ``__init__``.  A name is imported from its submodule
on first attribute access, so importing the package stays light (no SymPy, SciPy, Numba or
PyTorch until a name that needs them is used).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__all__ = ["install_lazy_exports"]


class _LazyPackage(types.ModuleType):
    """A package's module type that keeps an exported function visible over its same-named
    submodule (``_shadowed``: the exported names equal to the name of their own submodule)."""

    _shadowed: frozenset[str] = frozenset()

    def __setattr__(self, name: str, value: Any) -> None:
        # Importing submodule X binds it as attribute X of the package.  For an exported function
        # X defined in submodule X (e.g. ``verify.rate_check`` before it moved to ``verify.rate.check``) that would hide the function, so the
        # binding is skipped; the submodule stays in sys.modules and imports by path still work.
        if name in type(self)._shadowed and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


def install_lazy_exports(package: str, exports: dict[str, str]) -> list[str]:
    """Give package ``package`` (already in ``sys.modules``) a ``__getattr__`` and ``__dir__`` that
    import each name of ``exports`` (``public name -> submodule of package``; read at look-up time,
    so changes to the dict are seen) from its submodule on first use; returns ``__all__``.

    An unknown name raises ``AttributeError`` naming the package; a name found once is cached in
    the package namespace."""
    module = sys.modules[package]
    namespace = vars(module)

    def __getattr__(name: str) -> Any:
        try:
            submodule = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
        namespace[name] = value  # later look-ups find it without calling __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    namespace["__getattr__"] = __getattr__
    namespace["__dir__"] = __dir__
    shadowed = frozenset(name for name, submodule in exports.items() if name == submodule)
    module.__class__ = type("_LazyPackage", (_LazyPackage,), {"_shadowed": shadowed})
    return list(exports)
