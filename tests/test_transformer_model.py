"""Paper-A discrete model: adjoint gradients (Taylor tests), backends, equivariance, wrong models; the
one forward/backward loop on the host runtime and on a device runtime (Numba's CUDA simulator, tests
marked ``cudasim``), batched and device-resident."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from transformer_limits.numeric.attention.losses import (MeanPooledRegressionLoss, SquaredErrorLoss,
                                                            sample_tokens, target_map)
from transformer_limits.numeric.attention.transformer import (AttentionTransformer, init_params,
                                                           inverse_sqrt_heads)
from transformer_limits.testing import assert_taylor_rate
from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params

shapes = st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3),  # d, d_k, d_v
                   st.integers(1, 6), st.integers(1, 3), st.integers(1, 3))  # N, L, H


def _problem(d, d_k, d_v, N, L, H, seed, gain=1.5, pooled=False):
    params = init_params(L, H, d, d_k, d_v, seed=seed, gain=gain)
    X0 = sample_tokens(N, d, domain=("ball", "sphere", "cube")[seed % 3], seed=seed + 1)
    if pooled:
        loss = MeanPooledRegressionLoss(np.random.default_rng(seed).normal(size=d), 0.3)
    else:
        loss = SquaredErrorLoss(target_map(X0, seed=seed + 2))
    return params, X0, loss


def _rate_two(check) -> bool:
    """The asymptotic verdict on top of ``assert_taylor_rate``'s fit, from the remainders it recorded:
    the local order at the smallest usable step is >= 1.9 (early levels may be pre-asymptotic when
    the second-order coefficient is small), or the remainder is at round-off."""
    s = check.statistics
    remainders = np.asarray(s["remainders"])
    if "local_orders_h" not in s:  # every remainder at the round-off floor: the expansion is exact
        return bool(remainders.max() < 1e-10)
    rates = _usable_local_orders(check)
    return bool((rates.size >= 2 and rates[-1] >= 1.9) or (rates.size < 2 and remainders.max() < 1e-10))


def _usable_local_orders(check) -> np.ndarray:
    """The local orders log(R(h_prev)/R(h))/log 2 whose remainder R(h) is above the round-off floor."""
    s = check.statistics
    rates = np.asarray(s["local_orders_h"])
    return rates[(np.asarray(s["remainders"])[1:] > s["round_off_floor"]) & np.isfinite(rates)]


def _finest_local_order(check) -> float:
    return float(_usable_local_orders(check)[-1])


# steps 0.05 · 2^-i, i < 8 (assert_taylor_rate's default; taylor_test used i < 6 here before issue 24,
# whose finest step can still be pre-asymptotic when the h² and h³ terms of the remainder nearly cancel)
TAYLOR_STEPS = dict(h0=0.05, levels=8)


def _input_taylor(model, params, X0, loss, seed):
    """``assert_taylor_rate`` of the loss in x_0 against the adjoint p_0 (raises on a wrong gradient)."""
    _, _, _, adj = model.loss_and_grad(X0, params, loss)
    dX = np.random.default_rng(seed + 7).normal(size=X0.shape)
    f = lambda X: np.array(loss.value(model.output(X, params)))  # noqa: E731
    return assert_taylor_rate(f, X0, dX, np.array(np.sum(adj.p[0] * dX)), **TAYLOR_STEPS)


def _param_taylor(model, params, X0, loss, seed):
    """``assert_taylor_rate`` of the loss in the flattened parameters against the adjoint gradients."""
    _, grads, _, _ = model.loss_and_grad(X0, params, loss)
    rng = np.random.default_rng(seed + 11)
    keys = list(params)
    flat = np.concatenate([params[k].ravel() for k in keys])
    sizes = np.cumsum([params[k].size for k in keys])[:-1]

    def unflat(v):
        return {k: a.reshape(params[k].shape) for k, a in zip(keys, np.split(v, sizes))}

    direction = rng.normal(size=flat.shape)
    slope = sum(np.sum(grads[k] * d) for k, d in unflat(direction).items())
    f = lambda v: np.array(loss.value(model.output(X0, unflat(v))))  # noqa: E731
    return assert_taylor_rate(f, flat, direction, np.array(slope), **TAYLOR_STEPS)


@settings(max_examples=25, deadline=None)
@given(shapes, st.booleans(), st.booleans(), st.integers(0, 10_000))
def test_adjoint_gradient_taylor_rate_two(shape, causal, pooled, seed):
    """dLoss/dx_0 from the adjoint recursion (Jacobian + Lions/masked Lions terms): remainder rate 2."""
    d, d_k, d_v, N, L, H = shape
    params, X0, loss = _problem(*shape, seed, pooled=pooled)
    model = AttentionTransformer(d, d_k, d_v, causal=causal, temperature=0.8, backend="numpy")
    check = _input_taylor(model, params, X0, loss, seed)
    assert _rate_two(check), check.statistics


@settings(max_examples=20, deadline=None)
@given(shapes, st.booleans(), st.integers(0, 10_000))
def test_parameter_gradient_taylor_rate_two(shape, causal, seed):
    d, d_k, d_v, N, L, H = shape
    params, X0, loss = _problem(*shape, seed)
    model = AttentionTransformer(d, d_k, d_v, causal=causal, backend="blas")
    check = _param_taylor(model, params, X0, loss, seed)
    assert _rate_two(check), check.statistics


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(3, 2, 4, 7, 3, 2), (3, 2, 4, 9, 2, 3)])  # one numba compile
def test_backends_agree(shape, causal):
    """numba (generated kernels) and blas agree with the numpy reference to 1e-12."""
    d, d_k, d_v, N, L, H = shape
    params, X0, loss = _problem(*shape, seed=3)
    ref = AttentionTransformer(d, d_k, d_v, causal=causal, temperature=0.6, backend="numpy")
    v0, g0, f0, a0 = ref.loss_and_grad(X0, params, loss)
    for backend in ("blas", "numba"):
        m = AttentionTransformer(d, d_k, d_v, causal=causal, temperature=0.6, backend=backend)
        v, g, f, a = m.loss_and_grad(X0, params, loss)
        assert np.abs(f.states - f0.states).max() < 1e-12
        assert np.abs(a.p - a0.p).max() < 1e-12
        for k in g0:
            assert np.abs(g[k] - g0[k]).max() < 1e-12 * max(1.0, np.abs(g0[k]).max()), (backend, k)


@pytest.mark.parametrize("causal", [False, True])
def test_numba_gradient_taylor(causal):
    d, d_k, d_v, N, L, H = 3, 2, 4, 7, 3, 2
    params, X0, loss = _problem(d, d_k, d_v, N, L, H, seed=5)
    model = AttentionTransformer(d, d_k, d_v, causal=causal, backend="numba")
    for check in (_input_taylor(model, params, X0, loss, 5), _param_taylor(model, params, X0, loss, 5)):
        # the finest three usable local orders all >= 1.9 (taylor_test's verdict), besides the fit
        rates = _usable_local_orders(check)
        assert check.passed and rates.size >= 2 and np.all(rates[-3:] >= 1.9), check.statistics


@settings(max_examples=20, deadline=None)
@given(shapes, st.integers(0, 10_000))
def test_permutation_equivariance_unmasked(shape, seed):
    """Unmasked: permuting the input tokens permutes the states and the adjoints."""
    d, d_k, d_v, N, L, H = shape
    params, X0, loss = _problem(*shape, seed)
    perm = np.random.default_rng(seed).permutation(N)
    model = AttentionTransformer(d, d_k, d_v, backend="blas")
    f = model.forward(X0, params)
    fp = model.forward(X0[perm], params)
    assert np.allclose(fp.states, f.states[:, perm], atol=1e-12, rtol=0)
    PL = np.random.default_rng(seed + 1).normal(size=X0.shape)
    a = model.backward(f, params, PL)
    ap = model.backward(fp, params, PL[perm])
    assert np.allclose(ap.p, a.p[:, perm], atol=1e-12, rtol=0)


def test_causal_token_sees_only_prefix():
    d, d_k, d_v, N, L, H = 3, 2, 4, 6, 3, 2
    params, X0, _ = _problem(d, d_k, d_v, N, L, H, seed=1)
    model = AttentionTransformer(d, d_k, d_v, causal=True, backend="numba")
    X1 = X0.copy()
    X1[4:] += 0.5
    a, b = model.output(X0, params), model.output(X1, params)
    assert np.abs(a[:4] - b[:4]).max() == 0.0 and np.abs(a[4:] - b[4:]).max() > 1e-3


@pytest.mark.parametrize("causal", [False, True])
def test_dropping_lions_term_breaks_taylor_test(causal):
    """Deliberately wrong model: adjoint without the (masked) Lions term -> remainder rate ~1."""
    d, d_k, d_v, N, L, H = 3, 2, 4, 6, 2, 2
    params, X0, loss = _problem(d, d_k, d_v, N, L, H, seed=2, gain=2.0)
    for backend in ("numpy", "numba"):
        wrong = AttentionTransformer(d, d_k, d_v, causal=causal, backend=backend, lions_term=False)
        # the fitted remainder order is within 0.3 of 1 (the table says so) and the finest local order < 1.5
        with pytest.raises(AssertionError, match="a remainder of order 1 means") as failed:
            _input_taylor(wrong, params, X0, loss, 2)
        assert _finest_local_order(failed.value.check) < 1.5, str(failed.value)


def test_head_scale_options_and_errors():
    params, X0, _ = _problem(2, 2, 2, 4, 2, 4, seed=0)
    m1 = AttentionTransformer(2, 2, 2, backend="blas")
    m2 = AttentionTransformer(2, 2, 2, backend="blas", head_scale=inverse_sqrt_heads)
    assert np.allclose(m2.head_weights(2, 4), 2 * m1.head_weights(2, 4))
    assert np.allclose(m1.head_weights(2, 4, head_weights=np.full(4, 0.25)), m1.head_weights(2, 4))
    with pytest.raises(ValueError, match="backend"):
        AttentionTransformer(2, 2, 2, backend="torch")
    with pytest.raises(ValueError, match="params"):
        m1.forward(X0, {k: v[:, :, :1] for k, v in params.items()})
    with pytest.raises(ValueError, match="X0"):
        m1.forward(X0[:, :1], params)
    with pytest.raises(ValueError, match="domain"):
        sample_tokens(3, 2, domain="torus")


def test_adamw_box_radii_bounds():
    """Per-step drift bounds of docs/theory.md §A.4: coordinatewise AdamW moves each entry by <= lr*C_beta,
    blockwise AdamW moves each head matrix by <= lr*C_beta in Frobenius norm (no weight decay)."""
    from transformer_limits.numeric.optim.adamw import adamw_update_bound
    from transformer_limits.numeric.attention.training import train_with_radii

    d, d_k, d_v, N, L, H = 3, 2, 4, 6, 2, 2
    params, X0, loss = _problem(d, d_k, d_v, N, L, H, seed=4)
    model = AttentionTransformer(d, d_k, d_v, backend="blas")
    K, lr = 5, 1e-2
    bound = lr * sum(adamw_update_bound(0.9, 0.999, k) for k in range(1, K + 1))
    blk = train_with_radii(model, X0, params, loss, K, optimizer="blockwise", lr=lr, weight_decay=0.0)
    assert max(v[-1].max() for v in blk.drift_frobenius.values()) <= bound * (1 + 1e-12)
    co = train_with_radii(model, X0, params, loss, K, optimizer="adamw", lr=lr, weight_decay=0.0)
    for n, v in co.drift_frobenius.items():
        entries = np.prod(params[n].shape[2:])
        assert v[-1].max() <= bound * np.sqrt(entries) * (1 + 1e-12)
    assert co.losses[-1] < co.losses[0] and blk.max_radius().shape == (K + 1,)

# ------------------------------------------------------------------------------------------------
# Mutation-round tests (were tests/test_mutants_transformer_model.py): properties the mutation runs showed were not
# pinned down.
# ------------------------------------------------------------------------------------------------


D, DK, DV = 3, 2, 4


@pytest.mark.parametrize("change", ["missing O", "extra bias", "list"])
def test_params_must_be_exactly_the_four_head_matrices(change):
    model = AttentionTransformer(D, DK, DV, backend="numpy")
    params = init_params(2, 3, D, DK, DV, seed=0)
    X0 = np.random.default_rng(1).normal(size=(4, D))
    model.forward(X0, params)  # the well-formed set is accepted
    if change == "missing O":
        bad = {k: v for k, v in params.items() if k != "O"}
    elif change == "extra bias":
        bad = dict(params, b=np.zeros((2, 3, D)))
    else:
        bad = [params[k] for k in ("Q", "K", "V", "O")]
    with pytest.raises(ValueError, match="params must be a dict with keys"):
        model.check_params(bad)
    with pytest.raises(ValueError, match="params"):
        model.forward(X0, bad)


# ============================================================================ one loop, host and device
# The passes are written once against a Runtime; on ``numba-cuda-sim`` (switched on by tests/conftest.py
# where there is no NVIDIA device) they run on the simulator's device arrays:
#
#     x_{r+1}^i = x_r^i + sum_h c_{r,h} O_h sum_j P^h_ij V_h x_r^j,   P^h_ij = softmax_j(beta <Q_h x_r^i, K_h x_r^j>),
#     p_r = p_{r+1} + xbar_r (Jacobian + Lions terms),  dLoss/dtheta_{r,h} from p_{r+1} and the layer-r cache,
#
# for B independent problems in one launch per kernel: each problem's states, adjoints and gradients
# equal the NumPy reference backend run on that problem alone; the number of host <-> device copies of
# a forward + backward pass does not depend on the depth L (the states never leave the device between
# layers).  Small sizes (N = 5, d = 3).  The CPU batches (the loop over problems, float32 on blas/numpy,
# argument errors) are tested in tests/test_batched_simulators_cpu.py, whose batch builders and
# transcribed recursion are used here (one copy).

import test_batched_simulators_cpu as batched  # noqa: E402
from test_batched_simulators_cpu import _batch, _one, _rel, _softmax_states  # noqa: E402

from transformer_limits.numeric.attention.batched_layer import DeviceLayer, HostLayer  # noqa: E402
from transformer_limits.numeric.attention.transformer import ForwardPass  # noqa: E402
from transformer_limits.numeric.backends import REGISTRY  # noqa: E402
from transformer_limits.numeric.runtime import count_transfers  # noqa: E402

SIM = REGISTRY["numba-cuda-sim"]
needs_sim = pytest.mark.skipif(not SIM.available, reason=f"numba-cuda-sim unavailable: {SIM.reason}")
on_the_simulator = [pytest.mark.cudasim, needs_sim]  # .ci/run's cudasim step


def _model(backend, causal=False, lions=True, **kw):
    return AttentionTransformer(batched.D, batched.DK, batched.DV, causal=causal, temperature=0.7, backend=backend,
                                lions_term=lions, **kw)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", ["numba", pytest.param("numba-cuda-sim", marks=on_the_simulator)])
def test_one_loop_runs_on_the_runtime_of_the_backend(backend, causal):
    """The forward and backward passes are the same loop on every backend: a pass keeps its arrays on one
    runtime (host arrays and the layer's host API for numba, the simulator's device arrays and the
    batched launches for numba-cuda-sim) and gives the NumPy reference's states, adjoints and gradients
    to 1e-12, per problem."""
    X, params, pL, w = _batch(50 + causal, False)
    m, ref = _model(backend, causal), _model("numpy", causal)
    fwd = m.forward_batch(X, params, w)
    adj = m.backward_batch(fwd, params, pL)
    on_device = backend == "numba-cuda-sim"
    assert fwd.run is not None and isinstance(fwd.run.ops, DeviceLayer if on_device else HostLayer)
    assert fwd.run.ops.rt.storage == ("simulator" if on_device else "host")
    for b in range(batched.B):
        one = _one(params, b, False)
        f = ref.forward(X[b], one, w[b])
        a = ref.backward(f, one, pL[b])
        assert _rel(fwd.states[:, b], f.states) <= 1e-12 and _rel(adj.p[:, b], a.p) <= 1e-12
        for k, g in a.grads.items():
            assert _rel(adj.grads[k][b], g) <= 1e-12, k


@pytest.mark.parametrize("backend", ["blas", pytest.param("numba-cuda-sim", marks=on_the_simulator)])
def test_backward_with_per_problem_copies_of_shared_parameters(backend):
    """A forward pass with shared parameters (L, H, ...) and a backward pass given the same parameters per
    problem (B, L, H, ...): the backward loop indexes the parameters as given, so the results are those
    of the shared backward (bit for bit)."""
    X, params, pL, _ = _batch(60, True)
    m = _model(backend, True)
    fwd = m.forward_batch(X, params)
    per = {k: np.stack([v] * batched.B) for k, v in params.items()}
    a, b = m.backward_batch(fwd, params, pL), m.backward_batch(fwd, per, pL)
    np.testing.assert_array_equal(a.p, b.p)
    for k in params:
        np.testing.assert_array_equal(a.grads[k], b.grads[k])


def test_backward_of_a_pass_given_by_its_host_arrays():
    """backward() of a ForwardPass built from states, caches and weights alone (no run) runs the host
    layer on them: the same bits as the backward of the pass itself."""
    X, params, pL, _ = _batch(61, True)
    m = _model("numba", True)
    fwd = m.forward(X[0], params)
    bare = ForwardPass(fwd.states, list(fwd.caches), fwd.weights)
    a, b = m.backward(fwd, params, pL[0]), m.backward(bare, params, pL[0])
    np.testing.assert_array_equal(a.p, b.p)
    for k in params:
        np.testing.assert_array_equal(a.grads[k], b.grads[k])


@pytest.mark.cudasim
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
    B, N, D = batched.B, batched.N, batched.D
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


@pytest.mark.cudasim
@needs_sim
@pytest.mark.parametrize("causal", [False, True])
def test_single_problem_api_and_loss_and_grad_batch(causal):
    """forward/backward/loss_and_grad keep their single-problem API on the device backend, and
    loss_and_grad_batch gives each problem's loss and gradient."""
    X, params, _, _ = _batch(40 + causal, True)
    losses = [SquaredErrorLoss(target_map(X[b], seed=b)) for b in range(batched.B)]
    sim, ref = _model("numba-cuda-sim", causal), _model("numpy", causal)
    values, grads, fwd, adj = sim.loss_and_grad_batch(X, params, losses)
    for b in range(batched.B):
        v, g, f, a = ref.loss_and_grad(X[b], params, losses[b])
        v1, g1, f1, a1 = sim.loss_and_grad(X[b], params, losses[b])
        assert abs(values[b] - v) <= 1e-12 * abs(v) and abs(v1 - v) <= 1e-12 * abs(v)
        assert _rel(f1.states, f.states) <= 1e-12 and _rel(a1.p, a.p) <= 1e-12
        for k in g:
            assert _rel(grads[k][b], g[k]) <= 1e-12 and _rel(g1[k], g[k]) <= 1e-12, k
    with pytest.raises(ValueError, match="losses"):
        sim.loss_and_grad_batch(X, params, losses[:2])


