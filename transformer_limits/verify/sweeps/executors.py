"""Where sweep points run: this process, a local process pool, or a dask.distributed cluster.

:func:`make_executor` picks one of them and says how many points may be in flight (twice the
worker count, so every worker always has its next point queued).  :func:`execute_point` is what a
worker runs: one point under a per-process lock, its result encoded as JSON text in a
``sweeps.store._PointOutcome``, so only plain text crosses processes and sockets.  Pool workers die with their parent (:func:`init_worker`) and share the
CPUs' Numba and BLAS threads; inside :func:`shared_pools` (a report) a pool outlives its sweep and
the next sweep reuses its workers.  A scheduler address is checked for a dask handshake before any
client connects (:func:`check_scheduler_address`).  docs/sweeps.md, "Execution and resume" and
"Faults and limits", describes the behaviour.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import socket
import struct
import sys
import threading
import time
import traceback
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any, Callable, Iterator, Mapping

from transformer_limits.errors import SchedulerError
from transformer_limits.verify.sweeps.grid import canonical_json
from transformer_limits.verify.sweeps.store import _PointOutcome

__all__ = ["check_scheduler_address", "execute_point", "make_executor", "shared_pools", "shared_workers_cpu_seconds"]

#: seconds to connect to a dask scheduler and receive its handshake, and to wait for its first worker
SCHEDULER_TIMEOUT_S = 10.0

# one point at a time per process: a dask worker with several threads would otherwise enter Numba's
# parallel kernels from two threads, which the default (workqueue) threading layer aborts on
_POINT_LOCK = threading.Lock()


def _limit_threads(threads: int) -> None:
    """Pool initializer: each of W workers gets cpus // W Numba threads and as many BLAS threads (no
    oversubscription: a forked worker inherits an OpenBLAS pool of every core, whose threads spin-wait
    against the other workers' after each call)."""
    import numba
    from threadpoolctl import threadpool_limits

    # numba.config assigns NUMBA_NUM_THREADS through globals() at import, out of mypy's sight
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]
    threadpool_limits(limits=max(1, threads), user_api="blas")


# Linux has prctl(PR_SET_PDEATHSIG); elsewhere (or with this off, as a test does) a watchdog thread
_USE_PRCTL = sys.platform.startswith("linux")


def _exit_with_parent(expected_parent: int | None = None) -> None:
    """Make this worker die when the process that started it dies (even by SIGKILL).

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; elsewhere (or if prctl fails) a daemon thread
    polls the parent pid once a second.  Without this a SIGKILLed parent leaves its pool workers
    blocked forever on the task queue (each holds the queue's write end, so none sees EOF).
    """
    import signal

    parent = os.getppid()
    if expected_parent is not None and parent != expected_parent:  # it died before we got here
        os._exit(1)
    armed = False
    if _USE_PRCTL:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    if not armed:
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="tl-parent-watchdog", daemon=True).start()


def init_worker(threads: int, parent: int | None = None) -> None:
    """Pool initializer: signals (the parent handles SIGINT/SIGTERM and stops the workers; a fork
    inherits its Python handlers), die with the parent, the Numba and BLAS thread share, and Numba's
    vector width decided before a point's own Numba code could fix it (the generated kernels then
    compile, and round, alike in every worker: numeric/vector_width.py)."""
    import signal

    from transformer_limits.numeric.vector_width import prefer_wide_vectors

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent(parent)
    _limit_threads(threads)
    prefer_wide_vectors()


def execute_point(fn: Callable[[dict[str, Any]], Mapping[str, Any]],
                   params: dict[str, Any]) -> _PointOutcome:
    """Run ``fn`` on one point (in a worker) and encode its result as JSON text."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    status, result, error = "ok", None, None
    with _POINT_LOCK:
        started = time.time()
        t0 = time.perf_counter()
        try:
            value = _checked_value(fn, params)
            result = canonical_json(dict(value))
        except Exception:
            status, error = "error", traceback.format_exc()
        elapsed = time.perf_counter() - t0
    return _PointOutcome(status, result, error, started, time.time(), elapsed, worker)


def _checked_value(fn: Callable[[dict[str, Any]], Mapping[str, Any]], params: dict[str, Any]) -> Mapping[str, Any]:
    value = fn(dict(params))
    if not isinstance(value, Mapping):
        raise TypeError(f"sweep function must return a dict, got {type(value).__name__}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise TypeError(f"result keys must be strings, got {bad!r}")
    clash = sorted(set(value) & set(params))
    if clash:
        raise ValueError(f"result keys {clash} collide with point parameters")
    return value


class SerialExecutor(Executor):
    """Runs each submission at once in this process (``workers=1``)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # execute_point catches fn errors; this is a safety net
            future.set_exception(exc)
        return future


