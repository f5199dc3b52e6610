"""Paper A: Taylor-remainder rates of the attention expansions (experiment ``lions-taylor``).

Lions derivative (docs/theory.md §A.3).  Move the atoms of an empirical measure m^N = Σ_j w_j δ_{y^j}
(w_j = 1/N, or random weights in the full profile) to y^j + h δ_j.  Then

    A(x, m^N_h) = A(x, m^N) + h Σ_j w_j ∂_μA(x, m^N)(y^j) δ_j + O(h²),

so the first-order remainder ``R_1(h)`` decays with rate 2 (:func:`~transformer_limits.verify.taylor.taylor_test`).
Spatial Jacobian: ``A(x + h δx, μ) = A(x, μ) + h ∇_x A(x, μ) δx + O(h²)``, rate 2.  Control: the Lions
term with the wrong sign leaves an O(h) remainder (rate 1); it is reported in a table and must fail
the Taylor test, but it is not a check of the experiment.

Extension point (flow-map expansions, ``derive flow-taylor``): the experiment tests every
:class:`TaylorExpansion` in :data:`EXPANSIONS` on every :class:`TaylorCase` of the profile.  An
expansion's ``build(case, rng)`` returns ``(f, x, dx, coefficients)`` for ``taylor_test`` (``order`` =
number of coefficients, expected rate ``order + 1``); ``check`` names the check it reports (``None``
for a deliberately wrong control, which is tabulated only).  To add expansions, append them to
:data:`EXPANSIONS` in this module at import time (before :func:`register_experiment`), so the
experiment declares their checks (:func:`declared_checks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from transformer_limits.numeric.attention.kernels import attention_kernels
from transformer_limits.numeric.attention.flow_taylor import flow_expansion_builder
from transformer_limits.verify.check_spec import CheckSpec
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.running import run_points
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.rate.plots import RateSeries, rate_figure
from transformer_limits.verify.sweeps import derive_seed
from transformer_limits.verify.taylor import TaylorResult, taylor_test
from transformer_limits.verify.stats.power import deterministic_power
from transformer_limits.verify.verdicts import Check, attach_power

__all__ = ["TaylorCase", "TaylorExpansion", "EXPANSIONS", "TAYLOR_STEPS", "cases_for", "declared_checks",
           "evaluate_expansion", "taylor_check", "lions_expansion", "jacobian_expansion", "wrong_sign_lions_expansion"]

#: step sizes h0 * factor**i, i < levels, and the rate tolerance of every expansion
TAYLOR_STEPS = {"h0": 0.1, "levels": 6, "factor": 0.5, "tolerance": 0.1}

Problem = tuple[Callable[[np.ndarray], np.ndarray], np.ndarray, np.ndarray, list[np.ndarray]]


@dataclass(frozen=True)
class TaylorCase:
    """One random instance: shapes (d, d_k, d_v), ``n_queries`` points x_i, ``n_atoms`` atoms y^j
    (weights 1/N, or Dirichlet-random when ``uniform_weights`` is False) and a replicate index."""

    d: int
    d_k: int
    d_v: int
    n_queries: int
    n_atoms: int
    replicate: int
    uniform_weights: bool = True

    def label(self) -> str:
        w = "uniform" if self.uniform_weights else "random-w"
        return f"d={self.d},d_k={self.d_k},d_v={self.d_v},N={self.n_atoms},{w},#{self.replicate}"

    def seed(self, base: int) -> int:
        return derive_seed(base, {"d": self.d, "d_k": self.d_k, "d_v": self.d_v, "n_queries": self.n_queries,
                                  "n_atoms": self.n_atoms, "replicate": self.replicate,
                                  "uniform_weights": self.uniform_weights}, "lions-taylor")


@dataclass(frozen=True)
class TaylorExpansion:
    """An expansion to test (see the module docstring)."""

    name: str
    claim: str
    build: Callable[[TaylorCase, np.random.Generator], Problem]
    check: str | None = None
    order: int = 1

    @property
    def control(self) -> bool:
        return self.check is None


def _attention_inputs(case: TaylorCase, rng: np.random.Generator):
    """X (n_queries, d), Y (n_atoms, d), Q, K (d_k, d), V (d_v, d) scaled so logits are O(1), weights."""
    X = rng.standard_normal((case.n_queries, case.d))
    Y = rng.standard_normal((case.n_atoms, case.d))
    Q = rng.standard_normal((case.d_k, case.d)) / np.sqrt(case.d)
    K = rng.standard_normal((case.d_k, case.d)) / np.sqrt(case.d)
    V = rng.standard_normal((case.d_v, case.d)) / np.sqrt(case.d)
    w = (np.full(case.n_atoms, 1.0 / case.n_atoms) if case.uniform_weights
         else rng.dirichlet(np.ones(case.n_atoms)))
    return X, Y, Q, K, V, w


def _lions_problem(case: TaylorCase, rng: np.random.Generator, sign: float) -> Problem:
    X, Y, Q, K, V, w = _attention_inputs(case, rng)
    kern = attention_kernels(case.d, case.d_k, case.d_v, "numpy")
    delta = rng.standard_normal(Y.shape)
    lions = kern.lions_derivative(X, Y, Q, K, V, w)  # (n_queries, n_atoms, d_v, d)
    first = sign * np.einsum("j,ijvd,jd->iv", w, lions, delta)
    return (lambda Yh: kern.attention(X, Yh, Q, K, V, w)), Y, delta, [first]


def lions_expansion(case: TaylorCase, rng: np.random.Generator) -> Problem:
    """f(Y) = A(X, Σ_j w_j δ_{y^j}), c_1 = Σ_j w_j ∂_μA(x_i, m)(y^j) δ_j."""
    return _lions_problem(case, rng, 1.0)


def wrong_sign_lions_expansion(case: TaylorCase, rng: np.random.Generator) -> Problem:
    """The control: c_1 with the wrong sign (remainder O(h), rate 1)."""
    return _lions_problem(case, rng, -1.0)


def jacobian_expansion(case: TaylorCase, rng: np.random.Generator) -> Problem:
    """f(X) = A(X, m), c_1 = ∇_x A(x_i, m) δx_i."""
    X, Y, Q, K, V, w = _attention_inputs(case, rng)
    kern = attention_kernels(case.d, case.d_k, case.d_v, "numpy")
    dX = rng.standard_normal(X.shape)
    first = np.einsum("ivd,id->iv", kern.jacobian(X, Y, Q, K, V, w), dX)
    return (lambda Xh: kern.attention(Xh, Y, Q, K, V, w)), X, dX, [first]


#: the expansions the experiment tests, in report order (append flow-map expansions here)
EXPANSIONS: list[TaylorExpansion] = [
    TaylorExpansion("lions", "A(x, m^N_h) = A(x, m^N) + h Σ_j w_j ∂_μA(x, m^N)(x^j) δ_j + O(h²) (remainder rate 2)",
                    lions_expansion, check="lions_taylor_rate"),
    TaylorExpansion("jacobian", "A(x + h δx, m^N) = A(x, m^N) + h ∇_x A(x, m^N) δx + O(h²) (remainder rate 2)",
                    jacobian_expansion, check="jacobian_taylor_rate"),
    TaylorExpansion("lions-wrong-sign", "control: Lions term with the wrong sign (must fail: rate 1)",
                    wrong_sign_lions_expansion),
    # flow map of the MV-ODE over a block of depth h (derivation flow-taylor)
    TaylorExpansion("flow-order-1", "Φ_h(X) = X + h F + O(h²) (remainder rate 2)",
                    flow_expansion_builder(1), check="flow_taylor_order1_rate", order=1),
    TaylorExpansion("flow-order-2", "Φ_h(X) = X + h F + (h²/2) DF[F] + O(h³), DF with the Lions term (rate 3)",
                    flow_expansion_builder(2), check="flow_taylor_order2_rate", order=2),
    TaylorExpansion("flow-order-3", "Φ_h(X) = ... + (h³/6)(D²F[F, F] + DF[DF[F]]) + O(h⁴) (rate 4)",
                    flow_expansion_builder(3), check="flow_taylor_order3_rate", order=3),
    TaylorExpansion("flow-no-lions", "control: DF without the Lions (interaction) term (must fail: rate 2)",
                    flow_expansion_builder(2, wrong="no-lions"), order=2),
]

_SHAPES = {"quick": [(2, 2, 2, 3, 4), (3, 2, 3, 4, 6), (4, 3, 4, 5, 8)],
           "full": [(2, 2, 2, 3, 4), (3, 2, 3, 4, 6), (4, 3, 4, 5, 8), (5, 4, 3, 6, 16), (8, 4, 8, 8, 32)]}
_REPLICATES = {"quick": 2, "full": 4}


def cases_for(profile: str) -> list[TaylorCase]:
    """The profile's cases: every shape × replicates (the full profile adds random weights)."""
    weights = (True,) if profile == "quick" else (True, False)
    return [TaylorCase(d, dk, dv, nq, na, r, uw) for (d, dk, dv, nq, na) in _SHAPES[profile]
            for uw in weights for r in range(_REPLICATES[profile])]


