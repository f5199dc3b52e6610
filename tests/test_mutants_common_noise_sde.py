"""Paper B's common-noise SDE (Agazzi et al. 2026; docs/paper_b.md) pinned from the mathematics:
the default model (ReLU features, no biases: k(1) = 1/(2d)), several particle systems driven by one
random-feature Brownian field (positions at the requested steps only), the coupling of the paper's
proof between the discrete model and the SDE (the discrete layer's MLP is the sum of the SDE's
Brownian increments over the layer) with its sup-error over the fine grid, and the default
Lyapunov estimator against the published exponent.

The references are plain loops written from the formulas:

    dW(x)   = (1/sqrt(m)) sum_k relu(<u_k, x>/sqrt(d) + b_k) dB^k + sigma_W dB^0,
    SDE step: x <- LN(x + h (s P_x Attn(x) - c x) + P_x dW(x)),    c = k(1)(d - 1)/2,
    layer:    y = LN(x + dt s Attn(x)),   x' = LN(y + dW_layer(y)),  dW_layer = sum of the layer's dB.

ReLU's k(1) = E[relu(s Z)^2] + sigma_W^2 = s^2/2 + sigma_W^2, s^2 = 1/d + sigma_U^2 (half the
second moment of a centred Gaussian).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_limits.numeric.sphere.common_noise_sde import (CommonNoiseSDE, coupled_discrete_and_sde,
                                                         sde_top_lyapunov)
from transformer_limits.numeric.sphere.transformer import SphereTransformer

D, M, SU, SW = 3, 4, 0.3, 0.4


def unit(v):
    return v / math.sqrt(float(v @ v))


def tangent(x, v):
    return v - float(v @ x) * x


def attention_loop(X, beta, s):
    """s Attn_X(x_i) = s sum_j softmax_j(beta <x_i, x_j>) x_j (default Q = K = sqrt(beta) I, V = I)."""
    out = np.zeros_like(X)
    for i in range(len(X)):
        w = [math.exp(beta * float(X[i] @ X[j])) for j in range(len(X))]
        out[i] = s * sum(wj * X[j] for wj, j in zip(w, range(len(X)))) / sum(w)
    return out


def field_loop(x, U, b_U, dB, sigma_w):
    m, d = U.shape
    return sum(max(float(U[k] @ x) / math.sqrt(d) + b_U[k], 0.0) * dB[k] for k in range(m)) / math.sqrt(m) \
        + sigma_w * dB[m]


def k1_relu(d, sigma_u, sigma_w):
    return (1.0 / d + sigma_u**2) / 2 + sigma_w**2


def sde_step_loop(X, h, U, b_U, dB, *, beta, s, d, sigma_u, sigma_w):
    A = attention_loop(X, beta, s)
    c = k1_relu(d, sigma_u, sigma_w) * (d - 1) / 2
    out = []
    for i in range(len(X)):
        xt = X[i] + h * (tangent(X[i], A[i]) - c * X[i]) + tangent(X[i], field_loop(X[i], U, b_U, dB, sigma_w))
        out.append(unit(xt))
    return np.array(out)


def _tokens(seed, n, d=D):
    X = np.random.default_rng(seed).normal(size=(n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


# ============================================================================ the default model


def test_default_noise_has_no_biases_and_relu_variance_one_over_2d():
    """Defaults: ReLU features without biases (sigma_U = sigma_W = 0), so k(1) = 1/(2d) and the Itô
    coefficient c = k(1)(d - 1)/2 = (d - 1)/(4d)."""
    for d in (3, 5):
        sde = CommonNoiseSDE(d)
        assert (sde.activation, sde.sigma_u, sde.sigma_w) == ("relu", 0.0, 0.0)
        assert sde.k1 == pytest.approx(1 / (2 * d), rel=1e-14)
        assert sde.ito_coefficient == pytest.approx((d - 1) / (4 * d), rel=1e-14)
    with pytest.raises(ValueError, match="sigma_u and sigma_w"):
        CommonNoiseSDE(3, sigma_w=-0.1)


# ============================================================================ systems under common noise


@pytest.mark.parametrize("eval_steps", [None, [1, 3], [0, 4]])
def test_systems_share_one_noise_and_report_the_requested_steps(eval_steps):
    """Per step n: U, b_U (sample_features), then dB = sqrt(h) (m+1, d) standard normals, the same
    field for every system; attention acts within each system.  The output holds the states after
    the steps in eval_steps (all n = 0..n_steps when None), in increasing order."""
    sde = CommonNoiseSDE(D, sigma_u=SU, sigma_w=SW, attention="repulsive", beta=1.3)
    systems = [_tokens(1, 4), _tokens(2, 2)]
    T, n_steps = 0.8, 4
    out = sde.simulate_systems(systems, T, n_steps, M, seed=5, eval_steps=eval_steps)
    rng, h = np.random.default_rng(5), T / n_steps
    states = [[X] for X in systems]
    for _ in range(n_steps):
        U, b_U = rng.standard_normal((M, D)), SU * rng.standard_normal(M)
        dB = math.sqrt(h) * rng.standard_normal((M + 1, D))
        for st in states:
            st.append(sde_step_loop(st[-1], h, U, b_U, dB, beta=1.3, s=-1.0, d=D, sigma_u=SU, sigma_w=SW))
    wanted = range(n_steps + 1) if eval_steps is None else eval_steps
    assert len(out) == 2
    for got, st in zip(out, states):
        assert got.shape == (len(wanted), len(st[0]), D)
        np.testing.assert_allclose(got, np.stack([st[n] for n in wanted]), rtol=1e-10, atol=1e-12)


# ============================================================================ the coupling of the proof


def test_coupling_feeds_the_layer_the_sum_of_the_sde_increments():
    """Layer l: features (U, b_U); substeps s = 1..S with dB_s = sqrt(h) N(0, I) (m+1, d), h = dt/S;
    the discrete MLP step adds dW_layer(y) = sum_s dW_s(y) (its W = sum_s dB_s/sqrt(dt) is N(0, 1),
    so sqrt(dt) G(y) = W_{t_{l+1}}(y) - W_{t_l}(y)).  sup_err = max over fine times t of
    (1/N) sum_i |X^i_{floor(Lt/T)} - Xbar^i_t|^2 (N = 5 != d = 3, so a sum over the wrong axis shows)."""
    L, S, beta, T = 3, 3, 1.2, 0.9
    model = SphereTransformer(D, M, L, T=T, sigma_u=SU, sigma_w=SW, attention="attractive", beta=beta)
    sde = CommonNoiseSDE.from_model(model)
    X0 = _tokens(3, 5)
    disc, grid, sup_err = coupled_discrete_and_sde(model, sde, X0, S, seed=7)

    rng, dt = np.random.default_rng(7), T / L
    h = dt / S
    X, Xbar, errs = X0, X0, []
    ref_disc, ref_grid = [X0], [X0]
    for _ in range(L):
        U, b_U = rng.standard_normal((M, D)), SU * rng.standard_normal(M)
        dB = math.sqrt(h) * rng.standard_normal((S, M + 1, D))
        for s in range(S):
            Xbar = sde_step_loop(Xbar, h, U, b_U, dB[s], beta=beta, s=1.0, d=D, sigma_u=SU, sigma_w=SW)
            if s < S - 1:  # fine time inside the layer: the discrete model is still at X_l
                errs.append(np.mean([float((X[i] - Xbar[i]) @ (X[i] - Xbar[i])) for i in range(len(X))]))
        A = attention_loop(X, beta, 1.0)
        Y = np.array([unit(X[i] + dt * A[i]) for i in range(len(X))])
        X = np.array([unit(y + field_loop(y, U, b_U, dB.sum(axis=0), SW)) for y in Y])
        errs.append(np.mean([float((X[i] - Xbar[i]) @ (X[i] - Xbar[i])) for i in range(len(X))]))
        ref_disc.append(X)
        ref_grid.append(Xbar)
    np.testing.assert_allclose(disc, np.stack(ref_disc), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grid, np.stack(ref_grid), rtol=1e-10, atol=1e-12)
    assert sup_err == pytest.approx(max(errs), rel=1e-9)


# ============================================================================ Lyapunov exponent


def test_default_lyapunov_estimator_reproduces_the_published_exponent():
    """With its default step (dt = 0.01, 400 steps, 256 chains) the tangent-flow estimate is within
    4 standard errors + 0.02 (O(dt) bias allowance) of lambda_1 = -0.13, the value published for ReLU,
    d = 5, sigma_U = sigma_W = 0.1 (Agazzi et al. 2026, arXiv:2604.26898, Appendix B); normal
    approximation: false-failure rate ~ 6e-5."""
    sde = CommonNoiseSDE(5, "relu", 0.1, 0.1, attention="none")
    est = sde_top_lyapunov(sde, seed=2)
    assert (est.dt, est.steps, est.chains) == (0.01, 400, 256)
    assert abs(est.estimate + 0.13) < 4 * est.standard_error + 0.02, (est.estimate, est.standard_error)
