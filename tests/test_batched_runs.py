"""Runs of independent systems batched along a leading axis are bitwise the separate runs.

The sde-limit experiment advances all seeds of a level as one state (B, N, d): one array operation
per step for every run, the per-run maps (attention with fixed Q, K, V, random features, MLP field)
one launch per run into a view of one output.  Every reduction stays per run and along the same
axis, so each run's numbers are those of a run on its own, to the last bit; these tests compare the
two ways on every backend the host has, and check the errors for badly shaped batches.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.numeric.attention.kernels import SYMMETRIC_MIN_TOKENS, attention_kernels
from transformer_limits.numeric.sphere.common_noise_sde import (
    CommonNoiseSDE,
    coupled_discrete_and_sde,
    coupled_width_chains,
)
from transformer_limits.numeric.sphere.mlp_field import mlp_field_kernels
from transformer_limits.numeric.sphere.transformer import SphereTransformer, uniform_sphere

HOST_BACKENDS = ("numpy", "numba")


def _seeds(n: int, stream: int) -> list[np.random.Generator]:
    return [np.random.default_rng([11, stream, j]) for j in range(n)]


def _starts(n_runs: int, N: int, d: int, stream: int) -> np.ndarray:
    return np.stack([uniform_sphere(N, d, rng) for rng in _seeds(n_runs, stream)])


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("renormalise", [True, False])
def test_batched_couplings_are_bitwise_the_runs_one_by_one(backend, renormalise):
    model = SphereTransformer(3, 16, 6, T=1.0, sigma_u=0.5, sigma_w=0.4, activation="tanh",
                              attention="attractive", backend=backend)
    sde = CommonNoiseSDE.from_model(model)
    X0s = _starts(3, 5, 3, 1)
    X, Xbar, sup = coupled_discrete_and_sde(model, sde, X0s, 3, _seeds(3, 2), renormalise=renormalise)
    assert X.shape == Xbar.shape == (3, 7, 5, 3) and np.shape(sup) == (3,)
    for b, rng in enumerate(_seeds(3, 2)):
        one = coupled_discrete_and_sde(model, sde, X0s[b], 3, rng, renormalise=renormalise)
        np.testing.assert_array_equal(X[b], one[0])
        np.testing.assert_array_equal(Xbar[b], one[1])
        assert sup[b] == one[2]
    # the runs differ (the batch does not repeat one run)
    assert not np.array_equal(X[0], X[1])


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_batched_width_chains_are_bitwise_the_runs_one_by_one(backend):
    model = SphereTransformer(3, 12, 5, T=1.0, sigma_u=0.5, sigma_w=0.5, activation="relu",
                              attention="attractive", backend=backend)
    sde = CommonNoiseSDE.from_model(model)
    X0s = _starts(4, 6, 3, 3)
    Xm, Xinf = coupled_width_chains(model, sde, X0s, _seeds(4, 4))
    assert Xm.shape == Xinf.shape == (4, 6, 3)
    for b, rng in enumerate(_seeds(4, 4)):
        one_m, one_inf = coupled_width_chains(model, sde, X0s[b], rng)
        np.testing.assert_array_equal(Xm[b], one_m)
        np.testing.assert_array_equal(Xinf[b], one_inf)
    assert not np.array_equal(Xm[0], Xinf[0])


@pytest.mark.parametrize("run", [coupled_discrete_and_sde, coupled_width_chains])
@pytest.mark.parametrize("seed", [7, np.random.default_rng(0), [1, 2]])
def test_a_batch_needs_one_seed_per_run(run, seed):
    model = SphereTransformer(3, 8, 2, T=1.0, attention="attractive")
    sde = CommonNoiseSDE.from_model(model)
    args = (2,) if run is coupled_discrete_and_sde else ()
    with pytest.raises(ValueError, match="seed must be a sequence of 3"):
        run(model, sde, _starts(3, 4, 3, 5), *args, seed)


@pytest.mark.parametrize("backend", HOST_BACKENDS)
def test_batched_features_and_mlp_field_are_bitwise_one_launch_per_run(backend):
    kernels = mlp_field_kernels("gelu", backend)
    rng = np.random.default_rng(5)
    B, N, m, d = 3, 7, 9, 4
    Y, U, b_U = rng.standard_normal((B, N, d)), rng.standard_normal((B, m, d)), rng.standard_normal((B, m))
    W, b_W = rng.standard_normal((B, d, m)), rng.standard_normal((B, d))
    Phi, G = kernels.features(Y, U, b_U), kernels.mlp_field(Y, U, b_U, W, b_W)
    assert Phi.shape == (B, N, m) and G.shape == (B, N, d)
    for b in range(B):
        np.testing.assert_array_equal(Phi[b], kernels.features(Y[b], U[b], b_U[b]))
        np.testing.assert_array_equal(G[b], kernels.mlp_field(Y[b], U[b], b_U[b], W[b], b_W[b]))
    # the field is the formula: G = W φ(U y/√d + b_U)/√m + b_W (run 1, token 2)
    pre = U[1] @ Y[1, 2] / np.sqrt(d) + b_U[1]
    np.testing.assert_allclose(G[1, 2], W[1] @ kernels.phi(pre) / np.sqrt(m) + b_W[1], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="inconsistent shapes"):
        kernels.mlp_field(Y, U, b_U, W[:2], b_W)


@pytest.mark.parametrize("backend", HOST_BACKENDS)
@pytest.mark.parametrize("N", [5, SYMMETRIC_MIN_TOKENS])
def test_batched_self_attention_is_bitwise_one_call_per_system(backend, N):
    rng = np.random.default_rng(9)
    d = 3
    Q = 0.6 * np.eye(d)  # Q^T K symmetric: at N >= SYMMETRIC_MIN_TOKENS the numba flavour's symmetric kernel
    bound = attention_kernels(d, d, d, backend).self_attention(Q, Q, rng.standard_normal((d, d)))
    X = uniform_sphere(4 * N, d, rng).reshape(4, N, d)
    A = bound(X)
    assert A.shape == (4, N, d)
    for b in range(4):
        np.testing.assert_array_equal(A[b], bound(X[b]))


def test_the_overflow_check_of_a_batch_looks_at_its_largest_system():
    """A batch is refused when any of its systems would be refused alone: the check runs on the system
    holding the largest entry (the bounds grow with max|X|), here the last one."""
    rng = np.random.default_rng(2)
    bound = attention_kernels(2, 2, 2, "numpy").self_attention(np.eye(2), np.eye(2), np.eye(2))
    X = rng.standard_normal((3, 4, 2))
    X[2, 1, 0] = 1e200
    with pytest.raises(ValueError):
        bound(X[2])
    with pytest.raises(ValueError):
        bound(X)
    with pytest.raises(ValueError, match="must have shape"):
        bound(np.zeros((3, 4, 5)))
