"""The synchronisation phase boundary λ̄ = 0 and the experiment ``synchronization-phase``.

The boundary is checked against independent transcriptions of the maths: ReLU's closed form
(2dλ̄ = 2 − (σ_U² + 2σ_W²) d(d−3)), and for tanh k(1), k'(1) by mpmath.quad of the Gaussian integrals
written here (density of x = sZ, φ' by hand) with the root found by Ridder's bracketing method
(the module uses the secant method).  Statistical tests use fixed seeds; the experiment's check
has family-wise false-failure rate 0.01 (Bonferroni), so the right model fails with probability
≤ 1 % per seed (the seeds here are fixed: the outcomes are deterministic).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import stats

from transformer_limits.symbolic import synchronization_phase as phase
from transformer_limits.verify.experiment import ExperimentConfig
from transformer_limits.verify.experiments import synchronization_phase as exp


# ---------------------------------------------------------------------------------------------
# independent transcriptions of λ̄


def relu_lambda_bar(d, sigma_u, sigma_w):
    """Proposition 1.5 (corrected sign): λ̄ = 1/d − (σ_U² + 2σ_W²)(d − 3)/2."""
    return mpmath.mpf(1) / d - (mpmath.mpf(sigma_u) ** 2 + 2 * mpmath.mpf(sigma_w) ** 2) * (d - 3) / 2


def tanh_lambda_bar(d, sigma_u, sigma_w):
    """k(1) = ∫ tanh(x)² N(0, s²)(dx) + σ_W², k'(1) = (1/d) ∫ sech(x)⁴ N(0, s²)(dx), s² = 1/d + σ_U²."""
    s2 = mpmath.mpf(1) / d + mpmath.mpf(sigma_u) ** 2

    def density(x):
        return mpmath.exp(-x * x / (2 * s2)) / mpmath.sqrt(2 * mpmath.pi * s2)

    k1 = mpmath.quad(lambda x: mpmath.tanh(x) ** 2 * density(x), [-mpmath.inf, 0, mpmath.inf]) + mpmath.mpf(sigma_w) ** 2
    dk1 = mpmath.quad(lambda x: mpmath.sech(x) ** 4 * density(x), [-mpmath.inf, 0, mpmath.inf]) / d
    return (d - 1) * dk1 - (d - 3) * k1


@pytest.mark.parametrize("d", [4, 8, 64])
def test_relu_boundary_is_the_closed_form(d):
    roots = phase.critical_scale("relu", d)
    assert len(roots) == 1 and roots[0].bracketed
    with mpmath.workdps(40):
        exact = mpmath.sqrt(mpmath.mpf(2) / (3 * d * (d - 3)))  # 3σ*² = 2/(d(d−3))
        assert abs(roots[0].t - exact) < mpmath.mpf(10) ** -30 * exact
        assert relu_lambda_bar(d, exact * (1 - 1e-9), exact * (1 - 1e-9)) > 0 > relu_lambda_bar(d, exact * (1 + 1e-9),
                                                                                               exact * (1 + 1e-9))
        # σ_W*(σ_U)² = (S* − σ_U²)/2 where positive
        su = exact / 2
        sw = phase.critical_sigma_w("relu", d, su)
        assert abs(sw - mpmath.sqrt((mpmath.mpf(2) / (d * (d - 3)) - su**2) / 2)) < mpmath.mpf(10) ** -29
        assert abs(phase.lambda_bar("relu", d, 0.3, 0.2) - relu_lambda_bar(d, 0.3, 0.2)) < mpmath.mpf(10) ** -29
    assert phase.relu_critical_bias(d) == phase.relu_critical_bias(d) and float(phase.relu_critical_bias(d)) == \
        pytest.approx(2 / (d * (d - 3)))


def test_no_boundary_for_d_at_most_3_and_for_sigmoid():
    for d in (2, 3):
        assert phase.critical_scale_float("relu", d) == [] and phase.critical_sigma_w("tanh", d, 0.1) is None
        assert "≤ 3" in phase.no_boundary_reason("gelu", d)
        assert phase.relu_critical_bias(d) is None
        # λ̄ > 0 at d = 3 (λ̄ = 2k'(1)) even with large biases
        assert phase.lambda_bar("tanh", 3, 2.0, 2.0, dps=20) > 0
    # sigmoid: φ(0) = 1/2, λ̄ < 0 from zero biases on for d ≥ 4
    assert phase.critical_scale_float("sigmoid", 8) == []
    assert "already at zero biases" in phase.no_boundary_reason("sigmoid", 8)
    assert phase.lambda_bar("sigmoid", 4, 0, 0, dps=20) < 0


def test_tanh_boundary_changes_sign_in_the_independent_quadrature():
    """The module's 30-digit root, checked with the λ̄ written above (3 evaluations)."""
    d = 8
    root = phase.critical_scale("tanh", d)
    assert len(root) == 1 and root[0].bracketed
    with mpmath.workdps(40):
        t, eps = root[0].t, mpmath.mpf(10) ** -25
        assert tanh_lambda_bar(d, t * (1 - eps), t * (1 - eps)) > 0 > tanh_lambda_bar(d, t * (1 + eps), t * (1 + eps))
        assert abs(tanh_lambda_bar(d, 0.3, 0.1) - phase.lambda_bar("tanh", d, 0.3, 0.1)) < mpmath.mpf(10) ** -30


