"""The grammar and input limits of rate-claim strings (docs/verification.md, "Rate claims"): the
tokeniser and recursive-descent parser behind
:func:`~transformer_limits.verify.rate.claims.parse_rate_claim`.

    claim    := term ('+' term)*
    term     := [coefficient] product
    product  := factor (('*' | '/' | juxtaposition) factor)*
    factor   := atom ['^' exponent]        atom: name | log(name) | ln(name) | sqrt(name) | 1 | '(' product ')'
    exponent := signed-ratio | '(' signed-ratio ')' | '{' signed-ratio '}'

:meth:`ClaimParser.claim` returns one ``(coefficient name or None, {param: power}, {param: log power})``
per term, powers as exact :class:`~fractions.Fraction`.  Input limits (refused with a ``ValueError``
naming the token and position, never a ``RecursionError`` or ``OverflowError``):
:data:`MAX_CLAIM_LENGTH` characters, :data:`MAX_NESTING` levels of parentheses, number tokens of at
most :data:`MAX_NUMBER_CHARS` characters with a decimal exponent of at most as many, and exponents
with ``|q| <=`` :data:`MAX_ABS_EXPONENT` and denominator ≤ :data:`MAX_DENOMINATOR`.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Sequence

from transformer_limits.errors import InputError

__all__ = ["MAX_CLAIM_LENGTH", "MAX_NESTING", "MAX_ABS_EXPONENT", "MAX_DENOMINATOR", "MAX_NUMBER_CHARS",
           "COEFFICIENT_NAME", "IDENT", "RESERVED", "ClaimParser", "UnknownParameterError", "format_power"]

COEFFICIENT_NAME = re.compile(r"[Cc](_?\w*)?\Z")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
RESERVED = {"log", "ln", "sqrt"}
#: largest denominator of an exponent
MAX_DENOMINATOR = 10_000

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
MAX_NUMBER_CHARS = 24
NUMBER_PARTS = re.compile(r"(?P<mantissa>\d*\.?\d*)(?:[eE](?P<exp>[+-]?\d+))?\Z")


class UnknownParameterError(InputError):
    """A claim symbol that is not among the given ``params``: ``name`` is the symbol, ``params`` the
    names given, so a caller can say how to supply it (``rate check`` names ``--param``)."""

    def __init__(self, message: str, name: str, params: Sequence[str]) -> None:
        super().__init__(message)
        self.name, self.params = name, list(params)


def format_power(value: Fraction) -> str:
    """``-1/3`` for Fraction(-1, 3), ``2`` for Fraction(2)."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"



TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>\*\*|[\^*/+\-(){}]))"
)


class ClaimParser:
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
            m = TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                bad = text[pos:].lstrip()[:1]
                at = pos + (len(text[pos:]) - len(text[pos:].lstrip()))
                raise self.error(f"unexpected character {bad!r}", at)
            kind = m.lastgroup
            assert kind is not None  # every alternative of TOKEN is a named group
            value = m.group(kind)
            if kind == "number":
                self.check_number(value, m.start(kind))
            self.tokens.append((kind, "^" if value == "**" else value, m.start(kind)))
            pos = m.end()
        self.i = 0

    def check_number(self, value: str, position: int) -> None:
        """Refuse number tokens too long or with too large a decimal exponent (``1e999``) before
        ``Fraction`` expands them."""
        parts = NUMBER_PARTS.match(value)
        exp = parts.group("exp") if parts else None
        if len(value) > MAX_NUMBER_CHARS or (exp is not None and abs(int(exp)) > MAX_NUMBER_CHARS):
            raise self.error(f"number {value[:MAX_NUMBER_CHARS]!r} is too long or too large (at most "
                             f"{MAX_NUMBER_CHARS} characters and a decimal exponent of at most "
                             f"{MAX_NUMBER_CHARS})", position)

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
        while (tok := self.peek()) is not None:
            if tok[1] == "-":
                raise self.error("'-' between terms (the terms of a rate bound are non-negative; use '+')")
            if tok[1] != "+":
                raise self.error(f"unexpected token {tok[1]!r}")
            self.i += 1
            terms.append(self.term())
        return terms

    def is_coefficient(self, name: str) -> bool:
        if name in RESERVED:
            return False
        if self.params is not None:
            return name not in self.params
        return bool(COEFFICIENT_NAME.match(name))

    # term := [coefficient] product
    def term(self) -> tuple[str | None, dict, dict]:
        coefficient = None
        tok = self.peek()
        if tok is not None and tok[0] == "name" and self.is_coefficient(tok[1]):
            nxt = self.peek(1)
            if not (nxt is not None and nxt[1] == "("):
                if nxt is not None and nxt[1] == "^":  # "m^-1": a power of a symbol, not a coefficient
                    self.check_parameter(tok[1], tok[2])
                    raise self.error(f"coefficient name {tok[1]!r} with an exponent (a coefficient is a "
                                     "constant to fit; names like C, C1, c_2 are coefficients)", tok[2])
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
            exps: dict[str, Fraction] = {}
            logs: dict[str, Fraction] = {}
        elif kind == "name" and value in RESERVED:
            self.i += 1
            self.expect("(")
            arg = self.peek()
            if arg is None or arg[0] != "name" or arg[1] in RESERVED:
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
            if abs(power) > MAX_ABS_EXPONENT or power.denominator > MAX_DENOMINATOR:
                raise self.error(f"exponent {format_power(power)} is outside the stated limits "
                                 f"(|exponent| <= {MAX_ABS_EXPONENT}, denominator <= {MAX_DENOMINATOR})",
                                 None if at is None else at[2])
            exps = {k: v * power for k, v in exps.items()}
            logs = {k: v * power for k, v in logs.items()}
        return exps, logs

    def check_parameter(self, name: str, pos: int) -> None:
        if self.params is not None and name not in self.params:
            error = self.error(f"unknown parameter {name!r} (params are {sorted(self.params)})", pos)
            raise UnknownParameterError(str(error), name, sorted(self.params))

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
