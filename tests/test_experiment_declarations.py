"""A check is declared once (``CheckSpec`` on the ``Experiment``) and ``run_experiment`` holds every
result to it: exactly the declared checks, the declared alpha, the declared claim where the run
writes none; and it records the provenance (seed, settings, wall time) for every experiment."""

from __future__ import annotations

import pytest

from transformer_limits.verify.check_spec import CheckSpec, declaration_errors
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
from transformer_limits.verify.registry import experiment_spec, list_experiments
from transformer_limits.verify.running import run_experiment
from transformer_limits.verify.verdicts import Check


def _check(name, alpha=0.01, claim="x ≤ 1"):
    return Check(name, claim, 1.0, 0.5, (0.0, 1.0), True, {"alpha": alpha, "sides": "one-sided"}, "", 0.9)


def _experiment(checks, reported, settings=None, provenance=None):
    def run(config):
        return ExperimentResult("decl", config.profile, checks=[_check(*c) for c in reported],
                                provenance=dict(provenance or {}))
    return Experiment(name="decl", title="t", paper="A", claim="c", derivations=(), checks=checks, run=run,
                      settings=settings or {})


# ------------------------------------------------------------------------------------------------
# the declaration


@pytest.mark.parametrize("kwargs, match", [
    (dict(name=""), "name"), (dict(name="two words"), "name"), (dict(name="a", alpha=0.5), "alpha"),
    (dict(name="a", alpha=-0.01), "alpha"), (dict(name="a", tolerance=-1.0), "tolerance"),
    (dict(name="a", tolerance=float("inf")), "tolerance"),
])
def test_check_spec_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CheckSpec(**kwargs)


def test_experiment_declares_each_check_once_and_keeps_its_json_shape():
    exp = _experiment(("a", CheckSpec("b", alpha=0.05, tolerance=0.1)), [])
    assert exp.checks == (CheckSpec("a"), CheckSpec("b", alpha=0.05, tolerance=0.1))
    assert exp.check_names == ("a", "b") and exp.check("b").tolerance == 0.1
    assert list(exp.to_dict()) == ["name", "title", "paper", "claim", "derivations", "check_names", "profiles",
                                   "budget_s", "requires", "precisions"]
    assert exp.to_dict()["check_names"] == ["a", "b"] and exp.to_dict()["precisions"] == ["float64"]
    with pytest.raises(ValueError, match="declares no check 'c'"):
        exp.check("c")
    with pytest.raises(ValueError, match="more than once"):
        _experiment(("a", CheckSpec("a")), [])
    with pytest.raises(ValueError, match="sequence"):
        _experiment("a", [])


def test_every_built_in_check_declares_its_verdict_and_false_failure_rate():
    for exp in list_experiments():
        for spec in exp.checks:
            assert spec.verdict and spec.alpha is not None, (exp.name, spec.name)


# ------------------------------------------------------------------------------------------------
# the runner applies it


def test_a_result_matching_its_declarations_passes_and_gets_the_declared_claim():
    spec = CheckSpec("bound", "‖θ_k‖ ≤ R_k", alpha=0.01)
    result = run_experiment(_experiment((spec,), [("bound", 0.01, "")]), ExperimentConfig())
    assert result.status == "pass" and result.checks[0].claim == "‖θ_k‖ ≤ R_k"  # power 0.9: decided
    # a claim the run writes itself (e.g. a verdict's "err ~ L^-1") is kept
    result = run_experiment(_experiment((spec,), [("bound", 0.01, "err ~ L^-1")]), ExperimentConfig())
    assert result.checks[0].claim == "err ~ L^-1"


@pytest.mark.parametrize("reported, message", [
    ([], "lacks the declared check(s) a"),
    ([("a",), ("b",)], "undeclared check(s) b"),
    ([("a",), ("a",)], "check(s) a more than once"),
    ([("a", 0.05)], "check a used alpha=0.05, declared alpha=0.01"),
])
def test_a_result_breaking_its_declarations_is_an_error_not_a_pass(reported, message):
    result = run_experiment(_experiment((CheckSpec("a", alpha=0.01),), reported), ExperimentConfig())
    assert result.status == "error" and message in result.error and not result.passed


def test_declaration_errors_ignore_an_undeclared_alpha():
    assert declaration_errors((CheckSpec("a"),), [_check("a", alpha=0.2)]) == []


