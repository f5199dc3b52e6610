"""The discrete deep transformer on the sphere of docs/theory.md §B.1 (paper B, Agazzi et al.).

N tokens X_ℓ (N, d) on S^{d−1}, layers ℓ = 0, …, L−1, Δt = T/L::

    Y_ℓ     = LN(X_ℓ + α_1 · s · Attn_{X_ℓ}(X_ℓ)),          α_1 = T/L
    X_{ℓ+1} = LN(Y_ℓ + α_2 · G^m_{ℓ+1}(Y_ℓ)),               α_2 = √(T/L)   (``alpha2_power`` = 1/2)
    LN(v) = v/|v|,   G^m(y) = (1/√m) W φ((1/√d) U y + b_U) + b_W,

with U (m, d), W (d, m) i.i.d. N(0, 1), b_U ~ N(0, σ_U² I_m), b_W ~ N(0, σ_W² I_d) drawn fresh for
every layer, and softmax attention ``Attn_X(x_i) = Σ_j softmax_j(⟨Q x_i, K x_j⟩) V x_j`` (the same
Q, K, V in all layers; default Q = K = √β I so that Q^T K = β I, V = I).  ``attention`` is the scale
s: ``"attractive"`` (+1), ``"none"`` (0), ``"repulsive"`` (−1) or a number.  The MLP field uses the
generated kernels of :mod:`transformer_limits.numeric.sphere.mlp_field` (``backend``: any of its
``MLP_BACKENDS``, numpy, numba and the CUDA ones), the
attention those of :mod:`transformer_limits.numeric.attention.kernels`.

``precision`` (``float64`` | ``float32``; float32 on numpy and cupy only) and the GPU backends: see
:meth:`SphereTransformer.run`, the loop of ``transformer_limits.numeric.sphere.loops`` (the same
code on the host and on a device, where the state stays for the whole forward pass).  The MLP-field
kernels are those of the run's precision.

``alpha2_power`` exists to build deliberately wrong models (α_2 = (T/L)^1 has no diffusive limit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from transformer_limits.numeric.kernel_family import MLP_FIELD
from transformer_limits.numeric.precision import resolve_precision
from transformer_limits.numeric.sphere import loops
from transformer_limits.numeric.sphere.loops import Pieces
from transformer_limits.numeric.sphere.mlp_field import mlp_field_kernels

__all__ = ["SphereTransformer", "MLPLayer", "layer_norm", "project_tangent", "uniform_sphere",
           "interaction_energy", "attention_scale"]

_SCALES = {"attractive": 1.0, "none": 0.0, "repulsive": -1.0}


def layer_norm(v: np.ndarray) -> np.ndarray:
    """LN(v) = v/|v| row-wise, shape (..., d) (``transformer_limits.numeric.sphere.loops.layer_norm``
    on NumPy)."""
    return loops.layer_norm(np, v)


def project_tangent(X: np.ndarray, V: np.ndarray) -> np.ndarray:
    """P_x v = v − ⟨v, x⟩ x row-wise (X, V of shape (..., d)) (``transformer_limits.numeric.sphere.loops.project_tangent``
    on NumPy)."""
    return loops.project_tangent(np, X, V)


def uniform_sphere(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """n i.i.d. uniform points on S^{d−1}, shape (n, d)."""
    return layer_norm(rng.standard_normal((n, d)))


def interaction_energy(X: np.ndarray, beta: float) -> float:
    """E_β(μ) = ½ ∬ (e^β − e^{β⟨x,y⟩}) dμ dμ for the empirical measure of X (N, d) (shape ())."""
    G = X @ X.T
    return float(0.5 * np.mean(np.exp(beta) - np.exp(beta * np.clip(G, -1.0, 1.0))))


def attention_scale(attention: str | float) -> float:
    """+1 / 0 / −1 for ``attractive`` / ``none`` / ``repulsive``, or the number itself."""
    if isinstance(attention, str):
        if attention not in _SCALES:
            raise ValueError(f"attention must be one of {', '.join(_SCALES)} or a number; got {attention!r}")
        return _SCALES[attention]
    return float(attention)


def check_field_settings(obj) -> None:
    """What the sphere transformer and its limit SDE share: σ_U, σ_W ≥ 0, a backend of the MLP-field
    kernels, a precision that backend computes in (ValueError naming each), then
    :func:`set_attention_matrices`."""
    if obj.sigma_u < 0 or obj.sigma_w < 0:
        raise ValueError(f"sigma_u and sigma_w must be >= 0, got {obj.sigma_u!r}, {obj.sigma_w!r}")
    MLP_FIELD.resolve(obj.backend)  # ValueError naming the backends of the MLP-field kernels
    resolve_precision(obj.precision, obj.backend)  # ValueError naming precision
    set_attention_matrices(obj)


def set_attention_matrices(obj) -> None:
    """Validate ``obj.attention`` and fill ``obj.Q``, ``obj.K``, ``obj.V`` (frozen dataclass) with the
    defaults Q = K = √β I, V = I where None; each must be (d, d)."""
    attention_scale(obj.attention)
    root = np.sqrt(obj.beta) * np.eye(obj.d)
    for name, default in (("Q", root), ("K", root), ("V", np.eye(obj.d))):
        mat = default if getattr(obj, name) is None else np.asarray(getattr(obj, name), float)
        if mat.shape != (obj.d, obj.d):
            raise ValueError(f"{name} must have shape ({obj.d}, {obj.d}), got {mat.shape}")
        object.__setattr__(obj, name, mat)


@dataclass(frozen=True)
class MLPLayer:
    """Parameters of one width-m MLP: U (m, d), b_U (m,), W (d, m), b_W (d,)."""

    U: np.ndarray
    b_U: np.ndarray
    W: np.ndarray
    b_W: np.ndarray


@dataclass(frozen=True)
class SphereTransformer:
    """Discrete model of docs/theory.md §B.1 (see the module docstring for the maps and symbols)."""

    d: int
    m: int
    L: int
    T: float = 1.0
    activation: str = "relu"
    sigma_u: float = 0.0
    sigma_w: float = 0.0
    attention: str | float = "attractive"
    beta: float = 1.0
    Q: np.ndarray | None = field(default=None, compare=False)
    K: np.ndarray | None = field(default=None, compare=False)
    V: np.ndarray | None = field(default=None, compare=False)
    backend: str = "numpy"
    alpha2_power: float = 0.5
    precision: str = "float64"

    def __post_init__(self):
        for name in ("d", "m", "L"):
            if not isinstance(getattr(self, name), (int, np.integer)) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if self.d < 2:
            raise ValueError(f"d must be >= 2, got {self.d}")
        if not self.T > 0:
            raise ValueError(f"T must be > 0, got {self.T!r}")
        check_field_settings(self)

    @property
    def device_resident(self) -> bool:
        """Whether :meth:`run` keeps the state in device arrays for the whole run and computes with the
        array arithmetic of ``transformer_limits.numeric.sphere.loops`` (the GPU backends with
        array arithmetic; numpy in float32 takes the array arithmetic on the host)."""
        return not loops.reference_arithmetic(loops.runtime_for((self.backend, self.precision)))

    # ------------------------------------------------------------------ scalings
    @property
    def dt(self) -> float:
        """Δt = T/L."""
        return self.T / self.L

    @property
    def alpha_1(self) -> float:
        return self.dt

    @property
    def alpha_2(self) -> float:
        return self.dt ** self.alpha2_power

    @property
    def kernels(self):
        """The generated MLP-field kernels of the model's backend at its precision (one per process)."""
        return mlp_field_kernels(self.activation, self.backend, self.precision)

    @property
    def constants(self):  # -> loops.ModelConstants (the loops are not in the API reference)
        """What the loops read of the model (``transformer_limits.numeric.sphere.loops.ModelConstants``)."""
        return loops.ModelConstants(d=int(self.d), activation=self.activation, sigma_u=float(self.sigma_u),
                                    sigma_w=float(self.sigma_w), scale=attention_scale(self.attention), Q=self.Q,
                                    K=self.K, V=self.V, backend=self.backend, precision=self.precision,
                                    m=int(self.m), L=int(self.L), dt=self.dt, alpha_1=self.alpha_1,
                                    alpha_2=self.alpha_2)

    @property
    def _host(self) -> Pieces:
        """The maps on host (NumPy) arrays, for the methods below (not cached: a model stays
        picklable and holds no kernels)."""
        return Pieces(loops.host_runtime((self.backend, self.precision)), self.constants)

    # ------------------------------------------------------------------ pieces
    def attention_field(self, X: np.ndarray) -> np.ndarray:
        """s · Attn_X(x_i), shape (N, d) (zeros when s = 0)."""
        s = attention_scale(self.attention)
        if s == 0.0:
            return np.zeros_like(X)
        return s * self._host.attention(X)

    def attention_step(self, X: np.ndarray) -> np.ndarray:
        """Y = LN(X + α_1 s Attn_X(X))."""
        return self._host.attention_step(X, self.alpha_1)

    def sample_layer(self, rng: np.random.Generator) -> MLPLayer:
        """Fresh Gaussian MLP parameters (U, b_U, W, b_W)."""
        d, m = self.d, self.m
        return MLPLayer(rng.standard_normal((m, d)), self.sigma_u * rng.standard_normal(m),
                        rng.standard_normal((d, m)), self.sigma_w * rng.standard_normal(d))

    def mlp_field(self, Y: np.ndarray, layer: MLPLayer) -> np.ndarray:
        """G^m(y_i), shape (N, d)."""
        return self.kernels.mlp_field(Y, layer.U, layer.b_U, layer.W, layer.b_W)

    def mlp_step(self, Y: np.ndarray, layer: MLPLayer) -> np.ndarray:
        """X' = LN(Y + α_2 G^m(Y))."""
        return self._host.mlp_step(Y, self.alpha_2, layer.U, layer.b_U, layer.W, layer.b_W)

    def layer(self, X: np.ndarray, layer: MLPLayer) -> np.ndarray:
        """One block: attention step then MLP step."""
        return self.mlp_step(self.attention_step(X), layer)

    # ------------------------------------------------------------------ runs
    def run(self, X0: np.ndarray, seed: int | np.random.Generator = 0) -> np.ndarray:
        """Trajectory X_0, …, X_L, shape (L+1, N, d) (dtype of ``precision``); MLPs drawn by
        :meth:`sample_layer` from ``default_rng(seed)`` in the same order on every backend
        (``transformer_limits.numeric.sphere.loops.transformer_run``: on a device the positions
        stay device arrays, the MLPs are uploaded in chunks of layers and the trajectory comes back
        once)."""
        if np.ndim(X0) != 2 or np.shape(X0)[1] != self.d:
            raise ValueError(f"X0 must have shape (N, {self.d}), got {np.shape(X0)}")
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

        def draw() -> tuple[np.ndarray, ...]:
            lay = self.sample_layer(rng)
            return lay.U, lay.b_U, lay.W, lay.b_W

        return loops.transformer_run(loops.runtime_for((self.backend, self.precision)), self.constants, X0, draw)
