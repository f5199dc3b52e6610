"""The LaTeX subset of the package's hand-written formulas, read into presentation MathML.

The ``Derivation.generic_latex`` formulas and the LaTeX of rate claims
(:func:`transformer_limits.verify.claim_markup.claim_html`) use fractions (``\\frac``, ``\\tfrac``, ``\\dfrac``,
with TeX's one-token arguments ``\\tfrac1L``), sub- and superscripts and primes, Greek letters, large
operators with limits (``\\sum``, ``\\min``), roots, accents, sized delimiters (``\\left``/``\\right``,
``\\big`` … ``\\Bigg``), spaces and ``\\mathrm``/``\\text``/``\\mathbb``/``\\mathcal``.
:func:`latex_presentation` reads one such formula by recursive descent into the presentation-MathML
content of a ``<math>`` element (the element and the source annotation:
:func:`transformer_limits.mathml.latex_to_mathml`).  Anything else raises ``ValueError`` naming the
construct, so an unsupported formula never renders half right.

Pure string work: no SymPy, importing is cheap.
"""

from __future__ import annotations

import html
import re
from typing import Any

__all__ = ["latex_presentation"]


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


_GREEK = {name: chr(code) for name, code in (
    ("alpha", 0x3B1), ("beta", 0x3B2), ("gamma", 0x3B3), ("delta", 0x3B4), ("epsilon", 0x3F5),
    ("varepsilon", 0x3B5), ("zeta", 0x3B6), ("eta", 0x3B7), ("theta", 0x3B8), ("vartheta", 0x3D1),
    ("iota", 0x3B9), ("kappa", 0x3BA), ("lambda", 0x3BB), ("mu", 0x3BC), ("nu", 0x3BD), ("xi", 0x3BE),
    ("pi", 0x3C0), ("rho", 0x3C1), ("sigma", 0x3C3), ("tau", 0x3C4), ("upsilon", 0x3C5),
    ("phi", 0x3D5), ("varphi", 0x3C6), ("chi", 0x3C7), ("psi", 0x3C8), ("omega", 0x3C9))}
# Capital Greek is upright in TeX; a one-letter <mi> is italic unless mathvariant="normal".
_GREEK_UPPER = {name: chr(code) for name, code in (
    ("Gamma", 0x393), ("Delta", 0x394), ("Theta", 0x398), ("Lambda", 0x39B), ("Xi", 0x39E),
    ("Pi", 0x3A0), ("Sigma", 0x3A3), ("Upsilon", 0x3A5), ("Phi", 0x3A6), ("Psi", 0x3A8),
    ("Omega", 0x3A9))}
_LETTERLIKE = {"ell": "\u2113", "infty": "\u221E", "partial": "\u2202", "nabla": "\u2207",
               "top": "\u22A4", "emptyset": "\u2205", "hbar": "\u210F"}
_OPERATORS = {
    "le": "\u2264", "leq": "\u2264", "ge": "\u2265", "geq": "\u2265", "ne": "\u2260", "neq": "\u2260",
    "in": "\u2208", "notin": "\u2209", "mapsto": "\u21A6", "to": "\u2192", "rightarrow": "\u2192",
    "Rightarrow": "\u21D2", "leftarrow": "\u2190", "cdot": "\u22C5", "times": "\u00D7",
    "langle": "\u27E8", "rangle": "\u27E9", "|": "\u2016", "{": "{", "}": "}", "ldots": "\u2026",
    "cdots": "\u22EF", "dots": "\u2026", "pm": "\u00B1", "approx": "\u2248", "sim": "\u223C",
    "propto": "\u221D", "circ": "\u2218", "mid": "|", "lfloor": "\u230A", "rfloor": "\u230B",
    "lceil": "\u2308", "rceil": "\u2309", "subset": "\u2282", "setminus": "\u2216", "ast": "\u2217",
}
_LARGE_OPERATORS = {"sum": "\u2211", "prod": "\u220F", "int": "\u222B"}
# Operator names: upright words; those in _LIMIT_NAMES take limits under them (munder) like \sum.
_FUNCTION_NAMES = {"log", "ln", "exp", "sin", "cos", "tan", "tanh", "det", "dim", "arg", "sup", "inf",
                   "max", "min", "lim", "sgn"}
