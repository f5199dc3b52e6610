"""The RK4 map of the MV-ODE with its stages kept on a tape, and the exact gradient of that map.

The sup-over-inputs ascent (paper A's experiments) evaluates the map it measures, Phi_h: X_0 -> X_1 by
``steps`` RK4 steps of h = 1/steps (:meth:`MeanFieldLimit.forward`), and ascends along r^T dPhi_h/dX_0.
:meth:`MeanFieldLimit.adjoint` gives P_0 / N of the continuous adjoint ODE integrated backward with X
re-integrated backward: the gradient of the exact flow map to O(h^4), at the price of one field
evaluation per stage on top of each VJP.  The tape gives the gradient of Phi_h itself (reverse mode
through the stages), exact to round-off, from the VJPs at the 4 steps stage states the forward pass
already visited; the layer caches it keeps are O(H N) numbers each (head outputs, features,
log-normalisers: never an N x N matrix).

Forward step s (t, t + h/2, t + h the stage times; F(t, X) = Gamma(t, X), docs/theory.md §A.2)::

    Y1 = X,  Y2 = X + h/2 k1,  Y3 = X + h/2 k2,  Y4 = X + h k3,  k_i = F(t_i, Y_i)
    X' = X + h/6 (k1 + 2 k2 + 2 k3 + k4)

Reverse step, lambda the cotangent of X' (N, d), J_i = dF/dX at (t_i, Y_i) with the Lions term
(the layer's VJP, J_i^T u)::

    g4 = J4^T (h/6 lambda),          g3 = J3^T (h/3 lambda + h g4),
    g2 = J2^T (h/3 lambda + h/2 g3), g1 = J1^T (h/6 lambda + h/2 g2),
    lambda <- lambda + g1 + g2 + g3 + g4.

The forward pass is :meth:`MeanFieldLimit.forward`'s arithmetic, operation for operation, so
:attr:`RK4Tape.final` is its final state bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer_limits.numeric.attention.mean_field import HeadLaw, MeanFieldLimit, _LawOnRuntime, _stage_times

__all__ = ["RK4Tape", "forward_taped"]


class RK4Tape:
    """X_1 = Phi_h(X_0) (N, d) as ``final`` and what its VJP needs: the stage states Y_i (runtime arrays
    (N, d)), their stage times and layer caches, in forward order (4 per step); made by
    :func:`forward_taped`."""

    def __init__(self, final: np.ndarray, steps: int, nu: Any, stages: list[tuple[float, Any, Any]]):
        self.final, self.steps = final, steps
        self._nu = nu  # the law on the runtime (atoms at the stage times, the layer form)
        self._stages = stages  # (t_i, Y_i, cache of F(t_i, Y_i)) per stage

    def vjp(self, r: Any) -> np.ndarray:
        """r^T dPhi_h/dX_0 (N, d) for a cotangent r (N, d) of X_1, exact for the RK4 map (module
        docstring)."""
        nu = self._nu
        rt = nu.rt
        r = np.ascontiguousarray(r, dtype=np.float64)
        if r.shape != self.final.shape:
            raise ValueError(f"r must have the shape of the final state {self.final.shape}, got {r.shape}")
        h = 1.0 / self.steps
        lam = rt.put(r)
        for s in range(self.steps - 1, -1, -1):
            (t1, Y1, c1), (t2, Y2, c2), (t3, Y3, c3), (t4, Y4, c4) = self._stages[4 * s:4 * s + 4]
            g4 = nu.vjp(t4, Y4, h / 6 * lam, False, cache=c4)[0]
            g3 = nu.vjp(t3, Y3, h / 3 * lam + h * g4, False, cache=c3)[0]
            g2 = nu.vjp(t2, Y2, h / 3 * lam + h / 2 * g3, False, cache=c2)[0]
            g1 = nu.vjp(t1, Y1, h / 6 * lam + h / 2 * g2, False, cache=c1)[0]
            lam = lam + g1 + g2 + g3 + g4
        return np.asarray(rt.get(lam))


def forward_taped(mf: MeanFieldLimit, X0: Any, law: HeadLaw, steps: int) -> RK4Tape:
    """Phi_h(X_0) for X_0 (N, d) by ``steps`` RK4 steps on [0, 1], keeping the tape for
    :meth:`RK4Tape.vjp`; the final state is :meth:`MeanFieldLimit.forward`'s bit for bit."""
    mf._check_steps(law, steps)
    X0 = mf._checked_states(np.asarray(X0, dtype=np.float64)[None], "X0")[0]
    N = X0.shape[0]
    ops = mf._ops(1, law, N)
    times = _stage_times(steps, backward=False)
    nu = _LawOnRuntime(ops, law, times, with_phi=False)
    caches = ops.caches(4 * steps)
    h = 1.0 / steps
    stages: list[tuple[float, Any, Any]] = []

    def stage(t: float, Y: Any) -> Any:
        cache = caches.layer(len(stages))
        stages.append((t, Y, cache))
        return nu.field(t, Y, cache=cache)

    X = ops.rt.put(X0)
    for t, t_half, t_next in times:
        k1 = stage(t, X)
        k2 = stage(t_half, X + h / 2 * k1)
        k3 = stage(t_half, X + h / 2 * k2)
        k4 = stage(t_next, X + h * k3)
        X = X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return RK4Tape(np.asarray(ops.rt.get(X)), steps, nu, stages)
