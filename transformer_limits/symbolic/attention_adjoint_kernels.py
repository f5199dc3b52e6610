"""Loop templates for one multi-head attention *layer* and its adjoint (VJP), generated code inside.

The scalar formulas come from :func:`transformer_limits.symbolic.attention_adjoint.adjoint_pieces`
(SymPy derivatives checked at 50 digits by the ``attention-adjoint`` derivation); this module only
places them in loops.  Flavour ``python-numba`` (``numba.njit(parallel=True, cache=True)``), all
heads of a layer per call, nothing of size N x N stored.  Key and value features are stored
transposed, KT (H, d_k, N) and VT (H, d_v, N), so that every pair loop runs over the key index j on
contiguous memory; the pair loops use the vectorisable ``fast_exp``
(:mod:`transformer_limits.symbolic.fast_exp`, 1 ulp) and ``fastmath={"contract", "reassoc"}`` (FMA and
reassociated j-sums, no nnan/ninf), so LLVM vectorises them over j (AVX2: four pairs per instruction).
Row passes are split into T tasks (T = min(threads, N), chosen by the caller), task t owning rows i = t, t + T, ... (balanced
when causal) and one scratch row:

``features``       (h, i) pass: QF = Q x^i (H, N, d_k), KT = K x^i, VT = V x^i (transposed)
``forward``        row pass: per head, a row of logits beta <q^i, k^j> over the visible j (all, or
                   j <= i when causal), its maximum, the max-shifted softmax sums, A^i, log Z^i, and
                   the layer field F^i = sum_h c_h O_h A_h^i
``adjoint``        row pass, one sweep over j per (h, i): g^i = c_h O_h^T p^i, gA^i = <g^i, A^i>,
                   P_ij = exp(logit - log Z^i), pair score sbar_ij; qbar^i = sum_j sbar_ij d logit/d q
                   (a j-sum), and task t's partial kbar^j += sbar_ij d logit/d k,
                   vbar^j += P_ij g^i into KBP[t], VBP[t] (T, H, d_k|d_v, N), zero on entry
``token_adjoint``  i pass: kbar, vbar = sums of the task partials; xbar^i = sum_h Q_h^T qbar_h^i
                   [+ K_h^T kbar_h^i + V_h^T vbar_h^i] (the bracket is the Lions term; ``lions=0``
                   drops it, for the wrong-model test)

Array conventions (C order, float64): X (N, d); Qs, Ks (H, d_k, d); Vs (H, d_v, d); Os (H, d, d_v);
c (H,) head weights; A, VBAR (H, N, d_v); QF, QBAR, KBAR (H, N, d_k); KT (H, d_k, N); VT (H, d_v, N);
LOGZ (H, N); F, PC, XBAR (N, d).
"""

from __future__ import annotations

from pathlib import Path

from transformer_limits import kernel_cache
from transformer_limits.symbolic.attention_adjoint import adjoint_pieces
from transformer_limits.symbolic.codegen import CodeBlock, code_block, indent, source_key, unkeyed_name
from transformer_limits.symbolic.fast_exp import fast_exp_lines

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


def _stores(arr: str, idx: str, sym: str, n: int) -> list[str]:
    return [f"{arr}[{idx}, {a}] = {sym}_{a}" for a in range(n)]


def _rows(sym: str, n: int, arr: str, h: str, j: str) -> list[str]:
    """Loads from a transposed (H, n, N) feature array (contiguous in the token index j)."""
    return [f"{sym}_{a} = {arr}[{h}, {a}, {j}]" for a in range(n)]


def _cols(arr: str, h: str, i: str, sym: str, n: int) -> list[str]:
    return [f"{arr}[{h}, {a}, {i}] = {sym}_{a}" for a in range(n)]


