"""Paper A in the diffusive (SDE) depth regime: residual scale (T/L)^{1/2}, zero-mean output matrices.

Discrete model (docs/attention_sde_regime.md; tokens X = (x^1..x^N) in R^d, heads h = 1..H whose
(Q_h, K_h, V_h) are drawn once and shared by all layers, output matrices O_{r,h} = sigma_O Z_{r,h},
Z_{r,h} (d, d_v) i.i.d. N(0, 1) per layer r and head h)::

    x_{r+1}^i = x_r^i + (T/L) b(x_r^i, m_r) + (T/L)^p c_H sum_h O_{r,h} A_h(x_r^i, m_r),

    A_h(x, m) = sum_j softmax_j(beta <Q_h x, K_h x^j>) V_h x^j         (d_v; m = m^N, unmasked),
    b(x, m)   = (kappa/H) sum_h Obar_h A_h(x, m)                        (mean-field drift, kappa = drift_scale),

with p = ``residual_power`` (1/2: the diffusive regime; 1: the ODE scaling, a deliberately wrong
model here) and c_H = 1/H (``head_average="mean"``) or 1/sqrt(H) (``"sqrt"``).  Because the head is
linear in O, the increment is exactly Gaussian given the state: with p = 1/2 the model is the
Euler–Maruyama (EM) scheme, step Δt = T/L, of the Itô SDE with common noise (all tokens share the
heads' Brownian matrices W_h, (d, d_v))::

    dX^i = b(X^i, μ^N_t) dt + c_H sigma_O sum_h dW_h(t) A_h(X^i, μ^N_t),                       (SDE)
    Cov(ξ(x^i), ξ(x^j)) = c_H² sigma_O² sum_h <A_h(x^i), A_h(x^j)> I_d   per unit time,          (C)

ξ(x) = c_H sigma_O sum_h Z_h A_h(x) the per-unit-time noise.  The noise fields σ_(h,a,k) = c_H sigma_O
e_a A_{h,k} do not commute (derivation ``attention-sde``), so EM has strong order 1/2 and weak order 1.
The Itô–Stratonovich conversion drift (:meth:`SDERegime.stratonovich_correction`) is

    s^i = (1/2) c_H² sigma_O² sum_h sum_j [d_{x^j} A_h(x^i, μ^N)]^T A_h(x^j, μ^N)
        = (1/2) c_H² sigma_O² sum_h [ beta Q_h^T sum_j P_ij <V_h x^j − A^i, A^i> K_h x^j
                                      + V_h^T sum_j P_ij A^j + beta K_h^T Q_h x^i sum_j P_ij <V_h x^j − A^i, A^j> ]

(the first term from the spatial Jacobian, the last two from the Lions derivative with weight 1/N);
the limit read as a Stratonovich SDE has Itô drift b + s, a wrong limit (``limit_correction=1``).

Coupling (:func:`coupled_paths`): the limit SDE runs EM at the fine step T/L_ref with Brownian
increments dW; the discrete model with L layers uses Z_{r,h} = (sum of the fine increments of layer r)
/ sqrt(T/L) — exactly N(0, 1) — so the two see the same Brownian path; one fine path serves every L.
The ODE limit of the same heads (dX/dt = b(X, μ^N), Euler at the fine step) is simulated alongside.
Batches: all arrays carry a leading batch axis B of independent paths (own tokens, own noise, the same heads).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from transformer_limits.numeric.attention.transformer import init_params

__all__ = ["HEAD_AVERAGES", "SDERegime", "CoupledPaths", "coupled_paths", "mean_square_norm", "ode_limit"]

#: head averages c_H: "mean" = 1/H (the diffusion coefficient scales like H^{-1/2}), "sqrt" = 1/sqrt(H)
HEAD_AVERAGES = ("mean", "sqrt")


@dataclass
class SDERegime:
    """The discrete model and its limit SDE for fixed heads (module docstring).

    Heads (Q_h, K_h, V_h) and the drift's output matrices Obar_h come from
    :func:`~transformer_limits.numeric.attention.transformer.init_params` (Xavier uniform, ``head_gain``)
    with ``heads_seed``.  ``limit_correction`` multiplies the Itô–Stratonovich drift s added to the
    limit's drift (0: the Itô limit; 1: the Stratonovich reading, a wrong model).
    """

    d: int = 2
    d_k: int = 2
    d_v: int = 2
    H: int = 4
    T: float = 1.0
    temperature: float = 1.0
    sigma_O: float = 1.0
    head_average: str = "mean"
    residual_power: float = 0.5
    drift_scale: float = 0.0
    head_gain: float = 1.0
    heads_seed: int = 0
    limit_correction: float = 0.0
    heads: dict[str, np.ndarray] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.head_average not in HEAD_AVERAGES:
            raise ValueError(f"head_average must be one of {', '.join(HEAD_AVERAGES)}, got {self.head_average!r}")
        if not (self.T > 0 and self.temperature > 0 and self.sigma_O >= 0):
            raise ValueError("T and temperature must be > 0 and sigma_O >= 0")
        p = init_params(1, self.H, self.d, self.d_k, self.d_v, seed=self.heads_seed, gain=self.head_gain)
        self.heads = {k: p[k][0] for k in ("Q", "K", "V")}  # Q, K (H, d_k, d); V (H, d_v, d)
        # the mean output matrix Obar_h = −V_h^T: b^i = −(kappa/H) sum_h V_h^T sum_j P_ij V_h x^j pulls every
        # token towards an attention-weighted mean (bounded moments; a random Obar lets the tails grow)
        self.heads["O"] = -self.heads["V"].transpose(0, 2, 1).copy()

    @property
    def beta(self) -> float:
        return 1.0 / self.temperature

    @property
    def c_H(self) -> float:
        """Head weight c_H: 1/H or 1/sqrt(H)."""
        return 1.0 / self.H if self.head_average == "mean" else 1.0 / np.sqrt(self.H)

    @property
    def noise_scale(self) -> float:
        """c_H sigma_O: the noise is c_H sigma_O sum_h dW_h A_h."""
        return self.c_H * self.sigma_O

    # ------------------------------------------------------------------ fields
    def softmax_heads(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(P (B, H, N, N), A (B, H, N, d_v), QF (B, H, N, d_k), KF (B, H, N, d_k)) for X (B, N, d)."""
        Q, K, V = self.heads["Q"], self.heads["K"], self.heads["V"]
        QF, KF, VF = (_features(M, X) for M in (Q, K, V))
        logits = self.beta * QF @ KF.transpose(0, 1, 3, 2)
        E = np.exp(logits - logits.max(axis=3, keepdims=True))
        P = E / E.sum(axis=3, keepdims=True)
        return P, P @ VF, QF, KF

    def head_outputs(self, X: np.ndarray) -> np.ndarray:
        """A_h(x^i, m^N) for every path, head and token: (B, H, N, d_v)."""
        return self.softmax_heads(X)[1]

    def drift(self, A: np.ndarray) -> np.ndarray:
        """b(x^i, m^N) = (kappa/H) sum_h Obar_h A_h^i from head outputs A (B, H, N, d_v): (B, N, d)."""
        if self.drift_scale == 0.0:
            return np.zeros(A.shape[:1] + A.shape[2:3] + (self.d,))
        return (self.drift_scale / self.H) * np.sum(A @ self.heads["O"].transpose(0, 2, 1), axis=1)

    def noise(self, A: np.ndarray, dW: np.ndarray) -> np.ndarray:
        """c_H sigma_O sum_h dW_h A_h^i for matrices dW (B, H, d, d_v): (B, N, d)."""
        return self.noise_scale * np.sum(A @ dW.transpose(0, 1, 3, 2), axis=1)

    def covariance(self, X: np.ndarray) -> np.ndarray:
        """Scalar part of (C): c_H² sigma_O² sum_h <A_h^i, A_h^j>, (B, N, N); the full covariance is it ⊗ I_d."""
        A = self.head_outputs(X)
        return self.noise_scale**2 * np.einsum("bhid,bhjd->bij", A, A)

    def stratonovich_correction(self, X: np.ndarray) -> np.ndarray:
        """s^i = (1/2) sum_k (D σ_k σ_k)^i, the Itô–Stratonovich conversion drift (module docstring): (B, N, d)."""
        P, A, QF, KF = self.softmax_heads(X)
        VF = _features(self.heads["V"], X)
        AT = A.transpose(0, 1, 3, 2)
        diff_self = A @ VF.transpose(0, 1, 3, 2) - np.sum(A * A, axis=3)[..., None]  # [i, j] = <V x^j − A^i, A^i>
        diff_other = np.sum(VF * A, axis=3)[:, :, None, :] - A @ AT                   # [i, j] = <V x^j − A^i, A^j>
        jac = self.beta * ((P * diff_self) @ KF) @ self.heads["Q"][None]                # β Q^T Σ_j P_ij <.,.> K x^j
        lions_v = (P @ A) @ self.heads["V"][None]                                     # V^T Σ_j P_ij A^j
        lions_q = self.beta * (QF * np.sum(P * diff_other, axis=3)[..., None]) @ self.heads["K"][None]
        return 0.5 * self.noise_scale**2 * np.sum(jac + lions_v + lions_q, axis=1)

    # ------------------------------------------------------------------ steps
    def layer(self, X: np.ndarray, L: int, Z: np.ndarray) -> np.ndarray:
        """One layer of the discrete model with standard normal Z (B, H, d, d_v) (O = sigma_O Z)."""
        dt = self.T / L
        A = self.head_outputs(X)
        return X + dt * self.drift(A) + dt**self.residual_power * self.noise(A, Z)

    def limit_step(self, X: np.ndarray, h: float, dW: np.ndarray) -> np.ndarray:
        """EM step of the limit SDE (plus ``limit_correction`` times s) with increments dW (B, H, d, d_v)."""
        A = self.head_outputs(X)
        b = self.drift(A)
        if self.limit_correction:
            b = b + self.limit_correction * self.stratonovich_correction(X)
        return X + h * b + self.noise(A, dW)

    def ode_step(self, X: np.ndarray, h: float) -> np.ndarray:
        """Euler step of the ODE limit of the same heads, dX/dt = b(X, μ^N) (X itself when kappa = 0)."""
        return X + h * self.drift(self.head_outputs(X)) if self.drift_scale else X


