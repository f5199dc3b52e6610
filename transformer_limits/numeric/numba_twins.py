"""Serial twins of the ``python-numba`` kernels, and which of the two runs a launch.

Every generated ``python-numba`` kernel is ``numba.njit(parallel=True)`` with ``numba.prange`` over
independent work items (rows, heads, task blocks): each item writes its own outputs, and partial sums
are reduced afterwards in a fixed order.  A parallel launch, though, has a fixed cost: on Numba's
default ``workqueue`` threading layer the caller wakes the pool and waits for it, about 0.1 ms per
launch on a 2-core virtual machine (measured: a 4-token attention layer's ``features`` kernel takes
115 µs as a parallel launch, 0.5 µs serially).  Small problems — the sup-over-inputs ascents of paper
A at N = 4..64 tokens, sweep workers with one Numba thread each — are dominated by that cost.

So each generated source also loads as its **serial twin**: the same text with ``parallel=False``
(``numba.prange`` is then ``range``), stored next to it as ``<stem>_<key>_serial.py`` with its own
Numba cache.  A work item's arithmetic is the same code in both, so the twins agree bit for bit
(tests/test_numba_twins.py checks every family on random inputs), and the choice is a matter of
speed alone:

* one Numba thread (``numba.get_num_threads() == 1``, e.g. a sweep worker): the serial twin;
* else per kernel and launch *shape* (the shapes of its array arguments and its integer arguments):
  the first launch runs serially and is timed; if it took less than :data:`SERIAL_ONLY_S`, that shape
  stays serial (splitting it over threads cannot win back a launch); if it took :data:`PARALLEL_ONLY_S`
  or more, the shape goes parallel (a launch's cost is then below 0.2 % of the work, and timing two
  more serial runs would cost about what a whole parallel run does); otherwise the next launches of
  the shape alternate parallel and serial, :data:`TIMINGS` of each, and the one with the faster best
  time is kept for the shape.  A launch that compiled its kernel (or loaded it from Numba's cache) is
  not a timing: it decides nothing.

:func:`load_twins` returns a :class:`TwinModule`: attribute access gives a :class:`TwinKernel` for each
jitted function (a callable with the parallel kernel's attributes, e.g. ``signatures``) and the
module's other attributes unchanged; :func:`forced` pins every launch to one twin (tests, benchmarks).
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import numpy as np

from transformer_limits import kernel_cache
from transformer_limits.numeric.vector_width import prefer_wide_vectors

__all__ = ["SERIAL_ONLY_S", "PARALLEL_ONLY_S", "TIMINGS", "KINDS", "numba_thread_count", "TwinKernel", "TwinModule",
           "serial_source", "load_twins", "forced"]

#: what :func:`forced` can pin every launch to
KINDS = ("serial", "parallel")
_forced: str | None = None

#: a launch shape whose serial run takes less than this stays serial: a parallel launch costs about
#: 1e-4 s on the workqueue layer, so two threads cannot halve less than 2e-4 s of work profitably
SERIAL_ONLY_S = 2e-4

#: a launch shape whose first serial run takes this long or longer goes parallel at once: the pool's
#: launch cost (about 1e-4 s) is then at most 0.2 % of the work, which split over two threads saves far more
PARALLEL_ONLY_S = 0.05

#: timed launches of each twin before a shape is decided (the best of each counts: one launch is noisy)
TIMINGS = 3

_PARALLEL_DECORATOR = re.compile(r"(@numba\.njit\([^\n]*?)\bparallel=True\b")


def serial_source(source: str) -> str:
    """``source`` with every ``@numba.njit(... parallel=True ...)`` decorator made ``parallel=False``."""
    return _PARALLEL_DECORATOR.sub(r"\1parallel=False", source)


def _launch_shape(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a launch's cost depends on: array shapes and integer arguments (task counts, sizes)."""
    return tuple(a.shape if isinstance(a, np.ndarray) else a if type(a) is int else None for a in args)


_fast_thread_count: Any = None


def numba_thread_count() -> int:
    """``numba.get_num_threads()`` (the calling thread's count, as ``numba.set_num_threads`` left it),
    read without re-entering Numba's pool-launch locks once the pool is up: 0.1 µs instead of 0.6 µs
    a launch."""
    global _fast_thread_count
    if _fast_thread_count is not None:
        return int(_fast_thread_count())
    import numba
    from numba.np.ufunc import parallel

    count = int(numba.get_num_threads())  # launches the pool: Numba's own reader is safe from here on
    if getattr(parallel, "_is_initialized", False):
        _fast_thread_count = getattr(parallel, "_get_num_threads", None)
    return count


