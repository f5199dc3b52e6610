"""The token stride N_s of the numba layer kernels' transposed arrays (KT, VT, KBP, VBP: (H, n, N_s)).

Rows of N float64 whose length is a multiple of 4 KiB (N = 512, 1024, 4096) all start in the same L1
cache sets, so those arrays get one cache line of padding per row.  The padding must change nothing:
the kernels run on the first N columns only, so padded and unpadded arrays give the same numbers bit
for bit, and NaN written into the padding never reaches an output.  A kernel that took its token count
from the padded axis would read the NaN columns and fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.numeric.attention.layer import (AttentionLayer, _partials, _row_groups, _tasks,
                                                       token_stride)
from transformer_limits.numeric.attention.layer_caches import no_tape


@pytest.mark.parametrize("N, itemsize, want", [
    (512, 8, 520), (1024, 8, 1032), (4096, 8, 4104),  # rows of 4, 8, 32 KiB: one 64-byte line more
    (1024, 4, 1040), (2048, 4, 2064),                   # float32: 16 more floats is one line
    (256, 8, 256), (512, 4, 512), (1000, 8, 1000), (1, 8, 1), (520, 8, 520)])
def test_rows_whose_bytes_are_a_multiple_of_4_kib_get_one_cache_line_more(N, itemsize, want):
    assert token_stride(N, itemsize) == want


def _run(layer, X, Qs, Ks, Vs, Os, c, PC, causal, Ns, tape):
    """features, forward, adjoint, finish on arrays of token stride Ns, the padding filled with NaN; with
    a softmax tape (H, N, N) or without (the empty "no tape" array)."""
    m, (H, d_k), N, d_v = layer._module, Qs.shape[:2], X.shape[0], Vs.shape[1]
    QF = np.empty((H, N, d_k))
    KT, VT = np.full((H, d_k, Ns), np.nan), np.full((H, d_v, Ns), np.nan)
    m.features(X, Qs, Ks, Vs, QF, KT, VT)
    A, LOGZ, F = np.empty((H, N, d_v)), np.empty((H, N)), np.empty((N, X.shape[1]))
    P = np.full((H, N, N), np.nan) if tape else no_tape((H,), np.dtype(np.float64))
    m.forward(QF, KT, VT, Os, c, 0.7, causal, _tasks(N), A, LOGZ, F, P)
    KBP, VBP = (a.copy() for a in _partials(_row_groups(H, N), H, d_k, d_v, Ns))
    KBP[..., N:], VBP[..., N:] = np.nan, np.nan
    QBAR = np.empty((H, N, d_k))
    m.adjoint(PC, Os, c, QF, KT, VT, A, LOGZ, 0.7, causal, QBAR, KBP, VBP, P)
    KBT, VBT, XB = np.empty((H, d_k, N)), np.empty((H, d_v, N)), np.empty((N, X.shape[1]))
    m.finish(KBP, VBP, Qs, Ks, Vs, QBAR, True, KBT, VBT, XB)
    assert np.isnan(KT[..., N:]).all() and np.isnan(KBP[..., N:]).all()  # nothing wrote the padding either
    return F, A, LOGZ, QBAR, KBT, VBT, XB


@pytest.mark.parametrize("tape", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_padded_and_unpadded_arrays_give_the_same_numbers_bit_for_bit(causal, tape):
    d, d_k, d_v, H, N = 3, 2, 2, 3, 512
    layer = AttentionLayer(d, d_k, d_v, backend="numba")
    rng = np.random.default_rng(7)
    X, PC = rng.uniform(-1, 1, (N, d)), rng.normal(size=(N, d))
    Qs, Ks, Vs, Os = (rng.normal(size=s) for s in ((H, d_k, d), (H, d_k, d), (H, d_v, d), (H, d, d_v)))
    c = rng.uniform(0.5, 1.5, H)
    plain = _run(layer, X, Qs, Ks, Vs, Os, c, PC, causal, N, tape)
    padded = _run(layer, X, Qs, Ks, Vs, Os, c, PC, causal, token_stride(N, 8), tape)
    for a, b in zip(plain, padded):
        assert np.all(np.isfinite(a)) and np.array_equal(a, b)


def test_a_layer_at_a_power_of_two_n_agrees_with_the_blas_reference():
    """N = 512 runs on padded caches; field and input VJP against the NumPy/BLAS layer (float64)."""
    d, d_k, d_v, H, N = 3, 2, 2, 2, 512
    rng = np.random.default_rng(3)
    X, PC = rng.uniform(-1, 1, (N, d)), rng.normal(size=(N, d))
    args = [rng.normal(size=s) for s in ((H, d_k, d), (H, d_k, d), (H, d_v, d), (H, d, d_v))] + [np.ones(H)]
    fast, ref = AttentionLayer(d, d_k, d_v, backend="numba"), AttentionLayer(d, d_k, d_v, backend="blas")
    F, cache = fast.field(X, *args)
    assert cache.KF.shape == (H, d_k, token_stride(N, 8))
    F_ref, cache_ref = ref.field(X, *args)
    np.testing.assert_allclose(F, F_ref, rtol=1e-12, atol=1e-13)
    got, want = fast.vjp(X, *args, cache, PC), ref.vjp(X, *args, cache_ref, PC)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)
