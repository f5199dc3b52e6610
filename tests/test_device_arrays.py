"""DeviceArrays: where a GPU backend keeps arrays, how it copies and launches, and the transfer count that
shows a simulator stays on the device.  Runs on the CUDA simulator backend here (device arrays are host
NumPy arrays there, but every put/get is still a counted copy)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from numba import cuda

from transformer_limits.numeric.backends import REGISTRY
from transformer_limits.numeric.device_arrays import THREADS, DeviceArrays, count_transfers, device_arrays

sim = pytest.mark.skipif(not REGISTRY["numba-cuda-sim"].available,
                         reason=f"numba-cuda-sim: {REGISTRY['numba-cuda-sim'].reason}")


@pytest.mark.parametrize("backend", ["numpy", "numba", "blas", "tpu"])
def test_only_gpu_backends_have_device_arrays(backend):
    with pytest.raises(ValueError, match="backend must be a GPU backend"):
        DeviceArrays(backend)


@sim
def test_an_unknown_precision_names_precision():
    with pytest.raises(ValueError, match="precision must be one of"):
        device_arrays("numba-cuda-sim", "bfloat16")


@sim
def test_put_and_get_are_counted_copies_with_their_bytes():
    dev = DeviceArrays("numba-cuda-sim")
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


@sim
def test_precision_sets_the_dtype_of_float_arrays_only():
    dev = DeviceArrays("numba-cuda-sim", "float32")
    assert dev.put(np.ones(3)).dtype == np.float32
    assert dev.put(np.arange(3)).dtype == np.arange(3).dtype  # integers keep theirs
    assert dev.empty((2,)).dtype == np.float32 and dev.zeros((2,)).dtype == np.float32
    assert dev.empty((2,), np.int64).dtype == np.int64
    assert DeviceArrays("numba-cuda-sim").put(np.ones(2, np.float32)).dtype == np.float64
    assert dev.storage == "simulator" and dev.has_array_ops and dev.xp is np


class _Module:
    """A one-kernel module, as a generated python-cuda source would be (the simulator swaps ``cuda`` in
    the kernel's module globals, so the kernel lives at module level)."""

    @staticmethod
    def fill(n, out):
        t = cuda.grid(1)
        if t < n:
            out[t] += t + 1.0


@sim
def test_launch_covers_every_thread_once_and_zero_threads_launch_nothing():
    Module = type("Module", (), {"fill": cuda.jit(_Module.fill)})
    dev = DeviceArrays("numba-cuda-sim")
    n = THREADS + 3  # two blocks, the second one mostly idle
    out = dev.zeros((n,))
    dev.launch(Module, "fill", n, n, out)
    np.testing.assert_array_equal(out, np.arange(1.0, n + 1))
    dev.launch(Module, "fill", 0, 0, out)  # an empty problem: no launch at all
    np.testing.assert_array_equal(out, np.arange(1.0, n + 1))
    with pytest.raises(ValueError, match="threads must be >= 0"):
        dev.launch(Module, "fill", -1, 0, out)


@sim
def test_cuda_c_arguments_take_the_parameter_types_and_refuse_wrong_arrays():
    dev = DeviceArrays("numba-cuda-sim", "float32")
    flag, size, real, arr = dev.c_arguments((True, 7, 0.5, np.zeros(3, np.float32)))
    assert (flag.dtype, size.dtype, real.dtype) == (np.int32, np.int64, np.float32) and real == 0.5
    assert dev.c_arguments((np.float64(2.0),))[0].dtype == np.float32  # a NumPy scalar too
    assert dev.c_arguments((np.arange(3),))[0].dtype == np.arange(3).dtype  # integer arrays pass
    with pytest.raises(ValueError, match="float32 CUDA C launch is a float64 array"):
        dev.c_arguments((np.zeros(3),))
    with pytest.raises(ValueError, match="not C-contiguous"):
        dev.c_arguments((np.zeros((4, 4), np.float32)[:, ::2],))
    assert DeviceArrays("numba-cuda-sim").c_arguments((1.5,))[0].dtype == np.float64


@sim
def test_in_the_simulator_device_arrays_are_host_numpy_arrays():
    dev = DeviceArrays("numba-cuda-sim")
    for a in (dev.put(np.ones(2)), dev.empty((2,)), dev.zeros((2,)), dev.get(dev.put(np.ones(2)))):
        assert type(a) is np.ndarray  # not Numba's FakeCUDAArray: the arrays xp = NumPy computes on


no_cupy = pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed here")


@no_cupy
def test_storage_without_cupy_numba_device_arrays_and_no_array_ops():
    dev = DeviceArrays("numba-cuda")  # constructing probes nothing: no GPU is needed for this
    assert dev.storage == "numba" and dev.xp is None and not dev.has_array_ops
    with pytest.raises(ImportError):
        DeviceArrays("cupy")  # the cupy backend is CuPy's arrays or nothing
