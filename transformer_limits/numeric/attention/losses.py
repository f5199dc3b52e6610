"""Losses on the final tokens and seeded inputs from compact sets, for the paper-A model.

Every loss has ``value(X) -> float`` and ``grad(X) -> (N, d)`` with grad = dLoss/dx^i; for the
token-separable losses Loss = (1/N) sum_i l(x^i), so grad^i = (1/N) grad l(x^i) = p_L^i of
docs/theory.md §A.2, and the N-scaled adjoint of the mean-field limit is P_1 = N grad.

Inputs (:func:`sample_tokens`) come from compact sets — the closed ball, the sphere or the cube of a
given radius — because the uniform-in-inputs bounds of paper A are stated on compact sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DOMAINS", "sample_tokens", "target_map", "SquaredErrorLoss", "MeanPooledRegressionLoss"]

DOMAINS = ("ball", "sphere", "cube")


def sample_tokens(N: int, d: int, *, domain: str = "ball", radius: float = 1.0, seed: int = 0) -> np.ndarray:
    """N i.i.d. tokens (N, d), uniform on the ball / sphere / cube [-radius, radius]^d."""
    if not isinstance(N, (int, np.integer)) or N < 1:
        raise ValueError(f"N must be a positive integer, got {N!r}")
    if not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    if not (np.isfinite(radius) and radius > 0):
        raise ValueError(f"radius must be a positive number, got {radius!r}")
    rng = np.random.default_rng(seed)
    if domain == "cube":
        return rng.uniform(-radius, radius, size=(N, d))
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {', '.join(DOMAINS)}; got {domain!r}")
    g = rng.normal(size=(N, d))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    if domain == "sphere":
        return radius * g
    return radius * g * rng.uniform(size=(N, 1)) ** (1.0 / d)


def target_map(X: Any, *, kind: str = "tanh-linear", seed: int = 0, scale: float = 1.0) -> np.ndarray:
    """Targets y^i = T(x^i): ``tanh-linear`` T(x) = tanh(scale W x) with W Gaussian / sqrt(d);
    ``rotation`` T(x) = R x with R a seeded random orthogonal matrix."""
    X = np.asarray(X, dtype=np.float64)
    d = X.shape[1]
    rng = np.random.default_rng(seed)
    if kind == "tanh-linear":
        W = rng.normal(size=(d, d)) / np.sqrt(d)
        return np.tanh(scale * X @ W.T)
    if kind == "rotation":
        R, _ = np.linalg.qr(rng.normal(size=(d, d)))
        return X @ R.T
    raise ValueError(f"kind must be 'tanh-linear' or 'rotation', got {kind!r}")


@dataclass
class SquaredErrorLoss:
    """Loss ``(1/N) sum_i (1/2) |x^i - y^i|^2`` on the final tokens; ``targets`` y (N, d)."""

    targets: np.ndarray

    def value(self, X: Any) -> float:
        R = np.asarray(X) - self.targets
        return float(0.5 * np.mean(np.sum(R * R, axis=1)))

    def grad(self, X: Any) -> np.ndarray:
        return (np.asarray(X) - self.targets) / self.targets.shape[0]


@dataclass
class MeanPooledRegressionLoss:
    """Loss = (1/2) (<w, (1/N) sum_i x^i> - y)^2: a regression on the mean-pooled final tokens
    (readout w (d,), scalar target y).  grad^i = (1/N) w (<w, mean x> - y)."""

    readout: np.ndarray
    target: float

    def value(self, X: Any) -> float:
        r = float(np.asarray(X).mean(axis=0) @ self.readout) - self.target
        return 0.5 * r * r

    def grad(self, X: Any) -> np.ndarray:
        X = np.asarray(X)
        r = float(X.mean(axis=0) @ self.readout) - self.target
        return np.broadcast_to(self.readout * r / X.shape[0], X.shape).copy()
