"""Device-resident runs of paper B's simulators (docs/theory.md §B.1, §B.3) on Numba's CUDA simulator,
and the float32 NumPy path.

The simulator backend ``numba-cuda-sim`` runs the generated CUDA kernels on host memory, with every
host <-> device copy counted by :func:`~transformer_limits.numeric.device_arrays.count_transfers`:

* the runs (``CommonNoiseSDE.simulate``, ``simulate_batch``, ``simulate_systems``,
  ``SphereTransformer.run`` and the two couplings) equal the NumPy backend (same seed, so the same
  noise) to 1e-10;
* their copies do not grow with the number of steps / layers (5 vs 20): the state stays on the device;
* the transformer's forward pass also equals a NumPy transcription of the maps
  ``Y = LN(X + Δt s softmax(β X X^T) X)``, ``X' = LN(Y + √Δt ((1/√m) W φ(U Y/√d + b_U) + b_W))``;
* float32 (NumPy) returns float32 and agrees with float64 to 1e-4 on these short runs (float32 round-off
  ~6e-8 per operation, a few hundred operations, contracting normalisation steps): that CPU path is
  tested in the default run, tests/test_batched_simulators_cpu.py.
"""

import math

import numpy as np
import pytest

from transformer_limits.numeric.backends import REGISTRY
from transformer_limits.numeric.device_arrays import count_transfers
from transformer_limits.numeric.sphere import device_runs
from transformer_limits.numeric.sphere.common_noise_sde import (
    CommonNoiseSDE,
    coupled_discrete_and_sde,
    coupled_width_chains,
)
from transformer_limits.numeric.sphere.transformer import SphereTransformer, uniform_sphere

SIM = "numba-cuda-sim"
pytestmark = [pytest.mark.cudasim, pytest.mark.skipif(not REGISTRY[SIM].available, reason=f"{SIM} unavailable")]
TOL = 1e-10


# the model builders are shared with the CPU tests (one copy)
from test_batched_simulators_cpu import _model, _points, _sde, _transcribed_sphere_states  # noqa: E402


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("renormalise", [True, False])
def test_simulate_on_the_device_equals_numpy(activation, renormalise):
    X0 = _points(5, 0)
    dev = _sde(SIM, activation)
    assert dev.device_resident and not _sde("numpy", activation).device_resident
    got = dev.simulate(X0, 0.4, 6, 3, renormalise=renormalise)
    ref = _sde("numpy", activation).simulate(X0, 0.4, 6, 3, renormalise=renormalise)
    assert got.shape == (7, 5, 3) and got.dtype == np.float64
    np.testing.assert_allclose(got, ref, rtol=0, atol=TOL)


@pytest.mark.parametrize("sizes", [(5, 5, 5), (4, 6)])
def test_simulate_systems_on_the_device_equals_numpy(sizes):
    """Equal N (batched attention) and unequal N (per system), tokens concatenated for the features."""
    systems = [_points(n, k) for k, n in enumerate(sizes)]
    eval_steps = [0, 3, 8]
    got = _sde(SIM, "gelu").simulate_systems(systems, 0.5, 8, 10, 11, eval_steps=eval_steps)
    ref = _sde("numpy", "gelu").simulate_systems(systems, 0.5, 8, 10, 11, eval_steps=eval_steps)
    for g, r, n in zip(got, ref, sizes):
        assert g.shape == (3, n, 3)
        np.testing.assert_allclose(g, r, rtol=0, atol=TOL)


@pytest.mark.parametrize("attention", ["attractive", "none"])
def test_transformer_forward_on_the_device_equals_numpy(attention):
    X0 = _points(6, 2)
    got = SphereTransformer(3, 12, 4, attention=attention, sigma_u=0.3, backend=SIM).run(X0, 5)
    ref = SphereTransformer(3, 12, 4, attention=attention, sigma_u=0.3).run(X0, 5)
    np.testing.assert_allclose(got, ref, rtol=0, atol=TOL)


def test_transformer_forward_matches_a_numpy_transcription_of_the_maps():
    X = _points(6, 4)
    got = _model(SIM).run(X, 9)
    for ell, want in enumerate(_transcribed_sphere_states(X, 9)):
        np.testing.assert_allclose(got[ell + 1], want, rtol=0, atol=1e-12)


