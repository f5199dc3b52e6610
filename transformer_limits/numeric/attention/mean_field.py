"""Mean-field (L, H -> infinity) limit of the paper-A model: forward and adjoint MV-ODEs, RK4.

For N particles X_t = (X_t^1..X_t^N) and a law nu_t of head parameters at depth-time t in [0, 1]
(docs/theory.md §A.2, [RECON])::

    dX_t^i/dt  =  Gamma(X_t^i, mu_t^i, nu_t) = int gamma(X_t^i, mu_t^i, theta) nu_t(dtheta),
    -dP_t^i/dt = grad_x Gamma(X_t^i)^T P_t^i + sum_j w_ji (d_mu Gamma(X_t^j)(X_t^i))^T P_t^j,
    P_1^i = N dLoss/dx^i   (the N-scaled adjoint; = grad l(X_1^i) for Loss = (1/N) sum_i l(x^i)),

with mu_t^i the empirical measure of the particles (prefix measure when causal) and w_ji = 1/N
(unmasked) or 1_{i<=j}/j (causal).  The right-hand sides are one attention layer with the atoms of
nu_t as heads and their weights as head weights (:mod:`transformer_limits.numeric.attention.layer`),
so the same generated kernels serve the discrete model and the limit.

Parametrisation of nu_t (ours, documented in docs/paper_a_model.md): a :class:`HeadLaw` has atoms
theta_a(t), a = 1..A, with fixed weights w_a, piecewise-linear in t between uniform depth-time nodes
t_n = n/(n_nodes - 1): theta_a(t) = sum_n phi_n(t) theta_{n,a} with hat functions phi_n.  A continuous
compactly supported law (:class:`AffineHeadLaw`: theta(t, xi) = M(t) + sum_k xi_k D_k(t), xi uniform on
[-1, 1]^m) is reduced to a HeadLaw by Gauss-Legendre or scrambled-Sobol quadrature in xi, with an error
estimate (:func:`quadrature_estimate`).  The discrete model samples its heads from nu_{r/L}
(:meth:`HeadLaw.discretise`): ``exact`` mode uses all atoms at t = r/L with weights w_a (H -> infinity
replaced by the exact expectation), ``iid`` mode draws H atom indices i.i.d. from w per layer.

Time stepping: classical RK4 with steps aligned to the nodes (the parameters are smooth between
nodes); :meth:`MeanFieldLimit.forward_checked` estimates the error by step doubling (Richardson,
|X_h - X_{h/2}| / 15).  The adjoint integrates (X, P, node gradients) backward from t = 1 with RK4.

Host and device, one loop.  Both integrations (:meth:`MeanFieldLimit.forward_batch`,
:meth:`MeanFieldLimit.adjoint`) are written once against a :class:`~transformer_limits.numeric.runtime.Runtime`
(array arithmetic of its ``xp`` arrays, ``put``/``get`` at the ends) and the layer form of
:mod:`~transformer_limits.numeric.attention.batched_layer` (:class:`_LawOnRuntime`): on the CPU
backends host arrays and the layer's host API; on a GPU backend whose arrays support arithmetic the
states, stages and gradient accumulators stay on the device, the law's atoms at every stage time are
copied in once, B inputs run per launch, and only the results come back (the number of host <-> device
copies does not depend on ``steps``); ``resident=False`` keeps a GPU backend on the host loop.

Training in the limit: AdamW (:mod:`transformer_limits.numeric.optim.adamw`) on the node parameters
theta_{n,a} driven by dJ/dtheta_{n,a} = int_0^1 phi_n(t) (1/N) sum_i d_theta gamma(...)^T w_a P_t^i dt;
the discrete network with exact heads has the same trainable node parameters (its layer-r heads are
theta_a(r/L)), and its gradient is the left Riemann sum of that integral, so "discrete network after
k AdamW steps" and "limit after k AdamW steps" can be compared (:func:`train_adamw`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from transformer_limits.numeric.optim.adamw import AdamW, BlockwiseAdamW
from transformer_limits.numeric.attention.batched_layer import layer_ops
from transformer_limits.numeric.attention.layer import attention_layer
from transformer_limits.numeric.attention.transformer import PARAM_NAMES, AttentionTransformer

__all__ = ["HeadLaw", "AffineHeadLaw", "MeanFieldLimit", "RK4Result", "quadrature_estimate",
           "discrete_node_loss_and_grad", "train_adamw", "TrainingHistory"]


def _hat(n_nodes: int, t: float) -> np.ndarray:
    """phi_n(t) for ``n_nodes`` uniform nodes on [0, 1] (piecewise-linear interpolation weights)."""
    m = n_nodes - 1
    out = np.zeros(n_nodes)
    if m == 0:
        out[0] = 1.0
        return out
    s = min(max(t, 0.0), 1.0) * m
    k = min(int(np.floor(s)), m - 1)
    frac = s - k
    out[k], out[k + 1] = 1.0 - frac, frac
    return out


@dataclass
class HeadLaw:
    """nu_t = sum_a w_a delta_{theta_a(t)}, theta_a piecewise linear in t on uniform nodes.

    ``params``: dict Q (n_nodes, A, d_k, d), K (n_nodes, A, d_k, d), V (n_nodes, A, d_v, d),
    O (n_nodes, A, d, d_v); ``weights`` (A,) positive, summing to one.
    """

    params: dict[str, np.ndarray]
    weights: np.ndarray

    def __post_init__(self) -> None:
        self.params = {k: np.asarray(self.params[k], dtype=np.float64) for k in PARAM_NAMES}
        self.weights = np.asarray(self.weights, dtype=np.float64)
        n, A = self.params["Q"].shape[:2]
        if n < 1 or A < 1 or self.weights.shape != (A,):
            raise ValueError(f"weights must have shape ({A},) matching the atoms of params")
        if np.any(self.weights < 0) or not np.isclose(self.weights.sum(), 1.0):
            raise ValueError("weights must be non-negative and sum to one")
        for k, v in self.params.items():
            if v.shape[:2] != (n, A):
                raise ValueError(f"params[{k!r}] must start with (n_nodes, A) = {(n, A)}, got {v.shape}")

    @property
    def n_nodes(self) -> int:
        return self.params["Q"].shape[0]

    @property
    def n_atoms(self) -> int:
        return self.params["Q"].shape[1]

    @property
    def nodes(self) -> np.ndarray:
        return np.linspace(0.0, 1.0, self.n_nodes)

    def hat(self, t: float) -> np.ndarray:  # the node count only: no linspace per call
        return _hat(self.n_nodes, t)

    def at(self, t: float) -> dict[str, np.ndarray]:
        """theta_a(t) for every atom: dict of (A, ...) arrays."""
        phi = self.hat(t)
        nz = np.nonzero(phi)[0]
        return {k: sum(phi[n] * v[n] for n in nz) for k, v in self.params.items()}

    def with_params(self, params: dict[str, np.ndarray]) -> "HeadLaw":
        return HeadLaw({k: np.array(params[k]) for k in PARAM_NAMES}, self.weights)

    @classmethod
    def random(cls, n_nodes: int, n_atoms: int, d: int, d_k: int, d_v: int, *, seed: int = 0,
               gain: float = 1.0, weights: Any = None) -> "HeadLaw":
        """Xavier-uniform atoms at every node (compact support), equal or given weights."""
        from transformer_limits.numeric.attention.transformer import init_params

        params = init_params(n_nodes, n_atoms, d, d_k, d_v, seed=seed, gain=gain)
        w = np.full(n_atoms, 1.0 / n_atoms) if weights is None else np.asarray(weights, dtype=np.float64)
        return cls(params, w / w.sum())

    def discretise(self, L: int, H: int | None = None, *, mode: str = "exact", seed: int = 0):
        """Heads of an L-layer model sampled from nu_{r/L}, r = 0..L-1.

        ``exact``: H = A heads theta_a(r/L) with head weights w_a -> (params, head_weights (A,)).
        ``iid``: H heads per layer, atom indices i.i.d. ~ w -> (params, None) (head scale from the model).
        """
        if not isinstance(L, (int, np.integer)) or L < 1:
            raise ValueError(f"L must be a positive integer, got {L!r}")
        layers = [self.at(r / L) for r in range(L)]
        if mode == "exact":
            return {k: np.stack([lay[k] for lay in layers]) for k in PARAM_NAMES}, self.weights.copy()
        if mode != "iid":
            raise ValueError(f"mode must be 'exact' or 'iid', got {mode!r}")
        if not isinstance(H, (int, np.integer)) or H < 1:
            raise ValueError(f"H must be a positive integer in iid mode, got {H!r}")
        idx = np.random.default_rng(seed).choice(self.n_atoms, size=(L, H), p=self.weights)
        return {k: np.stack([lay[k][idx[r]] for r, lay in enumerate(layers)]) for k in PARAM_NAMES}, None

    def node_gradients(self, layer_grads: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Chain rule through theta_{r,a} = theta_a(r/L): sum_r phi_n(r/L) dLoss/dtheta_{r,a}."""
        L = layer_grads["Q"].shape[0]
        Phi = np.stack([self.hat(r / L) for r in range(L)])  # (L, n_nodes)
        return {k: np.einsum("rn,ra...->na...", Phi, layer_grads[k]) for k in PARAM_NAMES}


