"""The MathML of report.html and of the derivation pages renders in a real browser (headless Chromium).

Skipped where no Chromium/Chrome is installed (Debian: ``apt-get install chromium``).  For each page
the test appends a small inline script (to a copy: the product pages have no scripts) that measures
every ``<math>`` element and the parts of every ``<msup>`` and ``<mfrac>``, and writes the numbers
into the DOM, which ``--dump-dom`` prints.  Typeset means: the HTML parser put the elements in the
MathML namespace, each formula has a non-zero box, superscripts sit higher than their base in a
smaller font, and numerators sit above denominators.  Inline elements of an unknown kind (what a browser
without MathML makes of these tags) would sit on one baseline at one size, so they fail.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MATHML_NS = "http://www.w3.org/1998/Math/MathML"
BROWSER = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome",
                                                "google-chrome-stable")) if p), None)
pytestmark = pytest.mark.skipif(BROWSER is None, reason="no headless Chromium/Chrome on PATH "
                                "(apt-get install chromium)")

_PROBE = """<script>
(function () {
  function box(e) { var r = e.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, width: r.width, height: r.height,
            font: parseFloat(getComputedStyle(e).fontSize)}; }
  var out = {maths: [], sups: [], fracs: []};
  document.querySelectorAll("math").forEach(function (m) {
    var b = box(m); b.ns = m.namespaceURI; out.maths.push(b); });
  document.querySelectorAll("msup").forEach(function (s) {
    if (s.children.length === 2) out.sups.push({base: box(s.children[0]), sup: box(s.children[1])}); });
  document.querySelectorAll("mfrac").forEach(function (f) {
    if (f.children.length === 2) out.fracs.push({num: box(f.children[0]), den: box(f.children[1])}); });
  var pre = document.createElement("pre"); pre.id = "tl-probe";
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
})();
</script>"""


def _measure(page: Path, tmp_path: Path) -> tuple[str, dict]:
    """Load a copy of ``page`` with the probe in headless Chromium; return (DOM, measurements)."""
    probe = page.with_name(page.stem + ".probe.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions",
           "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,900",
           "--dump-dom", probe.as_uri()]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{BROWSER} did not finish within 180 s")
    dom = out.stdout
    if "<html" not in dom:
        pytest.fail(f"{BROWSER} printed no DOM (exit {out.returncode}): {out.stderr[-800:]}")
    m = re.search(r'<pre id="tl-probe">(.*?)</pre>', dom, re.S)
    assert m, "the probe script did not run"
    return dom, json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def _problems(dom: str, data: dict, expected_maths: int) -> list[str]:
    """What is wrong with a page's rendered formulas (empty: all typeset)."""
    problems = []
    if "parsererror" in dom:
        problems.append("the browser reports a parser error")
    maths = data["maths"]
    if len(maths) != expected_maths:
        problems.append(f"{len(maths)} <math> elements in the DOM, {expected_maths} in the page")
    problems += [f"formula {i} is not in the MathML namespace ({m['ns']})" for i, m in enumerate(maths)
                 if m["ns"] != MATHML_NS]
    problems += [f"formula {i} has an empty box {m['width']}x{m['height']}" for i, m in enumerate(maths)
                 if not (m["width"] > 0 and m["height"] > 0)]
    for i, s in enumerate(data["sups"]):
        # raised (the script's box ends above the base's) and set in a smaller font (script level)
        if not (s["sup"]["bottom"] < s["base"]["bottom"] - 1 and s["sup"]["font"] < s["base"]["font"]):
            problems.append(f"superscript {i} is not raised and smaller: {s}")
    for i, f in enumerate(data["fracs"]):
        if not f["num"]["bottom"] <= f["den"]["top"] + 0.5:
            problems.append(f"fraction {i}: numerator not above denominator: {f}")
    return problems


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
    from transformer_limits.verify.report import write_experiment_report
    from transformer_limits.verify.verdicts import Check

    out = tmp_path_factory.mktemp("report")
    check = Check("exponent_L", "C1 L^-1 + C2 L^-1/3 H^-1/2 (slowest term in L: L^-1/3)", -1 / 3, -0.35,
                  (-0.4, -0.3), True)
    exp = Experiment(name="demo", title="Demo", paper="A", claim="err = O(L^-1 + L^-1/3 H^-1/2) and 1/L + 1/m",
                     derivations=("attention-bounds",), checks=("exponent_L",),
                     run=lambda config: ExperimentResult("demo", "quick", checks=[check]))
    write_experiment_report(ExperimentResult("demo", "quick", checks=[check]), out, exp, ExperimentConfig())
    return out


def test_report_html_formulas_render(report_dir, tmp_path):
    page = report_dir / "report.html"
    dom, data = _measure(page, tmp_path)
    assert "<math" in dom
    n = page.read_text(encoding="utf-8").count("<math")
    assert n == 4
    assert _problems(dom, data, n) == []
    assert len(data["sups"]) >= 5  # L^-1, L^-1/3, H^-1/2 in the claim and the check


def test_report_derivation_page_renders(report_dir, tmp_path):
    page = report_dir / "derivations" / "attention-bounds.html"
    dom, data = _measure(page, tmp_path)
    n = page.read_text(encoding="utf-8").count("<math")
    assert n >= 8 and _problems(dom, data, n) == []


def test_generated_docs_derivation_page_renders(tmp_path):
    page = ROOT / "docs" / "derivations" / "flow-taylor.html"
    if not page.exists():
        pytest.fail("docs/derivations/flow-taylor.html missing: run "
                    "`transformer-limits derive --all --out docs/derivations`")
    copy = tmp_path / page.name
    copy.write_text(page.read_text(encoding="utf-8"), encoding="utf-8")
    dom, data = _measure(copy, tmp_path)
    n = copy.read_text(encoding="utf-8").count("<math")
    assert n >= 10 and len(data["fracs"]) >= 10
    assert _problems(dom, data, n) == []


def test_formulas_as_escaped_text_are_caught(report_dir, tmp_path):
    """The wrong page: the same formulas escaped (shown as tag soup text) must fail the check."""
    page = report_dir / "report.html"
    text = page.read_text(encoding="utf-8")
    n = text.count("<math")
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r"<math.*?</math>", lambda m: m.group(0).replace("<", "&lt;"), text, flags=re.S),
                      encoding="utf-8")
    dom, data = _measure(broken, tmp_path)
    assert any("<math> elements in the DOM" in p for p in _problems(dom, data, n))


def test_formulas_in_unknown_tags_are_caught(report_dir, tmp_path):
    """The wrong page: MathML tag names outside <math> are unknown HTML elements laid out as inline
    text, with no raised superscripts; the check must notice."""
    text = (report_dir / "report.html").read_text(encoding="utf-8")
    n = text.count("<math")
    plain = tmp_path / "plain.html"
    plain.write_text(text.replace("<math", "<span").replace("</math>", "</span>"), encoding="utf-8")
    dom, data = _measure(plain, tmp_path)
    problems = _problems(dom, data, n)
    assert any("superscript" in p for p in problems) and any("<math> elements" in p for p in problems)