_LIMIT_NAMES = {"sup", "inf", "max", "min", "lim"}
_SPACES = {",": "0.1667em", ":": "0.2222em", ">": "0.2222em", ";": "0.2778em", " ": "0.25em",
           "quad": "1em", "qquad": "2em"}
_IGNORED = {"textstyle", "displaystyle", "scriptstyle", "!", "limits", "nolimits"}
_ACCENTS = {"bar": "\u00AF", "overline": "\u00AF", "hat": "^", "widehat": "^", "tilde": "\u02DC",
            "widetilde": "\u02DC", "vec": "\u2192", "dot": "\u02D9", "ddot": "\u00A8"}
# Sized delimiters: minsize in em (plain TeX's \big … \Bigg heights for a 10 pt font).
_SIZES = {"big": 1.2, "Big": 1.623, "bigg": 2.047, "Bigg": 2.470}
_DELIMITER_CHARS = set("()[]|./")
_DOUBLE_STRUCK = {"C": "\u2102", "H": "\u210D", "N": "\u2115", "P": "\u2119", "Q": "\u211A",
                  "R": "\u211D", "Z": "\u2124"}
_SCRIPT = {"B": "\u212C", "E": "\u2130", "F": "\u2131", "H": "\u210B", "I": "\u2110", "L": "\u2112",
           "M": "\u2133", "R": "\u211B"}
_MO_CHARS = {"-": "\u2212", "*": "\u2217", "'": "\u2032"}
_COMMAND = re.compile(r"\\([A-Za-z]+)")


def _alphabet(letter: str, table: dict[str, str], base: int, command: str) -> str:
    if not (len(letter) == 1 and "A" <= letter <= "Z"):
        raise ValueError(f"tex: \\{command} takes one capital letter, got {letter!r}")
    return table.get(letter, chr(base + ord(letter) - ord("A")))