def check_scheduler(scheduler: Any) -> None:
    """``scheduler`` must be an address string or a ``distributed.Client``, with dask installed."""
    if not (isinstance(scheduler, str) and scheduler) and not hasattr(scheduler, "get_executor"):
        raise ValueError(
            f"scheduler must be an address string or a distributed.Client, got {scheduler!r}"
        )
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ImportError(
            "scheduler= needs dask.distributed: pip install 'transformer_limits[distributed]'"
        ) from None


_SCHEMES = ("tcp", "tls", "inproc", "ucx", "ws", "wss")


def _parse_tcp_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``tcp://`` (or scheme-less) address; None for other schemes;
    :class:`SchedulerError` when it is not an address at all."""
    text = address.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    if scheme not in _SCHEMES:
        raise SchedulerError(f"scheduler address {address!r} has an unknown scheme {scheme!r} "
                             f"(expected one of {', '.join(_SCHEMES)}, e.g. tcp://host:8786)")
    if scheme != "tcp":
        return None
    host, colon, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in rest:
        raise SchedulerError(f"scheduler address {address!r} is not an address such as tcp://host:8786")
    return host, int(port)


def _recv_exactly(sock: socket.socket, n: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(min(n - got, 65536))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def check_scheduler_address(address: str, timeout: float | None = None) -> None:
    """Check that ``address`` is a dask scheduler, in at most about ``timeout`` seconds.

    For ``tcp://host:port``: connect, then read the handshake a dask comm sends on accepting a
    connection (an 8-byte little-endian length, then frames: a frame count, their lengths, and a
    msgpack dict with ``python`` and ``compression`` keys), with every length bounded before
    anything is allocated.  An HTTP server (which says nothing first), a peer that sends garbage, a
    closed port and a malformed address each raise :class:`transformer_limits.errors.SchedulerError`
    (a ``ValueError``) naming the address.  Other schemes (``tls``, ``inproc``, ...) are only
    parsed; their connection is bounded by ``distributed.Client(timeout=...)``.
    """
    timeout = SCHEDULER_TIMEOUT_S if timeout is None else float(timeout)
    if not isinstance(address, str) or not address.strip():
        raise SchedulerError("scheduler needs an address such as tcp://host:8786")
    target = _parse_tcp_address(address)
    if target is None:
        return
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection(target, timeout=timeout)
    except (TimeoutError, socket.timeout):
        raise SchedulerError(f"scheduler {address!r} did not accept a connection within {timeout:g} s") from None
    except OSError as exc:
        raise SchedulerError(f"cannot connect to scheduler {address!r}: {exc.strerror or exc}") from None
    not_dask = f"{address!r} is not a dask scheduler (its first message is not a dask handshake)"
    try:
        with sock:
            (total,) = struct.unpack("<Q", _recv_exactly(sock, 8, deadline))
            if not 16 <= total <= 1 << 16:
                raise SchedulerError(not_dask)
            body = _recv_exactly(sock, total, deadline)
    except (TimeoutError, socket.timeout):
        raise SchedulerError(f"{address!r} accepted the connection but sent no dask handshake within "
                             f"{timeout:g} s (is it a dask scheduler?)") from None
    except OSError as exc:
        raise SchedulerError(f"{address!r} closed the connection during the dask handshake ({exc})") from None
    (n_frames,) = struct.unpack_from("<Q", body)
    if not 1 <= n_frames <= 64 or 8 + 8 * n_frames > total:
        raise SchedulerError(not_dask)
    lengths = struct.unpack_from(f"<{n_frames}Q", body, 8)
    if 8 + 8 * n_frames + sum(lengths) != total:
        raise SchedulerError(not_dask)
    import msgpack

    offset = 8 + 8 * n_frames
    for length in lengths:
        try:
            value = msgpack.unpackb(body[offset:offset + length])
        except Exception:  # noqa: BLE001 - any decoding failure means "not dask"
            value = None
        if isinstance(value, dict) and "python" in value and "compression" in value:
            return
        offset += length
    raise SchedulerError(not_dask)


class DaskExecutor:
    """``distributed.Client.get_executor`` with ``shutdown(cancel_futures=...)`` semantics.

    An address is checked first (:func:`check_scheduler_address`), the client connects with
    ``timeout=SCHEDULER_TIMEOUT_S`` and then waits as long for at least one worker."""

    def __init__(self, scheduler: Any):
        import distributed

        if isinstance(scheduler, str):
            check_scheduler_address(scheduler)
            try:
                client = distributed.Client(scheduler, timeout=SCHEDULER_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                raise SchedulerError(f"cannot connect to scheduler {scheduler!r}: {exc}") from None
            self._client, self._own = client, True
        else:
            self._client, self._own = scheduler, False
        try:
            self._client.wait_for_workers(1, timeout=SCHEDULER_TIMEOUT_S)
        except (OSError, TimeoutError):
            if self._own:
                self._client.close()
            where = scheduler if isinstance(scheduler, str) else _client_address(self._client)
            raise SchedulerError(f"scheduler {where} has no worker "
                                 f"(none joined within {SCHEDULER_TIMEOUT_S:g} s)") from None
        self.address = scheduler if isinstance(scheduler, str) else _client_address(self._client)
        self._executor = self._client.get_executor(pure=False)
        self.capacity = 2 * max(1, sum(self._client.nthreads().values()))
        self._workerless_since: float | None = None

    def workerless_for(self) -> float:
        """Seconds the scheduler has had no worker (0 while it has one; unreachable counts as none)."""
        try:
            n_workers = len(self._client.scheduler_info().get("workers", {}))
        except Exception:  # noqa: BLE001 - a scheduler that cannot answer has no usable worker either
            n_workers = 0
        now = time.monotonic()
        if n_workers:
            self._workerless_since = None
            return 0.0
        if self._workerless_since is None:
            self._workerless_since = now
        return now - self._workerless_since

    def submit(self, fn, /, *args):
        return self._executor.submit(fn, *args)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        try:
            self._executor.shutdown(wait=wait and not cancel_futures)
        finally:
            if self._own:
                self._client.close()


def _client_address(client: Any) -> str:
    """The scheduler address of a ``distributed.Client`` (its ``scheduler`` is None before it connects)."""
    rpc = getattr(client, "scheduler", None)
    return str(getattr(rpc, "address", None) or getattr(getattr(client, "cluster", None), "scheduler_address", None)
               or "(unknown address)")


def make_executor(workers: int, scheduler: Any, mp_context: Any) -> tuple[Any, int]:
    """The executor and how many points it may hold in flight."""
    if scheduler is not None:
        executor = DaskExecutor(scheduler)
        return executor, executor.capacity
    if workers == 1:
        return SerialExecutor(), 1
    if mp_context is None and os.environ.get("NUMBA_THREADING_LAYER", "").lower() in ("omp", "tbb"):
        # forking a process whose OpenMP/TBB pool is running is fatal (GNU OpenMP aborts the child)
        mp_context = multiprocessing.get_context("forkserver")
    threads = max(1, (os.cpu_count() or 1) // workers)
    method = (mp_context or multiprocessing.get_context()).get_start_method()
    if _sharing_here():
        kept = _SHARED.pools.get((workers, method))
        if kept is None:
            kept = _SHARED.pools[(workers, method)] = _KeptPool(_new_pool(workers, threads, method, mp_context),
                                                                (workers, method))
        return kept, 2 * workers
    return _new_pool(workers, threads, method, mp_context), 2 * workers


def _new_pool(workers: int, threads: int, method: str, mp_context: Any) -> ProcessPoolExecutor:
    parent = os.getpid() if method == "fork" else None  # forkserver/spawn workers have another parent
    return ProcessPoolExecutor(max_workers=workers, mp_context=mp_context, initializer=init_worker,
                               initargs=(threads, parent))


class _SharedState:
    """The pools kept by :func:`shared_pools`, by (workers, start method), and the process that
    keeps them (a forked worker inherits this module's state but must not use its parent's pools)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.depth = 0
        self.owner: int | None = None
        self.pools: dict[tuple[int, str], _KeptPool] = {}


