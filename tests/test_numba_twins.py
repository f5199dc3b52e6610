"""Serial twins of the python-numba kernels (transformer_limits/numeric/numba_twins.py).

What must hold:

* the twin is the generated source with ``parallel=False`` in every parallel decorator and nothing
  else changed (every family, float64 and float32 sources);
* the twins agree **bit for bit** on every family's kernels, for problems large enough that the
  parallel twin really splits its ``prange`` over threads (so the choice of twin is a matter of speed
  alone); the comparison is not vacuous: both twins of every kernel involved are shown to have run
  (each compiled), and a planted twin that differs by one ulp is caught;
* the choice: one Numba thread -> serial; a launch shape whose first serial run is short stays
  serial; otherwise TIMINGS timed runs of each twin decide; a launch that compiled decides nothing;
  shapes are decided apart; :func:`forced` pins the twin.
"""

from __future__ import annotations

import difflib
import types

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from transformer_limits.numeric import numba_twins  # noqa: E402
from transformer_limits.numeric.attention.flow_taylor import attention_jet  # noqa: E402
from transformer_limits.numeric.attention.kernels import SYMMETRIC_MIN_TOKENS, AttentionKernels  # noqa: E402
from transformer_limits.numeric.attention.layer import SERIAL_TOKENS, AttentionLayer, _tasks  # noqa: E402
from transformer_limits.numeric.elementwise import elementwise_activation  # noqa: E402
from transformer_limits.numeric.flavours import PYTHON_NUMBA  # noqa: E402
from transformer_limits.numeric.kernel_family import (ATTENTION, ELEMENTWISE_ACTIVATION, FAMILIES,  # noqa: E402
                                                      FLOW_TAYLOR_JET, LAYER_ADJOINT, MLP_FIELD)
from transformer_limits.numeric.numba_twins import (PARALLEL_ONLY_S, TIMINGS, TwinKernel, forced,  # noqa: E402
                                                     serial_source)
from transformer_limits.numeric.sphere.mlp_field import mlp_field_kernels  # noqa: E402

INSTANCES = {ATTENTION.name: dict(d=3, d_k=2, d_v=3), LAYER_ADJOINT.name: dict(d=3, d_k=2, d_v=4),
             MLP_FIELD.name: dict(activation="gelu"), FLOW_TAYLOR_JET.name: dict(d=2, d_k=2, d_v=3),
             ELEMENTWISE_ACTIVATION.name: dict(activation="silu")}


# ------------------------------------------------------------------ the source
@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_twin_differs_only_in_the_parallel_flag(family, precision):
    import importlib

    fam = FAMILIES[family]
    module, _, function = fam.generator.partition(":")
    kwargs = dict(INSTANCES[family], **({} if precision == "float64" else {"precision": precision}))
    source = getattr(importlib.import_module(module), function)(flavour=PYTHON_NUMBA.name, **kwargs)[1]
    twin = serial_source(source)
    parallel_lines = [ln for ln in source.splitlines() if ln.startswith("@numba.njit(") and "parallel=True" in ln]
    assert parallel_lines, "every family has parallel kernels"
    assert "parallel=True" not in twin
    changed = [(a, b) for a, b in zip(source.splitlines(), twin.splitlines()) if a != b]
    assert len(source.splitlines()) == len(twin.splitlines()) and len(changed) == len(parallel_lines)
    for a, b in changed:  # the one edit: the flag
        assert a.replace("parallel=True", "parallel=False") == b
    diff = "".join(difflib.unified_diff(source.splitlines(True), twin.splitlines(True)))
    assert diff.count("\n+@numba.njit(") == len(parallel_lines)


# ------------------------------------------------------------------ bit for bit
def _twin_kernels(module) -> list[TwinKernel]:
    return list(module._kernels.values())


def _both(run, modules):
    """run() under each forced twin; every TwinKernel the run used must have run both twins."""
    with forced("serial"):
        serial = run()
    with forced("parallel"):
        parallel = run()
    used = [k for m in modules for k in _twin_kernels(m)]
    assert used, "the run used no twin kernel"
    for k in used:
        assert k.serial.overloads and k.parallel.overloads, "both twins must have run"
    assert any(k.parallel.targetoptions.get("parallel") for k in used)
    return serial, parallel


