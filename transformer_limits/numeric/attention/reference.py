"""Independent NumPy (einsum) reference for attention and its derivatives (docs/theory.md §A.3).

Written from the matrix formulas, without the code generator, so that the generated kernels of
every backend can be checked against it.  Shapes as in :mod:`transformer_limits.numeric.attention.kernels`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["attention_reference", "jacobian_reference", "lions_reference", "flat_reference",
           "magnitude_bounds", "check_magnitudes", "LOG10_SAFE_MAGNITUDE", "LOG10_MAX_LOGIT"]

#: a-priori bounds above 10**LOG10_SAFE_MAGNITUDE are refused (float64 overflows at 1.8e308; the
#: margin covers sums of up to ~1e8 bounded terms inside the kernels)
LOG10_SAFE_MAGNITUDE = 300.0

#: logits whose a-priori bound exceeds 10**LOG10_MAX_LOGIT are refused: a logit of size L carries an
#: absolute rounding error ~ d_k·2^-52·L, and passes that round differently (a vectorised forward, a
#: scalar derivative loop) then disagree on log Z by that much — exp of the disagreement overflows
#: long before L itself does (measured: NaN Jacobians from the numba kernels at L ~ 1e160).  At
#: L <= 1e15 the disagreement is below 2 d_k, so every weight stays finite; such softmax weights
#: are one-hot to machine precision anyway (gaps above 745 underflow exp).
LOG10_MAX_LOGIT = 15.0


def _log10_maxabs(a) -> float:
    m = float(np.max(np.abs(a))) if np.size(a) else 0.0
    return -np.inf if m == 0.0 else float(np.log10(m))


def magnitude_bounds(X, Y, Q, K, V, w) -> dict[str, float]:
    """log10 of a-priori bounds (from max |entry| only, so they cannot overflow themselves):

    ``features``     |Q x| <= d|Q||X|, |K y| <= d|K||Y|, |K^T Q x| <= d_k|K| d|Q||X|,
                     |Q^T K y| <= d_k|Q| d|K||Y|                             (|.| = max |entry|)
    ``logits``       |<Q x_i, K y_j>| <= d_k (d |Q| |X|)(d |K| |Y|)
    ``values``       |V y_j| <= d |V| |Y|, times sum_j w_j for the unnormalised sums in the kernels
    ``derivatives``  pi_ij <= 1/min_{w_j > 0} w_j times the largest of the flat term |V y - A| <=
                     2 d|V||Y|, the Lions terms |V| and 2 d|V||Y| d_k|K| d|Q||X| and the Jacobian
                     term 2 d|V||Y| d_k|Q| d|K||Y|.
    """
    d, d_k = Q.shape[1], Q.shape[0]
    lx, ly, lq, lk, lv = (_log10_maxabs(a) for a in (X, Y, Q, K, V))
    pos = w[w > 0]
    log_wsum = float(np.log10(pos.size)) + _log10_maxabs(pos)
    log_pi = -float(np.log10(pos.min()))
    ld, ldk = np.log10(d), np.log10(d_k)
    values = ld + lv + ly
    r = ldk + ld + lk + lq + lx                 # |K^T Q x|
    u = ldk + ld + lq + lk + ly                 # |Q^T K y|
    logits = ldk + 2 * ld + lq + lx + lk + ly
    features = max(ld + lq + lx, ld + lk + ly, r, u)  # q = Qx, k = Ky, u, r formed on the way
    diff = np.log10(2.0) + values                # |V y - A|
    derivatives = log_pi + max(diff, lv, diff + r, diff + u)  # flat, Lions (V + diff r^T), Jacobian
    return {"features": float(features), "logits": float(logits),
            "values": float(values + max(log_wsum, 0.0)), "derivatives": float(derivatives)}


def check_magnitudes(X, Y, Q, K, V, w, *, derivatives: bool = False) -> None:
    """Refuse inputs whose products may overflow float64 (``ValueError`` naming the arguments);
    every input accepted here gives finite results (no silent NaN/inf).  Rescale instead: the
    attention of (X, Y, Q, K, V) equals that of (X/s, Y, s Q, K, V) for any s > 0."""
    bounds = magnitude_bounds(X, Y, Q, K, V, w)
    names = {"features": "X, Y, Q, K (the features Q x, K y, Q^T K y, K^T Q x)",
             "logits": "X, Y, Q, K (the logits <Q x, K y>)",
             "values": "Y, V, weights (the values V y_j and their weighted sums)",
             "derivatives": "X, Y, Q, K, V, weights (the derivative terms)"}
    for key in ("features", "logits", "values") + (("derivatives",) if derivatives else ()):
        limit = LOG10_MAX_LOGIT if key == "logits" else LOG10_SAFE_MAGNITUDE
        if not bounds[key] <= limit:
            why = ("beyond it float64 rounding of the logits makes exp overflow" if key == "logits"
                   else "float64 overflows at 1.8e308")
            raise ValueError(f"inputs {names[key]} too large: a-priori bound 1e{bounds[key]:.0f} exceeds "
                             f"1e{limit:.0f} ({why}); rescale them")


def _checked(X, Y, Q, K, V, w, derivatives: bool):
    X, Y, Q, K, V = (np.asarray(a, dtype=np.float64) for a in (X, Y, Q, K, V))
    w = _weights(Y, w)
    for name, arr in (("X", X), ("Y", Y), ("Q", Q), ("K", K), ("V", V), ("weights", w)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} contains non-finite values")
    if np.any(w < 0) or not np.any(w > 0):
        raise ValueError("weights must be non-negative with a positive entry")
    check_magnitudes(X, Y, Q, K, V, w, derivatives=derivatives)
    return X, Y, Q, K, V, w


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
    X, Y, Q, K, V, w = _checked(X, Y, Q, K, V, w, False)
    P, _ = _softmax_weights(X, Y, Q, K, w)
    return P @ (Y @ V.T)


def jacobian_reference(X, Y, Q, K, V, w=None) -> np.ndarray:
    """grad_x A(x_i, mu) = sum_j w_j pi_ij (V y_j - A_i)(Q^T K y_j)^T, (N, d_v, d)."""
    X, Y, Q, K, V, w = _checked(X, Y, Q, K, V, w, True)
    P, _ = _softmax_weights(X, Y, Q, K, w)
    VY = Y @ V.T
    A = P @ VY
    U = Y @ K.T @ Q  # rows (Q^T K y_j)^T
    # sum_j P_ij (v_j - A_i) u_j^T = P (v u^T) - A (P u)^T, all as BLAS products
    VU = np.einsum("jc,ja->jca", VY, U).reshape(Y.shape[0], -1)
    return (P @ VU).reshape(X.shape[0], VY.shape[1], U.shape[1]) - np.einsum("ic,ia->ica", A, P @ U)


def lions_reference(X, Y, Q, K, V, w=None) -> np.ndarray:
    """d_mu A(x_i, mu)(y_j) = pi_ij [V + (V y_j - A_i)(K^T Q x_i)^T], (N, M, d_v, d)."""
    X, Y, Q, K, V, w = _checked(X, Y, Q, K, V, w, True)
    P, p = _softmax_weights(X, Y, Q, K, w)
    VY = Y @ V.T
    A = P @ VY
    R = X @ Q.T @ K  # rows (K^T Q x_i)^T
    diff = VY[None, :, :] - A[:, None, :]
    return p[:, :, None, None] * (V[None, None] + diff[..., :, None] * R[:, None, None, :])


def flat_reference(X, Y, Q, K, V, w=None) -> np.ndarray:
    """dA/dmu(x_i, mu)(y_j) = pi_ij (V y_j - A_i), (N, M, d_v)."""
    X, Y, Q, K, V, w = _checked(X, Y, Q, K, V, w, True)
    P, p = _softmax_weights(X, Y, Q, K, w)
    VY = Y @ V.T
    A = P @ VY
    return p[:, :, None] * (VY[None, :, :] - A[:, None, :])
