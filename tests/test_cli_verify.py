"""``transformer-limits verify`` / ``report``: exit codes 0/1/2/3, output formats, nothing half-written."""

from __future__ import annotations

import dataclasses
import json

import pytest

from transformer_limits.cli import main
from transformer_limits.verify import registry as experiment_mod
from transformer_limits.verify import report as report_mod
from transformer_limits.verify.experiment import Experiment, ExperimentResult
from transformer_limits.verify.verdicts import Check

CALLS: list[str] = []


def _check(passed: bool) -> Check:
    return Check("dummy_check", "1 + 1 = 2", 2.0, 2.0 if passed else 3.0, (1.9, 2.1), passed,
                 {"alpha": 0.01, "sides": "two-sided", "method": "exact"}, "" if passed else "1 + 1 = 3", 0.95,
                 "1 + 1 = 3")


def _runner(name: str, passed: bool | None):
    def run(config):
        CALLS.append(name)
        if passed is None:
            raise RuntimeError(f"{name} exploded")
        return ExperimentResult(name, config.profile, checks=[_check(passed)],
                                provenance={"seeds": {"base": config.seed}})
    return run


@pytest.fixture
def dummies(monkeypatch):
    """Register dummy-pass, dummy-fail and dummy-crash (removed again by monkeypatch)."""
    experiment_mod.list_experiments()  # discover the real ones first
    for name, passed in (("dummy-pass", True), ("dummy-fail", False), ("dummy-crash", None)):
        exp = Experiment(name=name, title=f"{name} title", paper="A", claim="1 + 1 = 2", derivations=(),
                         checks=("dummy_check",), run=_runner(name, passed), profiles=("full",))
        monkeypatch.setitem(experiment_mod._REGISTRY, name, exp)
    CALLS.clear()
    yield
    CALLS.clear()


