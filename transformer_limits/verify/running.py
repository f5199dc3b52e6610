"""Running an experiment: the requirement check, the run, its declarations and its provenance.

:func:`run_experiment` runs an :class:`~transformer_limits.verify.experiment.Experiment` under an
:class:`~transformer_limits.verify.experiment.ExperimentConfig` and applies what the experiment
declares, so that no experiment repeats it: the result must report exactly the declared checks
(:class:`~transformer_limits.verify.check_spec.CheckSpec`, with the declared alpha), a check without
a claim text gets the declared one, and the provenance gets the base seed, the profile's settings
(``Experiment.settings``), the device and the wall time.  :func:`run_points` is how an experiment
evaluates a grid of points (processes, dask, a resumable store: docs/sweeps.md);
the backends of its kernel families come resolved in ``config.target``
(:func:`transformer_limits.verify.experiment.run_settings`).
"""

from __future__ import annotations

import dataclasses
import errno
import importlib.util
import resource
import tempfile
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from transformer_limits.errors import EnvironmentFailure, InputError
from transformer_limits.jsonable import jsonable
from transformer_limits.numeric.devices import RunTarget
from transformer_limits.verify.check_spec import apply_declarations, declaration_errors
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
from transformer_limits.verify.registry import source_of, worker_safe
from transformer_limits.verify.result_validation import result_errors

if TYPE_CHECKING:  # pragma: no cover
    from transformer_limits.verify.sweeps import SweepResult

__all__ = ["REQUIREMENT_HINTS", "jsonable_settings", "missing_requirement", "run_experiment", "run_points"]


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


# errno values that mean the machine, not the experiment, failed (disk full, quota, I/O error)
_ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


