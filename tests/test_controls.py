"""The catalogue of deliberately wrong models (transformer_limits.verify.controls) is true, complete
for the built-in experiments, and its newest control (propagation of chaos without common noise)
fails while the right model passes."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from transformer_limits.verify.controls import CONTROLS, controls_for
from transformer_limits.verify.registry import experiment_spec, list_experiments

ROOT = Path(__file__).resolve().parents[1]


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test")}


@pytest.mark.parametrize("control", CONTROLS, ids=lambda c: c.name)
def test_every_control_names_a_declared_check_and_an_existing_test(control):
    spec = experiment_spec(control.experiment)
    assert control.check in spec.check_names, f"{control.experiment} declares no check {control.check!r}"
    file, function = control.test.split("::")
    assert (ROOT / file).exists(), file
    assert function in _test_functions(ROOT / file), control.test


def test_names_are_unique_and_every_built_in_experiment_has_a_control():
    assert len({c.name for c in CONTROLS}) == len(CONTROLS)
    # built-in = defined in the package and part of a report profile (wrong variants have none)
    built_in = [e for e in list_experiments()
                if e.run.__module__.startswith("transformer_limits.verify.experiments.") and e.profiles]
    assert len(built_in) >= 10
    missing = [e.name for e in built_in if not controls_for(e.name)]
    assert not missing, f"experiments without a deliberately wrong control: {missing}"


# d = 3 only, three N levels, 6 seeds, 20 steps (about 5 s): the right model's slope is about −0.7,
# the control's about 0 (measured on the quick profile: −0.73 vs −0.05).  Fixed seed; the right
# model's check has false-failure rate α = 0.01 by construction.
SMALL = {"dims": (3,), "N_levels": (8, 32, 128), "N_ref": 512, "seeds": 6, "n_steps": 20}


@pytest.mark.parametrize("independent_noise, passes", [(False, True), (True, False)])
def test_chaos_without_common_noise_fails_exponent_N(independent_noise, passes):
    from transformer_limits.verify.experiments import propagation_of_chaos as chaos
    from transformer_limits.verify.stats.power_law import fit_power_law
    from transformer_limits.verify.verdicts import rate_at_least

    s = dict(chaos.SETTINGS["quick"], **SMALL, independent_noise=independent_noise)
    errors = chaos.chaos_errors(s, 3, seed=0)
    fit = fit_power_law({"N": np.array(s["N_levels"])}, errors, window="all", seed=0)
    check = rate_at_least(fit, -0.5, chaos.EXPONENT_N.required_alpha)
    assert check.passed is passes, (check.measured, check.ci)
