"""Zonal covariance k(t) of the Gaussian-field limit of the random MLP (docs/theory.md §B.2).

For the width-m MLP ``G^m(y) = (1/√m) W φ((1/√d) U y + b_U) + b_W`` on the sphere S^{d−1},
``E[G^m(x) G^m(y)^T] = k(⟨x, y⟩) Id`` with, for X, Y, b i.i.d. N(0, 1),
``u = √((1+t)/(2d))``, ``v = √((1−t)/(2d))``::

    k(t)  = E[φ(uX + vY + σ_U b) φ(uX − vY + σ_U b)] + σ_W²
          = E[φ(V_1) φ(V_2)] + σ_W²,   (V_1, V_2) ~ N(0, [[s², c(t)], [c(t), s²]]),
    s² = 1/d + σ_U²,   c(t) = t/d + σ_U²,   ρ(t) = c(t)/s²,
    k(1)  = E[φ(s Z)²] + σ_W²,           k'(1) = (1/d) E[φ'(s Z)²]   (Price/Stein, dc/dt = 1/d).

ReLU has the arc-cosine closed form (θ = arccos ρ(t))::

    k(t)  = (s²/(2π)) (sin θ + (π − θ) cos θ) + σ_W²,   k'(t) = (π − θ)/(2πd),
    k(1)  = s²/2 + σ_W²,                              k'(1) = 1/(2d),

checked by SymPy (``k'`` is the t-derivative of ``k``; the limits t → 1⁻; ``E[relu(sZ)²] = s²/2``
by symbolic integration).  Other activations use Gauss–Hermite quadrature
(:mod:`transformer_limits.symbolic.gaussian_quadrature`) and, for fast evaluation of k(t) at many
t, the Mehler (Hermite) series ``k(t) = σ_W² + Σ_j b_j ρ(t)^j`` with
``b_j = (E[φ(sZ) He_j(Z)])²/j! ≥ 0`` and the exactly known tail
``Σ_{j>J} b_j = k(1) − σ_W² − Σ_{j≤J} b_j``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any, Callable

import mpmath
import sympy as sp

from transformer_limits.symbolic.derivation import Derivation, Param, register_derivation
from transformer_limits.symbolic.gaussian_quadrature import (
    GUARD_DIGITS,
    Estimate,
    bivariate_gaussian_expectation,
    gaussian_expectation,
    hermite_rule,
)

__all__ = [
    "ACTIVATIONS",
    "Activation",
    "activation",
    "ZonalKernel",
    "relu_kernel_expressions",
    "relu_symbolic_checks",
    "KERNEL_PARAMS",
]

ACTIVATIONS = ("relu", "tanh", "sigmoid", "silu", "gelu")

x_sym = sp.Symbol("x", real=True)
t_sym = sp.Symbol("t", real=True)
d_sym = sp.Symbol("d", positive=True)
sigma_u_sym, sigma_w_sym = sp.symbols("sigma_U sigma_W", nonnegative=True)
s_sym = sp.Symbol("s", positive=True)

_EXPRESSIONS = {
    "relu": sp.Max(0, x_sym),
    "tanh": sp.tanh(x_sym),
    "sigmoid": 1 / (1 + sp.exp(-x_sym)),
    "silu": x_sym / (1 + sp.exp(-x_sym)),
    "gelu": x_sym * (1 + sp.erf(x_sym / sp.sqrt(2))) / 2,
}


@dataclass(frozen=True)
class Activation:
    """An activation φ: SymPy expression in ``x``, its derivative, mpmath callables, kinks."""

    name: str
    expr: sp.Expr
    derivative: sp.Expr
    phi: Callable[[Any], Any]
    dphi: Callable[[Any], Any]
    kinks: tuple[float, ...]


def _relu(z):
    return z if z > 0 else mpmath.mpf(0)


def _relu_prime(z):
    return mpmath.mpf(1) if z > 0 else mpmath.mpf(0)


@lru_cache(maxsize=None)
def activation(name: str) -> Activation:
    """The activation ``name`` (one of :data:`ACTIVATIONS`); φ' is derived by SymPy."""
    if name not in _EXPRESSIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}; got {name!r}")
    expr = _EXPRESSIONS[name]
    if name == "relu":
        return Activation(name, expr, sp.Heaviside(x_sym), _relu, _relu_prime, (0.0,))
    derivative = sp.simplify(sp.diff(expr, x_sym))
    return Activation(
        name, expr, derivative,
        sp.lambdify(x_sym, expr, modules="mpmath"),
        sp.lambdify(x_sym, derivative, modules="mpmath"),
        (),
    )


