"""The public face of ``transformer_limits.testing`` end to end (issue 24): the runnable example in
``examples/property_tests`` passes under pytest (its deliberately wrong derivative FAILS
``assert_taylor_rate`` inside ``pytest.raises``), and ``pytest --tl-report DIR`` on it writes the
report (index.html, index.md, summary.json, one folder per test with the verdicts and figures).

Each run is a subprocess on a copy of the example in a temporary folder (its own rootdir, no
project conftest), with plugin autoloading off and the plugin named by ``-p``: the result does not
depend on which pytest plugins this environment has, or on whether the package is installed.
The example's statistics use fixed seeds and derandomized hypothesis: the same verdicts every run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "property_tests"
PLUGIN = "transformer_limits.testing.pytest_plugin"
WRONG = "test_forgetting_the_keys_is_caught"


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Path:
    """A copy of examples/property_tests (no caches) in a fresh folder."""
    root = tmp_path_factory.mktemp("example")
    shutil.copytree(EXAMPLE, root / "property_tests", ignore=shutil.ignore_patterns("__pycache__", ".*"))
    return root


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-q",
                           "property_tests", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_example_passes_and_its_wrong_derivative_fails(example):
    res = _pytest(example, "-rA")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "5 passed" in res.stdout
    assert f"PASSED property_tests/test_sigmoid_attention.py::{WRONG}" in res.stdout
    assert "tl-report" not in res.stdout  # no report without the option
    assert not any(p.name in ("index.html", "summary.json") for p in example.rglob("*"))


def test_tl_report_writes_the_report(example):
    res = _pytest(example, "--tl-report", "out", "--tl-profile", "full")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]  # the report changes no outcome
    assert "tl-report: 5 test(s) with assertions (4 passed, 0 inconclusive, 1 failed)" in res.stdout
    out = example / "out"
    assert (out / "index.html").is_file() and (out / "index.md").is_file()
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert (summary["profile"], summary["n_experiments"], summary["n_failed"], summary["status"]) == ("full", 5, 1, "fail")
    by_test = {e["name"].rsplit("-", 1)[0].split("test_sigmoid_attention.py-")[1]: e for e in summary["experiments"]}
    assert by_test[WRONG]["status"] == "fail" and by_test[WRONG]["failed_checks"] == ["assert_taylor_rate"]
    assert by_test["test_the_derivative_is_right_everywhere"]["checks_total"] == 15  # one per hypothesis example
    assert all(e["status"] == "pass" for name, e in by_test.items() if name != WRONG)
    html = (out / "index.html").read_text(encoding="utf-8")
    for entry in summary["experiments"]:
        assert entry["html"] in html
        results = json.loads((out / entry["results"]).read_text(encoding="utf-8"))
        assert results["checks"] and results["provenance"]["pytest"]["outcome"] == "passed"
        assert (out / entry["html"]).is_file()
    wrong = json.loads((out / by_test[WRONG]["results"]).read_text(encoding="utf-8"))
    check = wrong["checks"][0]
    assert check["state"] == "fail" and check["power"] == 1.0 and check["ci"][1] is None  # one-sided bound
    assert wrong["fits"]["assert_taylor_rate"]["exponent"] == pytest.approx(1.0, abs=0.05)  # order 1, not 2
    assert (out / by_test[WRONG]["name"] / "assert_taylor_rate.png").is_file()
    assert "local order" in "".join(wrong["notes"])
    rate = json.loads((out / by_test["test_depth_rate"]["results"]).read_text(encoding="utf-8"))
    assert rate["checks"][0]["statistics"]["verdict"] == "rate_at_least" and rate["fits"]["assert_rate"]["param"] == "L"


def test_an_unusable_report_folder_is_a_usage_error(example, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    res = _pytest(example, "--tl-report", str(blocker / "out"))
    assert res.returncode == 4  # pytest's usage error, before any test ran
    assert "--tl-report" in res.stderr and "not a directory" in res.stderr


def test_the_plugin_is_registered_under_pytest11():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"]["pytest11"] == {"transformer_limits": PLUGIN}
    assert any(d.startswith("hypothesis") for d in project["dependencies"])  # the strategies need no extra


def test_importing_the_testing_api_and_the_plugin_is_light():
    code = ("import json, sys; import transformer_limits.testing, transformer_limits.testing.pytest_plugin; "
            "print(json.dumps([m for m in ('numpy', 'sympy', 'scipy', 'numba', 'hypothesis', 'matplotlib') "
            "if m in sys.modules]))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == []  # the plugin is loaded by every pytest run: it imports nothing heavy
