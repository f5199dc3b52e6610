"""Floating-point precision of a run: ``float64`` (the default everywhere) or ``float32``.

float32 is an option for speed (on a GPU, and on the CPU with the numba kernels), never the default:
the rates and constants the package checks are float64 results, and a run in float32 states its
measured error against float64 (:attr:`transformer_limits.verify.experiment.Experiment.precision_probe`).
Which backends compute in float32 is a property of the flavour they run (``Flavour.precisions``,
:mod:`transformer_limits.numeric.flavours`), collected as
:data:`transformer_limits.numeric.backends.FLOAT32_BACKENDS`:

==================  ====================================================================
``numpy``, ``blas`` float32 arrays; NumPy keeps float32 in arithmetic with Python scalars
``numba``           the float32 source of every kernel family (``python-numba`` has
                    ``typed_sources``: every literal a ``numpy.float32`` constant, float32
                    scratch arrays, the float32 ``fast_exp``; its own cache entry), float
                    scalar arguments cast by the runtime; softmax sums accumulate in float32
                    as in the CUDA C float32 compile
``cupy``            the same CUDA C source compiled with ``typedef float real;``
                    (``transformer_limits.numeric.kernel_family.cuda_c_program``)
``numba-cuda(-sim)``float64 only: their kernels' literals are float64, so float32 inputs would be
                    promoted halfway; a float32 run on cuda uses cupy instead
==================  ====================================================================
"""

from __future__ import annotations

import numpy as np

from transformer_limits.numeric.backends import FLOAT32_BACKENDS

__all__ = ["PRECISIONS", "DTYPES", "FLOAT32_BACKENDS", "resolve_precision", "dtype_of"]

#: the values of ``precision=`` and ``--precision``
PRECISIONS = ("float64", "float32")

#: NumPy dtype of each precision
DTYPES: dict[str, np.dtype] = {"float64": np.dtype(np.float64), "float32": np.dtype(np.float32)}


def resolve_precision(precision: object, backend: str | None = None) -> str:
    """``precision`` checked (ValueError naming ``precision``): one of ``PRECISIONS``, and float32
    only on a backend of ``FLOAT32_BACKENDS`` when ``backend`` is given."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "float32" and backend is not None and backend not in FLOAT32_BACKENDS:
        raise ValueError(f"precision 'float32' is not available on backend {backend!r} (float64 only; "
                         f"float32 runs on {', '.join(FLOAT32_BACKENDS)})")
    return precision


def dtype_of(precision: str) -> np.dtype:
    """The NumPy dtype of ``precision`` (ValueError naming ``precision`` if unknown)."""
    return DTYPES[resolve_precision(precision)]
