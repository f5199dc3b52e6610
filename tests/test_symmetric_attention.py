"""The numba flavour's symmetric self-attention kernel and when ``BoundSelfAttention`` takes it.

From the mathematics: with Q^T K symmetric the softmax weights of row i are e_ij / sum_j e_ij with
e_ij = exp(<q_i, k_j> - c) = e_ji for any constant c, so evaluating each pair once and shifting by a
bound c >= every logit gives the attention A_i = sum_j softmax_j(<q_i, k_j>) V x_j to round-off.  The
reference below is that formula in plain NumPy (max-shifted per row).  The kernel is taken only where
the conditions hold (symmetric Q^T K, N >= 64, bound <= 8); elsewhere the general kernel runs bit for
bit as before.  Applied to a non-symmetric Q^T K the kernel is wrong by O(1), which is why the gate
checks symmetry exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.numeric.attention import kernels as attention_kernels_module
from transformer_limits.numeric.attention.kernels import SYMMETRIC_MAX_SHIFT, SYMMETRIC_MIN_TOKENS, attention_kernels


def reference(X, Q, K, V):
    """A_i = sum_j softmax_j(<Q x_i, K x_j>) V x_j, each row shifted by its own maximum."""
    logits = (X @ Q.T) @ (X @ K.T).T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ (X @ V.T)


def tokens(N, d, seed, domain="sphere"):
    X = np.random.default_rng([seed, N, d]).normal(size=(N, d))
    if domain == "sphere":
        return X / np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.sqrt(d)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("N", [SYMMETRIC_MIN_TOKENS, 101, 300])
@pytest.mark.parametrize("beta", [1.0, -1.0, 2.5])
def test_symmetric_heads_agree_with_the_softmax_formula(d, N, beta):
    """Attractive (beta > 0) and repulsive (beta < 0) heads Q^T K = beta I, V a general matrix."""
    bound = attention_kernels(d, d, d, "numba").self_attention(beta * np.eye(d), np.eye(d),
                                                               np.arange(1.0, 1.0 + d * d).reshape(d, d))
    assert bound.symmetric
    X = tokens(N, d, 1)
    want = reference(X, beta * np.eye(d), np.eye(d), bound.V)
    assert np.abs(bound(X) - want).max() <= 1e-14 * np.abs(want).max()


def test_a_general_symmetric_q_transpose_k_takes_the_symmetric_kernel():
    """Q^T K = S symmetric (not a multiple of I) when K = Q S' and Q^T Q S' is symmetric: Q orthogonal
    times a diagonal, exactly representable entries."""
    Q = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    K = np.array([[0.0, 0.5, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, -1.5]])  # Q^T K = diag(2, 0.5, -1.5)
    bound = attention_kernels(3, 3, 3, "numba").self_attention(Q, K, np.eye(3))
    assert bound.symmetric
    X = tokens(200, 3, 2, domain="ball")
    want = reference(X, Q, K, np.eye(3))
    assert np.abs(bound(X) - want).max() <= 1e-14 * np.abs(want).max()


def _general(kernels, X, Q, K, V):
    return kernels.attention(X, X, Q, K, V)


@pytest.mark.parametrize("case", ["few tokens", "large logits", "non-symmetric"])
def test_outside_its_conditions_the_general_kernel_runs_bit_for_bit(case):
    k = attention_kernels(3, 3, 3, "numba")
    Q, K, V = np.eye(3), np.eye(3), np.eye(3)
    X = tokens(128, 3, 3)
    if case == "few tokens":
        X = X[:SYMMETRIC_MIN_TOKENS - 1]
    elif case == "large logits":  # bound |q| |k| = 9 > 8 on the sphere of radius 3
        X = 3.0 * X
        assert 9.0 > SYMMETRIC_MAX_SHIFT
    else:
        K = np.array([[1.0, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    bound = k.self_attention(Q, K, V)
    assert bound.symmetric == (case != "non-symmetric")
    assert np.array_equal(bound(X), _general(k, X, Q, K, V))


def test_the_kernel_is_wrong_without_symmetry():
    """The gate matters: the pair-once kernel on a non-symmetric Q^T K misses the reference by O(1)."""
    k = attention_kernels(2, 2, 2, "numba")
    Q, K = np.eye(2), np.array([[1.0, 2.0], [0.0, 1.0]])
    X = tokens(128, 2, 4)
    QF, KF, VF = X @ Q.T, X @ K.T, X.copy()
    shift = float(np.sqrt((QF ** 2).sum(1).max() * (KF ** 2).sum(1).max()))
    A = np.empty((128, 2))
    k._module.symmetric_forward(np.ascontiguousarray(QF.T), np.ascontiguousarray(KF.T), np.ascontiguousarray(VF.T),
                                shift, A)
    assert np.abs(A - reference(X, Q, K, np.eye(2))).max() > 1e-2


def test_float32_kernel_agrees_with_float64():
    b32 = attention_kernels(3, 3, 3, "numba", precision="float32").self_attention(np.eye(3), np.eye(3), np.eye(3))
    assert b32.symmetric
    X = tokens(256, 3, 5)
    got = b32(X)
    assert got.dtype == np.float32
    assert np.abs(got - reference(X, np.eye(3), np.eye(3), np.eye(3))).max() <= 2e-6


def test_numpy_flavour_never_takes_it():
    assert not attention_kernels(3, 3, 3, "numpy").self_attention(np.eye(3), np.eye(3), np.eye(3)).symmetric
    assert attention_kernels_module.SYMMETRIC_MIN_TOKENS >= 2


def _axis_tokens(N: int, d: int, radius: float) -> np.ndarray:
    """N tokens on the coordinate axes (+-radius e_a): every norm exactly radius in floating point."""
    axes = np.concatenate([np.eye(d), -np.eye(d)]) * radius
    return np.ascontiguousarray(np.resize(axes, (N, d)))


@pytest.mark.parametrize("N, radius, taken", [
    (SYMMETRIC_MIN_TOKENS, 2.0, True),        # the fewest tokens; bound c = |2 x| |x| = 8 exactly
    (SYMMETRIC_MIN_TOKENS - 1, 2.0, False),   # one token too few
    (SYMMETRIC_MIN_TOKENS, 2.0 * 1.01, False),  # c = 8 * 1.0201 > SYMMETRIC_MAX_SHIFT
])
def test_the_gate_takes_the_symmetric_kernel_exactly_at_its_boundaries(N, radius, taken):
    """Which kernel ran, at the two boundaries of the gate (a spy on the module's kernel)."""
    assert SYMMETRIC_MAX_SHIFT == 8.0  # the bound below is built to sit on it
    k = attention_kernels(3, 3, 3, "numba")
    bound = k.self_attention(2.0 * np.eye(3), np.eye(3), np.eye(3))
    calls = []
    kernel = k._module.symmetric_forward

    def spy(*args):
        calls.append(args[3])  # the shift
        return kernel(*args)

    k._module.symmetric_forward = spy
    try:
        X = _axis_tokens(N, 3, radius)
        got = bound(X)
    finally:
        k._module.symmetric_forward = kernel
    assert bool(calls) is taken and (not taken or calls == [8.0])
    want = reference(X, 2.0 * np.eye(3), np.eye(3), np.eye(3))
    assert np.abs(got - want).max() <= 1e-14 * np.abs(want).max()
