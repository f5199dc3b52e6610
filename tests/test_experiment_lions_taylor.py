"""Experiment ``lions-taylor``: Taylor remainder rates 2 for the Lions derivative and the Jacobian; the
wrong-sign Lions term must fail (rate 1).  Deterministic (Taylor tests have no false-failure rate beyond
round-off: the levels at the round-off floor are excluded by ``taylor_test``)."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.verify.experiment import ExperimentConfig
from transformer_limits.verify.registry import experiment_spec
from transformer_limits.verify.running import run_experiment
from transformer_limits.verify.experiments import lions_taylor as lt


@pytest.fixture(scope="module")
def quick():
    return run_experiment(experiment_spec("lions-taylor"), ExperimentConfig("quick", seed=0))


def test_quick_profile_passes_with_rate_two(quick):
    assert quick.passed
    checks = {c.name: c for c in quick.checks}
    assert set(checks) == {"lions_taylor_rate", "jacobian_taylor_rate", "flow_taylor_order1_rate",
                           "flow_taylor_order2_rate", "flow_taylor_order3_rate"}
    for c in checks.values():
        assert c.expected - 0.1 <= c.measured <= c.expected + 0.1
        assert c.statistics["cases_passed"] == c.statistics["cases"] == len(lt.cases_for("quick"))
    assert 1.9 < quick.fits["lions"]["exponent"] < 2.1
    assert 1.9 < quick.fits["jacobian"]["exponent"] < 2.1
    assert quick.provenance["timings"]["run_s"] > 0  # recorded; how long it takes is not a test's business


def test_wrong_sign_control_is_reported_not_checked(quick):
    control = [r for r in quick.tables["summary"] if r["expansion"] == "lions-wrong-sign"]
    assert len(control) == 1 and control[0]["cases_passed"] == f"0/{len(lt.cases_for('quick'))}"
    assert 0.9 < control[0]["min_rate"] <= control[0]["max_rate"] < 1.1
    assert 0.9 < quick.fits["lions-wrong-sign"]["exponent"] < 1.1
    assert all(c.name != "lions-wrong-sign" for c in quick.checks)


def test_wrong_sign_lions_term_fails_the_rate_check():
    wrong = next(e for e in lt.EXPANSIONS if e.name == "lions-wrong-sign")
    cases = lt.cases_for("quick")
    results = lt.evaluate_expansion(wrong, cases, seed=5)
    check = lt.taylor_check(wrong, results)
    assert not check.passed and check.measured < 1.1 and "below rate" in check.note
    right = next(e for e in lt.EXPANSIONS if e.name == "lions")
    assert lt.taylor_check(right, lt.evaluate_expansion(right, cases, seed=5)).passed


def test_random_weights_cases_pass():
    cases = [c for c in lt.cases_for("full") if not c.uniform_weights][:3]
    for expansion in lt.EXPANSIONS[:2]:
        assert lt.taylor_check(expansion, lt.evaluate_expansion(expansion, cases, seed=1)).passed


#: the expansions whose evaluation is cheap (closed-form kernels); the flow-map ones integrate the
#: MV-ODE numerically (about 1 s each on the quick cases)
ALL = list(lt.EXPANSIONS)
CHEAP = [e for e in ALL if not e.name.startswith("flow")]


def _rows(result, name):
    return [r for r in result.tables["taylor_rates"] if r["expansion"] == name]


def test_seeded_and_deterministic(quick, monkeypatch):
    # each (expansion, case) is seeded by the case and the base seed alone (evaluate_expansion), so a
    # rerun of the cheap expansions must give their rows of the quick run bit for bit, and the costly
    # flow expansions (an MV-ODE per case) are rerun on one case, compared with the quick run's row
    monkeypatch.setattr(lt, "EXPANSIONS", CHEAP)
    again = run_experiment(experiment_spec("lions-taylor"), ExperimentConfig("quick", seed=0))
    # the seed reaches every expansion: each one's rows change with it (a stronger statement than "some
    # row changes")
    other = run_experiment(experiment_spec("lions-taylor"), ExperimentConfig("quick", seed=1))
    for expansion in CHEAP:
        assert _rows(again, expansion.name) == _rows(quick, expansion.name), expansion.name
        assert _rows(other, expansion.name) != _rows(quick, expansion.name), expansion.name
    case = lt.cases_for("quick")[:1]
    for expansion in (e for e in ALL if e not in CHEAP):
        zero, one = (lt.evaluate_expansion(expansion, case, seed)[0] for seed in (0, 1))
        row = next(r for r in _rows(quick, expansion.name) if r["case"] == case[0].label())
        np.testing.assert_array_equal(row["rates"], [round(float(q), 4) for q in zero.rates])  # NaN-safe
        np.testing.assert_array_equal(row["min_rate"], zero.min_rate)
        assert not np.array_equal(zero.remainders, one.remainders), expansion.name


def test_extension_point_adds_a_check(monkeypatch):
    """A new expansion appended to EXPANSIONS (as flow-map expansions will be) is tested and checked."""

    def second_order_sine(case, rng):
        x = rng.standard_normal(case.d)
        dx = rng.standard_normal(case.d)
        return np.sin, x, dx, [np.cos(x) * dx, -np.sin(x) * dx**2 / 2]

    extra = lt.TaylorExpansion("sine", "sin(x + h dx) to second order (rate 3)", second_order_sine,
                               check="sine_taylor_rate", order=2)
    # appended to the cheap expansions only: the flow-map ones (seconds) are not what this test is about
    monkeypatch.setattr(lt, "EXPANSIONS", [*CHEAP, extra])
    result = lt.run(ExperimentConfig("quick"))
    check = next(c for c in result.checks if c.name == "sine_taylor_rate")
    assert check.passed and check.expected == 3.0
    with pytest.raises(ValueError, match="declared order 1"):
        lt.evaluate_expansion(lt.TaylorExpansion("bad", "c", second_order_sine, check="x"), lt.cases_for("quick"), 0)


def test_the_sweep_over_workers_gives_the_serial_results_bit_for_bit(monkeypatch):
    """run() evaluates one sweep point per (expansion, case) in worker processes: the results are those
    of evaluate_expansion in this process, remainders, rates and the round-off mask alike."""
    monkeypatch.setattr(lt, "EXPANSIONS", CHEAP)
    cases = lt.cases_for("quick")
    swept = lt.expansion_results(ExperimentConfig("quick", seed=3, workers=2), cases)
    for expansion, results in zip(CHEAP, swept, strict=True):
        for got, want in zip(results, lt.evaluate_expansion(expansion, cases, 3), strict=True):
            assert got.to_dict() == want.to_dict() and got.used.dtype == bool
            for a, b in ((got.remainders, want.remainders), (got.rates, want.rates), (got.steps, want.steps)):
                assert np.array_equal(a, b, equal_nan=True)


def test_a_stored_result_round_trips_with_inf_and_nan():
    import json

    from transformer_limits.verify.taylor import TaylorResult

    r = TaylorResult(2, 3.0, np.array([0.1, 0.05, 0.025]), np.array([1e-3, 0.0, 1.0 / 3.0]),
                     np.array([np.inf, np.nan]), np.array([True, False]), 0.1, ["floor"])
    back = lt._result_of(json.loads(json.dumps(r.to_dict())))
    assert back.to_dict().keys() == r.to_dict().keys()
    for name in ("steps", "remainders", "rates", "used"):
        assert np.array_equal(getattr(back, name), getattr(r, name), equal_nan=True), name
    assert back.used.dtype == bool and (back.order, back.expected_rate, back.tolerance, back.notes) == (2, 3.0, 0.1, ["floor"])
