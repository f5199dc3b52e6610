"""The README's experiment table is the registry's, not a second copy that drifts: the same
experiments (every one that runs in some profile), the same paper and the same check names."""

from __future__ import annotations

import re
from pathlib import Path

from transformer_limits.verify.experiment import list_experiments

README = Path(__file__).resolve().parents[1] / "README.md"


def _expand(name: str) -> list[str]:
    """``flow_taylor_order{1,2,3}_rate`` -> the three names (the README's shorthand)."""
    match = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", name)
    if not match:
        return [name]
    head, options, tail = match.groups()
    return [head + option.strip() + tail for option in options.split(",")]


def readme_table(text: str) -> dict[str, tuple[str, list[str]]]:
    """experiment -> (paper, check names) from the table under ``| experiment | paper | checks |``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| experiment | paper | checks |"))
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        name = cells[0].strip("`")
        checks = [c for token in re.findall(r"`([^`]+)`", cells[2]) for c in _expand(token)]
        rows[name] = (cells[1], checks)
    return rows


def mismatches(text: str) -> list[str]:
    """Where the README table ``text`` and the registry disagree (empty when they agree)."""
    registered = {e.name: e for e in list_experiments() if e.profiles}  # profiles=(): run by name only
    table = readme_table(text)
    out = [f"{name}: registered, not in the README" for name in sorted(set(registered) - set(table))]
    out += [f"{name}: in the README, not registered" for name in sorted(set(table) - set(registered))]
    for name in sorted(set(table) & set(registered)):
        paper, checks = table[name]
        if paper != registered[name].paper:
            out.append(f"{name}: paper {paper} in the README, {registered[name].paper} registered")
        if sorted(checks) != sorted(registered[name].check_names):
            out.append(f"{name}: checks {sorted(checks)} in the README, {sorted(registered[name].check_names)} registered")
    return out


def test_readme_table_lists_exactly_the_registered_experiments():
    assert mismatches(README.read_text(encoding="utf-8")) == []


def test_a_drifted_table_is_noticed():
    text = README.read_text(encoding="utf-8")
    assert _expand("flow_taylor_order{1,2,3}_rate") == [f"flow_taylor_order{k}_rate" for k in (1, 2, 3)]
    dropped_check = text.replace(", `coordinatewise_exponent`", "", 1)
    assert mismatches(dropped_check) == [
        "adamw-box: checks ['blockwise_dimension_free', 'box_holds'] in the README, "
        "['blockwise_dimension_free', 'box_holds', 'coordinatewise_exponent'] registered"]
    dropped_row = "\n".join(line for line in text.splitlines() if not line.startswith("| `lyapunov`"))
    assert mismatches(dropped_row) == ["lyapunov: registered, not in the README"]
    wrong_paper = text.replace("| `sde-limit` | B |", "| `sde-limit` | A |", 1)
    assert mismatches(wrong_paper) == ["sde-limit: paper A in the README, B registered"]
