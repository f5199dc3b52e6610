"""Paper A's mean-field limit pinned from the mathematics: the depth-time parametrisation of nu_t,
the affine continuous law, sampling the discrete heads, classical RK4 (tableau, trajectory,
Richardson constant 15 = 2^4 - 1 for step doubling, order 4 of the adjoint), and AdamW vs
blockwise AdamW on the node parameters.

Written from the definitions in the module docstring and docs/paper_a_model.md (Gibson-Reisinger
2026): theta_a(t) = sum_n phi_n(t) theta_{n,a} with hat functions on t_n = n/(n_nodes - 1);
theta(t, xi) = M(t) + sum_k xi_k D_k(t); Xavier-uniform entries U[-a, a], a = sqrt(6/(fan_in +
fan_out)) (Glorot & Bengio 2010, eq. 16); AdamW as in Loshchilov & Hutter (2019, Alg. 2) with
torch.optim.AdamW's bias corrections.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_limits.numeric.attention.mean_field import AffineHeadLaw, HeadLaw, MeanFieldLimit, train_adamw
from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map

D, DK, DV, N = 3, 2, 4, 6  # the numba kernels for these shapes are shared with test_mean_field
NAMES = ("Q", "K", "V", "O")


def _law(seed=1, n_nodes=3, atoms=4):
    return HeadLaw.random(n_nodes, atoms, D, DK, DV, seed=seed, gain=1.5)


def _interp(params, t):
    """theta(t) = (1 - lam) theta_n + lam theta_{n+1} for t in [t_n, t_{n+1}], t_n = n/(n_nodes-1)."""
    n_nodes = params.shape[0]
    if n_nodes == 1:
        return params[0]
    pos = t * (n_nodes - 1)
    n = min(int(math.floor(pos)), n_nodes - 2)
    lam = pos - n
    return (1 - lam) * params[n] + lam * params[n + 1]


# ============================================================================ the law nu_t


def test_nodes_are_uniform_on_unit_depth_time_and_interpolation_is_piecewise_linear():
    law = _law(n_nodes=4)
    np.testing.assert_allclose(law.nodes, [0.0, 1 / 3, 2 / 3, 1.0], rtol=0, atol=1e-15)
    for n, t in enumerate(law.nodes):  # hat functions are a Lagrange basis at the nodes
        np.testing.assert_allclose(law.hat(t), np.eye(4)[n], atol=1e-15)
        for k in NAMES:
            np.testing.assert_allclose(law.at(t)[k], law.params[k][n], rtol=1e-14, atol=1e-15)
    for t in (0.1, 0.5, 0.8, 0.999):
        for k in NAMES:
            np.testing.assert_allclose(law.at(t)[k], _interp(law.params[k], t), rtol=1e-13, atol=1e-15)


def test_random_law_is_xavier_uniform_with_unit_gain_by_default():
    """Default gain 1: every entry of a (rows x cols) matrix in [-a, a], a = sqrt(6/(rows+cols)),
    and the bound is attained up to 3% (each of >= 600 uniform entries misses the top 3% of [-a, a]
    on both sides with probability 0.97, so a false failure has probability < 0.97^600 < 1e-7)."""
    law = HeadLaw.random(3, 50, D, DK, DV, seed=3)
    shapes = {"Q": (DK, D), "K": (DK, D), "V": (DV, D), "O": (D, DV)}
    for k, (rows, cols) in shapes.items():
        a = math.sqrt(6.0 / (rows + cols))
        x = np.abs(law.params[k])
        assert x.max() <= a and x.max() > 0.97 * a, (k, x.max(), a)
    np.testing.assert_allclose(law.weights, np.full(50, 1 / 50), rtol=1e-15)


def test_affine_law_atoms_are_mean_plus_latent_combination_of_directions():
    """theta(t_n, xi_a) = M_n + sum_k xi_{a,k} D_{n,k}, with xi not symmetric under xi -> -xi."""
    cont = AffineHeadLaw.random(3, 2, D, DK, DV, seed=4, spread=0.6)
    xi = np.array([[0.9, -0.2], [0.3, 0.7], [-0.5, -0.4]])
    w = np.array([0.5, 0.3, 0.2])
    law = cont.atoms(xi, w)
    for k in NAMES:
        for n in range(3):
            for a in range(3):
                expected = cont.mean[k][n] + sum(xi[a, j] * cont.directions[k][n, j] for j in range(2))
                np.testing.assert_allclose(law.params[k][n, a], expected, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(law.weights, w)


def test_discretise_exact_takes_the_law_at_layer_times_r_over_L():
    law = _law(n_nodes=3)
    params, w = law.discretise(5)  # r/L = 0, .2, .4, .6, .8: mostly between nodes
    np.testing.assert_allclose(w, law.weights)
    for k in NAMES:
        assert params[k].shape[:2] == (5, law.n_atoms)
        for r in range(5):
            np.testing.assert_allclose(params[k][r], _interp(law.params[k], r / 5), rtol=1e-13, atol=1e-15)


def test_discretise_iid_draws_atoms_with_the_law_weights_reproducibly():
    """iid mode: every head of layer r is one atom theta_a(r/L), a ~ w i.i.d.; the default seed is
    reproducible.  Frequencies over L*H = 4000 draws within 5 binomial standard errors of w
    (false-failure rate < 3e-6 per atom)."""
    w = np.array([0.5, 0.3, 0.15, 0.05])
    law = HeadLaw.random(2, 4, D, DK, DV, seed=5, weights=w)
    L, H = 8, 500
    params, none = law.discretise(L, H, mode="iid")
    assert none is None
    again, _ = law.discretise(L, H, mode="iid", seed=0)
    for k in NAMES:
        np.testing.assert_array_equal(params[k], again[k])
    counts = np.zeros(4)
    for r in range(L):
        atoms = law.at(r / L)["Q"]  # (A, d_k, d)
        dist = np.abs(params["Q"][r][:, None] - atoms[None]).max(axis=(2, 3))  # (H, A)
        assert np.all(dist.min(axis=1) < 1e-14)
        counts += np.bincount(dist.argmin(axis=1), minlength=4)
    freq = counts / (L * H)
    assert np.all(np.abs(freq - w) < 5 * np.sqrt(w * (1 - w) / (L * H))), freq


@pytest.mark.parametrize("bad", [0, -2, 2.5])
def test_discretise_rejects_a_depth_that_is_not_a_positive_integer(bad):
    with pytest.raises(ValueError, match="L must be a positive integer"):
        _law().discretise(bad)


# ============================================================================ RK4


def _rk4_loop(mf, law, X0, steps):
    """Classical RK4 (Butcher tableau c = (0, 1/2, 1/2, 1), b = (1, 2, 2, 1)/6) on [0, 1]."""
    h, X, out = 1.0 / steps, np.array(X0, dtype=float), [np.array(X0, dtype=float)]
    for s in range(steps):
        t = s * h
        k1 = mf.field(law, t, X)
        k2 = mf.field(law, t + h / 2, X + h / 2 * k1)
        k3 = mf.field(law, t + h / 2, X + h / 2 * k2)
        k4 = mf.field(law, t + h, X + h * k3)
        X = X + h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
        out.append(X)
    return np.stack(out)


@pytest.mark.parametrize("n_nodes,steps", [(2, 1), (3, 4)])
def test_forward_is_classical_rk4_with_its_whole_trajectory(n_nodes, steps):
    """One step on a single segment is allowed (steps = 1 with two nodes); trajectory[0] = X_0 and
    trajectory[s] is the state after s steps."""
    law = _law(seed=2, n_nodes=n_nodes)
    X0 = sample_tokens(N, D, domain="ball", seed=102)
    mf = MeanFieldLimit(D, DK, DV)
    res = mf.forward(X0, law, steps)
    ref = _rk4_loop(mf, law, X0, steps)
    assert res.steps == steps and res.trajectory.shape == (steps + 1, N, D)
    np.testing.assert_allclose(res.trajectory, ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(res.final, ref[-1], rtol=1e-12, atol=1e-14)


def test_step_doubling_error_estimate_is_sharp():
    """Richardson for order 4: X_h - X_{h/2} ~ (2^4 - 1) C (h/2)^4, so |X_h - X_{h/2}|/15 estimates
    the error of the finer solution; in the asymptotic regime (8 -> 16 steps) it is within a factor
    1.5 of the true error (measured 0.97; any other refinement ratio or constant is off by >= 3x)."""
    law = _law(seed=1)
    X0 = sample_tokens(N, D, domain="ball", seed=101)
    mf = MeanFieldLimit(D, DK, DV)
    ref = mf.forward(X0, law, 256).final
    res = mf.forward_checked(X0, law, 8)
    assert res.steps == 16
    true = np.abs(res.final - ref).max()
    assert 1 / 1.5 < res.error_estimate / true < 1.5, (res.error_estimate, true)


def test_adjoint_rk4_has_order_four():
    """P_0 and the node gradients from the backward RK4: error ratios between 8 and 16 steps near
    2^4 = 16 (measured 16.4 and 18.2) against 64 steps; a wrong stage coefficient drops the order."""
    law = _law(seed=1)
    X0 = sample_tokens(N, D, domain="ball", seed=101)
    mf = MeanFieldLimit(D, DK, DV)
    X1 = mf.forward(X0, law, 64).final
    P1 = N * SquaredErrorLoss(target_map(X0, seed=201)).grad(X1)
    _, P_ref, G_ref = mf.adjoint(X1, P1, law, 64)
    errs = []
    for steps in (8, 16):
        _, P0, G = mf.adjoint(X1, P1, law, steps)
        errs.append((np.abs(P0 - P_ref).max(), max(np.abs(G[k] - G_ref[k]).max() for k in G)))
    for coarse, fine in zip(*errs):
        assert 11 < coarse / fine < 24, errs


# ============================================================================ AdamW on the nodes


@pytest.mark.parametrize("blockwise", [False, True])
def test_train_adamw_steps_are_adamw_or_blockwise_adamw(blockwise):
    """Constant gradient g, two steps: m_hat = g and v_hat = g^2 (coordinatewise) or ||g^B||_F^2 per
    (node, atom) block (blockwise, 'sum' normalisation), so each step is
    theta <- theta (1 - lr wd) - lr g / (sqrt(v_hat) + eps).  Gradient entries of different sizes
    inside each block make the two differ."""
    law = _law(seed=7, n_nodes=2, atoms=3)
    rng = np.random.default_rng(8)
    g = {k: rng.normal(size=v.shape) * rng.uniform(0.1, 3.0, size=v.shape) for k, v in law.params.items()}
    lr, wd, eps = 0.05, 0.1, 1e-8
    hist = train_adamw(lambda nu: (1.0, g), law, 2, lr=lr, eps=eps, weight_decay=wd, blockwise=blockwise)
    assert len(hist.laws) == 3 and hist.losses == [1.0, 1.0]
    for k in NAMES:
        if blockwise:
            denom = np.sqrt(np.sum(g[k] ** 2, axis=(2, 3), keepdims=True)) + eps
        else:
            denom = np.abs(g[k]) + eps
        theta = law.params[k]
        for step in (1, 2):
            theta = theta * (1 - lr * wd) - lr * g[k] / denom
            np.testing.assert_allclose(hist.laws[step].params[k], theta, rtol=1e-12, atol=1e-14)
