"""GPU loop templates of the attention layer and its adjoint: flavours ``python-cuda`` and ``cuda-c``.

The scalar formulas are the SymPy blocks of
:func:`transformer_limits.symbolic.template_pieces.adjoint_pieces` (the same CSE'd blocks as the
``python-numba`` flavour of :mod:`transformer_limits.symbolic.attention_adjoint_kernels`, printed by
the ``scalar`` printer for ``numba.cuda.jit`` and by the C99 printer for CUDA C).  One template
(``_kernels``) is written once against a small statement builder (``_PyLang``, ``_CLang``) and emits
both sources, so the loop structure exists once and no formula is written by hand.  Layout
(docs/theory.md §A.2), every kernel one thread per (head h, token) unless noted, with sums over a
fixed index order only (no atomics: results are deterministic):

``features``      thread (h, i): QF[h, i] = Q_h x^i, KT[h, :, i] = K_h x^i, VT[h, :, i] = V_h x^i
``forward``       thread (h, i): row maximum and softmax sums over the visible keys j (all, or
                  j <= i when causal) in two sweeps, A_h^i, log Z_h^i, and the head's share
                  OH[h, i] = c_h O_h A_h^i of the layer field
``head_sum``      thread i: OUT[i] = sum_h PARTS[h, i] (h in order): F from OH, xbar from XH
``adjoint_rows``  thread (h, i): g^i = c_h O_h^T p^i, gA^i = <g^i, A^i>, one sweep over the visible j
                  (P_ij = exp(logit - log Z^i) recomputed, pair score sbar_ij), qbar^i into QBAR,
                  g^i, gA^i into G, GA, and the Jacobian term Q_h^T qbar^i into XH[h, i]
``adjoint_keys``  thread (h, j): one sweep over the queries i that see j (all, or i >= j when causal),
                  recomputing P_ij from the stored log Z^i: kbar^j = sum_i sbar_ij d logit/d k,
                  vbar^j = sum_i P_ij g^i into KBAR, VBAR; with ``lions`` it adds the Lions term
                  K_h^T kbar^j + V_h^T vbar^j to XH[h, j] (``lions`` off: the wrong-model control)

Arrays (C order, float64): X, PC, F, XBAR (N, d); Qs, Ks (H, d_k, d); Vs (H, d_v, d); Os (H, d, d_v);
c (H,); QF, QBAR, KBAR (H, N, d_k); KT (H, d_k, N); VT (H, d_v, N); A, G, VBAR (H, N, d_v);
LOGZ, GA (H, N); OH, XH (H, N, d).  H and N are passed as integers, ``causal`` and ``lions`` as
flags (bool in Python, int in C).
"""

from __future__ import annotations

from typing import Callable, Sequence

__all__ = ["cuda_source", "KERNEL_ARGS"]

#: (kernel name, arguments) in launch order; argument kinds: in, out, inout (arrays), real, flag, size
KERNEL_ARGS: dict[str, tuple[tuple[str, str], ...]] = {
    "features": (("X", "in"), ("Qs", "in"), ("Ks", "in"), ("Vs", "in"), ("H", "size"), ("N", "size"),
                 ("QF", "out"), ("KT", "out"), ("VT", "out")),
    "forward": (("QF", "in"), ("KT", "in"), ("VT", "in"), ("Os", "in"), ("c", "in"), ("beta", "real"),
                ("causal", "flag"), ("H", "size"), ("N", "size"), ("A", "out"), ("LOGZ", "out"), ("OH", "out")),
    "head_sum": (("PARTS", "in"), ("H", "size"), ("N", "size"), ("OUT", "out")),
    "adjoint_rows": (("PC", "in"), ("Qs", "in"), ("Os", "in"), ("c", "in"), ("QF", "in"), ("KT", "in"),
                     ("VT", "in"), ("A", "in"), ("LOGZ", "in"), ("beta", "real"), ("causal", "flag"),
                     ("H", "size"), ("N", "size"), ("QBAR", "out"), ("G", "out"), ("GA", "out"), ("XH", "out")),
    "adjoint_keys": (("Ks", "in"), ("Vs", "in"), ("QF", "in"), ("KT", "in"), ("VT", "in"), ("LOGZ", "in"),
                     ("G", "in"), ("GA", "in"), ("beta", "real"), ("causal", "flag"), ("lions", "flag"),
                     ("H", "size"), ("N", "size"), ("KBAR", "out"), ("VBAR", "out"), ("XH", "inout")),
}


