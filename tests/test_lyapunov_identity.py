"""The Gegenbauer check of λ̄ = Σ_n c_n [n(n+d−2) − (d−3)] never refutes a right λ̄ because of its own
truncation: at small n_max the tail cannot be extrapolated (said "not evaluated", with "raise n_max"),
where the terms fall fast the last terms bound what the extrapolation can get wrong, and a wrong λ̄
(k'(1) without its 1/d) still fails wherever the check decides.  The identity itself,
λ̄ = (d−1) k'(1) − (d−3) k(1) = Σ c_n [n(n+d−2) − (d−3)], is proved with ``assert_identity`` for a
kernel of symbolic Gegenbauer terms, and refuted for the wrong λ̄."""

from __future__ import annotations

import importlib
from functools import lru_cache

import mpmath
import pytest
import sympy as sp

import transformer_limits as tl
import transformer_limits.symbolic.lyapunov as lyap
from transformer_limits.symbolic.derivation import check_state
from transformer_limits.symbolic.lyapunov import GegenbauerIdentity
from transformer_limits.testing import assert_identity

derivation_module = importlib.import_module("transformer_limits.symbolic.derivation")


def _line(**params) -> str:
    return next(c for c in tl.derivation("lyapunov", **params).checks if c.startswith("Gegenbauer"))


def _wrong(k1, dk1, d):
    return (d - 3) * dk1 / 2 - (d - 1) * k1 / 2, (d - 1) * d * dk1 - (d - 3) * k1


@lru_cache(maxsize=None)
def _gegenbauer_series(n_terms=5):
    """A zonal kernel k(t) = Σ_{n<N} c_n P_n(t) with symbolic c_n and d, P_n = C_n^{(d−2)/2} / C_n^{(d−2)/2}(1)
    the normalised Gegenbauer polynomials (P_n(1) = 1): returns k(1), k'(1), the sum
    Σ c_n [n(n+d−2) − (d−3)] the check compares λ̄ with, and d."""
    d, t = sp.Symbol("d", positive=True), sp.Symbol("t")
    c = sp.symbols(f"c0:{n_terms}", real=True)
    k = sum(c[n] * sp.gegenbauer(n, (d - 2) / 2, t) / sp.gegenbauer(n, (d - 2) / 2, 1) for n in range(n_terms))
    series = sum(c[n] * (n * (n + d - 2) - (d - 3)) for n in range(n_terms))
    return k.subs(t, 1), sp.diff(k, t).subs(t, 1), series, d


def test_lambda_bar_is_the_gegenbauer_sum_of_the_kernel_coefficients():
    """The identity the numerical check relies on, proved for a kernel of five symbolic Gegenbauer
    terms: λ̄ = (d−1) k'(1) − (d−3) k(1) = Σ c_n [n(n+d−2) − (d−3)], since P_n'(1) = n(n+d−2)/(d−1).
    The wrong λ̄ (k'(1) without its 1/d) is refuted."""
    k1, dk1, series, d = _gegenbauer_series()
    check = assert_identity(lyap.lyapunov_exponents(k1, dk1, d)[1], series)
    assert check.statistics["method"] == "sympy.simplify(lhs - rhs) == 0"  # proved, not sampled
    with pytest.raises(AssertionError, match="identity failed"):
        assert_identity(_wrong(k1, dk1, d)[1], series)


@pytest.mark.parametrize("activation, n_max", [("relu", 4), ("relu", 7), ("tanh", 4), ("tanh", 8),
                                               ("sigmoid", 6), ("silu", 5), ("silu", 8)])
def test_too_small_n_max_is_not_evaluated_never_inconsistent(activation, n_max):
    # before: the tail estimate was 0 (fewer than 3 points to fit) and λ̄ − partial ≈ 1e-7 ... 4e-2 was
    # reported INCONSISTENT, a false refutation of a right λ̄
    line = _line(activation=activation, n_max=n_max)
    assert check_state(line) == "not evaluated" and "INCONSISTENT" not in line
    assert f"n_max = {n_max} leaves fewer than 3 resolved terms" in line and "raise n_max" in line


@pytest.mark.parametrize("activation, n_max", [("sigmoid", 12), ("sigmoid", 16), ("silu", 10), ("silu", 12),
                                               ("silu", 16), ("tanh", 12), ("relu", 12), ("relu", 16)])
def test_right_lambda_bar_is_consistent_from_moderate_n_max(activation, n_max):
    # sigmoid / silu at n_max = 16: tail estimates 0 and 5e-19 against true tails 1.3e-18 and 4.1e-18
    # (before: INCONSISTENT); the last terms (1e-16) bound that model error
    line = _line(activation=activation, n_max=n_max)
    assert check_state(line) == "passed" and "consistent" in line


@pytest.mark.parametrize("activation, n_max", [("sigmoid", 12), ("silu", 16), ("tanh", 12), ("relu", 16)])
def test_a_wrong_lambda_bar_fails_where_the_right_one_passes(monkeypatch, activation, n_max):
    lyap._symbolic_checks()  # SymPy's proofs use the right exponents (cached before the swap)
    monkeypatch.setattr(lyap, "lyapunov_exponents", _wrong)
    monkeypatch.setattr(derivation_module, "_CACHE", {})  # not the right λ̄'s derivation of another test
    line = _line(activation=activation, n_max=n_max)
    assert check_state(line) == "failed" and "INCONSISTENT" in line
    k1, dk1, series, d = _gegenbauer_series()  # and symbolically: the swapped λ̄ is not the Gegenbauer sum
    with pytest.raises(AssertionError, match="identity failed"):
        assert_identity(lyap.lyapunov_exponents(k1, dk1, d)[1], series)


def test_the_tolerance_is_a_fifth_of_the_tail_plus_the_last_terms_plus_ten_errors():
    m = mpmath.mpf
    ident = GegenbauerIdentity(partial=m(1), tail=m("1e-6"), residual=m("1e-6"), error=m("1e-12"),
                               last_terms=m("3e-7"))
    assert ident.tolerance == pytest.approx(float(m("1e-6") / 5 + m("3e-7") + 10 * m("1e-12")), rel=1e-15)
    edge = ident.tolerance
    assert GegenbauerIdentity(m(1), m("1e-6"), m("1e-6") + edge * (1 - m("1e-9")), m("1e-12"),
                              last_terms=m("3e-7")).holds
    assert not GegenbauerIdentity(m(1), m("1e-6"), m("1e-6") + edge * (1 + m("1e-9")), m("1e-12"),
                                  last_terms=m("3e-7")).holds
    assert not GegenbauerIdentity(m(1), mpmath.inf, m(0), m(0)).holds  # a divergent tail decides nothing


def test_underfit_is_set_by_one_or_two_resolved_terms_of_a_parity():
    kernel = lyap.ZonalKernel("tanh", 5, 0.1, 0.1)
    small = lyap.gegenbauer_identity(kernel, lyap.gegenbauer_coefficients(kernel, 6))  # window 3..6
    large = lyap.gegenbauer_identity(kernel, lyap.gegenbauer_coefficients(kernel, 12))  # window 6..12
    assert small.underfit and not large.underfit
    terms = [c.value * (n * (n + 3) - 2) for n, c in enumerate(lyap.gegenbauer_coefficients(kernel, 12))]
    assert large.last_terms == pytest.approx(float(abs(terms[-1]) + abs(terms[-2])), rel=1e-20)
