"""The package's shape: no two of its modules import each other in a cycle, and every module is
short enough to read in one sitting (docs/contributing.md).

Imports are read from the source (the AST of every ``.py`` file of ``transformer_limits``), not
from ``sys.modules``, so a function-level (lazy) import counts like a top-level one: a cycle hidden
inside a function still couples the two modules and breaks as soon as the order of first use
changes.  A module's edges to its own ancestor packages are not counted (``transformer_limits.verify.x``
importing ``transformer_limits.verify`` is how a subpackage serves its lazy API, not a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "transformer_limits"
#: a module must be shorter than this many lines
MAX_LINES = 500


def package_modules(package_dir: Path) -> dict[str, tuple[Path, bool]]:
    """``dotted name -> (file, is_package)`` for every ``.py`` file under ``package_dir`` (whose
    directory name is the top-level package name); ``__init__.py`` names its package."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        modules[".".join(parts)] = (path, is_package)
    return modules


def _imported_modules(node: ast.AST, module: str, is_package: bool, modules: dict) -> list[str]:
    """Modules of the package that the import statement ``node`` (in ``module``) loads by name.

    ``import a.b`` names ``a.b``; ``from a.b import c`` names ``a.b.c`` when that is a module (a
    submodule imported by name), else ``a.b`` (an attribute of it).  A relative ``from`` of level k
    starts at the package containing ``module`` and climbs k − 1 packages."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in modules]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(package[:len(package) - (node.level - 1)] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    names = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        if submodule in modules:
            names.append(submodule)
        elif base in modules:
            names.append(base)
    return names


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """``module -> modules of the package it imports``, counting every import statement anywhere in
    the file (module level, functions, ``if TYPE_CHECKING:``), without edges to itself or to its own
    ancestor packages."""
    modules = package_modules(package_dir)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            for target in _imported_modules(node, name, is_package, modules):
                if target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the strongly connected components of ``graph`` (each sorted), every
    vertex in exactly one.  Two modules share a component iff each reaches the other: a cycle."""
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = lowlink[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                lowlink[v] = min(lowlink[v], lowlink[w])
            elif w in on_stack:
                lowlink[v] = min(lowlink[v], index[w])
        if lowlink[v] == index[v]:  # v is the root of a component: pop it
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def _one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest import cycle through the first module of ``component`` (breadth-first inside it),
    as ``[m, …, m]``."""
    start, members = component[0], set(component)
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:  # walk the parents back from v to start
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1] + [start]
                if w not in parent:
                    parent[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"{component} is not a cycle")


def import_cycles(package_dir: Path) -> list[list[str]]:
    """One cycle (``[m, …, m]``) per strongly connected component of more than one module."""
    graph = import_graph(package_dir)
    return [_one_cycle(graph, c) for c in strongly_connected_components(graph) if len(c) > 1]


# ------------------------------------------------------------------------------------------------


def test_no_import_cycle_between_package_modules():
    cycles = import_cycles(PACKAGE)
    assert not cycles, "modules importing each other in a cycle (function-level imports count):\n" + \
        "\n".join("  " + " -> ".join(cycle) for cycle in cycles)


def test_every_module_is_under_the_line_limit():
    lengths = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
               for path, _ in package_modules(PACKAGE).values()}
    long = {path: n for path, n in sorted(lengths.items()) if n >= MAX_LINES}
    assert not long, f"modules of {MAX_LINES} lines or more (split them by concept):\n" + "\n".join(
        f"  {path}: {n} lines" for path, n in long.items())


def _write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_the_detector_finds_a_cycle_through_a_function_level_import(tmp_path):
    # pkg.a imports pkg.b at module level; pkg.b imports pkg.a only inside a function (relative)
    package = _write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "def late():\n    from . import a\n    return a\n",
        "pkg/c.py": "import pkg.a\n",  # reaches the cycle but is not on it
    })
    assert import_graph(package) == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}
    assert import_cycles(package) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_the_detector_ignores_ancestors_and_names_that_are_not_modules(tmp_path):
    # the package's __init__ serves names of its submodules, which import the package back: no cycle;
    # ``from pkg.sub.d import VALUE`` is an edge to pkg.sub.d, and imports outside pkg are not edges
    package = _write_package(tmp_path, {
        "pkg/__init__.py": "from pkg.sub import d\n",
        "pkg/sub/__init__.py": "from .d import VALUE\n",
        "pkg/sub/d.py": "import os\nimport pkg\nfrom .. import sub\nVALUE = 1\n",
        "pkg/e.py": "from pkg.sub.d import VALUE\nfrom pkg.sub import VALUE as V\n",
    })
    graph = import_graph(package)
    assert graph == {"pkg": {"pkg.sub.d"}, "pkg.sub": {"pkg.sub.d"}, "pkg.sub.d": set(),
                     "pkg.e": {"pkg.sub.d", "pkg.sub"}}
    assert import_cycles(package) == []
    components = strongly_connected_components(graph)
    assert sorted(m for c in components for m in c) == sorted(graph) and all(len(c) == 1 for c in components)
