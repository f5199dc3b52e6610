"""The seed bootstrap of level aggregates: what every rate fit resamples (docs/theory.md, the rate-fit
section).

Data layout: ``params`` ``(n_levels,)`` (refinement parameter p > 0, distinct), ``errors``
``(n_levels, n_seeds)`` (finite, > 0).  Levels are sorted by p (:func:`sorted_levels`) and each is
summarised by an aggregate over seeds, ``ē_i = mean_s errors[i, s]`` by default
(:func:`aggregate_seeds`: mean, rms, geometric mean or median).

:func:`seed_replicates` returns log ē ``(n_levels,)``, its bootstrap replicates ``(n_boot, n_levels)``
and delete-one-seed jackknife values ``(n_jack, n_levels)``.  ``resample="independent"`` draws seeds
with replacement at each level independently (conservative when seeds are coupled across levels);
``"paired"`` draws the same seed indices at every level (keeps the coupling).  The resampled mean
under-disperses by sqrt((n − 1)/n), so bootstrap deviations of log ē are expanded by
sqrt(n_seeds / (n_seeds − 1)).

Limits (checked before anything is allocated; ``ValueError`` naming ``n_boot``): ``n_boot`` ≤
``resource_limits.MAX_BOOTSTRAP_REPLICATES`` and :func:`bootstrap_memory_bytes` within
``MEMORY_BUDGET_BYTES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from transformer_limits.resource_limits import check_bootstrap, check_memory

__all__ = ["AGGREGATES", "RESAMPLING", "BOOTSTRAP_BYTES_PER_SEED_CELL", "SeedReplicates", "aggregate_seeds",
           "as_errors", "bootstrap_memory_bytes", "check_fit_options", "lognormal_seed_noise", "ols_line",
           "seed_replicates", "sorted_levels"]

AGGREGATES = ("mean", "rms", "geometric", "median")
RESAMPLING = ("independent", "paired")


def aggregate_seeds(values: np.ndarray, aggregate: str) -> np.ndarray:
    """Aggregate over the last axis."""
    if aggregate == "mean":
        return values.mean(axis=-1)
    if aggregate == "rms":
        return np.sqrt(np.mean(values**2, axis=-1))
    if aggregate == "geometric":
        return np.exp(np.mean(np.log(values), axis=-1))
    return np.median(values, axis=-1)


def check_fit_options(resample: str, aggregate: str, n_boot: int, confidence: float) -> None:
    if resample not in RESAMPLING:
        raise ValueError(f"resample must be one of {', '.join(RESAMPLING)}; got {resample!r}")
    if aggregate not in AGGREGATES:
        raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}; got {aggregate!r}")
    # the stated limit (transformer_limits.resource_limits.MAX_BOOTSTRAP_REPLICATES), before any
    # allocation; the memory of the resamples is checked in _replicates once the data's size is known
    check_bootstrap(n_boot, name="n_boot")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def as_errors(errors: Any, n_levels: int) -> np.ndarray:
    e = np.asarray(errors, dtype=np.float64)
    if e.ndim == 1:
        e = e[:, None]
    if e.ndim != 2 or e.shape[0] != n_levels:
        raise ValueError(f"errors must have shape (n_levels={n_levels}, n_seeds), got {np.shape(errors)}")
    if e.shape[1] < 1 or not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise ValueError("errors must be finite and > 0 (one column per seed)")
    return e


@dataclass(frozen=True)
class SeedReplicates:
    """Log level aggregates: observed ``(n_levels,)``, bootstrap ``(n_boot, n_levels)`` and jackknife
    ``(n_jack, n_levels)`` (None with one seed)."""

    observed: np.ndarray
    bootstrap: np.ndarray | None
    jackknife: np.ndarray | None
    n_seeds: int = 1


#: bytes per (resample, level, seed) cell of the seed bootstrap: the int64 resample indices, the
#: gathered float64 errors and one float64 temporary of the aggregate, plus one more for the median's
#: partition copy (measured peaks with tracemalloc: 9-25.5 bytes per cell; tests/test_stats_power_law.py)
BOOTSTRAP_BYTES_PER_SEED_CELL = 4 * 8


def bootstrap_memory_bytes(n_boot: int, n_levels: int, n_seeds: int) -> int:
    """Peak bytes of the seed bootstrap of ``n_boot`` resamples of an ``(n_levels, n_seeds)`` array."""
    return int(n_boot) * int(n_levels) * int(n_seeds) * BOOTSTRAP_BYTES_PER_SEED_CELL


def seed_replicates(errors: np.ndarray, n_boot: int, seed: int, resample: str, aggregate: str) -> SeedReplicates:
    n_levels, n_seeds = errors.shape
    check_memory(bootstrap_memory_bytes(n_boot, n_levels, n_seeds),
                 f"n_boot={int(n_boot)} on {n_levels} levels x {n_seeds} seeds")
    observed = np.log(aggregate_seeds(errors, aggregate))
    if n_seeds < 2 or n_boot == 0:
        return SeedReplicates(observed, None, None, n_seeds)
    rng = np.random.default_rng(seed)
    if resample == "independent":
        idx = rng.integers(0, n_seeds, size=(n_boot, n_levels, n_seeds))
        boot = aggregate_seeds(np.take_along_axis(errors[None], idx, axis=2), aggregate)
    else:
        idx = rng.integers(0, n_seeds, size=(n_boot, n_seeds))
        boot = aggregate_seeds(errors[:, idx], aggregate).T  # (n_levels, n_boot) -> (n_boot, n_levels)
    keep = ~np.eye(n_seeds, dtype=bool)  # row s: all seeds but s
    deleted = np.log(np.stack([aggregate_seeds(errors[:, k], aggregate) for k in keep], axis=1))  # (n_levels, n_seeds)
    if resample == "independent":
        jack = np.repeat(observed[None], n_levels * n_seeds, axis=0)
        rows = np.arange(n_levels * n_seeds)
        jack[rows, np.repeat(np.arange(n_levels), n_seeds)] = deleted.ravel()
    else:
        jack = deleted.T
    # The resampled aggregate's variance is (n−1)/n of the unbiased one: expand the deviations.
    log_boot = observed + np.sqrt(n_seeds / (n_seeds - 1)) * (np.log(boot) - observed)
    return SeedReplicates(observed, log_boot, jack, n_seeds)


def ols_line(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slope and intercept of y ≈ a + b x for each row of ``y`` (shape ``(..., n)``), by ordinary least
    squares: b = Σ (x − x̄)(y − ȳ) / Σ (x − x̄)², a = ȳ − b x̄.  ``x`` is shared (shape ``(n,)``) or
    one row per row of ``y`` (shape ``(..., n)``, e.g. pairs-bootstrap resamples)."""
    if x.ndim == 1:
        xc = x - x.mean()
        slope = (y - y.mean(axis=-1, keepdims=True)) @ xc / np.dot(xc, xc)
        return slope, y.mean(axis=-1) - slope * x.mean()
    xc = x - x.mean(axis=-1, keepdims=True)
    slope = np.sum(xc * (y - y.mean(axis=-1, keepdims=True)), axis=-1) / np.sum(xc * xc, axis=-1)
    return slope, y.mean(axis=-1) - slope * x.mean(axis=-1)



