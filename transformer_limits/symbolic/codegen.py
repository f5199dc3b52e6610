"""SymPy expressions -> readable kernel sources for every backend, cached on disk.

The pipeline (Devito-style): a derivation yields scalar SymPy expressions; :func:`code_block`
common-subexpression-eliminates them and prints straight-line statements with one of the printers
below; backend *loop templates* (e.g. :mod:`transformer_limits.symbolic.attention_kernels`) place
those blocks inside loops; :func:`transformer_limits.kernel_cache.write_source` stores the finished
source as a real file in the cache folder, named by :func:`source_key` — a hash of (expressions,
printer, template, versions) — so that
``numba.njit(cache=True)`` finds its compiled artifacts again in the next process and a person can
open the file.

Printers (lessons from SymPy's issue tracker):

* ``numpy``  — vectorised NumPy. ``Piecewise`` -> nested ``numpy.where``, ``Max``/``Min`` ->
  ``numpy.maximum``/``numpy.minimum`` (never ``numpy.select``, which Numba cannot compile).
* ``scalar`` — plain Python on floats with :mod:`math` functions, for ``numba.njit`` and
  ``numba.cuda.jit``. ``Piecewise`` -> conditional expressions, ``Max`` -> ``max``.
* ``c``      — C99 (``double``) for CUDA C / CuPy. ``Piecewise`` -> ``?:``, ``Max`` -> ``fmax``.

``Heaviside`` is rewritten as a ``Piecewise`` (with SymPy's ``H(0) = 1/2`` unless given) before
printing, so ReLU and its derivative work on every backend.

**float32 Numba sources** (:func:`typed_python_source`).  Numba types a Python float literal, a
``math.inf`` and a ``numpy.empty(n)`` as float64, and float32 op float64 is float64: one such literal
in a loop silently computes the loop in float64 (half the SIMD lanes).  The float32 source of a Numba
kernel is therefore the float64 source (unchanged, so float64 kernels stay bitwise the same) passed
through one typed-literal pass: every float literal and ``math`` constant inside a function becomes a
``numpy.float32`` module constant (hoisted, one per value: ``_F3 = numpy.float32(0.5)``), every
``numpy.empty`` / ``numpy.zeros`` without a dtype gets ``_REAL`` (``numpy.float32``), and the argument of
``math.sqrt`` is cast to ``_REAL`` (``math.sqrt`` of an integer, e.g. a size, is float64).  Float scalar
*arguments* (beta, sigma_u, ...) are cast by the runtime
(:meth:`transformer_limits.numeric.runtime.Runtime.call`), as CUDA C takes them as ``real``.  The
result is what CUDA C gets from ``typedef float real;``: literals rounded to float32 once, arithmetic
and accumulations in float32.
"""

from __future__ import annotations

import hashlib
import io
import re
import tokenize
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import sympy as sp
from sympy.printing.c import C99CodePrinter
from sympy.printing.codeprinter import CodePrinter
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.pycode import PythonCodePrinter

from transformer_limits.kernel_cache import cache_dir, versions_tag

__all__ = [
    "PRINTERS",
    "CodeBlock",
    "cache_dir",
    "code_block",
    "indent",
    "lane_max_lines",
    "order_key_lines",
    "print_expr",
    "source_key",
    "typed_python_source",
    "unkeyed_name",
]


# --------------------------------------------------------------------------- printers
def _prepare(expr: sp.Expr) -> sp.Expr:
    """Rewrite constructs that some targets cannot print (Heaviside -> Piecewise)."""
    if expr.has(sp.Heaviside):
        expr = expr.replace(
            lambda e: isinstance(e, sp.Heaviside),
            lambda e: sp.Piecewise(
                (sp.Integer(0), e.args[0] < 0),
                (e.args[1] if len(e.args) > 1 else sp.Rational(1, 2), sp.Eq(e.args[0], 0)),
                (sp.Integer(1), True),
            ),
        )
    return expr


