"""GPU loop templates of the attention layer and its adjoint: flavours ``python-cuda`` and ``cuda-c``.

The scalar formulas are the SymPy blocks of
:func:`transformer_limits.symbolic.template_pieces.adjoint_pieces` (the same CSE'd blocks as the
``python-numba`` flavour of :mod:`transformer_limits.symbolic.attention_adjoint_kernels`, printed by
the ``scalar`` printer for ``numba.cuda.jit`` and by the C99 printer for CUDA C).  One template
(``_kernels``) is written once against a small statement builder (``_PyLang``, ``_CLang``) and emits
both sources, so the loop structure exists once and no formula is written by hand.  Layout
(docs/theory.md §A.2): a batch of B independent problems (tokens X_b, parameters, head weights c_b) in one
launch, thread t = (bh, i) with bh = b H + h (B = 1: one problem), every kernel one thread per (problem,
head, token) unless noted, with sums over a fixed index order only (no atomics: deterministic):

``features``      thread (bh, i): QF[bh, i] = Q_h x_b^i, KT[bh, :, i] = K_h x_b^i, VT[bh, :, i] = V_h x_b^i
``forward``       thread (bh, i): row maximum and softmax sums over the visible keys j (all, or
                  j <= i when causal) in two sweeps, A_h^i, log Z_h^i, and the head's share
                  OH[bh, i] = c_bh O_h A_h^i of the layer field
``head_sum``      thread (b, i): OUT[b, i] = BASE[b, i] + sum_h PARTS[bh, i] (h in order, then the
                  residual): x_{r+1} = x_r + F from OH, p_r = p_{r+1} + xbar from XH; BASE = 0 gives F
``adjoint_rows``  thread (bh, i): g^i = c_bh O_h^T p^i, gA^i = <g^i, A^i>, one sweep over the visible j
                  (P_ij = exp(logit - log Z^i) recomputed, pair score sbar_ij), qbar^i into QBAR,
                  g^i, gA^i into G, GA, and the Jacobian term Q_h^T qbar^i into XH[bh, i]
``adjoint_keys``  thread (bh, j): one sweep over the queries i that see j (all, or i >= j when causal),
                  recomputing P_ij from the stored log Z^i: kbar^j = sum_i sbar_ij d logit/d k,
                  vbar^j = sum_i P_ij g^i into KBAR, VBAR; with ``lions`` it adds the Lions term
                  K_h^T kbar^j + V_h^T vbar^j to XH[bh, j] (``lions`` off: the wrong-model control)
``param_grads``   thread (bh, r): row r of dQ = sum_i qbar^i x^iT, dK, dV (kbar, vbar) or
                  dO = c_bh sum_i p^i A^iT, i in order (plain contractions, no SymPy formula)

Arrays (C order; ``real`` = double or float in CUDA C, float64 in Python): X, PC, BASE, OUT (B N, d),
row b N + i; Qs, Ks (PB H, d_k, d); Vs (PB H, d_v, d); Os (PB H, d, d_v) with PB = 1 (one parameter
set shared by the batch: set h) or PB = B (set bh); c (B H,); QF, QBAR, KBAR (B H, N, d_k);
KT (B H, d_k, N); VT (B H, d_v, N); A, G, VBAR (B H, N, d_v); LOGZ, GA (B H, N); OH, XH (B H, N, d);
DQ, DK (B H, d_k, d); DV (B H, d_v, d); DO (B H, d, d_v).  B, H, N, PB are passed as integers,
``causal`` and ``lions`` as flags (bool in Python, int in C).
"""

from __future__ import annotations

from typing import Callable, Sequence

from transformer_limits.numeric.flavours import CUDA_C, PYTHON_CUDA

__all__ = ["cuda_source", "KERNEL_ARGS", "launch_threads"]

