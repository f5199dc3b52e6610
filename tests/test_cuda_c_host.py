"""The CUDA C kernels of every family, executed on the CPU (tests/cuda_c_host.py) against NumPy.

Without a GPU the ``cuda-c`` sources were only compiled (tests/test_cuda_c_precision.py); here they
run.  ``host_cupy()`` puts a host emulation of CuPy in ``sys.modules``: the package's own loader
compiles ``cuda_c_program(source, precision)`` (g++ instead of NVRTC) and its own runners launch the
kernels (``Runtime.call`` and ``c_arguments``, the 2-D pair launches of the attention kernels,
the layer's and the batched transformer's launches), so the launch arithmetic and the argument
marshalling are the real ones.  Every family in float64 (to 1e-12, norm-wise) and float32 (to 1e-5)
against the NumPy reference, with d = 3, d_k = 2, d_v = 4 (all different), N != M, H = 2, sizes
spanning more than one block; each run is repeated with the threads in reverse order (bitwise the same
result: no races) and must have launched every kernel of its source.

The attention, flow-jet and elementwise families run in float64 only in the package (their runners
take no precision); their float32 runs here use the same runner with ``Runtime(..., "float32")``
and the float32 compile substituted.  The last tests plant faults in the generated source text (a
d_v stride replaced by the d stride, a transposed index, an off-by-one bound, a wrong thread index, a
batch index) and show that each is caught.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import cuda_c_host
from cuda_c_host import DeviceMemoryError, compiler, host_cupy, kernel_signatures, launch_order, record_launches
from transformer_limits.numeric import elementwise
from transformer_limits.numeric.attention import flow_taylor, kernels
from transformer_limits.numeric.attention.layer import AttentionLayer
from transformer_limits.numeric.attention.reference import (attention_reference, flat_reference, jacobian_reference,
                                                            lions_reference)
from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params
from transformer_limits.numeric.runtime import Runtime
from transformer_limits.numeric.kernel_family import (ATTENTION, ELEMENTWISE_ACTIVATION, FLOW_TAYLOR_JET, LAYER_ADJOINT,
                                                      MLP_FIELD, cuda_c_program, load_source)
from transformer_limits.numeric.sphere.mlp_field import MLPFieldKernels
from transformer_limits.symbolic.mlp_kernel import ACTIVATIONS

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C++ compiler (g++, c++ or clang++) on PATH: the "
                                                           "host emulation of the CUDA C kernels needs one")

D, DK, DV, H = 3, 2, 4, 2  # d, d_k, d_v all different; more than one head
PRECISIONS = ("float64", "float32")
RTOL = {"float64": 1e-12, "float32": 1e-5}
DTYPE = {"float64": np.float64, "float32": np.float32}


@pytest.fixture(scope="module")
def fake_cupy():
    with host_cupy() as module:
        yield module


@pytest.fixture
def host(fake_cupy):
    """The fake cupy, with the package's loader caches emptied after the test (they may hold a
    module compiled from a planted fault)."""
    yield fake_cupy
    for cache in cuda_c_host._loader_caches():
        cache.cache_clear()


# ------------------------------------------------------------------ helpers
def _rounded(precision: str, *arrays: np.ndarray) -> list[np.ndarray]:
    """The inputs as the kernels see them (float32: rounded), in float64 for the reference."""
    return [np.asarray(a, dtype=DTYPE[precision]).astype(np.float64) for a in arrays]


def _close(got: Any, ref: Any, precision: str, what: str, rtol: float | None = None) -> None:
    got = np.asarray(got)
    assert got.dtype == DTYPE[precision], f"{what}: computed in {got.dtype}, not {precision}"
    assert got.shape == np.shape(ref), f"{what}: shape {got.shape} != {np.shape(ref)}"
    assert np.all(np.isfinite(got)), f"{what}: {np.sum(~np.isfinite(got))} non-finite entries (entries never written?)"
    err = np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-300)
    rtol = RTOL[precision] if rtol is None else rtol
    assert err <= rtol, f"{what} ({precision}): relative error {err:.3g} > {rtol}"


def _flatten(x: Any) -> list[np.ndarray]:
    if isinstance(x, np.ndarray):
        return [x]
    if isinstance(x, dict):
        return [a for k in sorted(x) for a in _flatten(x[k])]
    return [a for item in x for a in _flatten(item)]


def _orders(run: Callable[[], Any]) -> Any:
    """``run()`` forward and reversed; every array of the (nested) results bitwise equal."""
    first = run()
    with launch_order("reverse"):
        again = run()
    for a, b in zip(_flatten(first), _flatten(again), strict=True):
        assert np.array_equal(a, b, equal_nan=True), "the result depends on the order of the threads"
    return first


@contextmanager
def _at_precision(monkeypatch: pytest.MonkeyPatch, module: Any, precision: str) -> Iterator[None]:
    """float32: ``module``'s runner gets Runtime of float32 (and its load_source the float32 compile)."""
    with monkeypatch.context() as m:
        if precision != "float64":
            m.setattr(module, "Runtime", lambda backend, *_: Runtime(backend, precision))
            if hasattr(module, "load_source"):
                m.setattr(module, "load_source", lambda path, flavour, *_: load_source(path, flavour, precision))
        yield


