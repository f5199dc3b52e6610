"""Paper B's sphere simulators (docs/theory.md §B.1, §B.3), each loop written once against a Runtime.

Every run of :class:`~transformer_limits.numeric.sphere.transformer.SphereTransformer` and
:class:`~transformer_limits.numeric.sphere.common_noise_sde.CommonNoiseSDE` -- ``simulate``,
``simulate_batch``, ``simulate_systems``, ``run`` and the two couplings -- is one function below over
a :class:`~transformer_limits.numeric.runtime.Runtime` ``rt`` (:func:`runtime_for`): ``rt.xp`` for the
array arithmetic, ``rt.put`` / ``rt.get`` at the ends, ``rt.empty`` for the outputs.  The same code
runs on the host (``xp`` = NumPy, the reference of the paper-B experiments) and on a GPU (CuPy
arrays; NumPy arrays in Numba's CUDA simulator), where the state stays on the device for the whole
run: host copies are the initial positions, the model matrices and constants, the random numbers a
chunk of steps at a time (:func:`uploads`, at most :data:`CHUNK_BYTES`) and one copy back of the
outputs asked for -- never one per step.

A loop reads the model through a frozen record of its constants (:class:`SDEConstants`,
:class:`ModelConstants`) and takes its noise as an argument: ``draw()`` makes one step's (or
layer's) host draws from the caller's NumPy Generator in the host order, so every runtime sees the
same noise and a seed gives the same run.  The maps of one model on one runtime are a
:class:`Pieces`: the MLP field, its features and the zonal kernel matrix by the generated MLP-field
kernels (:class:`~transformer_limits.numeric.sphere.mlp_field.MLPFieldKernels`, ``device=`` the
runtime's), the attention, the drift and the projected Euler–Maruyama step.

Two kinds of arithmetic (:func:`reference_arithmetic`), both in these loops:

* **reference** (host, float64): attention by the generated attention kernels, kernel matrices and
  random features per run / per system -- bitwise the host loops the experiments were calibrated on;
* **array** (a device, or NumPy in float32): attention by :func:`softmax_attention` (``xp`` code,
  batched), one launch for the features of all systems and, while the ``(B N)^2`` matrix takes at
  most :data:`ONE_LAUNCH_BYTES`, one zonal-kernel launch for the kernel matrices of B runs.

The ``xp`` helpers (:func:`layer_norm`, :func:`project_tangent`, :func:`softmax_attention`,
:func:`psd_sqrt`) are the host ones too: the host versions are these with ``xp = numpy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, cast

import numpy as np

from transformer_limits.numeric.attention.kernels import attention_kernels
from transformer_limits.numeric.kernel_family import ATTENTION
from transformer_limits.numeric.runtime import Runtime
from transformer_limits.numeric.sphere.mlp_field import mlp_field_kernels

__all__ = ["CHUNK_BYTES", "ONE_LAUNCH_BYTES", "layer_norm", "project_tangent", "softmax_attention", "psd_sqrt",
           "FieldConstants", "SDEConstants", "ModelConstants", "runtime_for", "host_runtime",
           "reference_arithmetic", "Pieces", "uploads", "exact_runs", "feature_runs", "transformer_run",
           "coupled_run", "width_chains_run"]

#: at most this many bytes of random numbers are uploaded at once (a chunk of steps / layers)
CHUNK_BYTES = 1 << 26

#: largest (B N)^2 kernel matrix the array arithmetic builds to cover B runs in one launch (64 MiB)
ONE_LAUNCH_BYTES = 1 << 26

#: a host draw of one step / layer: a tuple of NumPy arrays
Draw = Callable[[], tuple[np.ndarray, ...]]


# ---------------------------------------------------------------------------------------- xp helpers
def layer_norm(xp: Any, v: Any) -> Any:
    """LN(v) = v/|v| row-wise, shape (..., d)."""
    return v / xp.linalg.norm(v, axis=-1, keepdims=True)


def project_tangent(xp: Any, X: Any, V: Any) -> Any:
    """P_x v = v − ⟨v, x⟩ x row-wise (X, V of shape (..., d))."""
    return V - xp.sum(V * X, axis=-1, keepdims=True) * X


def softmax_attention(xp: Any, X: Any, Q: Any, K: Any, V: Any) -> Any:
    """Self-attention ``A_i = Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j`` of X (..., N, d) (uniform token
    weights cancel in the softmax); Q, K (d_k, d), V (d_v, d); result (..., N, d_v)."""
    logits = (X @ Q.T) @ xp.swapaxes(X @ K.T, -1, -2)  # (..., N, N)
    p = xp.exp(logits - xp.max(logits, axis=-1, keepdims=True))  # shifted: no overflow
    return (p / xp.sum(p, axis=-1, keepdims=True)) @ (X @ V.T)


def psd_sqrt(xp: Any, K: Any) -> Any:
    """Symmetric PSD root ``Q diag(√max(w, 0)) Q^T`` of symmetric K (..., N, N) by eigen-decomposition
    (eigenvalues < 0, round-off, clipped to 0: robust when tokens nearly coincide, unlike Cholesky)."""
    if K.ndim == 3 and K.shape[0] == 1:  # one matrix: CuPy's unbatched eigh (syevd), not batched Jacobi
        return psd_sqrt(xp, K[0])[None]
    w, Q = xp.linalg.eigh(0.5 * (K + xp.swapaxes(K, -1, -2)))
    return (Q * xp.sqrt(xp.clip(w, 0.0, None))[..., None, :]) @ xp.swapaxes(Q, -1, -2)


# ---------------------------------------------------------------------------------------- constants
@dataclass(frozen=True, eq=False)
class FieldConstants:
    """What a loop reads of a sphere model: dimension d, the MLP field (φ = ``activation``, σ_U, σ_W),
    the attention scale s and matrices Q, K, V (d, d), and where it runs (``backend``, ``precision``)."""

    d: int
    activation: str
    sigma_u: float
    sigma_w: float
    scale: float
    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    backend: str
    precision: str

    @property
    def key(self) -> tuple[str, str]:
        """(backend, precision)."""
        return self.backend, self.precision


@dataclass(frozen=True, eq=False)
class SDEConstants(FieldConstants):
    """The limit SDE's constants: those of the field and the Itô coefficient c = k(1)(d−1)/2 (0 without
    the Itô drift)."""

    c: float


@dataclass(frozen=True, eq=False)
class ModelConstants(FieldConstants):
    """The discrete model's constants: those of the field, width m, depth L, Δt = T/L, α_1, α_2."""

    m: int
    L: int
    dt: float
    alpha_1: float
    alpha_2: float


