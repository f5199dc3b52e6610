"""Paper B: the phase diagram of synchronisation by noise, λ̄ = 0 (experiment ``synchronization-phase``).

Claim (docs/theory.md §B.6, docs/synchronization_phase.md): the sign of
λ̄ = (d−1)k'(1) − (d−3)k(1) decides whether the interaction energy of a nearly synchronised
configuration decays under the noise flow.  Precisely: for a tangent vector V of the linearised
pure-noise flow dX = −k(1)(d−1)/2 X dt + P_X dW(X), E|V_t|² = e^{λ̄t}|V_0|², and a cluster of tokens
of radius δ → 0 has E_β(μ) = (βe^β/4)(1/N²)Σ_{ij}|x_i − x_j|² (1 + O(δ)), so E[E_β(μ_t)] ∝ e^{λ̄t}: it
decays iff λ̄ < 0 (Theorem 1.4's F(1⁻) = −λ̄).  The boundary λ̄ = 0 over (d, σ_U, σ_W) is computed at
30 digits by :mod:`transformer_limits.symbolic.synchronization_phase` (the phase-diagram figure, the
table ``critical_sigma``).  What is *not* claimed: the energy of a spread-out configuration (tokens
i.i.d. uniform) also decays where λ̄ > 0 as long as λ_1 < 0, only more slowly (experiment
``synchronization``'s d = 3 contrast), so a spread-out start does not show the sign of λ̄.

Simulation: the random-MLP layer map x ← LN(x + √Δt G^m(x)) with a carried tangent vector
(:func:`~transformer_limits.verify.experiments.lyapunov.simulate_point`, Δt = ε/(d k(1)), T = steps·Δt,
width 16), on the diagonal σ_U = σ_W = σ at pairs of points straddling the boundary: λ̄ = +Λ and
λ̄ = −Λ, Λ = ``margin`` × the standard error the design predicts (so as close to the boundary as the
budget can decide); where no diagonal boundary exists at d_sim (sigmoid: λ̄ < 0 for all biases at
d ≥ 4) the pair straddles the boundary in d: (d = 3, σ = 0) and (d = 4, σ = 0).  By isotropy log|V_T| is
Gaussian (a Brownian motion with drift λ_1 and variance rate k(1) + k'(1)), so the mean-square exponent
is log E|V_T|²/T = 2 mean(log|V_T|)/T + 2 var(log|V_T|)/T, estimated per seed batch (``batches``
independent batches of chains) from the batch's mean and sample variance of the growths, and
Richardson-extrapolated per batch, 2ĝ(Δt/2) − ĝ(Δt) (runs at Δt and Δt/2 with independent seeds; the
O(Δt) bias removed).  The estimate is the mean over batches, its SE their spread/√batches, so no
normal-theory variance of a sample variance is assumed (t with batches − 1 degrees of freedom).

Check ``phase_sign`` (α = 0.01, Bonferroni over the n points): at a point with predicted λ̄ > 0 the
claim fails when the upper (1 − α/n) t-bound λ̂ + t*SE < 0 (the energy significantly decays), with
λ̄ < 0 when the lower bound λ̂ − t*SE > 0.  Power against "the sign is the other one" (the truth −λ̄ at
a point): Φ((|λ̄| − t*SE)/SE), the smallest over points.  Errors: O(Δt²) after extrapolation, the
Gaussianity of log|V_T| at finite Δt (O(Δt), removed with the bias), the finite width (only the
covariance enters as Δt → 0).

Control (must FAIL): the boundary from k'(1) without its 1/d (Draft B), ``run(config, formula=
lambda_bar_without_one_over_d)``: it predicts λ̄ > 0 at the points with λ̄ < 0 (its boundary lies at
larger σ), where the simulated energy significantly decays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import mpmath
import numpy as np

from transformer_limits.verify.check_spec import CheckSpec
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult, Figure
from transformer_limits.verify.experiments.lyapunov import simulate_point
from transformer_limits.verify.figures import figure_png
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.running import run_points
from transformer_limits.verify.stats.sign_family import sign_test_family
from transformer_limits.verify.verdicts import Check


def _phase():
    """The phase-diagram formulas (:mod:`transformer_limits.symbolic.synchronization_phase`), imported
    at first use: that module imports SymPy (1-2 s), and every process that lists or runs any
    experiment imports this module."""
    import transformer_limits.symbolic.synchronization_phase as phase

    return phase

__all__ = ["PHASE_SIGN", "PROFILES", "Profile", "Point", "design_points", "mean_square_exponent",
           "phase_sign_check", "lambda_bar_without_one_over_d", "run"]

PHASE_SIGN = CheckSpec("phase_sign", "sign of the mean-square exponent of the noise flow = sign of λ̄ "
                       "= (d−1)k'(1) − (d−3)k(1) at every simulated point",
                       verdict="one-sided z-bounds on the predicted side, Bonferroni over points", alpha=0.01,
                       alternative=-1.0,
                       alternative_text="the other sign: mean-square exponent −λ̄ at a point")

ACTIVATION_ORDER = ("relu", "tanh", "gelu", "silu", "sigmoid")


@dataclass(frozen=True)
class Profile:
    """Activations, the simulated dimension, the tabulated and drawn dimensions and the budget."""

    activations: tuple[str, ...]
    d_sim: int = 8
    table_dims: tuple[int, ...] = (4, 8, 16, 64)
    curve_dims: tuple[int, ...] = (4, 8, 16, 64)
    curve_points: int = 32
    chains: int = 8192
    max_chains: int = 32768
    steps: int = 100
    eps: float = 0.05
    width: int = 16
    #: target |λ̄| = margin · predicted SE_R: the t-bound's t* (3.0 for 4 points, 3.4 for 10, 31 dof) plus
    #: z_0.8 = 0.84 plus slack for the SE's own scatter
    margin: float = 4.5
    batches: int = 32  # independent seeds per point and step size; the SE is their spread (t, batches − 1 dof)


PROFILES = {
    # quick: 4 points, 8192 chains × (50 + 100) steps each (about 20 s of CPU for the simulations)
    "quick": Profile(activations=("relu", "tanh"), curve_points=20, steps=50, chains=8192, max_chains=16384),
    "full": Profile(activations=ACTIVATION_ORDER, chains=16384, max_chains=131072, margin=5.0),
}


@dataclass(frozen=True)
class Point:
    """A simulated point (σ_U = σ_W = σ) with its predicted λ̄ (dps 30), k(1), k'(1) and chains."""

    activation: str
    d: int
    sigma: float
    lambda_bar: float
    k1: float
    dk1: float
    chains: int
    side: str  # "sync" (λ̄ < 0) or "no sync" (λ̄ > 0)


