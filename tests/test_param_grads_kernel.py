"""The numba layer's parameter gradients (one ``param_grads`` kernel call per layer), from the mathematics.

For a layer F^i = sum_h c_h O_h A_h^i with A_h^i = sum_j P_ij V_h x^j and P_ij = softmax_j(beta <Q_h x^i,
K_h x^j>) (docs/theory.md §A.2), the cotangent p^i of F^i and the adjoint's per-head vectors qbar_h^i,
kbar_h^j, vbar_h^j (gradients of the loss w.r.t. the features Q_h x^i, K_h x^j, V_h x^j) give

    dL/dQ_h = sum_i qbar_h^i (x^i)^T,  dL/dK_h = sum_j kbar_h^j (x^j)^T,  dL/dV_h = sum_j vbar_h^j (x^j)^T,
    dL/dO_h = c_h sum_i p^i (A_h^i)^T,

written below as plain loops over tokens.  The kernel sums each entry as a vectorised j-sum (reassociated),
so it agrees to rounding, not bit for bit.  Shapes: d = 9 (the dQ/dK/dV columns in three runs of at most
four: first, middle, short last), d_v = 5 (dO's columns in two), d_k = 2, and a shape of one run each;
N odd; both numba twins (the parallel kernel and its serial twin, numeric/numba_twins.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.numeric.kernel_family import LAYER_ADJOINT
from transformer_limits.numeric.numba_twins import KINDS, forced
from transformer_limits.numeric.runtime import Runtime

NUMBA = "numba"  # the backend that runs the python-numba flavour


def _by_loops(X, PC, c, A, QBAR, KBT, VBT):
    H, N, d = QBAR.shape[0], X.shape[0], X.shape[1]
    dQ = np.zeros((H, QBAR.shape[2], d))
    dK, dV = np.zeros((H, KBT.shape[1], d)), np.zeros((H, VBT.shape[1], d))
    dO = np.zeros((H, d, A.shape[2]))
    for h in range(H):
        for i in range(N):
            dQ[h] += np.outer(QBAR[h, i], X[i])
            dK[h] += np.outer(KBT[h, :, i], X[i])
            dV[h] += np.outer(VBT[h, :, i], X[i])
            dO[h] += np.outer(PC[i], A[h, i])
        dO[h] *= c[h]
    return dQ, dK, dV, dO


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("precision, rtol, d, d_k, d_v", [("float64", 1e-13, 9, 2, 5), ("float64", 1e-13, 3, 2, 3),
                                                          ("float32", 1e-5, 9, 2, 5)])
def test_param_grads_are_the_token_sums_of_outer_products(precision, rtol, d, d_k, d_v, kind):
    dt = np.dtype(precision)
    rng = np.random.default_rng(7)
    H, N = 3, 41
    X, PC = rng.normal(size=(N, d)), rng.normal(size=(N, d))
    c = rng.uniform(0.5, 1.5, H)
    A, QBAR = rng.normal(size=(H, N, d_v)), rng.normal(size=(H, N, d_k))
    KBT, VBT = rng.normal(size=(H, d_k, N)), rng.normal(size=(H, d_v, N))
    want = _by_loops(X, PC, c, A, QBAR, KBT, VBT)
    m = LAYER_ADJOINT.load(NUMBA, precision=precision, d=d, d_k=d_k, d_v=d_v)
    got = tuple(np.full(w.shape, np.nan, dt) for w in want)  # every entry must be written
    with forced(kind):
        Runtime(NUMBA, precision).call(m, "param_grads", N, *(a.astype(dt) for a in (X, PC, c, A, QBAR, KBT, VBT)), *got)
    for g, w in zip(got, want):
        assert g.dtype == dt
        np.testing.assert_allclose(g, w, rtol=0, atol=rtol * np.max(np.abs(w)))


def test_param_grads_see_every_token_and_head():
    """A unit qbar at one (head, token) moves exactly dQ of that head, by that token's x (no other)."""
    rng = np.random.default_rng(3)
    H, N, d, d_k, d_v = 4, 9, 5, 9, 6
    X = rng.normal(size=(N, d))
    m = LAYER_ADJOINT.load(NUMBA, d=d, d_k=d_k, d_v=d_v)
    zeros = dict(PC=np.zeros((N, d)), A=np.zeros((H, N, d_v)), KBT=np.zeros((H, d_k, N)), VBT=np.zeros((H, d_v, N)))
    for h, i in [(0, 0), (3, N - 1), (2, 4)]:
        QBAR = np.zeros((H, N, d_k))
        QBAR[h, i, 1] = 1.0
        out = (np.empty((H, d_k, d)), np.empty((H, d_k, d)), np.empty((H, d_v, d)), np.empty((H, d, d_v)))
        Runtime(NUMBA).call(m, "param_grads", N, X, zeros["PC"], np.ones(H), zeros["A"], QBAR, zeros["KBT"],
                            zeros["VBT"], *out)
        want = np.zeros((H, d_k, d))
        want[h, 1] = X[i]
        np.testing.assert_array_equal(out[0], want)
        assert not any(np.any(o) for o in out[1:])