class _FoldMinMax:
    """Print n-ary ``Max``/``Min`` as nested calls of a binary function (``max``, ``fmax``, ...)."""

    _max_fn = "max"
    _min_fn = "min"

    if TYPE_CHECKING:  # supplied by the sympy printer this class is mixed into
        def _print(self, expr: Any, **kwargs: Any) -> str: ...

    def _fold(self, fn: str, expr) -> str:
        out, *rest = [self._print(a) for a in expr.args]
        for a in rest:
            out = f"{fn}({out}, {a})"
        return out

    def _print_Max(self, expr):
        return self._fold(self._max_fn, expr)

    def _print_Min(self, expr):
        return self._fold(self._min_fn, expr)

    def _print_Integer(self, expr):
        return f"{float(expr)!r}"  # float64 throughout: no integer division anywhere


def _print_square(printer, expr) -> str | None:
    """x**2 -> x*x (exact, and no pow() call in CUDA); None when the exponent is not 2."""
    base, exp = expr.args
    if exp != 2:
        return None
    b = printer.parenthesize(base, sp.printing.precedence.PRECEDENCE["Mul"])
    return f"({b}*{b})"  # parenthesised: a/x**2 must not become a/x*x


class _ScalarPrinter(_FoldMinMax, PythonCodePrinter):
    """Python on float scalars; safe inside ``numba.njit`` and ``numba.cuda.jit`` kernels."""

    def _print_Float(self, expr):
        return repr(float(expr))

    def _print_Rational(self, expr):
        return f"{float(expr)!r}"

    def _print_Pow(self, expr, rational=False):
        if expr.args[1] == -1:
            return f"1.0/{self.parenthesize(expr.args[0], sp.printing.precedence.PRECEDENCE['Pow'])}"
        return _print_square(self, expr) or super()._print_Pow(expr, rational=rational)


class _NumpyPrinter(_FoldMinMax, NumPyPrinter):
    """Vectorised NumPy with ``numpy.where`` for Piecewise (no ``numpy.select``)."""

    _max_fn = "numpy.maximum"
    _min_fn = "numpy.minimum"

    def _print_Piecewise(self, expr):
        *pairs, last = expr.args
        if last.cond != sp.true:
            raise ValueError("Piecewise without a default (True) branch cannot be printed")
        out = self._print(last.expr)
        for e, c in reversed(pairs):
            out = f"numpy.where({self._print(c)}, {self._print(e)}, {out})"
        return out

    def _print_Rational(self, expr):
        return f"{float(expr)!r}"

    def _print_Pow(self, expr, rational=False):
        return _print_square(self, expr) or super()._print_Pow(expr, rational=rational)


class _CPrinter(_FoldMinMax, C99CodePrinter):
    """CUDA C on the scalar type ``real`` (``typedef double real;`` or ``float``, put in front of the
    source when it is loaded: :data:`CUDA_C_REAL_TYPES`): every number is printed as a ``real``
    (``((real)0.5)``, ``((real)M_SQRT2)``) and the math functions by their overloaded C++ names
    (``exp``, ``fmax``: CUDA has ``float`` overloads), so one source is computed wholly in double
    or wholly in single precision, never promoted halfway."""

    _max_fn = "fmax"
    _min_fn = "fmin"

    def _print(self, expr, **kwargs):
        if isinstance(expr, sp.Basic) and expr in self.math_macros:  # sqrt(2) -> M_SQRT2, log(2) -> M_LN2
            return f"((real){self.math_macros[expr]})"
        return super()._print(expr, **kwargs)

    def _print_Pow(self, expr, rational=False):
        return _print_square(self, expr) or super()._print_Pow(expr)

    def _print_Integer(self, expr):
        return f"((real){float(expr)!r})"

    def _print_Float(self, expr):
        return f"((real){float(expr)!r})"

    def _print_Rational(self, expr):
        return f"((real)({float(expr.p)!r}/{float(expr.q)!r}))"