def _k(activation: str, d: int, sigma: float) -> tuple[float, float]:
    m0, m1, _ = _phase().gaussian_moments(activation, d, sigma)
    return float(m0 + mpmath.mpf(sigma) ** 2), float(m1 / d)


def predicted_se(k1: float, dk1: float, d: int, prof: Profile, chains: int) -> float:
    """SE_R the design expects (for placing the points only): σ² = k(1)+k'(1) (variance rate of log|V|),
    T = steps·ε/(d k(1)), one run over n chains 2√(σ²/(nT) + 2σ⁴/(n−1)) (normal theory), Richardson √5
    times that."""
    var_rate, horizon = k1 + dk1, prof.steps * prof.eps / (d * k1)
    one = 2 * math.sqrt(var_rate / (chains * horizon) + 2 * var_rate**2 / (chains - 1))
    return math.sqrt(5.0) * one


def _point(activation: str, d: int, sigma: float, prof: Profile, *, adapt: bool = False) -> Point:
    """The point with λ̄ at dps 30; ``adapt``: double the chains (up to max_chains) until
    margin·SE_R ≤ |λ̄| (points whose |λ̄| is given, not placed by the design)."""
    k1, dk1 = _k(activation, d, sigma)
    lb = float(_phase().lambda_bar(activation, d, sigma, sigma))
    chains = prof.chains
    while adapt and chains < prof.max_chains and prof.margin * predicted_se(k1, dk1, d, prof, chains) > abs(lb):
        chains *= 2
    return Point(activation, d, sigma, lb, k1, dk1, chains, "sync" if lb < 0 else "no sync")


def design_points(activation: str, prof: Profile) -> list[Point]:
    """Two points straddling λ̄ = 0 near the boundary (module docstring)."""
    d = prof.d_sim
    roots = _phase().critical_scale_float(activation, d)
    if not roots:  # no diagonal boundary at d_sim: straddle the d = 3 | 4 boundary at zero biases
        return [_point(activation, 3, 0.0, prof, adapt=True), _point(activation, 4, 0.0, prof, adapt=True)]
    star = roots[0]

    def se_at(sigma: float) -> float:  # float64 k(1), k'(1): the design needs no more
        m0, m1 = _phase().gaussian_moments_float(activation, d, np.array([sigma]))
        return predicted_se(float(m0[0]) + sigma**2, float(m1[0]) / d, d, prof, prof.chains)

    level = prof.margin * se_at(star)
    for _ in range(2):  # the SE grows with σ (k(1) does): set Λ from the points' own SEs, then place them
        sigmas = []
        for sign in (1.0, -1.0):
            near = _phase().critical_scale_float(activation, d, level=sign * level)
            best = min(near, key=lambda t: abs(t - star)) if near else 0.0
            sigmas.append(round(float(best), 6))
        level = max([level] + [prof.margin * se_at(s) * 1.01 for s in sigmas])
    return [_point(activation, d, s, prof) for s in sigmas]


