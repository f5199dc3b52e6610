"""float32 does not change a verdict: every experiment that declares float32 (``Experiment.precisions``)
runs its quick profile in float32 on the CPU backend its settings name (numba's float32 kernels where
they say numba, the NumPy float32 path where numpy) and reaches the quick profile's float64
verdicts (every check passes: ``.ci/run``'s quick report shows it in float64), states its measured error
against float64, and a deliberately wrong model still fails in float32.

Marker ``precision`` (not in the default run: a few minutes of simulation); ``.ci/run`` runs it after the
default suite.  Fixed seeds (the quick profile's), so the outcome is deterministic; the checks' own
false-failure rates are those of their declarations (alpha = 0.01 each).
"""

from __future__ import annotations

import pytest

from transformer_limits.verify.experiment import ExperimentConfig
from transformer_limits.verify.registry import list_experiments
from transformer_limits.verify.running import run_experiment

pytestmark = pytest.mark.precision

FLOAT32 = sorted(e.name for e in list_experiments() if "float32" in e.precisions and "quick" in e.profiles)
#: the float64 quick verdicts (docs/verification.md, power table): propagation-of-chaos is not
#: contradicted but undecided in the quick profile (power 0.002 against N^-1/4)
FLOAT64_STATUS = {"propagation-of-chaos": "inconclusive", "synchronization": "pass", "token-independence": "pass"}
#: the CPU backend of each float32 run: the one its settings name (numba's float32 kernels, or numpy)
FLOAT32_CPU_BACKEND = {"propagation-of-chaos": "numba", "synchronization": "numba", "token-independence": "numba"}


def test_experiments_of_both_papers_declare_float32():
    assert {"propagation-of-chaos", "synchronization"} <= set(FLOAT32)


@pytest.mark.parametrize("name", FLOAT32)
def test_float32_quick_profile_reaches_the_float64_verdicts(name):
    exp = next(e for e in list_experiments() if e.name == name)
    result = run_experiment(exp, ExperimentConfig(profile="quick", precision="float32"))
    assert result.status == FLOAT64_STATUS[name], (result.error, [(c.name, c.measured, c.ci, c.note)
                                                                  for c in result.failed_checks])
    assert [c.name for c in result.checks] == list(exp.check_names)
    prov = result.provenance
    assert prov["precision"] == "float32"
    err = prov["precision_error"]
    assert 0 < err["max_rel"] < 1e-4, err  # float32 rounding is visible and small
    for choice in prov.get("backends", {}).values():
        assert choice["backend"] in ("numpy", "blas", "numba", "cupy"), choice  # a float32 backend ran
        if prov.get("device", "cpu") == "cpu":
            assert choice["backend"] == FLOAT32_CPU_BACKEND[name], choice


def test_the_wrong_control_still_fails_in_float32():
    from transformer_limits.verify.experiments import propagation_of_chaos

    result = propagation_of_chaos.run(ExperimentConfig(profile="quick", precision="float32"), independent_noise=True)
    assert result.status == "fail" and [c.name for c in result.failed_checks] == ["exponent_N"]
