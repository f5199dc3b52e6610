"""Loop templates for one multi-head attention *layer* and its adjoint (VJP), generated code inside.

The scalar formulas come from :func:`transformer_limits.symbolic.attention_adjoint.adjoint_pieces`
(SymPy derivatives checked at 50 digits by the ``attention-adjoint`` derivation); this module only
places them in loops.  Flavour ``python-numba`` (``numba.njit(parallel=True, cache=True)``), all
heads of a layer per call, parallel over tokens (``prange``), nothing of size N x N stored:

``features``       (h, i) pass: QF = Q x^i, KF = K x^i, VF = V x^i                  (H, N, d_k|d_v)
``forward``        i pass: per head, logits beta <q^i, k^j> over the visible j (all, or j <= i
                   when causal) into a per-thread row, max-shifted softmax, A^i, log Z^i, and the
                   layer field F^i = sum_h c_h O_h A_h^i
``cotangent``      (h, i) pass: g^i = c_h O_h^T p^i and gA^i = <g^i, A^i>
``query_adjoint``  i pass: qbar^i = sum_j sbar_ij d logit/d q (pair score recomputed from log Z)
``key_adjoint``    j pass: kbar^j = sum_i sbar_ij d logit/d k, vbar^j = sum_i P_ij g^i
``token_adjoint``  i pass: xbar^i = sum_h Q_h^T qbar_h^i [+ K_h^T kbar_h^i + V_h^T vbar_h^i]
                   (the bracket is the Lions term; ``lions=0`` drops it, for the wrong-model test)

Array conventions (C order, float64): X (N, d); Qs, Ks (H, d_k, d); Vs (H, d_v, d); Os (H, d, d_v);
c (H,) head weights; A, VF, G, VBAR (H, N, d_v); QF, KF, QBAR, KBAR (H, N, d_k); LOGZ, GA (H, N);
F, PC, XBAR (N, d).
"""

from __future__ import annotations

from pathlib import Path

from transformer_limits import kernel_cache
from transformer_limits.symbolic.attention_adjoint import adjoint_pieces
from transformer_limits.symbolic.codegen import CodeBlock, code_block, indent, source_key, unkeyed_name

__all__ = ["ADJOINT_FLAVOURS", "adjoint_kernel_source", "adjoint_kernel_sources", "adjoint_kernel_spec",
           "write_adjoint_kernel"]

ADJOINT_FLAVOURS = {"python-numba": ".py"}


def adjoint_kernel_spec(d: int, d_k: int, d_v: int, flavour: str) -> str:
    return f"attention-adjoint-kernels:d={d}:d_k={d_k}:d_v={d_v}:{flavour}"


class _Blocks:
    GROUPS = ("query", "key", "logit", "head_out", "cotangent", "g_dot_a", "pair_score", "query_inc",
              "key_inc", "value_inc", "jac_vjp", "lions_vjp")

    def __init__(self, d: int, d_k: int, d_v: int):
        P = adjoint_pieces(d, d_k, d_v)
        self.d, self.d_k, self.d_v = d, d_k, d_v
        self.blocks: dict[str, CodeBlock] = {
            g: code_block(getattr(P, g), prefix=f"{g[0]}{i}") for i, g in enumerate(self.GROUPS)}

    def lines(self, group: str) -> list[str]:
        return self.blocks[group].lines("scalar")

    def fingerprints(self) -> list[str]:
        return [self.blocks[g].fingerprint() for g in self.GROUPS]


def _unpack(name: str, rows: int, cols: int) -> list[str]:
    return [f"{name}_{a}_{b} = {name}s[h, {a}, {b}]" for a in range(rows) for b in range(cols)]


def _loads(sym: str, n: int, arr: str, idx: str) -> list[str]:
    return [f"{sym}_{a} = {arr}[{idx}, {a}]" for a in range(n)]


def _stores(arr: str, idx: str, sym: str, n: int, op: str = "=") -> list[str]:
    return [f"{arr}[{idx}, {a}] {op} {sym}_{a}" for a in range(n)]


