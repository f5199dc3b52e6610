"""Experiments from outside the package: ``--module FILE.py`` and the entry-point group
``transformer_limits.experiments``; the worked example in examples/euler_maruyama."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import pickle
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest

from transformer_limits.cli import main
from transformer_limits.verify import registry as em
from transformer_limits.verify.running import jsonable_settings

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "euler_maruyama"
EM_FILE = EXAMPLE / "em_gbm_example" / "experiment.py"
GROUP = "transformer_limits.experiments"

# a plugin or file experiment with one trivially passing check (no simulation: these tests are
# about loading, not about a claim)
_TRIVIAL = """
from transformer_limits.verify.experiment import Experiment, ExperimentResult
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.verdicts import Check

def run(config):
    check = Check("trivial", "1 = 1", 1.0, 1.0, (1.0, 1.0), True, {{"alpha": 0.01, "sides": "two-sided"}}, "",
                  1.0, "1 = 2")
    return ExperimentResult({name!r}, config.profile, checks=[check])

EXPERIMENT = Experiment(name={name!r}, title="trivial", paper="X", claim="1 = 1", derivations=(),
                        checks=("trivial",), run=run)
"""



def _em_module():
    exps = em.load_experiment_file(EM_FILE)
    return sys.modules[exps[0].run.__module__]


# ------------------------------------------------------------------------------------------------
# --module FILE.py
# ------------------------------------------------------------------------------------------------


def test_module_list_shows_the_file_experiments(registry, capsys):
    assert main(["verify", "--module", str(EM_FILE), "--list"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("em-gbm-strong-order "))
    assert f"(from {EM_FILE})" in line and "[quick, full]" in line
    assert "lyapunov" in out  # the built-ins are still there
    assert main(["verify", "--list", "--format", "json", "--module", str(EM_FILE)]) == 0
    data = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert data["em-gbm-strong-order"]["source"]["kind"] == "module"
    assert data["em-gbm-order-1"]["profiles"] == [] and data["lyapunov"]["source"]["kind"] == "built-in"


def test_module_experiment_runs_and_writes_its_report(registry, tmp_path, capsys):
    out = tmp_path / "em"
    assert main(["verify", "em-gbm-strong-order", "--module", str(EM_FILE), "--out", str(out),
                 "--workers", "1", "--no-progress"]) == 0
    assert "RESULT: PASS (1/1 checks passed)" in capsys.readouterr().out
    assert {"results.json", "report.md", "report.html"} <= {p.name for p in out.iterdir()}
    data = json.loads((out / "results.json").read_text())
    assert data["status"] == "pass" and data["checks"][0]["name"] == "strong_order"
    # the report records which file ran, by content hash
    source = data["provenance"]["source"]
    assert source["kind"] == "module" and source["path"] == str(EM_FILE)
    assert source["sha256"] == hashlib.sha256(EM_FILE.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", ["em-gbm-order-1", "em-gbm-buggy-scheme"])
def test_deliberately_wrong_variants_fail_with_exit_1(registry, capsys, name):
    assert main(["verify", name, "--module", str(EM_FILE), "--workers", "1", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "strong_order  FAIL" in out and "RESULT: FAIL (0/1" in out


def test_report_includes_the_file_experiment_in_its_profile(registry, monkeypatch, tmp_path, capsys):
    # keep the (minutes-long) built-in experiments out of this report; their selection is tested elsewhere
    for name in [n for n, s in em._SOURCES.items() if s.get("kind") == "built-in" and n in em._REGISTRY]:
        monkeypatch.delitem(em._REGISTRY, name)
    out = tmp_path / "rep"
    assert main(["report", "--module", str(EM_FILE), "--profile", "quick", "--out", str(out),
                 "--workers", "1", "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    # the wrong variants declare no profile: only the true claim runs
    assert [e["name"] for e in summary["experiments"]] == ["em-gbm-strong-order"]
    assert summary["status"] == "pass"
    assert "[em-gbm-strong-order](em-gbm-strong-order/report.md)" in (out / "index.md").read_text()


def test_file_functions_run_in_a_forked_pool_with_the_same_results(registry, capsys):
    # the CLI default uses every CPU; a fork pool finds the file module by its sys.modules name
    measured = []
    for workers in ("1", "2"):
        assert main(["verify", "em-gbm-strong-order", "--module", str(EM_FILE), "--workers", workers,
                     "--format", "json", "--no-progress"]) == 0
        measured.append(json.loads(capsys.readouterr().out)["checks"][0]["measured"])
    assert measured[0] == measured[1]


def test_file_functions_unpickle_in_a_fresh_interpreter(registry):
    """What spawn/forkserver pools and dask workers do: unpickle the sweep function in a process
    that never loaded the file.  A plain pickle of the function names a module that does not exist
    there; run_points ships the file's source instead."""
    mod = _em_module()
    s = dict(mod.SETTINGS["quick"], paths=4)
    point = {"settings": jsonable_settings(s), "seed": 3, "scheme": "euler-maruyama"}
    portable = em.worker_safe(mod.evaluate_point)
    assert portable is not mod.evaluate_point and portable(point) == mod.evaluate_point(point)
    code = ("import json, pickle, sys; fn, point = pickle.loads(sys.stdin.buffer.read()); "
            "print(json.dumps(fn(point)))")
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((portable, point)),
                          capture_output=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert json.loads(done.stdout) == mod.evaluate_point(point)
    # the raw function is pickled by reference to the per-file module name: not importable there
    plain = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((mod.evaluate_point, point)),
                           capture_output=True, timeout=120, cwd=ROOT)
    assert plain.returncode != 0 and b"ModuleNotFoundError" in plain.stderr


