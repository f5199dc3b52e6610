"""Paper A: the uniform-in-inputs error does not grow with the number of tokens N
(experiment ``token-independence``).

Claim (docs/theory.md §A.1): the bounds are uniform over compact sets of initial conditions and are obtained
*without a covering argument*, so the constants do not depend on N.  A covering argument over a net of
the N-token input set would allow growth like sqrt(log N).

**Error.**  At fixed (L, H): ``e(N) = sup_{X0 in B_R^N} |x_L^iid,H(X0)^1 − X_1(X0)^1|`` (H i.i.d. heads
per layer from a finite-atom law ν vs the RK4 MV-ODE limit).  Seed j fixes the law ν and the head draw
for *every* N (the levels are coupled; the bootstrap resamples the same seeds at every level,
``resample="paired"``); only the inputs change with N.

**Estimate, monotone in N.**  Both models see the tokens only through their empirical measure (and
token 1's position), so repeating every token of an n-token input m times leaves the token-1 error
unchanged, and the true sup is non-decreasing along the ladder N_levels (each level a multiple of the
one before).  The estimate keeps that property per seed:
:func:`~transformer_limits.verify.input_search.sup_error_ladder` runs projected Adam ascent with
``restarts`` random starts at N_min, and at every later level starts from the previous level's worst
input with every token repeated (evaluated first, so ê(N) ≥ ê(N/m) up to round-off), jittered, in
place of the first of the ``restarts`` random starts (the others stay).  Along its chain of warm
starts the worst input at N has had up to ``iterations · (1 + i)`` Adam steps per coordinate
(i = level index): the per-coordinate budget grows with log N, where independent ascents per N had a fixed budget for N·d coordinates, so a sup growing with N
could look flat.  One sweep point is one seed's whole ladder (the levels of a seed depend on each
other; the seeds do not), so ``--workers`` splits the seeds and the results do not depend on it.

**Check** ``slope_in_log_N``: fit ``log ē(N) = a + b log(log N)`` (``fit_power_law`` with the level
parameter p = log N) and test b = 0 with :func:`~transformer_limits.verify.verdicts.slope_zero`
(two-sided, α = 0.01, conservative CI, tolerance 0.2 declared).  The covering alternative
``e ∝ sqrt(log N)`` is b = 1/2, so the test separates "bounded" from "covering growth".  The figure
plots ē against log N with the sqrt(log N) slope drawn dashed.  A bounded error levels off from
below; the tolerance allows the pre-asymptotic rise of the sup between N = 4 and N ≈ 16.

**Wrong models** (tests): ``counting_head`` c adds an un-normalised counting head to the discrete
model (:func:`~transformer_limits.verify.wrong_models.counting_head_map`): its error is the right
model's at typical inputs (a constant shift) and grows like c·log N only where tokens cluster on
token 1, which the warm starts reach (a repeated input is a clustered one); the check must reject it.
``log_n_term`` adds a synthetic log N term to the measured errors (a check of the statistics alone).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer_limits.numeric.kernel_family import LAYER_ADJOINT
from transformer_limits.verify.check_spec import CheckSpec
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult, PrecisionError, run_settings
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.running import jsonable_settings, run_points
from transformer_limits.verify.experiments.attention_models import QUICK_MODEL, WorstInputs, models_for
from transformer_limits.verify.input_search import check_ladder, sup_error_ladder
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.rate.plots import RateSeries, rate_figure
from transformer_limits.verify.wrong_models import counting_head_map

__all__ = ["SETTINGS", "COUNTING_WIDTH", "seed_maps", "token_ladder", "token_errors", "evaluate_point", "token_errors_sweep",
           "run"]

#: the check (two-sided slope_zero of the exponent of log N)
SLOPE_IN_LOG_N = CheckSpec("slope_in_log_N",
                           "sup error independent of N: b = 0 in log e = a + b log(log N) (covering bound: b = 1/2)",
                           verdict="slope_zero", alpha=0.01, tolerance=0.2,
                           alternative=0.5)  # the covering bound's sqrt(log N) growth
ALPHA, TOLERANCE = SLOPE_IN_LOG_N.required_alpha, SLOPE_IN_LOG_N.required_tolerance
#: kernel width δ / R of the deliberately wrong counting head (~0 at random inputs; wrong_models.py)
COUNTING_WIDTH = 0.01

Sup = tuple[float, np.ndarray]  # (sup error estimate, worst input X0 (N, d))

#: the kernel families run() calls, by the settings key naming the CPU backend of each
KERNELS = {"backend": LAYER_ADJOINT}
SETTINGS: dict[str, dict[str, Any]] = {
    "quick": dict(QUICK_MODEL, L=4, H=4, limit_steps=4, N_levels=(4, 8, 16, 32, 64, 128, 256), seeds=8,
                  restarts=2, bottom_restarts=8, iterations=8, ascent_lr=0.15, jitter=0.1,
                  backend="numba"),
    "full": dict(QUICK_MODEL, L=8, H=4, limit_steps=8, N_levels=(4, 8, 16, 32, 64, 128, 256, 512, 1024),
                 seeds=16, restarts=3, bottom_restarts=24, iterations=15, ascent_lr=0.1, jitter=0.1,
                 backend="numba"),
}


#: settings that shape the ladder, not the models (kept out of the models' cache key)
_LADDER_ONLY = ("N_levels", "position_restarts")


def _ladder_settings(s: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in s.items() if k not in _LADDER_ONLY}


def seed_maps(s: dict[str, Any], seed: int, j: int, *, counting_head: float = 0.0):
    """(models, network map A, limit map B) of seed j: the head law and the head draw depend on j only
    (not on N), so every level of the ladder sees the same two maps.  ``counting_head`` c > 0 adds the
    deliberately wrong counting head of :func:`~transformer_limits.verify.wrong_models.counting_head_map`."""
    M = models_for(_ladder_settings(s))
    law = M.law(seed * 1000 + 900 + j)
    A = M.iid_map(law, s["L"], s["H"], seed=int(np.random.default_rng([seed, 6, j]).integers(2**32)))
    if counting_head:
        A = counting_head_map(A, counting_head, width=COUNTING_WIDTH * s["radius"])
    return M, A, M.limit(law)


def token_ladder(s: dict[str, Any], seed: int, j: int, *, counting_head: float = 0.0) -> list[Sup]:
    """[(ê(N), the worst input X0 (N, d) found) for N in ``N_levels``] for seed j, monotone in N
    (:func:`~transformer_limits.verify.input_search.sup_error_ladder`): the law and the head draw depend
    on j only, the random starts and jitter of level i on (i, j).  ``counting_head`` c > 0 adds the
    deliberately wrong un-normalised counting head of
    :func:`~transformer_limits.verify.wrong_models.counting_head_map` to the discrete model."""
    levels = check_ladder(s["N_levels"])
    _, A, B = seed_maps(s, seed, j, counting_head=counting_head)
    rngs = [np.random.default_rng([seed, 7, i, j]) for i in range(len(levels))]
    return sup_error_ladder(A, B, levels, s["d"], radius=s["radius"], rngs=rngs,
                            restarts=s["restarts"], iterations=s["iterations"], lr=s["ascent_lr"],
                            bottom_restarts=s["bottom_restarts"], jitter=s["jitter"],
                            warm_start=s.get("warm_start", True))


def token_errors(s: dict[str, Any], seed: int, *, counting_head: float = 0.0) -> np.ndarray:
    """ê(N) per (N level, seed), shape (n_N, seeds), serially in this process."""
    return np.array([[e for e, _ in token_ladder(s, seed, j, counting_head=counting_head)]
                     for j in range(s["seeds"])]).T


def evaluate_point(point: dict[str, Any]) -> dict[str, Any]:
    """Sweep function: seed j's whole ladder, ``{"errors": [ê(N) per level], "inputs": [worst X0 as
    nested lists per level]}`` (the levels of one seed depend on each other through the warm start)."""
    ladder = token_ladder(point["settings"], point["base_seed"], point["j"],
                          counting_head=point["counting_head"])
    return {"errors": [e for e, _ in ladder], "inputs": [X.tolist() for _, X in ladder]}


def token_errors_sweep(config: ExperimentConfig, s: dict[str, Any], *,
                       counting_head: float = 0.0) -> tuple[np.ndarray, float, WorstInputs]:
    """:func:`token_errors` through :func:`~transformer_limits.verify.running.run_points`: one
    point per seed (its whole N ladder, which the warm starts chain), ``config.workers`` processes,
    resumable with ``config.store``; every point costs the same, so the order does not matter.
    Returns the errors (n_N, seeds), the summed point seconds and the worst input per N."""
    check_ladder(s["N_levels"])
    grid = {"grid": {"j": list(range(s["seeds"]))},
            "fixed": {"settings": jsonable_settings(s), "base_seed": config.seed,
                      "counting_head": float(counting_head)}}
    sweep = run_points(config, evaluate_point, grid, experiment="token-independence", version=4)
    out = np.empty((len(s["N_levels"]), s["seeds"]))
    worst = WorstInputs(s["radius"])
    for record in sweep.records:
        j = record.params["j"]
        for i, (e, X) in enumerate(zip(record.completed_result["errors"], record.completed_result["inputs"])):
            out[i, j] = e
            worst.add("iid vs limit", f"N={s['N_levels'][i]}", j, e, X, (i,))
    return out, sum(r.elapsed_s or 0.0 for r in sweep.records), worst


def _runtime_settings(config: ExperimentConfig, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The profile's settings (``settings`` overriding) with the backend of the layer kernels on
    ``config.device`` (cpu in float64: the settings' numba) and, for float32, the precision of the
    discrete model (a float64 run's settings are the profile's exactly: sweep keys unchanged)."""
    return run_settings(config, dict(SETTINGS[config.profile], **(settings or {})), KERNELS)


