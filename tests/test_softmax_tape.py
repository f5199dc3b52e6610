"""The softmax tape of the numba layer stacks (``AttentionLayer.field_stack(tape=True)``).

A stack's forward pass may keep the softmax numerators E_ij = exp(l_ij - max_j l_ij), l_ij = beta <Q_h x^i,
K_h x^j>, over the visible keys (zero where a causal j > i) for the adjoint, which then reads them instead
of recomputing P_ij = exp(l_ij - log Z^i) (docs/theory.md §A.2), and normalises by the row sums itself.
Checked from the definitions: the tape is that matrix (a NumPy transcription below; its rows normalised
are the softmax), the states are bit for bit those of the untaped pass, adjoints and parameter gradients
agree with the untaped pass and the NumPy reference to rounding, the adjoint reads the tape (a corrupted
tape changes it: these checks can fail) and divides by its row sums (a row scaled as a whole changes
nothing), and over the byte budget no tape is kept (and the pass is the untaped one, bit for bit).
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.numeric.attention import layer_caches
from transformer_limits.numeric.attention.layer import SERIAL_TOKENS
from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map
from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params

D, DK, DV, L, H = 3, 2, 2, 3, 4


def softmax_numerators(params, states, causal: bool, beta: float) -> np.ndarray:
    """E (L, H, N, N) from the definition: layer r's input x_r, logits l = beta <Q x^i, K x^j>, E_ij =
    exp(l_ij - max_j l_ij) over the visible keys, 0 elsewhere."""
    N = states.shape[1]
    out = np.zeros((L, H, N, N))
    for r in range(L):
        for h in range(H):
            q, k = states[r] @ params["Q"][r, h].T, states[r] @ params["K"][r, h].T
            logits = beta * (q @ k.T)
            if causal:
                logits[np.triu_indices(N, 1)] = -np.inf
            out[r, h] = np.exp(logits - logits.max(axis=1, keepdims=True))
    return out


def problem(N: int, causal: bool, temperature: float, precision: str = "float64"):
    model = AttentionTransformer(D, DK, DV, causal=causal, temperature=temperature, backend="numba",
                                 precision=precision)
    params = init_params(L, H, D, DK, DV, seed=N, gain=1.5)
    X0 = sample_tokens(N, D, seed=N + 1)
    return model, params, X0, SquaredErrorLoss(target_map(X0, seed=N + 2))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [5, SERIAL_TOKENS + 9])
def test_the_tape_is_the_softmax_numerators_and_leaves_the_states_alone(causal, N):
    model, params, X0, _ = problem(N, causal, temperature=0.7)
    plain, taped = model.forward(X0, params), model.forward(X0, params, tape=True)
    assert np.array_equal(plain.states, taped.states)
    assert plain.run.caches.stacked.E is None
    E = taped.run.caches.stacked.E
    assert E is not None and E.shape == (L, H, N, N)
    want = softmax_numerators(params, taped.states, causal, beta=1 / 0.7)
    # entries in (0, 1], each row's largest 1; a few ulp of the logits (|l| up to ~10 here) carry over
    np.testing.assert_allclose(E, want, rtol=0, atol=4e-15)
    assert np.all(E.max(axis=-1) == 1.0)
    np.testing.assert_allclose(E / E.sum(axis=-1, keepdims=True), want / want.sum(axis=-1, keepdims=True),
                               rtol=0, atol=4e-16)  # normalised: the softmax
    if causal:  # exactly zero past the visible keys
        assert not np.any(E[..., np.triu_indices(N, 1)[0], np.triu_indices(N, 1)[1]])
    for r in range(L):  # the per-layer caches carry their layer's tape
        assert np.shares_memory(taped.caches[r].E, E) and np.array_equal(taped.caches[r].E, E[r])
        assert taped.caches[r].P is None


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [6, SERIAL_TOKENS + 9])
def test_taped_adjoints_and_gradients_agree_with_recomputed_and_reference(causal, N):
    model, params, X0, loss = problem(N, causal, temperature=1.3)
    value, grads, fwd, adj = model.loss_and_grad(X0, params, loss)
    assert fwd.run.caches.stacked.E is not None  # loss_and_grad keeps the tape
    plain = model.forward(X0, params)
    untaped = model.backward(plain, params, loss.grad(plain.states[-1]))
    ref = AttentionTransformer(D, DK, DV, causal=causal, temperature=1.3, backend="numpy")
    ref_value, ref_grads, _, ref_adj = ref.loss_and_grad(X0, params, loss)
    scale = np.max(np.abs(ref_adj.p))
    assert np.max(np.abs(adj.p - untaped.p)) <= 1e-14 * scale
    assert np.max(np.abs(adj.p - ref_adj.p)) <= 1e-14 * scale
    for k in "QKVO":
        np.testing.assert_allclose(grads[k], ref_grads[k], rtol=0, atol=1e-14 * np.max(np.abs(ref_grads[k])))
        np.testing.assert_allclose(grads[k], untaped.grads[k], rtol=0,
                                   atol=1e-14 * np.max(np.abs(ref_grads[k])))
    assert value == pytest.approx(ref_value, rel=1e-14)
    xbar_only = model.backward(fwd, params, loss.grad(fwd.states[-1]), grads=False)  # the adjoint stack
    assert np.array_equal(xbar_only.p, adj.p)


@pytest.mark.parametrize("causal", [False, True])
def test_the_adjoint_reads_the_tape(causal):
    """Scaling layer 1's tape at its first key by 1 + 1e-3 (P_i0 up, the other keys' weights down) moves
    the gradients of the layers below by about that much: a kernel that recomputed P (or read another
    layer's) would not notice."""
    N = SERIAL_TOKENS + 3
    model, params, X0, loss = problem(N, causal, temperature=1.0)
    fwd = model.forward(X0, params, tape=True)
    pL = loss.grad(fwd.states[-1])
    before = model.backward(fwd, params, pL)
    fwd.run.caches.stacked.E[1, :, :, 0] *= 1 + 1e-3
    after = model.backward(fwd, params, pL)
    after_xbar = model.backward(fwd, params, pL, grads=False)
    assert np.array_equal(after.p[2:], before.p[2:])  # layers above 1 never read it
    for moved in (after.p[:2], after_xbar.p[:2]):
        rel = np.max(np.abs(moved - before.p[:2])) / np.max(np.abs(before.p[:2]))
        assert 1e-5 < rel < 1e-2
    assert np.array_equal(after.grads["V"][2], before.grads["V"][2])
    assert not np.array_equal(after.grads["V"][1], before.grads["V"][1])


@pytest.mark.parametrize("causal", [False, True])
def test_the_adjoint_normalises_the_tape_rows(causal):
    """P_ij = E_ij / sum_j E_ij: scaling every tape row by its own factor (powers of two: exact) leaves
    adjoints and gradients bit for bit as they were, while scaling one entry (above) moves them."""
    N = SERIAL_TOKENS + 5
    model, params, X0, loss = problem(N, causal, temperature=1.0)
    fwd = model.forward(X0, params, tape=True)
    pL = loss.grad(fwd.states[-1])
    before = model.backward(fwd, params, pL)
    factors = 2.0 ** np.random.default_rng(0).integers(-3, 4, size=(L, H, N, 1))
    fwd.run.caches.stacked.E[...] *= factors
    after = model.backward(fwd, params, pL)
    assert np.array_equal(after.p, before.p)
    for k in "QKVO":
        assert np.array_equal(after.grads[k], before.grads[k])


def test_over_budget_no_tape_is_kept_and_the_pass_is_the_untaped_one(monkeypatch):
    N = 12
    model, params, X0, loss = problem(N, False, temperature=1.0)
    need = L * H * N * N * 8
    monkeypatch.setattr("transformer_limits.numeric.attention.layer.SOFTMAX_TAPE_BYTES", need - 1)
    value, grads, fwd, adj = model.loss_and_grad(X0, params, loss)
    assert fwd.run.caches.stacked.E is None
    plain = model.forward(X0, params)
    untaped = model.backward(plain, params, loss.grad(plain.states[-1]))
    assert np.array_equal(adj.p, untaped.p)
    monkeypatch.setattr("transformer_limits.numeric.attention.layer.SOFTMAX_TAPE_BYTES", need)
    assert model.forward(X0, params, tape=True).run.caches.stacked.E is not None  # the bound is inclusive
    assert layer_caches.SOFTMAX_TAPE_BYTES == 2**30


def test_float32_stacks_keep_a_float32_tape():
    N = SERIAL_TOKENS + 9
    model, params, X0, loss = problem(N, True, temperature=1.0, precision="float32")
    value, grads, fwd, adj = model.loss_and_grad(X0, params, loss)
    E = fwd.run.caches.stacked.E
    assert E is not None and E.dtype == np.float32
    want = softmax_numerators(params, fwd.states.astype(np.float64), True, beta=1.0)
    np.testing.assert_allclose(E, want, rtol=0, atol=2e-6)
    ref = AttentionTransformer(D, DK, DV, causal=True, backend="numpy")
    ref_grads = ref.loss_and_grad(X0, params, loss)[1]
    for k in "QKVO":
        np.testing.assert_allclose(grads[k], ref_grads[k], rtol=0, atol=2e-5 * np.max(np.abs(ref_grads[k])))
