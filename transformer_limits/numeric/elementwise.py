"""Running generated elementwise kernels, and phi, phi' of a named activation without SymPy.

An elementwise kernel ``kernel(IN_x_1, ..., OUT_f_1, ...)`` (template:
:mod:`transformer_limits.symbolic.elementwise_kernels`) sets OUT_f_k[i] = f_k(IN_x_1[i], ...) over
flattened float64 arrays.  :class:`ElementwiseKernel` calls it on equally shaped arrays of any shape
on the backend's device (copies and launch through
:class:`transformer_limits.numeric.runtime.Runtime`) and returns ``{name: array}`` of
that shape.
:func:`elementwise_activation` loads phi and phi' of an activation of docs/theory.md §B.1 (ReLU, tanh,
sigmoid, SiLU, GELU) through the kernel family ``ELEMENTWISE_ACTIVATION``: SymPy only on a cache miss.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from transformer_limits.numeric.backends import REGISTRY
from transformer_limits.numeric.runtime import Runtime
from transformer_limits.numeric.kernel_family import ELEMENTWISE_ACTIVATION

__all__ = ["ElementwiseKernel", "elementwise_activation"]


class ElementwiseKernel:
    """A loaded elementwise kernel on ``backend`` with named inputs and outputs."""

    def __init__(self, module: Any, backend: str, names_in: Sequence[str], names_out: Sequence[str]):
        self.backend, self.names_in, self.names_out = backend, list(names_in), list(names_out)
        self._flavour = REGISTRY[backend].flavour
        self._module = module
        # arrays, copies and kernel calls of every flavour (float64; on the host put/get are casts)
        self._runtime = Runtime(backend)

    def __call__(self, *arrays: Any) -> dict[str, np.ndarray]:
        if len(arrays) != len(self.names_in):
            raise ValueError(f"expected {len(self.names_in)} input arrays ({', '.join(self.names_in)}), "
                             f"got {len(arrays)}")
        arrs = [np.ascontiguousarray(a, dtype=np.float64) for a in arrays]
        shape = arrs[0].shape
        if any(a.shape != shape for a in arrs):
            raise ValueError("input arrays must have the same shape")
        flat = [a.reshape(-1) for a in arrs]
        n = flat[0].shape[0]
        # one path for every flavour (on a GPU one copy in per input, one out per output, a thread per
        # element); the length reaches only the CUDA C kernel, after the arrays
        rt = self._runtime
        d_out = [rt.empty((n,)) for _ in self.names_out]
        rt.call(self._module, "kernel", n, *(rt.put(a) for a in flat), *d_out, sizes=(n,))
        outs = [rt.get(o) for o in d_out]
        return {name: o.reshape(shape) for name, o in zip(self.names_out, outs)}


@lru_cache(maxsize=32)
def elementwise_activation(activation: str = "relu", backend: str = "numpy") -> ElementwiseKernel:
    """``f(z) -> {"phi": phi(z), "dphi": phi'(z)}`` for the named activation (ReLU: phi'(0) = 1/2)."""
    module = ELEMENTWISE_ACTIVATION.load(backend, activation=activation)
    return ElementwiseKernel(module, backend, ["x"], ["phi", "dphi"])