def _source_numba(b: _Blocks) -> str:
    d, d_k, d_v = b.d, b.d_k, b.d_v
    njit = "@numba.njit(parallel=True, cache=True, fastmath=False)"
    hi = "h, i"

    def kernel(signature: str, body: list[str]) -> list[str]:
        return ["", "", njit, f"def {signature}:", indent(body, 1)]

    features = (["H = Qs.shape[0]", "N = X.shape[0]", "for t in numba.prange(H * N):",
                 "    h = t // N", "    i = t - h * N"]
                + ["    " + s for s in _unpack("Q", d_k, d) + _unpack("K", d_k, d) + _unpack("V", d_v, d)
                   + _loads("x", d, "X", "i") + b.lines("query")
                   + [s.replace("y_", "x_") for s in b.lines("key")]  # key block is written in y
                   + _stores("QF", hi, "q", d_k) + _stores("KF", hi, "k", d_k) + _stores("VF", hi, "v", d_v)])
    logit_j = _loads("k", d_k, "KF", "h, j") + b.lines("logit")
    forward = (["H = QF.shape[0]", "N = QF.shape[1]", "for i in numba.prange(N):",
                "    row = numpy.empty(N)", "    stop = i + 1 if causal else N"]
               + [f"    f_{a} = 0.0" for a in range(d)]
               + ["    for h in range(H):"]
               + ["        " + s for s in _loads("q", d_k, "QF", hi) + ["m = -math.inf", "for j in range(stop):"]]
               + ["            " + s for s in logit_j + ["row[j] = logit", "if logit > m:", "    m = logit"]]
               + ["        s = 0.0"] + [f"        acc_{c} = 0.0" for c in range(d_v)]
               + ["        for j in range(stop):", "            e = math.exp(row[j] - m)", "            s += e"]
               + [f"            acc_{c} += e * VF[h, j, {c}]" for c in range(d_v)]
               + ["        " + s for s in [f"A_{c} = acc_{c} / s" for c in range(d_v)] + _stores("A", hi, "A", d_v)
                  + ["LOGZ[h, i] = m + math.log(s)", "wh = c[h]"] + _unpack("O", d, d_v) + b.lines("head_out")
                  + [f"f_{a} += o_{a}" for a in range(d)]]
               + ["    " + s for s in _stores("F", "i", "f", d)])
    cotangent = (["H = Os.shape[0]", "N = PC.shape[0]", "for t in numba.prange(H * N):",
                  "    h = t // N", "    i = t - h * N", "    wh = c[h]"]
                 + ["    " + s for s in _unpack("O", d, d_v) + _loads("ct", d, "PC", "i") + b.lines("cotangent")
                    + _stores("G", hi, "g", d_v) + _loads("A", d_v, "A", hi) + b.lines("g_dot_a")
                    + ["GA[h, i] = gA"]])
    def pair_lines(q_idx: str, k_idx: str, lz: str) -> list[str]:
        return (_loads("k", d_k, "KF", k_idx) + _loads("v", d_v, "VF", k_idx) + b.lines("logit")
                + [f"p = math.exp(logit - {lz})"] + b.lines("pair_score"))

    query_adj = (["H = QF.shape[0]", "N = QF.shape[1]", "for i in numba.prange(N):",
                  "    stop = i + 1 if causal else N", "    for h in range(H):"]
                 + ["        " + s for s in _loads("q", d_k, "QF", hi) + _loads("g", d_v, "G", hi)
                    + ["gA = GA[h, i]", "lz = LOGZ[h, i]"] + [f"qb_{b_} = 0.0" for b_ in range(d_k)]
                    + ["for j in range(stop):"]]
                 + ["            " + s for s in pair_lines(hi, "h, j", "lz") + b.lines("query_inc")
                    + [f"qb_{b_} += dq_{b_}" for b_ in range(d_k)]]
                 + ["        " + s for s in _stores("QBAR", hi, "qb", d_k)])
    key_adj = (["H = QF.shape[0]", "N = QF.shape[1]", "for j in numba.prange(N):",
                "    start = j if causal else 0", "    for h in range(H):"]
               + ["        " + s for s in [f"kb_{b_} = 0.0" for b_ in range(d_k)] + [f"vb_{c_} = 0.0" for c_ in range(d_v)]
                  + ["for i in range(start, N):"]]
               + ["            " + s for s in _loads("q", d_k, "QF", hi) + _loads("g", d_v, "G", hi)
                  + ["gA = GA[h, i]"] + pair_lines(hi, "h, j", "LOGZ[h, i]") + b.lines("key_inc")
                  + b.lines("value_inc") + [f"kb_{b_} += dk_{b_}" for b_ in range(d_k)]
                  + [f"vb_{c_} += dv_{c_}" for c_ in range(d_v)]]
               + ["        " + s for s in _stores("KBAR", "h, j", "kb", d_k) + _stores("VBAR", "h, j", "vb", d_v)])
    token_adj = (["H = Qs.shape[0]", "N = QBAR.shape[1]", "for i in numba.prange(N):"]
                 + [f"    xs_{a} = 0.0" for a in range(d)] + ["    for h in range(H):"]
                 + ["        " + s for s in _unpack("Q", d_k, d) + _loads("qb", d_k, "QBAR", hi) + b.lines("jac_vjp")
                    + [f"xs_{a} += xj_{a}" for a in range(d)] + ["if lions:"]]
                 + ["            " + s for s in _unpack("K", d_k, d) + _unpack("V", d_v, d)
                    + _loads("kb", d_k, "KBAR", hi) + _loads("vb", d_v, "VBAR", hi) + b.lines("lions_vjp")
                    + [f"xs_{a} += xl_{a}" for a in range(d)]]
                 + ["    " + s for s in _stores("XBAR", "i", "xs", d)])
    out = ["import math", "", "import numba", "import numpy"]
    out += kernel("features(X, Qs, Ks, Vs, QF, KF, VF)", features)
    out += kernel("forward(QF, KF, VF, Os, c, beta, causal, A, LOGZ, F)", forward)
    out += kernel("cotangent(PC, Os, c, A, G, GA)", cotangent)
    out += kernel("query_adjoint(QF, KF, VF, G, GA, LOGZ, beta, causal, QBAR)", query_adj)
    out += kernel("key_adjoint(QF, KF, VF, G, GA, LOGZ, beta, causal, KBAR, VBAR)", key_adj)
    out += kernel("token_adjoint(Qs, Ks, Vs, QBAR, KBAR, VBAR, lions, XBAR)", token_adj)
    return "\n".join(out) + "\n"


