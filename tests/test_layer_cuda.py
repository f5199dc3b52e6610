"""The attention-layer kernels on the CUDA flavours (kernel family LAYER_ADJOINT): python-cuda
(``numba.cuda.jit``, run here in Numba's CUDA simulator) and cuda-c (CuPy RawModule; compiled by nvcc
here, executed on the CPU by tests/test_cuda_c_host.py and on a device), against the NumPy reference backend of
:class:`transformer_limits.numeric.attention.layer.AttentionLayer` (docs/theory.md §A.2):

    F^i = sum_h c_h O_h sum_j P^h_ij V_h x^j,   P^h_ij = softmax_j(beta <Q_h x^i, K_h x^j>) over visible j,

and the VJP with cotangent PC: xbar = Jacobian term + Lions term (or the Jacobian term alone with
``lions=False``, the wrong-model control), dQ, dK, dV, dO per head.  Sizes are tiny (N <= 6, H = 2,
d = 3, d_k = d_v = 2) so the simulator runs them in seconds.
"""

import subprocess

import numpy as np
import pytest

from transformer_limits.numeric.attention.layer import LAYER_BACKENDS, AttentionLayer
from transformer_limits.numeric.backends import REGISTRY, nvcc_path
from transformer_limits.numeric.kernel_family import LAYER_ADJOINT, cuda_c_program
from transformer_limits.symbolic.attention_adjoint_kernels import adjoint_kernel_source

pytestmark = pytest.mark.cudasim  # CUDA kernels in Numba's simulator: .ci/run's cudasim step

SIM = REGISTRY["numba-cuda-sim"]
needs_sim = pytest.mark.skipif(not SIM.available, reason=f"numba-cuda-sim unavailable: {SIM.reason}")
D, DK, DV, H = 3, 2, 2, 2


def _problem(rng, N, H=H, d=D, d_k=DK, d_v=DV):
    return (rng.normal(size=(N, d)), 0.8 * rng.normal(size=(H, d_k, d)), 0.8 * rng.normal(size=(H, d_k, d)),
            rng.normal(size=(H, d_v, d)), rng.normal(size=(H, d, d_v)), rng.normal(size=H), rng.normal(size=(N, d)))


def _layer_outputs(backend, X, Qs, Ks, Vs, Os, c, PC, *, causal, lions, temperature=0.7):
    layer = AttentionLayer(X.shape[1], Qs.shape[1], Vs.shape[1], causal=causal, temperature=temperature,
                           backend=backend)
    F, cache = layer.field(X, Qs, Ks, Vs, Os, c)
    return (F, *layer.vjp(X, Qs, Ks, Vs, Os, c, cache, PC, lions=lions))


