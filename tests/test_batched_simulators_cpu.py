"""The CPU paths of the batched simulators, in the default test run (no CUDA simulator needed).

The device tests (``cudasim``-marked tests in tests/test_sphere_runs.py, tests/test_transformer_model.py,
tests/test_mean_field.py) are deselected by default; the CPU tests of the batched paths are here, with
equivalents for what the device tests only check against the simulator:

* paper B (docs/theory.md §B.1, §B.3): ``CommonNoiseSDE.simulate_batch`` is the loop of ``simulate``
  over (X0s[b], seeds[b]) — on numpy/numba in float64 (host loop) and on numpy in float32 (the batched
  array path: one kernel launch, one batched eigh, one batched attention per step, or one launch per
  run above ``ONE_LAUNCH_BYTES``); ``simulate_systems`` and ``SphereTransformer.run`` in float32 agree
  with float64 to 1e-4 and return float32; the transformer's forward pass equals a NumPy transcription
  of the maps ``Y = LN(X + Δt softmax(β X Xᵀ) X)``, ``X' = LN(Y + √Δt ((1/√m) W φ(U Y/√d + b_U) + b_W))``
  on every CPU backend;
* paper A (docs/theory.md §A.2): ``forward_batch`` / ``backward_batch`` / ``loss_and_grad_batch`` on the
  CPU backends (numpy, blas) are the per-problem single runs, with shared or per-problem parameters and
  head weights, and the states equal a transcription of
  ``x_{r+1}^i = x_r^i + Σ_h c_{r,h} O_h Σ_j P^h_ij V_h x_r^j``; float32 agrees with float64 and stays float32;
* the mean-field limit's CPU ``forward_batch`` is each input's RK4 forward (and a transcription of it).

float32 tolerances: round-off 6e-8 per operation over a few hundred operations on short runs, with
contracting normalisation steps: 1e-4 (as the device files state).  Deterministic, small sizes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map
from transformer_limits.numeric.attention.mean_field import HeadLaw, MeanFieldLimit
from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params
from transformer_limits.numeric.backends import REGISTRY
from transformer_limits.numeric.sphere import loops
from transformer_limits.numeric.sphere.common_noise_sde import (
    CommonNoiseSDE,
    coupled_discrete_and_sde,
    coupled_width_chains,
)
from transformer_limits.numeric.sphere.transformer import SphereTransformer, uniform_sphere

TOL = 1e-10


def _needs(backend):
    if not REGISTRY[backend].available:
        pytest.skip(f"backend {backend} unavailable: {REGISTRY[backend].reason}")


# ================================================================================================
# paper B: the sphere transformer and the common-noise SDE
# ================================================================================================


def _sde(backend, activation="relu", **kw):
    return CommonNoiseSDE(3, activation, 0.5, 0.4, attention="attractive", beta=1.5, backend=backend, **kw)


def _model(backend, L=4, activation="relu", **kw):
    return SphereTransformer(3, 12, L, T=1.0, activation=activation, sigma_u=0.3, sigma_w=0.2, beta=1.2,
                             backend=backend, **kw)


def _points(n, seed):
    return uniform_sphere(n, 3, np.random.default_rng(seed))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_float64_simulate_batch_is_the_loop_of_single_runs(backend):
    """Run b is simulate(X0s[b], seeds[b]): its own initial condition and its own noise."""
    _needs(backend)
    X0s = np.stack([_points(4, k) for k in range(3)])
    seeds = [7, 8, 9]
    got = _sde(backend, "tanh").simulate_batch(X0s, 0.5, 5, seeds)
    assert got.shape == (3, 6, 4, 3) and got.dtype == np.float64
    for b, seed in enumerate(seeds):
        np.testing.assert_array_equal(got[b], _sde(backend, "tanh").simulate(X0s[b], 0.5, 5, seed))
    # per-run seeds: the same initial condition under two seeds gives two paths
    same = _sde(backend, "tanh").simulate_batch(np.stack([X0s[0], X0s[0]]), 0.5, 5, [1, 2])
    assert not np.allclose(same[0], same[1])
    with pytest.raises(ValueError, match="seeds"):
        _sde(backend).simulate_batch(X0s, 0.5, 5, [1, 2])


@pytest.mark.parametrize("one_launch", [True, False])
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_float32_simulate_batch_is_the_batched_array_path_of_each_run(monkeypatch, one_launch, activation):
    """numpy at float32 runs all B runs together (device_resident); run b equals the float32 single
    run of (X0s[b], seeds[b]) and the float64 host loop to 1e-4.  ``one_launch=False`` forces the
    per-run kernel matrices (the branch above ONE_LAUNCH_BYTES)."""
    if not one_launch:
        monkeypatch.setattr(loops, "ONE_LAUNCH_BYTES", 1)
    X0s = np.stack([_points(5, 10 + k) for k in range(3)])
    seeds = [3, 4, 5]
    f32 = _sde("numpy", activation, precision="float32")
    assert f32.device_resident
    got = f32.simulate_batch(X0s, 0.5, 6, seeds)
    assert got.shape == (3, 7, 5, 3) and got.dtype == np.float32
    for b, seed in enumerate(seeds):
        alone = f32.simulate(X0s[b], 0.5, 6, seed)
        assert alone.dtype == np.float32
        np.testing.assert_allclose(got[b], alone, rtol=0, atol=1e-5)
        ref = _sde("numpy", activation).simulate(X0s[b], 0.5, 6, seed)
        np.testing.assert_allclose(got[b], ref, rtol=0, atol=1e-4)
    assert np.max(np.abs(got - np.stack([_sde("numpy", activation).simulate(X, 0.5, 6, s)
                                         for X, s in zip(X0s, seeds)]))) > 0  # really float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("sizes", [(5, 5, 5), (4, 6)])
def test_float32_simulate_systems_share_the_noise_like_the_float64_host_loop(sizes):
    """Equal N (batched attention) and unequal N (per system) on the float32 array path equal the
    float64 host loop (same draws) to 1e-4, at the requested steps only."""
    systems = [_points(n, k) for k, n in enumerate(sizes)]
    eval_steps = [0, 3, 8]
    got = _sde("numpy", "gelu", precision="float32").simulate_systems(systems, 0.5, 8, 10, 11, eval_steps=eval_steps)
    ref = _sde("numpy", "gelu").simulate_systems(systems, 0.5, 8, 10, 11, eval_steps=eval_steps)
    for g, r, n in zip(got, ref, sizes):
        assert g.shape == (3, n, 3) and g.dtype == np.float32
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-4)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_float32_numpy_path_returns_float32_close_to_float64(activation):
    """(moved from tests/test_sphere_device.py)"""
    X0, systems = _points(5, 7), [_points(4, 8), _points(3, 9)]
    pairs = [
        (_sde("numpy", activation, precision="float32").simulate(X0, 0.5, 5, 2),
         _sde("numpy", activation).simulate(X0, 0.5, 5, 2)),
        (_model("numpy", activation=activation, precision="float32").run(X0, 2),
         _model("numpy", activation=activation).run(X0, 2)),
    ]
    pairs += list(zip(_sde("numpy", activation, precision="float32").simulate_systems(systems, 0.5, 5, 8, 2),
                      _sde("numpy", activation).simulate_systems(systems, 0.5, 5, 8, 2)))
    for f32, f64 in pairs:
        assert f32.dtype == np.float32 and f32.shape == f64.shape
        np.testing.assert_allclose(f32, f64, rtol=0, atol=1e-4)
        assert np.max(np.abs(f32 - f64)) > 0  # really computed in float32
        np.testing.assert_allclose(np.linalg.norm(f32, axis=-1), 1.0, atol=1e-6)


def _transcribed_sphere_states(X, seed, d=3, m=12, L=4, beta=1.2, su=0.3, sw=0.2):
    """x_1..x_L of ``_model`` written out from the maps (attention step, projection, random MLP step
    with the noise drawn in the simulator's order from ``default_rng(seed)``, projection)."""
    rng, dt, out = np.random.default_rng(seed), 1.0 / L, []
    for _ in range(L):
        U, b_U = rng.standard_normal((m, d)), su * rng.standard_normal(m)
        W, b_W = rng.standard_normal((d, m)), sw * rng.standard_normal(d)
        P = np.exp(beta * X @ X.T)
        Y = X + dt * (P / P.sum(axis=1, keepdims=True)) @ X
        Y /= np.linalg.norm(Y, axis=1, keepdims=True)
        X = Y + math.sqrt(dt) * (np.maximum(Y @ U.T / math.sqrt(d) + b_U, 0.0) @ W.T / math.sqrt(m) + b_W)
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        out.append(X)
    return out


@pytest.mark.parametrize("backend, precision, atol", [("numpy", "float64", 1e-12), ("numba", "float64", 1e-12),
                                                      ("numpy", "float32", 1e-4)])
def test_transformer_forward_matches_a_numpy_transcription_of_the_maps(backend, precision, atol):
    _needs(backend)
    X = _points(6, 4)
    got = _model(backend, precision=precision).run(X, 9)
    assert got.dtype == np.dtype(precision) and got.shape == (5, 6, 3)
    for ell, want in enumerate(_transcribed_sphere_states(X, 9)):
        np.testing.assert_allclose(got[ell + 1], want, rtol=0, atol=atol)


def test_float32_couplings_agree_with_float64():
    """The couplings on the float32 array path against the float64 host loop (same draws)."""
    X0 = _points(5, 3)
    f32, f64 = _model("numpy", precision="float32"), _model("numpy")
    got = coupled_discrete_and_sde(f32, CommonNoiseSDE.from_model(f32), X0, 3, 4)
    want = coupled_discrete_and_sde(f64, CommonNoiseSDE.from_model(f64), X0, 3, 4)
    for g, w in zip(got[:2], want[:2]):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)
    assert got[2] == pytest.approx(want[2], rel=1e-3, abs=1e-6)
    for g, w in zip(coupled_width_chains(f32, CommonNoiseSDE.from_model(f32), X0, 5),
                    coupled_width_chains(f64, CommonNoiseSDE.from_model(f64), X0, 5)):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4)


