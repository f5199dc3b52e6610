"""A home-made attention variant and its hand-written derivative: what the tests in this folder check.

Sigmoid attention of N tokens X (N, d) with one head (Q, K (d_k, d), V (d_v, d)):

    A(X)_i = (1/N) Σ_j σ(<Q x_i, K x_j>) V x_j,            shape (N, d_v).

Its directional derivative along dX (N, d): with Z = X Qᵀ K Xᵀ and S = σ(Z),

    dZ = dX Qᵀ K Xᵀ + X Qᵀ K dXᵀ                            (queries move, and so do the keys)
    dA = (1/N) [ (S ⊙ (1 − S) ⊙ dZ) X Vᵀ + S dX Vᵀ ].

``sigmoid_attention_jvp_forgetting_keys`` drops the second term of dZ: the tokens moving as keys,
the analogue of forgetting the Lions (measure) term of softmax attention.  It is wrong, and
``assert_taylor_rate`` must say so.
"""

from __future__ import annotations

import numpy as np


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def sigmoid_attention(X: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> np.ndarray:
    """A(X), shape (N, d_v)."""
    S = sigmoid((X @ Q.T) @ (X @ K.T).T)
    return S @ (X @ V.T) / len(X)


def sigmoid_attention_jvp(X: np.ndarray, dX: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray,
                          *, keys_move: bool = True) -> np.ndarray:
    """dA = DA(X)[dX], shape (N, d_v); ``keys_move=False`` is the deliberately wrong version."""
    M = Q.T @ K                                   # (d, d): Z = X M Xᵀ
    S = sigmoid(X @ M @ X.T)
    dZ = dX @ M @ X.T + (X @ M @ dX.T if keys_move else 0.0)
    return ((S * (1.0 - S) * dZ) @ (X @ V.T) + S @ (dX @ V.T)) / len(X)


def sigmoid_attention_jvp_forgetting_keys(X, dX, Q, K, V):
    """The wrong derivative: the keys are held fixed."""
    return sigmoid_attention_jvp(X, dX, Q, K, V, keys_move=False)


def residual_flow(X: np.ndarray, Q: np.ndarray, K: np.ndarray, V: np.ndarray, L: int) -> np.ndarray:
    """L residual layers x_{r+1} = x_r + (1/L) A(x_r) (d_v = d): the Euler scheme of the ODE
    dx/dt = A(x) on [0, 1], whose error decays like L^-1."""
    for _ in range(L):
        X = X + sigmoid_attention(X, Q, K, V) / L
    return X