class _LatexReader:
    """Recursive-descent reader of the LaTeX subset; methods return MathML strings."""

    def __init__(self, tex: str):
        self.s = tex
        self.i = 0

    # -- tokens ----------------------------------------------------------------------------------
    def _skip(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def peek(self) -> tuple[str, str] | None:
        save = self.i
        tok = self.next()
        self.i = save
        return tok

    def next(self) -> tuple[str, str] | None:
        """``("cmd", name)`` for ``\\name`` / ``\\,``; ``("chr", c)`` otherwise; None at the end."""
        self._skip()
        if self.i >= len(self.s):
            return None
        c = self.s[self.i]
        if c != "\\":
            self.i += 1
            return ("chr", c)
        m = _COMMAND.match(self.s, self.i)
        if m:
            self.i = m.end()
            return ("cmd", m.group(1))
        if self.i + 1 >= len(self.s):
            raise self.error("a lone backslash")
        self.i += 2
        return ("cmd", self.s[self.i - 1])

    def error(self, what: str) -> ValueError:
        return ValueError(f"tex: {what} at position {self.i} of {self.s[:80]!r}")

    def raw_group(self, command: str) -> str:
        """The text inside ``{...}`` after a text-like command (no nested braces)."""
        self._skip()
        if self.i >= len(self.s) or self.s[self.i] != "{":
            raise self.error(f"\\{command} needs a {{...}} argument")
        end = self.s.find("}", self.i)
        if end < 0 or "{" in self.s[self.i + 1:end] or "\\" in self.s[self.i + 1:end]:
            raise self.error(f"\\{command} argument must be plain text in one brace pair")
        text = self.s[self.i + 1:end]
        self.i = end + 1
        return text

    # -- grammar ---------------------------------------------------------------------------------
    def sequence(self, closing: str | None) -> list[str]:
        """Nodes up to the ``closing`` brace (consumed) or, when None, the end of the input."""
        nodes: list[str] = []
        while True:
            tok = self.peek()
            if tok is None:
                if closing is not None:
                    raise self.error("missing '}'")
                return nodes
            if tok == ("chr", "}"):
                if closing is None:
                    raise self.error("unbalanced '}'")
                self.next()
                return nodes
            node = self.scripted()
            if node:
                nodes.append(node)

    @staticmethod
    def row(nodes: list[str]) -> str:
        return nodes[0] if len(nodes) == 1 else "<mrow>" + "".join(nodes) + "</mrow>"

    def argument(self, command: str) -> str:
        """One argument: a braced group or a single token (``\\tfrac1L``: ``1`` and ``L``)."""
        tok = self.peek()
        if tok is None or tok == ("chr", "}"):
            raise self.error(f"{command} is missing an argument")
        if tok == ("chr", "{"):
            self.next()
            return self.row(self.sequence("}"))
        if tok[0] == "chr" and tok[1].isdigit():
            self.next()  # TeX takes one digit: \frac12 is 1/2
            return f"<mn>{tok[1]}</mn>"
        node = self.atom()
        if not node:
            raise self.error(f"{command} is missing an argument")
        return node[0]

    def scripted(self) -> str:
        """An atom with its primes and sub/superscripts."""
        node = self.atom()
        if node is None:
            return ""
        base, limits = node
        primes = 0
        while self.peek() == ("chr", "'"):
            self.next()
            primes += 1
        sub = sup = None
        while (tok := self.peek()) in (("chr", "_"), ("chr", "^")):
            self.next()
            if tok[1] == "_":
                if sub is not None:
                    raise self.error("double subscript")
                sub = self.argument("_")
            else:
                if sup is not None:
                    raise self.error("double superscript")
                sup = self.argument("^")
        if primes:
            mark = f"<mo>{chr(0x2032) * primes}</mo>"
            sup = mark if sup is None else f"<mrow>{mark}{sup}</mrow>"
        base = base or "<mrow></mrow>"
        if sub is None and sup is None:
            return base
        under, over = ("munder", "mover") if limits else ("msub", "msup")
        if sub is not None and sup is not None:
            both = "munderover" if limits else "msubsup"
            return f"<{both}>{base}{sub}{sup}</{both}>"
        if sup is None:
            return f"<{under}>{base}{sub}</{under}>"
        return f"<{over}>{base}{sup}</{over}>"

    def delimiter(self, command: str) -> str:
        tok = self.next()
        if tok is None:
            raise self.error(f"\\{command} needs a delimiter")
        kind, value = tok
        if kind == "chr" and value in _DELIMITER_CHARS:
            return "" if value == "." else value
        if kind == "cmd" and value in ("langle", "rangle", "|", "{", "}", "lfloor", "rfloor", "lceil",
                                       "rceil"):
            return _OPERATORS[value]
        raise self.error(f"\\{command} needs a delimiter, got {value!r}")

    def atom(self) -> tuple[str, bool] | None:
        """``(markup, takes_limits)``; markup ``""`` for tokens that print nothing (``\\textstyle``)."""
        tok = self.next()
        if tok is None:
            return None
        kind, value = tok
        if kind == "chr":
            if value == "{":
                return self.row(self.sequence("}")), False
            if value.isdigit():
                digits = value
                while self.i < len(self.s) and (self.s[self.i].isdigit() or (
                        self.s[self.i] == "." and self.s[self.i + 1:self.i + 2].isdigit())):
                    digits += self.s[self.i]
                    self.i += 1
                return f"<mn>{digits}</mn>", False
            if value.isascii() and value.isalpha():
                return f"<mi>{value}</mi>", False
            if value == "/":  # ordinary in TeX: no operator spaces around a slash
                return '<mo lspace="0em" rspace="0em">/</mo>', False
            if value in "+=<>()[]|,;:!.-*'":
                return f"<mo>{_esc(_MO_CHARS.get(value, value))}</mo>", False
            raise self.error(f"unsupported character {value!r}")
        if value in _GREEK:
            return f"<mi>{_GREEK[value]}</mi>", False
        if value in _GREEK_UPPER:
            return f'<mi mathvariant="normal">{_GREEK_UPPER[value]}</mi>', False
        if value in _LETTERLIKE:
            return f'<mi mathvariant="normal">{_LETTERLIKE[value]}</mi>' if value != "ell" \
                else f"<mi>{_LETTERLIKE[value]}</mi>", False
        if value in _OPERATORS:
            return f"<mo>{_esc(_OPERATORS[value])}</mo>", False
        if value in _LARGE_OPERATORS:
            return f'<mo largeop="true">{_LARGE_OPERATORS[value]}</mo>', value != "int"
        if value in _FUNCTION_NAMES:
            return f"<mi>{value}</mi>", value in _LIMIT_NAMES
        if value in _SPACES:
            return f'<mspace width="{_SPACES[value]}"></mspace>', False
        if value in _IGNORED:
            return "", False
        if value in ("frac", "tfrac", "dfrac"):
            num = self.argument(f"\\{value}")
            den = self.argument(f"\\{value}")
            style = {"tfrac": ' displaystyle="false"', "dfrac": ' displaystyle="true"'}.get(value, "")
            return f"<mfrac{style}>{num}{den}</mfrac>", False
        if value == "sqrt":
            if self.peek() == ("chr", "["):
                raise self.error("\\sqrt[n] is not supported")
            return f"<msqrt>{self.argument(chr(92) + value)}</msqrt>", False
        if value in _ACCENTS:
            body = self.argument(f"\\{value}")
            stretch = ' stretchy="true"' if value in ("overline", "widehat", "widetilde") else ' stretchy="false"'
            return f'<mover accent="true">{body}<mo{stretch}>{_ACCENTS[value]}</mo></mover>', False
        if value in ("mathrm", "operatorname", "mathit"):
            text = self.raw_group(value).strip()
            if not text:
                raise self.error(f"\\{value} is empty")
            variant = ' mathvariant="normal"' if len(text) == 1 and value != "mathit" else ""
            return f"<mi{variant}>{_esc(text)}</mi>", False
        if value == "text":
            text = self.raw_group(value)
            # leading/trailing blanks are significant in \text but collapse in <mtext>: keep as NBSP
            text = re.sub(r"^ +| +$", lambda m: "\u00A0" * len(m.group(0)), text)
            return f"<mtext>{_esc(text)}</mtext>", False
        if value == "mathbb":
            letter = self.raw_group(value).strip()
            return f"<mi>{_alphabet(letter, _DOUBLE_STRUCK, 0x1D538, value)}</mi>", False
        if value == "mathcal":
            letter = self.raw_group(value).strip()
            return f"<mi>{_alphabet(letter, _SCRIPT, 0x1D49C, value)}</mi>", False
        base = value.rstrip("lrm")
        if value in ("left", "right") or (base in _SIZES and value[len(base):] in ("", "l", "r", "m")):
            delim = self.delimiter(value)
            if not delim:
                return "", False
            size = "" if value in ("left", "right") else \
                f' minsize="{_SIZES[base]}em" maxsize="{_SIZES[base]}em"'
            return f'<mo stretchy="true" symmetric="true"{size}>{_esc(delim)}</mo>', False
        raise self.error(f"unsupported command \\{value}")


def latex_presentation(tex: str) -> str:
    """Presentation MathML (the content of ``<math>``: one node, else an ``<mrow>``) of ``tex``.

    Raises ``ValueError`` naming the construct for anything outside the subset: an unknown command,
    unbalanced braces, a double script, ``&`` or ``\\\\`` (no arrays).
    """
    if not isinstance(tex, str):
        raise ValueError(f"tex must be a string, got {type(tex).__name__}")
    reader = _LatexReader(tex)
    return reader.row(reader.sequence(None))
