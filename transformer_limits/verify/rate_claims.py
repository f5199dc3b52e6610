"""Rate claims: sums of monomial terms in named refinement parameters.

A convergence claim such as docs/theory.md §A.5,

    err(L, H) ≤ C1 L^{-1} + C2 L^{-1/3} H^{-1/2},

or §B.4,

    E sup_t (1/N) Σ_i |X^i_{⌊Lt/T⌋} − X̄^i_t|² ≤ c_{N,T} (log L / L + 1/m),

is a :class:`RateClaim`: a tuple of :class:`RateTerm` (each ``C_k Π_p p^{a_{k,p}} Π_p log(p)^{b_{k,p}}``
with a named non-negative constant ``C_k``), plus what the error *is* (the error functional) and how
the discrete and limiting objects are coupled across refinement levels (free text).

Claims are written as short strings and parsed by :func:`parse_rate_claim`::

    "L^-1 + L^-1/3 H^-1/2"          # C1/L + C2 L^{-1/3} H^{-1/2}
    "log(L)/L + 1/m"                 # C1 log(L)/L + C2/m
    "N^-1/2"                         # C1 N^{-1/2}
    "C_fwd L^-1 + C_mf L^(-1/3) H^{-1/2}"   # explicit coefficient names

Grammar (whitespace or ``*`` multiplies, ``/`` divides, ``^`` or ``**`` raises):

* a term is a product of factors; terms are joined by ``+`` (``-`` between terms is refused: the
  terms of a rate bound are non-negative);
* a factor is a parameter name ``L``, ``log(L)`` (also ``ln(L)``), ``sqrt(L)``, the unit ``1``, or a
  parenthesised product; any factor may carry an exponent;
* an exponent is a signed integer, decimal or ratio, optionally in ``(...)`` or ``{...}``.  A ratio
  binds to the exponent: ``L^-1/3`` is ``L^{-1/3}`` (the usual way rates are written), while
  ``L^-1/m`` is ``L^{-1} m^{-1}`` because ``m`` is not a number;
* a leading name that matches ``C``, ``C1``, ``C_2``, ``c_fwd`` ... (``[Cc]`` optionally followed by
  ``_`` and word characters), or any name not among ``params`` when ``params`` is given, is the
  term's coefficient name; terms without one are named ``C1``, ``C2``, ... in order.

Input limits (refused with a ``ValueError`` naming the token and position, never a ``RecursionError``
or ``OverflowError``): at most :data:`MAX_CLAIM_LENGTH` characters, parentheses nested at most
:data:`MAX_NESTING` deep, number tokens of at most 24 characters with a decimal exponent of at most 24
(``1e999`` is refused), and exponents with ``|q| <=`` :data:`MAX_ABS_EXPONENT` and denominator ≤ 10⁴.

``str(claim)`` writes the canonical form (``C1 L^-1 + C2 L^-1/3 H^-1/2``), which parses back to an
equal claim; :meth:`RateClaim.latex` writes LaTeX.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

__all__ = [
    "ERROR_FUNCTIONALS",
    "RateTerm",
    "RateClaim",
    "parse_rate_claim",
]

#: Accepted values of :attr:`RateClaim.error_functional`.
#: ``strong``/``pathwise``: E|X_discrete − X_limit| (or a power of it) under a coupling;
#: ``weak``: |E f(X_discrete) − E f(X_limit)| for a named test function f;
#: ``sup-inputs``: sup over a compact set of inputs of a pathwise error.
ERROR_FUNCTIONALS = ("strong", "pathwise", "weak", "sup-inputs")

_COEFFICIENT_NAME = re.compile(r"[Cc](_?\w*)?\Z")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = {"log", "ln", "sqrt"}
_MAX_DENOMINATOR = 10_000

# Input limits (issue 11): claims are short human-written formulas, so anything beyond these is a
# mistake or an attack, refused with a ValueError before it can exhaust the stack or memory.
#: longest claim text (characters)
MAX_CLAIM_LENGTH = 2_000
#: deepest parenthesis nesting (the parser is recursive-descent: depth bounds its recursion)
MAX_NESTING = 32
#: largest |exponent| of a parameter or log factor in a term (rates in the papers have |q| <= 2)
MAX_ABS_EXPONENT = 100
#: most characters in a number token; its decimal exponent (``1e5``) is bounded by the same count,
#: so ``1e999`` (or ``1e999999999``, which would build a 10^9-digit integer) is refused up front
_MAX_NUMBER_CHARS = 24
_NUMBER_PARTS = re.compile(r"(?P<mantissa>\d*\.?\d*)(?:[eE](?P<exp>[+-]?\d+))?\Z")


def _as_fraction(value: Any, what: str) -> Fraction:
    """Exact rational for an exponent given as int, float, str or Fraction."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, str) and len(value) > _MAX_NUMBER_CHARS:
        raise ValueError(f"{what} must be a short rational number (at most {_MAX_NUMBER_CHARS} characters), "
                         f"got {value[:_MAX_NUMBER_CHARS]!r}...")
    try:
        if isinstance(value, float):
            if not np.isfinite(value):
                raise ValueError
            return Fraction(value).limit_denominator(_MAX_DENOMINATOR)
        return Fraction(value)
    except (TypeError, ValueError, ZeroDivisionError):
        raise ValueError(f"{what} must be a finite rational number, got {value!r}") from None


