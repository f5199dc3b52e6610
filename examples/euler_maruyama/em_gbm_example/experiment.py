"""Euler–Maruyama on geometric Brownian motion has strong order 1/2: an experiment from outside
transformer_limits, built with its public API (rate claim, rate fit, verdict, ``run_points``).

**Claim** (Kloeden & Platen, *Numerical Solution of Stochastic Differential Equations*, 1992,
Thm 10.2.2; measured for this very SDE in D. J. Higham, "An algorithmic introduction to numerical
simulation of stochastic differential equations", SIAM Review 43(3):525–546, 2001, §5): for

    dX = mu X dt + sigma X dW,  X_0 = x0,  exact solution X_T = x0 exp((mu − sigma²/2) T + sigma W_T),

the Euler–Maruyama scheme with n steps of size h = T/n,

    X_{k+1} = X_k (1 + mu h + sigma ΔW_k),  ΔW_k = W_{(k+1)h} − W_{kh} ~ N(0, h),

has strong error  e(n) = E|X_T − X_n^h| ≈ C n^{-1/2}  (C > 0: the order is exactly 1/2, not more).

**Coupling.**  The scheme and the exact solution see the same Brownian path: each seed draws the
increments on the finest grid (n_max steps) and every coarser level sums them, so W_T is shared by
every level.  One sweep point is one seed (``paths`` independent paths, every level); the seeds are
the replicates the fit's bootstrap resamples (``resample="paired"``, because the levels of a seed
share its paths).

**Check** ``strong_order``: ``fit_power_law`` of log ē(n) on log n over all levels, then
:func:`~transformer_limits.verify.verdicts.exponent_equals` against the claim's exponent −1/2
(two-sided, alpha = 0.01, so a true claim fails at most 1% of the time; tolerance 0.05 declared for
the O(h) term of the error, which bends the slope at the coarsest levels).

**Deliberately wrong variants** (not in any profile; run by name, they must FAIL, exit 1):

* ``em-gbm-order-1`` checks the right scheme against a wrong claim, strong order 1 (e ~ n^-1);
* ``em-gbm-buggy-scheme`` checks the claim against a scheme with a classic bug, ΔW_k scaled by h
  instead of sqrt(h): its error tends to E|X_T − x0 e^{mu T}| > 0, slope 0, not −1/2.

Run it (from the repository root)::

    transformer-limits verify --module examples/euler_maruyama/em_gbm_example/experiment.py --list
    transformer-limits verify em-gbm-strong-order --module examples/euler_maruyama/em_gbm_example/experiment.py --out out/em
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer_limits.verify.check_spec import CheckSpec
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.running import jsonable_settings, run_points
from transformer_limits.verify.rate.claims import parse_rate_claim
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.rate.plots import RateSeries, rate_figure
from transformer_limits.verify.verdicts import exponent_equals

ALPHA = 0.01
TOLERANCE = 0.05
COUPLING = "Brownian increments drawn on the finest grid and summed for every coarser level"
#: the published claim: strong error of Euler–Maruyama ~ n^{-1/2} (n = T/h steps)
CLAIM = parse_rate_claim("n^-1/2", params=("n",), error_functional="strong", coupling=COUPLING)
#: a deliberately wrong claim (strong order 1), for the wrong variant
WRONG_CLAIM = parse_rate_claim("n^-1", params=("n",), error_functional="strong", coupling=COUPLING)
SCHEMES = ("euler-maruyama", "buggy-dw-times-h")

SETTINGS: dict[str, dict[str, Any]] = {
    "quick": dict(mu=0.5, sigma=1.0, x0=1.0, T=1.0, levels=(16, 32, 64, 128, 256, 512), seeds=16,
                  paths=500),
    "full": dict(mu=0.5, sigma=1.0, x0=1.0, T=1.0, levels=(16, 32, 64, 128, 256, 512, 1024, 2048),
                 seeds=32, paths=2000),
}


def strong_errors(s: dict[str, Any], seed: int, scheme: str = "euler-maruyama") -> np.ndarray:
    """Mean over ``s["paths"]`` paths of |X_T − X_n^h| for each n in ``s["levels"]``, shape
    ``(n_levels,)``; every level uses the same Brownian paths (finest grid, summed)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    levels = [int(n) for n in s["levels"]]
    n_max = max(levels)
    if any(n_max % n for n in levels):
        raise ValueError(f"levels must divide the finest level {n_max}, got {levels}")
    mu, sigma, x0, T = (float(s[k]) for k in ("mu", "sigma", "x0", "T"))
    rng = np.random.default_rng(seed)
    dW = rng.normal(0.0, np.sqrt(T / n_max), size=(int(s["paths"]), n_max))
    exact = x0 * np.exp((mu - 0.5 * sigma**2) * T + sigma * dW.sum(axis=1))
    out = []
    for n in levels:
        h = T / n
        incr = dW.reshape(dW.shape[0], n, n_max // n).sum(axis=2)  # ΔW on the grid of step h
        if scheme == "buggy-dw-times-h":
            incr = incr / np.sqrt(h) * h  # the bug: h Z instead of sqrt(h) Z
        X = x0 * np.prod(1.0 + mu * h + sigma * incr, axis=1)
        out.append(float(np.mean(np.abs(exact - X))))
    return np.array(out)


def evaluate_point(point: dict[str, Any]) -> dict[str, Any]:
    """Sweep function (top level, so sweep workers can run it): one seed, every level."""
    return {"errors": strong_errors(point["settings"], point["seed"], point["scheme"]).tolist()}


def run(config: ExperimentConfig, *, scheme: str = "euler-maruyama", claim=CLAIM,
        name: str = "em-gbm-strong-order") -> ExperimentResult:
    """Measure ē(n) over the profile's levels and test the exponent against ``claim``."""
    s = SETTINGS[config.profile]
    grid = {"grid": {"seed": {"count": s["seeds"], "base": config.seed}},
            "fixed": {"settings": jsonable_settings(s), "scheme": scheme}}
    sweep = run_points(config, evaluate_point, grid, experiment=name, version=1)
    errors = np.array([r.result["errors"] for r in sweep.records]).T  # (n_levels, seeds)
    n = np.array(s["levels"], dtype=float)
    fit = fit_power_law({"n": n}, errors, window="all", resample="paired", seed=config.seed)
    # the violation the check must detect: half the claimed order (power reported; below 0.8 the
    # check is INCONCLUSIVE, not a pass)
    q0 = float(claim.leading_exponent("n"))
    check = exponent_equals(fit, claim, ALPHA, tolerance=TOLERANCE, alternative=q0 / 2)
    check.name = "strong_order"
    result = ExperimentResult(name, config.profile, checks=[check])
    result.fits = {"n": fit.to_dict()}
    result.tables = {"errors": [{"n": int(k), "h": s["T"] / k, "mean_error": float(e.mean()),
                                 "min": float(e.min()), "max": float(e.max())} for k, e in zip(n, errors)]}
    lo, hi = fit.interval("exponent", 1 - ALPHA)
    result.notes.append(f"fitted exponent of n: {fit.exponent.value:.3f} (99% CI [{lo:.3f}, {hi:.3f}]); "
                        f"claimed {claim.leading_exponent('n')} (scheme {scheme})")
    result.figures = [rate_figure(
        name.replace("-", "_"), f"strong error of {scheme} on geometric Brownian motion vs steps n "
        f"(dashed: the claimed slope {claim.leading_exponent('n')})",
        [RateSeries("E|X_T − X_n|", n, errors, fit, float(claim.leading_exponent("n")))],
        xlabel="n = T/h", ylabel="strong error")]
    result.provenance = {"settings": jsonable_settings(s), "scheme": scheme, "claim": str(claim),
                         "seconds": {"sweep": sum(r.elapsed_s or 0.0 for r in sweep.records)}}
    return result


def run_wrong_order(config: ExperimentConfig) -> ExperimentResult:
    return run(config, claim=WRONG_CLAIM, name="em-gbm-order-1")


def run_buggy_scheme(config: ExperimentConfig) -> ExperimentResult:
    return run(config, scheme="buggy-dw-times-h", name="em-gbm-buggy-scheme")


_COMMON = dict(paper="Higham 2001", derivations=(),
               checks=(CheckSpec("strong_order", verdict="exponent_equals", alpha=ALPHA, tolerance=TOLERANCE,
                                 alternative_text="half the claimed order"),),
               budget_s={"quick": 2.0, "full": 20.0})

register_experiment(Experiment(
    name="em-gbm-strong-order",
    title="Euler–Maruyama on geometric Brownian motion: strong order 1/2",
    claim="E|X_T − X_T^h| ~ C h^{1/2} (n = T/h steps: exponent −1/2)", run=run, **_COMMON))
register_experiment(Experiment(
    name="em-gbm-order-1",
    title="Deliberately wrong: claims strong order 1 for Euler–Maruyama (must FAIL)",
    claim="E|X_T − X_T^h| ~ C h (wrong)", run=run_wrong_order, profiles=(), **_COMMON))
register_experiment(Experiment(
    name="em-gbm-buggy-scheme",
    title="Deliberately wrong: Euler–Maruyama with ΔW = h Z instead of sqrt(h) Z (must FAIL)",
    claim="E|X_T − X_T^h| ~ C h^{1/2} for a buggy scheme", run=run_buggy_scheme, profiles=(), **_COMMON))
