"""Run the generated CUDA C kernels on the CPU: a host emulation of CuPy's ``RawModule`` / ``RawKernel``.

Test infrastructure (tests/test_cuda_c_host.py), not part of the package.  The ``cuda-c`` sources
(docs/codegen.md) use per-thread indexing only (``blockDim * blockIdx + threadIdx`` in x and y), no
shared memory, no ``__syncthreads``, no atomics, no warp intrinsics: :func:`host_program` refuses a
source that does, so this stays true or the tests say so.  Such a kernel can run on the host:

* :data:`SHIM` defines the CUDA names the sources use (``__global__``, ``__device__``,
  ``__forceinline__``, ``uint3`` / ``dim3`` and thread-local ``threadIdx``, ``blockIdx``, ``blockDim``,
  ``gridDim``) and takes the math functions from C++'s ``<math.h>``, whose float overloads keep a
  ``typedef float real;`` program in float, as on the device (checked by ``static_assert``);
* :func:`host_program` appends, for every ``extern "C" __global__`` kernel, a launcher
  ``tl_launch_<name>(grid, block, kernelParams, reverse)`` that loops over grid x block indices (in
  launch order, or reversed: the result must not depend on it) and calls the kernel body with its
  arguments read from ``kernelParams`` exactly as ``cuLaunchKernel`` reads them (a pointer to each
  argument's value, of the parameter's C type);
* :func:`build` compiles that text as C++14 (the dialect CuPy's NVRTC gets) with ``g++ -O1 -shared
  -fPIC`` into a cached shared library (hidden visibility: kernel names such as ``forward`` cannot be
  interposed by another library) and loads it with ctypes.

:func:`fake_cupy` is a module that stands in for ``cupy`` (:func:`host_cupy` puts it in ``sys.modules``
and makes the backend probe see it), so the package's own loader (``kernel_family.load_source``:
``cupy.RawModule(code=cuda_c_program(source, precision), ...)``) and runners (``Runtime.call``,
``c_arguments``, the 2-D pair launches of the attention kernels, the layer's batched launches) run
unchanged.  Device arrays are :class:`DeviceArray`, NumPy arrays in emulated device memory:

* ``asarray`` copies (as to a GPU); ``empty`` is filled with NaN (in float32 and float64), so an output
  entry no thread writes shows up as NaN; every allocation has red zones of NaN on both sides (at least
  its own size), so an index running past an end reads NaN, and a write there is reported after the
  launch (:class:`DeviceMemoryError`).  The NaNs carry the allocation's serial number, so even a NaN
  read past the end of one array and written past the end of another is seen (not one written back
  into the red zone it was read from, e.g. ``x[n] += 1`` one past the end: its bits are unchanged);
* a kernel argument is marshalled as CuPy does (Python bool -> ``bool``, int -> ``long long``, float ->
  ``double``, NumPy scalars as their dtype, device arrays as pointers) and then checked against the
  kernel's parameter types parsed from the source: a host NumPy array (CuPy refuses it), a scalar of
  another width or kind, an array of another dtype or a non-contiguous array (a GPU would read garbage
  silently) raise ``TypeError``;
* grid and block are checked against CUDA's limits (``ValueError``, CUDA's "invalid configuration").

Other array functions of ``cupy`` are NumPy's, their array results viewed as :class:`DeviceArray`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.machinery
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

__all__ = ["SHIM", "CXX_FLAGS", "compiler", "Param", "kernel_signatures", "host_program", "build", "DeviceArray",
           "DeviceMemoryError", "HostCompileError", "RawModule", "RawKernel", "fake_cupy", "host_cupy",
           "launch_order", "record_launches"]

#: flags of every host build: the dialect CuPy's NVRTC gets (kernel_family.load_source), -O1 as a
#: compromise between compile time and run time
CXX_FLAGS = ("-std=c++14", "-O1", "-shared", "-fPIC", "-fvisibility=hidden")

#: the CUDA names the generated sources use, for a host C++ compiler
SHIM = r"""// host emulation of the CUDA C names used by transformer_limits' generated kernels (tests/cuda_c_host.py)
#include <math.h>   // C++ <math.h>: the float overloads (exp(float) ...) in the global namespace, as in CUDA
#include <cmath>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// __restrict__ is a GNU C++ keyword already
struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };
static thread_local uint3 threadIdx, blockIdx;
static thread_local dim3 blockDim, gridDim;
#define TL_SAME_TYPE_(e, t) static_assert(sizeof(e) == sizeof(t), #e " must compute in " #t)
TL_SAME_TYPE_(exp(1.0f), float); TL_SAME_TYPE_(log(1.0f), float); TL_SAME_TYPE_(sqrt(1.0f), float);
TL_SAME_TYPE_(erf(1.0f), float); TL_SAME_TYPE_(tanh(1.0f), float); TL_SAME_TYPE_(fmax(1.0f, 1.0f), float);
TL_SAME_TYPE_(fmin(1.0f, 1.0f), float); TL_SAME_TYPE_(pow(1.0f, 1.0f), float); TL_SAME_TYPE_(fabs(1.0f), float);
TL_SAME_TYPE_(exp(1.0), double);
#undef TL_SAME_TYPE_
"""

#: constructs the emulation does not model (threads of a block would have to run concurrently, or
#: memory updates would need atomicity): a source using one is refused
_UNSUPPORTED = re.compile(r"__shared__|__syncthreads|__syncwarp|\batomic[A-Z]\w*|__shfl|__ballot|__any_sync|"
                          r"__all_sync|cooperative_groups|\bwarpSize\b|\bclock(64)?\s*\(")

_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)')

#: C type names -> NumPy dtypes (CuPy's own table, cupy/_core/_scalar.pyx), extended by the typedefs
#: of a program (``typedef double real;``)
_C_TYPES = {"double": np.dtype(np.float64), "float": np.dtype(np.float32), "long long": np.dtype(np.int64),
            "long long int": np.dtype(np.int64), "int": np.dtype(np.int32), "unsigned int": np.dtype(np.uint32),
            "unsigned long long": np.dtype(np.uint64), "short": np.dtype(np.int16), "bool": np.dtype(np.bool_),
            "signed char": np.dtype(np.int8), "unsigned char": np.dtype(np.uint8)}

#: CUDA's launch limits (compute capability >= 3)
_MAX_BLOCK = (1024, 1024, 64)
_MAX_THREADS_PER_BLOCK = 1024
_MAX_GRID = (2**31 - 1, 65535, 65535)


class HostCompileError(RuntimeError):
    """The host compiler refused a program (its messages attached)."""


class DeviceMemoryError(AssertionError):
    """A kernel wrote into the red zone of an allocation (past an end of a device array)."""


def compiler() -> str | None:
    """The C++ compiler of the host builds: ``$CXX`` if set and found, else g++, c++ or clang++ on PATH."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