# ---------------------------------------------------------------------------------------- runtimes
def runtime_for(*keys: tuple[str, str]) -> Runtime:
    """The runtime of a loop over models at ``keys`` ((backend, precision) each): their backend's when
    they share one whose arrays support arithmetic; else the host's (NumPy arrays at their shared
    precision, float64 if they differ), the kernels of a GPU backend then copying per call
    (``numba-cuda`` without CuPy, or models on different backends)."""
    if len(set(keys)) == 1:
        rt = Runtime(*keys[0])
        if rt.has_array_ops:
            return rt
    precisions = {precision for _, precision in keys}
    return Runtime("numpy", precisions.pop() if len(precisions) == 1 else "float64")


def host_runtime(key: tuple[str, str]) -> Runtime:
    """Runtime of the models' host methods (NumPy arrays in and out): the backend's where it keeps
    arrays on the host, else NumPy's at the precision (a GPU backend's kernels copy per call)."""
    rt = Runtime(*key)
    return Runtime("numpy", key[1]) if rt.on_device else rt


def reference_arithmetic(rt: Runtime) -> bool:
    """Whether loops on ``rt`` compute with the reference arithmetic (host, float64) rather than the
    array arithmetic (module docstring)."""
    return not rt.on_device and rt.dtype == np.float64


def _offsets(sizes: Sequence[int]) -> list[tuple[int, int]]:
    ends = np.cumsum([0, *sizes]).tolist()
    return list(zip(ends[:-1], ends[1:]))


