"""Paper A: AdamW keeps the head parameters in a box; blockwise AdamW makes its drift dimension-free
(experiment ``adamw-box``).

Claim (docs/theory.md §A.4, derivation ``adamw-box``): every Adam direction satisfies |m̂_k|/√v̂_k ≤ C_β(k)
per coordinate (AdamW) or ‖m̂_k^B‖_F/√v̂_k^B ≤ C_β(k) per block (blockwise), whatever the gradients; with
*decoupled* weight decay λ this gives the radius recursion R_k = |1 − ηλ| R_{k−1} + η C_β(k)
(:func:`~transformer_limits.numeric.optim.adamw.adamw_box_radius_path`).

**box_holds** (deterministic): the paper-A model is trained with AdamW and with Blockwise AdamW
(``train_with_radii``, exact adjoint gradients) at the experiment's lr / λ / β / K; for every step k,
layer, head and matrix the measured Frobenius radius (≥ the operator radius) must be ≤ the bound for
that step: blockwise ``R_k`` with R_0 = ‖θ_0^B‖_F; coordinatewise ``‖(R_{k,i})_i‖_2`` where R_{k,i} is
the coordinate recursion started at |θ_{0,i}| (so ‖θ_k‖_F ≤ ‖R_k‖_2).  The derivation's closed-form
R_θ(K) (R_0 = max|θ_0|, times √|B| for Frobenius) is reported next to it.  The loss is multiplied by
``loss_scale``: AdamW is invariant to it (up to ε), but *coupled* L2 decay (λθ added to the gradient,
then normalised by √v̂) is drowned by a large gradient, so that deliberately wrong "AdamW" leaves the
box.

**blockwise_dimension_free**: drift D(d) = mean over heads and matrices of ‖θ_K − θ_0‖_F for token
dimensions d (d_k, d_v fixed, so every block has ∝ d entries).  Fit D ∝ d^q over seeds
(``fit_power_law``, conservative CI, α = 0.01).  Blockwise: ``slope_zero`` with tolerance 0.1;
``coordinatewise_exponent`` (reported): ``exponent_equals(+1/2, tolerance 0.15)`` — a coordinatewise
step moves each of the ∝ d entries by ≈ η, so ‖Δθ‖_F ∝ √d.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import transformer_limits
from transformer_limits.numeric.optim.adamw import adamw_box_radius_path
from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map
from transformer_limits.numeric.attention.transformer import PARAM_NAMES, AttentionTransformer, init_params
from transformer_limits.numeric.attention.training import train_with_radii
from transformer_limits.verify.check_spec import CheckSpec
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.running import jsonable_settings, run_points
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.rate.plots import RateSeries, rate_figure
from transformer_limits.verify.stats.power import deterministic_power
from transformer_limits.verify.verdicts import Check, attach_power, exponent_equals, slope_zero

__all__ = ["BOX_HOLDS", "BLOCKWISE_DIMENSION_FREE", "COORDINATEWISE_EXPONENT", "SETTINGS", "ScaledLoss",
           "CoupledDecayModel", "box_margins", "drift_by_dimension", "drift_row", "evaluate_point", "run"]

#: the checks; the tolerances are justified in the "Declared tolerances" table of docs/verification.md
BOX_HOLDS = CheckSpec("box_holds", "||theta_k^B||_F <= R_k (AdamW box recursion, every step, head and matrix)",
                      verdict="deterministic", alpha=0.0,
                      alternative_text="a radius above its bound R_k at a simulated step (exact comparison)")
#: passes when the drift exponent of d lies within ±0.1 of 0
BLOCKWISE_DIMENSION_FREE = CheckSpec("blockwise_dimension_free", verdict="slope_zero", alpha=0.01, tolerance=0.1,
                                     alternative=0.5)  # the coordinatewise sqrt(d) growth
#: passes when the drift exponent of d lies within ±0.15 of 1/2
COORDINATEWISE_EXPONENT = CheckSpec("coordinatewise_exponent", verdict="exponent_equals", alpha=0.01, tolerance=0.15,
                                    alternative=0.0)  # a dimension-free drift

SETTINGS: dict[str, dict[str, Any]] = {
    "quick": dict(d=4, d_k=2, d_v=2, L=2, H=2, N=8, box_steps=40, lr=0.05, weight_decay=4.0,
                  betas=(0.9, 0.999), eps=1e-8, loss_scale=1e4, box_seeds=3,
                  d_levels=(4, 8, 16, 32, 64), drift_steps=15, drift_lr=0.01, drift_seeds=8),
    "full": dict(d=8, d_k=4, d_v=4, L=4, H=4, N=16, box_steps=200, lr=0.05, weight_decay=4.0,
                 betas=(0.9, 0.999), eps=1e-8, loss_scale=1e4, box_seeds=8,
                 d_levels=(4, 8, 16, 32, 64, 128, 256), drift_steps=40, drift_lr=0.01, drift_seeds=24),
}


@dataclass
class ScaledLoss:
    """``scale`` × a base loss (AdamW is invariant to the scale up to ε)."""

    base: Any
    scale: float

    def value(self, X: Any) -> float:
        return self.scale * self.base.value(X)

    def grad(self, X: Any) -> np.ndarray:
        return self.scale * self.base.grad(X)


class CoupledDecayModel(AttentionTransformer):
    """Deliberately wrong optimiser, expressed through the model: the gradients it reports carry the
    L2 term λθ ("Adam + L2", decay coupled to the gradient); train it with weight_decay = 0."""

    l2: float = 0.0

    def loss_and_grad(self, X0: Any, params: dict[str, Any], loss: Any, head_weights: Any = None):
        value, grads, fwd, adj = super().loss_and_grad(X0, params, loss, head_weights)
        grads = {k: g + self.l2 * np.asarray(params[k]) for k, g in grads.items()}
        return value, grads, fwd, adj


def _problem(s: dict[str, Any], d: int, seed: int):
    X0 = sample_tokens(s["N"], d, seed=seed)
    loss = ScaledLoss(SquaredErrorLoss(3.0 * target_map(X0, seed=seed + 1)), s["loss_scale"])
    params = init_params(s["L"], s["H"], d, s["d_k"], s["d_v"], seed=seed + 2)
    return X0, loss, params


def box_margins(s: dict[str, Any], seed: int, optimizer: str, *, coupled: bool = False) -> dict[str, Any]:
    """Train, compare every measured Frobenius radius with its step-k bound; returns the worst ratio
    measured/bound and the final radii."""
    d = s["d"]
    X0, loss, params = _problem(s, d, seed)
    beta1, beta2 = s["betas"]
    lam = s["weight_decay"]
    if coupled:
        coupled_model = CoupledDecayModel(d, s["d_k"], s["d_v"], backend="blas")
        coupled_model.l2 = lam
        radii = train_with_radii(coupled_model, X0, params, loss, s["box_steps"], optimizer=optimizer, lr=s["lr"],
                                 betas=s["betas"], eps=s["eps"], weight_decay=0.0)
    else:
        model = AttentionTransformer(d, s["d_k"], s["d_v"], backend="blas")
        radii = train_with_radii(model, X0, params, loss, s["box_steps"], optimizer=optimizer, lr=s["lr"],
                                 betas=s["betas"], eps=s["eps"], weight_decay=lam)
    K = s["box_steps"]
    worst, worst_closed = 0.0, 0.0
    final_measured, final_bound = [], []
    for name in PARAM_NAMES:
        measured = radii.frobenius[name]  # (K+1, L, H)
        theta0 = params[name]
        if optimizer == "blockwise":
            R0 = np.linalg.norm(theta0, axis=(-2, -1))
            bound = adamw_box_radius_path(R0, s["lr"], lam, beta1, beta2, K, norm="blockwise")
            closed = transformer_limits.derivation_values("adamw-box", beta1=beta1, beta2=beta2, lr=s["lr"],
                                                          weight_decay=lam, R0=float(R0.max()),
                                                          steps=K)["R_theta_blockwise"]
        else:
            path = adamw_box_radius_path(np.abs(theta0), s["lr"], lam, beta1, beta2, K)
            bound = np.linalg.norm(path, axis=(-2, -1))
            closed = transformer_limits.derivation_values(
                "adamw-box", beta1=beta1, beta2=beta2, lr=s["lr"], weight_decay=lam,
                R0=float(np.abs(theta0).max()), steps=K,
                entries=int(theta0.shape[-1] * theta0.shape[-2]))["R_theta_coordinatewise_frobenius"]
        worst = max(worst, float(np.max(measured / bound)))
        worst_closed = max(worst_closed, float(measured[-1].max() / closed))
        final_measured.append(float(measured[-1].max()))
        final_bound.append(float(bound[-1].max()))
    return {"worst_ratio": worst, "worst_ratio_closed_form": worst_closed,
            "max_final_radius": max(final_measured), "max_final_bound": max(final_bound),
            "max_operator_radius": float(radii.max_radius("operator").max()),
            "loss_first": float(radii.losses[0]), "loss_last": float(radii.losses[-1])}


def drift_row(s: dict[str, Any], seed: int, optimizer: str, i: int) -> tuple[np.ndarray, np.ndarray]:
    """(Frobenius, operator) drift ‖θ_K − θ_0‖ averaged over heads and matrices at dimension level i,
    each (seeds,)."""
    d = s["d_levels"][i]
    model = AttentionTransformer(d, s["d_k"], s["d_v"], backend="blas")
    fro, op = np.empty(s["drift_seeds"]), np.empty(s["drift_seeds"])
    for j in range(s["drift_seeds"]):
        X0, loss, params = _problem(s, d, seed * 1000 + 10 * j)
        radii = train_with_radii(model, X0, params, loss, s["drift_steps"], optimizer=optimizer,
                                 lr=s["drift_lr"], betas=s["betas"], eps=s["eps"], weight_decay=0.0)
        fro[j] = np.mean([radii.drift_frobenius[n][-1].mean() for n in PARAM_NAMES])
        op[j] = np.mean([radii.drift_operator[n][-1].mean() for n in PARAM_NAMES])
    return fro, op


def drift_by_dimension(s: dict[str, Any], seed: int, optimizer: str) -> tuple[np.ndarray, np.ndarray]:
    """(Frobenius, operator) drift ‖θ_K − θ_0‖ averaged over heads and matrices, each (n_d, seeds),
    serially (:func:`drift_row` per level)."""
    rows = [drift_row(s, seed, optimizer, i) for i in range(len(s["d_levels"]))]
    return np.array([f for f, _ in rows]), np.array([o for _, o in rows])


def evaluate_point(point: dict[str, Any]) -> dict[str, Any]:
    """Sweep function: ``task = "box:<optimizer>:<j>"`` is one training run's box margins
    (:func:`box_margins`, seed base·1000 + j), ``"drift:<optimizer>:<i>"`` one dimension level's drifts
    (:func:`drift_row`); every task draws from its own seeds, so no result depends on the process."""
    kind, optimizer, index = point["task"].split(":")
    s, seed = point["settings"], point["base_seed"]
    if kind == "box":
        return {"row": box_margins(s, seed * 1000 + int(index), optimizer, coupled=point["coupled"])}
    fro, op = drift_row(s, seed, optimizer, int(index))
    return {"fro": fro.tolist(), "op": op.tolist()}


_OPTIMIZERS = ("adamw", "blockwise")


def _sweep(config: ExperimentConfig, s: dict[str, Any], coupled: bool
           ) -> tuple[list[dict[str, Any]], dict[str, tuple[np.ndarray, np.ndarray]], dict[str, float]]:
    """(box rows, drifts per optimizer, summed point seconds of each family), one sweep point per
    training run of the box and per dimension level of the drift (``config.workers`` processes)."""
    box = [f"box:{opt}:{j}" for opt in _OPTIMIZERS for j in range(s["box_seeds"])]
    drift = [f"drift:{opt}:{i}" for opt in _OPTIMIZERS for i in range(len(s["d_levels"]))]
    sweep = run_points(config, evaluate_point,
                       {"grid": {"task": box + drift},
                        "fixed": {"settings": jsonable_settings(s), "base_seed": config.seed, "coupled": coupled}},
                       experiment="adamw-box", version=1)
    rows = {r.params["task"]: r for r in sweep.records}
    box_rows = [dict(optimizer=t.split(":")[1], seed=int(t.split(":")[2]), **rows[t].completed_result["row"])
                for t in box]
    drifts = {opt: (np.array([rows[f"drift:{opt}:{i}"].completed_result["fro"] for i in range(len(s["d_levels"]))]),
                    np.array([rows[f"drift:{opt}:{i}"].completed_result["op"] for i in range(len(s["d_levels"]))]))
              for opt in _OPTIMIZERS}
    seconds = {kind: sum(r.elapsed_s or 0.0 for t, r in rows.items() if t.startswith(kind)) for kind in ("box", "drift")}
    return box_rows, drifts, seconds


def _box_check(rows: list[dict[str, Any]], settings: dict[str, Any]) -> Check:
    worst = max(r["worst_ratio"] for r in rows)
    passed = worst <= 1.0 + 1e-12
    note = "" if passed else f"a measured radius exceeds its step-k bound by a factor {worst:.3g}"
    check = Check(BOX_HOLDS.name, BOX_HOLDS.claim, 1.0, worst, (0.0, 1.0), passed,
                  {"alpha": BOX_HOLDS.alpha, "false_failure_rate": BOX_HOLDS.alpha, "sides": "one-sided",
                   "method": "deterministic",
                   "lr": settings["lr"], "weight_decay": settings["weight_decay"], "betas": list(settings["betas"]),
                   "steps": settings["box_steps"]}, note)
    # no sampling noise: any simulated radius above its bound fails the comparison
    return attach_power(check, deterministic_power(True), BOX_HOLDS.alternative_text, model="deterministic")


def run(config: ExperimentConfig, *, coupled_decay: bool = False,
        settings: dict[str, Any] | None = None) -> ExperimentResult:
    """``coupled_decay=True`` trains with L2 added to the gradient (the deliberately wrong "AdamW")."""
    s = dict(SETTINGS[config.profile], **(settings or {}))
    rows, drifts, seconds = _sweep(config, s, coupled_decay)
    d = np.array(s["d_levels"])
    fit_b = fit_power_law({"d": d}, drifts["blockwise"][0], window="all", seed=config.seed)
    fit_c = fit_power_law({"d": d}, drifts["adamw"][0], window="all", seed=config.seed)
    fit_b_op = fit_power_law({"d": d}, drifts["blockwise"][1], window="all", seed=config.seed)
    fit_c_op = fit_power_law({"d": d}, drifts["adamw"][1], window="all", seed=config.seed)
    spec_b, spec_c = BLOCKWISE_DIMENSION_FREE, COORDINATEWISE_EXPONENT
    check_b = slope_zero(fit_b, spec_b.required_alpha, tolerance=spec_b.required_tolerance,
                         alternative=spec_b.required_alternative)
    check_b.name = spec_b.name
    check_c = exponent_equals(fit_c, 0.5, spec_c.required_alpha, tolerance=spec_c.required_tolerance,
                              alternative=spec_c.required_alternative)
    check_c.name = spec_c.name
    result = ExperimentResult("adamw-box", config.profile, checks=[_box_check(rows, s), check_b, check_c])
    result.fits = {"blockwise_frobenius": fit_b.to_dict(), "adamw_frobenius": fit_c.to_dict(),
                   "blockwise_operator": fit_b_op.to_dict(), "adamw_operator": fit_c_op.to_dict()}
    exps = []
    for label, fit in (("blockwise, Frobenius", fit_b), ("coordinatewise, Frobenius", fit_c),
                       ("blockwise, operator", fit_b_op), ("coordinatewise, operator", fit_c_op)):
        lo, hi = fit.interval("exponent", 1 - spec_b.required_alpha)
        exps.append({"drift": label, "exponent_of_d": fit.exponent.value, "ci_low_99": lo, "ci_high_99": hi})
    result.tables = {"box": rows, "drift_exponents": exps,
                     "drift": [{"d": int(dd), **{f"{opt}_{kind}": float(drifts[opt][k][i].mean())
                                                for opt in drifts for k, kind in enumerate(("fro", "op"))}}
                               for i, dd in enumerate(d)]}
    result.notes.append(
        f"box: worst measured/bound ratio {max(r['worst_ratio'] for r in rows):.3g} "
        f"({'coupled L2 decay' if coupled_decay else 'decoupled decay'}); the derivation's closed-form "
        f"R_theta(K) ratio {max(r['worst_ratio_closed_form'] for r in rows):.3g}.")
    result.figures = [rate_figure(
        "adamw_drift_vs_d", "Drift ‖θ_K − θ_0‖_F per head matrix vs token dimension d",
        [RateSeries("AdamW (coordinatewise)", d, drifts["adamw"][0], fit_c, 0.5),
         RateSeries("Blockwise AdamW", d, drifts["blockwise"][0], fit_b, 0.0)],
        xlabel="token dimension d", ylabel="‖θ_K − θ_0‖_F")]
    result.provenance.update(seconds=seconds, coupled_decay=coupled_decay)
    if settings:  # run_experiment records the profile's settings; these differ from them
        result.provenance["settings"] = jsonable_settings(s)
    return result


register_experiment(Experiment(
    name="adamw-box",
    title="Paper A: AdamW parameter box R_theta and dimension-free drift of Blockwise AdamW",
    paper="A",
    claim="||theta_k|| <= R_k (decoupled AdamW recursion); blockwise drift independent of d, "
          "coordinatewise drift ∝ sqrt(d)",
    derivations=("adamw-box",),
    checks=(BOX_HOLDS, BLOCKWISE_DIMENSION_FREE, COORDINATEWISE_EXPONENT),
    run=run,
    budget_s={"quick": 10.0, "full": 60.0},
    settings=SETTINGS,
))