def mean_square_exponent(estimate: float, standard_error: float, chains: int, horizon: float) -> tuple[float, float]:
    """(2(λ̂ + T s²), SE) from the Benettin mean λ̂ of the time-normalised growths and its SE
    (s² = SE²·n the growths' sample variance): log E|V_T|²/T for Gaussian log|V_T|; normal-theory SE
    2√(s²/n + 2T²s⁴/(n−1))."""
    s2 = standard_error**2 * chains
    value = 2 * (estimate + horizon * s2)
    return value, 2 * math.sqrt(s2 / chains + 2 * horizon**2 * s2**2 / (chains - 1))


def phase_sign_check(estimates, standard_errors, predicted, labels, alpha: float = PHASE_SIGN.required_alpha,
                     dof: int | None = None) -> Check:
    """``phase_sign``: Bonferroni family of one-sided tests, member p tests "sign(rate_p) = sign(λ̄_p)"
    with the (1 − α/n) t-bound on the predicted side (module docstring;
    :func:`~transformer_limits.verify.stats.sign_family.sign_test_family`); power against the declared
    alternative, the mirror image −λ̄ at a point."""
    return sign_test_family(PHASE_SIGN.name, PHASE_SIGN.claim, estimates, standard_errors, predicted, alpha, labels,
                            dof=dof, method="t-bound over seed batches (Richardson-extrapolated mean-square exponent)",
                            relative_alternative=PHASE_SIGN.required_alternative,
                            alternative_text=PHASE_SIGN.alternative_text, quantity="rate", symbol="λ̄", unit="point")


def lambda_bar_without_one_over_d(activation: str, d: int, sigma: float) -> float:
    """The control: λ̄ with Draft B's k'(1) = E[φ'(sZ)²] (no 1/d)."""
    return float(_phase().lambda_bar(activation, d, sigma, sigma, one_over_d=False))


def _critical_rows(prof: Profile) -> list[dict]:
    rows = []
    for act in prof.activations:
        for d in prof.table_dims:
            roots = _phase().critical_scale(act, d) if d > 3 else []
            sw0 = _phase().critical_sigma_w(act, d, 0)
            row = {"activation": act, "d": d,
                   "σ* (σ_U = σ_W)": ", ".join(mpmath.nstr(r.t, 30) for r in roots) or None,
                   "λ̄ at σ*(1 ∓ 1e-25)": ", ".join(f"{mpmath.nstr(r.below, 3)} / {mpmath.nstr(r.above, 3)}"
                                                  for r in roots) or None,
                   "σ_W* at σ_U = 0": None if sw0 is None else mpmath.nstr(sw0, 30),
                   "no boundary": _phase().no_boundary_reason(act, d) or None}
            if act == "relu" and d > 3:
                exact = _phase().relu_critical_diagonal(d)
                row["ReLU exact √(2/(3d(d−3)))"] = mpmath.nstr(exact, 30)
                row["|σ* − exact|"] = float(abs(roots[0].t - exact)) if roots else None
            rows.append(row)
    return rows


