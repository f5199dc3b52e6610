"""Float64 NumPy reference implementations of the matrix optimizers of docs/theory.md §C.8.

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
* **Published constants** are defined once, here, with their source (``tests/
  test_published_constants_paper_c.py`` checks each against its publication);
  :mod:`transformer_limits.numeric.torch.optimizers` imports them.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np

__all__ = [
    "NS_COEFFICIENTS_ORIGINAL",
    "NS_COEFFICIENTS_DION",
    "NS_EPS_JORDAN",
    "NS_EPS_RUNS",
    "NS_EPS",
    "MUON_LR",
    "MUON_MOMENTUM",
    "NORMUON_BETA2",
    "NORMUON_EPS",
    "DION_EPS",
    "LION_BETAS_RUNS",
    "LION_BETAS_CHEN",
    "RMS_NORM_SCALE",
    "ADAMW_LR",
    "ADAMW_BETAS",
    "WEIGHT_DECAY",
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

NS_EPS_JORDAN = 1e-7
"""``eps`` of ``X_0 = G/(‖G‖_F + eps)`` in KellerJordan/Muon ``zeropower_via_newtonschulz5``."""
NS_EPS_RUNS = 1e-8
"""The ``epsilon`` the paper's runs pass to Newton–Schulz: microsoft/dion ``Muon``/``NorMuon``
default ``epsilon=1e-8``, handed to ``zeropower_via_newtonschulz5(X, epsilon=epsilon)``."""
NS_EPS = NS_EPS_JORDAN
"""Default of :func:`newton_schulz` (Jordan's reference); the runs' value is :data:`NS_EPS_RUNS`."""
MUON_LR = 0.02
"""Matrix learning rate of the Muon/NorMuon/Dion runs (the authors' configs; Jordan's default)."""
MUON_MOMENTUM = 0.95
"""Momentum ``μ``/``β`` of Muon, NorMuon and Dion (KellerJordan/Muon, microsoft/dion, the runs)."""
NORMUON_BETA2 = 0.95
"""NorMuon's second-moment rate ``muon_beta2`` (the authors' optimizer factory)."""
NORMUON_EPS = 1e-8
"""NorMuon's ``Ô = O/(√v + 1e-8)`` and its norm clamp ``max(‖Ô‖_F, 1e-8)`` (microsoft/dion normuon.py)."""
DION_EPS = 1e-8
"""Dion's column normalisation ``Q = R/(‖R_{:,j}‖ + ε)`` (microsoft/dion ``epsilon=1e-8``)."""
LION_BETAS_RUNS: tuple[float, float] = (0.95, 0.98)
"""Lion betas of the embedding/head groups in the authors' optimizer factory."""
LION_BETAS_CHEN: tuple[float, float] = (0.9, 0.99)
"""Lion's published default betas (Chen et al. 2023; google/automl lion, lucidrains/lion-pytorch)."""
RMS_NORM_SCALE = 0.2
"""Moonlight's update-RMS matching factor in ``0.2·sqrt(max(fan_out, fan_in))`` (arXiv:2502.16982;
microsoft/dion ``adjust_lr_rms_norm``)."""
ADAMW_LR = 3e-3
"""AdamW learning rate of the paper's AdamW runs (the authors' ``configs/paper_runs``)."""
ADAMW_BETAS: tuple[float, float] = (0.9, 0.95)
"""AdamW betas of the paper's runs (the authors' optimizer factory)."""
WEIGHT_DECAY = 0.01
"""Decoupled weight decay on the block matrices in every paper-C run (the authors' configs)."""

ScaleRule = Literal["original", "spectral_norm", "rms_norm", "none"]


def _coefficients(coefficients: str | Sequence[Sequence[float]]) -> tuple[tuple[float, float, float], ...]:
    if isinstance(coefficients, str):
        table = {"original": NS_COEFFICIENTS_ORIGINAL, "dion": NS_COEFFICIENTS_DION}
        if coefficients not in table:
            raise ValueError(f"coefficients must be 'original', 'dion' or a list of (a, b, c), got {coefficients!r}")
        return table[coefficients]
    rows = [tuple(float(v) for v in abc) for abc in coefficients]
    if not rows or any(len(abc) != 3 for abc in rows):
        raise ValueError("coefficients: expected a non-empty sequence of (a, b, c) triples")
    return tuple((a, b, c) for a, b, c in rows)


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
        return RMS_NORM_SCALE * math.sqrt(max(fan_out, fan_in))
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
    """Muon: momentum + Newton–Schulz orthogonalisation (docs/theory.md §C.8).

    ``momentum_form="lerp"`` (Jordan): ``M ← βM + (1−β)G``; Nesterov ``U = (1−β)G + βM``.
    ``momentum_form="sum"`` (microsoft/dion, the paper's runs): ``M ← μM + G``; Nesterov
    ``U = μM + G``.  Without Nesterov ``U = M``.  Then ``O = NS(U)`` with ``coefficients``
    (``"original"`` or ``"dion"``) and ``W ← W(1−ηλ) − η·muon_scale(shape, scale)·O``.
    ``ns_eps`` is the ``eps`` of ``X_0 = U/(‖U‖_F + eps)`` in Newton–Schulz.
    Defaults follow Jordan's reference (lerp, Nesterov, original coefficients, ``"original"`` scale,
    ``ns_eps = 1e-7``); the runs used ``momentum_form="sum", coefficients="dion",
    scale="spectral_norm", ns_eps=NS_EPS_RUNS`` (1e-8).
    """

    def __init__(self, lr: float = MUON_LR, momentum: float = MUON_MOMENTUM, weight_decay: float = 0.0, *,
                 nesterov: bool = True, momentum_form: Literal["lerp", "sum"] = "lerp",
                 coefficients: str | Sequence[Sequence[float]] = "original",
                 scale: ScaleRule = "original", ns_eps: float = NS_EPS_JORDAN) -> None:
        super().__init__(lr, weight_decay)
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if momentum_form not in ("lerp", "sum"):
            raise ValueError(f"momentum_form must be 'lerp' or 'sum', got {momentum_form!r}")
        muon_scale((1, 1), scale)  # validates the rule
        if not ns_eps >= 0:
            raise ValueError(f"ns_eps must be non-negative, got {ns_eps}")
        self.ns_eps = float(ns_eps)
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
        return newton_schulz(self._momentum_direction(g), self.coefficients, self.ns_eps)

    def step(self, param: np.ndarray, grad: Any) -> np.ndarray:
        """One update of ``param`` (``fan_out × fan_in``, float64, in place); returns ``param``."""
        g = self._check(param, grad)
        return self._apply(param, self._direction(g), muon_scale(param.shape, self.scale))


