"""Loop templates for one multi-head attention *layer* and its adjoint (VJP), generated code inside.

The scalar formulas come from :func:`transformer_limits.symbolic.template_pieces.adjoint_pieces`
(SymPy derivatives checked at 50 digits by the ``attention-adjoint`` derivation); this module only
places them in loops.  The GPU flavours ``python-cuda`` and ``cuda-c`` come from one template in
:mod:`transformer_limits.symbolic.attention_adjoint_cuda` (same blocks, other printers); below, flavour
``python-numba`` (``numba.njit(parallel=True, cache=True)``), all
heads of a layer per call, nothing of size N x N stored.  Key and value features are stored
transposed, KT (H, d_k, N) and VT (H, d_v, N), so that every pair loop runs over the key index j on
contiguous memory; the pair loops use the vectorisable ``fast_exp``
(:mod:`transformer_limits.symbolic.fast_exp`, 1 ulp) and ``fastmath={"contract", "reassoc"}`` (FMA and
reassociated j-sums, no nnan/ninf), so LLVM vectorises them over j (AVX2: four pairs per instruction,
AVX-512: eight).  A pair loop vectorises only if it is a pure j-sum into scalar locals plus stores, or
a contiguous-j update of one output row: several updated rows per loop need more runtime alias checks
than LLVM allows.
Row passes are split into T tasks (T = min(threads, N), chosen by the caller), task t owning rows i = t, t + T, ... (balanced
when causal) and its scratch rows:

``features``       (h, i) pass: QF = Q x^i (H, N, d_k), KT = K x^i, VT = V x^i (transposed)
``forward``        row pass: per head, a row of logits beta <q^i, k^j> over the visible j (all, or
                   j <= i when causal), its maximum (MAX_LANES lanes), the max-shifted softmax sums, A^i, log Z^i, and
                   the layer field F^i = sum_h c_h O_h A_h^i
``adjoint``        row pass in blocks of ADJ_ROWS rows (i0 + r T) per task; per (block, h), for each row:
                   g^i = c_h O_h^T p^i, gA^i = <g^i, A^i>, then one sweep over j (vectorised): logit,
                   P_ij = exp(logit - log Z^i), pair score sbar_ij, qbar^i = sum_j sbar_ij d logit/d q
                   (j-sums in scalar locals), P_ij and sbar_ij into the block's scratch rows, and the
                   Jacobian term XJ^i = sum_h Q_h^T qbar_h^i; then one contiguous-j sweep per component
                   (vectorised) adds the block's kbar^j += sbar_ij d logit/d k, vbar^j += P_ij g^i into task
                   t's partials KBP[t], VBP[t] (T, H, d_k|d_v, N), zeroed by the task on entry (the caller
                   may reuse the arrays)
``finish``         per (head, block of FIN_KEYS keys): KBT, VBT = the partials summed over t in order
                   (bitwise numpy's sum over axis 0); then per block of keys, xbar^j = XJ^j + sum_h (K_h^T
                   kbar_h^j + V_h^T vbar_h^j) (h in order; the Lions term once per key, not once per task;
                   ``lions=0`` drops it, for the wrong-model test)

Array conventions (C order, float64): X (N, d); Qs, Ks (H, d_k, d); Vs (H, d_v, d); Os (H, d, d_v);
c (H,) head weights; A (H, N, d_v); QF, QBAR (H, N, d_k); KT, KBP[t] (H, d_k, N); VT, VBP[t] (H, d_v, N);
LOGZ (H, N); F, PC, XJ, XB (N, d); KBT (H, d_k, N), VBT (H, d_v, N).
"""

from __future__ import annotations

import re

from transformer_limits.numeric.flavours import PYTHON_NUMBA, flavour_named
from transformer_limits.numeric.kernel_family import LAYER_ADJOINT
from transformer_limits.symbolic.attention_adjoint_cuda import cuda_source
from transformer_limits.symbolic.codegen import (CodeBlock, code_block, indent, lane_max_lines, source_key,
                                                 typed_python_source, unkeyed_name)
