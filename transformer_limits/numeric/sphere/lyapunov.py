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

**Two samplers of the same law** (option ``sampler``).  ``"matrices"`` draws U, W, b_U, b_W as written
(2md + m + d normals per chain and step).  ``"projections"`` draws only what the step reads: since x
and v are orthonormal (x on the sphere, v a unit tangent vector at x), g = U x and g' = U v are
independent N(0, I_m); and given a = φ(g/√d + b_U) and b = φ'(g/√d + b_U) ⊙ g'/√d, the pair
(W a, W b) is Gaussian with independent rows of covariance [[|a|², ⟨a,b⟩], [⟨a,b⟩, |b|²]], so
W a = |a| z, W b = (⟨a,b⟩/|a|) z + (|b|² − ⟨a,b⟩²/|a|²)^{1/2} z' with z, z' ~ N(0, I_d) (W b = |b| z'
when a = 0).  That is 3m + 3d normals instead of 2md + m + d (3.4x fewer at m = 64, d = 5; 30x at
d = 64) and no (m, d) products: the same Markov chain in law, hence the same λ̂ distribution, from a
different stream of draws (tests/test_lyapunov_sampler.py compares them).

**A third, ``"reduced"``: the growths without the positions.**  The law of the step is invariant under
rotations (U's rows, W's columns and b_W are isotropic Gaussians), and so is the growth |v_{ℓ+1}|/|v_ℓ|;
so given the past, the growth of step ℓ has the same law at every orthonormal (x, v): the log-growths
are i.i.d. over steps, and each step may be taken from x = e_1, v = e_2.  The growth reads z, z', b_W
only through their components along e_1, e_2 and the Gram matrix of their parts orthogonal to both,
which for k = d − 2 ≥ 3 is Wishart_3(k, I) (b_W's part scaled by σ_W): drawn with Bartlett's
decomposition, the rows of L = [[c_1, 0, 0], [n_21, c_2, 0], [n_31, n_32, c_3]], c_i² ~ χ²_{k−i+1},
n_ij ~ N(0, 1), stand for the three orthogonal parts in R³ (for k ≤ 3 they are drawn as they are, in
R^k).  U x and b_U enter only through the pre-activations g/√d + b_U ~ N(0, (1/d + σ_U²) I_m), one
draw per unit.  That is 2m + 6 normals and 3 χ² draws per chain and step instead of 3m + 3d (d = 64,
m = 16: 38 instead of 240), in R^{2+min(k,3)} instead of R^d; the chain's positions are not simulated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import erf, expit

__all__ = ["LyapunovEstimate", "simulate_top_lyapunov", "ACTIVATIONS", "SAMPLERS", "hidden_draws", "projection_draws",
           "reduced_draws"]

#: how a step's Gaussian layer is drawn (module docstring): every matrix entry, only its projections, or
#: only what the growth reads (the positions not simulated)
SAMPLERS = ("matrices", "projections", "reduced")

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
                          steps: int = 400, chains: int = 256, seed: int = 0,
                          sampler: str = "matrices") -> LyapunovEstimate:
    """Benettin estimate of λ_1 for the map above (see module docstring), seeded; ``sampler`` one of
    ``SAMPLERS`` (the same law; ``"projections"`` draws 3m + 3d normals per chain and step)."""
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
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}; got {sampler!r}")
    phi, dphi = ACTIVATIONS[activation]
    rng = np.random.default_rng(seed)
    moving = sampler != "reduced"
    if moving:
        x, _ = _unit(rng.standard_normal((chains, d)))
        v = rng.standard_normal((chains, d))
        v, _ = _unit(v - np.sum(v * x, axis=1, keepdims=True) * x)
    else:  # every step from x = e_1, v = e_2 of R^{2 + min(d − 2, 3)} (module docstring)
        x, v = np.zeros((chains, 2 + min(d - 2, 3))), np.zeros((chains, 2 + min(d - 2, 3)))
        x[:, 0], v[:, 1] = 1.0, 1.0
    log_growth = np.zeros(chains)
    root_dt, inv_root_m, inv_root_d = np.sqrt(dt), 1.0 / np.sqrt(width), 1.0 / np.sqrt(d)
    step = {"matrices": _matrices_step, "projections": _projections_step, "reduced": _reduced_step}[sampler]
    for _ in range(steps):
        field, jac_v = step(rng, x, v, phi, dphi, width, sigma_u, sigma_w, inv_root_m, inv_root_d)
        y_hat, y_norm = _unit(x + root_dt * field)
        w = v + root_dt * jac_v
        w = (w - np.sum(w * y_hat, axis=1, keepdims=True) * y_hat) / y_norm[:, None]
        v_next, growth = _unit(w)
        log_growth += np.log(growth)
        if moving:
            x, v = y_hat, v_next
    per_chain = log_growth / (steps * dt)
    return LyapunovEstimate(float(per_chain.mean()), float(per_chain.std(ddof=1) / np.sqrt(chains)),
                            chains, steps, dt)


