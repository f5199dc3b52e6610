"""Zonal covariance k(t) of the random-MLP field (docs/theory.md §B.2, derivation ``mlp-kernel``)."""

from __future__ import annotations

import json

import mpmath
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import transformer_limits as tl
from transformer_limits.cli import main
from transformer_limits.symbolic.gaussian_quadrature import (
    bivariate_gaussian_expectation,
    bivariate_gaussian_expectation_reference,
    gaussian_expectation,
    gaussian_expectation_reference,
)
from transformer_limits.symbolic.mlp_kernel import (
    ACTIVATIONS,
    ZonalKernel,
    activation,
    relu_symbolic_checks,
)
from transformer_limits.testing import strategies as tls

FEW = settings(max_examples=6, derandomize=True, deadline=None,
               suppress_health_check=[HealthCheck.too_slow])

# Agazzi et al. 2026 (arXiv:2604.26898), Appendix B table, ReLU rows: (d, σ_U = σ_W = σ, k(1), k'(1))
# as printed.
RELU_TABLE = [
    (5, 0.0, "1.00e-01", "1.00e-01"),
    (5, 0.1, "1.15e-01", "1.00e-01"),
    (64, 0.0, "7.81e-03", "7.81e-03"),
    (64, 0.1, "2.28e-02", "7.81e-03"),
    (128, 0.0, "3.91e-03", "3.91e-03"),
    (128, 0.1, "1.89e-02", "3.91e-03"),
]


def relu_gaussian_mean(m, sd):
    """E relu(m + sd Z) = m Φ(m/sd) + sd φ(m/sd) (a closed form independent of arc-cosine)."""
    if sd == 0:
        return max(m, mpmath.mpf(0))
    return m * mpmath.ncdf(m / sd) + sd * mpmath.npdf(m / sd)


def reference_k(kernel: ZonalKernel, t, dps=50):
    """k(t) by 50-digit adaptive quadrature of E[φ(V_1) E[φ(V_2)|V_1]] + σ_W²."""
    act = kernel.act
    with mpmath.workdps(dps + 10):
        est = bivariate_gaussian_expectation_reference(
            act.phi, act.phi, kernel.s2, kernel.s2, kernel._cov(t), kinks=act.kinks, dps=dps,
            conditional=relu_gaussian_mean if act.name == "relu" else None)
        return est.value + kernel.sigma_w**2


@pytest.mark.parametrize("d, sigma, k1_text, dk1_text", RELU_TABLE)
def test_relu_table_rows_k1_dk1(d, sigma, k1_text, dk1_text):
    values = tl.derivation("mlp-kernel", d=d, sigma_u=sigma, sigma_w=sigma).values
    assert f"{values['k1']:.2e}" == k1_text
    assert f"{values['dk1']:.2e}" == dk1_text


def test_relu_sympy_proofs_are_recorded():
    checks = relu_symbolic_checks()
    assert any("d/dt k_closed" in c for c in checks)
    assert any("lim_{t→1⁻}" in c for c in checks)
    derived = tl.derivation("mlp-kernel")
    assert set(checks) <= set(derived.checks)


@FEW
@given(t=st.floats(-1, 1), d=st.integers(2, 80), sigma_u=st.floats(0, 0.5),
       sigma_w=st.floats(0, 0.5))
def test_relu_closed_form_matches_50_digit_quadrature(t, d, sigma_u, sigma_w):
    kernel = ZonalKernel("relu", d, sigma_u, sigma_w, dps=50)
    with mpmath.workdps(60):
        assert abs(kernel.k(t) - reference_k(kernel, t)) < mpmath.mpf(10) ** -45


@FEW
@given(t=st.floats(-0.99, 0.99), d=st.integers(2, 80), sigma=st.floats(0, 0.5))
def test_relu_closed_form_vs_gauss_hermite(t, d, sigma):
    # Gauss–Hermite converges only algebraically for the kinked ReLU integrand: at 96 nodes per
    # axis the error is O(1e-3) relative to s² = 1/d + σ²; the error estimate has that size too.
    kernel = ZonalKernel("relu", d, sigma, sigma)
    quad = kernel.k_quadrature(t)
    assert abs(quad.value - kernel.k(t)) < 5e-3 * kernel.s2
    assert quad.error < 5e-3 * kernel.s2


@FEW
@given(t=st.floats(-1, 1), d=st.integers(2, 64), sigma=st.floats(0, 0.3),
       name=tls.activations(smooth=True))  # tanh, sigmoid, silu, gelu: the smooth ones
