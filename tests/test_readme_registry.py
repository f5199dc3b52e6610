"""The README's experiment table is generated from the registry (``verify.registry_docs``), so it
cannot drift: the README section equals the generated text, and the generator renders exactly what
the experiments declare (name, paper, claim, checks, profiles, budget per profile)."""

from __future__ import annotations

import pytest

from transformer_limits.verify.check_spec import CheckSpec
from transformer_limits.verify.experiment import Experiment
from transformer_limits.verify.registry import list_experiments
from transformer_limits.verify.registry_docs import (
    BEGIN,
    END,
    README,
    experiment_table,
    main,
    readme_section,
    replace_readme_section,
)


def _exp(name, paper="A", claim="err ~ L^-1", checks=("c",), profiles=("quick", "full"), budget=None,
         requires=()):
    return Experiment(name=name, title=name, paper=paper, claim=claim, derivations=(), checks=checks,
                      run=lambda config: None, profiles=profiles, budget_s=budget or {}, requires=requires)


def test_readme_section_is_the_generated_table():
    text = README.read_text(encoding="utf-8")
    assert readme_section(text) == experiment_table(list_experiments()), (
        "README experiment table out of date: python3 -m transformer_limits.verify.registry_docs --write")
    assert main(["--check"]) == 0


def test_every_experiment_a_report_runs_has_a_row_with_its_checks_and_budgets():
    section = readme_section(README.read_text(encoding="utf-8"))
    rows = {line.split("|")[1].strip().strip("`"): line for line in section.splitlines()
            if line.startswith("| `")}
    ran = [e for e in list_experiments() if e.profiles]
    assert sorted(rows) == sorted(e.name for e in ran)
    for exp in ran:
        assert all(f"`{name}`" in rows[exp.name] for name in exp.check_names)
        assert f"~{exp.budget_s['quick']:g} s" in rows[exp.name]


def test_table_rows_from_the_declarations():
    table = experiment_table([
        _exp("b-exp", paper="B", checks=(CheckSpec("exponent_m"),), budget={"quick": 5.0}),
        _exp("a-exp", claim="|x| ≤ C L^-1 * 2", checks=("exponent_L", "bound"),
             budget={"quick": 12.5, "full": 60}, requires=("torch",), profiles=("full",)),
        _exp("a-wrong", profiles=()),
    ])
    lines = table.splitlines()
    assert lines[0] == "| experiment | paper | claim | checks | profiles | quick budget | full budget |"
    assert lines[1] == "|---|---|---|---|---|---|---|"
    # sorted by paper, then name; pipes and asterisks escaped; a missing budget is a dash
    assert lines[2] == ("| `a-exp` | A | \\|x\\| ≤ C L^-1 \\* 2 (needs torch) | `exponent_L`, `bound` | full "
                        "| ~12.5 s | ~60 s |")
    assert lines[3] == "| `b-exp` | B | err ~ L^-1 | `exponent_m` | quick, full | ~5 s | – |"
    # an experiment in no profile is not a row: it is named once, after the table
    assert lines[4:] == ["", "Run by name only (deliberately wrong variants, never part of a report): `a-wrong`."]
    assert all(line.count("|") - line.count("\\|") == 8 for line in lines[:4])


def test_a_drifted_readme_is_noticed_and_rewritten(tmp_path, capsys):
    readme = tmp_path / "README.md"
    good = README.read_text(encoding="utf-8")
    # adamw-box's quick budget, edited by hand
    row = "`coordinatewise_exponent` | quick, full | "
    drifted = good.replace(row + "~10 s", row + "~4 s")
    assert drifted != good
    readme.write_text(drifted, encoding="utf-8")
    assert main(["--check", "--readme", str(readme)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["--write", "--readme", str(readme)]) == 0
    assert readme.read_text(encoding="utf-8") == good  # only the section changed back
    assert main(["--check", "--readme", str(readme)]) == 0


def test_replace_keeps_the_text_around_the_markers():
    text = f"intro\n{BEGIN}\nold\n{END}\noutro\n"
    assert replace_readme_section(text, "new\n") == f"intro\n{BEGIN}\nnew\n{END}\noutro\n"
    assert readme_section(f"x{BEGIN}\n\nrow\n\n{END}") == "row\n"


@pytest.mark.parametrize("text", ["no markers", f"{BEGIN}{BEGIN}{END}", f"{END} then {BEGIN}"])
def test_missing_or_misordered_markers_are_bad_input(text):
    with pytest.raises(ValueError, match="markers|before"):
        readme_section(text)