PRINTERS: dict[str, CodePrinter] = {
    "numpy": _NumpyPrinter({"fully_qualified_modules": True}),
    "scalar": _ScalarPrinter({"fully_qualified_modules": True}),
    "c": _CPrinter(),
}


def print_expr(expr: sp.Expr, printer: str) -> str:
    """Print one scalar expression with the named printer (``numpy``, ``scalar`` or ``c``)."""
    try:
        p = PRINTERS[printer]
    except KeyError:
        raise ValueError(f"unknown printer {printer!r} (known: {', '.join(PRINTERS)})") from None
    return p.doprint(_prepare(sp.sympify(expr)))


# --------------------------------------------------------------------------- code blocks
@dataclass(frozen=True)
class CodeBlock:
    """CSE'd straight-line code computing named scalar outputs from scalar input symbols.

    ``temporaries`` are ``(name, expression)`` pairs in evaluation order; ``outputs`` map each
    output name to its (reduced) expression.  :meth:`lines` prints them for one printer.
    """

    temporaries: tuple[tuple[str, sp.Expr], ...]
    outputs: tuple[tuple[str, sp.Expr], ...]

    def lines(self, printer: str, *, declare: str = "") -> list[str]:
        """Statements ``name = expr`` (``declare`` e.g. ``"const double "`` for C, with ``;``)."""
        end = ";" if printer == "c" else ""
        out = [f"{declare}{n} = {print_expr(e, printer)}{end}" for n, e in self.temporaries]
        out += [f"{declare}{n} = {print_expr(e, printer)}{end}" for n, e in self.outputs]
        return out

    def fingerprint(self) -> str:
        return sp.srepr((tuple(self.temporaries), tuple(self.outputs)))


def code_block(outputs: Mapping[str, sp.Expr], *, prefix: str = "t") -> CodeBlock:
    """Common-subexpression-eliminate ``outputs`` (name -> scalar expression).

    Temporaries are named ``_{prefix}{k}`` so that several blocks can share one scope.
    """
    names = list(outputs)
    exprs = [_prepare(sp.sympify(outputs[n])) for n in names]
    temps, reduced = sp.cse(exprs, symbols=sp.numbered_symbols(f"_{prefix}"), order="canonical")
    return CodeBlock(
        temporaries=tuple((str(s), e) for s, e in temps),
        outputs=tuple(zip(names, reduced)),
    )


def indent(lines: Iterable[str], level: int) -> str:
    pad = " " * (4 * level)
    return "\n".join(pad + line for line in lines)


def lane_max_lines(row: str, stop: str, lanes: int, weights: str | None = None) -> list[str]:
    """Scalar-Python lines setting ``m`` = max of ``row[j]``, j < ``stop``, in ``lanes`` independent
    compare/select lanes (a power of two; LLVM SLP-vectorises them, unlike one serial max chain).
    NaN entries are skipped (``l > m`` is false); with ``weights``, entries whose weight is not > 0 are
    skipped too (zero-weight atoms must not set a softmax shift)."""
    if lanes < 1 or lanes & (lanes - 1):
        raise ValueError(f"lanes must be a power of two, got {lanes}")

    def load(x: str, at: str) -> str:
        entry = f"{row}[{at}]"
        return f"l{x} = {entry} if {weights}[{at}] > 0.0 else -math.inf" if weights else f"l{x} = {entry}"

    names = [f"m{x}" for x in range(lanes)]
    # indices as j = lanes * jb + x with jb, x from range(): Numba wraps a negative index around, and
    # only an index built from range() counters is one LLVM can prove non-negative (no select per load)
    out = ([f"{m} = -math.inf" for m in names] + [f"for jb in range({stop} // {lanes}):", f"    j = {lanes} * jb"]
           + ["    " + load(str(x), f"j + {x}") for x in range(lanes)]
           + [f"    m{x} = l{x} if l{x} > m{x} else m{x}" for x in range(lanes)]
           + [f"for jr in range({stop} % {lanes}):", f"    j = {stop} - {stop} % {lanes} + jr", "    " + load("0", "j"),
              "    m0 = l0 if l0 > m0 else m0"])
    while len(names) > 1:  # pairwise combination
        out += [f"{x} = {y} if {y} > {x} else {x}" for x, y in zip(names[::2], names[1::2])]
        names = names[::2]
    return out + ["m = m0"]


