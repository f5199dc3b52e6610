"""Sharpness of the derived bounds: explicit or adversarial inputs attain or approach each bound, so
a looser formula (a spare factor 2, sqrt(|B|) where none is due, |B| instead of sqrt(|B|), ...) fails.

Validity is tested elsewhere (tests/test_adamw.py, tests/test_adamw_box.py,
tests/test_attention_bounds.py); here every bound must also be *reached*:

* AdamW box (derivation ``adamw-box``, ``numeric.adamw``): the per-step constant C_beta(1) = 1 is
  attained by every first step, the sharp constant C~_beta(k) by the Cauchy–Schwarz sequence; where
  C_beta(k) = 1 for all k (beta1 = 0, beta2 -> 0) a constant-sign gradient drives |theta_k| to the
  radius path R_k at every step and to within 1% of max(R_0, C_beta/lambda) — coordinatewise,
  blockwise with the sum normalisation, blockwise with the mean normalisation (factor sqrt(|B|),
  blocks of different sizes) and coordinatewise in Frobenius norm (factor sqrt(|B|)).  For general
  betas the triangle-inequality constant C_beta is loose by exactly C_beta/C~_beta (documented in
  docs/adamw.md; 4.37 for torch's defaults): nothing attains more than C~_beta.
* Attention bounds (derivation ``attention-bounds``): with V = Q^T K = R_theta^2 I the attention
  and Jacobian bounds are attained exactly, the kernel and Lions-derivative bounds to a ratio > 0.999.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import transformer_limits as tl
from transformer_limits.numeric.attention import reference as ref
from transformer_limits.numeric.optim.adamw import (AdamW, BlockwiseAdamW, adamw_box_radius,
                                              adamw_box_radius_path, adamw_update_bound,
                                              adamw_update_bound_sup)

# ============================================================================================
# AdamW box

BETAS_C1 = (0.0, 1e-12)  # C_beta(k) = sqrt(1 - beta2^k)/sqrt(1 - beta2) = 1 + O(1e-12) for all k
LR, WD, STEPS = 0.01, 0.5, 2000  # (1 - lr*wd)^STEPS = e^-10: the path reaches its fixed point


def _drive(opt, direction, steps):
    """Run ``opt`` with the constant gradient ``direction`` (a list of arrays); all iterates."""
    path = [[p.copy() for p in opt.params]]
    for _ in range(steps):
        path.append([p.copy() for p in opt.step(direction)])
    return path


def test_constant_sign_gradient_attains_the_coordinatewise_radius_path():
    """theta_0 = -R_0 and g_k = +1: theta_k = (1 - eta lambda) theta_{k-1} - eta, |theta_k| = R_k."""
    r0 = 0.2
    assert adamw_update_bound(*BETAS_C1, STEPS) == pytest.approx(1.0, abs=1e-11)
    opt = AdamW([np.full(3, -r0)], lr=LR, betas=BETAS_C1, eps=0.0, weight_decay=WD)
    path = np.array([p[0] for p in _drive(opt, [np.array([1.0, 7.0, 1e-3])], STEPS)])
    radius = adamw_box_radius_path(r0, LR, WD, *BETAS_C1, STEPS)
    np.testing.assert_allclose(np.abs(path).max(axis=1), radius, rtol=1e-9)
    uniform = adamw_box_radius(r0, LR, WD, *BETAS_C1)  # max(R_0, C_beta/lambda) = 2
    assert np.abs(path[-1]).min() >= 0.99 * uniform
    assert np.abs(path).max() <= uniform * (1 + 1e-12)


def test_constant_direction_attains_the_blockwise_radii_sum_and_mean():
    """Blocks of 12, 5 and 3 entries, each driven by a fixed direction G^B: the sum normalisation
    reaches Frobenius radius C/lambda in every block, the mean normalisation sqrt(|B|) C/lambda (so a
    radius without sqrt(|B|), or with the wrong block size, fails)."""
    rng = np.random.default_rng(0)
    shapes = [(3, 4), (5,), (3, 1)]
    for normalize in ("sum", "mean"):
        opt = BlockwiseAdamW([np.zeros(s) for s in shapes], lr=LR, betas=BETAS_C1, eps=0.0,
                             weight_decay=WD, normalize=normalize)
        last = _drive(opt, [rng.normal(size=s) for s in shapes], STEPS)[-1]
        for p, shape in zip(last, shapes):
            size = int(np.prod(shape))
            radius = adamw_box_radius(0.0, LR, WD, *BETAS_C1, norm="blockwise", normalize=normalize,
                                      block_size=size)
            assert radius == pytest.approx((1.0 if normalize == "sum" else math.sqrt(size)) / WD, rel=1e-9)
            assert 0.99 * radius <= np.linalg.norm(p) <= radius * (1 + 1e-12), (normalize, shape)


def test_sign_pattern_attains_the_coordinatewise_frobenius_growth():
    """Coordinatewise AdamW with a rank-one sign pattern moves every entry by the same amount, so the
    Frobenius norm of a d x d block reaches sqrt(|B|) R_theta (dimension-dependent, as derived)."""
    d = 6
    u = np.sign(np.random.default_rng(1).normal(size=d))
    opt = AdamW([np.zeros((d, d))], lr=LR, betas=BETAS_C1, eps=0.0, weight_decay=WD)
    (last,) = _drive(opt, [np.outer(u, u) * 3.0], STEPS)[-1]
    radius = adamw_box_radius(0.0, LR, WD, *BETAS_C1)
    values = tl.derivation("adamw-box", beta1=BETAS_C1[0], beta2=BETAS_C1[1], lr=LR, weight_decay=WD,
                           R0=0.0, steps=STEPS, entries=d * d).values
    assert values["frobenius_growth_factor"] == d
    assert np.linalg.norm(last) >= 0.99 * d * radius
    assert np.linalg.norm(last) <= values["R_theta_coordinatewise_frobenius"] * (1 + 1e-9)


@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.9, 0.95), (0.5, 0.6)])
def test_first_step_attains_C_beta_1_for_any_gradient(betas):
    """C_beta(1) = 1: with eps = 0 the first Adam step moves every coordinate by exactly eta (and
    every block by eta in Frobenius norm with the sum normalisation, eta sqrt(|B|) with the mean)."""
    rng = np.random.default_rng(2)
    g = [rng.normal(size=(4, 3)) * 10.0 ** rng.uniform(-5, 5), rng.normal(size=7)]
    (first,) = [AdamW([np.zeros((4, 3)), np.zeros(7)], lr=0.1, betas=betas, eps=0.0, weight_decay=0.0).step(g)]
    for p in first:
        np.testing.assert_allclose(np.abs(p), 0.1, rtol=1e-15)
    for normalize, factor in (("sum", lambda n: 1.0), ("mean", math.sqrt)):
        opt = BlockwiseAdamW([np.zeros((4, 3)), np.zeros(7)], lr=0.1, betas=betas, eps=0.0,
                             weight_decay=0.0, normalize=normalize)
        for p, n in zip(opt.step(g), (12, 7)):
            assert np.linalg.norm(p) == pytest.approx(0.1 * factor(n), rel=1e-14)


@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.9, 0.95), (0.5, 0.6)])
def test_sharp_constant_attained_and_nothing_exceeds_it(betas):
    """The sharp C~_beta(k) is attained (Cauchy–Schwarz sequence g_{k-j} = (beta1/beta2)^j, run through
    AdamW with eps = 0) and 2000 random sequences (any signs, scales over 6 decades) never exceed it;
    the triangle constant C_beta(k) >= C~_beta(k) is therefore loose by exactly C_beta/C~_beta."""
    b1, b2 = betas
    rng = np.random.default_rng(3)
    for k in (2, 5, 30):
        grads = [[np.array([(b1 / b2) ** (k - i)])] for i in range(1, k + 1)]
        opt = AdamW([np.zeros(1)], lr=1.0, betas=betas, eps=0.0, weight_decay=0.0)
        for g in grads[:-1]:
            opt.step(g)
        before = opt.params[0].copy()
        move = abs(float(opt.step(grads[-1])[0][0] - before[0]))
        sharp = adamw_update_bound(b1, b2, k, sharp=True)
        assert move == pytest.approx(sharp, rel=1e-12)
        assert sharp < adamw_update_bound(b1, b2, k)
        G = rng.normal(size=(2000, k)) * 10.0 ** rng.uniform(-3, 3, size=(2000, k))
        m = (1 - b1) * (G * b1 ** np.arange(k - 1, -1, -1)).sum(axis=1) / (1 - b1**k)
        v = (1 - b2) * (G * G * b2 ** np.arange(k - 1, -1, -1)).sum(axis=1) / (1 - b2**k)
        assert np.max(np.abs(m) / np.sqrt(v)) <= sharp * (1 + 1e-12)
    gap = adamw_update_bound_sup(b1, b2) / adamw_update_bound_sup(b1, b2, sharp=True)
    if betas == (0.9, 0.999):
        assert gap == pytest.approx(31.7658 / 7.2703, rel=1e-4)  # the factor stated in docs/adamw.md


# ============================================================================================
# attention bounds


def _bounds(R, R_theta, r):
    return tl.derivation("attention-bounds", R=R, R_theta=R_theta, x_norm=r).values


@pytest.mark.parametrize("R,R_theta", [(1.0, 1.0), (0.7, 1.3), (2.0, 0.6)])
def test_attention_bound_attained_by_a_point_mass(R, R_theta):
    e = np.array([0.6, 0.0, 0.8])
    Y = (R * e)[None]
    x = np.array([[0.3, -0.2, 0.1]])
    A = ref.attention_reference(x, Y, R_theta**2 * np.eye(3), np.eye(3), R_theta**2 * np.eye(3))
    assert np.linalg.norm(A) == pytest.approx(_bounds(R, R_theta, 0.5)["attention_bound"], rel=1e-14)


@pytest.mark.parametrize("R,R_theta", [(1.0, 1.0), (0.7, 1.3), (2.0, 0.6)])
def test_jacobian_bound_attained_by_two_symmetric_atoms(R, R_theta):
    """x = 0 sees mu = (delta_{Re} + delta_{-Re})/2 uniformly: grad_x A = V Cov (Q^T K)^T =
    R_theta^4 R^2 e e^T, whose norm is the bound (a factor-2 bound would be reached only halfway)."""
    e = np.array([0.0, 0.6, 0.8])
    Y = np.stack([R * e, -R * e])
    J = ref.jacobian_reference(np.zeros((1, 3)), Y, R_theta**2 * np.eye(3), np.eye(3), R_theta**2 * np.eye(3))[0]
    bound = _bounds(R, R_theta, 0.0)["jacobian_bound"]
    assert np.linalg.norm(J, 2) == pytest.approx(bound, rel=1e-13)
    assert bound == pytest.approx(R_theta**4 * R**2, rel=1e-15)


@pytest.mark.parametrize("R,R_theta,r", [(1.0, 1.0, 1.0), (0.7, 1.3, 0.5), (1.5, 0.8, 1.2)])
def test_kernel_and_lions_bounds_approached_by_a_vanishing_atom(R, R_theta, r):
    """mu = eps delta_{z} + (1 - eps) delta_{-z}, z = R e, x = r e: pi(x, z) -> e^{2 R_theta^2 R r} and
    ||d_mu A(x)(z)|| -> e^{2 R_theta^2 R r}(R_theta^2 + 2 R_theta^4 R r) as eps -> 0 (ratio > 0.999)."""
    e = np.array([0.8, -0.6, 0.0])
    Y = np.stack([R * e, -R * e])
    x = (r * e)[None]
    Q, K, V = R_theta**2 * np.eye(3), np.eye(3), R_theta**2 * np.eye(3)
    w = np.array([1e-9, 1 - 1e-9])
    _, p = ref._softmax_weights(x, Y, Q, K, w)
    lions = ref.lions_reference(x, Y, Q, K, V, w)[0, 0]
    vals = _bounds(R, R_theta, r)
    for got, bound in ((p[0, 0], vals["softmax_density_bound"]),
                       (np.linalg.norm(lions, 2), vals["lions_derivative_bound"])):
        assert 0.999 * bound <= got <= bound * (1 + 1e-12)


# ============================================================================================
# Richardson error estimate of the mean-field RK4 (constant 1/(2^4 - 1) = 1/15)


def test_rk4_step_doubling_estimate_is_asymptotically_exact():
    """forward_checked's |X_h - X_{h/2}|/15 is not only an upper-bound-like estimate: at 8 -> 16 steps
    it equals the true error of X_{h/2} (vs 512 steps) within 10%, so a /7 (order 3) or /31 (order 5)
    constant fails.  Measured ratios true/estimate: 0.62, 0.91, 1.03, 1.02 at 2, 4, 8, 16 steps."""
    from transformer_limits.numeric.attention.mean_field import HeadLaw, MeanFieldLimit
    from transformer_limits.numeric.attention.losses import sample_tokens

    law = HeadLaw.random(3, 4, 3, 2, 4, seed=1, gain=1.5)
    X0 = sample_tokens(6, 3, domain="ball", seed=101)
    mf = MeanFieldLimit(3, 2, 4, backend="numpy")
    ref = mf.forward(X0, law, 512).final
    res = mf.forward_checked(X0, law, 8)
    assert 0.9 <= np.abs(res.final - ref).max() / res.error_estimate <= 1.1
