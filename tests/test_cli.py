"""The CLI front door: info, derive (list / text / latex / json / --all), exit codes, atomic output."""

import json
import os
import subprocess
import sys

import pytest

from transformer_limits.cli import main

# derive --all computes every derivation (SymPy, ~11 s) and the process keeps them: the other derive
# tests here and tests/test_docs.py's up-to-date check (which renders them all again: ~1.5 s warm)
# reuse them, so they run on the same xdist worker
pytestmark = pytest.mark.xdist_group("all-derivations")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_lists_every_backend_with_a_reason(capsys):
    code, out, _ = run(capsys, "info", "--format", "json")
    assert code == 0
    payload = json.loads(out)
    names = [b["name"] for b in payload["backends"]]
    assert names == ["numpy", "numba", "numba-cuda", "numba-cuda-sim", "cupy"]
    assert all(b["reason"] for b in payload["backends"])
    assert payload["versions"]["sympy"]


def test_derive_lions_json_prints_the_formula(capsys):
    code, out, _ = run(capsys, "derive", "attention-lions-derivative", "--format", "json")
    assert code == 0
    payload = json.loads(out)
    assert payload["name"] == "attention-lions-derivative"
    assert "K^\\top Q x" in payload["latex"]["lions_derivative"]
    assert payload["assumptions"] and payload["checks"]


def test_derive_values_with_numeric_params(capsys):
    code, out, _ = run(capsys, "derive", "attention-lions-derivative", "--format", "json",
                       "--param", "seed=3", "--param", "d=3")
    assert code == 0
    values = json.loads(out)["values"]
    assert values["lions_derivative_residual"] < 1e-30  # closed form == SymPy derivative at 50 digits
    assert len(values["lions_derivative"]) == 2 and len(values["lions_derivative"][0]) == 3


def test_derive_text_and_latex(capsys):
    code, out, _ = run(capsys, "derive", "attention-jacobian")
    assert code == 0 and "assumptions:" in out
    code, out, _ = run(capsys, "derive", "attention", "--format", "latex")
    assert code == 0 and "\\pi_\\mu" in out


def test_derive_list(capsys):
    code, out, _ = run(capsys, "derive", "--list", "--format", "json")
    names = {d["name"] for d in json.loads(out)}
    assert {"attention", "attention-flat-derivative", "attention-lions-derivative",
            "attention-jacobian", "attention-bounds"} <= names


@pytest.mark.parametrize("argv, needle", [
    (["derive", "no-such-thing"], "unknown derivation"),
    (["derive", "attention", "--param", "d"], "KEY=VALUE"),
    (["derive", "attention", "--param", "d=zero"], "must be int"),
    (["derive", "attention", "--param", "d=0"], ">= 1"),
    (["derive", "attention", "--param", "bogus=1"], "no parameter 'bogus'"),
    (["derive", "attention-bounds", "--param", "R=-1", "--param", "R_theta=1"], "'R'"),
    (["derive"], "needs a NAME"),
    (["derive", "--all"], "--out"),
    (["derive", "attention", "--format", "yaml"], "invalid choice"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and needle in err
    assert "Traceback" not in err


def test_derive_all_writes_pages_atomically(tmp_path, capsys, monkeypatch):
    out_dir = tmp_path / "docs"
    code, _, _ = run(capsys, "derive", "--all", "--out", str(out_dir))
    assert code == 0
    assert (out_dir / "index.md").exists()
    assert (out_dir / "attention-lions-derivative.md").read_text().startswith("# `attention-lions")
    kernels = list((out_dir / "kernels").iterdir())
    assert any(k.suffix == ".cu" for k in kernels) and any(k.suffix == ".py" for k in kernels)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "staging folder left behind"

    # a failure while rendering leaves the output folder untouched
    import transformer_limits.symbolic.derivation_docs as docs

    before = {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}

    def boom():
        raise ValueError("render failed")

    monkeypatch.setattr(docs, "render_derivation_docs", boom)
    code, _, err = run(capsys, "derive", "--all", "--out", str(out_dir))
    assert code == 2 and "render failed" in err
    after = {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    assert before == after


def test_derive_all_out_is_a_file(tmp_path, capsys):
    target = tmp_path / "afile"
    target.write_text("x")
    code, _, err = run(capsys, "derive", "--all", "--out", str(target))
    assert code == 2 and "not a directory" in err


def test_python_dash_m_entry_point():
    out = subprocess.run([sys.executable, "-m", "transformer_limits", "derive", "--list"],
                         capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 0 and "attention-lions-derivative" in out.stdout


def test_exit_codes_map_the_error_types_and_sigterm_handler_is_restored(capsys, monkeypatch):
    """0/1/2/3 come from transformer_limits.errors; main() installs its SIGTERM handler only while it runs."""
    import errno
    import signal

    from transformer_limits import cli, errors

    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def handler(exc):
        def run_(args):
            seen.append(signal.getsignal(signal.SIGTERM))
            raise exc
        return run_

    cases = [(cli.CheckFailed("x"), 1), (errors.StoreError("store 'x' is locked"), 2),
             (errors.SchedulerError("not dask"), 2), (errors.ExperimentCrashed("a crashed"), 3),
             (errors.EnvironmentFailure("pool broke"), 3), (MemoryError(), 3),
             (OSError(errno.ENOSPC, "No space left on device"), 3), (OSError(errno.ENOENT, "missing"), 2),
             (cli.Terminated(), 143), (KeyboardInterrupt(), 130)]
    for exc, code in cases:
        parser = cli.build_parser()
        monkeypatch.setattr(cli, "build_parser", lambda parser=parser: parser)
        args = parser.parse_args(["info"])
        monkeypatch.setattr(parser, "parse_args", lambda argv, args=args, exc=exc: setattr(args, "handler", handler(exc)) or args)
        assert main(["info"]) == code, exc
        err = capsys.readouterr().err.strip()
        assert (err == "") == (code == 1) and "\n" not in err and "Traceback" not in err
    assert seen and all(h is cli._raise_terminated for h in seen)
    assert signal.getsignal(signal.SIGTERM) == before
