"""Loop templates for the second-order attention jet (flow-map Taylor blocks), generated code inside.

The scalar formulas come from :func:`transformer_limits.symbolic.template_pieces.jet_pieces` (checked
against SymPy's path derivatives by the ``flow-taylor`` derivation); this module only places them in
loops, one source file per flavour (kernel family
:data:`transformer_limits.numeric.kernel_family.FLOW_TAYLOR_JET`):

``jet(X, DX, Y, DY, w, Q, K, V, A0, A1, A2)``  the attention A(x_i, mu) and its first and second
derivatives along x_i + s DX_i, y_j + s DY_j at s = 0, for mu = sum_j w_j delta_{y_j}
(docs/theory.md §A.3):

    logit jet l, l1, l2 per pair; p = softmax_j(l) (with w);  m1 = sum_j p l1, m2 = sum_j p l2,
    lc = l1 - m1, s2 = sum_j p lc^2, e2 = l2 - m2 - s2;
    A0 = sum_j p v_j,  A1 = sum_j p (lc v_j + vd_j),  A2 = sum_j p ((lc^2 + e2) v_j + 2 lc vd_j).

Flavours:

``python-numpy``  vectorised: pairs (i, j) by broadcasting, nothing larger than (N, M) stored;
``python-numba``  ``numba.njit(parallel=True)``, ``prange`` over queries i;
``python-cuda``   ``numba.cuda.jit``, one thread per query i (GPU or Numba's CUDA simulator);
``cuda-c``        CUDA C for CuPy ``RawModule`` (C99 printer), the same layout.

The three scalar flavours share one row template (:func:`_row_body`): per query i, four sequential
sweeps over the atoms j, each recomputing the pair's key and logit pieces — (1) the softmax shift
m = max_j l; (2) s = sum_j w_j e^{l - m} and the moment sums with the unnormalised weight (the moment
pieces are linear in p), giving m1, m2; (3) the spread sum with p = w_j e^{l - m} / s; (4) the jet
sums.  No atomics and a fixed summation order: the result does not depend on the launch.

Array conventions (C order, float64): X, DX (N, d); Y, DY (M, d); w (M,); Q, K (d_k, d); V (d_v, d);
outputs A0, A1, A2 (N, d_v) each, written in place (allocated by the caller) by every flavour: one
signature for all of them, the sizes N, M after the arrays for ``cuda-c`` only (``sizes=`` of
:meth:`transformer_limits.numeric.runtime.Runtime.call`; the Python flavours read the shapes).
"""

from __future__ import annotations

from transformer_limits.numeric.flavours import CUDA_C, PYTHON_CUDA, PYTHON_NUMBA, PYTHON_NUMPY, flavour_named
from transformer_limits.numeric.kernel_family import FLOW_TAYLOR_JET
from transformer_limits.symbolic.codegen import CodeBlock, code_block, indent, source_key, typed_python_source
from transformer_limits.symbolic.template_pieces import jet_pieces

__all__ = ["jet_kernel_source"]

JET_FLAVOURS = FLOW_TAYLOR_JET.flavours  # flavour name -> Flavour record (kernel family FLOW_TAYLOR_JET)
_GROUPS = ("query", "key", "logit", "moments", "spread", "jet")


def _source_numpy(d: int, d_k: int, d_v: int):
    P = jet_pieces(d, d_k, d_v)
    blocks = {g: code_block(getattr(P, g), prefix=f"{g[0]}{i}") for i, g in enumerate(_GROUPS)}
    lines = {g: blocks[g].lines("numpy") for g in _GROUPS}
    unpack = [f"{n}_{a}_{b} = {n}[{a}, {b}]" for n, rows in (("Q", d_k), ("K", d_k), ("V", d_v))
              for a in range(rows) for b in range(d)]
    cols = [f"{s}_{a} = {arr}[{sl}{a}]" for s, arr, sl in (("x", "X", ":, None, "), ("dx", "DX", ":, None, "),
                                                             ("y", "Y", "None, :, "), ("dy", "DY", "None, :, "))
            for a in range(d)]
    shape = "numpy.broadcast_to({}, shape)"
    body = (unpack + cols + lines["query"] + lines["key"] + lines["logit"]
            + ["shape = (X.shape[0], Y.shape[0])",
               "logit = numpy.broadcast_to(logit, shape)",
               "e = w[None, :] * numpy.exp(logit - logit.max(axis=1, keepdims=True))",
               "p = e / e.sum(axis=1, keepdims=True)"]
            + lines["moments"]
            + ["m1 = " + shape.format("mom1") + ".sum(axis=1, keepdims=True)",
               "m2 = " + shape.format("mom2") + ".sum(axis=1, keepdims=True)",
               "lc = logit1 - m1"]
            + lines["spread"]
            + ["e2 = logit2 - m2 - " + shape.format("spread") + ".sum(axis=1, keepdims=True)"]
            + lines["jet"]
            # the outputs are arguments (the convention of every flavour), written column by column
            + [f"A{m}[:, {c}] = " + shape.format(f"jet{m}_{c}") + ".sum(axis=1)" for m in range(3) for c in range(d_v)])
    text = "\n".join(["import math", "", "import numpy", "", "", _PY_SIGNATURE, _PY_DOC, indent(body, 1)]) + "\n"
    return text, [blocks[g].fingerprint() for g in _GROUPS]