def _format_power(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _clean_powers(powers: Mapping[str, Any] | None, what: str) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for name, value in (powers or {}).items():
        if not isinstance(name, str) or not _IDENT.match(name) or name in _RESERVED:
            raise ValueError(f"{what}: {name!r} is not a valid parameter name")
        q = _as_fraction(value, f"{what}[{name!r}]")
        if abs(q) > MAX_ABS_EXPONENT or q.denominator > _MAX_DENOMINATOR:
            raise ValueError(f"{what}[{name!r}] = {_format_power(q)} is outside the stated limits "
                             f"(|exponent| <= {MAX_ABS_EXPONENT}, denominator <= {_MAX_DENOMINATOR})")
        if q != 0:
            out[name] = q
    return out


@dataclass(frozen=True, eq=False)
class RateTerm:
    """One term ``C Π_p p^{exponents[p]} Π_p log(p)^{log_powers[p]}`` of a rate claim.

    ``coefficient`` names the non-negative constant C (fitted, never written as a number);
    ``exponents`` maps parameter names to rational exponents (``{"L": -1/3, "H": -1/2}``; floats are
    converted to the nearest fraction with denominator ≤ 10⁴, zero exponents are dropped);
    ``log_powers`` maps parameter names to the power of their logarithm (``{"L": 1}`` for log L).
    Equality ignores the order of the mappings.
    """

    coefficient: str
    exponents: Mapping[str, Fraction] = field(default_factory=dict)
    log_powers: Mapping[str, Fraction] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.coefficient, str) or not _IDENT.match(self.coefficient):
            raise ValueError(f"coefficient must be an identifier, got {self.coefficient!r}")
        object.__setattr__(self, "exponents", _clean_powers(self.exponents, "exponents"))
        object.__setattr__(self, "log_powers", _clean_powers(self.log_powers, "log_powers"))

    # -- identity --------------------------------------------------------------------------------
    def shape(self) -> tuple:
        """Order-free key of the monomial (without the coefficient name)."""
        return (tuple(sorted(self.exponents.items())), tuple(sorted(self.log_powers.items())))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RateTerm):
            return NotImplemented
        return self.coefficient == other.coefficient and self.shape() == other.shape()

    def __hash__(self) -> int:
        return hash((self.coefficient, self.shape()))

    @property
    def parameters(self) -> tuple[str, ...]:
        """Parameter names in order of first appearance (logs first, then powers)."""
        return tuple(dict.fromkeys([*self.log_powers, *self.exponents]))

    # -- evaluation ------------------------------------------------------------------------------
    def evaluate(self, params_table: Mapping[str, Any]) -> np.ndarray:
        """Monomial values Π p^a log(p)^b, shape ``(n_points,)`` (constant C excluded)."""
        columns = _columns(params_table, self.parameters)
        n = _table_length(params_table)
        out = np.ones(n, dtype=np.float64)
        for name, power in self.log_powers.items():
            out *= np.log(columns[name]) ** float(power)
        for name, power in self.exponents.items():
            out *= columns[name] ** float(power)
        return out

    # -- text ------------------------------------------------------------------------------------
    def monomial(self) -> str:
        """Canonical text of the monomial without coefficient, e.g. ``log(L) L^-1`` or ``1``."""
        parts = [
            "log(%s)" % name if power == 1 else "log(%s)^%s" % (name, _format_power(power))
            for name, power in self.log_powers.items()
        ]
        parts += [
            name if power == 1 else f"{name}^{_format_power(power)}"
            for name, power in self.exponents.items()
        ]
        return " ".join(parts) if parts else "1"

    def __str__(self) -> str:
        monomial = self.monomial()
        return self.coefficient if monomial == "1" else f"{self.coefficient} {monomial}"

    def latex(self) -> str:
        """LaTeX of ``C p^a log(p)^b`` (coefficient ``C1`` → ``C_{1}``)."""
        coef = _latex_name(self.coefficient)
        parts = []
        for name, power in self.log_powers.items():
            parts.append(r"\log %s" % _latex_name(name) if power == 1 else
                         r"(\log %s)^{%s}" % (_latex_name(name), _format_power(power)))
        for name, power in self.exponents.items():
            parts.append(_latex_name(name) if power == 1 else
                         "%s^{%s}" % (_latex_name(name), _format_power(power)))
        return coef + (r"\, " + r"\, ".join(parts) if parts else "")


