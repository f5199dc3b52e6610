"""Schoenberg–Gegenbauer expansion of a zonal kernel on S^{d−1} (docs/theory.md §B.2, §B.6).

By Schoenberg's theorem the zonal covariance of the limiting Gaussian field is
``k(t) = Σ_n c_n P_{n,d}(t)`` with ``c_n ≥ 0`` and ``P_{n,d}`` the Gegenbauer polynomials normalised
by ``P_{n,d}(1) = 1`` (orthogonal for the weight ``(1−t²)^{(d−3)/2}`` on [−1, 1]).  Here: the
polynomials, their norms, the coefficients ``c_n`` of a
:class:`~transformer_limits.symbolic.mlp_kernel.ZonalKernel` by mpmath quadrature, and
:func:`fitted_tail`, an estimate of the terms of a series in ``n`` beyond the computed ones.  Since ``P'_{n,d}(1) = n(n+d−2)/(d−1)``, these give the Gegenbauer form
``λ̄ = Σ_n c_n [n(n+d−2) − (d−3)]`` (§B.6) that the ``lyapunov`` derivation checks
(:func:`transformer_limits.symbolic.lyapunov.gegenbauer_identity`).
"""

from __future__ import annotations

import mpmath

from transformer_limits.symbolic.gaussian_quadrature import GUARD_DIGITS, Estimate
from transformer_limits.symbolic.mlp_kernel import ZonalKernel

__all__ = [
    "gegenbauer_polynomials",
    "gegenbauer_norm",
    "gegenbauer_coefficients",
    "fitted_tail",
]


def gegenbauer_polynomials(n_max: int, d: int, t) -> list:
    """``[P_{n,d}(t)]_{n=0..n_max}``, normalised Gegenbauer (P_{n,d}(1) = 1), by the recurrence
    ``(n+d−2) P_{n+1} = (2n+d−2) t P_n − n P_{n−1}`` (Legendre for d = 3, Chebyshev for d = 2)."""
    out = [mpmath.mpf(1), mpmath.mpf(t)]
    for n in range(1, n_max):
        out.append(((2 * n + d - 2) * t * out[n] - n * out[n - 1]) / (n + d - 2))
    return out[: n_max + 1]


def gegenbauer_norm(n: int, d: int) -> mpmath.mpf:
    """``h_n = ∫_{-1}^1 P_{n,d}(t)² (1−t²)^{(d−3)/2} dt = W_d/N_{n,d}``,
    ``W_d = √π Γ((d−1)/2)/Γ(d/2)``, ``N_{n,d} = C(n+d−1, n) − C(n+d−3, n−2)``."""
    half = mpmath.mpf(d) / 2
    w = mpmath.sqrt(mpmath.pi) * mpmath.gamma(half - mpmath.mpf(1) / 2) / mpmath.gamma(half)
    dim = mpmath.binomial(n + d - 1, n) - (mpmath.binomial(n + d - 3, n - 2) if n >= 2 else 0)
    return w / dim


def gegenbauer_coefficients(kernel: ZonalKernel, n_max: int) -> list[Estimate]:
    """``c_n = (1/h_n) ∫_{-1}^1 k(t) P_{n,d}(t) (1−t²)^{(d−3)/2} dt`` for n = 0..n_max.

    Computed as ``(1/h_n) ∫_0^π k(cos θ) P_{n,d}(cos θ) sin^{d−2}θ dθ`` (no endpoint singularity
    of the weight, and the ReLU kernel's (1−t)^{3/2} becomes θ³) by tanh-sinh quadrature at
    ``dps + log10 N_{n_max,d}`` digits (c_n divides by h_n = W_d/N_{n,d}, which is tiny for
    large d).  The integrand rows are cached per node, so all n share one set of k evaluations.
    The error adds the quadrature estimate and the fast-kernel error ``fast_error·√(W_d/h_n)``
    (Cauchy–Schwarz: ∫|P_n| w ≤ √(W_d h_n)).
    """
    d = kernel.d
    extra = int(mpmath.log10(1 / gegenbauer_norm(n_max, d))) + 1 if d > 2 else 0
    with mpmath.workdps(kernel.dps + GUARD_DIGITS + max(extra, 0)):
        rows: dict = {}

        def row(theta):
            if theta not in rows:
                t = mpmath.cos(theta)
                rows[theta] = (kernel.k(t) * mpmath.sin(theta) ** (d - 2),
                               gegenbauer_polynomials(n_max, d, t))
            return rows[theta]

        total_weight = gegenbauer_norm(0, d)
        out = []
        for n in range(n_max + 1):
            value, err = mpmath.quad(lambda th: row(th)[0] * row(th)[1][n], [0, mpmath.pi],
                                     error=True)
            h = gegenbauer_norm(n, d)
            kernel_error = kernel.fast_error * mpmath.sqrt(total_weight / h)
            out.append(Estimate(value / h, err / h + kernel_error))
        return out


