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

Host and device, one loop.  The passes are written once (:meth:`AttentionTransformer._forward_run`,
:meth:`~AttentionTransformer._backward_run`: the loop over r = 0..L-1 and its adjoint) against a
:class:`~transformer_limits.numeric.runtime.Runtime` and the layer form of
:mod:`~transformer_limits.numeric.attention.batched_layer`: on the CPU backends host arrays and the
layer's host API, problem by problem (a batch is bit for bit its problems run alone); on the GPU
backends (numba-cuda, numba-cuda-sim, cupy) device arrays and one launch chain per layer for all B
problems, so the forward pass keeps the states (L+1, B N, d) and every layer's cache on the device, and
the backward pass the adjoints and gradients: a pass copies its inputs and parameters in once and its
results out once (O(1) copies, not O(L): :func:`~transformer_limits.numeric.runtime.count_transfers`).
:meth:`forward_batch`, :meth:`backward_batch` and :meth:`loss_and_grad_batch` run B independent
problems (tokens (B, N, d); parameters shared (L, H, ...) or per problem (B, L, H, ...); head weights
shared (H,) | (L, H) or per problem (B, L, H)).  ``precision="float32"`` computes in float32 on numpy,
blas and cupy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from transformer_limits.numeric.attention.batched_layer import HostCaches, HostLayer, layer_ops
from transformer_limits.numeric.attention.layer import LAYER_FLAVOURS, LayerCache, attention_layer
from transformer_limits.numeric.backends import resolve_backend