# --------------------------------------------------------------------------- scalar flavours
def _row_body(d: int, d_k: int, d_v: int, lang: str) -> tuple[list[str], list[str]]:
    """(lines for one query row i, block fingerprints) in scalar Python (``lang="py"``) or C (``"c"``);
    the four sweeps of the module docstring, each over j < M."""
    P = jet_pieces(d, d_k, d_v)

    def part(pieces: dict, *names: str, prefix: str) -> CodeBlock:  # pieces `name` or `name_<index>`
        return code_block({n: e for n, e in pieces.items() if any(n == m or n.startswith(m + "_") for m in names)},
                          prefix=prefix)

    # a sweep evaluates only the pieces it reads (split by name; the expressions are jet_pieces')
    blocks = {"query": code_block(P.query, prefix="q"), "key": part(P.key, "k", prefix="k"),
              "keyd": part(P.key, "kd", prefix="kd"), "value": part(P.key, "v", "vd", prefix="v"),
              "logit": part(P.logit, "logit", prefix="l"), "logit1": part(P.logit, "logit1", prefix="la"),
              "logit2": part(P.logit, "logit2", prefix="lb"), "moments": code_block(P.moments, prefix="m"),
              "spread": code_block(P.spread, prefix="s"), "jet": code_block(P.jet, prefix="j")}
    c = lang == "c"
    printer, end, exp = ("c", ";", "exp") if c else ("scalar", "", "math.exp")

    def code(group: str) -> list[str]:
        return blocks[group].lines(printer, declare="const real " if c else "")

    def let(name: str, value: str) -> str:  # a value fixed in its scope
        return f"const real {name} = {value};" if c else f"{name} = {value}"

    def var(name: str, value: str) -> str:  # an accumulator; C literals in the kernel's real type
        return f"real {name} = {'((real)0.0)' if value == '0.0' else value};" if c else f"{name} = {value}"

    def add(name: str, value: str) -> str:
        return f"{name} += {value}{end}"

    def load(name: str, arr: str, idx: str, n: int) -> list[str]:
        return [let(f"{name}_{a}", f"{arr}[{idx} * {n} + {a}]" if c else f"{arr}[{idx}, {a}]") for a in range(n)]

    def sweep(groups: tuple[str, ...], body: list[str]) -> list[str]:
        pair = load("y", "Y", "j", d) + (load("dy", "DY", "j", d) if "keyd" in groups else [])
        pair += [line for g in groups for line in code(g)]
        head = "for (long long j = 0; j < M; ++j) {" if c else "for j in range(M):"
        return [head] + ["    " + line for line in pair + body] + (["}"] if c else [])

    weight = f"w[j] * {exp}(logit - m)"
    accs = [f"acc{m}_{k}" for m in range(3) for k in range(d_v)]
    moment = [let("p", weight if c else weight + "  # unnormalised: the moment pieces are linear in p")]
    lines = (load("x", "X", "i", d) + load("dx", "DX", "i", d) + code("query")
             + [var("m", "-INFINITY" if c else "-math.inf")]
             + sweep(("key", "logit"), ["if (logit > m) m = logit;"] if c else ["if logit > m:", "    m = logit"])
             + [var(n, "0.0") for n in ("s", "s1", "s2")]
             + sweep(("key", "keyd", "logit", "logit1", "logit2"),
                     moment + code("moments") + [add("s", "p"), add("s1", "mom1"), add("s2", "mom2")])
             + [let("m1", "s1 / s"), let("m2", "s2 / s"), var("s3", "0.0")]
             + sweep(("key", "keyd", "logit", "logit1"), [let("p", f"{weight} / s"), let("lc", "logit1 - m1")]
                     + code("spread") + [add("s3", "spread")])
             + [var(n, "0.0") for n in accs]
             + sweep(("key", "keyd", "logit", "logit1", "logit2", "value"),
                     [let("p", f"{weight} / s"), let("lc", "logit1 - m1"), let("e2", "logit2 - m2 - s3")]
                     + code("jet") + [add(f"acc{m}_{k}", f"jet{m}_{k}") for m in range(3) for k in range(d_v)])
             + [f"A{m}[i * {d_v} + {k}] = acc{m}_{k};" if c else f"A{m}[i, {k}] = acc{m}_{k}"
                for m in range(3) for k in range(d_v)])
    return lines, [b.fingerprint() for b in blocks.values()]