def _features(M: np.ndarray, X: np.ndarray) -> np.ndarray:
    """M_h x^i for a stack M (H, k, d) and tokens X (B, N, d): (B, H, N, k) (batched matmul: fast)."""
    return X[:, None] @ M.transpose(0, 2, 1)[None]


@dataclass
class CoupledPaths:
    """Final states of one coupled batch: ``discrete[L]`` (B, N, d) per depth L, the limit SDE
    ``sde`` (B, N, d) at T (fine EM), the ODE limit ``ode`` (B, N, d) and the start ``X0`` (B, N, d)."""

    discrete: dict[int, np.ndarray]
    sde: np.ndarray
    ode: np.ndarray
    X0: np.ndarray


def coupled_paths(model: SDERegime, X0: np.ndarray, levels, L_ref: int, rng: np.random.Generator, *,
                  discrete_model: SDERegime | None = None, independent: bool = False,
                  ode_steps: int | None = None) -> CoupledPaths:
    """Run the limit SDE at step T/L_ref and the discrete model at each L in ``levels`` on the same
    Brownian path (module docstring, "Coupling"); ``discrete_model`` (default ``model``) may differ from
    the limit (e.g. a wrong residual power); ``independent=True`` breaks the coupling (the discrete
    model draws its own Z: a wrong coupling).  Every L must divide L_ref.  The ODE limit runs Euler with
    ``ode_steps`` steps (default L_ref; deterministic, so fewer steps suffice for its O(1/steps) error).
    """
    levels = [int(L) for L in levels]
    if any(L_ref % L for L in levels):
        raise ValueError(f"every level must divide L_ref={L_ref}, got {levels}")
    disc = discrete_model or model
    X0 = np.asarray(X0, dtype=np.float64)
    B = X0.shape[0]
    shape = (B, model.H, model.d, model.d_v)
    h = model.T / L_ref
    X_sde = X0.copy()
    states = {L: X0.copy() for L in levels}
    sums = {L: np.zeros(shape) for L in levels}
    for s in range(L_ref):
        dW = np.sqrt(h) * rng.standard_normal(shape)
        X_sde = model.limit_step(X_sde, h, dW)
        for L in levels:
            sums[L] += dW
            if (s + 1) % (L_ref // L) == 0:
                Z = rng.standard_normal(shape) if independent else sums[L] / np.sqrt(model.T / L)
                states[L] = disc.layer(states[L], L, Z)
                sums[L][:] = 0.0
    return CoupledPaths(states, X_sde, ode_limit(model, X0, ode_steps or L_ref), X0)


def ode_limit(model: SDERegime, X0: np.ndarray, steps: int) -> np.ndarray:
    """The ODE limit of the same heads at T, dX/dt = b(X, μ^N) by Euler with ``steps`` steps: (B, N, d)."""
    X = np.asarray(X0, dtype=np.float64)
    for _ in range(steps if model.drift_scale else 0):
        X = model.ode_step(X, model.T / steps)
    return X


def mean_square_norm(X: np.ndarray) -> np.ndarray:
    """Test function f(X) = (1/N) sum_i |x^i|² per path: (B,) for X (B, N, d)."""
    return np.mean(np.sum(X * X, axis=2), axis=1)
