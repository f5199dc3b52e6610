"""Gaussian expectations with mpmath precision control (Gauss–Hermite and adaptive references).

Infrastructure for derivations that need numbers a closed form does not give (docs/theory.md §B.2:
``k(1) = E[φ(X/√d + σ_U b)²] + σ_W²`` for a general activation φ).  Everything here is mpmath
scalars and tuples — no NumPy arrays — and every routine takes ``dps`` (decimal digits).

* :func:`gaussian_expectation` — ``E f(μ + √v Z)``, Z ~ N(0,1), by Gauss–Hermite quadrature at two
  orders ``n`` and ``2n``; the error estimate is the difference of the two.
* :func:`bivariate_gaussian_expectation` — ``E f(V_1) g(V_2)`` for a centred Gaussian pair with
  covariance ``[[v_1, c], [c, v_2]]`` by the tensor-product rule (same two-order error estimate).
* :func:`gaussian_expectation_reference`, :func:`bivariate_gaussian_expectation_reference` —
  adaptive tanh-sinh quadrature (``mpmath.quad``) split at the kinks of f and g: slow, but accurate
  to ``dps`` digits also for non-smooth f (ReLU), where Gauss–Hermite converges only algebraically.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

import mpmath

__all__ = [
    "Estimate",
    "hermite_rule",
    "gaussian_expectation",
    "bivariate_gaussian_expectation",
    "gaussian_expectation_reference",
    "bivariate_gaussian_expectation_reference",
]

Scalar = Callable[[mpmath.mpf], mpmath.mpf]
GUARD_DIGITS = 10


@dataclass(frozen=True)
class Estimate:
    """A number with an error estimate (both mpmath ``mpf``)."""

    value: mpmath.mpf
    error: mpmath.mpf

    def __float__(self) -> float:
        return float(self.value)


def _check_order(order: int) -> None:
    if not isinstance(order, int) or order < 2:
        raise ValueError(f"order must be an int >= 2, got {order!r}")


def _check_dps(dps: int) -> None:
    if not isinstance(dps, int) or dps < 5:
        raise ValueError(f"dps must be an int >= 5, got {dps!r}")


@lru_cache(maxsize=32)
def hermite_rule(order: int, dps: int) -> tuple[tuple[mpmath.mpf, ...], tuple[mpmath.mpf, ...]]:
    """Nodes ``z_i`` and weights ``w_i`` with ``Σ w_i f(z_i) ≈ E f(Z)``, Z ~ N(0, 1).

    Exact for polynomials of degree < ``2·order`` (Golub–Welsch at ``dps`` + guard digits; the
    physicists' rule for ``e^{-x²}`` rescaled by ``z = √2 x``, ``w = w_phys/√π``).
    """
    _check_order(order)
    _check_dps(dps)
    with mpmath.workdps(dps + GUARD_DIGITS):
        xs, ws = mpmath.mp.gauss_quadrature(order, "hermite")
        root2, rootpi = mpmath.sqrt(2), mpmath.sqrt(mpmath.pi)
        return tuple(root2 * x for x in xs), tuple(w / rootpi for w in ws)


def _hermite_sum(f: Scalar, mean, scale, order: int, dps: int) -> mpmath.mpf:
    zs, ws = hermite_rule(order, dps)
    return mpmath.fsum(w * f(mean + scale * z) for z, w in zip(zs, ws))


def gaussian_expectation(
    f: Scalar, variance=1, *, mean=0, order: int = 48, dps: int = 30
) -> Estimate:
    """``E f(mean + √variance · Z)``, Z ~ N(0, 1), by Gauss–Hermite quadrature.

    The value uses ``2·order`` nodes; ``error = |Q_{2n} − Q_n|`` (a reliable over-estimate of the
    error of ``Q_{2n}`` for analytic f; for kinked f it converges only algebraically).
    """
    _check_order(order)
    with mpmath.workdps(dps + GUARD_DIGITS):
        variance = mpmath.mpf(variance)
        if variance < 0:
            raise ValueError(f"variance must be >= 0, got {variance}")
        scale, mean = mpmath.sqrt(variance), mpmath.mpf(mean)
        coarse = _hermite_sum(f, mean, scale, order, dps)
        fine = _hermite_sum(f, mean, scale, 2 * order, dps)
        return Estimate(+fine, abs(fine - coarse))


def _pair_factor(var1, var2, cov):
    """``(σ_1, σ_2 ρ, σ_2 √(1−ρ²))`` with V_1 = σ_1 Z_1, V_2 = σ_2(ρ Z_1 + √(1−ρ²) Z_2)."""
    var1, var2, cov = mpmath.mpf(var1), mpmath.mpf(var2), mpmath.mpf(cov)
    if var1 < 0 or var2 < 0:
        raise ValueError(f"variances must be >= 0, got {var1}, {var2}")
    if cov * cov > var1 * var2 * (1 + mpmath.mpf(10) ** (-mpmath.mp.dps + 2)):
        raise ValueError(f"cov must satisfy cov² <= var1·var2, got cov={cov}")
    s1, s2 = mpmath.sqrt(var1), mpmath.sqrt(var2)
    rho = cov / (s1 * s2) if s1 * s2 > 0 else mpmath.mpf(0)
    rho = max(min(rho, mpmath.mpf(1)), mpmath.mpf(-1))
    return s1, s2 * rho, s2 * mpmath.sqrt(1 - rho * rho)


def bivariate_gaussian_expectation(
    f: Scalar, g: Scalar, var1, var2, cov, *, order: int = 48, dps: int = 30
) -> Estimate:
    """``E[f(V_1) g(V_2)]``, ``(V_1, V_2) ~ N(0, [[var1, cov], [cov, var2]])``.

    Tensor-product Gauss–Hermite in ``(Z_1, Z_2)`` at ``order`` and ``2·order`` nodes per axis;
    error estimate = difference of the two.
    """
    _check_order(order)
    with mpmath.workdps(dps + GUARD_DIGITS):
        a, b, c = _pair_factor(var1, var2, cov)

        def tensor(n: int) -> mpmath.mpf:
            zs, ws = hermite_rule(n, dps)
            total = []
            for z1, w1 in zip(zs, ws):
                fz = f(a * z1)
                if fz == 0:
                    continue
                inner = mpmath.fsum(w2 * g(b * z1 + c * z2) for z2, w2 in zip(zs, ws))
                total.append(w1 * fz * inner)
            return mpmath.fsum(total)

        coarse, fine = tensor(order), tensor(2 * order)
        return Estimate(+fine, abs(fine - coarse))


def _normal_pdf(z):
    return mpmath.exp(-z * z / 2) / mpmath.sqrt(2 * mpmath.pi)


def _split(points: Sequence) -> list:
    return [-mpmath.inf, *sorted(set(points)), mpmath.inf]


def gaussian_expectation_reference(
    f: Scalar, variance=1, *, mean=0, kinks: Sequence[float] = (), dps: int = 50
) -> Estimate:
    """``E f(mean + √variance Z)`` by adaptive tanh-sinh quadrature split at ``f``'s kinks."""
    with mpmath.workdps(dps + GUARD_DIGITS):
        scale, mean = mpmath.sqrt(mpmath.mpf(variance)), mpmath.mpf(mean)
        if scale == 0:
            return Estimate(f(mean), mpmath.mpf(0))
        breaks = _split([(mpmath.mpf(k) - mean) / scale for k in kinks])
        value, err = mpmath.quad(lambda z: f(mean + scale * z) * _normal_pdf(z), breaks, error=True)
        return Estimate(value, err)


def bivariate_gaussian_expectation_reference(
    f: Scalar, g: Scalar, var1, var2, cov, *, kinks: Sequence[float] = (), dps: int = 50,
    conditional: Callable | None = None,
) -> Estimate:
    """``E[f(V_1) g(V_2)] = E[f(V_1) E[g(V_2) | V_1]]`` by adaptive quadrature over V_1.

    With V_1 = σ_1 Z_1 and V_2 = a Z_1 + b Z_2, ``E[g(V_2) | Z_1] = conditional(a Z_1, b)``
    where ``conditional(m, sd) = E g(m + sd Z)``; pass a closed form when g has one (ReLU:
    ``m Φ(m/sd) + sd φ(m/sd)``), otherwise a nested tanh-sinh quadrature split at ``kinks`` is
    used (slow at high precision).  The outer integral is split at the kinks of f.
    """
    with mpmath.workdps(dps + GUARD_DIGITS):
        s1, a, b = _pair_factor(var1, var2, cov)
        kinks = [mpmath.mpf(k) for k in kinks]
        if conditional is None:
            def conditional(m, sd):
                if sd == 0:
                    return g(m)
                return gaussian_expectation_reference(g, sd * sd, mean=m, kinks=kinks,
                                                      dps=dps).value

        def outer(z1):
            fz = f(s1 * z1)
            if fz == 0:
                return mpmath.mpf(0)
            return fz * conditional(a * z1, b) * _normal_pdf(z1)

        outer_breaks = _split([k / s1 for k in kinks] if s1 > 0 else [])
        value, err = mpmath.quad(outer, outer_breaks, error=True)
        return Estimate(value, err)