def test_the_runner_records_seed_settings_and_wall_time():
    settings = {"quick": {"levels": (8, 16), "nested": [(1, 2)]}, "full": {"levels": (8, 16, 32)}}
    exp = _experiment(("a",), [("a",)], settings=settings)
    result = run_experiment(exp, ExperimentConfig(seed=7))
    prov = result.provenance
    assert prov["seed"] == 7 and prov["seeds"] == {"base": 7} and prov["timings"]["run_s"] >= 0
    # top-level tuples become lists, nested tuples are kept (jsonable_settings)
    assert prov["settings"] == {"levels": [8, 16], "nested": [(1, 2)]}
    # what the run records itself wins (e.g. settings overridden for a reduced grid)
    own = _experiment(("a",), [("a",)], settings=settings, provenance={"settings": {"levels": [4]}})
    assert run_experiment(own, ExperimentConfig()).provenance["settings"] == {"levels": [4]}


def _spinning_child(seconds: float) -> None:
    import time

    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_the_runner_records_the_cpu_time_of_the_run_and_of_its_ended_children():
    """``cpu_s`` counts a child process that ended during the run (a sweep's pool workers) and not
    time spent waiting: a run that sleeps 0.3 s costs little CPU, one whose child spins 0.3 s of CPU
    costs at least that."""
    import multiprocessing
    import time

    def waiting(config):
        time.sleep(0.3)
        return ExperimentResult("decl", config.profile, checks=[_check("a")])

    def spawning(config):
        child = multiprocessing.get_context("fork").Process(target=_spinning_child, args=(0.3,))
        child.start()
        child.join()
        return ExperimentResult("decl", config.profile, checks=[_check("a")])

    timings = {}
    for name, run in (("waiting", waiting), ("spawning", spawning)):
        exp = Experiment(name="decl", title="t", paper="A", claim="c", derivations=(), checks=(CheckSpec("a"),),
                         run=run)
        timings[name] = run_experiment(exp, ExperimentConfig()).provenance["timings"]
    assert timings["waiting"]["run_s"] >= 0.3 and timings["waiting"]["cpu_s"] < 0.2
    assert timings["spawning"]["cpu_s"] >= 0.29


def test_a_built_in_experiment_reads_alpha_and_tolerance_from_its_declaration():
    from transformer_limits.verify.experiments import sde_limit

    exp = experiment_spec("sde-limit")
    assert exp.check("exponent_L") is sde_limit.EXPONENT_L
    assert (sde_limit.EXPONENT_L.alpha, sde_limit.EXPONENT_L.tolerance) == (0.01, 0.2)
    assert exp.settings["quick"] is sde_limit.SETTINGS["quick"]


# ------------------------------------------------------------------------------------------------
# power: every built-in check declares the violation it must detect


def test_every_built_in_check_declares_its_alternative():
    """A statistical check (alpha > 0) declares an alternative value or words for it; a deterministic
    one (alpha = 0) says in words what its rule rejects (docs/verification.md, "Power")."""
    missing = [f"{e.name}.{s.name}" for e in list_experiments() for s in e.checks
               if s.alternative is None and not s.alternative_text
               and e.name not in ("lions-taylor",)]  # its checks state the alternative order per expansion
    assert missing == []
    with pytest.raises(ValueError, match="alternative"):
        CheckSpec("a", alternative=float("nan"))
    assert CheckSpec("a", alternative=-0.5).required_alternative == -0.5
    with pytest.raises(ValueError, match="declares no alternative"):
        CheckSpec("a").required_alternative


def test_spectral_released_states_power_and_its_muon_ordering_is_inconclusive():
    """The released 160M points (8 widths): the Muon ordering cannot be decided (power ≈ 0.22 against
    the published Δβ = 0.51 reversed), Dion's monotonicity can (power ≈ 0.98); every check has a power."""
    result = run_experiment(experiment_spec("spectral-released"), ExperimentConfig())
    assert all(c.power is not None for c in result.checks)
    states = {c.name: c.state for c in result.checks}
    assert states == {"published_betas_reproduced": "pass", "muon_hard_beta_exceeds_adamw": "inconclusive",
                      "dion_rank_monotone": "pass"}
    muon = next(c for c in result.checks if c.name == "muon_hard_beta_exceeds_adamw")
    assert 0.1 < muon.power < 0.4 and "inconclusive: power" in muon.note and result.status == "inconclusive"


def test_alternative_text_from_the_declaration():
    spec = CheckSpec("c", alpha=0.01, alternative_text="q = -0.5")

    def run(config):
        return ExperimentResult("decl", config.profile, checks=[_check("c")])

    exp = Experiment(name="decl", title="t", paper="A", claim="c", derivations=(), checks=(spec,), run=run)
    assert run_experiment(exp, ExperimentConfig()).checks[0].alternative == "q = -0.5"