def order_key_lines() -> list[str]:
    """Module-level source lines (after ``import numba``) of two llvmlite intrinsics for a running maximum
    that LLVM vectorises: ``_order_key(x)`` maps a float64 (float32) to an int64 (int32) whose integer
    order is the float order (the IEEE bits, with the 63 (31) non-sign bits of a negative number flipped),
    ``_order_value(k)`` maps it back.  A loop ``mk = kj if kj > mk else mk`` over ``kj = _order_key(l)``
    is an integer max reduction (one ``vpmaxsq`` per vector), where the float compare-and-select of
    :func:`lane_max_lines` is not vectorised (its NaN semantics).  The maximum is the float maximum
    exactly (-0.0 < +0.0; a NaN with the sign bit clear is above +inf: the caller's softmax is NaN then,
    as with a NaN logit anyway)."""
    return [
        "from llvmlite import ir as _ir_order",
        "from numba.extending import intrinsic as _intrinsic_order",
        "",
        "",
        "def _flip_negative(builder, bits):",
        "    width = bits.type.width",
        "    sign = builder.ashr(bits, _ir_order.Constant(bits.type, width - 1))",
        "    return builder.xor(bits, builder.and_(sign, _ir_order.Constant(bits.type, (1 << (width - 1)) - 1)))",
        "",
        "",
        "@_intrinsic_order",
        "def _order_key(typingctx, x):",
        "    key = numba.types.int64 if x == numba.types.float64 else numba.types.int32",
        "    def codegen(context, builder, signature, args):",
        "        return _flip_negative(builder, builder.bitcast(args[0], _ir_order.IntType(key.bitwidth)))",
        "    return key(x), codegen",
        "",
        "",
        "@_intrinsic_order",
        "def _order_value(typingctx, k):",
        "    real = numba.types.float64 if k.bitwidth == 64 else numba.types.float32",
        "    def codegen(context, builder, signature, args):",
        "        flt = _ir_order.DoubleType() if real == numba.types.float64 else _ir_order.FloatType()",
        "        return builder.bitcast(_flip_negative(builder, args[0]), flt)",
        "    return real(k), codegen",
    ]


# --------------------------------------------------------------------------- float32 Numba sources
#: ``math`` constants that Numba types as float64 (replaced by float32 module constants)
_MATH_CONSTANTS = {"inf": "numpy.inf", "pi": "numpy.pi", "e": "numpy.e", "nan": "numpy.nan", "tau": "2.0 * numpy.pi"}
#: NumPy allocations that default to float64 (get ``_REAL`` unless a dtype is given)
_ALLOCATIONS = ("empty", "zeros")


def _is_float_literal(text: str) -> bool:
    t = text.lower()
    return not t.startswith(("0x", "0o", "0b")) and not t.endswith("j") and ("." in t or "e" in t)


def _closing(tokens: list[tokenize.TokenInfo], k: int) -> int:
    """Index of the ``)`` matching the ``(`` at tokens[k]."""
    depth = 0
    for n in range(k, len(tokens)):
        if tokens[n].type == tokenize.OP and tokens[n].string in "([{":
            depth += 1
        elif tokens[n].type == tokenize.OP and tokens[n].string in ")]}":
            depth -= 1
            if depth == 0:
                return n
    raise ValueError("unbalanced parentheses in generated source")


