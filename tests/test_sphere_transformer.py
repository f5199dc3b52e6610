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


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), d=st.integers(2, 6), attention=st.sampled_from(["attractive", "none", "repulsive"]))
def test_norms_stay_one(seed, d, attention):
    model = SphereTransformer(d, 16, 12, T=2.0, sigma_u=0.3, sigma_w=0.3, attention=attention)
    traj = model.run(uniform_sphere(5, d, np.random.default_rng(seed)), seed)
    assert np.allclose(np.linalg.norm(traj, axis=2), 1.0, atol=1e-12)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_numba_kernels_equal_numpy_reference(activation):
    rng = np.random.default_rng(3)
    X = uniform_sphere(7, 4, rng)
    U, b, W, bw = rng.standard_normal((33, 4)), rng.standard_normal(33), rng.standard_normal((4, 33)), rng.standard_normal(4)
    ref, fast = mlp_field_kernels(activation, "numpy"), mlp_field_kernels(activation, "numba")
    np.testing.assert_allclose(fast.mlp_field(X, U, b, W, bw), ref.mlp_field(X, U, b, W, bw), atol=1e-13)
    np.testing.assert_allclose(fast.features(X, U, b), ref.features(X, U, b), atol=1e-14)
    np.testing.assert_allclose(fast.kernel_matrix(X, 0.2, 0.1), ref.kernel_matrix(X, 0.2, 0.1), atol=1e-14)


def test_generated_relu_kernel_runs_in_numba_and_matches_closed_form():
    kern = mlp_field_kernels("relu", "numba")
    assert "max(0.0, pre)" in kern.source_path.read_text()
    X = uniform_sphere(6, 5, np.random.default_rng(1))
    K = kern.kernel_matrix(X, 0.1, 0.1)
    z = ZonalKernel("relu", 5, 0.1, 0.1)
    expected = np.array([[float(z.k(min(1.0, max(-1.0, t)))) for t in row] for row in X @ X.T])
    np.testing.assert_allclose(K, expected, atol=1e-14)
    assert np.all(np.linalg.eigvalsh(K) > -1e-12)


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
