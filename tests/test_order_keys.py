"""The order keys of the generated kernels' row maxima (codegen.order_key_lines): integer order is float
order, the map is a bijection on bits, and a running integer max over keys is the float max."""

import importlib.util
import sys

import numpy as np
import pytest

from transformer_limits.symbolic.codegen import order_key_lines

pytest.importorskip("numba")


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """The intrinsics compiled in a loop like the kernels': keys of an array, back again, and the max."""
    path = tmp_path_factory.mktemp("order_keys") / "order_keys_mod.py"
    path.write_text("\n".join(["import numba", "import numpy"] + order_key_lines() + [
        "", "", '@numba.njit(fastmath={"contract", "reassoc"})', "def keys_of(x, out):",
        "    for j in range(x.shape[0]):", "        out[j] = _order_key(x[j])", "",
        "", "@numba.njit", "def values_of(k, out):",
        "    for j in range(k.shape[0]):", "        out[j] = _order_value(k[j])", "",
        "", '@numba.njit(fastmath={"contract", "reassoc"})', "def row_max(x, lo):",
        "    mk = _order_key(lo)", "    for j in range(x.shape[0]):",
        "        kj = _order_key(x[j])", "        mk = kj if kj > mk else mk", "    return _order_value(mk)", ""]))
    spec = importlib.util.spec_from_file_location("order_keys_mod", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["order_keys_mod"] = module
    spec.loader.exec_module(module)
    return module


def _floats(dtype, n=20_000, seed=0):
    """Every regime: both zeros, subnormals, normals of both signs over the whole exponent range, ±inf."""
    rng = np.random.default_rng(seed)
    info = np.finfo(dtype)
    tiny = np.array([0.0, -0.0, info.smallest_subnormal, -info.smallest_subnormal, info.tiny, -info.tiny,
                     info.max, -info.max, np.inf, -np.inf, 1.0, -1.0], dtype=dtype)
    mant = rng.uniform(1.0, 2.0, n)
    expo = rng.integers(info.minexp - info.nmant, info.maxexp, n)
    signs = rng.choice([-1.0, 1.0], n)
    with np.errstate(over="ignore", under="ignore"):
        random = (signs * np.ldexp(mant, expo)).astype(dtype)
    return np.concatenate([tiny, random])


@pytest.mark.parametrize("dtype, itype", [(np.float64, np.int64), (np.float32, np.int32)])
def test_key_order_is_float_order_and_the_map_is_a_bijection(keys, dtype, itype):
    x = _floats(dtype)
    k = np.empty(x.shape, itype)
    keys.keys_of(x, k)
    # written from the IEEE layout: a negative number's magnitude bits are flipped, the sign bit kept
    bits = x.view(itype)
    mask = np.array(np.iinfo(itype).max, itype)
    np.testing.assert_array_equal(k, np.where(bits < 0, bits ^ mask, bits))
    a, b = x[:, None], x[None, :200]  # every pair against 200 of them: key order is float order, -0.0 < +0.0
    below = (a < b) | ((a == 0) & (b == 0) & np.signbit(a) & ~np.signbit(b))
    np.testing.assert_array_equal(k[:, None] < k[None, :200], below)
    back = np.empty_like(x)
    keys.values_of(k, back)
    np.testing.assert_array_equal(back.view(itype), bits)  # bit for bit, -0.0 and infinities included


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_running_key_max_is_the_float_max(keys, dtype):
    rng = np.random.default_rng(1)
    for n in (1, 7, 8, 9, 64, 1001):  # vector body and remainder
        for scale in (1e-300 if dtype == np.float64 else 1e-40, 1.0, 1e300 if dtype == np.float64 else 1e30):
            with np.errstate(over="ignore", under="ignore"):
                x = (rng.standard_normal(n) * scale).astype(dtype)
            got = keys.row_max(x, dtype(-np.inf))
            assert got == x.max()  # (numba boxes a float32 result as a Python float: same value)
    assert keys.row_max(np.array([-np.inf, -np.inf]), -np.inf) == -np.inf
    assert keys.row_max(np.array([-5.0, np.inf, 3.0]), -np.inf) == np.inf
    assert np.signbit(keys.row_max(np.array([-0.0]), -np.inf))  # -0.0 kept, as a float max keeps it
