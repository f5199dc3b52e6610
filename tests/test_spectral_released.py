"""Experiment ``spectral-released``: paper C's β on the released 160M points (docs/theory.md §C.6–C.7).

The fits are compared with an independent transcription (closed-form OLS in NumPy), the published
constant with the table of docs/theory.md §C.7, and the ordering test's false-failure rate with a
simulation.  Deliberately wrong inputs (swapped Dion labels, mislabelled widths) must fail.
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
import subprocess
import sys
import textwrap
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from transformer_limits.cli import main
from transformer_limits.verify.experiment import ExperimentConfig
from transformer_limits.verify.registry import experiment_spec
from transformer_limits.verify.running import run_experiment
from transformer_limits.verify.experiments import spectral_released as sr
from transformer_limits.verify.stats.width_scaling import fit_width_scaling

ROOT = Path(__file__).resolve().parents[1]
TEST_COPY = ROOT / "tests" / "data" / "spectral_global_points_160m.csv"
CHECKS = ("published_betas_reproduced", "muon_hard_beta_exceeds_adamw", "dion_rank_monotone")


def _ols(x: np.ndarray, y: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float, float]:
    """Independent transcription: slope, t-interval and R² of y = a + b x by the normal equations."""
    xc, yc = x - x.mean(), y - y.mean()
    b = float(xc @ yc / (xc @ xc))
    resid = yc - b * xc
    se = math.sqrt(float(resid @ resid) / (x.size - 2) / float(xc @ xc))
    half = stats.t.ppf(0.5 + confidence / 2, x.size - 2) * se
    return b, b - half, b + half, 1.0 - float(resid @ resid) / float(yc @ yc)


@pytest.fixture(scope="module")
def result():
    return run_experiment(experiment_spec("spectral-released"), ExperimentConfig())


# ------------------------------------------------------------------------------------------------
# package data


def test_package_data_is_readable_through_importlib_resources():
    root = resources.files("transformer_limits") / "data"
    raw = (root / sr.DATA_FILE).read_bytes()
    assert raw == sr.released_points_bytes() == TEST_COPY.read_bytes()  # the same bytes as the test copy
    assert raw.startswith(b"optimizer,stratum,metric,width,value\n")
    groups = sr.load_released_points()
    assert sorted(groups) == sorted((o, "GLOBAL", m) for o in sr.OPTIMIZERS for m in sr.METRICS)
    for widths, ranks in groups.values():
        np.testing.assert_array_equal(widths, 768.0 * np.arange(1, 9))
        assert np.all(ranks > 0)
    provenance = (root / "PROVENANCE.md").read_text(encoding="utf-8")
    assert "arXiv:2605.21803" in provenance and "Jha" in provenance and sr.DATA_FILE in provenance


def test_package_data_ships_in_the_wheel_config():
    """pyproject's package-data globs cover the data file and its provenance note."""
    import tomllib
    from fnmatch import fnmatch

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = globs["transformer_limits"]
    for name in (f"data/{sr.DATA_FILE}", "data/PROVENANCE.md"):
        assert any(fnmatch(name, p) for p in patterns), (name, patterns)


# ------------------------------------------------------------------------------------------------
# fits: independent transcription and the published values


def test_fits_match_an_independent_ols_transcription():
    groups = sr.load_released_points()
    fits = sr.fit_released(groups)
    assert len(fits) == 10
    for (opt, _, metric), (widths, ranks) in groups.items():
        want = _ols(np.log(widths), np.log(ranks))
        f = fits[(opt, metric)]
        np.testing.assert_allclose((f.beta, f.ci_low, f.ci_high, f.r2), want, rtol=0, atol=1e-12)
        # and np.polyfit's slope
        assert f.beta == pytest.approx(np.polyfit(np.log(widths), np.log(ranks), 1)[0], abs=1e-12)
        assert f.n == 8 and f.confidence == 0.95


def _theory_c7_table() -> dict[tuple[str, str], tuple[float, float, float, float]]:
    """The pooled 160M rows of docs/theory.md §C.7, parsed from the page."""
    text = (ROOT / "docs" / "theory.md").read_text(encoding="utf-8")
    section = text.split('<a id="C.7"></a>')[1].split('<a id="C.8"></a>')[0]
    names = {"AdamW": "AdamW", "Muon": "Muon", "NorMuon": "NorMuon", "Dion (1/2)": "Dion-1/2",
             "Dion (1/16)": "Dion-1/16"}
    num = r"([−-]?\d+\.\d+)"
    cell = rf"{num} \[{num}, {num}\], {num}"
    out = {}
    for line in section.splitlines():
        m = re.match(rf"\| ([^|]+?) \| {cell} \| {cell} \|", line)
        if m:
            vals = [float(v.replace("−", "-")) for v in m.groups()[1:]]
            out[(names[m.group(1)], "soft")] = tuple(vals[:4])
            out[(names[m.group(1)], "hard")] = tuple(vals[4:])
    return out


