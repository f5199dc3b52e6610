"""The flow-map jet kernel (kernel family FLOW_TAYLOR_JET) on every flavour, against the NumPy flavour and
against the jet written out in NumPy from its definition (docs/theory.md §A.3):

for one head and mu_s = sum_j w_j delta_{y_j + s DY_j}, the logit of the pair (i, j) along the path
is l(s) = <Q(x_i + s DX_i), K(y_j + s DY_j)>, so

    l = <Q x, K y>,  l' = <Q DX, K y> + <Q x, K DY>,  l'' = 2 <Q DX, K DY>,
    p_j = w_j e^{l_j} / sum_k w_k e^{l_k},  p_j' = p_j (l_j' - <l'>_p),
    p_j'' = p_j [(l_j' - <l'>_p)^2 + l_j'' - <l''>_p - Var_p(l')],

and A(s) = sum_j p_j(s) V(y_j + s DY_j) gives A0 = sum p v, A1 = sum (p' v + p V DY),
A2 = sum (p'' v + 2 p' V DY).  The reference below is written from these lines (einsum, normalised
weights), independently of the generated kernels.

python-numba runs here; python-cuda runs in Numba's CUDA simulator (tests/conftest.py) or on a GPU;
cuda-c compiles with nvcc where it exists and runs through CuPy on a device (``gpu`` marker).
"""

import shutil
import subprocess

import numpy as np
import pytest

from transformer_limits.numeric.attention.flow_taylor import (
    attention_jet,
    flow_taylor_coefficients,
    random_flow_instance,
    second_variation,
)
from transformer_limits.numeric.backends import REGISTRY
from transformer_limits.numeric.kernel_family import FLOW_TAYLOR_JET, cuda_c_program
from transformer_limits.symbolic.flow_taylor_kernels import jet_kernel_source

pytestmark = pytest.mark.cudasim  # CUDA kernels in Numba's simulator: .ci/run's cudasim step

DIMS = [(2, 2, 2), (3, 2, 1)]  # (d, d_k, d_v)
CPU_BACKENDS = ("numpy", "numba", "numba-cuda-sim")


def _reference_jet(X, DX, Y, DY, w, Q, K, V):
    """A0, A1, A2 (N, d_v) from the formulas of the module docstring."""
    qx, qdx, ky, kdy = X @ Q.T, DX @ Q.T, Y @ K.T, DY @ K.T
    l0, l1, l2 = qx @ ky.T, qdx @ ky.T + qx @ kdy.T, 2 * qdx @ kdy.T
    e = w * np.exp(l0 - l0.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    mean = lambda a: (p * a).sum(axis=1, keepdims=True)  # noqa: E731
    lc = l1 - mean(l1)
    p1 = p * lc
    p2 = p * (lc**2 + l2 - mean(l2) - mean(lc**2))
    v, vd = Y @ V.T, DY @ V.T
    return p @ v, p1 @ v + p @ vd, p2 @ v + 2 * p1 @ vd


def _problem(rng, d, d_k, d_v, N=4, M=5, scale=1.0):
    X, DX, Y, DY = (rng.normal(size=(n, d)) for n in (N, N, M, M))
    w = rng.dirichlet(np.ones(M))
    Q, K, V = scale * rng.normal(size=(d_k, d)), rng.normal(size=(d_k, d)), rng.normal(size=(d_v, d))
    return X, DX, Y, DY, w, Q, K, V


def _usable(backend):
    b = REGISTRY[backend]
    if not b.available:
        pytest.skip(f"backend {backend} unavailable: {b.reason}")


def _close(a, b, rtol=1e-12):
    """Agreement to rtol relative to the size of the block (entries of A1, A2 may cancel to ~0)."""
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * np.max(np.abs(b)))


def test_every_flavour_is_declared_and_generated_from_one_template():
    assert set(FLOW_TAYLOR_JET.flavours) == {"python-numpy", "python-numba", "python-cuda", "cuda-c"}
    assert set(FLOW_TAYLOR_JET.backends()) == {"numpy", "numba", "numba-cuda", "numba-cuda-sim", "cupy"}
    name, source = jet_kernel_source(2, 2, 2, "python-cuda")
    assert name.endswith(".py") and source.count("@cuda.jit") == 1 and "cuda.grid(1)" in source
    assert "atomic" not in source
    name, source = jet_kernel_source(2, 2, 2, "cuda-c")
    assert name.endswith(".cu") and source.count('extern "C" __global__ void jet(') == 1 and "atomic" not in source
    name, source = jet_kernel_source(2, 2, 2, "python-numba")
    assert "numba.prange" in source
    with pytest.raises(ValueError, match="unknown jet kernel flavour 'fortran'"):
        jet_kernel_source(2, 2, 2, "fortran")


