"""Host arrays handed out again once nothing outside the pool holds them.

A forward pass through L layers keeps every layer's cache for the adjoint: QF, KT, VT, A (L, H, N, d)
and log Z (L, H, N), 134 MB at N = 256, L = 64, H = 32, d = 8.  Arrays that large come from ``mmap``
(glibc's threshold is at most 32 MiB), so a fresh set per pass costs one page fault per 4 KiB page when
the kernels first write it, and with two threads faulting at once the parallel forward pass took about
twice its time (230 against 120 ms, measured), enough for the launch chooser of
:mod:`transformer_limits.numeric.numba_twins` to prefer the serial twin.  :class:`ReusedArrays` keeps the
arrays it handed out and hands one out again when its reference count says that only the pool still
holds it: the caller dropped the pass (and every view of it: a view references its base array).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["ReusedArrays"]

def _refs(arrays: list[np.ndarray], k: int) -> int:
    """The reference count of ``arrays[k]``, read the same way for the baseline and for every check."""
    return sys.getrefcount(arrays[k])


#: the count :func:`_refs` reads for an array that only its list references (calibrated, not assumed:
#: what the interpreter counts for arguments and temporaries differs between Python versions)
_ONLY_THE_POOL = _refs([np.empty(0)], 0)


class ReusedArrays:
    """``empty(shape, dtype)`` like ``numpy.empty``, but an array of that shape and dtype that nothing
    outside the pool references any more is handed out again (contents undefined, as ``numpy.empty``'s).
    At most ``max_bytes`` of arrays not in use are kept (the oldest are dropped first); arrays in use
    are never touched.  One pool per owner (a layer): arrays are not shared between owners."""

    def __init__(self, max_bytes: int = 1 << 30):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes!r}")
        self.max_bytes = int(max_bytes)
        self._held: list[np.ndarray] = []

    def empty(self, shape: tuple[int, ...], dtype: Any = np.float64) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        for k in range(len(self._held)):
            if (self._held[k].shape == shape and self._held[k].dtype == dtype
                    and _refs(self._held, k) == _ONLY_THE_POOL):
                return self._held[k]
        arr = np.empty(shape, dtype)
        self._held.append(arr)
        self._trim()
        return arr

    def _trim(self) -> None:
        """Drop the oldest arrays not in use while the unused ones exceed ``max_bytes``; forget arrays in
        use beyond that too (their owner frees them), so the list stays short."""
        free = [_refs(self._held, k) == _ONLY_THE_POOL for k in range(len(self._held))]
        unused = sum(a.nbytes for a, f in zip(self._held, free) if f)
        keep: list[np.ndarray] = []
        for arr, is_free in zip(self._held, free):
            if is_free and unused > self.max_bytes:
                unused -= arr.nbytes
                continue
            keep.append(arr)
        self._held = keep[-64:]

    @property
    def held_bytes(self) -> int:
        """Bytes of the arrays the pool holds (in use or not)."""
        return sum(a.nbytes for a in self._held)
