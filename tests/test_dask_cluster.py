"""dask.distributed on a real local cluster: a scheduler and two workers started as separate
processes with the ``dask scheduler`` / ``dask worker`` command lines, as on a head node.

The in-process ``LocalCluster`` tests (tests/test_sweep.py, tests/test_fault_injection.py) share
this interpreter with the workers; here every task is unpickled by the scheduler process and a
worker process, which import the package by themselves, and every result crosses a socket.
docs/sweeps.md and docs/reports.md promise that the scheduler changes how, not what, is computed,
so the results must equal the serial local run (``workers=1``) exactly.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip(
    "distributed", reason="dask.distributed is not installed (pip install 'transformer_limits[distributed]')")

from transformer_limits.errors import SchedulerError  # noqa: E402
from transformer_limits.verify.experiments import lyapunov  # noqa: E402
from transformer_limits.verify.sweeps import run_sweep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
N_WORKERS = 2
#: seconds for the scheduler file to appear and for both workers to register (generous: the
#: machine may be shared, and each worker process imports dask and the package)
START_TIMEOUT_S = 120
#: seconds the processes get to exit after SIGTERM before their process groups are killed
STOP_TIMEOUT_S = 10

# a small Benettin grid for the package's own sweep function (NumPy only, so a fresh worker
# process pays no Numba compilation): 2 settings x 2 refinements x 2 seeds = 8 points
LYAPUNOV_GRID = {
    "grid": {"setting": [{"activation": "relu", "d": 5, "sigma": 0.1, "k1": 0.5},
                         {"activation": "tanh", "d": 3, "sigma": 0.2, "k1": 0.3}],
             "refinement": [1, 2], "seed": {"count": 2, "base": 7}},
    "fixed": {"eps": 0.05, "chains": 8, "steps": 40, "width": 16},
}


def _env() -> dict[str, str]:
    """Environment of every child: this checkout first on the path (as pytest's ``pythonpath``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["MPLBACKEND"] = "Agg"
    return env


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to all (they shut down in parallel), then SIGKILL of each process group: the group
    is the one this test created (``start_new_session``) and may still hold a worker process whose
    nanny exited first."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Address of a running scheduler with :data:`N_WORKERS` registered single-threaded workers,
    each a separate ``dask worker`` process; all of them are stopped afterwards, even on failure."""
    base = tmp_path_factory.mktemp("dask-cluster")
    scheduler_file = base / "scheduler.json"
    dask = [sys.executable, "-m", "dask"]
    procs: list[tuple[subprocess.Popen, Path]] = []

    def start(args: list[str], log: Path) -> subprocess.Popen:
        with open(log, "wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=base, env=_env(), start_new_session=True)
        procs.append((proc, log))
        return proc

    def logs() -> str:
        return "\n".join(f"--- {log.name} (exit {p.poll()}):\n{_tail(log)}" for p, log in procs)

    try:
        # port 0: the scheduler picks a free port and writes its address to the scheduler file
        # (no window in which another process could take a port found in advance)
        start([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
               "--scheduler-file", str(scheduler_file)], base / "scheduler.log")
        deadline = time.monotonic() + START_TIMEOUT_S
        address = None
        while address is None:
            if procs[0][0].poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the dask scheduler did not start\n{logs()}")
            try:
                address = json.loads(scheduler_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.2)
        # Numba's default threading layer must not be entered from two threads of one process,
        # so one thread per worker process (docs/sweeps.md, "Execution and resume")
        for i in range(N_WORKERS):
            start([*dask, "worker", address, "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
                   "--host", "127.0.0.1", "--name", f"tl-test-{i}", "--local-directory", str(base / f"w{i}")],
                  base / f"worker-{i}.log")
        with distributed.Client(address, timeout=START_TIMEOUT_S) as client:
            try:
                client.wait_for_workers(N_WORKERS, timeout=max(1.0, deadline - time.monotonic()))
            except (TimeoutError, OSError):
                pytest.fail(f"{N_WORKERS} dask workers did not register within {START_TIMEOUT_S} s\n{logs()}")
        yield address
    finally:
        # the workers first (together), then the scheduler: a nanny whose scheduler has gone
        # waits to reconnect instead of exiting
        _stop([proc for proc, _ in procs[1:]])
        _stop([proc for proc, _ in procs[:1]])
        assert all(proc.poll() is not None for proc, _ in procs), f"dask processes left running\n{logs()}"


def _worker_identities(address: str) -> dict[str, str]:
    """``host:pid`` (what a sweep records as a point's ``worker``) of every worker process."""
    with distributed.Client(address, timeout=30) as client:
        return client.run(lambda: f"{socket.gethostname()}:{os.getpid()}")


def _rows(result) -> list[tuple]:
    return [(r.params, r.status, r.result) for r in result.records]


# ------------------------------------------------------------------------------------------------
# the API: run_sweep(..., scheduler=ADDRESS)
# ------------------------------------------------------------------------------------------------


def test_sweep_on_a_real_cluster_equals_the_local_run(cluster, tmp_path):
    local = run_sweep(lyapunov.simulate_point, LYAPUNOV_GRID, tmp_path / "local.sqlite", workers=1,
                      experiment="lyapunov-small", progress=False)
    remote = run_sweep(lyapunov.simulate_point, LYAPUNOV_GRID, tmp_path / "remote.sqlite", scheduler=cluster,
                       experiment="lyapunov-small", progress=False)
    assert local.complete and remote.complete and remote.n_run == len(remote) == 8
    # bitwise: same parameters (derived seeds included), statuses and JSON results, in grid order
    assert _rows(remote) == _rows(local)
    np.testing.assert_array_equal(remote.column("estimate"), local.column("estimate"))
    assert np.all(np.isfinite(remote.column("estimate"))) and np.all(remote.column("standard_error") > 0)
    # every point ran in a worker process of the cluster, none in this one
    workers = set(_worker_identities(cluster).values())
    assert len(workers) == N_WORKERS
    ran_on = {r.worker for r in remote.records}
    assert ran_on <= workers and f"{socket.gethostname()}:{os.getpid()}" not in ran_on
    assert {r.worker for r in local.records} == {f"{socket.gethostname()}:{os.getpid()}"}


def test_a_rerun_on_the_cluster_resumes_from_the_store(cluster, tmp_path):
    db = tmp_path / "resume.sqlite"
    small = {**LYAPUNOV_GRID, "grid": {**LYAPUNOV_GRID["grid"], "refinement": [1]}}
    first = run_sweep(lyapunov.simulate_point, small, db, scheduler=cluster, progress=False)
    grown = run_sweep(lyapunov.simulate_point, LYAPUNOV_GRID, db, scheduler=cluster, progress=False)
    assert (first.n_run, grown.n_run, grown.n_skipped) == (4, 4, 4)  # only the new points ran
    local = run_sweep(lyapunov.simulate_point, LYAPUNOV_GRID, tmp_path / "local.sqlite", workers=1,
                      progress=False)
    assert _rows(grown) == _rows(local)


def test_a_wrong_point_changes_the_cluster_results(cluster, tmp_path):
    # the comparison above can say no: another seed base gives other numbers on the cluster
    local = run_sweep(lyapunov.simulate_point, LYAPUNOV_GRID, tmp_path / "a.sqlite", workers=1, progress=False)
    other = {**LYAPUNOV_GRID, "grid": {**LYAPUNOV_GRID["grid"], "seed": {"count": 2, "base": 8}}}
    remote = run_sweep(lyapunov.simulate_point, other, tmp_path / "b.sqlite", scheduler=cluster, progress=False)
    assert not np.any(remote.column("estimate") == local.column("estimate"))


# ------------------------------------------------------------------------------------------------
# the CLI: transformer-limits verify NAME --scheduler ADDRESS
# ------------------------------------------------------------------------------------------------


# A file experiment (``--module``) whose sweep function is the package's own
# ``lyapunov.simulate_point``: one setting at two step sizes, Richardson-extrapolated and z-tested
# (docs/theory.md §B.7) against the derived λ_1, or against Draft A's sign typo (a wrong formula that
# must FAIL).  Small enough for the default suite; the built-in ``lyapunov`` quick profile takes
# minutes on a shared 2-core machine.
_EXPERIMENTS = '''
from transformer_limits.verify.experiment import Experiment, ExperimentResult
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.running import run_points
from transformer_limits.verify.experiments import lyapunov as ly

ACTIVATION, D, SIGMA = "relu", 5, 0.1

def run(config, name="cluster-lyapunov", typo=False):
    theory = ly.predicted_lambda_1(ACTIVATION, D, SIGMA)
    grid = {"grid": {"setting": [{"activation": ACTIVATION, "d": D, "sigma": SIGMA, "k1": theory["k1"]}],
                     "refinement": [1, 2], "seed": {"count": 1, "base": config.seed}},
            "fixed": {"eps": 0.05, "chains": 1024, "steps": 100, "width": 16}}
    coarse, fine = run_points(config, ly.simulate_point, grid, experiment="cluster-lyapunov").table
    est = ly.richardson((coarse["estimate"], coarse["standard_error"]),
                        (fine["estimate"], fine["standard_error"]), coarse["dt"])
    predicted = ly.draft_a_typo_lambda_1(D, SIGMA) if typo else theory["lambda_1"]
    check, _ = ly.lyapunov_z_test([est.estimate], [est.standard_error], [predicted])
    result = ExperimentResult(name, config.profile, checks=[check])
    result.tables = {"estimates": [{k: row[k] for k in ("refinement", "estimate", "standard_error", "dt")}
                                   for row in (coarse, fine)]}
    return result

def run_typo(config):
    return run(config, name="cluster-lyapunov-typo", typo=True)

for name, fn in (("cluster-lyapunov", run), ("cluster-lyapunov-typo", run_typo)):
    register_experiment(Experiment(name=name, title=name, paper="B", claim="lambda_1 as derived",
                                   derivations=(), checks=("lyapunov_agrees",), run=fn, profiles=()))
'''


@pytest.fixture(scope="module")
def experiment_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("experiments") / "cluster_experiments.py"
    path.write_text(_EXPERIMENTS)
    return str(path)


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transformer_limits", *args], capture_output=True, text=True,
                          cwd=ROOT, env=_env(), timeout=timeout)


def _cli_here(capsys, *args: str) -> subprocess.CompletedProcess:
    """The same command line run by ``cli.main`` in this process (no interpreter start-up and
    imports, ~2 s): for the runs whose results are compared, while the cluster's workers stay
    separate processes.  Use with the ``registry`` fixture (``--module`` registers experiments here)."""
    from transformer_limits.cli import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["transformer-limits", *args], code, out, err)


