"""Kernel families: generated kernels looked up in the kernel cache, generated only on a miss.

A :class:`KernelFamily` declares, without importing SymPy,

* its ``name`` and parameter names: the cache *spec* of an instance is ``kernel_spec(name, flavour=...,
  **params)`` (:func:`transformer_limits.kernel_cache.kernel_spec`), built here and nowhere else;
* its ``flavours`` (:class:`~transformer_limits.numeric.flavours.Flavour` records, each with its
  file suffix), hence the backends it runs on (:data:`transformer_limits.numeric.backends.REGISTRY`: a
  backend runs one flavour);
* ``generator``, the dotted path ``"module:function"`` of its SymPy generator, imported only on a
  cache miss and called as ``function(flavour=..., **params) -> (file name, source)``, the file name
  being ``<stem>_<key><suffix>`` (see :func:`transformer_limits.symbolic.codegen.source_key`); the
  generator receives the flavour's name (the cache spec holds names).

**Precision.**  A flavour with ``typed_sources`` (``python-numba``) has one source per precision: the
float32 instance's spec and generator call get ``precision="float32"`` (its file is
``<stem>_float32_<key>.py``, its Numba cache separate), the float64 instance's spec and call are what
they always were.  The other flavours have one source for every precision (NumPy computes in the dtype
it is given; CUDA C is compiled with ``typedef float real;``), so ``precision`` is not part of their spec.

:meth:`KernelFamily.load` resolves a ``backend=`` string, finds (or generates, stores and indexes) the
source of that backend's flavour and returns the loaded module: an imported Python module for the
``python-*`` flavours (:func:`~transformer_limits.kernel_cache.load_python_source`, so Numba's on-disk
cache finds it again; ``python-numba`` sources come with their serial twins,
:mod:`~transformer_limits.numeric.numba_twins`), a CuPy ``RawModule`` for ``cuda-c``.  A warm process therefore never imports
SymPy (tests/test_kernel_families_warm.py).  :data:`FAMILIES` lists every family of the package.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Mapping

from transformer_limits import kernel_cache
from transformer_limits.numeric.backends import REGISTRY, Backend, resolve_backend
from transformer_limits.numeric.flavours import (CUDA_C, GENERATED_FLAVOURS, PYTHON_CUDA, PYTHON_NUMBA, PYTHON_NUMPY,
                                                 Flavour, flavour_named)

__all__ = ["KernelFamily", "FAMILIES", "ATTENTION", "LAYER_ADJOINT", "MLP_FIELD", "FLOW_TAYLOR_JET",
           "ELEMENTWISE_ACTIVATION", "CUDA_C_REAL_TYPES", "cuda_c_program", "load_source"]


#: NVRTC (CuPy's compiler) has no math.h, so the constants SymPy's C99 printer uses (M_PI, M_SQRT2,
#: ... in e.g. GELU) are defined here for every CUDA C source; nvcc's math.h defines them too, hence
#: the guards
CUDA_C_MATH_CONSTANTS = "".join(
    f"#ifndef {name}\n#define {name} {value}\n#endif\n" for name, value in (
        ("M_E", "2.71828182845904523536"), ("M_LOG2E", "1.44269504088896340736"),
        ("M_LOG10E", "0.434294481903251827651"), ("M_LN2", "0.693147180559945309417"),
        ("M_LN10", "2.30258509299404568402"), ("M_PI", "3.14159265358979323846"),
        ("M_PI_2", "1.57079632679489661923"), ("M_PI_4", "0.785398163397448309616"),
        ("M_1_PI", "0.318309886183790671538"), ("M_2_PI", "0.636619772367581343076"),
        ("M_2_SQRTPI", "1.12837916709551257390"), ("M_SQRT2", "1.41421356237309504880"),
        ("M_SQRT1_2", "0.707106781186547524401")))


#: the C type ``real`` of each precision of a CUDA C source (its numbers are printed as ``((real)x)``
#: and its math functions by their overloaded names: symbolic/codegen.py)
CUDA_C_REAL_TYPES = {"float64": "double", "float32": "float"}


def cuda_c_program(source: str, precision: str = "float64") -> str:
    """The text NVRTC (or nvcc) compiles for a generated CUDA C ``source``: ``typedef <type> real;``
    for ``precision`` (``float64`` | ``float32``) and :data:`CUDA_C_MATH_CONSTANTS` in front."""
    if precision not in CUDA_C_REAL_TYPES:
        raise ValueError(f"precision must be one of {', '.join(CUDA_C_REAL_TYPES)}, got {precision!r}")
    return f"typedef {CUDA_C_REAL_TYPES[precision]} real;\n" + CUDA_C_MATH_CONSTANTS + source


def load_source(path: Path, flavour: Flavour | str, precision: str = "float64") -> Any:
    """Load a generated source file of ``flavour``: a CuPy ``RawModule`` for ``cuda-c``, compiled as
    :func:`cuda_c_program` of ``precision``, else the imported Python module (NumPy computes in the
    dtype of the arrays it is given; a typed flavour's ``path`` is already the source of its precision,
    :meth:`KernelFamily.source_path`; ``precision`` is checked, nothing else)."""
    if precision not in CUDA_C_REAL_TYPES:
        raise ValueError(f"precision must be one of {', '.join(CUDA_C_REAL_TYPES)}, got {precision!r}")
    if flavour_named(flavour) is CUDA_C:
        import cupy

        code = cuda_c_program(path.read_text(encoding="utf-8"), precision)
        return cupy.RawModule(code=code, options=("--std=c++14",))
    if flavour_named(flavour) is PYTHON_NUMBA:  # each kernel with its serial twin (numba_twins.py)
        from transformer_limits.numeric.numba_twins import load_twins

        return load_twins(path)
    return kernel_cache.load_python_source(path)


@dataclass(frozen=True)
class KernelFamily:
    """A family of generated kernels (see the module docstring); ``title`` names it in error messages."""

    name: str
    title: str
    params: tuple[str, ...]
    flavours: Mapping[str, Flavour]
    generator: str

    def __init__(self, name: str, title: str, params: tuple[str, ...], flavours: Iterable[Flavour],
                 generator: str):
        flavours = tuple(flavours)
        for f in flavours:
            if not isinstance(f, Flavour) or not f.generated:
                raise ValueError(f"flavours of {title} must be generated Flavour records, got {f!r}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "params", tuple(params))
        # name -> record, so ``PYTHON_NUMBA.name in family.flavours`` and lookups by name both work
        object.__setattr__(self, "flavours", {f.name: f for f in flavours})
        object.__setattr__(self, "generator", generator)

    def __hash__(self) -> int:
        return hash((self.name, self.params, tuple(self.flavours), self.generator))

    def has(self, flavour: Flavour) -> bool:
        """Whether this family has kernels of ``flavour``."""
        return flavour.name in self.flavours

    def backends(self) -> tuple[str, ...]:
        """Names of the backends whose flavour this family has (available here or not)."""
        return tuple(n for n, b in REGISTRY.items() if self.has(b.flavour))

    def resolve(self, backend: str) -> Backend:
        """The :class:`~transformer_limits.numeric.backends.Backend` for ``backend`` (ValueError if
        unknown, not usable here, or without this family's flavour)."""
        return resolve_backend(backend, tuple(self.flavours.values()), self.title)

    def _source_precision(self, flavour: str, precision: str) -> dict[str, str]:
        """``{"precision": precision}`` where ``flavour`` writes a source per precision and ``precision`` is
        not float64, else ``{}`` (ValueError naming ``precision`` if the flavour does not compute in it)."""
        record = self.flavours[flavour]
        if precision not in record.precisions:
            raise ValueError(f"precision {precision!r} is not available for {self.title} in flavour "
                             f"{flavour} (it computes in {', '.join(record.precisions)})")
        return {"precision": precision} if record.typed_sources and precision != "float64" else {}

    def spec(self, flavour: Flavour | str, precision: str = "float64", **params: object) -> str:
        """Cache spec of one instance: ``<name>:<param>=<value>:...:flavour=<flavour>`` (sorted), with
        ``precision=<precision>`` for a typed flavour's non-float64 source."""
        flavour = flavour.name if isinstance(flavour, Flavour) else flavour
        if flavour not in self.flavours:
            raise ValueError(f"flavour must be one of {', '.join(self.flavours)} for {self.title}; "
                             f"got {flavour!r}")
        if set(params) != set(self.params):
            raise ValueError(f"{self.title} takes parameters {', '.join(self.params)}; got {', '.join(params)}")
        return kernel_cache.kernel_spec(self.name, flavour=flavour, **self._source_precision(flavour, precision),
                                        **params)

    def generate(self, flavour: Flavour | str, precision: str = "float64", **params: object) -> Path:
        """Run the SymPy generator (imported here, on a miss only), store and index the source."""
        flavour = flavour.name if isinstance(flavour, Flavour) else flavour
        spec = self.spec(flavour, precision, **params)  # checks flavour, precision and parameters
        module, _, function = self.generator.partition(":")
        filename, source = getattr(importlib.import_module(module), function)(
            flavour=flavour, **self._source_precision(flavour, precision), **params)
        path = kernel_cache.write_source(filename, source)
        kernel_cache.record_source(spec, path)
        return path

    def source_path(self, flavour: Flavour | str, precision: str = "float64", **params: object) -> Path:
        """Cached source file of one instance in ``precision`` (the one source of an untyped flavour);
        generated (SymPy imported) only on a cache miss."""
        path = kernel_cache.lookup_source(self.spec(flavour, precision, **params))
        return self.generate(flavour, precision, **params) if path is None else path

    def load(self, backend: str, *, precision: str = "float64", **params: object) -> ModuleType | Any:
        """The loaded kernels of ``backend``'s flavour in ``precision`` (float64 or float32): the Python
        module of that precision's source (python-numba: its own float32 source), or a CuPy RawModule
        for cuda-c, its one source compiled for ``precision``."""
        flavour = self.resolve(backend).flavour
        return load_source(self.source_path(flavour, precision, **params), flavour, precision)


_ALL = (PYTHON_NUMPY, PYTHON_NUMBA, PYTHON_CUDA, CUDA_C)
assert set(_ALL) == set(GENERATED_FLAVOURS)

#: softmax attention, its Jacobian and measure derivatives (symbolic/attention_kernels.py)
ATTENTION = KernelFamily(
    "attention", "the attention kernels", ("d", "d_k", "d_v"),
    _ALL,
    "transformer_limits.symbolic.attention_kernels:attention_kernel_source")

#: field and adjoint of one attention layer (symbolic/attention_adjoint_kernels.py)
LAYER_ADJOINT = KernelFamily(
    "attention-adjoint", "the attention-layer adjoint kernels", ("d", "d_k", "d_v"),
    (PYTHON_NUMBA, PYTHON_CUDA, CUDA_C),
    "transformer_limits.symbolic.attention_adjoint_kernels:adjoint_kernel_source")

#: random-MLP field and zonal kernel matrix of one activation (symbolic/mlp_field_kernels.py)
MLP_FIELD = KernelFamily(
    "mlp-field", "the MLP-field kernels", ("activation",),
    _ALL,
    "transformer_limits.symbolic.mlp_field_kernels:mlp_field_kernel_source")

#: second-order attention jet of the flow-map Taylor blocks (symbolic/flow_taylor_kernels.py)
FLOW_TAYLOR_JET = KernelFamily(
    "flow-taylor-jet", "the flow-map jet kernel", ("d", "d_k", "d_v"),
    _ALL,
    "transformer_limits.symbolic.flow_taylor_kernels:jet_kernel_source")

#: an activation phi and its derivative, elementwise (symbolic/elementwise_kernels.py)
ELEMENTWISE_ACTIVATION = KernelFamily(
    "elementwise-activation", "the elementwise activation kernels", ("activation",),
    _ALL,
    "transformer_limits.symbolic.elementwise_kernels:activation_kernel_source")

#: every kernel family, by name
FAMILIES: dict[str, KernelFamily] = {f.name: f for f in (ATTENTION, LAYER_ADJOINT, MLP_FIELD, FLOW_TAYLOR_JET,
                                                         ELEMENTWISE_ACTIVATION)}
