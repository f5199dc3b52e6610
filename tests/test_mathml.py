"""MathML for the HTML pages (transformer_limits.mathml; the LaTeX reader: .latex_mathml): well-formed
XML, entities, the LaTeX subset on every formula the package ships, rate claims in free text, the size
fallback, and the pages that use them (report.html, derivation pages).  A rendering check in a real
browser is in tests/test_mathml_browser.py."""

from __future__ import annotations

import ast
import html
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import sympy as sp

from transformer_limits import mathml
from transformer_limits.mathml import (
    FALLBACK_LATEX_CHARS,
    formula_html,
    latex_to_mathml,
    numeric_entities,
    sympy_mathml,
)
from transformer_limits.symbolic.derivation_docs import derivation_html
from transformer_limits.verify.claim_markup import claim_html, rate_spans

ROOT = Path(__file__).resolve().parents[1]
SYMBOLIC = ROOT / "transformer_limits" / "symbolic"


def _xml(markup: str) -> ET.Element:
    """Parse ``markup`` as XML (a wrapper element allows text around inline math)."""
    return ET.fromstring(f"<root>{markup}</root>")


def _tags(markup: str) -> list[str]:
    return [el.tag for el in _xml(markup).iter()]


def _shipped_formulas() -> dict[str, str]:
    """Every hand-written LaTeX formula of the derivation modules, read from the source: the values of
    the module-level formula tables (names containing LATEX or _GENERIC) and of every literal
    ``generic_latex={...}`` argument.  Reading the source (not building the derivations, ~1 min)
    keeps this fast; test_collector_sees_built_formulas checks it misses none."""
    found: dict[str, str] = {}
    for path in sorted(SYMBOLIC.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        dicts = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
                    isinstance(t, ast.Name) and ("LATEX" in t.id or t.id == "_GENERIC") for t in node.targets):
                dicts.append(node.value)
            if isinstance(node, ast.keyword) and node.arg == "generic_latex" and isinstance(node.value, ast.Dict):
                dicts.append(node.value)
        for d in dicts:
            for key, value in zip(d.keys, d.values):
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    name = key.value if isinstance(key, ast.Constant) else "?"
                    found[f"{path.stem}:{name}"] = value.value
    return found


SHIPPED = _shipped_formulas()


# ------------------------------------------------------------------------------------------------
# entities and SymPy's printer
# ------------------------------------------------------------------------------------------------


def test_named_entities_become_numeric_references():
    text = "<mo>&InvisibleTimes;</mo><mi>&ExponentialE;</mi><mo>&amp;</mo><mo>&lt;</mo>"
    out = numeric_entities(text)
    assert out == "<mo>&#x2062;</mo><mi>&#x2147;</mi><mo>&amp;</mo><mo>&lt;</mo>"
    root = _xml(out)  # XML has no &InvisibleTimes;: the input would not parse, the output does
    assert [el.text for el in root] == ["\u2062", "\u2147", "&", "<"]
    with pytest.raises(ET.ParseError):
        _xml(text)


def test_entity_with_two_code_points_and_unknown_entity():
    # &NotEqualTilde; is two code points in HTML5 (U+2242 U+0338): one reference each
    assert numeric_entities("&NotEqualTilde;") == "&#x2242;&#x338;"
    with pytest.raises(ValueError, match="NoSuchEntity"):
        numeric_entities("<mi>&NoSuchEntity;</mi>")
    with pytest.raises(ValueError, match="markup"):
        numeric_entities(b"&amp;")


def test_sympy_mathml_is_well_formed_and_keeps_the_latex():
    x, y = sp.symbols("x y")
    expr = sp.exp(x * y) / sp.sqrt(y) + x ** 2
    out = sympy_mathml(expr)
    root = ET.fromstring(out)
    assert root.tag == "math" and root.get("display") == "block"
    assert "xmlns" not in out and "http" not in out  # the HTML parser supplies the namespace
    assert not re.search(r"&[A-Za-z]+;", out.replace("&amp;", "").replace("&lt;", "").replace("&gt;", ""))
    tags = {el.tag for el in root.iter()}
    assert {"semantics", "annotation", "msup", "msqrt"} <= tags
    assert root.find("semantics/annotation").text == sp.latex(expr)