class NorMuon(Muon):
    """NorMuon (microsoft/dion ``normuon.py``): Muon's ``O`` with per-row second-moment normalisation.

    ``v ← β₂ v + (1−β₂) mean_cols(O ⊙ O)`` (``v ∈ R^{fan_out}``, one entry per row/neuron, ``v_0 = 0``),
    ``Ô = O / (√v + ε)``, then ``Ô ← Ô · ‖O‖_F / max(‖Ô‖_F, ε)`` (Frobenius norm of ``O`` restored;
    the clamp is microsoft/dion's), and ``W ← W(1−ηλ) − η·scale·Ô``.  Defaults are the runs': sum
    momentum, Dion NS schedule with ``ns_eps = 1e-8``, ``"spectral_norm"`` scale, ``β₂ = 0.95``.
    """

    def __init__(self, lr: float = MUON_LR, momentum: float = MUON_MOMENTUM, weight_decay: float = 0.0, *,
                 beta2: float = NORMUON_BETA2, eps: float = NORMUON_EPS, nesterov: bool = True,
                 momentum_form: Literal["lerp", "sum"] = "sum",
                 coefficients: str | Sequence[Sequence[float]] = "dion",
                 scale: ScaleRule = "spectral_norm", ns_eps: float = NS_EPS_RUNS) -> None:
        super().__init__(lr, momentum, weight_decay, nesterov=nesterov, momentum_form=momentum_form,
                         coefficients=coefficients, scale=scale, ns_eps=ns_eps)
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
        return O_hat * (np.linalg.norm(O) / max(float(np.linalg.norm(O_hat)), self.eps))


class Dion(_Optimizer):
    """Dion (Ahn et al. 2025; microsoft/dion) with rank fraction ``r``, float64, single device.

    The matrix is viewed with its larger dimension first (``X = W`` if ``fan_out ≥ fan_in`` else
    ``W^T``; ``m ≥ n``), rank ``k = ⌈r · n⌉``, and ``Q ∈ R^{n×k}`` starts ``N(0, 1)`` (seeded).
    One step (``G`` in the same orientation):

        ``M ← M + G``;  ``P = orth(M Q)``;  ``R = M^T P``;
        ``M ← M − (1−μ) P R^T``   (error feedback: the un-applied part stays in ``M``);
        ``Q ← R / (‖R_{:,j}‖₂ + ε)`` (column normalisation);
        ``W ← (1−ηλ) W − η·scale·P Q^T``.

    **All-zero or non-finite momentum** (microsoft/dion ``fix_all_zero_or_nan``): when ``M`` is
    exactly zero (e.g. the first step of a block whose gradient vanishes) or not finite, the
    power iteration is meaningless, so ``P = 0`` and ``R = Q`` (the previous ``Q``): the error
    feedback and the weight update vanish (weight decay still applies) and ``Q`` is kept, up to
    the column normalisation.  Taking the QR of the zero matrix instead would set ``Q = 0``, and
    the next step would then only move the first ``k`` rows.

    ``orth`` is a reduced Householder QR (``numpy.linalg.qr``), which is exact in float64.  The
    runs use the randomized Cholesky-QR (``qr_method="rcqr"``: sketch ``S P``, QR, triangular solve,
    Cholesky re-orthonormalisation) as a fast bf16/distributed substitute spanning the same column
    space; it is deliberately *not* implemented here.  ``scale`` is applied with the original
    ``(fan_out, fan_in)`` (default ``"spectral_norm"``, as in the runs).
    """

    def __init__(self, lr: float = MUON_LR, momentum: float = MUON_MOMENTUM, weight_decay: float = 0.0, *,
                 rank_fraction: float = 1.0, eps: float = DION_EPS, seed: int = 0,
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
        if np.all(np.isfinite(M)) and np.any(M != 0.0):
            P, _ = np.linalg.qr(M @ self.Q)
            R = M.T @ P
            M -= (1.0 - self.momentum) * (P @ R.T)
        else:  # fix_all_zero_or_nan: no update, keep Q
            P, R = np.zeros((M.shape[0], self.rank)), self.Q
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

    def __init__(self, lr: float = 1e-4, betas: tuple[float, float] = LION_BETAS_RUNS,
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
