"""The vectorisable exp emitted into the generated Numba kernels: accuracy against numpy.exp, in float64 and
(the float32 twin of the float32 kernels) in float32."""

import importlib.util
import sys

import numpy as np
import pytest

from transformer_limits.symbolic.fast_exp import EXP_DEGREE, EXP_POLY, fast_exp_lines

pytest.importorskip("numba")


def _row_exp(tmp_path_factory, precision):
    """fast_exp of ``precision`` applied along an array, in a loop compiled as the kernels' pair loops are."""
    name = f"fast_exp_row_{precision}"
    path = tmp_path_factory.mktemp("fast_exp") / f"{name}.py"
    path.write_text("\n".join(["import numba", "import numpy"] + fast_exp_lines(precision) + [
        "", "", '@numba.njit(fastmath={"contract", "reassoc"})', "def row_exp(x, out):",
        "    for j in range(x.shape[0]):", "        out[j] = fast_exp(x[j])",
        "", "", '@numba.njit(fastmath={"contract", "reassoc"})', "def row_exp_nonpos(x, out):",
        "    for j in range(x.shape[0]):", "        out[j] = fast_exp_nonpos(x[j])", ""]))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)

    def run(x, nonpos=False):
        out = np.empty_like(x)
        (module.row_exp_nonpos if nonpos else module.row_exp)(x, out)
        return out
    return run


@pytest.fixture(scope="module")
def row_exp(tmp_path_factory):
    return _row_exp(tmp_path_factory, "float64")


@pytest.fixture(scope="module")
def row_exp32(tmp_path_factory):
    return _row_exp(tmp_path_factory, "float32")


def _ulps(got, want):
    return np.where(got == want, 0.0, np.abs(got - want) / np.spacing(np.abs(want)))


def test_fast_exp_within_one_ulp_on_the_softmax_range(row_exp):
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-745.0, 0.0, 1_000_001), -rng.exponential(20.0, 200_000),
                        rng.uniform(-700.0, 700.0, 200_000), rng.uniform(-1.0, 1.0, 200_000)])
    assert _ulps(row_exp(x), np.exp(x)).max() <= 1.0  # measured: 1 ulp


def test_the_polynomial_is_the_chebyshev_interpolant_of_the_exp_remainder():
    """EXP_POLY re-derived from its definition: the degree-9 interpolant of (e^r - 1 - r) / r^2 at the
    Chebyshev nodes of |r| <= ln2/2 (1 + 1e-6) (mpmath, 40 digits), rounded to float64; its error
    (with the float64 coefficients, on a fine grid at 40 digits) below 1.2e-16, so below 2e-17 relative
    in e^r = 1 + r + r^2 p(r) (r^2 / e^r <= 0.17).  The degree-8 interpolant would not do (error 60x
    larger, about 5 ulp in e^r): the degree is the least that holds the bound."""
    mp = pytest.importorskip("mpmath")
    with mp.workdps(40):
        a = mp.log(2) / 2 * (1 + mp.mpf("1e-6"))
        f = lambda r: (mp.exp(r) - 1 - r) / r ** 2 if r != 0 else mp.mpf(1) / 2  # noqa: E731
        grid = mp.linspace(-a, a, 1001)

        def worst(coef):
            return max(abs(mp.polyval([mp.mpf(c) for c in reversed(coef)], r) - f(r)) for r in grid)
        fit = [float(c) for c in reversed(mp.chebyfit(f, [-a, a], 10))]
        assert tuple(fit) == EXP_POLY and EXP_DEGREE == len(EXP_POLY) + 1
        assert worst(EXP_POLY) < 1.2e-16
        assert worst([float(c) for c in reversed(mp.chebyfit(f, [-a, a], 9))]) > 50 * 1.2e-16


def test_fast_exp_special_values_as_numpy(row_exp):
    x = np.array([0.0, -0.0, -1e-300, 1e-300, -745.2, -746.0, -1e300, -np.inf, np.inf, 709.7, 710.0, 1e300])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(row_exp(x), np.exp(x))
    assert np.isnan(row_exp(np.array([np.nan]))[0])


# ------------------------------------------------------------------ the float32 twin
def _exp32(x):
    """exp in float64, rounded once to float32: the correctly rounded float32 exp (but for float64
    double-rounding, 2^-29 relative: far below a float32 ulp)."""
    with np.errstate(over="ignore"):
        return np.exp(x.astype(np.float64)).astype(np.float32)


