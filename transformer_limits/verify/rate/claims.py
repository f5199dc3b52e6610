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
or ``OverflowError``): the claim length, parenthesis nesting, number tokens and exponents are bounded
as stated in :mod:`~transformer_limits.verify.rate.claim_grammar` (the tokeniser and parser).

``str(claim)`` writes the canonical form (``C1 L^-1 + C2 L^-1/3 H^-1/2``), which parses back to an
equal claim; :meth:`RateClaim.latex` writes LaTeX.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from transformer_limits.verify.rate.claim_grammar import (
    IDENT,
    MAX_ABS_EXPONENT,
    MAX_DENOMINATOR,
    MAX_NUMBER_CHARS,
    RESERVED,
    ClaimParser,
    format_power,
)

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

def _as_fraction(value: Any, what: str) -> Fraction:
    """Exact rational for an exponent given as int, float, str or Fraction."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, str) and len(value) > MAX_NUMBER_CHARS:
        raise ValueError(f"{what} must be a short rational number (at most {MAX_NUMBER_CHARS} characters), "
                         f"got {value[:MAX_NUMBER_CHARS]!r}...")
    try:
        if isinstance(value, float):
            if not np.isfinite(value):
                raise ValueError
            return Fraction(value).limit_denominator(MAX_DENOMINATOR)
        return Fraction(value)
    except (TypeError, ValueError, ZeroDivisionError):
        raise ValueError(f"{what} must be a finite rational number, got {value!r}") from None


def _clean_powers(powers: Mapping[str, Any] | None, what: str) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for name, value in (powers or {}).items():
        if not isinstance(name, str) or not IDENT.match(name) or name in RESERVED:
            raise ValueError(f"{what}: {name!r} is not a valid parameter name")
        q = _as_fraction(value, f"{what}[{name!r}]")
        if abs(q) > MAX_ABS_EXPONENT or q.denominator > MAX_DENOMINATOR:
            raise ValueError(f"{what}[{name!r}] = {format_power(q)} is outside the stated limits "
                             f"(|exponent| <= {MAX_ABS_EXPONENT}, denominator <= {MAX_DENOMINATOR})")
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
        if not isinstance(self.coefficient, str) or not IDENT.match(self.coefficient):
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
            "log(%s)" % name if power == 1 else "log(%s)^%s" % (name, format_power(power))
            for name, power in self.log_powers.items()
        ]
        parts += [
            name if power == 1 else f"{name}^{format_power(power)}"
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
                         r"(\log %s)^{%s}" % (_latex_name(name), format_power(power)))
        for name, power in self.exponents.items():
            parts.append(_latex_name(name) if power == 1 else
                         "%s^{%s}" % (_latex_name(name), format_power(power)))
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
                    "exponents": {k: format_power(v) for k, v in t.exponents.items()},
                    "log_powers": {k: format_power(v) for k, v in t.log_powers.items()},
                }
                for t in self.terms
            ],
            "error_functional": self.error_functional,
            "test_function": self.test_function,
            "coupling": self.coupling,
        }


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
    raw = ClaimParser(text, params).claim()
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
