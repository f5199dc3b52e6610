"""Float64 NumPy reference implementations of the matrix optimizers of THEORY.md §3.8.

Muon, NorMuon and Dion act on one weight matrix ``W ∈ R^{fan_out × fan_in}`` (rows = fan_out, the
PyTorch ``Linear.weight`` layout); Lion acts on any array.  These are *references* for checking the
mathematics (singular-value maps, ranks, norms), not fast trainers: everything is float64 where the
authors' runs use bf16 / Triton kernels.

Conventions:

* **One instance per parameter.** Each optimizer holds the state (momentum, second moments, Dion's
  ``Q``) of the one array it is stepping; the state is created on the first :meth:`step` and a later
  step with another shape raises ``ValueError``.
* **In place.** ``step(param, grad)`` updates ``param`` (a writeable float64 ``ndarray``) in place
  and returns it.  The update direction before learning rate and scale (``O``, ``Ô``, ``P Q^T`` or
  ``sign(·)``) is kept in ``last_update`` for inspection.
* **Decoupled weight decay** ``W ← W (1 − ηλ) − η · scale · O`` in all optimizers.
* **Randomness.** Only Dion draws random numbers (``Q_0 ~ N(0, 1)``), from
  ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np

__all__ = [
    "NS_COEFFICIENTS_ORIGINAL",
    "NS_COEFFICIENTS_DION",
    "newton_schulz",
    "newton_schulz_singular_value_map",
    "muon_scale",
    "Muon",
    "NorMuon",
    "Dion",
    "Lion",
]

NS_COEFFICIENTS_ORIGINAL: tuple[tuple[float, float, float], ...] = ((3.4445, -4.7750, 2.0315),) * 5
"""Keller Jordan's quintic ``(a, b, c)``, applied 5 times (KellerJordan/Muon, muon.py)."""

NS_COEFFICIENTS_DION: tuple[tuple[float, float, float], ...] = (
    (4.0848, -6.8946, 2.9270),
    (3.9505, -6.3029, 2.6377),
    (3.7418, -5.5913, 2.3037),
    (2.8769, -3.1427, 1.2046),
    (2.8366, -3.0525, 1.2012),
)
"""The 5-step schedule of microsoft/dion (used in the paper's runs)."""

NS_EPS = 1e-7
ScaleRule = Literal["original", "spectral_norm", "rms_norm", "none"]


def _coefficients(coefficients: str | Sequence[Sequence[float]]) -> tuple[tuple[float, float, float], ...]:
    if isinstance(coefficients, str):
        table = {"original": NS_COEFFICIENTS_ORIGINAL, "dion": NS_COEFFICIENTS_DION}
        if coefficients not in table:
            raise ValueError(f"coefficients must be 'original', 'dion' or a list of (a, b, c), got {coefficients!r}")
        return table[coefficients]
    coeffs = tuple(tuple(float(v) for v in abc) for abc in coefficients)
    if not coeffs or any(len(abc) != 3 for abc in coeffs):
        raise ValueError("coefficients: expected a non-empty sequence of (a, b, c) triples")
    return coeffs


def _matrix(x: Any, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"{name}: expected a non-empty 2-D matrix, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or Inf")
    return arr


def newton_schulz(G: Any, coefficients: str | Sequence[Sequence[float]] = "original",
                  eps: float = NS_EPS) -> np.ndarray:
    """Newton–Schulz orthogonalisation ``NS(G)`` of an ``m × n`` matrix (returns ``m × n``).

    ``X_0 = G / (‖G‖_F + eps)`` (transposed when ``m > n`` so that ``X X^T`` is the small Gram
    matrix), then for each ``(a, b, c)``: ``A = X X^T``, ``X ← a X + (b A + c A²) X``.  With the SVD
    ``G = U Σ V^T`` this is ``U p(Σ) V^T`` where ``p`` is
    :func:`newton_schulz_singular_value_map` — approximately, not exactly, ``U V^T``.
    """
    G = _matrix(G, "G")
    coeffs = _coefficients(coefficients)
    transpose = G.shape[0] > G.shape[1]
    X = G.T if transpose else G
    X = X / (np.linalg.norm(X) + eps)
    for a, b, c in coeffs:
        A = X @ X.T
        X = a * X + (b * A + c * (A @ A)) @ X
    return X.T if transpose else X


