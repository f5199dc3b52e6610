"""Paper B, Theorem 1.4: synchronisation by noise (experiment ``synchronization``).

Claim (docs/theory.md §B.6): under Assumption 1 (λ̄ = (d−1)k'(1) − (d−3)k(1) < 0) and Assumption 2
(ε = 0 for attractive attention with Q^TK = βI, V = I),
``E[E_β(μ_t)] ≤ exp((ε + λ̄') t) E[E_β(μ_0)]`` with ``λ̄' = −min_{[−1,1]} F < 0`` taken from the
derivation ``lyapunov`` (value ``lambda_bar_prime``).

Simulation: N tokens, the limit SDE with the field sampled exactly in law at the token positions
(projected Euler–Maruyama, :class:`~transformer_limits.numeric.sphere.common_noise_sde.CommonNoiseSDE`),
E_β(μ^N_t) recorded at ``n_eval`` times; the decay rate r is the OLS slope of log E[E_β(μ_t)] in t,
fitted with :func:`~transformer_limits.verify.stats.power_law.fit_power_law` on p = e^t (so the power-law
exponent *is* the exponential rate; seed bootstrap + t interval, "conservative").

Checks:

* ``decay_rate_bound`` — the theorem's content is a decay bound, so it fails when (a) the claimed
  rate ε + λ̄' is not negative (the Draft-A typo "λ̄' > 0" / a sign error) or (b) the measured rate is
  significantly slower than the bound: lower (1 − α) confidence bound of r above ε + λ̄' (one-sided,
  α = 0.01; ``rate_at_least``).
* ``sign_change_d3`` — contrast without attention at the same biases: λ̄ changes sign across d = 3
  (λ̄(d=3) > 0 > λ̄(d=d_sync), from the derivation), and where λ̄ > 0 the energy decays significantly
  slower: the lower (1 − α) bootstrap bound of r(d=3) − r(d_sync) is > 0 (one-sided; seeds of the
  two settings are independent, so the difference's bootstrap pairs independent resamples).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import transformer_limits
from transformer_limits.numeric.kernel_family import MLP_FIELD
from transformer_limits.numeric.sphere.common_noise_sde import CommonNoiseSDE
from transformer_limits.numeric.sphere.transformer import interaction_energy, uniform_sphere
from transformer_limits.verify.check_spec import CheckSpec
from transformer_limits.verify.experiment import (Experiment, ExperimentConfig, ExperimentResult, Figure, PrecisionError,
                                                  run_settings)
from transformer_limits.verify.figures import figure_png
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.running import jsonable_settings, run_points
from transformer_limits.verify.stats.beta_difference import bootstrap_difference_bounds
from transformer_limits.verify.stats.power_law import PowerLawFit, fit_power_law
from transformer_limits.verify.verdicts import Check, attach_power, rate_at_least

__all__ = ["DECAY_RATE_BOUND", "SIGN_CHANGE_D3", "SETTINGS", "energy_samples", "decay_fit", "decay_rate_check",
           "sign_change_check", "run"]

#: the checks (one-sided, alpha = 0.01 each)
#: (the claimed rate ε + λ̄' comes from the derivation ``lyapunov`` at run time; the alternative is no
#: decay at all, rate 0, |ε + λ̄'| slower than the bound)
DECAY_RATE_BOUND = CheckSpec("decay_rate_bound", verdict="rate_at_least and the sign of ε + λ̄'", alpha=0.01,
                             alternative=0.0, alternative_text="no synchronization: E[E_β] not decaying (rate 0)")
SIGN_CHANGE_D3 = CheckSpec("sign_change_d3", "λ̄ > 0 (d ≤ 3) ⇒ no guaranteed decay: r(λ̄>0) − r(λ̄<0) > 0",
                           verdict="lower bootstrap bound of a rate difference", alpha=0.01, claimed=0.0,
                           alternative_text="no difference: decay where λ̄ > 0 as fast as where λ̄ < 0")

#: the kernel families run() calls, by the settings key naming the CPU backend of each
KERNELS = {"backend": MLP_FIELD}
SETTINGS: dict[str, dict[str, Any]] = {
    "quick": dict(d_sync=8, d_contrast=3, N=16, T=2.0, n_steps=200, n_eval=9, seeds=32,
                  activation="relu", sigma_u=0.5, sigma_w=0.5, beta=1.0, backend="numba"),
    "full": dict(d_sync=8, d_contrast=3, N=32, T=3.0, n_steps=600, n_eval=13, seeds=128,
                 activation="relu", sigma_u=0.5, sigma_w=0.5, beta=1.0, backend="numba"),
}


def lyapunov_values(s: dict[str, Any], d: int) -> dict[str, Any]:
    # cached on disk: a warm run does not rebuild the derivation (SymPy, the Gegenbauer checks)
    return transformer_limits.derivation_values("lyapunov", activation=s["activation"], d=d, sigma_u=s["sigma_u"],
                                                sigma_w=s["sigma_w"], beta=s["beta"])


def energy_samples(s: dict[str, Any], d: int, attention: str, seed: int,
                   seeds: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(times (n_eval,), E_β(μ^N_t) samples (n_eval, seeds)): the runs j = 0 .. seeds−1 (default
    ``s["seeds"]``), each from its own generator ``[seed, d, j]`` (initial tokens, then the noise), all
    in one :meth:`~CommonNoiseSDE.simulate_batch` (one launch per step for all runs on a GPU backend)
    on ``s["backend"]`` (default numpy) in ``s["precision"]`` (default float64); E_β in float64."""
    sde = CommonNoiseSDE(d, s["activation"], s["sigma_u"], s["sigma_w"], attention=attention, beta=s["beta"],
                         backend=s.get("backend", "numpy"), precision=s.get("precision", "float64"))
    idx = np.linspace(0, s["n_steps"], s["n_eval"]).round().astype(int)
    rngs = [np.random.default_rng([seed, d, j]) for j in range(s["seeds"] if seeds is None else seeds)]
    X0s = np.stack([uniform_sphere(s["N"], d, rng) for rng in rngs])
    traj = np.asarray(sde.simulate_batch(X0s, s["T"], s["n_steps"], rngs), dtype=np.float64)
    out = np.array([[interaction_energy(traj[j, k], s["beta"]) for j in range(len(rngs))] for k in idx])
    return idx * (s["T"] / s["n_steps"]), out


