"""Experiment ``spectral-scaling``: toy-scale reproduction of paper C's optimizer-induced rank scaling.

Trains the toy GPT of :mod:`transformer_limits.numeric.torch.toy_gpt` on the synthetic Zipfian language
with AdamW, Muon, NorMuon, Dion(1/2) and Dion(1/16) at FFN widths ``D = k·d_model``, measures the
post-activation FFN covariance ranks ``R_1`` (soft) and ``R_2`` (hard) per HEAD/MID/TAIL stratum
(and pooled, ``GLOBAL``) on held-out tokens, takes the median over layers (docs/theory.md §C.6), and fits
``log R = c + β log D`` per (optimizer, stratum, metric) over widths with intervals over seeds.

Checks (each a one-sided test whose null hypothesis is the claim; false-failure rate ≤ α):

* ``training_learns`` — precondition, deterministic: every run's held-out loss is below the
  unigram entropy ``H(μ)`` by at least half of the learnable gap ``H(μ) − L_Bayes``.
* ``muon_hard_beta_exceeds_adamw`` — ``Δ_S = β_hard^Muon(S) − β_hard^AdamW(S) > 0`` for the strata
  ``S ∈ {MID, TAIL}`` where the paper's gap is largest (docs/theory.md §C.7); fails when, for some ``S``,
  the upper ``1 − α/2`` bound of ``Δ_S`` is below 0 (Bonferroni over the two strata).
* ``dion_rank_monotone`` — ``β_hard^{Dion 1/2}(GLOBAL) − β_hard^{Dion 1/16}(GLOBAL) > 0``; fails when
  the upper ``1 − α`` bound is below 0.

The bound of a difference is "conservative": the larger of the seed-bootstrap percentile bound
(independent seed resampling per width and optimizer, :func:`power_law.fit_power_law`) and the Welch
t bound from the OLS fits on all (width, seed) points, so a check fails only when both reject.  A
*passing* check only means "not contradicted"; whether the data *support* the claim (lower bound
above 0) is reported in the check statistics (``supported``) and in the notes.

Profiles: ``quick`` (widths k ∈ {1, 2, 4}, 2 seeds, 150 steps) for ``verify spectral-scaling``;
``full`` (k ∈ {1, 2, 4, 8}, 3 seeds and 6 for the two Dion optimizers, 400 steps; about 20 minutes on
2 cores), the only profile in which ``report`` includes it.
Each training run is one point of a sweep (:func:`transformer_limits.verify.running.run_points`:
``--store`` resumes, ``--scheduler`` runs on a dask cluster) over optimizer × width × seed, with
seeds ``base + 0 .. base + seeds − 1``; a local run uses a pool of ``max(2, workers)``
single-threaded processes (tiny matrices train faster one-thread-per-core than with intra-op
threads).  The Δβ test is :func:`transformer_limits.verify.stats.beta_difference.beta_difference_check`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from transformer_limits.verify.check_spec import CheckSpec
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult, Figure
from transformer_limits.verify.figures import figure_png
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.running import run_points
from transformer_limits.verify.stats import power_law, width_scaling
from transformer_limits.verify.stats.beta_difference import beta_difference_check
from transformer_limits.verify.stats.power import deterministic_power
from transformer_limits.verify.verdicts import Check, attach_power

__all__ = ["GRIDS", "OPTIMIZERS", "STRATA_ALL", "RENYI_ALPHAS", "BetaFit", "fit_betas", "muon_hard_beta_check",
           "dion_monotone_check", "TrainingGrid", "more_seeds_specs", "run", "run_grid", "sweep_spec", "toy_finding", "train_point"]

OPTIMIZERS = ("adamw", "muon", "normuon", "dion-1/2", "dion-1/16")
LABELS = {"adamw": "AdamW", "muon": "Muon", "normuon": "NorMuon", "dion-1/2": "Dion 1/2", "dion-1/16": "Dion 1/16"}
STRATA_ALL = ("HEAD", "MID", "TAIL", "GLOBAL")
METRICS = {"soft": 1.0, "hard": 2.0}
RENYI_ALPHAS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, math.inf)
ALPHA = 0.05
N_BOOT = 2000
LEARN_FRACTION = 0.5


@dataclass(frozen=True)
class TrainingGrid:
    """The training runs of one profile: every optimizer at FFN widths ``D = k·d_model`` for ``k`` in
    ``ffn_mults``, ``seeds`` seeds each, ``steps`` steps of ``batch_size`` sequences of ``context``
    tokens, ranks measured on ``eval_sequences`` held-out sequences (docs/theory.md §C.6)."""

    ffn_mults: tuple[int, ...]
    seeds: int
    steps: int
    batch_size: int
    eval_sequences: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    context: int = 64
    #: optimizers trained with more seeds than ``seeds`` (optimizer, total seeds): the Dion check
    #: needs ~1.5x the seeds of the Muon check for power 0.8, and Dion runs are the cheapest
    more_seeds: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        for name, n in self.more_seeds:
            if name not in OPTIMIZERS or not (isinstance(n, int) and n > self.seeds):
                raise ValueError(f"more_seeds: ({name!r}, {n!r}) needs a known optimizer and more than "
                                 f"{self.seeds} seeds")

    def seeds_of(self, optimizer: str) -> int:
        """The seeds ``optimizer`` is trained with."""
        return dict(self.more_seeds).get(optimizer, self.seeds)


GRIDS = {
    "quick": TrainingGrid(ffn_mults=(1, 2, 4), seeds=2, steps=150, batch_size=24, eval_sequences=64),
    # full: Muon's ordering has power 0.999 at 3 seeds, Dion's 0.64, so the Dion runs get 6 (measured,
    # docs/paper_c_toy.md)
    "full": TrainingGrid(ffn_mults=(1, 2, 4, 8), seeds=3, steps=400, batch_size=32, eval_sequences=96,
                         more_seeds=(("dion-1/2", 6), ("dion-1/16", 6))),
}


# ------------------------------------------------------------------------------------------------
# Fits and tests (framework-free: usable on any rank table)
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BetaFit:
    """``β`` of ``log R = c + β log D`` for one (optimizer, stratum, metric).

    ``seed_fit``: :class:`power_law.PowerLawFit` on the per-width geometric means over seeds with the
    seed bootstrap; ``ols``: :class:`width_scaling.WidthScalingFit` on all ``(D, R)`` points of all seeds
    (the authors' OLS t-interval, ``n_widths·n_seeds − 2`` dof).
    """

    seed_fit: power_law.PowerLawFit
    ols: width_scaling.WidthScalingFit

    @property
    def beta(self) -> float:
        return self.seed_fit.exponent.value

    def bootstrap_interval(self, confidence: float = 0.95) -> tuple[float, float]:
        return self.seed_fit.exponent.interval(confidence, "two-sided", "percentile")


def fit_betas(widths: Any, values: Any, *, seed: int = 0, n_boot: int = N_BOOT) -> BetaFit:
    """Fit ``β`` from ``values`` of shape ``(n_widths, n_seeds)`` (positive ranks) at ``widths``."""
    D = np.asarray(widths, dtype=np.float64)
    R = np.asarray(values, dtype=np.float64)
    if R.ndim != 2 or R.shape[0] != D.size or R.shape[1] < 2:
        raise ValueError(f"values: expected shape ({D.size}, n_seeds >= 2), got {R.shape}")
    seed_fit = power_law.fit_power_law(D, R, param="D", window="all", n_boot=n_boot, seed=seed,
                                      aggregate="geometric", method="percentile")
    ols = width_scaling.fit_width_scaling(np.repeat(D, R.shape[1]), R.reshape(-1))
    return BetaFit(seed_fit, ols)


#: the checks; each ordering must detect the published 160M effect reversed (docs/theory.md §C.7:
#: Δβ_hard(Muon − AdamW) = 0.532, (Dion-1/2 − Dion-1/16) = 0.287; the strata of the toy have no
#: published figure, so the pooled one stands for them)
LEARNS_SPEC = CheckSpec("training_learns", verdict="deterministic threshold", alpha=0.0,
                        alternative_text="a run that does not learn (held-out loss at the unigram entropy)")
MUON_SPEC = CheckSpec("muon_hard_beta_exceeds_adamw", verdict="one-sided bootstrap bound of Δβ_hard", alpha=ALPHA,
                      alternative=-0.532)
DION_SPEC = CheckSpec("dion_rank_monotone", verdict="one-sided bootstrap bound of Δβ_hard", alpha=ALPHA,
                      alternative=-0.287)


#: the decided states of an ordering at toy scale (docs/paper_c_toy.md), from its check's finding
TOY_FINDINGS = {"reproduced": "REPRODUCED", "reproduced, smaller than published": "REPRODUCED",
                "effect excluded": "CONTRADICTED", "reversed": "CONTRADICTED", "undecided": "INCONCLUSIVE"}


def toy_finding(check: Check) -> str:
    """The toy's answer to an ordering of paper C, in words: REPRODUCED (every lower bound of Δβ above
    0), CONTRADICTED (the published effect size excluded by an upper bound, or the ordering reversed)
    or INCONCLUSIVE, with the power against the published effect."""
    finding = check.statistics.get("finding", "undecided")
    state = TOY_FINDINGS[finding]
    effect = check.statistics.get("effect_size")
    power = "power not stated" if check.power is None else f"power {check.power:.2f} against Δβ = {effect:.3g}"
    return f"{state} ({finding}; {power})"


def muon_hard_beta_check(fits: dict[tuple[str, str, str], BetaFit], alpha: float = ALPHA) -> Check:
    """``muon_hard_beta_exceeds_adamw`` on ``fits[(optimizer, stratum, metric)]`` (MID and TAIL)."""
    pairs = [(s, fits[("muon", s, "hard")], fits[("adamw", s, "hard")]) for s in ("MID", "TAIL")]
    return beta_difference_check("muon_hard_beta_exceeds_adamw",
                                 "β_hard(Muon) > β_hard(AdamW) for MID and TAIL tokens (post-activation FFN)",
                                 pairs, alpha, effect=-MUON_SPEC.required_alternative)


def dion_monotone_check(fits: dict[tuple[str, str, str], BetaFit], alpha: float = ALPHA) -> Check:
    """``dion_rank_monotone``: ``β_hard`` falls as Dion's rank fraction shrinks (1/2 → 1/16, GLOBAL)."""
    pairs = [("GLOBAL", fits[("dion-1/2", "GLOBAL", "hard")], fits[("dion-1/16", "GLOBAL", "hard")])]
    return beta_difference_check("dion_rank_monotone",
                                 "β_hard(Dion r=1/2) > β_hard(Dion r=1/16) (pooled tokens, post-activation FFN)",
                                 pairs, alpha, effect=-DION_SPEC.required_alternative)


