"""Derivation ``adamw-box``: the AdamW update bound ``C_β(k)`` and the parameter box ``R_θ(K)``.

docs/theory.md §A.4.  With ``m_k = (1−β1) Σ_{j<k} β1^j g_{k−j}`` and ``v_k ≥ (1−β2) β2^j g_{k−j}²`` for every
``j < k``, the triangle inequality gives, per coordinate (AdamW) or per block in Frobenius norm
(Blockwise AdamW, ``v^B`` built from ``‖g^B‖_F²``),

    |m̂_k| / √v̂_k ≤ C_β(k) = (1−β1)√(1−β2^k) / ((1−β1^k)√(1−β2)) · Σ_{j<k} (β1/√β2)^j .

``C_β(k)`` is increasing in ``k`` (proof below, checked here), so ``sup_k C_β(k) = C_β(∞)``, finite
iff ``β1 < √β2``.  torch's order (decoupled decay first) gives ``θ_k = (1−η λ) θ_{k−1} − η u_k``
with ``‖u_k‖ ≤ C_β(k)``, hence the box radius

    R_θ(K) = (1−ηλ)^K R_0 + η C_β(K) Σ_{j<K} (1−ηλ)^j ≤ max(R_0, C_β/λ)      (0 ≤ ηλ ≤ 1),

in the ∞-norm per coordinate (AdamW) or the Frobenius norm per block (Blockwise AdamW, sum
normalisation).  The numeric counterpart is :mod:`transformer_limits.numeric.optim.adamw`.
"""

from __future__ import annotations

import math
from functools import lru_cache

import mpmath
import sympy as sp

from transformer_limits.symbolic.derivation import Derivation, Param, register_derivation

__all__ = ["adamw_box", "BETA1", "BETA2", "K_STEP", "C_BETA_K", "C_BETA_INF", "C_SHARP_K", "R_THETA"]

BETA1 = sp.Symbol("beta_1", positive=True)
BETA2 = sp.Symbol("beta_2", positive=True)
K_STEP = sp.Symbol("k", integer=True, positive=True)
J = sp.Symbol("j", integer=True, nonnegative=True)
ETA = sp.Symbol("eta", positive=True)
LAMBDA = sp.Symbol("lambda", nonnegative=True)
RADIUS0 = sp.Symbol("R_0", nonnegative=True)
K_STEPS = sp.Symbol("K", integer=True, positive=True)
N_ENTRIES = sp.Symbol("n", integer=True, positive=True)

RATIO = BETA1 / sp.sqrt(BETA2)                      # r = β1/√β2
PREFACTOR = (1 - BETA1) / sp.sqrt(1 - BETA2)
_C = sp.Symbol("C", positive=True)                  # a constant per-step bound c_k <= C


def _geometric(ratio: sp.Expr, count: sp.Expr) -> sp.Expr:
    """``Σ_{j<count} ratio^j`` in closed form (``count`` when ratio = 1)."""
    return sp.Piecewise((count, sp.Eq(ratio, 1)), ((1 - ratio**count) / (1 - ratio), True))


def _branch(expr: sp.Expr, index: int) -> sp.Expr:
    """``expr`` with every Piecewise replaced by its branch ``index`` (0: ratio = 1, -1: generic)."""
    return expr.replace(lambda e: isinstance(e, sp.Piecewise), lambda e: e.args[index][0])


def _bias_factor(count: sp.Expr) -> sp.Expr:
    return PREFACTOR * sp.sqrt(1 - BETA2**count) / (1 - BETA1**count)


C_BETA_K = _bias_factor(K_STEP) * _geometric(RATIO, K_STEP)
C_BETA_INF = (1 - BETA1) / (sp.sqrt(1 - BETA2) * (1 - RATIO))
C_SHARP_K = _bias_factor(K_STEP) * sp.sqrt(_geometric(RATIO**2, K_STEP))
C_SHARP_INF = PREFACTOR / sp.sqrt(1 - RATIO**2)
DECAY_SUM = _geometric(1 - ETA * LAMBDA, K_STEPS)     # Σ_{j<K} (1 − ηλ)^j


def _radius(c: sp.Expr) -> sp.Expr:
    """Solution of R_k = (1−ηλ) R_{k−1} + η c at k = K, R_0 given."""
    return (1 - ETA * LAMBDA) ** K_STEPS * RADIUS0 + ETA * c * DECAY_SUM


