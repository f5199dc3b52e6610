"""One object per claim: experiments, their results, and the registry behind ``verify`` / ``report``.

An :class:`Experiment` names the derivations it rests on, the claim it checks, and a ``run``
function ``run(config: ExperimentConfig) -> ExperimentResult``.  The result carries the verdicts
(:class:`transformer_limits.verify.verdicts.Check`), fitted rates, tables and figures; the report
writer (:mod:`transformer_limits.verify.report`) turns any result into ``results.json``,
``report.md`` and a self-contained ``report.html``.  Experiments are data plus small functions;
the report is generic.

Experiment modules live in :mod:`transformer_limits.verify.experiments` (one module per paper or
topic) and call :func:`register_experiment` at import time; they are discovered automatically.
"""

from __future__ import annotations

import errno
import importlib
import numbers
import pkgutil
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
    "Figure",
    "PROFILES",
    "experiment_spec",
    "jsonable_settings",
    "list_experiments",
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

    ``checks``  verdicts (each has name, claim, expected, measured, ci, passed, statistics, note);
    ``fits``    JSON-able fitted rates keyed by name (exponents with CIs, constants, windows);
    ``tables``  named lists of row dicts (rendered as Markdown/HTML tables, saved in results.json);
    ``figures`` plots; ``notes`` free-text findings (e.g. "the L^-1/3 term is not tight");
    ``data``    JSON-able raw results kept in results.json but not rendered (e.g. the worst inputs
                found by the sup-over-inputs ascent, as arrays);
    ``provenance`` seeds, grid, timings (the report adds versions, git commit, config hash);
    ``error``   None, or one line saying why the run crashed (set by :func:`run_experiment`; the
                traceback is in ``notes``).  A crashed run has :attr:`status` ``"error"``: it is
                neither a pass nor a failed check.
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

    ``name``           CLI name (``transformer-limits verify NAME``)
    ``title``          one line
    ``paper``          "A", "B" or "C"
    ``claim``          the statement being checked, in THEORY.md symbols
    ``derivations``    names of the derivations it rests on (linked from the report)
    ``check_names``    the checks it always reports (documented names, e.g. ``exponent_L``)
    ``run``            ``run(config) -> ExperimentResult``
    ``profiles``       profiles in which ``report`` includes it (``("quick", "full")`` or ``("full",)``)
    ``budget_s``       expected wall time per profile on 2 cores, for the docs
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

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description (everything but ``run``)."""
        return {"name": self.name, "title": self.title, "paper": self.paper, "claim": self.claim,
                "derivations": list(self.derivations), "check_names": list(self.check_names),
                "profiles": list(self.profiles), "budget_s": dict(self.budget_s)}


_REGISTRY: dict[str, Experiment] = {}
_DISCOVERED = False


def register_experiment(exp: Experiment) -> Experiment:
    if exp.name in _REGISTRY and _REGISTRY[exp.name] is not exp:
        raise RuntimeError(f"experiment {exp.name!r} registered twice")
    _REGISTRY[exp.name] = exp
    return exp


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    import transformer_limits.verify.experiments as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{info.name}")
    _DISCOVERED = True


def list_experiments() -> list[Experiment]:
    _discover()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def experiment_spec(name: str) -> Experiment:
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown experiment {name!r} (known: {', '.join(sorted(_REGISTRY))})") from None


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
    wall time.  ``KeyboardInterrupt`` / ``SystemExit`` propagate.
    """
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
    changes its results.  ``fn`` must be a top-level function when ``workers > 1``.
    """
    from transformer_limits.verify.sweep import run_sweep

    sweep_config = {"profile": config.profile, "seed": config.seed, "version": version}
    options = dict(experiment=experiment, config=sweep_config, workers=config.workers,
                   scheduler=config.scheduler, progress=config.progress)
    if config.store:
        return run_sweep(fn, grid, config.store, **options)
    with tempfile.TemporaryDirectory(prefix="tl-sweep-") as tmp:
        return run_sweep(fn, grid, Path(tmp) / "sweep.sqlite", **options)