# ------------------------------------------------------------------ sources -> host programs
@dataclass(frozen=True)
class Param:
    """One kernel parameter: its C base type (``real``, ``long long`` ...), whether it is a pointer, its name."""

    ctype: str
    pointer: bool
    name: str


def kernel_signatures(code: str) -> dict[str, tuple[Param, ...]]:
    """Every ``extern "C" __global__ void name(...)`` of ``code``, by name, with its parameters."""
    out: dict[str, tuple[Param, ...]] = {}
    for name, params in _KERNEL.findall(code):
        parsed = []
        for text in filter(None, (p.strip() for p in params.split(","))):
            pointer = "*" in text
            words = [w for w in re.sub(r"[*&]", " ", text).split() if w not in ("const", "__restrict__", "volatile")]
            if len(words) < 2:
                raise ValueError(f"kernel {name}: cannot parse parameter {text!r}")
            parsed.append(Param(" ".join(words[:-1]), pointer, words[-1]))
        if name in out:
            raise ValueError(f"kernel {name} defined twice")
        out[name] = tuple(parsed)
    return out


def _launcher(name: str, params: tuple[Param, ...]) -> str:
    args = ", ".join(f"*({p.ctype}**)a[{k}]" if p.pointer else f"*({p.ctype}*)a[{k}]" for k, p in enumerate(params))
    return f"""
extern "C" __attribute__((visibility("default")))
void tl_launch_{name}(const unsigned int* g, const unsigned int* b, void** a, int reverse)
{{
    gridDim = dim3{{g[0], g[1], g[2]}};
    blockDim = dim3{{b[0], b[1], b[2]}};
    const unsigned long long nb = (unsigned long long)g[0] * g[1] * g[2], nt = (unsigned long long)b[0] * b[1] * b[2];
    for (unsigned long long s = 0; s < nb; ++s) {{
        const unsigned long long q = reverse ? nb - 1 - s : s;
        blockIdx = uint3{{(unsigned int)(q % g[0]), (unsigned int)(q / g[0] % g[1]), (unsigned int)(q / g[0] / g[1])}};
        for (unsigned long long r = 0; r < nt; ++r) {{
            const unsigned long long t = reverse ? nt - 1 - r : r;
            threadIdx = uint3{{(unsigned int)(t % b[0]), (unsigned int)(t / b[0] % b[1]), (unsigned int)(t / b[0] / b[1])}};
            {name}({args});
        }}
    }}
}}
"""