def run_experiment(experiment: Experiment, config: ExperimentConfig, *,
                   device: str | None = None, precision: str | None = None,
                   target: RunTarget | None = None) -> ExperimentResult:
    """Run ``experiment`` under ``config``; a crash *inside* the experiment is recorded, not raised.

    An exception in ``experiment.run`` gives a result with ``error`` set (one line), no checks and
    the traceback in its notes (:attr:`ExperimentResult.status` ``"error"``): an ``InputError``
    raised by the run (the work has started, so it is not "bad input before any work") and a
    ``SystemExit`` (a run that calls ``sys.exit``) included.  So does a result that cannot be
    decided (``transformer_limits.verify.result_validation.result_errors``: checks that are not
    Checks, ``passed`` not a bool, a NaN measurement, interval or statistic, no ``alpha``, fields
    that are not JSON), one that breaks the declarations (``check_spec.declaration_errors``: a
    declared check missing, an undeclared one, another alpha) or reports no check; ``error`` then
    names the field.  A check with an empty claim (alternative) gets its declared one; the declared
    executable checks whose estimates the run returned (``result.estimates``) are decided here
    (``check_spec.decide_declared``).  Failures of
    the environment stop the whole run instead and propagate:
    :class:`transformer_limits.errors.EnvironmentFailure`, ``MemoryError`` and an ``OSError`` for a
    full disk (raised as ``EnvironmentFailure``).  ``KeyboardInterrupt`` propagates.  Provenance: ``timings.run_s`` (wall time), ``seed`` and ``seeds.base``
    (the base seed) and ``settings`` (``experiment.settings[profile]``), each unless the run set it;
    ``source`` for an experiment from a plugin or a file.  An experiment whose ``requires`` names a
    module missing here is not started: ``InputError`` with the line of :func:`missing_requirement`
    (``verify`` exits 2; ``report`` skips it first).

    ``target`` is a :class:`~transformer_limits.numeric.devices.RunTarget` already resolved by the
    caller (the CLI resolves one for all its experiments); else ``device`` (``cpu`` | ``cuda`` |
    ``auto``, replacing ``config.device``) and ``precision`` are resolved here
    (``RunTarget.resolve``), ``cuda`` where no CUDA backend is usable being an ``InputError`` (nothing
    runs).  The target gets the backends of the kernel families the experiment declares
    (``Experiment.kernels``, on the CPU backends its profile's settings name) and ``run`` gets the
    config with the resolved ``cpu`` or ``cuda`` and ``config.target``.  Provenance: ``device`` and
    ``device_reason``; ``backends`` (kernel family -> ``{backend, reason}``) for every declared family,
    and a note for each family that runs on the CPU although ``cuda`` was asked.

    ``precision`` (``float64`` | ``float32``) replaces ``config.precision``.  An experiment that does
    not declare float32 (``Experiment.precisions``) runs in float64 and a note says so
    (``provenance.precision_requested``); one that does runs in float32 and then its
    ``precision_probe``, whose measured error against float64 goes to ``provenance.precision_error``
    and a note.  ``provenance.precision`` is the precision the run used.
    """
    try:
        if device is not None:
            config = dataclasses.replace(config, device=device)  # ValueError naming device
        if precision is not None:
            config = dataclasses.replace(config, precision=precision)  # ValueError naming precision
        if target is None and device is None and precision is None:
            target = config.target  # resolved by the caller (the CLI), passed down
        if target is None:
            target = RunTarget.resolve(config.device, config.precision)
        elif not isinstance(target, RunTarget):
            raise ValueError(f"target must be a RunTarget, got {type(target).__name__}")
    except ValueError as exc:
        raise InputError(str(exc)) from None
    requested = target.precision
    used = requested if requested in experiment.precisions else "float64"
    settings = experiment.settings.get(config.profile, {})
    target = target.with_precision(used).with_kernels(
        {fam: settings.get(key) for key, fam in experiment.kernels.items()})
    config = dataclasses.replace(config, device=target.device, precision=used, target=target)
    why = missing_requirement(experiment)
    if why is not None:
        raise InputError(f"experiment {experiment.name} cannot run here: {why}")
    start, cpu_start = time.perf_counter(), cpu_seconds()
    try:
        result = experiment.run(config)
        if not isinstance(result, ExperimentResult):
            raise TypeError(f"run returned {type(result).__name__}, not ExperimentResult")
        result.decide(experiment.checks)  # the runner decides the declared executable checks (bad: crash)
    except (EnvironmentFailure, MemoryError):
        raise
    except SystemExit as exc:
        # a run() that exits would end the CLI with no verdict (exit 0 reads as "all passed")
        result = _crashed(experiment, config, exc, f"run() called sys.exit({exc.code!r})")
    except OSError as exc:
        if exc.errno in _ENVIRONMENT_ERRNOS:
            raise EnvironmentFailure(f"experiment {experiment.name}: {exc}") from exc
        result = _crashed(experiment, config, exc)
    except Exception as exc:  # noqa: BLE001 - recorded as a crash (status "error"), not a failed check
        # an InputError here too: exit 2 promises "before any work", and the work has started
        result = _crashed(experiment, config, exc)
    else:
        invalid = result_errors(result)
        if invalid:  # nothing of it can be trusted to be decidable or even JSON
            result = _invalid(experiment, config, result, invalid)
        else:
            apply_declarations(experiment.checks, result.checks)
            errors = declaration_errors(experiment.checks, result.checks) or \
                ([] if result.checks else ["the result reports no checks"])
            if errors:
                result.error = "; ".join(errors)
            elif used == "float32":
                _record_precision_error(result, experiment, config)
    _record_provenance(result, experiment, config, time.perf_counter() - start, cpu_seconds() - cpu_start)
    _record_device(result, target)
    result.provenance["precision"] = used
    if used != requested:
        result.provenance["precision_requested"] = requested
        result.notes.append(f"precision {requested} asked, but {experiment.name} runs in float64 only "
                            f"(it declares {', '.join(experiment.precisions)})")
    return result


