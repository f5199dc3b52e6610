"""Running a sweep: :func:`run_sweep` evaluates a function on every grid point not yet complete in
the store, :func:`load_sweep` reads a stored sweep without running anything.

The driving loop keeps at most the executor's capacity of points in flight, writes each outcome
to the store as it arrives (the parent process alone writes), replaces a process pool broken by a
killed worker, and stops a dask sweep whose cluster lost every worker (docs/sweeps.md, "Execution
and resume").
"""

from __future__ import annotations

import os
import sys
import warnings
from collections import deque
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, Future, wait
from pathlib import Path
from typing import Any, Callable, Mapping

from transformer_limits.errors import EnvironmentFailure
from transformer_limits.verify.sweeps import executors
from transformer_limits.verify.sweeps.grid import Grid, GridPoint, canonical_json, config_hash, load_grid
from transformer_limits.verify.sweeps.result import SweepError, SweepResult
from transformer_limits.verify.sweeps.store import PointRecord, SweepStore

__all__ = ["load_sweep", "run_sweep"]

#: times a process pool broken by a killed worker is replaced (unfinished points resubmitted)
POOL_RESTARTS = 2
#: seconds between checks, while waiting for a dask sweep's points, that its scheduler still has a
#: worker (dask holds the tasks of a cluster whose workers all died and waits for new ones forever)
WORKER_WATCH_S = 5.0


def _error_summary(experiment: str, errors: list[PointRecord], total: int) -> str:
    first = errors[0]
    tail = (first.error or "").strip().splitlines()
    return (
        f"{len(errors)} of {total} points failed in sweep {experiment!r}; "
        f"first failed point {canonical_json(first.params)}:\n" + "\n".join(tail[-15:])
    )


