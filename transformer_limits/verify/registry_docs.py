"""The README's experiment table, generated from the registry so that it cannot drift.

:func:`experiment_table` renders one row per experiment that a report runs (``profiles`` not
empty): name, paper, claim, declared checks, profiles and the wall-time budget of each profile
(``Experiment.budget_s``, on 2 cores), then one line naming the experiments run by name only
(deliberately wrong variants).  The README holds the table between :data:`BEGIN` and :data:`END`;

    python3 -m transformer_limits.verify.registry_docs --write

rewrites that section in place (atomically: a crash leaves the old README), ``--check`` exits 1
when it is out of date, and with neither the section is printed.  ``tests/test_readme_registry.py``
keeps the README current.  Rendering needs no SymPy (the experiments' modules are imported to
find them, as for ``verify --list``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable, Sequence

from transformer_limits.verify.experiment import PROFILES, Experiment

__all__ = ["BEGIN", "END", "README", "experiment_table", "readme_section", "replace_readme_section", "main"]

BEGIN = "<!-- experiments:begin (generated: python3 -m transformer_limits.verify.registry_docs --write) -->"
END = "<!-- experiments:end -->"
#: the repository's README (next to the package)
README = Path(__file__).resolve().parents[2] / "README.md"

_HEADER = ("| experiment | paper | claim | checks | profiles | "
           + " | ".join(f"{p} budget" for p in PROFILES) + " |")


def _cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell (pipes and asterisks escaped, one line)."""
    return " ".join(text.split()).replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*")


def _budget(seconds: float | None) -> str:
    return "–" if seconds is None else f"~{seconds:g} s"


def _row(exp: Experiment) -> str:
    claim = _cell(exp.claim) + ("" if not exp.requires else f" (needs {', '.join(exp.requires)})")
    cells = [f"`{exp.name}`", _cell(exp.paper), claim, ", ".join(f"`{n}`" for n in exp.check_names),
             ", ".join(exp.profiles), *(_budget(exp.budget_s.get(p)) for p in PROFILES)]
    return "| " + " | ".join(cells) + " |"


def experiment_table(experiments: Iterable[Experiment]) -> str:
    """The README section for ``experiments`` (sorted by paper, then name), without the markers.

    Rows: experiments with a non-empty ``profiles``; the others are listed after the table as run by
    name only.  Budgets are ``Experiment.budget_s[profile]`` ("–" where none is declared)."""
    experiments = sorted(experiments, key=lambda e: (e.paper, e.name))
    rows = [e for e in experiments if e.profiles]
    by_name = [e for e in experiments if not e.profiles]
    lines = [_HEADER, "|" + "---|" * (_HEADER.count("|") - 1)] + [_row(e) for e in rows]
    if by_name:
        lines += ["", "Run by name only (deliberately wrong variants, never part of a report): "
                  + ", ".join(f"`{e.name}`" for e in by_name) + "."]
    return "\n".join(lines) + "\n"


def _span(text: str) -> tuple[int, int]:
    """Start and end offsets of the text between the markers; ``ValueError`` unless each marker
    occurs exactly once, BEGIN first."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"text must contain the markers {BEGIN!r} and {END!r} once each")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    if end < start:
        raise ValueError(f"text has {END!r} before {BEGIN!r}")
    return start, end


def readme_section(text: str) -> str:
    """The generated part of README ``text`` (between the markers, without the blank lines around)."""
    start, end = _span(text)
    return text[start:end].strip("\n") + "\n"


def replace_readme_section(text: str, section: str) -> str:
    """``text`` with the part between the markers replaced by ``section``."""
    start, end = _span(text)
    return text[:start] + "\n" + section.strip("\n") + "\n" + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    from transformer_limits.atomic_write import atomic_write_text
    from transformer_limits.verify.registry import list_experiments

    parser = argparse.ArgumentParser(prog="python3 -m transformer_limits.verify.registry_docs",
                                     description="the README's experiment table, from the registry")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="rewrite the README section in place")
    action.add_argument("--check", action="store_true", help="exit 1 when the README section is out of date")
    parser.add_argument("--readme", default=str(README), help="the README to read or rewrite")
    args = parser.parse_args(argv)
    section = experiment_table(list_experiments())
    if not (args.write or args.check):
        sys.stdout.write(section)
        return 0
    path = Path(args.readme)
    text = path.read_text(encoding="utf-8")
    if args.check:
        if readme_section(text) == section:
            return 0
        print(f"{path}: the experiment table is out of date; run "
              "python3 -m transformer_limits.verify.registry_docs --write", file=sys.stderr)
        return 1
    new = replace_readme_section(text, section)
    if new != text:
        atomic_write_text(path, new)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