def _softmax_field(X, Qs, Ks, Vs, Os, c, causal, beta):
    """F^i = sum_h c_h O_h sum_j P_ij V_h x^j written out (docs/theory.md §A.2)."""
    N = X.shape[0]
    F = np.zeros_like(X)
    for h in range(Qs.shape[0]):
        L = beta * (X @ Qs[h].T) @ (X @ Ks[h].T).T
        if causal:
            L[np.triu_indices(N, 1)] = -np.inf
        P = np.exp(L - L.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        F += c[h] * (P @ X @ Vs[h].T) @ Os[h].T
    return F


def test_the_layer_runs_on_every_flavour_of_its_family():
    assert set(LAYER_ADJOINT.flavours) == {"python-numba", "python-cuda", "cuda-c"}
    assert LAYER_BACKENDS == ("numpy", "blas", "numba", "numba-cuda", "numba-cuda-sim", "cupy")


@needs_sim
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lions", [True, False])
def test_simulator_matches_numpy_forward_and_every_adjoint_output(causal, lions):
    rng = np.random.default_rng(11 + 2 * causal + lions)
    args = _problem(rng, N=6)
    ref = _layer_outputs("numpy", *args, causal=causal, lions=lions)
    got = _layer_outputs("numba-cuda-sim", *args, causal=causal, lions=lions)
    names = ("F", "xbar", "dQ", "dK", "dV", "dO")
    for name, r, g in zip(names, ref, got):
        assert g.shape == r.shape, name
        scale = np.max(np.abs(r))
        assert np.max(np.abs(g - r)) <= 1e-12 * scale, (name, np.max(np.abs(g - r)) / scale)
    np.testing.assert_allclose(got[0], _softmax_field(*args[:6], causal, 1 / 0.7), rtol=1e-12, atol=1e-13)


@needs_sim
def test_simulator_lions_switch_drops_exactly_the_lions_term():
    """xbar(lions) - xbar(no lions) = sum_h K_h^T kbar_h + V_h^T vbar_h, with the parameter gradients
    unchanged (they do not involve the Lions term)."""
    rng = np.random.default_rng(5)
    X, Qs, Ks, Vs, Os, c, PC = _problem(rng, N=5)
    on = _layer_outputs("numba-cuda-sim", X, Qs, Ks, Vs, Os, c, PC, causal=True, lions=True)
    off = _layer_outputs("numba-cuda-sim", X, Qs, Ks, Vs, Os, c, PC, causal=True, lions=False)
    for a, b in zip(on[2:], off[2:]):
        np.testing.assert_array_equal(a, b)
    # dK = sum_i kbar^i x^iT, so K_h^T kbar_h and V_h^T vbar_h follow from the reference bars
    ref_on = _layer_outputs("numpy", X, Qs, Ks, Vs, Os, c, PC, causal=True, lions=True)
    ref_off = _layer_outputs("numpy", X, Qs, Ks, Vs, Os, c, PC, causal=True, lions=False)
    np.testing.assert_allclose(on[1] - off[1], ref_on[1] - ref_off[1], rtol=1e-11, atol=1e-13)
    assert np.max(np.abs(on[1] - off[1])) > 1e-3  # the control is really a different model


@needs_sim
def test_simulator_results_are_deterministic():
    rng = np.random.default_rng(2)
    args = _problem(rng, N=4)
    first = _layer_outputs("numba-cuda-sim", *args, causal=False, lions=True)
    again = _layer_outputs("numba-cuda-sim", *args, causal=False, lions=True)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_gpu_sources_come_from_the_same_sympy_blocks_and_leave_numba_alone():
    """Every flavour prints the same SymPy outputs (pair score, increments, Jacobian and Lions VJPs);
    the CUDA flavours use the plain exp (no fast_exp); the python-numba source keeps its njit kernels."""
    names = {f: adjoint_kernel_source(D, DK, DV, f) for f in LAYER_ADJOINT.flavours}
    for flavour, (filename, text) in names.items():
        assert filename.endswith(LAYER_ADJOINT.flavours[flavour].suffix)
        for out in ("sbar = p*(", "xj_2 = ", "xl_2 = ", "g_1 = ", "o_2 = "):
            assert out in text, (flavour, out)
    assert "numba.njit" in names["python-numba"][1] and "cuda.jit" not in names["python-numba"][1]
    assert all("fast_exp" not in names[f][1] for f in ("python-cuda", "cuda-c"))
    assert names["python-cuda"][1].count("@cuda.jit") == 6
    assert names["cuda-c"][1].count('extern "C" __global__') == 6
    assert "double" not in names["cuda-c"][1].split("\n", 3)[3]  # every real is `real` (float64 | float32)
    assert all("atomic" not in names[f][1] for f in ("python-cuda", "cuda-c"))
    with pytest.raises(ValueError, match="unknown adjoint kernel flavour"):
        adjoint_kernel_source(D, DK, DV, "python-numpy")


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_cuda_c_layer_kernels_compile_with_nvcc(tmp_path, precision):
    """One CUDA C source, compiled as double and as float (``typedef ... real``): the float build has no
    double-precision arithmetic at all."""
    _, source = adjoint_kernel_source(D, DK, DV, "cuda-c")
    src = tmp_path / "layer.cu"
    src.write_text(cuda_c_program(source, precision))
    out = subprocess.run([nvcc_path(), "--ptx", "-arch=sm_90", "-o", str(tmp_path / "layer.ptx"), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ptx = (tmp_path / "layer.ptx").read_text()
    for kernel in ("features", "forward", "head_sum", "adjoint_rows", "adjoint_keys", "param_grads"):
        assert f".entry {kernel}" in ptx
    assert (".f64" in ptx) == (precision == "float64")


def _batched_kernels(X, Qs, Ks, Vs, Os, c, PC, base, *, causal, lions, beta):
    """Run the six kernels directly on a batch (X, PC, base (B, N, d); Qs.. (PB, H, ...); c (B, H))."""
    from transformer_limits.numeric.runtime import Runtime
    from transformer_limits.numeric.attention.layer import DeviceCache

    B, N, d = X.shape
    PB, H, d_k = Qs.shape[:3]
    layer = AttentionLayer(d, d_k, Vs.shape[2], causal=causal, temperature=1 / beta, backend="numba-cuda-sim")
    dev = Runtime("numba-cuda-sim")
    flat = lambda a: dev.put(a.reshape((-1,) + a.shape[2:]))  # noqa: E731
    dX, dPC, dbase = (dev.put(a.reshape(B * N, d)) for a in (X, PC, base))
    params, dc = [flat(a) for a in (Qs, Ks, Vs, Os)], dev.put(c.reshape(-1))
    cache = DeviceCache.empty(dev, (B * H,), N, d_k, Vs.shape[2])
    out, xout = dev.empty((B * N, d)), dev.empty((B * N, d))
    layer.device_field(dX, *params, dc, B, H, N, PB, dbase, out, cache, dev.empty((B * H, N, d)))
    grads = tuple(dev.empty((B * H,) + a.shape[2:]) for a in (Qs, Ks, Vs, Os))
    layer.device_vjp(dX, *params, dc, B, H, N, PB, cache, dPC, dbase, xout, grads, lions=lions)
    unflat = lambda a: dev.get(a).reshape((B, -1) + a.shape[1:])  # noqa: E731
    return (unflat(out).reshape(B, N, d), unflat(xout).reshape(B, N, d), *(unflat(g) for g in grads))


@needs_sim
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_batched_kernels_solve_each_problem_and_add_the_residual(shared, causal):
    """B = 3 problems in one launch: out_b = base_b + F_b and base_b + xbar_b, gradients per problem,
    each equal to the single-problem NumPy reference (parameters shared, PB = 1, or per problem)."""
    rng = np.random.default_rng(21 + shared + 2 * causal)
    B, N = 3, 5
    probs = [_problem(rng, N) for _ in range(B)]
    X, PC = np.stack([p[0] for p in probs]), np.stack([p[6] for p in probs])
    c = np.stack([p[5] for p in probs])
    pick = (lambda k: probs[0][k][None]) if shared else (lambda k: np.stack([p[k] for p in probs]))
    Qs, Ks, Vs, Os = (pick(k) for k in (1, 2, 3, 4))
    base = rng.normal(size=X.shape)
    got = _batched_kernels(X, Qs, Ks, Vs, Os, c, PC, base, causal=causal, lions=True, beta=1 / 0.7)
    for b in range(B):
        q = 0 if shared else b
        ref = _layer_outputs("numpy", X[b], Qs[q], Ks[q], Vs[q], Os[q], c[b], PC[b], causal=causal, lions=True)
        want = (base[b] + ref[0], base[b] + ref[1], *ref[2:])
        for name, r, g in zip(("F", "xbar", "dQ", "dK", "dV", "dO"), want, (a[b] for a in got)):
            assert g.shape == r.shape, name
            assert np.max(np.abs(g - r)) <= 1e-12 * np.max(np.abs(r)), name


@pytest.mark.gpu
@pytest.mark.parametrize("backend_name", ["numba-cuda", "cupy"])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_backends_match_blas_on_a_device(backend_name, causal):
    """A moderate size (several thread blocks per launch) against the BLAS backpropagation."""
    if not REGISTRY[backend_name].available:
        pytest.skip(f"backend {backend_name} unavailable: {REGISTRY[backend_name].reason}")
    rng = np.random.default_rng(7)
    args = _problem(rng, N=300, H=4, d=6, d_k=4, d_v=4)
    ref = _layer_outputs("blas", *args, causal=causal, lions=True)
    got = _layer_outputs(backend_name, *args, causal=causal, lions=True)
    for name, r, g in zip(("F", "xbar", "dQ", "dK", "dV", "dO"), ref, got):
        scale = np.max(np.abs(r))
        assert np.max(np.abs(g - r)) <= 1e-11 * scale, name


@pytest.mark.parametrize("causal", [False, True])
def test_whole_transformer_on_the_simulator_matches_numpy(causal):
    """The paper-A model end to end (L layers forward, adjoint p_r, parameter gradients; docs/theory.md
    §A.1) on the CUDA flavour agrees with the NumPy reference (N = 5, L = 2, H = 2, d = 3)."""
    from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map
    from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params
    from transformer_limits.numeric.backends import REGISTRY

    if not REGISTRY["numba-cuda-sim"].available:
        pytest.skip(f"numba-cuda-sim unavailable: {REGISTRY['numba-cuda-sim'].reason}")
    params = init_params(2, 2, 3, 2, 2, seed=4, gain=1.5)
    X0 = sample_tokens(5, 3, domain="ball", seed=5)
    loss = SquaredErrorLoss(target_map(X0, seed=6))
    runs = [AttentionTransformer(3, 2, 2, causal=causal, temperature=0.6, backend=b).loss_and_grad(X0, params, loss)
            for b in ("numpy", "numba-cuda-sim")]
    (v0, g0, f0, a0), (v1, g1, f1, a1) = runs
    np.testing.assert_allclose(f1.states, f0.states, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a1.p, a0.p, rtol=0, atol=1e-12)
    for k in g0:
        np.testing.assert_allclose(g1[k], g0[k], rtol=0, atol=1e-12 * max(1.0, np.abs(g0[k]).max()), err_msg=k)