_SHARED = _SharedState()


def _sharing_here() -> bool:
    return _SHARED.depth > 0 and _SHARED.owner == os.getpid()


class _KeptPool(Executor):
    """A process pool that a clean end of a sweep leaves running for the next one.

    The driver ends a sweep with ``shutdown(wait=True, cancel_futures=not clean)``: a clean end keeps
    the workers; an interrupted sweep or a broken pool (``cancel_futures=True``, after
    :func:`stop_workers`) shuts them down and drops the pool, so the next sweep starts new ones."""

    def __init__(self, pool: ProcessPoolExecutor, key: tuple[int, str]) -> None:
        self.pool, self.key = pool, key

    @property
    def _processes(self) -> Any:  # what stop_workers terminates
        return getattr(self.pool, "_processes", None)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return self.pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if not cancel_futures:
            return
        if _SHARED.pools.get(self.key) is self:
            del _SHARED.pools[self.key]
        self.pool.shutdown(wait=wait, cancel_futures=True)


@contextlib.contextmanager
def shared_pools() -> Iterator[None]:
    """Keep local process pools between the sweeps run inside this context (a report's experiments).

    Each sweep with the same worker count and start method reuses the workers of the previous one, so
    a report starts, initialises (:func:`init_worker`) and loads compiled kernels into its workers once
    instead of once per experiment; results do not depend on which worker runs a point.  The pools
    are shut down on leaving (their workers stopped at once when leaving by an exception).  Nested
    contexts share the outer one's pools; in a forked worker the parent's pools are never used."""
    if _SHARED.depth and _SHARED.owner != os.getpid():  # a forked child: start afresh
        _SHARED.reset()
    _SHARED.depth += 1
    _SHARED.owner = os.getpid()
    clean = False
    try:
        yield
        clean = True
    finally:
        _SHARED.depth -= 1
        if _SHARED.depth == 0:
            pools, _SHARED.pools = list(_SHARED.pools.values()), {}
            for kept in pools:
                if not clean:
                    stop_workers(kept)
                kept.pool.shutdown(wait=True, cancel_futures=not clean)