#: (kernel name, arguments) in launch order; argument kinds: in, out, inout (arrays), real, flag, size
KERNEL_ARGS: dict[str, tuple[tuple[str, str], ...]] = {
    "features": (("X", "in"), ("Qs", "in"), ("Ks", "in"), ("Vs", "in"), ("B", "size"), ("H", "size"), ("N", "size"),
                 ("PB", "size"), ("QF", "out"), ("KT", "out"), ("VT", "out")),
    "forward": (("QF", "in"), ("KT", "in"), ("VT", "in"), ("Os", "in"), ("c", "in"), ("beta", "real"),
                ("causal", "flag"), ("B", "size"), ("H", "size"), ("N", "size"), ("PB", "size"), ("A", "out"),
                ("LOGZ", "out"), ("OH", "out")),
    "head_sum": (("PARTS", "in"), ("BASE", "in"), ("B", "size"), ("H", "size"), ("N", "size"), ("OUT", "out")),
    "adjoint_rows": (("PC", "in"), ("Qs", "in"), ("Os", "in"), ("c", "in"), ("QF", "in"), ("KT", "in"),
                     ("VT", "in"), ("A", "in"), ("LOGZ", "in"), ("beta", "real"), ("causal", "flag"),
                     ("B", "size"), ("H", "size"), ("N", "size"), ("PB", "size"), ("QBAR", "out"), ("G", "out"),
                     ("GA", "out"), ("XH", "out")),
    "adjoint_keys": (("Ks", "in"), ("Vs", "in"), ("QF", "in"), ("KT", "in"), ("VT", "in"), ("LOGZ", "in"),
                     ("G", "in"), ("GA", "in"), ("beta", "real"), ("causal", "flag"), ("lions", "flag"),
                     ("B", "size"), ("H", "size"), ("N", "size"), ("PB", "size"), ("KBAR", "out"), ("VBAR", "out"),
                     ("XH", "inout")),
    "param_grads": (("X", "in"), ("PC", "in"), ("c", "in"), ("A", "in"), ("QBAR", "in"), ("KBAR", "in"),
                    ("VBAR", "in"), ("B", "size"), ("H", "size"), ("N", "size"), ("DQ", "out"), ("DK", "out"),
                    ("DV", "out"), ("DO", "out")),
}

def launch_threads(name: str, B: int, H: int, N: int, d: int, d_k: int, d_v: int) -> int:
    """Threads of kernel ``name``'s launch: B H N, except head_sum (B N) and param_grads (B H R,
    R = 2 d_k + d_v + d rows of the stacked parameter gradients)."""
    if name == "head_sum":
        return B * N
    if name == "param_grads":
        return B * H * (2 * d_k + d_v + d)
    return B * H * N


def _shapes(d: int, d_k: int, d_v: int) -> dict[str, tuple[str, ...]]:
    """Array shapes, as C expressions (for flat indexing)."""
    s = {"X": ("BN", d), "PC": ("BN", d), "OUT": ("BN", d), "BASE": ("BN", d), "Qs": ("PH", d_k, d),
         "Ks": ("PH", d_k, d), "Vs": ("PH", d_v, d), "Os": ("PH", d, d_v), "c": ("BH",), "QF": ("BH", "N", d_k),
         "QBAR": ("BH", "N", d_k), "KBAR": ("BH", "N", d_k), "KT": ("BH", d_k, "N"), "VT": ("BH", d_v, "N"),
         "A": ("BH", "N", d_v), "G": ("BH", "N", d_v), "VBAR": ("BH", "N", d_v), "LOGZ": ("BH", "N"),
         "GA": ("BH", "N"), "OH": ("BH", "N", d), "XH": ("BH", "N", d), "PARTS": ("BH", "N", d),
         "DQ": ("BH", d_k, d), "DK": ("BH", d_k, d), "DV": ("BH", d_v, d), "DO": ("BH", d, d_v)}
    return {k: tuple(str(x) for x in v) for k, v in s.items()}


def _pad(body: Sequence[str]) -> list[str]:
    return ["    " + s for s in body]


class _PyLang:
    """Statements of a ``numba.cuda.jit`` kernel (printer ``scalar``)."""

    printer, comment = "scalar", "#"
    exp, log, neg_inf, zero, and_ = "math.exp", "math.log", "-math.inf", "0.0", " and "

    def __init__(self, blocks, shapes: dict[str, tuple[str, ...]]):
        self.b, self.shapes = blocks, shapes

    def at(self, arr: str, *idx: object) -> str:
        return f"{arr}[{', '.join(str(x) for x in idx)}]"

    def let(self, name: str, expr: str) -> list[str]:
        return [f"{name} = {expr}"]

    var = ilet = set = let

    def add(self, lhs: str, expr: str) -> list[str]:
        return [f"{lhs} += {expr}"]

    def loop(self, v: str, start: str, stop: str, body: list[str]) -> list[str]:
        return [f"for {v} in range({start}, {stop}):"] + _pad(body)

    def if_(self, cond: str, body: list[str]) -> list[str]:
        return [f"if {cond}:"] + _pad(body)

    def cond(self, c: str, a: str, b: str) -> str:
        return f"{a} if {c} else {b}"

    def div(self, a: str, b: str) -> str:
        return f"{a} // {b}"

    def sym(self, group: str) -> list[str]:
        return self.b.lines(group, "scalar")

    def kernel(self, name: str, body: list[str]) -> list[str]:
        sig = ", ".join(n for n, _ in KERNEL_ARGS[name])
        return ["", "", "@cuda.jit", f"def {name}({sig}):", "    t = cuda.grid(1)"] + _pad(body)

    def guard(self, n: str) -> list[str]:
        return [f"if t >= {n}:", "    return"]

    def preamble(self) -> list[str]:
        return ["import math", "", "from numba import cuda"]


