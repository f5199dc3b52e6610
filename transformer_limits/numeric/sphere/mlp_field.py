"""Generated random-MLP field kernels and the zonal kernel matrix k(⟨x_i, x_j⟩) (docs/theory.md §B.1–B.2).

``mlp_field_kernels(activation, backend)`` loads the kernels of the kernel family
:data:`transformer_limits.numeric.kernel_family.MLP_FIELD` from the kernel cache (SymPy is imported
only on a cache miss) for the ``numpy`` (reference) or ``numba`` backend::

    features(Y, U, b_U)            Φ_ik = φ(⟨u_k, y_i⟩/√d + (b_U)_k)        (N, m)
    mlp_field(Y, U, b_U, W, b_W)   G^m(y_i) = (1/√m) W Φ_i + b_W             (N, d)
    kernel_matrix(X, sigma_u, sigma_w)  k(⟨x_i, x_j⟩)                       (N, N)

For activations other than ReLU ``k`` is the Mehler series ``σ_W² + Σ_{j≤J} b_j ρ^j``,
``b_j = (E[φ(sZ) He_j(Z)])²/j!``, ``s² = 1/d + σ_U²``, computed here by NumPy Gauss–Hermite
quadrature (:func:`mehler_coefficients`); the truncated tail ``k(1) − σ_W² − Σ_j b_j`` is returned by
:func:`mehler_tail` (≲ 1e-12 for the smooth activations at J = 40).
"""

from __future__ import annotations

from functools import lru_cache
from math import factorial

import numpy as np

from transformer_limits.numeric.kernel_family import MLP_FIELD
from transformer_limits.resource_limits import check_memory

__all__ = ["MLPFieldKernels", "mlp_field_kernels", "mehler_coefficients", "mehler_tail",
           "MLP_BACKENDS"]

#: backends of the MLP-field kernels (numpy, numba): those whose flavour MLP_FIELD has
MLP_BACKENDS = MLP_FIELD.backends()
_MEHLER_TERMS = 40
_QUAD_NODES = 160


@lru_cache(maxsize=None)
def _gauss_hermite(n: int) -> tuple[np.ndarray, np.ndarray]:
    z, w = np.polynomial.hermite_e.hermegauss(n)
    return z, w / np.sqrt(2 * np.pi)


