"""A vectorisable exp for the generated Numba kernels (emitted into their sources), float64 and float32.

``math.exp`` inside a Numba loop is a call into libm, which LLVM cannot vectorise; the softmax loops
then run one scalar exp per (query, key) pair.  The emitted ``fast_exp(x)`` is straight-line code
that LLVM inlines and vectorises (AVX2: four lanes):

* clamp x to [-746, 710] with comparisons that let NaN through (below -746 the result underflows to
  0, above 710 it overflows to inf, as for ``numpy.exp``);
* Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2: k = round(x / ln2) by the shifter trick
  (t = x log2(e) + 1.5 * 2^52 holds k in its low mantissa bits), ln2 split into ln2_hi (low 32 bits
  zero, so k ln2_hi is exact) and ln2_lo;
* e^r = 1 + (r + r^2 p(r)), the first terms exact, p of degree 9 (Horner form) the Chebyshev interpolant
  of (e^r - 1 - r) / r^2 on |r| <= ln2/2 (``EXP_POLY``: ``mpmath.chebyfit`` at 40 digits, coefficients
  rounded to float64; |p - (e^r - 1 - r) / r^2| < 1.2e-16, so < 2e-17 relative in e^r, a tenth of an
  ulp): degree 11 in all, two FMAs fewer than the Taylor polynomial of the same accuracy (degree 13,
  used before), 7 % of the exp on AVX2;
* p 2^k rounded once (``_times_pow2(p, t)``, an llvmlite intrinsic reading k from t's bits): with
  AVX-512 one ``vscalefpd`` (``llvm.ldexp``; the loop vectoriser widens it), elsewhere two factors
  2^k1 2^k2, k1 + k2 = k, built from exponent bits (int64 -> float64 bitcasts: LLVM expands a vector
  ``ldexp`` lane by lane without AVX-512, 4.5x slower).  Both round p 2^k once, so subnormal results
  (x < -708.4) are correctly rounded, x up to 709.78 does not overflow early, and the two agree bit
  for bit (tests/test_fast_exp.py compiles both); the choice is made at compile time from the target's
  CPU features, which Numba's cache index records.

**fast_exp_nonpos(x)**, emitted alongside, is the softmax loops' exp (arguments l - max_j l_j and
l - log Z, <= 0 up to a rounding), exp with flush to zero: p 2^k with 2^k built in one step from exponent
bits (normal for -1022 <= k <= 1023; float32 -126..127) and no clamps; results below the least normal
number (x < ln 2^-1022 = -708.396, float32 ln 2^-126 = -87.337) are 0, chosen by one select that lets NaN
through.  Bit for bit ``fast_exp`` for ln 2^-1022 <= x <= 709 (float32: 88), 0 below (an absolute error
< 2.3e-308: the softmax sums are >= 1).  Range handling and scaling take 5 vector instructions (shift,
add, multiply, compare, and) where the clamp and the exactly rounded subnormal scaling took 8 (about 6 %
of the exp on AVX2).  NaN stays NaN (the product p 2^k carries it, whatever the payload), -inf gives 0.
Measured against ``numpy.exp`` (``tests/test_fast_exp.py``): at most 1 ulp over [-745, 0] and on
random samples, NaN/inf/-inf/underflow as numpy.  The helpers use ``fastmath={"contract"}`` only (FMA
contraction; no reassociation, which could undo the Cody-Waite split, and no nnan/ninf).

**The float32 twin** (``fast_exp_lines("float32")``, emitted into the float32 Numba sources; every
constant a ``numpy.float32`` module constant, so nothing in it promotes to float64; AVX2: eight lanes):

* clamp x to [-104, 89] (NaN passes): exp(-104) = 6.8e-46 is below half the least subnormal 2^-149, so
  it rounds to 0, and exp(89) > FLT_MAX overflows to inf, as ``numpy.exp`` in float32;
* Cody-Waite in float32: k = round(x log2(e)) by the shifter 1.5 * 2^23, ln2_hi = 0x3f317000 (12 low
  mantissa bits zero, so k ln2_hi is exact for |k| <= 150), ln2_lo = ln2 - ln2_hi rounded to float32
  (the pair is ln2 to 1.6e-12, i.e. < 3e-10 relative error in r for |k| <= 150);
* e^r by its Taylor polynomial of degree 7 (remainder |r|^8/8! < 6e-9 < 2^-24 e^r on |r| <= ln2/2);
* p 2^k rounded once, as in float64 (``vscalefps`` with AVX-512, else 2^k1 2^k2 from exponent bits,
  k + 254 split in halves), so subnormal results (k < -126) are rounded once and k = 128 (x up to
  88.72) does not overflow early.

Measured (``tests/test_fast_exp.py``) against exp computed in float64 and rounded to float32: at most 1
float32 ulp over [-104, 89] (subnormal results included) and on random samples (``numpy.exp`` in float32
is itself up to 2 ulp off); NaN/inf/-inf/underflow/overflow as ``numpy.exp``.
"""

from __future__ import annotations

from fractions import Fraction
from math import factorial

