"""Local orders and the asymptotic window: which levels of a refinement show the asymptotic rate
(docs/theory.md, the rate-fit section).

* :func:`local_orders`: ``q_i = log(ē_{i+1}/ē_i) / log(p_{i+1}/p_i)`` with bootstrap spread, shape
  ``(n_levels − 1,)``.
* :func:`choose_asymptotic_window`: drops levels below a given noise floor, a stalled tail (errors stop
  decreasing: round-off or statistical plateau) and a pre-asymptotic head (a straight line through
  (log p, log ē) fails the F lack-of-fit test), and says which levels were dropped and why.  The claim
  is never used to choose levels.  Bootstrap CIs of a fit are conditional on the chosen window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from transformer_limits.verify.stats.fit_quality import FitQuality, fit_quality
from transformer_limits.verify.stats.seed_bootstrap import (
    SeedReplicates,
    check_fit_options,
    ols_line,
    seed_replicates,
    sorted_levels,
)

__all__ = ["LocalOrders", "AsymptoticWindow", "WINDOW_DEFAULTS", "local_orders", "choose_asymptotic_window",
           "orders_of_replicates", "pair_orders", "select_window", "window_options"]


def pair_orders(log_p: np.ndarray, log_e: np.ndarray) -> np.ndarray:
    """Local orders of consecutive levels along the last axis."""
    return np.diff(log_e, axis=-1) / np.diff(log_p)


@dataclass(frozen=True)
class LocalOrders:
    """``orders[i] = log(ē_{i+1}/ē_i) / log(p_{i+1}/p_i)`` for consecutive levels, shape ``(n − 1,)``,
    with bootstrap standard deviation ``std`` and percentile interval ``low``/``high`` (NaN with one
    seed); ``params`` are the levels' p (sorted)."""

    params: np.ndarray
    orders: np.ndarray
    std: np.ndarray
    low: np.ndarray
    high: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        return {k: [float(v) for v in getattr(self, k)] for k in ("params", "orders", "std", "low", "high")}


def orders_of_replicates(params: np.ndarray, reps: SeedReplicates, confidence: float) -> LocalOrders:
    log_p = np.log(params)
    orders = pair_orders(log_p, reps.observed)
    if reps.bootstrap is None:
        nan = np.full_like(orders, np.nan)
        return LocalOrders(params, orders, nan, nan, nan)
    boot = pair_orders(log_p, reps.bootstrap)
    tail = (1.0 - confidence) / 2
    low, high = np.quantile(boot, [tail, 1 - tail], axis=0)
    return LocalOrders(params, orders, np.std(boot, axis=0, ddof=1), low, high)



def local_orders(params: Any, errors: Any, *, n_boot: int = 2000, seed: int = 0, confidence: float = 0.95,
                 resample: str = "independent", aggregate: str = "mean") -> LocalOrders:
    """Pairwise local orders of the level aggregates with their bootstrap spread (see :class:`LocalOrders`)."""
    check_fit_options(resample, aggregate, n_boot, confidence)
    _, p, e = sorted_levels(params, errors)
    return orders_of_replicates(p, seed_replicates(e, n_boot, seed, resample, aggregate), confidence)


@dataclass(frozen=True)
class AsymptoticWindow:
    """Levels (indices into the p-sorted levels) used for the fit, and why the others were not.

    ``excluded`` maps a level index to its reason; ``reasons`` is a human-readable account, one line per
    decision; ``reference_order`` is the order the plateau rule compared against.
    """

    used: tuple[int, ...]
    excluded: dict[int, str]
    reasons: tuple[str, ...]
    reference_order: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"used": list(self.used), "excluded": {str(k): v for k, v in self.excluded.items()},
                "reasons": list(self.reasons), "reference_order": self.reference_order}