@dataclass
class AffineHeadLaw:
    """Continuous compactly supported law: theta(t, xi) = M(t) + sum_k xi_k D_k(t), xi ~ U[-1, 1]^m.

    ``mean``: dict of (n_nodes, ...) arrays (one matrix per node); ``directions``: dict of
    (n_nodes, m, ...) arrays; both piecewise linear in t between uniform nodes.
    """

    mean: dict[str, np.ndarray]
    directions: dict[str, np.ndarray]

    @property
    def latent_dim(self) -> int:
        return self.directions["Q"].shape[1]

    @classmethod
    def random(cls, n_nodes: int, latent_dim: int, d: int, d_k: int, d_v: int, *, seed: int = 0,
               spread: float = 0.5) -> "AffineHeadLaw":
        from transformer_limits.numeric.attention.transformer import init_params

        mean = {k: v[:, 0] for k, v in init_params(n_nodes, 1, d, d_k, d_v, seed=seed).items()}
        dirs = init_params(n_nodes, latent_dim, d, d_k, d_v, seed=seed + 1, gain=spread)
        return cls(mean, dirs)

    def atoms(self, xi: np.ndarray, weights: np.ndarray) -> HeadLaw:
        """The finite-atom law sum_a weights_a delta_{theta(., xi_a)} (xi (A, m))."""
        xi = np.asarray(xi, dtype=np.float64)
        params = {k: self.mean[k][:, None] + np.einsum("am,nm...->na...", xi, self.directions[k])
                  for k in PARAM_NAMES}
        return HeadLaw(params, weights)

    def quadrature(self, rule: str = "gauss-legendre", n: int = 4, *, seed: int = 0) -> HeadLaw:
        """``gauss-legendre``: tensor rule with n points per latent dimension (n^m atoms);
        ``sobol``: n scrambled Sobol points (scipy.stats.qmc, seeded), equal weights;
        ``iid``: n i.i.d. uniform points."""
        m = self.latent_dim
        if rule == "gauss-legendre":
            x, w = np.polynomial.legendre.leggauss(n)
            xi = np.array(list(itertools.product(x, repeat=m)))
            wt = np.prod(np.array(list(itertools.product(w, repeat=m))), axis=1) / 2.0**m
            return self.atoms(xi, wt / wt.sum())
        if rule == "sobol":
            from scipy.stats import qmc

            u = qmc.Sobol(d=m, scramble=True, seed=seed).random(n)
        elif rule == "iid":
            u = np.random.default_rng(seed).uniform(size=(n, m))
        else:
            raise ValueError(f"rule must be 'gauss-legendre', 'sobol' or 'iid', got {rule!r}")
        return self.atoms(2.0 * u - 1.0, np.full(n, 1.0 / n))


