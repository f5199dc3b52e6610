"""One-sided test that one fitted exponent exceeds another, for several strata at once.

For each pair ``(S, A, B)`` the claim is ``Δ_S = β_A(S) − β_B(S) > 0`` (docs/theory.md §C.7: the
hard-rank exponent of one optimizer exceeds another's).  The null hypothesis of the test *is* the
claim, so it fails only when the data contradict it: with ``m`` pairs each is tested at level
``α' = α/m`` (Bonferroni), and the check fails when some pair's conservative upper bound

    U_S = max( q_{1−α'}(Δ*_b),  Δ̂_ols + t_{1−α', ν} · sqrt(SE_A² + SE_B²) )

is below 0.  ``Δ*_b = β*_A,b − β*_B,b`` are the paired bootstrap replicates of the two seed
bootstraps (independent resamples), ``Δ̂_ols`` the difference of the OLS slopes on all (width,
seed) points with standard errors ``SE_A``, ``SE_B`` on ``n_A − 2``, ``n_B − 2`` degrees of
freedom, and ``ν`` their Welch–Satterthwaite degrees of freedom.  A true claim (``Δ_S ≥ 0`` for
every ``S``) fails with probability at most ``α``; the lower bound ``L_S`` (the smaller of the two
lower ``1 − α'`` bounds) says whether the claim is positively supported (``L_S > 0``).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from transformer_limits.verify.stats.intervals import t_interval, t_quantile, welch_satterthwaite_dof
from transformer_limits.verify.verdicts import Check

__all__ = ["attach_ordering_power", "beta_difference_check", "bootstrap_difference_bounds", "ordering_finding",
           "ordering_power", "welch_difference_bounds", "welch_ordering_check"]


def bootstrap_difference_bounds(boot_a: np.ndarray, boot_b: np.ndarray, level: float) -> dict[str, Any]:
    """One-sided percentile bounds of a difference of two independently estimated quantities,
    ``Δ = a − b``, from their bootstrap replicates.

    The two bootstraps resample independent data (separate seeds), so pairing the b-th replicate of
    each, ``Δ*_b = a*_b − b*_b`` (b < min(n_a, n_b)), is a draw from the bootstrap law of Δ.  Returns
    ``lower`` = the ``level``-quantile and ``upper`` = the ``(1 − level)``-quantile of Δ* (each a
    one-sided ``1 − level`` bound), the replicates ``differences`` and their count ``n``."""
    a, b = np.asarray(boot_a, dtype=np.float64).ravel(), np.asarray(boot_b, dtype=np.float64).ravel()
    if a.size == 0 or b.size == 0:
        raise ValueError("boot_a, boot_b: need bootstrap replicates of both estimates")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    n = min(a.size, b.size)
    diff = a[:n] - b[:n]
    return dict(lower=float(np.quantile(diff, level)), upper=float(np.quantile(diff, 1.0 - level)),
                differences=diff, n=n)


def welch_difference_bounds(delta: float, se_a: float, nu_a: float, se_b: float, nu_b: float,
                            level: float) -> dict[str, float]:
    """One-sided Welch t bounds of a difference of two independent estimates, ``Δ = a − b``.

    ``se = sqrt(SE_a² + SE_b²)``, Welch–Satterthwaite ``ν = se⁴ / (SE_a⁴/ν_a + SE_b⁴/ν_b)`` and
    ``t = t_{1−level, ν}``; ``lower = Δ − t·se`` and ``upper = Δ + t·se`` are the one-sided
    ``1 − level`` bounds.  Two exact estimates (se = 0) know Δ without error: ν = ∞, t = 0."""
    se = math.hypot(se_a, se_b)
    if se == 0:
        return dict(se=0.0, dof=math.inf, t=0.0, lower=delta, upper=delta)
    nu = welch_satterthwaite_dof(se_a, nu_a, se_b, nu_b)
    return dict(se=se, dof=nu, t=t_quantile(1.0 - level, nu),
                lower=t_interval(delta, se, nu, level=1.0 - level, side="lower")[0],
                upper=t_interval(delta, se, nu, level=1.0 - level, side="upper")[1])


def _pair_bounds(stratum: str, a: Any, b: Any, level: float) -> dict[str, Any]:
    """The bounds of ``Δ = β_A − β_B`` at one-sided level ``level`` (see the module docstring)."""
    delta = a.beta - b.beta
    replicates = bootstrap_difference_bounds(a.seed_fit.exponent.bootstrap, b.seed_fit.exponent.bootstrap, level)
    boot = replicates["differences"]
    ols_delta = a.ols.beta - b.ols.beta
    welch = welch_difference_bounds(ols_delta, a.ols.stderr, a.ols.n - 2, b.ols.stderr, b.ols.n - 2, level)
    se, nu, t_upper, t_lower = welch["se"], welch["dof"], welch["upper"], welch["lower"]
    boot_hi, boot_lo = replicates["upper"], replicates["lower"]
    upper, lower = max(boot_hi, t_upper), min(boot_lo, t_lower)
    return dict(stratum=stratum, delta=delta, ols_delta=ols_delta, upper=upper, lower=lower,
                bootstrap_upper=boot_hi, t_upper=t_upper, se=se, dof=nu,
                p_value_claim_false=float(np.mean(boot <= 0.0)), supported=bool(lower > 0.0))


def beta_difference_check(name: str, claim: str, pairs: Sequence[tuple[str, Any, Any]],
                          alpha: float = 0.05, *, effect: float | None = None) -> Check:
    """One-sided test of ``H0: β_A(S) − β_B(S) ≥ 0`` for every ``(S, A, B)`` in ``pairs``.

    ``A`` and ``B`` are exponent fits with ``beta`` (the point estimate), ``seed_fit.exponent.bootstrap``
    (the seed-bootstrap replicates of β, equal counts for A and B) and ``ols`` with ``beta``,
    ``stderr`` and ``n`` (the OLS slope on all points), e.g. ``spectral_scaling.BetaFit``.  Per
    pair, level ``α/len(pairs)`` (Bonferroni); the bound of each pair is in the module docstring.
    The check fails when some pair's upper bound is below 0: the data then contradict the claim; a
    true claim fails with probability ≤ α.  ``measured`` and ``ci`` are those of the pair with the
    smallest upper bound; ``statistics["pairs"]`` lists every pair with ``supported`` (its lower
    ``1 − α'`` bound > 0, i.e. the claim is positively established).  ``effect``: the published size
    of the ordering; the power against one pair reversed by it (:func:`ordering_power`) and the
    finding (:func:`ordering_finding`) are recorded.
    """
    if not pairs:
        raise ValueError("pairs: need at least one (stratum, fit_a, fit_b)")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    level = alpha / len(pairs)
    rows = [_pair_bounds(stratum, a, b, level) for stratum, a, b in pairs]
    worst = min(rows, key=lambda r: r["upper"])
    passed = all(r["upper"] >= 0.0 for r in rows)
    st = dict(alpha=alpha, false_failure_rate=alpha, sides="one-sided (upper bound of Δβ)",
              method="conservative: max(seed-bootstrap percentile, Welch t on all points); Bonferroni over pairs",
              per_pair_level=level, n_boot=int(pairs[0][1].seed_fit.exponent.bootstrap.size), pairs=rows,
              supported=all(r["supported"] for r in rows))
    if not passed:
        note = (f"contradicted: Δβ({worst['stratum']}) = {worst['delta']:.3f} with upper bound "
                f"{worst['upper']:.3f} < 0 at level {level:g}")
    elif st["supported"]:
        note = "supported: every lower bound of Δβ is above 0"
    else:
        note = ("not contradicted, but not established either: some interval for Δβ contains 0 "
                "(the check has little power at this scale)")
    check = Check(name, claim, 0.0, worst["delta"], (worst["lower"], worst["upper"]), passed, st, note)
    if effect is not None:
        attach_ordering_power(check, rows, effect)
    return check


def welch_ordering_check(name: str, claim: str, pairs: Sequence[tuple[str, str, Any, Any]], alpha: float, *,
                         effect: float | None = None) -> Check:
    """One-sided test of ``β(a) ≥ β(b)`` for every ``(a, b, fit_a, fit_b)`` in ``pairs`` from the OLS fits
    alone (``beta``, ``stderr``, ``n``; e.g. :class:`~transformer_limits.verify.stats.width_scaling.WidthScalingFit`,
    one run per width, no seeds to resample): per pair at level ``α/m`` (Bonferroni over the m pairs),
    ``Δ̂ = β̂_a − β̂_b`` with its Welch upper bound ``U = Δ̂ + t_{1−α/m, ν} SE``
    (:func:`welch_difference_bounds`, ν = Welch–Satterthwaite on n − 2 degrees of freedom each).  The
    check fails when some ``U < 0`` (the data contradict the ordering), so a true ordering fails with
    probability at most α; ``statistics["pairs"]`` lists each pair with ``supported`` (its lower bound
    > 0) and ``contradicted``.  ``effect``: the power against one pair reversed by it and the finding
    (:func:`attach_ordering_power`)."""
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")
    if not pairs:
        raise ValueError("pairs: need at least one (higher, lower) pair")
    level = alpha / len(pairs)
    rows: list[dict[str, Any]] = []
    for a, b, fa, fb in pairs:
        delta = fa.beta - fb.beta
        welch = welch_difference_bounds(delta, fa.stderr, fa.n - 2, fb.stderr, fb.n - 2, level)
        se, dof, t, lower, upper = welch["se"], welch["dof"], welch["t"], welch["lower"], welch["upper"]
        rows.append(dict(higher=a, lower=b, delta=delta, se=se, dof=dof, t=t, upper=upper, lower_bound=lower,
                         supported=bool(lower > 0.0), contradicted=bool(upper < 0.0)))
    worst = min(rows, key=lambda r: r["upper"])
    passed = not any(r["contradicted"] for r in rows)
    supported = all(r["supported"] for r in rows)
    if not passed:
        note = (f"contradicted: β_hard({worst['higher']}) − β_hard({worst['lower']}) = {worst['delta']:.3f}, "
                f"upper {1 - level:.4g} bound {worst['upper']:.3f} < 0")
    elif supported:
        note = "supported: every lower bound of Δβ is above 0"
    else:
        note = "not contradicted, not established: some interval for Δβ contains 0 (wide intervals, 8 widths)"
    check = Check(
        name, claim, 0.0, float(worst["delta"]), (-math.inf, float(worst["upper"])), passed,
        dict(alpha=alpha, false_failure_rate=alpha, sides="one-sided (upper bound of Δβ)",
             method="Welch t on the OLS fits' standard errors; Bonferroni over pairs",
             per_pair_level=level, pairs=rows, supported=supported),
        note)
    return check if effect is None else attach_ordering_power(check, rows, effect)


def attach_ordering_power(check: Check, rows: Sequence[dict[str, Any]], effect: float) -> Check:
    """Record on ``check`` (an ordering family over ``rows``) its power against one pair reversed by
    ``effect`` and the finding about the published effect size (in place; returned)."""
    from transformer_limits.verify.verdicts import attach_power

    power = ordering_power(rows, effect)
    check.statistics.update(effect_size=effect, power_per_pair=power["per_pair"],
                            finding=ordering_finding(rows, effect))
    return attach_power(check, power["power"], f"Δβ_hard = {-effect:.3g} in one pair (the published ordering "
                        f"of size {effect:.3g}, reversed)", distance=effect, half_width=power["half_width"],
                        se=power["se"])


def ordering_power(rows: Sequence[dict[str, Any]], effect: float) -> dict[str, Any]:
    """Power of an ordering family (each pair rejected when its upper bound of Δ is below 0) against
    one pair reversed by the published effect size, Δ = −``effect``; by the shift model
    (:func:`~transformer_limits.verify.stats.power.bound_power`) this is also the probability that
    the lower bound clears 0 when Δ = +effect (the ordering *reproduced* if the paper is right) and
    that the upper bound falls below ``effect`` when Δ = 0 (the paper's effect *excluded* if there is
    none): Φ((effect − h)/se) per pair, h the half-width of its one-sided bound.  ``rows``: dicts
    with ``delta``, ``upper``, ``lower`` (or ``lower_bound``) and ``se``.  Returns ``{"power",
    "per_pair", "worst", "half_width", "se"}`` (the weakest pair)."""
    from transformer_limits.verify.stats.power import bound_power

    if not effect > 0:
        raise ValueError(f"effect must be > 0 (the size of the published ordering), got {effect!r}")
    if not rows:
        raise ValueError("rows: need at least one pair")
    per = [bound_power(effect, max(r["upper"] - r["delta"], 0.0), r["se"]) for r in rows]
    worst = min(range(len(rows)), key=per.__getitem__)
    return {"power": per[worst], "per_pair": per, "worst": worst,
            "half_width": max(rows[worst]["upper"] - rows[worst]["delta"], 0.0), "se": rows[worst]["se"]}


def ordering_finding(rows: Sequence[dict[str, Any]], effect: float) -> str:
    """What the pairs' bounds decide about a published ordering of size ``effect``:
    ``"reversed"`` (some upper bound < 0: the check fails), ``"reproduced"`` (every lower bound > 0),
    ``"effect excluded"`` (some upper bound < ``effect``: the published size is ruled out, an
    equivalence-style bound), ``"reproduced, smaller than published"`` (both), or ``"undecided"``."""
    # spectral-released rows name the lower optimizer "lower" and the bound "lower_bound"
    lowers = [r["lower_bound"] if "lower_bound" in r else r["lower"] for r in rows]
    if any(r["upper"] < 0.0 for r in rows):
        return "reversed"
    reproduced = all(lo > 0.0 for lo in lowers)
    excluded = any(r["upper"] < effect for r in rows)
    if reproduced and excluded:
        return "reproduced, smaller than published"
    return "reproduced" if reproduced else "effect excluded" if excluded else "undecided"
