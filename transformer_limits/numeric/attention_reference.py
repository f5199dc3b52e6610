"""Independent NumPy (einsum) reference for attention and its derivatives (THEORY.md 1.3).

Written from the matrix formulas, without the code generator, so that the generated kernels of
every backend can be checked against it.  Shapes as in :mod:`transformer_limits.numeric.attention`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["attention_reference", "jacobian_reference", "lions_reference", "flat_reference"]


def _softmax_weights(X, Y, Q, K, w):
    """P[i, j] = w_j pi_mu(x_i, y_j) (rows sum to one) and p[i, j] = pi_mu(x_i, y_j)."""
    logits = (X @ Q.T) @ (Y @ K.T).T  # <Q x_i, K y_j>, two BLAS calls
    m = np.where(w[None, :] > 0, logits, -np.inf).max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    Z = (e * w[None, :]).sum(axis=1, keepdims=True)
    p = e / Z
    return p * w[None, :], p


def _weights(Y, w):
    return np.full(Y.shape[0], 1.0 / Y.shape[0]) if w is None else np.asarray(w, dtype=np.float64)


def attention_reference(X, Y, Q, K, V, w=None) -> np.ndarray:
    """A(x_i, mu) = sum_j w_j pi(x_i, y_j) V y_j, (N, d_v)."""
    P, _ = _softmax_weights(X, Y, Q, K, _weights(Y, w))
    return P @ (Y @ V.T)


def jacobian_reference(X, Y, Q, K, V, w=None) -> np.ndarray:
    """grad_x A(x_i, mu) = sum_j w_j pi_ij (V y_j - A_i)(Q^T K y_j)^T, (N, d_v, d)."""
    P, _ = _softmax_weights(X, Y, Q, K, _weights(Y, w))
    VY = Y @ V.T
    A = P @ VY
    U = Y @ K.T @ Q  # rows (Q^T K y_j)^T
    # sum_j P_ij (v_j - A_i) u_j^T = P (v u^T) - A (P u)^T, all as BLAS products
    VU = np.einsum("jc,ja->jca", VY, U).reshape(Y.shape[0], -1)
    return (P @ VU).reshape(X.shape[0], VY.shape[1], U.shape[1]) - np.einsum("ic,ia->ica", A, P @ U)


def lions_reference(X, Y, Q, K, V, w=None) -> np.ndarray:
    """d_mu A(x_i, mu)(y_j) = pi_ij [V + (V y_j - A_i)(K^T Q x_i)^T], (N, M, d_v, d)."""
    P, p = _softmax_weights(X, Y, Q, K, _weights(Y, w))
    VY = Y @ V.T
    A = P @ VY
    R = X @ Q.T @ K  # rows (K^T Q x_i)^T
    diff = VY[None, :, :] - A[:, None, :]
    return p[:, :, None, None] * (V[None, None] + diff[..., :, None] * R[:, None, None, :])


def flat_reference(X, Y, Q, K, V, w=None) -> np.ndarray:
    """dA/dmu(x_i, mu)(y_j) = pi_ij (V y_j - A_i), (N, M, d_v)."""
    P, p = _softmax_weights(X, Y, Q, K, _weights(Y, w))
    VY = Y @ V.T
    A = P @ VY
    return p[:, :, None] * (VY[None, :, :] - A[:, None, :])