def newton_schulz_singular_value_map(sigma: Any, coefficients: str | Sequence[Sequence[float]] = "original",
                                     *, normalize: bool = True, eps: float = NS_EPS) -> np.ndarray:
    """The scalar map of :func:`newton_schulz` on singular values.

    ``sigma``: the singular values of ``G`` (any shape).  With ``normalize=True`` they are first
    divided by ``‖G‖_F + eps = sqrt(Σσ²) + eps`` (as NS does); then each step applies
    ``s ← a s + b s³ + c s⁵`` (the composition of ``p(s) = a + b s² + c s⁴`` times ``s``).
    ``normalize=False`` returns the bare composition evaluated at ``sigma``.
    """
    s = np.asarray(sigma, dtype=np.float64)
    if normalize:
        s = s / (math.sqrt(float(np.sum(s * s))) + eps)
    for a, b, c in _coefficients(coefficients):
        s2 = s * s
        s = s * (a + b * s2 + c * s2 * s2)
    return s


def muon_scale(shape: tuple[int, int], rule: ScaleRule) -> float:
    """Learning-rate multiplier for an update of ``shape = (fan_out, fan_in)``.

    ``"original"`` ``max(1, fan_out/fan_in)^{1/2}`` (Jordan); ``"spectral_norm"``
    ``sqrt(fan_out/fan_in)`` (microsoft/dion, the paper's runs); ``"rms_norm"``
    ``0.2 · sqrt(max(fan_out, fan_in))`` (Moonlight); ``"none"`` 1.
    """
    fan_out, fan_in = shape
    if rule == "original":
        return math.sqrt(max(1.0, fan_out / fan_in))
    if rule == "spectral_norm":
        return math.sqrt(fan_out / fan_in)
    if rule == "rms_norm":
        return 0.2 * math.sqrt(max(fan_out, fan_in))
    if rule == "none":
        return 1.0
    raise ValueError(f"scale must be 'original', 'spectral_norm', 'rms_norm' or 'none', got {rule!r}")


class _Optimizer:
    """Shared checks, decoupled weight decay and the final ``W ← W(1−ηλ) − η·scale·O``."""

    matrix_only = True

    def __init__(self, lr: float, weight_decay: float) -> None:
        if not lr > 0:
            raise ValueError(f"lr must be positive, got {lr}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be non-negative, got {weight_decay}")
        self.lr = float(lr)
        self.weight_decay = float(weight_decay)
        self.shape: tuple[int, ...] | None = None
        self.last_update: np.ndarray | None = None
        self.steps = 0

    def _check(self, param: Any, grad: Any) -> np.ndarray:
        if not isinstance(param, np.ndarray) or param.dtype != np.float64 or not param.flags.writeable:
            raise ValueError("param: expected a writeable float64 numpy array (updated in place)")
        if self.matrix_only and param.ndim != 2:
            raise ValueError(f"param: expected a 2-D matrix, got shape {param.shape}")
        g = np.asarray(grad, dtype=np.float64)
        if g.shape != param.shape:
            raise ValueError(f"grad: shape {g.shape} does not match param shape {param.shape}")
        if not np.all(np.isfinite(g)):
            raise ValueError("grad: contains NaN or Inf")
        if self.shape is None:
            self.shape = param.shape
            self._init_state(param.shape)
        elif param.shape != self.shape:
            raise ValueError(f"param: shape {param.shape} differs from the first step's {self.shape} "
                             "(use one optimizer instance per parameter)")
        return g

    def _init_state(self, shape: tuple[int, ...]) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _apply(self, param: np.ndarray, update: np.ndarray, scale: float) -> np.ndarray:
        self.last_update = update
        self.steps += 1
        param *= 1.0 - self.lr * self.weight_decay
        param -= (self.lr * scale) * update
        return param


