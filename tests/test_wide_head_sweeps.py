"""Wide heads (d_k, d_v > FWD_CHUNK) in the numba layer kernels.

The forward's two-row block splits its logit and value sweeps into runs of FWD_CHUNK components (partial
dots kept in the rows; docs/codegen.md), and the adjoint's pair-score sweep is followed by a separate
sweep for qbar.  The rest of the suite runs small heads (d_k, d_v <= 4: one chunk), so these paths are
checked here against the NumPy/BLAS layer, at d_k = 9 (three chunks: first, middle and last) and
d_v = 6 (a short last chunk), causal and not, N odd (a row without a partner in some tasks), through
single layers, untaped stacks and taped stacks.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from transformer_limits.numeric.attention.layer import AttentionLayer
from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map
from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params
from transformer_limits.symbolic.attention_adjoint_kernels import (ADJ_ROWS, ADJ_UPDATE_COMPONENTS, FWD_CHUNK, _Blocks,
                                                                   _dot_logit,
                                                                   _score_sweep_splits, _source_numba,
                                                                   adjoint_kernel_source)

D, DK, DV, H, L = 5, 9, 6, 3, 2


def test_the_chunks_apply_exactly_where_the_heads_are_wider_than_a_chunk():
    assert FWD_CHUNK == 4
    assert _dot_logit(_Blocks(D, DK, DV)) and _dot_logit(_Blocks(3, 5, 2))
    assert not _dot_logit(_Blocks(3, 4, 4)) and not _dot_logit(_Blocks(3, 2, 2))
    wide = adjoint_kernel_source(D, DK, DV)[1]
    # three logit sweeps for the row pairs: components 0-3 into the rows, 4-7 added, 8 added and scaled
    assert "row0[j] = k_0*q_0_r0 + k_1*q_1_r0 + k_2*q_2_r0 + k_3*q_3_r0" in wide
    assert "row0[j] = row0[j] + k_4*q_4_r0 + k_5*q_5_r0 + k_6*q_6_r0 + k_7*q_7_r0" in wide
    assert "logit_r0 = beta*(row0[j] + k_8*q_8_r0)" in wide
    assert "row0[j] = k_0" not in adjoint_kernel_source(3, 4, 4)[1]


@pytest.mark.parametrize("causal", [False, True])
def test_a_wide_layer_agrees_with_the_blas_layer(causal):
    N = 37
    rng = np.random.default_rng(11)
    X, PC = rng.uniform(-1, 1, (N, D)), rng.normal(size=(N, D))
    args = [0.6 * rng.normal(size=s) for s in ((H, DK, D), (H, DK, D), (H, DV, D), (H, D, DV))]
    args.append(rng.uniform(0.5, 1.5, H))
    fast = AttentionLayer(D, DK, DV, causal=causal, temperature=0.8, backend="numba")
    ref = AttentionLayer(D, DK, DV, causal=causal, temperature=0.8, backend="blas")
    F, cache = fast.field(X, *args)
    F_ref, cache_ref = ref.field(X, *args)
    np.testing.assert_allclose(F, F_ref, rtol=0, atol=1e-14 * np.max(np.abs(F_ref)))
    np.testing.assert_allclose(cache.A, cache_ref.A, rtol=0, atol=1e-14)
    for got, want in zip(fast.vjp(X, *args, cache, PC), ref.vjp(X, *args, cache_ref, PC)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * np.max(np.abs(want)))


@pytest.mark.parametrize("causal", [False, True])
def test_every_task_split_of_the_wide_kernels_agrees_with_the_blas_layer(causal):
    """The layer picks T row tasks and G row groups from the thread count (a machine with 37 or more
    threads would give every task of an N = 37 layer a single row, no pairs), so the kernels are called
    here with fixed splits: T = 1 (every row in a pair), 2, 5 (pairs and rows without a partner), 37 (no
    pairs); G = 1, 2, 3 (adjoint row blocks with and without absent rows); taped and untaped."""
    N = 37
    rng = np.random.default_rng(12)
    X, PC = rng.uniform(-1, 1, (N, D)), rng.normal(size=(N, D))
    Qs, Ks, Vs, Os = (0.6 * rng.normal(size=s) for s in ((H, DK, D), (H, DK, D), (H, DV, D), (H, D, DV)))
    c = rng.uniform(0.5, 1.5, H)
    fast = AttentionLayer(D, DK, DV, causal=causal, temperature=0.8, backend="numba")
    ref = AttentionLayer(D, DK, DV, causal=causal, temperature=0.8, backend="blas")
    F_ref, cache_ref = ref.field(X, Qs, Ks, Vs, Os, c)
    bars = ref._bars_blas(Os, c, cache_ref, PC)  # QBAR, KBAR, VBAR (H, N, d_k|d_v)
    xbar_ref = ref.vjp(X, Qs, Ks, Vs, Os, c, cache_ref, PC)[0]
    m, Ns = fast._module, fast._stride(N)
    QF, KT, VT = np.empty((H, N, DK)), np.empty((H, DK, Ns)), np.empty((H, DV, Ns))
    m.features(X, Qs, Ks, Vs, QF, KT, VT)
    for T in (1, 2, 5, 37):
        for E in (np.empty((H, 0, 0)), np.full((H, N, N), np.nan)):
            A, LOGZ, F = np.empty((H, N, DV)), np.empty((H, N)), np.empty((N, D))
            m.forward(QF, KT, VT, Os, c, fast.beta, causal, T, A, LOGZ, F, E)
            np.testing.assert_allclose(F, F_ref, rtol=0, atol=1e-14 * np.max(np.abs(F_ref)), err_msg=f"T={T}")
            np.testing.assert_allclose(A, cache_ref.A, rtol=0, atol=1e-14, err_msg=f"T={T}")
            if E.shape[1]:
                # a few ulp of |logit| (BLAS and the kernel sum the d_k products in other orders)
                np.testing.assert_allclose(E / E.sum(axis=2, keepdims=True), cache_ref.P, rtol=0, atol=4e-15)
            for G in (1, 2, 3):
                QBAR = np.empty((H, N, DK))
                KBP, VBP = np.full((G, H, DK, Ns), np.nan), np.full((G, H, DV, Ns), np.nan)
                m.adjoint(PC, Os, c, QF, KT, VT, A, LOGZ, fast.beta, causal, QBAR, KBP, VBP, E)
                KBT, VBT, xbar = np.empty((H, DK, N)), np.empty((H, DV, N)), np.empty((N, D))
                m.finish(KBP, VBP, Qs, Ks, Vs, QBAR, True, KBT, VBT, xbar)
                for got, want in zip((QBAR, KBT.transpose(0, 2, 1), VBT.transpose(0, 2, 1), xbar), (*bars, xbar_ref)):
                    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * np.max(np.abs(want)),
                                               err_msg=f"T={T} G={G} taped={bool(E.shape[1])}")


@pytest.mark.parametrize("causal", [False, True])
def test_wide_stacks_taped_and_untaped_agree_with_the_reference(causal):
    N = 29
    model = AttentionTransformer(D, DK, DV, causal=causal, temperature=1.2, backend="numba")
    ref = AttentionTransformer(D, DK, DV, causal=causal, temperature=1.2, backend="numpy")
    params = init_params(L, H, D, DK, DV, seed=4, gain=1.5)
    X0 = sample_tokens(N, D, seed=5)
    loss = SquaredErrorLoss(target_map(X0, seed=6))
    value, grads, fwd, adj = model.loss_and_grad(X0, params, loss)
    assert fwd.run.caches.stacked.E is not None
    plain = model.forward(X0, params)
    assert np.array_equal(plain.states, fwd.states)
    untaped = model.backward(plain, params, loss.grad(plain.states[-1]))
    ref_value, ref_grads, ref_fwd, ref_adj = ref.loss_and_grad(X0, params, loss)
    np.testing.assert_allclose(fwd.states, ref_fwd.states, rtol=0, atol=1e-14 * np.max(np.abs(ref_fwd.states)))
    scale = np.max(np.abs(ref_adj.p))
    assert np.max(np.abs(adj.p - ref_adj.p)) <= 1e-13 * scale
    assert np.max(np.abs(untaped.p - ref_adj.p)) <= 1e-13 * scale
    for k in "QKVO":
        tol = 1e-13 * np.max(np.abs(ref_grads[k]))
        np.testing.assert_allclose(grads[k], ref_grads[k], rtol=0, atol=tol)
        np.testing.assert_allclose(untaped.grads[k], ref_grads[k], rtol=0, atol=tol)
    assert value == pytest.approx(ref_value, rel=1e-13)


def test_the_score_sweep_splits_only_where_the_pieces_allow():
    """The adjoint's pair scores and q-bar sums run as two sweeps only if the derived pair score reads no
    key features and the q-bar increments no p, values or g (else the second sweep would read values the
    first one computed); a pair score that read a key keeps the single sweep."""
    b = _Blocks(3, 2, 2)
    assert _score_sweep_splits(b)
    src = _source_numba(b)
    assert "sbar = SR[r, j]" in src

    class KeyedScore(_Blocks):
        def lines(self, group, printer="scalar", declare=""):
            out = super().lines(group, printer, declare)
            return [out[0] + " + 0*k_0"] + out[1:] if group == "pair_score" else out

    keyed = KeyedScore(3, 2, 2)
    assert not _score_sweep_splits(keyed)
    joint = _source_numba(keyed)
    assert "sbar = SR[r, j]" not in joint and "SR[r, j] = sbar" in joint


def test_the_partial_updates_add_every_component_once_in_runs():
    """The adjoint's key/value partial updates (kbar^j += sum_r sbar_rj kc^r, vbar^j += sum_r P_rj g^r, over
    the block's ADJ_ROWS rows) run over ADJ_UPDATE_COMPONENTS components per sweep: every component of
    d_k = 9 and d_v = 6 is updated exactly once, each with all ADJ_ROWS rows' terms, and the sweeps hold
    the runs 0-2, 3-5, 6-8 (keys) and 0-2, 3-5 (values)."""
    assert ADJ_UPDATE_COMPONENTS == 3
    src = adjoint_kernel_source(D, DK, DV)[1]
    adj = src[src.index("def adjoint("):src.index("def finish(")]
    sweeps = adj.split("for j in range(smax):")[1:]
    for arr, n in (("KBP", DK), ("VBP", DV)):
        updates = [[e for e in range(n) if f"{arr}[g, h, {e}, j] +=" in sw] for sw in sweeps]
        assert [u for u in updates if u] == [list(range(a, min(n, a + 3))) for a in range(0, n, 3)]
    lines = [x.strip() for x in adj.splitlines() if "BP[g, h, " in x and "+=" in x]
    assert len(lines) == DK + DV
    assert all(x.count(" + ") == ADJ_ROWS - 1 for x in lines)  # ADJ_ROWS terms each


def test_the_partial_update_runs_keep_each_components_expression(monkeypatch):
    """Runs of components change where the pair terms are loaded, not the sum that updates a component:
    every ``KBP/VBP[g, h, e, j] += ...`` line, and the pair-term lines feeding it, read the same in the
    source generated with one component per sweep once the loads' names are matched (s_r = SR[r, j] for
    the keys; the values load p_r = PR[r, j] under the same name either way)."""
    import transformer_limits.symbolic.attention_adjoint_kernels as kernels

    def updates(src: str) -> list[str]:
        adj = src[src.index("def adjoint("):src.index("def finish(")]
        return sorted(x.strip() for x in adj.splitlines() if "BP[g, h, " in x and "+=" in x or x.strip().startswith("dv_"))

    runs = updates(adjoint_kernel_source(D, DK, DV)[1])
    monkeypatch.setattr(kernels, "ADJ_UPDATE_COMPONENTS", 1)
    single = _source_numba(_Blocks(D, DK, DV))
    assert len(runs) == DK + DV + ADJ_ROWS * DV  # the += lines and the dv lines of every component
    assert runs == sorted(re.sub(r"SR\[(\d+), j\]", r"s_r\1", x) for x in updates(single))