class TwinKernel:
    """A parallel kernel and its serial twin, one callable (see the module docstring for the choice)."""

    __slots__ = ("parallel", "serial", "_choice")

    def __init__(self, parallel: Any, serial: Any):
        self.parallel, self.serial = parallel, serial
        #: launch shape -> True (serial) | False (parallel) once decided, else the timings so far
        #: ([serial seconds], [parallel seconds])
        self._choice: dict[tuple[Any, ...], Any] = {}

    def __getattr__(self, name: str) -> Any:  # signatures, py_func, ...: the parallel kernel's
        return getattr(self.parallel, name)

    def __call__(self, *args: Any) -> Any:
        if _forced is not None:
            return (self.serial if _forced == "serial" else self.parallel)(*args)
        if numba_thread_count() == 1:
            return self.serial(*args)
        shape = _launch_shape(args)
        choice = self._choice.get(shape)
        if choice is True:
            return self.serial(*args)
        if choice is False:
            return self.parallel(*args)
        if choice is None:
            timings: tuple[list[float], list[float]] = ([], [])
            choice = self._choice[shape] = timings
        serial_s, parallel_s = choice
        run_serial = len(serial_s) <= len(parallel_s)  # alternate, serial first
        kernel = self.serial if run_serial else self.parallel
        compiled = len(kernel.overloads)
        start = time.perf_counter()
        out = kernel(*args)
        elapsed = time.perf_counter() - start
        if len(kernel.overloads) != compiled:  # this launch compiled (or loaded) the kernel: not a timing
            return out
        (serial_s if run_serial else parallel_s).append(elapsed)
        if len(serial_s) == 1 and not parallel_s:  # the first timing decides alone if short or long
            if elapsed < SERIAL_ONLY_S or elapsed >= PARALLEL_ONLY_S:
                self._choice[shape] = elapsed < SERIAL_ONLY_S
        elif len(parallel_s) == TIMINGS:
            self._choice[shape] = min(serial_s) <= min(parallel_s)
        return out


class TwinModule:
    """A loaded ``python-numba`` source and its serial twin: every jitted function comes back as a
    :class:`TwinKernel` (a serial one too: it may call parallel ones, as MLP_FIELD's ``features`` calls
    ``_activate``), everything else as the module has it."""

    def __init__(self, parallel: ModuleType, serial: ModuleType):
        self.parallel_module, self.serial_module = parallel, serial
        self._kernels: dict[str, TwinKernel] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("parallel_module", "serial_module", "_kernels"):
            raise AttributeError(name)
        value = getattr(self.parallel_module, name)
        if hasattr(value, "targetoptions") and hasattr(value, "overloads"):  # a Numba dispatcher
            value = self._kernels[name] = TwinKernel(value, getattr(self.serial_module, name))
        setattr(self, name, value)  # found by plain attribute lookup from now on (launches are hot)
        return value

    @property
    def __file__(self) -> str:  # the generated source the twins come from
        return str(self.parallel_module.__file__)


_LOADED: dict[Path, TwinModule] = {}


def load_twins(path: Path) -> TwinModule:
    """The generated ``python-numba`` source at ``path`` and its serial twin (written next to it as
    ``<stem>_<key>_serial.py`` on first use), both imported so that Numba's on-disk cache finds them; one
    :class:`TwinModule` per source and process (its launch decisions are kept)."""
    path = Path(path)
    loaded = _LOADED.get(path)
    if loaded is None:
        prefer_wide_vectors()  # before Numba's first compilation in the process (vector_width.py)
        parallel = kernel_cache.load_python_source(path)
        source = serial_source(path.read_text(encoding="utf-8"))
        twin = kernel_cache.write_source(f"{path.stem}_serial{path.suffix}", source)
        loaded = _LOADED[path] = TwinModule(parallel, kernel_cache.load_python_source(twin))
    return loaded


@contextmanager
def forced(kind: str) -> Iterator[None]:
    """Inside the block every twin launch runs ``kind`` (``"serial"`` or ``"parallel"``), whatever the
    shape and thread count: for tests (the twins agree bit for bit) and benchmarks."""
    global _forced
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    before, _forced = _forced, kind
    try:
        yield
    finally:
        _forced = before