def _ulps32(got, want):
    """|got - want| in float32 ulps of want (spacing of the smallest subnormal where want underflows)."""
    with np.errstate(invalid="ignore"):  # inf - inf where both overflow (equal: 0 ulp)
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return np.where(got == want, 0.0, diff / np.spacing(np.abs(want)).astype(np.float64))


def test_fast_exp_float32_within_one_ulp_over_its_whole_range(row_exp32):
    """[-104, 89] covers every x whose exp is neither 0 nor inf in float32, the subnormal results
    (x < -87.3) included; measured: 1 ulp (numpy.exp in float32 is itself up to 2 ulp off)."""
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-104.0, 89.0, 2_000_001), rng.uniform(-104.0, 89.0, 300_000),
                        -rng.exponential(10.0, 300_000), rng.uniform(-1.0, 1.0, 300_000)]).astype(np.float32)
    got = row_exp32(x)
    assert got.dtype == np.float32
    assert _ulps32(got, _exp32(x)).max() <= 1.0


def test_fast_exp_float32_special_values_as_numpy(row_exp32):
    x = np.array([0.0, -0.0, -1e-30, 1e-30, -103.9, -103.98, -104.0, -105.0, -1e30, -np.inf, np.inf,
                  88.73, 89.0, 1e30], dtype=np.float32)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(row_exp32(x), np.exp(x))  # underflow to 0, overflow to inf, as numpy
    assert np.isnan(row_exp32(np.array([np.nan], np.float32))[0])


def test_fast_exp_float32_is_float32_throughout(row_exp32):
    """No float64 anywhere in the compiled twin (a float64 constant would promote the caller's loop)."""
    import sys as _sys

    module = _sys.modules["fast_exp_row_float32"]
    module.fast_exp(np.float32(0.5))
    for cres in module.fast_exp.overloads.values():
        assert not [k for k, t in cres.type_annotation.typemap.items() if "float64" in str(t)]


# ------------------------------------------------------------------ the two scalings of p 2^k
_PORTABLE_TARGET = {"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "+avx,+avx2,+fma,+sse4.2,+popcnt,+f16c"}


def _scaling_inputs(precision):
    """Every regime of p 2^k: subnormal results, the last normals, both overflow edges, random."""
    rng = np.random.default_rng(3)
    if precision == "float64":
        edges = [np.linspace(-746.0, -700.0, 20_001), np.linspace(700.0, 710.0, 5_001)]
        return np.concatenate(edges + [rng.uniform(-746.0, 710.0, 50_000), rng.uniform(-2.0, 2.0, 10_000)])
    edges = [np.linspace(-104.0, -80.0, 20_001), np.linspace(80.0, 89.0, 5_001)]
    return np.concatenate(edges + [rng.uniform(-104.0, 89.0, 50_000)]).astype(np.float32)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_fast_exp_vscalef_and_portable_scalings_agree_bit_for_bit(tmp_path, precision, row_exp, row_exp32):
    """On an AVX-512 host ``_times_pow2`` is one vscalef, elsewhere two exponent-bit factors: both round
    p 2^k once, so they must agree bit for bit.  The portable code is compiled in a subprocess for a
    Haswell target (AVX2, no AVX-512) and compared with this process's (vscalef where the host has it)."""
    import subprocess

    x = _scaling_inputs(precision)
    np.save(tmp_path / "x.npy", x)
    script = tmp_path / "portable.py"
    script.write_text("\n".join(["import numba", "import numpy"] + fast_exp_lines(precision) + [
        "", "", '@numba.njit(fastmath={"contract", "reassoc"})', "def row_exp(x, out):",
        "    for j in range(x.shape[0]):", "        out[j] = fast_exp(x[j])", "",
        f"x = numpy.load({str(tmp_path / 'x.npy')!r})", "out = numpy.empty_like(x)", "row_exp(x, out)",
        f"numpy.save({str(tmp_path / 'out.npy')!r}, out)",
        "assert 'vscalef' not in ''.join(row_exp.inspect_asm().values())", ""]))
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("NUMBA_CPU")}
    subprocess.run([sys.executable, str(script)], env={**env, **_PORTABLE_TARGET}, check=True, timeout=300)
    here = (row_exp if precision == "float64" else row_exp32)(x)
    portable = np.load(tmp_path / "out.npy")
    bits = np.int64 if precision == "float64" else np.int32
    np.testing.assert_array_equal(here.view(bits), portable.view(bits))


