"""Paper B's sphere simulators (docs/theory.md §B.1, §B.3): one loop each, on every runtime.

``CommonNoiseSDE.simulate`` / ``simulate_batch`` / ``simulate_systems``, ``SphereTransformer.run`` and the
two couplings are the loops of :mod:`transformer_limits.numeric.sphere.loops`, written once against a
:class:`~transformer_limits.numeric.runtime.Runtime`.  Each test below runs on the runtimes of
``RUNTIMES``: the host reference (numpy, numba; float64), the array arithmetic on the host (numpy in
float32) and Numba's CUDA simulator (``numba-cuda-sim``, marked ``cudasim``: the GPU loop on host
memory, every host <-> device copy counted by
:func:`~transformer_limits.numeric.runtime.count_transfers`):

* every run equals the float64 NumPy run (same seed, so the same noise) to 1e-12 in float64, to 1e-4
  in float32 (round-off 6e-8 per operation, a few hundred operations, contracting normalisations),
  and returns the precision's dtype; the forward pass also equals a NumPy transcription of the maps
  ``Y = LN(X + Δt s softmax(β X Xᵀ) X)``, ``X' = LN(Y + √Δt ((1/√m) W φ(U Y/√d + b_U) + b_W))``;
* the host and the simulator run the same loop function (recorded), to 1e-12;
* on the simulator the copies do not grow with the number of steps / layers (2 vs 6), and the random
  numbers go up in chunks (:data:`~transformer_limits.numeric.sphere.loops.CHUNK_BYTES`) without
  changing a run (on the host: bitwise);
* a float32 run builds the MLP-field kernels of float32 only (its k(1) included).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_limits.numeric.backends import REGISTRY
from transformer_limits.numeric.runtime import count_transfers
from transformer_limits.numeric.sphere import common_noise_sde, loops, transformer
from transformer_limits.numeric.sphere.common_noise_sde import (
    CommonNoiseSDE,
    coupled_discrete_and_sde,
    coupled_width_chains,
)
from transformer_limits.numeric.sphere.transformer import SphereTransformer, uniform_sphere

SIM = "numba-cuda-sim"
_SIM_MARKS = [pytest.mark.cudasim, pytest.mark.skipif(not REGISTRY[SIM].available, reason=f"{SIM} unavailable")]
#: (backend, precision) of every runtime the loops are tested on
RUNTIMES = [
    pytest.param("numpy", "float64", id="numpy"),
    pytest.param("numba", "float64", id="numba"),
    pytest.param("numpy", "float32", id="numpy-float32"),
    pytest.param(SIM, "float64", id="sim", marks=_SIM_MARKS),
]
#: agreement with the float64 NumPy run (positions: absolute; the coupling's sup error: relative)
TOL = {"float64": 1e-12, "float32": 1e-4}
SUP_REL = {"float64": 1e-10, "float32": 1e-3}


def _needs(backend):
    if not REGISTRY[backend].available:
        pytest.skip(f"backend {backend} unavailable: {REGISTRY[backend].reason}")


def _sde(backend="numpy", activation="relu", **kw):
    return CommonNoiseSDE(3, activation, 0.5, 0.4, attention="attractive", beta=1.5, backend=backend, **kw)


def _model(backend="numpy", L=4, activation="relu", **kw):
    return SphereTransformer(3, 12, L, T=1.0, activation=activation, sigma_u=0.3, sigma_w=0.2, beta=1.2,
                             backend=backend, **kw)


def _points(n, seed):
    return uniform_sphere(n, 3, np.random.default_rng(seed))


def _runs(backend, precision):
    """Every simulator on (backend, precision): name -> a function of nothing returning arrays."""
    X0, X0s = _points(5, 0), np.stack([_points(4, k) for k in range(3)])
    equal, unequal = [_points(5, k) for k in range(3)], [_points(4, 1), _points(6, 2)]
    sde = lambda act="relu", **kw: _sde(backend, act, precision=precision, **kw)  # noqa: E731
    model = lambda act="relu", **kw: _model(backend, activation=act, precision=precision, **kw)  # noqa: E731
    return {
        "simulate": lambda: [sde("tanh").simulate(X0, 0.4, 6, 3)],
        "simulate off the sphere": lambda: [sde().simulate(X0, 0.4, 6, 3, renormalise=False)],
        "simulate_batch": lambda: [sde("tanh").simulate_batch(X0s, 0.5, 5, [7, 8, 9])],
        "simulate_systems, equal N": lambda: sde("gelu").simulate_systems(equal, 0.5, 8, 10, 11, eval_steps=[0, 3, 8]),
        "simulate_systems, unequal N": lambda: sde("gelu").simulate_systems(unequal, 0.5, 8, 10, 11),
        "run": lambda: [model().run(X0, 5)],
        "run without attention": lambda: [model("tanh", attention="none").run(X0, 5)],
        "coupled_discrete_and_sde": lambda: _flat(coupled_discrete_and_sde(model("tanh"), CommonNoiseSDE.from_model(
            model("tanh")), X0, 3, 4)),
        "coupled_width_chains": lambda: list(coupled_width_chains(model("tanh"), CommonNoiseSDE.from_model(
            model("tanh")), X0, 5)),
    }


def _flat(coupled):
    X, Xbar, sup = coupled
    return [X, Xbar, np.array(sup)]


@pytest.mark.parametrize("backend, precision", RUNTIMES)
def test_every_run_equals_the_numpy_reference(backend, precision):
    _needs(backend)
    reference = _runs("numpy", "float64")
    for name, run in _runs(backend, precision).items():
        for got, want in zip(run(), reference[name](), strict=True):
            assert got.shape == want.shape, name
            if got.ndim:
                assert got.dtype == np.dtype(precision), name
                np.testing.assert_allclose(got, want, rtol=0, atol=TOL[precision], err_msg=name)
            else:  # the coupling's sup error
                assert float(got) == pytest.approx(float(want), rel=SUP_REL[precision], abs=1e-14), name


@pytest.mark.cudasim
@pytest.mark.skipif(not REGISTRY[SIM].available, reason=f"{SIM} unavailable")
def test_one_loop_runs_on_the_host_and_on_the_device(monkeypatch):
    """Each simulator calls the same function of ``loops`` on the host (NumPy arrays) and on the
    simulator (device arrays of the CUDA simulator), with the same results to 1e-12."""
    seen: list[tuple[str, str]] = []
    for name in ("exact_runs", "feature_runs", "transformer_run", "coupled_run", "width_chains_run"):
        def spy(rt, *args, _loop=getattr(loops, name), _name=name, **kw):
            seen.append((_name, rt.storage))
            return _loop(rt, *args, **kw)
        monkeypatch.setattr(loops, name, spy)
    host, device = _runs("numpy", "float64"), _runs(SIM, "float64")
    for name in host:
        seen.clear()
        want = host[name]()
        got = device[name]()
        # one loop function, called on both runtimes (the reference batch calls it once per run)
        assert len({loop for loop, _ in seen}) == 1 and {where for _, where in seen} == {"host", "simulator"}, name
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("backend, precision", RUNTIMES)
def test_transformer_forward_matches_a_numpy_transcription_of_the_maps(backend, precision):
    _needs(backend)
    X = _points(6, 4)
    got = _model(backend, precision=precision).run(X, 9)
    assert got.dtype == np.dtype(precision) and got.shape == (5, 6, 3)
    for ell, want in enumerate(_transcribed_sphere_states(X, 9)):
        np.testing.assert_allclose(got[ell + 1], want, rtol=0, atol=TOL[precision])


# x_1..x_L of ``_model`` transcribed from the maps: one transcription, shared with the CPU batch tests
from test_batched_simulators_cpu import _transcribed_sphere_states  # noqa: E402


@pytest.mark.parametrize("backend, precision", RUNTIMES)
def test_batch_of_independent_runs_equals_one_run_each(backend, precision, monkeypatch):
    """simulate_batch: run b is simulate(X0s[b], seeds[b]) -- bitwise for the reference (one run after
    the other), to round-off for the array arithmetic, with one zonal-kernel launch for the batch and
    with one per run (``ONE_LAUNCH_BYTES`` exceeded)."""
    _needs(backend)
    X0s = np.stack([_points(4, k) for k in range(3)])
    sde = _sde(backend, "tanh", precision=precision)
    alone = np.stack([sde.simulate(X0s[b], 0.5, 5, seed) for b, seed in enumerate([7, 8, 9])])
    tol = 0.0 if not sde.device_resident else (1e-12 if precision == "float64" else 1e-5)
    for one_launch in (True, False):
        if not one_launch:
            monkeypatch.setattr(loops, "ONE_LAUNCH_BYTES", 1)
        got = sde.simulate_batch(X0s, 0.5, 5, [7, 8, 9])
        assert got.shape == (3, 6, 4, 3) and got.dtype == np.dtype(precision)
        np.testing.assert_allclose(got, alone, rtol=0, atol=tol)
    same = sde.simulate_batch(np.stack([X0s[0], X0s[0]]), 0.5, 5, [1, 2])
    assert not np.allclose(same[0], same[1])  # per-run seeds: two paths
    with pytest.raises(ValueError, match="seeds"):
        sde.simulate_batch(X0s, 0.5, 5, [1, 2])


def test_reference_batch_sharing_one_generator_is_the_runs_in_turn():
    """One Generator for every run: the reference draws run 0's noise, then run 1's (as simulate
    called twice)."""
    X0s = np.stack([_points(4, k) for k in range(2)])
    got = _sde().simulate_batch(X0s, 0.5, 5, [np.random.default_rng(3)] * 2)
    rng = np.random.default_rng(3)
    np.testing.assert_array_equal(got, np.stack([_sde().simulate(X, 0.5, 5, rng) for X in X0s]))


@pytest.mark.parametrize("backend, precision", RUNTIMES)
def test_same_seed_same_run(backend, precision):
    _needs(backend)
    X0 = _points(5, 6)
    sde, model = _sde(backend, precision=precision), _model(backend, precision=precision)
    np.testing.assert_array_equal(sde.simulate(X0, 0.5, 4, 8), sde.simulate(X0, 0.5, 4, 8))
    np.testing.assert_array_equal(model.run(X0, 8), model.run(X0, 8))
    a, b = (sde.simulate_systems([X0], 0.5, 4, 6, np.random.default_rng(8))[0] for _ in range(2))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(sde.simulate(X0, 0.5, 4, 9), sde.simulate(X0, 0.5, 4, 8))


def _transfers(run):
    with count_transfers() as log:
        run()
    return log.to_device, log.to_host, log.bytes_to_host


@pytest.mark.parametrize("backend", [pytest.param("numpy", id="numpy"), pytest.param(SIM, id="sim", marks=_SIM_MARKS)])
def test_random_numbers_upload_in_chunks_with_the_same_result(backend, monkeypatch):
    """A chunk of at most 3 steps: the same noise, the same path (bitwise); on the device more uploads
    (3 arrays per chunk), on the host no counted copies at all."""
    X0 = _points(5, 3)
    run = lambda: _sde(backend).simulate_systems([X0], 0.5, 7, 6, 4)[0]  # noqa: E731
    whole, copies = run(), _transfers(run)[0]
    monkeypatch.setattr(loops, "CHUNK_BYTES", 8 * (6 * 3 + 6 + 7 * 3) * 3)  # 3 steps per chunk
    np.testing.assert_array_equal(run(), whole)
    assert _transfers(run)[0] == (copies + 2 * 3 if backend == SIM else 0)


@pytest.mark.cudasim
@pytest.mark.skipif(not REGISTRY[SIM].available, reason=f"{SIM} unavailable")
def test_copies_do_not_grow_with_steps_or_layers():
    """2 vs 6 steps: the same number of copies each way (the state stays on the device); the
    outputs come back once, so only their bytes grow."""
    X0, systems = _points(5, 0), [_points(4, 1), _points(4, 2)]
    runs = {
        "simulate": lambda n: _sde(SIM).simulate(X0, 0.5, n, 1),
        "simulate_systems": lambda n: _sde(SIM).simulate_systems(systems, 0.5, n, 8, 1, eval_steps=[n]),
        "transformer": lambda n: _model(SIM, L=n).run(X0, 1),
        "batch": lambda n: _sde(SIM).simulate_batch(np.stack([X0, X0]), 0.5, n, [1, 2]),
        "coupling": lambda n: coupled_discrete_and_sde(_model(SIM, L=n), CommonNoiseSDE.from_model(_model(SIM, L=n)),
                                                       X0, 2, 1),
        "width chains": lambda n: coupled_width_chains(_model(SIM, L=n), CommonNoiseSDE.from_model(_model(SIM, L=n)),
                                                       X0, 1),
    }
    for name, run in runs.items():
        run(2)  # warm: kernels compiled, constants cached
        short, long = _transfers(lambda: run(2)), _transfers(lambda: run(6))
        assert short[:2] == long[:2], name
        assert short[1] <= 3, name  # the outputs (+ sup error), and the constant k(1) of the Itô drift
    # the final positions only: eval_steps=[n] brings back 2 systems x 4 tokens x 3 floats
    assert _transfers(lambda: runs["simulate_systems"](6))[2] <= 8 * 3 * 8 + 8


@pytest.mark.parametrize("backend", [pytest.param(SIM, marks=_SIM_MARKS)])
def test_float32_on_a_float64_only_backend_names_precision(backend):
    """numba-cuda is float64 only (the numba flavour has typed float32 sources: see below)."""
    _needs(backend)
    with pytest.raises(ValueError, match="precision"):
        _sde(backend, precision="float32")
    with pytest.raises(ValueError, match="precision"):
        _model(backend, precision="float32")
    with pytest.raises(ValueError, match="precision"):
        _sde("numpy", precision="float16")


def test_numba_runs_float32():
    _needs("numba")
    assert _sde("numba", precision="float32").precision == "float32"
    assert _model("numba", precision="float32").precision == "float32"


def test_a_float32_run_builds_float32_kernels_only(monkeypatch):
    """The MLP-field kernels of a run (k(1) of the Itô drift included) are those of its precision:
    no float64 kernels are built for one scalar."""
    asked = []

    def recorded(activation="relu", backend="numpy", precision="float64", _kernels=loops.mlp_field_kernels):
        asked.append(precision)
        return _kernels(activation, backend, precision)

    for module in (loops, common_noise_sde, transformer):
        monkeypatch.setattr(module, "mlp_field_kernels", recorded)
    model = _model(precision="float32")
    sde = CommonNoiseSDE.from_model(model)
    assert sde.precision == "float32" and sde.device_resident and isinstance(sde.ito_coefficient, float)
    X0 = _points(5, 1)
    sde.simulate(X0, 0.5, 3, 1)
    sde.simulate_systems([X0], 0.5, 3, 6, 1)
    model.run(X0, 1)
    coupled_discrete_and_sde(model, sde, X0, 2, 1)
    assert asked and set(asked) == {"float32"}


def test_loops_read_typed_constants():
    """The loops take the models' constants (frozen records), not the models."""
    model = _model(L=3)
    sde = CommonNoiseSDE.from_model(model)
    const, mconst = sde.constants, model.constants
    assert isinstance(const, loops.SDEConstants) and isinstance(mconst, loops.ModelConstants)
    assert const.c == pytest.approx(sde.k1) and const.scale == 1.0 and mconst.alpha_2 == pytest.approx(math.sqrt(1 / 3))
    with pytest.raises(AttributeError):
        const.c = 0.0  # type: ignore[misc]
    rng = np.random.default_rng(2)

    def draw():
        lay = model.sample_layer(rng)
        return lay.U, lay.b_U, lay.W, lay.b_W

    X0 = _points(4, 0)
    direct = loops.transformer_run(loops.runtime_for(mconst.key), mconst, X0, draw)
    np.testing.assert_array_equal(direct, model.run(X0, 2))


