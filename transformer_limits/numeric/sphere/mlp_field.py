"""Generated random-MLP field kernels and the zonal kernel matrix k(⟨x_i, x_j⟩) (docs/theory.md §B.1–B.2).

``mlp_field_kernels(activation, backend)`` loads the kernels of the kernel family
:data:`transformer_limits.numeric.kernel_family.MLP_FIELD` from the kernel cache (SymPy is imported
only on a cache miss) for the ``numpy`` (reference), ``numba``, ``numba-cuda`` / ``numba-cuda-sim``
(``numba.cuda.jit``) or ``cupy`` (CUDA C) backend; every backend takes and returns host (NumPy)
arrays (the CUDA runners copy the inputs to the device and the result back, per call)::

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

from transformer_limits.numeric.kernel_family import MLP_FIELD, load_source
from transformer_limits.resource_limits import check_memory

__all__ = ["MLPFieldKernels", "mlp_field_kernels", "mehler_coefficients", "mehler_tail",
           "MLP_BACKENDS"]

#: backends of the MLP-field kernels (numpy, numba, numba-cuda, numba-cuda-sim, cupy): those whose
#: flavour MLP_FIELD has
MLP_BACKENDS = MLP_FIELD.backends()
_MEHLER_TERMS = 40
_QUAD_NODES = 160
_BLOCK_2D = (16, 16)  # CUDA flavours: one thread per output entry (i, k | a | j), 16 x 16 blocks


def _grid_2d(rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    tx, ty = _BLOCK_2D
    return ((rows + tx - 1) // tx, (cols + ty - 1) // ty), _BLOCK_2D


@lru_cache(maxsize=None)
def _gauss_hermite(n: int) -> tuple[np.ndarray, np.ndarray]:
    z, w = np.polynomial.hermite_e.hermegauss(n)
    return z, w / np.sqrt(2 * np.pi)


class MLPFieldKernels:
    """Generated MLP-field kernels for one activation on one backend (any of ``MLP_BACKENDS``)."""

    def __init__(self, activation: str, backend: str = "numpy"):
        self.flavour = MLP_FIELD.resolve(backend).flavour
        self.activation, self.backend = activation, backend
        self.source_path = MLP_FIELD.source_path(self.flavour, activation=activation)
        self._module = load_source(self.source_path, self.flavour)  # resolved and looked up once, above
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
        return self._RUNNERS[self.flavour](self, "features", (Y.shape[0], U.shape[0]), Y, U, b_U)

    def mlp_field(self, Y, U, b_U, W, b_W) -> np.ndarray:
        """G^m(y_i) = (1/√m) W φ(U y_i/√d + b_U) + b_W, shape (N, d)."""
        Y, U, b_U, W, b_W = (np.ascontiguousarray(a, dtype=np.float64) for a in (Y, U, b_U, W, b_W))
        if U.shape[1] != Y.shape[1] or W.shape != (Y.shape[1], U.shape[0]) or b_U.shape != (U.shape[0],) \
                or b_W.shape != (Y.shape[1],):
            raise ValueError(f"inconsistent shapes Y {Y.shape}, U {U.shape}, b_U {b_U.shape}, "
                             f"W {W.shape}, b_W {b_W.shape}")
        return self._RUNNERS[self.flavour](self, "mlp_field", Y.shape, Y, U, b_U, W, b_W)

    # ------------------------------------------------------------------ runners (host arrays in and out)
    def _run_numpy(self, kind, shape, *args):
        return getattr(self._module, "zonal_kernel_matrix" if kind == "zonal" else kind)(*args)

    def _run_numba(self, kind, shape, *args):
        out = np.empty(shape)
        getattr(self._module, "zonal_kernel_matrix" if kind == "zonal" else kind)(*args, out)
        return out

    def _run_numba_cuda(self, kind, shape, *args):
        from numba import cuda

        m = self._module
        if 0 in shape:
            return np.empty(shape)
        dev = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
        out = cuda.device_array(shape)
        if kind == "zonal":  # X, d, sigma_u, sigma_w, coef
            m.zonal_kernel_matrix[_grid_2d(*shape)](*dev, out)
            return out.copy_to_host()
        Y, U, b_U = dev[:3]
        H = out if kind == "features" else cuda.device_array((shape[0], args[1].shape[0]))
        m.features[_grid_2d(*H.shape)](Y, U, b_U, H)
        if kind == "mlp_field":
            m.mlp_field_from_features[_grid_2d(*shape)](H, dev[3], dev[4], out)
        return out.copy_to_host()

    def _run_cupy(self, kind, shape, *args):  # pragma: no cover - needs a GPU
        import cupy as cp

        f = self._module.get_function
        if 0 in shape:
            return np.empty(shape)
        out = cp.empty(shape)
        if kind == "zonal":
            X, d, sigma_u, sigma_w, coef = args
            grid, block = _grid_2d(*shape)
            f("zonal_kernel_matrix")(grid, block, (cp.asarray(X), np.float64(d), np.float64(sigma_u),
                                                   np.float64(sigma_w), cp.asarray(coef), np.int64(coef.shape[0]),
                                                   out, np.int64(X.shape[0]), np.int64(X.shape[1])))
            return cp.asnumpy(out)
        N, D, n_feat = args[0].shape[0], args[0].shape[1], args[1].shape[0]
        dev = [cp.asarray(a) for a in args]
        H = out if kind == "features" else cp.empty((N, n_feat))
        grid, block = _grid_2d(N, n_feat)
        sizes = (np.int64(N), np.int64(n_feat), np.int64(D))
        f("features")(grid, block, (*dev[:3], H, *sizes))
        if kind == "mlp_field":
            grid, block = _grid_2d(N, D)
            f("mlp_field_from_features")(grid, block, (H, dev[3], dev[4], out, *sizes))
        return cp.asnumpy(out)

    #: how each generated flavour is called: runner(self, kind, output shape, *host arrays) with kind
    #: ``features`` | ``mlp_field`` | ``zonal`` (arguments of ``zonal_kernel_matrix``)
    _RUNNERS = {"python-numpy": _run_numpy, "python-numba": _run_numba, "python-cuda": _run_numba_cuda,
                "cuda-c": _run_cupy}

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
        return self._RUNNERS[self.flavour](self, "zonal", (X.shape[0], X.shape[0]), X, float(d), float(sigma_u),
                                           float(sigma_w), np.ascontiguousarray(coef))

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