class Muon(_Optimizer):
    """Muon: momentum + Newton–Schulz orthogonalisation (THEORY.md §3.8).

    ``momentum_form="lerp"`` (Jordan): ``M ← βM + (1−β)G``; Nesterov ``U = (1−β)G + βM``.
    ``momentum_form="sum"`` (microsoft/dion, the paper's runs): ``M ← μM + G``; Nesterov
    ``U = μM + G``.  Without Nesterov ``U = M``.  Then ``O = NS(U)`` with ``coefficients``
    (``"original"`` or ``"dion"``) and ``W ← W(1−ηλ) − η·muon_scale(shape, scale)·O``.
    Defaults follow Jordan's reference (lerp, Nesterov, original coefficients, ``"original"`` scale);
    the runs used ``momentum_form="sum", coefficients="dion", scale="spectral_norm"``.
    """

    def __init__(self, lr: float = 0.02, momentum: float = 0.95, weight_decay: float = 0.0, *,
                 nesterov: bool = True, momentum_form: Literal["lerp", "sum"] = "lerp",
                 coefficients: str | Sequence[Sequence[float]] = "original",
                 scale: ScaleRule = "original") -> None:
        super().__init__(lr, weight_decay)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if momentum_form not in ("lerp", "sum"):
            raise ValueError(f"momentum_form must be 'lerp' or 'sum', got {momentum_form!r}")
        muon_scale((1, 1), scale)  # validates the rule
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self.momentum_form = momentum_form
        self.coefficients = _coefficients(coefficients)
        self.scale = scale

    def _init_state(self, shape: tuple[int, ...]) -> None:
        self.momentum_buffer = np.zeros(shape)

    def _momentum_direction(self, g: np.ndarray) -> np.ndarray:
        mu, M = self.momentum, self.momentum_buffer
        if self.momentum_form == "lerp":
            M *= mu
            M += (1.0 - mu) * g
            return (1.0 - mu) * g + mu * M if self.nesterov else M.copy()
        M *= mu
        M += g
        return mu * M + g if self.nesterov else M.copy()

    def _direction(self, g: np.ndarray) -> np.ndarray:
        return newton_schulz(self._momentum_direction(g), self.coefficients)

    def step(self, param: np.ndarray, grad: Any) -> np.ndarray:
        """One update of ``param`` (``fan_out × fan_in``, float64, in place); returns ``param``."""
        g = self._check(param, grad)
        return self._apply(param, self._direction(g), muon_scale(param.shape, self.scale))


class NorMuon(Muon):
    """NorMuon (microsoft/dion ``normuon.py``): Muon's ``O`` with per-row second-moment normalisation.

    ``v ← β₂ v + (1−β₂) mean_cols(O ⊙ O)`` (``v ∈ R^{fan_out}``, one entry per row/neuron, ``v_0 = 0``),
    ``Ô = O / (√v + ε)``, then ``Ô ← Ô · ‖O‖_F / ‖Ô‖_F`` (Frobenius norm of ``O`` restored), and
    ``W ← W(1−ηλ) − η·scale·Ô``.  Defaults are the runs': sum momentum, Dion NS schedule,
    ``"spectral_norm"`` scale, ``β₂ = 0.95``.
    """

    def __init__(self, lr: float = 0.02, momentum: float = 0.95, weight_decay: float = 0.0, *,
                 beta2: float = 0.95, eps: float = 1e-8, nesterov: bool = True,
                 momentum_form: Literal["lerp", "sum"] = "sum",
                 coefficients: str | Sequence[Sequence[float]] = "dion",
                 scale: ScaleRule = "spectral_norm") -> None:
        super().__init__(lr, momentum, weight_decay, nesterov=nesterov, momentum_form=momentum_form,
                         coefficients=coefficients, scale=scale)
        if not 0.0 <= beta2 < 1.0:
            raise ValueError(f"beta2 must be in [0, 1), got {beta2}")
        self.beta2 = float(beta2)
        self.eps = float(eps)

    def _init_state(self, shape: tuple[int, ...]) -> None:
        super()._init_state(shape)
        self.second_moment = np.zeros(shape[0])

    def _direction(self, g: np.ndarray) -> np.ndarray:
        O = super()._direction(g)
        v = self.second_moment
        v *= self.beta2
        v += (1.0 - self.beta2) * np.mean(O * O, axis=1)
        O_hat = O / (np.sqrt(v)[:, None] + self.eps)
        norm_hat = np.linalg.norm(O_hat)
        return O_hat * (np.linalg.norm(O) / norm_hat) if norm_hat > 0 else O_hat