def test_fast_exp_uses_vscalef_where_the_host_has_avx512(row_exp):
    """The fast path is taken where it exists (a renamed Numba attribute would silently drop it)."""
    import llvmlite.binding as ll

    if not ll.get_host_cpu_features().get("avx512f", False):
        pytest.skip("host without AVX-512: the portable scaling is the only one")
    module = sys.modules["fast_exp_row_float64"]
    row_exp(np.zeros(16))
    assert "vscalefpd" in "".join(module.row_exp.inspect_asm().values())


@pytest.mark.parametrize("precision, valid", [("float64", 709.0), ("float32", 88.0)])
def test_fast_exp_nonpos_is_fast_exp_flushed_to_zero_below_the_least_normal(precision, valid, row_exp, row_exp32):
    """The softmax loops' exp is exp with flush to zero: bit for bit fast_exp from ln(least normal) up to
    ``valid`` (2^k stays normal up to x = 709.4, float32 88.4), and +0.0 exactly where exp(x)
    is below the least normal number (numpy's exp there is subnormal or 0), -inf included."""
    run = row_exp if precision == "float64" else row_exp32
    dt = np.dtype(precision)
    tiny = np.finfo(dt).tiny
    rng = np.random.default_rng(5)
    lo = {"float64": -800.0, "float32": -110.0}[precision]
    x = np.concatenate([np.linspace(lo, valid, 400_001), rng.uniform(-5.0, 1e-12, 100_000),
                        rng.uniform(lo, 0.0, 100_000), [-np.inf, -1e30, -0.0, 0.0, valid]]).astype(dt)
    x = np.concatenate([x, np.nextafter(x[:-1], x[1:])])  # neighbours, so the threshold is met on both sides
    got, fast = run(x, nonpos=True), run(x)
    with np.errstate(under="ignore"):
        exact = np.exp(x.astype(np.float64))
    normal = exact >= tiny * (1 + 1e-6)  # clearly normal: bit for bit fast_exp
    subnormal = exact < tiny * (1 - 1e-6)  # clearly subnormal (or 0): flushed
    assert normal.sum() > 400_000 and subnormal.sum() > 50_000
    np.testing.assert_array_equal(got[normal].view(f"i{dt.itemsize}"), fast[normal].view(f"i{dt.itemsize}"))
    assert not np.any(got[subnormal].view(f"i{dt.itemsize}"))  # +0.0: no sign bit, nothing else
    between = ~normal & ~subnormal  # within 1e-6 of the threshold: either the flush or fast_exp
    assert np.all((got[between] == 0) | (got[between] == fast[between]))


def test_the_flush_threshold_is_the_log_of_the_least_normal():
    """LN_MIN_NORMAL (float64) and LN_MIN_NORMAL_F32 are ln 2^-1022 and ln 2^-126 rounded to their precision
    (mpmath, 30 digits), and every x above them has k = round(x / ln 2) >= -1022 (float32 -126), where
    ``_pow2_normal`` builds 2^k exactly."""
    mp = pytest.importorskip("mpmath")
    from transformer_limits.symbolic.fast_exp import LN_MIN_NORMAL, LN_MIN_NORMAL_F32

    with mp.workdps(30):
        assert LN_MIN_NORMAL == float(mp.log(mp.mpf(2) ** -1022))
        assert LN_MIN_NORMAL_F32 == float(np.float32(float(mp.log(mp.mpf(2) ** -126))))
    assert round(LN_MIN_NORMAL / np.log(2)) >= -1022 and round(LN_MIN_NORMAL_F32 / np.log(2)) >= -126


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_fast_exp_nonpos_keeps_nan_whatever_its_payload(precision, row_exp, row_exp32):
    """NaN in, NaN out, for NaNs with payload bits in the low mantissa, where k is read from (an integer add
    of k << mant into p's bits would turn such a NaN into a number; the product p 2^k cannot)."""
    run = row_exp if precision == "float64" else row_exp32
    if precision == "float64":
        bits = np.array([0x7FF8000000000000, 0x7FF8000000000001, 0x7FF8000000000FFF, 0xFFF8000000000123,
                         0x7FF0000000000001, 0x7FFFFFFFFFFFFFFF], dtype=np.uint64)
        x = bits.view(np.float64)
    else:
        bits = np.array([0x7FC00000, 0x7FC00001, 0x7FC001FF, 0xFFC00123, 0x7F800001, 0x7FFFFFFF], dtype=np.uint32)
        x = bits.view(np.float32)
    assert np.all(np.isnan(x)) and np.all(np.isnan(run(np.tile(x, 8), nonpos=True)))
