"""Experiments that do not run: missing requirements (``Experiment.requires``) and the index's ``not_run`` list.

PyTorch is installed here, so the requirement check (``running._module_available``) is patched to
pretend it is missing.  The report runs are kept fast by running only ``spectral-released`` (well
under a second): ``--only``, or a registry reduced to the paper C experiments.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from transformer_limits.cli import main
from transformer_limits.errors import InputError
from transformer_limits.verify import registry as registry_mod, running as running_mod
from transformer_limits.verify.experiment import Experiment, ExperimentConfig
from transformer_limits.verify.registry import experiment_spec, list_experiments
from transformer_limits.verify.running import missing_requirement, run_experiment

NEEDS_TORCH = "missing requirement: needs PyTorch (pip install torch)"
WRONG = "deliberately wrong variant, run by name"


@pytest.fixture
def no_torch(monkeypatch):
    """Pretend PyTorch is not installed (every other module is found as usual)."""
    real = running_mod._module_available
    monkeypatch.setattr(running_mod, "_module_available", lambda m: m != "torch" and real(m))


@pytest.fixture
def paper_c_only(monkeypatch):
    """A registry holding only three paper C experiments (the others would take minutes)."""
    keep = {"spectral-scaling", "spectral-released", "spectral-released-wrong-dion"}
    for exp in list_experiments():
        if exp.name not in keep:
            monkeypatch.delitem(registry_mod._REGISTRY, exp.name)
    assert {e.name for e in list_experiments()} == keep


def _index(out):
    return (json.loads((out / "summary.json").read_text()), (out / "index.md").read_text(),
            (out / "index.html").read_text())


# ------------------------------------------------------------------------------------------------
# the requirement check


def test_missing_requirement_names_the_module_and_how_to_get_it(no_torch):
    assert experiment_spec("spectral-scaling").requires == ("torch",)
    assert missing_requirement(experiment_spec("spectral-scaling")) == NEEDS_TORCH
    assert missing_requirement(experiment_spec("spectral-released")) is None
    exp = Experiment("x", "t", "C", "c", (), ("k",), run=lambda c: None, requires=("numpy", "no_such_module_tl"))
    assert missing_requirement(exp) == ("missing requirement: needs the module 'no_such_module_tl' "
                                        "(pip install no_such_module_tl)")
    assert exp.to_dict()["requires"] == ["numpy", "no_such_module_tl"]


def test_requirement_met_when_installed():
    """Without the patch torch is found here (installed), so spectral-scaling may run."""
    pytest.importorskip("torch")
    assert missing_requirement(experiment_spec("spectral-scaling")) is None


def test_run_experiment_refuses_before_running(no_torch):
    calls = []
    exp = Experiment("needs-torch", "t", "C", "c", (), ("k",), run=lambda c: calls.append(c), requires=("torch",))
    with pytest.raises(InputError, match="needs-torch cannot run here: " + NEEDS_TORCH.replace("(", r"\(")
                       .replace(")", r"\)")):
        run_experiment(exp, ExperimentConfig())
    assert calls == []  # never started: not a crash, not a failed check


def test_verify_missing_requirement_is_bad_input_exit_2(no_torch, capsys, tmp_path):
    out = tmp_path / "r"
    assert main(["verify", "spectral-scaling", "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"transformer-limits: error: experiment spectral-scaling cannot run here: {NEEDS_TORCH}"]
    assert not out.exists()  # nothing written


# ------------------------------------------------------------------------------------------------
# report: skipped, and listed with why


def test_quick_index_lists_every_experiment_that_did_not_run(no_torch, paper_c_only, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["report", "--profile", "quick", "--out", str(out), "--no-progress"]) == 0
    summary, md, page = _index(out)
    assert [e["name"] for e in summary["experiments"]] == ["spectral-released"]
    reasons = {e["name"]: e["reason"] for e in summary["not_run"]}
    assert reasons == {
        "spectral-released-wrong-dion": WRONG,
        "spectral-scaling": f"not in profile quick (profiles: full); {NEEDS_TORCH}",
    }
    for text in (md, page):
        assert "Not run" in text and "needs PyTorch" in text and WRONG in text
        assert "spectral-released-wrong-dion" in text and "not in profile quick (profiles: full)" in text
    assert "| spectral-scaling | C | not in profile quick (profiles: full); " + NEEDS_TORCH in md
    assert "http" not in page
    assert "2 other registered experiment(s) not run" in capsys.readouterr().out


def test_full_report_skips_what_cannot_run_instead_of_crashing(no_torch, paper_c_only, tmp_path, capsys,
                                                               monkeypatch):
    calls = []
    spec = dataclasses.replace(experiment_spec("spectral-scaling"), run=lambda config: calls.append(config))
    monkeypatch.setitem(registry_mod._REGISTRY, "spectral-scaling", spec)
    out = tmp_path / "r"
    assert main(["report", "--profile", "full", "--out", str(out), "--no-progress"]) == 0
    summary, md, _ = _index(out)
    # the released data cannot decide the Muon ordering (8 widths): INCONCLUSIVE, not a silent pass
    assert summary["status"] == "inconclusive" and [e["name"] for e in summary["experiments"]] == ["spectral-released"]
    skipped = [e for e in summary["not_run"] if e["name"] == "spectral-scaling"]
    assert skipped == [{"name": "spectral-scaling", "title": spec.title, "paper": "C", "profiles": ["full"],
                        "selected": True, "reason": NEEDS_TORCH}]
    assert not (out / "spectral-scaling").exists() and calls == []
    assert "SKIPPED  " + NEEDS_TORCH in capsys.readouterr().out


def test_only_run_lists_the_rest_and_the_wrong_variants(no_torch, tmp_path):
    """A small --only run with the whole registry: every other registered experiment is listed."""
    out = tmp_path / "r"
    assert main(["report", "--only", "spectral-released", "--out", str(out), "--no-progress"]) == 0
    summary, md, page = _index(out)
    names = {e.name for e in list_experiments()}
    listed = {e["name"]: e["reason"] for e in summary["not_run"]}
    assert set(listed) == names - {"spectral-released"}  # every registered experiment that did not run
    assert listed["spectral-scaling"] == f"not named by --only; {NEEDS_TORCH}"
    assert listed["spectral-released-wrong-dion"] == f"not named by --only; {WRONG}"
    wrong = [e.name for e in list_experiments() if not e.profiles]
    assert wrong and all(WRONG in listed[n] for n in wrong)
    for name in listed:
        assert name in md and name in page


def test_only_a_requirement_missing_experiment_is_bad_input(no_torch, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["report", "--only", "spectral-scaling", "--out", str(out), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip() == f"transformer-limits: error: nothing to run: spectral-scaling: {NEEDS_TORCH}"
    assert not out.exists()


def test_wrong_variant_run_by_name_in_a_report_fails(tmp_path, capsys):
    """Deliberately wrong variant named with --only: it runs and FAILS (exit 1), the real one passes."""
    out = tmp_path / "r"
    code = main(["report", "--only", "spectral-released", "spectral-released-wrong-dion", "--out", str(out),
                 "--no-progress"])
    assert code == 1
    summary, md, _ = _index(out)
    status = {e["name"]: e["status"] for e in summary["experiments"]}
    assert status == {"spectral-released": "inconclusive", "spectral-released-wrong-dion": "fail"}
    assert "spectral-released-wrong-dion" not in {e["name"] for e in summary["not_run"]}
    assert "[spectral-released-wrong-dion](spectral-released-wrong-dion/report.md) | C | FAIL |" in md