def _header(d: int, d_k: int, d_v: int, flavour: str) -> list[str]:
    return [f"# Generated by transformer_limits from SymPy expressions (derivation attention-adjoint; "
            f"d={d}, d_k={d_k}, d_v={d_v}; flavour {flavour}).",
            "# Do not edit: regenerate with transformer_limits.symbolic.attention_adjoint_kernels.",
            "# Layer field F^i = sum_h c_h O_h A_h^i; adjoint xbar^i = sum_h Q^T qbar + [K^T kbar + V^T vbar] "
            "(Lions term)."]


def adjoint_kernel_source(d: int, d_k: int, d_v: int, flavour: str = "python-numba") -> tuple[str, str]:
    """(file name, source) of the layer forward/adjoint kernels for one flavour."""
    if flavour not in ADJOINT_FLAVOURS:
        raise ValueError(f"unknown adjoint kernel flavour {flavour!r} (known: {', '.join(ADJOINT_FLAVOURS)})")
    b = _Blocks(d, d_k, d_v)
    body = _source_numba(b)
    source = "\n".join(_header(d, d_k, d_v, flavour)) + "\n" + body
    key = source_key(b.fingerprints(), "scalar", body)
    stem = f"attention_adjoint_d{d}_dk{d_k}_dv{d_v}_{flavour.replace('-', '_')}"
    return f"{stem}_{key}{ADJOINT_FLAVOURS[flavour]}", source


def adjoint_kernel_sources(d: int, d_k: int, d_v: int) -> dict[str, str]:
    """File name (without the cache key, for the docs) -> source, per flavour."""
    return dict((unkeyed_name(name), source)
                for name, source in (adjoint_kernel_source(d, d_k, d_v, f) for f in ADJOINT_FLAVOURS))


def write_adjoint_kernel(d: int, d_k: int, d_v: int, flavour: str = "python-numba") -> Path:
    """Generate, store in the kernel cache and index one flavour; return its path."""
    filename, source = adjoint_kernel_source(d, d_k, d_v, flavour)
    stem, _, rest = filename.rpartition("_")
    path = kernel_cache.write_source(stem, rest.split(".")[0], source, ADJOINT_FLAVOURS[flavour])
    kernel_cache.record_source(adjoint_kernel_spec(d, d_k, d_v, flavour), path)
    return path
