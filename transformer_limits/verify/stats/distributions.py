"""The normal and Student-t distribution functions the statistics evaluate in their loops.

Φ (``normal_cdf``), 1 − Φ (``normal_sf``), Φ⁻¹ (``normal_ppf``), Φ⁻¹(1 − q) (``normal_isf``), the
Student-t tail P(T_ν > x) (``t_sf``) and its quantile t_{p, ν} (``t_ppf``) are scipy.special's
ufuncs ``ndtr``, ``ndtri``, ``stdtr`` and ``stdtrit``: the very functions ``scipy.stats.norm`` and
``scipy.stats.t`` evaluate (their ``_cdf``, ``_ppf``, ``_sf`` methods), so the values are the same to the
bit (tests/test_stats_distributions.py), without the argument checking and broadcasting that costs
``scipy.stats`` 100–300 µs a call.  A coverage test evaluates a t interval hundreds of thousands of
times; a report, thousands.

Arguments are float64 floats or arrays (the result has their broadcast shape; a 0-d result is a NumPy
float; a float32 array stays float32, where scipy.stats would compute in float64).
Outside the domain (q ∉ [0, 1], ν ≤ 0) the result is NaN, as in ``scipy.stats``; the callers validate
their arguments before they get here.
"""

from __future__ import annotations

import numpy as np
from scipy import special

__all__ = ["normal_cdf", "normal_isf", "normal_ppf", "normal_sf", "t_ppf", "t_sf"]


def normal_cdf(x):
    """Φ(x) = P(Z ≤ x), Z ~ N(0, 1)."""
    return special.ndtr(x)


def normal_sf(x):
    """1 − Φ(x) = P(Z > x), computed as Φ(−x) (no cancellation in the upper tail)."""
    return special.ndtr(-x)


def normal_ppf(q):
    """Φ⁻¹(q): the q-quantile of N(0, 1) (−∞ at 0, +∞ at 1)."""
    return special.ndtri(q)


def normal_isf(q):
    """Φ⁻¹(1 − q) = −Φ⁻¹(q): the upper-q critical value of N(0, 1) (+0.0 at q = 1/2, as scipy.stats gives)."""
    return 0.0 - special.ndtri(q)


def t_sf(x, dof):
    """P(T_ν > x) for Student's t with ν = ``dof`` degrees of freedom, computed as P(T_ν ≤ −x)."""
    return special.stdtr(dof, -x)


def t_ppf(q, dof):
    """t_{q, ν}: the q-quantile of Student's t with ν = ``dof`` degrees of freedom (−∞ at 0, +∞ at 1).
    ``stdtrit`` returns +∞ at q = 0; ``scipy.stats.t.ppf`` sets that end to −∞ itself, and so does this.
    Its accuracy is scipy's: about 1e-11 relative."""
    value = special.stdtrit(dof, q)
    return np.where((np.asarray(q) == 0) & (np.asarray(dof) > 0), -np.inf, value)[()]
