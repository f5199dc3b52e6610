"""Experiment reports: files, results.json schema, self-contained HTML, staging, index, run_experiment."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from transformer_limits.verify import report as report_mod
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult, Figure
from transformer_limits.verify.running import run_experiment
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.rate.plots import RateSeries, rate_figure
from transformer_limits.verify.report import config_hash, write_experiment_report, write_index
from transformer_limits.verify.verdicts import Check, rate_at_least

CHECK_KEYS = {"name", "claim", "expected", "measured", "ci", "passed", "statistics", "note", "power", "alternative",
              "state"}
TOP_KEYS = {"schema_version", "experiment", "title", "paper", "claim", "derivations", "profile", "passed",
            "checks", "fits", "tables", "figures", "notes", "data", "provenance"}


def _rate_data(seed=0):
    rng = np.random.default_rng(seed)
    L = 2.0 ** np.arange(2, 8)
    errors = 3 * L[:, None] ** -1.0 * rng.lognormal(0, 0.1, size=(L.size, 8))
    return L, errors


def _result(name="demo", passed=True, figures=("rates",)) -> ExperimentResult:
    L, errors = _rate_data()
    fit = fit_power_law(L, errors, param="L", n_boot=200)
    check = rate_at_least(fit, -1.0 if passed else -2.0, alternative=-0.5 if passed else -1.5)
    figs = [rate_figure(f, f"caption of {f}", [RateSeries("err", L, errors, fit, claimed_exponent=-1.0)],
                        xlabel="L") for f in figures]
    return ExperimentResult(
        name, "quick", checks=[check], fits={"L": fit.to_dict()},
        tables={"levels": [{"L": float(p), "error": float(e)} for p, e in zip(L, errors.mean(axis=1))]},
        figures=figs, notes=["one line", "traceback:\n  line 1\n  line 2"],
        provenance={"seeds": {"base": 0}, "timings": {"run_s": 1.5}})


def _experiment(name="demo", run=None, checks=("rate_at_least",), profiles=("quick", "full")) -> Experiment:
    return Experiment(name=name, title=f"Title of {name}", paper="A", claim="err ~ L^-1",
                      derivations=("attention-jacobian",), checks=checks,
                      run=run or (lambda config: _result(name)), profiles=profiles)


def test_report_files_exist_and_results_json_schema(tmp_path):
    out = tmp_path / "demo"
    config = ExperimentConfig(seed=3)
    payload = write_experiment_report(_result(), out, _experiment(), config)
    assert sorted(p.name for p in out.iterdir()) == ["derivations", "rates.png", "report.html", "report.md",
                                                     "results.json"]
    assert (out / "derivations" / "attention-jacobian.md").read_text().startswith("# `attention-jacobian`")
    data = json.loads((out / "results.json").read_text())
    assert data == payload
    assert TOP_KEYS <= set(data)
    assert data["experiment"] == "demo" and data["profile"] == "quick" and data["passed"] is True
    for check in data["checks"]:
        assert CHECK_KEYS <= set(check)
        assert check["statistics"]["alpha"] == 0.01
    assert data["figures"] == [{"name": "rates", "file": "rates.png", "caption": "caption of rates"}]
    prov = data["provenance"]
    for pkg in ("python", "numpy", "scipy", "sympy", "numba", "transformer_limits"):
        assert prov["versions"][pkg]
    assert prov["seeds"] == {"base": 0} and prov["config"]["seed"] == 3
    assert re.fullmatch(r"[0-9a-f]{64}", prov["config_hash"])
    assert prov["git_commit"] is None or re.fullmatch(r"[0-9a-f]{40,64}", prov["git_commit"])
    assert prov["timings"]["run_s"] == 1.5
    assert (out / "rates.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_markdown_lists_claim_derivations_checks_figures_notes(tmp_path):
    write_experiment_report(_result(passed=False), tmp_path, _experiment(), ExperimentConfig())
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# Title of demo (`demo`)")
    assert "**FAIL" in md and "| rate_at_least | FAIL |" in md
    assert "[attention-jacobian](derivations/attention-jacobian.md)" in md
    assert "![caption of rates](rates.png)" in md
    assert "## Table: levels" in md and "## Fits" in md and "```\ntraceback:" in md


def test_pipes_in_table_headers_and_cells_do_not_break_markdown_tables(tmp_path):
    result = _result()
    result.tables = {"norms": [{"|x|/R": 1.0, "note": "a|b"}]}
    result.data = {"worst_inputs": [{"X0": [[0.5, 0.5]]}]}
    write_experiment_report(result, tmp_path, _experiment(), ExperimentConfig())
    md = (tmp_path / "report.md").read_text()
    assert "| \\|x\\|/R | note |" in md and "| 1 | a\\|b |" in md
    assert json.loads((tmp_path / "results.json").read_text())["data"] == {"worst_inputs": [{"X0": [[0.5, 0.5]]}]}


def test_html_is_self_contained(tmp_path):
    write_experiment_report(_result(figures=("a", "b")), tmp_path, _experiment(), ExperimentConfig())
    page = (tmp_path / "report.html").read_text()
    assert "http://" not in page and "https://" not in page
    assert "<link" not in page and "<script" not in page and "@import" not in page
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == 2 and all(s.startswith("data:image/png;base64,") for s in sources)
    assert 'class="pass"' in page and "<style>" in page


def test_failed_check_row_is_coloured(tmp_path):
    write_experiment_report(_result(passed=False), tmp_path, _experiment(), ExperimentConfig())
    page = (tmp_path / "report.html").read_text()
    assert '<tr class="fail">' in page and 'class="verdict fail"' in page


def test_crash_while_writing_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "rep"

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report_mod, "_html", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        write_experiment_report(_result(), out, _experiment(), ExperimentConfig())
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no staging folder left behind


def test_crash_keeps_an_earlier_report_intact(tmp_path, monkeypatch):
    write_experiment_report(_result(), tmp_path, _experiment(), ExperimentConfig())
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    monkeypatch.setattr(report_mod, "_markdown", lambda payload: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        write_experiment_report(_result(passed=False), tmp_path, _experiment(), ExperimentConfig())
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_stale_figures_are_removed(tmp_path):
    write_experiment_report(_result(figures=("old",)), tmp_path, _experiment(), ExperimentConfig())
    write_experiment_report(_result(figures=("new",)), tmp_path, _experiment(), ExperimentConfig())
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["new.png"]


def test_duplicate_figure_names_are_rejected(tmp_path):
    fig = Figure("x", b"\x89PNG", "c")
    result = _result(figures=())
    result.figures = [fig, fig]
    with pytest.raises(ValueError, match="used twice"):
        write_experiment_report(result, tmp_path / "r", _experiment(), ExperimentConfig())
    assert not (tmp_path / "r").exists()


def test_nan_and_inf_become_null(tmp_path):
    result = _result(figures=())
    result.checks.append(Check("c", "claim", None, math.nan, (-math.inf, 2.0), True, {"alpha": 0.01}))
    result.fits["weird"] = {"value": math.inf}
    write_experiment_report(result, tmp_path, _experiment(), ExperimentConfig())
    data = json.loads((tmp_path / "results.json").read_text())  # strict JSON: no NaN/Infinity tokens
    assert data["checks"][-1]["measured"] is None and data["checks"][-1]["ci"] == [None, 2.0]
    assert data["fits"]["weird"]["value"] is None


def test_config_hash_depends_on_what_determines_results():
    a = config_hash("x", ExperimentConfig(seed=1))
    assert a == config_hash("x", ExperimentConfig(seed=1, workers=4, progress=True))
    assert a != config_hash("x", ExperimentConfig(seed=2))
    assert a != config_hash("y", ExperimentConfig(seed=1))
    assert a != config_hash("x", ExperimentConfig(profile="full", seed=1))


def test_write_index(tmp_path):
    runs = []
    for name, ok in (("alpha", True), ("beta", False)):
        exp, res = _experiment(name), _result(name, passed=ok, figures=())
        write_experiment_report(res, tmp_path / name, exp, ExperimentConfig())
        runs.append((exp, res))
    summary = write_index(runs, tmp_path, "quick")
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data == summary
    assert data["passed"] is False and data["n_experiments"] == 2 and data["n_passed"] == 1
    assert data["status"] == "fail" and data["n_failed"] == 1 and data["n_inconclusive"] == 0
    assert data["total_time_s"] == pytest.approx(3.0)
    assert [e["name"] for e in data["experiments"]] == ["alpha", "beta"]
    assert data["experiments"][1]["failed_checks"] == ["rate_at_least"]
    md = (tmp_path / "index.md").read_text()
    assert "[alpha](alpha/report.md)" in md and "FAIL" in md
    page = (tmp_path / "index.html").read_text()
    assert 'href="beta/report.html"' in page and "http" not in page
    for name in ("alpha", "beta"):
        assert (tmp_path / name / "results.json").is_file()


def test_run_experiment_records_an_exception_as_a_crash_not_a_failed_check():
    def crash(config):
        raise RuntimeError("model diverged")

    result = run_experiment(_experiment(run=crash), ExperimentConfig())
    assert not result.passed and result.status == "error"
    assert result.checks == [] and result.error == "RuntimeError: model diverged"
    assert any("Traceback" in n and "model diverged" in n for n in result.notes)
    assert result.provenance["timings"]["run_s"] >= 0


def test_run_experiment_flags_missing_declared_checks():
    exp = _experiment(checks=("rate_at_least", "exponent_L"))
    result = run_experiment(exp, ExperimentConfig())
    assert [c.name for c in result.checks] == ["rate_at_least"]
    assert result.status == "error" and "exponent_L" in result.error and not result.passed


def test_run_experiment_lets_environment_errors_stop_the_run_and_records_input_errors():
    from transformer_limits.errors import EnvironmentFailure, StoreError

    for exc in (EnvironmentFailure("disk full"), MemoryError()):
        def run(config, exc=exc):
            raise exc
        with pytest.raises(type(exc)):
            run_experiment(_experiment(run=run), ExperimentConfig())

    # an InputError once the run has started is an ERROR (exit 3): exit 2 means "before any work"
    def bad_store(config):
        raise StoreError("store 'x' is corrupted")
    result = run_experiment(_experiment(run=bad_store), ExperimentConfig())
    assert result.status == "error" and "store 'x' is corrupted" in result.error


def test_rate_figure_validates_shapes():
    with pytest.raises(ValueError, match="errors must have shape"):
        RateSeries("x", [1, 2, 3], np.ones((2, 4)))
    with pytest.raises(ValueError, match="at least one"):
        rate_figure("n", "c", [], xlabel="L")