def test_device_residence_follows_the_runtime():
    assert not _sde().device_resident and not _model().device_resident  # the host reference
    assert _sde(precision="float32").device_resident  # the array arithmetic (on the host)
    if REGISTRY[SIM].available:
        assert _sde(SIM).device_resident and _model(SIM).device_resident


@pytest.mark.gpu
@pytest.mark.parametrize("backend_name", ["cupy", "numba-cuda"])
def test_real_gpu_runs_match_numpy(backend_name):
    """On a GPU (CuPy arrays): float64 equals NumPy to 1e-10; cupy's float32 compile returns float32
    within 1e-4 of float64."""
    _needs(backend_name)
    X0, systems = _points(5, 0), [_points(6, 1), _points(6, 2)]
    np.testing.assert_allclose(_sde(backend_name, "gelu").simulate(X0, 0.5, 6, 3),
                               _sde("numpy", "gelu").simulate(X0, 0.5, 6, 3), rtol=0, atol=1e-10)
    for g, r in zip(_sde(backend_name).simulate_systems(systems, 0.5, 6, 40, 3),
                    _sde("numpy").simulate_systems(systems, 0.5, 6, 40, 3)):
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-10)
    np.testing.assert_allclose(_model(backend_name).run(X0, 3), _model("numpy").run(X0, 3), rtol=0, atol=1e-10)
    if backend_name == "cupy":
        f32 = _sde("cupy", precision="float32").simulate_systems(systems, 0.5, 6, 40, 3)
        for g, r in zip(f32, _sde("numpy").simulate_systems(systems, 0.5, 6, 40, 3)):
            assert g.dtype == np.float32
            np.testing.assert_allclose(g, r, rtol=0, atol=1e-4)