def _shapes(d: int, d_k: int, d_v: int) -> dict[str, tuple[str, ...]]:
    """Array shapes, as C expressions (for flat indexing)."""
    s = {"X": ("N", d), "PC": ("N", d), "OUT": ("N", d), "Qs": ("H", d_k, d), "Ks": ("H", d_k, d),
         "Vs": ("H", d_v, d), "Os": ("H", d, d_v), "c": ("H",), "QF": ("H", "N", d_k), "QBAR": ("H", "N", d_k),
         "KBAR": ("H", "N", d_k), "KT": ("H", d_k, "N"), "VT": ("H", d_v, "N"), "A": ("H", "N", d_v),
         "G": ("H", "N", d_v), "VBAR": ("H", "N", d_v), "LOGZ": ("H", "N"), "GA": ("H", "N"),
         "OH": ("H", "N", d), "XH": ("H", "N", d), "PARTS": ("H", "N", d)}
    return {k: tuple(str(x) for x in v) for k, v in s.items()}


def _pad(body: Sequence[str]) -> list[str]:
    return ["    " + s for s in body]


class _PyLang:
    """Statements of a ``numba.cuda.jit`` kernel (printer ``scalar``)."""

    printer, comment = "scalar", "#"
    exp, log, neg_inf = "math.exp", "math.log", "-math.inf"

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
    exp, log, neg_inf = "exp", "log", "-INFINITY"
    _TYPES = {"in": "const double* __restrict__ ", "out": "double* __restrict__ ", "inout": "double* ",
              "real": "const double ", "flag": "const int ", "size": "const long long "}

    def at(self, arr: str, *idx: object) -> str:
        flat = str(idx[0])
        for size, x in zip(self.shapes[arr][1:], idx[1:]):
            flat = f"({flat}) * {size} + {x}"
        return f"{arr}[{flat}]"

    def let(self, name: str, expr: str) -> list[str]:
        return [f"const double {name} = {expr};"]

    def var(self, name: str, expr: str) -> list[str]:
        return [f"double {name} = {expr};"]

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
        return self.b.lines(group, "c", declare="const double ")

    def kernel(self, name: str, body: list[str]) -> list[str]:
        sig = ", ".join(self._TYPES[kind] + n for n, kind in KERNEL_ARGS[name])
        return (["", f'extern "C" __global__ void {name}({sig})', "{",
                 "    const long long t = (long long)blockDim.x * blockIdx.x + threadIdx.x;"] + _pad(body) + ["}"])

    def guard(self, n: str) -> list[str]:
        return [f"if (t >= {n}) return;"]

    def preamble(self) -> list[str]:
        return []