def evaluate_expansion(expansion: TaylorExpansion, cases: Sequence[TaylorCase], seed: int,
                       **steps: float) -> list[TaylorResult]:
    """``taylor_test`` of ``expansion`` on each case (seeded by the case and ``seed``)."""
    options: dict[str, Any] = {**TAYLOR_STEPS, **steps}  # floats and the int "levels"
    out = []
    for case in cases:
        rng = np.random.default_rng(case.seed(seed))  # same data for every expansion
        f, x, dx, coefficients = expansion.build(case, rng)
        if len(coefficients) != expansion.order:
            raise ValueError(f"expansion {expansion.name!r} returned {len(coefficients)} coefficients, "
                             f"declared order {expansion.order}")
        out.append(taylor_test(f, x, dx, coefficients, **options))
    return out


def taylor_check(expansion: TaylorExpansion, results: Sequence[TaylorResult]) -> Check:
    """Every case must pass: each usable observed rate ≥ order + 1 − tolerance (deterministic)."""
    if not results:
        raise ValueError("results must not be empty")
    used = np.concatenate([r.rates[r.used] for r in results])
    n_pass = sum(r.passed for r in results)
    expected = results[0].expected_rate
    tol = results[0].tolerance
    passed = n_pass == len(results)
    measured = min(r.min_rate for r in results)
    stats_ = {"alpha": 0.0, "false_failure_rate": 0.0, "sides": "one-sided (min rate >= expected - tol)",
              "method": "taylor_test (deterministic up to round-off)", "tolerance": tol,
              "cases": len(results), "cases_passed": n_pass, "levels": len(results[0].steps)}
    note = "" if passed else (f"{len(results) - n_pass}/{len(results)} cases below rate "
                              f"{expected - tol:g}; min rate {measured:.3g}")
    ci = (float(used.min()), float(used.max())) if used.size else (float("nan"), float("nan"))
    check = Check(expansion.check or expansion.name, expansion.claim, expected, measured, ci, passed, stats_, note)
    # the violation to detect: a derivative or expansion term wrong, so the remainder is one order
    # lower (rate expected − 1); deterministic, it fails whenever that rate is below the threshold
    return attach_power(check, deterministic_power(expected - 1 < expected - tol),
                        f"remainder rate {expected - 1:g} (a wrong or missing term of the expansion)",
                        model="deterministic")


