"""The reconstructed deep attention-only transformer of paper A (docs/theory.md §A.2, [RECON]).

Tokens x^1..x^N in R^d, layers r = 0..L-1, heads h = 1..H with theta_{r,h} = (Q, K, V, O),
Q, K in R^{d_k x d}, V in R^{d_v x d}, O in R^{d x d_v}, stacked as ``params`` =
``{"Q": (L, H, d_k, d), "K": (L, H, d_k, d), "V": (L, H, d_v, d), "O": (L, H, d, d_v)}``::

    x_{r+1}^i = x_r^i + sum_h c_{r,h} gamma(x_r^i, m_r^i, theta_{r,h}),
    gamma(x, m, theta) = O V int y pi_m(x, y) m(dy),   logits beta <Q x, K y>,  beta = 1/temperature,
    c_{r,h} = residual_scale(L) * head_scale(H)          (defaults 1/L and 1/H: docs/theory.md §A.2)
            = residual_scale(L) * head_weights[r, h]     (exact-expectation mode: atom weights of nu_t)

with m_r^i = m_r^N = (1/N) sum_j delta_{x_r^j} (unmasked) or the prefix measure (1/i) sum_{j<=i}
delta_{x_r^j} (causal mask).  The scalings and the parameter law are OUR reconstruction (the paper's
discrete model is not public); both are configurable (``residual_scale``, ``head_scale``;
``head_scale=inverse_sqrt_heads`` is the deliberately wrong 1/sqrt(H) model).

Backward pass: the adjoint recursion of docs/theory.md §A.2 with p_r^i = dLoss/dx_r^i,

    p_r^i = p_{r+1}^i + sum_h c_{r,h} [ grad_x gamma_h(x_r^i, m_r^i)^T p_{r+1}^i
                                        + sum_j w_ji (d_mu gamma_h(x_r^j, m_r^j)(x_r^i))^T p_{r+1}^j ],

w_ji = 1/N (unmasked; the Lions term of docs/theory.md §A.2) or 1_{i<=j}/j (causal: token i influences
only the later tokens j >= i, each through its own prefix measure of i... j tokens), p_L = dLoss/dx_L;
and dLoss/dtheta_{r,h} = c_{r,h} sum_i d_theta gamma(x_r^i, m_r^i, theta_{r,h})^T p_{r+1}^i.  The
per-layer VJPs live in :mod:`transformer_limits.numeric.attention.layer` (backends numpy, blas,
numba and the CUDA ones: numba-cuda, numba-cuda-sim, cupy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from transformer_limits.numeric.attention.layer import LAYER_FLAVOURS, LayerCache, attention_layer
from transformer_limits.numeric.backends import resolve_backend

__all__ = [
    "PARAM_NAMES",
    "AttentionTransformer",
    "ForwardPass",
    "AdjointPass",
    "init_params",
    "inverse_depth",
    "inverse_heads",
    "inverse_sqrt_heads",
    "param_shapes",
]

PARAM_NAMES = ("Q", "K", "V", "O")


def inverse_depth(L: int) -> float:
    """Residual scale 1/L (ODE / Euler scaling of docs/theory.md §A.2)."""
    return 1.0 / L


def inverse_heads(H: int) -> float:
    """Head scale 1/H (mean-field in heads, docs/theory.md §A.2)."""
    return 1.0 / H


def inverse_sqrt_heads(H: int) -> float:
    """Head scale 1/sqrt(H): the deliberately wrong model (no H -> infinity limit)."""
    return 1.0 / math.sqrt(H)


def param_shapes(L: int, H: int, d: int, d_k: int, d_v: int) -> dict[str, tuple[int, ...]]:
    return {"Q": (L, H, d_k, d), "K": (L, H, d_k, d), "V": (L, H, d_v, d), "O": (L, H, d, d_v)}


def init_params(L: int, H: int, d: int, d_k: int, d_v: int, *, seed: int = 0, init: str = "xavier-uniform",
                gain: float = 1.0) -> dict[str, np.ndarray]:
    """i.i.d. head parameters with compact support (docs/theory.md §A.2: "e.g. Xavier uniform").

    ``xavier-uniform``: every entry of a (rows x cols) matrix ~ U[-a, a], a = gain sqrt(6/(rows+cols));
    ``normal``: N(0, gain^2 / cols) (not compactly supported; for comparisons only).
    """
    for name, val in (("L", L), ("H", H), ("d", d), ("d_k", d_k), ("d_v", d_v)):
        if not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(L, H, d, d_k, d_v).items():
        rows, cols = shape[-2:]
        if init == "xavier-uniform":
            a = gain * math.sqrt(6.0 / (rows + cols))
            out[name] = rng.uniform(-a, a, size=shape)
        elif init == "normal":
            out[name] = rng.normal(0.0, gain / math.sqrt(cols), size=shape)
        else:
            raise ValueError(f"init must be 'xavier-uniform' or 'normal', got {init!r}")
    return out


@dataclass
class ForwardPass:
    """All layer states ``states`` (L+1, N, d) and the per-layer caches of the attention VJPs."""

    states: np.ndarray
    caches: list[LayerCache]
    weights: np.ndarray  # (L, H) head weights c_{r,h}


@dataclass
class AdjointPass:
    """Adjoint states p (L+1, N, d) with p[r] = dLoss/dx_r, and per-head gradients (L, H, ...)."""

    p: np.ndarray
    grads: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class AttentionTransformer:
    """Unmasked (or causal) attention-only transformer with residual and head scalings.

    Parameters
    ----------
    d, d_k, d_v : token, query/key and value dimensions
    causal : token i attends to j <= i (prefix measure)
    temperature : logits <Q x, K y> / temperature
    residual_scale, head_scale : L -> float, H -> float (defaults 1/L, 1/H)
    backend : "numpy" (reference, docs/theory.md §A.2 adjoint with Lions tensors), "blas" (batched matmul
        backprop) or "numba" (generated kernels, parallel over tokens)
    lions_term : False drops the Lions-derivative term from the adjoint (deliberately wrong model)
    """

    d: int
    d_k: int
    d_v: int
    causal: bool = False
    temperature: float = 1.0
    residual_scale: Callable[[int], float] = inverse_depth
    head_scale: Callable[[int], float] = inverse_heads
    backend: str = "numpy"
    lions_term: bool = True

    def __post_init__(self) -> None:
        resolve_backend(self.backend, LAYER_FLAVOURS, "the attention layer")
        self.layer = attention_layer(self.d, self.d_k, self.d_v, causal=self.causal,
                                     temperature=float(self.temperature), backend=self.backend)

    # ------------------------------------------------------------------ parameters
    def check_params(self, params: dict[str, Any]) -> tuple[dict[str, np.ndarray], int, int]:
        if not isinstance(params, dict) or set(params) != set(PARAM_NAMES):
            raise ValueError(f"params must be a dict with keys {PARAM_NAMES}")
        out = {k: np.ascontiguousarray(params[k], dtype=np.float64) for k in PARAM_NAMES}
        if out["Q"].ndim != 4:
            raise ValueError(f"params['Q'] must have shape (L, H, d_k, d), got {out['Q'].shape}")
        L, H = out["Q"].shape[:2]
        for k, shape in param_shapes(L, H, self.d, self.d_k, self.d_v).items():
            if out[k].shape != shape:
                raise ValueError(f"params[{k!r}] must have shape {shape}, got {out[k].shape}")
        return out, L, H

    def head_weights(self, L: int, H: int, head_weights: Any = None) -> np.ndarray:
        """c_{r,h} (L, H): residual_scale(L) * head_scale(H), or residual_scale(L) * head_weights
        (shape (H,) or (L, H), e.g. the atom weights of nu_t in exact-expectation mode)."""
        if head_weights is None:
            return np.full((L, H), self.residual_scale(L) * self.head_scale(H))
        w = np.asarray(head_weights, dtype=np.float64)
        if w.shape == (H,):
            w = np.broadcast_to(w, (L, H))
        if w.shape != (L, H) or not np.all(np.isfinite(w)):
            raise ValueError(f"head_weights must have shape ({H},) or ({L}, {H}), got {np.shape(head_weights)}")
        return np.ascontiguousarray(self.residual_scale(L) * w)

    # ------------------------------------------------------------------ passes
    def forward(self, X0: Any, params: dict[str, Any], head_weights: Any = None) -> ForwardPass:
        """States x_0..x_L, shape (L+1, N, d)."""
        params, L, H = self.check_params(params)
        X = np.asarray(X0, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.d:
            raise ValueError(f"X0 must have shape (N, {self.d}), got {X.shape}")
        c = self.head_weights(L, H, head_weights)
        states = np.empty((L + 1,) + X.shape)
        states[0] = X
        caches = []
        for r in range(L):
            F, cache = self.layer.field(states[r], params["Q"][r], params["K"][r], params["V"][r],
                                        params["O"][r], c[r])
            states[r + 1] = states[r] + F
            caches.append(cache)
        return ForwardPass(states, caches, c)

    def backward(self, fwd: ForwardPass, params: dict[str, Any], p_final: Any) -> AdjointPass:
        """Adjoint recursion from p_L = ``p_final`` (N, d) = dLoss/dx_L; per-head gradients."""
        params, L, H = self.check_params(params)
        p = np.empty_like(fwd.states)
        p[L] = np.asarray(p_final, dtype=np.float64)
        if p[L].shape != fwd.states[L].shape:
            raise ValueError(f"p_final must have shape {fwd.states[L].shape}, got {np.shape(p_final)}")
        grads = {k: np.empty_like(v) for k, v in params.items()}
        for r in range(L - 1, -1, -1):
            xbar, *dtheta = self.layer.vjp(fwd.states[r], params["Q"][r], params["K"][r], params["V"][r],
                                           params["O"][r], fwd.weights[r], fwd.caches[r], p[r + 1],
                                           lions=self.lions_term)
            p[r] = p[r + 1] + xbar
            for k, g in zip(PARAM_NAMES, dtheta):
                grads[k][r] = g
        return AdjointPass(p, grads)

    def loss_and_grad(self, X0: Any, params: dict[str, Any], loss: Any, head_weights: Any = None):
        """(Loss value, gradients dict, ForwardPass, AdjointPass); ``loss`` has ``value(X_L)`` and
        ``grad(X_L)`` (= dLoss/dx_L), e.g. :class:`~transformer_limits.numeric.attention.losses.SquaredErrorLoss`."""
        fwd = self.forward(X0, params, head_weights)
        adj = self.backward(fwd, params, loss.grad(fwd.states[-1]))
        return float(loss.value(fwd.states[-1])), adj.grads, fwd, adj

    def output(self, X0: Any, params: dict[str, Any], head_weights: Any = None) -> np.ndarray:
        """x_L (N, d)."""
        return self.forward(X0, params, head_weights).states[-1]
