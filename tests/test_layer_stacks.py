"""Whole stacks of layers in one numba call (``forward_stack`` / ``adjoint_stack`` / ``adjoint_grads_stack``).

The discrete transformer is x_{r+1} = x_r + F_r(x_r) and its input adjoint p_r = p_{r+1} + xbar_r(p_{r+1})
(docs/theory.md §A.2).  The stacks run the layer's own kernels in the same order, so a transformer's
forward and input-adjoint passes must equal that recursion written out with ``AttentionLayer.field`` /
``vjp`` bit for bit, masked or not, for N on both sides of the serial-task threshold and H N on both
sides of the one from which a stack computes its feature maps in parallel; the parameter gradients of
a stacked pass (``adjoint_grads_stack``: every layer's ``param_grads`` inside the stack)
must equal those of the written-out recursion too.  A stack that skipped one layer's residual, or wrote
one layer's gradients into another's slot, would fail every comparison.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.numeric.attention.layer import SERIAL_TOKENS
from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params
from transformer_limits.symbolic.attention_adjoint_kernels import FEAT_PARALLEL_ITEMS


def written_out(model, params, X0, pL):
    """The recursions with one layer call each: states, caches, adjoints, per-layer gradients."""
    L, H = params["Q"].shape[:2]
    c = model.head_weights(L, H, None)
    heads = lambda r: (params["Q"][r], params["K"][r], params["V"][r], params["O"][r], c[r])  # noqa: E731
    states, caches = [np.asarray(X0, dtype=np.float64)], []
    for r in range(L):
        F, cache = model.layer.field(states[r], *heads(r))
        states.append(states[r] + F)
        caches.append(cache)
    p, grads = [None] * L + [pL], {k: [None] * L for k in "QKVO"}
    for r in range(L - 1, -1, -1):
        xbar, *dtheta = model.layer.vjp(states[r], *heads(r), caches[r], p[r + 1], lions=model.lions_term)
        p[r] = p[r + 1] + xbar
        for k, g in zip("QKVO", dtheta):
            grads[k][r] = g
    return np.stack(states), np.stack(p), {k: np.stack(v) for k, v in grads.items()}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [1, 7, SERIAL_TOKENS + 5])
@pytest.mark.parametrize("L", [1, 3])
def test_stacked_passes_are_the_written_out_recursions_bit_for_bit(causal, N, L):
    model = AttentionTransformer(3, 2, 2, causal=causal, backend="numba")
    assert model.layer.runs_stacks
    params = init_params(L, 4, 3, 2, 2, seed=N + L, gain=1.5)
    rng = np.random.default_rng([N, L, causal])
    X0, pL = rng.uniform(-1, 1, (N, 3)), rng.normal(size=(N, 3))
    states, p, grads = written_out(model, params, X0, pL)
    fwd = model.forward(X0, params)
    assert fwd.run is not None and fwd.run.caches.stacked is not None  # the stack ran
    assert np.array_equal(fwd.states, states)
    assert np.array_equal(model.backward(fwd, params, pL, grads=False).p, p)
    full = model.backward(fwd, params, pL)  # gradients: adjoint_grads_stack
    assert np.array_equal(full.p, p)
    for k in "QKVO":
        assert np.array_equal(full.grads[k], grads[k]), k


@pytest.mark.parametrize("items", [FEAT_PARALLEL_ITEMS - 64, FEAT_PARALLEL_ITEMS])
def test_stacks_on_both_sides_of_the_parallel_feature_maps_are_the_recursions(items):
    # H N token-heads just below (features_serial) and at (features, in parallel) the threshold
    N, L = 64, 2
    H = items // N
    model = AttentionTransformer(3, 2, 2, backend="numba")
    params = init_params(L, H, 3, 2, 2, seed=H, gain=1.5)
    rng = np.random.default_rng(H)
    X0, pL = rng.uniform(-1, 1, (N, 3)), rng.normal(size=(N, 3))
    states, p, grads = written_out(model, params, X0, pL)
    fwd = model.forward(X0, params)
    assert fwd.run.caches.stacked is not None
    assert np.array_equal(fwd.states, states)
    full = model.backward(fwd, params, pL)
    assert np.array_equal(full.p, p)
    for k in "QKVO":
        assert np.array_equal(full.grads[k], grads[k]), k


def test_the_flipped_lions_term_reaches_the_stack():
    """lions_term=False drops the Lions term in the stacked adjoint as in the per-layer one."""
    params = init_params(2, 3, 3, 2, 2, seed=1, gain=1.5)
    rng = np.random.default_rng(2)
    X0, pL = rng.uniform(-1, 1, (9, 3)), rng.normal(size=(9, 3))
    right = AttentionTransformer(3, 2, 2, backend="numba")
    wrong = AttentionTransformer(3, 2, 2, backend="numba", lions_term=False)
    p_wrong = wrong.backward(wrong.forward(X0, params), params, pL, grads=False).p
    _, p_written, grads_written = written_out(wrong, params, X0, pL)
    assert np.array_equal(p_wrong, p_written)
    full = wrong.backward(wrong.forward(X0, params), params, pL)  # the gradient stack too
    assert np.array_equal(full.p, p_written)
    assert all(np.array_equal(full.grads[k], grads_written[k]) for k in "QKVO")
    assert np.abs(p_wrong - right.backward(right.forward(X0, params), params, pL, grads=False).p).max() > 1e-3


def test_other_backends_keep_the_per_layer_path():
    model = AttentionTransformer(3, 2, 2, backend="blas")
    assert not model.layer.runs_stacks
    fwd = model.forward(np.zeros((4, 3)), init_params(2, 2, 3, 2, 2, seed=0))
    assert getattr(fwd.run.caches, "stacked", None) is None


def test_a_stack_is_the_sequence_of_its_layer_caches():
    """ForwardPass.caches of a stack: L layer caches, indexable from both ends, IndexError past them."""
    L, H, N = 3, 4, 9
    model = AttentionTransformer(3, 2, 2, backend="numba")
    params = init_params(L, H, 3, 2, 2, seed=5)
    fwd = model.forward(np.random.default_rng(5).uniform(-1, 1, (N, 3)), params)
    caches = fwd.caches
    assert fwd.run is not None and caches is fwd.run.caches.stacked and len(caches) == L
    assert len(list(caches)) == L  # iteration stops at the IndexError
    for r in range(L):
        assert np.shares_memory(caches[r].A, caches.A[r]) and np.array_equal(caches[r].A, caches.A[r])
        assert np.array_equal(caches[r - L].QF, caches.QF[r])
    for bad in (L, -L - 1):
        with pytest.raises(IndexError):
            caches[bad]


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("tape", [False, True])
def test_gradients_of_a_stacked_pass_come_from_one_kernel_call(monkeypatch, precision, tape):
    """A stacked pass's backward with parameter gradients runs no per-layer VJP (one ``adjoint_grads_stack``
    call: no L host round trips), and gives what the per-layer path gives on the same caches (a pass
    given by its host arrays alone, softmax tape included) bit for bit, in either precision."""
    from transformer_limits.numeric.attention.layer import AttentionLayer

    L, H, N = 3, 4, 9
    model = AttentionTransformer(3, 2, 2, backend="numba", precision=precision)
    params = init_params(L, H, 3, 2, 2, seed=7, gain=1.5)
    rng = np.random.default_rng(7)
    X0, pL = rng.uniform(-1, 1, (N, 3)), rng.normal(size=(N, 3))
    fwd = model.forward(X0, params, tape=tape)
    assert (fwd.run.caches.stacked.E is not None) == tape
    calls = []
    real = AttentionLayer.vjp_checked
    monkeypatch.setattr(AttentionLayer, "vjp_checked", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    stacked = model.backward(fwd, params, pL)
    assert calls == []
    bare = type(fwd)(fwd.states, list(fwd.caches), fwd.weights, None)  # no run: the per-layer path
    per_layer = model.backward(bare, params, pL)
    assert len(calls) == L
    assert stacked.p.dtype == np.dtype(precision) and np.array_equal(per_layer.p, stacked.p)
    for k in "QKVO":
        assert stacked.grads[k].dtype == np.dtype(precision)
        assert np.array_equal(per_layer.grads[k], stacked.grads[k]), k


def test_parameters_of_another_depth_are_refused():
    """Parameters with fewer layers than the pass would leave adjoints unwritten: a ValueError names it."""
    model = AttentionTransformer(3, 2, 2, backend="numba")
    X0 = np.random.default_rng(3).uniform(-1, 1, (5, 3))
    fwd = model.forward(X0, init_params(3, 2, 3, 2, 2, seed=3))
    with pytest.raises(ValueError, match="L = 2 layers but the forward pass has 3"):
        model.backward(fwd, init_params(2, 2, 3, 2, 2, seed=3), np.ones((5, 3)))
    batch = model.forward_batch(X0[None], init_params(3, 2, 3, 2, 2, seed=3))
    with pytest.raises(ValueError, match="L = 2 layers but the forward pass has 3"):
        model.backward_batch(batch, init_params(2, 2, 3, 2, 2, seed=3), np.ones((1, 5, 3)))