@pytest.mark.cudasim
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
    assert counts[0][2] == 11  # parameters (4) twice, head weights, x_0, p_L


@pytest.mark.cudasim
@needs_sim
def test_lazy_caches_and_mean_field_exact_mode_on_the_device():
    """fwd.caches (fetched from the device once) feed the host layer VJP, and the exact-expectation
    mode of the mean-field code (head weights = atom weights) gives the NumPy loss and node gradients."""
    from transformer_limits.numeric.attention.mean_field import HeadLaw, discrete_node_loss_and_grad

    X, params, pL, _ = _batch(9, True)
    sim, ref = _model("numba-cuda-sim", True), _model("numpy", True)
    fwd = sim.forward(X[0], params)
    with count_transfers() as log:
        caches = [fwd.caches[r] for r in range(batched.L)]
    assert log.to_host == 5 and len(fwd.caches) == batched.L
    xbar = sim.layer.vjp(fwd.states[0], *(params[k][0] for k in "QKVO"), fwd.weights[0], caches[0], pL[0])[0]
    f = ref.forward(X[0], params)
    want = ref.layer.vjp(f.states[0], *(params[k][0] for k in "QKVO"), f.weights[0], f.caches[0], pL[0])[0]
    assert _rel(xbar, want) <= 1e-12
    law = HeadLaw.random(3, 4, batched.D, batched.DK, batched.DV, seed=2, gain=1.5)
    X0 = sample_tokens(batched.N, batched.D, domain="ball", seed=3)
    loss = SquaredErrorLoss(target_map(X0, seed=4))
    (v0, g0, _), (v1, g1, _) = (discrete_node_loss_and_grad(_model(b), X0, law, loss, 4)
                                for b in ("numpy", "numba-cuda-sim"))
    assert abs(v1 - v0) <= 1e-12 * abs(v0)
    for k in g0:
        assert _rel(g1[k], g0[k]) <= 1e-12, k


