"""Device-resident (and float32 NumPy) runs of paper B's sphere simulators (docs/theory.md §B.1, §B.3).

The loops of :meth:`~transformer_limits.numeric.sphere.common_noise_sde.CommonNoiseSDE.simulate`,
:meth:`~transformer_limits.numeric.sphere.common_noise_sde.CommonNoiseSDE.simulate_systems` and
:meth:`~transformer_limits.numeric.sphere.transformer.SphereTransformer.run` and the two couplings of
:mod:`transformer_limits.numeric.sphere.common_noise_sde` written once over an array module ``xp``
(:class:`ArrayRun`):

* GPU backends (``numba-cuda-sim``, ``numba-cuda`` with CuPy, ``cupy``): the positions are device
  arrays of :class:`transformer_limits.numeric.device_arrays.DeviceArrays` (``xp`` = NumPy in the
  simulator, CuPy on a GPU) for the whole run.  Host copies: the initial positions, the model
  matrices and constants, the random numbers in chunks of steps (:data:`CHUNK_BYTES`), and one copy
  back of the requested outputs at the end -- never one per step.
* ``numpy`` at ``precision="float32"``: the same code with ``xp`` = NumPy in float32.

Pieces on the device: the MLP field, its features and the zonal kernel matrix by the generated
MLP-field kernels (``device=True``); the softmax attention ``A_i = Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j``
by ``xp`` array code (row-max-shifted softmax; batched over equally sized systems); the PSD square
root ``K^{1/2} = Q diag(√max(w, 0)) Q^T`` by ``xp.linalg.eigh``.

Random numbers are drawn on the host from the caller's NumPy Generator in exactly the order of the
host loops (so every backend sees the same noise, and a seed gives the same run), then uploaded a
chunk of steps at a time.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from transformer_limits.numeric.device_arrays import DTYPES, DeviceArrays
from transformer_limits.numeric.kernel_family import MLP_FIELD
from transformer_limits.numeric.sphere.mlp_field import mlp_field_kernels

__all__ = ["ArrayRun", "array_path", "xp_layer_norm", "xp_project_tangent", "xp_attention", "xp_psd_sqrt",
           "simulate_exact", "simulate_features", "transformer_run", "coupled_discrete_and_sde",
           "coupled_width_chains", "CHUNK_BYTES"]

#: at most this many bytes of random numbers are uploaded at once (a chunk of steps / layers)
CHUNK_BYTES = 1 << 26

#: largest (B N)^2 kernel matrix simulate_batch builds to cover B runs in one launch (64 MiB)
ONE_LAUNCH_BYTES = 1 << 26


def array_path(backend: str, precision: str) -> bool:
    """Whether runs on ``backend`` at ``precision`` take the array path of this module: a GPU
    backend whose device arrays support arithmetic (not ``numba-cuda`` without CuPy, which keeps
    the host loops with per-call kernel copies), or ``numpy`` in float32."""
    if MLP_FIELD.resolve(backend).flavour in ("python-cuda", "cuda-c"):
        return DeviceArrays(backend, precision).has_array_ops
    return precision == "float32"


class ArrayRun:
    """Arrays of one run: ``xp``, dtype, host <-> device copies and the MLP-field kernels at
    ``precision`` on ``backend``."""

    def __init__(self, activation: str, backend: str, precision: str):
        self.kernels = mlp_field_kernels(activation, backend, precision)
        self.arrays = self.kernels.arrays  # None on numpy (float32 path): arrays stay NumPy
        self.xp: Any = np if self.arrays is None else self.arrays.xp
        self.dtype = DTYPES[precision]

    def put(self, a: Any) -> Any:
        """Host -> run array (float arrays in :attr:`dtype`)."""
        if self.arrays is None:
            return np.array(a, dtype=self.dtype)
        return self.arrays.put(a)

    def get(self, a: Any) -> np.ndarray:
        """Run array -> host NumPy array."""
        return np.asarray(a) if self.arrays is None else self.arrays.get(a)


# ---------------------------------------------------------------------------------------- xp pieces
def xp_layer_norm(xp: Any, v: Any) -> Any:
    """v/|v| row-wise, shape (..., d)."""
    return v / xp.linalg.norm(v, axis=-1, keepdims=True)


def xp_project_tangent(xp: Any, X: Any, V: Any) -> Any:
    """v − ⟨v, x⟩ x row-wise, shapes (..., d)."""
    return V - xp.sum(V * X, axis=-1, keepdims=True) * X


def xp_attention(xp: Any, X: Any, Q: Any, K: Any, V: Any) -> Any:
    """Self-attention ``A_i = Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j`` of X (..., N, d) (uniform token
    weights cancel in the softmax); Q, K (d_k, d), V (d_v, d); result (..., N, d_v)."""
    logits = (X @ Q.T) @ xp.swapaxes(X @ K.T, -1, -2)  # (..., N, N)
    p = xp.exp(logits - xp.max(logits, axis=-1, keepdims=True))  # shifted: no overflow
    return (p / xp.sum(p, axis=-1, keepdims=True)) @ (X @ V.T)


def xp_psd_sqrt(xp: Any, K: Any) -> Any:
    """Symmetric PSD root of symmetric K (..., N, N), eigenvalues < 0 (round-off) clipped to 0."""
    if K.ndim == 3 and K.shape[0] == 1:  # one matrix: CuPy's unbatched eigh (syevd), not batched Jacobi
        return xp_psd_sqrt(xp, K[0])[None]
    w, Q = xp.linalg.eigh(0.5 * (K + xp.swapaxes(K, -1, -2)))
    return (Q * xp.sqrt(xp.clip(w, 0.0, None))[..., None, :]) @ xp.swapaxes(Q, -1, -2)


def _chunks(n: int, bytes_per_step: int) -> list[range]:
    """Steps 0..n−1 in consecutive ranges of at most :data:`CHUNK_BYTES` of random numbers."""
    size = max(1, CHUNK_BYTES // max(1, bytes_per_step))
    return [range(a, min(n, a + size)) for a in range(0, n, size)]


def _rng(seed: int | np.random.Generator) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


class _Drift:
    """b(X) = P_X s Attn(X) − c X on run arrays, for one system (N, d) or equally sized systems
    (S, N, d) (``sizes``: rows of each system in the concatenated (ΣN_s, d) state, else None)."""

    def __init__(self, run: ArrayRun, scale: float, c: float, Q, K, V, sizes: list[int] | None = None):
        self.run, self.s, self.c = run, float(scale), float(c)
        self.Q: Any = run.put(Q) if self.s != 0.0 else None  # no copies when there is no attention
        self.K: Any = run.put(K) if self.s != 0.0 else None
        self.V: Any = run.put(V) if self.s != 0.0 else None
        self.sizes = sizes

    def attention(self, X: Any) -> Any:
        xp, sizes = self.run.xp, self.sizes
        if sizes is None or len(sizes) == 1:
            return xp_attention(xp, X, self.Q, self.K, self.V)
        if len(set(sizes)) == 1:  # equal N: one batched evaluation
            S, N = len(sizes), sizes[0]
            return xp_attention(xp, X.reshape(S, N, -1), self.Q, self.K, self.V).reshape(S * N, -1)
        offsets = np.cumsum([0] + sizes)
        return xp.concatenate([xp_attention(xp, X[a:b], self.Q, self.K, self.V)
                               for a, b in zip(offsets[:-1], offsets[1:])])

    def __call__(self, X: Any) -> Any:
        out = -self.c * X
        if self.s != 0.0:
            out = out + self.s * xp_project_tangent(self.run.xp, X, self.attention(X))
        return out


def _em_step(xp: Any, X: Any, h: float, drift: Callable[[Any], Any], dW: Any, renormalise: bool) -> Any:
    """Projected Euler–Maruyama: X + h b(X) + P_{X/|X|} dW, then renormalised (as the host step)."""
    Xt = X + h * drift(X) + xp_project_tangent(xp, xp_layer_norm(xp, X), dW)
    return xp_layer_norm(xp, Xt) if renormalise else Xt


# ---------------------------------------------------------------------------------------- runs
def simulate_exact(sde: Any, scale: float, X0s: np.ndarray, T: float, n_steps: int, seeds: list,
                   renormalise: bool) -> np.ndarray:
    """:meth:`CommonNoiseSDE.simulate` on the array path for B independent runs of equal N at once
    (``scale``: the attention's s; X0s (B, N, d), one seed or Generator per run): trajectories
    (B, n_steps+1, N, d) in the SDE's precision, exact-in-law increments ``√h K(X_b)^{1/2} Z_b``.

    Run b draws Z_b (N, d) per step from its own Generator as ``standard_normal((chunk, N, d))``
    (the same numbers as one draw per step).  Per step: one zonal-kernel launch on all B·N tokens
    (its diagonal N x N blocks are the B kernel matrices: B-fold redundant work, bought for one
    launch, while that (B N)^2 matrix takes at most ``ONE_LAUNCH_BYTES``; beyond, one launch per
    run), one batched ``eigh``, one batched attention."""
    rngs = [_rng(seed) for seed in seeds]
    run = ArrayRun(sde.activation, sde.backend, sde.precision)
    xp, h = run.xp, float(T) / n_steps
    X = xp_layer_norm(xp, run.put(np.asarray(X0s, dtype=np.float64)))
    B, N, d = X.shape
    drift = _Drift(run, scale, sde.ito_coefficient, sde.Q, sde.K, sde.V)  # xp_attention batches over B
    coef = run.kernels.device_coefficients(d, sde.sigma_u)
    out = xp.empty((n_steps + 1, B, N, d), dtype=run.dtype)
    out[0] = X
    root_h, diag = math.sqrt(h), xp.arange(B)
    # the (B N)^2 matrix of one launch grows as B^2: above ONE_LAUNCH_BYTES, one launch per run
    one_launch = B == 1 or (B * N) ** 2 * run.dtype.itemsize <= ONE_LAUNCH_BYTES
    for chunk in _chunks(n_steps, 8 * B * N * d):
        Z = run.put(np.stack([r.standard_normal((len(chunk), N, d)) for r in rngs], axis=1))  # (c, B, N, d)
        for j, n in enumerate(chunk):
            if one_launch:
                K = run.kernels.kernel_matrix(X.reshape(B * N, d), sde.sigma_u, sde.sigma_w, coef=coef)
                K = K.reshape(B, N, B, N)[diag, :, diag, :]  # (B, N, N): run b's kernel matrix
            else:
                K = xp.stack([run.kernels.kernel_matrix(X[b], sde.sigma_u, sde.sigma_w, coef=coef) for b in range(B)])
            X = _em_step(xp, X, h, drift, root_h * xp_psd_sqrt(xp, K) @ Z[j], renormalise)
            out[n + 1] = X
    return np.ascontiguousarray(np.swapaxes(run.get(out), 0, 1))


def simulate_features(sde: Any, scale: float, systems: list[np.ndarray], T: float, n_steps: int, m: int,
                      seed: int | np.random.Generator, eval_steps) -> list[np.ndarray]:
    """:meth:`CommonNoiseSDE.simulate_systems` on the array path (``scale``: the attention's s).

    All systems' tokens are one concatenated state (ΣN_s, d): the random-feature field
    ``dW(x) = (1/√m) Φ(x) dB[:m] + σ_W dB[m]`` is one kernel launch for every token of every
    system per step; attention acts within each system (one batched evaluation when all N_s are
    equal).  Per step the host loop's draws ``U (m, d), b_U (m,), dB (m+1, d)`` are made in the
    same order and uploaded a chunk of steps at a time.  Returns per system (n_eval, N_s, d).
    """
    rng = _rng(seed)
    run = ArrayRun(sde.activation, sde.backend, sde.precision)
    xp, h, d = run.xp, float(T) / n_steps, sde.d
    sizes = [int(np.shape(X)[0]) for X in systems]
    host0 = np.concatenate([np.asarray(X, dtype=np.float64).reshape(-1, d) for X in systems])
    X = xp_layer_norm(xp, run.put(host0))
    drift = _Drift(run, scale, sde.ito_coefficient, sde.Q, sde.K, sde.V, sizes)
    wanted = set(range(n_steps + 1) if eval_steps is None else eval_steps)
    steps = sorted(s for s in wanted if 0 <= s <= n_steps)
    slot = {s: j for j, s in enumerate(steps)}
    out = xp.empty((len(steps), X.shape[0], d), dtype=run.dtype)
    if 0 in slot:
        out[slot[0]] = X
    sigma_w, root_m = float(sde.sigma_w), math.sqrt(m)
    for chunk in _chunks(n_steps, 8 * (m * d + m + (m + 1) * d)):
        U, b_U, dB = np.empty((len(chunk), m, d)), np.empty((len(chunk), m)), np.empty((len(chunk), m + 1, d))
        for j in range(len(chunk)):  # the host loop's order of draws
            U[j], b_U[j] = sde.sample_features(m, rng)
            dB[j] = math.sqrt(h) * rng.standard_normal((m + 1, d))
        U, b_U, dB = run.put(U), run.put(b_U), run.put(dB)
        for j, n in enumerate(chunk):
            F = run.kernels.features(X, U[j], b_U[j], device=True)  # (ΣN_s, m): one launch
            dW = (F @ dB[j, :m]) / root_m + sigma_w * dB[j, m][None, :]
            X = _em_step(xp, X, h, drift, dW, True)
            if n + 1 in slot:
                out[slot[n + 1]] = X
    host = run.get(out)
    offsets = np.cumsum([0] + sizes)
    return [np.ascontiguousarray(host[:, a:b]) for a, b in zip(offsets[:-1], offsets[1:])]


def transformer_run(model: Any, scale: float, X0: np.ndarray, seed: int | np.random.Generator) -> np.ndarray:
    """:meth:`SphereTransformer.run` on the array path (``scale``: the attention's s): X_0, …, X_L
    (L+1, N, d) in the model's precision; each layer's (U, b_U, W, b_W) drawn as by
    ``model.sample_layer`` (same order) and uploaded a chunk of layers at a time; attention by
    ``xp``, G^m by the MLP-field kernels."""
    rng = _rng(seed)
    run = ArrayRun(model.activation, model.backend, model.precision)
    xp, d, m, L = run.xp, model.d, model.m, model.L
    X = xp_layer_norm(xp, run.put(np.asarray(X0, dtype=np.float64)))
    drift = _Drift(run, scale, 0.0, model.Q, model.K, model.V)
    a1, a2 = float(model.alpha_1), float(model.alpha_2)
    out = xp.empty((L + 1, *X.shape), dtype=run.dtype)
    out[0] = X
    for chunk in _chunks(L, 8 * (2 * m * d + m + d)):
        layers = [model.sample_layer(rng) for _ in chunk]
        U, b_U, W, b_W = (run.put(np.stack([getattr(lay, name) for lay in layers]))
                          for name in ("U", "b_U", "W", "b_W"))
        for j, ell in enumerate(chunk):
            X = _mlp_step(run, _attention_step(xp, X, drift, a1), a2, U[j], b_U[j], W[j], b_W[j])
            out[ell + 1] = X
    return run.get(out)


def _attention_step(xp: Any, X: Any, attention: _Drift, a1: float) -> Any:
    """Y = LN(X + α_1 s Attn_X(X)) (``attention``: a drift without Itô term)."""
    if attention.s != 0.0:
        X = X + a1 * (attention.s * attention.attention(X))
    return xp_layer_norm(xp, X)


def _mlp_step(run: ArrayRun, Y: Any, a2: float, U: Any, b_U: Any, W: Any, b_W: Any) -> Any:
    """X' = LN(Y + α_2 G^m(Y)), G^m by the generated kernels on run arrays."""
    return xp_layer_norm(run.xp, Y + a2 * run.kernels.mlp_field(Y, U, b_U, W, b_W, device=True))


def coupled_discrete_and_sde(model: Any, sde: Any, scales: tuple[float, float], X0: np.ndarray, substeps: int,
                             seed: int | np.random.Generator,
                             renormalise: bool) -> tuple[np.ndarray, np.ndarray, float]:
    """:func:`~transformer_limits.numeric.sphere.common_noise_sde.coupled_discrete_and_sde` on the array
    path (``scales``: the attention's s of model and SDE); per layer the host's draws
    (U, b_U) then dB (substeps, m+1, d), uploaded a chunk of layers at a time; the running sup
    error stays a device scalar; everything comes back once at the end."""
    rng = _rng(seed)
    run = ArrayRun(sde.activation, sde.backend, sde.precision)
    xp, dt, m, d, L = run.xp, float(model.dt), model.m, model.d, model.L
    h = dt / substeps
    X = Xbar = xp_layer_norm(xp, run.put(np.asarray(X0, dtype=np.float64)))
    attention = _Drift(run, scales[0], 0.0, model.Q, model.K, model.V)
    drift = _Drift(run, scales[1], sde.ito_coefficient, sde.Q, sde.K, sde.V)
    a1, a2, sigma_w, root_m = float(model.alpha_1), float(model.alpha_2), float(sde.sigma_w), math.sqrt(m)
    disc, grid = xp.empty((L + 1, *X.shape), dtype=run.dtype), xp.empty((L + 1, *X.shape), dtype=run.dtype)
    disc[0], grid[0] = X, Xbar
    sup = xp.zeros((), dtype=run.dtype)

    def err(A: Any, B: Any) -> Any:
        return xp.mean(xp.sum((A - B) ** 2, axis=1))

    for chunk in _chunks(L, 8 * (m * d + m + substeps * (m + 1) * d)):
        U, b_U = np.empty((len(chunk), m, d)), np.empty((len(chunk), m))
        dB = np.empty((len(chunk), substeps, m + 1, d))
        for j in range(len(chunk)):
            U[j], b_U[j] = sde.sample_features(m, rng)
            dB[j] = math.sqrt(h) * rng.standard_normal((substeps, m + 1, d))
        U, b_U, dB = run.put(U), run.put(b_U), run.put(dB)
        for j, ell in enumerate(chunk):
            total = dB[j].sum(axis=0) / math.sqrt(dt)
            W, b_W = xp.ascontiguousarray(total[:m].T), sigma_w * total[m]
            for s in range(substeps):
                F = run.kernels.features(Xbar, U[j], b_U[j], device=True)
                dW = (F @ dB[j, s, :m]) / root_m + sigma_w * dB[j, s, m][None, :]
                Xbar = _em_step(xp, Xbar, h, drift, dW, renormalise)
                if s < substeps - 1:
                    sup = xp.maximum(sup, err(X, Xbar))
            X = _mlp_step(run, _attention_step(xp, X, attention, a1), a2, U[j], b_U[j], W, b_W)
            sup = xp.maximum(sup, err(X, Xbar))
            disc[ell + 1], grid[ell + 1] = X, Xbar
    both = run.get(xp.stack([disc, grid]))
    return both[0], both[1], float(run.get(sup))


def coupled_width_chains(model: Any, sde: Any, scale: float, X0: np.ndarray,
                         seed: int | np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~transformer_limits.numeric.sphere.common_noise_sde.coupled_width_chains` on the array
    path (``scale``: the model's attention s): the two chains are one stacked state (2, N, d), so
    attention and the PSD roots of (K^m(Y_m), K(Y_∞)) are one batched evaluation each per layer;
    per layer the host's draws (U, b_U) then Z (N, d), uploaded a chunk of layers at a time."""
    rng = _rng(seed)
    run = ArrayRun(sde.activation, sde.backend, sde.precision)
    xp, m, d, L = run.xp, model.m, model.d, model.L
    X = xp_layer_norm(xp, run.put(np.asarray(X0, dtype=np.float64)))
    N = X.shape[0]
    X = xp.stack([X, X])  # (width m, width ∞)
    attention = _Drift(run, scale, 0.0, model.Q, model.K, model.V, [N, N])
    coef = run.kernels.device_coefficients(d, sde.sigma_u)
    a1, root, sw2 = float(model.alpha_1), math.sqrt(model.dt), float(sde.sigma_w) ** 2
    for chunk in _chunks(L, 8 * (m * d + m + N * d)):
        U, b_U, Z = np.empty((len(chunk), m, d)), np.empty((len(chunk), m)), np.empty((len(chunk), N, d))
        for j in range(len(chunk)):
            U[j], b_U[j] = sde.sample_features(m, rng)
            Z[j] = rng.standard_normal((N, d))
        U, b_U, Z = run.put(U), run.put(b_U), run.put(Z)
        for j in range(len(chunk)):
            Y = _attention_step(xp, X.reshape(2 * N, d), attention, a1).reshape(2, N, d)
            Phi = run.kernels.features(xp.ascontiguousarray(Y[0]), U[j], b_U[j], device=True)
            K = xp.stack([Phi @ Phi.T / m + sw2,
                          run.kernels.kernel_matrix(xp.ascontiguousarray(Y[1]), sde.sigma_u, sde.sigma_w,
                                                    coef=coef)])
            X = xp_layer_norm(xp, Y + root * xp_psd_sqrt(xp, K) @ Z[j])
    out = run.get(X)
    return out[0], out[1]