def _process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process, from ``/proc/<pid>/stat`` (0 where unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    # fields[0] is the state (field 3); utime and stime are fields 14 and 15, in clock ticks
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def shared_workers_cpu_seconds() -> float:
    """CPU seconds so far of the live workers of the pools :func:`shared_pools` keeps: not yet counted
    by ``getrusage(RUSAGE_CHILDREN)``, which counts a child only once it has ended (Linux; 0 where
    ``/proc`` is absent)."""
    if not _sharing_here():
        return 0.0
    return sum(_process_cpu_seconds(pid) for kept in list(_SHARED.pools.values())
               for pid in list((kept._processes or {}).keys()))


def stop_workers(executor: Any) -> None:
    """Terminate a process pool's workers now (an interrupt must not wait for running points)."""
    processes = dict(getattr(executor, "_processes", None) or {})
    for proc in processes.values():
        try:
            proc.terminate()
        except (OSError, AttributeError):
            pass
    for proc in processes.values():
        try:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        except (OSError, AttributeError, ValueError, AssertionError):
            pass


def check_picklable(fn: Callable) -> None:
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise ValueError(
            f"fn must be a picklable top-level function for a process pool "
            f"(or use workers=1): {exc}"
        ) from None


def future_outcome(future: Future) -> _PointOutcome:
    """The worker's outcome, or an error outcome when the executor itself failed the task."""
    try:
        return future.result()
    except Exception:
        now = time.time()
        return _PointOutcome("error", None, traceback.format_exc(), now, now, 0.0, "executor")

