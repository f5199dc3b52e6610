"""Paper-A mean-field limit: discrete -> RK4 MV-ODE at rate 1/L, adjoint and gradients, heads,
quadrature error estimates, AdamW training in the limit, and the wrong 1/sqrt(H) model."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.numeric.attention.mean_field import (AffineHeadLaw, HeadLaw, MeanFieldLimit,
                                                   discrete_node_loss_and_grad, quadrature_estimate,
                                                   train_adamw)
from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map
from transformer_limits.numeric.attention.transformer import AttentionTransformer, inverse_sqrt_heads
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.verdicts import exponent_equals

D, DK, DV, N = 3, 2, 4, 6  # the numba kernels for these shapes are shared with test_transformer_model
LS = np.array([8, 16, 32, 64, 128])


def _setup(seed, causal=False):
    law = HeadLaw.random(3, 4, D, DK, DV, seed=seed, gain=1.5)
    X0 = sample_tokens(N, D, domain="ball", seed=seed + 100)
    loss = SquaredErrorLoss(target_map(X0, seed=seed + 200))
    return law, X0, loss, MeanFieldLimit(D, DK, DV, causal=causal), AttentionTransformer(D, DK, DV, causal=causal,
                                                                                       backend="numba")


@pytest.mark.parametrize("causal", [False, True])
def test_discrete_converges_to_rk4_limit_at_rate_one_over_L(causal):
    """Exact head expectation: sup_i |x_L^i - X_1^i|, |N p_0 - P_0| and the node-gradient error all
    decay like C/L.  Deterministic errors over 4 seeds (laws and inputs); the verdict's
    false-failure rate is alpha = 0.01 (conservative CI)."""
    errs = {"forward": [], "adjoint": [], "gradient": []}
    for seed in range(4):
        law, X0, loss, mf, model = _setup(seed, causal)
        J, G, P0, fwd = mf.loss_and_grad(X0, law, loss, 32)
        row = {k: [] for k in errs}
        for L in LS:
            params, w = law.discretise(int(L))
            _, Gd, adj = discrete_node_loss_and_grad(model, X0, law, loss, int(L))
            row["forward"].append(np.abs(model.output(X0, params, w) - fwd.final).max())
            row["adjoint"].append(np.abs(N * adj.p[0] - P0).max())
            row["gradient"].append(max(np.abs(Gd[k] - G[k]).max() for k in G))
        for k in errs:
            errs[k].append(row[k])
    for k, e in errs.items():
        fit = fit_power_law({"L": LS}, np.array(e).T, expected=-1.0, n_boot=500, seed=0)
        check = exponent_equals(fit, -1.0)
        assert check.passed, (k, str(check))
        assert abs(fit.exponent.value + 1.0) < 0.1, (k, fit.exponent.value)


def test_rk4_error_estimate_and_order():
    law, X0, _, mf, _ = _setup(1)
    ref = mf.forward(X0, law, 256).final
    res = mf.forward_checked(X0, law, 4)
    true = np.abs(res.final - ref).max()
    assert res.error_estimate is not None and true <= 2.0 * res.error_estimate + 1e-14
    e = [np.abs(mf.forward(X0, law, s).final - ref).max() for s in (2, 4, 8, 16)]
    slopes = np.diff(np.log(e)) / np.log(2.0)
    assert np.all(slopes < -3.5), slopes  # order 4


def test_adjoint_reconstructs_initial_state():
    law, X0, loss, mf, _ = _setup(2)
    fwd = mf.forward(X0, law, 16)
    X0r, _, _ = mf.adjoint(fwd.final, N * loss.grad(fwd.final), law, 16)
    assert np.abs(X0r - X0).max() < 1e-6


def _iid_errors(head_scale, Hs, L=8, seeds=8):
    law, X0, _, _, _ = _setup(3)
    kw = {} if head_scale is None else {"head_scale": head_scale}
    model = AttentionTransformer(D, DK, DV, backend="numba", **kw)
    exact = AttentionTransformer(D, DK, DV, backend="numba")
    params, w = law.discretise(L)
    ref = exact.output(X0, params, w)
    out = np.empty((len(Hs), seeds))
    for i, H in enumerate(Hs):
        for s in range(seeds):
            p, _ = law.discretise(L, H, mode="iid", seed=1000 * i + s)
            out[i, s] = np.sqrt(np.mean((model.output(X0, p) - ref) ** 2))
    return out


def test_iid_heads_converge_at_rate_half_and_sqrt_scaling_does_not():
    """H i.i.d. heads from nu_t: RMS distance to the exact-expectation model ~ H^{-1/2} with the 1/H
    head scale; the deliberately wrong 1/sqrt(H) scale has no H -> infinity limit (exponent far
    from -1/2).  8 seeds per level; verdict false-failure rate alpha = 0.01."""
    Hs = np.array([4, 16, 64, 256])
    good = fit_power_law({"H": Hs}, _iid_errors(None, Hs), expected=-0.5, n_boot=500, seed=0, window="all")
    assert exponent_equals(good, -0.5).passed, str(exponent_equals(good, -0.5))
    bad = fit_power_law({"H": Hs}, _iid_errors(inverse_sqrt_heads, Hs), n_boot=500, seed=0, window="all")
    assert not exponent_equals(bad, -0.5).passed and bad.exponent.value > 0.2


def test_quadrature_error_estimates():
    """Continuous law: Gauss-Legendre converges; the scrambled-Sobol estimate lies within 5 of its
    own standard errors of the reference (seeded; Gaussian false-failure rate < 1e-6)."""
    cont = AffineHeadLaw.random(3, 2, D, DK, DV, seed=4, spread=0.6)
    X0 = sample_tokens(N, D, seed=5)
    mf = MeanFieldLimit(D, DK, DV)

    def final(nu):
        return mf.forward(X0, nu, 8).final

    ref = final(cont.quadrature("gauss-legendre", 8))
    gl, gl_err = quadrature_estimate(cont, final, rule="gauss-legendre", n=5)
    assert np.linalg.norm(gl - ref) <= gl_err + 1e-12 and gl_err < 1e-5
    qmc, qmc_err = quadrature_estimate(cont, final, rule="sobol", n=32, replicas=6, seed=0)
    assert 0 < qmc_err < 1e-2 and np.linalg.norm(qmc - ref) < 5 * qmc_err


def test_adamw_training_discrete_tracks_limit():
    """After k AdamW steps on the node parameters the L-layer network is within O(1/L) of the limit.

    AdamW is not Lipschitz in the gradient at g = 0 when eps -> 0 (m/sqrt(v) is a sign there), so
    coordinates whose limit gradient is below the O(1/L) discretisation error would flip; eps is set
    to the gradient scale (1e-3) to make the update Lipschitz (docs/theory.md §A.2: eps must scale)."""
    law, X0, loss, mf, model = _setup(6)
    k, eps = 4, 1e-3
    lim = train_adamw(lambda nu: mf.loss_and_grad(X0, nu, loss, 16)[:2], law, k, lr=2e-2, eps=eps)
    diffs = []
    for L in (16, 32, 64):
        net = train_adamw(lambda nu: discrete_node_loss_and_grad(model, X0, nu, loss, L)[:2], law, k, lr=2e-2,
                          eps=eps)
        diffs.append(max(np.abs(net.laws[-1].params[n] - lim.laws[-1].params[n]).max() for n in "QKVO"))
        assert abs(net.losses[-1] - lim.losses[-1]) < 1.0 / L
    ratios = np.array(diffs[:-1]) / np.array(diffs[1:])
    assert np.all((ratios > 1.6) & (ratios < 2.5)), (diffs, ratios)
    assert lim.losses[-1] < lim.losses[0]
    blk = train_adamw(lambda nu: mf.loss_and_grad(X0, nu, loss, 16)[:2], law, 2, lr=2e-2, blockwise=True)
    assert blk.losses[-1] < blk.losses[0] + 1e-12


def test_law_validation():
    law = HeadLaw.random(2, 3, D, DK, DV)
    with pytest.raises(ValueError, match="weights"):
        HeadLaw(law.params, np.ones(2))
    with pytest.raises(ValueError, match="mode"):
        law.discretise(4, mode="fancy")
    with pytest.raises(ValueError, match="steps"):
        MeanFieldLimit(D, DK, DV).forward(np.zeros((2, D)), HeadLaw.random(3, 1, D, DK, DV), 3)
