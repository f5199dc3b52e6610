"""Elementwise kernels from scalar SymPy expressions, on every backend.

Given input symbols (x_1, ..., x_p) and named outputs f_k(x_1, ..., x_p), build a function that maps
equally shaped float64 arrays to the output arrays.  This is the smallest loop template of the
codegen pipeline and the one activations (ReLU, tanh, SiLU, ...) and their derivatives go through:

``numpy``          vectorised (``numpy.where`` for Piecewise, ``numpy.maximum`` for Max)
``numba``          ``numba.njit(parallel=True, cache=True)`` loop over the flattened arrays
``numba-cuda``     ``numba.cuda.jit`` kernel, one thread per element (also the CUDA simulator)
``cupy``           CUDA C from the C99 printer in a ``cupy.ElementwiseKernel``

>>> import sympy as sp, numpy as np
>>> x = sp.Symbol("x", real=True)
>>> relu = elementwise_kernel({"y": sp.Max(0, x), "dy": sp.diff(sp.Max(0, x), x)}, [x], "numpy")
>>> relu(np.array([-1.0, 2.0]))["dy"].tolist()
[0.0, 1.0]
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import sympy as sp

from transformer_limits import kernel_cache
from transformer_limits.symbolic.codegen import code_block, indent, source_key

__all__ = ["elementwise_kernel", "elementwise_source"]

_FLAVOUR = {"numpy": "numpy", "numba": "numba", "numba-cuda": "cuda", "numba-cuda-sim": "cuda",
            "cupy": "c"}


def elementwise_source(outputs: Mapping[str, sp.Expr], inputs: Sequence[sp.Symbol], flavour: str) -> str:
    """Readable source of an elementwise kernel ``kernel(in_0, ..., out_0, ...)`` (or CUDA C body)."""
    names_in = [str(s) for s in inputs]
    names_out = list(outputs)
    if set(names_in) & set(names_out):
        raise ValueError("input and output names must differ")
    free = set().union(*(sp.sympify(e).free_symbols for e in outputs.values())) - set(inputs)
    if free:
        raise ValueError(f"outputs depend on symbols that are not inputs: {sorted(map(str, free))}")
    block = code_block(outputs, prefix="e")
    args = ", ".join([f"IN_{n}" for n in names_in] + [f"OUT_{n}" for n in names_out])
    if flavour == "numpy":
        body = ([f"{n} = IN_{n}" for n in names_in] + block.lines("numpy")
                + [f"OUT_{n}[...] = {n}" for n in names_out])
        return "\n".join(["import numpy", "", "", f"def kernel({args}):", indent(body, 1), ""])
    loads = [f"{n} = IN_{n}[i]" for n in names_in]
    stores = [f"OUT_{n}[i] = {n}" for n in names_out]
    if flavour == "numba":
        return "\n".join(["import math", "", "import numba", "", "",
                          "@numba.njit(parallel=True, cache=True)", f"def kernel({args}):",
                          f"    for i in numba.prange(IN_{names_in[0]}.shape[0]):",
                          indent(loads + block.lines("scalar") + stores, 2), ""])
    if flavour == "cuda":
        return "\n".join(["import math", "", "from numba import cuda", "", "", "@cuda.jit",
                          f"def kernel({args}):", "    i = cuda.grid(1)",
                          f"    if i < IN_{names_in[0]}.shape[0]:",
                          indent(loads + block.lines("scalar") + stores, 2), ""])
    if flavour == "c":
        return "\n".join(block.lines("c", declare="const double ")
                         + [f"OUT_{n} = {n};" for n in names_out])
    raise ValueError(f"unknown flavour {flavour!r}")


def elementwise_kernel(outputs: Mapping[str, sp.Expr], inputs: Sequence[sp.Symbol],
                       backend: str = "numpy") -> Callable[..., dict[str, np.ndarray]]:
    """Compile ``outputs`` (name -> expression in ``inputs``) for ``backend``.

    The returned function takes one array per input (same shape) and returns a dict name -> array.
    The source is written to the kernel cache (readable; Numba caches its compiled code there).
    """
    if backend not in _FLAVOUR:
        raise ValueError(f"unknown backend {backend!r} (known: {', '.join(_FLAVOUR)})")
    if not inputs:
        raise ValueError("inputs must name at least one symbol")
    flavour = _FLAVOUR[backend]
    source = elementwise_source(outputs, inputs, flavour)
    names_in, names_out = [str(s) for s in inputs], list(outputs)
    key = source_key([sp.srepr(tuple(outputs.items()))], flavour, source)
    if flavour == "c":
        import cupy

        ck = cupy.ElementwiseKernel(", ".join(f"float64 IN_{n}" for n in names_in),
                                    ", ".join(f"float64 OUT_{n}" for n in names_out),
                                    source, f"tl_elementwise_{key}")

        def run_cupy(*arrays):
            ins = [cupy.asarray(a, dtype=cupy.float64) for a in arrays]
            outs = ck(*ins)
            outs = outs if isinstance(outs, tuple) else (outs,)
            return {n: cupy.asnumpy(o) for n, o in zip(names_out, outs)}

        return run_cupy
    path = kernel_cache.write_source("elementwise", key, source, ".py")
    fn = kernel_cache.load_python_source(path).kernel

    def run(*arrays):
        if len(arrays) != len(names_in):
            raise ValueError(f"expected {len(names_in)} input arrays ({', '.join(names_in)}), got {len(arrays)}")
        arrs = [np.ascontiguousarray(a, dtype=np.float64) for a in arrays]
        shape = arrs[0].shape
        if any(a.shape != shape for a in arrs):
            raise ValueError("input arrays must have the same shape")
        flat = [a.reshape(-1) for a in arrs]
        outs = [np.empty(flat[0].shape) for _ in names_out]
        if flavour == "cuda":
            from numba import cuda

            d_in = [cuda.to_device(a) for a in flat]
            d_out = [cuda.device_array_like(o) for o in outs]
            n = flat[0].shape[0]
            fn[max(1, (n + 127) // 128), 128](*d_in, *d_out)
            outs = [o.copy_to_host() for o in d_out]
        else:
            fn(*flat, *outs)
        return {name: o.reshape(shape) for name, o in zip(names_out, outs)}

    return run
