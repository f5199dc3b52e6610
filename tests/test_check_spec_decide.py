"""Executable verdicts (issue 23 item 4): a CheckSpec with a decidable verdict and its claimed value
decides an estimate with exactly the declared numbers, a Bonferroni family tests each member at α/n,
and run_experiment decides the estimates a run returns instead of checks."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.verify.check_spec import CheckSpec, decide_declared
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
from transformer_limits.verify.running import run_experiment
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.verdicts import bonferroni_family, exponent_equals, rate_at_least, slope_zero


def _fit(q: float, seed: int = 0, noise: float = 0.05):
    """Errors C p^q with log-normal seed noise on p = 4..64, 8 seeds."""
    p = np.array([4, 8, 16, 32, 64])
    rng = np.random.default_rng(seed)
    errors = p[:, None] ** q * np.exp(noise * rng.standard_normal((p.size, 8)))
    return fit_power_law({"L": p}, errors, window="all", seed=seed)


def test_decide_is_the_verdict_with_the_declared_numbers():
    fit = _fit(-1.0)
    spec = CheckSpec("exponent_L", verdict="exponent_equals", claimed=-1.0, alpha=0.01, tolerance=0.15,
                     alternative=-0.5)
    mine = spec.decide(fit)
    ref = exponent_equals(fit, -1.0, 0.01, tolerance=0.15, alternative=-0.5)
    assert mine.name == "exponent_L" and mine.passed and mine.power == ref.power
    assert (mine.measured, mine.ci, mine.expected) == (ref.measured, ref.ci, ref.expected)
    # a different exponent fails: the decision reads the data
    assert not spec.decide(_fit(-0.5)).passed
    slope = CheckSpec("slope", verdict="slope_zero", alpha=0.01, tolerance=0.2, alternative=0.5, claim="flat")
    s = slope.decide(_fit(0.0))
    assert s.claim == "flat" and s.ci == slope_zero(_fit(0.0), 0.01, tolerance=0.2).ci


def test_a_family_tests_each_member_at_alpha_over_n():
    fits = {"d=2": _fit(-0.6, 1), "d=3": _fit(-0.55, 2), "d=4": _fit(-0.1, 3)}
    spec = CheckSpec("exponent_N", verdict="rate_at_least", family="bonferroni", claimed=-0.5, alpha=0.03,
                     alternative=-0.25)
    mine = spec.decide(fits, sides="per d")
    members = [rate_at_least(f, -0.5, 0.01, alternative=-0.25) for f in fits.values()]
    ref = bonferroni_family("exponent_N", members[0].claim, -0.5, members, 0.03, "per d", list(fits))
    assert mine.to_dict() == ref.to_dict()
    assert not mine.passed and mine.statistics["worst_member"] == "d=4"  # q = −0.1 is slower than −1/2
    assert mine.statistics["alpha_per_member"] == pytest.approx(0.01)


@pytest.mark.parametrize("kwargs, word", [
    (dict(verdict="exponent_equals", alpha=0.01), "not executable"),        # no claimed value
    (dict(verdict="z-tests", claimed=1.0, alpha=0.01), "not executable"),  # not a decidable verdict
])
def test_a_check_that_cannot_decide_says_why(kwargs, word):
    with pytest.raises(ValueError, match=word):
        CheckSpec("c", **kwargs).decide(_fit(-1.0))


def test_declaration_errors_name_the_field():
    with pytest.raises(ValueError, match="family"):
        CheckSpec("c", verdict="rate_at_least", claimed=-1.0, alpha=0.01, family="holm")
    with pytest.raises(ValueError, match="family needs an executable verdict"):
        CheckSpec("c", verdict="rate_at_least", alpha=0.01, family="bonferroni")
    with pytest.raises(ValueError, match="claimed"):
        CheckSpec("c", verdict="rate_at_least", claimed=float("nan"), alpha=0.01)
    with pytest.raises(ValueError, match="mapping"):
        CheckSpec("c", verdict="rate_at_least", claimed=-1.0, alpha=0.01).decide({"a": _fit(-1.0)})


SPECS = (CheckSpec("first", verdict="rate_at_least", claimed=-1.0, alpha=0.01, alternative=-0.5),
         CheckSpec("second", verdict="deterministic", alpha=0.0))


def test_decide_declared_keeps_the_declared_order_and_what_the_run_decided():
    from transformer_limits.verify.verdicts import Check

    second = Check("second", "x", None, 0.0, (0.0, 0.0), True, {"alpha": 0.0}, "")
    checks = decide_declared(SPECS, {"first": _fit(-1.0)}, [second])
    assert [c.name for c in checks] == ["first", "second"]
    with pytest.raises(ValueError, match="'second'"):
        decide_declared(SPECS, {"second": _fit(-1.0)}, [])


def _experiment(run):
    return Experiment(name="decide-test", title="t", paper="A", claim="c", derivations=(), checks=SPECS[:1], run=run,
                      settings={"quick": {}})


def test_the_runner_decides_the_estimates_a_run_returns():
    def right(config):
        return ExperimentResult("decide-test", config.profile, estimates={"first": _fit(-1.0)})

    def wrong(config):  # decays like L^-1/4: slower than claimed
        return ExperimentResult("decide-test", config.profile, estimates={"first": _fit(-0.25)})

    good = run_experiment(_experiment(right), ExperimentConfig())
    bad = run_experiment(_experiment(wrong), ExperimentConfig())
    assert good.error is None and [c.name for c in good.checks] == ["first"] and good.checks[0].passed
    assert bad.status == "fail"


def test_an_estimate_for_an_undeclared_check_is_an_error_not_a_failed_check():
    def stray(config):
        return ExperimentResult("decide-test", config.profile, estimates={"nope": _fit(-1.0)})

    result = run_experiment(_experiment(stray), ExperimentConfig())
    assert result.status == "error" and "nope" in result.error


def test_claims_tolerances_and_immutability_as_declared():
    # rate_at_least needs its claimed value too
    with pytest.raises(ValueError, match="not executable"):
        CheckSpec("c", verdict="rate_at_least", alpha=0.01).decide(_fit(-1.0))
    # no tolerance declared: the verdict's tolerance is 0 (a plain CI test), and 0 may be declared
    fit = _fit(-1.0)
    bare = CheckSpec("c", verdict="exponent_equals", claimed=-1.0, alpha=0.01).decide(fit)
    assert bare.ci == exponent_equals(fit, -1.0, 0.01, tolerance=0.0).ci
    assert bare.statistics["tolerance"] == 0.0
    assert CheckSpec("c", verdict="exponent_equals", claimed=-1.0, alpha=0.01, tolerance=0.0).tolerance == 0.0
    # the claim: the caller's, else the declared one, else the verdict's own text
    spec = CheckSpec("c", verdict="rate_at_least", claimed=-1.0, alpha=0.01)
    assert spec.decide(fit, claim="explicit").claim == "explicit"
    assert spec.decide(fit).claim == rate_at_least(fit, -1.0, 0.01).claim != ""
    family = CheckSpec("f", verdict="rate_at_least", family="bonferroni", claimed=-1.0, alpha=0.01)
    assert family.decide({"a": fit}, claim="family claim").claim == "family claim"
    assert family.decide({"a": fit}).claim == rate_at_least(fit, -1.0, 0.01).claim
    with pytest.raises(Exception):  # frozen: a declaration cannot be changed after the fact
        spec.alpha = 0.5  # type: ignore[misc]


def test_a_check_the_run_decided_itself_is_kept_not_decided_twice():
    from transformer_limits.verify.verdicts import Check

    own = Check("first", "mine", None, 0.0, (0.0, 0.0), True, {"alpha": 0.01}, "")
    checks = decide_declared(SPECS, {"first": _fit(-0.25)}, [own])
    assert checks == [own]  # the run's own verdict, once; the estimate is not decided again


def test_a_family_states_the_member_claim_it_is_given():
    fits = {"d=2": _fit(-0.6, 1), "d=3": _fit(-0.55, 2)}
    spec = CheckSpec("exponent_N", verdict="rate_at_least", family="bonferroni", claimed=-0.5, alpha=0.02,
                     alternative=-0.25)
    plain = spec.decide(fits)
    named = spec.decide(fits, claim="family", member_claim="L^-1/2 (slowest term)")
    assert {m["claim"] for m in named.statistics["members"].values()} == {"L^-1/2 (slowest term)"}
    assert {m["claim"] for m in plain.statistics["members"].values()} == {"err ~ L^-0.5"}
    # only the words differ: the decision and its numbers are the same
    for a, b in zip(plain.statistics["members"].values(), named.statistics["members"].values()):
        assert (a["measured"], a["ci"], a["passed"], a["power"]) == (b["measured"], b["ci"], b["passed"], b["power"])
    assert named.claim == "family" and (named.passed, named.ci, named.power) == (plain.passed, plain.ci, plain.power)
