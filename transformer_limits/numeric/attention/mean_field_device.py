"""The paper-A mean-field limit (:mod:`transformer_limits.numeric.attention.mean_field`) device-resident.

On a GPU backend whose device arrays support arithmetic (``DeviceArrays.has_array_ops``: CuPy on a
real GPU, NumPy arrays in Numba's simulator) the RK4 integrations of::

    dX/dt = Gamma(X, mu, nu_t)                                  (forward, t: 0 -> 1)
    d/ds (X, P, G) = (-Gamma, xbar(X, P), phi(t) (1/N) d_theta)  (adjoint, s = 1 - t: 0 -> 1)

keep X, P, the four RK4 stages and the node-gradient accumulators G (n_nodes, A, ...) on the device
for the whole run: the atoms theta_a(t) at every stage time t_j = j h / 2, j = 0..2 S (S = steps,
h = 1/S), are stacked (2 S + 1, A, ...) and copied in once with the atom weights w (A,) and the hat
weights phi_n(t_j) (2 S + 1, n_nodes); one field is one ``device_field`` launch chain (A heads with
head weights w_a, base 0 so that out = F), one adjoint stage adds ``device_vjp`` (out = xbar, per-atom
parameter gradients (A, ...)).  The RK4 combinations are the same floating-point operations as the
host loop, in ``dev.xp``.  Only the outputs come back (one copy each), so the number of host <-> device
copies does not depend on ``steps``.

Batches (:func:`device_forward` with B > 1): B inputs X0 (B, N, d) share the law (PB = 1); one launch
chain per stage runs all of them (head weights tiled to (B A,)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer_limits.numeric.attention.layer import AttentionLayer, DeviceCache

__all__ = ["device_resident", "device_forward", "device_adjoint"]

PARAM_KEYS = ("Q", "K", "V", "O")


def device_resident(layer: AttentionLayer) -> bool:
    """Whether ``layer`` runs on a GPU backend whose device arrays support arithmetic."""
    return layer.dev is not None and layer.dev.has_array_ops


class _Stages:
    """The law on the device at the 2 S + 1 stage times j h / 2: params[k] (2 S + 1, A, ...), the
    atom weights tiled for B problems (B A,), the hat weights phi (2 S + 1, n_nodes)."""

    def __init__(self, layer: AttentionLayer, law: Any, steps: int, B: int, with_phi: bool):
        dev = layer.dev
        assert dev is not None
        want = {"Q": (layer.d_k, layer.d), "K": (layer.d_k, layer.d), "V": (layer.d_v, layer.d),
                "O": (layer.d, layer.d_v)}
        for k in PARAM_KEYS:  # the kernels are unrolled for the layer's sizes: check before launching
            if law.params[k].shape[2:] != want[k]:
                raise ValueError(f"law.params[{k!r}] must have shape (n_nodes, A) + {want[k]}, "
                                 f"got {law.params[k].shape}")
        times = [j / (2 * steps) for j in range(2 * steps + 1)]
        at = [law.at(t) for t in times]
        self.params = {k: dev.put(np.stack([th[k] for th in at])) for k in PARAM_KEYS}
        self.c = dev.put(np.tile(law.weights, B))
        self.phi = dev.put(np.stack([law.hat(t) for t in times])) if with_phi else None
        self.A, self.B = law.n_atoms, B

    def theta(self, j: int) -> tuple[Any, Any, Any, Any]:
        return self.params["Q"][j], self.params["K"][j], self.params["V"][j], self.params["O"][j]


class _Field:
    """F (B N, d) at stage time j for states X (B N, d); keeps the cache of the last call for the VJP."""

    def __init__(self, layer: AttentionLayer, stages: _Stages, N: int):
        dev = layer.dev
        assert dev is not None
        self.layer, self.dev, self.stages, self.N = layer, dev, stages, N
        BA = stages.B * stages.A
        self.cache = DeviceCache.empty(dev, (BA,), N, layer.d_k, layer.d_v)
        self.OH = dev.empty((BA, N, layer.d))
        self.zero = dev.zeros((stages.B * N, layer.d))  # base 0: out = F alone

    def __call__(self, X: Any, j: int) -> Any:
        st = self.stages
        F = self.dev.empty((st.B * self.N, self.layer.d))
        self.layer.device_field(X, *st.theta(j), st.c, st.B, st.A, self.N, 1, self.zero, F, self.cache, self.OH)
        return F

    def vjp(self, X: Any, j: int, P: Any) -> tuple[Any, tuple[Any, ...]]:
        """xbar (N, d) and the per-atom gradients (dQ, dK, dV, dO) (A, ...) at X for the cache of the
        last field call (same X, same j); B = 1."""
        st, dev, lay = self.stages, self.dev, self.layer
        A = st.A
        grads = (dev.empty((A, lay.d_k, lay.d)), dev.empty((A, lay.d_k, lay.d)),
                 dev.empty((A, lay.d_v, lay.d)), dev.empty((A, lay.d, lay.d_v)))
        xbar = dev.empty((self.N, lay.d))
        lay.device_vjp(X, *st.theta(j), st.c, 1, A, self.N, 1, self.cache, P, self.zero, xbar, grads)
        return xbar, grads


def device_forward(layer: AttentionLayer, X0: np.ndarray, law: Any, steps: int) -> np.ndarray:
    """RK4 trajectories (steps + 1, B, N, d) of B inputs X0 (B, N, d) under one law, on the device.

    k1 = F(t, X), k2 = F(t + h/2, X + h/2 k1), k3 = F(t + h/2, X + h/2 k2), k4 = F(t + h, X + h k3),
    X <- X + h/6 (k1 + 2 k2 + 2 k3 + k4): the host loop's operations, so the results match it.
    """
    dev = layer.dev
    assert dev is not None and dev.xp is not None
    B, N, d = X0.shape
    stages = _Stages(layer, law, steps, B, with_phi=False)
    field = _Field(layer, stages, N)
    h = 1.0 / steps
    traj = dev.empty((steps + 1, B * N, d))
    traj[0] = dev.put(X0.reshape(B * N, d))
    for s in range(steps):
        X = traj[s]
        k1 = field(X, 2 * s)
        k2 = field(X + h / 2 * k1, 2 * s + 1)
        k3 = field(X + h / 2 * k2, 2 * s + 1)
        k4 = field(X + h * k3, 2 * s + 2)
        traj[s + 1] = X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return dev.get(traj).reshape(steps + 1, B, N, d)


def device_adjoint(layer: AttentionLayer, X1: np.ndarray, P1: np.ndarray, law: Any, steps: int):
    """Backward RK4 of (X, P, node gradients) from t = 1 on the device (see ``MeanFieldLimit.adjoint``):
    X1, P1 (N, d) -> (X_0 (N, d), P_0 (N, d), node gradients {k: (n_nodes, A, ...)}), host arrays.

    Stage r at time t_r: a = -F(t_r, X_r), b = xbar(t_r, X_r, P_r), g[k] = phi(t_r) (x) d_theta[k] / N.
    """
    dev = layer.dev
    assert dev is not None and dev.xp is not None
    N, d = X1.shape
    stages = _Stages(layer, law, steps, 1, with_phi=True)
    phis = stages.phi
    assert phis is not None
    field = _Field(layer, stages, N)
    X, P = dev.put(X1), dev.put(P1)
    grads = [dev.zeros((law.n_nodes,) + law.params[k].shape[1:]) for k in PARAM_KEYS]
    h = 1.0 / steps

    def rhs(Xs: Any, Ps: Any, j: int):
        F = field(Xs, j)
        xbar, dth = field.vjp(Xs, j, Ps)
        phi = phis[j]
        G = [phi[:, None, None, None] * g[None] / N for g in dth]  # (n_nodes, A, r, s): phi_n d_theta_a / N
        return -F, xbar, G

    for s in range(steps, 0, -1):  # stage times t = s h, t - h/2, t - h: grid indices 2s, 2s - 1, 2s - 2
        a1, b1, g1 = rhs(X, P, 2 * s)
        a2, b2, g2 = rhs(X + h / 2 * a1, P + h / 2 * b1, 2 * s - 1)
        a3, b3, g3 = rhs(X + h / 2 * a2, P + h / 2 * b2, 2 * s - 1)
        a4, b4, g4 = rhs(X + h * a3, P + h * b3, 2 * s - 2)
        X = X + h / 6 * (a1 + 2 * a2 + 2 * a3 + a4)
        P = P + h / 6 * (b1 + 2 * b2 + 2 * b3 + b4)
        for k in range(4):
            grads[k] += h / 6 * (g1[k] + 2 * g2[k] + 2 * g3[k] + g4[k])
    return dev.get(X), dev.get(P), {k: dev.get(g) for k, g in zip(PARAM_KEYS, grads)}
