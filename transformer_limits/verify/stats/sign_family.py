"""A Bonferroni family of one-sided sign tests: is each estimate on the side of 0 its prediction says?

For settings s = 1..n with estimates θ̂_s, standard errors SE_s and predicted values θ_s ≠ 0, the claim
is ``sign(E θ̂_s) = sign(θ_s)`` for every s (e.g. the sign of a growth rate decides a phase).  The test
is one-sided on the predicted side, at level α/n per setting (Bonferroni) with the critical value
``t* = t_{1−α/n, ν}`` (ν the degrees of freedom of the SEs; ν = ∞: the normal quantile):

* θ_s > 0 (predicted growth): contradicted when the upper bound ``θ̂_s + t* SE_s < 0``;
* θ_s ≤ 0 (predicted decay): contradicted when the lower bound ``θ̂_s − t* SE_s > 0``.

The family fails when some member does, so a true claim (every E θ̂_s on its predicted side, or at 0)
fails with probability at most α (exactly α/n per member at E θ̂_s = 0 under the t model).

Power against the truth ``r θ_s`` at one setting (``relative_alternative`` r < 0: the other sign,
r = −1 its mirror image): the member's bound crosses 0 with probability Φ((|r θ_s| − t* SE_s)/SE_s)
(:func:`~transformer_limits.verify.stats.power.bound_power`, the shift model), and the family's power is
its weakest member's (``verdicts.bonferroni_family``).
"""

from __future__ import annotations

import math
from typing import Sequence

from transformer_limits.verify.stats.intervals import t_quantile
from transformer_limits.verify.stats.power import bound_power
from transformer_limits.verify.verdicts import Check, attach_power, bonferroni_family

__all__ = ["sign_test_family"]


def sign_test_family(name: str, claim: str, estimates: Sequence[float], standard_errors: Sequence[float],
                     predicted: Sequence[float], alpha: float, labels: Sequence[str], *, dof: float | None = None,
                     method: str = "t-bound", relative_alternative: float | None = None, alternative_text: str = "",
                     quantity: str = "estimate", symbol: str = "θ", unit: str = "setting") -> Check:
    """The family's :class:`Check` (module docstring), combined by ``verdicts.bonferroni_family``.

    Each member (named ``name``, level α/n) records the critical value ``z_critical`` (t*), ``dof`` and
    ``standard_error``; its claim and note speak of ``quantity`` and ``symbol`` (e.g. "rate", "λ̄").
    The family's statistics add ``z_critical``; ``sides`` says "one-sided per ``unit``, Bonferroni".
    With ``relative_alternative`` r (< 0) every member states its power against the truth r θ_s."""
    if not (len(estimates) == len(standard_errors) == len(predicted) == len(labels)) or not len(predicted):
        raise ValueError("estimates, standard_errors, predicted and labels must be equal-length non-empty sequences")
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")
    if any(not (se >= 0 and math.isfinite(se)) for se in standard_errors):
        raise ValueError("standard_errors must be finite and >= 0")
    if relative_alternative is not None and not relative_alternative < 0:
        raise ValueError(f"relative_alternative must be < 0 (the other sign), got {relative_alternative!r}")
    n = len(predicted)
    # critical value: Student t with ``dof`` degrees of freedom, else normal
    z = t_quantile(1.0 - alpha / n, dof or math.inf)
    members = []
    for est, se, lb in zip(estimates, standard_errors, predicted):
        if lb > 0:  # predicted growth: contradicted when the upper bound is below 0
            ci, passed = (-math.inf, est + z * se), est + z * se >= 0
        else:
            ci, passed = (est - z * se, math.inf), est - z * se <= 0
        note = "" if passed else (f"{quantity} {est:.4g} ± {z * se:.3g} has the other sign than {symbol} = {lb:.4g}")
        member = Check(name, f"sign({quantity}) = sign({symbol} = {lb:.4g})", lb, est, ci, passed,
                       {"alpha": alpha / n, "false_failure_rate": alpha / n, "sides": "one-sided",
                        "method": method, "z_critical": z, "dof": dof,
                        "standard_error": se}, note)
        if relative_alternative is not None:
            distance = abs(relative_alternative * lb)
            attach_power(member, bound_power(distance, z * se, se), alternative_text,
                         distance=distance, half_width=z * se, se=se)
        members.append(member)
    check = bonferroni_family(name, claim, 0.0, members, alpha, f"one-sided per {unit}, Bonferroni", list(labels))
    check.statistics["z_critical"] = z
    return check
