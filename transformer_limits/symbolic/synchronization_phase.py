"""Phase boundary λ̄ = 0 of synchronisation by noise (docs/theory.md §B.6; docs/synchronization_phase.md).

With s² = 1/d + σ_U² and Z ~ N(0, 1) (derivation ``mlp-kernel``)::

    k(1)  = m_0(d, σ_U) + σ_W²,     m_0 = E[φ(sZ)²],
    k'(1) = m_1(d, σ_U) / d,         m_1 = E[φ'(sZ)²],
    λ̄(d, σ_U, σ_W) = (d−1) k'(1) − (d−3) k(1)                        (derivation ``lyapunov``)
                   = (d−1) m_1/d − (d−3) m_0 − (d−3) σ_W².

λ̄ is the mean-square exponent of the linearised noise flow (E|V_t|² = e^{λ̄t}|V_0|² for a tangent
vector V, since d|V|²/|V|² has drift (d−1)k'(1) − (d−3)k(1)), so it decides whether the interaction
energy of a nearly synchronised configuration decays (λ̄ < 0) or grows (λ̄ > 0).

σ_W enters only through k(1), with slope −(d−3) in σ_W², so for d > 3 the boundary in the
(σ_U, σ_W) plane is explicit::

    σ_W*(σ_U)² = λ̄(d, σ_U, 0)/(d−3)       (exists iff λ̄(d, σ_U, 0) > 0),

and λ̄ < 0 ⟺ σ_W > σ_W*(σ_U).  Along a ray (σ_U, σ_W) = t·(a, b) the critical t* is a root of
t ↦ λ̄(d, ta, tb), found by a float64 scan (sign changes, Brent) and refined with mpmath's secant
method at ``dps`` ≥ 30 digits, the moments by adaptive tanh-sinh quadrature
(:func:`~transformer_limits.symbolic.gaussian_quadrature.gaussian_expectation_reference`); each root
is confirmed by a sign change of λ̄ across t*(1 ∓ 10^{−(dps−5)}).

No boundary: d ≤ 3 (every Gegenbauer mode adds to λ̄ > 0: λ̄ = 2k'(1) > 0 at d = 3,
k'(1) + k(1) > 0 at d = 2), or λ̄ < 0 already at zero biases (sigmoid for d ≥ 4: φ(0) = 1/2 makes
c_0 large).  ReLU: 2dλ̄ = 2 − S d(d−3), S = σ_U² + 2σ_W², so the boundary is S* = 2/(d(d−3)) and on
the diagonal σ_U = σ_W: σ*² = 2/(3d(d−3)).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import mpmath
import numpy as np
from scipy.optimize import brentq

from transformer_limits.numeric.sphere.lyapunov import ACTIVATIONS as NUMPY_ACTIVATIONS
from transformer_limits.symbolic.gaussian_quadrature import gaussian_expectation_reference
from transformer_limits.symbolic.lyapunov import lyapunov_exponents
from transformer_limits.symbolic.mlp_kernel import activation

__all__ = ["DPS", "PhaseRoot", "gaussian_moments", "gaussian_moments_float", "lambda_bar", "lambda_bar_float", "critical_sigma_w",
           "critical_scale", "critical_scale_float", "relu_critical_bias", "relu_critical_diagonal", "no_boundary_reason"]

#: working precision of the boundary (decimal digits)
DPS = 30


@lru_cache(maxsize=4096)
def _moments(name: str, d: int, sigma_u: str, dps: int) -> tuple[mpmath.mpf, mpmath.mpf, mpmath.mpf]:
    act = activation(name)
    with mpmath.workdps(dps + 10):
        s2 = 1 / mpmath.mpf(d) + mpmath.mpf(sigma_u) ** 2
        m0 = gaussian_expectation_reference(lambda z: act.phi(z) ** 2, s2, kinks=act.kinks, dps=dps)
        m1 = gaussian_expectation_reference(lambda z: act.dphi(z) ** 2, s2, kinks=act.kinks, dps=dps)
        return m0.value, m1.value, max(m0.error, m1.error)


def gaussian_moments(name: str, d: int, sigma_u, dps: int = DPS) -> tuple[mpmath.mpf, mpmath.mpf, mpmath.mpf]:
    """``(m_0, m_1, error)``: m_0 = E[φ(sZ)²], m_1 = E[φ'(sZ)²], s² = 1/d + σ_U², at ``dps`` digits.

    ``sigma_u`` (float, str or mpf) is taken as the decimal it prints as at ``dps + 10`` digits, so a
    float 0.1 means 0.1000000000000000055…, the float itself."""
    with mpmath.workdps(dps + 10):
        key = mpmath.nstr(mpmath.mpf(sigma_u), dps + 10)
    return _moments(name, int(d), key, int(dps))


def lambda_bar(name: str, d: int, sigma_u, sigma_w, dps: int = DPS, *, one_over_d: bool = True) -> mpmath.mpf:
    """λ̄ = (d−1)k'(1) − (d−3)k(1) at ``dps`` digits (module docstring).

    ``one_over_d=False`` is a deliberately wrong model (Draft B's k'(1) = E[φ'(sZ)²] without its 1/d),
    the negative control of the experiment ``synchronization-phase``."""
    m0, m1, _ = gaussian_moments(name, d, sigma_u, dps)
    with mpmath.workdps(dps + 10):
        k1 = m0 + mpmath.mpf(sigma_w) ** 2
        dk1 = m1 / d if one_over_d else m1
        return lyapunov_exponents(k1, dk1, d)[1]


@lru_cache(maxsize=4)
def _hermite_rule(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Probabilists' Gauss–Hermite nodes and weights normalised to N(0, 1) (computed once: an eigh)."""
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    return z, w / np.sqrt(2 * np.pi)


def gaussian_moments_float(name: str, d: int, sigma_u: np.ndarray, nodes: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """m_0, m_1 in float64 by probabilists' Gauss–Hermite (for scans only; ReLU in closed form)."""
    s = np.sqrt(1.0 / d + np.asarray(sigma_u, dtype=np.float64) ** 2)
    if name == "relu":
        return s**2 / 2, np.full_like(s, 0.5)
    z, w = _hermite_rule(nodes)
    phi, dphi = NUMPY_ACTIVATIONS[name]
    x = np.multiply.outer(s, z)
    return phi(x) ** 2 @ w, dphi(x) ** 2 @ w


def lambda_bar_float(name: str, d: int, sigma_u, sigma_w) -> np.ndarray:
    """λ̄ in float64 (vectorised over σ_U, σ_W; for scans and figures)."""
    m0, m1 = gaussian_moments_float(name, d, np.atleast_1d(sigma_u))
    k1 = m0 + np.asarray(sigma_w, dtype=np.float64) ** 2
    return (d - 1) * m1 / d - (d - 3) * k1


def critical_sigma_w(name: str, d: int, sigma_u, dps: int = DPS) -> mpmath.mpf | None:
    """σ_W*(σ_U) = √(λ̄(d, σ_U, 0)/(d−3)); None where no boundary exists (d ≤ 3 or λ̄(d, σ_U, 0) ≤ 0)."""
    if d <= 3:
        return None
    lb0 = lambda_bar(name, d, sigma_u, 0, dps)
    if lb0 <= 0:
        return None
    with mpmath.workdps(dps + 10):
        return mpmath.sqrt(lb0 / (d - 3))


@dataclass(frozen=True)
class PhaseRoot:
    """A root t* of λ̄(d, t·a, t·b) = level: ``t`` (mpf, ``dps`` digits), the values of λ̄ − level at
    t*(1 − ε) and t*(1 + ε), ε = 10^{−(dps−5)}, which must differ in sign (``bracketed``)."""

    t: mpmath.mpf
    below: mpmath.mpf
    above: mpmath.mpf
    dps: int

    @property
    def bracketed(self) -> bool:
        return bool(self.below * self.above < 0)


def critical_scale(name: str, d: int, direction: tuple[float, float] = (1.0, 1.0), *, level: float = 0.0,
                   dps: int = DPS, t_max: float = 4.0, scan: int = 64,
                   one_over_d: bool = True) -> list[PhaseRoot]:
    """All roots t* ∈ (0, t_max] of λ̄(d, t·a, t·b) = ``level`` for direction (a, b), ascending.

    A float64 scan on t ∈ {0} ∪ geomspace(1e-3, t_max, scan) finds sign changes; Brent's method
    brackets each root in float64, then mpmath's secant method refines it at ``dps`` digits and the
    sign change across t*(1 ∓ 10^{−(dps−5)}) is checked (RuntimeError if it fails).  ``one_over_d``:
    see :func:`lambda_bar`; ``level`` ≠ 0 gives the points where λ̄ = level (the simulated points).
    """
    a, b = (float(x) for x in direction)
    return [_refine(name, d, a, b, level, t0, dps, one_over_d)
            for t0 in critical_scale_float(name, d, direction, level=level, t_max=t_max, scan=scan,
                                           one_over_d=one_over_d)]


def critical_scale_float(name: str, d: int, direction: tuple[float, float] = (1.0, 1.0), *, level: float = 0.0,
                         t_max: float = 4.0, scan: int = 64, one_over_d: bool = True) -> list[float]:
    """The roots of :func:`critical_scale` in float64 only (scan and Brent; for figures and designs)."""
    a, b = (float(x) for x in direction)
    factor = 1.0 if one_over_d else float(d)

    def f64(t):
        m0, m1 = gaussian_moments_float(name, d, np.atleast_1d(a * np.asarray(t, dtype=np.float64)))
        return (d - 1) * factor * m1 / d - (d - 3) * (m0 + (b * np.asarray(t)) ** 2) - level

    ts = np.concatenate([[0.0], np.geomspace(1e-3, t_max, scan)])
    values = f64(ts)
    return [float(brentq(lambda t: float(f64(np.array([t]))[0]), ts[i], ts[i + 1], xtol=1e-15, rtol=1e-14))
            for i in np.flatnonzero(np.sign(values[:-1]) * np.sign(values[1:]) < 0)]


def _refine(name: str, d: int, a: float, b: float, level: float, t0: float, dps: int,
            one_over_d: bool) -> PhaseRoot:
    with mpmath.workdps(dps + 10):
        def g(t):
            return lambda_bar(name, d, a * t, b * t, dps, one_over_d=one_over_d) - level

        t0m = mpmath.mpf(t0)
        t = mpmath.findroot(g, (t0m, t0m * (1 + mpmath.mpf(10) ** -9)), solver="secant",
                            tol=mpmath.mpf(10) ** (-(dps + 8)))
        eps = mpmath.mpf(10) ** (-(dps - 5))
        root = PhaseRoot(t, g(t * (1 - eps)), g(t * (1 + eps)), dps)
    if not root.bracketed:
        raise RuntimeError(f"{name} d={d}: λ̄ − {level} does not change sign across t* = {mpmath.nstr(t, 12)}")
    return root


def relu_critical_bias(d: int) -> Fraction | None:
    """ReLU's exact boundary S* = σ_U² + 2σ_W² = 2/(d(d−3)) (None for d ≤ 3: λ̄ = 1/d − S(d−3)/2 > 0)."""
    return Fraction(2, d * (d - 3)) if d > 3 else None


def relu_critical_diagonal(d: int, dps: int = DPS) -> mpmath.mpf | None:
    """ReLU's σ* on σ_U = σ_W = σ: 3σ*² = S*, σ* = √(2/(3d(d−3)))."""
    s = relu_critical_bias(d)
    if s is None:
        return None
    with mpmath.workdps(dps + 10):
        return mpmath.sqrt(mpmath.mpf(s.numerator) / (3 * s.denominator))


def no_boundary_reason(name: str, d: int, direction: tuple[float, float] = (1.0, 1.0)) -> str:
    """Why λ̄(d, t·a, t·b) has no root (or "" when it has one): d ≤ 3 or λ̄ < 0 from zero biases on."""
    if d <= 3:
        return f"d = {d} ≤ 3: λ̄ > 0 for all biases (every Gegenbauer mode adds to λ̄)"
    if critical_scale_float(name, d, direction):
        return ""
    lb0 = float(lambda_bar_float(name, d, 0.0, 0.0)[0])
    if lb0 < 0:
        return f"λ̄ = {lb0:.4g} < 0 already at zero biases and it stays negative: synchronises for all biases"
    return "λ̄ > 0 on the whole scanned range"