def sorted_levels(params: Any, errors: Any) -> tuple[str | None, np.ndarray, np.ndarray]:
    name = None
    if isinstance(params, Mapping):
        if len(params) != 1:
            raise ValueError(f"params must be an array or a one-column mapping, got columns {sorted(params)}")
        (name, params), = params.items()
    p = np.asarray(params, dtype=np.float64)
    if p.ndim != 1 or p.size < 2:
        raise ValueError(f"params must be 1-D with at least 2 levels, got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p <= 0):
        raise ValueError("params must be finite and > 0")
    order = np.argsort(p, kind="stable")
    p = p[order]
    if np.any(np.diff(p) == 0):
        raise ValueError("params must be distinct (one row of errors per level)")
    return name, p, as_errors(errors, p.size)[order]



def lognormal_seed_noise(level_errors: Any, n_seeds: int, sigma: float, seed: int) -> np.ndarray:
    """Synthetic per-seed errors ``e_i · exp(σ Z_is − σ²/2)`` (Z standard normal, mean factor 1), shape
    ``(n_levels, n_seeds)``, for calibrating fits and verdicts on data with a known law ``e_i``."""
    e = np.asarray(level_errors, dtype=np.float64)
    if e.ndim != 1 or not np.all(e > 0):
        raise ValueError("level_errors must be 1-D and > 0")
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma!r}")
    z = np.random.default_rng(seed).standard_normal((e.size, int(n_seeds)))
    return e[:, None] * np.exp(sigma * z - sigma**2 / 2)