def test_sympy_mathml_of_a_matrix_and_different_expressions_differ():
    a = sp.Symbol("a")
    m = sympy_mathml(sp.Matrix([[a, 1], [0, a ** 2]]))
    assert {"mtable", "mtr", "mtd"} <= set(_tags(m))
    # a wrong exponent must not render like the right one
    assert sympy_mathml(a ** sp.Rational(-1, 3)) != sympy_mathml(a ** sp.Rational(-1, 2))


def test_size_budget_falls_back_to_latex_with_a_note():
    x = sp.symbols("x0:60")
    big = sum(sp.exp(xi) / (1 + xi ** 2) for xi in x)
    assert sympy_mathml(big, budget=500) is None        # ruled out from the LaTeX size alone
    assert sympy_mathml(big) is not None                 # fits the default budget
    tex = sp.latex(big)
    # the budget counts the MathML as written (annotation and <math> wrapper excluded)
    n = len(re.search(r"<semantics><mrow>(.*)</mrow><annotation", sympy_mathml(big), re.S).group(1))
    assert sympy_mathml(big, budget=n - 1) is None and sympy_mathml(big, budget=n + 10) is not None
    page = formula_html(mathml=None, latex=tex, command="transformer-limits derive demo --format latex")
    assert "<math" not in page and "Not typeset" in page and "derive demo" in page
    assert html.escape(tex[:40]) in page
    long = r"\alpha+" * 1000
    cut = formula_html(mathml=None, latex=long)
    assert f"First {FALLBACK_LATEX_CHARS:,}" in cut and len(cut) < len(long)
    _xml(cut)
    assert formula_html(mathml="<math></math>", latex="x") == "<math></math>"
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ValueError, match="budget"):
            sympy_mathml(x[0], budget=bad)


# ------------------------------------------------------------------------------------------------
# the LaTeX subset
# ------------------------------------------------------------------------------------------------


def test_collector_finds_the_formula_tables():
    modules = {k.split(":")[0] for k in SHIPPED}
    assert {"adamw_box", "attention", "attention_adjoint", "attention_bounds", "flow_taylor", "lyapunov",
            "mlp_kernel"} <= modules
    assert len(SHIPPED) >= 35


def test_collector_sees_built_formulas():
    """The source scan finds the formulas of the derivations that are quick to build."""
    from transformer_limits.symbolic.derivation import derivation

    shipped = set(SHIPPED.values())
    for name in ("attention-bounds", "attention", "attention-jacobian", "attention-lions-derivative",
                 "attention-flat-derivative", "adamw-box"):
        missing = set(derivation(name).generic_latex.values()) - shipped
        assert not missing, (name, missing)


@pytest.mark.parametrize("key", sorted(SHIPPED))
def test_every_shipped_formula_converts_to_well_formed_mathml(key):
    tex = SHIPPED[key]
    out = latex_to_mathml(tex)
    root = ET.fromstring(out)
    assert root.tag == "math" and root.find("semantics/annotation").text == tex
    shown = root.find("semantics/mrow")
    # nothing of the source leaks through as a literal command or brace
    text = "".join(shown.itertext())
    assert "\\" not in text
    if "\\{" not in tex:
        assert "{" not in text and "}" not in text
    assert len(list(shown.iter())) > 3


def test_latex_constructs_map_to_the_right_elements():
    def tags(tex):
        return _tags(latex_to_mathml(tex))

    assert "mfrac" in tags(r"\frac{a}{b}") and "mfrac" in tags(r"\tfrac1{2d}")
    assert "msqrt" in tags(r"\sqrt{1-\beta_2}")
    assert "munderover" in tags(r"\sum_{j=0}^{k-1} x_j")
    assert "munder" in tags(r"\sup_k C") and "msubsup" in tags(r"x_i^2")
    assert "mover" in tags(r"\bar\lambda") and "mtext" in tags(r"\text{ (causal)}")
    frac = ET.fromstring(latex_to_mathml(r"\tfrac1L"))
    assert [el.text for el in frac.find("semantics/mrow/mfrac")] == ["1", "L"]  # one token per argument
    primes = latex_to_mathml(r"k'(1)")
    assert "\u2032" in primes and "'" not in primes.split("<annotation")[0]
    greek = ET.fromstring(latex_to_mathml(r"\Gamma + \beta"))
    mis = [el for el in greek.iter("mi")]
    assert [m.text for m in mis] == ["\u0393", "\u03B2"] and mis[0].get("mathvariant") == "normal"
    assert "\U0001D53C" in latex_to_mathml(r"\mathbb{E}") and "\u2112" in latex_to_mathml(r"\mathcal{L}")
    assert "<mn>12</mn>" in latex_to_mathml("12x")
    sized = latex_to_mathml(r"\Big( x \Big)")
    assert sized.count('minsize="1.623em"') == 2