R_THETA = _radius(C_BETA_K.subs(K_STEP, K_STEPS))
R_STATIONARY = sp.Max(RADIUS0, C_BETA_INF / LAMBDA)

GENERIC_LATEX = {
    "C_beta_k": r"C_\beta(k) = \frac{(1-\beta_1)\sqrt{1-\beta_2^k}}{(1-\beta_1^k)\sqrt{1-\beta_2}}"
    r"\sum_{j=0}^{k-1}\Big(\frac{\beta_1}{\sqrt{\beta_2}}\Big)^j \;\ge\; \frac{|\hat m_k|}{\sqrt{\hat v_k}}",
    "C_beta_inf": r"\sup_k C_\beta(k) = C_\beta(\infty) = \frac{1-\beta_1}{\sqrt{1-\beta_2}\,"
    r"(1-\beta_1/\sqrt{\beta_2})}\quad(\beta_1<\sqrt{\beta_2})",
    "C_beta_sharp_k": r"\tilde C_\beta(k) = \frac{(1-\beta_1)\sqrt{1-\beta_2^k}}{(1-\beta_1^k)"
    r"\sqrt{1-\beta_2}}\Big(\sum_{j=0}^{k-1}\big(\beta_1^2/\beta_2\big)^j\Big)^{1/2} = "
    r"\sup_{g}\frac{|\hat m_k|}{\sqrt{\hat v_k}}",
    "R_theta": r"\|\theta_K\| \le R_\theta(K) = (1-\eta\lambda)^K R_0 + \eta\, C_\beta(K)"
    r"\sum_{j=0}^{K-1}(1-\eta\lambda)^j \le \max\big(R_0,\, C_\beta/\lambda\big)",
    "R_theta_coordinatewise_frobenius": r"\|\theta_K^B\|_{op} \le \|\theta_K^B\|_F \le "
    r"\sqrt{|B|}\,\max_i|\theta_{K,i}| \le \sqrt{|B|}\, R_\theta(K)",
}

_MONOTONE_PROOF = (
    "C_beta(x) increasing in real x >= 1 (hence sup_k C_beta(k) = C_beta(inf)): with "
    "h(s) = s/(e^s - 1), d/dx log(1 - t^x) = h(-x log t)/x for 0 < t < 1 (SymPy identity); "
    "h is decreasing (SymPy: numerator of h' is N(s) = e^s - 1 - s e^s, N(0) = 0, N'(s) = -s e^s < 0) "
    "and 0 < h < 1; so d/dx log C_beta = psi(beta2)/2 + psi(r) - psi(beta1) > 0 with psi(t) = "
    "h(-x log t)/x increasing in t and r = beta1/sqrt(beta2) > beta1; for r >= 1, "
    "d/dx log sum_{j<x} r^j >= 1/x > psi(beta1)"
)


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise RuntimeError(f"adamw-box: check failed: {what}")


