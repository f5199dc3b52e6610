"""The sup-over-inputs search (verify/input_search.py) and the counting-head wrong model
(verify/wrong_models.py).  Deterministic: fixed seeds, no statistical verdicts here."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.numeric.attention.losses import sample_tokens
from transformer_limits.verify import input_search as search
from transformer_limits.verify.experiments import token_independence as ti
from transformer_limits.verify.experiments.attention_models import models_for
from transformer_limits.verify.wrong_models import cluster_counts, counting_head_map

S = {**ti.SETTINGS["quick"], "seeds": 3}


def _maps(j: int, counting_head: float = 0.0):
    """seed j's (discrete i.i.d.-head map, RK4 limit map) of the token-independence experiment."""
    M = models_for({k: v for k, v in S.items() if k != "N_levels"})
    law = M.law(900 + j)
    A = M.iid_map(law, S["L"], S["H"], seed=17 + j)
    if counting_head:
        A = counting_head_map(A, counting_head, width=ti.COUNTING_WIDTH)
    return A, M.limit(law)


def test_repeating_every_token_keeps_the_error():
    """Softmax attention and the MV-ODE see the tokens only through their empirical measure, so the
    input with every token repeated m times has the same outputs for the original tokens — the fact
    the monotone ladder rests on.  The counting head counts tokens, so it does not have it."""
    X = np.random.default_rng(0).normal(size=(5, 2)) * 0.4
    for m in (2, 3):
        X_rep = np.repeat(X, m, axis=0)  # x1, x1, (x1), x2, x2, ...
        for F in _maps(0):
            out, out_rep = F.evaluate(X)[0], F.evaluate(X_rep)[0]
            np.testing.assert_allclose(out_rep[::m], out, rtol=1e-11, atol=1e-13)
            np.testing.assert_allclose(out_rep[1::m], out, rtol=1e-11, atol=1e-13)
    wrong, _ = _maps(0, counting_head=0.5)
    shift = wrong.evaluate(np.repeat(X, 2, axis=0))[0][0] - wrong.evaluate(X)[0][0]
    # tokens well apart: S_1 = 1 -> 2, the first output coordinate moves by 0.5 (log 3 − log 2)
    np.testing.assert_allclose(shift, [0.5 * np.log(1.5), 0.0], atol=1e-11)


def test_ladder_is_monotone_in_N_per_seed():
    """ê(N) ≥ ê(N/m) for every seed, also for factor-4 steps, on the real maps; up to round-off,
    because the repeated worst input is evaluated by an N-token model (sums in another order)."""
    levels = (4, 8, 32)
    for j in range(S["seeds"]):
        A, B = _maps(j)
        rngs = [np.random.default_rng([1, i, j]) for i in range(len(levels))]
        ladder = search.sup_error_ladder(A, B, levels, S["d"], radius=1.0, rngs=rngs, restarts=2,
                                         iterations=4, lr=S["ascent_lr"])
        values = np.array([e for e, _ in ladder])
        assert np.all(np.diff(values) >= -1e-12 * values[:-1]), (j, values)
        for N, (e, X) in zip(levels, ladder):
            assert X.shape == (N, S["d"]) and np.all(np.linalg.norm(X, axis=1) <= 1.0 + 1e-12)
            assert e == pytest.approx(search.token_one_error(A, B, X), rel=1e-12)


def test_experiment_ladders_are_monotone_and_level_0_is_the_random_restart_estimate():
    """The experiment's per-seed ladders (quick settings, 2 seeds, N = 4, 8, 16) never decrease; level 0
    is the plain random-restart estimate (``bottom_restarts`` starts) with the level-0 stream of the seed.
    (Longer ladders: test_ladder_is_monotone_in_N_per_seed and the token-independence experiment tests.)"""
    s = dict(S, N_levels=(4, 8, 16), seeds=2)
    errors = ti.token_errors(s, 0)
    assert errors.shape == (3, 2)
    assert np.all(np.diff(errors, axis=0) >= -1e-12 * errors[:-1])
    M = models_for({k: v for k, v in s.items() if k != "N_levels"})
    law = M.law(900)
    A = M.iid_map(law, s["L"], s["H"], seed=int(np.random.default_rng([0, 6, 0]).integers(2**32)))
    e0, _ = search.sup_error(A, M.limit(law), 4, s["d"], radius=1.0, rng=np.random.default_rng([0, 7, 0, 0]),
                             restarts=s["bottom_restarts"], iterations=s["iterations"], lr=s["ascent_lr"])
    assert errors[0, 0] == e0