from transformer_limits.symbolic.fast_exp import fast_exp_lines
from transformer_limits.symbolic.template_pieces import adjoint_pieces

__all__ = ["adjoint_kernel_source", "adjoint_kernel_sources"]

ADJOINT_FLAVOURS = LAYER_ADJOINT.flavours  # flavour name -> Flavour record (kernel family LAYER_ADJOINT)
MAX_LANES = 8  # lanes of the row-maximum loop (a power of two)
ADJ_ROWS = 4  # query rows per block of the adjoint's key/value partial updates
FIN_KEYS = 512  # keys per task of the adjoint's finish (partial sums and Lions term)


class _Blocks:
    GROUPS = ("query", "key", "logit", "head_out", "cotangent", "g_dot_a", "pair_score", "query_inc",
              "key_inc", "value_inc", "jac_vjp", "lions_vjp")

    def __init__(self, d: int, d_k: int, d_v: int):
        P = adjoint_pieces(d, d_k, d_v)
        self.d, self.d_k, self.d_v = d, d_k, d_v
        self.blocks: dict[str, CodeBlock] = {
            g: code_block(getattr(P, g), prefix=f"{g[0]}{i}") for i, g in enumerate(self.GROUPS)}

    def lines(self, group: str, printer: str = "scalar", declare: str = "") -> list[str]:
        return self.blocks[group].lines(printer, declare=declare)

    def fingerprints(self) -> list[str]:
        return [self.blocks[g].fingerprint() for g in self.GROUPS]


def _unpack(name: str, rows: int, cols: int) -> list[str]:
    return [f"{name}_{a}_{b} = {name}s[h, {a}, {b}]" for a in range(rows) for b in range(cols)]


def _loads(sym: str, n: int, arr: str, idx: str) -> list[str]:
    return [f"{sym}_{a} = {arr}[{idx}, {a}]" for a in range(n)]


def _stores(arr: str, idx: str, sym: str, n: int) -> list[str]:
    return [f"{arr}[{idx}, {a}] = {sym}_{a}" for a in range(n)]


def _rows(sym: str, n: int, arr: str, h: str, j: str) -> list[str]:
    """Loads from a transposed (H, n, N) feature array (contiguous in the token index j)."""
    return [f"{sym}_{a} = {arr}[{h}, {a}, {j}]" for a in range(n)]


def _needed(lines: list[str], *targets: str) -> list[str]:
    """The lines of a straight-line block (``name = expr``) that the ``targets`` depend on, in order."""
    need, kept = set(targets), []
    for line in reversed(lines):
        lhs, _, rhs = line.partition(" = ")
        if lhs in need:
            kept.append(line)
            need |= set(re.findall(r"[A-Za-z_]\w*", rhs))
    return kept[::-1]


def _cols(arr: str, h: str, i: str, sym: str, n: int) -> list[str]:
    return [f"{arr}[{h}, {a}, {i}] = {sym}_{a}" for a in range(n)]


