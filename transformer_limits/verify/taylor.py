"""Taylor-remainder tests (pyadjoint's ``taylor_test``, generalised to any order).

If f is smooth and c_1, ..., c_k are its Taylor coefficients at x in direction dx,

    R_k(h) = || f(x + h dx) - f(x) - sum_{i=1..k} h^i c_i ||  = O(h^{k+1}),

so halving h divides R_k by 2^{k+1}: the observed rates log2(R_k(h) / R_k(h/2)) tend to k + 1.  A wrong
derivative leaves an O(h) remainder and a rate near 1, which is why this is the cleanest check of
gradients, Lions derivatives and flow-map expansions.  Levels whose remainder sits at the round-off
floor (below ``floor_factor * eps * |f(x)|``) are excluded and reported, not silently counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

__all__ = ["TaylorResult", "taylor_test", "flow_taylor_remainder_rates"]


@dataclass
class TaylorResult:
    """Remainders per step size, observed rates, and the verdict (``passed``)."""

    order: int
    expected_rate: float
    steps: np.ndarray
    remainders: np.ndarray
    rates: np.ndarray
    used: np.ndarray  # boolean mask of the rates that were not at the round-off floor
    tolerance: float
    notes: list[str] = field(default_factory=list)

    @property
    def asymptotic_rates(self) -> np.ndarray:
        """The usable rates at the three finest step sizes (pre-asymptotic coarse levels dropped)."""
        return self.rates[self.used][-3:]

    @property
    def min_rate(self) -> float:
        r = self.asymptotic_rates
        return float(r.min()) if r.size else float("nan")

    @property
    def passed(self) -> bool:
        return bool(self.used.sum() >= 2 and self.min_rate >= self.expected_rate - self.tolerance)

    def to_dict(self) -> dict:
        return {
            "order": self.order, "expected_rate": self.expected_rate, "steps": self.steps.tolist(),
            "remainders": self.remainders.tolist(), "rates": self.rates.tolist(),
            "used": self.used.tolist(), "min_rate": self.min_rate, "passed": self.passed,
            "tolerance": self.tolerance, "notes": list(self.notes),
        }


def taylor_test(
    f: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    dx: np.ndarray,
    coefficients: Sequence[np.ndarray],
    *,
    h0: float = 2e-2,
    levels: int = 6,
    factor: float = 0.5,
    tolerance: float = 0.1,
    floor_factor: float = 1e3,
) -> TaylorResult:
    """Check that ``coefficients`` are the first k Taylor coefficients of ``f`` at ``x`` along ``dx``.

    Parameters
    ----------
    f : callable, array -> array
    x, dx : arrays of the same shape (point and direction)
    coefficients : [c_1, ..., c_k]; c_1 = Df(x)[dx], c_2 = D^2 f(x)[dx, dx] / 2, ...
    h0, levels, factor : step sizes h0 * factor**i, i < levels
    tolerance : pass when the usable rates at the three finest step sizes are all >= k + 1 - tolerance
                (coarser levels may still be pre-asymptotic; they are reported, not judged)

    Returns a :class:`TaylorResult`; ``passed`` is the verdict.
    """
    x = np.asarray(x, dtype=np.float64)
    dx = np.asarray(dx, dtype=np.float64)
    if x.shape != dx.shape:
        raise ValueError(f"x and dx must have the same shape, got {x.shape} and {dx.shape}")
    if not coefficients:
        raise ValueError("coefficients must hold at least the first-order term")
    if not (0 < factor < 1) or levels < 3 or h0 <= 0:
        raise ValueError("need h0 > 0, 0 < factor < 1 and levels >= 3")
    f0 = np.asarray(f(x), dtype=np.float64)
    coeffs = [np.asarray(c, dtype=np.float64) for c in coefficients]
    steps = h0 * factor ** np.arange(levels)
    rem = np.empty(levels)
    for i, h in enumerate(steps):
        approx = f0 + sum(h ** (k + 1) * c for k, c in enumerate(coeffs))
        rem[i] = np.linalg.norm(np.asarray(f(x + h * dx)) - approx)
    with np.errstate(divide="ignore", invalid="ignore"):
        rates = np.log(rem[:-1] / rem[1:]) / np.log(1.0 / factor)
    floor = floor_factor * np.finfo(np.float64).eps * max(1.0, float(np.linalg.norm(f0)))
    used = (rem[1:] > floor) & np.isfinite(rates)
    notes = []
    if (~used).any():
        notes.append(f"{int((~used).sum())} rate(s) excluded: remainder at the round-off floor {floor:.1e}")
    return TaylorResult(order=len(coeffs), expected_rate=float(len(coeffs) + 1), steps=steps,
                        remainders=rem, rates=rates, used=used, tolerance=tolerance, notes=notes)


def flow_taylor_remainder_rates(seed: int, order: int = 3, *, n_particles: int = 3, d: int = 2, d_k: int = 2,
                                d_v: int = 2, n_heads: int = 2, wrong: str | None = None, backend: str = "numpy",
                                reference_steps: int = 32, h0: float = 0.2, levels: int = 6, factor: float = 0.5,
                                tolerance: float = 0.1) -> TaylorResult:
    """Taylor test of the order-k block expansion of the attention MV-ODE's flow map
    (:mod:`transformer_limits.numeric.attention.flow_taylor`) on a seeded random instance.

    ``passed`` means the usable observed rates at the three finest h are >= k + 1 - tolerance.
    """
    # verify -> numeric, imported on use: this module's Taylor test needs neither numba nor the kernels
    from transformer_limits.numeric.attention.flow_taylor import flow_taylor_problem, random_flow_instance

    rng = np.random.default_rng(seed)
    X, params = random_flow_instance(rng, n_particles=n_particles, d=d, d_k=d_k, d_v=d_v, n_heads=n_heads)
    f, x, dx, coeffs = flow_taylor_problem(X, params, order, wrong=wrong, backend=backend,
                                           reference_steps=reference_steps)
    result = taylor_test(f, x, dx, coeffs, h0=h0, levels=levels, factor=factor, tolerance=tolerance)
    result.notes.append(f"flow map of the attention MV-ODE: seed={seed}, N={n_particles}, d={d}, d_k={d_k}, "
                        f"d_v={d_v}, heads={n_heads}, wrong={wrong}, RK4 reference with {reference_steps} steps")
    return result