def _kernels(L: _PyLang, d: int, d_k: int, d_v: int) -> list[str]:
    """The five kernels (see the module docstring) in the statements of ``L``."""
    def loads(sym: str, n: int, arr: str, *idx: str) -> list[str]:
        return [s for a in range(n) for s in L.let(f"{sym}_{a}", L.at(arr, *idx, a))]

    def cols(sym: str, n: int, arr: str, h: str, j: str) -> list[str]:  # transposed (H, n, N) arrays
        return [s for a in range(n) for s in L.let(f"{sym}_{a}", L.at(arr, h, a, j))]

    def unpack(name: str, rows: int, cols_: int) -> list[str]:
        return [s for a in range(rows) for b in range(cols_)
                for s in L.let(f"{name}_{a}_{b}", L.at(f"{name}s", "h", a, b))]

    def stores(arr: str, sym: str, n: int, *idx: str, op: Callable[[str, str], list[str]] = L.set) -> list[str]:
        return [s for a in range(n) for s in op(L.at(arr, *idx, a), f"{sym}_{a}")]

    def zeros(sym: str, n: int) -> list[str]:
        return [s for a in range(n) for s in L.var(f"{sym}_{a}", "0.0")]

    head_row = L.guard("H * N") + L.ilet("h", L.div("t", "N")) + L.ilet("i", "t - h * N")
    stop = L.ilet("stop", L.cond("causal", "i + 1", "N"))
    features = (head_row + unpack("Q", d_k, d) + unpack("K", d_k, d) + unpack("V", d_v, d)
                + loads("x", d, "X", "i") + loads("y", d, "X", "i") + L.sym("query") + L.sym("key")
                + stores("QF", "q", d_k, "h", "i")
                + [s for a in range(d_k) for s in L.set(L.at("KT", "h", a, "i"), f"k_{a}")]
                + [s for a in range(d_v) for s in L.set(L.at("VT", "h", a, "i"), f"v_{a}")])
    logit_at_j = cols("k", d_k, "KT", "h", "j") + L.sym("logit")
    forward = (head_row + stop + loads("q", d_k, "QF", "h", "i") + L.var("m", L.neg_inf)
               + L.loop("j", "0", "stop", logit_at_j + L.if_("logit > m", L.set("m", "logit")))
               + L.var("s", "0.0") + zeros("acc", d_v)
               + L.loop("j", "0", "stop", logit_at_j + L.let("e", f"{L.exp}(logit - m)") + L.add("s", "e")
                        + [x for c in range(d_v) for x in L.add(f"acc_{c}", f"e * {L.at('VT', 'h', c, 'j')}")])
               + [x for c in range(d_v) for x in L.let(f"A_{c}", f"acc_{c} / s")] + stores("A", "A", d_v, "h", "i")
               + L.set(L.at("LOGZ", "h", "i"), f"m + {L.log}(s)") + L.let("wh", L.at("c", "h"))
               + unpack("O", d, d_v) + L.sym("head_out") + stores("OH", "o", d, "h", "i"))
    head_sum = (L.guard("N") + L.ilet("i", "t") + zeros("acc", d)
                + L.loop("h", "0", "H", [x for a in range(d) for x in L.add(f"acc_{a}", L.at("PARTS", "h", "i", a))])
                + stores("OUT", "acc", d, "i"))
    rows = (head_row + stop + loads("ct", d, "PC", "i") + L.let("wh", L.at("c", "h")) + unpack("O", d, d_v)
            + L.sym("cotangent") + loads("A", d_v, "A", "h", "i") + L.sym("g_dot_a") + loads("q", d_k, "QF", "h", "i")
            + L.let("lz", L.at("LOGZ", "h", "i")) + zeros("qb", d_k)
            + L.loop("j", "0", "stop", logit_at_j + cols("v", d_v, "VT", "h", "j")
                     + L.let("p", f"{L.exp}(logit - lz)") + L.sym("pair_score") + L.sym("query_inc")
                     + [x for b in range(d_k) for x in L.add(f"qb_{b}", f"dq_{b}")])
            + stores("QBAR", "qb", d_k, "h", "i") + stores("G", "g", d_v, "h", "i") + L.set(L.at("GA", "h", "i"), "gA")
            + unpack("Q", d_k, d) + L.sym("jac_vjp") + stores("XH", "xj", d, "h", "i"))
    keys = (L.guard("H * N") + L.ilet("h", L.div("t", "N")) + L.ilet("j", "t - h * N")
            + L.ilet("start", L.cond("causal", "j", "0"))
            + cols("k", d_k, "KT", "h", "j") + cols("v", d_v, "VT", "h", "j")
            + zeros("kb", d_k) + zeros("vb", d_v)
            + L.loop("i", "start", "N", loads("q", d_k, "QF", "h", "i") + L.sym("logit")
                     + L.let("p", f"{L.exp}(logit - {L.at('LOGZ', 'h', 'i')})") + loads("g", d_v, "G", "h", "i")
                     + L.let("gA", L.at("GA", "h", "i")) + L.sym("pair_score") + L.sym("key_inc") + L.sym("value_inc")
                     + [x for b in range(d_k) for x in L.add(f"kb_{b}", f"dk_{b}")]
                     + [x for c in range(d_v) for x in L.add(f"vb_{c}", f"dv_{c}")])
            + stores("KBAR", "kb", d_k, "h", "j") + stores("VBAR", "vb", d_v, "h", "j")
            + L.if_("lions", unpack("K", d_k, d) + unpack("V", d_v, d) + L.sym("lions_vjp")
                    + stores("XH", "xl", d, "h", "j", op=L.add)))
    out = L.preamble()
    for name, body in (("features", features), ("forward", forward), ("head_sum", head_sum),
                       ("adjoint_rows", rows), ("adjoint_keys", keys)):
        out += L.kernel(name, body)
    return out


def cuda_source(blocks, flavour: str) -> str:
    """Kernel text (without header) of ``flavour`` (``python-cuda`` or ``cuda-c``) for the blocks of
    one (d, d_k, d_v): ``blocks`` has ``d``, ``d_k``, ``d_v`` and ``lines(group, printer, declare=)``."""
    lang = {"python-cuda": _PyLang, "cuda-c": _CLang}.get(flavour)
    if lang is None:
        raise ValueError(f"flavour must be python-cuda or cuda-c, got {flavour!r}")
    L = lang(blocks, _shapes(blocks.d, blocks.d_k, blocks.d_v))
    return "\n".join(_kernels(L, blocks.d, blocks.d_k, blocks.d_v)) + "\n"
