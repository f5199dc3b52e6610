"""The causal (prefix-measure) limit of paper A's transformer, written again from the mathematics
(docs/causal_masking.md) and compared with the code.

Transcription (independent of transformer_limits' layer and RK4 code): for tokens X (N, d) and a
finite-atom law ν_t = Σ_a w_a δ_{θ_a(t)}, θ_a piecewise linear between uniform nodes,

    dX^i/dt = Σ_a w_a O_a Σ_{j<=i} p_ij V_a X^j,   p_ij = exp(<Q_a X^i, K_a X^j>) / Σ_{k<=i} exp(<Q_a X^i, K_a X^k>),

i.e. token i sees the prefix measure m^i = (1/i) Σ_{j<=i} δ_{X^j}.  Its adjoint's Lions weights are
w_ji = 1_{i<=j}/j: checked here against finite differences of the forward map (the N-scaled
adjoint of MeanFieldLimit(causal=True) and the discrete network's backward pass).  All tests are
deterministic (fixed seeds, tolerances far from the measured values).
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.numeric.attention.mean_field import HeadLaw, MeanFieldLimit
from transformer_limits.numeric.attention.transformer import AttentionTransformer
from transformer_limits.verify.experiments.attention_models import PaperAModels, discrete_map, limit_map
from transformer_limits.verify import input_search as search

D, DK, DV = 2, 2, 2


def _law(seed: int = 0, nodes: int = 3, atoms: int = 3) -> HeadLaw:
    return HeadLaw.random(nodes, atoms, D, DK, DV, seed=seed, gain=1.5)


def _theta(law: HeadLaw, t: float) -> dict[str, np.ndarray]:
    """θ_a(t): linear interpolation between the nodes t_n = n / (n_nodes − 1)."""
    m = law.params["Q"].shape[0] - 1
    s = min(max(t, 0.0), 1.0) * m
    n = min(int(s), m - 1)
    u = s - n
    return {k: (1 - u) * v[n] + u * v[n + 1] for k, v in law.params.items()}


def _prefix_field(X: np.ndarray, th: dict[str, np.ndarray], w: np.ndarray) -> np.ndarray:
    """dX^i/dt of the causal limit, token by token, head by head (no masking tricks)."""
    F = np.zeros_like(X)
    for i in range(X.shape[0]):
        for a in range(w.size):
            q = th["Q"][a] @ X[i]
            logits = np.array([q @ (th["K"][a] @ X[j]) for j in range(i + 1)])
            p = np.exp(logits - logits.max())
            p /= p.sum()
            F[i] += w[a] * th["O"][a] @ sum(p[j] * (th["V"][a] @ X[j]) for j in range(i + 1))
    return F


def _rk4(X0: np.ndarray, law: HeadLaw, steps: int) -> np.ndarray:
    X, h = X0.copy(), 1.0 / steps
    f = lambda t, Y: _prefix_field(Y, _theta(law, t), law.weights)  # noqa: E731
    for s in range(steps):
        t = s * h
        k1 = f(t, X)
        k2 = f(t + h / 2, X + h / 2 * k1)
        k3 = f(t + h / 2, X + h / 2 * k2)
        k4 = f(t + h, X + h * k3)
        X = X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return X


def _euler(X0: np.ndarray, law: HeadLaw, steps: int) -> np.ndarray:
    X = X0.copy()
    for s in range(steps):
        X = X + _prefix_field(X, _theta(law, s / steps), law.weights) / steps
    return X


X0 = np.random.default_rng(0).uniform(-0.7, 0.7, size=(5, D))


@pytest.mark.parametrize("backend", ["numpy", "blas", "numba"])
def test_causal_limit_matches_the_transcribed_prefix_measure_rk4(backend):
    law = _law()
    code = MeanFieldLimit(D, DK, DV, causal=True, backend=backend).forward(X0, law, 8).final
    np.testing.assert_allclose(code, _rk4(X0, law, 8), rtol=0, atol=1e-12)


def test_causal_limit_matches_a_fine_explicit_euler():
    """The RK4 limit against the ODE itself (explicit Euler, first order: |error| ~ 1/steps)."""
    law = _law(1)
    limit = MeanFieldLimit(D, DK, DV, causal=True, backend="numpy").forward(X0, law, 16).final
    err = np.abs(_euler(X0, law, 400) - limit).max()
    assert err < 5e-3, err
    assert not np.allclose(limit, MeanFieldLimit(D, DK, DV, backend="numpy").forward(X0, law, 16).final,
                           atol=1e-3)  # the mask matters


@pytest.mark.parametrize("model", ["limit", "network"])
def test_later_tokens_do_not_change_earlier_outputs(model):
    law = _law(2)
    if model == "limit":
        run = lambda X: MeanFieldLimit(D, DK, DV, causal=True, backend="blas").forward(X, law, 4).final  # noqa: E731
    else:
        params, w = law.discretise(6, mode="exact")
        net = AttentionTransformer(D, DK, DV, causal=True, backend="blas")
        run = lambda X: net.output(X, params, w)  # noqa: E731
    extra = np.random.default_rng(1).uniform(-1, 1, size=(7, D))
    np.testing.assert_allclose(run(np.vstack([X0, extra]))[:5], run(X0), rtol=0, atol=1e-13)


def _fd_vjp(f, X: np.ndarray, r: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """r^T d f / d X by central differences."""
    g = np.zeros_like(X)
    for idx in np.ndindex(*X.shape):
        E = np.zeros_like(X)
        E[idx] = h
        g[idx] = np.sum(r * (f(X + E) - f(X - E))) / (2 * h)
    return g


@pytest.mark.parametrize("which", ["limit", "network"])
def test_causal_adjoint_weights_match_finite_differences(which):
    """The vjp with Lions weights w_ji = 1_{i<=j}/j (limit: the N-scaled adjoint P_0 / N) is the
    derivative of the causal forward map; the unmasked adjoint is not."""
    law = _law(3)
    r = np.random.default_rng(4).normal(size=X0.shape)
    maps = {}
    for causal in (True, False):
        if which == "limit":
            # the RK4 adjoint is the continuous one, exact for the RK4 map up to O(h^4): measured
            # |vjp − fd| = 1.5e-3, 7.4e-5, 4.0e-6, 2.2e-7 at 4, 8, 16, 32 steps (unmasked alike)
            maps[causal] = limit_map(MeanFieldLimit(D, DK, DV, causal=causal, backend="blas"), law, 32)
        else:
            params, w = law.discretise(5, mode="exact")
            maps[causal] = discrete_map(AttentionTransformer(D, DK, DV, causal=causal, backend="blas"), params, w)
    fd = _fd_vjp(lambda X: maps[True].evaluate(X)[0], X0, r)
    vjp = maps[True].evaluate(X0)[1](r)
    np.testing.assert_allclose(vjp, fd, rtol=0, atol=1e-6)
    assert np.abs(maps[False].evaluate(X0)[1](r) - fd).max() > 1e-3


def test_exact_heads_network_converges_to_the_causal_limit_at_rate_one_over_L():
    """|x_L^exact − X_1| at one input: halving 1/L halves the error (ratio 2 ± 0.3)."""
    law = _law(5)
    limit = MeanFieldLimit(D, DK, DV, causal=True, backend="blas").forward(X0, law, 16).final
    net = AttentionTransformer(D, DK, DV, causal=True, backend="blas")
    errs = [np.abs(net.output(X0, *law.discretise(L, mode="exact")) - limit).max() for L in (16, 32, 64)]
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all(np.abs(ratios - 2.0) < 0.3), ratios


def _maps(L: int = 4):
    M = PaperAModels(dict(d=D, d_k=DK, d_v=DV, radius=1.0, n_nodes=3, atoms=4, gain=1.5, limit_steps=4,
                          N=6, restarts=1, iterations=4, ascent_lr=0.15, causal=True))
    law = M.law(7)
    return M, M.iid_map(law, L, 3, seed=1), M.limit(law)


def test_tiled_warm_start_keeps_the_max_error_and_repeated_does_not():
    """Tiling X keeps its first n tokens, whose outputs a causal map computes from them alone: the
    max-over-tokens error cannot drop.  Repeating every token in place changes the prefix measures
    of the non-last copies, so after the first layer even the last copies' errors move."""
    M, A, B = _maps()
    X = np.random.default_rng(2).uniform(-0.7, 0.7, size=(6, D))
    per_token = lambda Y: np.linalg.norm(A.evaluate(Y)[0] - B.evaluate(Y)[0], axis=1)  # noqa: E731
    base = per_token(X)
    tiled = per_token(search.tile_tokens(X, 3))
    np.testing.assert_allclose(tiled[:6], base, rtol=0, atol=1e-13)
    assert search.token_error(A, B, search.tile_tokens(X, 3), "max") >= base.max() - 1e-13
    last_copies = per_token(search.duplicate_tokens(X, 3))[2::3]
    assert np.abs(last_copies - base).max() > 1e-4