def quadrature_estimate(law: AffineHeadLaw, functional: Callable[[HeadLaw], np.ndarray], *,
                        rule: str = "sobol", n: int = 64, replicas: int = 8, seed: int = 0):
    """(estimate, error estimate) of functional(nu) for a continuous law.

    ``sobol``: mean over ``replicas`` independent scramblings, error = standard error of that mean;
    ``gauss-legendre``: the n-point rule, error = |Q_n - Q_{n-1}| (a conservative a-posteriori estimate
    for a smooth integrand).
    """
    if rule == "sobol":
        vals = np.stack([np.asarray(functional(law.quadrature("sobol", n, seed=seed + r)))
                         for r in range(replicas)])
        return vals.mean(axis=0), float(np.linalg.norm(vals.std(axis=0, ddof=1)) / np.sqrt(replicas))
    if rule == "gauss-legendre":
        hi = np.asarray(functional(law.quadrature("gauss-legendre", n)))
        lo = np.asarray(functional(law.quadrature("gauss-legendre", max(n - 1, 1))))
        return hi, float(np.linalg.norm(hi - lo))
    raise ValueError(f"rule must be 'sobol' or 'gauss-legendre', got {rule!r}")


@dataclass
class RK4Result:
    """Final state, trajectory on the step grid, and the step-doubling error estimate (or None)."""

    final: np.ndarray
    trajectory: np.ndarray
    steps: int
    error_estimate: float | None = None


