"""Rate claims inside free text as MathML: the claims of experiments and checks in ``report.html``.

:func:`rate_spans` finds the parts of a free-text claim that parse as rate claims
(:func:`transformer_limits.verify.rate.claims.parse_rate_claim`) and decay; :func:`claim_html` typesets
them as inline MathML (:func:`transformer_limits.mathml.math_element`, the text as written kept as
annotation) and escapes the text around them.  The rate-claim parser is imported inside the function:
importing this module is cheap.
"""

from __future__ import annotations

import html
import re
from functools import lru_cache

from transformer_limits.latex_mathml import latex_presentation
from transformer_limits.mathml import math_element

__all__ = ["rate_spans", "claim_html"]


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


_NAME = r"[A-Za-z](?:_[A-Za-z0-9]+|\d+)?"
_NUM_EXP = r"-?\d+(?:\s*/\s*\d+)?"
_EXP = rf"(?:\^(?:\{{\s*{_NUM_EXP}\s*\}}|\(\s*{_NUM_EXP}\s*\)|-?\d+(?:/\d+)?)|\*\*-?\d+(?:/\d+)?|[²³])"
# A factor must not continue a word, an exponent or a number, and must not be a function call.
_FACTOR = rf"(?<![\w^])(?:(?:log|ln|sqrt)\({_NAME}\)|{_NAME}|\d+)(?:{_EXP})?(?![\w(^{{'])"
_TERM = rf"{_FACTOR}(?:\s*[*/]\s*{_FACTOR}|[ \t]+{_FACTOR})*"


@lru_cache(maxsize=None)
def _pattern(which: str) -> re.Pattern:
    """The compiled rate-claim (``claim``) or factor pattern, compiled on first use (~20 ms: kept out of
    the import)."""
    return re.compile(rf"{_TERM}(?:\s*\+\s*{_TERM})*" if which == "claim" else _FACTOR)


_BIG_O = re.compile(r"(?<!\w)O\(")
# a decaying factor needs a negative power or a slash: spans without one are not tried
_DECAY_MARK = re.compile(r"/|\^\s*[{(]?\s*-|\*\*\s*-")
#: most factors in one rate span (the papers' longest, C1 L^-1 + C2 L^-1/3 H^-1/2, has 5): bounds
#: the sub-span search on long runs of single letters
_MAX_FACTORS = 12
_SUPERSCRIPTS = str.maketrans({"²": "^2", "³": "^3"})


@lru_cache(maxsize=4096)
def _parses_as_rate(text: str, inside_big_o: bool) -> bool:
    """Is ``text`` a rate?  It must parse as a rate claim and (outside ``O(...)``) decay: no
    positive power of a parameter, at least one negative one (so ``X_1`` or ``a L^-1`` is not)."""
    from transformer_limits.verify.rate.claims import parse_rate_claim

    try:
        claim = parse_rate_claim(text.translate(_SUPERSCRIPTS))
    except ValueError:
        return False
    if inside_big_o:
        return True
    powers = [q for t in claim.terms for q in t.exponents.values()]
    return all(q <= 0 for q in powers) and any(q < 0 for q in powers)


def rate_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of the parts of ``text`` that are rate claims, in order, not overlapping:
    a whole ``O(...)`` whose inside parses, else, from the left, the longest decaying runs of
    factors (``C1 L^-1 + C2 L^-1/3 H^-1/2``, ``c_T N^{-1/2}``, ``1/L + 1/m``, ``log(L)/L``)."""
    spans: list[tuple[int, int]] = []
    for m in _BIG_O.finditer(text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        inner = text[m.end():j - 1]
        if depth == 0 and _pattern("claim").fullmatch(inner.strip()) and _parses_as_rate(inner, True):
            spans.append((m.start(), j))
    taken = list(spans)
    for m in _pattern("claim").finditer(text):
        if any(a < m.end() and m.start() < b for a, b in taken) or not _DECAY_MARK.search(text, m.start(), m.end()):
            continue
        factors = [f.span() for f in _pattern("factor").finditer(text, m.start(), m.end())]
        i = 0
        while i < len(factors):  # greedy from the left: the longest rate starting at factor i
            for j in range(min(len(factors), i + _MAX_FACTORS) - 1, i - 1, -1):
                a, b = factors[i][0], factors[j][1]
                if (_DECAY_MARK.search(text, a, b) and _pattern("claim").fullmatch(text, a, b)
                        and _parses_as_rate(text[a:b], False)):
                    spans.append((a, b))
                    i = j
                    break
            i += 1
    return sorted(spans)


def _rate_latex(text: str) -> str:
    """LaTeX of a rate span as written (``1/L`` stays a slash, ``L^-1/3`` becomes ``L^{-1/3}``)."""
    out: list[str] = []
    pos = 0
    for f in _pattern("factor").finditer(text):
        gap = text[pos:f.start()]
        # blanks or "*" multiply (a thin space); "/" and "+" stay as written
        out.append(r"\," if out and gap.strip() in ("", "*") and gap else gap.strip())
        out.append(_factor_latex(f.group(0)))
        pos = f.end()
    out.append(text[pos:])
    return "".join(out)


def _factor_latex(factor: str) -> str:
    m = re.fullmatch(rf"(?:(log|ln|sqrt)\(({_NAME})\)|({_NAME})|(\d+))(.*)", factor)
    assert m is not None, factor  # factor is a match of _FACTOR
    func, arg, name, number, exp = m.groups()
    if func == "sqrt":
        base = rf"\sqrt{{{_name_latex(arg)}}}"
    elif func:
        base = rf"\{func}({_name_latex(arg)})"
    else:
        base = _name_latex(name) if name else number
    exp = exp.strip()
    if not exp:
        return base
    power = {"²": "2", "³": "3"}.get(exp) or re.sub(r"\s+", "", exp.lstrip("^*").strip("{}()"))
    return f"{base}^{{{power}}}"


def _name_latex(name: str) -> str:
    m = re.fullmatch(r"([A-Za-z])_?([A-Za-z0-9]*)", name)
    assert m is not None, name  # name is a match of _NAME
    return f"{m.group(1)}_{{{m.group(2)}}}" if m.group(2) else m.group(1)


def claim_html(text: str) -> str:
    """HTML of a free-text claim: its rate parts (:func:`rate_spans`) as inline MathML (the text as
    written kept as annotation), everything else escaped text."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    out, pos = [], 0
    for a, b in rate_spans(text):
        out.append(_esc(text[pos:a]))
        span = text[a:b]
        if span.startswith("O("):
            tex = r"O\left(" + _rate_latex(span[2:-1].strip()) + r"\right)"
        else:
            tex = _rate_latex(span)
        out.append(math_element(latex_presentation(tex), display="inline", source=span, encoding="text/plain"))
        pos = b
    out.append(_esc(text[pos:]))
    return "".join(out)


