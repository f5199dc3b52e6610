"""A Bonferroni family of two-sided z-tests of estimates against predicted values.

For settings s = 1..n with estimates θ̂_s, standard errors SE_s and predictions θ_s, the claim is
``E θ̂_s = θ_s`` for every s.  Each ``z_s = (θ̂_s − θ_s) / SE_s`` is tested two-sidedly at level α/n
(Bonferroni): the family fails when ``max_s |z_s| > z* = Φ⁻¹(1 − α/(2n))``, so a true claim fails with
probability at most α (exactly α/n per setting under the Gaussian model of the estimates).

Power against one setting off by ``r |θ_s|`` (``relative_alternative`` r): each member is a z-test at
its own Bonferroni level, :func:`~transformer_limits.verify.stats.power.z_test_power`, and the family's
power is its weakest member's (:func:`~transformer_limits.verify.stats.power.family_power`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from transformer_limits.verify.stats.distributions import normal_isf, normal_sf
from transformer_limits.verify.stats.power import family_power, z_test_power
from transformer_limits.verify.verdicts import Check, attach_power

__all__ = ["z_test_family"]


def z_test_family(name: str, claim: str, estimates: Sequence[float], standard_errors: Sequence[float],
                  predicted: Sequence[float], alpha: float, *, labels: Sequence[str] | None = None,
                  method: str = "z-test", relative_alternative: float | None = None,
                  alternative_text: str = "") -> tuple[Check, np.ndarray]:
    """The family's :class:`Check` (``measured`` = max |z|, ``ci`` = (−z*, z*)) and the z's, shape (n,).

    ``statistics`` records z*, the per-test level α/n, the smallest p-value, its Bonferroni
    adjustment and the worst setting (``labels[s]``, else "setting s"); with ``relative_alternative``
    r the power per setting and the family's power against one setting off by r |θ_s|."""
    est, se, pred = (np.asarray(a, dtype=np.float64) for a in (estimates, standard_errors, predicted))
    if not (est.shape == se.shape == pred.shape) or est.ndim != 1 or est.size == 0:
        raise ValueError("estimates, standard_errors and predicted must be equal-length non-empty sequences")
    if np.any(~(se > 0)):
        raise ValueError("standard_errors must be > 0")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")
    if labels is not None and len(labels) != est.size:
        raise ValueError(f"labels must name the {est.size} settings, got {len(labels)}")
    n = est.size
    z = (est - pred) / se
    z_crit = float(normal_isf(alpha / (2 * n)))
    p = 2 * normal_sf(np.abs(z))
    worst = int(np.argmax(np.abs(z)))
    passed = bool(np.abs(z).max() <= z_crit)
    label = labels[worst] if labels is not None else f"setting {worst}"
    st = {"alpha": alpha, "false_failure_rate": alpha, "sides": "two-sided per setting, Bonferroni",
          "method": method, "n_settings": n, "z_critical": z_crit, "per_test_alpha": alpha / n,
          "min_p_value": float(p.min()), "bonferroni_p_value": float(min(1.0, p.min() * n)),
          "worst_setting": label}
    note = "" if passed else (f"{int((np.abs(z) > z_crit).sum())}/{n} settings reject; worst {label}: "
                              f"z = {z[worst]:.2f} (|z| > {z_crit:.2f})")
    check = Check(name, claim, 0.0, float(np.abs(z).max()), (-z_crit, z_crit), passed, st, note)
    if relative_alternative is not None:
        r = relative_alternative
        member = [z_test_power(r * abs(p_s), se_s, z_crit) for p_s, se_s in zip(pred, se)]
        st["power_per_setting"] = member
        weakest = int(np.argmin(member))
        attach_power(check, family_power(member), alternative_text, distance=r * abs(float(pred[weakest])),
                     half_width=z_crit * float(se[weakest]), se=float(se[weakest]))
    return check, z