# --------------------------------------------------------------------------------------------
# ReLU closed form (arc-cosine kernel with bias) and its SymPy checks


rho_sym = sp.Symbol("rho", real=True)


def _relu_kernel_of_rho() -> tuple[sp.Expr, sp.Expr]:
    """ReLU k and k' as functions of the correlation ρ (symbols ρ, d, σ_U, σ_W)."""
    s2 = 1 / d_sym + sigma_u_sym**2
    theta = sp.acos(rho_sym)
    k = s2 / (2 * sp.pi) * (sp.sqrt(1 - rho_sym**2) + (sp.pi - theta) * rho_sym) + sigma_w_sym**2
    return k, (sp.pi - theta) / (2 * sp.pi * d_sym)


@lru_cache(maxsize=None)
def relu_kernel_expressions() -> dict[str, sp.Expr]:
    """Closed-form ReLU ``k(t)``, ``k'(t)``, ``k(1)``, ``k'(1)`` in symbols t, d, σ_U, σ_W."""
    s2 = 1 / d_sym + sigma_u_sym**2
    rho = (t_sym / d_sym + sigma_u_sym**2) / s2
    k, dk = (e.subs(rho_sym, rho) for e in _relu_kernel_of_rho())
    return {"k": k, "dk": dk, "k1": s2 / 2 + sigma_w_sym**2, "dk1": 1 / (2 * d_sym)}


@lru_cache(maxsize=None)
def _relu_callables():
    """mpmath callables ``(ρ, d, σ_U, σ_W) -> k, k'`` lambdified from the SymPy closed form."""
    args = (rho_sym, d_sym, sigma_u_sym, sigma_w_sym)
    return tuple(sp.lambdify(args, e, modules="mpmath") for e in _relu_kernel_of_rho())


@lru_cache(maxsize=None)
def relu_symbolic_checks() -> tuple[str, ...]:
    """Prove with SymPy that the ReLU closed forms are consistent; raise if a proof fails."""
    e = relu_kernel_expressions()
    checks = []
    if sp.simplify(sp.diff(e["k"], t_sym) - e["dk"]) != 0:
        raise RuntimeError("SymPy could not confirm d/dt k(t) = k'(t) for ReLU")
    checks.append("SymPy: simplify(d/dt k_closed(t) − (π−θ(t))/(2πd)) = 0 (ReLU arc-cosine kernel)")
    for key, closed in (("k", "k1"), ("dk", "dk1")):
        lim = sp.limit(e[key], t_sym, 1, "-")
        if sp.simplify(lim - e[closed]) != 0:
            raise RuntimeError(f"SymPy limit t->1- of {key} disagrees with {closed}")
    checks.append("SymPy: lim_{t→1⁻} k(t) = (1/d+σ_U²)/2 + σ_W² and lim_{t→1⁻} k'(t) = 1/(2d)")
    pdf = sp.exp(-x_sym**2 / (2 * s_sym**2)) / (s_sym * sp.sqrt(2 * sp.pi))
    second = sp.integrate(sp.Max(0, x_sym) ** 2 * pdf, (x_sym, -sp.oo, sp.oo))
    slope = sp.integrate(sp.Heaviside(x_sym) ** 2 * pdf, (x_sym, -sp.oo, sp.oo))
    if sp.simplify(second - s_sym**2 / 2) != 0 or sp.simplify(slope - sp.Rational(1, 2)) != 0:
        raise RuntimeError("SymPy integration of E[relu(sZ)^2], E[relu'(sZ)^2] failed")
    checks.append(
        "SymPy: ∫ relu(x)² N(0,s²)(dx) = s²/2 and ∫ relu'(x)² N(0,s²)(dx) = 1/2, so k(1), k'(1) "
        "follow from the definitions independently of the closed form"
    )
    return tuple(checks)


# --------------------------------------------------------------------------------------------
# Numeric kernel for any activation


def _normalised_hermite(z, n: int) -> list:
    """``[He_j(z)/√(j!)]_{j=0..n}`` by the stable normalised three-term recurrence."""
    out = [mpmath.mpf(1), z]
    for j in range(1, n):
        out.append((z * out[j] - mpmath.sqrt(j) * out[j - 1]) / mpmath.sqrt(j + 1))
    return out[: n + 1]