def test_verify_pass_exit_0(dummies, capsys):
    assert main(["verify", "dummy-pass", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "dummy_check" in out and "RESULT: PASS (1/1 checks passed)" in out


def test_verify_fail_exit_1_after_printing(dummies, capsys):
    assert main(["verify", "dummy-fail"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "1 + 1 = 3" in out


def test_verify_json(dummies, capsys):
    assert main(["verify", "dummy-fail", "--format", "json", "--seed", "7"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["experiment"] == "dummy-fail" and data["passed"] is False
    assert data["checks"][0]["name"] == "dummy_check" and data["provenance"]["seeds"] == {"base": 7}


def test_verify_crash_is_an_error_not_a_failed_check(dummies, capsys, tmp_path):
    assert main(["verify", "dummy-crash", "--out", str(tmp_path / "r")]) == 3
    captured = capsys.readouterr()
    assert "RESULT: ERROR" in captured.out and "RuntimeError: dummy-crash exploded" in captured.out
    assert "FAIL" not in captured.out
    err = captured.err.strip()
    assert "dummy-crash crashed" in err and "\n" not in err
    data = json.loads((tmp_path / "r" / "results.json").read_text())
    assert data["status"] == "error" and data["passed"] is False and data["checks"] == []
    assert data["error"] == "RuntimeError: dummy-crash exploded"
    assert any("Traceback" in n for n in data["notes"])
    for page in ("report.md", "report.html"):
        text = (tmp_path / "r" / page).read_text()
        assert "ERROR" in text and "FAIL" not in text


def test_verify_writes_report(dummies, tmp_path, capsys):
    assert main(["verify", "dummy-pass", "--out", str(tmp_path / "r")]) == 0
    assert {p.name for p in (tmp_path / "r").iterdir()} == {"results.json", "report.md", "report.html"}
    assert "report:" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["verify", "no-such-experiment"], "unknown experiment"),
    (["verify", "dummy-pass", "--profile", "medium"], "invalid choice"),
    (["verify"], "needs an experiment NAME"),
    (["verify", "dummy-pass", "--list"], "takes no NAME"),
    (["verify", "dummy-pass", "--seed", "-1"], "--seed"),
    (["verify", "dummy-pass", "--workers", "0"], "--workers"),
    (["verify", "dummy-pass", "--seed", "x"], "invalid int"),
    (["report", "--only", "dummy-pass"], "--out"),
])
def test_bad_input_exit_2_one_line(dummies, capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert CALLS == []


def test_out_pointing_at_a_file_is_bad_input_and_runs_nothing(dummies, tmp_path, capsys):
    f = tmp_path / "file.txt"
    f.write_text("keep me")
    for argv in (["verify", "dummy-pass", "--out", str(f)], ["report", "--out", str(f), "--only", "dummy-pass"]):
        assert main(argv) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert CALLS == [] and f.read_text() == "keep me"


def test_store_that_is_a_directory_is_bad_input(dummies, tmp_path, capsys):
    assert main(["verify", "dummy-pass", "--store", str(tmp_path)]) == 2
    assert "--store" in capsys.readouterr().err


def test_report_passes_workers_store_and_scheduler_checks_to_the_experiments(dummies, monkeypatch, tmp_path, capsys):
    seen = []
    exp = experiment_mod._REGISTRY["dummy-pass"]
    spy = dataclasses.replace(exp, run=lambda config: seen.append(config) or _runner("dummy-pass", True)(config))
    monkeypatch.setitem(experiment_mod._REGISTRY, "dummy-pass", spy)
    store = tmp_path / "runs.sqlite"
    argv = ["report", "--out", str(tmp_path / "r"), "--only", "dummy-pass", "--workers", "2", "--store", str(store)]
    assert main(argv) == 0
    assert seen[0].workers == 2 and seen[0].store == str(store)
    from transformer_limits.commands.verify import available_cpus

    assert main(["report", "--out", str(tmp_path / "r1"), "--only", "dummy-pass"]) == 0
    assert seen[1].workers == available_cpus() and seen[1].store is None  # default: every available CPU
    assert main(["report", "--out", str(tmp_path / "r2"), "--only", "dummy-pass", "--store", str(tmp_path)]) == 2
    assert main(["report", "--out", str(tmp_path / "r3"), "--only", "dummy-pass", "--scheduler", " "]) == 2
    err = capsys.readouterr().err
    assert "--store" in err and "--scheduler" in err and len(seen) == 2


def test_list(dummies, capsys):
    assert main(["verify", "--list"]) == 0
    text = capsys.readouterr().out
    assert "dummy-pass" in text and "lions-taylor" in text and "lyapunov" in text
    assert main(["verify", "--list", "--format", "json"]) == 0
    data = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert data["lions-taylor"]["check_names"] == ["lions_taylor_rate", "jacobian_taylor_rate",
                                                   "flow_taylor_order1_rate", "flow_taylor_order2_rate",
                                                   "flow_taylor_order3_rate"]
    assert data["dummy-fail"]["profiles"] == ["full"]


def test_report_runs_all_and_survives_a_crash(dummies, tmp_path, capsys):
    out = tmp_path / "rep"
    code = main(["report", "--out", str(out), "--only", "dummy-pass", "dummy-crash", "dummy-fail",
                 "--no-progress"])
    assert code == 3  # a crash outranks a failed check
    assert CALLS == ["dummy-pass", "dummy-crash", "dummy-fail"]
    text = capsys.readouterr().out
    assert "RESULT: ERROR (1/3 experiments passed, 1 failed, 1 crashed" in text and "crashed: RuntimeError" in text
    summary = json.loads((out / "summary.json").read_text())
    assert [e["passed"] for e in summary["experiments"]] == [True, False, False]
    assert [e["status"] for e in summary["experiments"]] == ["pass", "error", "fail"]
    assert summary["status"] == "error" and summary["n_errors"] == 1
    for name in ("dummy-pass", "dummy-crash", "dummy-fail"):
        assert {"results.json", "report.md", "report.html"} <= {p.name for p in (out / name).iterdir()}
    assert (out / "index.md").is_file() and (out / "index.html").is_file()
    index = (out / "index.md").read_text()
    assert "[dummy-crash](dummy-crash/report.md) | A | ERROR |" in index and "[dummy-fail](dummy-fail/report.md) | A | FAIL |" in index
    assert "Crashed experiments" in index and "dummy-crash: RuntimeError: dummy-crash exploded" in index
    assert '<tr class="error">' in (out / "index.html").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging leftovers
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_report_pass_exit_0_and_json(dummies, tmp_path, capsys):
    assert main(["report", "--out", str(tmp_path), "--only", "dummy-pass", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is True and data["n_experiments"] == 1 and data["profile"] == "quick"


def test_report_selects_by_profile(dummies, monkeypatch, tmp_path, capsys):
    # only the dummies are in "full"; keep the real experiments out of this test
    for name in [n for n in experiment_mod._REGISTRY if not n.startswith("dummy-")]:
        monkeypatch.delitem(experiment_mod._REGISTRY, name)
    assert main(["report", "--profile", "full", "--out", str(tmp_path)]) == 3
    assert sorted(CALLS) == ["dummy-crash", "dummy-fail", "dummy-pass"]
    CALLS.clear()
    assert main(["report", "--profile", "quick", "--out", str(tmp_path / "q")]) == 2
    assert "no experiment includes profile" in capsys.readouterr().err and CALLS == []


def test_report_unknown_only_is_bad_input(dummies, tmp_path, capsys):
    assert main(["report", "--out", str(tmp_path / "r"), "--only", "dummy-pass", "nope"]) == 2
    assert "unknown experiment 'nope'" in capsys.readouterr().err
    assert CALLS == [] and not (tmp_path / "r").exists()


def test_crash_while_writing_the_report_leaves_nothing_half_written(dummies, tmp_path, monkeypatch, capsys):
    import errno

    monkeypatch.setattr(report_mod, "_html",
                        lambda *a: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    assert main(["verify", "dummy-pass", "--out", str(tmp_path / "r")]) == 3  # environment failure mid-run
    assert "No space left" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(report_mod, "_html", lambda *a: (_ for _ in ()).throw(RuntimeError("bug")))
    with pytest.raises(RuntimeError, match="bug"):
        main(["verify", "dummy-pass", "--out", str(tmp_path / "r")])
    assert list(tmp_path.iterdir()) == []
