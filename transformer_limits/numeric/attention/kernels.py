"""Softmax attention and its measure derivatives on every backend (generated kernels).

For queries X (N, d), a token measure mu = sum_j w_j delta_{Y_j} (Y (M, d), w (M,), default
w_j = 1/M) and one head (Q, K in R^{d_k x d}, V in R^{d_v x d}), docs/theory.md §A.3:

    A(x_i, mu)              (N, d_v)        attention
    grad_x A(x_i, mu)       (N, d_v, d)     spatial Jacobian
    d_mu A(x_i, mu)(Y_j)    (N, M, d_v, d)  Lions derivative at every atom
    dA/dmu(x_i, mu)(Y_j)    (N, M, d_v)     flat derivative at every atom

``precision`` (``float64`` default, or ``float32``) is the dtype the kernels compute and return in:
``numpy`` computes in the dtype of its arrays, ``numba`` runs its float32 source (every literal and
scratch row float32, softmax sums accumulated in float32 as the CUDA C float32 compile does), ``cupy``
the float32 compile of its CUDA C; ``numba-cuda`` is float64 only (ValueError naming precision).
Inputs are checked in float64 (finite, magnitudes) and then cast.

Kernels are generated from the SymPy derivations once per (d, d_k, d_v, flavour), stored in the
kernel cache and imported from there (kernel family
:data:`transformer_limits.numeric.kernel_family.ATTENTION`); a warm process never imports SymPy.  :mod:`transformer_limits.numeric.attention.reference` is an independent NumPy
(einsum) implementation that every backend is tested against.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import numpy as np

from transformer_limits.numeric.attention.reference import check_magnitudes
from transformer_limits.numeric.flavours import PYTHON_NUMBA, PYTHON_NUMPY
from transformer_limits.numeric.precision import DTYPES, resolve_precision
from transformer_limits.numeric.runtime import Runtime
from transformer_limits.numeric.kernel_family import ATTENTION, load_source
from transformer_limits.resource_limits import check_kernel_dimensions, check_memory

__all__ = ["AttentionKernels", "attention_kernels", "multi_head_field"]

def _as_f64(name: str, a: Any, ndim: int) -> np.ndarray:
    arr = np.ascontiguousarray(a, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values")
    return arr


class AttentionKernels:
    """Generated attention kernels for fixed shapes on one backend.

    >>> k = AttentionKernels(2, 2, 2, backend="numpy")
    >>> X = np.zeros((3, 2)); Q = K = V = np.eye(2)
    >>> k.attention(X, X, Q, K, V).shape
    (3, 2)
    """

    def __init__(self, d: int, d_k: int, d_v: int, backend: str = "numpy", precision: str = "float64"):
        # stated cap before any code is generated (generated kernels are unrolled in d, d_k, d_v)
        check_kernel_dimensions(d=d, d_k=d_k, d_v=d_v)
        self.flavour = ATTENTION.resolve(backend).flavour
        resolve_precision(precision, backend)  # ValueError naming precision (numba-cuda: float64 only)
        self.d, self.d_k, self.d_v, self.backend = int(d), int(d_k), int(d_v), backend
        self.precision, self.dtype = precision, DTYPES[precision]
        self.source_path = ATTENTION.source_path(self.flavour, precision, d=self.d, d_k=self.d_k, d_v=self.d_v)
        self._module = load_source(self.source_path, self.flavour, precision)

    # ------------------------------------------------------------------ input checking
    def _inputs(self, X, Y, Q, K, V, w, derivatives: bool = False):
        X, Y = _as_f64("X", X, 2), _as_f64("Y", Y, 2)
        Q, K, V = _as_f64("Q", Q, 2), _as_f64("K", K, 2), _as_f64("V", V, 2)
        d, d_k, d_v = self.d, self.d_k, self.d_v
        for name, arr, shape in (("Q", Q, (d_k, d)), ("K", K, (d_k, d)), ("V", V, (d_v, d))):
            if arr.shape != shape:
                raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
        for name, arr in (("X", X), ("Y", Y)):
            if arr.shape[1] != d:
                raise ValueError(f"{name} must have {d} columns, got shape {arr.shape}")
        if Y.shape[0] == 0:
            raise ValueError("Y must hold at least one atom")
        if w is None:
            w = np.full(Y.shape[0], 1.0 / Y.shape[0])
        w = _as_f64("weights", w, 1)
        if w.shape != (Y.shape[0],) or np.any(w < 0) or not w.sum() > 0:
            raise ValueError("weights must be non-negative, one per row of Y, with positive sum")
        # contract: finite inputs whose products may overflow float64 are refused up front (cheap
        # max-|entry| bounds), so an accepted input never yields a silent NaN/inf
        check_magnitudes(X, Y, Q, K, V, w, derivatives=derivatives)
        return X, Y, Q, K, V, w

    # ------------------------------------------------------------------ dispatch
    def _run(self, kind: str, X, Y, Q, K, V, w):
        X, Y, Q, K, V, w = self._inputs(X, Y, Q, K, V, w, derivatives=kind != "forward")
        if kind in ("lions", "flat"):  # outputs per (query, atom) pair, estimated before allocating
            N, M = X.shape[0], Y.shape[0]
            per_pair = self.d_v * (self.d if kind == "lions" else 1)
            # NumPy flavour: broadcast temporaries of the output's size (x3); other backends: the output
            shape = (N, M, self.d_v, self.d)[:4 if kind == "lions" else 3]
            check_memory((3 if self.flavour is PYTHON_NUMPY else 1) * self.dtype.itemsize * N * M * per_pair,
                         f"X, Y with {N} x {M} rows ({kind} derivative of shape {shape})")
        return self._launch(kind, X, Y, Q, K, V, w)

    def _launch(self, kind, X, Y, Q, K, V, w):
        """One path for every flavour (the kernels share names and argument lists, outputs written in
        place): inputs to the backend's runtime (on the host a cast), outputs allocated there, the key
        features (one thread per atom), the forward pass (one per query), then the requested derivative
        (one per query, or per (query, atom) pair for Lions and flat), the results back as host arrays."""
        rt, m = Runtime(self.backend, self.precision), self._module  # put casts the inputs to the precision
        N, M = X.shape[0], Y.shape[0]
        dX, dY, dw, dQ, dK, dV = (rt.put(a) for a in (X, Y, w, Q, K, V))
        KF, VF, UF = rt.empty((M, self.d_k)), rt.empty((M, self.d_v)), rt.empty((M, self.d))
        rt.call(m, "key_features", M, dY, dQ, dK, dV, KF, VF, UF, sizes=(M,))
        A, logz = rt.empty((N, self.d_v)), rt.empty((N,))
        rt.call(m, "forward", N, dX, dw, dQ, dK, dV, KF, VF, A, logz, sizes=(N, M))
        if kind == "forward":
            return rt.get(A), rt.get(logz)
        if kind == "jacobian":
            J = rt.empty((N, self.d_v, self.d))
            rt.call(m, "jacobian", N, dX, dw, dQ, dK, dV, KF, VF, UF, A, logz, J, sizes=(N, M))
            return rt.get(J)
        name, out = (("lions_derivative", rt.empty((N, M, self.d_v, self.d))) if kind == "lions"
                     else ("flat_derivative", rt.empty((N, M, self.d_v))))
        rt.call(m, name, (N, M), dX, dQ, dK, dV, KF, VF, A, logz, out, sizes=(N, M))  # a thread per pair
        return rt.get(out)

    # ------------------------------------------------------------------ public API
    def forward(self, X, Y, Q, K, V, weights=None) -> tuple[np.ndarray, np.ndarray]:
        """(A (N, d_v), log Z (N,)) with Z(x_i, mu) = sum_j w_j exp(<Q x_i, K y_j>)."""
        return self._run("forward", X, Y, Q, K, V, weights)

    def attention(self, X, Y, Q, K, V, weights=None) -> np.ndarray:
        """A(x_i, mu) = sum_j w_j pi_mu(x_i, y_j) V y_j, shape (N, d_v)."""
        return self.forward(X, Y, Q, K, V, weights)[0]

    def jacobian(self, X, Y, Q, K, V, weights=None) -> np.ndarray:
        """grad_x A(x_i, mu) = Cov_{pi mu}(V y, Q^T K y), shape (N, d_v, d)."""
        return self._run("jacobian", X, Y, Q, K, V, weights)

    def lions_derivative(self, X, Y, Q, K, V, weights=None) -> np.ndarray:
        """d_mu A(x_i, mu)(y_j) = pi_mu(x_i, y_j)[V + (V y_j - A_i)(K^T Q x_i)^T], (N, M, d_v, d)."""
        return self._run("lions", X, Y, Q, K, V, weights)

    def flat_derivative(self, X, Y, Q, K, V, weights=None) -> np.ndarray:
        """dA/dmu(x_i, mu)(y_j) = pi_mu(x_i, y_j)(V y_j - A_i), shape (N, M, d_v)."""
        return self._run("flat", X, Y, Q, K, V, weights)

    def self_attention(self, Q, K, V) -> Callable[[np.ndarray], np.ndarray]:
        """X -> A(x_i, mu_X) (N, d_v) for fixed (Q, K, V) and uniform weights, for loops that evaluate
        the same head many times: (Q, K, V) are checked and put on the runtime once.  The same kernels
        on the same arrays as :meth:`attention` ``(X, X, Q, K, V)``, so the same numbers bit for bit,
        with the per-call checks and copies reduced (a ``BoundSelfAttention``) -- except where the
        numba flavour's symmetric kernel serves (Q^T K symmetric, N >= 64): the same attention to
        round-off, with half the exponentials."""
        return BoundSelfAttention(self, Q, K, V)


#: the fewest tokens for which :class:`BoundSelfAttention` takes the symmetric kernel (below, the
#: per-row scratch sweeps cost more than the halved exponentials save)
SYMMETRIC_MIN_TOKENS = 64
#: the largest logit bound the symmetric kernel's constant shift may be: shifted logits then lie in
#: [-16, 0], so no exponential underflows and each keeps its relative precision
SYMMETRIC_MAX_SHIFT = 8.0


class BoundSelfAttention:
    """``A = bound(X)``: :meth:`AttentionKernels.attention` ``(X, X, Q, K, V)`` for fixed Q, K, V.

    Per call only X is checked (finite, shape (N, d), float64) and put on the runtime.  The overflow
    contract of :func:`~transformer_limits.numeric.attention.reference.check_magnitudes` is kept
    exactly but evaluated once per new magnitude: with Y = X and uniform weights every forward bound
    (features, logits, values) is non-decreasing in log10 max|X|, so an X whose max |entry| is at most
    that of an X already accepted with the same N is accepted without recomputing the bounds.

    **Symmetric logits** (numba flavour, ``symmetric``): when Q^T K is symmetric (checked exactly once),
    e_ij = exp(<q_i, k_j> - c) = e_ji, so each pair's exponential serves both rows; the numba source's
    ``symmetric_forward`` evaluates the N (N - 1) / 2 pairs i < j once, shifted by the constant
    c = max_i |q_i| max_j |k_j| >= every logit (Cauchy-Schwarz) in place of the row maxima, for
    N >= :data:`SYMMETRIC_MIN_TOKENS` and c <= :data:`SYMMETRIC_MAX_SHIFT` (else the general kernel).
    The attention equals the general kernel's to round-off (the softmax does not depend on its shift;
    tests/test_symmetric_attention.py), not bit for bit."""

    def __init__(self, kernels: AttentionKernels, Q, K, V):
        d, d_k, d_v = kernels.d, kernels.d_k, kernels.d_v
        Q, K, V = _as_f64("Q", Q, 2), _as_f64("K", K, 2), _as_f64("V", V, 2)
        for name, arr, shape in (("Q", Q, (d_k, d)), ("K", K, (d_k, d)), ("V", V, (d_v, d))):
            if arr.shape != shape:
                raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
        self.kernels, self.Q, self.K, self.V = kernels, Q, K, V
        self._rt = Runtime(kernels.backend, kernels.precision)
        self._QKV = tuple(self._rt.put(a) for a in (Q, K, V))
        self._accepted: dict[int, float] = {}  # N -> largest max|X| accepted so far
        S = Q.T @ K
        #: the numba flavour's ``symmetric_forward`` serves X with N >= SYMMETRIC_MIN_TOKENS when
        #: <Q x, K y> = <Q y, K x> for all x, y (Q^T K symmetric: attractive or repulsive heads beta I)
        self.symmetric = kernels.flavour is PYTHON_NUMBA and np.array_equal(S, S.T)

    def __call__(self, X) -> np.ndarray:
        """A (N, d_v) of X (N, d); B systems X (B, N, d) give (B, N, d_v): checked and put once, then
        one launch per system into a view of one output (bitwise B calls)."""
        k, rt = self.kernels, self._rt
        X = np.asarray(X)
        X = _as_f64("X", X, 3 if X.ndim == 3 else 2)
        N = X.shape[-2]
        if X.shape[-1] != k.d or N == 0 or X.size == 0:
            raise ValueError(f"X must have shape (N >= 1, {k.d}) or (B, N, {k.d}), got {X.shape}")
        size = float(np.max(np.abs(X)))
        if not size <= self._accepted.get(N, -1.0):
            # the bounds grow with max|X| (class docstring): the system holding it decides for all
            worst = X if X.ndim == 2 else X[int(np.argmax(np.max(np.abs(X), axis=(1, 2))))]
            check_magnitudes(worst, worst, self.Q, self.K, self.V, np.full(N, 1.0 / N))
            self._accepted[N] = size
        dX = rt.put(X)
        scratch = (rt.empty((N, k.d_k)), rt.empty((N, k.d_v)), rt.empty((N, k.d)), rt.empty((N,)),
                   rt.put(np.full(N, 1.0 / N)))
        A = rt.empty((*X.shape[:-1], k.d_v))
        if X.ndim == 2:
            self._attention(dX, A, scratch)
        else:
            for b in range(X.shape[0]):
                self._attention(dX[b], A[b], scratch)
        return rt.get(A)

    def _attention(self, dX: Any, A: Any, scratch: tuple[Any, ...]) -> None:
        """One system's attention of dX (N, d) into A (N, d_v); ``scratch`` = key, value and U
        features, log-partition and token weights, overwritten."""
        k, rt, m = self.kernels, self._rt, self.kernels._module
        N = dX.shape[0]
        dQ, dK, dV = self._QKV
        KF, VF, UF, logz, dw = scratch
        rt.call(m, "key_features", N, dX, dQ, dK, dV, KF, VF, UF, sizes=(N,))
        if self.symmetric and N >= SYMMETRIC_MIN_TOKENS:
            QF = np.ascontiguousarray(dX @ dQ.T)
            # Cauchy-Schwarz: every logit <q_i, k_j> lies in [-shift, shift]
            shift = float(np.sqrt(np.max(np.sum(QF * QF, axis=1)) * np.max(np.sum(KF * KF, axis=1))))
            if shift <= SYMMETRIC_MAX_SHIFT:
                rt.call(m, "symmetric_forward", N, np.ascontiguousarray(QF.T), np.ascontiguousarray(KF.T),
                        np.ascontiguousarray(VF.T), shift, A)
                return
        rt.call(m, "forward", N, dX, dw, dQ, dK, dV, KF, VF, A, logz, sizes=(N, N))


@lru_cache(maxsize=64)
def attention_kernels(d: int, d_k: int, d_v: int, backend: str = "numpy",
                      precision: str = "float64") -> AttentionKernels:
    """Cached :class:`AttentionKernels` for (d, d_k, d_v, backend, precision)."""
    return AttentionKernels(d, d_k, d_v, backend, precision)


def multi_head_field(X, Y, Qs, Ks, Vs, Os, weights=None, backend: str = "numpy") -> np.ndarray:
    """Gamma(x_i, mu, nu^H) = (1/H) sum_h O_h A_h(x_i, mu), shape (N, d).

    Qs, Ks (H, d_k, d); Vs (H, d_v, d); Os (H, d, d_v).  O_h is folded into the value matrix
    (O_h V_h is d x d), so each head is one call of the generated single-head kernel.
    """
    Qs, Ks, Vs, Os = (np.asarray(a, dtype=np.float64) for a in (Qs, Ks, Vs, Os))
    if not (Qs.ndim == Ks.ndim == Vs.ndim == Os.ndim == 3):
        raise ValueError("Qs, Ks, Vs, Os must be stacks of matrices (H, rows, cols)")
    H = Qs.shape[0]
    if not (Ks.shape[0] == Vs.shape[0] == Os.shape[0] == H) or H == 0:
        raise ValueError("Qs, Ks, Vs, Os must hold the same positive number of heads")
    d, d_k = Qs.shape[2], Qs.shape[1]
    kern = attention_kernels(d, d_k, d, backend)
    out = np.zeros((np.shape(X)[0], d))
    for h in range(H):
        out += kern.attention(X, Y, Qs[h], Ks[h], Os[h] @ Vs[h], weights)
    return out / H