def choose_window(p: np.ndarray, reps: SeedReplicates, *, expected: float | None, noise_floor: float | None,
                   floor_margin: float, stall_fraction: float, stall_z: float, curvature_alpha: float,
                   min_levels: int) -> AsymptoticWindow:
    log_p, log_e = np.log(p), reps.observed
    used = list(range(p.size))
    excluded: dict[int, str] = {}
    reasons: list[str] = []

    def orders(idx: list[int]) -> tuple[np.ndarray, np.ndarray]:
        q = pair_orders(log_p[idx], log_e[idx])
        if reps.bootstrap is None:
            return q, np.zeros_like(q)
        return q, np.std(pair_orders(log_p[idx], reps.bootstrap[:, idx]), axis=0, ddof=1)

    def drop(i: int, why: str) -> None:
        used.remove(i)
        excluded[i] = why
        reasons.append(f"level {i} (p={p[i]:.6g}): {why}")

    # 1. noise floor (given): aggregates within floor_margin of it carry no rate information.
    if noise_floor is not None:
        if not noise_floor > 0:
            raise ValueError(f"noise_floor must be > 0, got {noise_floor!r}")
        threshold = floor_margin * noise_floor
        for i in list(used):
            if np.exp(log_e[i]) <= threshold:
                drop(i, f"error {np.exp(log_e[i]):.3g} <= {floor_margin:g} x noise floor {noise_floor:.3g}")
        if len(used) < 2:
            raise ValueError(
                f"noise_floor: fewer than 2 levels have errors above {floor_margin:g} x {noise_floor:.3g}")

    # 2. stalled tail (plateau): the finest errors stop decreasing at the reference rate.  The
    #    reference is the data's own median local order, never the claim: a wrong claim must not be
    #    able to trim the data until only a confirming (wide) window is left.
    q, _ = orders(used)
    reference = float(np.median(q))
    if reference >= 0:
        reasons.append(f"reference order {reference:.3g} is not a decay; no plateau/pre-asymptotic trimming")
        return AsymptoticWindow(tuple(used), excluded, tuple(reasons), reference)
    stall = stall_fraction * reference
    while len(used) > min_levels:
        q, sd = orders(used)
        if q[-1] - stall_z * sd[-1] <= stall:
            break
        drop(used[-1], f"plateau: local order {q[-1]:.3g} from the previous level is shallower than "
                       f"{stall_fraction:g} x reference {reference:.3g} by more than {stall_z:g} bootstrap sd "
                       f"(errors stop decreasing)")

    # 3. curvature: while the straight-line fit over the window fails the lack-of-fit test, drop the
    #    end (coarsest or finest level) whose removal leaves the better-fitting line.  The choice uses
    #    the data only, never the claimed exponent.
    while len(used) > min_levels and reps.bootstrap is not None:
        lof = straight_line_lack_of_fit(log_p[used], log_e[used], reps.bootstrap[:, used], reps.n_seeds)
        if not lof.p_value < curvature_alpha:
            break
        head, tail = used[1:], used[:-1]
        without_head = straight_line_lack_of_fit(log_p[head], log_e[head], reps.bootstrap[:, head], reps.n_seeds)
        without_tail = straight_line_lack_of_fit(log_p[tail], log_e[tail], reps.bootstrap[:, tail], reps.n_seeds)
        q, _ = orders(used)
        test = f"straight-line lack-of-fit F-test p={lof.p_value:.2g} < {curvature_alpha:g}"
        if without_head.f_statistic * without_head.dof <= without_tail.f_statistic * without_tail.dof:
            drop(used[0], f"pre-asymptotic: {test}; dropping the coarsest level fits best "
                          f"(local orders {q[0]:.3g} -> {q[-1]:.3g})")
        else:
            kind = "approaching a plateau" if q[-1] > np.median(q) else "off the power law at the fine end"
            drop(used[-1], f"{kind}: {test}; dropping the finest level fits best "
                           f"(local orders {q[0]:.3g} -> {q[-1]:.3g})")
    if len(used) == min_levels and excluded:
        reasons.append(f"window stopped at min_levels={min_levels}")
    if not excluded:
        reasons.append("all levels used: no noise floor, plateau or pre-asymptotic drift detected")
    return AsymptoticWindow(tuple(used), excluded, tuple(reasons), reference)