class ZonalKernel:
    """k(t) of docs/theory.md §B.2 for one ``(activation, d, σ_U, σ_W)`` at ``dps`` digits.

    ``k1``/``dk1`` and ``k_quadrature``/``dk_quadrature`` return :class:`Estimate` (value and
    error); ``k(t)``/``dk(t)`` are fast mpmath evaluations (closed form for ReLU, Mehler series
    otherwise) with uniform error bound ``fast_error`` on [−1, 1].
    """

    def __init__(self, activation_name: str, d: int, sigma_u: float, sigma_w: float, *,
                 dps: int = 30, order: int = 48, hermite_terms: int = 64):
        if not isinstance(d, int) or d < 2:
            raise ValueError(f"d must be an int >= 2, got {d!r}")
        if sigma_u < 0 or sigma_w < 0:
            raise ValueError(f"sigma_u and sigma_w must be >= 0, got {sigma_u!r}, {sigma_w!r}")
        self.act = activation(activation_name)
        self.d, self.dps, self.order, self.hermite_terms = d, dps, order, hermite_terms
        with mpmath.workdps(dps + GUARD_DIGITS):
            self.sigma_u, self.sigma_w = mpmath.mpf(sigma_u), mpmath.mpf(sigma_w)
            self.s2 = 1 / mpmath.mpf(d) + self.sigma_u**2

    @property
    def closed_form(self) -> bool:
        return self.act.name == "relu"

    def rho(self, t):
        """Correlation ρ(t) = (t/d + σ_U²)/(1/d + σ_U²) of the pre-activations."""
        return (mpmath.mpf(t) / self.d + self.sigma_u**2) / self.s2

    def _clamped_rho(self, t):
        return max(min(self.rho(t), mpmath.mpf(1)), mpmath.mpf(-1))

    def _cov(self, t):
        return mpmath.mpf(t) / self.d + self.sigma_u**2

    # ---- k(1), k'(1) --------------------------------------------------------------------
    @cached_property
    def k1(self) -> Estimate:
        """k(1) = E[φ(sZ)²] + σ_W² (closed form for ReLU)."""
        with mpmath.workdps(self.dps + GUARD_DIGITS):
            if self.closed_form:
                return Estimate(self.s2 / 2 + self.sigma_w**2, mpmath.mpf(0))
            est = gaussian_expectation(lambda z: self.act.phi(z) ** 2, self.s2,
                                       order=self.order, dps=self.dps)
            return Estimate(est.value + self.sigma_w**2, est.error)

    @cached_property
    def dk1(self) -> Estimate:
        """k'(1) = (1/d) E[φ'(sZ)²] (closed form 1/(2d) for ReLU)."""
        with mpmath.workdps(self.dps + GUARD_DIGITS):
            if self.closed_form:
                return Estimate(1 / mpmath.mpf(2 * self.d), mpmath.mpf(0))
            est = gaussian_expectation(lambda z: self.act.dphi(z) ** 2, self.s2,
                                       order=self.order, dps=self.dps)
            return Estimate(est.value / self.d, est.error / self.d)

    # ---- k(t) by 2-D quadrature ---------------------------------------------------------
    def k_quadrature(self, t, *, order: int | None = None) -> Estimate:
        """k(t) by tensor Gauss–Hermite for ``E[φ(V_1)φ(V_2)]`` (any activation, incl. ReLU)."""
        with mpmath.workdps(self.dps + GUARD_DIGITS):
            est = bivariate_gaussian_expectation(
                self.act.phi, self.act.phi, self.s2, self.s2, self._cov(t),
                order=order or self.order, dps=self.dps)
            return Estimate(est.value + self.sigma_w**2, est.error)

    def dk_quadrature(self, t, *, order: int | None = None) -> Estimate:
        """k'(t) = (1/d) E[φ'(V_1)φ'(V_2)] (Price's theorem) by tensor Gauss–Hermite."""
        with mpmath.workdps(self.dps + GUARD_DIGITS):
            est = bivariate_gaussian_expectation(
                self.act.dphi, self.act.dphi, self.s2, self.s2, self._cov(t),
                order=order or self.order, dps=self.dps)
            return Estimate(est.value / self.d, est.error / self.d)

    # ---- fast k(t): closed form or Mehler series -----------------------------------------
    @cached_property
    def mehler_coefficients(self) -> tuple[mpmath.mpf, ...]:
        """``b_j = (E[φ(sZ) He_j(Z)])²/j!`` for j = 0..hermite_terms (Gauss–Hermite, 2·order)."""
        with mpmath.workdps(self.dps + GUARD_DIGITS):
            zs, ws = hermite_rule(2 * self.order, self.dps)
            scale = mpmath.sqrt(self.s2)
            sums = [mpmath.mpf(0)] * (self.hermite_terms + 1)
            for z, w in zip(zs, ws):
                fz = w * self.act.phi(scale * z)
                for j, h in enumerate(_normalised_hermite(z, self.hermite_terms)):
                    sums[j] += fz * h
            return tuple(c * c for c in sums)

    @cached_property
    def fast_error(self) -> mpmath.mpf:
        """Uniform bound on |k_fast(t) − k(t)|: Mehler tail Σ_{j>J} b_j plus the k(1) error."""
        if self.closed_form:  # rounding only: evaluated at dps + GUARD_DIGITS
            return mpmath.mpf(10) ** (-(self.dps + GUARD_DIGITS // 2))
        with mpmath.workdps(self.dps + GUARD_DIGITS):
            tail = self.k1.value - self.sigma_w**2 - mpmath.fsum(self.mehler_coefficients)
            return abs(tail) + self.k1.error

    def k(self, t) -> mpmath.mpf:
        """k(t), t ∈ [−1, 1] (fast; error ≤ ``fast_error``)."""
        with mpmath.workdps(self.dps + GUARD_DIGITS):
            if self.closed_form:
                return _relu_callables()[0](self._clamped_rho(t), mpmath.mpf(self.d), self.sigma_u,
                                             self.sigma_w)
            r = self.rho(t)
            return self.sigma_w**2 + mpmath.polyval(self.mehler_coefficients[::-1], r)

    def dk(self, t) -> mpmath.mpf:
        """k'(t) (fast; closed form for ReLU, term-wise derivative of the Mehler series)."""
        with mpmath.workdps(self.dps + GUARD_DIGITS):
            if self.closed_form:
                return _relu_callables()[1](self._clamped_rho(t), mpmath.mpf(self.d), self.sigma_u,
                                             self.sigma_w)
            b = self.mehler_coefficients
            slope = [j * b[j] for j in range(1, len(b))]
            return mpmath.polyval(slope[::-1], self.rho(t)) / (self.d * self.s2)


# --------------------------------------------------------------------------------------------
# Derivation


KERNEL_PARAMS = (
    Param("activation", str, "relu", "activation φ", choices=ACTIVATIONS),
    Param("d", int, 5, "dimension of the sphere's ambient space (tokens on S^{d-1})", low=2),
    Param("sigma_u", float, 0.1, "standard deviation σ_U of the hidden bias b_U", low=0),
    Param("sigma_w", float, 0.1, "standard deviation σ_W of the output bias b_W", low=0),
    Param("t", float, None, "evaluate k(t), k'(t) at this ⟨x,y⟩", low=-1, high=1),
    Param("digits", int, 30, "mpmath working precision (decimal digits)", low=15, high=200),
)

GENERIC_LATEX = {
    "k": r"k(t) = \mathbb{E}\big[\varphi(uX+vY+\sigma_U b)\,\varphi(uX-vY+\sigma_U b)\big]"
         r" + \sigma_W^2,\quad u=\sqrt{\tfrac{1+t}{2d}},\ v=\sqrt{\tfrac{1-t}{2d}}",
    "k1": r"k(1) = \mathbb{E}\big[\varphi(X/\sqrt d + \sigma_U b)^2\big] + \sigma_W^2",
    "dk1": r"k'(1) = \tfrac1d\,\mathbb{E}\big[\varphi'(X/\sqrt d + \sigma_U b)^2\big]",
}

KERNEL_ASSUMPTIONS = [
    "X, Y, b i.i.d. N(0,1); U, W entries i.i.d. N(0,1), (b_U)_j ~ N(0,σ_U²), (b_W)_i ~ N(0,σ_W²)",
    "tokens on the unit sphere S^{d-1}, t = ⟨x, y⟩ ∈ [−1, 1]",
    "φ Lipschitz; k'(t) = (1/d) E[φ'(V_1)φ'(V_2)] by Price's theorem (φ' a.e. derivative)",
]


def _general_kernel_expressions(act: Activation) -> dict[str, sp.Expr]:
    """Unevaluated Gaussian integrals for k(1), k'(1) in symbols d, σ_U, σ_W."""
    z = sp.Symbol("z", real=True)
    pdf = sp.exp(-z**2 / 2) / sp.sqrt(2 * sp.pi)
    pre = z * sp.sqrt(1 / d_sym + sigma_u_sym**2)
    return {
        "phi": act.expr,
        "dphi": act.derivative,
        "k1": (sp.Integral(act.expr.subs(x_sym, pre) ** 2 * pdf, (z, -sp.oo, sp.oo))
               + sigma_w_sym**2),
        "dk1": sp.Integral(act.derivative.subs(x_sym, pre) ** 2 * pdf, (z, -sp.oo, sp.oo)) / d_sym,
    }


def _fmt(x) -> str:
    return mpmath.nstr(x, 6)


def kernel_numeric_checks(kernel: ZonalKernel, t) -> list[str]:
    """Numeric cross-checks: quadrature orders, closed form/Mehler series vs 2-D quadrature."""
    checks = []
    if kernel.closed_form:
        checks.append("ReLU: k(1), k'(1) and k(t) from the SymPy-checked closed form")
    else:
        checks.append(
            f"Gauss–Hermite at {kernel.order} and {2 * kernel.order} nodes: |Δk(1)| = "
            f"{_fmt(kernel.k1.error)}, |Δk'(1)| = {_fmt(kernel.dk1.error)}")
        mehler_dk1 = kernel.dk(1)
        checks.append(
            f"Stein: Σ_j j b_j/(d s²) = {_fmt(mehler_dk1)} vs k'(1) = {_fmt(kernel.dk1.value)} "
            f"(Mehler tail bound {_fmt(kernel.fast_error)})")
    quad = kernel.k_quadrature(t)
    fast = kernel.k(t)
    checks.append(
        f"k({float(t):g}): {'closed form' if kernel.closed_form else 'Mehler series'} "
        f"{_fmt(fast)} vs 2-D Gauss–Hermite {_fmt(quad.value)} "
        f"(|diff| = {_fmt(abs(fast - quad.value))},"
        f" quadrature error estimate {_fmt(quad.error)})")
    return checks


@register_derivation("mlp-kernel", title="Zonal covariance k(t) of the random-MLP Gaussian field",
                     params=KERNEL_PARAMS)
def mlp_kernel(activation: str, d: int, sigma_u: float, sigma_w: float, t: float | None,
               digits: int) -> Derivation:
    """k(t), k(1), k'(1) of docs/theory.md §B.2 (closed form for ReLU, quadrature otherwise)."""
    kernel = ZonalKernel(activation, d, sigma_u, sigma_w, dps=digits)
    act = kernel.act
    if kernel.closed_form:
        expressions = {"phi": act.expr, **relu_kernel_expressions()}
        checks = list(relu_symbolic_checks())
    else:
        expressions = _general_kernel_expressions(act)
        checks = [f"SymPy: φ'(x) = {sp.sstr(act.derivative)}"]
    checks += kernel_numeric_checks(kernel, 0.3 if t is None else t)
    values = {
        "k1": float(kernel.k1.value), "k1_error": float(kernel.k1.error),
        "dk1": float(kernel.dk1.value), "dk1_error": float(kernel.dk1.error),
    }
    if t is not None:
        if kernel.closed_form:
            values.update(k_t=float(kernel.k(t)), k_t_error=0.0, dk_t=float(kernel.dk(t)))
        else:
            quad = kernel.k_quadrature(t)
            values.update(k_t=float(quad.value), k_t_error=float(quad.error),
                          dk_t=float(kernel.dk_quadrature(t).value))
    return Derivation(
        name="mlp-kernel",
        title="Zonal covariance k(t) of the random-MLP Gaussian field",
        summary=(
            f"k(t) for φ = {activation}: E[G^m(x)G^m(y)^T] = k(⟨x,y⟩) Id on S^{{d-1}}; "
            + ("arc-cosine closed form (SymPy-checked)." if kernel.closed_form
               else "Gauss–Hermite quadrature with mpmath precision control.")
        ),
        expressions=expressions,
        generic_latex=dict(GENERIC_LATEX),
        assumptions=list(KERNEL_ASSUMPTIONS),
        checks=checks,
        values=values,
    )