class _CLang(_PyLang):
    """Statements of an ``extern "C" __global__`` CUDA C kernel (C99 printer, flat row-major indexing)."""

    printer, comment = "c", "//"
    # ``real`` is double or float (typedef in front: kernel_family.cuda_c_program); exp/log overloaded
    exp, log, neg_inf, zero, and_ = "exp", "log", "-INFINITY", "((real)0.0)", " && "
    _TYPES = {"in": "const real* __restrict__ ", "out": "real* __restrict__ ", "inout": "real* ",
              "real": "const real ", "flag": "const int ", "size": "const long long "}

    def at(self, arr: str, *idx: object) -> str:
        flat = str(idx[0])
        for size, x in zip(self.shapes[arr][1:], idx[1:]):
            flat = f"({flat}) * {size} + {x}"
        return f"{arr}[{flat}]"

    def let(self, name: str, expr: str) -> list[str]:
        return [f"const real {name} = {expr};"]

    def var(self, name: str, expr: str) -> list[str]:
        return [f"real {name} = {expr};"]

    def ilet(self, name: str, expr: str) -> list[str]:
        return [f"const long long {name} = {expr};"]

    def set(self, lhs: str, expr: str) -> list[str]:
        return [f"{lhs} = {expr};"]

    def add(self, lhs: str, expr: str) -> list[str]:
        return [f"{lhs} += {expr};"]

    def loop(self, v: str, start: str, stop: str, body: list[str]) -> list[str]:
        return [f"for (long long {v} = {start}; {v} < {stop}; ++{v}) {{"] + _pad(body) + ["}"]

    def if_(self, cond: str, body: list[str]) -> list[str]:
        return [f"if ({cond}) {{"] + _pad(body) + ["}"]

    def cond(self, c: str, a: str, b: str) -> str:
        return f"({c} ? {a} : {b})"

    def div(self, a: str, b: str) -> str:
        return f"{a} / {b}"

    def sym(self, group: str) -> list[str]:
        return self.b.lines(group, "c", declare="const real ")

    def kernel(self, name: str, body: list[str]) -> list[str]:
        sig = ", ".join(self._TYPES[kind] + n for n, kind in KERNEL_ARGS[name])
        return (["", f'extern "C" __global__ void {name}({sig})', "{",
                 "    const long long t = (long long)blockDim.x * blockIdx.x + threadIdx.x;"] + _pad(body) + ["}"])

    def guard(self, n: str) -> list[str]:
        return [f"if (t >= {n}) return;"]

    def preamble(self) -> list[str]:
        return []


