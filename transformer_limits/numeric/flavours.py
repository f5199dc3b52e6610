"""Kernel flavours: the kinds of kernel source a backend runs, each one record.

A :class:`Flavour` says everything the package needs to know about one kind of kernel source, so that
adding a flavour is adding one record here (and an emitter per kernel family that should have it):

=================  =======  ======  ========  ==========  ===========  ==================================
name               printer  suffix  device    launch      precisions   source
=================  =======  ======  ========  ==========  ===========  ==================================
``python-numpy``   numpy    .py     host      call        f64, f32     vectorised NumPy (the reference)
``numpy-blas``     (none)   (none)  host      call        f64, f32     hand-written batched NumPy/BLAS
``python-numba``   scalar   .py     host      call        f64, f32     ``numba.njit(parallel=True)`` loops
``python-cuda``    scalar   .py     device    grid        f64          ``numba.cuda.jit`` kernels
``cuda-c``         c        .cu     device    raw-module  f64, f32     CUDA C in a CuPy ``RawModule``
=================  =======  ======  ========  ==========  ===========  ==================================

``printer`` is the SymPy printer of :func:`transformer_limits.symbolic.codegen.code_block` (``""``: no
generated source, and no ``suffix`` either), ``launch`` how :meth:`transformer_limits.numeric.runtime.Runtime.call` runs a kernel
(``call``: a Python call on host arrays; ``grid``: ``kernel[blocks, threads](...)``; ``raw-module``:
``module.get_function(name)(grid, block, args)``), ``takes_sizes`` whether kernels take the problem
sizes as trailing integer arguments (C has no array shapes).  float32 runs only where the source
computes in the dtype it is given (NumPy), is compiled for it (CUDA C ``typedef float real``) or is
generated for it (``typed_sources``: ``python-numba`` has one source per precision, the float32 one with
every literal a ``numpy.float32`` constant and float32 scratch arrays, see
:func:`transformer_limits.symbolic.codegen.typed_python_source`; the precision is then part of the
kernel-cache spec and of the file name).  ``python-cuda``'s literals are float64 (float64 only).  The
precision is a property of the flavour: every kernel family with the ``python-numba`` flavour has its
float32 source.

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
    typed_sources: bool = False

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

    def check_source_precision(self, precision: str) -> None:
        """ValueError naming ``precision`` unless a generator of this flavour writes its source for it:
        float64 always (the one source of an untyped flavour, run or compiled in either precision),
        another precision only for a flavour with ``typed_sources`` that computes in it."""
        if precision == "float64":
            return
        if precision not in self.precisions:
            raise ValueError(f"precision {precision!r}: flavour {self.name} computes in "
                             f"{', '.join(self.precisions)} only")
        if not self.typed_sources:
            raise ValueError(f"precision {precision!r}: flavour {self.name} has one source for every precision "
                             f"it computes in; generate it with float64")

    def source_tag(self, precision: str) -> str:
        """Part of a generated file's stem naming its precision: ``""`` for float64 (the names of the
        float64 sources are what they always were), ``_float32`` for a typed float32 source."""
        self.check_source_precision(precision)
        return "" if precision == "float64" else f"_{precision}"

    def __str__(self) -> str:
        return self.name


PYTHON_NUMPY = Flavour("python-numpy", "numpy", ".py", False, "call", ("float64", "float32"), "#", False,
                       "vectorised NumPy (the reference of every test)")
NUMPY_BLAS = Flavour("numpy-blas", "", "", False, "call", ("float64", "float32"), "#", False,
                     "hand-written batched NumPy/BLAS (matmul, einsum); no generated source")
PYTHON_NUMBA = Flavour("python-numba", "scalar", ".py", False, "call", ("float64", "float32"), "#", False,
                       "numba.njit(parallel=True, cache=True) loops, one source per precision", typed_sources=True)
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
