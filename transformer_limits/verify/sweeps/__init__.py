"""Parameter sweeps: grid specs, deterministic per-point seeds, a resumable SQLite store, executors.

A sweep evaluates a function ``fn(point) -> dict`` on every point of a grid (e.g. depth ``L``, heads
``H``, tokens ``N``, replicate seeds) and stores each point's JSON result in an embedded SQLite
database, so an interrupted sweep resumes where it stopped and a grown grid runs only its new
points.  The format, the seed rule, the store schema and the resume semantics are documented in
``docs/sweeps.md``.  One module per job:

* :mod:`~transformer_limits.verify.sweeps.grid` — the grid spec, seeds, store keys, canonical JSON;
* :mod:`~transformer_limits.verify.sweeps.store` — the SQLite store;
* :mod:`~transformer_limits.verify.sweeps.result` — what a sweep returns;
* :mod:`~transformer_limits.verify.sweeps.executors` — where points run (serial, pool, dask);
* :mod:`~transformer_limits.verify.sweeps.driver` — :func:`run_sweep` and :func:`load_sweep`.

Quick use::

    result = run_sweep(fn, grid, "runs.sqlite", experiment="depth-scaling", config={"version": 1})
    result.groupby("loss", by="L")  # {4: array([...two seeds...]), 8: array([...])}
"""

from transformer_limits.verify.sweeps.driver import load_sweep, run_sweep
from transformer_limits.verify.sweeps.executors import check_scheduler_address, shared_pools
from transformer_limits.verify.sweeps.grid import (
    Factor,
    Grid,
    GridPoint,
    canonical_json,
    config_hash,
    derive_seed,
    load_grid,
)
from transformer_limits.verify.sweeps.result import SweepError, SweepResult
from transformer_limits.verify.sweeps.store import PointRecord, SweepStore

__all__ = [
    "Factor",
    "Grid",
    "GridPoint",
    "PointRecord",
    "SweepError",
    "SweepResult",
    "SweepStore",
    "canonical_json",
    "check_scheduler_address",
    "config_hash",
    "derive_seed",
    "load_grid",
    "load_sweep",
    "run_sweep",
    "shared_pools",
]