class Pieces:
    """The maps of one model (``const``) on runtime ``rt`` (the drift's Itô term ``−cX`` with the c of
    :class:`SDEConstants`, none for a :class:`ModelConstants`).

    Token arrays are ``(..., N, d)``, one system per leading index, or the concatenated state
    ``(ΣN_s, d)`` of systems of ``sizes`` (attention acts within each system).  Q, K, V are put on
    the runtime once, at the first attention (never when s = 0); the Mehler coefficients of the
    zonal kernel on a device once, at the first kernel matrix."""

    def __init__(self, rt: Runtime, const: FieldConstants):
        self.rt, self.xp, self.const = rt, rt.xp, const
        self.s = float(const.scale)
        self.c = float(const.c) if isinstance(const, SDEConstants) else 0.0
        self.device = rt.on_device
        self.reference = reference_arithmetic(rt)
        self.kernels = mlp_field_kernels(const.activation, const.backend, const.precision)
        self._coef: Any = None  # Mehler coefficients on the runtime, at the first kernel matrix
        self._matrices: tuple[Any, Any, Any] | None = None  # Q, K, V on the runtime, at the first attention
        self._generated: Any = None
        if self.s != 0.0 and self.reference:
            # the attention family runs on the model's backend where it has one, else on NumPy
            backend = const.backend if const.backend in ATTENTION.backends() else "numpy"
            # Q, K, V checked and put once: a run evaluates this head thousands of times on N tokens
            self._generated = attention_kernels(const.d, const.d, const.d, backend).self_attention(
                const.Q, const.K, const.V)

    # ------------------------------------------------------------------ attention and drift
    def attention(self, X: Any, sizes: Sequence[int] | None = None) -> Any:
        """A_i = Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j within each system, shape of X (unscaled)."""
        if sizes is not None and len(sizes) > 1:
            if len(set(sizes)) == 1:  # equal N: one batched evaluation
                S, N = len(sizes), sizes[0]
                return self.attention(X.reshape(S, N, -1)).reshape(S * N, -1)
            return self.xp.concatenate([self.attention(X[a:b]) for a, b in _offsets(sizes)])
        const = self.const
        if self._generated is not None:
            if X.ndim > 3:  # systems along several leading axes: one stack
                return self._generated(X.reshape(-1, *X.shape[-2:])).reshape(*X.shape[:-1], -1)
            return self._generated(X)  # (N, d) or a stack of systems (S, N, d)
        if self._matrices is None:  # copied once, and only by a model whose attention is on
            self._matrices = (self.rt.put(const.Q), self.rt.put(const.K), self.rt.put(const.V))
        return softmax_attention(self.xp, X, *self._matrices)

    def drift(self, X: Any, sizes: Sequence[int] | None = None) -> Any:
        """b(X) = P_X s Attn(X) − c X."""
        out = -self.c * X
        if self.s != 0.0:
            out = out + self.s * project_tangent(self.xp, X, self.attention(X, sizes))
        return out

    def em_step(self, X: Any, h: float, dW: Any, renormalise: bool = True,
                sizes: Sequence[int] | None = None) -> Any:
        """Projected Euler–Maruyama ``X̃ = X + h b(X) + P_{X/|X|} dW``, then ``X̃/|X̃|`` (if ``renormalise``)."""
        xp = self.xp
        Xt = X + h * self.drift(X, sizes) + project_tangent(xp, layer_norm(xp, X), dW)
        return layer_norm(xp, Xt) if renormalise else Xt

    def attention_step(self, X: Any, a1: float, sizes: Sequence[int] | None = None) -> Any:
        """Y = LN(X + α_1 s Attn_X(X))."""
        if self.s != 0.0:
            X = X + a1 * (self.s * self.attention(X, sizes))
        return layer_norm(self.xp, X)

    # ------------------------------------------------------------------ MLP field
    def features(self, X: Any, U: Any, b_U: Any) -> Any:
        """Φ (N, m), Φ_ik = φ(⟨u_k, x_i⟩/√d + (b_U)_k); B runs with their own features: X (B, N, d),
        U (B, m, d), b_U (B, m) give (B, N, m)."""
        return self.kernels.features(X, U, b_U, device=self.device)

    def mlp_step(self, Y: Any, a2: float, U: Any, b_U: Any, W: Any, b_W: Any) -> Any:
        """X' = LN(Y + α_2 G^m(Y)), G^m(y) = (1/√m) W φ(U y/√d + b_U) + b_W; B runs with their own
        MLPs: every argument but α_2 with a leading axis B (Y (B, N, d), W (B, d, m), ...)."""
        return layer_norm(self.xp, Y + a2 * self.kernels.mlp_field(Y, U, b_U, W, b_W, device=self.device))

    def feature_increment(self, X: Any, U: Any, b_U: Any, dB: Any, sizes: Sequence[int] | None = None) -> Any:
        """dW(x_i) = (1/√m) Σ_k φ_k(x_i) dB^k + σ_W dB^0 for dB (m+1, d) (row m is dB^0); the
        reference evaluates it per system, the array arithmetic for all tokens in one launch."""
        if self.reference and sizes is not None and len(sizes) > 1:
            return self.xp.concatenate([self.feature_increment(X[a:b], U, b_U, dB) for a, b in _offsets(sizes)])
        m = U.shape[0]
        return (self.features(X, U, b_U) @ dB[:m]) / math.sqrt(m) + float(self.const.sigma_w) * dB[m][None, :]

    def feature_increments(self, X: Any, U: Any, b_U: Any, dB: Any) -> Any:
        """:meth:`feature_increment` of B runs with their own fields: X (B, N, d), U (B, m, d), b_U
        (B, m), dB (B, m+1, d); the features per run, the rest one array operation (bitwise per run)."""
        m = U.shape[1]
        Phi = self.features(X, U, b_U)
        return (Phi @ dB[:, :m]) / math.sqrt(m) + float(self.const.sigma_w) * dB[:, m][:, None, :]

    def kernel_matrix(self, X: Any) -> Any:
        """K = [k(⟨x_i, x_j⟩)] (N, N) of tokens X (N, d)."""
        const = self.const
        if not self.device:
            return self.kernels.kernel_matrix(X, const.sigma_u, const.sigma_w)
        if self._coef is None:
            self._coef = self.kernels.device_coefficients(const.d, const.sigma_u)
        return self.kernels.kernel_matrix(X, const.sigma_u, const.sigma_w, coef=self._coef)

    def kernel_matrices(self, X: Any) -> Any:
        """The B kernel matrices (B, N, N) of runs X (B, N, d): one launch on all B·N tokens (its
        diagonal N x N blocks; B-fold redundant work bought for one launch) in the array arithmetic
        while that (B N)^2 matrix takes at most :data:`ONE_LAUNCH_BYTES`, else one per run."""
        B, N, d = X.shape
        if B == 1:
            return self.kernel_matrix(X[0])[None]
        if not self.reference and (B * N) ** 2 * self.rt.dtype.itemsize <= ONE_LAUNCH_BYTES:
            diag = self.xp.arange(B)
            return self.kernel_matrix(X.reshape(B * N, d)).reshape(B, N, B, N)[diag, :, diag, :]
        return self.xp.stack([self.kernel_matrix(X[b]) for b in range(B)])


