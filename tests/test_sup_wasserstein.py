"""W_2² of propagation-of-chaos and its pruned sup over time, against transcriptions of the definitions.

W_2² between two uniform n-point measures is an assignment problem, min over permutations σ of
(1/n) Σ_i |x_i − y_σ(i)|² (Birkhoff–von Neumann): scipy's Hungarian solver is the independent
transcription.  The sup over times must equal the brute-force max of the per-time values bit for bit,
whatever the trajectories do, and must solve fewer problems when the systems move slowly (else the
pruning is dead code).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.optimize import linear_sum_assignment

from transformer_limits.verify.experiments.propagation_of_chaos import sup_wasserstein2_squared, wasserstein2_squared


def sphere_points(rng: np.random.Generator, *shape: int) -> np.ndarray:
    x = rng.standard_normal(shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def random_walk_on_sphere(rng: np.random.Generator, n_times: int, n: int, d: int, step: float) -> np.ndarray:
    """(n_times, n, d) positions: a start on S^{d−1} and Gaussian steps projected back to the sphere."""
    out = [sphere_points(rng, n, d)]
    for _ in range(n_times - 1):
        x = out[-1] + step * rng.standard_normal((n, d))
        out.append(x / np.linalg.norm(x, axis=-1, keepdims=True))
    return np.stack(out)


@pytest.mark.parametrize("d", [2, 3])
def test_w2_equals_the_assignment_transcription(d):
    rng = np.random.default_rng(5)
    X, Y = sphere_points(rng, 12, d), sphere_points(rng, 12, d)
    cost = ((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1)
    rows, cols = linear_sum_assignment(cost)
    assert wasserstein2_squared(X, Y) == pytest.approx(cost[rows, cols].mean(), rel=1e-12)


def test_w2_between_unequal_sizes_is_the_replicated_assignment():
    # n = 4 points of mass 1/4 against M = 12 of mass 1/12: each x_i replicated 3 times
    rng = np.random.default_rng(6)
    X, Y = sphere_points(rng, 4, 3), sphere_points(rng, 12, 3)
    cost = ((np.repeat(X, 3, axis=0)[:, None, :] - Y[None, :, :]) ** 2).sum(-1)
    rows, cols = linear_sum_assignment(cost)
    assert wasserstein2_squared(X, Y) == pytest.approx(cost[rows, cols].mean(), rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_times=st.integers(1, 7), n=st.sampled_from([2, 5, 8]),
       M=st.sampled_from([8, 24]), d=st.sampled_from([2, 3]), step=st.sampled_from([0.0, 0.02, 0.3, 2.0]))
def test_sup_is_the_brute_force_max_bit_for_bit(seed, n_times, n, M, d, step):
    rng = np.random.default_rng(seed)
    X = random_walk_on_sphere(rng, n_times, n, d, step)
    Y = random_walk_on_sphere(rng, n_times, M, d, step)
    value, solved = sup_wasserstein2_squared(X, Y)
    assert value == max(wasserstein2_squared(X[k], Y[k]) for k in range(n_times))
    assert 1 <= solved <= n_times


def test_sup_finds_an_early_maximum():
    # one system rotates onto the other: the maximum is at t = 0, the last time (solved first) is 0
    rng = np.random.default_rng(7)
    target = sphere_points(rng, 8, 3)
    Y = np.repeat(np.concatenate([target, target])[None], 6, axis=0)  # 16 points, each target twice
    X = np.stack([rotated_about_z(target, theta) for theta in (0.25, 0.2, 0.15, 0.1, 0.05, 0.0)])
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    value, _ = sup_wasserstein2_squared(X, Y)
    values = [wasserstein2_squared(X[k], Y[k]) for k in range(6)]
    assert int(np.argmax(values)) == 0 and value == values[0]


def rotated_about_z(points: np.ndarray, theta: float) -> np.ndarray:
    c, s = np.cos(theta), np.sin(theta)
    return points @ np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])


def test_slowly_separating_systems_need_one_solve():
    # the pruning must do work: a system rotating slowly away from a fixed one (each of its points
    # twice) is bounded at every earlier time by the last time's plan, so only the last is solved
    rng = np.random.default_rng(8)
    target = sphere_points(rng, 64, 3)
    Y = np.repeat(np.concatenate([target, target])[None], 11, axis=0)
    X = np.stack([rotated_about_z(target, theta) for theta in np.linspace(0.0, 0.1, 11)])
    value, solved = sup_wasserstein2_squared(X, Y)
    assert value == max(wasserstein2_squared(X[k], Y[k]) for k in range(11))
    assert solved == 1


def test_mismatched_times_are_refused():
    rng = np.random.default_rng(9)
    with pytest.raises(ValueError, match="same positive number of times"):
        sup_wasserstein2_squared(random_walk_on_sphere(rng, 3, 4, 2, 0.1), random_walk_on_sphere(rng, 2, 4, 2, 0.1))
