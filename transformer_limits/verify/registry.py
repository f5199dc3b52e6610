"""The registry of experiments behind ``verify`` and ``report``: built-in modules, plugins and files.

Experiment modules live in :mod:`transformer_limits.verify.experiments` (one module per paper or
topic) and call :func:`register_experiment` at import time; they are discovered automatically.
Experiments from outside the package come from installed plugins (the entry-point group
:data:`ENTRY_POINT_GROUP`, loaded at discovery after the built-in ones; a broken plugin is skipped
with a one-line warning) or from a Python file (:func:`load_experiment_file`, ``--module PATH``),
whose top-level functions travel to sweep workers with the file's source
(:func:`worker_safe`); see ``docs/extending.md``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import pkgutil
import re
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from transformer_limits.errors import InputError
from transformer_limits.verify.experiment import Experiment

__all__ = [
    "ENTRY_POINT_GROUP",
    "experiment_source",
    "experiment_spec",
    "list_experiments",
    "load_experiment_file",
    "plugin_errors",
    "register_experiment",
    "source_of",
    "worker_safe",
]

#: entry-point group of experiment plugins: ``[project.entry-points."transformer_limits.experiments"]``
#: ``NAME = "pkg.module"`` (importing it registers its experiments) or ``NAME = "pkg.module:OBJECT"``
#: (an :class:`Experiment` or a list of them, registered here)
ENTRY_POINT_GROUP = "transformer_limits.experiments"
#: the package whose modules are the built-in experiments
_BUILTIN_PACKAGE = "transformer_limits.verify.experiments"
#: prefix of the ``sys.modules`` names of files loaded by :func:`load_experiment_file`
_FILE_MODULE_PREFIX = "transformer_limits_file_"

_REGISTRY: dict[str, Experiment] = {}
#: where each registered experiment came from: {"kind": "built-in" | "plugin" | "module" | "python", ...}
_SOURCES: dict[str, dict[str, str]] = {}
#: entry-point name -> one line saying why that plugin was not loaded
_PLUGIN_ERRORS: dict[str, str] = {}
#: sys.modules name of a file loaded by load_experiment_file -> (resolved path, source bytes)
_FILE_MODULES: dict[str, tuple[str, bytes]] = {}
_DISCOVERED = False
_DISCOVERING = False
#: the source of the plugin or file being imported now (None: built-in modules or user code);
#: ``"replace": True`` while a sweep worker re-imports a file (a newer version may replace an older)
_LOADING: dict[str, Any] | None = None


def _describe(source: Mapping[str, Any] | None) -> str:
    if not source:
        return "unknown code"
    kind = source.get("kind")
    if kind == "plugin":
        return f"plugin {source['entry_point']!r} ({source['value']})"
    if kind == "module":
        return f"module file {source['path']!r}"
    if kind == "built-in":
        return f"built-in module {source.get('module', _BUILTIN_PACKAGE)}"
    return f"Python module {source.get('module', '?')}"


def register_experiment(exp: Experiment) -> Experiment:
    """Add ``exp`` to the registry; call it at import time of the module defining the experiment.

    Names are unique: registering a second, different experiment under a taken name raises
    ``RuntimeError`` naming both sources (the same object twice is a no-op).  Outside the built-in
    package, plugins and files, the built-in experiments and plugins are discovered first, so a
    name clash with them is reported here rather than breaking discovery later.
    """
    if not isinstance(exp, Experiment):
        raise TypeError(f"register_experiment needs an Experiment, got {type(exp).__name__}")
    caller = sys._getframe(1).f_globals.get("__name__", "")
    if _LOADING is not None:
        source = dict(_LOADING)
    elif caller.startswith(_BUILTIN_PACKAGE + "."):
        source = {"kind": "built-in", "module": caller}
    else:
        source = {"kind": "python", "module": caller}
        _discover()  # user code: the built-in names and the plugins' come first
    replace = bool(source.pop("replace", False))
    existing = _REGISTRY.get(exp.name)
    if existing is not None and existing is not exp and not replace:
        raise RuntimeError(f"experiment {exp.name!r} registered twice: by {_describe(source)} and "
                           f"already by {_describe(_SOURCES.get(exp.name))}")
    _REGISTRY[exp.name] = exp
    _SOURCES[exp.name] = source
    return exp


def _discover() -> None:
    """Import the built-in experiment modules, then the plugins (once per process)."""
    global _DISCOVERED, _DISCOVERING
    if _DISCOVERED or _DISCOVERING:
        return
    _DISCOVERING = True
    try:
        pkg = importlib.import_module(_BUILTIN_PACKAGE)
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{pkg.__name__}.{info.name}")
        _load_plugins()
        _DISCOVERED = True
    finally:
        _DISCOVERING = False


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def _warn(message: str) -> None:
    # one line on stderr (warnings.warn would add a second line with the source)
    print(f"transformer-limits: warning: {message}", file=sys.stderr)


def _restore(registry: dict[str, Experiment], sources: dict[str, dict[str, str]]) -> None:
    """Put the registry back as it was (in place: tests and callers hold the dicts)."""
    _REGISTRY.clear()
    _REGISTRY.update(registry)
    _SOURCES.clear()
    _SOURCES.update(sources)


def _load_plugins() -> None:
    """Load every entry point of :data:`ENTRY_POINT_GROUP` (sorted by name), each on its own: a
    plugin that fails to import, registers a taken name, names something that is not an
    :class:`Experiment` or registers nothing is rolled back, recorded in :func:`plugin_errors` and
    reported in one line on stderr; the others and the built-in experiments are unaffected."""
    try:
        entry_points = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception as exc:  # noqa: BLE001 - broken package metadata must not break the built-ins
        _PLUGIN_ERRORS["*"] = f"the {ENTRY_POINT_GROUP} entry points could not be read: {_one_line(exc)}"
        _warn(_PLUGIN_ERRORS["*"])
        return
    for ep in sorted(entry_points, key=lambda e: (e.name, e.value)):
        _load_plugin(ep)


def _plugin_experiments(obj: Any, value: str) -> list[Experiment]:
    items = list(obj) if isinstance(obj, (list, tuple)) else [obj]
    bad = [item for item in items if not isinstance(item, Experiment)]
    if bad or not items:
        what = type(bad[0]).__name__ if bad else "an empty list"
        raise TypeError(f"{value} is {what}, not an Experiment (or a list of them)")
    return items


def _load_plugin(ep: importlib.metadata.EntryPoint) -> None:
    global _LOADING
    registry, sources = dict(_REGISTRY), dict(_SOURCES)
    source = {"kind": "plugin", "entry_point": ep.name, "value": ep.value}
    dist = getattr(ep, "dist", None)
    if dist is not None and getattr(dist, "name", None):
        source["distribution"] = f"{dist.name} {dist.version}"
    module_name = ep.value.partition(":")[0].strip()
    was_imported = module_name in sys.modules
    previous, _LOADING = _LOADING, source
    try:
        obj = ep.load()
        if ep.attr:
            for exp in _plugin_experiments(obj, ep.value):
                register_experiment(exp)
        added = [n for n in _REGISTRY if registry.get(n) is not _REGISTRY[n]]
        if not added and not was_imported and not ep.attr:
            raise LookupError("importing it registered no experiment")
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken plugin must not break the others
        _restore(registry, sources)
        _PLUGIN_ERRORS[ep.name] = f"plugin {ep.name!r} ({ep.value}) not loaded: {_one_line(exc)}"
        _warn(_PLUGIN_ERRORS[ep.name] + "; its experiments are unavailable")
    finally:
        _LOADING = previous


def plugin_errors() -> dict[str, str]:
    """Entry-point name -> why that plugin was not loaded (one line each; empty when all loaded)."""
    _discover()
    return dict(_PLUGIN_ERRORS)


def list_experiments() -> list[Experiment]:
    """Every registered experiment (built-ins, plugins, loaded files), sorted by name."""
    _discover()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def experiment_spec(name: str) -> Experiment:
    """The registered experiment ``name``; ``ValueError`` naming it when there is none."""
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        broken = "".join(f"; {msg}" for msg in _PLUGIN_ERRORS.values())
        raise ValueError(f"unknown experiment {name!r} (known: {', '.join(sorted(_REGISTRY))}){broken}") from None


def experiment_source(name: str) -> dict[str, str] | None:
    """Where experiment ``name`` came from: ``{"kind": "built-in", "module": ...}``, ``{"kind":
    "plugin", "entry_point": ..., "value": ..., "distribution": ...}``, ``{"kind": "module", "path":
    ..., "sha256": ...}`` (a file, :func:`load_experiment_file`) or ``{"kind": "python", "module":
    ...}``; None when unknown."""
    _discover()
    source = _SOURCES.get(name)
    return dict(source) if source is not None else None


def source_of(experiment: Experiment) -> dict[str, str] | None:
    """Where ``experiment`` came from when it is the registered object of its name (a copy), else
    None; unlike :func:`experiment_source` it discovers nothing."""
    source = _SOURCES.get(experiment.name) if _REGISTRY.get(experiment.name) is experiment else None
    return dict(source) if source is not None else None


# ------------------------------------------------------------------------------------------------
# experiments from a Python file (``--module PATH``)
# ------------------------------------------------------------------------------------------------


def _file_module_name(path: Path, source: bytes) -> str:
    """A stable ``sys.modules`` name: the same file with the same contents gets the same name in
    every process (sweep workers find it), another file or an edited one another name."""
    digest = hashlib.sha256(str(path).encode("utf-8") + b"\0" + source).hexdigest()[:16]
    stem = re.sub(r"\W", "_", path.stem, flags=re.ASCII)
    return f"{_FILE_MODULE_PREFIX}{stem}_{digest}"


def _exec_file_module(name: str, path: str, source: bytes, *, replace: bool = False) -> Any:
    """Create module ``name`` from ``source`` (the bytes of ``path``), put it in ``sys.modules``
    (so dataclasses and pickling find it) and run it; on an exception remove it and re-raise."""
    global _LOADING
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise ImportError(f"cannot make a module spec for {path!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    previous = _LOADING
    _LOADING = {"kind": "module", "path": path, "sha256": hashlib.sha256(source).hexdigest(),
                "module": name, "replace": replace}
    try:
        # compile the bytes that were hashed (no re-read, no __pycache__ written next to the file)
        exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - the user asked to run it
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        _LOADING = previous
    _FILE_MODULES[name] = (path, source)
    return module


def load_experiment_file(path: str | os.PathLike) -> list[Experiment]:
    """Import the Python file ``path`` as a module; its :func:`register_experiment` calls register
    its experiments (returned, sorted by name).

    The module is named ``transformer_limits_file_<stem>_<hash of path and contents>`` in
    ``sys.modules``; loading the same file again is a no-op.  Its top-level functions run in sweep
    workers through :func:`run_points` (which ships the file's source to them).  The file's folder
    is not put on ``sys.path``: import helpers from an installed package.  The built-in experiments
    and plugins are discovered first.  Raises :class:`transformer_limits.errors.InputError` (one
    line, naming the file) when ``path`` is not an existing ``.py`` file, when running it raises,
    when it registers a name already taken (the registry is then left as it was) or registers none.
    """
    text = os.fspath(path)
    where = f"experiment file {text!r}"
    file = Path(text)
    if file.suffix != ".py":
        raise InputError(f"{where} is not a .py file")
    if not file.exists():
        raise InputError(f"{where} does not exist")
    if not file.is_file():
        raise InputError(f"{where} is not a file")
    try:
        source = file.read_bytes()
    except OSError as exc:
        raise InputError(f"{where} cannot be read: {exc.strerror or exc}") from None
    resolved = file.resolve()
    name = _file_module_name(resolved, source)
    _discover()
    if name in sys.modules and name in _FILE_MODULES:
        return sorted((_REGISTRY[n] for n, s in _SOURCES.items() if s.get("module") == name
                       and n in _REGISTRY), key=lambda e: e.name)
    registry, sources = dict(_REGISTRY), dict(_SOURCES)
    try:
        _exec_file_module(name, str(resolved), source)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure of the user's file is bad input
        _restore(registry, sources)
        raise InputError(f"{where} failed to load: {_one_line(exc)}") from exc
    added = sorted((exp for n, exp in _REGISTRY.items() if registry.get(n) is not exp), key=lambda e: e.name)
    if not added:
        # forget the module, so that loading the file again reports the same error (not a silent no-op)
        sys.modules.pop(name, None)
        _FILE_MODULES.pop(name, None)
        raise InputError(f"{where} registers no experiment (call register_experiment(Experiment(...)) "
                         "at module level)")
    return added


class _FileFunction:
    """A top-level function of a file loaded by :func:`load_experiment_file`, picklable into
    processes that never loaded the file (spawn/forkserver pools, dask workers): the pickle carries
    the module name, the path and the source, and unpickling re-creates the module from that source
    when it is missing (:func:`_file_function`) and returns it wrapped again."""

    def __init__(self, fn: Callable, module: str, qualname: str):
        self.fn, self.module, self.qualname = fn, module, qualname

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __reduce__(self):
        path, source = _FILE_MODULES[self.module]
        return _file_function, (self.module, self.qualname, path, source)


def _file_function(module: str, qualname: str, path: str, source: bytes) -> Callable:
    """Unpickling side of :class:`_FileFunction` (runs in a worker)."""
    mod = sys.modules.get(module)
    if mod is None:
        # a worker may hold an older version of the file under another name: let this one replace it
        mod = _exec_file_module(module, path, source, replace=True)
    obj: Any = mod
    for part in qualname.split("."):
        obj = getattr(obj, part)
    # wrapped again: a dask scheduler unpickles a task and pickles it once more for a worker, which
    # must also receive the file's source (a bare function would pickle by a module name it lacks)
    return _FileFunction(obj, module, qualname)


def worker_safe(fn: Callable) -> Callable:
    """``fn`` itself, or a :class:`_FileFunction` when it is a top-level function of a loaded file."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if module not in _FILE_MODULES or "<" in qualname:
        return fn
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return _FileFunction(fn, module, qualname) if obj is fn else fn