def test_smooth_gauss_hermite_matches_mehler_series_and_error_estimate(t, d, sigma, name):
    kernel = ZonalKernel(name, d, sigma, sigma)
    quad = kernel.k_quadrature(t)
    assert abs(quad.value - kernel.k(t)) <= 10 * (quad.error + kernel.fast_error) + 1e-28


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_k1_gauss_hermite_vs_adaptive_reference(name):
    kernel = ZonalKernel(name, 5, 0.1, 0.1)
    act = kernel.act
    with mpmath.workdps(50):
        ref_k1 = gaussian_expectation_reference(lambda z: act.phi(z) ** 2, kernel.s2,
                                                kinks=act.kinks, dps=40).value + kernel.sigma_w**2
        ref_dk1 = gaussian_expectation_reference(lambda z: act.dphi(z) ** 2, kernel.s2,
                                                 kinks=act.kinks, dps=40).value / 5
    assert abs(kernel.k1.value - ref_k1) <= 10 * kernel.k1.error + 1e-28
    assert abs(kernel.dk1.value - ref_dk1) <= 10 * kernel.dk1.error + 1e-28


@pytest.mark.parametrize("name, d, sigma", [("relu", 5, 0.1), ("relu", 64, 0.0), ("tanh", 5, 0.0),
                                            ("sigmoid", 8, 0.1), ("silu", 5, 0.1),
                                            ("gelu", 64, 0.1)])
def test_dk1_is_one_sided_derivative_of_k_at_1(name, d, sigma):
    kernel = ZonalKernel(name, d, sigma, sigma, dps=40)
    with mpmath.workdps(50):
        h = mpmath.mpf(10) ** -16
        one_sided = (kernel.k(1) - kernel.k(1 - h)) / h
        # ReLU: k(1−h) = k(1) − k'(1)h + O(h^{3/2}) -> error O(√h) = 1e-8; smooth: O(h).
        assert abs(one_sided - kernel.dk1.value) < 1e-7
        # A deliberately wrong k'(1) (Draft B's E[φ'²], missing 1/d) fails the same check.
        assert abs(one_sided - d * kernel.dk1.value) > 1e-3


@pytest.mark.parametrize("name", ["tanh", "silu"])
def test_price_theorem_dk_quadrature_is_derivative(name):
    kernel = ZonalKernel(name, 7, 0.2, 0.0)
    with mpmath.workdps(40):
        t, h = mpmath.mpf("0.2"), mpmath.mpf(10) ** -8
        numeric = (kernel.k_quadrature(t + h).value - kernel.k_quadrature(t - h).value) / (2 * h)
    assert abs(kernel.dk_quadrature(t).value - numeric) < 1e-14  # central difference: O(h²)
    assert abs(kernel.dk(t) - numeric) < 1e-14


def test_gaussian_expectation_moments_and_validation():
    est = gaussian_expectation(lambda z: z**4, 2.0, mean=1)
    assert abs(est.value - (1 + 6 * 2 + 3 * 4)) < 1e-25  # E(1+√2Z)^4 = 1 + 6·2 + 3·4
    biv = bivariate_gaussian_expectation(lambda z: z, lambda z: z**3, 1.0, 2.0, 0.5)
    assert abs(biv.value - 3 * 2.0 * 0.5) < 1e-25  # E[V_1 V_2³] = 3 var2 cov
    with pytest.raises(ValueError, match="variance"):
        gaussian_expectation(lambda z: z, -1)
    with pytest.raises(ValueError, match="cov"):
        bivariate_gaussian_expectation(lambda z: z, lambda z: z, 1, 1, 2)
    with pytest.raises(ValueError, match="activation"):
        activation("foo")
    with pytest.raises(ValueError, match="d must"):
        ZonalKernel("relu", 1, 0.1, 0.1)


def test_derivation_values_with_t_and_params_validation():
    values = tl.derivation("mlp-kernel", activation="tanh", d=8, t=0.5).values
    assert set(values) >= {"k1", "dk1", "k_t", "k_t_error", "dk_t"}
    assert 0 < values["k_t"] < values["k1"]
    for bad in ({"d": 1}, {"activation": "foo"}, {"sigma_u": -1}, {"t": 1.5}):
        with pytest.raises(ValueError):
            tl.derivation("mlp-kernel", **bad)


def test_cli_mlp_kernel_json(capsys):
    code = main(["derive", "mlp-kernel", "--format", "json", "--param", "activation=relu",
                 "--param", "d=64", "--param", "t=0.9"])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["name"] == "mlp-kernel"
    assert payload["values"]["k1"] == pytest.approx(0.0228125)
    assert payload["values"]["k_t"] == pytest.approx(0.022089, abs=1e-6)  # docs/theory.md §B.2 Monte Carlo check
    assert main(["derive", "mlp-kernel", "--param", "d=1"]) == 2
    assert "d" in capsys.readouterr().err
