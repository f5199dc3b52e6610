"""The paper-A mean-field limit device-resident, on Numba's CUDA simulator (``numba-cuda-sim``, switched
on by tests/conftest.py where there is no NVIDIA device):

    dX^i/dt = sum_a w_a O_a sum_j P^a_ij V_a X^j,  P^a_ij = softmax_j(beta <Q_a X^i, K_a X^j>)  (theta_a(t)),

integrated by RK4 on [0, 1], with the backward RK4 of (X, P, node gradients) for the adjoint.  On the
simulator the whole integration stays on the device: the results equal the blas backend (and the
host loop on the same backend, bit for bit), the number of host <-> device copies does not depend on
the number of steps, repeated runs are identical, and a batch of inputs equals each input alone.
Tiny sizes (N = 4, d = 3, two atoms).
"""

import numpy as np
import pytest

from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map
from transformer_limits.numeric.attention.mean_field import HeadLaw, MeanFieldLimit
from transformer_limits.numeric.backends import REGISTRY
from transformer_limits.numeric.device_arrays import count_transfers

SIM = REGISTRY["numba-cuda-sim"]
pytestmark = [pytest.mark.cudasim,
              pytest.mark.skipif(not SIM.available, reason=f"numba-cuda-sim unavailable: {SIM.reason}")]
D, DK, DV, N, A, TEMP = 3, 2, 2, 4, 2, 0.7


def _setup(seed, n_nodes=3):
    law = HeadLaw.random(n_nodes, A, D, DK, DV, seed=seed, gain=1.5, weights=[0.3, 0.7])
    X0 = sample_tokens(N, D, domain="ball", seed=seed + 100)
    return law, X0, SquaredErrorLoss(target_map(X0, seed=seed + 200))


def _mf(backend, causal, **kw):
    return MeanFieldLimit(D, DK, DV, causal=causal, temperature=TEMP, backend=backend, **kw)


def _rel(a, b):
    return np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)


# the RK4 transcription is shared with the CPU tests (same temperature 0.7; one copy)
from test_batched_simulators_cpu import _transcribed_forward  # noqa: E402


@pytest.fixture(scope="module")
def device_run():
    """loss_and_grad on the device (non-causal, 2 steps), run once for the tests below."""
    law, X0, loss = _setup(0)
    mf = _mf("numba-cuda-sim", False)
    assert mf.on_device
    return law, X0, loss, mf.loss_and_grad(X0, law, loss, 2)


def _assert_equals_blas(X0, law, loss, steps, causal, result):
    """Trajectory, J, P_0 and node gradients of ``result`` (a loss_and_grad) equal the blas backend to
    1e-12 (relative); the blas forward equals the transcription above."""
    J, G, P0, fwd = result
    Jb, Gb, P0b, fwdb = _mf("blas", causal).loss_and_grad(X0, law, loss, steps)
    assert _rel(fwdb.final, _transcribed_forward(X0, law, steps, causal)) < 1e-12
    assert fwd.trajectory.shape == (steps + 1, N, D) and np.array_equal(fwd.final, fwd.trajectory[-1])
    assert _rel(fwd.trajectory, fwdb.trajectory) < 1e-12
    assert abs(J - Jb) <= 1e-12 * abs(Jb)
    assert _rel(P0, P0b) < 1e-12
    assert set(G) == set(Gb)
    for k in G:
        assert G[k].shape == law.params[k].shape and _rel(G[k], Gb[k]) < 1e-12, k


def test_device_loss_and_grad_equals_blas(device_run):
    """Non-causal, 2 steps on 2 node segments; the adjoint's reconstructed X_0 too."""
    law, X0, loss, result = device_run
    _assert_equals_blas(X0, law, loss, 2, False, result)
    X1, P1 = result[3].final, N * loss.grad(result[3].final)
    X0_dev, _, _ = _mf("numba-cuda-sim", False).adjoint(X1, P1, law, 2)
    assert _rel(X0_dev, _mf("blas", False).adjoint(X1, P1, law, 2)[0]) < 1e-12


def test_causal_device_run_equals_blas_and_transfers_do_not_grow_with_steps():
    """Copies of a forward + adjoint run: the law's stacked stage parameters (4), atom weights, hat
    weights, X0, X1, P1 in; the trajectory, X_0, P_0 and 4 gradients out -- whatever the step count.
    The 3-step causal run equals blas."""
    law, X0, loss = _setup(1, n_nodes=2)  # one segment: any step count
    mf = _mf("numba-cuda-sim", True)
    counts = []
    for steps in (1, 3):
        with count_transfers() as log:
            result = mf.loss_and_grad(X0, law, loss, steps)
        counts.append((log.to_device, log.to_host))
    assert counts == [(14, 7), (14, 7)]
    _assert_equals_blas(X0, law, loss, 3, True, result)


def test_device_equals_host_loop_bit_for_bit_and_is_deterministic(device_run):
    """The device integration does the host loop's floating-point operations on the same kernels: same
    bits as ``resident=False`` on the same backend, and the same bits when run again."""
    law, X0, loss, (J, G, P0, fwd) = device_run
    host = _mf("numba-cuda-sim", False, resident=False)
    assert not host.on_device
    Jh, Gh, P0h, fwdh = host.loss_and_grad(X0, law, loss, 2)
    J2, G2, P02, fwd2 = _mf("numba-cuda-sim", False).loss_and_grad(X0, law, loss, 2)
    for other in ((Jh, Gh, P0h, fwdh), (J2, G2, P02, fwd2)):
        assert other[0] == J and np.array_equal(other[2], P0)
        assert np.array_equal(other[3].trajectory, fwd.trajectory)
        assert all(np.array_equal(other[1][k], G[k]) for k in G)


def test_forward_batch_equals_each_input_alone():
    """B inputs in one launch chain per RK4 stage = each input's blas forward; the CPU loop agrees."""
    law, _, _ = _setup(2)
    X0s = np.stack([sample_tokens(N, D, domain="ball", seed=s) for s in range(3)])
    with count_transfers() as log:
        traj = _mf("numba-cuda-sim", False).forward_batch(X0s, law, 2)
    assert (log.to_device, log.to_host) == (6, 1)
    blas = _mf("blas", False)
    loop = blas.forward_batch(X0s, law, 2)
    assert traj.shape == loop.shape == (3, 3, N, D)
    for b in range(3):
        alone = blas.forward(X0s[b], law, 2).trajectory
        assert np.array_equal(loop[:, b], alone)
        assert _rel(traj[:, b], alone) < 1e-12


def test_device_path_rejects_bad_input():
    law, X0, _ = _setup(3)
    mf = _mf("numba-cuda-sim", False)
    with pytest.raises(ValueError, match="X0s"):
        mf.forward_batch(X0, law, 2)  # (N, d): not a batch
    with pytest.raises(ValueError, match="X0"):
        mf.forward(np.zeros((N, D + 1)), law, 2)
    with pytest.raises(ValueError, match="P1"):
        mf.adjoint(X0, np.zeros((N + 1, D)), law, 2)
    wrong = HeadLaw.random(3, A, D, DK + 1, DV, seed=0)
    with pytest.raises(ValueError, match=r"law.params\['Q'\]"):
        mf.forward(X0, wrong, 2)
    with pytest.raises(ValueError, match="steps"):
        mf.forward(X0, law, 3)
    blas = _mf("blas", False)
    assert mf.on_device and not blas.on_device  # CPU backends keep the host loop
    with pytest.raises(ValueError, match="X0s"):
        blas.forward_batch(np.zeros((0, N, D)), law, 2)
