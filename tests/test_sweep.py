"""Sweeps: grid expansion, per-point seeds, the SQLite store, resume after SIGKILL, executors."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import hang_guard
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_limits
from transformer_limits.verify.sweeps import (
    Grid,
    SweepError,
    SweepStore,
    config_hash,
    derive_seed,
    load_grid,
    load_sweep,
    run_sweep,
)

SPEC = {
    "grid": {"L": [4, 8, 16], "H": [1, 4], "seed": {"count": 3, "base": 1234}},
    "fixed": {"dt": 0.01},
}


# -- sweep functions (top level, so a process pool can pickle them) --------------------------------


def noisy_point(point: dict) -> dict:
    """A seeded Monte-Carlo estimate whose value depends on every parameter and the seed."""
    rng = np.random.default_rng(point["seed"])
    x = rng.standard_normal(64) / math.sqrt(point["L"] * point["H"])
    return {"mean": float(x.mean()), "sq": float(np.square(x).sum()), "first": x[:2]}


def fails_at_depth_8(point: dict) -> dict:
    if point["L"] == 8:
        raise FloatingPointError(f"diverged at L={point['L']}")
    return noisy_point(point)


def returns_list(point: dict):
    return [point["L"]]


def returns_clashing_key(point: dict) -> dict:
    return {"L": 1.0}


def rows_of(result) -> list[tuple[str, dict]]:
    """(params JSON, result) per point: what must agree between equivalent runs."""
    return [(json.dumps(r.params, sort_keys=True), r.result) for r in result.records]


# -- grid expansion --------------------------------------------------------------------------------


def test_expansion_is_cartesian_in_declaration_order_with_fixed_and_seeds():
    grid = load_grid(SPEC)
    points = grid.points()
    assert len(grid) == len(points) == 3 * 2 * 3
    combos = [(p["L"], p["H"], p["seed_index"]) for p in points]
    assert combos == [(L, H, s) for L in (4, 8, 16) for H in (1, 4) for s in range(3)]
    assert all(p["dt"] == 0.01 for p in points)
    assert grid.names == ("dt", "L", "H", "seed_index", "seed")
    # the seed is the documented function of (base, name, the other parameters)
    p = points[5]
    others = {k: v for k, v in p.items() if k != "seed"}
    assert p["seed"] == derive_seed(1234, others, "seed")
    assert load_grid(grid.to_dict()) == grid


def test_zip_groups_move_together_and_follow_the_grid_axes():
    grid = load_grid({"grid": {"L": [2, 3]}, "zip": {"size": {"N": [16, 32, 64], "d": [4, 8, 16]}}})
    got = [(p["L"], p["N"], p["d"]) for p in grid.points()]
    assert got == [(L, N, d) for L in (2, 3) for N, d in ((16, 4), (32, 8), (64, 16))]
    assert load_grid(grid.to_dict()) == grid


def test_zip_columns_may_repeat_values_but_rows_must_be_distinct():
    grid = load_grid({"zip": {"task": {"family": ["depth", "depth", "grid"], "j": [0, 1, 0]}}})
    assert [(p["family"], p["j"]) for p in grid.points()] == [("depth", 0), ("depth", 1), ("grid", 0)]
    with pytest.raises(ValueError, match="zip.task: duplicate rows"):
        load_grid({"zip": {"task": {"family": ["depth", "depth"], "j": [0, 0]}}})


def test_toml_file_gives_the_same_grid_as_the_dict(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(textwrap.dedent("""
        [grid]
        L = [4, 8, 16]
        H = [1, 4]
        seed = {count = 3, base = 1234}

        [fixed]
        dt = 0.01
    """))
    assert load_grid(path) == load_grid(str(path)) == load_grid(SPEC)


def test_seed_is_pinned():
    # A change here silently changes every stored experiment's random streams: bump deliberately.
    assert derive_seed(1234, {"L": 4, "seed_index": 0}) == 6119665599119220445
    assert derive_seed(1234, {"L": 4, "seed_index": 0}, "init_seed") == 3897745153498379112


def test_seeds_are_distinct_across_points_and_seed_axes():
    grid = load_grid({"grid": {"N": list(range(40)), "seed": {"count": 25, "base": 7},
                               "data_seed": {"count": 2, "base": 7}}})
    points = grid.points()
    seeds = [p["seed"] for p in points] + [p["data_seed"] for p in points]
    assert len(set(seeds)) == len(seeds) == 4000
    assert all(0 <= s < 2**63 for s in seeds)


axis_values = st.lists(st.integers(-50, 50), min_size=1, max_size=3, unique=True)


@settings(max_examples=40, deadline=None)
@given(
    axes=st.dictionaries(st.sampled_from(["L", "H", "N", "d"]), axis_values, min_size=1),
    count=st.integers(1, 3),
    base=st.integers(0, 2**64),
    data=st.data(),
)
def test_point_seed_depends_only_on_its_parameters(axes, count, base, data):
    """Permuting axes and values, or dropping values, leaves every surviving point's seed as is."""
    spec = {"grid": {**axes, "seed": {"count": count, "base": base}}}
    seeds = {p.key: p.params["seed"] for p in load_grid(spec).expand()}
    names = data.draw(st.permutations(list(spec["grid"])))
    shuffled = {}
    for name in names:
        v = spec["grid"][name]
        if isinstance(v, list):
            v = data.draw(st.permutations(v))
            v = v[: data.draw(st.integers(1, len(v)))]  # a sub-grid: fewer other points exist
        shuffled[name] = v
    other = {p.key: p.params["seed"] for p in load_grid({"grid": shuffled}).expand()}
    assert other and all(seeds[k] == s for k, s in other.items())