def _stage_times(steps: int, backward: bool) -> list[tuple[float, float, float]]:
    """(t, t -+ h/2, t -+ h) of each RK4 step, h = 1/steps: t = s h for s = 0..steps-1 (forward) or
    s = steps..1 (backward), as floats computed this way (the law is evaluated at exactly these)."""
    h = 1.0 / steps
    if backward:
        return [(s * h, s * h - h / 2, s * h - h) for s in range(steps, 0, -1)]
    return [(s * h, s * h + h / 2, s * h + h) for s in range(steps)]


#: a law's atoms and hat weights at the RK4 stage times by contents and times (:func:`_stage_stacks`)
_STAGE_CACHE: dict[tuple, tuple[dict[float, int], dict[str, np.ndarray], np.ndarray]] = {}
_STAGE_CACHE_SIZE = 32


def _stage_stacks(law: HeadLaw, times: list[tuple[float, float, float]]):
    """(index: stage time -> row, {k: theta_a(t) (T, A, ...)}, phi_n(t) (T, n_nodes)) at the distinct
    stage times in order of first occurrence.  The ascent integrates the same law at every step, so the
    stacks are kept by the law's *contents* (an edited law is another key); read only, reused."""
    key = (tuple(times), law.weights.tobytes(),
           *((v.shape, v.tobytes()) for v in (law.params[k] for k in PARAM_NAMES)))
    hit = _STAGE_CACHE.get(key)
    if hit is not None:
        return hit
    index: dict[float, int] = {}
    for t in itertools.chain.from_iterable(times):
        index.setdefault(t, len(index))
    at = [law.at(t) for t in index]
    stacks = {k: np.stack([th[k] for th in at]) for k in PARAM_NAMES}
    phis = np.stack([law.hat(t) for t in index])
    for a in (*stacks.values(), phis):
        a.setflags(write=False)
    if len(_STAGE_CACHE) >= _STAGE_CACHE_SIZE:
        del _STAGE_CACHE[next(iter(_STAGE_CACHE))]  # the oldest entry
    _STAGE_CACHE[key] = (index, stacks, phis)
    return index, stacks, phis