def test_float32_on_numba_and_a_bad_precision_named():
    """numba has typed float32 sources (tests/test_numba_float32.py); float16 is no precision."""
    _needs("numba")
    assert _sde("numba", precision="float32").precision == "float32"
    assert _model("numba", precision="float32").precision == "float32"
    with pytest.raises(ValueError, match="precision"):
        _sde("numpy", precision="float16")


def test_from_model_keeps_the_precision():
    """(moved from tests/test_sphere_device.py)"""
    sde = CommonNoiseSDE.from_model(_model("numpy", precision="float32"))
    assert sde.precision == "float32" and sde.device_resident


# ================================================================================================
# paper A: the attention-only transformer, B independent problems
# ================================================================================================

D, DK, DV, H, L, B, N = 3, 2, 2, 2, 3, 3, 5


def _tmodel(backend, causal=False, lions=True, **kw):
    return AttentionTransformer(D, DK, DV, causal=causal, temperature=0.7, backend=backend, lions_term=lions, **kw)


def _batch(seed, shared, L=L, B=B, N=N):
    rng = np.random.default_rng(seed)
    if shared:
        params = init_params(L, H, D, DK, DV, seed=seed, gain=1.5)
    else:
        per = [init_params(L, H, D, DK, DV, seed=seed + 10 * b, gain=1.5) for b in range(B)]
        params = {k: np.stack([p[k] for p in per]) for k in per[0]}
    return rng.normal(size=(B, N, D)), params, rng.normal(size=(B, N, D)), rng.uniform(0.5, 1.5, size=(B, L, H))