WINDOW_DEFAULTS = dict(floor_margin=4.0, stall_fraction=0.5, stall_z=2.0, curvature_alpha=0.01, min_levels=3)


def straight_line_lack_of_fit(log_p: np.ndarray, log_e: np.ndarray, log_boot: np.ndarray, n_seeds: int) -> FitQuality:
    """Lack-of-fit of a straight line through (log p, log ē)."""
    slope, intercept = ols_line(log_p, log_e)
    return fit_quality(log_e, np.exp(intercept + slope * log_p), log_boot, 2, n_seeds)


def choose_asymptotic_window(params: Any, errors: Any, *, expected: float | None = None,
                             noise_floor: float | None = None, n_boot: int = 2000, seed: int = 0,
                             resample: str = "independent", aggregate: str = "mean",
                             **rules: Any) -> AsymptoticWindow:
    """Pick the levels that show the asymptotic rate.  Rules, in order (levels sorted by p):

    1. *noise floor*: with ``noise_floor`` given, drop levels whose aggregate is ≤
       ``floor_margin`` (4) × noise_floor (round-off or Monte-Carlo floor);
    2. *plateau*: while the last local order is shallower than ``stall_fraction`` (0.5) × the
       reference order by more than ``stall_z`` (2) bootstrap standard deviations, drop the finest
       level (errors stop decreasing);
    3. *curvature*: while a straight line through the remaining (log p, log ē) fails the F lack-of-fit
       test at level ``curvature_alpha`` (0.01; needs ≥ 2 seeds), drop the coarsest level
       (*pre-asymptotic*: local orders still drifting) or the finest one (*approaching a plateau*),
       whichever leaves the smaller residual sum of squares.

    The reference order of rule 2 is the data's median local order; ``expected`` (the claim) is
    recorded but never used to choose levels, and rule 3 does not look at the claim at all.  Rules 2–3 never go below
    ``min_levels`` (3) levels.  Data that follow a straight line at a wrong rate are not trimmed by
    rule 3 (no curvature), so a wrong claim cannot select its own confirming window.
    """
    check_fit_options(resample, aggregate, n_boot, 0.95)
    _, p, e = sorted_levels(params, errors)
    options = window_options(rules)
    return choose_window(p, seed_replicates(e, n_boot, seed, resample, aggregate), expected=expected,
                          noise_floor=noise_floor, **options)


def window_options(rules: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(rules) - set(WINDOW_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown window rule option(s) {unknown}; known: {sorted(WINDOW_DEFAULTS)}")
    options = {**WINDOW_DEFAULTS, **rules}
    if int(options["min_levels"]) < 2:
        raise ValueError(f"min_levels must be >= 2, got {options['min_levels']!r}")
    return options



def select_window(window: Any, p: np.ndarray, reps: SeedReplicates, expected: float | None,
                   noise_floor: float | None, rules: Mapping[str, Any]) -> AsymptoticWindow:
    options = window_options(rules)
    if isinstance(window, str):
        if window == "auto":
            return choose_window(p, reps, expected=expected, noise_floor=noise_floor, **options)
        if window == "all":
            return AsymptoticWindow(tuple(range(p.size)), {}, ("all levels used (window='all')",), expected)
        raise ValueError(f"window must be 'auto', 'all' or level indices, got {window!r}")
    try:
        used = sorted({int(i) for i in window})
    except (TypeError, ValueError):
        raise ValueError(f"window must be 'auto', 'all' or level indices, got {window!r}") from None
    if len(used) < 2 or used[0] < 0 or used[-1] >= p.size:
        raise ValueError(f"window must hold at least 2 indices in [0, {p.size}), got {window!r}")
    excluded = {i: "outside the window given by the caller" for i in range(p.size) if i not in used}
    return AsymptoticWindow(tuple(used), excluded, ("window given by the caller",), expected)