def _results(run: subprocess.CompletedProcess) -> dict:
    """The ``--format json`` payload (as in ``results.json``) without what may change with how it
    ran (docs/reports.md: the scheduler changes how, not what, is computed): the run options and
    the timings."""
    assert run.returncode == 0, run.stdout + run.stderr
    payload = json.loads(run.stdout)
    for key in ("config", "seconds", "timings"):
        payload["provenance"].pop(key, None)
    return payload


def test_cli_verify_on_a_real_cluster_equals_the_local_run(cluster, experiment_file, capsys, registry):
    # the cluster run as a user runs it (a fresh process), the local run to compare with in this one
    common = ("verify", "cluster-lyapunov", "--module", experiment_file, "--no-progress", "--seed", "3",
              "--format", "json")
    remote = _cli(*common, "--scheduler", cluster)
    local = _cli_here(capsys, *common, "--workers", "1")
    results = _results(remote)
    assert json.loads(remote.stdout)["provenance"]["config"]["scheduler"] == cluster
    assert results["status"] in ("pass", "inconclusive") and results["checks"][0]["passed"]
    assert results["checks"][0]["name"] == "lyapunov_agrees" and results["checks"][0]["power"] is not None
    assert results == _results(local)  # checks, tables, provenance: bitwise equal
    assert [r["refinement"] for r in results["tables"]["estimates"]] == [1, 2]