def precision_probe(config: ExperimentConfig) -> PrecisionError:
    """x_L of the i.i.d.-head discrete model (seed j = 0's law and heads) at one random input with the
    largest N of the profile: the run's float32 backend against float64 blas."""
    s = _runtime_settings(config)
    N = s["N_levels"][-1]

    def output(settings: dict[str, Any]) -> np.ndarray:
        M = models_for(_ladder_settings(settings))
        law = M.law(config.seed * 1000 + 900)
        A = M.iid_map(law, s["L"], s["H"], seed=int(np.random.default_rng([config.seed, 6, 0]).integers(2**32)))
        X0 = np.random.default_rng([config.seed, 8]).uniform(-1, 1, size=(N, s["d"])) * s["radius"] / np.sqrt(s["d"])
        return np.asarray(A.evaluate(X0)[0], dtype=np.float64)

    f64 = {k: v for k, v in s.items() if k != "precision"}
    return PrecisionError.between(f"x_L of the i.i.d.-head model (L = {s['L']}, H = {s['H']}, N = {N})",
                                  output(s), output(dict(f64, backend="blas")))


def run(config: ExperimentConfig, *, counting_head: float = 0.0, log_n_term: float = 0.0,
        settings: dict[str, Any] | None = None) -> ExperimentResult:
    """Deliberately wrong models (tests): ``counting_head`` c > 0 adds an un-normalised counting head
    to the discrete model (:func:`~transformer_limits.verify.wrong_models.counting_head_map`, error
    ~c·log N at clustered inputs only, ~0 at random ones); ``log_n_term`` c > 0 adds
    c·ē(N_min)·log N / log N_min to every measured error (a check of the statistics alone).
    ``settings`` overrides the profile (reduced grids)."""
    s = _runtime_settings(config, settings)
    errors, seconds, worst = token_errors_sweep(config, s, counting_head=counting_head)
    N = np.array(s["N_levels"], dtype=float)
    if log_n_term:
        errors = errors + log_n_term * errors[0].mean() * (np.log(N) / np.log(N[0]))[:, None]
    fit = fit_power_law({"log N": np.log(N)}, errors, window="all", resample="paired", seed=config.seed)
    check = SLOPE_IN_LOG_N.decide(fit)
    lo, hi = fit.interval("exponent", 1 - ALPHA)
    result = ExperimentResult("token-independence", config.profile, checks=[check])
    result.fits = {"log_N": fit.to_dict()}
    result.tables = {"errors": [{"N": int(n), "mean_sup_error": float(e.mean()), "min": float(e.min()),
                                 "max": float(e.max())} for n, e in zip(N, errors)],
                     "worst_inputs": worst.rows()}
    result.data = {"worst_inputs": worst.data()}
    ratio = errors.mean(axis=1)[-1] / errors.mean(axis=1)[0]
    result.notes.append(
        f"e(N_max)/e(N_min) = {ratio:.3f} for N = {int(N[0])}..{int(N[-1])}; a covering bound would allow "
        f"sqrt(log N_max / log N_min) = {np.sqrt(np.log(N[-1]) / np.log(N[0])):.3f}. "
        f"Exponent of log N: b = {fit.exponent.value:.3f} (99% CI [{lo:.3f}, {hi:.3f}]).")
    result.figures = [rate_figure(
        "token_independence", f"sup-over-inputs error at L = {s['L']}, H = {s['H']} vs log N "
        "(dashed: sqrt(log N) growth a covering argument would allow)",
        [RateSeries("sup_X0 |x_L^1 − X_1^1|", np.log(N), errors, fit, 0.5)], xlabel="log N",
        ylabel="sup error")]
    result.provenance = {"seconds": {"errors": seconds}, "log_n_term": log_n_term,
                         "counting_head": counting_head, "settings": jsonable_settings(s)}
    return result


register_experiment(Experiment(
    name="token-independence",
    title="Paper A: the sup-over-inputs error does not grow with the number of tokens N",
    paper="A",
    claim="sup_{X0 in ball^N} |x_L − X_1| bounded uniformly in N (no sqrt(log N) covering growth)",
    derivations=("attention",),
    checks=(SLOPE_IN_LOG_N,),
    run=run,
    budget_s={"quick": 25.0, "full": 400.0},
    settings=SETTINGS,
    kernels=KERNELS,
    precisions=("float64", "float32"),
    precision_probe=precision_probe,
))