def declared_checks(expansions: Sequence[TaylorExpansion]) -> tuple[CheckSpec, ...]:
    """One deterministic check per non-control expansion: its claim, rate tolerance
    ``TAYLOR_STEPS["tolerance"]`` and false-failure rate 0."""
    return tuple(CheckSpec(e.check, e.claim, verdict="taylor_test", alpha=0.0, tolerance=TAYLOR_STEPS["tolerance"])
                 for e in expansions if e.check)


_CASE_FIELDS = ("d", "d_k", "d_v", "n_queries", "n_atoms", "replicate", "uniform_weights")


def evaluate_point(point: dict[str, Any]) -> dict[str, Any]:
    """Sweep function: :func:`evaluate_expansion` of ``EXPANSIONS[point["expansion"]]`` on the case the
    point's fields name (seeded by the case and ``point["base_seed"]``), as ``TaylorResult.to_dict()``."""
    expansion = EXPANSIONS[point["expansion"]]
    case = TaylorCase(**{k: point[k] for k in _CASE_FIELDS})
    return evaluate_expansion(expansion, [case], point["base_seed"])[0].to_dict()


def _result_of(record: dict[str, Any]) -> TaylorResult:
    """The :class:`TaylorResult` of a stored :func:`evaluate_point` result (JSON floats round-trip
    exactly, ±inf and NaN included)."""
    return TaylorResult(record["order"], record["expected_rate"], np.array(record["steps"], dtype=float),
                        np.array(record["remainders"], dtype=float), np.array(record["rates"], dtype=float),
                        np.array(record["used"], dtype=bool), record["tolerance"], list(record["notes"]))


