"""Stated resource limits, checked up front before anything large is allocated or generated.

One place for the numbers (other modules import them; the CLI help texts quote them):

``MAX_BOOTSTRAP_REPLICATES``
    Most bootstrap resamples a fit accepts (10^6).  Percentile intervals at 95 % are stable to
    Monte-Carlo error ~ 1e-3 already at 10^4 replicates; 10^6 leaves two orders of magnitude of room.
``MEMORY_BUDGET_BYTES``
    Largest single working set (2 GiB) a vectorised computation may allocate; estimated before the
    allocation by :func:`check_memory` (e.g. :func:`bootstrap_memory_bytes`).
``MAX_KERNEL_DIMENSION``
    Largest symbolic dimension (d, d_k, d_v) of a generated (fully unrolled) kernel: attention,
    attention layer (numba backend) and flow-Taylor jet (16).  Source size grows like d·d_k·d_v and
    SymPy's common-subexpression pass faster; measured with d = d_k = d_v (``docs/codegen.md``):
    attention NumPy + Numba sources 0.4 s at 8, 1.5 s at 16, 10 s at 32, 69 s (2.9 MB) at 64; layer
    adjoint 0.9 s, 5.2 s, 239 s at 8, 16, 32; jet 0.5 s, 2.1 s at 8, 16.  Numba's first compilation
    adds more (55 s attention, 167 s layer at 8; over 10 min each at 16, on a 2-core machine at
    load ~10).  Every experiment,
    benchmark default and test uses dimensions <= 8 (the BLAS layer backend, which generates
    nothing, is not capped).

Violations raise ``ValueError`` naming the argument, with a one-line message (the CLI turns it into
exit code 2).
"""

from __future__ import annotations

import numbers
from typing import Any
from transformer_limits.errors import InputError  # a ValueError: bad input (exit 2), never a crash

__all__ = [
    "MAX_BOOTSTRAP_REPLICATES",
    "MEMORY_BUDGET_BYTES",
    "MAX_KERNEL_DIMENSION",
    "BOOTSTRAP_BYTES_PER_CELL",
    "format_bytes",
    "check_memory",
    "bootstrap_memory_bytes",
    "check_bootstrap",
    "check_kernel_dimensions",
]

#: most bootstrap resamples accepted by a fit (CLI ``--bootstrap``, API ``n_bootstrap``/``n_boot``)
MAX_BOOTSTRAP_REPLICATES = 1_000_000

#: largest working set one vectorised step may allocate (bytes)
MEMORY_BUDGET_BYTES = 2 * 2**30

#: largest d, d_k, d_v of a generated (unrolled) attention / layer / jet kernel
MAX_KERNEL_DIMENSION = 16

#: bytes per (replicate, point) cell of a vectorised bootstrap of a slope: eight float64/int64 arrays
#: of shape (B, n) live at once in a pairs bootstrap (resample indices, resampled x and y, their kept
#: rows, centred x and y, the product) — measured peak 8.2 cells (tests/test_resource_limits.py) —
#: plus a margin of two
BOOTSTRAP_BYTES_PER_CELL = 10 * 8


def format_bytes(nbytes: float) -> str:
    """``1.5 GiB`` style (binary units)."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def check_memory(nbytes: float, what: str, *, budget: int | None = None) -> None:
    """Raise ``ValueError`` if the estimated ``nbytes`` for ``what`` exceed ``budget``
    (default :data:`MEMORY_BUDGET_BYTES`, read at call time).

    ``what`` names the argument that sets the size, e.g. ``"--bootstrap=1000000 on 40 points"``;
    the message is one line."""
    budget = MEMORY_BUDGET_BYTES if budget is None else budget
    if not nbytes <= budget:  # also refuses NaN
        raise InputError(f"{what} would need about {format_bytes(nbytes)} of memory, over the "
                         f"{format_bytes(budget)} budget (transformer_limits.resource_limits)")


def _as_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise InputError(f"{name} must be an integer, got {value!r}")
    return int(value)


def bootstrap_memory_bytes(n_bootstrap: int, n_points: int) -> int:
    """Peak bytes of a vectorised bootstrap of ``n_bootstrap`` resamples of ``n_points`` points."""
    return int(n_bootstrap) * int(n_points) * BOOTSTRAP_BYTES_PER_CELL


def check_bootstrap(n_bootstrap: Any, n_points: int | None = None, *, name: str = "n_bootstrap") -> int:
    """Validate a bootstrap size: an integer in [0, MAX_BOOTSTRAP_REPLICATES] whose working set for
    ``n_points`` points (when given) fits :data:`MEMORY_BUDGET_BYTES`.  Returns it as ``int``."""
    n = _as_count(name, n_bootstrap)
    if n < 0:
        raise InputError(f"{name} must be >= 0, got {n}")
    if n > MAX_BOOTSTRAP_REPLICATES:
        raise InputError(f"{name} must be <= {MAX_BOOTSTRAP_REPLICATES} (the stated bootstrap limit), got {n}")
    if n_points is not None:
        check_memory(bootstrap_memory_bytes(n, n_points), f"{name}={n} on {int(n_points)} points")
    return n


def check_kernel_dimensions(**dims: Any) -> tuple[int, ...]:
    """Validate generated-kernel dimensions (e.g. ``d=8, d_k=8, d_v=8``): positive integers at most
    :data:`MAX_KERNEL_DIMENSION`, checked before any code is generated.  Returns them as ints."""
    out = []
    for name, val in dims.items():
        if isinstance(val, bool) or not isinstance(val, numbers.Integral) or val < 1:
            raise InputError(f"{name} must be a positive integer, got {val!r}")
        n = int(val)
        if n > MAX_KERNEL_DIMENSION:
            raise InputError(f"{name} must be <= {MAX_KERNEL_DIMENSION} (generated kernels are unrolled; "
                             f"stated limit MAX_KERNEL_DIMENSION), got {n}")
        out.append(n)
    return tuple(out)