class _LawOnRuntime:
    """Gamma(t, X) and its VJP for B inputs X (B N, d) under one law, at the RK4 stage times, where the
    layer form ``ops`` runs (host or device): the atoms theta_a(t) at the distinct stage times stacked
    (T, A, ...) and copied once, the atom weights tiled (B A,) (head weights c_{b,a} = w_a, shared
    parameters PB = 1), the hat weights phi_n(t) (T, n_nodes) for the adjoint.  T <= 3 steps distinct
    times (t + h and the next step's t may differ in the last bit), so the stack holds at most
    3 steps A (2 d_k + 2 d_v) d numbers: small for the profiles' laws (A <= 64, steps <= 256)."""

    def __init__(self, ops: Any, law: HeadLaw, times: list[tuple[float, float, float]], with_phi: bool):
        lay = ops.layer
        want = {"Q": (lay.d_k, lay.d), "K": (lay.d_k, lay.d), "V": (lay.d_v, lay.d), "O": (lay.d, lay.d_v)}
        for k in PARAM_NAMES:  # the generated kernels are unrolled for the layer's sizes: check first
            if law.params[k].shape[2:] != want[k]:
                raise ValueError(f"law.params[{k!r}] must have shape (n_nodes, A) + {want[k]}, "
                                 f"got {law.params[k].shape}")
        self.index, stacks, phis = _stage_stacks(law, times)
        rt = self.rt = ops.rt
        self.ops, self.N, self.d = ops, ops.N, lay.d
        self.params = {k: rt.put(v) for k, v in stacks.items()}
        self.c = rt.put(np.tile(law.weights, ops.B))
        self.phis = rt.put(phis) if with_phi else None
        self.cache = ops.caches(1).layer(0)  # the last field call's, for the VJP at the same (t, X)
        self.shapes = [(law.n_atoms,) + want[k] for k in PARAM_NAMES]

    def theta(self, t: float) -> tuple[Any, Any, Any, Any]:
        j = self.index[t]
        return self.params["Q"][j], self.params["K"][j], self.params["V"][j], self.params["O"][j]

    def phi(self, t: float) -> Any:
        assert self.phis is not None
        return self.phis[self.index[t]]

    def field(self, t: float, X: Any, cache: Any = None) -> Any:
        """F = Gamma(t, X) (B N, d); its layer cache in ``cache`` (default: the one slot of the last call)."""
        F = self.rt.empty((self.ops.B * self.N, self.d))
        self.ops.field(X, self.theta(t), self.c, 1, None, F, self.cache if cache is None else cache)
        return F

    def vjp(self, t: float, X: Any, P: Any, with_grads: bool = True, cache: Any = None):
        """xbar (N, d) and the per-atom gradients (dQ, dK, dV, dO) (A, ...) (None without ``with_grads``)
        for the cache of the :meth:`field` call at the same (t, X) (default: the last call's); B = 1."""
        xbar = self.rt.empty((self.N, self.d))
        grads = tuple(self.rt.empty(shape) for shape in self.shapes) if with_grads else None
        self.ops.vjp(X, self.theta(t), self.c, 1, self.cache if cache is None else cache, P, None, xbar, grads)
        return xbar, grads


