"""Kernel flavours: the kinds of kernel source a backend runs, each one record.

A :class:`Flavour` says everything the package needs to know about one kind of kernel source, so that
adding a flavour is adding one record here (and an emitter per kernel family that should have it):

=================  =======  ======  ========  ==========  ===========  ==================================
name               printer  suffix  device    launch      precisions   source
=================  =======  ======  ========  ==========  ===========  ==================================
``python-numpy``   numpy    .py     host      call        f64, f32     vectorised NumPy (the reference)
``numpy-blas``     (none)   (none)  host      call        f64, f32     hand-written batched NumPy/BLAS
``python-numba``   scalar   .py     host      call        f64          ``numba.njit(parallel=True)`` loops
``python-cuda``    scalar   .py     device    grid        f64          ``numba.cuda.jit`` kernels
``cuda-c``         c        .cu     device    raw-module  f64, f32     CUDA C in a CuPy ``RawModule``
=================  =======  ======  ========  ==========  ===========  ==================================

``printer`` is the SymPy printer of :func:`transformer_limits.symbolic.codegen.code_block` (``""``: no
generated source, and no ``suffix`` either), ``launch`` how :meth:`transformer_limits.numeric.runtime.Runtime.call` runs a kernel
(``call``: a Python call on host arrays; ``grid``: ``kernel[blocks, threads](...)``; ``raw-module``:
``module.get_function(name)(grid, block, args)``), ``takes_sizes`` whether kernels take the problem
sizes as trailing integer arguments (C has no array shapes).  float32 runs only where the source
computes in the dtype it is given (NumPy) or is compiled for it (CUDA C ``typedef float real``); the
Numba flavours' literals are float64, so float32 inputs would be promoted halfway.

This module and :mod:`transformer_limits.numeric.backends` are the only places that spell a flavour's
name; everything else holds the records (``PYTHON_NUMBA``, ``CUDA_C``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Flavour", "FLAVOURS", "PYTHON_NUMPY", "NUMPY_BLAS", "PYTHON_NUMBA", "PYTHON_CUDA", "CUDA_C",
           "GENERATED_FLAVOURS", "DEVICE_FLAVOURS", "flavour_named"]

#: the ways a kernel is run (:meth:`transformer_limits.numeric.runtime.Runtime.call`)
LAUNCHES = ("call", "grid", "raw-module")


@dataclass(frozen=True)
class Flavour:
    """One kind of kernel source (see the module docstring)."""

    name: str
    printer: str
    suffix: str
    on_device: bool
    launch: str
    precisions: tuple[str, ...]
    comment: str
    takes_sizes: bool
    summary: str

    def __post_init__(self) -> None:
        if self.launch not in LAUNCHES:
            raise ValueError(f"launch must be one of {', '.join(LAUNCHES)}, got {self.launch!r}")
        if bool(self.printer) != bool(self.suffix):
            raise ValueError(f"flavour {self.name}: a generated flavour has a printer and a suffix, "
                             f"a hand-written one neither")

    @property
    def generated(self) -> bool:
        """Whether kernels of this flavour are generated from SymPy (else hand-written)."""
        return bool(self.printer)

    def __str__(self) -> str:
        return self.name


PYTHON_NUMPY = Flavour("python-numpy", "numpy", ".py", False, "call", ("float64", "float32"), "#", False,
                       "vectorised NumPy (the reference of every test)")
NUMPY_BLAS = Flavour("numpy-blas", "", "", False, "call", ("float64", "float32"), "#", False,
                     "hand-written batched NumPy/BLAS (matmul, einsum); no generated source")
PYTHON_NUMBA = Flavour("python-numba", "scalar", ".py", False, "call", ("float64",), "#", False,
                       "numba.njit(parallel=True, cache=True) loops")
PYTHON_CUDA = Flavour("python-cuda", "scalar", ".py", True, "grid", ("float64",), "#", False,
                      "numba.cuda.jit kernels, launched on a 1-D grid")
CUDA_C = Flavour("cuda-c", "c", ".cu", True, "raw-module", ("float64", "float32"), "//", True,
                 "CUDA C (SymPy's C99 printer) in a CuPy RawModule, typedef'd real")

#: every flavour, by name
FLAVOURS: dict[str, Flavour] = {f.name: f for f in (PYTHON_NUMPY, NUMPY_BLAS, PYTHON_NUMBA, PYTHON_CUDA, CUDA_C)}
#: flavours of generated source (a kernel family declares which of these it has)
GENERATED_FLAVOURS: tuple[Flavour, ...] = tuple(f for f in FLAVOURS.values() if f.generated)
#: flavours whose kernels run on a GPU and take device arrays
DEVICE_FLAVOURS: tuple[Flavour, ...] = tuple(f for f in FLAVOURS.values() if f.on_device)


def flavour_named(name: object) -> Flavour:
    """The :class:`Flavour` called ``name`` (ValueError naming ``flavour`` if unknown)."""
    if isinstance(name, Flavour):
        return name
    if not isinstance(name, str) or name not in FLAVOURS:
        raise ValueError(f"unknown flavour {name!r} (known: {', '.join(FLAVOURS)})")
    return FLAVOURS[name]
