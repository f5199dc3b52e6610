"""Fault injection: broken stores, fake schedulers, killed workers, signals, full or read-only file
systems, memory and grid limits.  Each case checks the exit code of :mod:`transformer_limits.errors`
(2 bad input, detected before any work; 3 crash or environment failure mid-run; 143 SIGTERM) and
that it is never reported as a failed check (exit 1 / FAIL).

Fake servers listen on 127.0.0.1 only.  Mount tests need root (CAP_SYS_ADMIN) and are skipped
with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import hang_guard

from transformer_limits.cli import main
from transformer_limits.errors import EnvironmentFailure, InputError, SchedulerError, StoreError
from transformer_limits.verify import registry as experiment_mod
from transformer_limits.verify.sweeps import driver as sweep_driver, executors as sweep_executors, store as sweep_store
from transformer_limits.verify.experiment import Experiment, ExperimentResult
from transformer_limits.verify.running import run_points
from transformer_limits.verify.sweeps import SweepStore, check_scheduler_address, load_grid, run_sweep
from transformer_limits.verify.verdicts import Check

CALLS: list[str] = []


def square_point(params):
    return {"y": params["i"] ** 2}


def _sweep_experiment(config):
    """A dummy experiment whose check rests on a real sweep (through ``run_points``)."""
    CALLS.append("fault-sweep")
    res = run_points(config, square_point, {"grid": {"i": [0, 1, 2, 3]}}, experiment="fault-sweep")
    ok = res.column("y").tolist() == [0, 1, 4, 9]
    return ExperimentResult("fault-sweep", config.profile, checks=[
        Check("squares", "i^2", 1.0, 1.0 if ok else 0.0, (1.0, 1.0), ok,
              {"alpha": 0.0, "sides": "none", "method": "exact"}, "")])


def _plain(name, *, figure_bytes=0, derivations=()):
    def run(config):
        CALLS.append(name)
        from transformer_limits.verify.experiment import Figure

        figs = [Figure("big", b"\x89PNG" + os.urandom(figure_bytes), "big figure")] if figure_bytes else []
        return ExperimentResult(name, config.profile, figures=figs, checks=[
            Check("ok", "1 = 1", 1.0, 1.0, (1.0, 1.0), True, {"alpha": 0.0, "sides": "none", "method": "exact"}, "")])
    return Experiment(name=name, title=name, paper="A", claim="1 = 1", derivations=tuple(derivations),
                      checks=("ok",), run=run, profiles=("full",))


@pytest.fixture
def fakes(monkeypatch):
    experiment_mod.list_experiments()
    exps = [Experiment(name="fault-sweep", title="sweep", paper="A", claim="i^2", derivations=(),
                       checks=("squares",), run=_sweep_experiment, profiles=("full",)),
            _plain("fault-a"), _plain("fault-b", derivations=("lyapunov",)), _plain("fault-big", figure_bytes=3 << 20)]

    def oom(config):
        CALLS.append("fault-oom")
        raise MemoryError("Unable to allocate 8.00 TiB for an array")
    exps.append(Experiment(name="fault-oom", title="oom", paper="A", claim="x", derivations=(),
                           checks=("ok",), run=oom, profiles=("full",)))

    def huge(config):
        CALLS.append("fault-huge")
        run_points(config, square_point, {"grid": {"i": list(range(2000)), "j": list(range(2000))}},
                   experiment="fault-huge")
    exps.append(Experiment(name="fault-huge", title="huge", paper="A", claim="x", derivations=(),
                           checks=("ok",), run=huge, profiles=("full",)))
    for exp in exps:
        monkeypatch.setitem(experiment_mod._REGISTRY, exp.name, exp)
    CALLS.clear()
    yield
    CALLS.clear()


def _one_line_error(capsys, *needles):
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0, err
    for needle in needles:
        assert needle in err, err
    assert "FAIL" not in captured.out
    return err


# ------------------------------------------------------------------------------------------------
# stores
# ------------------------------------------------------------------------------------------------


def _verify_with_store(store, tmp_path, *extra):
    return main(["verify", "fault-sweep", "--no-progress", "--store", str(store), "--out", str(tmp_path / "out"),
                 *extra])


def test_store_that_is_not_sqlite(fakes, tmp_path, capsys):
    store = tmp_path / "t.sqlite"
    store.write_text("x\n")
    assert _verify_with_store(store, tmp_path) == 2
    _one_line_error(capsys, "not a SQLite database", str(store))
    assert CALLS == [] and not (tmp_path / "out").exists() and store.read_text() == "x\n"


def _good_store(tmp_path) -> Path:
    store = tmp_path / "good.sqlite"
    run_sweep(square_point, {"grid": {"i": list(range(200))}}, store, workers=1, progress=False,
              experiment="filler")
    with contextlib.closing(sqlite3.connect(store)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return store


def test_corrupted_store(fakes, tmp_path, capsys):
    store = _good_store(tmp_path)
    data = bytearray(store.read_bytes())
    assert len(data) > 3 * 4096
    data[4096:len(data) - 100] = b"\xa5" * (len(data) - 4196)  # keep the header page, smash the rest
    store.write_bytes(bytes(data))
    assert _verify_with_store(store, tmp_path) == 2
    _one_line_error(capsys, "corrupted", str(store))
    assert CALLS == []


@pytest.mark.parametrize("setup, needle", [
    ("CREATE TABLE people (name TEXT)", "another program"),
    ("CREATE TABLE sweep_points (experiment TEXT, x INTEGER)", "columns"),
    ("PRAGMA user_version = 7", "schema version 7"),
])
def test_store_of_the_wrong_schema(fakes, tmp_path, capsys, setup, needle):
    store = tmp_path / "other.sqlite"
    with contextlib.closing(sqlite3.connect(store)) as conn:
        conn.execute(setup)
        conn.commit()
    assert _verify_with_store(store, tmp_path) == 2
    _one_line_error(capsys, needle)
    assert CALLS == []


def test_store_on_dev_full_or_a_directory(fakes, tmp_path, capsys):
    if Path("/dev/full").exists():
        assert _verify_with_store("/dev/full", tmp_path) == 2
        _one_line_error(capsys, "not a regular file")
    assert _verify_with_store(tmp_path, tmp_path) == 2
    _one_line_error(capsys, "directory")
    assert _verify_with_store("", tmp_path) == 2
    _one_line_error(capsys, "--store")
    assert CALLS == []


def test_store_locked_by_another_process_waits_the_stated_timeout(fakes, tmp_path, capsys, monkeypatch):
    store = _good_store(tmp_path)
    monkeypatch.setattr(sweep_store, "STORE_LOCK_TIMEOUT_S", 0.5)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sqlite3, sys, time
        conn = sqlite3.connect({str(store)!r}, isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE"); print("locked", flush=True); time.sleep(60)
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with hang_guard():  # waits the stated 0.5 s, then gives up (the message says so)
            assert _verify_with_store(store, tmp_path) == 2
        _one_line_error(capsys, "locked by another process", "0.5 s")
    finally:
        holder.kill()
        holder.wait()
    assert CALLS == []


@pytest.mark.parametrize("column, value, needle", [
    ("result", "not json", "does not decode"),
    ("result", "[1, 2]", "not a JSON object"),
    ("params", "{}", "were modified"),
    ("result", "{}", "is empty while other points have results"),
])
def test_tampered_store_row(fakes, tmp_path, capsys, column, value, needle):
    store = tmp_path / "runs.sqlite"
    assert _verify_with_store(store, tmp_path) == 0
    capsys.readouterr()
    with contextlib.closing(sqlite3.connect(store)) as conn, conn:
        key = conn.execute("SELECT point_key FROM sweep_points WHERE experiment = 'fault-sweep' "
                           "ORDER BY point_key LIMIT 1").fetchone()[0]
        conn.execute(f"UPDATE sweep_points SET {column} = ? WHERE point_key = ?", (value, key))
    # found mid-run: an ERROR (exit 3) naming the store, not "bad input before any work" (exit 2)
    assert _verify_with_store(store, tmp_path) == 3
    _one_line_error(capsys, needle, str(store))


def test_stored_row_missing_a_result_key_names_the_store(tmp_path):
    store = tmp_path / "s.sqlite"
    spec = {"grid": {"i": [0, 1, 2]}}
    run_sweep(square_point, spec, store, workers=1, progress=False, experiment="sq")
    with contextlib.closing(sqlite3.connect(store)) as conn, conn:
        conn.execute("""UPDATE sweep_points SET result = '{"z": 1}' WHERE point_key = '{"i":1}'""")
    res = sweep_driver.load_sweep(store, spec, experiment="sq")
    with pytest.raises(StoreError, match=r"column 'y' is missing from 1 of 3 rows .*/s\.sqlite"):
        res.column("y")
    with pytest.raises(ValueError, match="missing from 3 of 3"):  # a column no row has is a code bug
        res.column("nope")


def test_store_write_failing_mid_run_is_an_environment_failure(tmp_path):
    store = SweepStore(tmp_path / "s.sqlite")
    try:
        store._conn.execute("PRAGMA query_only = ON")  # every write now fails like a read-only file
        with pytest.raises(EnvironmentFailure, match="could not write to sweep store"):
            store.register_config("x", {})
    finally:
        store.close()


# ------------------------------------------------------------------------------------------------
# schedulers (fake peers on 127.0.0.1 only)
# ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def fake_server(reply: bytes | None):
    """A TCP server on 127.0.0.1 that answers every connection with ``reply`` once it has read
    something (like an HTTP server), or at once when ``reply`` starts with b"!" (garbage)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(5)
                try:
                    if reply.startswith(b"!"):
                        conn.sendall(reply[1:])
                        time.sleep(1)
                    else:
                        conn.recv(4096)  # an HTTP server waits for a request line first
                        conn.sendall(reply)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        srv.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("address, needle", [
    ("not-an-address", "not an address"),
    ("http://127.0.0.1:80", "unknown scheme"),
    ("tcp://127.0.0.1:99999", "not an address"),
])
def test_malformed_scheduler_address(fakes, tmp_path, capsys, address, needle):
    pytest.importorskip("distributed")
    assert main(["verify", "fault-a", "--scheduler", address]) == 2
    _one_line_error(capsys, needle)
    assert CALLS == []