@lru_cache(maxsize=1)
def _symbolic_checks() -> tuple[str, ...]:
    """Identities behind the formulas; a failure raises (a derivation never returns unchecked)."""
    checks = []
    direct = sp.summation(RATIO**J, (J, 0, K_STEP - 1))
    _require(sp.simplify(_branch(direct, -1) - _branch(_geometric(RATIO, K_STEP), -1)) == 0,
             "geometric sum (generic branch)")
    _require(sp.simplify(_branch(direct, 0) - K_STEP) == 0, "geometric sum (ratio 1)")
    checks.append("SymPy summation of sum_{j<k} (beta1/sqrt(beta2))^j equals the closed form "
                  "(both branches)")
    _require(sp.simplify(C_BETA_K.subs(K_STEP, 1)) == 1, "C_beta(1) = 1")
    checks.append("SymPy: C_beta(1) = 1 (the first step moves each coordinate/block by exactly eta "
                  "when eps = 0)")
    p1, p2, pr = sp.symbols("P_1 P_2 P_r", nonnegative=True)
    through_powers = _branch(C_BETA_K, -1).subs(
        {BETA1**K_STEP: p1, BETA2**K_STEP: p2, RATIO**K_STEP: pr})
    _require(not through_powers.has(K_STEP), "C_beta through powers")
    _require(sp.simplify(through_powers.subs({p1: 0, p2: 0, pr: 0}) - C_BETA_INF) == 0,
             "C_beta(inf) limit")
    checks.append("C_beta(inf): setting beta1^k, beta2^k, (beta1/sqrt(beta2))^k -> 0 (beta1 < "
                  "sqrt(beta2)) in the closed form gives (1-beta1)/(sqrt(1-beta2)(1-beta1/sqrt(beta2)))")
    s, t, x = sp.symbols("s t x", positive=True)
    h = s / (sp.exp(s) - 1)
    numerator = sp.exp(s) - 1 - s * sp.exp(s)
    _require(sp.simplify(sp.diff(h, s) * (sp.exp(s) - 1) ** 2 - numerator) == 0, "h' numerator")
    _require(numerator.subs(s, 0) == 0 and sp.simplify(sp.diff(numerator, s) + s * sp.exp(s)) == 0,
             "N(0) = 0, N' = -s e^s")
    psi = sp.diff(sp.log(1 - t**x), x)
    _require(sp.simplify(psi - h.subs(s, -x * sp.log(t)) / x) == 0, "psi identity")
    checks.append(_MONOTONE_PROOF)
    lam_pos, q = sp.symbols("lambda_pos q", positive=True)  # q = 1 - eta*lambda
    at_q = {LAMBDA: lam_pos, ETA: (1 - q) / lam_pos}
    radius = _radius(_C)
    recursion = radius - (1 - ETA * LAMBDA) * radius.subs(K_STEPS, K_STEPS - 1) - ETA * _C
    _require(sp.simplify(sp.expand(_branch(recursion, -1).subs(at_q), power_exp=True)) == 0,
             "R_theta recursion (lambda > 0)")
    _require(sp.simplify(_branch(recursion, 0).subs(LAMBDA, 0)) == 0, "R_theta recursion (lambda = 0)")
    convex = _branch(radius, -1) - ((1 - ETA * LAMBDA) ** K_STEPS * RADIUS0
                                    + (1 - (1 - ETA * LAMBDA) ** K_STEPS) * _C / LAMBDA)
    _require(sp.simplify(convex.subs(at_q)) == 0, "R_theta as a convex combination")
    checks.append("SymPy: R_theta(K) solves R_k = (1-eta*lambda) R_{k-1} + eta*C (lambda = 0 and "
                  "> 0) and equals a R_0 + (1-a) C/lambda with a = (1-eta*lambda)^K in [0, 1], "
                  "hence <= max(R_0, C/lambda) when eta*lambda <= 1")
    return tuple(checks)


