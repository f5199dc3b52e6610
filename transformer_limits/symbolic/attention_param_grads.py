"""Loop template of the numba layer's parameter gradients (``param_grads``, one call per layer).

For head h of a layer (docs/theory.md §A.2), with the cotangent p^i of F^i and the adjoint's per-head
feature gradients qbar_h^i, kbar_h^j, vbar_h^j:

    dQ_h = sum_i qbar_h^i x^iT,  dK_h = sum_j kbar_h^j x^jT,  dV_h = sum_j vbar_h^j x^jT,
    dO_h = c_h sum_i p^i A_h^iT

(the sums first, then c_h, as the BLAS layer does).  Arguments: X, PC (N, d); c (H,); A (H, N, d_v);
QBAR (H, N, d_k); KBT (H, d_k, N), VBT (H, d_v, N); outputs dQ, dK (H, d_k, d), dV (H, d_v, d),
dO (H, d, d_v).  Tasks are heads; every entry is a j-sum over contiguous rows (vectorised, reassociated:
the kernel is decorated like the pair loops), so the tokens and cotangents are transposed once per call
and a head's qbar and A by its task, and a sweep computes a run of output columns at once, sharing the
loads of its row.  One BLAS matmul per head and matrix cost 0.6 ms per layer at N = 256, H = 32 (the
calls, not the flops); this kernel about 0.4 ms.
"""

from __future__ import annotations

__all__ = ["PARAM_GRAD_COLUMNS", "param_grads_body", "runs"]

#: output columns per token sweep (their accumulators and the loads of the sweep's rows in registers)
PARAM_GRAD_COLUMNS = 4

_OUTPUT = {"gq": "dQ", "gk": "dK", "gv": "dV", "go": "dO"}


def runs(n: int, width: int) -> list[range]:
    """Components 0..n-1 in runs of ``width``."""
    return [range(a, min(n, a + width)) for a in range(0, n, width)]


def _sweep(pairs: list[tuple[str, str, str]], rows: str, run: range) -> list[str]:
    """One sweep over i: for each (accumulator prefix, lhs row, rhs matrix) and column a in ``run``,
    out[h, rows, a] = sum_i lhs[i] rhs[a, i]."""
    acc = [f"{o}{a}" for o, _, _ in pairs for a in run]
    body = [f"{o}{a} += {lhs}[i] * {rhs}[{a}, i]" for o, lhs, rhs in pairs for a in run]
    return ([f"{x} = 0.0" for x in acc] + ["for i in range(N):"] + ["    " + x for x in body]
            + [f"{_OUTPUT[o]}[h, {rows}, {a}] = {o}{a}" for o, _, _ in pairs for a in run])


def param_grads_body(d: int, d_k: int, d_v: int, width: int = PARAM_GRAD_COLUMNS) -> list[str]:
    """The body of ``param_grads(X, PC, c, A, QBAR, KBT, VBT, dQ, dK, dV, dO)`` (see the module docstring),
    ``width`` output columns per sweep."""
    cols = runs(d, width)
    per_head = ([f"QT = numpy.empty(({d_k}, N))", f"AT = numpy.empty(({d_v}, N))", "for i in range(N):"]
                + [f"    QT[{b}, i] = QBAR[h, i, {b}]" for b in range(d_k)]
                + [f"    AT[{col}, i] = A[h, i, {col}]" for col in range(d_v)]
                + [f"for b in range({d_k}):", "    qt = QT[b]", "    kt = KBT[h, b]"]
                + ["    " + y for run in cols for y in _sweep([("gq", "qt", "XT"), ("gk", "kt", "XT")], "b", run)]
                + [f"for e in range({d_v}):", "    vt = VBT[h, e]"]
                + ["    " + y for run in cols for y in _sweep([("gv", "vt", "XT")], "e", run)]
                + [f"for a in range({d}):", "    pt = PT[a]"]
                + ["    " + y for run in runs(d_v, width) for y in _sweep([("go", "pt", "AT")], "a", run)]
                + [f"for a in range({d}):"] + [f"    dO[h, a, {col}] *= c[h]" for col in range(d_v)])
    return (["H = QBAR.shape[0]", "N = X.shape[0]", f"XT = numpy.empty(({d}, N))", f"PT = numpy.empty(({d}, N))",
             "for i in range(N):"] + [f"    XT[{a}, i] = X[i, {a}]" for a in range(d)]
            + [f"    PT[{a}, i] = PC[i, {a}]" for a in range(d)]
            + ["for h in numba.prange(H):"] + ["    " + x for x in per_head])