def _kernels(L: _PyLang, d: int, d_k: int, d_v: int) -> list[str]:
    """The six kernels (see the module docstring) in the statements of ``L``."""
    def loads(sym: str, n: int, arr: str, *idx: str) -> list[str]:
        return [s for a in range(n) for s in L.let(f"{sym}_{a}", L.at(arr, *idx, a))]

    def cols(sym: str, n: int, arr: str, h: str, j: str) -> list[str]:  # transposed (B*H, n, N) arrays
        return [s for a in range(n) for s in L.let(f"{sym}_{a}", L.at(arr, h, a, j))]

    def unpack(name: str, rows: int, cols_: int) -> list[str]:  # parameter set ph (shared or per problem)
        return [s for a in range(rows) for b in range(cols_)
                for s in L.let(f"{name}_{a}_{b}", L.at(f"{name}s", "ph", a, b))]

    def stores(arr: str, sym: str, n: int, *idx: str, op: Callable[[str, str], list[str]] = L.set) -> list[str]:
        return [s for a in range(n) for s in op(L.at(arr, *idx, a), f"{sym}_{a}")]

    def zeros(sym: str, n: int) -> list[str]:
        return [s for a in range(n) for s in L.var(f"{sym}_{a}", L.zero)]

    # thread t = (bh, i), bh = bi * H + h: problem bi, head h, token i (row bi * N + i of X, PC);
    # parameters of set ph = bh (PB = B sets) or h (PB = 1: one set shared by the batch)
    head_row = (L.guard("B * H * N") + L.ilet("bh", L.div("t", "N")) + L.ilet("i", "t - bh * N")
                + L.ilet("bi", L.div("bh", "H")) + L.ilet("h", "bh - bi * H")
                + L.ilet("ph", L.cond("PB > 1", "bh", "h")))
    row = L.ilet("row", "bi * N + i")
    stop = L.ilet("stop", L.cond("causal", "i + 1", "N"))
    features = (head_row + row + unpack("Q", d_k, d) + unpack("K", d_k, d) + unpack("V", d_v, d)
                + loads("x", d, "X", "row") + loads("y", d, "X", "row") + L.sym("query") + L.sym("key")
                + stores("QF", "q", d_k, "bh", "i")
                + [s for a in range(d_k) for s in L.set(L.at("KT", "bh", a, "i"), f"k_{a}")]
                + [s for a in range(d_v) for s in L.set(L.at("VT", "bh", a, "i"), f"v_{a}")])
    logit_at_j = cols("k", d_k, "KT", "bh", "j") + L.sym("logit")
    forward = (head_row + stop + loads("q", d_k, "QF", "bh", "i") + L.var("m", L.neg_inf)
               + L.loop("j", "0", "stop", logit_at_j + L.if_("logit > m", L.set("m", "logit")))
               + L.var("s", L.zero) + zeros("acc", d_v)
               + L.loop("j", "0", "stop", logit_at_j + L.let("e", f"{L.exp}(logit - m)") + L.add("s", "e")
                        + [x for c in range(d_v) for x in L.add(f"acc_{c}", f"e * {L.at('VT', 'bh', c, 'j')}")])
               + [x for c in range(d_v) for x in L.let(f"A_{c}", f"acc_{c} / s")] + stores("A", "A", d_v, "bh", "i")
               + L.set(L.at("LOGZ", "bh", "i"), f"m + {L.log}(s)") + L.let("wh", L.at("c", "bh"))
               + unpack("O", d, d_v) + L.sym("head_out") + stores("OH", "o", d, "bh", "i"))
    # OUT = BASE + sum_h PARTS (h in order, then the residual): x_{r+1} = x_r + F, p_r = p_{r+1} + xbar
    head_sum = (L.guard("B * N") + L.ilet("bi", L.div("t", "N")) + L.ilet("i", "t - bi * N") + zeros("acc", d)
                + L.loop("h", "0", "H", [x for a in range(d)
                                         for x in L.add(f"acc_{a}", L.at("PARTS", "bi * H + h", "i", a))])
                + [x for a in range(d) for x in L.set(L.at("OUT", "t", a), f"{L.at('BASE', 't', a)} + acc_{a}")])
    rows = (head_row + row + stop + loads("ct", d, "PC", "row") + L.let("wh", L.at("c", "bh")) + unpack("O", d, d_v)
            + L.sym("cotangent") + loads("A", d_v, "A", "bh", "i") + L.sym("g_dot_a") + loads("q", d_k, "QF", "bh", "i")
            + L.let("lz", L.at("LOGZ", "bh", "i")) + zeros("qb", d_k)
            + L.loop("j", "0", "stop", logit_at_j + cols("v", d_v, "VT", "bh", "j")
                     + L.let("p", f"{L.exp}(logit - lz)") + L.sym("pair_score") + L.sym("query_inc")
                     + [x for b in range(d_k) for x in L.add(f"qb_{b}", f"dq_{b}")])
            + stores("QBAR", "qb", d_k, "bh", "i") + stores("G", "g", d_v, "bh", "i")
            + L.set(L.at("GA", "bh", "i"), "gA") + unpack("Q", d_k, d) + L.sym("jac_vjp")
            + stores("XH", "xj", d, "bh", "i"))
    keys = (head_row + L.ilet("j", "i") + L.ilet("start", L.cond("causal", "j", "0"))
            + cols("k", d_k, "KT", "bh", "j") + cols("v", d_v, "VT", "bh", "j")
            + zeros("kb", d_k) + zeros("vb", d_v)
            + L.loop("iq", "start", "N", loads("q", d_k, "QF", "bh", "iq") + L.sym("logit")
                     + L.let("p", f"{L.exp}(logit - {L.at('LOGZ', 'bh', 'iq')})") + loads("g", d_v, "G", "bh", "iq")
                     + L.let("gA", L.at("GA", "bh", "iq")) + L.sym("pair_score") + L.sym("key_inc")
                     + L.sym("value_inc")
                     + [x for b in range(d_k) for x in L.add(f"kb_{b}", f"dk_{b}")]
                     + [x for c in range(d_v) for x in L.add(f"vb_{c}", f"dv_{c}")])
            + stores("KBAR", "kb", d_k, "bh", "j") + stores("VBAR", "vb", d_v, "bh", "j")
            + L.if_("lions", unpack("K", d_k, d) + unpack("V", d_v, d) + L.sym("lions_vjp")
                    + stores("XH", "xl", d, "bh", "j", op=L.add)))
    out = L.preamble()
    for name, body in (("features", features), ("forward", forward), ("head_sum", head_sum),
                       ("adjoint_rows", rows), ("adjoint_keys", keys), ("param_grads", _param_grads(L, d, d_k, d_v))):
        out += L.kernel(name, body)
    return out


