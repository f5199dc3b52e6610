"""λ_1, λ̄, λ̄' and the Gegenbauer identity (docs/theory.md §B.6–B.8, derivation ``lyapunov``)."""

from __future__ import annotations

import json

import mpmath
import pytest
import sympy as sp

import transformer_limits as tl
from transformer_limits.cli import main
from transformer_limits.testing import assert_identity
from transformer_limits.symbolic.gegenbauer import gegenbauer_coefficients
from transformer_limits.symbolic.lyapunov import (
    gegenbauer_identity,
    lambda_bar_prime,
    lemma_function,
    lyapunov_expressions,
    lyapunov_exponents,
    relu_closed_form_matches,
    relu_synchronization_condition,
)
from transformer_limits.symbolic.mlp_kernel import ZonalKernel, d_sym, sigma_u_sym, sigma_w_sym

# docs/theory.md §B.8 (Draft B, Appendix B), ReLU rows: (d, σ, k(1), k'(1), λ_1, λ̄) as printed.
RELU_TABLE = [
    (5, 0.0, "1.00e-01", "1.00e-01", "-1.00e-01", "2.00e-01"),
    (5, 0.1, "1.15e-01", "1.00e-01", "-1.30e-01", "1.70e-01"),
    (64, 0.0, "7.81e-03", "7.81e-03", "-7.81e-03", "1.56e-02"),
    (64, 0.1, "2.28e-02", "7.81e-03", "-4.80e-01", "-8.99e-01"),
    (128, 0.0, "3.91e-03", "3.91e-03", "-3.91e-03", "7.81e-03"),
    (128, 0.1, "1.89e-02", "3.91e-03", "-9.56e-01", "-1.87e+00"),
]


def _row(k1, dk1, d):
    lambda_1, lambda_bar = lyapunov_exponents(k1, dk1, d)
    return tuple(f"{float(v):.2e}" for v in (k1, dk1, lambda_1, lambda_bar))


@pytest.mark.parametrize("d, sigma, printed", [(r[0], r[1], r[2:]) for r in RELU_TABLE])
def test_relu_table_rows(d, sigma, printed):
    values = tl.derivation("lyapunov", d=d, sigma_u=sigma, sigma_w=sigma, n_max=8).values
    assert _row(values["k1"], values["dk1"], d) == tuple(printed)
    assert f"{values['lambda_1_prop_1_5']:.2e}" == printed[2]
    assert f"{values['lambda_bar_prop_1_5']:.2e}" == printed[3]


def test_wrong_formulas_fail_the_same_checks():
    # Draft B's k'(1) without the 1/d: the table rows are no longer reproduced.
    mismatches = 0
    for d, sigma, *printed in RELU_TABLE:
        kernel = ZonalKernel("relu", d, sigma, sigma)
        mismatches += _row(kernel.k1.value, d * kernel.dk1.value, d) != tuple(printed)
    assert mismatches == len(RELU_TABLE)
    # Draft A's §1 sign typo in Proposition 1.5: SymPy refuses the identity, the table disagrees.
    bias = sigma_u_sym**2 + 2 * sigma_w_sym**2
    typo = -1 / (2 * d_sym) + bias * (d_sym - 1) / 4
    correct = lyapunov_expressions()
    assert relu_closed_form_matches(typo, correct["lambda_bar_relu"]) == (False, True)
    right = relu_closed_form_matches(correct["lambda_1_relu"], correct["lambda_bar_relu"])
    assert right == (True, True)
    value = float(typo.subs({d_sym: 64, sigma_u_sym: 0.1, sigma_w_sym: 0.1}))
    assert f"{value:.2e}" != "-4.80e-01"


@pytest.mark.parametrize("name", ["relu", "tanh", "sigmoid", "silu", "gelu"])
@pytest.mark.parametrize("d, sigma", [(5, 0.0), (64, 0.1)])
def test_lambda_1_identity_numerically(name, d, sigma):
    v = tl.derivation("lyapunov", activation=name, d=d, sigma_u=sigma, sigma_w=sigma,
                      n_max=8).values
    assert v["lambda_1"] == pytest.approx(v["lambda_bar"] / 2 - v["k1"] - v["dk1"], abs=1e-14)
    assert v["synchronizes"] == (v["lambda_bar"] < 0)
    if v["lambda_bar"] < 0:
        assert v["lambda_1"] < 0


def test_sympy_identities_and_condition():
    e = lyapunov_expressions()
    k1, dk1 = sp.symbols("k_1 kprime_1", nonnegative=True)
    check = assert_identity(e["lambda_1"], e["lambda_bar"] / 2 - k1 - dk1)
    assert check.statistics["method"] == "sympy.simplify(lhs - rhs) == 0"  # proved, not sampled
    assert relu_synchronization_condition(2) == sp.false
    assert relu_synchronization_condition(3) == sp.false
    S = sp.Symbol("S", nonnegative=True)
    assert relu_synchronization_condition(5) == (sp.Rational(1, 5) < S)
    assert relu_synchronization_condition(64) == (sp.Rational(2, 64 * 61) < S)


@pytest.mark.parametrize("name, d, sigma", [("relu", 5, 0.1), ("relu", 2, 0.0), ("relu", 64, 0.1),
                                            ("tanh", 5, 0.1), ("sigmoid", 8, 0.0)])