class MLPFieldKernels:
    """Generated MLP-field kernels for one activation on one backend (``numpy`` or ``numba``)."""

    def __init__(self, activation: str, backend: str = "numpy"):
        self.flavour = MLP_FIELD.resolve(backend).flavour
        self.activation, self.backend = activation, backend
        self.source_path = MLP_FIELD.source_path(self.flavour, activation=activation)
        self._module = MLP_FIELD.load(backend, activation=activation)
        self._numpy = self._module if self.flavour == "python-numpy" else None

    def _reference(self):
        if self._numpy is None:
            self._numpy = MLP_FIELD.load("numpy", activation=self.activation)
        return self._numpy

    def phi(self, z: np.ndarray) -> np.ndarray:
        """φ elementwise (NumPy flavour of the generated expression)."""
        return self._reference().phi(np.asarray(z, dtype=np.float64))

    def features(self, Y, U, b_U) -> np.ndarray:
        """Φ (N, m) with Φ_ik = φ(⟨u_k, y_i⟩/√d + (b_U)_k)."""
        Y, U, b_U = (np.ascontiguousarray(a, dtype=np.float64) for a in (Y, U, b_U))
        if self.flavour == "python-numpy":
            return self._module.features(Y, U, b_U)
        out = np.empty((Y.shape[0], U.shape[0]))
        self._module.features(Y, U, b_U, out)
        return out

    def mlp_field(self, Y, U, b_U, W, b_W) -> np.ndarray:
        """G^m(y_i) = (1/√m) W φ(U y_i/√d + b_U) + b_W, shape (N, d)."""
        Y, U, b_U, W, b_W = (np.ascontiguousarray(a, dtype=np.float64) for a in (Y, U, b_U, W, b_W))
        if U.shape[1] != Y.shape[1] or W.shape != (Y.shape[1], U.shape[0]) or b_U.shape != (U.shape[0],) \
                or b_W.shape != (Y.shape[1],):
            raise ValueError(f"inconsistent shapes Y {Y.shape}, U {U.shape}, b_U {b_U.shape}, "
                             f"W {W.shape}, b_W {b_W.shape}")
        if self.flavour == "python-numpy":
            return self._module.mlp_field(Y, U, b_U, W, b_W)
        out = np.empty(Y.shape)
        self._module.mlp_field(Y, U, b_U, W, b_W, out)
        return out

    def mehler(self, d: int, sigma_u: float) -> np.ndarray:
        return mehler_coefficients(self.activation, d, sigma_u)

    def kernel_matrix(self, X, sigma_u: float, sigma_w: float, Y=None) -> np.ndarray:
        """k(⟨x_i, x_j⟩) for tokens X (N, d) on the sphere, shape (N, N) (symmetric PSD).

        With ``Y`` (M, d) the cross matrix k(⟨x_i, y_j⟩) (N, M) is returned (NumPy path).
        """
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be an (N, d) array, got shape {X.shape}")
        d = X.shape[1]
        M = X.shape[0] if Y is None else X.shape[0] + np.shape(Y)[0]
        # a few (N, M) float64 temporaries (Gram matrix, correlation, result): estimated up front
        check_memory(4 * 8 * X.shape[0] * M, f"X with {X.shape[0]} rows (kernel matrix {X.shape[0]} x {M})")
        coef = np.zeros(1) if self.activation == "relu" else self.mehler(d, sigma_u)
        if Y is not None:
            return _cross_kernel(self._reference(), X, np.asarray(Y, dtype=np.float64), d, sigma_u,
                                 sigma_w, coef)
        if self.flavour == "python-numpy":
            return self._module.zonal_kernel_matrix(X, float(d), float(sigma_u), float(sigma_w), coef)
        out = np.empty((X.shape[0], X.shape[0]))
        self._module.zonal_kernel_matrix(X, float(d), float(sigma_u), float(sigma_w), coef, out)
        return out

    def k1(self, d: int, sigma_u: float, sigma_w: float) -> float:
        """k(1) = E[φ(sZ)²] + σ_W² (one point on the sphere)."""
        e = np.zeros((1, d))
        e[0, 0] = 1.0
        return float(self.kernel_matrix(e, sigma_u, sigma_w)[0, 0])


def _cross_kernel(module, X, Y, d, sigma_u, sigma_w, coef):
    """k(⟨x_i, y_j⟩) through the generated symmetric kernel on the stacked tokens."""
    Z = np.concatenate([X, Y])
    full = module.zonal_kernel_matrix(Z, float(d), float(sigma_u), float(sigma_w), coef)
    return full[: X.shape[0], X.shape[0]:]


@lru_cache(maxsize=256)
def mehler_coefficients(activation: str, d: int, sigma_u: float, terms: int = _MEHLER_TERMS) -> np.ndarray:
    """``b_j = (E[φ(sZ) He_j(Z)])²/j!``, j = 0..terms, by Gauss–Hermite (``_QUAD_NODES`` nodes)."""
    z, w = _gauss_hermite(_QUAD_NODES)
    s = np.sqrt(1.0 / d + sigma_u**2)
    fz = w * mlp_field_kernels(activation, "numpy").phi(s * z)
    he = np.polynomial.hermite_e.hermevander(z, terms)  # (nodes, terms+1)
    proj = fz @ he
    coef = proj**2 / np.array([float(factorial(j)) for j in range(terms + 1)])
    coef.setflags(write=False)
    return coef


def mehler_tail(activation: str, d: int, sigma_u: float) -> float:
    """Truncation tail ``E[φ(sZ)²] − Σ_j b_j`` of the Mehler series (≥ 0 up to quadrature error)."""
    z, w = _gauss_hermite(_QUAD_NODES)
    s = np.sqrt(1.0 / d + sigma_u**2)
    second = float(w @ mlp_field_kernels(activation, "numpy").phi(s * z) ** 2)
    return second - float(np.sum(mehler_coefficients(activation, d, sigma_u)))


@lru_cache(maxsize=32)
def mlp_field_kernels(activation: str = "relu", backend: str = "numpy") -> MLPFieldKernels:
    """Cached :class:`MLPFieldKernels` for (activation, backend)."""
    return MLPFieldKernels(activation, backend)
