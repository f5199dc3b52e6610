"""MathML for the HTML pages: SymPy expressions, the package's LaTeX formulas and rate claims in text.

Browsers typeset MathML Core without scripts or network, so ``report.html`` and the derivation pages
stay self-contained and render offline.  The terminal forms (``to_text``, Markdown, ``report.md``) keep
the plain-text / LaTeX source; in HTML that source rides along as a ``<semantics>`` annotation.

Four producers, one output shape (a ``<math>`` element without ``xmlns``: the HTML parser puts it in
the MathML namespace; an ``xmlns="http…"`` would also break the "no URL in report.html" rule):

* :func:`sympy_mathml` — SymPy's presentation printer, with HTML named entities (``&InvisibleTimes;``)
  turned into numeric references (:func:`numeric_entities`) so the markup is well-formed XML, and a
  size budget (:data:`MAX_MATHML_CHARS`): an oversized expression returns ``None`` and
  :func:`formula_html` shows its LaTeX source instead, with a note.
* :func:`latex_to_mathml` — the LaTeX subset the hand-written ``Derivation.generic_latex`` formulas
  use (fractions, scripts, primes, Greek letters, sums and limits, roots, accents, sized delimiters,
  spaces, ``\\mathrm``/``\\text``/``\\mathbb``/``\\mathcal``), read by
  :mod:`transformer_limits.latex_mathml`.  Anything else raises ``ValueError`` naming the command, so
  an unsupported formula never renders half right.
* :func:`claim_html` — free-text claims (``Experiment.claim``, ``Check.claim``): the parts that parse
  as rate claims (:func:`transformer_limits.verify.rate_claims.parse_rate_claim`) become inline
  MathML, the text around them stays text.
* :func:`derivation_html` — a whole HTML page for one derivation (what ``to_markdown`` writes, typeset).

SymPy and the rate-claim parser are imported inside the functions: importing this module is
cheap (the report writer imports it for every page).
"""

from __future__ import annotations

import html
import json
import re
from functools import lru_cache
from html.entities import html5
from typing import Any

from transformer_limits.latex_mathml import latex_presentation

__all__ = [
    "MAX_MATHML_CHARS",
    "FALLBACK_LATEX_CHARS",
    "numeric_entities",
    "math_element",
    "sympy_mathml",
    "latex_to_mathml",
    "formula_html",
    "claim_html",
    "rate_spans",
    "derivation_html",
    "MATH_CSS",
]

#: Largest MathML (characters) typeset for one formula.  SymPy's componentwise expressions reach
#: ~250 kB of MathML (flow-taylor ``coefficient_3``); a page of those is slow to lay out and
#: unreadable, so beyond this the LaTeX source is shown instead (as the Markdown pages truncate).
MAX_MATHML_CHARS = 32_000
#: LaTeX characters shown for a formula over the budget (the Markdown pages cut at the same length).
FALLBACK_LATEX_CHARS = 3_000
# SymPy's MathML is at least ~3.9x its LaTeX in every shipped expression; 3x is a safe lower bound,
# so an expression whose LaTeX alone rules it out is never printed as MathML (saves ~2 s a page).
_MIN_MATHML_PER_LATEX = 3

#: Style for pages holding MathML (block formulas scroll sideways instead of overflowing the page).
MATH_CSS = ("math{font-size:1.12em}math[display=block]{margin:.5em 0;overflow-x:auto;overflow-y:hidden}"
            ".formula-fallback pre{white-space:pre-wrap;word-break:break-all}")

