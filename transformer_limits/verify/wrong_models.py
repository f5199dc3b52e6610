"""Deliberately wrong models for the verifiers' must-fail tests (controls, never used in a verdict).

:func:`counting_head_map`: attention whose weights are **not normalised** — a head that sums a kernel
over the tokens (itself included) instead of averaging it — added to an input -> output map A::

    A_c(X0)^i = A(X0)^i + c · log(1 + S_i(X0)) · w,
    S_i(X0)   = Σ_j κ(|x^j − x^i| / δ)  (j = i included: S_i ≥ 1),    κ(ρ) = (1 − ρ²)²  for ρ < 1, else 0,

with w = e_1 (the first coordinate axis).  A softmax head depends on the tokens only through their
empirical measure, so its error against a mean-field limit can be bounded uniformly in N; a sum counts
tokens, so this model's error grows like c·log N when many tokens sit within δ of x^1 (all of them on
x^1: S_1 = N).  With a narrow kernel (δ = 0.01 R) the count is 1 at typical inputs — for N i.i.d.
uniform tokens in the ball E S_1 − 1 < (N − 1)(δ/R)^d, 0.03 at N = 256 in d = 2 — so there the head
adds the constant c·log 2·w, the same for every N.  Its sup over inputs therefore grows with N only at
adversarial (clustered) inputs: what a sup estimate that weakens with N misses and the
token-independence check must reject.  (The constant matters: an ascent at small N lines the error up
with it, so that a larger count then raises the error instead of cancelling part of it.)  κ is C¹,
so the ascent gets gradients (the vjp below) wherever tokens are within δ of each other.
"""

from __future__ import annotations

import numpy as np

from transformer_limits.verify.input_search import InputMap

__all__ = ["counting_head_map", "cluster_counts"]


def _kernel(X: np.ndarray, width: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(κ(ρ_ij) (N, N), 1 − ρ_ij² clipped at 0, x^i − x^j (N, N, d))."""
    diff = X[:, None, :] - X[None, :, :]
    one_minus = np.maximum(1.0 - np.einsum("ijk,ijk->ij", diff, diff) / width**2, 0.0)
    return one_minus**2, one_minus, diff


def cluster_counts(X0: np.ndarray, width: float) -> np.ndarray:
    """S_i(X0) = Σ_j κ(|x^j − x^i| / δ) (j = i included) for X0 (N, d): shape (N,)."""
    return _kernel(np.asarray(X0, dtype=np.float64), width)[0].sum(axis=1)


def counting_head_map(A: InputMap, strength: float, *, width: float) -> InputMap:
    """A with the un-normalised counting head added (module docstring): c = ``strength``, δ = ``width``.

    vjp: with a_i = c (r_i · w) / (1 + S_i) and ∂κ(ρ_ij)/∂x^i = −4 (1 − ρ_ij²) (x^i − x^j) / δ²
    (ρ < 1; κ is symmetric in i, j; the j = i term is constant), the input cotangent is
    vjp_A(r)^i − (4/δ²) Σ_j (a_i + a_j)(1 − ρ_ij²)_+ (x^i − x^j).
    """
    strength, width = float(strength), float(width)
    if not (np.isfinite(strength) and strength >= 0):
        raise ValueError(f"strength must be a finite number >= 0, got {strength!r}")
    if not (np.isfinite(width) and width > 0):
        raise ValueError(f"width must be a finite positive number, got {width!r}")

    def evaluate(X0: np.ndarray):
        X0 = np.asarray(X0, dtype=np.float64)
        out, vjp = A.evaluate(X0)
        kappa, one_minus, diff = _kernel(X0, width)
        S = kappa.sum(axis=1)
        out = out.copy()
        out[:, 0] += strength * np.log1p(S)

        def vjp_c(r: np.ndarray) -> np.ndarray:
            a = strength * np.asarray(r, dtype=np.float64)[:, 0] / (1.0 + S)
            weights = (a[:, None] + a[None, :]) * one_minus
            return vjp(r) - (4.0 / width**2) * np.einsum("ij,ijk->ik", weights, diff)

        return out, vjp_c

    return InputMap(evaluate)