def typed_python_source(source: str, precision: str) -> str:
    """The generated Numba ``source`` (float64) computed in ``precision``: itself for float64; for float32
    the typed-literal pass of the module docstring.  Only indented code (function bodies) is rewritten;
    module-level lines (imports, decorators, constants such as the float32 ``fast_exp``'s) are kept.
    The constants follow the first ``import numpy`` (added after ``import numba`` if missing)."""
    if precision == "float64":
        return source
    if precision != "float32":
        raise ValueError(f"precision must be float64 or float32, got {precision!r}")
    lines = source.splitlines(keepends=True)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    consts: dict[str, str] = {}  # value expression -> constant name, in order of first use

    def const(value: str) -> str:
        return consts.setdefault(value, f"_F{len(consts)}")

    edits: list[tuple[tuple[int, int], tuple[int, int], str]] = []  # (start, end, text), positions as tokenize's
    for k, tok in enumerate(tokens):
        row, col = tok.start
        if row > len(lines) or not lines[row - 1][:1].isspace():  # module level (or the end marker)
            continue
        nxt = tokens[k + 1:k + 4]
        if tok.type == tokenize.NUMBER and _is_float_literal(tok.string):
            edits.append((tok.start, tok.end, const(repr(float(tok.string)))))
        elif (tok.type == tokenize.NAME and tok.string in ("math", "numpy") and len(nxt) >= 2
              and nxt[0].string == "." and nxt[1].type == tokenize.NAME):
            attr = nxt[1].string
            if tok.string == "math" and attr in _MATH_CONSTANTS:
                edits.append((tok.start, nxt[1].end, const(_MATH_CONSTANTS[attr])))
            elif tok.string == "math" and attr == "sqrt" and len(nxt) == 3 and nxt[2].string == "(":
                close = tokens[_closing(tokens, k + 3)]
                edits += [(nxt[2].end, nxt[2].end, "_REAL("), (close.start, close.start, ")")]
            elif tok.string == "numpy" and attr in _ALLOCATIONS and len(nxt) == 3 and nxt[2].string == "(":
                n = _closing(tokens, k + 3)
                if not any(t.type == tokenize.NAME and t.string == "dtype" for t in tokens[k + 3:n]):
                    edits.append((tokens[n].start, tokens[n].start, ", _REAL"))
    for (r0, c0), (r1, c1), text in sorted(edits, reverse=True):
        assert r0 == r1, "a rewritten token spans lines"
        line = lines[r0 - 1]
        lines[r0 - 1] = line[:c0] + text + line[c1:]
    block = ["# float32: literals are numpy.float32 constants, scratch arrays _REAL (typed-literal pass,\n",
             "# transformer_limits.symbolic.codegen.typed_python_source); sums accumulate in float32.\n",
             "_REAL = numpy.float32\n"]
    block += [f"{name} = numpy.float32({value})\n" for value, name in consts.items()]
    at = next((n for n, line in enumerate(lines) if line.strip() == "import numpy"), None)
    if at is None:
        at = next(n for n, line in enumerate(lines) if line.strip() == "import numba")
        block.insert(0, "import numpy\n")
    out = "".join(lines[:at + 1] + block + lines[at + 1:])
    leftover = re.findall(r"^\s.*\bmath\.(inf|pi|nan|tau)\b", out, flags=re.M)
    assert not leftover, f"float64 constants left in a float32 source: {leftover}"
    return out


# --------------------------------------------------------------------------- cache keys
def source_key(fingerprints: Sequence[str], printer: str, template: str, precision: str = "float64") -> str:
    """Hash of (expressions, printer, template text, versions, and the precision unless float64): names
    the cached source file (float64 keys hash what they always hashed)."""
    h = hashlib.sha256()
    extra = () if precision == "float64" else (f"precision={precision}",)
    for part in (*fingerprints, printer, template, versions_tag(), *extra):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def unkeyed_name(filename: str) -> str:
    """``stem_<key>.ext`` -> ``stem.ext``: names for the docs, which must not churn with versions."""
    head, dot, ext = filename.rpartition(".")
    return f"{head.rsplit('_', 1)[0]}{dot}{ext}"
