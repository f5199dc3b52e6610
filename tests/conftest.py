"""Shared test configuration.

* Numba's CUDA simulator must be selected before ``numba.cuda`` is first imported, so it is switched
  on here when the machine has no NVIDIA device: the ``numba-cuda-sim`` backend then runs the real
  generated CUDA kernels on the CPU.
* Hypothesis runs derandomized (fixed examples) so CI never flakes; ``HYPOTHESIS_PROFILE=dev``
  explores fresh random examples locally.
* ``backend`` is the POT-style fixture: a test that takes it runs once per backend, skipped with
  the reason when that backend is not usable here.
"""

import contextlib
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
