"""``transformer-limits spectral fit|ranks`` run in-process through the CLI front door."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from transformer_limits.cli import main
from transformer_limits.numeric.spectra.ranks import rank_summary

POINTS = Path(__file__).parent / "data" / "spectral_global_points_160m.csv"


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _assert_one_line_error(code, out, err, pattern=""):
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("transformer-limits: error:")
    assert pattern in err


def test_fit_json_reproduces_reported_betas(capsys):
    code, out, err = _run(capsys, "spectral", "fit", str(POINTS), "--format", "json",
                          "--bootstrap", "300", "--seed", "4")
    assert code == 0 and err == ""
    payload = json.loads(out)
    fits = {(f["optimizer"], f["stratum"], f["metric"]): f for f in payload["fits"]}
    assert len(fits) == 10
    adamw = fits["AdamW", "GLOBAL", "soft"]
    assert (round(adamw["beta"], 3), round(adamw["ci_low"], 3), round(adamw["ci_high"], 3),
            round(adamw["r2"], 3), adamw["n"]) == (0.661, 0.546, 0.775, 0.971, 8)
    assert round(fits["Dion-1/16", "GLOBAL", "hard"]["beta"], 3) == 0.500
    for f in fits.values():
        assert f["bootstrap_n"] == 300 and f["bootstrap_method"] == "residual"
        assert f["boot_ci_low"] < f["beta"] < f["boot_ci_high"]
    # same seed, same output
    assert _run(capsys, "spectral", "fit", str(POINTS), "--format", "json", "--bootstrap", "300",
                "--seed", "4")[1] == out


def test_fit_text_and_no_bootstrap(capsys):
    code, out, _ = _run(capsys, "spectral", "fit", str(POINTS), "--bootstrap", "0")
    assert code == 0
    assert "AdamW" in out and "0.661" in out and "[0.546, 0.775]" in out
    code, out, _ = _run(capsys, "spectral", "fit", str(POINTS), "--bootstrap", "0", "--format", "json")
    first = json.loads(out)["fits"][0]  # strict JSON: NaN bootstrap bounds become null
    assert first["boot_ci_low"] is None and first["bootstrap_n"] == 0


def test_fit_plot_is_written_atomically(capsys, tmp_path):
    png = tmp_path / "plots" / "fit.png"
    code, out, _ = _run(capsys, "spectral", "fit", str(POINTS), "--plot", str(png), "--bootstrap", "0",
                        "--format", "json")
    assert code == 0 and json.loads(out)["plot"] == str(png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in png.parent.iterdir()] == ["fit.png"]  # no temporary left behind


def _csv(tmp_path, text):
    path = tmp_path / "points.csv"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, pattern", [
    ("optimizer,stratum,metric,width\nA,G,soft,768\n", "missing column(s) value"),
    ("optimizer,stratum,metric,width,value\nA,G,soft,768,1\nA,G,soft,1536,0\nA,G,soft,2304,3\n",
     "row 3: column 'value'"),
    ("optimizer,stratum,metric,width,value\nA,G,soft,768,1\nA,G,soft,-5,2\nA,G,soft,2304,3\n",
     "row 3: column 'width'"),
    ("optimizer,stratum,metric,width,value\nA,G,soft,768,1\nA,G,soft,1536,2\n", "need at least 3 points"),
])
def test_fit_bad_csv_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, text, pattern):
    png = tmp_path / "out.png"
    code, out, err = _run(capsys, "spectral", "fit", _csv(tmp_path, text), "--plot", str(png))
    _assert_one_line_error(code, out, err, pattern)
    assert not png.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["points.csv"]


def test_fit_usage_errors(capsys, tmp_path):
    _assert_one_line_error(*_run(capsys, "spectral", "fit", str(tmp_path / "none.csv")), "no such file")
    _assert_one_line_error(*_run(capsys, "spectral", "fit", str(POINTS), "--bootstrap", "-1"), "--bootstrap")
    _assert_one_line_error(*_run(capsys, "spectral", "fit", str(POINTS), "--plot", str(tmp_path / "x.pdf")),
                           ".png")
    _assert_one_line_error(*_run(capsys, "spectral"), "choose an action")
    _assert_one_line_error(*_run(capsys, "spectral", "fit"), "POINTS.csv")


@pytest.fixture
def activations(tmp_path):
    rng = np.random.default_rng(0)
    h = rng.standard_normal((300, 16)) @ np.diag(np.geomspace(1, 20, 16)) + 3.0
    path = tmp_path / "acts.npy"
    np.save(path, h)
    return path, h


def test_ranks_json_matches_api(capsys, activations):
    path, h = activations
    code, out, err = _run(capsys, "spectral", "ranks", str(path), "--alpha", "0", "0.5", "1", "2", "inf",
                          "--format", "json")
    assert code == 0 and err == ""
    payload = json.loads(out)
    ref = rank_summary(h, alphas=[0, 0.5, 1, 2, math.inf])
    assert payload["renyi"] == pytest.approx(ref["renyi"])
    assert payload["soft"] == pytest.approx(ref["soft"]) and payload["hard"] == pytest.approx(ref["hard"])
    assert payload["asymmetry"] == pytest.approx(math.log(ref["soft"] / ref["hard"]))
    assert payload["renyi"]["0"] == 16 and payload["n"] == 300 and payload["dim"] == 16
    vals = [payload["renyi"][k] for k in ("0", "0.5", "1", "2", "inf")]
    assert vals == sorted(vals, reverse=True)


def test_ranks_source_and_centring_options(capsys, activations):
    path, h = activations
    outs = {}
    for extra in ([], ["--no-center"], ["--source", "singular"]):
        code, out, _ = _run(capsys, "spectral", "ranks", str(path), "--format", "json", *extra)
        assert code == 0
        outs[tuple(extra)] = json.loads(out)
    assert outs[("--no-center",)]["center"] is False
    assert outs[("--no-center",)]["soft"] == pytest.approx(rank_summary(h, center=False)["soft"])
    assert outs[("--source", "singular")]["soft"] == pytest.approx(rank_summary(h, source="singular")["soft"])
    assert len({round(o["soft"], 6) for o in outs.values()}) == 3
    code, out, _ = _run(capsys, "spectral", "ranks", str(path))
    assert code == 0 and "soft" in out and "asymmetry" in out


def test_ranks_bad_input_is_one_line_exit_2(capsys, tmp_path):
    cube = tmp_path / "cube.npy"
    np.save(cube, np.zeros((2, 3, 4)))
    _assert_one_line_error(*_run(capsys, "spectral", "ranks", str(cube)), "2-D")
    _assert_one_line_error(*_run(capsys, "spectral", "ranks", str(tmp_path / "nope.npy")), "no such file")
    bad = tmp_path / "bad.npy"
    np.save(bad, np.array([[1.0, np.nan], [2.0, 3.0]]))
    _assert_one_line_error(*_run(capsys, "spectral", "ranks", str(bad)), "non-finite")
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"not an array")
    _assert_one_line_error(*_run(capsys, "spectral", "ranks", str(junk)), "not a readable .npy")
    one = tmp_path / "one.npy"
    np.save(one, np.ones((1, 3)))
    _assert_one_line_error(*_run(capsys, "spectral", "ranks", str(one)), "at least 2 rows")
    zero = tmp_path / "const.npy"
    np.save(zero, np.ones((5, 3)))
    _assert_one_line_error(*_run(capsys, "spectral", "ranks", str(zero)), "zero spectrum")
    _assert_one_line_error(*_run(capsys, "spectral", "ranks", str(one), "--alpha", "-2"), "alpha")
    _assert_one_line_error(*_run(capsys, "spectral", "ranks", str(one), "--source", "gram"), "source")