__all__ = ["EXP_DEGREE", "EXP_DEGREE_F32", "EXP_POLY", "LN_MIN_NORMAL", "LN_MIN_NORMAL_F32", "fast_exp_lines"]

EXP_DEGREE = 11
#: p(r) = sum_n EXP_POLY[n] r^n, ascending: the degree-9 Chebyshev interpolant (10 nodes on |r| <= ln2/2 (1 +
#: 1e-6), mpmath.chebyfit at 40 digits, rounded to float64) of (e^r - 1 - r) / r^2; tests/test_fast_exp.py
#: re-derives it and checks the error bound
EXP_POLY = (0.5000000000000001, 0.16666666666666669, 0.041666666666624164, 0.008333333333330065,
            0.001388888891719689, 0.00019841269863040675, 2.480152132210459e-05, 2.7557268480106926e-06,
            2.762007600563138e-07, 2.5100375929185925e-08)
_SHIFTER = 6755399441055744.0  # 1.5 * 2^52
_SHIFTER_BITS = 0x4338000000000000
LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01  # 0x3fe62e42fee00000
LN2_LO = 1.90821492927058770002e-10
#: ln 2^-1022 rounded to float64: below it exp(x) is subnormal, and ``fast_exp_nonpos`` returns 0
LN_MIN_NORMAL = -708.3964185322641


EXP_DEGREE_F32 = 7
_SHIFTER_F32 = 12582912.0  # 1.5 * 2^23
_SHIFTER_BITS_F32 = 0x4B400000
LN2_HI_F32 = 0.693115234375  # 0x3f317000
LN2_LO_F32 = 3.194618329871446e-05  # float32(ln2 - LN2_HI_F32)
LN_MIN_NORMAL_F32 = -87.3365478515625  # float32(ln 2^-126)


def _times_pow2_lines(precision: str) -> list[str]:
    """Source lines of the intrinsic ``_times_pow2(p, t)`` = p 2^k rounded once, k = bits(t) - bits(shifter)
    (the integer the shifter trick leaves in t's low mantissa bits).  Its code depends on the compile
    target, not on the source text: ``llvm.ldexp`` (one ``vscalefpd``/``vscalefps`` per vector) where the
    target has AVX-512, else the product of two exact powers of two 2^k1 2^k2 (k1 = (k + 2 bias) >> 1,
    k2 = the rest, each a normal number built from exponent bits)."""
    if precision == "float64":
        width, mant, bias2, shifter, ftype, ntype = 64, 52, 2046, _SHIFTER_BITS, "_ir.DoubleType()", "float64"
    else:
        width, mant, bias2, shifter, ftype, ntype = 32, 23, 254, _SHIFTER_BITS_F32, "_ir.FloatType()", "float32"
    return [
        "@_intrinsic",
        "def _times_pow2(typingctx, p, t):",
        "    def codegen(context, builder, signature, args):",
        f"        ity, fty = _ir.IntType({width}), {ftype}",
        f"        k = builder.sub(builder.bitcast(args[1], ity), _ir.Constant(ity, {shifter:#x}))",
        '        if "+avx512f" in getattr(context.codegen(), "_tm_features", ""):  # one vscalef per vector',
        '            ldexp = builder.module.declare_intrinsic("llvm.ldexp", [fty, ity], _ir.FunctionType(fty, [fty, ity]))',
        "            return builder.call(ldexp, [args[0], k])",
        f"        u = builder.add(k, _ir.Constant(ity, {bias2}))  # k + 2 bias > 0 after the clamps",
        "        u1 = builder.ashr(u, _ir.Constant(ity, 1))",
        f"        f1 = builder.bitcast(builder.shl(u1, _ir.Constant(ity, {mant})), fty)",
        f"        f2 = builder.bitcast(builder.shl(builder.sub(u, u1), _ir.Constant(ity, {mant})), fty)",
        "        return builder.fmul(builder.fmul(args[0], f1), f2)",
        f"    return numba.types.{ntype}(numba.types.{ntype}, numba.types.{ntype}), codegen",
        "",
        "",
    ]


def _pow2_normal_lines(precision: str) -> list[str]:
    """Source lines of the intrinsic ``_pow2_normal(t)`` = 2^k as a float, k = bits(t) - bits(shifter), built
    in one step: k sits in t's low mantissa bits, so (bits(t) << mant) mod 2^width is k << mant in two's
    complement, and adding the bits of 1.0 gives the exponent field bias + k: exact for the normal range
    -bias + 1 <= k <= bias, meaningless outside it (the caller selects those lanes away)."""
    width, mant, one, ftype, ntype = ((64, 52, 0x3FF0000000000000, "_ir.DoubleType()", "float64") if precision == "float64"
                                      else (32, 23, 0x3F800000, "_ir.FloatType()", "float32"))
    return [
        "@_intrinsic",
        "def _pow2_normal(typingctx, t):",
        "    def codegen(context, builder, signature, args):",
        f"        ity = _ir.IntType({width})",
        f"        k_shifted = builder.shl(builder.bitcast(args[0], ity), _ir.Constant(ity, {mant}))",
        f"        return builder.bitcast(builder.add(k_shifted, _ir.Constant(ity, {one:#x})), {ftype})",
        f"    return numba.types.{ntype}(numba.types.{ntype}), codegen",
        "",
        "",
    ]


