"""Student-t intervals: the one place a t quantile turns an estimate and its standard error into a
confidence bound.

For an estimate θ̂ with standard error se and ν degrees of freedom, the (1 − α) interval is

    two-sided   θ̂ ± t_{1−α/2, ν} · se
    lower       [θ̂ − t_{1−α, ν} · se, +∞)
    upper       (−∞, θ̂ + t_{1−α, ν} · se]

``level`` is the confidence 1 − α.  ν = ∞ gives the normal quantile; se = 0 gives the point θ̂
(an exact estimate has no error).  The Welch–Satterthwaite ν of a difference of two independent
estimates is :func:`welch_satterthwaite_dof`.
"""

from __future__ import annotations

import math
from typing import Literal

__all__ = ["Side", "t_quantile", "t_interval", "welch_satterthwaite_dof"]

Side = Literal["two-sided", "lower", "upper"]


def t_quantile(p: float, dof: float) -> float:
    """The p-quantile of Student's t with ``dof`` degrees of freedom (dof = ∞: the normal)."""
    from transformer_limits.verify.stats.distributions import normal_ppf, t_ppf  # scipy at first use

    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not dof > 0:
        raise ValueError(f"dof must be positive, got {dof}")
    return float(normal_ppf(p) if math.isinf(dof) else t_ppf(p, dof))


def t_interval(estimate: float, se: float, dof: float, *, level: float,
               side: Side = "two-sided") -> tuple[float, float]:
    """(low, high) of the ``level`` Student-t interval of ``estimate`` ± quantile · ``se``.

    With tail τ = 1 − level the bounds are θ̂ + t_{p, ν} · se at p = τ/2 and 1 − τ/2 (two-sided), p = τ
    (lower) or p = 1 − τ (upper), each quantile taken at its own tail (t_{τ/2} = −t_{1−τ/2}), the open
    side of a one-sided interval is ±∞.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if not se >= 0:
        raise ValueError(f"se must be non-negative, got {se}")
    tail = 1.0 - level
    if side == "two-sided":
        return (float(estimate + t_quantile(tail / 2, dof) * se),
                float(estimate + t_quantile(1 - tail / 2, dof) * se))
    if side == "lower":
        return float(estimate + t_quantile(tail, dof) * se), math.inf
    if side == "upper":
        return -math.inf, float(estimate + t_quantile(1 - tail, dof) * se)
    raise ValueError(f"side must be 'two-sided', 'lower' or 'upper', got {side!r}")


def welch_satterthwaite_dof(se_a: float, dof_a: float, se_b: float, dof_b: float) -> float:
    """ν of θ̂_a − θ̂_b for independent estimates: (se_a² + se_b²)² / (se_a⁴/ν_a + se_b⁴/ν_b);
    ν_a + ν_b when both standard errors are zero (the difference is then exact anyway)."""
    denom = se_a**4 / dof_a + se_b**4 / dof_b
    return (se_a**2 + se_b**2) ** 2 / denom if denom > 0 else float(dof_a + dof_b)