@dataclass
class MeanFieldLimit:
    """The N-particle MV-ODE and its adjoint for a :class:`HeadLaw` (see the module docstring).

    ``resident`` (default True): on a GPU backend whose device arrays support arithmetic, forward and
    adjoint integrate on the device, copying in and out once; ``resident=False`` keeps the host loop."""

    d: int
    d_k: int
    d_v: int
    causal: bool = False
    temperature: float = 1.0
    backend: str = "numba"
    resident: bool = True

    def __post_init__(self) -> None:
        self.layer = attention_layer(self.d, self.d_k, self.d_v, causal=self.causal,
                                     temperature=float(self.temperature), backend=self.backend)

    @property
    def on_device(self) -> bool:
        """Whether forward/adjoint keep their state on the device (a GPU layer with array arithmetic)."""
        return self.resident and self.layer.dev is not None and self.layer.dev.has_array_ops

    def _ops(self, B: int, law: HeadLaw, N: int) -> Any:
        return layer_ops(self.layer, B, law.n_atoms, N, resident=self.on_device)

    def field(self, law: HeadLaw, t: float, X: Any) -> np.ndarray:
        """Gamma(X^i, mu^i, nu_t) (N, d)."""
        th = law.at(t)
        return self.layer.field(np.asarray(X, dtype=np.float64), th["Q"], th["K"], th["V"], th["O"],
                                law.weights)[0]

    def _check_steps(self, law: HeadLaw, steps: int) -> None:
        segments = max(law.n_nodes - 1, 1)
        if not isinstance(steps, (int, np.integer)) or steps < 1 or steps % segments:
            raise ValueError(f"steps must be a positive multiple of n_nodes - 1 = {segments}, got {steps!r}")

    def _checked_states(self, X: np.ndarray, name: str) -> np.ndarray:
        """X (B, N, d) with B, N >= 1, C-contiguous float64."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 3 or X.shape[0] < 1 or X.shape[1] < 1 or X.shape[2] != self.d:
            raise ValueError(f"{name} must have shape (N, {self.d}) per input with N >= 1, got {X.shape}")
        return X

    def forward(self, X0: Any, law: HeadLaw, steps: int) -> RK4Result:
        """RK4 with ``steps`` uniform steps on [0, 1]; trajectory (steps+1, N, d)."""
        self._check_steps(law, steps)
        traj = self._forward(self._checked_states(np.asarray(X0, dtype=np.float64)[None], "X0"), law, steps)[:, 0]
        return RK4Result(traj[-1].copy(), traj, steps)

    def forward_batch(self, X0s: Any, law: HeadLaw, steps: int) -> np.ndarray:
        """Trajectories (steps+1, B, N, d) of B inputs X0s (B, N, d) under one law (on the device one
        launch chain per RK4 stage for all B; on the host each input's own field calls)."""
        self._check_steps(law, steps)
        X0s = np.asarray(X0s, dtype=np.float64)
        if X0s.ndim != 3 or X0s.shape[0] < 1:
            raise ValueError(f"X0s must have shape (B, N, {self.d}) with B >= 1, got {X0s.shape}")
        return self._forward(self._checked_states(X0s, "X0s"), law, steps)

    def _forward(self, X0s: np.ndarray, law: HeadLaw, steps: int) -> np.ndarray:
        """The forward RK4, once for host and device: X0s (B, N, d) -> host trajectories (steps+1, B, N, d).

        k1 = F(t, X), k2 = F(t + h/2, X + h/2 k1), k3 = F(t + h/2, X + h/2 k2), k4 = F(t + h, X + h k3),
        X <- X + h/6 (k1 + 2 k2 + 2 k3 + k4), on the states (B N, d) of the runtime.
        """
        B, N, d = X0s.shape
        ops = self._ops(B, law, N)
        times = _stage_times(steps, backward=False)
        nu = _LawOnRuntime(ops, law, times, with_phi=False)
        h = 1.0 / steps
        traj = ops.rt.empty((steps + 1, B * N, d))
        ops.copy_in(traj, 0, X0s.reshape(B * N, d))
        for s, (t, t_half, t_next) in enumerate(times):
            X = traj[s]
            k1 = nu.field(t, X)
            k2 = nu.field(t_half, X + h / 2 * k1)
            k3 = nu.field(t_half, X + h / 2 * k2)
            k4 = nu.field(t_next, X + h * k3)
            traj[s + 1] = X + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return ops.rt.get(traj).reshape(steps + 1, B, N, d)

    def forward_checked(self, X0: Any, law: HeadLaw, steps: int) -> RK4Result:
        """RK4 at ``steps`` and ``2*steps``; returns the finer solution with the Richardson error
        estimate ``max_i |X_h - X_{h/2}| / 15`` (order 4)."""
        coarse = self.forward(X0, law, steps)
        fine = self.forward(X0, law, 2 * steps)
        fine.error_estimate = float(np.abs(fine.final - coarse.final).max() / 15.0)
        return fine

    def adjoint(self, X1: Any, P1: Any, law: HeadLaw, steps: int, *, node_grads: bool = True):
        """Integrate (X, P, node gradients) backward from t = 1 by RK4 (X re-integrated backward), once
        for host and device.

        Returns (X_0 reconstructed, P_0, node gradients dict (n_nodes, A, ...)), with
        dJ/dtheta_{n,a} = int phi_n(t) (1/N) sum_i d_theta gamma^T w_a P_t^i dt.  In the reversed time
        s = 1 - t the right-hand side at stage time t is (a, b, g) = (-F(t, X), xbar(t, X, P),
        phi(t) (x) d_theta / N), combined by RK4 like the forward stages.  ``node_grads=False`` skips g
        (the gradient dict is then None; X_0 and P_0 are bit for bit the same): the sup-over-inputs
        ascent needs P_0 alone.
        """
        self._check_steps(law, steps)
        X1 = self._checked_states(np.asarray(X1, dtype=np.float64)[None], "X1")[0]
        P1 = np.ascontiguousarray(P1, dtype=np.float64)
        if P1.shape != X1.shape:
            raise ValueError(f"P1 must have the shape of X1 {X1.shape}, got {P1.shape}")
        N = X1.shape[0]
        ops = self._ops(1, law, N)
        rt = ops.rt
        times = _stage_times(steps, backward=True)
        nu = _LawOnRuntime(ops, law, times, with_phi=True)
        X, P = rt.put(X1), rt.put(P1)
        grads = [rt.zeros((law.n_nodes,) + law.params[k].shape[1:]) for k in PARAM_NAMES] if node_grads else []
        h = 1.0 / steps

        def rhs(t: float, Xs: Any, Ps: Any):
            F = nu.field(t, Xs)
            xbar, dtheta = nu.vjp(t, Xs, Ps, node_grads)
            if dtheta is None:
                return -F, xbar, ()
            phi = nu.phi(t)
            G = [phi[:, None, None, None] * g[None] / N for g in dtheta]  # (n_nodes, A, r, s): phi_n d_theta_a / N
            return -F, xbar, G

        for t, t_half, t_prev in times:
            a1, b1, g1 = rhs(t, X, P)
            a2, b2, g2 = rhs(t_half, X + h / 2 * a1, P + h / 2 * b1)
            a3, b3, g3 = rhs(t_half, X + h / 2 * a2, P + h / 2 * b2)
            a4, b4, g4 = rhs(t_prev, X + h * a3, P + h * b3)
            X = X + h / 6 * (a1 + 2 * a2 + 2 * a3 + a4)
            P = P + h / 6 * (b1 + 2 * b2 + 2 * b3 + b4)
            for k in range(len(grads)):
                grads[k] += h / 6 * (g1[k] + 2 * g2[k] + 2 * g3[k] + g4[k])
        return rt.get(X), rt.get(P), ({k: rt.get(g) for k, g in zip(PARAM_NAMES, grads)} if node_grads else None)

    def loss_and_grad(self, X0: Any, law: HeadLaw, loss: Any, steps: int):
        """(J, node gradients, P_0 (N-scaled adjoint at t=0), forward RK4Result)."""
        fwd = self.forward(X0, law, steps)
        N = fwd.final.shape[0]
        _, P0, grads = self.adjoint(fwd.final, N * loss.grad(fwd.final), law, steps)
        return float(loss.value(fwd.final)), grads, P0, fwd


def discrete_node_loss_and_grad(model: AttentionTransformer, X0: Any, law: HeadLaw, loss: Any, L: int):
    """Loss and node gradients of the L-layer model whose layer-r heads are theta_a(r/L) with head
    weights w_a (exact-expectation mode): dLoss/dtheta_{n,a} = sum_r phi_n(r/L) dLoss/dtheta_{r,a}."""
    params, w = law.discretise(L, mode="exact")
    value, grads, fwd, adj = model.loss_and_grad(X0, params, loss, head_weights=w)
    return value, law.node_gradients(grads), adj


@dataclass
class TrainingHistory:
    """Losses per step (k = 0..K-1, before each update) and the laws after every step (K+1 entries)."""

    losses: list[float] = field(default_factory=list)
    laws: list[HeadLaw] = field(default_factory=list)


def train_adamw(grad_fn: Callable[[HeadLaw], tuple[float, dict]], law: HeadLaw, steps: int, *,
                lr: float = 1e-2, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                blockwise: bool = False) -> TrainingHistory:
    """K AdamW (or BlockwiseAdamW, one block per (node, atom) matrix) steps on the node parameters.

    ``grad_fn(law) -> (loss, node gradients)``, e.g. ``lambda nu: mf.loss_and_grad(X0, nu, loss, S)[:2]``
    (the limit) or ``lambda nu: discrete_node_loss_and_grad(model, X0, nu, loss, L)[:2]`` (the network).
    """
    opt = (BlockwiseAdamW(law.params, lr, betas, eps, weight_decay, block_axes=2) if blockwise
           else AdamW(law.params, lr, betas, eps, weight_decay))
    hist = TrainingHistory(laws=[law])
    for _ in range(steps):
        value, grads = grad_fn(law)
        hist.losses.append(value)
        new_params = opt.step(grads)
        assert isinstance(new_params, dict)  # law.params is a dict, so the optimizer hands back one
        law = law.with_params(new_params)
        hist.laws.append(law)
    return hist
