"""Paper A: the uniform-in-inputs error does not grow with the number of tokens N
(experiment ``token-independence``).

Claim (THEORY.md §1.1): the bounds are uniform over compact sets of initial conditions and are obtained
*without a covering argument*, so the constants do not depend on N.  A covering argument over a net of
the N-token input set would allow growth like sqrt(log N).

**Error.**  At fixed (L, H): ``e(N) = sup_{X0 in B_R^N} |x_L^iid,H(X0)^1 − X_1(X0)^1|`` (H i.i.d. heads
per layer from a finite-atom law ν vs the RK4 MV-ODE limit), the sup estimated by projected Adam ascent
with restarts (:func:`~transformer_limits.verify.experiments.attention_depth_width.sup_error`).  Seed j
fixes the law ν and the head draw for *every* N (the levels are coupled; the bootstrap resamples the
same seeds at every level, ``resample="paired"``); only the inputs change with N.

**Check** ``slope_in_log_N``: fit ``log ē(N) = a + b log(log N)`` (``fit_power_law`` with the level
parameter p = log N) and test b = 0 with :func:`~transformer_limits.verify.verdicts.slope_zero`
(two-sided, α = 0.01, conservative CI, tolerance 0.2 declared).  The covering alternative
``e ∝ sqrt(log N)`` is b = 1/2, so the test separates "bounded" from "covering growth".  The figure
plots ē against log N with the sqrt(log N) slope drawn dashed.  Note that the true sup is
non-decreasing in N along N -> 2N (duplicating every token keeps the empirical measure), so a bounded
error must level off; the tolerance allows the small pre-asymptotic rise at N = 4.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer_limits.verify.experiment import (
    Experiment,
    ExperimentConfig,
    ExperimentResult,
    jsonable_settings,
    register_experiment,
    run_points,
)
from transformer_limits.verify.experiments.attention_depth_width import SETTINGS as DEPTH_SETTINGS
from transformer_limits.verify.experiments.attention_depth_width import WorstInputs, models_for
from transformer_limits.verify.rate_fit import fit_power_law
from transformer_limits.verify.rate_plots import RateSeries, rate_figure
from transformer_limits.verify.verdicts import slope_zero

__all__ = ["SETTINGS", "token_error", "token_errors", "evaluate_point", "token_errors_sweep", "run"]

ALPHA = 0.01
TOLERANCE = 0.2

_BASE = {k: DEPTH_SETTINGS["quick"][k] for k in ("d", "d_k", "d_v", "radius", "n_nodes", "atoms", "gain")}
SETTINGS: dict[str, dict[str, Any]] = {
    "quick": dict(_BASE, L=4, H=4, limit_steps=4, N_levels=(4, 8, 16, 32, 64, 128, 256), seeds=8,
                  restarts=2, iterations=8, ascent_lr=0.15, backend="numba"),
    "full": dict(_BASE, L=8, H=4, limit_steps=8, N_levels=(4, 8, 16, 32, 64, 128, 256, 512, 1024),
                 seeds=16, restarts=3, iterations=15, ascent_lr=0.1, backend="numba"),
}


def token_error(s: dict[str, Any], seed: int, i: int, j: int) -> tuple[float, np.ndarray]:
    """(e(N_levels[i]), the worst input X0 (N, d) found) for seed j: the law and the head draw depend on
    j only, the inputs on (i, j)."""
    N = s["N_levels"][i]
    M = models_for({k: v for k, v in dict(s, N=N).items() if k != "N_levels"})
    law = M.law(seed * 1000 + 900 + j)
    A = M.iid_map(law, s["L"], s["H"], seed=int(np.random.default_rng([seed, 6, j]).integers(2**32)))
    return M.sup(A, M.limit(law), np.random.default_rng([seed, 7, i, j]))


def token_errors(s: dict[str, Any], seed: int) -> np.ndarray:
    """e(N) per (N level, seed), shape (n_N, seeds), serially in this process."""
    return np.array([[token_error(s, seed, i, j)[0] for j in range(s["seeds"])]
                     for i in range(len(s["N_levels"]))])


def evaluate_point(point: dict[str, Any]) -> dict[str, Any]:
    """Sweep function: ``{"error": e(N_levels[i]), "input": worst X0 as nested lists}`` for seed j."""
    error, X0 = token_error(point["settings"], point["base_seed"], point["i"], point["j"])
    return {"error": error, "input": X0.tolist()}


def token_errors_sweep(config: ExperimentConfig, s: dict[str, Any]) -> tuple[np.ndarray, float, WorstInputs]:
    """:func:`token_errors` through :func:`~transformer_limits.verify.experiment.run_points`
    (``config.workers`` processes, progress bar, resumable with ``config.store``); largest N first.
    Returns the errors, the summed point seconds and the worst input per N."""
    cells = sorted(((i, j) for i in range(len(s["N_levels"])) for j in range(s["seeds"])),
                   key=lambda c: -s["N_levels"][c[0]])
    settings = jsonable_settings(s)
    grid = {"zip": {"cell": {"i": [c[0] for c in cells], "j": [c[1] for c in cells]}},
            "fixed": {"settings": settings, "base_seed": config.seed}}
    sweep = run_points(config, evaluate_point, grid, experiment="token-independence", version=2)
    out = np.empty((len(s["N_levels"]), s["seeds"]))
    worst = WorstInputs(s["radius"])
    for record in sweep.records:
        i, j = record.params["i"], record.params["j"]
        out[i, j] = record.result["error"]
        worst.add("iid vs limit", f"N={s['N_levels'][i]}", j, record.result["error"], record.result["input"], (i,))
    return out, sum(r.elapsed_s or 0.0 for r in sweep.records), worst


def run(config: ExperimentConfig, *, log_n_term: float = 0.0,
        settings: dict[str, Any] | None = None) -> ExperimentResult:
    """``log_n_term`` c > 0 adds c·ē(N_min)·log N / log N_min to every error: the deliberately wrong,
    N-dependent model (tests); ``settings`` overrides the profile (reduced grids)."""
    s = dict(SETTINGS[config.profile], **(settings or {}))
    errors, seconds, worst = token_errors_sweep(config, s)
    N = np.array(s["N_levels"], dtype=float)
    if log_n_term:
        errors = errors + log_n_term * errors[0].mean() * (np.log(N) / np.log(N[0]))[:, None]
    fit = fit_power_law({"log N": np.log(N)}, errors, window="all", resample="paired", seed=config.seed)
    check = slope_zero(fit, ALPHA, tolerance=TOLERANCE)
    check.name = "slope_in_log_N"
    check.claim = "sup error independent of N: b = 0 in log e = a + b log(log N) (covering bound: b = 1/2)"
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
    result.provenance = {"seed": config.seed, "seconds": {"errors": seconds}, "log_n_term": log_n_term,
                         "settings": jsonable_settings(s)}
    return result


register_experiment(Experiment(
    name="token-independence",
    title="Paper A: the sup-over-inputs error does not grow with the number of tokens N",
    paper="A",
    claim="sup_{X0 in ball^N} |x_L − X_1| bounded uniformly in N (no sqrt(log N) covering growth)",
    derivations=("attention",),
    check_names=("slope_in_log_N",),
    run=run,
    budget_s={"quick": 45.0, "full": 400.0},
))