def test_published_constant_is_the_table_of_theory_c7():
    assert sr.PUBLISHED_GLOBAL_BETAS == _theory_c7_table()


def test_published_values_are_typed_once_in_the_module():
    """The published β are the right-hand side of PUBLISHED_GLOBAL_BETAS only (no second copy)."""
    tree = ast.parse(Path(sr.__file__).read_text(encoding="utf-8"))
    published = {v for row in sr.PUBLISHED_GLOBAL_BETAS.values() for v in row} - {0.5}
    allowed = {id(n) for node in tree.body if isinstance(node, ast.AnnAssign)
               and getattr(node.target, "id", "") == "PUBLISHED_GLOBAL_BETAS" for n in ast.walk(node.value)}
    stray = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, float)
             and abs(n.value) in published and id(n) not in allowed]
    assert stray == []


# ------------------------------------------------------------------------------------------------
# the experiment on the real data


def test_real_data_pass_every_check(result):
    # nothing contradicted; the Muon ordering is undecided at 8 widths (power ≈ 0.2), Dion's is decided
    assert result.status == "inconclusive", [str(c) for c in result.checks]
    assert [c.state for c in result.checks] == ["pass", "inconclusive", "pass"]
    assert [c.name for c in result.checks] == list(CHECKS)
    pub, muon, dion = result.checks
    assert pub.measured <= 5e-4 and pub.statistics["n_compared"] == 40 and pub.statistics["alpha"] == 0.0
    # Muon/NorMuon vs AdamW: not contradicted, but the intervals contain 0 (wide hard-rank fits)
    assert muon.passed and not muon.statistics["supported"] and muon.statistics["alpha"] == sr.ALPHA
    assert [(p["higher"], p["lower"]) for p in muon.statistics["pairs"]] == [("Muon", "AdamW"), ("NorMuon", "AdamW")]
    # Dion 1/2 vs 1/16: supported (lower bound above 0)
    assert dion.passed and dion.statistics["supported"]
    assert dion.measured == pytest.approx(0.787 - 0.500, abs=1e-3)
    rows = {(r["optimizer"], r["metric"]): r for r in result.tables["betas"]}
    assert len(rows) == 10 and rows[("AdamW", "hard")]["published_beta"] == 0.289
    assert result.figures[0].png.startswith(b"\x89PNG") and len(result.figures) == 1
    assert result.provenance["data"]["sha256"] == hashlib.sha256(TEST_COPY.read_bytes()).hexdigest()
    assert len(result.data["points"]) == 80
    spec = experiment_spec("spectral-released")
    assert spec.profiles == ("quick", "full") and spec.paper == "C" and spec.requires == ()
    assert spec.claim == sr.CLAIM == experiment_spec("spectral-released-wrong-dion").claim


def test_ordering_test_matches_a_hand_computed_welch_bound(result):
    fits = sr.fit_released(sr.load_released_points())
    a, b = fits[("Dion-1/2", "hard")], fits[("Dion-1/16", "hard")]
    se = math.sqrt(a.stderr**2 + b.stderr**2)
    dof = se**4 / (a.stderr**4 / 6 + b.stderr**4 / 6)
    upper = a.beta - b.beta + stats.t.ppf(0.95, dof) * se
    (pair,) = result.checks[2].statistics["pairs"]
    assert pair["upper"] == pytest.approx(upper, rel=1e-12) and pair["dof"] == pytest.approx(dof, rel=1e-12)
    assert result.checks[2].ci[1] == pytest.approx(upper, rel=1e-12)


