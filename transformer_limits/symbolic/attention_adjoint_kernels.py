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
The forward's row passes are split into T tasks (chosen by the caller), task t owning rows i = t, t + T,
... (balanced when causal); the adjoint's into tasks (h, g), head h and rows i = g, g + G, ... (G row
groups per head, chosen by the caller):

``features``       per (head, block of FEAT_TOKENS tokens), one loop over the tokens per output component
                   (vectorised over tokens, unsigned indices): QF = Q x^i (H, N, d_k), KT = K x^i,
                   VT = V x^i (transposed); ``features_serial`` is the same on the calling thread (the
                   layer stacks use it for small H N, where a parallel launch costs more than the work)
``forward``        per task and head, rows in pairs (i, i + T): (1) one sweep over the visible keys j
                   (all, or j <= i when causal) writes both rows' logits beta <q^i, k^j> and their maxima
                   (an integer max of order keys: vectorised, the same maximum as a float max), each key's
                   features loaded once for the two rows (at d_k > FWD_CHUNK in sweeps over FWD_CHUNK
                   components each, partial dots kept in the rows, so that no sweep spills registers);
                   (2) per row, e_j = exp(logit - m) in place and its sum s; (3) sweeps over the values
                   for both rows (FWD_CHUNK components each): A^i = sum_j e_j v^j / s;
                   log Z^i = m + log s; F^i = sum_h c_h O_h A_h^i (h in order).  With a softmax tape E
                   (H, N, N) (non-empty: the caller wants it), the rows are the tape's rows E[h, i],
                   left holding E_ij = e_j = exp(logit - m) unnormalised (P_ij = E_ij / s), zero past a
                   causal row's visible keys
``adjoint``        per task (h, g), rows in blocks of ADJ_ROWS (i0 + r G): each row's g^i = c_h O_h^T p^i,
                   gA^i = <g^i, A^i> and key coefficients kc^i = d logit / d k; then sweeps over j
                   (vectorised), each with few live registers: the logits of two rows at a time (shared
                   key loads) into the scratch rows PR; per row P_ij = exp(logit - log Z^i) in place (with
                   a tape E (H, N, N): neither, the forward's E_ij read from the tape and copied to PR in
                   the next sweep, which also sums s_i = sum_j E_ij; the row's sums below and its
                   coefficients g^i, kc^i are then scaled by 1 / s_i once); per
                   row the pair scores sbar_ij into the scratch SR, then (a second sweep, reading SR)
                   qbar^i = sum_j sbar_ij d logit/d q; then
                   contiguous-j sweeps, each over a run of ADJ_UPDATE_COMPONENTS components (the block's
                   pair terms loaded once per run), add the block's kbar^j += sbar_ij kc^i and
                   vbar^j += P_ij g^i to the task's partials KBP[g, h], VBP[g, h] (G, H, d_k|d_v, N),
                   zeroed by the task on entry (the caller may reuse the arrays); G = 1 leaves nothing to
                   sum
``finish``         per (head, block of FIN_KEYS keys): KBT, VBT = the partials summed over g in order;
                   then per block of tokens, xbar^j = sum_h [Q_h^T qbar_h^j + K_h^T kbar_h^j + V_h^T
                   vbar_h^j] (h in order; the Lions term, K^T kbar + V^T vbar, once per key; ``lions=0``
                   drops it, for the wrong-model test)
``param_grads``    per head: dQ_h = sum_i qbar_h^i x^iT, dK_h, dV_h likewise, dO_h = c_h sum_i p^i A_h^iT
                   (:mod:`transformer_limits.symbolic.attention_param_grads`), for a pass with parameter
                   gradients