def _kink_term_model(n, d):
    """Shape of term_n = c_n[n(n+d−2) − (d−3)] when k(t) − (smooth) ∝ (1−t)^{3/2} near t = 1
    (kinked φ such as ReLU): c_n ∝ (2n+d−2) Γ(n−3/2) Γ(n+d−2) / (Γ(n+d+1/2) Γ(n+1))."""
    a = mpmath.mpf(3) / 2
    return ((n * (n + d - 2) - (d - 3)) * (2 * n + d - 2) * mpmath.gamma(n - a)
            * mpmath.gamma(n + d - 2) / (mpmath.gamma(n + d - 1 + a) * mpmath.gamma(n + 1)))


def fitted_tail(points: list[tuple[int, mpmath.mpf]], n_max: int, d: int, kink: bool):
    """Σ_{n>n_max, n ≡ r mod 2} of a model fitted to ``points`` [(n, term_n)] of one parity r.

    ``kink``: amplitude fit of :func:`_kink_term_model`; otherwise least squares of
    log|term_n| ~ log A − p log n (power law; integral estimate of its tail, ``inf`` if p ≤ 1, the
    series would diverge) or, when a geometric rate fits better (analytic kernels),
    log|term_n| ~ log A + b log n − r n (summed exactly)."""
    if len(points) < 3:
        return mpmath.mpf(0)
    first = n_max + 1 if (n_max + 1) % 2 == points[0][0] % 2 else n_max + 2
    sign = mpmath.sign(points[-1][1])
    if kink:
        log_amp = mpmath.fsum(mpmath.log(abs(v) / _kink_term_model(n, d)) for n, v in points)
        amplitude = sign * mpmath.exp(log_amp / len(points))
        return amplitude * mpmath.nsum(lambda j: _kink_term_model(first + 2 * j, d),
                                       [0, mpmath.inf])
    xs = [mpmath.log(n) for n, _ in points]
    ys = [mpmath.log(abs(v)) for _, v in points]
    xbar, ybar = mpmath.fsum(xs) / len(xs), mpmath.fsum(ys) / len(ys)
    p = -(mpmath.fsum((x - xbar) * (y - ybar) for x, y in zip(xs, ys))
          / mpmath.fsum((x - xbar) ** 2 for x in xs))
    # smooth activations have analytic kernels, whose terms decay geometrically: a power law fitted
    # to them overestimates the tail (tanh, n_max = 12: 2.0e-8 vs the true 7.1e-9, a false alarm);
    # the model with the smaller least-squares residual of log|term_n| is used
    ns = [mpmath.mpf(n) for n, _ in points]
    nbar = mpmath.fsum(ns) / len(ns)
    r = -(mpmath.fsum((n - nbar) * (y - ybar) for n, y in zip(ns, ys))
          / mpmath.fsum((n - nbar) ** 2 for n in ns))
    ssr_power = mpmath.fsum((y - ybar + p * (x - xbar)) ** 2 for x, y in zip(xs, ys))
    ssr_geometric = mpmath.fsum((y - ybar + r * (n - nbar)) ** 2 for n, y in zip(ns, ys))
    if r > 0 and ssr_geometric < ssr_power:
        # analytic kernels: term_n ≈ A n^b e^{−r n} (a geometric rate with a power prefactor), fitted
        # by least squares of log|term_n| on (1, log n, n) when >= 5 points carry the 3 parameters;
        # the tail summed exactly
        a, b, c = mpmath.mpf(0), mpmath.mpf(0), mpmath.mpf(0)
        if len(points) >= 5:
            rows = mpmath.matrix([[1, x, n] for x, n in zip(xs, ns)])
            a, b, c = mpmath.lu_solve(rows.T * rows, rows.T * mpmath.matrix(ys))
        if c < 0:
            return sign * mpmath.nsum(lambda j: mpmath.exp(a + b * mpmath.log(first + 2 * j)
                                                           + c * (first + 2 * j)), [0, mpmath.inf])
        # Σ_{j≥0} A e^{−r(first + 2j)} = A e^{−r·first}/(1 − e^{−2r})
        return sign * mpmath.exp(ybar + r * nbar - r * first) / (1 - mpmath.exp(-2 * r))
    if p <= 1:
        return mpmath.inf
    # Σ_{j≥0} A (first + 2j)^{-p} ≈ (1/2) ∫_{first−1}^∞ A x^{-p} dx
    return sign * mpmath.exp(ybar + p * xbar) * (first - 1) ** (1 - p) / (2 * (p - 1))
