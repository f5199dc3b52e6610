"""A result is validated before any verdict is read from it, and the verdict has three outcomes.

* malformed results (NaN measurements, intervals or statistics, ``passed`` not a bool, checks that
  are not Checks, no alpha, fields that are not JSON) and runs that call ``sys.exit`` or raise an
  ``InputError`` after the work started are ERROR (exit 3, one line naming the experiment and the
  field), never PASS and never a traceback — for ``--module`` files as for built-in experiments;
* a check that is not contradicted but has power below 0.8 (or none stated) is INCONCLUSIVE: exit 0,
  or 4 with ``--strict``; the index, summary.json and the summary line show it as its own state.
"""

from __future__ import annotations

import json
import math
import textwrap

import numpy as np
import pytest

from transformer_limits.cli import main
from transformer_limits.errors import EXIT_BAD_INPUT, EXIT_ERROR, EXIT_INCONCLUSIVE, EXIT_OK, InputError
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
from transformer_limits.verify.running import run_experiment
from transformer_limits.verify.verdicts import Check

GOOD_STATS = {"alpha": 0.01, "sides": "two-sided"}


def _experiment(run, name="probe", checks=("c",)):
    return Experiment(name=name, title="probe", paper="X", claim="probe", derivations=(), checks=checks, run=run)


def _result_with(**fields):
    check = dict(name="c", claim="x", expected=0.0, measured=0.0, ci=(-1.0, 1.0), passed=True,
                 statistics=dict(GOOD_STATS), note="", power=0.9)
    check.update(fields)
    return lambda config: ExperimentResult("probe", config.profile, checks=[Check(**check)])


@pytest.mark.parametrize("fields,named", [
    (dict(measured=math.nan), "measured"),
    (dict(measured=math.inf), "measured"),
    (dict(ci=(math.nan, 1.0)), "ci"),
    (dict(ci=(1.0, -1.0)), "ci low"),
    (dict(passed="False"), "passed must be a bool"),
    (dict(statistics={"sides": "two-sided"}), "lack alpha"),
    (dict(statistics={"alpha": 0.7}), "statistics.alpha"),
    (dict(statistics={**GOOD_STATS, "p_value": math.nan}), "statistics.p_value is NaN"),
    (dict(statistics={**GOOD_STATS, "nested": {"se": [1.0, math.nan]}}), "statistics.nested.se[1]"),
    (dict(power=1.5), "power"),
    (dict(expected=math.nan), "expected"),
])
def test_malformed_checks_are_errors_naming_the_field(fields, named):
    result = run_experiment(_experiment(_result_with(**fields)), ExperimentConfig())
    assert result.status == "error" and not result.passed
    assert "invalid result of probe" in result.error and named in result.error
    assert "\n" not in result.error


def test_numpy_scalars_and_one_sided_infinities_are_fine():
    run = _result_with(passed=np.bool_(True), measured=np.float64(0.5), ci=(np.float64(0.1), math.inf),
                       statistics={**GOOD_STATS, "upper": math.inf})
    result = run_experiment(_experiment(run), ExperimentConfig())
    assert result.status == "pass", result.error


def test_checks_that_are_not_checks_and_fields_that_are_not_json():
    def not_checks(config):
        return ExperimentResult("probe", config.profile, checks=[{"name": "c", "passed": True}])

    def bad_table(config):
        r = _result_with()(config)
        r.tables["t"] = [{"x": object()}]
        return r

    assert "checks[0] is a dict, not a Check" in run_experiment(_experiment(not_checks), ExperimentConfig()).error
    err = run_experiment(_experiment(bad_table), ExperimentConfig()).error
    assert "tables cannot be written as JSON" in err


@pytest.mark.parametrize("raise_", [SystemExit(0), SystemExit(1), InputError("grid too large")])
def test_exits_and_input_errors_inside_run_are_errors(raise_):
    def run(config):
        raise raise_

    result = run_experiment(_experiment(run), ExperimentConfig())
    assert result.status == "error"
    assert ("sys.exit" in result.error) if isinstance(raise_, SystemExit) else ("grid too large" in result.error)