def test_cli_a_wrong_formula_fails_on_the_cluster_too(cluster, experiment_file, capsys, registry):
    # Draft A's typo is off by 0.06 at (relu, d=5, σ=0.1): |z| = 4.5 at seed 3, against z* = 2.58 for
    # α = 0.01 (the derived formula gets |z| = 1.0 and passes: false-failure rate 1 %, fixed seed)
    run = _cli_here(capsys, "verify", "cluster-lyapunov-typo", "--module", experiment_file, "--scheduler",
                    cluster, "--no-progress", "--seed", "3")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "lyapunov_agrees  FAIL" in run.stdout and "RESULT: FAIL (0/1" in run.stdout


def test_cli_a_file_defined_sweep_function_runs_on_the_cluster(cluster, capsys, registry):
    """The worked example's sweep function lives in the --module file itself: the scheduler
    unpickles and re-pickles each task, so the function must carry the file's source both hops
    (workers cannot import the file by name).  Same results as the local run."""
    example = str(ROOT / "examples" / "euler_maruyama" / "em_gbm_example" / "experiment.py")
    common = ("verify", "em-gbm-strong-order", "--module", example, "--no-progress", "--format", "json")
    remote = _cli_here(capsys, *common, "--scheduler", cluster)
    results = _results(remote)
    assert results["status"] in ("pass", "inconclusive") and results["checks"][0]["passed"]
    assert results == _results(_cli_here(capsys, *common, "--workers", "1"))


# ------------------------------------------------------------------------------------------------
# an unreachable scheduler: bad input, never a failed check
# ------------------------------------------------------------------------------------------------


def _closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening (bound by the OS, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_scheduler_is_bad_input_not_a_failed_check(tmp_path):
    address = f"tcp://127.0.0.1:{_closed_port()}"
    out = tmp_path / "out"
    run = _cli("verify", "lyapunov", "--scheduler", address, "--out", str(out), "--no-progress", timeout=120)
    # docs/sweeps.md "Faults and limits": refusing connections is a SchedulerError, exit 2, one line
    # on stderr, before any work
    assert run.returncode == 2, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot connect" in lines[0] and address in lines[0], run.stderr
    assert "Traceback" not in run.stderr and "FAIL" not in run.stdout + run.stderr
    assert not out.exists()  # nothing written
    with pytest.raises(SchedulerError, match="cannot connect"):  # the API: a ValueError naming it
        run_sweep(lyapunov.simulate_point, LYAPUNOV_GRID, tmp_path / "x.sqlite", scheduler=address,
                  progress=False)
