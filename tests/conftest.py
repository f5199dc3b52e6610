"""Shared test configuration.

* Numba's CUDA simulator must be selected before ``numba.cuda`` is first imported, so it is switched
  on here when the machine has no NVIDIA device: the ``numba-cuda-sim`` backend then runs the real
  generated CUDA kernels on the CPU.
* Hypothesis runs derandomized (fixed examples) so CI never flakes; ``HYPOTHESIS_PROFILE=dev``
  explores fresh random examples locally.
* ``backend`` is the POT-style fixture: a test that takes it runs once per backend, skipped with
  the reason when that backend is not usable here.
* The default run (``python3 -m pytest``: the whole ``testpaths``, the default ``-m`` of addopts, no
  ``-k``/``--lf``) is spread over one pytest-xdist worker per CPU (at most :data:`MAX_WORKERS`),
  ``--dist loadgroup``; a run of chosen files or markers stays in one process (starting workers
  costs more than it saves there), ``-n N`` / ``-n 0`` choose explicitly and
  ``PYTEST_XDIST_AUTO_NUM_WORKERS`` sets the count.  Without pytest-xdist every run is serial.
  Tests that share a module- (or wider-) scoped fixture are put in one xdist group, so the fixture
  is built once, not once per worker.
* After collection the heap built so far is frozen and full garbage collections are spaced
  (``pytest_collection_finish``): each of them rescanned that heap, 11-13 s of a worker's run.
"""

import contextlib
import gc
import os
import signal
import sys

if "NUMBA_ENABLE_CUDASIM" not in os.environ and not os.path.exists("/dev/nvidia0"):
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    if "numba" in sys.modules and "numba.cuda" not in sys.modules:
        # a plugin imported numba before us: make it re-read the environment
        sys.modules["numba"].core.config.reload_config()

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci", derandomize=True, deadline=None, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

from transformer_limits.numeric.backends import BACKENDS, backend_status  # noqa: E402

#: the most xdist workers of the default run: beyond this, worker start-up (each imports NumPy, SymPy,
#: Numba) and the longest single test dominate, and the tests that start worker pools oversubscribe
MAX_WORKERS = 8


def _cpus() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _default_markexpr(config) -> str | None:
    """The ``-m`` expression that addopts sets (pyproject.toml), or None."""
    addopts = list(config.getini("addopts"))
    for i, arg in enumerate(addopts[:-1]):
        if arg == "-m":
            return addopts[i + 1]
    return None