@lru_cache(maxsize=64)
def _numeric_checks(b1: float, b2: float) -> tuple[tuple[str, ...], float]:
    """mpmath (60 digits) checks at the given betas; returns check lines and sup_k C_beta(k)."""
    checks = []
    with mpmath.workdps(60):
        m1, m2 = mpmath.mpf(b1), mpmath.mpf(b2)
        pre = (1 - m1) / mpmath.sqrt(1 - m2)
        r = m1 / mpmath.sqrt(m2)
        branch = 0 if r == 1 else -1
        closed = sp.lambdify((BETA1, BETA2, K_STEP), _branch(C_BETA_K, branch), modules="mpmath")
        sharp = sp.lambdify((BETA1, BETA2, K_STEP), _branch(C_SHARP_K, branch), modules="mpmath")

        def direct(kk: int) -> mpmath.mpf:
            total = mpmath.fsum(r**jj for jj in range(kk))
            return pre * mpmath.sqrt(1 - m2**kk) / (1 - m1**kk) * total

        err = max(abs(closed(m1, m2, kk) - direct(kk)) / direct(kk) for kk in range(1, 51))
        _require(err < mpmath.mpf(10) ** -25, "closed form = direct sum")
        checks.append(f"mpmath (60 digits), beta=({b1}, {b2}): closed form = direct sum for "
                      f"k = 1..50 (max rel. diff {float(err):.1e})")
        slowest = max(b1, b2, float(r) if r < 1 else 0.5)
        k_end = int(min(10**9, max(10, 120 / -math.log(slowest))))  # powers < 1e-52 from here
        dense = min(2000, k_end)
        grid = sorted(set(range(1, dense + 1)) | {int(dense * 1.05**i) for i in range(500)
                                                  if dense * 1.05**i <= k_end} | {k_end})
        vals = [closed(m1, m2, kk) for kk in grid]
        # beyond k = 115/-log(slowest) every power is < 1e-50 and the increments of C_beta(k) fall
        # below the working precision (e.g. beta1 = 0, beta2 = 1e-12 from k = 6): equality allowed there
        unresolved = 115 / -math.log(slowest)
        steps_ok = [b > a or (b == a and kb > unresolved)
                    for a, b, kb in zip(vals, vals[1:], grid[1:])]
        _require(all(steps_ok), "C_beta(k) increasing")
        if not all(b > a for a, b in zip(vals, vals[1:])):
            checks.append(f"mpmath: C_beta(k) strictly increasing up to k = {int(unresolved)}; beyond, "
                          f"its increments are below {mpmath.mp.dps} digits (constant to working precision)")
        if r < 1:
            sup = pre / (1 - r)
            gap = (sup - vals[-1]) / sup
            _require(gap >= 0, "C_beta(k) <= C_beta(inf)")
            checks.append(f"mpmath: C_beta(k) strictly increasing on k = 1..{dense} and a 5% grid up to "
                          f"k = {k_end}, where C_beta(inf) - C_beta(k) = {float(gap):.1e} relative; "
                          f"sup_k C_beta(k) = C_beta(inf) = {float(sup):.12g}")
            sup_value = float(sup)
        else:
            checks.append(f"mpmath: C_beta(k) strictly increasing on k = 1..{dense} and up to "
                          f"k = {k_end}; beta1 >= sqrt(beta2) so sup_k C_beta(k) = inf")
            sup_value = math.inf
        worst = mpmath.mpf(0)
        for kk in range(1, 21):
            m = v = mpmath.mpf(0)
            for i in range(1, kk + 1):  # g_i = (beta1/beta2)^(k-i): Cauchy-Schwarz equality case
                g = (m1 / m2) ** (kk - i)
                m, v = m1 * m + (1 - m1) * g, m2 * v + (1 - m2) * g * g
            ratio = (m / (1 - m1**kk)) / mpmath.sqrt(v / (1 - m2**kk))
            worst = max(worst, abs(ratio - sharp(m1, m2, kk)) / ratio)
            _require(ratio <= closed(m1, m2, kk) * (1 + mpmath.mpf(10) ** -25), "ratio <= C_beta(k)")
        _require(worst < mpmath.mpf(10) ** -25, "sharp constant attained")
        checks.append("mpmath: gradients g_{k-j} = (beta1/beta2)^j attain |m_hat|/sqrt(v_hat) = the "
                      "sharp constant (Cauchy-Schwarz equality), <= C_beta(k), for k = 1..20")
    return tuple(checks), sup_value


_PARAMS = (
    Param("beta1", float, 0.9, "first-moment decay beta1 in [0, 1)", low=0.0, high=1.0),
    Param("beta2", float, 0.999, "second-moment decay beta2 in (0, 1) (torch default 0.999)",
          low=0.0, high=1.0, low_open=True),
    Param("lr", float, None, "constant learning rate eta > 0", low=0.0, low_open=True),
    Param("weight_decay", float, None, "decoupled weight decay lambda >= 0 (lr*weight_decay <= 1)",
          low=0.0),
    Param("R0", float, None, "radius of the initialisation: max |theta_0,i| (coordinatewise) or "
          "||theta_0^B||_F (blockwise)", low=0.0),
    Param("steps", int, None, "number of steps K for R_theta(K)", low=1),
    Param("k", int, None, "step index for C_beta(k)", low=1),
    Param("entries", int, None, "entries |B| of a block, for the coordinatewise Frobenius radius",
          low=1),
)


def _check_cross(beta1_: float, beta2_: float, lr_, weight_decay_) -> None:
    if beta1_ >= 1.0:
        raise ValueError(f"parameter 'beta1' must be < 1, got {beta1_!r}")
    if beta2_ >= 1.0:
        raise ValueError(f"parameter 'beta2' must be < 1, got {beta2_!r}")
    if lr_ is not None and weight_decay_ is not None and lr_ * weight_decay_ > 1.0:
        raise ValueError(f"parameter 'weight_decay' must satisfy lr*weight_decay <= 1 "
                         f"(decay factor 1 - lr*weight_decay >= 0), got {weight_decay_!r} with lr={lr_!r}")


@register_derivation("adamw-box", title="AdamW update bound C_beta(k) and parameter box R_theta",
                     params=_PARAMS)