def _matrices_step(rng, x, v, phi, dphi, width, sigma_u, sigma_w, inv_root_m, inv_root_d):
    """(G^m(x), DG^m(x) v), each (chains, d), from U, W, b_U, b_W drawn in that order."""
    chains, d = x.shape
    U = rng.standard_normal((chains, width, d))
    W = rng.standard_normal((chains, d, width))
    b_u = sigma_u * rng.standard_normal((chains, width))
    b_w = sigma_w * rng.standard_normal((chains, d))
    pre = np.einsum("cmd,cd->cm", U, x) * inv_root_d + b_u
    field = np.einsum("cdm,cm->cd", W, phi(pre)) * inv_root_m + b_w
    jac_v = np.einsum("cdm,cm->cd", W, dphi(pre) * np.einsum("cmd,cd->cm", U, v)) * (inv_root_m * inv_root_d)
    return field, jac_v


def _projections_step(rng, x, v, phi, dphi, width, sigma_u, sigma_w, inv_root_m, inv_root_d):
    """The same pair in law from g = Ux, g' = Uv (m each), b_U, then z, z', b_W (d each): x ⟂ v unit."""
    a, b, z, b_w = projection_draws(rng, x.shape, phi, dphi, width, sigma_u, sigma_w, inv_root_d)
    return _field_and_jacobian(a, b, z, b_w, inv_root_m)


def _reduced_step(rng, x, v, phi, dphi, width, sigma_u, sigma_w, inv_root_m, inv_root_d):
    """The pair in law at x = e_1, v = e_2 of R^{2+min(d−2,3)} (``x.shape``): the pre-activations
    g/√d + b_U (m), g' (m), then z, z', b_W by :func:`reduced_draws` (d = 1/inv_root_d²)."""
    chains = x.shape[0]
    # the pre-activation g/√d + b_U is one N(0, 1/d + σ_U²) draw per unit: g enters only through it
    pre = np.sqrt(inv_root_d ** 2 + sigma_u ** 2) * rng.standard_normal((chains, width))
    a, b = phi(pre), dphi(pre) * rng.standard_normal((chains, width)) * inv_root_d
    d = int(round(inv_root_d ** -2))
    return _field_and_jacobian(a, b, *reduced_draws(rng, chains, d, sigma_w), inv_root_m)


def _field_and_jacobian(a, b, z, b_w, inv_root_m):
    """(W a/√m + b_W, W b/√m) with W a = |a| z, W b = (⟨a,b⟩/|a|) z + (|b|² − ⟨a,b⟩²/|a|²)^{1/2} z'."""
    aa, ab, bb = np.sum(a * a, axis=1), np.sum(a * b, axis=1), np.sum(b * b, axis=1)
    norm_a = np.sqrt(aa)
    safe = np.where(norm_a > 0.0, norm_a, 1.0)
    along = np.where(norm_a > 0.0, ab / safe, 0.0)  # <a,b>/|a|: W b's part along W a
    across = np.sqrt(np.maximum(bb - along * along, 0.0))  # Cauchy-Schwarz: >= 0 up to round-off
    field = (norm_a[:, None] * z[0]) * inv_root_m + b_w
    jac_v = (along[:, None] * z[0] + across[:, None] * z[1]) * inv_root_m
    return field, jac_v


def hidden_draws(rng, chains, phi, dphi, width, sigma_u, inv_root_d):
    """g, g' (2, chains, m) then b_U (chains, m), returned as a = φ(g/√d + b_U) and
    b = φ'(g/√d + b_U) ⊙ g'/√d (chains, m)."""
    g = rng.standard_normal((2, chains, width))
    b_u = sigma_u * rng.standard_normal((chains, width))
    pre = g[0] * inv_root_d + b_u
    return phi(pre), dphi(pre) * g[1] * inv_root_d


def projection_draws(rng, shape, phi, dphi, width, sigma_u, sigma_w, inv_root_d):
    """One step's draws of the projections sampler for (chains, d) = ``shape``, in their order: g, g'
    (2, chains, m), b_U (chains, m), z, z' (2, chains, d), b_W (chains, d); returned as
    a = φ(g/√d + b_U), b = φ'(g/√d + b_U) ⊙ g'/√d (chains, m), z (2, chains, d) and b_W."""
    chains, d = shape
    a, b = hidden_draws(rng, chains, phi, dphi, width, sigma_u, inv_root_d)
    z = rng.standard_normal((2, chains, d))
    b_w = sigma_w * rng.standard_normal((chains, d))
    return a, b, z, b_w


def reduced_draws(rng, chains, d, sigma_w):
    """z, z' (2, chains, n) and b_W (chains, n), n = 2 + min(d − 2, 3), with the joint law of the
    inner products of d-dimensional z, z' ~ N(0, I_d), b_W ~ N(0, σ_W² I_d) with e_1, e_2 and with
    each other: coordinates 0, 1 are the components along e_1, e_2 (six normals); the rest stand for
    the parts orthogonal to both, drawn as they are for k = d − 2 ≤ 3 and else as the rows of
    Bartlett's factor of a Wishart_3(k, I) Gram matrix (module docstring)."""
    k = d - 2
    along = rng.standard_normal((3, chains, 2))
    if k <= 3:
        orthogonal = rng.standard_normal((3, chains, k))
    else:
        orthogonal = np.zeros((3, chains, 3))
        for i in range(3):
            orthogonal[i, :, i] = np.sqrt(rng.chisquare(k - i, chains))
            orthogonal[i, :, :i] = rng.standard_normal((chains, i))
    vectors = np.concatenate([along, orthogonal], axis=2)
    return vectors[:2], sigma_w * vectors[2]
