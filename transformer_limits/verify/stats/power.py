"""Power of a check against the violation it must detect (docs/verification.md, "Power").

Every check is a test whose null hypothesis is the claim, so it passes whenever the data do not
contradict the claim, including when they could not have.  The power says whether they could: the
probability that the check fails when the truth is the declared *alternative* θ₁ (a violation of the
claim of a stated size, :class:`~transformer_limits.verify.check_spec.CheckSpec` ``alternative``).

Model (the *shift model*, computed from the data that decided the check).  A check rejects when a
one-sided confidence bound B = θ̂ ∓ h of an estimate θ̂ crosses a threshold θ₀ (for a two-sided
check: either bound crosses its edge of the accepted region).  The half-width ``h`` = |θ̂ − B| of
the bound that decided the check is kept (it holds the critical value and the interval method,
t, bootstrap or their union), and θ̂ is taken as normal around the truth with the check's standard
error ``se``.  If the truth lies a distance D beyond the threshold (in the direction in which the
check rejects), the bound crosses with probability

    power = Φ((D − h) / se),                                                          (P1)

which is α where the bound is exact and D = 0, and grows to 1 as D ≫ h.  For a two-sided region
[θ₀ − τ, θ₀ + τ] and an alternative θ₀ ± a (a > τ) the power on each side is (P1) with D = a − τ
and that side's half-width; the check reports the smaller side (the far tail, below α, is left
out, so the figure is a lower bound).  For a family tested with Bonferroni (members at α/m each)
the power against "one member violated by D" is the smallest member power (each at its own
level).  A *deterministic* check (α = 0, no sampling noise) has power 1 against every alternative
outside its acceptance region and 0 inside it (:func:`deterministic_power`).  The shift model is
checked against simulated rejection rates in tests/test_power.py.

A check with power below :data:`POWER_THRESHOLD` that is not contradicted is INCONCLUSIVE, not a
pass; :func:`seeds_factor` says how many times more seeds would reach the threshold (se ∝ 1/√seeds:
the factor is (se / se_needed)² with se_needed = D / (h/se + z_{0.8})).
"""

from __future__ import annotations

import math
from typing import Iterable

from transformer_limits.verify.stats.distributions import normal_cdf, normal_ppf, normal_sf

__all__ = ["POWER_THRESHOLD", "bound_power", "deterministic_power", "family_power", "seeds_factor",
           "two_sided_power", "z_test_power"]

#: a check that is not contradicted passes only with at least this power against its alternative
POWER_THRESHOLD = 0.8


def _finite(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


def bound_power(distance: float, half_width: float, se: float) -> float:
    """(P1): the probability that a one-sided bound with half-width ``half_width`` crosses its
    threshold when the truth lies ``distance`` beyond it and the estimate has standard error ``se``.

    ``se = 0`` (an exact estimate): 1 when ``distance > half_width``, else 0.  An infinite
    ``half_width`` (an open interval: nothing can be rejected) gives 0."""
    distance, se = _finite("distance", distance), float(se)
    if math.isnan(half_width) or half_width < 0:
        raise ValueError(f"half_width must be >= 0, got {half_width!r}")
    if half_width == math.inf:
        return 0.0
    if not (se >= 0 and math.isfinite(se)):
        raise ValueError(f"se must be a finite number >= 0, got {se!r}")
    if se == 0:
        return 1.0 if distance > half_width else 0.0
    return float(normal_cdf((distance - half_width) / se))


def two_sided_power(alternative_offset: float, tolerance: float, half_widths: tuple[float, float],
                    se: float) -> float:
    """Power of a two-sided check of ``|θ − θ₀| ≤ tolerance`` against ``θ₀ ± alternative_offset``:
    the smaller of the two sides' (P1) with D = offset − tolerance; ``half_widths`` = (θ̂ − low,
    high − θ̂) of the interval that decided it (low decides the upper side, high the lower)."""
    offset = abs(_finite("alternative_offset", alternative_offset))
    d = offset - float(tolerance)
    if d <= 0:
        return 0.0  # the alternative lies inside the accepted region: no test can reject it
    h_low, h_high = half_widths
    return min(bound_power(d, h_low, se), bound_power(d, h_high, se))


def z_test_power(shift: float, se: float, z_critical: float) -> float:
    """Two-sided z-test power: P(|Z + shift/se| > z*) for Z ~ N(0, 1)."""
    shift, se, z_critical = abs(_finite("shift", shift)), _finite("se", se), _finite("z_critical", z_critical)
    if se <= 0:
        raise ValueError(f"se must be > 0, got {se!r}")
    mu = shift / se
    return float(normal_sf(z_critical - mu) + normal_cdf(-z_critical - mu))


def family_power(member_powers: Iterable[float]) -> float:
    """Power of a Bonferroni family against "one member violated": the smallest member power."""
    values = [float(p) for p in member_powers]
    if not values:
        raise ValueError("member_powers: need at least one member")
    return min(values)


def deterministic_power(alternative_rejected: bool) -> float:
    """A deterministic check's power: 1 when its rule rejects the alternative, else 0."""
    return 1.0 if alternative_rejected else 0.0


def seeds_factor(distance: float, half_width: float, se: float, target: float = POWER_THRESHOLD) -> float:
    """How many times the seeds would give power ``target`` against ``distance`` (se ∝ 1/√seeds, the
    critical value held fixed): (se / se_needed)² with se_needed = distance / (half_width/se + z_target).
    1.0 or less: enough already; inf: no number of seeds (distance ≤ 0, an open interval, or an exact
    estimate that does not reach)."""
    if not (se >= 0 and math.isfinite(se)):
        raise ValueError(f"se must be a finite number >= 0, got {se!r}")
    if distance <= 0 or not math.isfinite(half_width):
        return math.inf
    if se == 0:  # an exact estimate: decided already, or never
        return 1.0 if distance > half_width else math.inf
    needed = distance / (half_width / se + float(normal_ppf(target)))
    return (se / needed) ** 2
