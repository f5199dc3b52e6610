"""Elementwise kernels from scalar SymPy expressions, in every generated-source flavour.

Given input symbols (x_1, ..., x_p) and named outputs f_k(x_1, ..., x_p), the template writes
``kernel(IN_x_1, ..., IN_x_p, OUT_f_1, ...)`` that sets OUT_f_k[i] = f_k(IN_x_1[i], ..., IN_x_p[i]) over
flattened float64 arrays, the outputs written in place by every flavour (one signature; the length n
follows the arrays in CUDA C only, ``sizes=`` of
:meth:`~transformer_limits.numeric.runtime.Runtime.call`).  This is the smallest loop template of the
codegen pipeline and the one activations (ReLU, tanh, SiLU, ...) and their derivatives go through:

``python-numpy``   vectorised (``numpy.where`` for Piecewise, ``numpy.maximum`` for Max)
``python-numba``   ``numba.njit(parallel=True, cache=True)`` loop over the flattened arrays
``python-cuda``    ``numba.cuda.jit`` kernel, one thread per element (also the CUDA simulator)
``cuda-c``         CUDA C (C99 printer) ``extern "C" __global__ void kernel(..., long long n)`` in the
                   type ``real`` (double or float: :func:`~transformer_limits.numeric.kernel_family.cuda_c_program`)

:func:`activation_kernel_source` is the generator of the kernel family
:data:`transformer_limits.numeric.kernel_family.ELEMENTWISE_ACTIVATION` (phi and phi' of a named
activation, loaded without SymPy by
:func:`transformer_limits.numeric.elementwise.elementwise_activation`); :func:`elementwise_kernel`
compiles arbitrary expressions through the same template and runner.

>>> import sympy as sp, numpy as np
>>> x = sp.Symbol("x", real=True)
>>> relu = elementwise_kernel({"y": sp.Max(0, x), "dy": sp.diff(sp.Max(0, x), x)}, [x], "numpy")
>>> relu(np.array([-1.0, 2.0]))["dy"].tolist()
[0.0, 1.0]
"""

from __future__ import annotations

from typing import Mapping, Sequence

import sympy as sp

from transformer_limits import kernel_cache
from transformer_limits.numeric.flavours import PYTHON_CUDA, PYTHON_NUMBA, PYTHON_NUMPY, flavour_named
from transformer_limits.numeric.elementwise import ElementwiseKernel
from transformer_limits.numeric.kernel_family import ELEMENTWISE_ACTIVATION, load_source
from transformer_limits.symbolic.codegen import code_block, indent, source_key, typed_python_source
from transformer_limits.symbolic.mlp_kernel import activation as activation_law
from transformer_limits.symbolic.mlp_kernel import x_sym

__all__ = ["elementwise_kernel", "elementwise_source", "activation_kernel_source"]

FLAVOURS = ELEMENTWISE_ACTIVATION.flavours  # flavour name -> Flavour record


