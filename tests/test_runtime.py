"""Runtime: where a backend keeps arrays, how it copies and runs kernels (one calling convention for every
flavour), and the transfer count that shows a simulator stays on the device.  The device half runs on the
CUDA simulator backend here (device arrays are host NumPy arrays there, but every put/get is still a
counted copy)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from numba import cuda

from transformer_limits.numeric.backends import REGISTRY
from transformer_limits.numeric.flavours import FLAVOURS, Flavour
from transformer_limits.numeric.runtime import THREADS, THREADS_2D, Runtime, count_transfers, runtime_of

sim = pytest.mark.skipif(not REGISTRY["numba-cuda-sim"].available,
                         reason=f"numba-cuda-sim: {REGISTRY['numba-cuda-sim'].reason}")


@pytest.mark.parametrize("backend", ["tpu", "", None])
def test_an_unknown_backend_names_backend(backend):
    with pytest.raises(ValueError, match="unknown backend"):
        Runtime(backend)


def test_an_unknown_precision_names_precision():
    with pytest.raises(ValueError, match="precision must be one of"):
        runtime_of("numpy", "bfloat16")


@pytest.mark.parametrize("backend", ["numba-cuda-sim", "numba-cuda"])
def test_float32_is_refused_where_the_flavour_computes_in_float64_only(backend):
    """The python-cuda flavour's literals are float64: a float32 runtime would promote halfway, silently."""
    with pytest.raises(ValueError, match=f"precision 'float32' is not available on backend '{backend}'"):
        Runtime(backend, "float32")


class _Echo:
    """A kernel module whose kernel returns its arguments (what a launch passed)."""

    @staticmethod
    def kernel(*args):
        return args


def test_a_float32_numba_launch_takes_float_scalars_as_float32():
    """Numba types a Python float as float64, which would promote a float32 kernel's arithmetic: a float32
    runtime of the typed flavour casts float scalars (as CUDA C takes them as ``real``); flags, sizes
    and arrays pass as they are, and float64 launches are untouched."""
    flag, size, beta, arr = Runtime("numba", "float32").call(_Echo, "kernel", 1, True, 7, 0.5, np.zeros(2, np.float32))
    assert type(beta) is np.float32 and beta == 0.5 and flag is True and size == 7 and type(size) is int
    assert Runtime("numba", "float32").call(_Echo, "kernel", 1, np.float64(2.0))[0].dtype == np.float32
    assert type(Runtime("numba").call(_Echo, "kernel", 1, 0.5)[0]) is float  # float64: as always
    assert type(Runtime("numpy", "float32").call(_Echo, "kernel", 1, 0.5)[0]) is float  # NumPy: its dtype rules


@pytest.mark.parametrize("backend", ["numpy", "blas", "numba"])
def test_host_runtimes_keep_numpy_arrays_and_count_no_transfers(backend):
    rt = Runtime(backend)
    assert (rt.storage, rt.xp, rt.on_device, rt.has_array_ops) == ("host", np, False, True)
    host = np.arange(6.0).reshape(2, 3)
    with count_transfers() as log:
        a = rt.put(host)
        host[0, 0] = 99.0  # a private copy: a loop may write into it
        back = rt.get(a)
    assert (log.to_device, log.to_host) == (0, 0)
    assert back is a and back[0, 0] == 0.0 and a.flags.c_contiguous
    assert rt.put(np.arange(3)).dtype == np.arange(3).dtype and rt.zeros((2,)).dtype == np.float64
    rt.synchronize()  # nothing to wait for


def test_host_call_is_a_python_call_with_the_sizes_dropped():
    """The host flavours run a kernel as a call on the host arrays (threads are the device's business,
    sizes are for C)."""
    seen = []
    Module = type("Module", (), {"kernel": staticmethod(lambda *args: seen.append(args) or "done")})
    rt = Runtime("numba")
    assert rt.call(Module, "kernel", 5, 1.0, 2.0, sizes=(7, 8)) == "done"
    assert seen == [(1.0, 2.0)]


def test_every_flavour_is_one_record_and_every_backend_runs_one():
    assert set(FLAVOURS) == {"python-numpy", "numpy-blas", "python-numba", "python-cuda", "cuda-c"}
    for name, b in REGISTRY.items():
        assert isinstance(b.flavour, Flavour) and FLAVOURS[b.flavour.name] is b.flavour
        if name == "cupy" and importlib.util.find_spec("cupy") is None:
            continue  # its storage is CuPy's arrays or nothing
        rt = Runtime(name)  # no device is needed to build one
        assert rt.on_device == b.flavour.on_device
        assert (rt.storage == "host") == (not b.flavour.on_device)
    assert [f.name for f in FLAVOURS.values() if f.takes_sizes] == ["cuda-c"]
    with pytest.raises(ValueError, match="launch must be one of"):
        Flavour("x", "", "", False, "teleport", ("float64",), "#", False, "")
    with pytest.raises(ValueError, match="a printer and a suffix"):
        Flavour("x", "c", "", False, "call", ("float64",), "#", False, "")