def test_cli_verify_real_passes_and_wrong_variant_fails(capsys, tmp_path):
    assert main(["verify", "spectral-released", "--no-progress", "--out", str(tmp_path / "ok")]) == 0
    assert (tmp_path / "ok" / "spectral_released_fits.png").is_file()
    capsys.readouterr()
    assert main(["verify", "spectral-released-wrong-dion", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "RESULT: FAIL (0/3 checks passed, 1 inconclusive, 2 failed)" in out


# ------------------------------------------------------------------------------------------------
# deliberately wrong inputs


def test_wrong_variant_swapped_dion_labels_fails():
    assert experiment_spec("spectral-released-wrong-dion").profiles == ()
    res = run_experiment(experiment_spec("spectral-released-wrong-dion"), ExperimentConfig())
    assert res.status == "fail" and res.error is None
    assert [c.name for c in res.failed_checks] == ["published_betas_reproduced", "dion_rank_monotone"]
    # the mismatches are exactly the Dion rows: 2 optimizers × 2 metrics × (β, 2 CI ends, R²)
    assert len(res.checks[0].statistics["mismatches"]) == 16
    assert res.checks[2].ci[1] < 0


def test_mislabelled_widths_fail():
    """Widths in reverse order (a mislabelled column) flip every slope: the refit must not pass."""
    groups = {k: (x[::-1].copy(), y) for k, (x, y) in sr.load_released_points().items()}
    res = sr.analyse(groups, ExperimentConfig())
    assert not res.passed and res.failed_checks[0].name == "published_betas_reproduced"
    mismatches = res.checks[0].statistics["mismatches"]
    assert sum(" beta: " in m for m in mismatches) == 10  # every β is off
    assert all(row["beta"] < 0 for row in res.tables["betas"])


def test_published_check_reports_a_missing_fit():
    fits = sr.fit_released(sr.load_released_points())
    del fits[("Muon", "soft")]
    check = sr.published_check(fits)
    assert not check.passed and "Muon/soft: no fit" in check.statistics["mismatches"]


def test_ordering_check_rejects_bad_arguments():
    fits = sr.fit_released(sr.load_released_points())
    with pytest.raises(ValueError, match="alpha"):
        sr.ordering_check("x", (("Muon", "AdamW"),), fits, alpha=0.7)
    with pytest.raises(ValueError, match="pairs"):
        sr.ordering_check("x", (), fits)
    with pytest.raises(ValueError, match="fits: no hard-rank fit for Lion"):
        sr.ordering_check("x", (("Lion", "AdamW"),), fits)


def test_ordering_check_false_failure_rate_and_power():
    """Under the fit's model (Gaussian log-noise, 8 widths) with equal slopes (the boundary of the
    claim) the check fails at a rate ≤ α = 0.05; with the order reversed by 0.3 it nearly always
    fails.  2000 seeded replicates: the 0.065 bound is α plus 3 binomial standard errors
    (0.0049), so a correct test exceeds it with probability < 0.2 %."""
    rng = np.random.default_rng(20261201)
    widths = 768.0 * np.arange(1, 9)
    lx = np.log(widths)

    def fit(beta, sigma):
        return fit_width_scaling(widths, np.exp(1.0 + beta * lx + sigma * rng.standard_normal(8)))

    fails = 0
    reps = 2000
    for _ in range(reps):
        fits = {("A", "hard"): fit(0.5, 0.2), ("B", "hard"): fit(0.5, 0.05)}
        fails += not sr.ordering_check("t", (("A", "B"),), fits).passed
    assert fails / reps <= 0.065
    assert fails / reps >= 0.035  # and it is not vacuous: near α at the boundary
    power = sum(not sr.ordering_check("t", (("A", "B"),), {("A", "hard"): fit(0.2, 0.05),
                                                             ("B", "hard"): fit(0.5, 0.05)}).passed
                for _ in range(200))
    assert power >= 190


# ------------------------------------------------------------------------------------------------
# no PyTorch


def test_module_never_imports_torch():
    tree = ast.parse(Path(sr.__file__).read_text(encoding="utf-8"))
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "torch" not in names


def test_runs_and_passes_where_torch_cannot_be_imported(tmp_path):
    """A fresh interpreter in which ``import torch`` fails: spectral-released passes, spectral-scaling
    is refused as bad input (exit 2, one line) and the quick index lists it."""
    code = textwrap.dedent("""
        import sys

        class NoTorch:  # a machine without PyTorch: finding or importing torch fails
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, NoTorch())
        from transformer_limits.verify.registry import experiment_spec
        from transformer_limits.verify.running import missing_requirement
        assert missing_requirement(experiment_spec("spectral-scaling")) is not None
        from transformer_limits.cli import main
        rc = main(["verify", "spectral-released", "--no-progress"])
        assert rc == 0, rc
        assert main(["verify", "spectral-scaling", "--no-progress"]) == 2
        assert "torch" not in sys.modules
        print("OK")
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "OK" in proc.stdout and "RESULT: INCONCLUSIVE (2/3 checks passed, 1 inconclusive)" in proc.stdout
    err = [line for line in proc.stderr.splitlines() if line.strip()]
    assert err == ["transformer-limits: error: experiment spectral-scaling cannot run here: "
                   "missing requirement: needs PyTorch (pip install torch)"]