__all__ = [
    "PARAM_NAMES",
    "AttentionTransformer",
    "ForwardPass",
    "AdjointPass",
    "BatchForwardPass",
    "BatchAdjointPass",
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


def _check_depth(L: int, states: np.ndarray) -> None:
    """Parameters of L layers for a pass with states (L' + 1, ...): L' = L, else a ValueError (parameters of
    another depth would read adjoints never written)."""
    if len(states) != L + 1:
        raise ValueError(f"params have L = {L} layers but the forward pass has {len(states) - 1}")


def _heads(arrays: dict[str, Any], r: int | slice) -> tuple[Any, Any, Any, Any]:
    """Layer r (or the layers of a slice) of stacked (L, ...) head arrays, in the order (Q, K, V, O) (views)."""
    return arrays["Q"][r], arrays["K"][r], arrays["V"][r], arrays["O"][r]


@dataclass
class _Run:
    """One (batched) forward pass where its arrays live: the layer form ``ops`` (host or device,
    :mod:`~transformer_limits.numeric.attention.batched_layer`) and, on its runtime ``ops.rt``, the head
    weights c (L, B H), the states (L+1, B N, d) and the layer caches (``caches.layer(r)``)."""

    ops: Any
    B: int
    L: int
    H: int
    N: int
    c: Any
    states: Any
    caches: Any


@dataclass
class ForwardPass:
    """All layer states ``states`` (L+1, N, d) and the per-layer caches of the attention VJPs (on the GPU
    backends fetched from the device on first access); ``run`` keeps the pass where its arrays live
    (None: :meth:`AttentionTransformer.backward` runs on the host from states, caches and weights)."""

    states: np.ndarray
    caches: Sequence[LayerCache]
    weights: np.ndarray  # (L, H) head weights c_{r,h}
    run: _Run | None = None


@dataclass
class AdjointPass:
    """Adjoint states p (L+1, N, d) with p[r] = dLoss/dx_r, and per-head gradients (L, H, ...)."""

    p: np.ndarray
    grads: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class BatchForwardPass:
    """B problems: states (L+1, B, N, d), head weights (B, L, H); ``run`` keeps the pass where its arrays
    live (host, or the device on the GPU backends)."""

    states: np.ndarray
    weights: np.ndarray
    run: _Run | None = None


@dataclass
class BatchAdjointPass:
    """Adjoints p (L+1, B, N, d) and per-problem gradients (B, L, H, ...) (for shared parameters the
    gradient of sum_b Loss_b is their sum over b)."""

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
        backprop), "numba" (generated kernels, parallel over tokens) or a GPU backend ("numba-cuda",
        "numba-cuda-sim", "cupy": device-resident passes)
    lions_term : False drops the Lions-derivative term from the adjoint (deliberately wrong model)
    precision : "float64" (default) or "float32" (numpy, blas and cupy only; ValueError otherwise)
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
    precision: str = "float64"

    def __post_init__(self) -> None:
        resolve_backend(self.backend, LAYER_FLAVOURS, "the attention layer")
        self.layer = attention_layer(self.d, self.d_k, self.d_v, causal=self.causal,
                                     temperature=float(self.temperature), backend=self.backend,
                                     precision=self.precision)
        self.dtype = self.layer.dtype

    # ------------------------------------------------------------------ parameters
    def check_params(self, params: dict[str, Any]) -> tuple[dict[str, np.ndarray], int, int]:
        if not isinstance(params, dict) or set(params) != set(PARAM_NAMES):
            raise ValueError(f"params must be a dict with keys {PARAM_NAMES}")
        out = {k: np.ascontiguousarray(params[k], dtype=self.dtype) for k in PARAM_NAMES}
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
            return np.full((L, H), self.residual_scale(L) * self.head_scale(H), dtype=self.dtype)
        w = np.asarray(head_weights, dtype=np.float64)
        if w.shape == (H,):
            w = np.broadcast_to(w, (L, H))
        if w.shape != (L, H) or not np.all(np.isfinite(w)):
            raise ValueError(f"head_weights must have shape ({H},) or ({L}, {H}), got {np.shape(head_weights)}")
        return np.ascontiguousarray(self.residual_scale(L) * w, dtype=self.dtype)

    def _tokens(self, X0: Any, name: str, ndim: int) -> np.ndarray:
        X = np.ascontiguousarray(X0, dtype=self.dtype)
        want = "(N, d)" if ndim == 2 else "(B, N, d)"
        if X.ndim != ndim or X.shape[-1] != self.d or min(X.shape) < 1:
            raise ValueError(f"{name} must have shape {want} with d = {self.d} and B, N >= 1, got {X.shape}")
        return X

    # ------------------------------------------------------------------ passes
    def forward(self, X0: Any, params: dict[str, Any], head_weights: Any = None, *,
                tape: bool = False) -> ForwardPass:
        """States x_0..x_L, shape (L+1, N, d).  ``tape``: a :meth:`backward` will follow, so keep the
        softmax tape for it where that pays (numba layer stacks, up to ``SOFTMAX_TAPE_BYTES``; the
        states are the same bit for bit, the adjoints to rounding)."""
        params, L, H = self.check_params(params)
        X = self._tokens(X0, "X0", 2)
        c = self.head_weights(L, H, head_weights)
        run = self._forward_run(X[None], params, c[None], L, H, True, tape=tape)
        states = run.ops.rt.get(run.states).reshape((L + 1,) + X.shape)
        return ForwardPass(states, run.ops.layer_caches(run.caches), c, run)

    def backward(self, fwd: ForwardPass, params: dict[str, Any], p_final: Any, *, grads: bool = True) -> AdjointPass:
        """Adjoint recursion from p_L = ``p_final`` (N, d) = dLoss/dx_L; per-head gradients (``grads=False``:
        the adjoints alone, bit for bit the same, with an empty gradient dict: an input gradient p[0]
        needs no parameter gradients)."""
        params, L, H = self.check_params(params)
        _check_depth(L, fwd.states)
        pL = np.ascontiguousarray(p_final, dtype=self.dtype)
        if pL.shape != fwd.states[L].shape:
            raise ValueError(f"p_final must have shape {fwd.states[L].shape}, got {np.shape(p_final)}")
        run = fwd.run
        if run is None:  # a pass given by its host arrays: the host layer on its states and caches
            N = pL.shape[0]
            run = _Run(HostLayer(self.layer, 1, H, N), 1, L, H, N, fwd.weights, fwd.states,
                       HostCaches([[cache] for cache in fwd.caches]))
        p, dtheta = self._backward_run(run, params, pL[None], True, grads)
        return AdjointPass(p[:, 0], {k: g[0] for k, g in dtheta.items()})

    def loss_and_grad(self, X0: Any, params: dict[str, Any], loss: Any, head_weights: Any = None):
        """(Loss value, gradients dict, ForwardPass, AdjointPass); ``loss`` has ``value(X_L)`` and
        ``grad(X_L)`` (= dLoss/dx_L), e.g. :class:`~transformer_limits.numeric.attention.losses.SquaredErrorLoss`."""
        fwd = self.forward(X0, params, head_weights, tape=True)
        adj = self.backward(fwd, params, loss.grad(fwd.states[-1]))
        return float(loss.value(fwd.states[-1])), adj.grads, fwd, adj

    def output(self, X0: Any, params: dict[str, Any], head_weights: Any = None) -> np.ndarray:
        """x_L (N, d)."""
        return self.forward(X0, params, head_weights).states[-1]

    # ------------------------------------------------------------------ batches
    def check_batch_params(self, params: dict[str, Any], B: int) -> tuple[dict[str, np.ndarray], int, int, bool]:
        """(params, L, H, shared): shared (L, H, ...) or per problem (B, L, H, ...) parameters."""
        if not isinstance(params, dict) or set(params) != set(PARAM_NAMES):
            raise ValueError(f"params must be a dict with keys {PARAM_NAMES}")
        if np.ndim(params["Q"]) != 5:
            return (*self.check_params(params), True)
        out = {k: np.ascontiguousarray(params[k], dtype=self.dtype) for k in PARAM_NAMES}
        L, H = out["Q"].shape[1:3]
        for k, shape in param_shapes(L, H, self.d, self.d_k, self.d_v).items():
            if out[k].shape != (B,) + shape:
                raise ValueError(f"params[{k!r}] must have shape {shape} (shared) or {(B,) + shape} "
                                 f"(per problem), got {out[k].shape}")
        return out, L, H, False

    def batch_head_weights(self, B: int, L: int, H: int, head_weights: Any = None) -> np.ndarray:
        """c (B, L, H): shared head weights (None, (H,) or (L, H): :meth:`head_weights`) or per problem
        (B, L, H), times residual_scale(L)."""
        if np.ndim(head_weights) != 3:
            return np.ascontiguousarray(np.broadcast_to(self.head_weights(L, H, head_weights), (B, L, H)))
        w = np.asarray(head_weights, dtype=np.float64)
        if w.shape != (B, L, H) or not np.all(np.isfinite(w)):
            raise ValueError(f"head_weights must have shape ({H},), ({L}, {H}) or ({B}, {L}, {H}), got {w.shape}")
        return np.ascontiguousarray(self.residual_scale(L) * w, dtype=self.dtype)

    def forward_batch(self, X0s: Any, params: dict[str, Any], head_weights: Any = None) -> BatchForwardPass:
        """States (L+1, B, N, d) of B independent problems (tokens X0s (B, N, d))."""
        X = self._tokens(X0s, "X0s", 3)
        B = X.shape[0]
        params, L, H, shared = self.check_batch_params(params, B)
        c = self.batch_head_weights(B, L, H, head_weights)
        run = self._forward_run(X, params, c, L, H, shared)
        return BatchForwardPass(run.ops.rt.get(run.states).reshape((L + 1,) + X.shape), c, run)

    def backward_batch(self, fwd: BatchForwardPass, params: dict[str, Any], p_final: Any) -> BatchAdjointPass:
        """Adjoints (L+1, B, N, d) from p_L = ``p_final`` (B, N, d) and per-problem gradients (B, L, H, ...)."""
        pL = np.ascontiguousarray(p_final, dtype=self.dtype)
        if pL.shape != fwd.states.shape[1:]:
            raise ValueError(f"p_final must have shape {fwd.states.shape[1:]}, got {pL.shape}")
        params, L, H, shared = self.check_batch_params(params, pL.shape[0])
        _check_depth(L, fwd.states)
        if fwd.run is None:
            raise ValueError("fwd must be a BatchForwardPass of forward_batch (it keeps the layer caches)")
        return BatchAdjointPass(*self._backward_run(fwd.run, params, pL, shared))

    def loss_and_grad_batch(self, X0s: Any, params: dict[str, Any], losses: Sequence[Any], head_weights: Any = None):
        """(loss values (B,), per-problem gradients (B, L, H, ...), BatchForwardPass, BatchAdjointPass);
        ``losses[b]`` is problem b's loss (``value``, ``grad`` of x_L (N, d))."""
        fwd = self.forward_batch(X0s, params, head_weights)
        if len(losses) != fwd.states.shape[1]:
            raise ValueError(f"losses must hold one loss per problem ({fwd.states.shape[1]}), got {len(losses)}")
        XL = fwd.states[-1]
        adj = self.backward_batch(fwd, params, np.stack([f.grad(x) for f, x in zip(losses, XL)]))
        return np.array([float(f.value(x)) for f, x in zip(losses, XL)]), adj.grads, fwd, adj

    # ------------------------------------------------------------------ the passes, host or device
    def _put_params(self, rt: Any, params: dict[str, np.ndarray], shared: bool) -> dict[str, Any]:
        """Parameters on runtime ``rt`` as (L, PB H, ...): one copy each (per problem: (B, L, H, ...) ->
        L-major, problem-major heads per layer); shared parameters on the host are used as they are
        (:meth:`check_params` made them C-contiguous in the layer's dtype, and the passes only read them)."""
        if shared:
            if rt.storage == "host":
                return params
            return {k: rt.put(v) for k, v in params.items()}
        out = {}
        for k, v in params.items():  # (B, L, H, r, s) -> (L, B H, r, s)
            B, L, H = v.shape[:3]
            out[k] = rt.put(np.ascontiguousarray(v.transpose(1, 0, 2, 3, 4)).reshape((L, B * H) + v.shape[3:]))
        return out

    def _forward_run(self, X: np.ndarray, params: dict[str, np.ndarray], c: np.ndarray, L: int, H: int,
                     shared: bool, *, tape: bool = False) -> _Run:
        """x_{r+1} = x_r + F_r(x_r), r = 0..L-1, for B problems X (B, N, d) with head weights c (B, L, H),
        where the layer runs (:func:`~transformer_limits.numeric.attention.batched_layer.layer_ops`); on
        a device the inputs are copied in once and nothing comes back."""
        B, N, d = X.shape
        ops = layer_ops(self.layer, B, H, N)
        rt = ops.rt
        dp = self._put_params(rt, params, shared)
        dc = rt.put(np.ascontiguousarray(c.transpose(1, 0, 2)).reshape(L, B * H))  # (L, B H)
        states = rt.empty((L + 1, B * N, d))
        ops.copy_in(states, 0, X.reshape(B * N, d))
        if B == 1 and shared and isinstance(ops, HostLayer) and self.layer.runs_stacks:
            # one kernel call for the L layers (numba): same kernels, same numbers, no per-layer overhead
            stack = self.layer.field_stack(states, *_heads(dp, slice(None)), dc, tape=tape)
            return _Run(ops, B, L, H, N, dc, states, HostCaches(None, stack))
        caches = ops.caches(L)
        PB = 1 if shared else B
        for r in range(L):
            ops.field(states[r], _heads(dp, r), dc[r], PB, states[r], states[r + 1], caches.layer(r))
        return _Run(ops, B, L, H, N, dc, states, caches)

    def _backward_run(self, run: _Run, params: dict[str, np.ndarray], pL: np.ndarray, shared: bool,
                      with_grads: bool = True):
        """p_r = p_{r+1} + xbar_r(p_{r+1}) and the layer-r gradients for r = L-1..0, where the forward pass
        ran; pL (B, N, d).  Returns host p (L+1, B, N, d) and gradients {k: (B, L, H, ...)} ({} without
        ``with_grads``: the adjoints alone)."""
        ops, rt = run.ops, run.ops.rt
        B, L, H, N, d = run.B, run.L, run.H, run.N, self.d
        dp = self._put_params(rt, params, shared)
        PB = 1 if shared else B  # the layout of these parameters (the caches are per problem either way)
        p = rt.empty((L + 1, B * N, d))
        ops.copy_in(p, L, pL.reshape(B * N, d))
        stack = getattr(run.caches, "stacked", None)
        shapes = param_shapes(L, B * H, d, self.d_k, self.d_v)
        grads = {k: rt.empty(shapes[k]) for k in PARAM_NAMES} if with_grads else None
        if stack is not None and shared:  # one kernel call for the L layers (and their gradients)
            ops.layer.xbar_stack(p, *_heads(dp, slice(None)), run.c, stack, self.lions_term, states=run.states,
                                 grads=None if grads is None else _heads(grads, slice(None)))
        else:
            for r in range(L - 1, -1, -1):
                ops.vjp(run.states[r], _heads(dp, r), run.c[r], PB, run.caches.layer(r), p[r + 1], p[r + 1], p[r],
                        None if grads is None else _heads(grads, r), lions=self.lions_term)
        host_p = rt.get(p).reshape(L + 1, B, N, d)
        out: dict[str, np.ndarray] = {}
        if grads is None:
            return host_p, out
        for k in PARAM_NAMES:  # (L, B H, r, s) -> (B, L, H, r, s)
            g = rt.get(grads[k])
            out[k] = np.ascontiguousarray(g.reshape((L, B, H) + g.shape[2:]).transpose(1, 0, 2, 3, 4))
        return host_p, out