@pytest.mark.parametrize(
    "spec, key",
    [
        ({"grid": {"L": [4]}, "grids": {}}, "grids"),
        ({"grid": {"L": []}}, "grid.L"),
        ({"grid": {"L": 4}}, "grid.L"),
        ({"grid": {"L": "4,8"}}, "grid.L"),
        ({"grid": {"L": [4, 4]}}, "grid.L"),
        ({"grid": {"L": [4, float("nan")]}}, r"grid.L\[1\]"),
        ({"grid": {"L": [4, {1, 2}]}}, r"grid.L\[1\]"),
        ({"grid": {"seed": {"count": 0, "base": 1}}}, "grid.seed.count"),
        ({"grid": {"seed": {"count": True, "base": 1}}}, "grid.seed.count"),
        ({"grid": {"seed": {"count": 2, "base": -1}}}, "grid.seed.base"),
        ({"grid": {"seed": {"count": 2}}}, "grid.seed"),
        ({"grid": {"seed": {"count": 2, "base": 1, "step": 1}}}, "grid.seed"),
        ({"grid": {"seed_index": [0], "seed": {"count": 2, "base": 1}}}, "grid.seed"),
        ({"grid": {"L": [4]}, "fixed": {"L": 8}}, "grid.L"),
        ({"zip": {"g": {"N": [1, 2], "d": [1]}}}, "zip.g"),
        ({"zip": {"g": {"N": []}}}, "zip.g.N"),
        ({"zip": {"g": [1, 2]}}, "zip.g"),
        ({"grid": [1, 2]}, "grid"),
        ({}, "grid"),
    ],
)
def test_bad_grid_input_names_the_key(spec, key):
    with pytest.raises(ValueError, match=key):
        load_grid(spec)