class Dion(_Optimizer):
    """Dion (Ahn et al. 2025; microsoft/dion) with rank fraction ``r``, float64, single device.

    The matrix is viewed with its larger dimension first (``X = W`` if ``fan_out ≥ fan_in`` else
    ``W^T``; ``m ≥ n``), rank ``k = ⌈r · n⌉``, and ``Q ∈ R^{n×k}`` starts ``N(0, 1)`` (seeded).
    One step (``G`` in the same orientation):

        ``M ← M + G``;  ``P = orth(M Q)``;  ``R = M^T P``;
        ``M ← M − (1−μ) P R^T``   (error feedback: the un-applied part stays in ``M``);
        ``Q ← R / (‖R_{:,j}‖₂ + ε)`` (column normalisation);
        ``W ← (1−ηλ) W − η·scale·P Q^T``.

    ``orth`` is a reduced Householder QR (``numpy.linalg.qr``), which is exact in float64.  The
    runs use the randomized Cholesky-QR (``qr_method="rcqr"``: sketch ``S P``, QR, triangular solve,
    Cholesky re-orthonormalisation) as a fast bf16/distributed substitute spanning the same column
    space; it is deliberately *not* implemented here.  ``scale`` is applied with the original
    ``(fan_out, fan_in)`` (default ``"spectral_norm"``, as in the runs).
    """

    def __init__(self, lr: float = 0.02, momentum: float = 0.95, weight_decay: float = 0.0, *,
                 rank_fraction: float = 1.0, eps: float = 1e-8, seed: int = 0,
                 scale: ScaleRule = "spectral_norm") -> None:
        super().__init__(lr, weight_decay)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if not 0.0 < rank_fraction <= 1.0:
            raise ValueError(f"rank_fraction must be in (0, 1], got {rank_fraction}")
        muon_scale((1, 1), scale)
        self.momentum = float(momentum)
        self.rank_fraction = float(rank_fraction)
        self.eps = float(eps)
        self.seed = seed
        self.scale = scale

    def _init_state(self, shape: tuple[int, ...]) -> None:
        self.transposed = shape[0] < shape[1]
        m, n = (shape[1], shape[0]) if self.transposed else shape
        self.rank = int(math.ceil(self.rank_fraction * n))
        self.momentum_buffer = np.zeros((m, n))
        self.Q = np.random.default_rng(self.seed).standard_normal((n, self.rank))
        self.last_P: np.ndarray | None = None

    def step(self, param: np.ndarray, grad: Any) -> np.ndarray:
        """One Dion update of ``param`` (float64, in place); returns ``param``."""
        g = self._check(param, grad)
        M = self.momentum_buffer
        M += g.T if self.transposed else g
        P, _ = np.linalg.qr(M @ self.Q)
        R = M.T @ P
        M -= (1.0 - self.momentum) * (P @ R.T)
        self.Q = R / (np.linalg.norm(R, axis=0, keepdims=True) + self.eps)
        self.last_P = P
        update = P @ self.Q.T
        return self._apply(param, update.T if self.transposed else update,
                           muon_scale(param.shape, self.scale))


class Lion(_Optimizer):
    """Lion (scalar/embedding parameters in the Muon/NorMuon/Dion runs), any array shape.

    ``U = sign(β₁ M + (1−β₁) G)``; ``M ← β₂ M + (1−β₂) G``; ``W ← W(1−ηλ) − η U``.
    Defaults ``betas = (0.95, 0.98)`` as in the runs (Chen et al. 2023 use (0.9, 0.99)).
    """

    matrix_only = False

    def __init__(self, lr: float = 1e-4, betas: tuple[float, float] = (0.95, 0.98),
                 weight_decay: float = 0.0) -> None:
        super().__init__(lr, weight_decay)
        b1, b2 = betas
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        self.betas = (float(b1), float(b2))

    def _init_state(self, shape: tuple[int, ...]) -> None:
        self.momentum_buffer = np.zeros(shape)

    def step(self, param: np.ndarray, grad: Any) -> np.ndarray:
        """One Lion update of ``param`` (float64, in place); returns ``param``."""
        g = self._check(param, grad)
        b1, b2 = self.betas
        M = self.momentum_buffer
        update = np.sign(b1 * M + (1.0 - b1) * g)
        M *= b2
        M += (1.0 - b2) * g
        return self._apply(param, update, 1.0)