def _every_kernel_ran(launched: list[str], family: Any, **params: Any) -> None:
    source = family.source_path("cuda-c", **params).read_text(encoding="utf-8")
    assert set(launched) == set(kernel_signatures(source)), f"{family.name}: launched {sorted(set(launched))}"


# ------------------------------------------------------------------ the families
def check_attention(precision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ATTENTION: forward, Jacobian, Lions and flat derivative (AttentionKernels' cupy runner)."""
    rng = np.random.default_rng(11)
    N, M = 131, 19  # 2 blocks of 128 for the token kernels; a (9, 2) grid of 16 x 16 for the pair kernels
    X, Y = rng.normal(size=(N, D)), rng.normal(size=(M, D))
    Q, K, V = 0.6 * rng.normal(size=(DK, D)), 0.6 * rng.normal(size=(DK, D)), rng.normal(size=(DV, D))
    w = rng.dirichlet(np.ones(M))
    w[3] = 0.0  # a zero-weight atom: must not set the softmax shift
    X, Y, Q, K, V, w = _rounded(precision, X, Y, Q, K, V, w)
    with _at_precision(monkeypatch, kernels, precision), record_launches() as launched:
        kern = kernels.AttentionKernels(D, DK, DV, backend="cupy")
        A, logz = _orders(lambda: kern.forward(X, Y, Q, K, V, w))
        J = _orders(lambda: kern.jacobian(X, Y, Q, K, V, w))
        L = _orders(lambda: kern.lions_derivative(X, Y, Q, K, V, w))
        F = _orders(lambda: kern.flat_derivative(X, Y, Q, K, V, w))
    logits = (X @ Q.T) @ (Y @ K.T).T
    ref_logz = np.log(np.sum(w * np.exp(logits - logits.max(axis=1, keepdims=True)), axis=1)) + logits.max(axis=1)
    _close(A, attention_reference(X, Y, Q, K, V, w), precision, "attention")
    _close(logz, ref_logz, precision, "log Z")
    _close(J, jacobian_reference(X, Y, Q, K, V, w), precision, "Jacobian")
    _close(L, lions_reference(X, Y, Q, K, V, w), precision, "Lions derivative")
    _close(F, flat_reference(X, Y, Q, K, V, w), precision, "flat derivative")
    _every_kernel_ran(launched, ATTENTION, d=D, d_k=DK, d_v=DV)


def _layer_problem(rng, N):
    return (rng.normal(size=(N, D)), 0.8 * rng.normal(size=(H, DK, D)), 0.8 * rng.normal(size=(H, DK, D)),
            rng.normal(size=(H, DV, D)), rng.normal(size=(H, D, DV)), rng.normal(size=H), rng.normal(size=(N, D)))


def check_layer(precision: str, causal: bool, lions: bool) -> None:
    """LAYER_ADJOINT: the field and the whole VJP of one layer (AttentionLayer's cupy runner)."""
    X, Qs, Ks, Vs, Os, c, PC = _rounded(precision, *_layer_problem(np.random.default_rng(5 + causal), 67))
    with record_launches() as launched:  # H N = 134 threads: 2 blocks
        layer = AttentionLayer(D, DK, DV, causal=causal, temperature=0.7, backend="cupy", precision=precision)

        def run():
            F, cache = layer.field(X, Qs, Ks, Vs, Os, c)
            return F, layer.vjp(X, Qs, Ks, Vs, Os, c, cache, PC, lions=lions)
        F, grads = _orders(run)
    ref = AttentionLayer(D, DK, DV, causal=causal, temperature=0.7, backend="numpy")
    F_ref, cache = ref.field(X, Qs, Ks, Vs, Os, c)
    _close(F, F_ref, precision, "layer field")
    for name, got, want in zip(("xbar", "dQ", "dK", "dV", "dO"), grads,
                               ref.vjp(X, Qs, Ks, Vs, Os, c, cache, PC, lions=lions)):
        _close(got, want, precision, f"layer {name} (causal={causal}, lions={lions})")
    _every_kernel_ran(launched, LAYER_ADJOINT, d=D, d_k=DK, d_v=DV)


def check_transformer_batch(precision: str, shared: bool, causal: bool) -> None:
    """LAYER_ADJOINT in the device-resident transformer: B problems per launch, shared (PB = 1) or
    per-problem (PB = B) parameters, L layers forward and backward."""
    B, L, N = 3, 2, 23  # B H N = 138 threads
    rng = np.random.default_rng(30 + shared + 2 * causal)
    if shared:
        params = init_params(L, H, D, DK, DV, seed=3, gain=1.5)
    else:
        per = [init_params(L, H, D, DK, DV, seed=3 + 10 * b, gain=1.5) for b in range(B)]
        params = {k: np.stack([p[k] for p in per]) for k in per[0]}
    params = dict(zip(params, _rounded(precision, *params.values())))
    X, pL = _rounded(precision, rng.normal(size=(B, N, D)), rng.normal(size=(B, N, D)))
    w = rng.uniform(0.5, 1.5, size=(B, L, H))
    gpu = AttentionTransformer(D, DK, DV, causal=causal, temperature=0.7, backend="cupy", precision=precision)
    ref = AttentionTransformer(D, DK, DV, causal=causal, temperature=0.7, backend="numpy")

    # two layers forward and back in float32: NumPy's own float32 run is off by up to 9e-6 here, the
    # kernels' sequential float32 sums over the keys by up to 3.3e-5 (float64: 3e-14)
    rtol = 1e-4 if precision == "float32" else None

    def run():
        fwd = gpu.forward_batch(X, params, w)
        adj = gpu.backward_batch(fwd, params, pL)
        return fwd.states, adj.p, adj.grads
    states, p, grads = _orders(run)
    for b in range(B):
        one = params if shared else {k: v[b] for k, v in params.items()}
        f = ref.forward(X[b], one, w[b])
        a = ref.backward(f, one, pL[b])
        _close(states[:, b], f.states, precision, f"states of problem {b}", rtol)
        _close(p[:, b], a.p, precision, f"adjoints of problem {b}", rtol)
        for k, g in a.grads.items():
            _close(grads[k][b], g, precision, f"gradient {k} of problem {b}", rtol)


def check_mlp_field(precision: str, activation: str) -> None:
    """MLP_FIELD: features, the field and the zonal kernel matrix (MLPFieldKernels' cupy runner)."""
    rng = np.random.default_rng(ACTIVATIONS.index(activation))
    N, m = 131, 5  # tokens, features, d = D = 3: all different
    Y, U, b_U, W, b_W = _rounded(precision, rng.normal(size=(N, D)), rng.normal(size=(m, D)), rng.normal(size=m),
                                 rng.normal(size=(D, m)), rng.normal(size=D))
    X = rng.normal(size=(20, D))
    X = _rounded(precision, 0.9 * X / np.linalg.norm(X, axis=1, keepdims=True))[0]
    X[0] = 0.0
    X[0, 0] = 1.0  # rho = 1 exactly: the clamp's upper end
    with record_launches() as launched:
        kern = MLPFieldKernels(activation, "cupy", precision)
        feats, field, kmat = _orders(lambda: (kern.features(Y, U, b_U), kern.mlp_field(Y, U, b_U, W, b_W),
                                              kern.kernel_matrix(X, 0.3, 0.2)))
    ref = MLPFieldKernels(activation, "numpy")
    _close(feats, ref.features(Y, U, b_U), precision, f"{activation} features")
    _close(field, ref.mlp_field(Y, U, b_U, W, b_W), precision, f"{activation} MLP field")
    _close(kmat, ref.kernel_matrix(X, 0.3, 0.2), precision, f"{activation} kernel matrix")
    _every_kernel_ran(launched, MLP_FIELD, activation=activation)


def check_jet(precision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """FLOW_TAYLOR_JET: A, dA/ds, d^2A/ds^2 (attention_jet's cupy runner)."""
    rng = np.random.default_rng(4)
    N, M = 131, 9
    args = _rounded(precision, rng.normal(size=(N, D)), rng.normal(size=(N, D)), rng.normal(size=(M, D)),
                    rng.normal(size=(M, D)), rng.dirichlet(np.ones(M)), 0.7 * rng.normal(size=(DK, D)),
                    0.7 * rng.normal(size=(DK, D)), rng.normal(size=(DV, D)))
    with monkeypatch.context() as m, record_launches() as launched:
        if precision != "float64":
            m.setattr(flow_taylor, "Runtime", lambda backend, *_: Runtime(backend, precision))
            m.setattr(flow_taylor, "_jet_module", lambda d, d_k, d_v, backend: FLOW_TAYLOR_JET.load(
                backend, precision=precision, d=d, d_k=d_k, d_v=d_v))
        got = _orders(lambda: flow_taylor.attention_jet(*args, backend="cupy"))
    for k, (a, b) in enumerate(zip(got, flow_taylor.attention_jet(*args, backend="numpy"))):
        _close(a, b, precision, f"jet order {k}")
    _every_kernel_ran(launched, FLOW_TAYLOR_JET, d=D, d_k=DK, d_v=DV)


def check_elementwise(precision: str, activation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ELEMENTWISE_ACTIVATION: phi and phi' (ElementwiseKernel's cupy runner), 303 entries: 3 blocks."""
    z = _rounded(precision, np.linspace(-4.0, 4.0, 303).reshape(3, 101))[0]  # holds 0 exactly
    assert np.any(z == 0.0)
    with monkeypatch.context() as m, record_launches() as launched:
        if precision == "float64":
            kern = elementwise.elementwise_activation(activation, "cupy")
        else:
            m.setattr(elementwise, "Runtime", lambda backend, *_: Runtime(backend, precision))
            module = ELEMENTWISE_ACTIVATION.load("cupy", precision=precision, activation=activation)
            kern = elementwise.ElementwiseKernel(module, "cupy", ["x"], ["phi", "dphi"])
        got = _orders(lambda: kern(z))
    want = elementwise.elementwise_activation(activation, "numpy")(z)
    for name in ("phi", "dphi"):
        _close(got[name], want[name], precision, f"{activation} {name}")
    _every_kernel_ran(launched, ELEMENTWISE_ACTIVATION, activation=activation)


# ------------------------------------------------------------------ every family, both precisions
@pytest.mark.parametrize("precision", PRECISIONS)
def test_attention_kernels_run_on_the_host(host, precision, monkeypatch):
    check_attention(precision, monkeypatch)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("causal, lions", [(False, True), (True, True), (False, False)])
def test_layer_field_and_vjp_run_on_the_host(host, precision, causal, lions):
    check_layer(precision, causal, lions)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("shared", [True, False])
def test_batched_transformer_runs_on_the_host(host, precision, shared):
    check_transformer_batch(precision, shared, causal=not shared)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_mlp_field_kernels_run_on_the_host(host, precision, activation):
    check_mlp_field(precision, activation)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_flow_jet_runs_on_the_host(host, precision, monkeypatch):
    check_jet(precision, monkeypatch)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_elementwise_activations_run_on_the_host(host, precision, activation, monkeypatch):
    check_elementwise(precision, activation, monkeypatch)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_sphere_simulators_run_on_the_host(host, precision):
    """The device-resident paper-B simulators (MLP_FIELD kernels between array operations of cupy, here
    NumPy's): the common-noise SDE (GELU, three systems) and the sphere transformer (tanh)."""
    from transformer_limits.numeric.sphere.common_noise_sde import CommonNoiseSDE
    from transformer_limits.numeric.sphere.transformer import SphereTransformer, uniform_sphere

    systems = [uniform_sphere(5, D, np.random.default_rng(k)) for k in range(3)]
    X0 = uniform_sphere(6, D, np.random.default_rng(7))
    with record_launches() as launched:
        got = CommonNoiseSDE(D, "gelu", 0.5, 0.4, attention="attractive", beta=1.5, backend="cupy",
                             precision=precision).simulate_systems(systems, 0.5, 8, 10, 11, eval_steps=[0, 3, 8])
        run = SphereTransformer(D, 12, 4, activation="tanh", sigma_u=0.3, backend="cupy", precision=precision).run(X0, 5)
    ref = CommonNoiseSDE(D, "gelu", 0.5, 0.4, attention="attractive", beta=1.5).simulate_systems(
        systems, 0.5, 8, 10, 11, eval_steps=[0, 3, 8])
    for k, (g, r) in enumerate(zip(got, ref, strict=True)):
        _close(g, r, precision, f"common-noise SDE, system {k}")
    _close(run, SphereTransformer(D, 12, 4, activation="tanh", sigma_u=0.3).run(X0, 5), precision, "sphere transformer")
    _every_kernel_ran(launched, MLP_FIELD, activation="gelu")


# ------------------------------------------------------------------ planted faults are caught
#: (family check, text of the fault-free source, planted text, occurrence): every fault below fails
#: its family's check
FAULTS = {
    "attention: forward reads VF with the d stride instead of d_v": (
        "attention", "acc_1 += e * VF[j * 4 + 1];", "acc_1 += e * VF[j * 3 + 1];", 0),
    "attention: lions kernel takes the key index from threadIdx.x": (
        "attention", "blockDim.y * blockIdx.y + threadIdx.y", "blockDim.y * blockIdx.y + threadIdx.x", 0),
    "layer: adjoint_keys reads VT with the d stride instead of d_v": (
        "layer", "const real v_2 = VT[((bh) * 4 + 2) * N + j];", "const real v_2 = VT[((bh) * 3 + 2) * N + j];", 1),
    "transformer: features ignores the per-problem parameters": (
        "batch", "const long long ph = (PB > 1 ? bh : h);", "const long long ph = h;", 0),
    "mlp: the field reads W transposed": ("mlp", "W[a * m + k]", "W[k * D + a]", 0),
    "jet: A1 written with the d stride instead of d_v": ("jet", "A1[i * 4 + 2] = acc1_2;", "A1[i * 3 + 2] = acc1_2;", 0),
    "elementwise: off-by-one bound (writes one past the end)": (
        "elementwise", "if (i >= n) return;", "if (i > n) return;", 0),
    "elementwise: thread index without blockDim": (
        "elementwise", "(long long)blockDim.x * blockIdx.x + threadIdx.x", "(long long)blockIdx.x + threadIdx.x", 0),
}


def _plant(code: str, old: str, new: str, occurrence: int) -> str:
    at = -1
    for _ in range(occurrence + 1):
        at = code.find(old, at + 1)
        assert at >= 0, f"{old!r} occurs fewer than {occurrence + 1} times: the fault cannot be planted"
    return code[:at] + new + code[at + len(old):]


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_planted_fault_in_the_cuda_c_source_is_caught(host, fault, monkeypatch):
    check, old, new, occurrence = FAULTS[fault]
    planted: list[str] = []
    real = host.RawModule

    def faulty(code: str, **kwargs: Any) -> Any:
        if old in code:
            code = _plant(code, old, new, occurrence)
            planted.append(code)
        return real(code=code, **kwargs)

    monkeypatch.setattr(host, "RawModule", faulty)
    runs: dict[str, Callable[[], None]] = {
        "attention": lambda: check_attention("float64", monkeypatch),
        "layer": lambda: check_layer("float64", causal=False, lions=True),
        "batch": lambda: check_transformer_batch("float64", shared=False, causal=False),
        "mlp": lambda: check_mlp_field("float64", "gelu"),
        "jet": lambda: check_jet("float64", monkeypatch),
        "elementwise": lambda: check_elementwise("float64", "silu", monkeypatch),
    }
    with pytest.raises(AssertionError) as caught:
        runs[check]()
    assert planted, "the fault was never planted"
    print(f"{fault}: {str(caught.value).splitlines()[0]}")


def test_an_out_of_bounds_write_is_reported_as_such(host, monkeypatch):
    real = host.RawModule
    monkeypatch.setattr(host, "RawModule", lambda code, **kw: real(code=_plant(
        code, "if (i >= n) return;", "if (i > n) return;", 0), **kw))
    with pytest.raises(DeviceMemoryError, match=r"wrote \d+ byte.*argument 1 \(OUT_phi"):
        elementwise.elementwise_activation("relu", "cupy")(np.ones(5))


def test_marshalling_is_checked_against_the_kernel_parameters(host, monkeypatch):
    """Without c_arguments a Python bool would reach `const int causal` (CuPy passes one byte), and in
    float32 a Python float would reach `const real beta` as a double: the emulation refuses both, as
    a GPU would read garbage."""
    X, Qs, Ks, Vs, Os, c, _ = _layer_problem(np.random.default_rng(0), 4)
    monkeypatch.setattr(Runtime, "c_arguments", lambda self, args: tuple(args))
    with pytest.raises(TypeError, match=r"forward, argument 6 \(int causal\): got a bool scalar"):
        AttentionLayer(D, DK, DV, backend="cupy").field(X, Qs, Ks, Vs, Os, c)
    with pytest.raises(TypeError, match=r"argument 5 \(real beta\): got a float64 scalar"):
        AttentionLayer(D, DK, DV, backend="cupy", precision="float32").field(X, Qs, Ks, Vs, Os, c)


def test_host_arrays_bad_launches_and_unsupported_sources_are_refused(host):
    program = cuda_c_program(ELEMENTWISE_ACTIVATION.source_path("cuda-c", activation="relu").read_text(), "float32")
    kernel = host.RawModule(code=program).get_function("kernel")
    x = host.asarray(np.array([-1.0, 0.0, 2.0], dtype=np.float32))
    phi, dphi = host.empty(3, dtype=np.float32), host.empty(3, dtype=np.float32)
    with pytest.raises(TypeError, match="host NumPy array"):
        kernel((1,), (3,), (np.ones(3, dtype=np.float32), phi, dphi, np.int64(3)))
    with pytest.raises(TypeError, match="float64 array"):
        kernel((1,), (3,), (host.asarray(np.ones(3)), phi, dphi, np.int64(3)))
    with pytest.raises(TypeError, match="non-contiguous"):
        kernel((1,), (3,), (host.asarray(np.ones(6, dtype=np.float32))[::2], phi, dphi, np.int64(3)))
    with pytest.raises(TypeError, match="takes 4 arguments"):
        kernel((1,), (3,), (x, phi, dphi))
    with pytest.raises(TypeError, match=r"argument 3 \(long long n\): got a int32 scalar"):
        kernel((1,), (3,), (x, phi, dphi, np.int32(3)))
    with pytest.raises(ValueError, match="invalid launch configuration"):
        kernel((1,), (1025,), (x, phi, dphi, 3))
    assert np.all(np.isnan(host.asnumpy(phi)))  # empty: NaN until written
    kernel((1,), (4,), (x, phi, dphi, 3))  # a Python int is a long long, as in CuPy; thread 3 returns
    assert np.array_equal(host.asnumpy(phi), [0.0, 0.0, 2.0]) and np.array_equal(host.asnumpy(dphi), [0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="__syncthreads"):
        cuda_c_host.host_program(program.replace("if (i >= n) return;", "__syncthreads();"))