def elementwise_source(outputs: Mapping[str, sp.Expr], inputs: Sequence[sp.Symbol], flavour: str) -> str:
    """Readable source of the elementwise kernel ``kernel(IN_..., OUT_...)`` in one flavour."""
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown kernel flavour {flavour!r} (known: {', '.join(FLAVOURS)})")
    names_in = [str(s) for s in inputs]
    names_out = list(outputs)
    if not names_in:
        raise ValueError("inputs must name at least one symbol")
    if set(names_in) & set(names_out):
        raise ValueError("input and output names must differ")
    free = set().union(*(sp.sympify(e).free_symbols for e in outputs.values())) - set(inputs)
    if free:
        raise ValueError(f"outputs depend on symbols that are not inputs: {sorted(map(str, free))}")
    block = code_block(outputs, prefix="e")
    args = ", ".join([f"IN_{n}" for n in names_in] + [f"OUT_{n}" for n in names_out])
    if flavour == PYTHON_NUMPY.name:
        # SymPy's NumPy printer leaves erf as math.erf (scalar only): use the vectorised ufunc
        body = ([f"{n} = IN_{n}" for n in names_in]
                + [s.replace("math.erf(", "scipy.special.erf(") for s in block.lines("numpy")]
                + [f"OUT_{n}[...] = {n}" for n in names_out])
        return "\n".join(["import math", "", "import numpy", "import scipy.special", "", "",
                          f"def kernel({args}):", indent(body, 1), ""])
    loads = [f"{n} = IN_{n}[i]" for n in names_in]
    stores = [f"OUT_{n}[i] = {n}" for n in names_out]
    if flavour == PYTHON_NUMBA.name:
        return "\n".join(["import math", "", "import numba", "", "",
                          "@numba.njit(parallel=True, cache=True)", f"def kernel({args}):",
                          f"    for i in numba.prange(IN_{names_in[0]}.shape[0]):",
                          indent(loads + block.lines("scalar") + stores, 2), ""])
    if flavour == PYTHON_CUDA.name:
        return "\n".join(["import math", "", "from numba import cuda", "", "", "@cuda.jit",
                          f"def kernel({args}):", "    i = cuda.grid(1)",
                          f"    if i < IN_{names_in[0]}.shape[0]:",
                          indent(loads + block.lines("scalar") + stores, 2), ""])
    # `real` (double or float) is typedef'd by kernel_family.cuda_c_program
    params = ", ".join([f"const real* __restrict__ IN_{n}" for n in names_in]
                       + [f"real* __restrict__ OUT_{n}" for n in names_out] + ["const long long n"])
    body = (["const long long i = (long long)blockDim.x * blockIdx.x + threadIdx.x;", "if (i >= n) return;"]
            + [f"const real {n} = IN_{n}[i];" for n in names_in]
            + block.lines("c", declare="const real ") + [f"OUT_{n}[i] = {n};" for n in names_out])
    return "\n".join([f'extern "C" __global__ void kernel({params})', "{", indent(body, 1), "}", ""])


def _keyed_source(outputs: Mapping[str, sp.Expr], inputs: Sequence[sp.Symbol], flavour: str,
                  stem: str, precision: str = "float64") -> tuple[str, str]:
    flav = flavour_named(flavour)
    flav.check_source_precision(precision)
    source = elementwise_source(outputs, inputs, flavour)
    if flav.typed_sources:  # float32: the typed-literal pass (float64: the source itself)
        source = typed_python_source(source, precision)
    key = source_key([sp.srepr(tuple(outputs.items()))], flav.printer, source, precision)
    return f"{stem}{flav.source_tag(precision)}_{key}{flav.suffix}", source


def activation_kernel_source(activation: str, flavour: str, precision: str = "float64") -> tuple[str, str]:
    """(file name, source) of ``kernel(IN_x, OUT_phi, OUT_dphi)``: phi and phi' of the named activation
    (:func:`transformer_limits.symbolic.mlp_kernel.activation`; ReLU's phi' = Heaviside with H(0) = 1/2),
    in ``precision`` (float32 for python-numba only)."""
    act = activation_law(activation)
    outputs = {"phi": act.expr, "dphi": act.derivative}
    return _keyed_source(outputs, [x_sym], flavour, f"elementwise_{activation}_{flavour.replace('-', '_')}",
                         precision)


def elementwise_kernel(outputs: Mapping[str, sp.Expr], inputs: Sequence[sp.Symbol],
                       backend: str = "numpy") -> ElementwiseKernel:
    """Compile ``outputs`` (name -> expression in ``inputs``) for ``backend``.

    The returned function takes one array per input (same shape) and returns a dict name -> array.
    The source is written to the kernel cache (readable; Numba caches its compiled code there).
    """
    flavour = ELEMENTWISE_ACTIVATION.resolve(backend).flavour.name
    filename, source = _keyed_source(outputs, inputs, flavour, "elementwise")
    module = load_source(kernel_cache.write_source(filename, source), flavour)
    return ElementwiseKernel(module, backend, [str(s) for s in inputs], list(outputs))