def _param_grads(L: _PyLang, d: int, d_k: int, d_v: int) -> list[str]:
    """Thread (bh, r), r < R = 2 d_k + d_v + d: row r of the stacked (dQ; dK; dV; dO) of head bh, a plain
    contraction over the tokens i in order (no atomics): dQ_bh = sum_i qbar^i x^iT (likewise dK, dV with
    kbar, vbar) and dO_bh = c_bh sum_i p^i A^iT."""
    R = 2 * d_k + d_v + d
    head = (L.guard(f"B * H * {R}") + L.ilet("bh", L.div("t", str(R))) + L.ilet("r", f"t - bh * {R}")
            + L.ilet("bi", L.div("bh", "H")))

    def bar_rows(lo: int, n: int, bar: str, out: str) -> list[str]:  # rows lo.. lo+n-1: sum_i bar^i_a x^iT
        acc = [s for e in range(d) for s in L.var(f"acc_{e}", L.zero)]
        body = L.let("u", L.at(bar, "bh", "i", "a")) + [
            s for e in range(d) for s in L.add(f"acc_{e}", f"u * {L.at('X', 'bi * N + i', e)}")]
        return L.if_(f"r >= {lo} and r < {lo + n}".replace(" and ", L.and_), L.ilet("a", f"r - {lo}") + acc
                     + L.loop("i", "0", "N", body)
                     + [s for e in range(d) for s in L.set(L.at(out, "bh", "a", e), f"acc_{e}")])

    lo = 2 * d_k + d_v
    acc = [s for e in range(d_v) for s in L.var(f"acc_{e}", L.zero)]
    body = L.let("u", L.at("PC", "bi * N + i", "a")) + [
        s for e in range(d_v) for s in L.add(f"acc_{e}", f"u * {L.at('A', 'bh', 'i', e)}")]
    o_rows = L.if_(f"r >= {lo}", L.ilet("a", f"r - {lo}") + acc + L.loop("i", "0", "N", body)
                   + [s for e in range(d_v) for s in L.set(L.at("DO", "bh", "a", e), f"{L.at('c', 'bh')} * acc_{e}")])
    return (head + bar_rows(0, d_k, "QBAR", "DQ") + bar_rows(d_k, d_k, "KBAR", "DK")
            + bar_rows(2 * d_k, d_v, "VBAR", "DV") + o_rows)


def cuda_source(blocks, flavour: str) -> str:
    """Kernel text (without header) of ``flavour`` (``python-cuda`` or ``cuda-c``) for the blocks of
    one (d, d_k, d_v): ``blocks`` has ``d``, ``d_k``, ``d_v`` and ``lines(group, printer, declare=)``."""
    lang = {PYTHON_CUDA.name: _PyLang, CUDA_C.name: _CLang}.get(flavour)
    if lang is None:
        raise ValueError(f"flavour must be python-cuda or cuda-c, got {flavour!r}")
    L = lang(blocks, _shapes(blocks.d, blocks.d_k, blocks.d_v))
    return "\n".join(_kernels(L, blocks.d, blocks.d_k, blocks.d_v)) + "\n"