def _latex_name(name: str) -> str:
    m = re.match(r"([A-Za-z]+)_?(\w*)\Z", name)
    if m and m.group(2):
        return f"{m.group(1)}_{{{m.group(2)}}}"
    return name.replace("_", r"\_")


def _table_length(params_table: Mapping[str, Any]) -> int:
    lengths = {np.size(v) for v in params_table.values()}
    if len(lengths) > 1:
        raise ValueError(f"params_table columns have different lengths {sorted(lengths)}")
    return lengths.pop() if lengths else 0


def _columns(params_table: Mapping[str, Any], names: Iterable[str]) -> dict[str, np.ndarray]:
    """Float64 1-D columns of the named parameters, validated positive and finite."""
    if not isinstance(params_table, Mapping):
        raise ValueError(f"params_table must be a mapping name -> values, got {type(params_table).__name__}")
    out = {}
    for name in names:
        if name not in params_table:
            raise ValueError(f"params_table has no column {name!r} (has {sorted(params_table)})")
        col = np.atleast_1d(np.asarray(params_table[name], dtype=np.float64))
        if col.ndim != 1:
            raise ValueError(f"params_table[{name!r}] must be 1-D, got shape {col.shape}")
        if not np.all(np.isfinite(col)) or np.any(col <= 0):
            raise ValueError(f"params_table[{name!r}] must be finite and positive")
        out[name] = col
    return out