def expansion_results(config: ExperimentConfig, cases: Sequence[TaylorCase]) -> list[list[TaylorResult]]:
    """:func:`evaluate_expansion` of every expansion of :data:`EXPANSIONS` on ``cases``, bit for bit,
    one sweep point per (expansion, case) (``config.workers`` processes, resumable with
    ``config.store``), the costliest (highest order, most atoms) first."""
    tasks = sorted(((e, c) for e in range(len(EXPANSIONS)) for c in range(len(cases))),
                   key=lambda t: (-EXPANSIONS[t[0]].order * cases[t[1]].n_atoms * cases[t[1]].d, t))
    zipped: dict[str, list[Any]] = {"expansion": [e for e, _ in tasks]}
    zipped.update({k: [getattr(cases[c], k) for _, c in tasks] for k in _CASE_FIELDS})
    sweep = run_points(config, evaluate_point, {"zip": {"task": zipped}, "fixed": {"base_seed": config.seed}},
                       experiment="lions-taylor", version=1)
    found = {(r.params["expansion"], TaylorCase(**{k: r.params[k] for k in _CASE_FIELDS})): r.completed_result
             for r in sweep.records}
    return [[_result_of(found[(e, case)]) for case in cases] for e in range(len(EXPANSIONS))]


def run(config: ExperimentConfig) -> ExperimentResult:
    cases = cases_for(config.profile)
    result = ExperimentResult("lions-taylor", config.profile)
    series = []
    for expansion, results in zip(EXPANSIONS, expansion_results(config, cases)):
        check = taylor_check(expansion, results)
        if not expansion.control:
            result.checks.append(check)
        for case, r in zip(cases, results):
            result.tables.setdefault("taylor_rates", []).append({
                "expansion": expansion.name, "case": case.label(), "control": expansion.control,
                "expected_rate": r.expected_rate, "min_rate": r.min_rate,
                "rates": [round(float(q), 4) for q in r.rates], "passed_taylor_test": r.passed})
        result.tables.setdefault("summary", []).append({
            "expansion": expansion.name, "check": expansion.check or "(control, not a check)",
            "expected_rate": check.expected, "min_rate": check.measured, "max_rate": check.ci[1],
            "cases_passed": f"{check.statistics['cases_passed']}/{len(cases)}",
            "verdict": ("pass" if check.passed else "fails")
                       + (" (as a wrong control must)" if expansion.control and not check.passed else "")})
        steps = results[0].steps
        remainders = np.stack([r.remainders for r in results], axis=1)  # (levels, cases)
        fit = fit_power_law(steps, remainders, param="h", expected=check.expected, window="all",
                            n_boot=1000, seed=config.seed)
        result.fits[expansion.name] = fit.to_dict()
        series.append(RateSeries(expansion.name, steps, remainders, fit,
                                 claimed_exponent=None if expansion.control else check.expected, finest="min",
                                 replicates="cases"))
        if expansion.control and check.passed:
            result.notes.append(f"WARNING: the control {expansion.name!r} passed the Taylor test; "
                                "the test has lost its power")
    result.figures.append(rate_figure(
        "taylor-remainders", "First-order Taylor remainders R_1(h) vs h (log-log) over all cases: "
        "Lions and Jacobian expansions decay like h^2, the wrong-sign control like h^1.",
        series, xlabel="step h", ylabel="remainder |R_1(h)|"))
    result.notes.append(f"{len(cases)} random cases (shapes d, d_k, d_v, N tokens; seeded from base seed "
                        f"{config.seed}); steps h = {TAYLOR_STEPS['h0']} × {TAYLOR_STEPS['factor']}^i, "
                        f"i < {TAYLOR_STEPS['levels']}; a case passes when every usable observed rate ≥ "
                        f"expected − {TAYLOR_STEPS['tolerance']}.")
    result.provenance.update(seeds={"base": config.seed, "cases": [c.seed(config.seed) for c in cases]},
                             grid={"cases": [c.label() for c in cases], **TAYLOR_STEPS})
    return result


register_experiment(Experiment(
    name="lions-taylor",
    title="Taylor remainders of the attention Lions derivative, Jacobian and MV-ODE flow-map expansions",
    paper="A",
    claim=("For the empirical measure m^N with atoms moved by h δ_j, A(x, m^N_h) − A(x, m^N) − "
           "h Σ_j w_j ∂_μA(x, m^N)(x^j) δ_j = O(h²) with ∂_μA(x, μ)(z) = π_μ(x, z)[V + (Vz − A(x, μ))(K^T Q x)^T], "
           "and A(x + h δx, μ) − A(x, μ) − h ∇_x A(x, μ) δx = O(h²) (docs/theory.md §A.3); the order-k block "
           "expansion of the MV-ODE flow map has remainder O(h^{k+1}), k = 1, 2, 3."),
    derivations=("attention-lions-derivative", "attention-jacobian", "flow-taylor"),
    checks=declared_checks(EXPANSIONS),
    run=run,
    budget_s={"quick": 25.0, "full": 40.0},
))