#: the energy curves of a run: result key, the setting naming its dimension, the attention
CURVES = (("attractive", "d_sync", "attractive"), ("noise_only", "d_sync", "none"),
          ("noise_only_contrast", "d_contrast", "none"))


def energy_point(point: dict[str, Any]) -> dict[str, Any]:
    """Sweep function: one curve of :data:`CURVES` as :func:`energy_samples` gives it (its runs'
    generators are keyed by seed, d and run index, so the curves are independent points)."""
    _, dim, attention = next(c for c in CURVES if c[0] == point["curve"])
    s = point["settings"]
    times, energies = energy_samples(s, s[dim], attention, point["base_seed"])
    return {"times": times.tolist(), "energies": energies.tolist()}


def energy_curves(config: ExperimentConfig, s: dict[str, Any]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """key -> (times, energies) of every curve of :data:`CURVES`, bitwise as :func:`energy_samples`
    returns them, one sweep point per curve (``config.workers`` processes: both cores busy)."""
    sweep = run_points(config, energy_point,
                       {"grid": {"curve": [key for key, _, _ in CURVES]},
                        "fixed": {"settings": jsonable_settings(s), "base_seed": config.seed}},
                       experiment="synchronization", version=1)
    rows = {r.params["curve"]: r.completed_result for r in sweep.records}
    return {key: (np.array(rows[key]["times"], dtype=np.float64), np.array(rows[key]["energies"], dtype=np.float64))
            for key, _, _ in CURVES}


def _runtime_settings(config: ExperimentConfig) -> dict[str, Any]:
    """The profile's settings plus the backend of the MLP-field kernels on ``config.device`` and the
    precision (numpy in float64 on cpu: the run as it always was)."""
    return dict(run_settings(config, SETTINGS[config.profile], KERNELS), precision=config.precision)


def precision_probe(config: ExperimentConfig) -> PrecisionError:
    """E_β(μ_t) at the evaluation times of run j = 0 (attention, d_sync): the run's float32 backend
    against the float64 NumPy reference."""
    s = _runtime_settings(config)
    y32 = energy_samples(s, s["d_sync"], "attractive", config.seed, seeds=1)[1]
    y64 = energy_samples(dict(s, precision="float64", backend="numpy"), s["d_sync"], "attractive", config.seed,
                         seeds=1)[1]
    return PrecisionError.between(f"E_β(μ_t) of one run (d = {s['d_sync']}, N = {s['N']}, attention) at "
                                  f"{s['n_eval']} times", y32, y64)


def decay_fit(times: np.ndarray, energies: np.ndarray, seed: int = 0) -> PowerLawFit:
    """log E[E_β] ≈ log C + r t, as a power law in p = e^t (exponent = rate r)."""
    return fit_power_law({"e^t": np.exp(times)}, energies, window="all", seed=seed)


def decay_rate_check(fit: PowerLawFit, bound_rate: float, alpha: float = DECAY_RATE_BOUND.required_alpha) -> Check:
    """``decay_rate_bound``: the claimed rate is a decay and the measured rate is not slower."""
    # the violation to detect (declared): no decay at all, |ε + λ̄'| slower than the bound; a claimed rate
    # ≥ 0 is no decay bound, and has no slower alternative
    no_decay = DECAY_RATE_BOUND.required_alternative
    base = rate_at_least(fit, bound_rate, alpha, alternative=no_decay if bound_rate < no_decay else None)
    sign_ok = bound_rate < no_decay
    passed = base.passed and sign_ok
    notes = [] if sign_ok else [f"claimed rate ε + λ̄' = {bound_rate:.4g} ≥ 0: not a decay bound "
                                "(Theorem 1.4 gives λ̄' < 0; sign error)"]
    if not base.passed:
        notes.append(base.note)
    st = dict(base.statistics, bound_rate=bound_rate)
    check = Check(DECAY_RATE_BOUND.name, f"E[E_β(μ_t)] ≤ exp((ε+λ̄')t) E[E_β(μ_0)], ε+λ̄' = {bound_rate:.4g} < 0",
                  bound_rate, base.measured, base.ci, passed, st, "; ".join(notes))
    if base.power is not None:
        attach_power(check, base.power, DECAY_RATE_BOUND.alternative_text,
                     distance=no_decay - bound_rate, half_width=base.measured - base.ci[0], se=fit.exponent.standard_error)
    return check


def sign_change_check(fit_pos: PowerLawFit, fit_neg: PowerLawFit, lambda_bar_pos: float,
                      lambda_bar_neg: float, alpha: float = SIGN_CHANGE_D3.required_alpha) -> Check:
    """``sign_change_d3``: λ̄ > 0 at the contrast setting, < 0 at the synchronising one, and the decay
    rate is significantly slower where λ̄ > 0 (one-sided bootstrap bound of the rate difference)."""
    measured = fit_pos.exponent.value - fit_neg.exponent.value
    low = bootstrap_difference_bounds(fit_pos.exponent.required_bootstrap, fit_neg.exponent.required_bootstrap,
                                      alpha)["lower"]
    signs = lambda_bar_pos > 0 > lambda_bar_neg
    threshold = float(SIGN_CHANGE_D3.claimed)  # type: ignore[arg-type]  # declared: the difference exceeds 0
    passed = signs and low > threshold
    note = [] if signs else [f"λ̄ does not change sign: {lambda_bar_pos:.4g} vs {lambda_bar_neg:.4g}"]
    if low <= threshold:
        note.append(f"decay where λ̄ > 0 not significantly slower (lower bound of r_+ − r_- = {low:.3g})")
    check = Check(SIGN_CHANGE_D3.name, SIGN_CHANGE_D3.claim, threshold, measured,
                  (low, float("inf")), passed,
                  {"alpha": alpha, "false_failure_rate": alpha, "sides": "one-sided (lower bootstrap bound)",
                   "method": "percentile (independent seed bootstraps)", "lambda_bar_positive": lambda_bar_pos,
                   "lambda_bar_negative": lambda_bar_neg, "rate_positive": fit_pos.exponent.value,
                   "rate_negative": fit_neg.exponent.value}, "; ".join(note))
    # the check passes only on positive evidence (lower bound > 0): where the rates do not differ it
    # passes with probability ≤ α, so it fails that alternative with probability ≥ 1 − α
    return attach_power(check, 1.0 - alpha, SIGN_CHANGE_D3.alternative_text, model="establishing test: 1 − α")


def _figure(curves: dict[str, tuple[np.ndarray, np.ndarray]], bound: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(6.4, 4.4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for label, (t, e) in curves.items():
        mean = e.mean(axis=1)
        ax.plot(t, mean, "o-", ms=3, label=label)
        if label.startswith("attractive"):
            ax.plot(t, mean[0] * np.exp(bound * t), "--", label=f"bound exp((ε+λ̄')t), ε+λ̄' = {bound:.3f}")
    ax.set_yscale("log")
    ax.set_xlabel("t")
    ax.set_ylabel("E[E_β(μ_t)]")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return Figure("synchronization", figure_png(fig), "Mean interaction energy vs t (log scale) and the bound")


def run(config: ExperimentConfig) -> ExperimentResult:
    s = _runtime_settings(config)
    v_sync, v_con = lyapunov_values(s, s["d_sync"]), lyapunov_values(s, s["d_contrast"])
    bound = 0.0 + v_sync["lambda_bar_prime"]  # ε = 0 for Q^TK = βI, V = I (Assumption 2)
    curves = {}
    fits = {}
    samples = energy_curves(config, s)
    for key, dim, att in CURVES:
        t, e = samples[key]
        curves[f"{att if att != 'none' else 'no attention'}, d={s[dim]}"] = (t, e)
        fits[key] = decay_fit(t, e, config.seed)
    checks = [decay_rate_check(fits["attractive"], bound),
              sign_change_check(fits["noise_only_contrast"], fits["noise_only"], v_con["lambda_bar"],
                                v_sync["lambda_bar"])]
    result = ExperimentResult("synchronization", config.profile, checks=checks)
    result.fits = {k: f.to_dict() for k, f in fits.items()}
    result.tables = {"lyapunov": [
        {"d": s["d_sync"], "lambda_bar": v_sync["lambda_bar"], "lambda_bar_prime": v_sync["lambda_bar_prime"],
         "lambda_1": v_sync["lambda_1"], "rate_attention": fits["attractive"].exponent.value,
         "rate_noise_only": fits["noise_only"].exponent.value},
        {"d": s["d_contrast"], "lambda_bar": v_con["lambda_bar"], "lambda_bar_prime": None,
         "lambda_1": v_con["lambda_1"], "rate_attention": None,
         "rate_noise_only": fits["noise_only_contrast"].exponent.value}]}
    result.notes.append(f"bound ε + λ̄' = {bound:.4f} (ε = 0, λ̄' from derivation lyapunov); measured rates: "
                        + ", ".join(f"{k} {f.exponent.value:.3f}" for k, f in fits.items()))
    result.figures = [_figure(curves, bound)]
    return result


register_experiment(Experiment(
    name="synchronization",
    title="Synchronisation by noise: E[E_β(μ_t)] decay vs ε + λ̄' (λ̄ < 0) and the d ≤ 3 contrast",
    paper="B",
    claim="λ̄ < 0 ⇒ E[E_β(μ_t)] ≤ exp((ε+λ̄')t) E[E_β(μ_0)], λ̄' = −min F < 0; λ̄ < 0 impossible for d ≤ 3",
    derivations=("lyapunov", "mlp-kernel"),
    checks=(DECAY_RATE_BOUND, SIGN_CHANGE_D3),
    run=run,
    budget_s={"quick": 30.0, "full": 120.0},
    settings=SETTINGS,
    kernels=KERNELS,
    precisions=("float64", "float32"),
    precision_probe=precision_probe,
))