def test_wrong_formula_does_not_render_like_the_right_one():
    # the exponent of the mean-field term: a misprint must show, not be normalised away
    assert latex_to_mathml("L^{-1/3}") != latex_to_mathml("L^{-1/2}")
    right = ET.fromstring(latex_to_mathml("L^{-1/3} H^{-1/2}"))
    sup = right.find(".//msup")  # the first power: L^{-1/3}
    assert sup is not None and [el.text for el in sup.iter("mn")] == ["1", "3"]


@pytest.mark.parametrize("tex, what", [
    (r"\frac{a}{b", "missing '}'"),
    (r"a}", "unbalanced"),
    (r"x^2^3", "double superscript"),
    (r"\begin{matrix}a\end{matrix}", r"\\begin"),
    (r"a & b", "'&'"),
    (r"\foo x", r"\\foo"),
    (r"\frac{a}", "missing an argument"),
    (r"\mathbb{xy}", "capital letter"),
    ("x\\", "backslash"),
])
def test_outside_the_subset_is_refused(tex, what):
    with pytest.raises(ValueError, match=what):
        latex_to_mathml(tex)


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="tex"):
        latex_to_mathml(None)
    with pytest.raises(ValueError, match="display"):
        latex_to_mathml("x", display="wide")
    with pytest.raises(ValueError, match="text"):
        claim_html(3)


# ------------------------------------------------------------------------------------------------
# rate claims in free text
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, parts", [
    ("sup_{X0 in ball} |x_L − X_1| = O(L^-1 + L^-1/3 H^-1/2), at init", ["O(L^-1 + L^-1/3 H^-1/2)"]),
    ("D_T(μ^N, μ) ≤ c_T N^{-1/2} for d < 4 (Fournier–Guillin)", ["c_T N^{-1/2}"]),
    ("E (1/N)Σ|X − X̄_t|² ≤ c(1/L + 1/m) on grid times", ["1/N", "1/L + 1/m"]),
    ("remainder O(h²) and O(h^{k+1}), k = 1, 2, 3", ["O(h²)"]),
    ("C1 L^-1 + C2 L^-1/3 H^-1/2 (slowest term in L: L^-1/3)", ["C1 L^-1 + C2 L^-1/3 H^-1/2", "L^-1/3"]),
    ("err ~ L^-1", ["L^-1"]),
    ("at a rate a L^-1 here", ["L^-1"]),             # "a" is a word, not a factor of the rate
    ("err = O(C1 L^-1 + C2 log(L)/L) in L, H", ["O(C1 L^-1 + C2 log(L)/L)"]),
    ("||theta_k|| <= R_k; drift ∝ sqrt(d)", []),      # growth, not a rate
    ("bounded uniformly in N", []),
    ("F(u) and k'(1) and X_{⌊Lt/T⌋}", []),
])
def test_rate_spans_in_claims(text, parts):
    assert [text[a:b] for a, b in rate_spans(text)] == parts


def test_long_claims_find_every_rate():
    """Repeated rates in a long text are each found, and each found part parses as a decaying rate."""
    from transformer_limits.verify.rate.claims import parse_rate_claim

    text = "a L^-1 " * 150
    spans = rate_spans(text)
    assert [text[a:b] for a, b in spans] == ["L^-1"] * 150
    mixed = "err ~ L^-1/3 and then x_1 + 1/m, also O(h²) or N^{-1/2} for y"
    for a, b in rate_spans(mixed):
        if not mixed[a:b].startswith("O("):
            claim = parse_rate_claim(mixed[a:b])
            assert any(q < 0 for t in claim.terms for q in t.exponents.values())
    assert [mixed[a:b] for a, b in rate_spans(mixed)] == ["L^-1/3", "1/m", "O(h²)", "N^{-1/2}"]