def test_gegenbauer_identity(name, d, sigma):
    kernel = ZonalKernel(name, d, sigma, sigma)
    coefficients = gegenbauer_coefficients(kernel, 32)
    identity = gegenbauer_identity(kernel, coefficients)
    assert identity.holds, identity
    assert all(c.value > -10 * c.error - 1e-25 for c in coefficients)  # Schoenberg: c_n ≥ 0
    # Σ c_n P_{n,d}(1) = k(1): the truncated sum approaches k(1) from below.
    shortfall = kernel.k1.value - mpmath.fsum(c.value for c in coefficients)
    assert -10 * kernel.k1.error - 1e-20 < shortfall < 1e-4 * kernel.k1.value
    # A wrong λ̄ (k'(1) without the 1/d) is far outside the truncation error.
    wrong = (d - 1) * d * kernel.dk1.value - (d - 3) * kernel.k1.value
    assert abs(wrong - identity.partial - identity.tail) > 10 * abs(identity.tail) + 1e-3


def test_gegenbauer_residual_shrinks_with_n_max():
    kernel = ZonalKernel("relu", 5, 0.1, 0.1)
    small = gegenbauer_identity(kernel, gegenbauer_coefficients(kernel, 16))
    large = gegenbauer_identity(kernel, gegenbauer_coefficients(kernel, 40))
    assert 0 < large.residual < small.residual / 2


def test_tanh_without_bias_is_odd_field():
    kernel = ZonalKernel("tanh", 5, 0.0, 0.0)
    coefficients = gegenbauer_coefficients(kernel, 12)
    assert all(abs(c.value) < 1e-25 for c in coefficients[0::2])
    assert all(c.value > 1e-12 for c in coefficients[1:8:2])
    v = tl.derivation("lyapunov", activation="tanh", d=5, sigma_u=0, sigma_w=0, n_max=12).values
    assert v["lambda_bar"] > 0 and not v["synchronizes"]


@pytest.mark.parametrize("name, d, sigma", [("relu", 64, 0.1), ("sigmoid", 5, 0.0),
                                            ("tanh", 64, 0.1), ("relu", 5, 0.5)])
def test_lambda_bar_prime_negative_when_lambda_bar_negative(name, d, sigma):
    kernel = ZonalKernel(name, d, sigma, sigma)
    _, lambda_bar = lyapunov_exponents(kernel.k1.value, kernel.dk1.value, d)
    assert lambda_bar < 0
    F = lemma_function(kernel, 1.0)
    with mpmath.workdps(40):
        assert abs(F(1 - mpmath.mpf(10) ** -9) + lambda_bar) < 1e-4 * abs(lambda_bar)
        # Lemma: F > 0 on [−1, 1) under Assumption 1.
        assert min(F(mpmath.cos(mpmath.pi * i / 64)) for i in range(1, 65)) > 0
    lbp, u_min = lambda_bar_prime(kernel, 1.0)
    assert lambda_bar <= lbp < 0
    assert lbp == pytest.approx(-float(F(u_min)))


def test_lambda_bar_prime_grid_is_minimum():
    kernel = ZonalKernel("relu", 64, 0.1, 0.1)
    F = lemma_function(kernel, 2.0)
    lbp, _ = lambda_bar_prime(kernel, 2.0)
    grid = [F(-1 + 2 * mpmath.mpf(i) / 400) for i in range(401)]
    assert -lbp <= min(grid) + 1e-20


def test_cli_lyapunov_json_and_bad_params(capsys):
    code = main(["derive", "lyapunov", "--format", "json", "--param", "activation=tanh",
                 "--param", "d=8", "--param", "sigma_u=0.2", "--param", "n_max=12"])
    assert code == 0
    values = json.loads(capsys.readouterr().out)["values"]
    for key in ("k1", "dk1", "lambda_1", "lambda_bar", "lambda_bar_prime", "synchronizes"):
        assert key in values
    assert values["lambda_1"] == pytest.approx(
        2.5 * values["dk1"] - 3.5 * values["k1"], rel=1e-12)
    for bad in (["d=1"], ["activation=foo"], ["sigma_u=-1"], ["beta=0"]):
        assert main(["derive", "lyapunov", "--param", *bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error" in err


def test_benettin_simulation_agrees_with_formula_and_rejects_typo():
    from transformer_limits.numeric.sphere.lyapunov import simulate_top_lyapunov

    # Fixed seed; a 4-standard-error band has false-failure rate ≈ 6e-5 for a Gaussian estimate
    # (the O(Δt) discretisation bias, ~1e-3 here, is well below one standard error ≈ 7e-3).
    sim = simulate_top_lyapunov("relu", 5, 0.1, 0.1, width=64, dt=0.01, steps=400, chains=1024,
                                seed=2026)
    predicted = -1 / 10 - (0.01 + 2 * 0.01) * 4 / 4  # Proposition 1.5: −1/(2d) − S(d−1)/4
    assert abs(sim.estimate - predicted) < 4 * sim.standard_error
    typo = -1 / 10 + (0.01 + 2 * 0.01) * 4 / 4  # Draft A §1 sign typo
    assert abs(sim.estimate - typo) > 4 * sim.standard_error
    with pytest.raises(ValueError, match="activation"):
        simulate_top_lyapunov("foo")