def test_batch_of_independent_runs_equals_one_run_each():
    """simulate_batch: run b is simulate(X0s[b], seeds[b]), on the device (one launch per step for
    the batch) and on NumPy."""
    X0s = np.stack([_points(4, k) for k in range(3)])
    got = _sde(SIM, "tanh").simulate_batch(X0s, 0.5, 5, [7, 8, 9])
    assert got.shape == (3, 6, 4, 3)
    for b, seed in enumerate([7, 8, 9]):
        np.testing.assert_allclose(got[b], _sde("numpy", "tanh").simulate(X0s[b], 0.5, 5, seed), rtol=0, atol=TOL)
    np.testing.assert_allclose(got, _sde("numpy", "tanh").simulate_batch(X0s, 0.5, 5, [7, 8, 9]), rtol=0, atol=TOL)
    with pytest.raises(ValueError, match="seeds"):
        _sde(SIM).simulate_batch(X0s, 0.5, 5, [1, 2])


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_couplings_on_the_device_equal_numpy(activation):
    X0 = _points(5, 3)
    dev, ref = _model(SIM, activation=activation), _model("numpy", activation=activation)
    sde_dev, sde_ref = CommonNoiseSDE.from_model(dev), CommonNoiseSDE.from_model(ref)
    got, want = coupled_discrete_and_sde(dev, sde_dev, X0, 3, 4), coupled_discrete_and_sde(ref, sde_ref, X0, 3, 4)
    for g, w in zip(got[:2], want[:2]):
        np.testing.assert_allclose(g, w, rtol=0, atol=TOL)
    assert got[2] == pytest.approx(want[2], rel=1e-10, abs=1e-14)
    for g, w in zip(coupled_width_chains(dev, sde_dev, X0, 5), coupled_width_chains(ref, sde_ref, X0, 5)):
        np.testing.assert_allclose(g, w, rtol=0, atol=TOL)


def _transfers(run):
    with count_transfers() as log:
        run()
    return log.to_device, log.to_host, log.bytes_to_host


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


def test_random_numbers_upload_in_chunks_with_the_same_result(monkeypatch):
    """A chunk of at most a few steps: more uploads, the same noise, the same path."""
    X0 = _points(5, 3)
    whole = _sde(SIM).simulate_systems([X0], 0.5, 7, 6, 4)[0]
    copies = _transfers(lambda: _sde(SIM).simulate_systems([X0], 0.5, 7, 6, 4))[0]
    monkeypatch.setattr(device_runs, "CHUNK_BYTES", 8 * (6 * 3 + 6 + 7 * 3) * 3)  # 3 steps per chunk
    chunked = _sde(SIM).simulate_systems([X0], 0.5, 7, 6, 4)[0]
    assert _transfers(lambda: _sde(SIM).simulate_systems([X0], 0.5, 7, 6, 4))[0] == copies + 2 * 3
    np.testing.assert_array_equal(chunked, whole)
    np.testing.assert_allclose(chunked, _sde("numpy").simulate_systems([X0], 0.5, 7, 6, 4)[0], rtol=0, atol=TOL)


def test_same_seed_same_run_on_the_device():
    X0 = _points(5, 6)
    np.testing.assert_array_equal(_sde(SIM).simulate(X0, 0.5, 4, 8), _sde(SIM).simulate(X0, 0.5, 4, 8))
    np.testing.assert_array_equal(_model(SIM).run(X0, 8), _model(SIM).run(X0, 8))
    a, b = (_sde(SIM).simulate_systems([X0], 0.5, 4, 6, np.random.default_rng(8))[0] for _ in range(2))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(_sde(SIM).simulate(X0, 0.5, 4, 9), _sde(SIM).simulate(X0, 0.5, 4, 8))


@pytest.mark.parametrize("backend", [SIM])  # the numba case: tests/test_batched_simulators_cpu.py
def test_float32_on_a_float64_only_backend_names_precision(backend):
    with pytest.raises(ValueError, match="precision"):
        _sde(backend, precision="float32")
    with pytest.raises(ValueError, match="precision"):
        _model(backend, precision="float32")


@pytest.mark.gpu
@pytest.mark.parametrize("backend_name", ["cupy", "numba-cuda"])
def test_real_gpu_runs_match_numpy(backend_name):
    """On a GPU (CuPy arrays): float64 equals NumPy to 1e-10; cupy's float32 compile returns float32
    within 1e-4 of float64."""
    if not REGISTRY[backend_name].available:
        pytest.skip(f"backend {backend_name} unavailable: {REGISTRY[backend_name].reason}")
    X0, systems = _points(5, 0), [_points(6, 1), _points(6, 2)]
    np.testing.assert_allclose(_sde(backend_name, "gelu").simulate(X0, 0.5, 6, 3),
                               _sde("numpy", "gelu").simulate(X0, 0.5, 6, 3), rtol=0, atol=TOL)
    for g, r in zip(_sde(backend_name).simulate_systems(systems, 0.5, 6, 40, 3),
                    _sde("numpy").simulate_systems(systems, 0.5, 6, 40, 3)):
        np.testing.assert_allclose(g, r, rtol=0, atol=TOL)
    np.testing.assert_allclose(_model(backend_name).run(X0, 3), _model("numpy").run(X0, 3), rtol=0, atol=TOL)
    if backend_name == "cupy":
        f32 = _sde("cupy", precision="float32").simulate_systems(systems, 0.5, 6, 40, 3)
        for g, r in zip(f32, _sde("numpy").simulate_systems(systems, 0.5, 6, 40, 3)):
            assert g.dtype == np.float32
            np.testing.assert_allclose(g, r, rtol=0, atol=1e-4)