def _phase_figure(prof: Profile, points: list[Point], rates: dict[int, float]) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    acts = prof.activations
    fig = MplFigure(figsize=(3.4 * len(acts), 3.6), dpi=100)
    FigureCanvasAgg(fig)
    for j, act in enumerate(acts):
        ax = fig.add_subplot(1, len(acts), j + 1)
        drawn = False
        for d in prof.curve_dims:
            # the curve falls to σ_W* = 0 at the σ_U-intercept (root of λ̄(d, σ_U, 0)): sample up to it closely
            intercept = _phase().critical_scale_float(act, d, (1.0, 0.0)) if d > 3 else []
            su = np.geomspace(1e-3, 3.0, prof.curve_points)
            if intercept:
                su = np.concatenate([np.geomspace(1e-3, intercept[0], prof.curve_points)[:-1],
                                     intercept[0] * (1 - np.geomspace(0.1, 1e-5, 9))])
            lb0 = _phase().lambda_bar_float(act, d, su, 0.0)
            sw = np.where(lb0 > 0, np.sqrt(np.clip(lb0, 0, None) / max(d - 3, 1)), np.nan)
            if d > 3 and np.isfinite(sw).any():
                ax.plot(su, sw, label=f"d = {d}")
                drawn = True
        ax.plot(su, su, ":", color="0.5", lw=0.8, label="σ_U = σ_W")
        for i, p in enumerate(points):
            if p.activation == act and p.sigma > 0:
                ax.plot(p.sigma, p.sigma, "v" if rates.get(i, 0.0) < 0 else "^", ms=7, mec="k",
                        color="#2ca02c" if p.lambda_bar < 0 else "#d62728")
        if not drawn:
            ax.text(0.5, 0.5, "no boundary for d ≥ 4:\nλ̄ < 0 for all biases\n(d ≤ 3: λ̄ > 0)",
                    transform=ax.transAxes, ha="center", va="center", fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(1e-3, 3.0)
        ax.set_ylim(1e-3, 3.0)
        ax.set_xlabel("σ_U")
        ax.set_ylabel("σ_W*: λ̄ < 0 above" if j == 0 else "")
        ax.set_title(act, fontsize=9)
        ax.grid(True, which="both", alpha=0.2)
        ax.legend(fontsize=6, loc="upper right")
    fig.tight_layout()
    return Figure("synchronization-phase-diagram", figure_png(fig),
                  "Phase boundary λ̄ = 0 in the (σ_U, σ_W) plane per activation and d: σ_W*(σ_U) = "
                  "√(λ̄(d, σ_U, 0)/(d−3)); λ̄ < 0 (synchronisation of nearly synchronised states) above each curve. "
                  f"Markers: the simulated points at d = {prof.d_sim} (green λ̄ < 0, red λ̄ > 0; ▼ measured decay, "
                  "▲ growth).")


def _d_sigma_figure(prof: Profile) -> Figure:
    """σ* on the diagonal σ_U = σ_W against d (float64 roots), with ReLU's √(2/(3d(d−3)))."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(6.0, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    dims = np.unique(np.geomspace(4, 256, 24).round().astype(int))
    for act in prof.activations:
        pairs = [(d, r[0]) for d in dims if (r := _phase().critical_scale_float(act, int(d)))]
        if pairs:
            ax.plot(*zip(*pairs), "o-", ms=3, label=act)
        else:
            ax.plot([], [], " ", label=f"{act}: no boundary for d ≥ 4 (λ̄ < 0)")
    ax.plot(dims, np.sqrt(2 / (3 * dims * (dims - 3.0))), "k:", lw=1, label="ReLU exact √(2/(3d(d−3)))")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("d")
    ax.set_ylabel("σ* (σ_U = σ_W = σ): λ̄ < 0 for σ > σ*")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return Figure("synchronization-phase-d-sigma", figure_png(fig),
                  "Critical σ* on the diagonal σ_U = σ_W against d; below σ* (and for every σ at d ≤ 3) λ̄ > 0.")


def _rates_figure(points: list[Point], est: np.ndarray, se: np.ndarray, z: float, labels: list[str]) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    fig = MplFigure(figsize=(max(6.0, 0.6 * len(points) + 2), 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    idx = np.arange(len(points))
    ax.errorbar(idx, est, yerr=z * se, fmt="o", capsize=3, label=f"simulated mean-square exponent ± {z:.2f} SE")
    ax.plot(idx, [p.lambda_bar for p in points], "x", color="k", ms=8, label="λ̄ (formula)")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(idx, labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("rate of E|V_t|² (energy of a small cluster)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return Figure("synchronization-phase-rates", figure_png(fig),
                  "Mean-square exponent of the linearised noise flow at points straddling λ̄ = 0 "
                  "(Richardson-extrapolated, Bonferroni half-widths) and the predicted λ̄.")


def run(config: ExperimentConfig, *, formula: Callable[[str, int, float], float] | None = None) -> ExperimentResult:
    """Boundary table and figure, then the straddling simulations tested against ``formula``
    (``(activation, d, σ) -> λ̄``; default the derived λ̄, the control passes the wrong one)."""
    prof = PROFILES[config.profile]
    points = [p for act in prof.activations for p in design_points(act, prof)]
    labels = [f"{p.activation} d={p.d} σ={p.sigma:.4g}" for p in points]
    grid = {"grid": {"setting": [{"activation": p.activation, "d": p.d, "sigma": p.sigma, "k1": p.k1,
                                  "chains": p.chains // prof.batches} for p in points],
                     "refinement": [1, 2], "seed": {"count": prof.batches, "base": config.seed}},
            "fixed": {"eps": prof.eps, "chains": prof.chains, "steps": prof.steps, "width": prof.width}}
    sweep = run_points(config, simulate_point, grid, experiment="synchronization-phase", version=1)
    runs: dict[tuple, list] = {}
    for r in sweep.table:
        s = r["setting"]
        runs.setdefault((s["activation"], s["d"], s["sigma"], r["refinement"]), []).append(r)
    est, se, rows = [], [], []
    for p in points:
        per_step = []
        for ref in (1, 2):
            batch = sorted(runs[(p.activation, p.d, p.sigma, ref)], key=lambda r: r["seed"])
            per_step.append(np.array([mean_square_exponent(r["estimate"], r["standard_error"], p.chains // prof.batches,
                                                           prof.steps * ref * r["dt"])[0] for r in batch]))
        coarse, fine = per_step
        extrapolated = 2 * fine - coarse  # Richardson per batch (independent seeds at Δt and Δt/2)
        value, err = float(extrapolated.mean()), float(extrapolated.std(ddof=1) / np.sqrt(prof.batches))
        est.append(value)
        se.append(err)
        dt = float(runs[(p.activation, p.d, p.sigma, 1)][0]["dt"])
        rows.append({"activation": p.activation, "d": p.d, "σ_U = σ_W": p.sigma, "k(1)": p.k1, "k'(1)": p.dk1,
                     "λ̄": p.lambda_bar, "side": p.side, "chains": p.chains,
                     "rate (Richardson)": value, "SE": err, "rate(Δt)": float(coarse.mean()),
                     "rate(Δt/2)": float(fine.mean()), "z vs λ̄": (value - p.lambda_bar) / err,
                     "T": prof.steps * dt})
    predicted = [formula(p.activation, p.d, p.sigma) if formula else p.lambda_bar for p in points]
    check = phase_sign_check(est, se, predicted, labels, dof=prof.batches - 1)
    z = check.statistics["z_critical"]
    for row, e, s, lb in zip(rows, est, se, predicted):
        row.update({"λ̄ tested": lb, "bound": e + z * s if lb > 0 else e - z * s})
    result = ExperimentResult("synchronization-phase", config.profile, checks=[check])
    result.tables["critical_sigma"] = _critical_rows(prof)
    result.tables["points"] = rows
    measured = {i: e for i, e in enumerate(est)}
    result.figures += [_phase_figure(prof, points, measured), _d_sigma_figure(prof), _rates_figure(points, np.array(est), np.array(se), z,
                                                                            labels)]
    result.notes += [
        f"Points at d = {prof.d_sim} on σ_U = σ_W where λ̄ = ±{prof.margin:g}·(predicted SE_R); Δt = ε/(d k(1)), "
        f"ε = {prof.eps}, {prof.steps} steps at Δt and {2 * prof.steps} at Δt/2, width {prof.width}, chains per "
        "point in the table (more where |λ̄| is small).",
        "Mean-square exponent = 2 mean + 2 T var of the per-chain growth log|V_T|/T (Gaussian log|V_T| by "
        "isotropy), Richardson-extrapolated.",
        f"Bonferroni over {len(points)} points at family-wise false-failure rate {PHASE_SIGN.alpha}: z* = {z:.3f}.",
    ]
    result.provenance.update(
        seeds={"base": config.seed, "points": [{**r["setting"], "refinement": r["refinement"], "seed": r["seed"]}
                                               for r in sweep.table]},
        grid={"points": [vars(p) for p in points], "profile": vars(prof)})
    return result


register_experiment(Experiment(
    name="synchronization-phase",
    title="Phase diagram of synchronisation by noise: λ̄ = 0 and simulations on both sides",
    paper="B",
    claim=("λ̄ = (d−1)k'(1) − (d−3)k(1) is the mean-square exponent of the linearised noise flow: the energy "
           "of a nearly synchronised configuration decays iff λ̄ < 0; boundary λ̄ = 0 over (d, σ_U, σ_W) at 30 digits "
           "for ReLU, tanh, GELU, SiLU, sigmoid"),
    derivations=("lyapunov", "mlp-kernel"),
    checks=(PHASE_SIGN,),
    run=run,
    budget_s={"quick": 30.0, "full": 600.0},
))