def adamw_box(beta1: float, beta2: float, lr: float | None, weight_decay: float | None,
              R0: float | None, steps: int | None, k: int | None, entries: int | None) -> Derivation:
    _check_cross(beta1, beta2, lr, weight_decay)
    numeric_checks, sup_value = _numeric_checks(beta1, beta2)
    checks = list(_symbolic_checks() + numeric_checks)
    betas = {BETA1: sp.Float(beta1, 30), BETA2: sp.Float(beta2, 30)}
    finite = beta1 < math.sqrt(beta2)

    values: dict = {"C_beta_inf": sup_value, "C_beta_sup": sup_value,
                    "C_beta_sharp_sup": float(C_SHARP_INF.subs(betas)) if beta1**2 < beta2 else math.inf}
    if k is not None:
        values["C_beta_k"] = _float(C_BETA_K.subs(betas).subs(K_STEP, k))
    if None not in (lr, weight_decay, R0, steps):
        point = {**betas, ETA: lr, LAMBDA: weight_decay, RADIUS0: R0, K_STEPS: steps}
        radius = _float(R_THETA.subs(point))
        values["R_theta_coordinatewise"] = radius
        values["R_theta_blockwise"] = radius
        if entries is not None:
            values["R_theta_coordinatewise_frobenius"] = math.sqrt(entries) * radius
            values["frobenius_growth_factor"] = math.sqrt(entries)
    if lr is not None and weight_decay is not None and R0 is not None and weight_decay > 0:
        values["R_theta_all_steps"] = max(R0, sup_value / weight_decay)

    expressions = {
        "C_beta_k": C_BETA_K,
        "C_beta_inf": C_BETA_INF,
        "C_beta_sup": C_BETA_INF,
        "C_beta_sharp_k": C_SHARP_K,
        "C_beta_sharp_inf": C_SHARP_INF,
        "R_theta_coordinatewise": R_THETA,
        "R_theta_blockwise": R_THETA,
        "R_theta_coordinatewise_frobenius": sp.sqrt(N_ENTRIES) * R_THETA,
        "R_theta_all_steps": R_STATIONARY,
    }
    assumptions = [
        "AdamW as torch.optim.AdamW: decoupled decay theta <- theta(1 - eta*lambda) before the Adam "
        "step, bias corrections 1 - beta^k, eps added to sqrt(v_hat); m_0 = v_0 = 0",
        "0 <= beta1 < 1, 0 < beta2 < 1; C_beta(inf) = sup_k C_beta(k) finite iff beta1 < sqrt(beta2) "
        + ("(holds here)" if finite else "(FAILS here: the sup is infinite)"),
        "the bound holds for every gradient sequence (any scale, sign, sparsity); eps > 0 only lowers "
        "|m_hat|/(sqrt(v_hat)+eps); with eps = 0 a coordinate with only zero gradients so far is 0/0",
        "R_theta(K) uses constant eta with 0 <= eta*lambda <= 1 and C_beta(k) <= C_beta(K) for k <= K "
        "(monotonicity); for lambda = 0 it is R_0 + K*eta*C_beta(K)",
        "coordinatewise: R_0 = max_i |theta_0,i| and the box is in the infinity norm per coordinate; in "
        "Frobenius/operator norm of a block with |B| entries it grows by sqrt(|B|) (dimension-dependent)",
        "blockwise: v^B from ||g^B||_F^2 NOT divided by |B|; R_0 = ||theta_0^B||_F, the box is the "
        "Frobenius ball per block (dimension-free; operator norm <= Frobenius). With the mean "
        "normalisation ||g^B||_F^2/|B| replace C_beta by sqrt(|B|) C_beta",
        "decay after the step (theta <- (1-eta*lambda)(theta - eta*u)) would give the smaller fixed "
        "point (1-eta*lambda) C_beta/lambda; coupled L2 (lambda*theta added to g) gives no "
        "lambda-dependent bound, only R_0 + K*eta*C_beta",
    ]
    return Derivation(
        name="adamw-box",
        title="AdamW update bound C_beta(k) and parameter box R_theta",
        summary=("Deterministic bound |m_hat_k|/sqrt(v_hat_k) <= C_beta(k) for AdamW (per coordinate) "
                 "and Blockwise AdamW (Frobenius per block), its sup C_beta(inf), and the box radius "
                 "R_theta(K) <= max(R_0, C_beta/lambda) under torch's decoupled weight decay "
                 "(docs/theory.md §A.4)."),
        expressions=expressions,
        generic_latex=dict(GENERIC_LATEX),
        assumptions=assumptions,
        checks=checks,
        values=values,
    )


def _float(expr: sp.Expr) -> float:
    value = sp.N(expr, 30)
    return float(value) if value.is_finite else math.inf