def _source_numba(b: _Blocks) -> str:
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
    row_max = ["m0 = -math.inf", "m1 = -math.inf", "j = 0", "while j + 1 < stop:",
               "    l0 = row[j]", "    l1 = row[j + 1]", "    m0 = l0 if l0 > m0 else m0",
               "    m1 = l1 if l1 > m1 else m1", "    j += 2", "if j < stop and row[j] > m0:", "    m0 = row[j]",
               "m = m1 if m1 > m0 else m0"]
    forward = by_row([f"f_{a} = 0.0" for a in range(d)] + ["for h in range(H):"]
                     + ["    " + s for s in _loads("q", d_k, "QF", hi) + logit_row + row_max
                        + ["s = 0.0"] + [f"acc_{c} = 0.0" for c in range(d_v)]
                        + ["for j in range(stop):", "    e = fast_exp(row[j] - m)", "    s += e"]
                        + [f"    acc_{c} += e * VT[h, {c}, j]" for c in range(d_v)]
                        + [f"A_{c} = acc_{c} / s" for c in range(d_v)] + _stores("A", hi, "A", d_v)
                        + ["LOGZ[h, i] = m + math.log(s)", "wh = c[h]"] + _unpack("O", d, d_v)
                        + b.lines("head_out") + [f"f_{a} += o_{a}" for a in range(d)]]
                     + _stores("F", "i", "f", d))
    # sweeps 1-3 (vectorised over j): logits, P_ij, then sbar_ij into the scratch rows and qbar^i as j-sums;
    # sweep 4 (per j, SLP-vectorised over components): task partials kbar^j, vbar^j (T, H, N, d_k|d_v)
    adjoint = by_row(_loads("ct", d, "PC", "i") + ["for h in range(H):"]
                     + ["    " + s for s in ["wh = c[h]"] + _unpack("O", d, d_v) + b.lines("cotangent")
                        + _loads("A", d_v, "A", hi) + b.lines("g_dot_a") + _loads("q", d_k, "QF", hi)
                        + ["lz = LOGZ[h, i]"] + logit_row + ["for j in range(stop):", "    row[j] = fast_exp(row[j] - lz)"]
                        + [f"qb_{b_} = 0.0" for b_ in range(d_k)] + ["for j in range(stop):"]]
                     + ["        " + s for s in _rows("k", d_k, "KT", "h", "j") + _rows("v", d_v, "VT", "h", "j")
                        + ["p = row[j]"] + b.lines("pair_score")
                        + b.lines("query_inc") + [f"qb_{b_} += dq_{b_}" for b_ in range(d_k)]
                        + ["row2[j] = sbar"]]
                     + ["    " + s for s in _stores("QBAR", hi, "qb", d_k) + ["for j in range(stop):"]]
                     + ["        " + s for s in ["p = row[j]", "sbar = row2[j]"] + b.lines("key_inc")
                        + b.lines("value_inc") + [f"KBP[t, h, j, {b_}] += dk_{b_}" for b_ in range(d_k)]
                        + [f"VBP[t, h, j, {c_}] += dv_{c_}" for c_ in range(d_v)]],
                     setup=("T = KBP.shape[0]",), rows=2)
    token_adj = (["H = Qs.shape[0]", "N = QBAR.shape[1]", "T = KBP.shape[0]", "for i in numba.prange(N):"]
                 + [f"    xs_{a} = 0.0" for a in range(d)] + ["    for h in range(H):"]
                 + ["        " + s for s in [f"kb_{b_} = 0.0" for b_ in range(d_k)] + [f"vb_{c_} = 0.0" for c_ in range(d_v)]
                    + ["for t in range(T):"] + [f"    kb_{b_} += KBP[t, h, i, {b_}]" for b_ in range(d_k)]
                    + [f"    vb_{c_} += VBP[t, h, i, {c_}]" for c_ in range(d_v)]
                    + _stores("KBAR", hi, "kb", d_k) + _stores("VBAR", hi, "vb", d_v)
                    + _unpack("Q", d_k, d) + _loads("qb", d_k, "QBAR", hi) + b.lines("jac_vjp")
                    + [f"xs_{a} += xj_{a}" for a in range(d)] + ["if lions:"]]
                 + ["            " + s for s in _unpack("K", d_k, d) + _unpack("V", d_v, d) + b.lines("lions_vjp")
                    + [f"xs_{a} += xl_{a}" for a in range(d)]]
                 + ["    " + s for s in _stores("XBAR", "i", "xs", d)])
    out = ["import math", "", "import numba", "import numpy"] + fast_exp_lines()
    out += kernel("features(X, Qs, Ks, Vs, QF, KT, VT)", features)
    out += kernel("forward(QF, KT, VT, Os, c, beta, causal, T, A, LOGZ, F)", forward, njit_pairs)
    out += kernel("adjoint(PC, Os, c, QF, KT, VT, A, LOGZ, beta, causal, QBAR, KBP, VBP)", adjoint, njit_pairs)
    out += kernel("token_adjoint(Qs, Ks, Vs, QBAR, KBP, VBP, lions, KBAR, VBAR, XBAR)", token_adj)
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
