"""Experiment ``lyapunov``: simulated λ_1 vs the derived formula; a wrong formula must fail.

Statistical tests use fixed seeds; each z-test family has a stated family-wise false-failure rate
(``LYAPUNOV_AGREES.alpha`` = 0.01, Bonferroni), so a correct formula fails with probability ≤ 1 % per
seed (the seeds here are fixed, so the outcome is deterministic)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from transformer_limits.verify.experiment import ExperimentConfig
from transformer_limits.verify.registry import experiment_spec
from transformer_limits.verify.running import run_experiment
from transformer_limits.verify.experiments import lyapunov as ly

SMALL = ly.Profile(settings=(("relu", 5, 0.1), ("relu", 3, 0.1), ("tanh", 3, 0.0)), chains=512, steps=150)


@pytest.fixture
def small_profile(monkeypatch):
    monkeypatch.setitem(ly.PROFILES, "quick", SMALL)


@pytest.fixture(scope="module")
def seed3_store(tmp_path_factory) -> str:
    """One sweep store for the seed-3 runs of SMALL: the right formula and the wrong ones are judged on
    the same simulations (the formula enters only the check), so the first run simulates and the others
    read its points, bitwise the same (test_store_makes_the_sweep_resumable)."""
    return str(tmp_path_factory.mktemp("lyapunov") / "seed3.sqlite")


def test_z_test_bonferroni_threshold_and_verdicts():
    pred = np.array([-0.1, -0.2, -0.3, -0.4])
    se = np.full(4, 0.01)
    check, z = ly.lyapunov_z_test(pred + 0.02, se, pred, alpha=0.01)
    z_crit = stats.norm.isf(0.01 / 8)
    assert check.statistics["z_critical"] == pytest.approx(z_crit)
    assert check.passed and np.allclose(z, 2.0) and check.ci == pytest.approx((-z_crit, z_crit))
    shifted = pred.copy()
    shifted[2] += 0.035  # z = 3.5 > 3.02 in one setting
    check, _ = ly.lyapunov_z_test(shifted, se, pred, alpha=0.01, labels=["a", "b", "c", "d"])
    assert not check.passed and check.statistics["worst_setting"] == "c" and "1/4 settings reject" in check.note
    with pytest.raises(ValueError, match="standard_errors"):
        ly.lyapunov_z_test([0.0], [0.0], [0.0])


def test_richardson_removes_a_linear_bias():
    # λ̂(Δt) = λ + bΔt exactly: the extrapolation returns λ; SE combines as √(4 SE_f² + SE_c²)
    est = ly.richardson((-0.1 + 0.4 * 0.1, 0.03), (-0.1 + 0.4 * 0.05, 0.04), 0.1)
    assert est.estimate == pytest.approx(-0.1)
    assert est.standard_error == pytest.approx(np.hypot(0.08, 0.03))


def test_paper_table_is_reproduced():
    rows = ly._paper_rows()
    assert len(rows) == len(ly.PAPER_TABLE) == 6 and all(r["matches"] for r in rows)


def test_draft_a_typo_differs_only_with_biases():
    assert ly.draft_a_typo_lambda_1(5, 0.0) == pytest.approx(ly.predicted_lambda_1("relu", 5, 0.0)["lambda_1"])
    assert ly.draft_a_typo_lambda_1(5, 0.1) - ly.predicted_lambda_1("relu", 5, 0.1)["lambda_1"] == pytest.approx(0.06)


def test_correct_formula_passes_and_draft_a_typo_fails(small_profile, seed3_store):
    config = ExperimentConfig("quick", seed=3, store=seed3_store)
    right = ly.run(config)
    # the small test profile is not contradicted, but has little power (≈ 0.36): the statistics are
    # the subject here, the quick profile's power is in docs/verification.md
    assert right.status in ("pass", "inconclusive") and right.checks[0].passed, right.checks[0]
    assert [f.name for f in right.figures] == ["lyapunov-z-scores"] and right.figures[0].png[:4] == b"\x89PNG"
    typo = ly.run(config, formula=lambda a, d, s: ly.draft_a_typo_lambda_1(d, s) if a == "relu"
                  else ly.predicted_lambda_1(a, d, s)["lambda_1"])
    check = typo.checks[0]
    assert not check.passed and check.measured > check.statistics["z_critical"]
    # the typo column of the table tells the same story
    rows = [r for r in right.tables["lyapunov_exponents"] if "z vs Draft-A typo" in r]
    assert rows and max(abs(r["z vs Draft-A typo"]) for r in rows) > check.statistics["z_critical"]


def test_missing_one_over_d_in_k_prime_fails(small_profile, seed3_store):
    """Draft B's k'(1) without the 1/d (docs/theory.md §B.0) gives a wrong λ_1 that the simulation rejects."""
    def wrong(a, d, s):
        v = ly.predicted_lambda_1(a, d, s)
        return (d - 3) / 2 * d * v["dk1"] - (d - 1) / 2 * v["k1"]

    # not merely inconclusive
    assert ly.run(ExperimentConfig("quick", seed=3, store=seed3_store), formula=wrong).status == "fail"


def test_seeded_deterministic_and_worker_independent(small_profile):
    a = run_experiment(experiment_spec("lyapunov"), ExperimentConfig("quick", seed=4))
    b = run_experiment(experiment_spec("lyapunov"), ExperimentConfig("quick", seed=4, workers=2))
    assert a.tables == b.tables
    c = ly.run(ExperimentConfig("quick", seed=5))
    assert c.tables["lyapunov_exponents"] != a.tables["lyapunov_exponents"]


def test_store_makes_the_sweep_resumable(small_profile, tmp_path):
    store = str(tmp_path / "lyap.sqlite")
    first = ly.run(ExperimentConfig("quick", seed=2, store=store))
    second = ly.run(ExperimentConfig("quick", seed=2, store=store))
    assert first.tables == second.tables


@pytest.mark.slow
def test_quick_profile_passes():
    result = run_experiment(experiment_spec("lyapunov"), ExperimentConfig("quick"))
    assert result.passed, result.checks
    assert result.provenance["timings"]["run_s"] > 0  # recorded; how long it takes is not a test's business
