"""The paper-A transformer device-resident and batched (docs/theory.md §A.2), on Numba's CUDA simulator
(``numba-cuda-sim``, switched on by tests/conftest.py where there is no NVIDIA device):

    x_{r+1}^i = x_r^i + sum_h c_{r,h} O_h sum_j P^h_ij V_h x_r^j,   P^h_ij = softmax_j(beta <Q_h x_r^i, K_h x_r^j>),
    p_r = p_{r+1} + xbar_r (Jacobian + Lions terms),  dLoss/dtheta_{r,h} from p_{r+1} and the layer-r cache,

for B independent problems in one launch per kernel: each problem's states, adjoints and gradients
equal the NumPy reference backend run on that problem alone; the number of host <-> device copies of a
forward + backward pass does not depend on the depth L (the states never leave the device between
layers).  Small sizes (N = 5, d = 3).  The CPU paths (the batch as the loop over problems, float32 on
blas/numpy, argument errors) are tested in the default run: tests/test_batched_simulators_cpu.py.
"""

import numpy as np
import pytest

from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map
from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params
from transformer_limits.numeric.backends import REGISTRY
from transformer_limits.numeric.device_arrays import count_transfers

pytestmark = pytest.mark.cudasim  # CUDA kernels in Numba's simulator: .ci/run's cudasim step

SIM = REGISTRY["numba-cuda-sim"]
needs_sim = pytest.mark.skipif(not SIM.available, reason=f"numba-cuda-sim unavailable: {SIM.reason}")
D, DK, DV, H, L, B, N = 3, 2, 2, 2, 3, 3, 5


def _model(backend, causal=False, lions=True, **kw):
    return AttentionTransformer(D, DK, DV, causal=causal, temperature=0.7, backend=backend, lions_term=lions, **kw)


# the batch builders and the transcribed recursion are shared with the CPU tests (one copy)
from test_batched_simulators_cpu import _batch, _one, _rel, _softmax_states  # noqa: E402


@needs_sim
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lions", [True, False])
@pytest.mark.parametrize("weights", ["default", "per-problem"])
def test_batched_passes_equal_the_numpy_reference_per_problem(shared, causal, lions, weights):
    X, params, pL, w = _batch(3 + shared + 2 * causal + 4 * lions, shared, L=2)
    hw = None if weights == "default" else w
    sim, ref = _model("numba-cuda-sim", causal, lions), _model("numpy", causal, lions)
    fwd = sim.forward_batch(X, params, hw)
    adj = sim.backward_batch(fwd, params, pL)
    assert fwd.states.shape == (3, B, N, D) and adj.p.shape == (3, B, N, D)
    for b in range(B):
        one, hb = _one(params, b, shared), (None if hw is None else hw[b])
        f = ref.forward(X[b], one, hb)
        a = ref.backward(f, one, pL[b])
        assert _rel(fwd.states[:, b], f.states) <= 1e-12
        assert _rel(adj.p[:, b], a.p) <= 1e-12
        for k, g in a.grads.items():
            assert adj.grads[k].shape == (B,) + g.shape
            assert _rel(adj.grads[k][b], g) <= 1e-12, k
        np.testing.assert_allclose(fwd.states[:, b], _softmax_states(X[b], one, f.weights, causal, 1 / 0.7),
                                   rtol=1e-12, atol=1e-12)


@needs_sim
@pytest.mark.parametrize("causal", [False, True])
def test_single_problem_api_and_loss_and_grad_batch(causal):
    """forward/backward/loss_and_grad keep their single-problem API on the device backend, and
    loss_and_grad_batch gives each problem's loss and gradient."""
    X, params, _, _ = _batch(40 + causal, True)
    losses = [SquaredErrorLoss(target_map(X[b], seed=b)) for b in range(B)]
    sim, ref = _model("numba-cuda-sim", causal), _model("numpy", causal)
    values, grads, fwd, adj = sim.loss_and_grad_batch(X, params, losses)
    for b in range(B):
        v, g, f, a = ref.loss_and_grad(X[b], params, losses[b])
        v1, g1, f1, a1 = sim.loss_and_grad(X[b], params, losses[b])
        assert abs(values[b] - v) <= 1e-12 * abs(v) and abs(v1 - v) <= 1e-12 * abs(v)
        assert _rel(f1.states, f.states) <= 1e-12 and _rel(a1.p, a.p) <= 1e-12
        for k in g:
            assert _rel(grads[k][b], g[k]) <= 1e-12 and _rel(g1[k], g[k]) <= 1e-12, k
    with pytest.raises(ValueError, match="losses"):
        sim.loss_and_grad_batch(X, params, losses[:2])