def test_claim_html_keeps_the_text_and_typesets_the_rate():
    text = "sup |x_L − X_1| = O(L^-1 + L^-1/3 H^-1/2), at init & after <K> steps"
    out = claim_html(text)
    root = _xml(out)
    maths = root.findall("math")
    assert len(maths) == 1 and maths[0].get("display") == "inline"
    assert maths[0].find("semantics/annotation").text == "O(L^-1 + L^-1/3 H^-1/2)"
    assert root.text == "sup |x_L − X_1| = " and maths[0].tail == ", at init & after <K> steps"
    assert "&amp; after &lt;K&gt; steps" in out  # the surrounding text is escaped
    # the exponents survive: -1/3 and -1/2 as written
    exps = ["".join(s[1].itertext()) for s in maths[0].iter("msup")]
    assert exps == ["\u22121", "\u22121/3", "\u22121/2"]
    assert claim_html("plain words only") == "plain words only"


def test_claim_html_wrong_rate_differs():
    assert claim_html("err = O(L^-1/3)") != claim_html("err = O(L^-1/2)")
    assert claim_html("c_T N^{-1/2}").count("<msub>") == 1  # c_T keeps its subscript


def test_every_experiment_claim_is_well_formed_html():
    from transformer_limits.verify.registry import list_experiments

    typeset = 0
    for exp in list_experiments():
        out = claim_html(exp.claim)
        root = _xml(out)
        typeset += len(root.findall("math"))
        # nothing lost: the visible text minus the formulas' annotations equals the claim
        rebuilt = "".join(
            (el.find("semantics/annotation").text if el.tag == "math" else "") + (el.tail or "")
            for el in root)
        assert (root.text or "") + rebuilt == exp.claim
    assert typeset >= 4


# ------------------------------------------------------------------------------------------------
# pages
# ------------------------------------------------------------------------------------------------


def test_report_html_typesets_the_claims_and_links_html_derivations(tmp_path):
    from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
    from transformer_limits.verify.report import write_experiment_report
    from transformer_limits.verify.verdicts import Check

    check = Check("exponent_L", "C1 L^-1 + C2 L^-1/3 H^-1/2 (slowest term in L: L^-1/3)", -1 / 3, -0.35,
                  (-0.4, -0.3), True)
    exp = Experiment(name="demo", title="Demo", paper="A", claim="err = O(L^-1 + L^-1/3 H^-1/2)",
                     derivations=("attention-bounds",), checks=("exponent_L",),
                     run=lambda config: ExperimentResult("demo", "quick", checks=[check]))
    write_experiment_report(ExperimentResult("demo", "quick", checks=[check]), tmp_path, exp, ExperimentConfig())
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.count("<math") == 3  # the claim, and the check claim's two rate parts
    assert "http" not in page and "<script" not in page
    assert 'href="derivations/attention-bounds.html"' in page
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "<math" not in md and "err = O(L^-1 + L^-1/3 H^-1/2)" in md  # terminals keep plain text
    deriv = (tmp_path / "derivations" / "attention-bounds.html").read_text(encoding="utf-8")
    assert deriv.count("<math") >= 8 and "Generated kernels" not in deriv
    body = deriv.split("<body>", 1)[1].split("</body>")[0]
    _xml(body)  # the page body is well-formed XML (MathML included)


def test_derivation_page_has_every_formula_and_a_fallback():
    from transformer_limits.symbolic.derivation import derivation

    d = derivation("attention-lions-derivative")
    page = derivation_html(d)
    root = _xml(page.split("<body>", 1)[1].split("</body>")[0])
    maths = root.findall(".//math")
    notes = [p for p in root.iter("p") if "Not typeset" in "".join(p.itertext())]
    # every generic formula typeset; each componentwise result typeset or shown as LaTeX with a note
    assert len(maths) + len(notes) == len(d.generic_latex) + len(d.expressions)
    assert len(maths) >= len(d.generic_latex) and notes  # this one has expressions over the budget
    annotations = [m.find("semantics/annotation").text for m in maths]
    assert list(d.generic_latex.values()) == annotations[:len(d.generic_latex)]
    assert 'href="attention-lions-derivative.md"' in page
    # a tiny budget sends every componentwise result to the fallback
    small = derivation_html(d, budget=10)
    assert small.count("Not typeset") == len(d.expressions)
