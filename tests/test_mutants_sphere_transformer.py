"""Paper B's discrete sphere transformer (Agazzi et al. 2026; docs/paper_b.md): the interaction
energy E_beta from its definition, the attention-scale options, the tangent projection, and the
validation of the model's sizes, variances and input shape (the layer map itself is transcribed in
tests/test_transcriptions_paper_b.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_limits.numeric.sphere.transformer import (SphereTransformer, attention_scale,
                                                           interaction_energy, layer_norm, project_tangent)


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