@sim
def test_put_and_get_are_counted_copies_with_their_bytes():
    dev = Runtime("numba-cuda-sim")
    host = np.arange(6.0).reshape(2, 3)
    with count_transfers() as outer:
        with count_transfers() as inner:
            a = dev.put(host)
        host[0, 0] = 99.0  # a copy: the device array does not see it
        back = dev.get(a)
        a[1, 1] = -1.0
    assert (inner.to_device, inner.to_host, inner.bytes_to_device) == (1, 0, 48)
    assert (outer.to_device, outer.to_host, outer.bytes_to_device, outer.bytes_to_host) == (1, 1, 48, 48)
    assert back[0, 0] == 0.0 and back[1, 1] == 4.0  # ... nor the host copy the device array
    with count_transfers() as none:
        dev.empty((3,)), dev.zeros((2, 2))
    assert (none.to_device, none.to_host) == (0, 0)  # allocations are not transfers


def test_precision_sets_the_dtype_of_float_arrays_only():
    dev = Runtime("numpy", "float32")
    assert dev.put(np.ones(3)).dtype == np.float32
    assert dev.put(np.arange(3)).dtype == np.arange(3).dtype  # integers keep theirs
    assert dev.empty((2,)).dtype == np.float32 and dev.zeros((2,)).dtype == np.float32
    assert dev.empty((2,), np.int64).dtype == np.int64
    assert Runtime("numpy").put(np.ones(2, np.float32)).dtype == np.float64
    assert dev.storage == "host" and dev.has_array_ops and dev.xp is np


class _Module:
    """A one-kernel module, as a generated python-cuda source would be (the simulator swaps ``cuda`` in
    the kernel's module globals, so the kernel lives at module level)."""

    @staticmethod
    def fill(n, out):
        t = cuda.grid(1)
        if t < n:
            out[t] += t + 1.0


class _Module2D:
    @staticmethod
    def fill(nx, ny, out):
        i, j = cuda.grid(2)
        if i < nx and j < ny:
            out[i, j] += i * ny + j + 1.0


@sim
def test_launch_covers_every_thread_once_and_zero_threads_launch_nothing():
    Module = type("Module", (), {"fill": cuda.jit(_Module.fill)})
    dev = Runtime("numba-cuda-sim")
    n = THREADS + 3  # two blocks, the second one mostly idle
    out = dev.zeros((n,))
    dev.call(Module, "fill", n, n, out)
    np.testing.assert_array_equal(out, np.arange(1.0, n + 1))
    dev.call(Module, "fill", 0, 0, out)  # an empty problem: no launch at all
    np.testing.assert_array_equal(out, np.arange(1.0, n + 1))
    with pytest.raises(ValueError, match="threads must be >= 0"):
        dev.call(Module, "fill", -1, 0, out)


@sim
def test_a_two_dimensional_launch_covers_every_pair_once():
    Module = type("Module", (), {"fill": cuda.jit(_Module2D.fill)})
    dev = Runtime("numba-cuda-sim")
    nx, ny = THREADS_2D[0] + 1, 3  # two blocks along x, one mostly idle along y
    out = dev.zeros((nx, ny))
    dev.call(Module, "fill", (nx, ny), nx, ny, out)
    np.testing.assert_array_equal(out, np.arange(1.0, nx * ny + 1).reshape(nx, ny))
    with pytest.raises(ValueError, match="an int or a pair"):
        dev.call(Module, "fill", (1, 2, 3), nx, ny, out)


def test_cuda_c_arguments_take_the_parameter_types_and_refuse_wrong_arrays():
    dev = Runtime("cupy", "float32") if False else Runtime.__new__(Runtime)  # no CuPy needed: arguments only
    dev.dtype, dev.precision = np.dtype(np.float32), "float32"
    flag, size, real, arr = dev.c_arguments((True, 7, 0.5, np.zeros(3, np.float32)))
    assert (flag.dtype, size.dtype, real.dtype) == (np.int32, np.int64, np.float32) and real == 0.5
    assert dev.c_arguments((np.float64(2.0),))[0].dtype == np.float32  # a NumPy scalar too
    assert dev.c_arguments((np.arange(3),))[0].dtype == np.arange(3).dtype  # integer arrays pass
    with pytest.raises(ValueError, match="float32 CUDA C launch is a float64 array"):
        dev.c_arguments((np.zeros(3),))
    with pytest.raises(ValueError, match="not C-contiguous"):
        dev.c_arguments((np.zeros((4, 4), np.float32)[:, ::2],))
    assert Runtime("numpy").c_arguments((1.5,))[0].dtype == np.float64


@sim
def test_in_the_simulator_device_arrays_are_host_numpy_arrays():
    dev = Runtime("numba-cuda-sim")
    for a in (dev.put(np.ones(2)), dev.empty((2,)), dev.zeros((2,)), dev.get(dev.put(np.ones(2)))):
        assert type(a) is np.ndarray  # not Numba's FakeCUDAArray: the arrays xp = NumPy computes on


no_cupy = pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed here")


@no_cupy
def test_storage_without_cupy_numba_device_arrays_and_no_array_ops():
    dev = Runtime("numba-cuda")  # constructing probes nothing: no GPU is needed for this
    assert dev.storage == "numba" and dev.xp is None and not dev.has_array_ops
    with pytest.raises(ImportError):
        Runtime("cupy")  # the cupy backend is CuPy's arrays or nothing
