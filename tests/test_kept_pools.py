"""Process pools kept across sweeps (``executors.kept_pools``, used by ``report`` and ``verify``).

What must hold: inside the block a second sweep runs on the workers the first one forked (same pids),
with the results a fresh pool (and a serial run) gives; outside it every sweep forks its own; a pool
broken by a killed worker is replaced, its points rerun, and the replacement kept; the block's end
shuts every kept pool down; a nested block leaves the pools to the outer one.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from transformer_limits.verify.sweeps import executors, run_sweep
from transformer_limits.verify.sweeps.executors import KeptPool, kept_pools

GRID = {"grid": {"x": list(range(8))}}


def square_with_pid(point: dict) -> dict:
    return {"y": point["x"] ** 2 + 0.5, "pid": os.getpid()}


def dies_once(point: dict) -> dict:
    """Kills its worker the first time point 3 runs (a marker file says it did): a broken pool."""
    marker = Path(point["marker"])
    if point["x"] == 3 and not marker.exists():
        marker.write_text("died")
        os._exit(1)
    return {"y": point["x"] + 1, "pid": os.getpid()}


def _sweep(fn, path: Path, grid=GRID, workers: int = 2):
    result = run_sweep(fn, grid, path, workers=workers, progress=False)
    assert all(r.status == "ok" for r in result.records)
    return result


def _pids(result) -> set[int]:
    return {r.completed_result["pid"] for r in result.records}


def _values(result) -> dict[int, float]:
    return {r.params["x"]: r.completed_result["y"] for r in result.records}


def test_sweeps_inside_the_block_share_one_pool(tmp_path):
    serial = _sweep(square_with_pid, tmp_path / "s.sqlite", workers=1)
    with kept_pools():
        first = _sweep(square_with_pid, tmp_path / "a.sqlite")
        second = _sweep(square_with_pid, tmp_path / "b.sqlite")
        (pool,) = executors._KEPT.values()
        processes = list(pool._processes.values())
        assert isinstance(pool, KeptPool) and {p.pid for p in processes} >= _pids(first) | _pids(second)
    assert _pids(second) <= _pids(first) and os.getpid() not in _pids(first)
    assert _values(first) == _values(second) == _values(serial)
    assert executors._KEPT is None
    assert processes and all(not p.is_alive() for p in processes)  # the block's end shut them down


def test_outside_the_block_every_sweep_forks_its_own_workers(tmp_path):
    first = _sweep(square_with_pid, tmp_path / "a.sqlite")
    second = _sweep(square_with_pid, tmp_path / "b.sqlite")
    assert not _pids(first) & _pids(second)
    assert executors._KEPT is None


def test_a_broken_kept_pool_is_replaced_and_the_replacement_kept(tmp_path):
    grid = {"grid": {"x": list(range(8))}, "fixed": {"marker": str(tmp_path / "died")}}
    with kept_pools():
        warm = _sweep(square_with_pid, tmp_path / "w.sqlite")
        broken = _sweep(dies_once, tmp_path / "a.sqlite", grid)
        assert (tmp_path / "died").exists()  # a worker did die under the sweep
        (replacement,) = executors._KEPT.values()
        after = _sweep(square_with_pid, tmp_path / "b.sqlite")
        replacement_pids = set(replacement._processes)
    assert _values(broken) == {x: x + 1 for x in range(8)}  # every point ran, none stored as an error
    assert not _pids(after) & _pids(warm)  # the broken pool's workers are gone
    assert _pids(after) <= replacement_pids


def test_a_clean_shutdown_keeps_the_pool_and_nesting_leaves_it_to_the_outer_block(tmp_path):
    with kept_pools():
        executor, capacity = executors.make_executor(2, None, None)
        assert isinstance(executor, KeptPool) and capacity == 4
        assert executor.submit(pow, 3, 2).result() == 9
        executor.shutdown(wait=True)  # what a finished sweep does: the pool stays
        assert executors.make_executor(2, None, None)[0] is executor
        with kept_pools():
            assert executors.make_executor(2, None, None)[0] is executor
        assert executors.make_executor(2, None, None)[0] is executor  # the inner block closed nothing
        assert executor.submit(pow, 2, 5).result() == 32
    assert executors._KEPT is None
    with pytest.raises(RuntimeError):  # shut down with the block
        executor.submit(pow, 2, 2)


def test_serial_sweeps_and_plain_pools_are_not_kept():
    with kept_pools():
        serial, cap = executors.make_executor(1, None, None)
        assert isinstance(serial, executors.SerialExecutor) and cap == 1 and not executors._KEPT
    plain, _ = executors.make_executor(2, None, None)
    try:
        assert not isinstance(plain, KeptPool)
    finally:
        plain.shutdown()