def test_scheduler_port_closed_fails_fast(fakes, capsys):
    pytest.importorskip("distributed")
    with hang_guard():
        assert main(["verify", "fault-a", "--scheduler", f"tcp://127.0.0.1:{_closed_port()}"]) == 2
    _one_line_error(capsys, "cannot connect")
    assert CALLS == []


@pytest.mark.parametrize("reply, needle", [
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "sent no dask handshake"),
    (b"!" + bytes(range(256)) * 64, "not a dask scheduler"),             # lengths of exabytes
    (b"!\x00\x00\x00\x00\x00\x00\x00\x00", "not a dask scheduler"),    # a zero-length frame set
], ids=["http-server", "garbage-peer", "zero-length"])
def test_scheduler_that_is_not_dask_fails_fast(fakes, capsys, monkeypatch, reply, needle):
    pytest.importorskip("distributed")
    monkeypatch.setattr(sweep_executors, "SCHEDULER_TIMEOUT_S", 1.0)
    with fake_server(reply) as address:
        with hang_guard():  # before: hung (HTTP) or MemoryError (garbage)
            assert main(["verify", "fault-a", "--scheduler", address]) == 2
    _one_line_error(capsys, needle, address)
    assert CALLS == []


def test_a_real_dask_scheduler_passes_the_handshake(tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        check_scheduler_address(cluster.scheduler_address, timeout=5)
        res = run_sweep(square_point, {"grid": {"i": [1, 2]}}, tmp_path / "d.sqlite",
                        scheduler=cluster.scheduler_address, progress=False)
    assert res.column("y").tolist() == [1, 4]


def test_scheduler_errors_are_value_errors_for_api_users():
    with pytest.raises(ValueError, match="not an address"):
        check_scheduler_address("tcp://:1")
    assert issubclass(SchedulerError, InputError) and issubclass(StoreError, ValueError)


# ------------------------------------------------------------------------------------------------
# killed workers
# ------------------------------------------------------------------------------------------------


def kill_once_point(params):
    """SIGKILLs its own worker the first time each point runs (a marker file remembers)."""
    marker = Path(params["dir"]) / f"seen-{params['i']}"
    if params["i"] in (1, 2) and not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return {"y": params["i"] ** 2}


def always_kill_point(params):
    os.kill(os.getpid(), signal.SIGKILL)


def test_killed_worker_is_retried_not_reported_as_a_failure(tmp_path):
    spec = {"grid": {"i": [0, 1, 2, 3, 4, 5]}, "fixed": {"dir": str(tmp_path)}}
    res = run_sweep(kill_once_point, spec, tmp_path / "k.sqlite", workers=2, progress=False)
    assert res.complete and res.column("y").tolist() == [0, 1, 4, 9, 16, 25]
    assert all(r.attempts == 1 for r in res.records)  # the lost runs were never stored as errors


def test_worker_pool_broken_beyond_retries_is_an_environment_failure(tmp_path):
    with pytest.raises(EnvironmentFailure, match=f"broke {sweep_driver.POOL_RESTARTS + 1} times"):
        run_sweep(always_kill_point, {"grid": {"i": [0, 1]}}, tmp_path / "k.sqlite", workers=2, progress=False)
    with SweepStore(tmp_path / "k.sqlite") as store:  # nothing recorded as a point error
        assert store._conn.execute("SELECT COUNT(*) FROM sweep_points").fetchone()[0] == 0


# ------------------------------------------------------------------------------------------------
# output folders
# ------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    """Mount a tmpfs of ``size`` at ``path`` (skips the test where mounting is not allowed)."""
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root/CAP_SYS_ADMIN): {proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(folder: Path, leave: int) -> None:
    """Fill the file system of ``folder`` until about ``leave`` bytes are free."""
    import shutil

    free = shutil.disk_usage(folder).free
    with open(folder / "filler", "wb") as fh:
        try:
            fh.write(b"\0" * max(0, free - leave))
        except OSError:
            pass


def test_empty_out_is_bad_input(fakes, capsys):
    assert main(["report", "--out", "", "--only", "fault-a"]) == 2
    _one_line_error(capsys, "--out must not be empty")
    assert main(["verify", "fault-a", "--out", " "]) == 2
    assert CALLS == []


def test_report_into_a_mount_point(fakes, tmp_path, capsys):
    with tmpfs(tmp_path / "mnt", "8m") as mnt:
        assert main(["report", "--out", str(mnt), "--only", "fault-a", "fault-b", "--no-progress"]) == 0
        assert (mnt / "index.md").is_file() and (mnt / "fault-b" / "derivations" / "lyapunov.md").is_file()
        assert not [p.name for p in mnt.iterdir() if p.name.startswith(".")]  # no staging left
        assert main(["verify", "fault-a", "--out", str(mnt / "v")]) == 0


def test_second_report_replaces_the_first_as_a_whole(fakes, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["report", "--out", str(out), "--only", "fault-a", "fault-b", "--no-progress"]) == 0
    (out / "fault-b" / "derivations" / "stale-page.md").write_text("old")
    (out / "notes-of-the-user.txt").write_text("keep")
    assert main(["report", "--out", str(out), "--only", "fault-a", "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [e["name"] for e in summary["experiments"]] == ["fault-a"]
    assert sorted(p.name for p in out.iterdir()) == ["fault-a", "index.html", "index.md", "notes-of-the-user.txt",
                                                     "summary.json"]
    assert (out / "notes-of-the-user.txt").read_text() == "keep"
    # verify --out replaces an experiment folder as a whole too (stale figures/derivation pages go)
    assert main(["verify", "fault-b", "--out", str(tmp_path / "v")]) == 0
    (tmp_path / "v" / "old-figure.png").write_bytes(b"png")
    assert main(["verify", "fault-a", "--out", str(tmp_path / "v")]) == 0
    assert sorted(p.name for p in (tmp_path / "v").iterdir()) == ["report.html", "report.md", "results.json"]


def test_interrupted_second_report_leaves_the_first_untouched(fakes, tmp_path, capsys, monkeypatch):
    out = tmp_path / "rep"
    assert main(["report", "--out", str(out), "--only", "fault-a", "fault-b", "--no-progress"]) == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def interrupted(config):
        raise KeyboardInterrupt
    monkeypatch.setitem(experiment_mod._REGISTRY, "fault-b",
                        Experiment(name="fault-b", title="b", paper="A", claim="x", derivations=(),
                                   checks=("ok",), run=interrupted, profiles=("full",)))
    assert main(["report", "--out", str(out), "--only", "fault-a", "fault-b", "--no-progress"]) == 130
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # the old index is never beside new results


def test_full_disk_before_the_run_is_bad_input(fakes, tmp_path, capsys):
    with tmpfs(tmp_path / "mnt", "2m") as mnt:
        _fill(mnt, 0)
        assert main(["report", "--out", str(mnt / "rep"), "--only", "fault-a"]) == 2
        _one_line_error(capsys, "bytes free")
        assert main(["verify", "fault-sweep", "--store", str(mnt / "new.sqlite")]) == 2
        _one_line_error(capsys, "store", "full")
        assert sorted(p.name for p in mnt.iterdir()) == ["filler"]  # no 0-byte store, no empty folder
    assert CALLS == []


def test_store_filling_the_disk_mid_run_is_exit_3(fakes, tmp_path, capsys):
    with tmpfs(tmp_path / "mnt", "2m") as mnt:
        _fill(mnt, 48 << 10)  # enough to create the store, not to finish the sweep
        code = main(["verify", "fault-sweep", "--store", str(mnt / "new.sqlite")])
        err = _one_line_error(capsys)
        assert (code, CALLS) in ((3, ["fault-sweep"]), (2, [])), err  # mid-run: 3; if caught up front: 2
        assert "full" in err


def test_disk_full_while_writing_the_report_is_exit_3_and_leaves_nothing(fakes, tmp_path, capsys):
    with tmpfs(tmp_path / "mnt", "2m") as mnt:
        _fill(mnt, (1 << 20) + (256 << 10))  # passes the 1 MiB up-front check, too small for a 3 MB figure
        assert main(["report", "--out", str(mnt / "rep"), "--only", "fault-big", "--no-progress"]) == 3
        _one_line_error(capsys, "No space left")
        assert sorted(p.name for p in mnt.iterdir()) == ["filler"]
    assert CALLS == ["fault-big"]


def test_read_only_out_and_store_are_bad_input(fakes, tmp_path, capsys):
    with tmpfs(tmp_path / "mnt", "4m") as mnt:
        good = _good_store(mnt)
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        assert main(["verify", "fault-a", "--out", str(mnt / "rep")]) == 2
        _one_line_error(capsys, "read-only")
        assert main(["verify", "fault-sweep", "--store", str(good)]) == 2
        _one_line_error(capsys, "not writable")
    assert CALLS == []


# ------------------------------------------------------------------------------------------------
# memory and grid limits
# ------------------------------------------------------------------------------------------------


def test_out_of_memory_stops_the_run_with_exit_3(fakes, tmp_path, capsys):
    assert main(["report", "--out", str(tmp_path / "r"), "--only", "fault-oom", "fault-a"]) == 3
    _one_line_error(capsys, "out of memory", "8.00 TiB")
    assert CALLS == ["fault-oom"] and not (tmp_path / "r").exists()


def test_grid_over_the_stated_limit_is_an_error_of_the_run(fakes, tmp_path, capsys):
    # the grid is built inside run(), after the work started: ERROR (exit 3), one line
    assert main(["verify", "fault-huge"]) == 3
    _one_line_error(capsys, "4000000 points", "more than the limit of 1000000")
    # checked before anything is expanded: 10^12 points would never finish otherwise
    with pytest.raises(InputError, match="exceed the limit"):
        load_grid({"grid": {"seed": {"count": 10**12, "base": 0}}})


# ------------------------------------------------------------------------------------------------
# signals (subprocesses)
# ------------------------------------------------------------------------------------------------

DRIVER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from transformer_limits.cli import main
    from transformer_limits.verify import registry as em, running
    from transformer_limits.verify.experiment import Experiment

    MARK = Path(sys.argv[1])
    if os.environ.get("TL_TEST_NO_PRCTL"):
        from transformer_limits.verify.sweeps import executors
        executors._USE_PRCTL = False  # exercise the watchdog thread instead

    def slow_point(params):
        (MARK / f"worker-{os.getpid()}").write_text("")
        time.sleep(60)
        return {"y": 1}

    def run(config):
        running.run_points(config, slow_point, {"grid": {"i": [0, 1, 2, 3]}}, experiment="fault-slow")

    em.list_experiments()
    em._REGISTRY["fault-slow"] = Experiment(name="fault-slow", title="slow", paper="A", claim="x",
                                               derivations=(), checks=("ok",), run=run)
    sys.exit(main(["verify", "fault-slow", "--workers", "2", "--no-progress"]))
    """)


def _dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")  # a zombie has exited (reaped by whoever adopted it)


def _start_driver(tmp_path, **env):
    mark, tmp = tmp_path / "mark", tmp_path / "tmp"
    mark.mkdir()
    tmp.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    # output to files, not pipes: orphaned workers would hold a pipe open and hang communicate()
    stdout, stderr = (tmp_path / "stdout").open("w"), (tmp_path / "stderr").open("w")
    proc = subprocess.Popen([sys.executable, str(script), str(mark)], stdout=stdout, stderr=stderr,
                            env={**os.environ, "TMPDIR": str(tmp), **env})
    deadline = time.monotonic() + 120
    while len(list(mark.glob("worker-*"))) < 2:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise AssertionError(f"driver did not start its workers: {(tmp_path / 'stderr').read_text()}")
        time.sleep(0.1)
    workers = [int(p.name.split("-")[1]) for p in mark.glob("worker-*")]
    return proc, workers, tmp


def _wait_dead(pids, seconds=10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(_dead(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and fork")
def test_sigterm_is_handled_like_sigint(tmp_path):
    proc, workers, tmp = _start_driver(tmp_path)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143  # before: -15 (killed), no message
        err = (tmp_path / "stderr").read_text()
        assert err.strip().count("\n") == 0 and "terminated (SIGTERM)" in err, err
        assert list(tmp.iterdir()) == []  # the temporary sweep folder was removed
        assert _wait_dead(workers, 5), "worker processes survived SIGTERM"
    finally:
        for pid in workers:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and fork")
@pytest.mark.parametrize("mechanism", ["prctl", "watchdog"])
def test_workers_exit_when_their_parent_is_killed(tmp_path, mechanism):
    proc, workers, _ = _start_driver(tmp_path, **({"TL_TEST_NO_PRCTL": "1"} if mechanism == "watchdog" else {}))
    proc.kill()
    proc.wait(timeout=30)
    try:
        assert _wait_dead(workers, 10), "workers outlived their SIGKILLed parent"
    finally:
        for pid in workers:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