def test_token_option_of_the_search():
    M, A, B = _maps()
    assert M.search == {"token": "max", "layout": "tile"}
    assert PaperAModels(dict(M.s, causal=False)).search == {}
    a, b = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]]), np.zeros((3, 2))
    assert search.worst_token(a, b, "max") == 1 and search.worst_token(a, b, -1) == 2
    assert search.worst_token(np.array([[1.0, 0], [np.nan, 0]]), np.zeros((2, 2)), "max") == 1
    for bad in (3, -4, "last", True):
        with pytest.raises(ValueError):
            search.worst_token(a, b, bad)
    rng = lambda: np.random.default_rng(0)  # noqa: E731
    kw = dict(radius=1.0, restarts=1, iterations=4, lr=0.15)
    worst, X = search.sup_error(A, B, 6, D, rng=rng(), token="max", **kw)
    assert np.isclose(worst, search.token_error(A, B, X, "max"))
    first, _ = search.sup_error(A, B, 6, D, rng=rng(), token=0, **kw)
    assert worst >= search.token_error(A, B, X, 0) and worst > 0 and first > 0
    with pytest.raises(ValueError):
        search.sup_error_ladder(A, B, (2, 4), D, rngs=[rng(), rng()], layout="shuffle", **kw)


def test_tiled_ladder_is_monotone_under_the_mask():
    M, A, B = _maps()
    ladder = search.sup_error_ladder(A, B, (2, 4, 8), D, radius=1.0, rngs=[np.random.default_rng(i) for i in range(3)],
                                     restarts=1, iterations=3, lr=0.15, **M.search)
    errors = [e for e, _ in ladder]
    assert all(b >= a - 1e-12 for a, b in zip(errors, errors[1:])), errors