def _one(params, b, shared):
    return params if shared else {k: v[b] for k, v in params.items()}


def _softmax_states(X, params, c, causal, beta):
    """x_0..x_L written out from the recursion (c (L, H) with the 1/L inside)."""
    out = [X]
    for r in range(params["Q"].shape[0]):
        x, F = out[-1], np.zeros_like(out[-1])
        for h in range(params["Q"].shape[1]):
            Q, K, V, O = (params[k][r, h] for k in "QKVO")
            logits = beta * (x @ Q.T) @ (x @ K.T).T
            if causal:
                logits[np.triu_indices(len(x), 1)] = -np.inf
            P = np.exp(logits - logits.max(axis=1, keepdims=True))
            F += c[r, h] * (P / P.sum(axis=1, keepdims=True)) @ x @ V.T @ O.T
        out.append(x + F)
    return np.stack(out)


def _rel(a, b):
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


@pytest.mark.parametrize("backend", ["blas", "numpy"])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("weights", ["default", "per-problem"])
@pytest.mark.parametrize("causal", [False, True])
def test_cpu_batch_is_the_loop_over_problems(backend, shared, weights, causal):
    """Each problem's states, adjoints and gradients are those of the single-problem passes on its own
    tokens, parameters and head weights, and the states follow the transcribed recursion.
    (Extends ``test_cpu_batch_is_the_loop_over_problems`` moved from tests/test_transformer_device.py.)"""
    X, params, pL, w = _batch(17 + shared + 2 * causal, shared)
    hw = None if weights == "default" else w
    m = _tmodel(backend, causal=causal)
    fwd = m.forward_batch(X, params, hw)
    adj = m.backward_batch(fwd, params, pL)
    assert fwd.states.shape == (L + 1, B, N, D) and adj.p.shape == (L + 1, B, N, D)
    for b in range(B):
        one = _one(params, b, shared)
        f = m.forward(X[b], one, None if hw is None else hw[b])
        a = m.backward(f, one, pL[b])
        np.testing.assert_array_equal(fwd.states[:, b], f.states)
        np.testing.assert_array_equal(adj.p[:, b], a.p)
        for k in one:
            assert adj.grads[k].shape == (B,) + a.grads[k].shape
            np.testing.assert_array_equal(adj.grads[k][b], a.grads[k])
        np.testing.assert_allclose(fwd.states[:, b], _softmax_states(X[b], one, f.weights, causal, 1 / 0.7),
                                   rtol=1e-12, atol=1e-12)
    if weights == "per-problem" and not shared:
        # the problems really differ: swapping problem 0's parameters in changes problem 1's states
        assert not np.allclose(fwd.states[:, 1], m.forward(X[1], _one(params, 0, False), w[1]).states)