def test_a_file_function_survives_a_second_pickle_hop(registry):
    """A dask scheduler unpickles a task and pickles it again for a worker: the function that comes
    out of the first hop must still carry the file's source into a third interpreter."""
    mod = _em_module()
    s = dict(mod.SETTINGS["quick"], paths=4)
    point = {"settings": jsonable_settings(s), "seed": 2, "scheme": "euler-maruyama"}
    hop = ("import pickle, sys; fn = pickle.loads(sys.stdin.buffer.read()); "
           "sys.stdout.buffer.write(pickle.dumps(fn))")
    first = subprocess.run([sys.executable, "-c", hop], input=pickle.dumps(em.worker_safe(mod.evaluate_point)),
                           capture_output=True, timeout=120, cwd=ROOT)
    assert first.returncode == 0, first.stderr.decode()[-2000:]
    # the bytes of the first hop go on unopened (this process has the module: it must not re-pickle)
    code = ("import json, pickle, sys; blob, point = pickle.loads(sys.stdin.buffer.read()); "
            "print(json.dumps(pickle.loads(blob)(point)))")
    second = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((first.stdout, point)),
                            capture_output=True, timeout=120, cwd=ROOT)
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    assert json.loads(second.stdout) == mod.evaluate_point(point)


def test_loading_the_same_file_twice_is_a_no_op(registry):
    first = em.load_experiment_file(EM_FILE)
    again = em.load_experiment_file(str(EM_FILE))
    assert [e.name for e in first] == ["em-gbm-buggy-scheme", "em-gbm-order-1", "em-gbm-strong-order"]
    assert all(a is b for a, b in zip(first, again))


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing.py", "does not exist"),
    (lambda d: _write(d / "notes.txt", "x = 1\n"), "is not a .py file"),
    (lambda d: (d / "folder.py").mkdir() or d / "folder.py", "is not a file"),
    (lambda d: _write(d / "broken.py", "import no_such_module_xyz\n"), "ModuleNotFoundError"),
    (lambda d: _write(d / "syntax.py", "def f(:\n"), "SyntaxError"),
    (lambda d: _write(d / "empty.py", "X = 1\n"), "registers no experiment"),
    (lambda d: _write(d / "clash.py", _TRIVIAL.format(name="lyapunov") + "register_experiment(EXPERIMENT)\n"),
     "registered twice"),
])
def test_bad_module_is_bad_input_one_line(registry, tmp_path, capsys, make, message):
    path = make(tmp_path)
    before = dict(em._REGISTRY)
    for argv in (["verify", "--list", "--module", str(path)],
                 ["report", "--module", str(path), "--out", str(tmp_path / "r")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("transformer-limits: error: --module") and message in err and "\n" not in err
    assert em._REGISTRY == before and em._SOURCES["lyapunov"]["kind"] == "built-in"
    assert not (tmp_path / "r").exists()


def test_a_file_that_fails_halfway_registers_nothing(registry, tmp_path, capsys):
    path = _write(tmp_path / "half.py", _TRIVIAL.format(name="half-a") + "register_experiment(EXPERIMENT)\n"
                  "raise RuntimeError('boom')\n")
    assert main(["verify", "--list", "--module", str(path)]) == 2
    assert "RuntimeError: boom" in capsys.readouterr().err
    assert "half-a" not in em._REGISTRY and not any(n.startswith(em._FILE_MODULE_PREFIX + "half_")
                                                    for n in sys.modules)


# ------------------------------------------------------------------------------------------------
# entry points
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def plugins(registry, monkeypatch, tmp_path):
    """``install(name=value, ...)``: fake the entry points of GROUP (importlib.metadata.entry_points
    monkeypatched) and re-run discovery; plugin modules are written into tmp_path (on sys.path)."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def module(name: str, text: str) -> None:
        _write(tmp_path / f"{name}.py", text)

    def install(**values: str) -> None:
        eps = [importlib.metadata.EntryPoint(n, v, GROUP) for n, v in values.items()]
        real = importlib.metadata.entry_points
        monkeypatch.setattr(importlib.metadata, "entry_points",
                            lambda **kw: eps if kw.get("group") == GROUP else real(**kw))
        monkeypatch.setattr(em, "_DISCOVERED", False)

    return module, install


def test_plugin_module_and_object_forms_are_loaded(plugins, capsys):
    module, install = plugins
    module("tlplug_good", _TRIVIAL.format(name="plug-good") + "register_experiment(EXPERIMENT)\n")
    module("tlplug_object", _TRIVIAL.format(name="plug-object"))  # registered by the entry point
    install(good="tlplug_good", obj="tlplug_object:EXPERIMENT")
    assert main(["verify", "--list"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = {ln.split()[0]: ln for ln in captured.out.splitlines()}
    assert lines["plug-good"].endswith("(plugin good)") and lines["plug-object"].endswith("(plugin obj)")
    assert "lyapunov" in lines
    assert main(["verify", "plug-object", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] and data["provenance"]["source"] == {"kind": "plugin", "entry_point": "obj",
                                                                "value": "tlplug_object:EXPERIMENT"}


@pytest.mark.parametrize("name, text, value, reason", [
    ("tlplug_import", "import no_such_module_xyz\n", "tlplug_import", "ModuleNotFoundError"),
    ("tlplug_dup", _TRIVIAL.format(name="lyapunov") + "register_experiment(EXPERIMENT)\n", "tlplug_dup",
     "registered twice"),
    ("tlplug_notexp", "EXPERIMENT = 42\n", "tlplug_notexp:EXPERIMENT", "int, not an Experiment"),
    ("tlplug_nothing", "X = 1\n", "tlplug_nothing", "registered no experiment"),
    ("tlplug_exit", "raise SystemExit(3)\n", "tlplug_exit", "SystemExit"),
])
def test_a_broken_plugin_warns_in_one_line_and_spares_the_rest(plugins, capsys, name, text, value, reason):
    module, install = plugins
    module(name, text)
    module("tlplug_good", _TRIVIAL.format(name="plug-good") + "register_experiment(EXPERIMENT)\n")
    install(broken=value, good="tlplug_good")
    assert main(["verify", "--list"]) == 0
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and err.startswith("transformer-limits: warning: plugin 'broken'")
    assert value in err and reason in err
    names = {ln.split()[0] for ln in captured.out.splitlines()}
    assert {"plug-good", "lyapunov", "lions-taylor"} <= names
    assert em._SOURCES["lyapunov"]["kind"] == "built-in"  # a duplicate never replaces a built-in
    assert main(["verify", "plug-good", "--no-progress"]) == 0  # the other plugin works
    # asking for something only the broken plugin could have provided: exit 2, naming the plugin
    capsys.readouterr()
    assert main(["verify", "plug-broken-thing"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown experiment 'plug-broken-thing'" in err and "plugin 'broken'" in err and "\n" not in err


def test_a_plugin_failing_halfway_is_rolled_back(plugins, capsys):
    module, install = plugins
    module("tlplug_half", _TRIVIAL.format(name="plug-half") + "register_experiment(EXPERIMENT)\n"
           + _TRIVIAL.format(name="lyapunov").replace("EXPERIMENT", "SECOND") + "register_experiment(SECOND)\n")
    install(half="tlplug_half")
    assert main(["verify", "--list"]) == 0
    assert "plugin 'half'" in capsys.readouterr().err
    assert "plug-half" not in em._REGISTRY and em.plugin_errors().keys() == {"half"}


def test_unreadable_entry_points_do_not_break_the_built_ins(registry, monkeypatch, capsys):
    def broken(**kw):
        raise RuntimeError("corrupt metadata")

    monkeypatch.setattr(importlib.metadata, "entry_points", broken)
    monkeypatch.setattr(em, "_DISCOVERED", False)
    assert main(["verify", "--list"]) == 0
    captured = capsys.readouterr()
    assert "corrupt metadata" in captured.err and "\n" not in captured.err.strip()
    assert "lyapunov" in captured.out


def test_the_example_package_entry_point_is_discovered_from_real_metadata(registry, monkeypatch, tmp_path, capsys):
    """The example's pyproject.toml entry point, as pip would install it (a dist-info folder on
    sys.path; importlib.metadata is not faked), shows up in --list and runs."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    eps = project["entry-points"][GROUP]
    dist = tmp_path / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (dist / "entry_points.txt").write_text(f"[{GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setattr(em, "_DISCOVERED", False)
    assert main(["verify", "--list"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    (ep_name,) = eps
    line = next(ln for ln in captured.out.splitlines() if ln.startswith("em-gbm-strong-order "))
    assert line.endswith(f"(plugin {ep_name})")
    assert em.experiment_source("em-gbm-strong-order")["distribution"] == f"{project['name']} {project['version']}"
    assert main(["verify", "em-gbm-order-1", "--workers", "1", "--no-progress"]) == 1


# ------------------------------------------------------------------------------------------------
# the example's mathematics, transcribed independently
# ------------------------------------------------------------------------------------------------


def test_example_scheme_matches_a_plain_loop_transcription(registry):
    """X_{k+1} = X_k + mu X_k h + sigma X_k ΔW_k with the increments of the finest grid summed, and
    the exact X_T = x0 exp((mu − sigma²/2) T + sigma W_T) (Higham 2001, SIAM Review 43(3), §5)."""
    mod = _em_module()
    s = dict(mu=0.7, sigma=0.9, x0=1.3, T=2.0, levels=(1, 2, 4), paths=3)
    got = mod.strong_errors(s, seed=5)
    dW = np.random.default_rng(5).normal(0.0, np.sqrt(2.0 / 4), size=(3, 4))  # same draws, finest grid
    want = []
    for n in (1, 2, 4):
        h, errs = 2.0 / n, []
        for path in dW:
            x = 1.3
            for k in range(n):
                dw = sum(path[k * (4 // n):(k + 1) * (4 // n)])
                x = x + 0.7 * x * h + 0.9 * x * dw
            exact = 1.3 * np.exp((0.7 - 0.9**2 / 2) * 2.0 + 0.9 * sum(path))
            errs.append(abs(exact - x))
        want.append(sum(errs) / len(errs))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    buggy = mod.strong_errors(s, seed=5, scheme="buggy-dw-times-h")
    assert not np.allclose(buggy, got)
    with pytest.raises(ValueError, match="scheme"):
        mod.strong_errors(s, seed=5, scheme="milstein")