def _assert_bitwise(serial, parallel):
    for a, b in zip(serial, parallel, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), float(np.abs(a - b).max())


N = 37  # rows: several per thread, and not a multiple of the thread count


@pytest.mark.parametrize("weights", [False, True])
def test_attention_kernels_twins_agree_bit_for_bit(weights):
    rng = np.random.default_rng(0)
    d, dk, dv, M = 3, 2, 3, 29
    X, Y = rng.standard_normal((N, d)), rng.standard_normal((M, d))
    Q, K, V = rng.standard_normal((dk, d)), rng.standard_normal((dk, d)), rng.standard_normal((dv, d))
    w = rng.uniform(0, 1, M) if weights else None
    k = AttentionKernels(d, dk, dv, "numba")
    # a symmetric head (Q^T K = diag(1, 1, 0)) on enough tokens for the symmetric kernel
    E, Z = np.eye(d)[:dk], rng.uniform(-0.5, 0.5, (SYMMETRIC_MIN_TOKENS + 3, d))

    def run():
        return [k.attention(X, Y, Q, K, V, w), k.jacobian(X, Y, Q, K, V, w), k.lions_derivative(X, Y, Q, K, V, w),
                k.flat_derivative(X, Y, Q, K, V, w), k.self_attention(Q, K, V)(X), k.self_attention(E, E, V)(Z)]

    _assert_bitwise(*_both(run, [k._module]))


def layer_problem(rng, tokens, d, dk, dv, H):
    """X, PC (tokens, d), Qs, Ks (H, d_k, d), Vs (H, d_v, d), Os (H, d, d_v), c (H,), drawn in that order."""
    X, PC = rng.standard_normal((tokens, d)), rng.standard_normal((tokens, d))
    Qs, Ks = rng.standard_normal((H, dk, d)), rng.standard_normal((H, dk, d))
    Vs, Os = rng.standard_normal((H, dv, d)), rng.standard_normal((H, d, dv))
    return X, PC, Qs, Ks, Vs, Os, rng.uniform(0.1, 1.0, H)


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("causal", [False, True])
def test_layer_field_and_adjoint_twins_agree_bit_for_bit(causal, precision):
    d, dk, dv, H = 3, 2, 4, 3
    X, PC, Qs, Ks, Vs, Os, c = layer_problem(np.random.default_rng(1), N, d, dk, dv, H)
    layer = AttentionLayer(d, dk, dv, causal=causal, backend="numba", precision=precision)

    stacked = [np.ascontiguousarray(np.stack([a, 0.5 * a])) for a in (Qs, Ks, Vs, Os, c)]  # two layers

    def run():
        F, cache = layer.field(X, Qs, Ks, Vs, Os, c)
        states, p = np.zeros((3,) + X.shape, layer.dtype), np.zeros((3,) + X.shape, layer.dtype)
        states[0], p[2] = X, PC
        stack = layer.field_stack(states, *(a.astype(layer.dtype) for a in stacked))
        layer.xbar_stack(p, *(a.astype(layer.dtype) for a in stacked), stack)
        return [F, *layer.vjp(X, Qs, Ks, Vs, Os, c, cache, PC, lions=True),
                layer.vjp(X, Qs, Ks, Vs, Os, c, cache, PC, lions=False, param_grads=False)[0], states, p]

    _assert_bitwise(*_both(run, [layer._module]))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tokens", [SERIAL_TOKENS, SERIAL_TOKENS + 1])
