"""The one vocabulary of backends: what each ``backend=`` string runs, and whether it works here.

A :class:`Backend` names the arrays it computes on (NumPy or CuPy, CPU or CUDA device) and the
*flavour* of kernel source it runs; every ``backend=`` argument, CLI flag and the ``backend`` test
fixture is one of the names of :data:`REGISTRY`, resolved for a kernel family by
:func:`resolve_backend`:

==================  ======  ======  ==============  ===============================================
name                arrays  device  flavour         what runs
==================  ======  ======  ==============  ===============================================
``numpy``           numpy   cpu     python-numpy    vectorised NumPy; the reference of every test
``blas``            numpy   cpu     numpy-blas      hand-written batched NumPy/BLAS (matmul, einsum);
                                                    no generated source (the attention layer)
``numba``           numpy   cpu     python-numba    ``numba.njit(parallel=True, cache=True)`` loops
``numba-cuda``      cupy    cuda    python-cuda     ``numba.cuda.jit`` kernels on a real GPU (Numba device
                                                    arrays, kernels only, where CuPy is missing)
``numba-cuda-sim``  numpy   cpu     python-cuda     the same kernels in Numba's CUDA simulator (set
                                                    ``NUMBA_ENABLE_CUDASIM=1`` before Numba is
                                                    imported); slow, for correctness tests only
``cupy``            cupy    cuda    cuda-c          CUDA C (SymPy's C99 printer) in a CuPy RawModule
==================  ======  ======  ==============  ===============================================

Availability comes from the status probes below (cached per process): the reason is stated either way.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from typing import Callable, Collection, Iterator, Mapping

from transformer_limits.numeric.flavours import (CUDA_C, GENERATED_FLAVOURS, NUMPY_BLAS, PYTHON_CUDA, PYTHON_NUMBA,
                                                 PYTHON_NUMPY, Flavour)

__all__ = ["Backend", "BackendStatus", "REGISTRY", "BACKENDS", "FLOAT32_BACKENDS", "GENERATED_FLAVOURS",
           "backend_status", "available_backends", "resolve_backend", "cuda_simulator_active"]


@dataclass(frozen=True)
class Backend:
    """One ``backend=`` string: the array module its runtime keeps state in (``numpy`` | ``cupy``; a
    ``numba-cuda`` runtime without CuPy keeps Numba device arrays), device (``cpu`` | ``cuda``) and the
    :class:`~transformer_limits.numeric.flavours.Flavour` of kernel source it runs; :attr:`available`
    and :attr:`reason` come from the status probes."""

    name: str
    array_module: str
    device: str
    flavour: Flavour
    summary: str

    @property
    def precisions(self) -> tuple[str, ...]:
        """The precisions this backend computes in (its flavour's)."""
        return self.flavour.precisions

    @property
    def status(self) -> BackendStatus:
        """This backend's probe result in this process (cached)."""
        return _status_by_name()[self.name]

    @property
    def available(self) -> bool:
        """Whether the backend works here."""
        return self.status.available

    @property
    def reason(self) -> str:
        """Why it works here, or why not (one line)."""
        return self.status.reason


#: every backend, by name (the one vocabulary)
REGISTRY: dict[str, Backend] = {b.name: b for b in (
    Backend("numpy", "numpy", "cpu", PYTHON_NUMPY, "vectorised NumPy (reference)"),
    Backend("blas", "numpy", "cpu", NUMPY_BLAS, "hand-written batched NumPy/BLAS, no generated source"),
    Backend("numba", "numpy", "cpu", PYTHON_NUMBA, "numba.njit loops, parallel over tokens"),
    Backend("numba-cuda", "cupy", "cuda", PYTHON_CUDA, "numba.cuda.jit kernels on a GPU"),
    Backend("numba-cuda-sim", "numpy", "cpu", PYTHON_CUDA, "numba.cuda.jit kernels in Numba's CUDA simulator"),
    Backend("cupy", "cupy", "cuda", CUDA_C, "CUDA C in a CuPy RawModule"),
)}

#: backends that run generated kernel source (the ``backend`` test fixture, ``transformer-limits info``)
BACKENDS = tuple(name for name, b in REGISTRY.items() if b.flavour.generated)
#: backends that compute in float32 when asked (their flavour's precisions: numpy, blas, numba, cupy); the others
#: (the python-cuda ones) are float64 only
FLOAT32_BACKENDS = tuple(name for name, b in REGISTRY.items() if "float32" in b.precisions)


@dataclass(frozen=True)
class BackendStatus:
    """Whether backend ``name`` works here: its version if it does, and the reason either way."""

    name: str
    available: bool
    version: str | None
    reason: str


def cuda_simulator_active() -> bool:
    """True when Numba's CUDA simulator replaces the real CUDA target in this process."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def _numba() -> BackendStatus:
    try:
        import numba
    except Exception as exc:  # pragma: no cover - numba is a hard dependency
        return BackendStatus("numba", False, None, f"cannot import numba: {exc}")
    return BackendStatus("numba", True, numba.__version__, "CPU JIT (parallel over tokens)")


def _numba_cuda_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("numba-cuda")
    except Exception:
        return None


def _numba_cuda() -> BackendStatus:
    ver = _numba_cuda_version()
    if cuda_simulator_active():
        return BackendStatus("numba-cuda", False, ver,
                             "NUMBA_ENABLE_CUDASIM=1: the simulator replaces the GPU in this process")
    if ver is None and importlib.util.find_spec("numba.cuda") is None:
        return BackendStatus("numba-cuda", False, None, "numba-cuda not installed (pip install '.[gpu]')")
    try:
        from numba import cuda

        if cuda.is_available():
            name = cuda.get_current_device().name
            name = name.decode() if isinstance(name, bytes) else name
            return BackendStatus("numba-cuda", True, ver, f"GPU: {name}")
        return BackendStatus("numba-cuda", False, ver, "no CUDA driver or GPU found")
    except Exception as exc:
        return BackendStatus("numba-cuda", False, ver, f"CUDA initialisation failed: {exc}".splitlines()[0])


def _numba_cuda_sim() -> BackendStatus:
    ver = _numba_cuda_version()
    if ver is None:
        return BackendStatus("numba-cuda-sim", False, None,
                             "numba-cuda not installed (pip install '.[test]' or '.[cudasim]')")
    if cuda_simulator_active():
        return BackendStatus("numba-cuda-sim", True, ver, "active (NUMBA_ENABLE_CUDASIM=1)")
    return BackendStatus("numba-cuda-sim", False, ver,
                         "installed; set NUMBA_ENABLE_CUDASIM=1 before start-up to use it")


def _cupy() -> BackendStatus:
    if importlib.util.find_spec("cupy") is None:
        return BackendStatus("cupy", False, None, "cupy not installed (pip install '.[gpu]')")
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
        if n < 1:
            return BackendStatus("cupy", False, cupy.__version__, "no CUDA device")
        return BackendStatus("cupy", True, cupy.__version__, f"{n} CUDA device(s)")
    except Exception as exc:
        return BackendStatus("cupy", False, None, f"cupy unusable: {exc}".splitlines()[0])


def _numpy() -> BackendStatus:
    import numpy

    return BackendStatus("numpy", True, numpy.__version__, "reference backend")


def _blas() -> BackendStatus:
    import numpy

    return BackendStatus("blas", True, numpy.__version__, "NumPy with its BLAS")


#: one probe per backend name
_PROBES: dict[str, Callable[[], BackendStatus]] = {
    "numpy": _numpy, "blas": _blas, "numba": _numba, "numba-cuda": _numba_cuda,
    "numba-cuda-sim": _numba_cuda_sim, "cupy": _cupy}


class _LazyStatuses(Mapping[str, BackendStatus]):
    """Backend name -> status, each probed on first use and cached for the process: a CPU run asks
    for its own backend only, so it never imports CuPy or initialises a CUDA driver (which would
    also make later forked sweep workers unsafe)."""

    def __init__(self) -> None:
        self._cache: dict[str, BackendStatus] = {}

    def __getitem__(self, name: str) -> BackendStatus:
        if name not in self._cache:
            self._cache[name] = _PROBES[name]()
        return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_PROBES)

    def __len__(self) -> int:
        return len(_PROBES)


_STATUSES = _LazyStatuses()


def _status_by_name() -> Mapping[str, BackendStatus]:
    return _STATUSES


def backend_status() -> tuple[BackendStatus, ...]:
    """Status of every backend in ``BACKENDS`` (each probed once per process)."""
    statuses = _status_by_name()
    return tuple(statuses[name] for name in BACKENDS)


def resolve_backend(backend: object, flavours: Collection[Flavour], family: str) -> Backend:
    """The :class:`Backend` named ``backend`` for a kernel family that has ``flavours``.

    ValueError (naming ``backend``) for an unknown name, a backend not usable here (with the probe's
    reason) or a backend whose flavour the family lacks (listing the backends it supports).
    """
    if not isinstance(backend, str) or backend not in REGISTRY:
        raise ValueError(f"unknown backend {backend!r} (known: {', '.join(REGISTRY)})")
    b = REGISTRY[backend]
    if b.flavour not in flavours:
        supported = [n for n, o in REGISTRY.items() if o.flavour in flavours]
        raise ValueError(f"backend {backend!r} is not supported by {family} "
                         f"(supported: {', '.join(supported)})")
    if not b.available:
        raise ValueError(f"backend {backend!r} is not usable here: {b.reason}")
    return b


def available_backends() -> list[str]:
    """Names of the backends that work in this process (``numpy`` always)."""
    return [s.name for s in backend_status() if s.available]


def nvcc_path() -> str | None:
    """Path of ``nvcc`` if on PATH (generated CUDA C is then compiled to PTX in the tests)."""
    return shutil.which("nvcc")