def _source_numba(b: _Blocks, precision: str = "float64") -> str:
    """The numba kernels in ``precision`` (float32: the float32 ``fast_exp`` and the typed-literal pass of
    :func:`~transformer_limits.symbolic.codegen.typed_python_source`, so scratch rows, partial sums and
    softmax sums are float32 like the CUDA C float32 compile; float64 as it always was)."""
    d, d_k, d_v = b.d, b.d_k, b.d_v
    njit = "@numba.njit(parallel=True, cache=True, fastmath=False)"
    # pair loops: contraction (FMA) and reassociation of the j-sums, so that LLVM vectorises them;
    # no nnan/ninf (NaN and inf propagate as without fastmath)
    njit_pairs = '@numba.njit(parallel=True, cache=True, fastmath={"contract", "reassoc"})'
    hi = "h, i"

    def kernel(signature: str, body: list[str], deco: str = njit) -> list[str]:
        return ["", "", deco, f"def {signature}:", indent(body, 1)]

    def by_row(body: list[str], setup: tuple[str, ...] = (), rows: int = 1) -> list[str]:
        """Rows i = t, t + T, ... per task t < T (balanced when causal), scratch rows per task."""
        return (["H = QF.shape[0]", "N = QF.shape[1]", *setup, "for t in numba.prange(T):"]
                + [f"    row{'' if r == 0 else r + 1} = numpy.empty(N)" for r in range(rows)]
                + ["    for i in range(t, N, T):",
                 "        stop = i + 1 if causal else N"] + ["        " + s for s in body])

    features = (["H = Qs.shape[0]", "N = X.shape[0]", "for t in numba.prange(H * N):",
                 "    h = t // N", "    i = t - h * N"]
                + ["    " + s for s in _unpack("Q", d_k, d) + _unpack("K", d_k, d) + _unpack("V", d_v, d)
                   + _loads("x", d, "X", "i") + b.lines("query")
                   + [s.replace("y_", "x_") for s in b.lines("key")]  # key block is written in y
                   + _stores("QF", hi, "q", d_k) + _cols("KT", "h", "i", "k", d_k) + _cols("VT", "h", "i", "v", d_v)])
    logit_row = (["for j in range(stop):"]
                 + ["    " + s for s in _rows("k", d_k, "KT", "h", "j") + b.lines("logit") + ["row[j] = logit"]])
    # row maximum in MAX_LANES independent lanes (SLP-vectorised compare/select; NaN is skipped as before)
    row_max = lane_max_lines("row", "stop", MAX_LANES)
    # heads outermost within a task: its rows sweep one head's keys and values (2 (d_k + d_v) N floats,
    # kept in L2) before the next head's, instead of every head's per row (H times that: past L2 at
    # H = 32, N = 1024).  F[i] is summed over h in the same order as before (bitwise)
    forward = (["H = QF.shape[0]", "N = QF.shape[1]", "for t in numba.prange(T):", "    row = numpy.empty(N)",
                "    for i in range(t, N, T):"] + [f"        F[i, {a}] = 0.0" for a in range(d)]
               + ["    for h in range(H):", "        wh = c[h]"] + ["        " + s for s in _unpack("O", d, d_v)]
               + ["        for i in range(t, N, T):", "            stop = i + 1 if causal else N"]
               + ["            " + s for s in _loads("q", d_k, "QF", hi) + logit_row + row_max
                  + ["s = 0.0"] + [f"acc_{c} = 0.0" for c in range(d_v)]
                  + ["for j in range(stop):", "    e = fast_exp(row[j] - m)", "    s += e"]
                  + [f"    acc_{c} += e * VT[h, {c}, j]" for c in range(d_v)]
                  + [f"A_{c} = acc_{c} / s" for c in range(d_v)] + _stores("A", hi, "A", d_v)
                  + ["LOGZ[h, i] = m + math.log(s)"]
                  + b.lines("head_out") + [f"F[i, {a}] += o_{a}" for a in range(d)]])
    # Rows are taken in blocks of R = ADJ_ROWS (rows i0 + r T, r < R, of task t).  Per (block, head):
    # sweep 1 per row (vectorised over j): logit, P_ij, sbar_ij and the j-sums qbar^i; P_ij and sbar_ij go
    # to the scratch rows PR[r], SR[r] (zero beyond the row's visible keys); sweep 2 per component
    # (vectorised over j, one contiguous-j update each): task partials kbar^j, vbar^j (T, H, d_k|d_v, N)
    # += the block's R pair terms
    R = ADJ_ROWS

    def renamed(lines: list[str], r: int) -> list[str]:
        """Per-pair key/value lines for block row r: symbols of the row get the suffix _r{r}."""
        return [re.sub(r"\b(sbar|p|q_\d+|g_\d+|_k\d+|dk_\d+|dv_\d+)\b", rf"\1_r{r}", s_) for s_ in lines]

    row_pass = (_loads("ct", d, "PC", "i") + ["wh = c[h]"] + b.lines("cotangent") + _loads("A", d_v, "A", hi)
                + b.lines("g_dot_a") + _loads("q", d_k, "QF", hi) + ["lz = LOGZ[h, i]"]
                + [f"qb_{b_} = 0.0" for b_ in range(d_k)] + ["for j in range(stop):"]
                + ["    " + s_ for s_ in _rows("k", d_k, "KT", "h", "j") + _rows("v", d_v, "VT", "h", "j")
                   + b.lines("logit") + ["p = fast_exp(logit - lz)"] + b.lines("pair_score")
                   + b.lines("query_inc") + [f"qb_{b_} += dq_{b_}" for b_ in range(d_k)]
                   + ["PR[r, j] = p", "SR[r, j] = sbar"]]
                + ["for j in range(stop, smax):", "    PR[r, j] = 0.0", "    SR[r, j] = 0.0"]
                + _stores("QBAR", hi, "qb", d_k) + b.lines("jac_vjp") + [f"XJ[i, {a}] += xj_{a}" for a in range(d)]
                + [f"QR[r, {b_}] = q_{b_}" for b_ in range(d_k)] + [f"GR[r, {c_}] = g_{c_}" for c_ in range(d_v)])
    empty_row = (["for j in range(smax):", "    PR[r, j] = 0.0", "    SR[r, j] = 0.0"]
                 + [f"QR[r, {b_}] = 0.0" for b_ in range(d_k)] + [f"GR[r, {c_}] = 0.0" for c_ in range(d_v)])
    def partial_updates(n: int, coef: str, coefs: str, pair: str, pairs: str, group: str, out: str, arr: str):
        """Per component e < n: arr[t, h, e, j] += the block's R terms ``out_e`` (SymPy lines of ``group``)."""
        return [s_ for e in range(n) for s_ in
                [f"{coef}_{e}_r{r} = {coefs}[{r}, {e}]" for r in range(R)] + ["for j in range(smax):"]
                + ["    " + s_ for r in range(R)
                   for s_ in [f"{pair}_r{r} = {pairs}[{r}, j]"] + renamed(_needed(b.lines(group), f"{out}_{e}"), r)]
                + [f"    {arr}[t, h, {e}, j] += " + " + ".join(f"{out}_{e}_r{r}" for r in range(R))]]

    key_updates = (partial_updates(d_k, "q", "QR", "sbar", "SR", "key_inc", "dk", "KBP")
                   + partial_updates(d_v, "g", "GR", "p", "PR", "value_inc", "dv", "VBP"))
    adjoint = (["H = QF.shape[0]", "N = QF.shape[1]", "T = KBP.shape[0]", "for t in numba.prange(T):",
                "    for h in range(H):"]
               + ["        for j in range(N):"] + [f"            KBP[t, h, {b_}, j] = 0.0" for b_ in range(d_k)]
               + [f"            VBP[t, h, {c_}, j] = 0.0" for c_ in range(d_v)]
               + [
                f"    PR = numpy.empty(({R}, N))", f"    SR = numpy.empty(({R}, N))", f"    QR = numpy.empty(({R}, {d_k}))",
                f"    GR = numpy.empty(({R}, {d_v}))", "    for i in range(t, N, T):"]
               + [f"        XJ[i, {a}] = 0.0" for a in range(d)]
               # heads outermost within a task (as in forward): the task's row blocks sweep one head's keys,
               # values and partials in L2 before the next head's; every sum keeps its order (bitwise)
               + ["    for h in range(H):"]
               + ["        " + s_ for s_ in _unpack("O", d, d_v) + _unpack("Q", d_k, d)]
               + [f"        for i0 in range(t, N, {R} * T):",
                  f"            ilast = min(i0 + {R - 1} * T, i0 + (N - 1 - i0) // T * T)",
                  "            smax = ilast + 1 if causal else N", f"            for r in range({R}):"]
               + ["                " + s_ for s_ in ["i = i0 + r * T", "if i < N:", "    stop = i + 1 if causal else N"]]
               + ["                    " + s_ for s_ in row_pass] + ["                else:"]
               + ["                    " + s_ for s_ in empty_row]
               + ["            " + s_ for s_ in key_updates])
    # finish: (1) per (head, block of FIN_KEYS keys): kbar, vbar = the task partials summed over t in order
    # (bitwise numpy's sum over axis 0; one contiguous-j loop per component, vectorised); (2) per block of
    # keys, the Lions term once per key: xbar^j = XJ^j + sum_h (K_h^T kbar_h^j + V_h^T vbar_h^j), h in order
    comps = [("KBP", "KBT", e) for e in range(d_k)] + [("VBP", "VBT", e) for e in range(d_v)]
    sums = [s_ for arr, out_, e in comps
            for s_ in ["for j in range(j0, j1):", f"    {out_}[h, {e}, j] += {arr}[t, h, {e}, j]"]]
    first = [s_ for arr, out_, e in comps
             for s_ in ["for j in range(j0, j1):", f"    {out_}[h, {e}, j] = {arr}[0, h, {e}, j]"]]
    lions_term = (_unpack("K", d_k, d) + _unpack("V", d_v, d) + ["for j in range(j0, j1):"]
                  + ["    " + s_ for s_ in [f"kb_{b_} = KBT[h, {b_}, j]" for b_ in range(d_k)]
                     + [f"vb_{c_} = VBT[h, {c_}, j]" for c_ in range(d_v)] + b.lines("lions_vjp")
                     + [f"XB[j, {a}] += xl_{a}" for a in range(d)]])
    blocks = f"(N + {FIN_KEYS - 1}) // {FIN_KEYS}"
    finish = (["T = KBP.shape[0]", "H = KBP.shape[1]", "N = KBP.shape[3]", f"NB = {blocks}",
               "for task in numba.prange(H * NB):"]
              + ["    " + s_ for s_ in ["h = task // NB", f"j0 = (task - h * NB) * {FIN_KEYS}",
                                        f"j1 = min(N, j0 + {FIN_KEYS})"]
                 + first + ["for t in range(1, T):"] + ["    " + x for x in sums]]
              + ["for jb in numba.prange(NB):"]
              + ["    " + s_ for s_ in [f"j0 = jb * {FIN_KEYS}", f"j1 = min(N, j0 + {FIN_KEYS})",
                                        "for j in range(j0, j1):"]
                 + [f"    XB[j, {a}] = XJ[j, {a}]" for a in range(d)]
                 + ["if lions:"] + ["    " + x for x in ["for h in range(H):"] + ["    " + y for y in lions_term]]])
    out = ["import math", "", "import numba", "import numpy"] + fast_exp_lines(precision)
    out += kernel("features(X, Qs, Ks, Vs, QF, KT, VT)", features)
    out += kernel("forward(QF, KT, VT, Os, c, beta, causal, T, A, LOGZ, F)", forward, njit_pairs)
    out += kernel("adjoint(PC, Qs, Os, c, QF, KT, VT, A, LOGZ, beta, causal, QBAR, KBP, VBP, XJ)", adjoint, njit_pairs)
    out += kernel("finish(KBP, VBP, Ks, Vs, XJ, lions, KBT, VBT, XB)", finish)
    # whole stacks of L layers in one call (residual x_{r+1} = x_r + F_r(x_r), p_r = p_{r+1} + xbar_r): the
    # same kernels in the same order as L host calls, without L times the Python and dispatch overhead
    residual = lambda arr, out, a, b: ["for i in range(N):"] + [  # noqa: E731
        f"    {arr}[{out}, i, {e}] = {arr}[{a}, i, {e}] + {b}[i, {e}]" for e in range(d)]
    forward_stack = (["L = Qs.shape[0]", "N = states.shape[1]", "for r in range(L):"]
                     + ["    " + s_ for s_ in ["features(states[r], Qs[r], Ks[r], Vs[r], QF[r], KT[r], VT[r])",
                                               "forward(QF[r], KT[r], VT[r], Os[r], c[r], beta, causal, T, A[r], "
                                               "LOGZ[r], F)"] + residual("states", "r + 1", "r", "F")])
    adjoint_stack = (["L = Qs.shape[0]", "N = p.shape[1]", "for r in range(L - 1, -1, -1):"]
                     + ["    " + s_ for s_ in ["adjoint(p[r + 1], Qs[r], Os[r], c[r], QF[r], KT[r], VT[r], A[r], LOGZ[r], "
                                               "beta, causal, QBAR, KBP, VBP, XJ)",
                                               "finish(KBP, VBP, Ks[r], Vs[r], XJ, lions, KBT, VBT, XB)"]
                        + residual("p", "r", "r + 1", "XB")])
    stack_jit = "@numba.njit(parallel=False, cache=True, fastmath=False)"
    out += kernel("forward_stack(states, Qs, Ks, Vs, Os, c, beta, causal, T, QF, KT, VT, A, LOGZ, F)",
                  forward_stack, stack_jit)
    out += kernel("adjoint_stack(p, Qs, Ks, Vs, Os, c, QF, KT, VT, A, LOGZ, beta, causal, lions, QBAR, KBP, VBP, XJ, "
                  "KBT, VBT, XB)", adjoint_stack, stack_jit)
    return typed_python_source("\n".join(out) + "\n", precision)