# ---------------------------------------------------------------------------------------- noise
def uploads(rt: Runtime, n: int, draw_chunk: Callable[[int], tuple[np.ndarray, ...]],
            bytes_per_step: int) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """``(step, arrays of the step on rt)`` for steps 0..n−1: ``draw_chunk(k)`` makes the host draws of
    the next k steps (stacked along a leading axis), uploaded one chunk of at most
    :data:`CHUNK_BYTES` (``bytes_per_step`` each step) at a time."""
    per = max(1, CHUNK_BYTES // max(1, bytes_per_step))
    for start in range(0, n, per):
        steps = range(start, min(n, start + per))
        arrays = tuple(rt.put(a) for a in draw_chunk(len(steps)))
        for j, step in enumerate(steps):
            yield step, tuple(a[j] for a in arrays)


def in_order(draw: Draw) -> Callable[[int], tuple[np.ndarray, ...]]:
    """The chunk of k steps of a per-step ``draw``: k calls in order, each array stacked."""
    def chunk(k: int) -> tuple[np.ndarray, ...]:
        draws = [draw() for _ in range(k)]
        return tuple(np.stack(parts) for parts in zip(*draws))
    return chunk


def runs_in_order(draws: Sequence[Draw]) -> Callable[[int], tuple[np.ndarray, ...]]:
    """The chunk of k steps of B runs, each with its per-step ``draws[b]``: run after run, each run's k
    draws in order, every array stacked to (k, B, ...)."""
    def chunk(k: int) -> tuple[np.ndarray, ...]:
        per_run = [in_order(draw)(k) for draw in draws]
        return tuple(np.stack(parts, axis=1) for parts in zip(*per_run))
    return chunk


# ---------------------------------------------------------------------------------------- loops
def exact_runs(rt: Runtime, sde: SDEConstants, X0s: np.ndarray, T: float, n_steps: int,
               draws: Sequence[Callable[[], np.ndarray]], renormalise: bool = True) -> np.ndarray:
    """B independent runs of the SDE with exact-in-law increments ``dW_b = √h K(X_b)^{1/2} Z_b``,
    h = T/n_steps: trajectories (B, n_steps+1, N, d) of X0s (B, N, d) (LN applied) in ``rt``'s dtype.

    ``draws[b]()`` is run b's Z_b (N, d) of one step; a chunk of steps is drawn run after run (each
    run's own stream in order).  The reference advances one run at a time (the draws of a run
    before the next: B calls of one run, even when runs share a Generator); the array arithmetic all
    B together (one batched ``eigh`` and attention per step, kernel matrices by
    :meth:`Pieces.kernel_matrices`)."""
    X0s = np.asarray(X0s, dtype=np.float64)
    B, N, d = X0s.shape
    if B > 1 and reference_arithmetic(rt):
        return np.stack([exact_runs(rt, sde, X0s[b:b + 1], T, n_steps, draws[b:b + 1], renormalise)[0]
                         for b in range(B)])
    ops = Pieces(rt, sde)
    xp, h = rt.xp, T / n_steps
    root_h = math.sqrt(h)  # a Python float: float32 arrays stay float32 (a NumPy float64 would promote)
    X = layer_norm(xp, rt.put(X0s))
    out = rt.empty((B, n_steps + 1, N, d))
    out[:, 0] = X

    def chunk(k: int) -> tuple[np.ndarray]:
        return (np.stack([np.stack([draw() for _ in range(k)]) for draw in draws], axis=1),)  # (k, B, N, d)

    for n, (Z,) in uploads(rt, n_steps, chunk, 8 * B * N * d):
        X = ops.em_step(X, h, root_h * psd_sqrt(xp, ops.kernel_matrices(X)) @ Z, renormalise)
        out[:, n + 1] = X
    return rt.get(out)


def feature_runs(rt: Runtime, sde: SDEConstants, systems: Sequence[np.ndarray], T: float, n_steps: int,
                 m: int, draw: Draw, eval_steps: Sequence[int] | None = None) -> list[np.ndarray]:
    """Particle systems driven by the same random-feature field (m fresh features per step), attention
    within each system: per system the positions at ``eval_steps`` (default all; outside 0..n_steps
    ignored), (n_eval, N_s, d) in ``rt``'s dtype.

    ``draw()`` is one step's ``(U (m, d), b_U (m,), dB (m+1, d))``.  The systems' tokens are one
    concatenated state (ΣN_s, d); the projected EM step of :meth:`Pieces.em_step` with
    ``dW = (1/√m) Φ dB[:m] + σ_W dB[m]`` (:meth:`Pieces.feature_increment`), renormalised; only the
    ``eval_steps`` positions are kept and come back, once."""
    d, h = sde.d, T / n_steps
    sizes = [int(np.shape(X)[0]) for X in systems]
    ops = Pieces(rt, sde)
    X = layer_norm(rt.xp, rt.put(np.concatenate([np.asarray(X, dtype=np.float64).reshape(-1, d) for X in systems])))
    wanted = set(range(n_steps + 1) if eval_steps is None else (int(s) for s in eval_steps))
    slot = {s: j for j, s in enumerate(sorted(s for s in wanted if 0 <= s <= n_steps))}
    out = rt.empty((len(slot), X.shape[0], d))
    if 0 in slot:
        out[slot[0]] = X
    for n, (U, b_U, dB) in uploads(rt, n_steps, in_order(draw), 8 * (m * d + m + (m + 1) * d)):
        X = ops.em_step(X, h, ops.feature_increment(X, U, b_U, dB, sizes), True, sizes)
        if n + 1 in slot:
            out[slot[n + 1]] = X
    host = rt.get(out)
    return [np.ascontiguousarray(host[:, a:b]) for a, b in _offsets(sizes)]


def transformer_run(rt: Runtime, model: ModelConstants, X0: np.ndarray, draw: Draw) -> np.ndarray:
    """The discrete model's X_0, …, X_L (L+1, N, d) in ``rt``'s dtype: per layer
    ``Y = LN(X + α_1 s Attn(X))``, ``X' = LN(Y + α_2 G^m(Y))`` with ``draw()`` = (U, b_U, W, b_W)."""
    ops = Pieces(rt, model)
    m, d, L = model.m, model.d, model.L
    X = layer_norm(rt.xp, rt.put(np.asarray(X0, dtype=np.float64)))
    out = rt.empty((L + 1, *X.shape))
    out[0] = X
    for ell, (U, b_U, W, b_W) in uploads(rt, L, in_order(draw), 8 * (2 * m * d + m + d)):
        X = ops.mlp_step(ops.attention_step(X, model.alpha_1), model.alpha_2, U, b_U, W, b_W)
        out[ell + 1] = X
    return rt.get(out)


def coupled_run(rt: Runtime, model: ModelConstants, sde: SDEConstants, X0: np.ndarray, substeps: int,
                draw: Draw | Sequence[Draw], renormalise: bool = True) -> tuple[np.ndarray, np.ndarray, Any]:
    """The discrete model and the SDE driven by the same noise (``common_noise_sde`` module docstring,
    "Coupling"): per layer ``draw()`` = (U, b_U, dB (substeps, m+1, d)); the SDE takes ``substeps``
    projected EM steps of h = Δt/substeps with the features (U, b_U) and increments dB, the layer
    the MLP (U, b_U, W = Σ_s dB_s[:m]^T/√Δt, b_W = σ_W Σ_s dB_s[m]/√Δt).  Returns
    ``(X (L+1, N, d), X̄ on the layer grid (L+1, N, d), sup over fine times of (1/N) Σ_i |X^i − X̄^i|²)``;
    the running sup stays an array of ``rt`` until the end.

    Batched: X0 (B, N, d) and ``draw`` a sequence of B draws (run b's own, a chunk of layers drawn
    run after run) advance B independent couplings as one state (B, N, d) -- one array operation per
    step for all runs, the per-run maps (attention, features, MLP field) per run -- and return
    X, X̄ (B, L+1, N, d) and the sups (B,): bitwise B separate runs (every reduction is per run and
    along the same axis)."""
    batched, X0s, draws = _runs(X0, draw)
    X, Xbar, sup = _coupled_runs(rt, model, sde, X0s, substeps, draws, renormalise)
    return (X, Xbar, sup) if batched else (X[0], Xbar[0], float(sup[0]))


def _runs(X0: np.ndarray, draw: Draw | Sequence[Draw]) -> tuple[bool, np.ndarray, list[Draw]]:
    """(batched, X0s (B, N, d) float64, the B runs' draws) of one run (X0 (N, d), one draw) or of B
    runs (X0 (B, N, d), a sequence of B draws; ValueError otherwise)."""
    batched = np.ndim(X0) == 3
    draws = list(cast(Sequence[Draw], draw)) if batched else [cast(Draw, draw)]
    X0s = np.asarray(X0, dtype=np.float64).reshape(-1, *np.shape(X0)[-2:])
    if len(draws) != X0s.shape[0]:
        raise ValueError(f"draw must hold one draw per run ({X0s.shape[0]}), got {len(draws)}")
    return batched, X0s, draws


def _coupled_runs(rt: Runtime, model: ModelConstants, sde: SDEConstants, X0s: np.ndarray, substeps: int,
                  draws: list[Draw], renormalise: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xp, m, d, L = rt.xp, model.m, model.d, model.L
    B = X0s.shape[0]
    dt = model.dt
    h = dt / substeps
    layer, field = Pieces(rt, model), Pieces(rt, sde)
    X = Xbar = layer_norm(xp, rt.put(X0s))
    disc, grid = rt.empty((L + 1, *X.shape)), rt.empty((L + 1, *X.shape))
    disc[0], grid[0] = X, Xbar
    sup = rt.zeros((B,))

    def err(A: Any, C: Any) -> Any:  # (1/N) Σ_i |A^i − C^i|² per run, (B,)
        return xp.mean(xp.sum((A - C) ** 2, axis=-1), axis=-1)

    sigma_w = float(sde.sigma_w)
    for ell, (U, b_U, dB) in uploads(rt, L, runs_in_order(draws), B * 8 * (m * d + m + substeps * (m + 1) * d)):
        total = dB.sum(axis=1) / math.sqrt(dt)  # (B, m+1, d)
        W, b_W = xp.ascontiguousarray(xp.swapaxes(total[:, :m], 1, 2)), sigma_w * total[:, m]
        for s in range(substeps):
            Xbar = field.em_step(Xbar, h, field.feature_increments(Xbar, U, b_U, dB[:, s]), renormalise)
            if s < substeps - 1:
                sup = xp.maximum(sup, err(X, Xbar))
        X = layer.mlp_step(layer.attention_step(X, model.alpha_1), model.alpha_2, U, b_U, W, b_W)
        sup = xp.maximum(sup, err(X, Xbar))
        disc[ell + 1], grid[ell + 1] = X, Xbar
    both = rt.get(xp.stack([disc, grid]))  # (2, L+1, B, N, d)
    return (np.ascontiguousarray(np.swapaxes(both[0], 0, 1)), np.ascontiguousarray(np.swapaxes(both[1], 0, 1)),
            rt.get(sup))


def width_chains_run(rt: Runtime, model: ModelConstants, sde: SDEConstants, X0: np.ndarray,
                     draw: Draw | Sequence[Draw]) -> tuple[np.ndarray, np.ndarray]:
    """Width-m and m = ∞ discrete chains with the same Z each layer (``draw()`` = (U, b_U, Z (N, d));
    of ``sde`` only the field is read, not c):
    Y = LN(X + α_1 s Attn(X)); width m: X' = LN(Y + √Δt (K^m(Y))^{1/2} Z), K^m = Φ(Y)Φ(Y)^T/m + σ_W²;
    m = ∞: X' = LN(Y + √Δt K(Y)^{1/2} Z).  The two chains are one stacked state (2, N, d) (one
    batched attention and PSD root per layer).  Returns the two final states, each (N, d).

    Batched: X0 (B, N, d) and ``draw`` a sequence of B draws (as in :func:`coupled_run`) advance B
    independent pairs of chains as one state (B, 2, N, d) and return the final states (B, N, d) each,
    bitwise B separate runs."""
    batched, X0s, draws = _runs(X0, draw)
    xp, m, d, L = rt.xp, model.m, model.d, model.L
    layer, field = Pieces(rt, model), Pieces(rt, sde)
    X = layer_norm(xp, rt.put(X0s))
    B, N = X.shape[0], X.shape[1]
    X = xp.stack([X, X], axis=1)  # (B, width m | width ∞, N, d)
    root, sw2 = math.sqrt(model.dt), float(sde.sigma_w) ** 2

    for _, (U, b_U, Z) in uploads(rt, L, runs_in_order(draws), B * 8 * (m * d + m + N * d)):
        Y = layer.attention_step(X, model.alpha_1)
        Phi = field.features(xp.ascontiguousarray(Y[:, 0]), U, b_U)  # (B, N, m)
        K = xp.stack([Phi @ xp.swapaxes(Phi, -1, -2) / m + sw2,
                      field.kernel_matrices(xp.ascontiguousarray(Y[:, 1]))], axis=1)  # (B, 2, N, N)
        X = layer_norm(xp, Y + root * psd_sqrt(xp, K) @ Z[:, None])
    out = rt.get(X)
    if not batched:
        return out[0, 0], out[0, 1]
    return np.ascontiguousarray(out[:, 0]), np.ascontiguousarray(out[:, 1])
