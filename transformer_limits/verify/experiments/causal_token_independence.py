"""Paper A under a causal mask: is the sup-over-inputs error uniform in the number of tokens N?
(experiment ``causal-token-independence``).

Claim tested (a conjecture; docs/causal_masking.md): at fixed (L, H) the error of the causally masked
network against its prefix-measure MV-ODE limit,
``e(N) = sup_{X0 in B_R^N} max_i |x_L^iid,H(X0)^i − X_1(X0)^i|``, is bounded uniformly in N (no
sqrt(log N) covering growth), as ``token-independence`` finds for the unmasked model.  A FAIL is a
finding about the conjecture, not a bug.

**Why the max over tokens, and its structure.**  Under the mask token i sees only tokens 1..i, so its
error at an N-token input is the last-token error of the i-token prefix: with f(n) = sup over n-token
inputs of the *last* token's error, ``sup_X0 |e^i(X0)| = f(i)`` for every N >= i and
``e(N) = max_{n<=N} f(n)``.  Token 1 sees a single atom (its prefix measure is δ_{x^1}), token N the
whole sequence: the errors by position are f(1) (first), f(N/2) (middle) and f(N) (last).

**Estimate, monotone in N.**  :func:`~transformer_limits.verify.input_search.sup_error_ladder` with
``token="max"`` (ascend the worst token at each iterate) and ``layout="tile"``: the warm start at N
is the previous level's worst input *tiled* (the whole sequence repeated), whose first N/m tokens are
that input exactly, so by causality their outputs, and hence the max-over-tokens error, are at least
the previous estimate (round-off aside).  (Repeating every token in place, the unmasked experiment's
warm start, is *not* equivalent under the mask beyond the first layer: docs/causal_masking.md.)
The seed j fixes the law and the head draw for every N (paired levels).

**Errors by position** (reported, not a check): f(n) for n in (1, N_levels...) by ascent of the last
token's error (``token=-1``), ``restarts`` random starts plus the max-ladder's worst input at that N
as a warm start; and at every level's worst input, which token attains the max (its relative
position i*/N) and the per-token errors of the first, middle and last tokens.

**Check** ``slope_in_log_N`` (that of ``token-independence``): fit log ē(N) = a + b log(log N),
test b = 0 two-sidedly (α = 0.01, tolerance 0.2, conservative CI, paired seed bootstrap); the power is
against the covering alternative b = 1/2.

**Controls** (tests/test_causal_experiments.py): ``counting_head`` c > 0 adds the un-normalised
counting head of :func:`~transformer_limits.verify.wrong_models.counting_head_map` to the masked
network (error ~ c log N at clustered inputs): ``slope_in_log_N`` must FAIL; ``log_n_term`` adds a
synthetic log N term (a check of the statistics alone).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer_limits.numeric.kernel_family import LAYER_ADJOINT
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult, Figure, run_settings
from transformer_limits.verify.experiments import token_independence as ti
from transformer_limits.verify.experiments.attention_models import WorstInputs
from transformer_limits.verify.input_search import check_ladder, sup_error, sup_error_ladder, ascend
from transformer_limits.verify.rate.plots import RateSeries, rate_figure
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.running import jsonable_settings, run_points
from transformer_limits.verify.stats.power_law import fit_power_law

__all__ = ["NAME", "SETTINGS", "causal_ladder", "position_sups", "evaluate_point", "run"]

NAME = "causal-token-independence"
SLOPE_IN_LOG_N = ti.SLOPE_IN_LOG_N
#: token-independence's profiles with the mask, plus the position sups' budget (restarts of f(n)); the
#: full ladder stops at N = 512: the position sups double the cost per level, and N = 1024 alone would
#: cost as much as all the levels below it (measured: 956 s for N <= 512 on 2 loaded cores)
#: the kernel families run() calls, by the settings key naming the CPU backend of each
KERNELS = {"backend": LAYER_ADJOINT}
SETTINGS: dict[str, dict[str, Any]] = {
    profile: dict(s, causal=True, position_restarts=s["restarts"]) for profile, s in ti.SETTINGS.items()}
SETTINGS["full"]["N_levels"] = tuple(n for n in SETTINGS["full"]["N_levels"] if n <= 512)


def _models(s: dict[str, Any], seed: int, j: int, counting_head: float, maps=None):
    """(models, network map A, limit map B) of seed j (:func:`token_independence.seed_maps`), or
    ``maps`` when the caller built them already."""
    return maps if maps is not None else ti.seed_maps(s, seed, j, counting_head=counting_head)


def causal_ladder(s: dict[str, Any], seed: int, j: int, *, counting_head: float = 0.0, maps=None):
    """[(ê(N), the worst input X0 (N, d)) for N in ``N_levels``] for seed j: the max-over-tokens
    ladder (the models' search options: ``token="max"``, ``layout="tile"``), monotone in N."""
    levels = check_ladder(s["N_levels"])
    M, A, B = _models(s, seed, j, counting_head, maps)
    rngs = [np.random.default_rng([seed, 7, i, j]) for i in range(len(levels))]
    return sup_error_ladder(A, B, levels, s["d"], radius=s["radius"], rngs=rngs, restarts=s["restarts"],
                            iterations=s["iterations"], lr=s["ascent_lr"], bottom_restarts=s["bottom_restarts"],
                            jitter=s["jitter"], **M.search)


def position_sups(s: dict[str, Any], seed: int, j: int, warm: list[np.ndarray], *,
                  counting_head: float = 0.0, maps=None) -> list[float]:
    """f(n) = sup over n-token inputs of the last token's error, for n in (1, N_levels...): ascent of
    token −1 from ``position_restarts`` random starts and, for n = N_levels[i], from ``warm[i]``."""
    _, A, B = _models(s, seed, j, counting_head, maps)
    out = []
    for i, n in enumerate((1, *s["N_levels"])):
        kw = dict(radius=s["radius"], iterations=s["iterations"], lr=s["ascent_lr"], token=-1)
        best = sup_error(A, B, n, s["d"], rng=np.random.default_rng([seed, 9, i, j]),
                         restarts=s["position_restarts"], **kw)
        if i:
            best = ascend(A, B, warm[i - 1], best=best, **kw)
        out.append(best[0])
    return out


def token_profile(s: dict[str, Any], seed: int, j: int, X: np.ndarray, *, counting_head: float = 0.0,
                  maps=None) -> list[float]:
    """|x_L^i − X_1^i| for every token i of the input X (N, d)."""
    _, A, B = _models(s, seed, j, counting_head, maps)
    return np.linalg.norm(A.evaluate(X)[0] - B.evaluate(X)[0], axis=1).tolist()


def evaluate_point(point: dict[str, Any]) -> dict[str, Any]:
    """Sweep function: seed j's ladder, its worst inputs, the per-token error profile at each worst
    input (first, middle, last token; the worst token's index) and the position sups f(n)."""
    s, seed, j, c = point["settings"], point["base_seed"], point["j"], point["counting_head"]
    maps = ti.seed_maps(s, seed, j, counting_head=c)  # once per point: every level sees the same maps
    ladder = causal_ladder(s, seed, j, maps=maps)
    profiles = [token_profile(s, seed, j, X, maps=maps) for _, X in ladder]
    return {"errors": [e for e, _ in ladder], "inputs": [X.tolist() for _, X in ladder],
            "worst_token": [int(np.argmax(p)) for p in profiles],
            "profile": [[p[0], p[len(p) // 2 - 1] if len(p) > 1 else p[0], p[-1]] for p in profiles],
            "position_sups": position_sups(s, seed, j, [X for _, X in ladder], maps=maps)}


def runtime_settings(config: ExperimentConfig, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The profile's settings (``settings`` overriding), the layer kernels' backend on ``config.device``."""
    s = run_settings(config, dict(SETTINGS[config.profile], **(settings or {})), KERNELS)
    s.pop("precision", None)  # float64 only (Experiment.precisions)
    return s


def _sweep(config: ExperimentConfig, s: dict[str, Any], counting_head: float) -> dict[str, Any]:
    """The per-seed points through run_points; arrays (levels, seeds) and the worst inputs."""
    grid = {"grid": {"j": list(range(s["seeds"]))},
            "fixed": {"settings": jsonable_settings(s), "base_seed": config.seed,
                      "counting_head": float(counting_head)}}
    sweep = run_points(config, evaluate_point, grid, experiment=NAME, version=2)
    n, seeds = len(s["N_levels"]), s["seeds"]
    arrays = {"errors": np.empty((n, seeds)), "worst_token": np.empty((n, seeds), dtype=int),
              "profile": np.empty((n, 3, seeds)), "position_sups": np.empty((n + 1, seeds))}
    worst, seconds = WorstInputs(s["radius"]), 0.0
    for record in sweep.records:
        j, res = record.params["j"], record.completed_result
        seconds += record.elapsed_s or 0.0
        for key, array in arrays.items():
            array[..., j] = np.asarray(res[key])
        for i, (e, X) in enumerate(zip(res["errors"], res["inputs"])):
            worst.add("masked iid vs prefix limit", f"N={s['N_levels'][i]}", j, e, X, (i,))
    out: dict[str, Any] = dict(arrays, worst=worst, seconds=seconds)
    return out


def _position_figure(N: np.ndarray, sups: np.ndarray, errors: np.ndarray) -> Figure:
    """f(n) by position n (dashed: flat) with the max-over-tokens sup e(N) = max_{n<=N} f(n)."""
    return rate_figure("causal_error_by_position",
                       "error by position: f(n) = sup over inputs of the error of token n (by causality the last "
                       "token of an n-token input; n = 1: one atom), and the max over tokens e(N); dashed: flat",
                       [RateSeries("f(n), last-token sup", np.concatenate([[1.0], N]), sups, None, 0.0),
                        RateSeries("e(N), max-over-tokens sup", N, errors)],
                       xlabel="position n (tokens N)", ylabel="sup error")


def run(config: ExperimentConfig, *, counting_head: float = 0.0, log_n_term: float = 0.0,
        settings: dict[str, Any] | None = None) -> ExperimentResult:
    """``counting_head`` c > 0 / ``log_n_term`` c > 0: the controls (module docstring); ``settings``
    overrides the profile (reduced grids)."""
    s = runtime_settings(config, settings)
    data = _sweep(config, s, counting_head)
    errors, N = data["errors"], np.array(s["N_levels"], dtype=float)
    if log_n_term:
        errors = errors + log_n_term * errors[0].mean() * (np.log(N) / np.log(N[0]))[:, None]
    fit = fit_power_law({"log N": np.log(N)}, errors, window="all", resample="paired", seed=config.seed)
    check = SLOPE_IN_LOG_N.decide(fit)
    lo, hi = fit.interval("exponent", 1 - ti.ALPHA)
    sups, prof, wt = data["position_sups"], data["profile"], data["worst_token"]
    pos_fit = fit_power_law({"log N": np.log(N)}, sups[1:], window="all", resample="paired", seed=config.seed)
    plo, phi = pos_fit.interval("exponent", 1 - ti.ALPHA)
    result = ExperimentResult(NAME, config.profile, checks=[check])
    result.fits = {"log_N": fit.to_dict(), "last_token_log_N": pos_fit.to_dict()}
    result.tables = {
        "errors": [{"N": int(n), "mean_sup_error": float(e.mean()), "min": float(e.min()), "max": float(e.max()),
                    "worst token i*/N (seed mean)": float(((w + 1) / n).mean()),
                    "share worst = last token": float(np.mean(w == n - 1)),
                    "share worst = first token": float(np.mean(w == 0)),
                    "first token error at worst input": float(p[0].mean()),
                    "middle token error at worst input": float(p[1].mean()),
                    "last token error at worst input": float(p[2].mean())}
                   for n, e, w, p in zip(N.astype(int), errors, wt, prof)],
        "error_by_position": [{"position n": int(n), "mean sup error f(n)": float(f.mean()), "min": float(f.min()),
                               "max": float(f.max())} for n, f in zip((1, *s["N_levels"]), sups)],
        "worst_inputs": data["worst"].rows()}
    result.data = {"worst_inputs": data["worst"].data(), "worst_token": wt.tolist()}
    result.notes.append(
        f"Max over tokens: e(N_max)/e(N_min) = {errors.mean(axis=1)[-1] / errors.mean(axis=1)[0]:.3f} for "
        f"N = {int(N[0])}..{int(N[-1])}; exponent of log N b = {fit.exponent.value:.3f} "
        f"(99% CI [{lo:.3f}, {hi:.3f}]; covering growth b = 1/2).")
    result.notes.append(
        f"By position: f(1) = {sups[0].mean():.4g} (token 1 sees one atom), f(N_max/2) = {sups[-2].mean():.4g}, "
        f"f(N_max) = {sups[-1].mean():.4g}; exponent of log N of the last-token sup f(N) b = "
        f"{pos_fit.exponent.value:.3f} (99% CI [{plo:.3f}, {phi:.3f}], diagnostic). The worst token of the "
        f"max-ladder sits at i*/N = {float(((wt[-1] + 1) / N[-1]).mean()):.3f} on average at N = {int(N[-1])}.")
    result.figures = [
        rate_figure("causal_token_independence", f"sup over inputs of max_i |x_L^i − X_1^i| at L = {s['L']}, "
                    f"H = {s['H']} vs log N (dashed: sqrt(log N) growth a covering argument would allow)",
                    [RateSeries("sup_X0 max_i |x_L^i − X_1^i|", np.log(N), errors, fit, 0.5)], xlabel="log N",
                    ylabel="sup error"),
        _position_figure(N, sups, errors)]
    result.provenance = {"seconds": {"errors": data["seconds"]}, "log_n_term": log_n_term,
                         "counting_head": counting_head, "settings": jsonable_settings(s)}
    return result


register_experiment(Experiment(
    name=NAME,
    title="Paper A, causal mask: is the sup-over-inputs error of the masked transformer uniform in N?",
    paper="A",
    claim="conjecture: sup_{X0 in ball^N} max_i |x_L^i − X_1^i| bounded uniformly in N under the causal mask",
    derivations=("attention",),
    checks=(SLOPE_IN_LOG_N,),
    run=run,
    budget_s={"quick": 60.0, "full": 900.0},
    settings=SETTINGS,
    kernels=KERNELS,
))