@pytest.mark.slow
def test_tanh_boundary_against_independent_quadrature_and_ridder():
    """A root found by another method (Ridder's bracketing) from the independent λ̄ (about 30 s)."""
    d = 8
    root = phase.critical_scale("tanh", d)
    with mpmath.workdps(40):
        t = mpmath.findroot(lambda s: tanh_lambda_bar(d, s, s), (mpmath.mpf("0.14"), mpmath.mpf("0.16")),
                            solver="ridder", tol=mpmath.mpf(10) ** -64)
        assert abs(t - root[0].t) < mpmath.mpf(10) ** -30


def test_lambda_bar_agrees_with_the_lyapunov_derivation():
    from transformer_limits.symbolic.lyapunov import lyapunov_exponents
    from transformer_limits.symbolic.mlp_kernel import ZonalKernel

    kernel = ZonalKernel("silu", 8, 0.2, 0.2, dps=30)  # Gauss–Hermite error ~1e-33 here
    with mpmath.workdps(40):
        expected = lyapunov_exponents(kernel.k1.value, kernel.dk1.value, 8)[1]
        assert abs(phase.lambda_bar("silu", 8, 0.2, 0.2) - expected) < mpmath.mpf(10) ** -28
    # the float64 scan agrees to float precision with the 30-digit value
    assert float(phase.lambda_bar_float("silu", 8, 0.2, 0.2)[0]) == pytest.approx(float(expected), rel=1e-10)


def test_without_one_over_d_the_boundary_moves_past_the_synchronising_point():
    prof = exp.Profile(activations=("relu",), chains=4096, steps=50)
    below, above = exp.design_points("relu", prof)
    right = phase.critical_scale_float("relu", 8)[0]
    wrong = phase.critical_scale_float("relu", 8, one_over_d=False)
    assert below.sigma < right < above.sigma and below.lambda_bar > 0 > above.lambda_bar
    assert wrong and wrong[0] > above.sigma  # the control calls the synchronising point non-synchronising
    assert exp.lambda_bar_without_one_over_d("relu", 8, above.sigma) > 0


# ---------------------------------------------------------------------------------------------
# statistics


def test_mean_square_exponent_of_a_gaussian_log_norm():
    # log|V_T| ~ N(μT, v T): E|V_T|² = exp((2μ + 2v) T); the estimator from mean and SE of L/T
    rng = np.random.default_rng(0)
    mu, v, T, n = -0.2, 0.15, 4.0, 200_000
    L = mu * T + math.sqrt(v * T) * rng.standard_normal(n)
    per_chain = L / T
    value, se = exp.mean_square_exponent(per_chain.mean(), per_chain.std(ddof=1) / math.sqrt(n), n, T)
    assert value == pytest.approx(2 * mu + 2 * v, abs=4 * se)
    assert se == pytest.approx(2 * math.sqrt(v / (n * T) + 2 * v**2 / n), rel=0.02)
    direct = math.log(np.mean(np.exp(2 * L))) / T  # the mean square itself
    assert direct == pytest.approx(2 * mu + 2 * v, abs=0.01)


def test_phase_sign_check_rejects_the_other_sign_and_states_power():
    pred, se = [0.1, -0.1], [0.02, 0.02]
    right = exp.phase_sign_check([0.09, -0.12], se, pred, ["a", "b"], dof=15)
    t = stats.t.isf(0.01 / 2, 15)
    assert right.passed and right.statistics["z_critical"] == pytest.approx(t)
    assert right.power == pytest.approx(stats.norm.cdf((0.1 - t * 0.02) / 0.02))
    assert right.state == "pass"
    wrong = exp.phase_sign_check([0.09, 0.09], se, pred, ["a", "b"], dof=15)  # b grows where λ̄ < 0 (0.09 − 2.95·0.02 > 0)
    assert not wrong.passed and "b:" in wrong.note
    # not significant on the other side: not contradicted (but the power is what it is)
    assert exp.phase_sign_check([0.09, 0.02], se, pred, ["a", "b"]).passed


# ---------------------------------------------------------------------------------------------
# the experiment (reduced profile) and its control

SMALL = exp.Profile(activations=("relu",), table_dims=(8,), curve_dims=(8, 16), curve_points=8, chains=2048,
                    max_chains=2048, steps=40, batches=8, margin=6.0)


@pytest.fixture
def small_profile(monkeypatch):
    monkeypatch.setitem(exp.PROFILES, "quick", SMALL)


def test_k_prime_without_one_over_d_fails_and_the_right_model_passes(small_profile, tmp_path):
    # one store: the wrong formula is judged on the right run's simulations (the formula enters only
    # the check; a store reproduces a run's points bitwise), so they are simulated once
    config = ExperimentConfig("quick", seed=1, store=str(tmp_path / "sync.sqlite"))
    right = exp.run(config)
    check = right.checks[0]
    assert check.passed and right.status in ("pass", "inconclusive"), check
    assert [f.name for f in right.figures] == ["synchronization-phase-diagram", "synchronization-phase-d-sigma",
                                              "synchronization-phase-rates"]
    assert all(f.png[:4] == b"\x89PNG" for f in right.figures)
    rows = right.tables["points"]
    assert [r["side"] for r in rows] == ["no sync", "sync"]
    assert rows[0]["rate (Richardson)"] > 0 > rows[1]["rate (Richardson)"]
    wrong = exp.run(config, formula=exp.lambda_bar_without_one_over_d)
    assert wrong.status == "fail" and not wrong.checks[0].passed  # not merely inconclusive


@pytest.mark.slow
def test_quick_profile_passes():
    from transformer_limits.verify.registry import experiment_spec
    from transformer_limits.verify.running import run_experiment

    result = run_experiment(experiment_spec("synchronization-phase"), ExperimentConfig("quick", workers=2))
    assert result.status == "pass", result.checks
