"""The two step samplers of the Benettin estimator draw the same Markov chain in law.

"matrices" draws U, W, b_U, b_W entry by entry; "projections" draws only g = Ux, g' = Uv, b_U and the
two Gaussian vectors W a, W b (numeric/sphere/lyapunov.py).  Checked here from the distribution of one
step, (G^m(x), DG^m(x) v) at fixed orthonormal (x, v), and from the estimates: two-sample
Kolmogorov-Smirnov tests on scalar statistics of the step (Bonferroni over the statistics, family-wise
false-failure rate 1e-3, fixed seeds), and a planted wrong sampler (W a and W b drawn independently,
i.e. <a, b> ignored) that must be rejected by the same tests.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from transformer_limits.numeric.sphere import lyapunov as ly

D, M, SIGMA, SAMPLES = 4, 6, 0.3, 40_000
ALPHA = 1e-3


def orthonormal_pairs(rng, n, d):
    x = rng.standard_normal(d)
    x /= np.linalg.norm(x)
    v = rng.standard_normal(d)
    v -= v @ x * x
    v /= np.linalg.norm(v)
    return np.tile(x, (n, 1)), np.tile(v, (n, 1))


def one_step(step, activation, seed):
    phi, dphi = ly.ACTIVATIONS[activation]
    x, v = orthonormal_pairs(np.random.default_rng(99), SAMPLES, D)
    field, jac_v = step(np.random.default_rng(seed), x, v, phi, dphi, M, SIGMA, SIGMA, 1 / np.sqrt(M), 1 / np.sqrt(D))
    return field, jac_v


def statistics(field, jac_v):
    """Scalar statistics whose laws pin down the pair: coordinates, norms, and the coupling <G, DG v>."""
    return {"field_0": field[:, 0], "jac_0": jac_v[:, 0], "|jac|": np.linalg.norm(jac_v, axis=1),
            "<field, jac>": np.sum(field * jac_v, axis=1), "field_0 * jac_0": field[:, 0] * jac_v[:, 0]}


def smallest_p_value(step_a, step_b, activation):
    a, b = (statistics(*one_step(step, activation, seed)) for step, seed in ((step_a, 1), (step_b, 2)))
    return min(stats.ks_2samp(a[k], b[k]).pvalue for k in a), len(a)


def independent_rows_step(rng, x, v, phi, dphi, width, sigma_u, sigma_w, inv_root_m, inv_root_d):
    """Wrong on purpose: W a and W b drawn independently (the correlation <a, b> dropped)."""
    a, b, z, b_w = ly.projection_draws(rng, x.shape, phi, dphi, width, sigma_u, sigma_w, inv_root_d)
    field = np.linalg.norm(a, axis=1)[:, None] * z[0] * inv_root_m + b_w
    jac_v = np.linalg.norm(b, axis=1)[:, None] * z[1] * inv_root_m
    return field, jac_v


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_one_step_has_the_same_law_under_both_samplers(activation):
    p, k = smallest_p_value(ly._matrices_step, ly._projections_step, activation)
    assert p > ALPHA / k


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_the_tests_reject_a_sampler_that_drops_the_coupling(activation):
    """Power: the same tests at the same size tell the wrong sampler apart (its <field, jac> is
    symmetric about b_W's contribution only)."""
    p, k = smallest_p_value(ly._matrices_step, independent_rows_step, activation)
    assert p < ALPHA / k


def test_projections_step_in_the_degenerate_case_a_is_zero():
    """ReLU with every pre-activation negative: a = 0, W a = 0 and W b = |b| z' (no division by |a|)."""
    rng = np.random.default_rng(0)
    x, v = orthonormal_pairs(rng, 5, 3)
    phi, dphi = ly.ACTIVATIONS["relu"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0 evaluated on the way, not even in a discarded branch
        field, jac_v = ly._projections_step(rng, x, v, lambda z: np.zeros_like(z), dphi, 4, 0.0, 0.0, 0.5, 1.0)
    assert np.all(field == 0.0) and np.all(np.isfinite(jac_v)) and np.any(jac_v != 0.0)
    # and W b is |b| z' exactly (no part along z): the draws replayed from the same state
    replay = np.random.default_rng(0)
    orthonormal_pairs(replay, 5, 3)
    _, b, z, _ = ly.projection_draws(replay, x.shape, lambda z: np.zeros_like(z), dphi, 4, 0.0, 0.0, 1.0)
    np.testing.assert_array_equal(jac_v, (np.linalg.norm(b, axis=1)[:, None] * z[1]) * 0.5)


@pytest.mark.parametrize("activation, d", [("relu", 5), ("tanh", 3)])
def test_the_estimates_agree_between_samplers(activation, d):
    """Same law, independent draws: the difference of the two estimates is within 4 combined standard
    errors (false-failure rate 6e-5 for Gaussian estimates; fixed seeds)."""
    kw = dict(width=16, dt=0.02, steps=150, chains=512)
    a = ly.simulate_top_lyapunov(activation, d, 0.1, 0.1, seed=11, sampler="matrices", **kw)
    b = ly.simulate_top_lyapunov(activation, d, 0.1, 0.1, seed=12, sampler="projections", **kw)
    assert abs(a.estimate - b.estimate) < 4 * np.hypot(a.standard_error, b.standard_error)
    # and the standard errors themselves agree (same law of the per-chain estimates): within 15 %
    assert b.standard_error == pytest.approx(a.standard_error, rel=0.15)


def test_an_unknown_sampler_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="sampler"):
        ly.simulate_top_lyapunov("relu", sampler="entries")


def test_activations_and_their_derivatives_are_the_textbook_ones():
    """GELU(z) = z Φ(z), GELU'(z) = Φ(z) + z φ(z); SiLU(z) = z σ(z); ReLU' = 1{z > 0} (0 at 0), from
    math.erf / math.exp one point at a time."""
    z = np.array([-2.5, -0.7, 0.0, 0.3, 1.9])
    Phi = np.array([0.5 * (1 + math.erf(t / math.sqrt(2))) for t in z])
    pdf = np.array([math.exp(-t * t / 2) / math.sqrt(2 * math.pi) for t in z])
    sig = np.array([1 / (1 + math.exp(-t)) for t in z])
    expected = {"gelu": (z * Phi, Phi + z * pdf), "silu": (z * sig, sig * (1 + z * (1 - sig))),
                "sigmoid": (sig, sig * (1 - sig)), "tanh": (np.tanh(z), 1 - np.tanh(z) ** 2),
                "relu": (np.maximum(z, 0), (z > 0).astype(float))}
    for name, (phi, dphi) in expected.items():
        f, df = ly.ACTIVATIONS[name]
        np.testing.assert_allclose(f(z), phi, rtol=1e-14, atol=1e-15, err_msg=name)
        np.testing.assert_allclose(df(z), dphi, rtol=1e-14, atol=1e-15, err_msg=name)
    assert ly.ACTIVATIONS["relu"][1](np.array([0.0]))[0] == 0.0


@pytest.mark.parametrize("bad", [dict(sigma_u=-0.1), dict(sigma_w=-0.1), dict(width=0), dict(steps=0),
                                 dict(chains=1), dict(dt=0.0), dict(d=1)])
def test_bad_arguments_are_value_errors(bad):
    with pytest.raises(ValueError):
        ly.simulate_top_lyapunov("relu", **bad)


def test_the_smallest_sizes_are_accepted_and_the_standard_error_is_the_sample_one():
    """width = steps = 1 and chains = 2 run; SE = std(ddof=1)/sqrt(chains) of the per-chain estimates,
    here from two chains recomputed by hand with the matrices sampler (documented draw order)."""
    est = ly.simulate_top_lyapunov("relu", 3, 0.2, 0.2, width=1, dt=0.1, steps=1, chains=2, seed=4)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    v = rng.standard_normal((2, 3))
    v -= np.sum(v * x, axis=1, keepdims=True) * x
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    field, jac_v = ly._matrices_step(rng, x, v, *ly.ACTIVATIONS["relu"], 1, 0.2, 0.2, 1.0, 1 / math.sqrt(3))
    y = x + math.sqrt(0.1) * field
    y_hat = y / np.linalg.norm(y, axis=1, keepdims=True)
    w = v + math.sqrt(0.1) * jac_v
    w = (w - np.sum(w * y_hat, axis=1, keepdims=True) * y_hat) / np.linalg.norm(y, axis=1, keepdims=True)
    per_chain = np.log(np.linalg.norm(w, axis=1)) / 0.1
    assert est.estimate == pytest.approx(per_chain.mean(), rel=1e-12)
    assert est.standard_error == pytest.approx(abs(per_chain[0] - per_chain[1]) / 2, rel=1e-12)


# --- the reduced sampler: the step at x = e_1, v = e_2 from components and a Bartlett Gram factor ---

def invariant_statistics(x, v, field, jac_v):
    """The inner products the growth is a function of: rotation invariants of (x, v, G, DG v)."""
    def dot(p, q):
        return np.sum(p * q, axis=1)
    return {"<G,x>": dot(field, x), "<G,v>": dot(field, v), "|G|²": dot(field, field),
            "<DGv,x>": dot(jac_v, x), "<DGv,v>": dot(jac_v, v), "|DGv|²": dot(jac_v, jac_v),
            "<G,DGv>": dot(field, jac_v)}


def reduced_frame(d):
    n = 2 + min(d - 2, 3)
    x, v = np.zeros((SAMPLES, n)), np.zeros((SAMPLES, n))
    x[:, 0], v[:, 1] = 1.0, 1.0
    return x, v


def reduced_p_value(d, step, activation="relu"):
    """Smallest KS p-value between the projections sampler at a fixed orthonormal pair of R^d and
    ``step`` at e_1, e_2 of its reduced space, over the invariant statistics."""
    phi, dphi = ly.ACTIVATIONS[activation]
    args = (phi, dphi, M, SIGMA, SIGMA, 1 / np.sqrt(M), 1 / np.sqrt(d))
    x, v = orthonormal_pairs(np.random.default_rng(98), SAMPLES, d)
    a = invariant_statistics(x, v, *ly._projections_step(np.random.default_rng(3), x, v, *args))
    xr, vr = reduced_frame(d)
    b = invariant_statistics(xr, vr, *step(np.random.default_rng(4), xr, vr, *args))
    return min(stats.ks_2samp(a[k], b[k]).pvalue for k in a), len(a)


@pytest.mark.parametrize("d", [2, 3, 5, 9])
def test_reduced_step_has_the_invariants_law_of_the_projections_step(d):
    # d = 2: no orthogonal part; 3, 5: drawn as they are (k = 1, 3); 9: Bartlett (k = 7)
    p, k = reduced_p_value(d, ly._reduced_step)
    assert p > ALPHA / k


def wrong_bartlett_step(rng, x, v, phi, dphi, width, sigma_u, sigma_w, inv_root_m, inv_root_d):
    """Wrong on purpose: every Bartlett diagonal χ²_k (the off-diagonal rows then have one degree of
    freedom too many: |z'_⊥|² ~ χ²_{k+1})."""
    a, b = ly.hidden_draws(rng, x.shape[0], phi, dphi, width, sigma_u, inv_root_d)
    k = int(round(inv_root_d ** -2)) - 2
    along = rng.standard_normal((3, x.shape[0], 2))
    orthogonal = np.zeros((3, x.shape[0], 3))
    for i in range(3):
        orthogonal[i, :, i] = np.sqrt(rng.chisquare(k, x.shape[0]))
        orthogonal[i, :, :i] = rng.standard_normal((x.shape[0], i))
    vectors = np.concatenate([along, orthogonal], axis=2)
    return ly._field_and_jacobian(a, b, vectors[:2], sigma_w * vectors[2], 1 / np.sqrt(width))


def test_the_invariants_tests_reject_a_wrong_bartlett_factor():
    """Power: at d = 9 the planted χ²_{k+1} norms are rejected by the same tests at the same size."""
    p, k = reduced_p_value(9, wrong_bartlett_step)
    assert p < ALPHA / k


def test_reduced_draws_transcribe_the_wishart_moments():
    """E|z_⊥|² = k, E<z_⊥, z'_⊥> = 0, Var<z_⊥, z'_⊥> = k, E|b_⊥|² = σ² k (Wishart_3(k, I)), and the
    components along e_1, e_2 standard normal; k = 7, 200 000 draws, 6-standard-error bands (fixed seed)."""
    n, d, sigma = 200_000, 9, 0.7
    (z, zp), b_w = ly.reduced_draws(np.random.default_rng(5), n, d, sigma)
    k = d - 2
    zo, zpo, bo = z[:, 2:], zp[:, 2:], b_w[:, 2:]
    se = 6 / np.sqrt(n)
    assert np.mean(np.sum(zo * zo, 1)) == pytest.approx(k, abs=se * np.sqrt(2 * k))
    assert np.mean(np.sum(zpo * zpo, 1)) == pytest.approx(k, abs=se * np.sqrt(2 * k))
    assert np.mean(np.sum(bo * bo, 1)) == pytest.approx(sigma ** 2 * k, abs=se * sigma ** 2 * np.sqrt(2 * k))
    cross = np.sum(zo * zpo, 1)
    assert abs(cross.mean()) < se * np.sqrt(k) and np.var(cross) == pytest.approx(k, rel=0.05)
    assert abs(np.mean(z[:, :2])) < se and np.var(zp[:, :2]) == pytest.approx(1.0, rel=0.02)


@pytest.mark.parametrize("activation, d", [("relu", 2), ("silu", 3), ("relu", 5), ("tanh", 12)])
def test_the_reduced_estimates_agree_with_the_matrices_sampler(activation, d):
    """Same law of the log-growths: within 4 combined standard errors (false-failure rate 6e-5)."""
    kw = dict(width=16, dt=0.02, steps=150, chains=512)
    a = ly.simulate_top_lyapunov(activation, d, 0.1, 0.1, seed=13, sampler="matrices", **kw)
    b = ly.simulate_top_lyapunov(activation, d, 0.1, 0.1, seed=14, sampler="reduced", **kw)
    assert abs(a.estimate - b.estimate) < 4 * np.hypot(a.standard_error, b.standard_error)
    assert b.standard_error == pytest.approx(a.standard_error, rel=0.15)