# ------------------------------------------------------------------------------------------------
# Training grid
# ------------------------------------------------------------------------------------------------


def sweep_spec(grid: TrainingGrid, base_seed: int) -> dict[str, Any]:
    """The sweep grid of ``grid``: optimizer × ``k`` × seed (last fastest), seeds ``base_seed + s``
    for ``s < grid.seeds`` (a plain axis, not a derived-seed axis: the run seeds of the profile), the
    model and training sizes as fixed parameters (so another size is another store point)."""
    return {"grid": {"optimizer": list(OPTIMIZERS), "k": list(grid.ffn_mults),
                     "seed": [base_seed + s for s in range(grid.seeds)]},
            "fixed": {"d_model": grid.d_model, "n_layers": grid.n_layers, "n_heads": grid.n_heads,
                      "context": grid.context, "steps": grid.steps, "batch_size": grid.batch_size,
                      "eval_sequences": grid.eval_sequences}}


def train_point(point: dict[str, Any]) -> dict[str, Any]:
    """Sweep function: one training run at a point of :func:`sweep_spec`, as JSON values.

    ``ranks[stratum]`` lists the layer-median post-activation Rényi ranks at ``RENYI_ALPHAS`` (in that
    order; JSON has no tuple keys).  Trains with one intra-op thread (restored afterwards, for a run in
    this process), as the numbers depend on the thread count only through float summation order.
    """
    import torch

    from transformer_limits.numeric.torch.toy_gpt import ToyGPTConfig, ToyRunConfig, train_toy_gpt
    from transformer_limits.numeric.torch.optimizers import optimizer_spec

    cfg = ToyRunConfig(
        model=ToyGPTConfig(d_model=point["d_model"], n_layers=point["n_layers"], n_heads=point["n_heads"],
                           ffn_mult=point["k"], context=point["context"]),
        optimizer=optimizer_spec(point["optimizer"]), steps=point["steps"], batch_size=point["batch_size"],
        eval_sequences=point["eval_sequences"], seed=point["seed"], alphas=RENYI_ALPHAS)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = train_toy_gpt(cfg)
    finally:
        torch.set_num_threads(threads)
    ranks = {s: [res.layer_median("post", s, a) for a in RENYI_ALPHAS] for s in STRATA_ALL}
    settings = dict(lr=cfg.optimizer.lr, lion_lr=cfg.optimizer.lion_lr, ns_eps=cfg.optimizer.ns_eps,
                    init="authors' normal (Linear fan_in^-1/2·min(1, sqrt(fan_out/fan_in)), embedding 1)")
    return dict(width=cfg.model.ffn_width, ranks=ranks, settings=settings, summary=res.summary(),
                loss_history=res.loss_history, strata_types=res.strata_types, strata_share=res.strata_share,
                tokens_per_stratum=res.tokens_per_stratum)