def test_bad_grid_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_grid(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[grid]\nL = [4, 8\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_grid(bad)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[grid]\nL = [4]\n[sweep]\nworkers = 2\n")
    with pytest.raises(ValueError, match="'sweep'"):
        load_grid(unknown)


# -- store, resume, executors ----------------------------------------------------------------------


def test_store_round_trip_and_schema(tmp_path):
    db = tmp_path / "runs.sqlite"
    res = run_sweep(noisy_point, SPEC, db, experiment="toy", config={"v": 1}, workers=1,
                    progress=False)
    assert res.complete and res.n_run == 18 and res.n_skipped == 0
    assert res.config_hash == config_hash({"v": 1})
    for r in res.records:
        assert r.result == json.loads(json.dumps(noisy_point(r.params), default=np.ndarray.tolist))
        assert r.elapsed_s >= 0 and r.attempts == 1 and r.worker

    with SweepStore(db) as store:
        again = store.records("toy", res.config_hash, load_grid(SPEC))
        assert [(r.key, r.params, r.result) for r in again] == [
            (r.key, r.params, r.result) for r in res.records]
        (exp,) = store.experiments()
        assert exp["experiment"] == "toy" and exp["config"] == {"v": 1}
        assert exp["n_ok"] == 18 and exp["function"].endswith("noisy_point")
    loaded = load_sweep(db, SPEC, experiment="toy", config={"v": 1})
    assert rows_of(loaded) == rows_of(res) and loaded.complete
    bigger = load_sweep(db, {**SPEC, "fixed": {"dt": 0.02}}, experiment="toy", config={"v": 1})
    assert {r.status for r in bigger.records} == {"pending"} and bigger.table == []
    with pytest.raises(ValueError, match="store_path"):
        load_sweep(tmp_path / "none.sqlite", SPEC, experiment="toy")
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT COUNT(*) FROM sweep_points").fetchone()[0] == 18


def test_rerun_skips_done_points_grown_grid_runs_only_new_and_config_isolates(tmp_path):
    db = tmp_path / "runs.sqlite"
    small = {"grid": {"L": [4, 8], "H": [1], "seed": {"count": 2, "base": 1234}}}
    first = run_sweep(noisy_point, small, db, experiment="toy", workers=1, progress=False)
    again = run_sweep(noisy_point, small, db, experiment="toy", workers=1, progress=False)
    assert (again.n_run, again.n_skipped) == (0, 4)
    assert rows_of(again) == rows_of(first)

    grown = {"grid": {"L": [4, 8, 16], "H": [1], "seed": {"count": 2, "base": 1234}}}
    more = run_sweep(noisy_point, grown, db, experiment="toy", workers=1, progress=False)
    assert (more.n_run, more.n_skipped) == (2, 4)
    assert [r.attempts for r in more.records] == [1] * 6

    other = run_sweep(noisy_point, small, db, experiment="toy", config={"solver": "rk4"},
                      workers=1, progress=False)
    assert other.n_run == 4 and other.config_hash != first.config_hash


def test_process_pool_matches_serial(tmp_path):
    serial = run_sweep(noisy_point, SPEC, tmp_path / "a.sqlite", workers=1, progress=False)
    pool = run_sweep(noisy_point, SPEC, tmp_path / "b.sqlite", workers=2, progress=False)
    assert rows_of(pool) == rows_of(serial)
    assert len({r.worker for r in pool.records}) >= 1
    np.testing.assert_array_equal(pool.column("mean"), serial.column("mean"))


def thread_counts(point: dict) -> dict:
    import numba
    from threadpoolctl import threadpool_info

    blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
    return {"numba": numba.get_num_threads(), "blas": blas}


def test_pool_workers_get_their_share_of_numba_and_blas_threads(tmp_path):
    """Each of W pool workers gets cpus // W Numba threads and as many BLAS threads: a forked worker
    would otherwise keep an OpenBLAS pool of every core, spin-waiting against the other workers."""
    share = max(1, (os.cpu_count() or 1) // 2)
    pool = run_sweep(thread_counts, {"grid": {"k": [0, 1, 2, 3]}}, tmp_path / "t.sqlite", workers=2, progress=False)
    for record in pool.records:
        result = record.completed_result
        assert result["numba"] == share and result["blas"] and set(result["blas"]) == {share}, result


def test_dask_scheduler_matches_serial(tmp_path):
    distributed = pytest.importorskip(
        "distributed", reason="dask.distributed not installed (extra 'distributed')")
    spec = {"grid": {"L": [4, 8], "seed": {"count": 3, "base": 1}}, "fixed": {"H": 2}}
    serial = run_sweep(noisy_point, spec, tmp_path / "a.sqlite", workers=1, progress=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster:
        by_address = run_sweep(noisy_point, spec, tmp_path / "b.sqlite",
                               scheduler=cluster.scheduler_address, progress=False)
        with distributed.Client(cluster) as client:
            by_client = run_sweep(noisy_point, spec, tmp_path / "c.sqlite", scheduler=client,
                                  progress=False)
            assert client.status == "running"  # a client we were given stays open
    assert rows_of(by_address) == rows_of(by_client) == rows_of(serial)


def test_a_cluster_that_lost_every_worker_stops_the_sweep(tmp_path, monkeypatch):
    """dask keeps the tasks of a cluster whose workers all died and waits for new workers forever;
    the sweep must stop with EnvironmentFailure (exit 3), never hang and never store a point."""
    import concurrent.futures

    from transformer_limits.errors import EnvironmentFailure
    from transformer_limits.verify.sweeps import driver, executors

    class WorkerlessExecutor:  # what DaskExecutor looks like once its last worker died
        address = "tcp://10.0.0.1:8786"

        def submit(self, fn, *args):
            return concurrent.futures.Future()  # never completes, like a task held by the scheduler

        def workerless_for(self):
            return 2 * executors.SCHEDULER_TIMEOUT_S

        def shutdown(self, wait=True, cancel_futures=False):
            pass

    monkeypatch.setattr(driver, "WORKER_WATCH_S", 0.05)
    monkeypatch.setattr(executors, "make_executor", lambda *a: (WorkerlessExecutor(), 4))
    with hang_guard(), pytest.raises(EnvironmentFailure, match="no worker for over .* 18 points unfinished"):
        run_sweep(noisy_point, SPEC, tmp_path / "x.sqlite", scheduler="tcp://10.0.0.1:8786", progress=False)
    monkeypatch.undo()
    assert run_sweep(noisy_point, SPEC, tmp_path / "x.sqlite", workers=1, progress=False).n_run == 18


def test_missing_dask_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match="distributed"):
        run_sweep(noisy_point, SPEC, tmp_path / "x.sqlite", scheduler="tcp://127.0.0.1:1",
                  progress=False)


def test_result_table_column_and_groupby(tmp_path):
    res = run_sweep(noisy_point, SPEC, tmp_path / "r.sqlite", workers=1, progress=False)
    assert len(res.table) == 18 and set(res.table[0]) >= {"L", "H", "seed", "mean", "first"}
    assert res.column("first").shape == (18, 2)
    by_l = res.groupby("sq", by="L")
    assert list(by_l) == [4, 8, 16] and all(v.shape == (6,) for v in by_l.values())
    by_lh = res.groupby("mean", by=("L", "H"))
    assert list(by_lh)[:2] == [(4, 1), (4, 4)] and by_lh[(16, 4)].shape == (3,)
    np.testing.assert_array_equal(by_lh[(8, 1)], [r["mean"] for r in res.table
                                                   if (r["L"], r["H"]) == (8, 1)])
    with pytest.raises(ValueError, match="'nope'"):
        res.column("nope")


def test_errors_are_recorded_raised_and_retried(tmp_path):
    db = tmp_path / "e.sqlite"
    with pytest.raises(SweepError, match="diverged at L=8") as info:
        run_sweep(fails_at_depth_8, SPEC, db, experiment="e", workers=1, progress=False)
    partial = info.value.result
    assert {r.status for r in partial.records} == {"ok", "error", "pending"}  # stopped early
    assert "FloatingPointError" in partial.errors[0].error

    with pytest.warns(RuntimeWarning, match="6 of 18 points failed"):
        res = run_sweep(fails_at_depth_8, SPEC, db, experiment="e", workers=2, progress=False,
                        on_error="continue")
    assert [r.params["L"] for r in res.errors] == [8] * 6
    assert all(r.status == "ok" for r in res.records if r.params["L"] != 8)
    with pytest.warns(RuntimeWarning, match="6 of 18 points failed"):
        kept = run_sweep(fails_at_depth_8, SPEC, db, experiment="e", workers=1, progress=False,
                         on_error="continue", retry_errors=False)
    assert kept.n_run == 0 and len(kept.errors) == 6

    fixed = run_sweep(noisy_point, SPEC, db, experiment="e", workers=1, progress=False)
    assert fixed.complete and fixed.n_run == 6
    # the first L=8 point failed in all three runs before; the other five in the last two
    assert sorted(r.attempts for r in fixed.records if r.params["L"] == 8) == [2] * 5 + [3]


@pytest.mark.parametrize("fn, message", [(returns_list, "must return a dict"),
                                         (returns_clashing_key, "collide")])
def test_bad_results_are_errors(tmp_path, fn, message):
    with pytest.raises(SweepError, match=message):
        run_sweep(fn, {"grid": {"L": [4]}}, tmp_path / "x.sqlite", workers=1, progress=False)


def test_bad_arguments(tmp_path):
    db = tmp_path / "x.sqlite"
    with pytest.raises(ValueError, match="picklable"):
        run_sweep(lambda p: {}, SPEC, db, workers=2, progress=False)
    with pytest.raises(ValueError, match="workers"):
        run_sweep(noisy_point, SPEC, db, workers=0, progress=False)
    with pytest.raises(ValueError, match="on_error"):
        run_sweep(noisy_point, SPEC, db, on_error="ignore", progress=False)
    with pytest.raises(ValueError, match="config"):
        run_sweep(noisy_point, SPEC, db, config={"f": object()}, progress=False)
    with pytest.raises(ValueError, match="scheduler"):
        run_sweep(noisy_point, SPEC, db, scheduler=42, progress=False)


def test_progress_bar_goes_to_stderr(tmp_path, capsys):
    run_sweep(noisy_point, {"grid": {"L": [4, 8], "H": [1], "seed": {"count": 1, "base": 0}}},
              tmp_path / "p.sqlite", experiment="bar",
              workers=1, progress=True)
    out, err = capsys.readouterr()
    assert out == "" and "bar" in err and "2/2" in err


SCRIPT = """
import json, sys, time
import numpy as np
from transformer_limits.verify.sweeps import run_sweep

def slow_point(point):
    time.sleep(0.04)
    rng = np.random.default_rng(point["seed"])
    return {"value": float(rng.standard_normal() * point["L"] + point["H"])}

if __name__ == "__main__":
    spec = {"grid": {"L": [1, 2, 3, 4], "H": [1, 2], "seed": {"count": 4, "base": 99}}}
    res = run_sweep(slow_point, spec, sys.argv[1], experiment="slow", workers=2, progress=False)
    print(json.dumps({"n_run": res.n_run, "n_skipped": res.n_skipped}))
"""


def test_resume_after_sigkill_gives_the_uninterrupted_results(tmp_path):
    script = tmp_path / "slow_sweep.py"
    script.write_text(SCRIPT)
    root = str(Path(transformer_limits.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get(
        "PYTHONPATH")]))}

    def sweep(db: Path, **kw) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(script), str(db)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def finish(proc: subprocess.Popen) -> dict:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return json.loads(out)

    killed_db, clean_db = tmp_path / "killed.sqlite", tmp_path / "clean.sqlite"
    proc = sweep(killed_db, start_new_session=True)  # its own process group: parent + pool
    try:
        deadline = time.monotonic() + 30
        stored = 0
        while stored < 8:
            assert time.monotonic() < deadline and proc.poll() is None, "sweep never stored 8"
            time.sleep(0.02)
            if killed_db.exists():
                try:
                    with sqlite3.connect(killed_db, timeout=5) as conn:
                        stored = conn.execute("SELECT COUNT(*) FROM sweep_points").fetchone()[0]
                except sqlite3.OperationalError:  # schema not created yet
                    stored = 0
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    with sqlite3.connect(killed_db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        survived = conn.execute("SELECT COUNT(*) FROM sweep_points").fetchone()[0]
    assert 8 <= survived < 32

    resumed = finish(sweep(killed_db))
    assert resumed == {"n_run": 32 - survived, "n_skipped": survived}
    assert finish(sweep(clean_db)) == {"n_run": 32, "n_skipped": 0}

    def stored_rows(db: Path) -> list[tuple]:
        with sqlite3.connect(db) as conn:
            return conn.execute("SELECT experiment, config_hash, point_key, params, status, result,"
                                " attempts FROM sweep_points ORDER BY point_key").fetchall()

    assert stored_rows(killed_db) == stored_rows(clean_db)
    assert len(stored_rows(clean_db)) == 32


def test_grid_object_passes_through():
    grid = load_grid(SPEC)
    assert load_grid(grid) is grid and isinstance(grid, Grid)


def test_changing_the_seed_base_reruns_points(tmp_path):
    """Regression: the seed base is part of a point's key, so a new base never reuses old results."""
    store = tmp_path / "s.sqlite"
    grid1 = {"grid": {"L": [2], "seed": {"count": 1, "base": 1}}}
    grid2 = {"grid": {"L": [2], "seed": {"count": 1, "base": 2}}}
    r1 = run_sweep(_echo_seed, grid1, store, experiment="e", workers=1, progress=False)
    r2 = run_sweep(_echo_seed, grid2, store, experiment="e", workers=1, progress=False)
    assert r2.n_run == 1
    assert r1.records[0].result["seen"] != r2.records[0].result["seen"]


def _echo_seed(point):
    return {"seen": point["seed"]}


# -- pools kept between sweeps (a report) ----------------------------------------------------------


def worker_pid(point: dict) -> dict:
    return {"pid": os.getpid()}


def spin_cpu(point: dict) -> dict:
    end = time.process_time() + point["seconds"]
    while time.process_time() < end:
        pass
    return {"pid": os.getpid()}


def kill_first_time(point: dict) -> dict:
    """SIGKILLs its own worker the first time point 1 runs (a marker file remembers)."""
    marker = Path(point["dir"]) / "seen"
    if point["i"] == 1 and not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return {"y": point["i"] ** 2}


def _pids(result) -> set[int]:
    return {r.completed_result["pid"] for r in result.records}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat")
    return not (state.exists() and state.read_text().rsplit(")", 1)[1].split()[0] == "Z")


def test_shared_pools_reuse_the_workers_across_sweeps_and_stop_them_on_leaving(tmp_path):
    """Inside ``shared_pools`` the second sweep runs on the first one's workers (started and
    initialised once per report); outside, each sweep starts its own; leaving stops them."""
    from transformer_limits.verify.sweeps import shared_pools

    grid = {"grid": {"k": [0, 1, 2, 3, 4, 5]}}
    apart = [_pids(run_sweep(worker_pid, grid, tmp_path / f"a{i}.sqlite", workers=2, progress=False))
             for i in range(2)]
    assert not apart[0] & apart[1]
    from transformer_limits.verify.sweeps import executors

    with shared_pools():
        first = run_sweep(worker_pid, grid, tmp_path / "s0.sqlite", workers=2, progress=False)
        (kept,) = executors._SHARED.pools.values()
        workers = set(kept._processes)  # (under load one worker may run every point of a sweep)
        second = run_sweep(worker_pid, grid, tmp_path / "s1.sqlite", workers=2, progress=False)
        assert executors._SHARED.pools[kept.key] is kept and set(kept._processes) == workers
        assert _pids(first) <= workers and _pids(second) <= workers and all(_alive(p) for p in workers)
        # results do not depend on the pool: the same rows as a serial sweep
        serial = run_sweep(noisy_point, SPEC, tmp_path / "n0.sqlite", workers=1, progress=False)
        kept = run_sweep(noisy_point, SPEC, tmp_path / "n1.sqlite", workers=2, progress=False)
        assert rows_of(kept) == rows_of(serial)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in workers) and not executors._SHARED.pools


def test_a_report_counts_the_cpu_of_kept_workers_that_are_still_running(tmp_path):
    """``cpu_seconds`` (the runner's ``cpu_s``) includes the live workers of a kept pool, which
    ``getrusage(RUSAGE_CHILDREN)`` would count only once they end."""
    from transformer_limits.verify.running import cpu_seconds
    from transformer_limits.verify.sweeps import shared_pools

    with shared_pools():
        before = cpu_seconds()
        run_sweep(spin_cpu, {"grid": {"k": [0, 1]}, "fixed": {"seconds": 0.3}}, tmp_path / "c.sqlite",
                  workers=2, progress=False)
        assert cpu_seconds() - before >= 0.59


def test_a_kept_pool_broken_by_a_killed_worker_is_replaced_for_the_next_sweep(tmp_path):
    from transformer_limits.verify.sweeps import shared_pools

    spec = {"grid": {"i": [0, 1, 2, 3]}, "fixed": {"dir": str(tmp_path)}}
    with shared_pools():
        res = run_sweep(kill_first_time, spec, tmp_path / "k.sqlite", workers=2, progress=False)
        assert res.complete and res.column("y").tolist() == [0, 1, 4, 9]
        after = run_sweep(worker_pid, {"grid": {"k": [0, 1, 2]}}, tmp_path / "p.sqlite", workers=2, progress=False)
        assert after.complete


def vector_width_state(point: dict) -> dict:
    from transformer_limits.numeric import vector_width

    return {"decided": vector_width._decided is not None}


def test_a_fresh_worker_decides_numbas_vector_width_before_its_first_point(tmp_path):
    """A worker started by a fork server (a fresh interpreter, nothing inherited) has decided Numba's
    vector width before it runs a point, so a point's own Numba code cannot fix the width the generated
    kernels compile (and round) with."""
    import multiprocessing

    res = run_sweep(vector_width_state, {"grid": {"k": [0, 1]}}, tmp_path / "v.sqlite", workers=2, progress=False,
                    mp_context=multiprocessing.get_context("forkserver"))
    assert [r.completed_result["decided"] for r in res.records] == [True, True]
