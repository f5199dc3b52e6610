"""MathML for the HTML pages: SymPy expressions, the package's LaTeX formulas and rate claims in text.

Browsers typeset MathML Core without scripts or network, so ``report.html`` and the derivation pages
stay self-contained and render offline.  The terminal forms (``to_text``, Markdown, ``report.md``) keep
the plain-text / LaTeX source; in HTML that source rides along as a ``<semantics>`` annotation.

Three producers, one output shape (a ``<math>`` element without ``xmlns``: the HTML parser puts it in
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
* :func:`math_element` — the element itself, for callers that build presentation markup (the rate
  claims in free text of :mod:`transformer_limits.verify.claim_markup`).

Two pages use these: the reports (:func:`transformer_limits.verify.claim_markup.claim_html` for
claims) and the derivation pages (:func:`transformer_limits.symbolic.derivation_docs.derivation_html`).
This module sits below both and imports neither.  SymPy is imported inside the functions: importing
this module is cheap (the report writer imports it for every page).
"""

from __future__ import annotations

import html
import re
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