def _is_default_run(config) -> bool:
    """The whole suite with the default markers: no paths or node ids, no -m, -k or --lf of the user's."""
    return (config.args_source == pytest.Config.ArgsSource.TESTPATHS
            and config.option.markexpr == _default_markexpr(config)
            and not config.option.keyword and not getattr(config.option, "lf", False))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Spread the default run over xdist workers (see the module docstring); runs before xdist's own
    ``pytest_cmdline_main`` (a later-registered tryfirst hook), which turns ``numprocesses`` into workers.
    A user's ``-n N`` without ``--dist`` gets ``loadgroup`` too, so shared fixtures stay on one worker."""
    if (not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput")
            or config.option.dist != "no" or config.getoption("usepdb", False)
            or config.getoption("collectonly", False)):
        return
    if config.option.numprocesses is None:
        if not _is_default_run(config):
            return
        env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
        workers = int(env) if env and env.isdigit() else min(_cpus(), MAX_WORKERS)
        if workers <= 1:
            return
        config.option.numprocesses = workers
    if config.option.numprocesses != 0:
        config.option.dist = "loadgroup"
        # pytest-benchmark turns itself off under xdist with a warning from every worker; these tests
        # use no benchmark fixture (benchmarks/ has the benchmarks), so say it once here
        if hasattr(config.option, "benchmark_disable"):
            config.option.benchmark_disable = True


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """Pass the controller's choice to each xdist worker: a worker parses only the user's command line,
    so it would not know about ``loadgroup`` (nor name the groups) otherwise."""
    node.workerinput["tl_dist"] = node.config.option.dist


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    # every test process compiles the generated kernels as a report's processes do (512-bit vectors where
    # the host has AVX-512, numeric/vector_width.py), decided before a test compiles a Numba function of
    # its own: that would fix Numba's target at LLVM's default width for the rest of the worker, which
    # then compiled every kernel it used a second time (10-17 s of a default run, in whichever worker)
    from transformer_limits.numeric.vector_width import prefer_wide_vectors

    prefer_wide_vectors()
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        # W workers on C cores: each worker's BLAS gets C // W threads, as a sweep's workers do
        # (verify/sweeps/executors.py): an OpenBLAS pool of every core in each worker spin-waits against
        # the other workers' after each call.  Numba keeps its threads, so the parallel kernels (not their
        # serial twins) are what the tests run.
        import scipy.linalg  # noqa: F401  (SciPy brings its own OpenBLAS: loaded now, so the limit reaches it)
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=max(1, _cpus() // int(workerinput.get("workercount", 1))), user_api="blas")
    if workerinput is not None and workerinput.get("tl_dist") == "loadgroup":
        config.option.loadgroup = True  # read by xdist's worker when it names the groups of the items
        if hasattr(config.option, "benchmark_disable"):
            config.option.benchmark_disable = True


def pytest_collection_finish(session):
    """Spare the run's full garbage collections the heap built before the first test.

    Everything alive after collection (imported modules, SymPy's, Numba's and hypothesis' caches, the
    collected items) lives until the process ends, yet each full collection scanned it again: 44-51 of
    them per xdist worker, 11-13 s of a worker's 130 s (measured with ``gc.callbacks``).  It goes to the
    collector's permanent generation (what of it becomes garbage later is kept until the process ends:
    memory, not results), and a full collection waits for 100 collections of the middle generation
    instead of 10 (a test's cyclic garbage waits a little longer; reference counting frees everything
    else at once, and tests that need finalizers call ``gc.collect()``).  Full collections: 11-13 -> 5 s
    per worker."""
    gc.freeze()
    gc.set_threshold(700, 10, 100)  # CPython's defaults are (700, 10, 10)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup``: one xdist group per module (or per session fixture) for the tests
    that use a project fixture wider than a function, so that fixture is built on one worker only.
    Runs before xdist's worker hook, which reads the ``xdist_group`` marks."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue  # an explicit group wins (a test has one group: xdist joins several into a new name)
        groups = set()
        info = getattr(item, "_fixtureinfo", None)  # Function items; others use no fixtures
        for defs in (info.name2fixturedefs.values() if info is not None else ()):
            fixturedef = defs[-1]  # the definition the item uses (the closest override)
            if fixturedef.scope == "function" or not fixturedef.baseid:  # "": pytest's and plugins' own
                continue
            if fixturedef.scope in ("module", "class"):
                groups.add(item.nodeid.split("::")[0])
            else:
                groups.add(f"{fixturedef.baseid}::{fixturedef.argname}")
        if groups:
            item.add_marker(pytest.mark.xdist_group(min(groups)))


def _status(name):
    return {s.name: s for s in backend_status()}[name]


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Every kernel backend; skipped (with the reason) where it is not usable."""
    status = _status(request.param)
    if not status.available:
        pytest.skip(f"backend {request.param} unavailable: {status.reason}")
    return request.param


@pytest.fixture
def fresh_kernel_cache(tmp_path, monkeypatch):
    """An empty kernel cache for tests that inspect what gets written."""
    monkeypatch.setenv("TRANSFORMER_LIMITS_CACHE", str(tmp_path / "kcache"))
    return tmp_path / "kcache"


@pytest.fixture
def fake_cuda(monkeypatch):
    """``fake_cuda(*names)``: the CUDA backends ``names`` (numba-cuda, cupy) report usable, the others not
    (this machine may have no GPU: the device-selection tests replace the status probes)."""
    from transformer_limits.numeric import backends
    from transformer_limits.numeric.backends import BackendStatus

    real = dict(backends._status_by_name())

    def install(*names: str) -> None:
        fake = dict(real)
        for name in ("numba-cuda", "cupy"):
            fake[name] = (BackendStatus(name, True, "0", f"fake GPU for {name}") if name in names
                          else BackendStatus(name, False, None, f"{name} faked away"))
        monkeypatch.setattr(backends, "_status_by_name", lambda: fake)
    return install


@pytest.fixture
def registry():
    """Built-ins discovered; afterwards the registry, the plugin errors, the loaded files and the
    modules imported by the test are put back as they were."""
    from transformer_limits.verify import registry as em

    em.list_experiments()
    saved = (dict(em._REGISTRY), dict(em._SOURCES), dict(em._PLUGIN_ERRORS), dict(em._FILE_MODULES),
             set(sys.modules))
    yield em
    em._restore(saved[0], saved[1])
    for store, old in ((em._PLUGIN_ERRORS, saved[2]), (em._FILE_MODULES, saved[3])):
        store.clear()
        store.update(old)
    for name in set(sys.modules) - saved[4]:
        if name.startswith((em._FILE_MODULE_PREFIX, "tlplug_", "em_gbm_example")):
            del sys.modules[name]


@contextlib.contextmanager
def hang_guard(seconds: int = 120):
    """Fail (TimeoutError) instead of hanging when the block has not finished after ``seconds``: a
    liveness guard for code that once hung, generous enough never to measure speed (timings belong
    in benchmarks, never in assertions).  Main thread only (SIGALRM)."""
    def _raise(signum, frame):  # noqa: ARG001 - signal handler API
        raise TimeoutError(f"did not finish within {seconds} s (hang guard)")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