# numba compiles once per (d, d_k, d_v) (~6 s on a cold cache): one shape, shared with the test below
@pytest.mark.parametrize("backend, dims", [(b, dims) for b in CPU_BACKENDS for dims in DIMS
                                           if b != "numba" or dims == DIMS[0]])
def test_every_cpu_flavour_matches_numpy_and_the_formulas(backend, dims):
    _usable(backend)
    args = _problem(np.random.default_rng(sum(dims)), *dims)
    ref = _reference_jet(*args)
    numpy_out = attention_jet(*args, backend="numpy")
    out = attention_jet(*args, backend=backend)
    for m in range(3):
        assert out[m].shape == (4, dims[2])
        _close(out[m], numpy_out[m])
        _close(out[m], ref[m])


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_large_logits_and_a_zero_direction(backend):
    """The max-shifted softmax survives logits ~ 1e3 (exp would overflow unshifted); along DX = DY = 0 the
    path is constant, so A1 = A2 = 0 exactly and A0 is the attention."""
    _usable(backend)
    X, DX, Y, DY, w, Q, K, V = _problem(np.random.default_rng(5), 2, 2, 2, scale=300.0)
    out = attention_jet(X, DX, Y, DY, w, Q, K, V, backend=backend)
    assert all(np.all(np.isfinite(a)) for a in out)
    for a, r in zip(out, _reference_jet(X, DX, Y, DY, w, Q, K, V)):
        _close(a, r, rtol=1e-10)  # logits ~ 1e3: l' and l'' lose ~3 digits to cancellation in lc
    A0, A1, A2 = attention_jet(X, 0 * X, Y, 0 * Y, w, Q, K, V, backend=backend)
    assert np.all(A1 == 0) and np.all(A2 == 0)
    _close(A0, _reference_jet(X, 0 * X, Y, 0 * Y, w, Q, K, V)[0])


@pytest.mark.parametrize("backend", ["numba", "numba-cuda-sim"])
def test_second_variation_and_the_expansion_reach_the_backend(backend):
    _usable(backend)
    X, params = random_flow_instance(np.random.default_rng(2), n_particles=3, d=2, d_k=2, d_v=2, n_heads=2)
    v = np.random.default_rng(3).normal(size=X.shape)
    for measure in (True, False):
        _close(second_variation(X, params, v, measure=measure, backend=backend),
               second_variation(X, params, v, measure=measure))
    if backend == "numba-cuda-sim":  # the attention kernels of the simulator compile nothing: cheap
        X, params = random_flow_instance(np.random.default_rng(2), n_particles=2, d=2, d_k=2, d_v=2, n_heads=1)
        for c, ref in zip(flow_taylor_coefficients(X, params, 3, backend=backend),
                          flow_taylor_coefficients(X, params, 3)):
            _close(c, ref)


def test_bad_backends_and_shapes_are_refused():
    args = _problem(np.random.default_rng(0), 2, 2, 2)
    with pytest.raises(ValueError, match="blas"):
        attention_jet(*args, backend="blas")
    with pytest.raises(ValueError, match="^X and DX"):
        attention_jet(args[0], args[1][:2], *args[2:])
    with pytest.raises(ValueError, match="^Y, DY"):
        attention_jet(*args[:4], args[4][:2], *args[5:])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("dims", DIMS)
def test_cuda_c_source_compiles_with_nvcc_for_sm_90(tmp_path, dims, precision):
    """The one source compiles as ``typedef double real`` and as ``typedef float real``."""
    name, source = jet_kernel_source(*dims, "cuda-c")
    src = tmp_path / name
    src.write_text(cuda_c_program(source, precision))
    out = subprocess.run([shutil.which("nvcc"), "--ptx", "-arch=sm_90", "-o", str(tmp_path / "k.ptx"), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "warning" not in out.stderr, out.stderr
    assert ".entry jet" in (tmp_path / "k.ptx").read_text()


@pytest.mark.gpu
@pytest.mark.parametrize("backend_name", ["numba-cuda", "cupy"])
def test_gpu_backends_match_numpy_on_a_device(backend_name):
    _usable(backend_name)
    args = _problem(np.random.default_rng(11), 3, 2, 2, N=300, M=70)  # several 128-thread blocks
    ref = attention_jet(*args, backend="numpy")
    for a, r in zip(attention_jet(*args, backend=backend_name), ref):
        _close(a, r, rtol=1e-11)
    X, params = random_flow_instance(np.random.default_rng(4), n_particles=130, d=3, d_k=2, d_v=2, n_heads=2)
    v = np.random.default_rng(5).normal(size=X.shape)
    _close(second_variation(X, params, v, backend=backend_name), second_variation(X, params, v), rtol=1e-11)
