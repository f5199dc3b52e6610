"""The repository is self-contained: it cites its own docs/theory.md, never a file outside it.

* No file of the repository (tracked, or untracked and not ignored, so a new file is checked before
  it is committed) names the project's internal notes outside the repository.
* Every reference such as ``docs/theory.md §A.3``, every bare ``§A.3`` inside docs/theory.md and
  every Markdown link such as ``theory.md#A.3`` points at a section that exists there (sections are
  ``<a id="A.3">`` anchors in front of numbered headings).  This file's own examples are not scanned.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THEORY = ROOT / "docs" / "theory.md"

# Built from pieces so that this file does not contain what it forbids.
FORBIDDEN = ("THEORY" + ".md", ".." + "/shared", "/work" + "/shared")

# One section label: a top-level letter/digit, optionally with a dotted number (A, A.3, C.10, 0.3),
# not followed by more of a word or number ("§A.3.2" is not "§A.3").
_LABEL = r"[0-9A-Z](?:\.\d+)?(?!\w|\.\d)"
# "docs/theory.md §A.3", "§B.6–B.7", "§A.1/§A.5", "§C.3 and §C.4"; after "," or "and" only with "§"
# ("§B.8, ReLU rows" cites B.8 alone).
_SEP = r"(?:\s*[–/-]\s*§?|\s*(?:,|and)\s*§)"
_REF = re.compile(r"docs/theory\.md,?\s+§\s?(" + _LABEL + r"(?:" + _SEP + _LABEL + r")*)")
_BARE = re.compile(r"§\s?(" + _LABEL + r"(?:" + _SEP + _LABEL + r")*)")
_LINK = re.compile(r"\btheory\.md#([^)\s\"'>`]+)")
_SPLIT = re.compile(_SEP)


def _repository_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the file list comes from git")
    out = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def _text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None  # binary (images, caches): cannot hold a citation
    return data.decode("utf-8", errors="replace")


def sections(text: str) -> set[str]:
    """Anchors ``<a id="X">`` of docs/theory.md."""
    return set(re.findall(r'<a id="([^"]+)"></a>', text))


def cited_labels(text: str, bare: bool = False) -> list[str]:
    """Section labels cited as ``docs/theory.md §X`` (or any ``§X`` when ``bare``), ranges split."""
    labels = []
    for m in (_BARE if bare else _REF).finditer(text):
        labels.extend(part for part in _SPLIT.split(m.group(1)) if part)
    return labels


def test_no_reference_outside_the_repository():
    offenders = []
    for path in _repository_files():
        text = _text(path)
        if text is None:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            if any(word in line for word in FORBIDDEN):
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()[:120]}")
    assert not offenders, ("cite docs/theory.md (or the published paper) instead of files outside "
                           "the repository:\n" + "\n".join(offenders))


def test_theory_sections_are_anchored_headings():
    text = THEORY.read_text(encoding="utf-8")
    anchors = sections(text)
    # Each anchor sits right above the heading with the same number, and vice versa.
    pairs = re.findall(r'<a id="([^"]+)"></a>\n#+ ([0-9A-Z](?:\.\d+)?)\.? ', text)
    assert {a for a, _ in pairs} == anchors
    assert all(a == h for a, h in pairs)
    headings = re.findall(r"^#{2,4} ([0-9A-Z](?:\.\d+)?)\.? ", text, flags=re.M)
    assert sorted(headings) == sorted(anchors)
    assert {"A", "B", "C", "A.2", "A.5", "B.6", "C.8"} <= anchors


def test_every_theory_reference_exists():
    anchors = sections(THEORY.read_text(encoding="utf-8"))
    missing, n_refs = [], 0
    for path in _repository_files():
        text = _text(path)
        if text is None or path == Path(__file__).resolve():
            continue
        labels = cited_labels(text, bare=(path == THEORY))
        labels += _LINK.findall(text)
        if path == THEORY:
            labels += re.findall(r"\]\(#([^)]+)\)", text)  # the page's own links
        n_refs += len(labels)
        missing += [f"{path.relative_to(ROOT)}: §{label}" for label in labels if label not in anchors]
    assert not missing, "references to sections docs/theory.md does not have:\n" + "\n".join(missing)
    assert n_refs > 100  # the repository does cite it: the pattern still matches its references


@pytest.mark.parametrize("text, labels", [
    ("see docs/theory.md §A.3.", ["A.3"]),
    ("(docs/theory.md §B.6–B.7, derivation)", ["B.6", "B.7"]),
    ("docs/theory.md §A.1/§A.5: the claim", ["A.1", "A.5"]),
    ("docs/theory.md §C.3 and §C.4", ["C.3", "C.4"]),
    ("(docs/theory.md §B.8, ReLU rows)", ["B.8"]),
    ("(docs/theory.md §B.5, Fournier–Guillin rates)", ["B.5"]),
    ("docs/theory.md §C.10)", ["C.10"]),
    ("docs/theory.md §B shape", ["B"]),
    ("docs/theory.md, §D item 15", ["D"]),
    ("docs/theory.md §A.3.2", []),          # not a label of this page: must not pass as A.3
])
def test_reference_pattern(text, labels):
    assert cited_labels(text) == labels