@pytest.mark.parametrize("backend", ["blas", "numpy"])
def test_cpu_loss_and_grad_batch_is_each_problems_loss_and_grad(backend):
    X, params, _, w = _batch(40, False)
    losses = [SquaredErrorLoss(target_map(X[b], seed=b)) for b in range(B)]
    m = _tmodel(backend, causal=True)
    values, grads, fwd, adj = m.loss_and_grad_batch(X, params, losses, w)
    assert values.shape == (B,)
    for b in range(B):
        v, g, f, a = m.loss_and_grad(X[b], _one(params, b, False), losses[b], w[b])
        assert values[b] == v
        np.testing.assert_array_equal(fwd.states[:, b], f.states)
        for k in g:
            np.testing.assert_array_equal(grads[k][b], g[k])
    assert len(set(values.tolist())) == B  # three different problems
    with pytest.raises(ValueError, match="losses"):
        m.loss_and_grad_batch(X, params, losses[:2], w)


@pytest.mark.parametrize("backend", ["blas", "numpy"])
def test_float32_on_the_cpu_agrees_with_float64_and_stays_float32(backend):
    """float32 arithmetic (eps 1.2e-7) through L = 3 layers: states, adjoints and gradients within 1e-4
    relative (to each array's largest entry) of float64, every output float32.
    (moved from tests/test_transformer_device.py)"""
    X, params, pL, w = _batch(13, False)
    out = {}
    for precision in ("float64", "float32"):
        m = _tmodel(backend, True, precision=precision)
        fwd = m.forward_batch(X, params, w)
        out[precision] = (fwd.states, m.backward_batch(fwd, params, pL))
    s32, a32 = out["float32"]
    s64, a64 = out["float64"]
    assert s32.dtype == a32.p.dtype == np.float32 and all(g.dtype == np.float32 for g in a32.grads.values())
    assert s64.dtype == np.float64
    assert _rel(s32, s64) <= 1e-4 and _rel(a32.p, a64.p) <= 1e-4
    for k in params:
        assert _rel(a32.grads[k], a64.grads[k]) <= 1e-4, k
    assert _rel(s32, s64) > 0  # really computed in float32