def host_program(code: str) -> str:
    """The C++ text of a CUDA C program ``code`` (what ``cupy.RawModule(code=...)`` gets, i.e.
    ``kernel_family.cuda_c_program(source, precision)``) for the host: :data:`SHIM`, the program,
    and one launcher per kernel.  ValueError for a program without kernels or using a construct the
    emulation does not model (shared memory, barriers, atomics, warp intrinsics)."""
    found = sorted({m.group(0) for m in _UNSUPPORTED.finditer(code)})
    if found:
        raise ValueError(f"the host emulation runs threads one after another: cannot run {', '.join(found)}")
    kernels = kernel_signatures(code)
    if not kernels:
        raise ValueError('no extern "C" __global__ kernel in the program')
    return SHIM + "\n" + code + "\n" + "".join(_launcher(n, p) for n, p in kernels.items())


def _build_dir() -> Path:
    return Path(os.environ.get("TRANSFORMER_LIMITS_HOST_CUDA_CACHE")
                or Path(tempfile.gettempdir()) / f"transformer_limits_cuda_c_host_{os.getuid()}")


_LIBS: dict[str, ctypes.CDLL] = {}


@functools.lru_cache(maxsize=None)
def _compiler_version(cxx: str) -> str:
    return subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout


def build(code: str, build_dir: Path | None = None) -> ctypes.CDLL:
    """The loaded host library of CUDA C program ``code`` (compiled once per text, compiler and flags;
    cached in ``build_dir``, default ``$TRANSFORMER_LIMITS_HOST_CUDA_CACHE`` or a folder in the temp dir)."""
    cxx = compiler()
    if cxx is None:
        raise HostCompileError("no C++ compiler (g++, c++ or clang++) on PATH")
    text = host_program(code)
    version = _compiler_version(cxx)
    key = hashlib.sha256("\0".join((text, cxx, version, *CXX_FLAGS)).encode()).hexdigest()[:24]
    if key in _LIBS:
        return _LIBS[key]
    folder = build_dir or _build_dir()
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / f"k_{key}.so"
    if not lib.exists():
        src, tmp = folder / f"k_{key}.{os.getpid()}.cpp", folder / f"k_{key}.{os.getpid()}.so"
        src.write_text(text, encoding="utf-8")
        out = subprocess.run([cxx, *CXX_FLAGS, "-o", str(tmp), str(src)], capture_output=True, text=True)
        if out.returncode != 0:
            raise HostCompileError(f"{cxx} failed on {src}:\n{out.stderr[-4000:]}")
        os.replace(tmp, lib)  # atomic: a concurrent build of the same text writes the same file
        src.unlink()
    _LIBS[key] = ctypes.CDLL(str(lib))
    return _LIBS[key]


# ------------------------------------------------------------------ emulated device memory
class DeviceArray(np.ndarray):
    """A NumPy array standing for a CuPy array (emulated device memory; see the module docstring)."""


