"""Generated random-MLP field kernels and the zonal kernel matrix k(⟨x_i, x_j⟩) (docs/theory.md §B.1–B.2).

``mlp_field_kernels(activation, backend)`` loads the kernels of the kernel family
:data:`transformer_limits.numeric.kernel_family.MLP_FIELD` from the kernel cache (SymPy is imported
only on a cache miss) for the ``numpy`` (reference), ``numba``, ``numba-cuda`` / ``numba-cuda-sim``
(``numba.cuda.jit``) or ``cupy`` (CUDA C) backend.  Every backend takes and returns host (NumPy)
arrays (one calling convention for every flavour, run through
:class:`transformer_limits.numeric.runtime.Runtime`: on a GPU the inputs are copied to the device and
the result back, per call); with ``device=True`` (or a device
``coef`` for the kernel matrix) the GPU backends take and return device arrays instead, without
copies, so that a simulator can keep its state on the device::

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
from typing import Any

import numpy as np

from transformer_limits.numeric.flavours import PYTHON_NUMBA, PYTHON_NUMPY
from transformer_limits.numeric.runtime import DTYPES, Runtime
from transformer_limits.numeric.kernel_family import MLP_FIELD, load_source
from transformer_limits.numeric.precision import resolve_precision
from transformer_limits.resource_limits import check_memory

__all__ = ["MLPFieldKernels", "mlp_field_kernels", "mehler_coefficients", "mehler_tail",
           "MLP_BACKENDS"]

#: backends of the MLP-field kernels (numpy, numba, numba-cuda, numba-cuda-sim, cupy): those whose
#: flavour MLP_FIELD has
MLP_BACKENDS = MLP_FIELD.backends()
_MEHLER_TERMS = 40
_QUAD_NODES = 160


@lru_cache(maxsize=None)
def _gauss_hermite(n: int) -> tuple[np.ndarray, np.ndarray]:
    z, w = np.polynomial.hermite_e.hermegauss(n)
    return z, w / np.sqrt(2 * np.pi)


class MLPFieldKernels:
    """Generated MLP-field kernels for one activation on one backend (any of ``MLP_BACKENDS``) at
    ``precision`` (``float64``; ``float32`` on ``numpy``, ``numba`` (its float32 source) and ``cupy``;
    the python-cuda backends are float64-only, ValueError naming precision)."""

    def __init__(self, activation: str, backend: str = "numpy", precision: str = "float64"):
        self.flavour = MLP_FIELD.resolve(backend).flavour
        resolve_precision(precision, backend)  # ValueError naming precision (numba-cuda: float64 only)
        self.activation, self.backend, self.precision = activation, backend, precision
        self.dtype = DTYPES[precision]
        self.source_path = MLP_FIELD.source_path(self.flavour, precision, activation=activation)
        # resolved and looked up once, above; cuda-c is compiled for the precision's `real`
        self._module = load_source(self.source_path, self.flavour, precision)
        self._numpy = self._module if self.flavour is PYTHON_NUMPY else None
        #: arrays and kernel calls of every flavour (on numpy / numba put and get are casts)
        self.runtime = Runtime(backend, precision)
        #: device arrays and launches of a GPU flavour (None on numpy / numba)
        self.arrays = self.runtime if self.flavour.on_device else None

    def _reference(self):
        if self._numpy is None:
            self._numpy = MLP_FIELD.load("numpy", activation=self.activation)
        return self._numpy

    def phi(self, z: np.ndarray) -> np.ndarray:
        """φ elementwise (NumPy flavour of the generated expression)."""
        return self._reference()._phi(np.asarray(z, dtype=np.float64))

    def _host(self, *arrays) -> list[np.ndarray]:
        return [np.ascontiguousarray(a, dtype=self.dtype) for a in arrays]

    def features(self, Y, U, b_U, *, device: bool = False) -> Any:
        """Φ (N, m) with Φ_ik = φ(⟨u_k, y_i⟩/√d + (b_U)_k); for B runs with their own features
        Y (B, N, d), U (B, m, d), b_U (B, m) give Φ (B, N, m), one launch per run, bitwise B calls.

        ``device=True``: the arguments are device arrays of :attr:`arrays` (NumPy arrays of the
        precision's dtype on ``numpy``) and so is the result; nothing is copied."""
        if not device:
            Y, U, b_U = self._host(Y, U, b_U)
        return self._call("features", (*Y.shape[:-1], U.shape[-2]), (Y, U, b_U), device)

    def mlp_field(self, Y, U, b_U, W, b_W, *, device: bool = False) -> Any:
        """G^m(y_i) = (1/√m) W φ(U y_i/√d + b_U) + b_W, shape (N, d) (``device``: as in :meth:`features`);
        for B runs with their own MLPs every argument gains a leading axis B (as in :meth:`features`)."""
        if not device:
            Y, U, b_U, W, b_W = self._host(Y, U, b_U, W, b_W)
        lead = Y.shape[:-2]
        if Y.ndim not in (2, 3) or U.shape[:-2] != lead or U.shape[-1] != Y.shape[-1] \
                or W.shape != (*lead, Y.shape[-1], U.shape[-2]) or b_U.shape != U.shape[:-1] \
                or b_W.shape != (*lead, Y.shape[-1]):
            raise ValueError(f"inconsistent shapes Y {Y.shape}, U {U.shape}, b_U {b_U.shape}, "
                             f"W {W.shape}, b_W {b_W.shape}")
        return self._call("mlp_field", Y.shape, (Y, U, b_U, W, b_W), device)

    def _call(self, kind: str, shape: tuple[int, ...], args: tuple, device: bool) -> Any:
        """Run ``kind`` (``features`` | ``mlp_field`` | ``zonal``: the arguments of
        ``zonal_kernel_matrix``) into an output of ``shape``, one path for every flavour: host arguments
        are put on the runtime and the result is got back (on numpy / numba casts, on a GPU copies)
        unless ``device`` (then arguments and result stay arrays of the runtime).  A GPU launch has one
        thread per output entry; the sizes reach only the CUDA C kernels (``sizes=``).  Batched
        arguments (a leading run axis) are put once and launched run by run into views of one output."""
        if device and self.flavour is PYTHON_NUMBA:
            raise ValueError("device=True needs a GPU backend or numpy, not numba")
        rt, m = self.runtime, self._module
        if not device:
            args = tuple(rt.put(a) if isinstance(a, np.ndarray) else a for a in args)
        out = rt.empty(shape)
        if kind == "zonal":
            X, d, sigma_u, sigma_w, coef = args
            rt.call(m, "zonal_kernel_matrix", shape[0] * shape[1], X, float(d), float(sigma_u), float(sigma_w),
                    coef, out, sizes=(X.shape[0], X.shape[1], coef.shape[0]))
        elif args[0].ndim == 3:
            for b in range(args[0].shape[0]):
                self._field(kind, out[b], *(a[b] for a in args))
        else:
            self._field(kind, out, *args)
        return out if device else rt.get(out)

    def _field(self, kind: str, out: Any, Y: Any, U: Any, b_U: Any, *mlp: Any) -> None:
        """One run's features (``out`` (N, m)) or MLP field (``out`` (N, d), ``mlp`` = (W, b_W))."""
        rt, m = self.runtime, self._module
        N, D, n_feat = Y.shape[0], Y.shape[1], U.shape[0]
        H = out if kind == "features" else rt.empty((N, n_feat))
        rt.call(m, "features", N * n_feat, Y, U, b_U, H, sizes=(N, n_feat, D))
        if kind == "mlp_field":  # G^m from the features: (1/sqrt(m)) W H_i + b_W
            rt.call(m, "mlp_field_from_features", N * D, H, mlp[0], mlp[1], out, sizes=(N, n_feat, D))

    def mehler(self, d: int, sigma_u: float) -> np.ndarray:
        return mehler_coefficients(self.activation, d, sigma_u)

    def kernel_matrix(self, X, sigma_u: float, sigma_w: float, Y=None, *, coef=None) -> Any:
        """k(⟨x_i, x_j⟩) for tokens X (N, d) on the sphere, shape (N, N) (symmetric PSD).

        With ``Y`` (M, d) the cross matrix k(⟨x_i, y_j⟩) (N, M) is returned (NumPy path).
        With ``coef`` (the Mehler coefficients as a device array, :meth:`device_coefficients`) X is a
        device array and so is the result (no copies; as ``device=True`` of :meth:`features`).
        """
        if coef is not None:
            n = X.shape[0]
            return self._call("zonal", (n, n), (X, float(X.shape[1]), float(sigma_u), float(sigma_w), coef), True)
        X = np.ascontiguousarray(X, dtype=self.dtype)
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
        return self._call("zonal", (X.shape[0], X.shape[0]),
                          (X, float(d), float(sigma_u), float(sigma_w), np.ascontiguousarray(coef, dtype=self.dtype)),
                          False)

    def device_coefficients(self, d: int, sigma_u: float) -> Any:
        """The ``coef`` argument of a device :meth:`kernel_matrix` (one copy to the device; a
        one-entry dummy for ReLU, whose k is closed-form)."""
        coef = np.zeros(1) if self.activation == "relu" else self.mehler(d, sigma_u)
        return np.asarray(coef, dtype=self.dtype) if self.arrays is None else self.arrays.put(coef)

    def k1(self, d: int, sigma_u: float, sigma_w: float) -> float:
        """k(1) = E[φ(sZ)²] + σ_W² (one point on the sphere)."""
        e = np.zeros((1, d))
        e[0, 0] = 1.0
        return float(self.kernel_matrix(e, sigma_u, sigma_w)[0, 0])


def _cross_kernel(module, X, Y, d, sigma_u, sigma_w, coef):
    """k(⟨x_i, y_j⟩) through the generated symmetric kernel on the stacked tokens."""
    Z = np.concatenate([X, Y])
    full = np.empty((Z.shape[0], Z.shape[0]), dtype=Z.dtype)
    module.zonal_kernel_matrix(Z, float(d), float(sigma_u), float(sigma_w), coef, full)
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
def mlp_field_kernels(activation: str = "relu", backend: str = "numpy",
                      precision: str = "float64") -> MLPFieldKernels:
    """Cached :class:`MLPFieldKernels` for (activation, backend, precision)."""
    return MLPFieldKernels(activation, backend, precision)