_XML_ENTITIES = frozenset({"amp", "lt", "gt", "quot", "apos"})
_ENTITY = re.compile(r"&([A-Za-z][A-Za-z0-9]*);")


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def numeric_entities(markup: str) -> str:
    """Replace HTML named entities (``&InvisibleTimes;``) by numeric references (``&#x2062;``).

    XML knows only ``&amp; &lt; &gt; &quot; &apos;`` (kept); every other name comes from the HTML5
    table (:data:`html.entities.html5`), one reference per code point.  An unknown name raises
    ``ValueError`` naming it (a typo must not reach a page as literal text).
    """
    if not isinstance(markup, str):
        raise ValueError(f"markup must be a string, got {type(markup).__name__}")

    def repl(m: re.Match) -> str:
        name = m.group(1)
        if name in _XML_ENTITIES:
            return m.group(0)
        chars = html5.get(name + ";")
        if chars is None:
            raise ValueError(f"markup: unknown entity &{name};")
        return "".join(f"&#x{ord(c):X};" for c in chars)

    return _ENTITY.sub(repl, markup)


def math_element(content: str, *, display: str = "block", source: str | None = None,
                 encoding: str = "application/x-tex") -> str:
    """Wrap presentation MathML ``content`` in ``<math>``; ``source`` (the LaTeX or plain text the
    formula came from) is kept as a ``<semantics>`` annotation, which browsers do not display."""
    if display not in ("block", "inline"):
        raise ValueError(f"display must be 'block' or 'inline', got {display!r}")
    if source is not None:
        content = (f"<semantics><mrow>{content}</mrow>"
                   f'<annotation encoding="{_esc(encoding)}">{_esc(source)}</annotation></semantics>')
    return f'<math display="{display}">{content}</math>'


def sympy_mathml(expr: Any, *, display: str = "block", budget: int = MAX_MATHML_CHARS,
                 latex: str | None = None) -> str | None:
    """``<math>`` for a SymPy expression or matrix, or ``None`` when its MathML exceeds ``budget``
    characters (then show :func:`formula_html`'s fallback).  The LaTeX (``latex``, else
    ``sympy.latex(expr)``) is kept as annotation."""
    import sympy as sp

    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be a positive int, got {budget!r}")
    tex = sp.latex(expr) if latex is None else latex
    if _MIN_MATHML_PER_LATEX * len(tex) > budget:
        return None
    content = numeric_entities(sp.mathml(expr, printer="presentation"))
    # typography as in TeX: a minus sign, not a hyphen; Euler's number as an italic e (U+2147 is
    # missing from most fonts)
    content = content.replace("<mo>-</mo>", "<mo>\u2212</mo>").replace("<mi>&#x2147;</mi>", "<mi>e</mi>")
    if len(content) > budget:
        return None
    return math_element(content, display=display, source=tex)


def formula_html(*, mathml: str | None, latex: str, command: str | None = None,
                 budget: int = MAX_MATHML_CHARS) -> str:
    """The typeset formula, or (``mathml`` None: over ``budget``) its LaTeX source with a note saying
    why and where the whole expression is (``command``)."""
    if mathml is not None:
        return mathml
    shown = latex if len(latex) <= FALLBACK_LATEX_CHARS else latex[:FALLBACK_LATEX_CHARS] + r"\;\ldots"
    note = (f"Not typeset: its MathML would exceed the page budget of {budget:,} characters. "
            + ("LaTeX source below." if len(latex) <= FALLBACK_LATEX_CHARS else
               f"First {FALLBACK_LATEX_CHARS:,} of {len(latex):,} characters of its LaTeX below."))
    if command:
        note += f" Whole expression: <code>{_esc(command)}</code>."
    return (f'<div class="formula-fallback"><p class="small">{note}</p>'
            f"<pre>{_esc(shown)}</pre></div>")


# ------------------------------------------------------------------------------------------------
# the LaTeX subset (read by transformer_limits.latex_mathml)
# ------------------------------------------------------------------------------------------------


def latex_to_mathml(tex: str, *, display: str = "block") -> str:
    """``<math>`` for a formula in the LaTeX subset of the derivations (the source kept as annotation;
    the subset: :mod:`transformer_limits.latex_mathml`).

    Raises ``ValueError`` naming the construct for anything outside the subset: an unknown command,
    unbalanced braces, a double script, ``&`` or ``\\\\`` (no arrays).
    """
    return math_element(latex_presentation(tex), display=display, source=tex)