def test_run_returning_something_else_is_an_error():
    result = run_experiment(_experiment(lambda config: {"checks": []}), ExperimentConfig())
    assert result.status == "error" and "not ExperimentResult" in result.error


def test_experiment_names_cannot_leave_the_report_folder():
    for bad in ("../../x", "/tmp/x", "", ".", "..", "a/b", ".hidden", "a b"):
        with pytest.raises(ValueError, match="experiment name"):
            _experiment(_result_with(), name=bad)
    assert _experiment(_result_with(), name="ok-name_1.2").name == "ok-name_1.2"


# ------------------------------------------------------------------------------------------------
# the CLI: --module files
# ------------------------------------------------------------------------------------------------

_MODULE = """
import math
from transformer_limits.verify.experiment import Experiment, ExperimentResult
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.verdicts import Check

def run(config):
    {body}
    return ExperimentResult({name!r}, config.profile, checks=[check])

register_experiment(Experiment(name={name!r}, title="t", paper="X", claim="c", derivations=(),
                               checks=("c",), run=run))
"""


def _module(tmp_path, name, body):
    path = tmp_path / f"{name.replace('-', '_')}.py"
    path.write_text(_MODULE.format(name=name, body=textwrap.dedent(body).strip()))
    return str(path)


def test_nan_statistics_from_a_module_exit_3_with_one_line(tmp_path, registry, capsys):
    path = _module(tmp_path, "nan-probe", """check = Check("c", "x", 0.0, math.nan, (math.nan, math.nan), True,
                                     {"alpha": 0.01, "se": math.nan})""")
    out = tmp_path / "out"
    assert main(["verify", "nan-probe", "--module", path, "--out", str(out), "--format", "json"]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nan-probe" in err[0] and "measured" in err[0]
    assert json.loads((out / "results.json").read_text())["status"] == "error"
    assert main(["report", "--only", "nan-probe", "--module", path, "--out", str(tmp_path / "r")]) == EXIT_ERROR


def test_sys_exit_in_run_exits_3(tmp_path, registry, capsys):
    path = _module(tmp_path, "exit-probe", "import sys; sys.exit(0)\n    check = None")
    assert main(["verify", "exit-probe", "--module", path]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sys.exit(0)" in err[0]


def test_inconclusive_exits_0_or_4_with_strict(tmp_path, registry, capsys):
    path = _module(tmp_path, "weak-probe", """check = Check("c", "x", 0.0, 0.1, (-1.0, 1.0), True,
                                     {"alpha": 0.01}, "", 0.3, "q = 1")""")
    assert main(["verify", "weak-probe", "--module", path]) == EXIT_OK
    text = capsys.readouterr().out
    assert "INCONCLUSIVE" in text and "0.30" in text and "RESULT: INCONCLUSIVE (0/1 checks passed, 1 inconclusive)" in text
    assert main(["verify", "weak-probe", "--module", path, "--strict"]) == EXIT_INCONCLUSIVE
    assert "inconclusive" in capsys.readouterr().err
    out = tmp_path / "report"
    assert main(["report", "--only", "weak-probe", "--module", path, "--out", str(out), "--strict"]) \
        == EXIT_INCONCLUSIVE
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "inconclusive" and summary["n_inconclusive"] == 1 and not summary["passed"]
    assert summary["experiments"][0]["inconclusive_checks"] == ["c"]
    assert "INCONCLUSIVE" in (out / "index.md").read_text()
    assert 'class="verdict inconclusive"' in (out / "index.html").read_text()


def test_a_check_without_power_is_inconclusive(tmp_path, registry, capsys):
    path = _module(tmp_path, "nopower-probe", """check = Check("c", "x", 0.0, 0.1, (-1.0, 1.0), True,
                                        {"alpha": 0.01})""")
    assert main(["verify", "nopower-probe", "--module", path, "--strict"]) == EXIT_INCONCLUSIVE
    assert "power not stated" in capsys.readouterr().out


def test_out_and_store_checked_before_work(tmp_path, registry, capsys):
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "nowhere" / "deeper")
    assert main(["verify", "spectral-released", "--out", str(link)]) == EXIT_BAD_INPUT
    assert "dangling" in capsys.readouterr().err
    same = tmp_path / "same"
    assert main(["verify", "spectral-released", "--out", str(same), "--store", str(same)]) == EXIT_BAD_INPUT
    assert "same path" in capsys.readouterr().err
    assert not same.exists()


@pytest.mark.parametrize("bad", ["../../escaped", "/tmp/abs", ".", ".."])
def test_a_module_naming_an_experiment_outside_out_is_refused_before_any_work(tmp_path, registry, capsys, bad):
    path = tmp_path / "bad_name.py"
    path.write_text(_MODULE.format(name=bad, body="check = None"))
    out = tmp_path / "deep" / "out"
    assert main(["report", "--module", str(path), "--out", str(out)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "experiment name" in err[0]
    assert not (tmp_path / "deep").exists() and not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("fields,named", [
    (dict(name=""), "name must be a non-empty string"),
    (dict(ci=(0.0, 1.0, 2.0)), "ci must be a (low, high) pair"),
    (dict(ci=("a", 1.0)), "ci must be a (low, high) pair"),
    (dict(ci=(2.0, 1.0)), "ci low 2.0 exceeds high 1.0"),
    (dict(statistics={"alpha": 0.5}), "statistics.alpha"),
    (dict(statistics={"alpha": -0.01}), "statistics.alpha"),
    (dict(power=-0.01), "power"),
    (dict(note=None), "must be strings"),
    (dict(claim=3), "must be strings"),
    (dict(alternative=None), "must be strings"),
    (dict(statistics={**GOOD_STATS, "arr": np.array([1.0, np.nan])}), "statistics.arr is NaN"),
    (dict(statistics={**GOOD_STATS, "deep": [[[[[[[[[[[[[[[[[[[math.nan]]]]]]]]]]]]]]]]]]]}), "statistics.deep"),
])
def test_each_rule_of_a_check(fields, named):
    result = run_experiment(_experiment(_result_with(**fields)), ExperimentConfig())
    assert result.status == "error" and named in result.error, result.error


@pytest.mark.parametrize("fields", [dict(ci=(1.0, 1.0)), dict(statistics={"alpha": 0.0}), dict(power=0.0),
                                    dict(power=1.0), dict(statistics={**GOOD_STATS, "n": np.arange(3)}),
                                    dict(statistics={**GOOD_STATS, "x": np.array([1.0, 2.0])})])
def test_edge_values_that_are_valid(fields):
    assert run_experiment(_experiment(_result_with(**fields)), ExperimentConfig()).error is None


def test_every_field_error_is_reported_and_cycles_do_not_crash():
    def run(config):
        r = _result_with()(config)
        r.fits = []  # not a dict
        r.tables["t"] = [{"x": object()}]
        loop: dict = {"alpha": 0.01}
        loop["self"] = loop
        r.checks[0].statistics = loop  # a cycle: walked to a bounded depth, then refused as JSON
        r.notes = ["ok", 3]
        return r

    err = run_experiment(_experiment(run), ExperimentConfig()).error
    assert "fits must be a dict" in err and "tables cannot be written as JSON (TypeError" in err
    assert "notes must be a list of strings" in err


def test_notes_must_be_a_list():
    def run(config):
        r = _result_with()(config)
        r.notes = "a note"
        return r

    assert "notes must be a list of strings" in run_experiment(_experiment(run), ExperimentConfig()).error


def test_statistics_with_a_cycle_or_an_object_are_errors_not_crashes(tmp_path):
    loop: dict = {"alpha": 0.01}
    loop["self"] = loop
    for stats_ in (loop, {"alpha": 0.01, "obj": object()}):
        result = run_experiment(_experiment(_result_with(statistics=stats_)), ExperimentConfig())
        assert result.status == "error" and "statistics cannot be written as JSON" in result.error
