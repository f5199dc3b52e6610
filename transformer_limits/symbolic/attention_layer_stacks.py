"""Loop templates of the numba layer *stacks*: the L layers of a transformer in one kernel call.

The discrete transformer is x_{r+1} = x_r + F_r(x_r), r = 0..L-1, and its adjoint p_r = p_{r+1} +
xbar_r(p_{r+1}) (docs/theory.md §A.2).  A stack runs the layer kernels of
:mod:`transformer_limits.symbolic.attention_adjoint_kernels` for every layer, in the order and on the
arguments of L host calls, so its results are those of the per-layer path bit for bit; it saves the L
Python round trips, and above all the idle gaps between them: a Numba worker thread that waits through
the host's per-layer work sleeps, and on a virtual machine waking it costs a halted vCPU's wake-up at
the next parallel launch (measured, N = 256, L = 64, H = 32 on a 2-vCPU guest: the per-layer backward
with parameter gradients 0.54 s, the input-adjoint stack 0.35 s; ``loss_and_grad`` 0.67–0.82 s with
per-layer gradients, 0.60–0.67 s with ``adjoint_grads_stack``).

``forward_stack``         per layer: the feature maps (serial below ``feat_parallel_items`` token-heads,
                          where a parallel launch costs more than the work), ``forward``, the residual
``adjoint_stack``         per layer, r = L-1..0: ``adjoint``, ``finish``, the residual (input adjoints)
``adjoint_grads_stack``   the same, and ``param_grads`` of each layer into dQ, dK, dV, dO (L, H, ...)

Arrays: states, p (L+1, N, d); Qs, Ks (L, H, d_k, d), Vs (L, H, d_v, d), Os (L, H, d, d_v), c (L, H);
the caches QF (L, H, N, d_k), KT (L, H, d_k, N_s), VT (L, H, d_v, N_s), A (L, H, N, d_v), LOGZ (L, H, N),
the tape E (L, H, N, N) or (L, H, 0, 0); per-layer scratch as for the layer kernels.
"""

from __future__ import annotations

__all__ = ["stack_kernels"]


def _residual(d: int, arr: str, out: str, a: str, b: str) -> list[str]:
    """arr[out] = arr[a] + b, token by token (the residual step of a stack)."""
    return ["for i in range(N):"] + [f"    {arr}[{out}, i, {e}] = {arr}[{a}, i, {e}] + {b}[i, {e}]" for e in range(d)]


def stack_kernels(d: int, feat_parallel_items: int) -> list[tuple[str, list[str]]]:
    """(signature, body) of ``forward_stack``, ``adjoint_stack`` and ``adjoint_grads_stack`` (see the
    module docstring) for token dimension ``d``."""
    forward = ["L = Qs.shape[0]", "N = states.shape[1]", "for r in range(L):"] + ["    " + s for s in [
        f"if Qs.shape[1] * N < {feat_parallel_items}:",
        "    features_serial(states[r], Qs[r], Ks[r], Vs[r], QF[r], KT[r], VT[r])",
        "else:",
        "    features(states[r], Qs[r], Ks[r], Vs[r], QF[r], KT[r], VT[r])",
        "forward(QF[r], KT[r], VT[r], Os[r], c[r], beta, causal, T, A[r], LOGZ[r], F, E[r])"]
        + _residual(d, "states", "r + 1", "r", "F")]
    layer = ["adjoint(p[r + 1], Os[r], c[r], QF[r], KT[r], VT[r], A[r], LOGZ[r], beta, causal, QBAR, KBP, VBP, E[r])",
             "finish(KBP, VBP, Qs[r], Ks[r], Vs[r], QBAR, lions, KBT, VBT, XB)"]
    grads = ["param_grads(states[r], p[r + 1], c[r], A[r], QBAR, KBT, VBT, dQ[r], dK[r], dV[r], dO[r])"]
    head = ["L = Qs.shape[0]", "N = p.shape[1]", "for r in range(L - 1, -1, -1):"]
    adjoint = head + ["    " + s for s in layer + _residual(d, "p", "r", "r + 1", "XB")]
    adjoint_grads = head + ["    " + s for s in layer + grads + _residual(d, "p", "r", "r + 1", "XB")]
    args = "Os, c, QF, KT, VT, A, LOGZ, beta, causal, lions, QBAR, KBP, VBP, KBT, VBT, XB, E"
    return [("forward_stack(states, Qs, Ks, Vs, Os, c, beta, causal, T, QF, KT, VT, A, LOGZ, F, E)", forward),
            (f"adjoint_stack(p, Qs, Ks, Vs, {args})", adjoint),
            (f"adjoint_grads_stack(p, states, Qs, Ks, Vs, {args}, dQ, dK, dV, dO)", adjoint_grads)]
