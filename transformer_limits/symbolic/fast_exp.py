"""A vectorisable exp for the generated Numba kernels (emitted into their sources), float64 and float32.

``math.exp`` inside a Numba loop is a call into libm, which LLVM cannot vectorise; the softmax loops
then run one scalar exp per (query, key) pair.  The emitted ``fast_exp(x)`` is straight-line code
that LLVM inlines and vectorises (AVX2: four lanes):

* clamp x to [-746, 710] with comparisons that let NaN through (below -746 the result underflows to
  0, above 710 it overflows to inf, as for ``numpy.exp``);
* Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2: k = round(x / ln2) by the shifter trick
  (t = x log2(e) + 1.5 * 2^52 holds k in its low mantissa bits), ln2 split into ln2_hi (low 32 bits
  zero, so k ln2_hi is exact) and ln2_lo;
* e^r by its Taylor polynomial of degree 13 (remainder < 5e-18 on |r| <= ln2/2), Horner form with
  the first terms kept exact: 1 + (r + r^2 (1/2 + r (1/6 + ...)));
* 2^k as two factors 2^k1 2^k2, k1 + k2 = k, built from exponent bits (int64 -> float64 bitcast, a
  two-line llvmlite intrinsic), so that subnormal results (x < -708.4) are rounded once and correctly
  and x up to 709.78 does not overflow early.

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
* 2^k as 2^k1 2^k2 from exponent bits (float32 <-> int32 bitcasts; the integer arithmetic is Numba's
  int64, the intrinsics sign-extend and truncate), k + 254 split in halves, so subnormal results
  (k < -126) are rounded once and k = 128 (x up to 88.72) does not overflow early.

Measured (``tests/test_fast_exp.py``) against exp computed in float64 and rounded to float32: at most 1
float32 ulp over [-104, 89] (subnormal results included) and on random samples (``numpy.exp`` in float32
is itself up to 2 ulp off); NaN/inf/-inf/underflow/overflow as ``numpy.exp``.
"""

from __future__ import annotations

from fractions import Fraction
from math import factorial

__all__ = ["EXP_DEGREE", "EXP_DEGREE_F32", "fast_exp_lines"]

EXP_DEGREE = 13
_SHIFTER = 6755399441055744.0  # 1.5 * 2^52
_SHIFTER_BITS = 0x4338000000000000
LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01  # 0x3fe62e42fee00000
LN2_LO = 1.90821492927058770002e-10


EXP_DEGREE_F32 = 7
_SHIFTER_F32 = 12582912.0  # 1.5 * 2^23
_SHIFTER_BITS_F32 = 0x4B400000
LN2_HI_F32 = 0.693115234375  # 0x3f317000
LN2_LO_F32 = 3.194618329871446e-05  # float32(ln2 - LN2_HI_F32)


def fast_exp_lines(precision: str = "float64") -> list[str]:
    """Module-level source lines (imports included) defining ``fast_exp(x)`` for ``numba.njit`` code in
    ``precision`` (float64, or float32: the float32 twin, which needs ``import numpy`` before it)."""
    if precision == "float32":
        return _fast_exp_lines_f32()
    if precision != "float64":
        raise ValueError(f"precision must be float64 or float32, got {precision!r}")
    coef = [float(Fraction(1, factorial(n))) for n in range(2, EXP_DEGREE + 1)]
    horner = [f"    p = {coef[-1]!r}"] + [f"    p = p * r + {c!r}" for c in reversed(coef[:-1])]
    return [
        "from llvmlite import ir as _ir",
        "from numba.extending import intrinsic as _intrinsic",
        "",
        "",
        "@_intrinsic",
        "def _bits_of(typingctx, x):",
        "    def codegen(context, builder, signature, args):",
        "        return builder.bitcast(args[0], _ir.IntType(64))",
        "    return numba.types.int64(numba.types.float64), codegen",
        "",
        "",
        "@_intrinsic",
        "def _float_of(typingctx, n):",
        "    def codegen(context, builder, signature, args):",
        "        return builder.bitcast(args[0], _ir.DoubleType())",
        "    return numba.types.float64(numba.types.int64), codegen",
        "",
        "",
        '@numba.njit(cache=True, fastmath={"contract"})',
        "def fast_exp(x):",
        f'    """exp(x) to 1 ulp, vectorisable (Cody-Waite + degree-{EXP_DEGREE} Taylor + exponent bits)."""',
        "    x = -746.0 if x < -746.0 else x  # NaN passes both clamps",
        "    x = 710.0 if x > 710.0 else x",
        f"    t = x * {LOG2E!r} + {_SHIFTER!r}",
        f"    kf = t - {_SHIFTER!r}",
        f"    r = x - kf * {LN2_HI!r}",
        f"    r = r - kf * {LN2_LO!r}",
        *horner,
        "    p = 1.0 + (r + r * r * p)",
        f"    u = _bits_of(t) - {_SHIFTER_BITS - 2046}  # k + 2046 >= 970",
        "    u1 = u >> 1",
        "    return p * _float_of(u1 << 52) * _float_of((u - u1) << 52)",
    ]


def _fast_exp_lines_f32() -> list[str]:
    """The float32 twin of :func:`fast_exp_lines` (see the module docstring): its constants are
    ``numpy.float32`` module constants (a float64 literal would promote the whole loop)."""
    coef = [float(Fraction(1, factorial(n))) for n in range(2, EXP_DEGREE_F32 + 1)]
    consts = [("_EXP_LO", -104.0), ("_EXP_HI", 89.0), ("_EXP_LOG2E", LOG2E), ("_EXP_SHIFTER", _SHIFTER_F32),
              ("_EXP_LN2_HI", LN2_HI_F32), ("_EXP_LN2_LO", LN2_LO_F32), ("_EXP_ONE", 1.0)]
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
        "@_intrinsic",
        "def _bits_of(typingctx, x):",
        "    def codegen(context, builder, signature, args):",
        "        return builder.sext(builder.bitcast(args[0], _ir.IntType(32)), _ir.IntType(64))",
        "    return numba.types.int64(numba.types.float32), codegen",
        "",
        "",
        "@_intrinsic",
        "def _float_of(typingctx, n):",
        "    def codegen(context, builder, signature, args):",
        "        return builder.bitcast(builder.trunc(args[0], _ir.IntType(32)), _ir.FloatType())",
        "    return numba.types.float32(numba.types.int64), codegen",
        "",
        "",
        '@numba.njit(cache=True, fastmath={"contract"})',
        "def fast_exp(x):",
        f'    """float32 exp(x) to 1 ulp, vectorisable (Cody-Waite + degree-{EXP_DEGREE_F32} Taylor + exponent '
        'bits)."""',
        "    x = _EXP_LO if x < _EXP_LO else x  # NaN passes both clamps",
        "    x = _EXP_HI if x > _EXP_HI else x",
        "    t = x * _EXP_LOG2E + _EXP_SHIFTER",
        "    kf = t - _EXP_SHIFTER",
        "    r = x - kf * _EXP_LN2_HI",
        "    r = r - kf * _EXP_LN2_LO",
        *horner,
        "    p = _EXP_ONE + (r + r * r * p)",
        f"    u = _bits_of(t) - {_SHIFTER_BITS_F32 - 254}  # k + 254 >= 104",
        "    u1 = u >> 1",
        "    return p * _float_of(u1 << 23) * _float_of((u - u1) << 23)",
    ]