def _record_precision_error(result: ExperimentResult, experiment: Experiment, config: ExperimentConfig) -> None:
    """The float32 run's measured error against float64 (the experiment's probe), in provenance and a
    note; a probe that crashes makes the run an error (a float32 verdict without it is unstated)."""
    assert experiment.precision_probe is not None  # Experiment requires one with float32
    try:
        err = experiment.precision_probe(config)
    except (InputError, EnvironmentFailure, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - recorded, never a failed check
        result.error = f"precision probe: {type(exc).__name__}: {exc}".splitlines()[0]
        result.notes.append("traceback:\n" + traceback.format_exc())
        return
    result.provenance["precision_error"] = err.to_dict()
    result.notes.append(f"float32: {err.quantity} differs from the float64 run by at most "
                        f"{err.max_rel:.2e} relative ({err.max_abs:.2e} absolute)")


def _record_device(result: ExperimentResult, target: RunTarget) -> None:
    """The resolved device, its reason and the backend choices of the run (provenance and notes)."""
    prov = result.provenance
    prov["device"], prov["device_reason"] = target.device, target.reason
    if target.choices:
        backends = prov.setdefault("backends", {})
        for c in target.choices:
            backends[c.family] = {"backend": c.backend, "reason": c.reason}
    for c in target.fallbacks:
        result.notes.append(f"device {target.device}: {c.reason}")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, of its children that have ended (a sweep's pool
    workers, once the pool is shut down) and of the live workers of the pools a report keeps between
    sweeps: the difference over a run is the CPU the run cost."""
    from transformer_limits.verify.sweeps.executors import shared_workers_cpu_seconds

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + shared_workers_cpu_seconds()


def _record_provenance(result: ExperimentResult, experiment: Experiment, config: ExperimentConfig,
                       elapsed: float, cpu: float) -> None:
    """What every run records (the run's own entries win, except the wall and CPU times: ``run_s``, and
    ``cpu_s``, the CPU seconds of this process and of the worker processes the run started)."""
    prov = result.provenance
    prov["timings"] = {**prov.get("timings", {}), "run_s": elapsed, "cpu_s": cpu}
    prov.setdefault("seed", config.seed)
    prov.setdefault("seeds", {"base": config.seed})
    settings = experiment.settings.get(config.profile)
    if settings is not None:
        prov.setdefault("settings", jsonable_settings(settings))
    source = source_of(experiment)
    if source is not None and source.get("kind") != "built-in":
        # an experiment from outside the package: say which plugin or file (and its hash) ran
        prov.setdefault("source", source)


def _crashed(experiment: Experiment, config: ExperimentConfig, exc: BaseException,
             why: str | None = None) -> ExperimentResult:
    result = ExperimentResult(experiment.name, config.profile)
    result.error = why or (f"{type(exc).__name__}: {exc}".strip().splitlines() or [type(exc).__name__])[0]
    result.notes.append("traceback:\n" + traceback.format_exc())
    return result


def _invalid(experiment: Experiment, config: ExperimentConfig, result: ExperimentResult,
             errors: list[str]) -> ExperimentResult:
    """An ERROR result in place of a result that cannot be decided (``errors`` name the fields):
    only its notes are kept, since its checks, tables or provenance may not even be JSON."""
    out = ExperimentResult(experiment.name, config.profile)
    out.error = f"invalid result of {experiment.name}: " + "; ".join(errors)
    out.notes = [n for n in result.notes if isinstance(n, str)] if isinstance(result.notes, list) else []
    return out


def jsonable_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """An experiment's settings as JSON values, for sweep points and provenance: the top-level tuples
    become lists, everything below is kept as it is (nested tuples stay usable as keys)."""
    return jsonable(settings, nonfinite="keep", depth=2)


def run_points(config: ExperimentConfig, fn: Callable[[dict[str, Any]], Mapping[str, Any]],
               grid: Mapping[str, Any], *, experiment: str, version: int | str = 1) -> "SweepResult":
    """Evaluate ``fn`` on every point of ``grid`` the way ``config`` asks.

    Uses :func:`transformer_limits.verify.sweeps.run_sweep` with ``config.workers`` processes (or the
    dask scheduler ``config.scheduler``) and ``config.progress``; results go to ``config.store``
    (resumable: a rerun skips finished points) or, without one, to a temporary store deleted
    afterwards.  The sweep config is ``{profile, seed, version}``: bump ``version`` when ``fn``
    changes its results.  On a ``cuda`` device the worker processes are started by a fork server
    (CUDA, initialised here by the device probe, does not survive a fork).  ``fn`` must be a top-level function when ``workers > 1`` or a scheduler
    is used: of an importable module, or of a file loaded by
    :func:`~transformer_limits.verify.registry.load_experiment_file` (its source then travels with
    the function, so fork, spawn and forkserver pools and dask workers run it without importing the
    file by name).
    """
    from transformer_limits.verify.sweeps import run_sweep

    fn = worker_safe(fn)

    sweep_config = {"profile": config.profile, "seed": config.seed, "version": version}
    options: dict[str, Any] = dict(experiment=experiment, config=sweep_config, workers=config.workers,
                   scheduler=config.scheduler, progress=config.progress)
    if config.device != "cpu" and config.workers > 1 and config.scheduler is None:
        # the device probe initialised CUDA in this process, and a forked child cannot use it
        import multiprocessing

        options["mp_context"] = multiprocessing.get_context("forkserver")
    if config.store:
        return run_sweep(fn, grid, config.store, **options)
    with tempfile.TemporaryDirectory(prefix="tl-sweep-") as tmp:
        return run_sweep(fn, grid, Path(tmp) / "sweep.sqlite", **options)