def _params(d: int, d_k: int, d_v: int, c: bool) -> list[str]:
    return [f"const real {n}_{a}_{b} = {n}[{a * d + b}];" if c else f"{n}_{a}_{b} = {n}[{a}, {b}]"
            for n, rows in (("Q", d_k), ("K", d_k), ("V", d_v)) for a in range(rows) for b in range(d)]


_PY_SIGNATURE = "def jet(X, DX, Y, DY, w, Q, K, V, A0, A1, A2):"
_PY_DOC = '    """A, dA/ds, d^2A/ds^2 along x_i + s DX_i, y_j + s DY_j at s = 0, into A0, A1, A2 (N, d_v)."""'


def _source_numba(d: int, d_k: int, d_v: int):
    row, fingerprints = _row_body(d, d_k, d_v, "py")
    text = "\n".join(["import math", "", "import numba", "", "",
                      "@numba.njit(parallel=True, cache=True, fastmath=False)", _PY_SIGNATURE, _PY_DOC,
                      indent(_params(d, d_k, d_v, False), 1), "    M = Y.shape[0]",
                      "    for i in numba.prange(X.shape[0]):", indent(row, 2)]) + "\n"
    return text, fingerprints


def _source_cuda(d: int, d_k: int, d_v: int):
    row, fingerprints = _row_body(d, d_k, d_v, "py")
    text = "\n".join(["import math", "", "from numba import cuda", "", "",
                      "@cuda.jit", _PY_SIGNATURE, _PY_DOC + "  # one thread per query row i",
                      "    i = cuda.grid(1)", "    if i >= X.shape[0]:", "        return",
                      indent(_params(d, d_k, d_v, False), 1), "    M = Y.shape[0]", indent(row, 1)]) + "\n"
    return text, fingerprints


def _source_c(d: int, d_k: int, d_v: int):
    row, fingerprints = _row_body(d, d_k, d_v, "c")
    ins = ", ".join(f"const real* __restrict__ {n}" for n in ("X", "DX", "Y", "DY", "w", "Q", "K", "V"))
    outs = ", ".join(f"real* __restrict__ A{m}" for m in range(3))
    text = "\n".join([f'extern "C" __global__ void jet({ins}, {outs}, const long long N, const long long M)',
                      "{", "    // one thread per query row i",
                      "    const long long i = (long long)blockDim.x * blockIdx.x + threadIdx.x;",
                      "    if (i >= N) return;", indent(_params(d, d_k, d_v, True), 1), indent(row, 1), "}"]) + "\n"
    return text, fingerprints


# --------------------------------------------------------------------------- assembly + cache
_EMITTERS = {PYTHON_NUMPY.name: _source_numpy, PYTHON_NUMBA.name: _source_numba, PYTHON_CUDA.name: _source_cuda,
             CUDA_C.name: _source_c}


def _jet_kernel(d: int, d_k: int, d_v: int, flavour: str, precision: str = "float64") -> tuple[str, str, str]:
    """(file stem, cache key, source) of the jet kernel for one flavour (``precision`` float32 only for a
    flavour with typed sources: the typed-literal pass of
    :func:`~transformer_limits.symbolic.codegen.typed_python_source`)."""
    if flavour not in JET_FLAVOURS:
        raise ValueError(f"unknown jet kernel flavour {flavour!r} (known: {', '.join(JET_FLAVOURS)})")
    flav = flavour_named(flavour)
    flav.check_source_precision(precision)
    body, fingerprints = _EMITTERS[flavour](d, d_k, d_v)
    if flav.typed_sources:
        body = typed_python_source(body, precision)
    comment = flav.comment
    header = [f"{comment} Generated by transformer_limits from SymPy expressions (derivation flow-taylor; "
              f"d={d}, d_k={d_k}, d_v={d_v}; flavour {flavour}).",
              f"{comment} Do not edit: regenerate with transformer_limits.symbolic.flow_taylor_kernels.",
              f"{comment} Second-order attention jet: A2 = sum_j p ((lc^2 + e2) v_j + 2 lc vd_j)."]
    stem = f"flow_taylor_jet_d{d}_dk{d_k}_dv{d_v}_{flavour.replace('-', '_')}{flav.source_tag(precision)}"
    return stem, source_key(fingerprints, flav.printer, body, precision), "\n".join(header) + "\n" + body


def jet_kernel_source(d: int, d_k: int, d_v: int, flavour: str = PYTHON_NUMPY.name,
                      precision: str = "float64") -> tuple[str, str]:
    """(file name, source) of the jet kernel for one flavour (and precision: float32 for python-numba)."""
    stem, key, source = _jet_kernel(d, d_k, d_v, flavour, precision)
    return f"{stem}_{key}{flavour_named(flavour).suffix}", source
