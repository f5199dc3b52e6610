"""Device arrays and kernel launches of the GPU backends, with a count of every host <-> device copy.

One :class:`DeviceArrays` per GPU backend of :data:`transformer_limits.numeric.backends.REGISTRY`
says where a simulator keeps its state and how it launches generated kernels:

==================  ============================  ============================================
backend             device arrays                 array arithmetic (:attr:`DeviceArrays.xp`)
==================  ============================  ============================================
``cupy``            CuPy arrays                   CuPy
``numba-cuda``      CuPy arrays where CuPy        CuPy (Numba kernels take CuPy arrays through
                    imports, else Numba device    the CUDA array interface); None without CuPy:
                    arrays                        kernels only
``numba-cuda-sim``  NumPy arrays (the simulator   NumPy
                    runs kernels on host memory)
==================  ============================  ============================================

Every :meth:`~DeviceArrays.put` (host -> device) and :meth:`~DeviceArrays.get` (device -> host) is
counted, also for the simulator (where it is a copy), so that a test can show a simulator keeps its
state on the device for a whole run: inside ``with count_transfers() as log:`` the number of copies
is ``log.to_device`` / ``log.to_host`` (and their bytes), whichever backend ran.

Launches are one-dimensional, ``THREADS`` threads per block; a launch of zero threads does
nothing (an empty problem).  ``cuda-c`` kernels (CuPy ``RawModule``) get Python integers as
``long long``, flags as ``int`` and Python floats as the source's ``real`` (``precision``).
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from transformer_limits.numeric.backends import REGISTRY
from transformer_limits.numeric.precision import DTYPES, resolve_precision

__all__ = ["THREADS", "TransferLog", "DeviceArrays", "count_transfers", "device_arrays"]

#: threads per block of every 1-D launch
THREADS = 128


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
    """Count every :meth:`DeviceArrays.put` / :meth:`DeviceArrays.get` in the block (nestable)."""
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


class DeviceArrays:
    """Device arrays, copies and launches of GPU backend ``backend`` (see the module docstring) at
    ``precision`` (``float64`` | ``float32``: the dtype of :meth:`empty`, :meth:`zeros`, :meth:`put`
    of float arrays, and of float launch arguments)."""

    def __init__(self, backend: str, precision: str = "float64"):
        if backend not in REGISTRY or REGISTRY[backend].flavour not in ("python-cuda", "cuda-c"):
            gpu = ", ".join(n for n, b in REGISTRY.items() if b.flavour in ("python-cuda", "cuda-c"))
            raise ValueError(f"backend must be a GPU backend ({gpu}), got {backend!r}")
        resolve_precision(precision)
        self.backend, self.precision = backend, precision
        self.dtype: np.dtype = DTYPES[precision]
        self.flavour = REGISTRY[backend].flavour
        self.xp: Any
        if backend == "numba-cuda-sim":
            self.storage, self.xp = "simulator", np
        elif backend == "cupy" or importlib.util.find_spec("cupy") is not None:  # pragma: no cover - GPU
            import cupy

            self.storage, self.xp = "cupy", cupy
        else:  # pragma: no cover - GPU without CuPy
            self.storage, self.xp = "numba", None

    # ------------------------------------------------------------------ arrays
    @property
    def has_array_ops(self) -> bool:
        """Whether device arrays support NumPy-style arithmetic (``xp``), not only kernels."""
        return self.xp is not None

    def _cast(self, a: Any) -> np.ndarray:
        a = np.asarray(a)
        if a.dtype.kind == "f":  # integer and boolean arrays keep their dtype
            a = a.astype(self.dtype, copy=False)
        return np.ascontiguousarray(a)

    def put(self, a: Any) -> Any:
        """Host array -> a new device array (float arrays in ``dtype``); one counted copy."""
        host = self._cast(a)
        _record("to_device", host.nbytes)
        if self.storage == "simulator":
            return host.copy()
        if self.storage == "cupy":  # pragma: no cover - GPU
            return self.xp.asarray(host)
        from numba import cuda  # pragma: no cover - GPU

        return cuda.to_device(host)  # pragma: no cover - GPU

    def get(self, a: Any) -> np.ndarray:
        """Device array -> a new host NumPy array; one counted copy."""
        if self.storage == "simulator":
            host = np.array(a, copy=True)
        elif self.storage == "cupy":  # pragma: no cover - GPU
            host = self.xp.asnumpy(a)
        else:  # pragma: no cover - GPU
            host = a.copy_to_host()
        _record("to_host", host.nbytes)
        return host

    def empty(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """Uninitialised device array (dtype default ``dtype``)."""
        dt = self.dtype if dtype is None else np.dtype(dtype)
        if self.storage == "simulator":
            return np.empty(shape, dtype=dt)
        if self.storage == "cupy":  # pragma: no cover - GPU
            return self.xp.empty(shape, dtype=dt)
        from numba import cuda  # pragma: no cover - GPU

        return cuda.device_array(shape, dtype=dt)  # pragma: no cover - GPU

    def zeros(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        """Zero-filled device array (dtype default ``dtype``); an allocation, not a counted copy."""
        dt = self.dtype if dtype is None else np.dtype(dtype)
        if self.storage == "numba":  # pragma: no cover - GPU without CuPy
            from numba import cuda

            return cuda.to_device(np.zeros(shape, dtype=dt))
        return self.xp.zeros(shape, dtype=dt)

    # ------------------------------------------------------------------ launches
    def launch(self, module: Any, name: str, threads: int, *args: Any) -> None:
        """Run kernel ``name`` of ``module`` (a Numba CUDA module or a CuPy RawModule) with at least
        ``threads`` threads in blocks of ``THREADS``; nothing for ``threads == 0``."""
        if threads < 0:
            raise ValueError(f"threads must be >= 0, got {threads}")
        if threads == 0:
            return
        blocks = -(-threads // THREADS)
        if self.flavour == "python-cuda":
            getattr(module, name)[blocks, THREADS](*args)
            return
        module.get_function(name)((blocks,), (THREADS,), self.c_arguments(args))  # pragma: no cover

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


def device_arrays(backend: str, precision: str = "float64") -> DeviceArrays:
    """:class:`DeviceArrays` of ``backend`` at ``precision`` (ValueError naming either if unknown)."""
    return DeviceArrays(backend, precision)
