"""Paper B, Proposition 1.2: propagation of chaos with common noise (experiment ``propagation-of-chaos``).

Claim (docs/theory.md §B.5, Fournier–Guillin rates, corrected column): for X_0^i i.i.d. ~ μ_0,
``D_T(μ^N, μ) = E sup_{t≤T} W_2²(μ^N_t, μ_t) ≤ c_T N^{-1/2}`` for d < 4.

Simulation: the N-particle SDE (projected Euler–Maruyama, attention attractive, Q^TK = βI, V = I) and
a reference system of N_ref particles (independent initial draws from μ_0 = uniform on S^{d−1}),
**driven by the same common noise**: each step draws one random-feature field (m fresh features,
:meth:`~transformer_limits.numeric.sphere.common_noise_sde.CommonNoiseSDE.simulate_systems`) evaluated at
every particle of every system.  μ_t is approximated by the reference's empirical measure (its own
error is of order N_ref^{-1/2}, a floor that only flattens the largest-N levels).

W_2² is computed exactly with POT ``ot.emd2`` (uniform weights) for the **squared chordal cost**
``|x − y|² = 2 − 2⟨x, y⟩`` (equivalent to the squared geodesic cost up to a factor in [4/π², 1]);
the sup over t is taken over ``n_eval`` equally spaced times including t = 0 (times that the optimal plan
of a solved time bounds below the running maximum are not solved: :func:`sup_wasserstein2_squared`).

Check ``exponent_N`` (per d, Bonferroni over the d's): ``rate_at_least`` with claim N^-1/2 — the claim
is an upper bound, so the test fails only when the decay is significantly *slower* than N^-1/2
(one-sided, α = 0.01 in total).  On S^1 and S^2 the sharp empirical rates are N^-1 and log N/N, so
the measured slopes are expected to be steeper than −1/2.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from transformer_limits.numeric.kernel_family import MLP_FIELD
from transformer_limits.numeric.sphere.common_noise_sde import CommonNoiseSDE
from transformer_limits.numeric.sphere.transformer import uniform_sphere
from transformer_limits.verify.check_spec import CheckSpec
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult, PrecisionError, run_settings
from transformer_limits.verify.registry import register_experiment
from transformer_limits.verify.running import jsonable_settings, run_points
from transformer_limits.verify.stats.power_law import fit_power_law
from transformer_limits.verify.rate.plots import RateSeries, rate_figure

__all__ = ["EXPONENT_N", "SETTINGS", "wasserstein2_squared", "sup_wasserstein2_squared", "chaos_row", "chaos_errors", "evaluate_point",
           "chaos_errors_sweep", "run"]

#: the claimed rate N^-1/2 of E sup_t W_2² (Fournier–Guillin, d < 4)
CLAIMED_EXPONENT = -0.5
#: the check: rate_at_least(N^-1/2) per d at alpha / n_d (Bonferroni), family-wise alpha
EXPONENT_N = CheckSpec("exponent_N", verdict="rate_at_least", family="bonferroni", claimed=CLAIMED_EXPONENT,
                       alpha=0.01, alternative=-0.25)

#: the kernel families run() calls, by the settings key naming the CPU backend of each
KERNELS = {"backend": MLP_FIELD}
SETTINGS: dict[str, dict[str, Any]] = {
    "quick": dict(dims=(2, 3), N_levels=(8, 16, 32, 64, 128), N_ref=1024, T=1.0, n_steps=40, n_eval=5,
                  features=64, seeds=8, activation="relu", sigma_u=0.5, sigma_w=0.5, beta=1.0,
                  backend="numba"),
    "full": dict(dims=(2, 3), N_levels=(8, 16, 32, 64, 128, 256, 512), N_ref=4096, T=1.0, n_steps=100,
                 n_eval=11, features=128, seeds=24, activation="relu", sigma_u=0.5, sigma_w=0.5, beta=1.0,
                 backend="numba"),
}


#: POT's array backends we never pass (NumPy only): importing them costs seconds per process
_POT_BACKENDS_OFF = tuple(f"POT_BACKEND_DISABLE_{lib}" for lib in ("PYTORCH", "JAX", "CUPY", "TENSORFLOW"))


def _pot() -> Any:
    """The ``ot`` module, imported without its PyTorch/JAX/CuPy/TensorFlow backends (PyTorch alone is
    2.5 of POT's 4.4 s import in every sweep worker); the environment is restored afterwards, and an
    ``ot`` imported earlier is returned as it is."""
    if "ot" in sys.modules:
        return sys.modules["ot"]
    saved = {k: os.environ.get(k) for k in _POT_BACKENDS_OFF}
    os.environ.update({k: "1" for k in _POT_BACKENDS_OFF})
    try:
        import ot
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return ot


def wasserstein2_squared(X: np.ndarray, Y: np.ndarray) -> float:
    """W_2² between the uniform empirical measures of X (n, d) and Y (M, d), squared chordal cost."""
    ot = _pot()
    return float(ot.emd2(np.full(len(X), 1.0 / len(X)), np.full(len(Y), 1.0 / len(Y)), _chordal_cost(X, Y)))


def _chordal_cost(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Squared chordal cost matrix |x_i − y_j|² = 2 − 2⟨x_i, y_j⟩ (clipped at 0), shape (len(X), len(Y))."""
    return np.clip(2.0 - 2.0 * X @ Y.T, 0.0, None)


def sup_wasserstein2_squared(X: np.ndarray, Y: np.ndarray, *, margin: float = 1e-9) -> tuple[float, int]:
    """max_k W_2²(μ[X_k], μ[Y_k]) over the times k of X (K, n, d) and Y (K, M, d), exactly, and how many
    transport problems were solved for it.

    Any coupling bounds W_2² from above, so the sparse plan π^(k') optimal at a solved time k' bounds
    every other time: W_2²(t_k) ≤ Σ_ij π^(k')_ij |x_i(t_k) − y_j(t_k)|², O((n + M) d) to evaluate against
    the O(nM) network simplex.  A time whose best bound is below the running maximum (by a relative
    ``margin`` that covers rounding) cannot be the maximum and is not solved; the pending time with the
    largest bound is solved next, starting from the last time (common noise spreads the systems apart,
    so the maximum is usually late).  The order changes how much is solved, never the value: it is the
    value ``ot.emd2`` gives at the maximising time (bit for bit the brute-force maximum unless two times
    agree to ``margin``).
    """
    ot = _pot()
    n_times = len(X)
    if n_times == 0 or len(Y) != n_times:
        raise ValueError(f"X and Y need the same positive number of times, got {len(X)} and {len(Y)}")
    a, b = np.full(X.shape[1], 1.0 / X.shape[1]), np.full(Y.shape[1], 1.0 / Y.shape[1])
    bound = np.full(n_times, np.inf)
    pending = set(range(n_times))
    best, solved, k = -np.inf, 0, n_times - 1
    while True:
        pending.discard(k)
        value, log = ot.emd2(a, b, _chordal_cost(X[k], Y[k]), return_matrix=True)
        solved += 1
        best = max(best, float(value))
        rows, cols = np.nonzero(log["G"])
        weights = log["G"][rows, cols]
        for q in sorted(pending):
            pair_cost = np.clip(2.0 - 2.0 * np.einsum("ij,ij->i", X[q][rows], Y[q][cols]), 0.0, None)
            bound[q] = min(bound[q], float(weights @ pair_cost))
            if bound[q] * (1.0 + margin) < best:
                pending.discard(q)
        if not pending:
            return best, solved
        k = max(sorted(pending), key=lambda q: bound[q])


def chaos_row(s: dict[str, Any], d: int, seed: int, j: int) -> list[float]:
    """sup_t W_2²(μ^N_t, μ^{N_ref}_t) at every N level for seed j (one common-noise path for all systems;
    ``s["independent_noise"]`` gives the reference its own path: the wrong-model control)."""
    sde = CommonNoiseSDE(d, s["activation"], s["sigma_u"], s["sigma_w"], attention="attractive", beta=s["beta"],
                         backend=s.get("backend", "numpy"), precision=s.get("precision", "float64"))
    eval_steps = np.linspace(0, s["n_steps"], s["n_eval"]).round().astype(int)
    rng = np.random.default_rng([seed, d, j])
    systems = [uniform_sphere(s["N_ref"], d, rng)] + [uniform_sphere(n, d, rng) for n in s["N_levels"]]
    if s.get("independent_noise", False):
        # the deliberately wrong control: the reference feels a noise path of its own, so μ^N_t does
        # not approach μ_t (conditional on the common noise) and the error stops falling with N
        own = sde.simulate_systems(systems[:1], s["T"], s["n_steps"], s["features"],
                                   np.random.default_rng([seed, d, j, 1]), eval_steps=eval_steps)[0]
        traj = [own] + sde.simulate_systems(systems[1:], s["T"], s["n_steps"], s["features"], rng,
                                            eval_steps=eval_steps)
    else:
        traj = sde.simulate_systems(systems, s["T"], s["n_steps"], s["features"], rng, eval_steps=eval_steps)
    traj = [np.asarray(tr, dtype=np.float64) for tr in traj]  # W_2 (POT) in float64 whatever the run's precision
    ref = traj[0]
    # the sup over t prunes times that a solved time's plan bounds below the maximum (same value)
    return [sup_wasserstein2_squared(tr, ref)[0] for tr in traj[1:]]


def chaos_errors(s: dict[str, Any], d: int, seed: int) -> np.ndarray:
    """E-samples of sup_t W_2²(μ^N_t, μ^{N_ref}_t), shape (n_N, seeds), serially in this process."""
    return np.array([chaos_row(s, d, seed, j) for j in range(s["seeds"])]).T


def evaluate_point(point: dict[str, Any]) -> dict[str, Any]:
    """Sweep function: ``{"errors": chaos_row(...)}`` for one (d, seed j)."""
    return {"errors": chaos_row(point["settings"], point["d"], point["base_seed"], point["j"])}


def chaos_errors_sweep(config: ExperimentConfig, s: dict[str, Any]) -> tuple[dict[int, np.ndarray], dict[str, float]]:
    """:func:`chaos_errors` for every d through :func:`~transformer_limits.verify.running.run_points`
    (``config.workers`` processes, progress bar, resumable with ``config.store``); returns
    ``{d: (n_N, seeds)}`` and the summed point seconds per d."""
    settings = jsonable_settings(s)
    grid = {"grid": {"d": list(s["dims"]), "j": list(range(s["seeds"]))},
            "fixed": {"settings": settings, "base_seed": config.seed}}
    sweep = run_points(config, evaluate_point, grid, experiment="propagation-of-chaos", version=2)
    out = {d: np.empty((len(s["N_levels"]), s["seeds"])) for d in s["dims"]}
    seconds: dict[str, float] = {}
    for record in sweep.records:
        d, j = record.params["d"], record.params["j"]
        out[d][:, j] = record.completed_result["errors"]
        seconds[f"d={d}"] = seconds.get(f"d={d}", 0.0) + (record.elapsed_s or 0.0)
    return out, seconds


def _runtime_settings(config: ExperimentConfig, independent_noise: bool = False) -> dict[str, Any]:
    """The profile's settings with the backend of the MLP-field kernels on ``config.device`` (cpu in
    float64: the settings' numba) and the precision; a float64 run's settings are the profile's exactly
    (sweep points and stores keep their keys)."""
    return run_settings(config, dict(SETTINGS[config.profile], **({"independent_noise": True} if independent_noise else {})),
                        KERNELS)


def precision_probe(config: ExperimentConfig) -> PrecisionError:
    """Positions at T of the largest N-level system and the reference (d = dims[0], seed j = 0, one common
    noise): the run's float32 backend against float64 NumPy."""
    s = _runtime_settings(config)
    d, n = s["dims"][0], s["N_levels"][-1]

    def positions(settings: dict[str, Any]) -> np.ndarray:
        sde = CommonNoiseSDE(d, s["activation"], s["sigma_u"], s["sigma_w"], attention="attractive",
                             beta=s["beta"], backend=settings["backend"], precision=settings.get("precision", "float64"))
        rng = np.random.default_rng([config.seed, d, 0])
        systems = [uniform_sphere(s["N_ref"], d, rng), uniform_sphere(n, d, rng)]
        out = sde.simulate_systems(systems, s["T"], s["n_steps"], s["features"], rng, eval_steps=[s["n_steps"]])
        return np.concatenate([np.asarray(o[-1], dtype=np.float64) for o in out])

    return PrecisionError.between(f"positions at T of the N = {n} and N_ref = {s['N_ref']} systems (d = {d})",
                                  positions(s), positions(dict(s, backend="numpy", precision="float64")))


def run(config: ExperimentConfig, *, independent_noise: bool = False) -> ExperimentResult:
    """Run the experiment; ``independent_noise=True`` is the deliberately wrong control (the
    reference system driven by a noise path of its own: no propagation of chaos)."""
    s = _runtime_settings(config, independent_noise)
    result = ExperimentResult(experiment="propagation-of-chaos", profile=config.profile)
    N = np.array(s["N_levels"])
    alpha = EXPONENT_N.required_alpha
    alpha_each = alpha / len(s["dims"])
    series, fits = [], {}
    errors, seconds = chaos_errors_sweep(config, s)
    for d in s["dims"]:
        err = errors[d]
        fit = fits[f"d={d}"] = fit_power_law({"N": N}, err, window="all", seed=config.seed)
        result.fits[f"N_d{d}"] = fit.to_dict()
        result.tables[f"chaos_d{d}"] = [{"N": int(n), "mean_sup_W2sq": float(e.mean()),
                                         "sem": float(e.std(ddof=1) / np.sqrt(e.size))} for n, e in zip(N, err)]
        series.append(RateSeries(f"d = {d}", N, err, fit, CLAIMED_EXPONENT))
    check = EXPONENT_N.decide(fits, claim=f"E sup_t W_2²(μ^N_t, μ_t) ≲ N^-1/2 for d ∈ {list(s['dims'])} "
                              "(one-sided, Bonferroni)", sides="one-sided (lower bound of q), per d at α/n_d")
    result.checks = [check]
    members = check.statistics["members"]
    result.notes.append("fitted slopes: " + ", ".join(
        f"{label}: {c['measured']:.3f} (lower {1 - alpha_each:.3g} bound {c['ci'][0]:.3f})" for label, c in members.items())
        + "; sharp empirical-measure rates on S^1/S^2 are N^-1 and log N/N")
    result.figures = [rate_figure("propagation_of_chaos", "E sup_t W_2²(μ^N_t, μ^{N_ref}_t), same common noise",
                                  series, xlabel="tokens N", ylabel="E sup_t W_2² (chordal)")]
    result.provenance["seconds"] = seconds
    return result


register_experiment(Experiment(
    name="propagation-of-chaos",
    title="Propagation of chaos with common noise: E sup_t W_2²(μ^N_t, μ_t) vs N",
    paper="B",
    claim="D_T(μ^N, μ) ≤ c_T N^{-1/2} for d < 4 (Fournier–Guillin)",
    derivations=("mlp-kernel",),
    checks=(EXPONENT_N,),
    run=run,
    budget_s={"quick": 20.0, "full": 720.0},
    settings=SETTINGS,
    kernels=KERNELS,
    precisions=("float64", "float32"),
    precision_probe=precision_probe,
))