def fast_exp_lines(precision: str = "float64") -> list[str]:
    """Module-level source lines (imports included) defining ``fast_exp(x)`` for ``numba.njit`` code in
    ``precision`` (float64, or float32: the float32 twin, which needs ``import numpy`` before it)."""
    if precision == "float32":
        return _fast_exp_lines_f32()
    if precision != "float64":
        raise ValueError(f"precision must be float64 or float32, got {precision!r}")
    horner = [f"    p = {EXP_POLY[-1]!r}"] + [f"    p = p * r + {c!r}" for c in reversed(EXP_POLY[:-1])]
    return [
        "from llvmlite import ir as _ir",
        "from numba.extending import intrinsic as _intrinsic",
        "",
        "",
        *_times_pow2_lines("float64"),
        *_pow2_normal_lines("float64"),
        *_exp_functions(f"Cody-Waite + degree-{EXP_DEGREE} Chebyshev + exponent bits", "-746.0", "710.0", [
            f"    t = x * {LOG2E!r} + {_SHIFTER!r}",
            f"    kf = t - {_SHIFTER!r}",
            f"    r = x - kf * {LN2_HI!r}",
            f"    r = r - kf * {LN2_LO!r}",
            *horner,
            "    p = 1.0 + (r + r * r * p)"], repr(LN_MIN_NORMAL), "0.0", "709"),
    ]


def _exp_functions(method: str, lo: str, hi: str, core: list[str], ln_min: str, zero: str, valid: str) -> list[str]:
    """``fast_exp`` (both clamps, subnormal results exactly rounded) and ``fast_exp_nonpos`` (no clamps,
    results below the least normal number flushed to ``zero``) around the same ``core`` lines (x -> t, p).
    The softmax arguments l - max l and l - log Z are <= 0 up to a rounding: there the overflow clamp
    changes nothing, and a weight below 2^-1022 next to the row's largest, 1, changes no sum."""
    deco = '@numba.njit(cache=True, fastmath={"contract"})'
    return [deco, "def fast_exp(x):", f'    """exp(x) to 1 ulp, vectorisable ({method})."""',
            f"    x = {lo} if x < {lo} else x  # NaN passes both clamps", f"    x = {hi} if x > {hi} else x", *core,
            "    return _times_pow2(p, t)",
            "", "", deco, "def fast_exp_nonpos(x):",
            f'    """fast_exp(x) bit for bit for ln(least normal) <= x <= {valid}, 0 below (the softmax loops, x <= 0)."""',
            *core, "    e = p * _pow2_normal(t)  # NaN stays NaN: the product carries it",
            f"    return {zero} if x < {ln_min} else e  # flush to zero; NaN passes"]


def _fast_exp_lines_f32() -> list[str]:
    """The float32 twin of :func:`fast_exp_lines` (see the module docstring): its constants are
    ``numpy.float32`` module constants (a float64 literal would promote the whole loop)."""
    coef = [float(Fraction(1, factorial(n))) for n in range(2, EXP_DEGREE_F32 + 1)]
    consts = [("_EXP_LO", -104.0), ("_EXP_HI", 89.0), ("_EXP_LOG2E", LOG2E), ("_EXP_SHIFTER", _SHIFTER_F32),
              ("_EXP_LN2_HI", LN2_HI_F32), ("_EXP_LN2_LO", LN2_LO_F32), ("_EXP_ONE", 1.0), ("_EXP_ZERO", 0.0),
              ("_EXP_LN_MIN_NORMAL", LN_MIN_NORMAL_F32)]
    consts += [(f"_EXP_C{n}", c) for n, c in enumerate(coef, start=2)]
    horner = ([f"    p = _EXP_C{EXP_DEGREE_F32}"]
              + [f"    p = p * r + _EXP_C{n}" for n in range(EXP_DEGREE_F32 - 1, 1, -1)])
    return [
        "from llvmlite import ir as _ir",
        "from numba.extending import intrinsic as _intrinsic",
        "",
        *[f"{name} = numpy.float32({value!r})" for name, value in consts],
        "",
        "",
        *_times_pow2_lines("float32"),
        *_pow2_normal_lines("float32"),
        *_exp_functions(f"float32, Cody-Waite + degree-{EXP_DEGREE_F32} Taylor + exponent bits", "_EXP_LO",
                        "_EXP_HI", [
                            "    t = x * _EXP_LOG2E + _EXP_SHIFTER",
                            "    kf = t - _EXP_SHIFTER",
                            "    r = x - kf * _EXP_LN2_HI",
                            "    r = r - kf * _EXP_LN2_LO",
                            *horner,
                            "    p = _EXP_ONE + (r + r * r * p)"], "_EXP_LN_MIN_NORMAL", "_EXP_ZERO", "88"),
    ]
