"""One object per claim: experiments, their results, and the registry behind ``verify`` / ``report``.

An :class:`Experiment` names the derivations it rests on, the claim it checks, and a ``run``
function ``run(config: ExperimentConfig) -> ExperimentResult``.  The result carries the verdicts
(:class:`transformer_limits.verify.verdicts.Check`), fitted rates, tables and figures; the report
writer (:mod:`transformer_limits.verify.report`) turns any result into ``results.json``,
``report.md`` and a self-contained ``report.html``.  Experiments are data plus small functions;
the report is generic.

Experiment modules live in :mod:`transformer_limits.verify.experiments` (one module per paper or
topic) and call :func:`register_experiment` at import time; they are discovered automatically.
Experiments from outside the package come from installed plugins (the entry-point group
:data:`ENTRY_POINT_GROUP`, loaded at discovery after the built-in ones; a broken plugin is skipped
with a one-line warning) or from a Python file (:func:`load_experiment_file`, ``--module PATH``);
see ``docs/extending.md``.
"""

from __future__ import annotations

import errno
import hashlib
import importlib
import importlib.metadata
import importlib.util
import numbers
import os
import pkgutil
import re
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from transformer_limits.errors import EnvironmentFailure, InputError
from transformer_limits.verify.verdicts import Check

if TYPE_CHECKING:  # pragma: no cover
    from transformer_limits.verify.sweep import SweepResult

__all__ = [
    "Experiment",
    "ExperimentConfig",
    "ExperimentResult",
    "ENTRY_POINT_GROUP",
    "Figure",
    "PROFILES",
    "experiment_source",
    "experiment_spec",
    "jsonable_settings",
    "list_experiments",
    "load_experiment_file",
    "missing_requirement",
    "plugin_errors",
    "register_experiment",
    "run_experiment",
    "run_points",
]

PROFILES = ("quick", "full")


@dataclass(frozen=True)
class ExperimentConfig:
    """How to run: ``profile`` picks the grid (``quick`` for CI and the README, ``full`` for
    publication-grade grids), ``seed`` the base seed, ``workers`` the process count, ``progress``
    whether to show tqdm bars (on stderr), ``scheduler`` an optional dask.distributed address,
    ``store`` an optional SQLite sweep store path (resumable sweeps)."""

    profile: str = "quick"
    seed: int = 0
    workers: int = 1
    progress: bool = False
    scheduler: str | None = None
    store: str | None = None

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {self.profile!r}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Figure:
    """A plot for the report: a PNG (bytes) plus a caption.

    Build it with matplotlib (Agg) and ``fig.savefig(buf, format="png")``; the report embeds it in
    HTML as base64 and writes it next to ``report.md``.
    """

    name: str
    png: bytes
    caption: str


@dataclass
class ExperimentResult:
    """What an experiment run produced.

    Fields::

        checks      verdicts (each has name, claim, expected, measured, ci, passed, statistics, note)
        fits        JSON-able fitted rates keyed by name (exponents with CIs, constants, windows)
        tables      named lists of row dicts (rendered as Markdown/HTML tables, saved in results.json)
        figures     plots
        notes       free-text findings (e.g. "the L^-1/3 term is not tight")
        data        JSON-able raw results kept in results.json but not rendered (e.g. the worst
                    inputs found by the sup-over-inputs ascent, as arrays)
        provenance  seeds, grid, timings (the report adds versions, git commit, config hash)
        error       None, or one line saying why the run crashed (set by run_experiment; the
                    traceback is in notes).  A crashed run has status "error": it is neither a
                    pass nor a failed check.
    """

    experiment: str
    profile: str
    checks: list[Check] = field(default_factory=list)
    fits: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    @property
    def passed(self) -> bool:
        """Every check passed and the run did not crash."""
        return self.error is None and all(c.passed for c in self.checks)

    @property
    def status(self) -> str:
        """``"pass"``, ``"fail"`` (a check failed: the data contradict the claim) or ``"error"`` (crashed)."""
        if self.error is not None:
            return "error"
        return "pass" if self.passed else "fail"

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]


@dataclass(frozen=True)
class Experiment:
    """A claim and how to check it.

    Fields::

        name         CLI name (transformer-limits verify NAME)
        title        one line
        paper        "A", "B" or "C"
        claim        the statement being checked, in the symbols of docs/theory.md §0.3
        derivations  names of the derivations it rests on (linked from the report)
        check_names  the checks it always reports (documented names, e.g. exponent_L)
        run          run(config) -> ExperimentResult
        profiles     profiles in which report includes it (("quick", "full") or ("full",))
        budget_s     expected wall time per profile on 2 cores, for the docs
        requires     modules it must import (e.g. ("torch",)); where one is missing it is not
                     run (missing_requirement() says why: verify exits 2, report lists it)
    """

    name: str
    title: str
    paper: str
    claim: str
    derivations: tuple[str, ...]
    check_names: tuple[str, ...]
    run: Callable[[ExperimentConfig], ExperimentResult]
    profiles: tuple[str, ...] = PROFILES
    budget_s: dict[str, float] = field(default_factory=dict)
    requires: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description (everything but ``run``)."""
        return {"name": self.name, "title": self.title, "paper": self.paper, "claim": self.claim,
                "derivations": list(self.derivations), "check_names": list(self.check_names),
                "profiles": list(self.profiles), "budget_s": dict(self.budget_s),
                "requires": list(self.requires)}


#: why an experiment cannot run without a module, and how to get it (module -> text)
REQUIREMENT_HINTS = {"torch": "needs PyTorch (pip install torch)"}


def _module_available(module: str) -> bool:
    """Whether ``module`` can be imported here (found on the path; nothing is imported for a
    top-level name)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken sys.modules entry
        return False


