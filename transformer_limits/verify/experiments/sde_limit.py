"""Paper B, Theorem 1.1: deep-and-wide limit of the sphere transformer (experiment ``sde-limit``).

Claim (docs/theory.md §B.4): under the paper's coupling,
``E sup_t (1/N) Σ_i |X^i_{⌊Lt/T⌋} − X̄^i_t|² ≤ c (log L/L + 1/m)``; on grid times the L-part is 1/L.

* **L-part** (:func:`depth_errors`): the discrete model (width m, L layers) and the limit SDE are
  driven by the same noise — layer ℓ's MLP output layer is built from the Brownian increments that
  drive the SDE's random-feature field with layer ℓ's features (see
  :func:`~transformer_limits.numeric.sphere.common_noise_sde.coupled_discrete_and_sde`); the SDE runs with
  projected Euler–Maruyama at the fixed fine step T/L_ref.  Errors: grid-time mean-square error at
  t = T, ``(1/N) Σ_i |X^i_L − X̄^i_T|²`` (claim L^-1, check ``exponent_L``), and the sup over all fine
  times (claim log L/L, reported).
* **m-part** (:func:`width_errors`): at fixed L the width-m chain and the Gaussian-field (m = ∞)
  chain share the standard normals Z of every layer (conditional-Gaussian representation of the
  width-m MLP, :func:`~transformer_limits.numeric.sphere.common_noise_sde.coupled_width_chains`); error
  ``(1/N) Σ_i |X^{m,i}_L − X^{∞,i}_L|²`` (claim m^-1, check ``exponent_m``).

Both checks are ``exponent_equals`` (two-sided, α = 0.01, conservative CI = union of the seed
bootstrap percentile and OLS t intervals) with tolerance 0.2 for pre-asymptotic bias.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer_limits.numeric.kernel_family import MLP_FIELD
from transformer_limits.numeric.sphere.common_noise_sde import (
    CommonNoiseSDE,
    coupled_discrete_and_sde,
    coupled_width_chains,
)
from transformer_limits.numeric.sphere.transformer import SphereTransformer, uniform_sphere
from transformer_limits.verify.check_spec import CheckSpec
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult, run_settings
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.running import jsonable_settings, run_points
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.rate.plots import RateSeries, rate_figure

__all__ = ["EXPONENT_L", "EXPONENT_M", "SETTINGS", "depth_row", "depth_errors", "width_row", "width_errors", "evaluate_point",
           "errors_sweep", "run"]

#: the checks (two-sided, tolerance 0.2 for pre-asymptotic bias: docs/verification.md, "Declared tolerances")
#: each must detect half the claimed rate: a mean squared error of order L^-1/2 or m^-1/2 (and the
#: mirror L^-3/2)
#: the claimed exponent of E(1/N)Σ|X − X̄|² in L (grid times) and in m
CLAIMED_EXPONENT = -1.0
EXPONENT_L = CheckSpec("exponent_L", verdict="exponent_equals", claimed=CLAIMED_EXPONENT, alpha=0.01, tolerance=0.2,
                       alternative=-0.5)
EXPONENT_M = CheckSpec("exponent_m", verdict="exponent_equals", claimed=CLAIMED_EXPONENT, alpha=0.01, tolerance=0.2,
                       alternative=-0.5)

#: the kernel families run() calls, by the settings key naming the CPU backend of each
KERNELS = {"backend": MLP_FIELD}
SETTINGS: dict[str, dict[str, Any]] = {
    "quick": dict(d=3, N=8, m=32, T=1.0, sigma_u=0.5, sigma_w=0.5, activation="relu",
                  attention="attractive", L_levels=(8, 16, 32, 64, 128), L_ref=512, seeds_L=24,
                  m_levels=(8, 16, 32, 64, 128, 256), L_m=32, seeds_m=48, backend="numba"),
    "full": dict(d=3, N=8, m=32, T=1.0, sigma_u=0.5, sigma_w=0.5, activation="relu",
                 attention="attractive", L_levels=(8, 16, 32, 64, 128, 256), L_ref=2048, seeds_L=64,
                 m_levels=(8, 16, 32, 64, 128, 256, 512, 1024), L_m=64, seeds_m=64, backend="numpy"),
}


def _model(s: dict[str, Any], L: int, m: int, **overrides) -> SphereTransformer:
    kw = dict(d=s["d"], m=m, L=L, T=s["T"], activation=s["activation"], sigma_u=s["sigma_u"],
              sigma_w=s["sigma_w"], attention=s["attention"], backend=s.get("backend", "numpy"))
    kw.update(overrides)
    return SphereTransformer(**kw)


def depth_row(s: dict[str, Any], seed: int, i: int, *, model_overrides: dict | None = None,
              sde_overrides: dict | None = None, renormalise: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(grid errors, sup errors) at depth level i, each (seeds_L,): seed j uses the generator
    ``[seed, 1, i, j]``, so a row does not depend on which process computes it."""
    L = s["L_levels"][i]
    model = _model(s, L, s["m"], **(model_overrides or {}))
    sde = CommonNoiseSDE.from_model(model, **(sde_overrides or {}))
    rngs = [np.random.default_rng([seed, 1, i, j]) for j in range(s["seeds_L"])]
    X0s = np.stack([uniform_sphere(s["N"], s["d"], rng) for rng in rngs])  # each seed's X0 before its noise
    # the seeds' couplings advance together (bitwise one run per seed)
    X, Xbar, sup = coupled_discrete_and_sde(model, sde, X0s, s["L_ref"] // L, rngs, renormalise=renormalise)
    return np.mean(np.sum((X[:, -1] - Xbar[:, -1]) ** 2, axis=-1), axis=-1), np.asarray(sup, dtype=np.float64)


def depth_errors(s: dict[str, Any], seed: int, *, model_overrides: dict | None = None,
                 sde_overrides: dict | None = None, renormalise: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(grid errors, sup errors), each (n_L, seeds_L), serially; overrides build deliberately wrong models."""
    rows = [depth_row(s, seed, i, model_overrides=model_overrides, sde_overrides=sde_overrides,
                      renormalise=renormalise) for i in range(len(s["L_levels"]))]
    return np.array([g for g, _ in rows]), np.array([u for _, u in rows])


def width_row(s: dict[str, Any], seed: int, i: int) -> np.ndarray:
    """Mean-square distance of the width-m and m = ∞ chains at layer L_m at width level i, (seeds_m,);
    seed j uses the generator ``[seed, 2, i, j]``."""
    model = _model(s, s["L_m"], s["m_levels"][i])
    sde = CommonNoiseSDE.from_model(model)
    rngs = [np.random.default_rng([seed, 2, i, j]) for j in range(s["seeds_m"])]
    X0s = np.stack([uniform_sphere(s["N"], s["d"], rng) for rng in rngs])
    Xm, Xinf = coupled_width_chains(model, sde, X0s, rngs)  # the seeds' chains together, bitwise per seed
    return np.mean(np.sum((Xm - Xinf) ** 2, axis=-1), axis=-1)


def width_errors(s: dict[str, Any], seed: int) -> np.ndarray:
    """Mean-square distance of the width-m and m = ∞ chains at layer L_m, (n_m, seeds_m), serially."""
    return np.array([width_row(s, seed, i) for i in range(len(s["m_levels"]))])


def evaluate_point(point: dict[str, Any]) -> dict[str, Any]:
    """Sweep function: one level's row, ``{"grid", "sup"}`` for ``task = "depth:i"``, ``{"width"}`` for
    ``"width:i"`` (rows are independent: their generators are keyed by level and seed)."""
    kind, i = point["task"].split(":")
    s, seed = point["settings"], point["base_seed"]
    if kind == "depth":
        grid, sup = depth_row(s, seed, int(i))
        return {"grid": grid.tolist(), "sup": sup.tolist()}
    return {"width": width_row(s, seed, int(i)).tolist()}


def errors_sweep(config: ExperimentConfig, s: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """(grid, sup, width) errors as :func:`depth_errors` and :func:`width_errors` return them, bitwise,
    with one sweep point per level (``config.workers`` processes, resumable with ``config.store``);
    and the summed point seconds of each family."""
    tasks = [f"depth:{i}" for i in range(len(s["L_levels"]))] + [f"width:{i}" for i in range(len(s["m_levels"]))]
    sweep = run_points(config, evaluate_point, {"grid": {"task": tasks},
                                                "fixed": {"settings": jsonable_settings(s), "base_seed": config.seed}},
                       experiment="sde-limit", version=1)
    rows = {r.params["task"]: r for r in sweep.records}
    depth = [rows[f"depth:{i}"].completed_result for i in range(len(s["L_levels"]))]
    width = [rows[f"width:{i}"].completed_result["width"] for i in range(len(s["m_levels"]))]
    seconds = {kind: sum(r.elapsed_s or 0.0 for t, r in rows.items() if t.startswith(kind)) for kind in ("depth", "width")}
    return (np.array([d["grid"] for d in depth]), np.array([d["sup"] for d in depth]), np.array(width), seconds)


def _table(name: str, levels, errors: np.ndarray) -> list[dict[str, Any]]:
    return [{name: int(p), "mean_error": float(e.mean()), "sem": float(e.std(ddof=1) / np.sqrt(e.size))}
            for p, e in zip(levels, errors)]


def run(config: ExperimentConfig) -> ExperimentResult:
    # the MLP-field backend on config.device (the settings' numba on cpu); the couplings
    # stay on the device when model and SDE share a GPU backend
    s = run_settings(config, SETTINGS[config.profile], KERNELS)
    grid, sup, width, seconds = errors_sweep(config, s)
    L, m = np.array(s["L_levels"]), np.array(s["m_levels"])
    fit_L = fit_power_law({"L": L}, grid, expected=CLAIMED_EXPONENT, window="all", seed=config.seed)
    fit_sup = fit_power_law({"L": L}, sup, window="all", seed=config.seed)
    fit_m = fit_power_law({"m": m}, width, expected=CLAIMED_EXPONENT, window="all", seed=config.seed)
    log_ratio = sup.mean(axis=1) / (np.log(L) / L)
    result = ExperimentResult(experiment="sde-limit", profile=config.profile)
    result.estimates = {EXPONENT_L.name: fit_L, EXPONENT_M.name: fit_m}  # the runner decides (declared verdicts)
    result.fits = {"L_grid": fit_L.to_dict(), "L_sup": fit_sup.to_dict(), "m": fit_m.to_dict()}
    result.tables = {"depth_grid": _table("L", L, grid), "depth_sup": _table("L", L, sup),
                     "width": _table("m", m, width)}
    lo, hi = fit_sup.interval("exponent")
    result.notes.append(
        f"sup-in-time error: fitted slope {fit_sup.exponent.value:.3f} (95% CI [{lo:.3f}, {hi:.3f}]); "
        f"sup_err·L/log L = {', '.join(f'{v:.3g}' for v in log_ratio)} (bounded ⇔ log L/L rate)")
    result.figures = [
        rate_figure("sde_limit_depth", "Coupled discrete model vs limit SDE: mean-square error vs depth L",
                    [RateSeries("grid time t = T", L, grid, fit_L, CLAIMED_EXPONENT),
                     RateSeries("sup over t", L, sup, fit_sup, CLAIMED_EXPONENT)], xlabel="depth L",
                    ylabel="(1/N) Σ|X − X̄|²"),
        rate_figure("sde_limit_width", "Width-m vs Gaussian-field chain (same Z): mean-square error vs m",
                    [RateSeries("t = T", m, width, fit_m, CLAIMED_EXPONENT)], xlabel="width m",
                    ylabel="(1/N) Σ|X^m − X^∞|²"),
    ]
    result.provenance["seconds"] = seconds
    return result


register_experiment(Experiment(
    name="sde-limit",
    title="Deep-and-wide limit: discrete sphere transformer → common-noise SDE (rates in L and m)",
    paper="B",
    claim="E (1/N)Σ|X_{⌊Lt/T⌋} − X̄_t|² ≤ c(1/L + 1/m) on grid times (log L/L for sup_t)",
    derivations=("mlp-kernel",),
    checks=(EXPONENT_L, EXPONENT_M),
    run=run,
    budget_s={"quick": 70.0, "full": 180.0},
    settings=SETTINGS,
    kernels=KERNELS,
))