def more_seeds_specs(grid: TrainingGrid, base_seed: int) -> list[dict[str, Any]]:
    """The sweep grids of the extra seeds of ``grid.more_seeds``: per group of optimizers with the
    same total, seeds ``base + grid.seeds .. base + total − 1`` (the main grid's runs are not repeated)."""
    main = sweep_spec(grid, base_seed)
    groups: dict[int, list[str]] = {}
    for name, n in grid.more_seeds:
        groups.setdefault(n, []).append(name)
    return [{"grid": {"optimizer": [o for o in OPTIMIZERS if o in names], "k": list(grid.ffn_mults),
                      "seed": [base_seed + s for s in range(grid.seeds, n)]}, "fixed": main["fixed"]}
            for n, names in sorted(groups.items())]


def _train_runs(grid: TrainingGrid, config: ExperimentConfig) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Every run of ``grid`` in sweep order (optimizer, k, seed; then the extra seeds), ``ranks[(stratum, α)]``
    decoded, and the counts ``{"trained", "from_store"}``."""
    # at least two local processes (see the module docstring); a scheduler ignores workers
    local = dataclasses.replace(config, workers=max(2, config.workers))
    runs, counts = [], {"trained": 0, "from_store": 0}
    for spec in [sweep_spec(grid, config.seed), *more_seeds_specs(grid, config.seed)]:
        sweep = run_points(local, train_point, spec, experiment="spectral-scaling")
        counts["trained"] += sweep.n_run
        counts["from_store"] += sweep.n_skipped
        for row in sweep.table:
            ranks = {(s, a): float(v) for s in STRATA_ALL for a, v in zip(RENYI_ALPHAS, row["ranks"][s])}
            runs.append(dict(row, ranks=ranks))
    return runs, counts


# ------------------------------------------------------------------------------------------------
# Figures
# ------------------------------------------------------------------------------------------------


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    png = figure_png(fig, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return png


def _rank_figure(widths: np.ndarray, table: dict, fits: dict) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(STRATA_ALL), figsize=(4 * len(STRATA_ALL), 7), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, metric in enumerate(METRICS):
        for col, stratum in enumerate(STRATA_ALL):
            ax = axes[row][col]
            for i, name in enumerate(OPTIMIZERS):
                R = table[(name, stratum, metric)]
                gm = np.exp(np.log(R).mean(axis=1))
                ax.errorbar(widths, gm, yerr=[gm - R.min(axis=1), R.max(axis=1) - gm], fmt="o", ms=4,
                            color=colors[i % len(colors)], capsize=2)
                f = fits[(name, stratum, metric)]
                ax.plot(widths, f.seed_fit.predict(widths), "-", color=colors[i % len(colors)],
                        label=f"{LABELS[name]} β={f.beta:.2f}")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{stratum} — {metric} rank R_{METRICS[metric]:g}")
            ax.set_xlabel("FFN width D")
            ax.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)


def _renyi_figure(runs: list[dict], width: int) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(STRATA_ALL), figsize=(4 * len(STRATA_ALL), 3.5), squeeze=False)
    finite = [a for a in RENYI_ALPHAS if math.isfinite(a)]
    for col, stratum in enumerate(STRATA_ALL):
        ax = axes[0][col]
        for name in OPTIMIZERS:
            sel = [r for r in runs if r["optimizer"] == name and r["width"] == width]
            curve = [np.exp(np.mean([math.log(r["ranks"][(stratum, a)]) for r in sel])) for a in finite]
            inf_val = np.exp(np.mean([math.log(r["ranks"][(stratum, math.inf)]) for r in sel]))
            line, = ax.plot(finite, curve, "o-", ms=3, label=LABELS[name])
            ax.axhline(inf_val, color=line.get_color(), ls=":", lw=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("α")
        ax.set_title(f"{stratum}: R_α at D={width} (dotted: R_∞)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)


# ------------------------------------------------------------------------------------------------
# run
# ------------------------------------------------------------------------------------------------


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _fmt_ci(lo: float, hi: float) -> str:
    return f"[{lo:.2f}, {hi:.2f}]"


def run(config: ExperimentConfig) -> ExperimentResult:
    """Train the grid of ``config.profile``, fit the β, decide the checks, draw the figures."""
    if importlib.util.find_spec("torch") is None:  # fail early, before any work
        raise ValueError("spectral-scaling needs PyTorch: pip install 'transformer_limits[train]'")
    return run_grid(GRIDS[config.profile], config)


def run_grid(grid: TrainingGrid, config: ExperimentConfig) -> ExperimentResult:
    """:func:`run` on an explicit :class:`TrainingGrid` (``config.profile`` only labels the result)."""
    start = time.perf_counter()
    runs, counts = _train_runs(grid, config)
    train_seconds = time.perf_counter() - start

    widths = np.array([k * grid.d_model for k in grid.ffn_mults], dtype=np.float64)
    table: dict[tuple[str, str, str], np.ndarray] = {}
    for name in OPTIMIZERS:
        for stratum in STRATA_ALL:
            for metric, a in METRICS.items():
                R = np.empty((widths.size, grid.seeds_of(name)))
                for r in runs:
                    if r["optimizer"] == name:
                        R[grid.ffn_mults.index(r["k"]), r["seed"] - config.seed] = r["ranks"][(stratum, a)]
                table[(name, stratum, metric)] = R
    fits = {key: fit_betas(widths, R, seed=config.seed + i) for i, (key, R) in enumerate(table.items())}

    result = ExperimentResult("spectral-scaling", config.profile)
    # precondition: training works
    margins = [(r["summary"]["unigram_entropy"] - r["summary"]["eval_loss"])
               / (r["summary"]["unigram_entropy"] - r["summary"]["bayes_loss"]) for r in runs]
    worst = int(np.argmin(margins))
    w = runs[worst]["summary"]
    result.checks.append(Check(
        "training_learns",
        f"every run closes >= {LEARN_FRACTION:g} of the gap between the unigram entropy H(mu) and the Bayes loss",
        LEARN_FRACTION, float(margins[worst]), (LEARN_FRACTION, math.inf), bool(margins[worst] >= LEARN_FRACTION),
        dict(alpha=0.0, false_failure_rate=0.0, sides="deterministic threshold", method="held-out cross-entropy",
             worst_run=w, unigram_entropy=w["unigram_entropy"], bayes_loss=w["bayes_loss"]),
        f"worst run: {w['optimizer']} D={w['width']} seed {w['seed']}: loss {w['eval_loss']:.3f} nats "
        f"(H(mu) = {w['unigram_entropy']:.3f}, Bayes {w['bayes_loss']:.3f})"))
    # deterministic threshold: a run at the unigram entropy closes 0 of the gap and fails it
    attach_power(result.checks[-1], deterministic_power(LEARN_FRACTION > 0), LEARNS_SPEC.alternative_text,
                 model="deterministic")
    muon_check = muon_hard_beta_check(fits)
    dion_check = dion_monotone_check(fits)
    result.checks += [muon_check, dion_check]

    beta_rows = []
    for (name, stratum, metric), f in fits.items():
        blo, bhi = f.bootstrap_interval()
        beta_rows.append(dict(optimizer=LABELS[name], stratum=stratum, metric=metric, beta=f.beta,
                              boot_ci_low=blo, boot_ci_high=bhi, ols_beta=f.ols.beta, ols_ci_low=f.ols.ci_low,
                              ols_ci_high=f.ols.ci_high, ols_r2=f.ols.r2, n_widths=int(widths.size),
                              n_seeds=grid.seeds_of(name)))
        result.fits[f"beta/{LABELS[name]}/{stratum}/{metric}"] = dict(
            beta=f.beta, bootstrap_ci=[blo, bhi], ols_beta=f.ols.beta, ols_ci=[f.ols.ci_low, f.ols.ci_high],
            r2=f.ols.r2, confidence=0.95, n_boot=N_BOOT, aggregate="geometric mean over seeds")
    result.tables["betas"] = beta_rows
    result.tables["beta_differences"] = [dict(check=c.name, **{k: v for k, v in p.items()})
                                         for c in (muon_check, dion_check) for p in c.statistics["pairs"]]
    result.tables["runs"] = [dict(**r["summary"], soft_global=r["ranks"][("GLOBAL", 1.0)],
                                  hard_global=r["ranks"][("GLOBAL", 2.0)]) for r in runs]
    result.tables["points"] = [dict(optimizer=LABELS[n], stratum=s, metric=m, width=float(widths[i]),
                                    **{f"seed{j}": float(R[i, j]) for j in range(R.shape[1])})
                               for (n, s, m), R in table.items() for i in range(widths.size)]
    result.figures.append(Figure("spectral_scaling_ranks", _rank_figure(widths, table, fits),
                                 "Post-activation FFN rank vs width (log-log), median over layers; points: geometric "
                                 "mean over seeds (bars: seed range); lines: fitted log R = c + β log D."))
    result.figures.append(Figure("spectral_scaling_renyi", _renyi_figure(runs, int(widths[-1])),
                                 f"Rényi rank R_α vs α of post-activation FFN spectra at D = {int(widths[-1])} "
                                 "(geometric mean over seeds, median over layers)."))

    g = {LABELS[n]: fits[(n, "GLOBAL", "hard")] for n in OPTIMIZERS}
    losses = {LABELS[n]: float(np.mean([r["summary"]["eval_loss"] for r in runs if r["optimizer"] == n]))
              for n in OPTIMIZERS}
    result.notes.append(
        f"Toy scale: d_model {grid.d_model}, {grid.n_layers} layers, widths D = {[int(x) for x in widths]}, "
        f"{grid.seeds} seeds" + "".join(f" ({LABELS[o]}: {n})" for o, n in grid.more_seeds)
        + f", {grid.steps} steps x {grid.batch_size} x {grid.context} tokens; synthetic Zipf "
        f"language with H(mu) = {runs[0]['summary']['unigram_entropy']:.3f} nats and Bayes loss "
        f"{runs[0]['summary']['bayes_loss']:.3f}; mean held-out loss per optimizer: "
        + ", ".join(f"{k} {v:.3f}" for k, v in losses.items()) + ".")
    result.notes.append("Hard-rank β (pooled tokens) with seed-bootstrap 95% CI: "
                        + "; ".join(f"{k} {f.beta:.2f} {_fmt_ci(*f.bootstrap_interval())}" for k, f in g.items())
                        + ". Paper (160M, global): AdamW 0.29, Muon 0.82, NorMuon 0.80, Dion 1/2 0.79, Dion 1/16 0.50.")
    for c in (muon_check, dion_check):
        parts = ", ".join(f"{p['stratum']}: Δβ = {p['delta']:.3f} [{p['lower']:.3f}, {p['upper']:.3f}]"
                          for p in c.statistics["pairs"])
        result.notes.append(f"{c.name}: {parts} (conservative bounds, each one-sided at confidence "
                            f"{1 - c.statistics['per_pair_level']:.3g}) — {toy_finding(c)}.")
    result.provenance = dict(grid=dict(grid.__dict__), optimizers=list(OPTIMIZERS), base_seed=config.seed,
                             processes=None if config.scheduler else max(2, config.workers),
                             scheduler=config.scheduler, runs_trained=counts["trained"], runs_from_store=counts["from_store"],
                             torch_threads_per_process=1, torch_version=_torch_version(),
                             optimizer_settings={LABELS[r["optimizer"]]: r["settings"] for r in runs},
                             train_seconds=train_seconds, total_seconds=time.perf_counter() - start,
                             run_seconds=[r["summary"]["seconds"] for r in runs],
                             strata_types=runs[0]["strata_types"], strata_share=runs[0]["strata_share"],
                             tokens_per_stratum=runs[0]["tokens_per_stratum"])
    return result


register_experiment(Experiment(
    name="spectral-scaling",
    title="Toy-scale optimizer-induced spectral scaling laws (paper C)",
    paper="C",
    claim="log R_hard = c + β log D with β_hard(Muon) > β_hard(AdamW) (MID/TAIL) and β_hard falling with "
          "Dion's rank fraction (docs/theory.md §C.7)",
    derivations=(),
    checks=(LEARNS_SPEC, MUON_SPEC, DION_SPEC),
    run=run,
    profiles=("full",),
    budget_s={"quick": 90.0, "full": 1200.0},
    requires=("torch",),
))