@needs_sim
def test_host_device_copies_do_not_grow_with_depth():
    """A forward + backward pass copies inputs and parameters in and results out once: L = 2 and L = 6
    give the same numbers of copies (the states and caches stay on the device between layers), for a
    batch with per-problem parameters and for the single-problem API."""
    counts = []
    for depth in (2, 6):
        X, params, pL, _ = _batch(7, False, L=depth, B=2, N=3)
        sim = _model("numba-cuda-sim")
        with count_transfers() as log:
            sim.backward_batch(sim.forward_batch(X, params), params, pL)
        one = _one(params, 0, False)
        with count_transfers() as single:
            sim.backward(sim.forward(X[0], one), one, pL[0])
        counts.append((log.to_device, log.to_host, single.to_device, single.to_host))
    assert counts[0] == counts[1]
    assert counts[0][1] == 6 and counts[0][3] == 6  # states, p and the four gradients


@needs_sim
def test_lazy_caches_and_mean_field_exact_mode_on_the_device():
    """fwd.caches (fetched from the device once) feed the host layer VJP, and the exact-expectation
    mode of the mean-field code (head weights = atom weights) gives the NumPy loss and node gradients."""
    from transformer_limits.numeric.attention.mean_field import HeadLaw, discrete_node_loss_and_grad

    X, params, pL, _ = _batch(9, True)
    sim, ref = _model("numba-cuda-sim", True), _model("numpy", True)
    fwd = sim.forward(X[0], params)
    with count_transfers() as log:
        caches = [fwd.caches[r] for r in range(L)]
    assert log.to_host == 5 and len(fwd.caches) == L
    xbar = sim.layer.vjp(fwd.states[0], *(params[k][0] for k in "QKVO"), fwd.weights[0], caches[0], pL[0])[0]
    f = ref.forward(X[0], params)
    want = ref.layer.vjp(f.states[0], *(params[k][0] for k in "QKVO"), f.weights[0], f.caches[0], pL[0])[0]
    assert _rel(xbar, want) <= 1e-12
    law = HeadLaw.random(3, 4, D, DK, DV, seed=2, gain=1.5)
    X0 = sample_tokens(N, D, domain="ball", seed=3)
    loss = SquaredErrorLoss(target_map(X0, seed=4))
    (v0, g0, _), (v1, g1, _) = (discrete_node_loss_and_grad(_model(b), X0, law, loss, 4)
                                for b in ("numpy", "numba-cuda-sim"))
    assert abs(v1 - v0) <= 1e-12 * abs(v0)
    for k in g0:
        assert _rel(g1[k], g0[k]) <= 1e-12, k


@needs_sim
def test_same_seed_same_bits():
    X, params, pL, w = _batch(11, False, L=2)
    runs = []
    for _ in range(2):
        sim = _model("numba-cuda-sim", causal=True)
        fwd = sim.forward_batch(X, params, w)
        runs.append((fwd.states, sim.backward_batch(fwd, params, pL)))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1].p, runs[1][1].p)
    for k in params:
        np.testing.assert_array_equal(runs[0][1].grads[k], runs[1][1].grads[k])


@pytest.mark.parametrize("backend", ["numba-cuda-sim"])  # the numba case: tests/test_batched_simulators_cpu.py
def test_float32_needs_a_float32_backend(backend):
    if not REGISTRY[backend].available:
        pytest.skip(f"{backend} unavailable: {REGISTRY[backend].reason}")
    with pytest.raises(ValueError, match="precision"):
        _model(backend, precision="float32")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["numba-cuda", "cupy"])
def test_gpu_batched_passes_match_blas_on_a_device(backend):
    """A moderate batch (several blocks per launch) against the BLAS backpropagation, per problem."""
    if not REGISTRY[backend].available:
        pytest.skip(f"backend {backend} unavailable: {REGISTRY[backend].reason}")
    X, params, pL, w = _batch(23, False, L=4, B=4, N=200)
    gpu, ref = _model(backend, causal=True), _model("blas", causal=True)
    fwd = gpu.forward_batch(X, params, w)
    adj = gpu.backward_batch(fwd, params, pL)
    f = ref.forward_batch(X, params, w)
    a = ref.backward_batch(f, params, pL)
    assert _rel(fwd.states, f.states) <= 1e-11 and _rel(adj.p, a.p) <= 1e-11
    for k in params:
        assert _rel(adj.grads[k], a.grads[k]) <= 1e-11, k


@pytest.mark.gpu
def test_cupy_float32_agrees_with_float64_on_a_device():
    if not REGISTRY["cupy"].available:
        pytest.skip(f"backend cupy unavailable: {REGISTRY['cupy'].reason}")
    X, params, pL, w = _batch(29, True, L=4, B=4, N=200)
    out = {}
    for precision in ("float64", "float32"):
        m = _model("cupy", causal=True, precision=precision)
        fwd = m.forward_batch(X, params, w)
        out[precision] = (fwd.states, m.backward_batch(fwd, params, pL))
    (s32, a32), (s64, a64) = out["float32"], out["float64"]
    assert s32.dtype == a32.p.dtype == np.float32
    assert _rel(s32, s64) <= 1e-4 and _rel(a32.p, a64.p) <= 1e-4
    for k in params:
        assert _rel(a32.grads[k], a64.grads[k]) <= 1e-4, k
