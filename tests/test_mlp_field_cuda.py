"""The MLP-field kernels on the CUDA flavours (docs/theory.md §B.1–B.2): python-cuda (numba.cuda.jit, in
Numba's CUDA simulator here) and cuda-c (CuPy RawModule), against the NumPy flavour and against the
formulas written out in NumPy:

    Φ_ik = φ(⟨u_k, y_i⟩/√d + (b_U)_k),   G^m(y_i) = (1/√m) W Φ_i + b_W,   k(⟨x_i, x_j⟩),

k through ρ(t) = (t/d + σ_U²)/(1/d + σ_U²) clamped to [−1, 1]: ReLU by the arc-cosine closed form
(s²/2π)(√(1−ρ²) + (π − arccos ρ)ρ) + σ_W², smooth activations by the Mehler series.

Tokens for the kernel matrix: random points of norm 0.9 and the axis vectors ±e_1, e_2.  The arc-cosine
k has infinite slope at ρ = 1, so tokens on the sphere whose squared norm rounds one ulp differently
in a per-thread dot product than in BLAS would change k(1) by ~1e-8 (an ill-conditioned formula, not a
kernel error); the axis vectors reach t = ⟨x, x⟩ = 1 (ρ = 1) and t = −1, 0 with exact dot products.
"""

import math
import shutil
import subprocess

import numpy as np
import pytest

from transformer_limits.numeric.runtime import count_transfers
from transformer_limits.numeric.kernel_family import MLP_FIELD, cuda_c_program
from transformer_limits.numeric.sphere.mlp_field import MLP_BACKENDS, mlp_field_kernels
from transformer_limits.symbolic.mlp_field_kernels import mlp_field_kernel_source
from transformer_limits.symbolic.mlp_kernel import ACTIVATIONS

pytestmark = pytest.mark.cudasim  # CUDA kernels in Numba's simulator: .ci/run's cudasim step

SIGMA_U, SIGMA_W = 0.3, 0.2
_PHI = {"relu": lambda z: np.maximum(z, 0.0), "tanh": np.tanh}


def _problem(rng, N=5, d=3, m=4):
    Y = rng.normal(size=(N, d))
    U, b_U = rng.normal(size=(m, d)), rng.normal(size=m)
    W, b_W = rng.normal(size=(d, m)), rng.normal(size=d)
    X = rng.normal(size=(N, d))
    X = 0.9 * X / np.linalg.norm(X, axis=1, keepdims=True)
    axes = np.zeros((3, d))
    axes[0, 0], axes[1, 0], axes[2, 1] = 1.0, -1.0, 1.0
    return Y, U, b_U, W, b_W, np.concatenate([X, axes])


def test_cuda_flavours_are_declared_for_every_cuda_backend():
    assert set(MLP_FIELD.flavours) == {"python-numpy", "python-numba", "python-cuda", "cuda-c"}
    assert MLP_BACKENDS == ("numpy", "numba", "numba-cuda", "numba-cuda-sim", "cupy")
    for activation in ACTIVATIONS:
        name, source = mlp_field_kernel_source(activation, "python-cuda")
        assert name.endswith(".py") and "@cuda.jit" in source and "mlp_field_from_features" in source
        name, source = mlp_field_kernel_source(activation, "cuda-c")
        assert name.endswith(".cu") and source.count('extern "C" __global__') == 3


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_every_backend_matches_the_numpy_flavour_and_the_formulas(backend, activation):
    rng = np.random.default_rng(7)
    Y, U, b_U, W, b_W, X = _problem(rng)
    ref, kern = mlp_field_kernels(activation, "numpy"), mlp_field_kernels(activation, backend)
    d, m = Y.shape[1], U.shape[0]

    phi = _PHI[activation](Y @ U.T / math.sqrt(d) + b_U)
    feats = kern.features(Y, U, b_U)
    np.testing.assert_allclose(feats, ref.features(Y, U, b_U), rtol=1e-12, atol=0)
    np.testing.assert_allclose(feats, phi, rtol=1e-12, atol=0)

    G = kern.mlp_field(Y, U, b_U, W, b_W)
    np.testing.assert_allclose(G, ref.mlp_field(Y, U, b_U, W, b_W), rtol=1e-12, atol=0)
    np.testing.assert_allclose(G, phi @ W.T / math.sqrt(m) + b_W, rtol=1e-12, atol=0)

    K = kern.kernel_matrix(X, SIGMA_U, SIGMA_W)
    np.testing.assert_allclose(K, ref.kernel_matrix(X, SIGMA_U, SIGMA_W), rtol=1e-12, atol=0)
    s2 = 1.0 / d + SIGMA_U**2
    rho = np.clip((X @ X.T / d + SIGMA_U**2) / s2, -1.0, 1.0)
    if activation == "relu":
        truth = s2 / (2 * np.pi) * (np.sqrt(1 - rho**2) + (np.pi - np.arccos(rho)) * rho) + SIGMA_W**2
    else:
        coef = kern.mehler(d, SIGMA_U)
        truth = np.polynomial.polynomial.polyval(rho, coef) + SIGMA_W**2
    np.testing.assert_allclose(K, truth, rtol=1e-12, atol=0)
    n = X.shape[0]  # e_1: t = 1, so rho = 1 exactly (the clamp's upper end)
    assert K[n - 3, n - 3] == pytest.approx(truth[n - 3, n - 3], rel=1e-14)
    if activation == "relu":
        assert K[n - 3, n - 3] == pytest.approx(s2 / 2 + SIGMA_W**2, rel=1e-14)  # k(1) = E[φ(sZ)²] + σ_W²