def test_one_and_many_row_tasks_give_the_blas_layer(tokens, causal):
    """Either side of SERIAL_TOKENS (one row task; MIN_TASKS tasks with partials summed in finish) the
    numba field and VJP are the BLAS layer's to rounding."""
    assert (_tasks(tokens) == 1) is (tokens <= SERIAL_TOKENS)
    d, dk, dv, H = 3, 2, 4, 5
    X, PC, Qs, Ks, Vs, Os, c = layer_problem(np.random.default_rng(4), tokens, d, dk, dv, H)
    got, want = (AttentionLayer(d, dk, dv, causal=causal, backend=b) for b in ("numba", "blas"))
    Fg, cg = got.field(X, Qs, Ks, Vs, Os, c)
    Fw, cw = want.field(X, Qs, Ks, Vs, Os, c)
    np.testing.assert_allclose(Fg, Fw, rtol=1e-12, atol=1e-13)
    for a, b in zip(got.vjp(X, Qs, Ks, Vs, Os, c, cg, PC), want.vjp(X, Qs, Ks, Vs, Os, c, cw, PC), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_mlp_field_flow_jet_and_elementwise_twins_agree_bit_for_bit():
    rng = np.random.default_rng(2)
    d, m = 3, 11
    X = rng.standard_normal((N, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    U, bU, W, bW = rng.standard_normal((m, d)), rng.standard_normal(m), rng.standard_normal((d, m)), rng.standard_normal(d)
    mlp = mlp_field_kernels("gelu", backend="numba")
    Xj, DX, Y, DY = (rng.standard_normal((N, 2)) for _ in range(4))
    wj = rng.uniform(0, 1, N)
    Qj, Kj, Vj = rng.standard_normal((2, 2)), rng.standard_normal((2, 2)), rng.standard_normal((3, 2))
    act = elementwise_activation("silu", backend="numba")
    z = rng.standard_normal(101)

    def run():
        return [mlp.features(X, U, bU), mlp.mlp_field(X, U, bU, W, bW), mlp.kernel_matrix(X, 0.7, 1.3),
                *attention_jet(Xj, DX, Y, DY, wj, Qj, Kj, Vj, backend="numba"), *act(z).values()]

    modules = [mlp._module, FLOW_TAYLOR_JET.load("numba", d=2, d_k=2, d_v=3),
               ELEMENTWISE_ACTIVATION.load("numba", activation="silu")]
    _assert_bitwise(*_both(run, modules))


def test_a_twin_one_ulp_off_is_caught():
    rng = np.random.default_rng(3)
    d, dk, dv = 3, 2, 3
    X, Y = rng.standard_normal((N, d)), rng.standard_normal((N, d))
    Q, K, V = rng.standard_normal((dk, d)), rng.standard_normal((dk, d)), rng.standard_normal((dv, d))
    k = AttentionKernels(d, dk, dv, "numba")
    k.attention(X, Y, Q, K, V)
    twin = k._module._kernels["forward"]
    real_serial = twin.serial

    def off_by_one_ulp(*args):
        out = real_serial(*args)
        A = args[-2]
        A[0, 0] = np.nextafter(A[0, 0], np.inf)
        return out

    twin.serial = off_by_one_ulp
    twin.serial.overloads = real_serial.overloads  # type: ignore[attr-defined]
    try:
        with pytest.raises(AssertionError):
            _assert_bitwise(*_both(lambda: [k.attention(X, Y, Q, K, V)], [k._module]))
    finally:
        twin.serial = real_serial


# ------------------------------------------------------------------ the choice
class _Fake:
    """A stand-in dispatcher whose launch takes ``seconds`` on the fake clock (:data:`_CLOCK`, read by the
    chooser through the ``two_threads`` fixture: real sleeps made the choice depend on the host's load)
    and 'compiles' on its first launch."""

    def __init__(self, seconds: float, name: str):
        self.seconds, self.name, self.calls, self.overloads = seconds, name, 0, {}

    def __call__(self, *args):
        self.calls += 1
        if not self.overloads:
            self.overloads["sig"] = None  # the first launch compiles: its time must not count
            _CLOCK[0] += 0.05
        else:
            _CLOCK[0] += self.seconds
        return self.name


#: the fake clock's seconds
_CLOCK = [0.0]


def _launch(kernel: TwinKernel, n: int, *args) -> list[str]:
    return [kernel(*args) for _ in range(n)]


@pytest.fixture
def two_threads(monkeypatch):
    """Two Numba threads, and the chooser timing launches on the fake clock that the fakes advance."""
    monkeypatch.setattr(numba_twins, "numba_thread_count", lambda: 2)
    monkeypatch.setattr(numba_twins, "time", types.SimpleNamespace(perf_counter=lambda: _CLOCK[0]))


def test_a_short_serial_launch_stays_serial(two_threads):
    k = TwinKernel(_Fake(2e-3, "parallel"), _Fake(0.0, "serial"))
    a = np.zeros(4)
    # launch 1 compiled the serial twin (not a timing), launch 2 timed it: short, decided serial
    assert _launch(k, 10, a) == ["serial"] * 10
    assert k.parallel.calls == 0 and k._choice[((4,),)] is True


def test_a_long_launch_goes_to_the_faster_twin(two_threads):
    a, b = np.zeros(4), np.zeros(5)
    k = TwinKernel(_Fake(1e-3, "parallel"), _Fake(5e-3, "serial"))
    runs = _launch(k, 2 + 2 * TIMINGS + 5, a)  # + one compiling launch of each twin
    assert runs[-5:] == ["parallel"] * 5 and k._choice[((4,),)] is False
    assert runs.count("serial") == 1 + TIMINGS and runs.count("parallel") == 1 + TIMINGS + 5
    # the other way round, and another shape is decided on its own
    k = TwinKernel(_Fake(6e-3, "parallel"), _Fake(1e-3, "serial"))
    assert _launch(k, 2 + 2 * TIMINGS + 3, a)[-3:] == ["serial"] * 3 and k._choice[((4,),)] is True
    assert ((5,),) not in k._choice
    k(b, 7)
    assert list(k._choice) == [((4,),), ((5,), 7)]


def test_a_serial_launch_longer_than_the_parallel_threshold_goes_parallel_at_once(two_threads):
    """One timed serial run of PARALLEL_ONLY_S or more decides the shape: no more serial runs."""
    k = TwinKernel(_Fake(1e-3, "parallel"), _Fake(1.2 * PARALLEL_ONLY_S, "serial"))
    a = np.zeros(4)
    # launch 1 compiled the serial twin, launch 2 timed it (long): parallel from launch 3 on
    assert _launch(k, 5, a) == ["serial", "serial", "parallel", "parallel", "parallel"]
    assert k._choice[((4,),)] is False
    # just under the threshold: the alternation decides, as before
    k = TwinKernel(_Fake(1e-3, "parallel"), _Fake(0.8 * PARALLEL_ONLY_S, "serial"))
    assert _launch(k, 4, a) == ["serial", "serial", "parallel", "parallel"] and isinstance(k._choice[((4,),)], tuple)


def test_one_numba_thread_and_forced_launches_pick_one_twin(monkeypatch):
    k = TwinKernel(_Fake(0.0, "parallel"), _Fake(1e-3, "serial"))
    monkeypatch.setattr(numba_twins, "numba_thread_count", lambda: 1)
    assert _launch(k, 4, np.zeros(3)) == ["serial"] * 4 and not k._choice
    with forced("parallel"):
        assert k(np.zeros(3)) == "parallel"
    with forced("serial"):
        monkeypatch.setattr(numba_twins, "numba_thread_count", lambda: 2)
        assert k(np.zeros(3)) == "serial"
    assert not k._choice
    with pytest.raises(ValueError, match="kind must be one of serial, parallel, got 'fast'"):
        with forced("fast"):
            pass


def test_the_thread_count_is_numbas():
    before = numba.get_num_threads()
    try:
        for n in range(1, numba.config.NUMBA_NUM_THREADS + 1):
            numba.set_num_threads(n)
            assert numba_twins.numba_thread_count() == n == numba.get_num_threads()
    finally:
        numba.set_num_threads(before)


def test_the_module_gives_twins_for_parallel_kernels_and_the_rest_as_it_is():
    m = ATTENTION.load("numba", d=2, d_k=2, d_v=2)
    assert isinstance(m, numba_twins.TwinModule) and m.__file__.endswith(".py")
    assert isinstance(m.forward, TwinKernel) and m.forward is m.forward
    assert m.forward.signatures is m.forward.parallel.signatures or m.forward.signatures == m.forward.parallel.signatures
    assert isinstance(m.fast_exp, TwinKernel)  # serial jitted functions too (they may call parallel ones)
    assert ATTENTION.load("numba", d=2, d_k=2, d_v=2) is m  # one per source and process: decisions kept
    assert not isinstance(m.numba, TwinKernel)  # what is not jitted comes back as it is
    assert m.serial_module.__file__.endswith("_serial.py")
    with pytest.raises(AttributeError):
        m.no_such_kernel  # noqa: B018
