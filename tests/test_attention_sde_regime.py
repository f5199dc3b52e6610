"""The SDE regime of paper A's attention model (transformer_limits.numeric.attention.sde_regime) and the
experiment ``attention-sde-regime``: the discrete model is the Euler–Maruyama scheme of the limit SDE,
the coupling, a reduced-grid run, and the deliberately wrong models that must fail their checks.

Statistical tests use fixed seeds; each check's false-failure rate is its alpha = 0.01 (the reduced
runs below are deterministic given the seeds, so a test either always passes or always fails).
"""

import numpy as np
import pytest

from transformer_limits.numeric.attention.layer import attention_layer
from transformer_limits.numeric.attention.sde_regime import SDERegime, coupled_paths, ode_limit
from transformer_limits.verify.experiment import ExperimentConfig
from transformer_limits.verify.experiments import attention_sde_regime as exp
from transformer_limits.verify.registry import experiment_spec

#: a reduced grid (a few seconds) on which the right model passes and every control fails
REDUCED = dict(L_levels=(4, 8, 16, 32), L_ref=64, ode_steps=16, seeds=12, paths=48, weak_groups=4,
               H_levels=(4, 8, 16, 32), L_H=4, L_ref_H=16, paths_H=16)


def _reduced(**overrides):
    return exp.run(ExperimentConfig(profile="quick", seed=0, workers=1), **REDUCED, **overrides).decide(exp.CHECKS)


@pytest.fixture(scope="module")
def reduced_run():
    return _reduced()


def _states(result):
    return {c.name: c.state for c in result.checks}


# ---------------------------------------------------------------------------------------- the model
def test_head_outputs_equal_the_attention_layer():
    model = SDERegime(d=2, d_k=3, d_v=2, H=3, temperature=0.7, head_gain=1.3, heads_seed=4)
    X = np.random.default_rng(0).standard_normal((2, 5, 2))
    layer = attention_layer(2, 3, 2, temperature=0.7)
    A = model.head_outputs(X)
    for b in range(2):
        _, cache = layer.field(X[b], model.heads["Q"], model.heads["K"], model.heads["V"], np.zeros((3, 2, 2)),
                               np.ones(3))
        np.testing.assert_allclose(A[b], cache.A, rtol=1e-13, atol=1e-13)


def test_discrete_layer_is_the_euler_maruyama_step_of_the_limit():
    model = SDERegime(H=3, drift_scale=1.5, sigma_O=0.8, heads_seed=2)
    rng = np.random.default_rng(1)
    X, Z = rng.standard_normal((4, 5, 2)), rng.standard_normal((4, 3, 2, 2))
    L = 8
    dt = model.T / L
    np.testing.assert_allclose(model.layer(X, L, Z), model.limit_step(X, dt, np.sqrt(dt) * Z), rtol=1e-14)
    # the drift uses the mean output matrices −V_h^T: b = −(kappa/H) Σ_h V_h^T A_h (transcribed)
    A = model.head_outputs(X)
    b = -(1.5 / 3) * sum(A[:, h] @ model.heads["V"][h] for h in range(3))
    np.testing.assert_allclose(model.drift(A), b, rtol=1e-13)


def test_coupling_with_equal_steps_is_exact_and_ode_without_drift_is_identity():
    model = SDERegime(H=2, drift_scale=0.5, heads_seed=1)
    X0 = np.random.default_rng(2).standard_normal((3, 4, 2))
    cp = coupled_paths(model, X0, (8,), 8, np.random.default_rng(3), ode_steps=8)
    np.testing.assert_allclose(cp.discrete[8], cp.sde, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(ode_limit(SDERegime(H=2, drift_scale=0.0), X0, 10), X0)
    with pytest.raises(ValueError, match="divide"):
        coupled_paths(model, X0, (3,), 8, np.random.default_rng(3))


def test_noise_covariance_matches_the_formula_by_monte_carlo():
    # Cov(ξ(x^i), ξ(x^j)) = c_H² σ_O² Σ_h <A_h^i, A_h^j> I_d; 200k draws at a fixed seed, tolerance 6 SE
    model = SDERegime(H=2, sigma_O=0.9, heads_seed=5)
    X = np.random.default_rng(4).standard_normal((1, 3, 2))
    A = np.repeat(model.head_outputs(X), 200_000, axis=0)
    xi = model.noise(A, np.random.default_rng(5).standard_normal((A.shape[0], 2, 2, 2)))
    emp = np.einsum("bia,bjc->ijac", xi, xi) / xi.shape[0]
    C = model.covariance(X)[0]
    want = C[:, :, None, None] * np.eye(2)[None, None]
    se = np.sqrt((C.diagonal()[:, None] * C.diagonal()[None, :] + C**2) / xi.shape[0])
    assert np.all(np.abs(emp - want) <= 6 * se[:, :, None, None] + 1e-12)


# ---------------------------------------------------------------------------------------- the experiment
def test_registered():
    spec = experiment_spec("attention-sde-regime")
    assert spec.paper == "A" and "attention-sde" in spec.derivations
    assert set(spec.budget_s) == {"quick", "full"}


def test_reduced_grid_passes(reduced_run):
    assert reduced_run.error is None
    assert all(c.passed for c in reduced_run.checks), [str(c) for c in reduced_run.checks]
    assert {f.name for f in reduced_run.figures} == {"sde_regime_strong_weak", "sde_regime_ode_control",
                                                     "sde_regime_heads"}


def test_group_weak_errors_merges_groups_with_the_wrong_sign():
    weak = np.array([[1.0, 1.2, 0.9, 1.1], [0.2, -0.1, 0.3, 0.1]])
    grouped, G, sign = exp.group_weak_errors(weak, 4)
    assert G == 2 and sign == 1.0 and np.all(grouped > 0)
    _, G0, _ = exp.group_weak_errors(np.array([[1.0, 1.0], [-1.0, 0.5]]), 2)
    assert G0 == 0


# ---------------------------------------------------------------------------------------- controls
def test_non_diffusive_residual_scale_fails_the_L_checks():
    # residual scale T/L instead of (T/L)^{1/2}: the discrete model tends to the ODE, not the SDE
    states = _states(_reduced(residual_power=1.0))
    assert states["strong_order_L"] == "fail"
    assert states["weak_order_L"] == "fail"
    assert states["ode_limit_rejected"] == "fail"


def test_stratonovich_limit_fails_weak_order():
    # the limit read as a Stratonovich SDE (Itô drift plus the conversion drift s): the laws differ by
    # O(1), so the weak error stops falling (the strong error flattens too, but its interval stays wide)
    assert _states(_reduced(limit_correction=1.0))["weak_order_L"] == "fail"


def test_inverse_sqrt_head_average_fails_the_H_checks():
    # c_H = 1/sqrt(H): the covariance no longer falls like 1/H
    states = _states(_reduced(head_average="sqrt"))
    assert states["strong_exponent_H"] == "fail"
    assert states["diffusion_exponent_H"] == "fail"


@pytest.mark.slow
def test_quick_profile_passes():
    result = exp.run(ExperimentConfig(profile="quick", seed=0, workers=2)).decide(exp.CHECKS)
    assert result.status == "pass", [str(c) for c in result.checks]