def test_no_tokens_gives_empty_outputs(backend):
    kern = mlp_field_kernels("relu", backend)
    Y, U, b_U, W, b_W, _ = _problem(np.random.default_rng(0))
    assert kern.mlp_field(Y[:0], U, b_U, W, b_W).shape == (0, 3)
    assert kern.kernel_matrix(Y[:0], SIGMA_U, SIGMA_W).shape == (0, 0)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_cuda_c_source_compiles_with_nvcc_for_sm_90(tmp_path, activation, precision):
    """The one cuda-c source compiles as double and as float (``typedef ... real``); the float32
    program has no double-precision instruction left (no silent promotion through a literal)."""
    name, source = mlp_field_kernel_source(activation, "cuda-c")
    assert "double" not in source
    src = tmp_path / name
    src.write_text(cuda_c_program(source, precision))
    out = subprocess.run([shutil.which("nvcc"), "--ptx", "-arch=sm_90", "-o", str(tmp_path / "k.ptx"), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ptx = (tmp_path / "k.ptx").read_text()
    for kernel in ("features", "mlp_field_from_features", "zonal_kernel_matrix"):
        assert f".entry {kernel}" in ptx
    assert (".f64" in ptx) == (precision == "float64")


@pytest.mark.gpu
@pytest.mark.parametrize("backend_name", ["numba-cuda", "cupy"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_gpu_backends_match_numpy_on_a_device(backend_name, activation):
    from transformer_limits.numeric.backends import REGISTRY

    if not REGISTRY[backend_name].available:
        pytest.skip(f"backend {backend_name} unavailable: {REGISTRY[backend_name].reason}")
    rng = np.random.default_rng(3)
    Y, U, b_U, W, b_W, X = _problem(rng, N=70, d=5, m=300)  # many 128-thread blocks
    ref, kern = mlp_field_kernels(activation, "numpy"), mlp_field_kernels(activation, backend_name)
    np.testing.assert_allclose(kern.features(Y, U, b_U), ref.features(Y, U, b_U), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(kern.mlp_field(Y, U, b_U, W, b_W), ref.mlp_field(Y, U, b_U, W, b_W),
                               rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(kern.kernel_matrix(X, SIGMA_U, SIGMA_W), ref.kernel_matrix(X, SIGMA_U, SIGMA_W),
                               rtol=1e-11, atol=1e-13)


def test_device_mode_takes_and_returns_device_arrays_without_copies():
    """``device=True`` on the simulator backend: device arrays in and out, no counted copy, same
    values as the host API (which makes one copy per argument in and one out)."""
    kern = mlp_field_kernels("tanh", "numba-cuda-sim")
    Y, U, b_U, W, b_W, X = _problem(np.random.default_rng(5))
    dev = kern.arrays
    args = [dev.put(a) for a in (Y, U, b_U, W, b_W)]
    coef = kern.device_coefficients(Y.shape[1], SIGMA_U)
    with count_transfers() as log:
        G = kern.mlp_field(*args, device=True)
        F = kern.features(*args[:3], device=True)
        K = kern.kernel_matrix(args[0], SIGMA_U, SIGMA_W, coef=coef)
    assert (log.to_device, log.to_host) == (0, 0)
    np.testing.assert_array_equal(dev.get(G), kern.mlp_field(Y, U, b_U, W, b_W))
    np.testing.assert_array_equal(dev.get(F), kern.features(Y, U, b_U))
    np.testing.assert_array_equal(dev.get(K), kern.kernel_matrix(Y, SIGMA_U, SIGMA_W))
    with count_transfers() as log:
        kern.mlp_field(Y, U, b_U, W, b_W)
    assert (log.to_device, log.to_host) == (5, 1)


def test_float32_only_where_a_float32_flavour_exists():
    with pytest.raises(ValueError, match="precision"):
        mlp_field_kernels("relu", "numba-cuda-sim", "float32")
    with pytest.raises(ValueError, match="precision"):
        mlp_field_kernels("relu", "numpy", "float16")
    kern = mlp_field_kernels("gelu", "numpy", "float32")
    Y, U, b_U, W, b_W, _ = _problem(np.random.default_rng(2))
    G = kern.mlp_field(Y, U, b_U, W, b_W)
    assert G.dtype == np.float32
    np.testing.assert_allclose(G, mlp_field_kernels("gelu").mlp_field(Y, U, b_U, W, b_W), rtol=1e-5, atol=1e-5)


def test_common_noise_sde_on_every_backend_matches_numpy(backend):
    """The whole simulator (attention drift + MLP field, projected Euler–Maruyama, docs/theory.md §B.3)
    on a CUDA flavour: same path as NumPy, to float64 rounding (6 tokens, d = 3, 5 steps)."""
    from transformer_limits.numeric.sphere.common_noise_sde import CommonNoiseSDE
    from transformer_limits.numeric.sphere.transformer import uniform_sphere

    if backend not in MLP_BACKENDS:
        pytest.skip(f"{backend}: no MLP-field kernels")
    X0 = uniform_sphere(6, 3, np.random.default_rng(0))
    paths = [CommonNoiseSDE(3, "relu", 0.5, 0.5, attention="attractive", beta=1.0, backend=b)
             .simulate_systems([X0], 0.5, 5, 8, np.random.default_rng(1))[0] for b in ("numpy", backend)]
    np.testing.assert_allclose(paths[1], paths[0], rtol=0, atol=1e-13)
