"""The package's layers, and the imports that break them.

Each module belongs to one layer; a module may import its own layer and the layers below it, never
one above.  From the bottom:

====  ==========  ==============================================================================
rank  layer       modules
====  ==========  ==============================================================================
0     base        the top-level helpers (``errors``, ``atomic_write``, ``jsonable``, ``mathml``, ...)
1     numeric     ``transformer_limits.numeric``: arrays, kernels, simulators (never SymPy's side)
2     symbolic    ``transformer_limits.symbolic``: derivations and code generation (may read the
                  kernel-family declarations of ``numeric``)
3     verify      ``transformer_limits.verify``: experiments, statistics, reports
4     testing     ``transformer_limits.testing``: the public assertions and strategies (on verify)
4     commands    ``transformer_limits.commands``: the subcommands
5     cli         ``transformer_limits.cli`` and ``__main__``: the front door
====  ==========  ==============================================================================

The package itself (``transformer_limits/__init__.py``) is a facade whose functions import the
symbolic layer when called; below the symbolic layer a module may import the facade module
(``import transformer_limits``) and read its ``__version__``, but import no other name from it.

Imports are read from the source (``import`` statements anywhere in a module, including inside
functions, and ``importlib.import_module("...")`` with a literal name), so a lazy import counts
like an eager one.  ``tests/test_layers.py`` keeps :func:`layer_violations` empty.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LAYERS", "FACADE_NAMES", "Import", "layer_of", "module_imports", "layer_violations"]

#: layer name -> rank; a module may import layers of equal or lower rank (equal ranks of different
#: names are siblings and may not import each other)
LAYERS: dict[str, int] = {"base": 0, "numeric": 1, "symbolic": 2, "verify": 3, "testing": 4, "commands": 4,
                          "cli": 5}
#: the names a module below the symbolic layer may import from the package facade
FACADE_NAMES = frozenset({"__version__"})
_PACKAGE = "transformer_limits"
_SUBPACKAGES = ("numeric", "symbolic", "verify", "testing", "commands")


@dataclass(frozen=True)
class Import:
    """One import of a package module by another: ``importer`` imports ``imported`` at ``line``."""

    importer: str
    imported: str
    line: int
    names: tuple[str, ...] = ()


def layer_of(module: str) -> str | None:
    """The layer of a dotted module name of the package (``None``: the facade, or not the package)."""
    parts = module.split(".")
    if parts[0] != _PACKAGE or len(parts) == 1:
        return None
    if parts[1] in _SUBPACKAGES:
        return parts[1]
    return "cli" if parts[1] in ("cli", "__main__") else "base"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(importer: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def module_imports(root: str | Path) -> list[Import]:
    """Every import of a package module by another under the package folder ``root``.

    ``from transformer_limits import x`` counts as an import of the module ``transformer_limits.x``
    when that module exists, else as an import of name ``x`` from the facade."""
    root = Path(root)
    modules = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    out: list[Import] = []
    for importer, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out += [Import(importer, a.name, node.lineno) for a in node.names if a.name.split(".")[0] == _PACKAGE]
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(importer, node, path.name == "__init__.py")
                if target.split(".")[0] != _PACKAGE:
                    continue
                names = tuple(a.name for a in node.names)
                submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
                out += [Import(importer, m, node.lineno) for m in submodules]
                rest = tuple(n for n in names if f"{target}.{n}" not in modules)
                if rest:
                    out.append(Import(importer, target, node.lineno, rest))
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str) and node.args[0].value.startswith(_PACKAGE)
                  and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"):
                out.append(Import(importer, node.args[0].value, node.lineno))
    return out


def layer_violations(root: str | Path) -> list[str]:
    """One line per import that goes up a layer (or sideways between sibling layers), or reads
    more than :data:`FACADE_NAMES` from the facade below the symbolic layer; empty when clean."""
    bad: list[str] = []
    for imp in module_imports(root):
        low, high = layer_of(imp.importer), layer_of(imp.imported)
        if low is None:
            continue  # the facade may import anything
        where = f"{imp.importer} (line {imp.line}) imports {imp.imported}"
        if high is None:
            if LAYERS[low] < LAYERS["symbolic"] and not set(imp.names) <= FACADE_NAMES:
                bad.append(f"{where}: the facade's {', '.join(imp.names)} from the {low} layer "
                           f"(only {', '.join(sorted(FACADE_NAMES))} may be read below symbolic)")
        elif low != high and LAYERS[high] >= LAYERS[low]:
            bad.append(f"{where}: layer {low} (rank {LAYERS[low]}) may not import layer {high} "
                       f"(rank {LAYERS[high]})")
    return bad