def _header(d: int, d_k: int, d_v: int, flavour: str) -> list[str]:
    lines = [f"# Generated by transformer_limits from SymPy expressions (derivation attention-adjoint; "
             f"d={d}, d_k={d_k}, d_v={d_v}; flavour {flavour}).",
             "# Do not edit: regenerate with transformer_limits.symbolic.attention_adjoint_kernels.",
             "# Layer field F^i = sum_h c_h O_h A_h^i; adjoint xbar^i = sum_h Q^T qbar + [K^T kbar + V^T vbar] "
             "(Lions term)."]
    return [(flavour_named(flavour).comment + s[1:]) if flavour_named(flavour).comment != "#" else s for s in lines]


def adjoint_kernel_source(d: int, d_k: int, d_v: int, flavour: str = PYTHON_NUMBA.name,
                          precision: str = "float64") -> tuple[str, str]:
    """(file name, source) of the layer forward/adjoint kernels for one flavour; ``precision`` float32
    only for a flavour with typed sources (python-numba: its own file, ``..._float32_<key>.py``)."""
    if flavour not in ADJOINT_FLAVOURS:
        raise ValueError(f"unknown adjoint kernel flavour {flavour!r} (known: {', '.join(ADJOINT_FLAVOURS)})")
    flav = flavour_named(flavour)
    flav.check_source_precision(precision)
    b = _Blocks(d, d_k, d_v)
    body = _source_numba(b, precision) if flav is PYTHON_NUMBA else cuda_source(b, flavour)
    source = "\n".join(_header(d, d_k, d_v, flavour)) + "\n" + body
    key = source_key(b.fingerprints(), flav.printer, body, precision)
    stem = f"attention_adjoint_d{d}_dk{d_k}_dv{d_v}_{flavour.replace('-', '_')}{flav.source_tag(precision)}"
    return f"{stem}_{key}{flav.suffix}", source


def adjoint_kernel_sources(d: int, d_k: int, d_v: int) -> dict[str, str]:
    """File name (without the cache key, for the docs) -> source, per flavour."""
    return dict((unkeyed_name(name), source)
                for name, source in (adjoint_kernel_source(d, d_k, d_v, f) for f in ADJOINT_FLAVOURS))