Array conventions (C order, float64): X (N, d); Qs, Ks (H, d_k, d); Vs (H, d_v, d); Os (H, d, d_v);
c (H,) head weights; A (H, N, d_v); QF, QBAR (H, N, d_k); KT, KBP[g] (H, d_k, N_s); VT, VBP[g] (H, d_v, N_s);
LOGZ (H, N); F, PC, XB (N, d); KBT (H, d_k, N), VBT (H, d_v, N); dQ, dK (H, d_k, d), dV (H, d_v, d),
dO (H, d, d_v); the softmax tape E (H, N, N), or an
empty (H, 0, 0) array for none (the kernels test its second axis).  N_s >= N is the token stride of the
arrays the pair loops sweep (the caller's choice; columns j >= N are never read): rows whose length in
bytes is a multiple of 4 KiB all map to the same cache sets, and the key-side sweeps, which walk 16 or
more such rows at once, then miss in L1 on every access (the adjoint 1.35x slower at N = 1024 than with
N_s = N + 8); the adjoint's scratch rows PR, SR take the stride of KBP.
"""

from __future__ import annotations

import re

import sympy as sp

from transformer_limits.numeric.flavours import PYTHON_NUMBA, flavour_named
from transformer_limits.numeric.kernel_family import LAYER_ADJOINT
from transformer_limits.symbolic.attention_adjoint_cuda import cuda_source
from transformer_limits.symbolic.attention_layer_stacks import stack_kernels
from transformer_limits.symbolic.attention_param_grads import param_grads_body, runs as _runs
from transformer_limits.symbolic.codegen import (CodeBlock, code_block, indent, order_key_lines, source_key,
                                                 typed_python_source, unkeyed_name)
from transformer_limits.symbolic.fast_exp import fast_exp_lines
from transformer_limits.symbolic.template_pieces import adjoint_pieces

__all__ = ["adjoint_kernel_source", "adjoint_kernel_sources"]

ADJOINT_FLAVOURS = LAYER_ADJOINT.flavours  # flavour name -> Flavour record (kernel family LAYER_ADJOINT)
ADJ_ROWS = 4  # query rows per block of the adjoint's key/value partial updates
# components per sweep of the adjoint's key/value partial updates: each sweep loads the block's ADJ_ROWS
# pair terms once for all of them (one component per sweep: ADJ_ROWS + 1 loads and a store per ADJ_ROWS
# FMAs, bound by loads on Zen 1, which splits a 256-bit load in two); 3 by measurement (docs/performance.md)
ADJ_UPDATE_COMPONENTS = 3
FIN_KEYS = 512  # keys per task of the adjoint's finish (partial sums and Lions term)
FEAT_TOKENS = 256  # tokens per task of the feature maps
# components per joint sweep of the forward's two-row block: the logit (and value) sweeps of two rows over
# all d_k (d_v) components hold 2 d_k query broadcasts (2 d_v accumulators) and the d_k (d_v) key (value)
# loads at once, past the 16 vector registers of AVX2 at d_k = 8: LLVM then spills the loads to the stack
# every iteration (the logit sweep 3x, the value sweep 2x their FMA bound on Zen 1); four at a time fit
FWD_CHUNK = 4
# token-heads H N from which a layer stack computes the feature maps in parallel: below, the launch costs
# more than the work (N = 128, H = 8, 1024 items: 1.19x slower in parallel); from 8192 (N = 256, H = 32)
# the stack's median is 0.87x (the worker is not left idle through a serial phase each layer; 4096: even)
FEAT_PARALLEL_ITEMS = 8192


class _Blocks:
    GROUPS = ("query", "key", "logit", "head_out", "cotangent", "g_dot_a", "pair_score", "query_inc",
              "key_inc", "value_inc", "jac_vjp", "lions_vjp", "key_coef")

    def __init__(self, d: int, d_k: int, d_v: int):
        P = adjoint_pieces(d, d_k, d_v)
        self.d, self.d_k, self.d_v = d, d_k, d_v
        self.logit = P.logit["logit"]
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


def _chunks(n: int) -> list[range]:
    """Components 0..n-1 in runs of FWD_CHUNK."""
    return _runs(n, FWD_CHUNK)


def _dot_logit(b: _Blocks) -> bool:
    """Whether the derived logit is beta <q, k> (so that the two-row sweeps may split it into partial dots
    over chunks of components, :data:`FWD_CHUNK`), with more than one chunk."""
    syms = {str(x): x for x in b.logit.free_symbols}
    names = ["beta"] + [f"{s}_{a}" for s in "qk" for a in range(b.d_k)]
    if b.d_k <= FWD_CHUNK or not set(syms) <= set(names) or "beta" not in syms:
        return False
    dot = sum(sp.Symbol(f"q_{a}", real=True) * sp.Symbol(f"k_{a}", real=True) for a in range(b.d_k))
    dot = dot.subs({sp.Symbol(n, real=True): syms[n] for n in syms if n != "beta"})
    return sp.expand(b.logit - syms["beta"] * dot) == 0


def _score_sweep_splits(b: _Blocks) -> bool:
    """Whether the adjoint's pair-score sweep may run as two (scores, then the qbar sums from them): the
    derived pair score must not read key features and the qbar increments neither p, values nor g."""
    score, inc = " ".join(b.lines("pair_score")), " ".join(b.lines("query_inc"))
    return not re.search(r"\bk_\d+\b", score) and not re.search(r"\b(p|gA|v_\d+|g_\d+)\b", inc)


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

    # features per (head, block of FEAT_TOKENS tokens): one loop over the tokens per output component, each
    # vectorised over tokens i (loads from the transposed tokens XT, rows contiguous in i; one store
    # stream, so one runtime alias check); q goes through the task's scratch QT into QF (H, N, d_k).
    # Unsigned token indices: Numba's negative-index wraparound of a signed index LLVM cannot prove >= 0
    # would turn every load into a gather
    def component_loops(group: str, sym: str, n: int, store: str) -> list[str]:
        lines = b.lines(group)
        if group == "key":  # keys and values; the block is written in y
            lines = [x.replace("y_", "x_") for x in lines]
        return [x for e in range(n) for x in ["for i in range(i0, i1):"]
                + ["    " + y for y in [f"x_{a} = XT[{a}, i]" for a in range(d)]
                   + _needed(lines, f"{sym}_{e}") + [store.format(e=e, v=f"{sym}_{e}")]]]

    features = (["H = Qs.shape[0]", "N = X.shape[0]", f"XT = numpy.empty(({d}, N))", "for i in range(N):"]
                + [f"    XT[{a}, i] = X[i, {a}]" for a in range(d)]
                + [f"NB = (N + {FEAT_TOKENS - 1}) // {FEAT_TOKENS}", "for t in numba.prange(H * NB):", "    h = t // NB",
                   f"    j0 = (t - h * NB) * {FEAT_TOKENS}", "    i0 = numba.uint64(j0)",
                   f"    i1 = numba.uint64(min(N, j0 + {FEAT_TOKENS}))",
                   f"    QT = numpy.empty(({d_k}, {FEAT_TOKENS}))"]
                + ["    " + s for s in _unpack("Q", d_k, d) + _unpack("K", d_k, d) + _unpack("V", d_v, d)
                   + component_loops("query", "q", d_k, "QT[{e}, i - i0] = {v}")
                   + component_loops("key", "k", d_k, "KT[h, {e}, i] = {v}")
                   + component_loops("key", "v", d_v, "VT[h, {e}, i] = {v}")
                   + ["for i in range(i0, i1):"] + [f"    QF[h, i, {a}] = QT[{a}, i - i0]" for a in range(d_k)]])
    def fwd_rows(R: int) -> list[str]:
        """A block of R = 1 or 2 rows i_r = i + r T of task t, one head (rows ``row{r}``: the tape's rows
        E[h, i_r], or the task's scratch rows): (1) the logits
        of all R rows in sweeps over the keys (each key's features loaded once for the R rows: the
        sweeps stream K and V from L2 at N = 1024, so loads shared by two rows halve that traffic; two
        rows in runs of FWD_CHUNK components, so that no sweep spills registers) with
        each row's maximum, an integer max over order keys (vectorised, where a float compare-and-select
        is not; the same maximum); (2) per row, e_j = exp(l_j - m) in place and its sum s (a lean loop: the
        exp's constants stay in registers); (3) the R rows' value sums, sweeps over the values (two rows:
        FWD_CHUNK components each).
        Causal rows see different numbers of keys (stop_r): the joint sweeps run to stop_0, row 1 alone
        to stop_1."""
        sfx = [f"_r{r}" for r in range(R)]
        ren = lambda lines, r: [re.sub(r"\b(logit|q_\d+|_l\d+)\b", rf"\1{sfx[r]}", x) for x in lines]  # noqa: E731
        out = [f"i{r} = i + {r} * T" for r in range(R)] + [f"stop{r} = i{r} + 1 if causal else N" for r in range(R)]
        out += [f"row{r} = E[h, i{r}] if tape else rows[{r}]" for r in range(R)]  # the tape's rows, or scratch
        for r in range(R):
            out += ren(_loads("q", d_k, "QF", f"h, i{r}"), r) + [f"mk{r} = _order_key(-math.inf)"]

        def logits(rs: list[int], lo: str, hi: str) -> list[str]:
            body = _rows("k", d_k, "KT", "h", "j")
            for r in rs:
                body += ren(b.lines("logit"), r) + [f"row{r}[j] = logit{sfx[r]}", f"kj = _order_key(logit{sfx[r]})",
                                                    f"mk{r} = kj if kj > mk{r} else mk{r}"]
            return [f"for j in range({lo}, {hi}):"] + ["    " + x for x in body]

        def chunked_logits(lo: str, hi: str) -> list[str]:
            # both rows, FWD_CHUNK components per sweep: partial dots in the rows, the last sweep adds its
            # terms to the running sum (the same FMA chain as one sweep), scales by beta and takes the max
            chunks = _chunks(d_k)
            out = []
            for n, ch in enumerate(chunks):
                body = [f"k_{a} = KT[h, {a}, j]" for a in ch]
                for r in range(2):
                    terms = " + ".join(f"k_{a}*q_{a}_r{r}" for a in ch)
                    if n == 0:
                        body.append(f"row{r}[j] = {terms}")
                    elif n < len(chunks) - 1:
                        body.append(f"row{r}[j] = row{r}[j] + {terms}")
                    else:
                        body += [f"logit_r{r} = beta*(row{r}[j] + {terms})", f"row{r}[j] = logit_r{r}",
                                 f"kj = _order_key(logit_r{r})", f"mk{r} = kj if kj > mk{r} else mk{r}"]
                out += [f"for j in range({lo}, {hi}):"] + ["    " + x for x in body]
            return out

        def values(rs: list[int], lo: str, hi: str) -> list[str]:
            out = []
            for ch in (_chunks(d_v) if len(rs) == 2 else [range(d_v)]):
                body = [f"e{r} = row{r}[j]" for r in rs] + [f"v_{c} = VT[h, {c}, j]" for c in ch]
                body += [f"acc{r}_{c} += e{r} * v_{c}" for r in rs for c in ch]
                out += [f"for j in range({lo}, {hi}):"] + ["    " + x for x in body]
            return out

        joint = logits(list(range(R)), "0", "stop0") if R == 1 or not _dot_logit(b) else chunked_logits("0", "stop0")
        out += joint + (logits([1], "stop0", "stop1") if R == 2 else [])
        for r in range(R):
            out += [f"m{r} = _order_value(mk{r})", f"s{r} = 0.0", f"for j in range(stop{r}):",
                    f"    e = fast_exp_nonpos(row{r}[j] - m{r})", f"    row{r}[j] = e", f"    s{r} += e"]
        out += [f"acc{r}_{c} = 0.0" for r in range(R) for c in range(d_v)]
        out += values(list(range(R)), "0", "stop0") + (values([1], "stop0", "stop1") if R == 2 else [])
        for r in range(R):
            out += ([f"A_{c} = acc{r}_{c} / s{r}" for c in range(d_v)] + _stores("A", f"h, i{r}", "A", d_v)
                    + [f"LOGZ[h, i{r}] = m{r} + math.log(s{r})"] + b.lines("head_out")
                    + [f"F[i{r}, {a}] += o_{a}" for a in range(d)]
                    # the tape keeps E_ij = e_j (P_ij = E_ij / sum_j E_ij: the adjoint sums the row; a
                    # normalising pass here cost 12 % of the forward), zero past the visible keys (causal)
                    + ["if tape:", f"    for j in range(stop{r}, N):", f"        row{r}[j] = 0.0"])
        return out

    # heads outermost within a task: its rows sweep one head's keys and values (2 (d_k + d_v) N floats,
    # kept in L2) before the next head's, instead of every head's per row (H times that: past L2 at
    # H = 32, N = 1024); rows in pairs (i, i + T), a last odd row alone.  F[i] is summed over h in order
    forward = (["H = QF.shape[0]", "N = QF.shape[1]", "tape = E.shape[1] > 0", "for t in numba.prange(T):",
                "    rows = numpy.empty((2, N))",
                "    for i in range(t, N, T):"] + [f"        F[i, {a}] = 0.0" for a in range(d)]
               + ["    for h in range(H):", "        wh = c[h]"] + ["        " + s for s in _unpack("O", d, d_v)]
               + ["        for i in range(t, N, 2 * T):", "            if i + T < N:"]
               + ["                " + s for s in fwd_rows(2)] + ["            else:"]
               + ["                " + s for s in fwd_rows(1)])
    # Tasks (h, g), g < G: head h, rows i = g, g + G, ... (G row groups per head, chosen by the caller), each
    # task with its own key-side partials KBP[g, h], VBP[g, h] (G, H, d_k|d_v, N), zeroed on entry: one
    # head's keys, values and partials stay in L1/L2, and at H >= 16 (G = 1) no partials are summed at all.
    # Rows are taken in blocks of R = ADJ_ROWS (rows i0 + r G, r < R).  Per block: sweep 1 per row
    # (vectorised over j): logit, P_ij, sbar_ij and the j-sums qbar^i; P_ij and sbar_ij go to the scratch
    # rows PR[r], SR[r] (zero beyond the row's visible keys); then sweeps over runs of ADJ_UPDATE_COMPONENTS
    # components (vectorised over j, a contiguous-j update per component): kbar^j, vbar^j += the block's R
    # pair terms
    R = ADJ_ROWS

    def renamed(lines: list[str], r: int) -> list[str]:
        """Per-pair key/value lines for block row r: symbols of the row get the suffix _r{r}."""
        return [re.sub(r"\b(sbar|p|q_\d+|g_\d+|_k\d+|dk_\d+|dv_\d+)\b", rf"\1_r{r}", s_) for s_ in lines]

    # per row of the block: its scalars (q^i, g^i = c_h O_h^T p^i, gA^i = <g^i, A^i>, log Z^i, the visible
    # keys stop^i; an absent row i >= N sees none) into the block's small arrays QR, GR, GA, LZ, STOP
    row_setup = (_loads("ct", d, "PC", "i") + b.lines("cotangent") + _loads("A", d_v, "A", hi)
                 + b.lines("g_dot_a") + _loads("q", d_k, "QF", hi) + b.lines("key_coef")
                 + [f"QR[r, {b_}] = q_{b_}" for b_ in range(d_k)] + [f"KC[r, {b_}] = kc_{b_}" for b_ in range(d_k)]
                 + [f"GR[r, {c_}] = g_{c_}" for c_ in range(d_v)]
                 + ["GA[r] = gA", "LZ[r] = LOGZ[h, i]", "STOP[r] = i + 1 if causal else N"])
    absent_row = ([f"QR[r, {b_}] = 0.0" for b_ in range(d_k)] + [f"KC[r, {b_}] = 0.0" for b_ in range(d_k)]
                  + [f"GR[r, {c_}] = 0.0" for c_ in range(d_v)]
                  + ["GA[r] = 0.0", "LZ[r] = 0.0", "STOP[r] = 0"])

    def logit_pair(rs: list[str], lo: str, hi: str) -> list[str]:
        """Logits of rows ``rs`` (``"r0"``, ``"r1"``) into PR, one load of each key's features for all."""
        body = _rows("k", d_k, "KT", "h", "j")
        for r in rs:
            body += [re.sub(r"\b(logit|q_\d+|_l\d+)\b", rf"\1_{r}", x) for x in b.lines("logit")]
            body += [f"PR[{r}, j] = logit_{r}"]
        return [f"for j in range({lo}, {hi}):"] + ["    " + x for x in body]

    # Sweeps per block, each a lean loop vectorised over j (few live registers, no spills): (A) per pair of
    # rows, the logits into PR (shared key loads); (E) per row, P_ij = exp(logit - log Z^i) in place; (B)
    # per row, sbar_ij (SR) and the j-sums qbar^i; PR, SR zero beyond a row's visible keys, up to smax
    recompute = (
        ["for rp in range(" + str(R // 2) + "):", "    r0 = 2 * rp", "    r1 = r0 + 1"]
        + ["    " + x for x in [f"q_{b_}_r0 = QR[r0, {b_}]" for b_ in range(d_k)]
           + [f"q_{b_}_r1 = QR[r1, {b_}]" for b_ in range(d_k)]
           + logit_pair(["r0", "r1"], "0", "STOP[r0]") + logit_pair(["r1"], "STOP[r0]", "STOP[r1]")]
        + [f"for r in range({R}):", "    lz = LZ[r]", "    stop = STOP[r]", "    for j in range(stop):",
           "        PR[r, j] = fast_exp_nonpos(PR[r, j] - lz)", "    for j in range(stop, smax):", "        PR[r, j] = 0.0"])
    # sweep B for row r: p from PR (recomputed) or from the tape row PT = E[h, i] (copied to PR on the way,
    # for the partial updates; an absent row sees no keys).  The tape holds E_ij = P_ij s_i unnormalised:
    # the sweeps run on E and sum s_i = sum_j E_ij on the way; then, all being linear in p, the row's
    # j-sums qbar^i and its partial-update coefficients g^i (vbar^j += P_ij g^i), kc^i (through sbar_ij)
    # are scaled by 1 / s_i once per row instead of once per pair
    # as two sweeps, the pair scores into SR, then the j-sums qbar^i from SR: one sweep holding the d_v g
    # broadcasts and the d_k qbar accumulators at once spills them on AVX2 (the adjoint 12 % slower)
    # (where the derived pieces allow it, :func:`_score_sweep_splits`; else the one sweep)
    def score_sweep(p_from: list[str]) -> list[str]:
        qbar = b.lines("query_inc") + [f"qb_{b_} += dq_{b_}" for b_ in range(d_k)]
        keys, values = _rows("k", d_k, "KT", "h", "j"), _rows("v", d_v, "VT", "h", "j")
        if not _score_sweep_splits(b):
            return ["for j in range(stop):"] + ["    " + y for y in p_from + keys + values + b.lines("pair_score")
                                                + qbar + ["SR[r, j] = sbar"]]
        return (["for j in range(stop):"]
                + ["    " + y for y in p_from + values + b.lines("pair_score") + ["SR[r, j] = sbar"]]
                + ["for j in range(stop):"] + ["    " + y for y in ["sbar = SR[r, j]"] + keys + qbar])

    block_sweeps = (
        ["if not tape:"] + ["    " + x for x in recompute]
        + [f"for r in range({R}):", "    stop = STOP[r]", "    gA = GA[r]"]
        + ["    " + x for x in [f"g_{c_} = GR[r, {c_}]" for c_ in range(d_v)] + [f"q_{b_} = QR[r, {b_}]" for b_ in range(d_k)]
           + [f"qb_{b_} = 0.0" for b_ in range(d_k)]
           + ["if tape:", "    PT = E[h, min(i0 + r * G, N - 1)]", "    es = 0.0"]
           + ["    " + y for y in score_sweep(["p = PT[j]", "PR[r, j] = p", "es += p"])
              + ["for j in range(stop, smax):", "    PR[r, j] = 0.0", "inv = 1.0 / es if stop > 0 else 0.0"]
              + [f"qb_{b_} *= inv" for b_ in range(d_k)] + [f"GR[r, {c_}] *= inv" for c_ in range(d_v)]
              + [f"KC[r, {b_}] *= inv" for b_ in range(d_k)]]
           + ["else:"] + ["    " + y for y in score_sweep(["p = PR[r, j]"])]
           + ["for j in range(stop, smax):", "    SR[r, j] = 0.0"]
           + ["if stop > 0:"] + ["    " + f"QBAR[h, i0 + r * G, {b_}] = qb_{b_}" for b_ in range(d_k)]])
    def partial_updates(n: int, coef: str, coefs: str, pair: str, pairs: str, group: str, out: str, arr: str):
        """Per run of components e < n (:data:`ADJ_UPDATE_COMPONENTS` at a time): one sweep over j that loads
        the block's R pair terms ``pairs[r, j]`` once and adds, per component of the run, its R terms
        ``out_e`` (SymPy lines of ``group``) to arr[g, h, e, j]."""
        lines: list[str] = []
        for run in _runs(n, ADJ_UPDATE_COMPONENTS):
            lines += [f"{coef}_{e}_r{r} = {coefs}[{r}, {e}]" for e in run for r in range(R)] + ["for j in range(smax):"]
            lines += [f"    {pair}_r{r} = {pairs}[{r}, j]" for r in range(R)]
            for e in run:
                terms = [s_ for r in range(R) for s_ in renamed(_needed(b.lines(group), f"{out}_{e}"), r)]
                # the run's loads above stand for the pair terms: a derived line assigning one would shadow them
                assert not any(s_.startswith(f"{pair}_r") for s_ in terms), terms
                lines += ["    " + s_ for s_ in terms]
                lines += [f"    {arr}[g, h, {e}, j] += " + " + ".join(f"{out}_{e}_r{r}" for r in range(R))]
        return lines

    # keys: dk_e = sbar kc_e (key_inc, with kc_e = d logit / d k_e the row's coefficient, computed once per
    # row instead of once per pair and component); values: dv_c (value_inc) = g_c P_ij; ADJ_UPDATE_COMPONENTS each
    key_updates = [s_ for run in _runs(d_k, ADJ_UPDATE_COMPONENTS) for s_ in
                   [f"kc_{e}_r{r} = KC[{r}, {e}]" for e in run for r in range(R)] + ["for j in range(smax):"]
                   + [f"    s_r{r} = SR[{r}, j]" for r in range(R)]
                   + [f"    KBP[g, h, {e}, j] += " + " + ".join(f"s_r{r} * kc_{e}_r{r}" for r in range(R)) for e in run]]
    key_updates += partial_updates(d_v, "g", "GR", "p", "PR", "value_inc", "dv", "VBP")
    adjoint = (["H = QF.shape[0]", "N = QF.shape[1]", "G = KBP.shape[0]", "tape = E.shape[1] > 0",
                "for task in numba.prange(H * G):",
                "    h = task // G", "    g = task - h * G", "    wh = c[h]"]
               + ["    for j in range(N):"] + [f"        KBP[g, h, {b_}, j] = 0.0" for b_ in range(d_k)]
               + [f"        VBP[g, h, {c_}, j] = 0.0" for c_ in range(d_v)]
               + [f"    PR = numpy.empty(({R}, KBP.shape[3]))", f"    SR = numpy.empty(({R}, KBP.shape[3]))",
                  f"    QR = numpy.empty(({R}, {d_k}))", f"    KC = numpy.empty(({R}, {d_k}))",
                  f"    GR = numpy.empty(({R}, {d_v}))",
                  f"    GA = numpy.empty({R})", f"    LZ = numpy.empty({R})", f"    STOP = numpy.empty({R}, dtype=numpy.int64)"]
               + ["    " + s_ for s_ in _unpack("O", d, d_v)]
               + [f"    for i0 in range(g, N, {R} * G):",
                  f"        ilast = min(i0 + {R - 1} * G, i0 + (N - 1 - i0) // G * G)",
                  "        smax = ilast + 1 if causal else N", f"        for r in range({R}):"]
               + ["            " + s_ for s_ in ["i = i0 + r * G", "if i < N:"]]
               + ["                " + s_ for s_ in row_setup] + ["            else:"]
               + ["                " + s_ for s_ in absent_row]
               + ["        " + s_ for s_ in block_sweeps]
               + ["        " + s_ for s_ in key_updates])
    # finish: (1) per (head, block of FIN_KEYS keys): kbar, vbar = the group partials summed over g in order
    # (one contiguous-j loop per component, vectorised; unsigned indices, as in features); (2) per block of
    # tokens, h in order:
    # xbar^j = sum_h [Q_h^T qbar_h^j + (K_h^T kbar_h^j + V_h^T vbar_h^j)], the Lions term once per key
    # (``lions=0`` drops it, for the wrong-model test)
    comps = [("KBP", "KBT", e) for e in range(d_k)] + [("VBP", "VBT", e) for e in range(d_v)]
    sums = [s_ for arr, out_, e in comps
            for s_ in ["for j in range(j0, j1):", f"    {out_}[h, {e}, j] += {arr}[g, h, {e}, j]"]]
    first = [s_ for arr, out_, e in comps
             for s_ in ["for j in range(j0, j1):", f"    {out_}[h, {e}, j] = {arr}[0, h, {e}, j]"]]
    jac_term = (_unpack("Q", d_k, d) + ["for j in range(j0, j1):"]
                + ["    " + s_ for s_ in [f"qb_{b_} = QBAR[h, j, {b_}]" for b_ in range(d_k)] + b.lines("jac_vjp")
                   + [f"XB[j, {a}] += xj_{a}" for a in range(d)]])
    lions_term = (_unpack("K", d_k, d) + _unpack("V", d_v, d) + ["for j in range(j0, j1):"]
                  + ["    " + s_ for s_ in [f"kb_{b_} = KBT[h, {b_}, j]" for b_ in range(d_k)]
                     + [f"vb_{c_} = VBT[h, {c_}, j]" for c_ in range(d_v)] + b.lines("lions_vjp")
                     + [f"XB[j, {a}] += xl_{a}" for a in range(d)]])
    blocks = f"(N + {FIN_KEYS - 1}) // {FIN_KEYS}"
    finish = (["G = KBP.shape[0]", "H = KBP.shape[1]", "N = QBAR.shape[1]", f"NB = {blocks}",
               "for task in numba.prange(H * NB):"]
              + ["    " + s_ for s_ in ["h = task // NB", f"k0 = (task - h * NB) * {FIN_KEYS}",
                                        "j0 = numba.uint64(k0)", f"j1 = numba.uint64(min(N, k0 + {FIN_KEYS}))"]
                 + first + ["for g in range(1, G):"] + ["    " + x for x in sums]]
              + ["for jb in numba.prange(NB):"]
              + ["    " + s_ for s_ in [f"k0 = jb * {FIN_KEYS}", "j0 = numba.uint64(k0)",
                                        f"j1 = numba.uint64(min(N, k0 + {FIN_KEYS}))",
                                        "for j in range(j0, j1):"]
                 + [f"    XB[j, {a}] = 0.0" for a in range(d)]
                 + ["for h in range(H):"] + ["    " + x for x in jac_term]
                 + ["    if lions:"] + ["        " + y for y in lions_term]])
    out = ["import math", "", "import numba", "import numpy"] + fast_exp_lines(precision) + ["", ""] + order_key_lines()
    out += kernel("features(X, Qs, Ks, Vs, QF, KT, VT)", features)
    # the same feature maps on the calling thread, for the stacks' small layers: a parallel launch costs
    # about 0.1 ms, as much as H N = 8192 token-heads of this loop
    out += kernel("features_serial(X, Qs, Ks, Vs, QF, KT, VT)", features, njit.replace("parallel=True", "parallel=False"))
    out += kernel("forward(QF, KT, VT, Os, c, beta, causal, T, A, LOGZ, F, E)", forward, njit_pairs)
    out += kernel("adjoint(PC, Os, c, QF, KT, VT, A, LOGZ, beta, causal, QBAR, KBP, VBP, E)", adjoint, njit_pairs)
    out += kernel("finish(KBP, VBP, Qs, Ks, Vs, QBAR, lions, KBT, VBT, XB)", finish)
    out += kernel("param_grads(X, PC, c, A, QBAR, KBT, VBT, dQ, dK, dV, dO)", param_grads_body(d, d_k, d_v), njit_pairs)
    # whole stacks of L layers in one call: the same kernels in the same order as L host calls
    for signature, body in stack_kernels(d, FEAT_PARALLEL_ITEMS):
        out += kernel(signature, body, "@numba.njit(parallel=False, cache=True, fastmath=False)")
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
