"""Benettin (tangent-flow) estimate of the top Lyapunov exponent of the random-MLP layer map.

Discrete map on S^{d−1} (docs/theory.md §B.1/§B.7, no attention), a fresh width-m MLP every step::

    x ← LN(x + √Δt G^m(x)),   G^m(y) = (1/√m) W φ((1/√d) U y + b_U) + b_W,   LN(v) = v/|v|,
    U ∈ R^{m×d}, W ∈ R^{d×m} i.i.d. N(0,1), b_U ~ N(0, σ_U² I_m), b_W ~ N(0, σ_W² I_d).

A tangent vector v is pushed by the Jacobian, ``v ← DLN(y)(v + √Δt DG^m(x) v)`` with
``DLN(y)w = (w − ⟨w,ŷ⟩ŷ)/|y|`` and ``DG^m(x)v = (1/√m) W (φ'(·) ⊙ U v/√d)``, renormalised each
step; ``λ̂ = Σ log|v_{ℓ+1}|/|v_ℓ| / (steps·Δt)`` per chain (time-normalised).  As Δt → 0 the
estimate converges to λ_1 = ((d−3)/2)k'(1) − ((d−1)/2)k(1) (bias O(Δt); the covariance, hence the
limit, is the same for every m).  Chains are vectorised with NumPy; arrays are
``x, v: (chains, d)``, ``U: (chains, m, d)``, ``W: (chains, d, m)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import erf, expit

__all__ = ["LyapunovEstimate", "simulate_top_lyapunov", "ACTIVATIONS"]

_SQRT2 = np.sqrt(2.0)


def _gelu(z):
    return 0.5 * z * (1 + erf(z / _SQRT2))


def _gelu_prime(z):
    return 0.5 * (1 + erf(z / _SQRT2)) + z * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)


ACTIVATIONS = {
    "relu": (lambda z: np.maximum(z, 0.0), lambda z: (z > 0).astype(z.dtype)),
    "tanh": (np.tanh, lambda z: 1.0 - np.tanh(z) ** 2),
    "sigmoid": (expit, lambda z: expit(z) * (1.0 - expit(z))),
    "silu": (lambda z: z * expit(z), lambda z: expit(z) * (1.0 + z * (1.0 - expit(z)))),
    "gelu": (_gelu, _gelu_prime),
}


@dataclass(frozen=True)
class LyapunovEstimate:
    """Time-normalised top-exponent estimate: mean over chains and its standard error."""

    estimate: float
    standard_error: float
    chains: int
    steps: int
    dt: float


def _unit(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    norm = np.linalg.norm(a, axis=-1, keepdims=True)
    return a / norm, norm[..., 0]


def simulate_top_lyapunov(activation: str = "relu", d: int = 5, sigma_u: float = 0.1,
                          sigma_w: float = 0.1, *, width: int = 64, dt: float = 0.01,
                          steps: int = 400, chains: int = 256, seed: int = 0) -> LyapunovEstimate:
    """Benettin estimate of λ_1 for the map above (see module docstring), seeded."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}; got {activation!r}")
    if d < 2:
        raise ValueError(f"d must be >= 2, got {d}")
    if sigma_u < 0 or sigma_w < 0:
        raise ValueError(f"sigma_u and sigma_w must be >= 0, got {sigma_u}, {sigma_w}")
    for name, value in (("width", width), ("steps", steps), ("chains", chains)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if chains < 2:
        raise ValueError(f"chains must be >= 2 for a standard error, got {chains}")
    if not dt > 0:
        raise ValueError(f"dt must be > 0, got {dt}")
    phi, dphi = ACTIVATIONS[activation]
    rng = np.random.default_rng(seed)
    x, _ = _unit(rng.standard_normal((chains, d)))
    v = rng.standard_normal((chains, d))
    v, _ = _unit(v - np.sum(v * x, axis=1, keepdims=True) * x)
    log_growth = np.zeros(chains)
    root_dt, inv_root_m, inv_root_d = np.sqrt(dt), 1.0 / np.sqrt(width), 1.0 / np.sqrt(d)
    for _ in range(steps):
        U = rng.standard_normal((chains, width, d))
        W = rng.standard_normal((chains, d, width))
        b_u = sigma_u * rng.standard_normal((chains, width))
        b_w = sigma_w * rng.standard_normal((chains, d))
        pre = np.einsum("cmd,cd->cm", U, x) * inv_root_d + b_u
        field = np.einsum("cdm,cm->cd", W, phi(pre)) * inv_root_m + b_w
        jac_v = np.einsum("cdm,cm->cd", W, dphi(pre) * np.einsum("cmd,cd->cm", U, v)) \
            * (inv_root_m * inv_root_d)
        y_hat, y_norm = _unit(x + root_dt * field)
        w = v + root_dt * jac_v
        w = (w - np.sum(w * y_hat, axis=1, keepdims=True) * y_hat) / y_norm[:, None]
        v, growth = _unit(w)
        log_growth += np.log(growth)
        x = y_hat
    per_chain = log_growth / (steps * dt)
    return LyapunovEstimate(float(per_chain.mean()), float(per_chain.std(ddof=1) / np.sqrt(chains)),
                            chains, steps, dt)
