"""The runtime of a backend: where arrays live, how they are copied and how kernels are run.

One :class:`Runtime` per ``(backend, precision)`` (every backend of
:data:`transformer_limits.numeric.backends.REGISTRY`, the CPU ones included) puts array creation,
host <-> device copies, kernel launches and synchronisation behind one interface, in the spirit of
POT's backend: a simulator loop is written once against a runtime (``rt.xp`` for array arithmetic,
``rt.put`` / ``rt.get`` at its ends, ``rt.call`` for a generated kernel) and runs on the host and on
the device alike.  Storage follows ``Backend.array_module`` and the flavour's ``on_device``:

==================  ==========  ============================  ============================================
backend             storage     arrays                        array arithmetic (:attr:`Runtime.xp`)
==================  ==========  ============================  ============================================
``numpy``, ``blas``,  host      NumPy arrays; put/get are     NumPy
``numba``                       casts, not counted copies
``numba-cuda-sim``  simulator   NumPy arrays (the simulator   NumPy
                                runs kernels on host memory)
``cupy``            cupy        CuPy arrays                   CuPy
``numba-cuda``      cupy        CuPy arrays where CuPy        CuPy (Numba kernels take CuPy arrays through
                    (numba)     imports, else Numba device    the CUDA array interface); None without CuPy:
                                arrays                        kernels only
==================  ==========  ============================  ============================================

Every device :meth:`~Runtime.put` (host -> device) and :meth:`~Runtime.get` (device -> host) is
counted, also for the simulator (where it is a copy), so that a test can show a simulator keeps its
state on the device for a whole run: inside ``with count_transfers() as log:`` the number of copies
is ``log.to_device`` / ``log.to_host`` (and their bytes), whichever backend ran.

**One calling convention.**  :meth:`Runtime.call` runs kernel ``name`` of a loaded module the way its
flavour is run (``Flavour.launch``): a Python call on the host, ``kernel[blocks, THREADS](...)`` for
``python-cuda``, ``module.get_function(name)(grid, block, args)`` for ``cuda-c`` with the arguments as
C takes them (:meth:`Runtime.c_arguments`) and the problem ``sizes`` appended (``Flavour.takes_sizes``:
C has no array shapes).  A float32 launch of a typed host flavour (``python-numba``'s float32 source)
gets its float scalar arguments (beta, sigma_u, ...) as ``float32``, as CUDA C gets them as ``real``:
Numba would type a Python float as float64 and promote every expression it enters.  Launches are
one-dimensional, ``THREADS`` threads per block, or two-dimensional (``threads=(nx, ny)``) in blocks of
``THREADS_2D``; zero threads launch nothing.
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from transformer_limits.numeric.backends import REGISTRY, Backend
from transformer_limits.numeric.precision import DTYPES, resolve_precision

__all__ = ["THREADS", "THREADS_2D", "TransferLog", "Runtime", "count_transfers", "runtime_of"]

#: threads per block of every 1-D launch
THREADS = 128
#: threads per block of every 2-D launch (e.g. the attention pair kernels: one thread per (query, atom))
THREADS_2D = (16, 16)


@dataclass
class TransferLog:
    """Host <-> device copies counted inside :func:`count_transfers`."""

    to_device: int = 0
    to_host: int = 0
    bytes_to_device: int = 0
    bytes_to_host: int = 0


_LOGS: ContextVar[tuple[TransferLog, ...]] = ContextVar("transformer_limits_transfer_logs", default=())


@contextmanager
def count_transfers() -> Iterator[TransferLog]:
    """Count every device :meth:`Runtime.put` / :meth:`Runtime.get` in the block (nestable)."""
    log = TransferLog()
    token = _LOGS.set(_LOGS.get() + (log,))
    try:
        yield log
    finally:
        _LOGS.reset(token)


def _record(direction: str, nbytes: int) -> None:
    for log in _LOGS.get():
        if direction == "to_device":
            log.to_device += 1
            log.bytes_to_device += nbytes
        else:
            log.to_host += 1
            log.bytes_to_host += nbytes


class Runtime:
    """Arrays, copies, launches and synchronisation of backend ``backend`` (a name of ``REGISTRY``) at
    ``precision`` (``float64`` | ``float32``, one of the backend's flavour's precisions: the dtype of
    :meth:`empty`, :meth:`zeros`, :meth:`put` of float arrays, and of float launch arguments).
    ValueError naming ``backend`` or ``precision`` for an unknown one or a precision the backend's
    kernels do not compute in."""

    def __init__(self, backend: str, precision: str = "float64"):
        if not isinstance(backend, str) or backend not in REGISTRY:
            raise ValueError(f"unknown backend {backend!r} (known: {', '.join(REGISTRY)})")
        resolve_precision(precision)
        b: Backend = REGISTRY[backend]
        if precision not in b.precisions:
            raise ValueError(f"precision {precision!r} is not available on backend {backend!r} (its "
                             f"{b.flavour.name} kernels compute in {', '.join(b.precisions)} only)")
        self.backend, self.precision, self.record = backend, precision, b
        self.dtype: np.dtype = DTYPES[precision]
        self.flavour = b.flavour
        self.on_device = b.flavour.on_device
        # host kernels generated for this precision take float scalars in it (see Runtime.call)
        self._cast_scalars = b.flavour.typed_sources and precision != "float64" and b.flavour.launch == "call"
        self.xp: Any
        if not self.on_device:
            self.storage, self.xp = "host", np
        elif b.array_module == "numpy":
            self.storage, self.xp = "simulator", np
        elif backend == "cupy" or importlib.util.find_spec("cupy") is not None:  # pragma: no cover - GPU
            import cupy

            self.storage, self.xp = "cupy", cupy
        else:  # pragma: no cover - GPU without CuPy
            self.storage, self.xp = "numba", None

    def __repr__(self) -> str:
        return f"Runtime({self.backend!r}, {self.precision!r})"

    # ------------------------------------------------------------------ arrays
    @property
    def has_array_ops(self) -> bool:
        """Whether the runtime's arrays support NumPy-style arithmetic (``xp``), not only kernels."""
        return self.xp is not None

    def _cast(self, a: Any) -> np.ndarray:
        a = np.asarray(a)
        if a.dtype.kind == "f":  # integer and boolean arrays keep their dtype
            a = a.astype(self.dtype, copy=False)
        return np.ascontiguousarray(a)

    def put(self, a: Any) -> Any:
        """Host array -> a new array of this runtime (float arrays in ``dtype``, C-contiguous); on a
        device one counted copy, on the host a private copy (a loop may write into it)."""
        host = self._cast(a)
        if self.storage == "host":
            return host.copy() if np.shares_memory(host, np.asarray(a)) else host
        _record("to_device", host.nbytes)
        if self.storage == "simulator":
            return host.copy()
        if self.storage == "cupy":  # pragma: no cover - GPU
            return self.xp.asarray(host)
        from numba import cuda  # pragma: no cover - GPU

        return cuda.to_device(host)  # pragma: no cover - GPU

    def get(self, a: Any) -> np.ndarray:
        """Array of this runtime -> a host NumPy array (on a device a new, counted copy; on the host the
        array itself)."""
        if self.storage == "host":
            return np.asarray(a)
        if self.storage == "simulator":
            host = np.array(a, copy=True)
        elif self.storage == "cupy":  # pragma: no cover - GPU
            host = self.xp.asnumpy(a)
        else:  # pragma: no cover - GPU
            host = a.copy_to_host()
        _record("to_host", host.nbytes)
        return host

    def empty(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """Uninitialised array (dtype default ``dtype``)."""
        dt = self.dtype if dtype is None else np.dtype(dtype)
        if self.storage == "numba":  # pragma: no cover - GPU without CuPy
            from numba import cuda

            return cuda.device_array(shape, dtype=dt)
        return self.xp.empty(shape, dtype=dt)

    def zeros(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """Zero-filled array (dtype default ``dtype``); an allocation, not a counted copy."""
        dt = self.dtype if dtype is None else np.dtype(dtype)
        if self.storage == "numba":  # pragma: no cover - GPU without CuPy
            from numba import cuda

            return cuda.to_device(np.zeros(shape, dtype=dt))
        return self.xp.zeros(shape, dtype=dt)

    def synchronize(self) -> None:
        """Wait for every launched kernel (nothing on the host and in the simulator)."""
        if self.storage == "cupy":  # pragma: no cover - GPU
            self.xp.cuda.Stream.null.synchronize()
        elif self.storage == "numba":  # pragma: no cover - GPU without CuPy
            from numba import cuda

            cuda.synchronize()

    # ------------------------------------------------------------------ launches
    def call(self, module: Any, name: str, threads: int | tuple[int, int], *args: Any,
             sizes: Sequence[int] = ()) -> Any:
        """Run kernel ``name`` of ``module`` (a loaded kernel family: Python module, Numba CUDA module
        or CuPy RawModule) on ``args`` the way the flavour runs it (see the module docstring):
        ``threads`` work items (an int, or ``(nx, ny)`` for a 2-D launch), ``sizes`` appended for
        flavours that take them.  Host flavours return what the kernel returns; launches return None."""
        launch = self.flavour.launch
        tail = tuple(sizes) if self.flavour.takes_sizes else ()
        if launch == "call":
            if self._cast_scalars:  # a float64 scalar would promote a float32 kernel halfway
                args = tuple(self.dtype.type(a) if isinstance(a, (float, np.floating)) else a for a in args)
            return getattr(module, name)(*args, *tail)
        dims = (threads,) if isinstance(threads, (int, np.integer)) else tuple(threads)
        if any(int(t) < 0 for t in dims):
            raise ValueError(f"threads must be >= 0, got {threads}")
        if any(int(t) == 0 for t in dims):
            return None
        block = (THREADS,) if len(dims) == 1 else THREADS_2D
        if len(dims) != len(block):
            raise ValueError(f"threads must be an int or a pair (nx, ny), got {threads!r}")
        grid = tuple(-(-int(t) // b) for t, b in zip(dims, block))
        if launch == "grid":
            getattr(module, name)[grid if len(grid) > 1 else grid[0], block if len(block) > 1 else block[0]](*args)
            return None
        module.get_function(name)(grid, block, self.c_arguments(args + tail))  # pragma: no cover - GPU
        return None

    def c_arguments(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The arguments of a CUDA C launch as its parameters take them: flags (bool) as ``int``, integers
        as ``long long``, scalars as the source's ``real`` (a NumPy scalar passed as it is would be read
        with the wrong width); arrays must be C-contiguous, and float arrays of this precision (a
        float64 array read as float32 would be garbage, silently)."""
        out: list[Any] = []
        for k, a in enumerate(args):
            if isinstance(a, (bool, np.bool_)):
                out.append(np.int32(a))
            elif isinstance(a, (int, np.integer)):
                out.append(np.int64(a))
            elif isinstance(a, (float, np.floating)):
                out.append(self.dtype.type(a))
            else:
                dtype, flags = getattr(a, "dtype", None), getattr(a, "flags", None)
                if dtype is not None and np.dtype(dtype).kind == "f" and np.dtype(dtype) != self.dtype:
                    raise ValueError(f"argument {k} of a {self.precision} CUDA C launch is a {np.dtype(dtype)} array")
                if flags is not None and not flags.c_contiguous:
                    raise ValueError(f"argument {k} of a CUDA C launch is not C-contiguous")
                out.append(a)
        return tuple(out)


def runtime_of(backend: str, precision: str = "float64") -> Runtime:
    """:class:`Runtime` of ``backend`` at ``precision`` (ValueError naming either if unknown)."""
    return Runtime(backend, precision)