def test_float32_runs_on_numba_and_float16_is_named():
    """numba computes in float32 too; an unknown precision is a ValueError naming it."""
    _needs("numba")
    assert _tmodel("numba", precision="float32").precision == "float32"
    with pytest.raises(ValueError, match="precision"):
        _tmodel("numba", precision="float16")


def test_bad_arguments_name_themselves():
    """(moved from tests/test_transformer_device.py)"""
    X, params, pL, w = _batch(19, False)
    m = _tmodel("blas")
    with pytest.raises(ValueError, match="precision"):
        _tmodel("blas", precision="float16")
    with pytest.raises(ValueError, match="X0s"):
        m.forward_batch(X[0], params)
    with pytest.raises(ValueError, match="X0s"):
        m.forward_batch(X[:, :, :2], params)
    with pytest.raises(ValueError, match="params"):
        m.forward_batch(X[:2], params)  # per-problem parameters for B = 3, tokens for B = 2
    with pytest.raises(ValueError, match="params"):
        m.forward_batch(X, {k: v for k, v in params.items() if k != "O"})
    with pytest.raises(ValueError, match="head_weights"):
        m.forward_batch(X, params, w[:, :, :1])
    fwd = m.forward_batch(X, params)
    with pytest.raises(ValueError, match="p_final"):
        m.backward_batch(fwd, params, pL[:, :3])
    with pytest.raises(ValueError, match="X0"):
        m.forward(X, _one(params, 0, False))


# ================================================================================================
# paper A: the mean-field limit, a batch of inputs under one law
# ================================================================================================

A_ATOMS, TEMP = 2, 0.7


def _mf(backend, causal=False):
    return MeanFieldLimit(D, DK, DV, causal=causal, temperature=TEMP, backend=backend)


def _transcribed_forward(X0, law, steps, causal):
    """RK4 of dX/dt = Σ_a w_a O_a Σ_j P^a_ij V_a X^j (θ_a(t)) written from the formula."""
    def gamma(t, X):
        th, out = law.at(t), np.zeros_like(X)
        for a in range(law.n_atoms):
            Q, K, V, O = (th[k][a] for k in "QKVO")
            logits = ((X @ Q.T) @ (X @ K.T).T) / TEMP
            if causal:
                logits[np.triu_indices(len(X), 1)] = -np.inf
            P = np.exp(logits - logits.max(axis=1, keepdims=True))
            out += law.weights[a] * (P / P.sum(axis=1, keepdims=True)) @ X @ V.T @ O.T
        return out

    h, X = 1.0 / steps, X0.copy()
    for s in range(steps):
        t = s * h
        k1 = gamma(t, X)
        k2 = gamma(t + h / 2, X + h / 2 * k1)
        k3 = gamma(t + h / 2, X + h / 2 * k2)
        k4 = gamma(t + h, X + h * k3)
        X = X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return X


@pytest.mark.parametrize("backend", ["blas", "numpy"])
@pytest.mark.parametrize("causal", [False, True])
def test_mean_field_forward_batch_is_each_input_alone(backend, causal):
    law = HeadLaw.random(3, A_ATOMS, D, DK, DV, seed=2, gain=1.5, weights=[0.3, 0.7])
    X0s = np.stack([sample_tokens(4, D, domain="ball", seed=s) for s in range(3)])
    mf = _mf(backend, causal)
    assert not mf.on_device
    traj = mf.forward_batch(X0s, law, 2)
    assert traj.shape == (3, 3, 4, D)
    for b in range(3):
        alone = mf.forward(X0s[b], law, 2).trajectory
        np.testing.assert_array_equal(traj[:, b], alone)
        assert _rel(traj[-1, b], _transcribed_forward(X0s[b], law, 2, causal)) < 1e-12
    with pytest.raises(ValueError, match="X0s"):
        mf.forward_batch(np.zeros((0, 4, D)), law, 2)
    with pytest.raises(ValueError, match="X0s"):
        mf.forward_batch(X0s[0], law, 2)