def _red_zone(nbytes: int) -> int:
    return -(-max(4096, nbytes) // 64) * 64  # a multiple of 64 keeps every dtype aligned


_SERIALS = itertools.count(1)


def _fill_pattern(serial: int, nbytes: int) -> np.ndarray:
    """The bytes of a fresh allocation: 8-byte words each of whose float32 halves and which as a float64
    are NaN, with the allocation's serial number as payload (NaN payloads survive arithmetic, so a
    value read past the end of one array and written past the end of another is still seen)."""
    c = serial & 0xFFFF
    word = ((0x7FF80000 | c) << 32) | (0x7FC00000 | c)
    return np.full(-(-nbytes // 8), word, dtype=np.uint64).view(np.uint8)[:nbytes].copy()


def _allocate(shape: Any, dtype: Any, fill: Any = None) -> DeviceArray:
    """A device array in a fresh allocation with red zones; NaN (see :func:`_fill_pattern`) unless ``fill``."""
    dtype = np.dtype(dtype)
    shape = tuple(int(n) for n in np.atleast_1d(shape)) if np.ndim(shape) else (int(shape),)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    pad, serial = _red_zone(nbytes), next(_SERIALS)
    raw = _fill_pattern(serial, 2 * pad + nbytes).view(DeviceArray)
    raw._guard = (pad, pad + nbytes, serial)  # type: ignore[attr-defined]
    out = raw[pad:pad + nbytes].view(dtype).reshape(shape)
    if fill is not None:
        out[...] = fill
    return out


def _guarded_root(a: np.ndarray) -> DeviceArray | None:
    while isinstance(a, np.ndarray):
        if "_guard" in getattr(a, "__dict__", {}):
            return a  # type: ignore[return-value]
        a = a.base  # type: ignore[assignment]
    return None


def _check_red_zones(kernel: str, arrays: list[tuple[int, str, np.ndarray]]) -> None:
    seen: set[int] = set()
    for k, name, a in arrays:
        root = _guarded_root(a)
        if root is None or id(root) in seen:
            continue
        seen.add(id(root))
        lo, hi, serial = root._guard  # type: ignore[attr-defined]
        raw, want = root.view(np.ndarray), _fill_pattern(serial, root.size)
        bad = int(np.count_nonzero(raw[:lo] != want[:lo]) + np.count_nonzero(raw[hi:] != want[hi:]))
        if bad:
            raise DeviceMemoryError(f"kernel {kernel} wrote {bad} byte(s) outside the allocation of its argument "
                                    f"{k} ({name}, shape {a.shape}): an index runs past an end")


def _to_device(r: Any) -> Any:
    if isinstance(r, np.ndarray) and not isinstance(r, DeviceArray):
        return r.view(DeviceArray)
    if isinstance(r, tuple):
        items = [_to_device(x) for x in r]
        return type(r)(*items) if hasattr(r, "_fields") else tuple(items)
    if isinstance(r, list):
        return [_to_device(x) for x in r]
    return r


class _NumpyNamespace(types.SimpleNamespace):
    """``cupy.<sub>`` (linalg, random ...): NumPy's, array results as device arrays."""

    def __init__(self, module: types.ModuleType):
        super().__init__()
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return _wrap(getattr(self._module, name))


def _wrap(obj: Any) -> Any:
    if isinstance(obj, types.ModuleType):
        return _NumpyNamespace(obj)
    if callable(obj) and not isinstance(obj, type):
        @functools.wraps(obj)
        def call(*args: Any, **kwargs: Any) -> Any:
            return _to_device(obj(*args, **kwargs))
        return call
    return obj


# ------------------------------------------------------------------ RawModule / RawKernel
#: launches run in order (``forward``) or reversed (``reverse``): see :func:`launch_order`
_ORDER = ["forward"]
_RECORDERS: list[list[str]] = []


@contextmanager
def record_launches() -> Iterator[list[str]]:
    """The names of the kernels launched in the block, in launch order (a test checks every kernel ran)."""
    names: list[str] = []
    _RECORDERS.append(names)
    try:
        yield names
    finally:
        _RECORDERS.remove(names)


@contextmanager
def launch_order(order: str) -> Iterator[None]:
    """Run the launches in the block with threads (and blocks) in ``order``: ``forward`` or ``reverse``.
    A kernel without races gives bitwise the same result either way."""
    if order not in ("forward", "reverse"):
        raise ValueError(f"order must be forward or reverse, got {order!r}")
    previous = _ORDER[0]
    _ORDER[0] = order
    try:
        yield
    finally:
        _ORDER[0] = previous


def _dim3(value: Any, what: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or not all(isinstance(n, (int, np.integer)) for n in dims):
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    return tuple(int(n) for n in dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


def _marshal(value: Any) -> tuple[str, Any]:
    """CuPy's view of a kernel argument: ("pointer", array) or ("scalar", NumPy scalar)."""
    if isinstance(value, DeviceArray):
        return "pointer", value
    if isinstance(value, np.ndarray):
        raise TypeError("a host NumPy array passed to a kernel (CuPy refuses it: copy it to the device)")
    if isinstance(value, np.generic):
        return "scalar", value
    if type(value) is bool:
        return "scalar", np.bool_(value)
    if type(value) is float:
        return "scalar", np.float64(value)
    if isinstance(value, int):
        return "scalar", (np.uint64(value) if value >= 2**63 else np.int64(value))
    raise TypeError(f"unsupported kernel argument type {type(value).__name__}")


class RawKernel:
    """One kernel of a :class:`RawModule`: ``kernel(grid, block, args)`` runs it on the host."""

    def __init__(self, module: "RawModule", name: str):
        self.module, self.name = module, name
        self.params = module.signatures[name]
        self._launch = getattr(module.library, f"tl_launch_{name}")
        self._launch.restype = None
        self._launch.argtypes = [ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                                 ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]

    def _dtype(self, ctype: str) -> np.dtype:
        if ctype not in self.module.types:
            raise TypeError(f"kernel {self.name}: no NumPy dtype for C type {ctype!r}")
        return self.module.types[ctype]

    def __call__(self, grid: Any, block: Any, args: Any, *, shared_mem: int = 0, stream: Any = None) -> None:
        g, b = _dim3(grid, "grid"), _dim3(block, "block")
        if min(g + b) < 1 or any(n > m for n, m in zip(b, _MAX_BLOCK)) or b[0] * b[1] * b[2] > _MAX_THREADS_PER_BLOCK \
                or any(n > m for n, m in zip(g, _MAX_GRID)):
            raise ValueError(f"kernel {self.name}: invalid launch configuration grid {g}, block {b}")
        if shared_mem:
            raise ValueError("dynamic shared memory is not emulated")
        args = tuple(args)
        if len(args) != len(self.params):
            raise TypeError(f"kernel {self.name} takes {len(self.params)} arguments "
                            f"({', '.join(p.name for p in self.params)}), got {len(args)}")
        slots: list[np.ndarray] = []
        arrays: list[tuple[int, str, np.ndarray]] = []
        for k, (param, value) in enumerate(zip(self.params, args)):
            kind, v = _marshal(value)
            want = self._dtype(param.ctype)
            where = f"kernel {self.name}, argument {k} ({param.ctype}{'*' if param.pointer else ''} {param.name})"
            if param.pointer != (kind == "pointer"):
                raise TypeError(f"{where}: got {'an array' if kind == 'pointer' else f'a {v.dtype} scalar'}")
            if kind == "pointer":
                if v.dtype != want:
                    raise TypeError(f"{where}: got a {v.dtype} array (the kernel would read garbage)")
                if not v.flags.c_contiguous:
                    raise TypeError(f"{where}: got a non-contiguous array (the kernel would misread it)")
                arrays.append((k, param.name, v))
                slots.append(np.array([v.ctypes.data], dtype=np.uintp))
            else:
                if v.dtype != want:
                    raise TypeError(f"{where}: got a {v.dtype} scalar (the kernel would read garbage)")
                slots.append(np.array([v], dtype=want))
        params = (ctypes.c_void_p * max(1, len(slots)))(*[s.ctypes.data for s in slots])
        self._launch((ctypes.c_uint * 3)(*g), (ctypes.c_uint * 3)(*b), params, int(_ORDER[0] == "reverse"))
        for names in _RECORDERS:
            names.append(self.name)
        _check_red_zones(self.name, arrays)


class RawModule:
    """``cupy.RawModule(code=...)`` on the host: the program compiled by :func:`build`."""

    def __init__(self, code: str | None = None, *, path: str | None = None, options: Any = (),
                 backend: str = "nvrtc", translate_cucomplex: bool = False, enable_cooperative_groups: bool = False,
                 name_expressions: Any = None, jitify: bool = False):
        if code is None:
            raise ValueError("the host emulation compiles source code only (code=...)")
        self.code, self.options = code, tuple(options)
        self.signatures = kernel_signatures(code)
        self.types = dict(_C_TYPES)
        for base, alias in re.findall(r"typedef\s+([\w ]+?)\s+(\w+)\s*;", code):
            self.types[alias] = self.types[base]
        self.library = build(code)
        self._kernels: dict[str, RawKernel] = {}

    def get_function(self, name: str) -> RawKernel:
        if name not in self.signatures:
            raise AttributeError(f"no kernel {name!r} in the module (has {', '.join(self.signatures)})")
        if name not in self._kernels:
            self._kernels[name] = RawKernel(self, name)
        return self._kernels[name]


# ------------------------------------------------------------------ the fake cupy module
def fake_cupy() -> types.ModuleType:
    """A ``cupy`` stand-in (see the module docstring): RawModule, RawKernel, ndarray (:class:`DeviceArray`),
    asarray, asnumpy, empty, zeros, ``cuda.runtime.getDeviceCount``; the rest is NumPy's."""
    module = types.ModuleType("cupy", "host emulation of CuPy for the generated CUDA C kernels (tests/cuda_c_host.py)")
    module.__spec__ = importlib.machinery.ModuleSpec("cupy", None)  # importlib.util.find_spec("cupy") finds it
    module.__version__ = "host-emulation"  # type: ignore[attr-defined]

    def asarray(a: Any, dtype: Any = None) -> DeviceArray:
        if isinstance(a, DeviceArray) and (dtype is None or np.dtype(dtype) == a.dtype):
            return a
        host = np.asarray(a, dtype=dtype)
        out = _allocate(host.shape, host.dtype)
        out[...] = host
        return out

    def asnumpy(a: Any) -> np.ndarray:
        return np.array(a, copy=True, subok=False)

    def empty(shape: Any, dtype: Any = float) -> DeviceArray:
        return _allocate(shape, dtype)

    def zeros(shape: Any, dtype: Any = float) -> DeviceArray:
        return _allocate(shape, dtype, fill=0)

    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)
    attrs = {"RawModule": RawModule, "RawKernel": RawKernel, "ndarray": DeviceArray, "asarray": asarray,
             "array": asarray, "asnumpy": asnumpy, "empty": empty, "zeros": zeros,
             "cuda": types.SimpleNamespace(runtime=runtime)}
    for name, value in attrs.items():
        setattr(module, name, value)
    module.__getattr__ = lambda name: _wrap(getattr(np, name))  # type: ignore[attr-defined]
    return module


def _loader_caches() -> list[Any]:
    """The package's cached loaders keyed by backend (their cupy entries hold fake modules)."""
    from transformer_limits.numeric import elementwise
    from transformer_limits.numeric.attention import flow_taylor, kernels, layer
    from transformer_limits.numeric.sphere import mlp_field

    return [kernels.attention_kernels, layer.attention_layer, flow_taylor._jet_module, elementwise.elementwise_activation,
            mlp_field.mlp_field_kernels]


@contextmanager
def host_cupy() -> Iterator[types.ModuleType]:
    """In the block, ``import cupy`` gives :func:`fake_cupy` and the ``cupy`` backend is usable (its
    real probe runs on the fake); afterwards both are as before, and the package's loader caches,
    which may hold fake modules, are cleared."""
    from transformer_limits.numeric import backends

    if compiler() is None:
        raise HostCompileError("no C++ compiler (g++, c++ or clang++) on PATH")
    saved_module, saved_statuses = sys.modules.get("cupy"), backends._STATUSES
    for cache in _loader_caches():
        cache.cache_clear()
    sys.modules["cupy"] = fake = fake_cupy()
    backends._STATUSES = backends._LazyStatuses()  # fresh probes: cupy's sees the fake
    try:
        status = backends.REGISTRY["cupy"].status
        if not status.available:
            raise RuntimeError(f"the fake cupy is not seen as usable: {status.reason}")
        yield fake
    finally:
        backends._STATUSES = saved_statuses
        if saved_module is None:
            sys.modules.pop("cupy", None)
        else:
            sys.modules["cupy"] = saved_module
        for cache in _loader_caches():
            cache.cache_clear()