def missing_requirement(experiment: Experiment) -> str | None:
    """One line saying why ``experiment`` cannot run here (a module of ``requires`` is missing),
    e.g. ``"missing requirement: needs PyTorch (pip install torch)"``; None when it can run."""
    missing = [m for m in experiment.requires if not _module_available(m)]
    if not missing:
        return None
    return "missing requirement: " + "; ".join(
        REQUIREMENT_HINTS.get(m, f"needs the module {m!r} (pip install {m.split('.')[0]})") for m in missing)


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


def _worker_safe(fn: Callable) -> Callable:
    """``fn`` itself, or a :class:`_FileFunction` when it is a top-level function of a loaded file."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if module not in _FILE_MODULES or "<" in qualname:
        return fn
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return _FileFunction(fn, module, qualname) if obj is fn else fn


# ------------------------------------------------------------------------------------------------
# running
# ------------------------------------------------------------------------------------------------


# errno values that mean the machine, not the experiment, failed (disk full, quota, I/O error)
_ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def run_experiment(experiment: Experiment, config: ExperimentConfig) -> ExperimentResult:
    """Run ``experiment`` under ``config``; a crash *inside* the experiment is recorded, not raised.

    An exception in ``experiment.run`` gives a result with ``error`` set (one line), no checks and
    the traceback in its notes (:attr:`ExperimentResult.status` ``"error"``); so does a result
    missing a declared check (``experiment.check_names``) or reporting none.  Failures of the
    input or the environment stop the whole run instead and propagate:
    :class:`transformer_limits.errors.InputError` (a bad store, scheduler or grid size),
    :class:`transformer_limits.errors.EnvironmentFailure`, ``MemoryError`` and an ``OSError`` for
    a full disk (raised as ``EnvironmentFailure``).  ``provenance["timings"]["run_s"]`` records the
    wall time.  ``KeyboardInterrupt`` / ``SystemExit`` propagate.  An experiment whose ``requires``
    names a module that is missing here is not started: ``InputError`` with
    the line of ``missing_requirement`` in this module (``verify`` exits 2; ``report`` skips it first).
    """
    why = missing_requirement(experiment)
    if why is not None:
        raise InputError(f"experiment {experiment.name} cannot run here: {why}")
    start = time.perf_counter()
    try:
        result = experiment.run(config)
        if not isinstance(result, ExperimentResult):
            raise TypeError(f"run returned {type(result).__name__}, not ExperimentResult")
    except (InputError, EnvironmentFailure, MemoryError):
        raise
    except OSError as exc:
        if exc.errno in _ENVIRONMENT_ERRNOS:
            raise EnvironmentFailure(f"experiment {experiment.name}: {exc}") from exc
        result = _crashed(experiment, config, exc)
    except Exception as exc:  # noqa: BLE001 - recorded as a crash (status "error"), not a failed check
        result = _crashed(experiment, config, exc)
    else:
        missing = [name for name in experiment.check_names if name not in {c.name for c in result.checks}]
        if missing:
            result.error = f"the result lacks the declared check(s) {', '.join(missing)}"
        elif not result.checks:
            result.error = "the result reports no checks"
    elapsed = time.perf_counter() - start
    timings = dict(result.provenance.get("timings", {}))
    timings["run_s"] = elapsed
    result.provenance["timings"] = timings
    result.provenance.setdefault("seeds", {"base": config.seed})
    source = _SOURCES.get(experiment.name) if _REGISTRY.get(experiment.name) is experiment else None
    if source is not None and source.get("kind") != "built-in":
        # an experiment from outside the package: say which plugin or file (and its hash) ran
        result.provenance.setdefault("source", dict(source))
    return result


def _crashed(experiment: Experiment, config: ExperimentConfig, exc: BaseException) -> ExperimentResult:
    result = ExperimentResult(experiment.name, config.profile)
    result.error = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    result.notes.append("traceback:\n" + traceback.format_exc())
    return result


def jsonable_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """An experiment's settings as JSON values (tuples become lists), for sweep points and provenance."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()}


def run_points(config: ExperimentConfig, fn: Callable[[dict[str, Any]], Mapping[str, Any]],
               grid: Mapping[str, Any], *, experiment: str, version: int | str = 1) -> "SweepResult":
    """Evaluate ``fn`` on every point of ``grid`` the way ``config`` asks.

    Uses :func:`transformer_limits.verify.sweep.run_sweep` with ``config.workers`` processes (or the
    dask scheduler ``config.scheduler``) and ``config.progress``; results go to ``config.store``
    (resumable: a rerun skips finished points) or, without one, to a temporary store deleted
    afterwards.  The sweep config is ``{profile, seed, version}``: bump ``version`` when ``fn``
    changes its results.  ``fn`` must be a top-level function when ``workers > 1`` or a scheduler
    is used: of an importable module, or of a file loaded by :func:`load_experiment_file` (its
    source then travels with the function, so fork, spawn and forkserver pools and dask workers
    run it without importing the file by name).
    """
    from transformer_limits.verify.sweep import run_sweep

    fn = _worker_safe(fn)

    sweep_config = {"profile": config.profile, "seed": config.seed, "version": version}
    options = dict(experiment=experiment, config=sweep_config, workers=config.workers,
                   scheduler=config.scheduler, progress=config.progress)
    if config.store:
        return run_sweep(fn, grid, config.store, **options)
    with tempfile.TemporaryDirectory(prefix="tl-sweep-") as tmp:
        return run_sweep(fn, grid, Path(tmp) / "sweep.sqlite", **options)