@pytest.mark.cudasim
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


@pytest.mark.cudasim
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


@pytest.mark.parametrize("causal", [False, True])
def test_backward_without_gradients_is_the_same_adjoint(causal):
    """``grads=False`` (the sup search's input gradient p_0) gives the adjoints bit for bit and no
    parameter gradients, on every CPU backend; so does the layer's ``param_grads=False``."""
    shape = (3, 2, 4, 7, 3, 2)  # the shapes of test_backends_agree: no new numba compile
    d, d_k, d_v, N, L, H = shape
    params, X0, loss = _problem(*shape, seed=4)
    for backend in ("numpy", "blas", "numba"):
        m = AttentionTransformer(d, d_k, d_v, causal=causal, temperature=0.6, backend=backend)
        fwd = m.forward(X0, params)
        pL = loss.grad(fwd.states[-1])
        full, bare = m.backward(fwd, params, pL), m.backward(fwd, params, pL, grads=False)
        np.testing.assert_array_equal(bare.p, full.p)
        assert bare.grads == {} and set(full.grads) == set(params)
        args = (fwd.states[0], params["Q"][0], params["K"][0], params["V"][0], params["O"][0], fwd.weights[0],
                fwd.caches[0], pL)
        xbar, *dtheta = m.layer.vjp(*args, param_grads=False)
        np.testing.assert_array_equal(xbar, m.layer.vjp(*args)[0])
        assert dtheta == [None] * 4