def _adam_ascent_reference(grad_value, X, *, radius, iterations, lr):
    """Projected Adam ascent written from Kingma & Ba (2015), Algorithm 1 (β1 = 0.9, β2 = 0.99,
    ε = 1e-12 added to the bias-corrected sqrt(v̂)), step α_k = lr·R/sqrt(1 + (k−1)/4), the iterate
    projected radially onto the ball after each step; returns the largest value seen and its input."""
    m, v, best = np.zeros_like(X), np.zeros_like(X), (-np.inf, None)
    for k in range(1, iterations + 2):
        value, g = grad_value(X)
        if value > best[0]:
            best = (value, X.copy())
        if k == iterations + 1:
            return best
        m = 0.9 * m + 0.1 * g
        v = 0.99 * v + 0.01 * g * g
        X = X + lr * radius / np.sqrt(1 + (k - 1) / 4) * (m / (1 - 0.9**k)) / (np.sqrt(v / (1 - 0.99**k)) + 1e-12)
        for i in range(len(X)):
            n = np.linalg.norm(X[i])
            if n > radius:
                X[i] *= radius / n


def test_ascend_is_projected_adam_ascent():
    """On a nonlinear map with context coupling, :func:`ascend` (the project's AdamW with λ = 0) follows
    the textbook projected Adam ascent of ½|A^1 − B^1|² to round-off, and keeps the best value."""
    W = np.array([[1.0, 0.5], [-0.3, 0.8]])

    def A_eval(X):
        # A(X)^i = tanh(W x^i) + mean_j x^j
        out = np.tanh(X @ W.T) + X.mean(axis=0)
        return out, lambda r: ((1 - np.tanh(X @ W.T) ** 2) * r) @ W + r.sum(axis=0) / len(X)

    A, B = search.InputMap(A_eval), search.InputMap(lambda X: (np.zeros_like(X), lambda r: np.zeros_like(r)))

    def grad_value(X):
        out, vjp = A_eval(X)
        r = np.zeros_like(out)
        r[0] = out[0]
        return np.linalg.norm(out[0]), vjp(r)

    X0 = np.random.default_rng(3).uniform(-0.3, 0.3, size=(4, 2))
    got = search.ascend(A, B, X0, radius=0.9, iterations=12, lr=0.1)
    want = _adam_ascent_reference(grad_value, X0.copy(), radius=0.9, iterations=12, lr=0.1)
    assert got[0] == pytest.approx(want[0], rel=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)
    assert got[0] > np.linalg.norm(A_eval(X0)[0][0])


def test_counting_head_vjp_matches_finite_differences():
    rng = np.random.default_rng(4)
    X = rng.uniform(-0.5, 0.5, size=(6, 2))
    X[1] = X[0] + [0.004, -0.003]  # within δ of token 1
    X[2] = X[0] + [-0.002, 0.004]  # (all pair distances kept away from δ, where κ is only C¹)
    X[4] = X[3] + [0.006, 0.0]
    base = search.InputMap(lambda X: (np.sin(X), lambda r: np.cos(X) * r))
    F = counting_head_map(base, 0.7, width=0.01)
    out, vjp = F.evaluate(X)
    r = rng.normal(size=out.shape)
    g = vjp(r)
    h = 1e-7
    for i in range(len(X)):
        for k in range(2):
            E = np.zeros_like(X)
            E[i, k] = h
            fd = (np.sum(r * F.evaluate(X + E)[0]) - np.sum(r * F.evaluate(X - E)[0])) / (2 * h)
            assert g[i, k] == pytest.approx(fd, rel=1e-6, abs=1e-6)


def test_counting_head_counts_clustered_tokens_only():
    """S_i = Σ_j κ(|x^j − x^i|/δ) (self included): 1 at random inputs in the ball, N when every token
    sits on x^1 — the head adds c log(1 + S_1) along e_1."""
    X = sample_tokens(256, 2, domain="ball", seed=5)
    # E(S_i − 1) ≤ (N − 1)(δ/R)^d = 0.0255 for uniform tokens; the mean over the 256 tokens
    counts = cluster_counts(X, 0.01)
    assert np.all(counts >= 1.0) and np.mean(counts - 1.0) < 0.05
    assert cluster_counts(np.repeat(X[:1], 16, axis=0), 0.01)[0] == 16
    zero = search.InputMap(lambda X: (np.zeros_like(X), lambda r: np.zeros_like(r)))
    out = counting_head_map(zero, 0.5, width=0.01).evaluate(np.repeat(X[:1], 16, axis=0))[0]
    np.testing.assert_allclose(out, np.tile([0.5 * np.log(17), 0.0], (16, 1)))


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="N_levels"):
        search.check_ladder((4, 6))
    with pytest.raises(ValueError, match="N_levels"):
        search.check_ladder((8, 4))
    with pytest.raises(ValueError, match="factor"):
        search.duplicate_tokens(np.zeros((2, 2)), 0)
    zero = search.InputMap(lambda X: (np.zeros_like(X), lambda r: np.zeros_like(r)))
    with pytest.raises(ValueError, match="rngs"):
        search.sup_error_ladder(zero, zero, (2, 4), 2, radius=1.0, rngs=[np.random.default_rng(0)], restarts=1,
                                iterations=1, lr=0.1)
    with pytest.raises(ValueError, match="strength"):
        counting_head_map(zero, -1.0, width=0.01)
    with pytest.raises(ValueError, match="width"):
        counting_head_map(zero, 1.0, width=0.0)