def run_sweep(
    fn: Callable[[dict[str, Any]], Mapping[str, Any]],
    grid: str | os.PathLike | Mapping[str, Any] | Grid,
    store_path: str | os.PathLike,
    *,
    experiment: str | None = None,
    config: Mapping[str, Any] | None = None,
    workers: int | None = None,
    scheduler: Any = None,
    progress: bool = True,
    on_error: str = "raise",
    retry_errors: bool = True,
    mp_context: Any = None,
) -> SweepResult:
    """Evaluate ``fn`` on every grid point not yet completed in the store; return all results.

    Parameters
    ----------
    fn : picklable top-level function ``fn(point: dict) -> dict`` of JSON-able results (NumPy
        scalars/arrays allowed; result keys must not repeat parameter names).
    grid : spec for :func:`load_grid` (dict, TOML path or :class:`Grid`).
    store_path : SQLite file (created if missing).
    experiment : store namespace; default ``fn.__name__``.
    config : JSON-able mapping of everything else that changes results (code version, solver
        options); its hash is part of the store key, so a new config starts from scratch.
    workers : processes of the local pool; default ``min(2, os.cpu_count())``; ``1`` runs serially
        in this process (no pickling). Ignored when ``scheduler`` is given.
    scheduler : dask.distributed scheduler address (``"tcp://host:8786"``) or a
        ``distributed.Client``; points then run on that cluster.
    progress : show a tqdm bar on stderr.
    on_error : ``"raise"`` stops submitting new points after the first failure and raises
        :class:`SweepError` once in-flight points are stored; ``"continue"`` evaluates every point,
        warns with a summary and returns the result (see :attr:`SweepResult.errors`).
    retry_errors : re-run points stored with status ``"error"`` (default); otherwise keep them.
    mp_context : ``multiprocessing`` context for the pool (default: the platform's).

    Completed points (status ``"ok"``) are never re-run, so calling again after a crash or a kill
    resumes the sweep; the parent process alone writes the store, one transaction per point.
    """
    if on_error not in ("raise", "continue"):
        raise ValueError(f"on_error must be 'raise' or 'continue', got {on_error!r}")
    if workers is None:
        workers = min(2, os.cpu_count() or 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    grid = load_grid(grid)
    if experiment is None:
        experiment = getattr(fn, "__name__", None) or "sweep"
    if not isinstance(experiment, str) or not experiment:
        raise ValueError(f"experiment must be a non-empty string, got {experiment!r}")
    if scheduler is not None:
        executors.check_scheduler(scheduler)
    elif workers > 1:
        executors.check_picklable(fn)

    points = grid.expand()
    function = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    with SweepStore(store_path) as store:
        chash = store.register_config(experiment, config, function)
        stored = store.statuses(experiment, chash)
        keep = {"ok"} if retry_errors else {"ok", "error"}
        todo = [p for p in points if stored.get(p.key) not in keep]
        n_run = _drive(fn, todo, store, experiment, chash, workers, scheduler, progress,
                               on_error, mp_context, total=len(points))
        result = SweepResult(experiment, chash, Path(store_path),
                             store.records(experiment, chash, grid),
                             n_run=n_run, n_skipped=len(points) - len(todo))
    errors = result.errors
    if errors:
        message = _error_summary(experiment, errors, len(points))
        if on_error == "raise":
            raise SweepError(message, result)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return result


def load_sweep(
    store_path: str | os.PathLike,
    grid: str | os.PathLike | Mapping[str, Any] | Grid,
    *,
    experiment: str,
    config: Mapping[str, Any] | None = None,
) -> SweepResult:
    """Read a sweep's stored results without running anything (absent points are ``"pending"``)."""
    grid = load_grid(grid)
    if not Path(store_path).is_file():
        raise ValueError(f"store_path {str(store_path)!r} is not a sweep store file")
    chash = config_hash(config)
    with SweepStore(store_path) as store:
        records = store.records(experiment, chash, grid)
    return SweepResult(experiment, chash, Path(store_path), records)


def _drive(fn, todo: list[GridPoint], store: SweepStore, experiment: str, chash: str,
           workers: int, scheduler: Any, progress: bool, on_error: str, mp_context: Any,
           total: int) -> int:
    """Submit ``todo`` with a bounded number in flight; store each outcome as it arrives.

    A process pool broken by a killed worker (``BrokenProcessPool``) is replaced and its unfinished
    points resubmitted, at most :data:`POOL_RESTARTS` times, then
    :class:`transformer_limits.errors.EnvironmentFailure`; such points are never stored as errors.
    On an interrupt (``KeyboardInterrupt``, which the CLI also raises for SIGTERM) the workers are
    terminated at once.
    """
    if not todo:
        return 0
    from tqdm import tqdm

    executor, capacity = executors.make_executor(workers, scheduler, mp_context)
    queue: deque[GridPoint] = deque(todo)
    pending: dict[Future, GridPoint] = {}
    n_run = n_failed = restarts = 0
    stop = clean = False
    bar = None
    try:
        def refill() -> bool:
            """Submit up to capacity; False when the pool is broken."""
            while not stop and len(pending) < capacity and queue:
                point = queue.popleft()
                try:
                    pending[executor.submit(executors.execute_point, fn, point.params)] = point
                except BrokenExecutor:
                    queue.appendleft(point)
                    return False
            return True

        healthy = refill()  # a fork-started pool forks here, before tqdm starts its monitor thread
        bar = tqdm(total=total, initial=total - len(todo), desc=experiment, unit="pt",
                   file=sys.stderr, disable=not progress, dynamic_ncols=True,
                   leave=None)  # None: kept at top level, cleared when nested under report's bar
        while pending or not healthy:
            lost: list[GridPoint] = []
            if pending:
                watch = getattr(executor, "workerless_for", None)
                done, _ = wait(list(pending), timeout=WORKER_WATCH_S if watch else None,
                               return_when=FIRST_COMPLETED)
                if not done and watch is not None and watch() > executors.SCHEDULER_TIMEOUT_S:
                    raise EnvironmentFailure(
                        f"sweep {experiment!r}: scheduler {executor.address} has had no worker for over "
                        f"{executors.SCHEDULER_TIMEOUT_S:g} s (all died or left); {len(pending) + len(queue)} points "
                        "unfinished, rerun with the same --store to resume")
                for future in done:
                    point = pending.pop(future)
                    if isinstance(future.exception(), BrokenExecutor):
                        lost.append(point)  # the pool died under it: not the point's fault
                        continue
                    outcome = executors.future_outcome(future)
                    store.write(experiment, chash, point, outcome)
                    n_run += 1
                    bar.update(1)
                    if outcome.status == "error":
                        n_failed += 1
                        bar.set_postfix(errors=n_failed)
                        stop = stop or on_error == "raise"
            if lost or not healthy:
                # every other in-flight point of a broken pool fails the same way: requeue them all
                lost += list(pending.values())
                pending.clear()
                queue.extendleft(reversed(lost))
                restarts += 1
                executors.stop_workers(executor)
                executor.shutdown(wait=True, cancel_futures=True)
                if restarts > POOL_RESTARTS:
                    raise EnvironmentFailure(
                        f"sweep {experiment!r}: the worker pool broke {restarts} times (a worker was killed, "
                        f"e.g. by the OOM killer); {len(queue)} points unfinished, rerun with the same --store to resume")
                executor, capacity = executors.make_executor(workers, scheduler, mp_context)
            healthy = refill()
        clean = True
    finally:
        if bar is not None:
            bar.close()
        if not clean:
            executors.stop_workers(executor)
        executor.shutdown(wait=True, cancel_futures=not clean)
    return n_run