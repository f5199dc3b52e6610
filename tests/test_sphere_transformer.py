"""Discrete sphere transformer (docs/theory.md §B.1) and its generated MLP-field kernels."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from transformer_limits.numeric.sphere.mlp_field import mlp_field_kernels
from transformer_limits.numeric.sphere.transformer import (
    MLPLayer,
    SphereTransformer,
    layer_norm,
    uniform_sphere,
)
from transformer_limits.symbolic.mlp_kernel import ACTIVATIONS, ZonalKernel
from transformer_limits.testing.strategies import sphere_points
import math
from transformer_limits.numeric.sphere.transformer import (SphereTransformer, attention_scale,
                                                           interaction_energy, layer_norm, project_tangent)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), d=st.integers(2, 6), attention=st.sampled_from(["attractive", "none", "repulsive"]),
       data=st.data())
def test_norms_stay_one(seed, d, attention, data):
    """From uniform tokens and from drawn sphere points (coincident tokens, coordinate axes)."""
    model = SphereTransformer(d, 16, 12, T=2.0, sigma_u=0.3, sigma_w=0.3, attention=attention)
    for X0 in (uniform_sphere(5, d, np.random.default_rng(seed)), data.draw(sphere_points(d=d, n=(1, 8)))):
        traj = model.run(X0, seed)
        assert np.allclose(np.linalg.norm(traj, axis=2), 1.0, atol=1e-12)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@settings(max_examples=10, deadline=None)
@given(drawn=sphere_points(d=4, n=(1, 7)))
def test_numba_kernels_equal_numpy_reference(activation, drawn):
    """On 7 uniform tokens and on drawn sphere points (coincident tokens, coordinate axes)."""
    rng = np.random.default_rng(3)
    X = uniform_sphere(7, 4, rng)
    U, b, W, bw = rng.standard_normal((33, 4)), rng.standard_normal(33), rng.standard_normal((4, 33)), rng.standard_normal(4)
    ref, fast = mlp_field_kernels(activation, "numpy"), mlp_field_kernels(activation, "numba")
    for tokens in (X, drawn):
        np.testing.assert_allclose(fast.mlp_field(tokens, U, b, W, bw), ref.mlp_field(tokens, U, b, W, bw), atol=1e-13)
        np.testing.assert_allclose(fast.features(tokens, U, b), ref.features(tokens, U, b), atol=1e-14)
        np.testing.assert_allclose(fast.kernel_matrix(tokens, 0.2, 0.1), ref.kernel_matrix(tokens, 0.2, 0.1),
                                   atol=1e-14)


def test_generated_relu_kernel_runs_in_numba_and_matches_closed_form():
    kern = mlp_field_kernels("relu", "numba")
    assert "max(0.0, pre)" in kern.source_path.read_text()
    X = uniform_sphere(6, 5, np.random.default_rng(1))
    K = kern.kernel_matrix(X, 0.1, 0.1)
    z = ZonalKernel("relu", 5, 0.1, 0.1)
    expected = np.array([[float(z.k(min(1.0, max(-1.0, t)))) for t in row] for row in X @ X.T])
    np.testing.assert_allclose(K, expected, atol=1e-14)
    assert np.all(np.linalg.eigvalsh(K) > -1e-12)


@settings(max_examples=15, deadline=None)
@given(sphere_points(d=5, n=(1, 6)))
def test_relu_kernel_matrix_matches_closed_form_on_drawn_points(X):
    """Coincident points (t = 1 after rounding, clipped), antipodes and axes included: the kernel
    matrix is k(x_i·x_j) and positive semi-definite."""
    K = mlp_field_kernels("relu", "numba").kernel_matrix(X, 0.1, 0.1)
    z = _relu_zonal()
    expected = np.array([[float(z.k(min(1.0, max(-1.0, t)))) for t in row] for row in X @ X.T])
    np.testing.assert_allclose(K, expected, atol=1e-14)
    assert np.all(np.linalg.eigvalsh(K) > -1e-12)


_ZONAL = {}


def _relu_zonal():
    """ZonalKernel("relu", 5, 0.1, 0.1), built once (SymPy)."""
    if "relu" not in _ZONAL:
        _ZONAL["relu"] = ZonalKernel("relu", 5, 0.1, 0.1)
    return _ZONAL["relu"]


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_field_covariance_matches_kernel(activation):
    # Monte Carlo over 20000 MLP draws (m = 8); per entry the estimator's SE is computed from the
    # samples and we require |err| < 4.5 SE: with 6 entries, false-failure rate < 6·7e-6 (normal approx.)
    rng = np.random.default_rng(11)
    d, m, n = 4, 8, 20000
    X = uniform_sphere(3, d, rng)
    model = SphereTransformer(d, m, 1, sigma_u=0.4, sigma_w=0.3, activation=activation, attention="none")
    samples = np.empty((n, 3))
    for k in range(n):
        samples[k] = model.mlp_field(X, model.sample_layer(rng))[:, 0]
    K = model.kernels.kernel_matrix(X, 0.4, 0.3)
    for i in range(3):
        for j in range(i, 3):
            prod = samples[:, i] * samples[:, j]
            assert abs(prod.mean() - K[i, j]) < 4.5 * prod.std(ddof=1) / np.sqrt(n)


def test_ito_drift_identity_one_step_mean():
    # E[<X', x>] − 1 = −Δt k(1)(d−1)/2 + O(Δt²): 200000 one-step draws, Δt = 0.01; |err| < 4.5 SE +
    # a 10% allowance for the O(Δt) relative bias; false-failure rate < 1e-5 (normal approx.)
    d, dt, n = 5, 0.01, 200000
    rng = np.random.default_rng(5)
    x = layer_norm(rng.standard_normal(d))
    U = rng.standard_normal((n, 16, d))
    pre = np.einsum("nmd,d->nm", U, x) / np.sqrt(d) + 0.2 * rng.standard_normal((n, 16))
    G = np.einsum("ndm,nm->nd", rng.standard_normal((n, d, 16)), np.maximum(pre, 0)) / 4 + 0.2 * rng.standard_normal((n, d))
    radial = layer_norm(x + np.sqrt(dt) * G) @ x - 1.0
    k1 = float(ZonalKernel("relu", d, 0.2, 0.2).k1.value)
    predicted = -dt * k1 * (d - 1) / 2
    se = radial.std(ddof=1) / np.sqrt(n)
    assert abs(radial.mean() - predicted) < 4.5 * se + 0.1 * abs(predicted)
    # the wrong sign of the drift is rejected
    assert abs(radial.mean() + predicted) > 4.5 * se + 0.1 * abs(predicted)


def test_layer_uses_alpha_scalings():
    model = SphereTransformer(3, 4, 16, T=2.0)
    assert model.alpha_1 == pytest.approx(0.125) and model.alpha_2 == pytest.approx(np.sqrt(0.125))
    X = uniform_sphere(4, 3, np.random.default_rng(0))
    layer = MLPLayer(np.zeros((4, 3)), np.zeros(4), np.zeros((3, 4)), np.ones(3))
    expected = layer_norm(model.attention_step(X) + model.alpha_2 * np.ones(3))
    np.testing.assert_allclose(model.layer(X, layer), expected)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="attention"):
        SphereTransformer(3, 4, 4, attention="sideways")
    with pytest.raises(ValueError, match="backend 'blas' is not supported by the MLP-field kernels"):
        SphereTransformer(3, 4, 4, backend="blas")
    with pytest.raises(ValueError, match="d must be"):
        SphereTransformer(1, 4, 4)

# ------------------------------------------------------------------------------------------------
# Mutation-round tests (were tests/test_mutants_sphere_transformer.py): properties the mutation runs showed were not
# pinned down.
# ------------------------------------------------------------------------------------------------


def _energy_loop(X, beta):
    """E_beta(mu) = 1/2 sum_{i,j} (e^beta - e^{beta <x_i, x_j>}) / N^2 for mu = (1/N) sum_i delta_{x_i}."""
    n = len(X)
    return 0.5 * sum(math.exp(beta) - math.exp(beta * float(X[i] @ X[j])) for i in range(n) for j in range(n)) / n**2


@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_interaction_energy_matches_its_double_integral(beta):
    """Random points (many obtuse pairs, <x_i, x_j> < 0) and the antipodal pair, where
    E_beta = (e^beta - e^-beta)/4 = sinh(beta)/2; E_beta = 0 exactly at a synchronised state."""
    X = layer_norm(np.random.default_rng(0).normal(size=(7, 3)))
    assert np.sum(X @ X.T < 0) > 10
    assert interaction_energy(X, beta) == pytest.approx(_energy_loop(X, beta), rel=1e-13)
    antipodal = np.array([[0.0, 1.0, 0.0], [0.0, -1.0, 0.0]])
    assert interaction_energy(antipodal, beta) == pytest.approx(math.sinh(beta) / 2, rel=1e-14)
    assert interaction_energy(np.tile(X[:1], (5, 1)), beta) == pytest.approx(0.0, abs=1e-13)


def test_attention_scale_options():
    assert (attention_scale("attractive"), attention_scale("none"), attention_scale("repulsive")) == (1.0, 0.0, -1.0)
    assert attention_scale(0.25) == 0.25
    with pytest.raises(ValueError, match="attention"):
        attention_scale("sideways")


@pytest.mark.parametrize("attention,s", [("none", 0.0), ("repulsive", -1.0)])
def test_attention_field_is_scaled_attention(attention, s):
    """s Attn_X(x_i): zero for 'none', minus the attractive field for 'repulsive'."""
    X = layer_norm(np.random.default_rng(1).normal(size=(5, 3)))
    ref = SphereTransformer(3, 4, 2, attention="attractive", beta=1.5).attention_field(X)
    assert np.abs(ref).max() > 0.1
    got = SphereTransformer(3, 4, 2, attention=attention, beta=1.5).attention_field(X)
    np.testing.assert_allclose(got, s * ref, rtol=1e-14, atol=1e-15)


def test_tangent_projection_is_orthogonal_onto_the_tangent_space():
    """P_x v = v - <v, x> x: orthogonal to x, idempotent, and the identity on tangent vectors."""
    rng = np.random.default_rng(2)
    X = layer_norm(rng.normal(size=(6, 4)))
    V = rng.normal(size=(6, 4))
    P = project_tangent(X, V)
    np.testing.assert_allclose(np.sum(P * X, axis=1), 0.0, atol=1e-14)
    np.testing.assert_allclose(project_tangent(X, P), P, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(P, [v - (v @ x) * x for x, v in zip(X, V)], rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("kw,name", [({"m": 0}, "m"), ({"L": 0}, "L"), ({"m": 2.5}, "m"), ({"L": -3}, "L"),
                                     ({"d": 1}, "d")])
def test_sizes_must_be_positive_integers(kw, name):
    args = {"d": 3, "m": 4, "L": 2} | kw
    with pytest.raises(ValueError, match=f"^{name} must be"):
        SphereTransformer(**args)


@pytest.mark.parametrize("kw", [{"sigma_u": -0.1}, {"sigma_w": -0.1}, {"sigma_w": -0.5}])
def test_bias_standard_deviations_must_be_non_negative(kw):
    with pytest.raises(ValueError, match="sigma_u and sigma_w"):
        SphereTransformer(3, 4, 2, **kw)


def test_run_rejects_tokens_of_the_wrong_dimension():
    model = SphereTransformer(3, 4, 2)
    with pytest.raises(ValueError, match="X0"):
        model.run(np.ones((5, 4)))


def test_run_with_the_default_seed_is_reproducible_and_stays_on_the_sphere():
    model = SphereTransformer(3, 4, 3, sigma_u=0.2, sigma_w=0.1)
    X0 = np.random.default_rng(3).normal(size=(5, 3))
    traj = model.run(X0)
    assert traj.shape == (4, 5, 3)
    np.testing.assert_allclose(np.linalg.norm(traj, axis=2), 1.0, rtol=1e-14)
    np.testing.assert_array_equal(traj, model.run(X0, seed=0))