# ------------------------------------------------------------------------------------------------
# rate claims inside free text
# ------------------------------------------------------------------------------------------------

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
    from transformer_limits.verify.rate_claims import parse_rate_claim

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


# ------------------------------------------------------------------------------------------------
# derivation pages
# ------------------------------------------------------------------------------------------------

_PAGE_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
h3{font-size:1em;margin-bottom:.2em}table{border-collapse:collapse;margin:.6em 0;font-size:.88em}
th,td{border:1px solid #ccc;padding:.3em .55em;text-align:left;vertical-align:top}th{background:#f3f3f3}
pre{background:#f7f7f7;border:1px solid #e2e2e2;padding:.6em;overflow-x:auto;font-size:.85em}
code{background:#f3f3f3;padding:0 .2em}.small{font-size:.85em;color:#555}
"""


def derivation_html(result: Any, *, kernels: bool = True, budget: int = MAX_MATHML_CHARS) -> str:
    """A self-contained HTML page for one :class:`~transformer_limits.symbolic.derivation.Derivation`:
    the sections of ``to_markdown`` with the generic formulas (:func:`latex_to_mathml`) and the
    componentwise SymPy results (:func:`sympy_mathml`, LaTeX fallback over budget) typeset.
    ``kernels``: list the generated kernel sources (links to ``kernels/<file>``); ``budget``: the
    MathML size limit per componentwise result (:func:`sympy_mathml`)."""
    import sympy as sp

    name = result.name
    command = f"transformer-limits derive {name}" + "".join(
        f" --param {k}={v}" for k, v in result.params.items()) + " --format latex"
    body = [f"<h1><code>{_esc(name)}</code> — {_esc(result.title)}</h1>", f"<p>{_esc(result.summary)}</p>",
            f'<p class="small">Plain-text form: <a href="{_esc(name)}.md">{_esc(name)}.md</a>; '
            f"terminal: <code>transformer-limits derive {_esc(name)}</code>.</p>"]
    if result.params:
        body.append("<p>Generated with parameters: "
                    + ", ".join(f"<code>{_esc(k)}={_esc(v)}</code>" for k, v in result.params.items()) + "</p>")
    if result.generic_latex:
        body.append("<h2>Formulas (generic matrix form)</h2>")
        for key, tex in result.generic_latex.items():
            body += [f"<h3>{_esc(key)}</h3>", latex_to_mathml(tex)]
    body.append("<h2>Componentwise SymPy results</h2>")
    for key, expr in result.expressions.items():
        tex = sp.latex(expr)
        body += [f"<h3>{_esc(key)}</h3>",
                 formula_html(mathml=sympy_mathml(expr, latex=tex, budget=budget), latex=tex, command=command,
                              budget=budget)]
    body += ["<h2>Assumptions</h2>", "<ul>"] + [f"<li>{_esc(a)}</li>" for a in result.assumptions] + ["</ul>"]
    body += ["<h2>How it was checked</h2>", "<ul>"] + [f"<li>{_esc(c)}</li>" for c in result.checks] + ["</ul>"]
    summary = result._check_summary()
    if summary:
        body.append(f"<p><b>{_esc(summary)}</b></p>")
    if result.values:
        from transformer_limits.symbolic.derivation import _jsonable

        body += ["<h2>Values</h2>", "<table><tr><th>name</th><th>value</th></tr>"] + [
            f"<tr><td><code>{_esc(k)}</code></td><td><code>{_esc(json.dumps(v))}</code></td></tr>"
            for k, v in _jsonable(result.values).items()] + ["</table>"]
    if kernels and result.kernels:
        body += ["<h2>Generated kernels</h2>",
                 "<p>Sources generated from the expressions above (see <code>docs/codegen.md</code>):</p>", "<ul>"]
        body += [f'<li><a href="kernels/{_esc(f)}"><code>{_esc(f)}</code></a></li>' for f in result.kernels]
        body.append("</ul>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(name)}: {_esc(result.title)}</title><style>{_PAGE_CSS}{MATH_CSS}</style></head>"
            "<body>\n" + "\n".join(body) + "\n</body></html>\n")