@dataclass(frozen=True, eq=False)
class RateClaim:
    """A claimed bound ``err ≲ Σ_k C_k m_k(params)`` with its error functional and coupling.

    ``terms``: the monomials m_k with named non-negative constants C_k (distinct names, distinct
    monomials).  ``error_functional``: one of ``ERROR_FUNCTIONALS``; ``test_function`` names f for
    a weak error (required then).  ``coupling``: how discrete and limiting objects share randomness
    across refinement levels (e.g. "Brownian increments summed from the finest grid; Basteri–Trevisan
    coupling of G^m to G").
    """

    name: str
    terms: tuple[RateTerm, ...]
    error_functional: str = "strong"
    test_function: str | None = None
    coupling: str = ""

    def __post_init__(self) -> None:
        terms = tuple(self.terms)
        if not terms or not all(isinstance(t, RateTerm) for t in terms):
            raise ValueError("terms must be a non-empty sequence of RateTerm")
        object.__setattr__(self, "terms", terms)
        names = [t.coefficient for t in terms]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"terms: duplicate coefficient name(s) {dup}")
        shapes = [t.shape() for t in terms]
        for i, s in enumerate(shapes):
            if s in shapes[:i]:
                raise ValueError(f"terms: duplicate monomial {terms[i].monomial()!r}")
        clash = sorted(set(names) & set(self.parameters))
        if clash:
            raise ValueError(f"terms: coefficient name(s) {clash} are also parameter names")
        if self.error_functional not in ERROR_FUNCTIONALS:
            raise ValueError(
                f"error_functional must be one of {', '.join(ERROR_FUNCTIONALS)}; got {self.error_functional!r}"
            )
        if self.error_functional == "weak" and not self.test_function:
            raise ValueError("test_function is required when error_functional is 'weak'")

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, **kwargs: Any) -> "RateClaim":
        """Same as :func:`parse_rate_claim`."""
        return parse_rate_claim(text, **kwargs)

    # -- structure -------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RateClaim):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(str(self))

    @property
    def parameters(self) -> tuple[str, ...]:
        """Parameter names in order of first appearance."""
        return tuple(dict.fromkeys(p for t in self.terms for p in t.parameters))

    @property
    def coefficient_names(self) -> tuple[str, ...]:
        return tuple(t.coefficient for t in self.terms)

    def evaluate_terms(self, params_table: Mapping[str, Any]) -> np.ndarray:
        """Design matrix ``X[i, k] = m_k(params_i)``, shape ``(n_points, n_terms)``.

        ``params_table`` maps each parameter name to a 1-D array of length n_points (positive).
        The claimed error at point i is ``X[i] @ C``.
        """
        _columns(params_table, self.parameters)  # validate once, with good messages
        return np.column_stack([t.evaluate(params_table) for t in self.terms])

    def predict(self, params_table: Mapping[str, Any], constants: Mapping[str, float]) -> np.ndarray:
        """``Σ_k C_k m_k(params)``, shape ``(n_points,)``; ``constants`` keyed by coefficient name."""
        missing = [n for n in self.coefficient_names if n not in constants]
        if missing:
            raise ValueError(f"constants is missing {missing}")
        c = np.array([constants[n] for n in self.coefficient_names], dtype=np.float64)
        return self.evaluate_terms(params_table) @ c

    def leading_term(self, param: str) -> RateTerm:
        """The slowest-decaying term in ``param`` with the other parameters held fixed.

        Among the terms that depend on ``param`` (through a power or a log), the one with the largest
        exponent of ``param``; ties are broken by the larger power of log(param) (log L / L decays
        slower than 1/L).  Terms free of ``param`` are constants along that direction and are not
        considered.
        """
        candidates = [t for t in self.terms if param in t.parameters]
        if not candidates:
            raise ValueError(f"param {param!r} does not appear in claim {str(self)!r}")
        return max(candidates, key=lambda t: (t.exponents.get(param, Fraction(0)),
                                              t.log_powers.get(param, Fraction(0))))

    def leading_exponent(self, param: str) -> Fraction:
        """Exponent q of the slowest claimed decay ``param^q`` (others fixed), e.g. −1/3 for L in
        ``L^-1 + L^-1/3 H^-1/2`` and −1 for L in ``log(L)/L + 1/m`` (the log factor is reported by
        :meth:`leading_term`)."""
        return self.leading_term(param).exponents.get(param, Fraction(0))

    # -- text ------------------------------------------------------------------------------------
    def expression(self) -> str:
        """Canonical text with coefficient names, e.g. ``C1 L^-1 + C2 L^-1/3 H^-1/2``."""
        return " + ".join(str(t) for t in self.terms)

    def __str__(self) -> str:
        return self.expression()

    def latex(self) -> str:
        """LaTeX of the bound, e.g. ``C_{1}\\, L^{-1} + C_{2}\\, L^{-1/3}\\, H^{-1/2}``."""
        return " + ".join(t.latex() for t in self.terms)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (exponents as strings like ``"-1/3"``)."""
        return {
            "name": self.name,
            "expression": self.expression(),
            "terms": [
                {
                    "coefficient": t.coefficient,
                    "exponents": {k: _format_power(v) for k, v in t.exponents.items()},
                    "log_powers": {k: _format_power(v) for k, v in t.log_powers.items()},
                }
                for t in self.terms
            ],
            "error_functional": self.error_functional,
            "test_function": self.test_function,
            "coupling": self.coupling,
        }


# ------------------------------------------------------------------------------------------------
# Parser
# ------------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>\*\*|[\^*/+\-(){}]))"
)


class _Parser:
    """Recursive-descent parser for rate-claim strings (see the module docstring)."""

    def __init__(self, text: str, params: Sequence[str] | None) -> None:
        if len(text) > MAX_CLAIM_LENGTH:
            raise ValueError(f"rate claim {text[:40]!r}...: text is {len(text)} characters long, over the "
                             f"stated limit of {MAX_CLAIM_LENGTH}")
        self.text = text
        self.params = None if params is None else set(params)
        self.tokens: list[tuple[str, str, int]] = []
        self.depth = 0
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                bad = text[pos:].lstrip()[:1]
                at = pos + (len(text[pos:]) - len(text[pos:].lstrip()))
                raise self.error(f"unexpected character {bad!r}", at)
            kind = m.lastgroup
            value = m.group(kind)
            if kind == "number":
                self.check_number(value, m.start(kind))
            self.tokens.append((kind, "^" if value == "**" else value, m.start(kind)))
            pos = m.end()
        self.i = 0

    def check_number(self, value: str, position: int) -> None:
        """Refuse number tokens too long or with too large a decimal exponent (``1e999``) before
        ``Fraction`` expands them."""
        parts = _NUMBER_PARTS.match(value)
        exp = parts.group("exp") if parts else None
        if len(value) > _MAX_NUMBER_CHARS or (exp is not None and abs(int(exp)) > _MAX_NUMBER_CHARS):
            raise self.error(f"number {value[:_MAX_NUMBER_CHARS]!r} is too long or too large (at most "
                             f"{_MAX_NUMBER_CHARS} characters and a decimal exponent of at most "
                             f"{_MAX_NUMBER_CHARS})", position)

    def error(self, message: str, position: int | None = None) -> ValueError:
        if position is None:
            position = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        shown = self.text if len(self.text) <= 80 else self.text[:80] + "..."  # one short line
        return ValueError(f"rate claim {shown!r}: {message} at position {position}")

    def peek(self, offset: int = 0) -> tuple[str, str, int] | None:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else None

    def accept(self, value: str) -> bool:
        tok = self.peek()
        if tok is not None and tok[0] == "op" and tok[1] == value:
            self.i += 1
            return True
        return False

    def expect(self, value: str) -> None:
        if not self.accept(value):
            tok = self.peek()
            found = "end of text" if tok is None else repr(tok[1])
            raise self.error(f"expected {value!r}, found {found}")

    # claim := term ('+' term)*
    def claim(self) -> list[tuple[str | None, dict, dict]]:
        if not self.tokens:
            raise self.error("empty claim", 0)
        terms = [self.term()]
        while self.peek() is not None:
            tok = self.peek()
            if tok[1] == "-":
                raise self.error("'-' between terms (the terms of a rate bound are non-negative; use '+')")
            if tok[1] != "+":
                raise self.error(f"unexpected token {tok[1]!r}")
            self.i += 1
            terms.append(self.term())
        return terms

    def is_coefficient(self, name: str) -> bool:
        if name in _RESERVED:
            return False
        if self.params is not None:
            return name not in self.params
        return bool(_COEFFICIENT_NAME.match(name))

    # term := [coefficient] product
    def term(self) -> tuple[str | None, dict, dict]:
        coefficient = None
        tok = self.peek()
        if tok is not None and tok[0] == "name" and self.is_coefficient(tok[1]):
            nxt = self.peek(1)
            if not (nxt is not None and nxt[1] == "("):
                coefficient = tok[1]
                self.i += 1
                self.accept("*")
                nxt = self.peek()
                if nxt is None or nxt[1] == "+":
                    return coefficient, {}, {}
                if nxt[1] == "/":  # "C/m": the coefficient times 1/m
                    exps, logs = self.product(first=({}, {}))
                    return coefficient, exps, logs
        exps, logs = self.product()
        return coefficient, exps, logs

    # product := factor (('*' | '/' | juxtaposition) factor)*
    def product(self, first: tuple[dict, dict] | None = None) -> tuple[dict, dict]:
        exps: dict[str, Fraction] = {}
        logs: dict[str, Fraction] = {}
        self._combine(exps, logs, self.factor() if first is None else first, 1)
        while True:
            tok = self.peek()
            if tok is None or tok[1] in ("+", "-", ")"):
                return exps, logs
            sign = 1
            if tok[1] == "/":
                self.i += 1
                sign = -1
            elif tok[1] == "*":
                self.i += 1
            self._combine(exps, logs, self.factor(), sign)

    @staticmethod
    def _combine(exps: dict, logs: dict, factor: tuple[dict, dict], sign: int) -> None:
        for target, source in zip((exps, logs), factor):
            for name, power in source.items():
                target[name] = target.get(name, Fraction(0)) + sign * power

    # factor := atom ['^' exponent]
    def factor(self) -> tuple[dict, dict]:
        tok = self.peek()
        if tok is None:
            raise self.error("expected a factor, found end of text")
        kind, value, pos = tok
        if kind == "number":
            if Fraction(value) != 1:
                raise self.error(
                    f"numeric constant {value!r} (constants are fitted: write a coefficient name like C1)", pos)
            self.i += 1
            exps, logs = {}, {}
        elif kind == "name" and value in _RESERVED:
            self.i += 1
            self.expect("(")
            arg = self.peek()
            if arg is None or arg[0] != "name" or arg[1] in _RESERVED:
                raise self.error(f"{value}(...) needs a parameter name")
            self.i += 1
            self.expect(")")
            self.check_parameter(arg[1], arg[2])
            if value == "sqrt":
                exps, logs = {arg[1]: Fraction(1, 2)}, {}
            else:
                exps, logs = {}, {arg[1]: Fraction(1)}
        elif kind == "name":
            self.check_parameter(value, pos)
            if self.is_coefficient(value):
                raise self.error(
                    f"coefficient name {value!r} inside a term (a coefficient may only lead its term)", pos)
            self.i += 1
            exps, logs = {value: Fraction(1)}, {}
        elif value == "(":
            if self.depth >= MAX_NESTING:
                raise self.error(f"parentheses nested deeper than the stated limit of {MAX_NESTING}", pos)
            self.i += 1
            self.depth += 1
            exps, logs = self.product()
            self.expect(")")
            self.depth -= 1
        else:
            raise self.error(f"unexpected token {value!r}", pos)
        if self.accept("^"):
            at = self.peek()
            power = self.exponent()
            if abs(power) > MAX_ABS_EXPONENT or power.denominator > _MAX_DENOMINATOR:
                raise self.error(f"exponent {_format_power(power)} is outside the stated limits "
                                 f"(|exponent| <= {MAX_ABS_EXPONENT}, denominator <= {_MAX_DENOMINATOR})",
                                 None if at is None else at[2])
            exps = {k: v * power for k, v in exps.items()}
            logs = {k: v * power for k, v in logs.items()}
        return exps, logs

    def check_parameter(self, name: str, pos: int) -> None:
        if self.params is not None and name not in self.params:
            raise self.error(f"unknown parameter {name!r} (params are {sorted(self.params)})", pos)

    # exponent := signed-ratio | '(' signed-ratio ')' | '{' signed-ratio '}'
    def exponent(self) -> Fraction:
        for open_, close in (("(", ")"), ("{", "}")):
            if self.accept(open_):
                value = self.signed_ratio()
                self.expect(close)
                return value
        return self.signed_ratio()

    def signed_ratio(self) -> Fraction:
        sign = 1
        if self.accept("-"):
            sign = -1
        elif self.accept("+"):
            pass
        value = self.number()
        nxt, after = self.peek(), self.peek(1)
        if nxt is not None and nxt[1] == "/" and after is not None and after[0] == "number":
            self.i += 1
            den = self.number()
            if den == 0:
                raise self.error("zero denominator in exponent", after[2])
            value = value / den
        return sign * value

    def number(self) -> Fraction:
        tok = self.peek()
        if tok is None or tok[0] != "number":
            found = "end of text" if tok is None else repr(tok[1])
            raise self.error(f"expected a number in the exponent, found {found}")
        self.i += 1
        return Fraction(tok[1])


def parse_rate_claim(
    text: str,
    *,
    name: str | None = None,
    params: Sequence[str] | None = None,
    error_functional: str = "strong",
    test_function: str | None = None,
    coupling: str = "",
) -> RateClaim:
    """Parse ``text`` (e.g. ``"L^-1 + L^-1/3 H^-1/2"``, ``"log(L)/L + 1/m"``) into a :class:`RateClaim`.

    ``params``: the parameter names, when given any other leading name is a coefficient name and any
    other name elsewhere is an error.  ``name`` defaults to the text.  Raises ``ValueError`` naming the
    bad token and its position.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    raw = _Parser(text, params).claim()
    taken = {c for c, _, _ in raw if c is not None}
    counter = 0
    terms = []
    for coefficient, exps, logs in raw:
        if coefficient is None:
            counter += 1
            while f"C{counter}" in taken:
                counter += 1
            coefficient = f"C{counter}"
        terms.append(RateTerm(coefficient, exps, logs))
    return RateClaim(
        name=text if name is None else name,
        terms=tuple(terms),
        error_functional=error_functional,
        test_function=test_function,
        coupling=coupling,
    )
