"""Invariants of the sup-over-inputs search (``verify/input_search.py``), from its definition.

The search estimates e_N = sup_{X0 ∈ B_R^N} |A(X0)^1 − B(X0)^1|: every evaluated input is a lower bound,
and the search reports the largest error it evaluated and the input attaining it.  The ladder
N_0 < N_1 < … warm-starts level i from the previous worst input with every token repeated
N_i / N_{i−1} times (rows x¹, …, x¹, x², …), evaluated first, then ascends from a copy jittered by
N(0, (jitter·lr·R)²) per coordinate (so repeated tokens split), then from ``restarts − 1`` random starts
(restart indices 1, 2, …: sphere, ball, …).  Checked here on maps that see the tokens only through
their empirical measure and token 1 (A(X)^i = tanh(W x^i + U mean_j x^j), B(X)^i = 0.3 x^i), with
every evaluation recorded:

* every evaluated and every returned input lies in the closed ball of radius R (row-wise);
* the value of a level is the largest error among the inputs evaluated at that level, attained by
  the returned input;
* the ladder is monotone in N, and each level is ≥ the error of the repeated previous worst input;
* the warm start evaluates exactly the repeated input first, then a jittered copy with no two tokens
  identical and jitter of the stated size;
* evaluation counts and start kinds match the definition (level 0: ``bottom_restarts`` ascents of
  ``iterations + 1`` evaluations; level i: one more evaluation than plain restarts);
* same generators, same result (bit for bit); ``warm_start=False`` is :func:`sup_error` per level.

Deterministic (fixed seeds).  The one statistical assertion (the jitter's standard deviation) states
its false-failure rate.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.verify import input_search as search

D = 2
R, LR, ITER, JITTER = 2.0, 0.3, 3, 0.1
LEVELS = (4, 8, 32)
W = np.array([[1.0, 0.5], [-0.3, 0.8]])
U = np.array([[0.4, -0.7], [0.9, 0.2]])


def _A(X):
    out = np.tanh(X @ W.T + X.mean(axis=0) @ U.T)

    def vjp(r):
        G = r * (1.0 - out**2)
        return G @ W + (G.sum(axis=0) @ U) / len(X)

    return out, vjp


def _B(X):
    return 0.3 * X, lambda r: 0.3 * r


def _error(X) -> float:
    """|A(X)^1 − B(X)^1| written from the maps."""
    return float(np.linalg.norm(np.tanh(W @ X[0] + U @ X.mean(axis=0)) - 0.3 * X[0]))


class Recorder:
    """An InputMap that records a copy of every input it is evaluated at."""

    def __init__(self, fn):
        self.fn, self.inputs = fn, []
        self.map = search.InputMap(self.evaluate)

    def evaluate(self, X):
        self.inputs.append(np.array(X, dtype=np.float64, copy=True))
        return self.fn(X)


def _ladder(seed=0, levels=LEVELS, **kw):
    A, B = Recorder(_A), Recorder(_B)
    rngs = [np.random.default_rng([seed, i]) for i in range(len(levels))]
    options = dict(radius=R, rngs=rngs, restarts=2, iterations=ITER, lr=LR, bottom_restarts=3, jitter=JITTER)
    options.update(kw)
    out = search.sup_error_ladder(A.map, B.map, levels, D, **options)
    return out, A.inputs


def _by_level(inputs, levels=LEVELS):
    """The recorded inputs of each level, in evaluation order (levels have distinct N)."""
    return {N: [X for X in inputs if X.shape[0] == N] for N in levels}


def test_maps_see_tokens_through_their_empirical_measure():
    """The premise of the warm start, for the maps of this file: repeating every token keeps the error."""
    X = np.random.default_rng(1).uniform(-1, 1, size=(5, D))
    for m in (2, 4):
        assert _error(np.repeat(X, m, axis=0)) == pytest.approx(_error(X), rel=1e-13)
    assert _error(X) == pytest.approx(search.token_one_error(search.InputMap(_A), search.InputMap(_B), X), rel=1e-14)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_evaluated_and_returned_input_lies_in_the_ball(seed):
    out, inputs = _ladder(seed)
    assert len(inputs) > 0
    for X in inputs:
        assert np.all(np.linalg.norm(X, axis=1) <= R * (1 + 1e-12))
    for N, (value, X) in zip(LEVELS, out):
        assert X.shape == (N, D) and np.all(np.linalg.norm(X, axis=1) <= R * (1 + 1e-12))


@pytest.mark.parametrize("seed", range(8))
def test_each_level_reports_the_largest_error_it_evaluated(seed):
    out, inputs = _ladder(seed)
    for N, (value, X) in zip(LEVELS, out):
        seen = [_error(Y) for Y in _by_level(inputs)[N]]
        assert value == pytest.approx(max(seen), rel=1e-12)
        assert _error(X) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_ladder_is_monotone_and_never_below_the_repeated_previous_worst(seed):
    out, _ = _ladder(seed)
    values = [v for v, _ in out]
    for i in range(1, len(LEVELS)):
        repeated = np.repeat(out[i - 1][1], LEVELS[i] // LEVELS[i - 1], axis=0)
        assert values[i] >= _error(repeated) * (1 - 1e-12)
        assert values[i] >= values[i - 1] * (1 - 1e-12), values


@pytest.mark.parametrize("seed", range(6))
def test_without_ascent_steps_a_level_is_the_better_of_the_repeated_and_the_jittered_input(seed):
    """``iterations=0``, ``restarts=1``: level i > 0 evaluates the repeated previous worst input and its
    jittered copy, nothing else, and reports the larger error (the jitter alone may lower the error:
    the repeated input keeps the level from falling)."""
    out, inputs = _ladder(seed, iterations=0, restarts=1)
    by_level = _by_level(inputs)
    for i in range(1, len(LEVELS)):
        N = LEVELS[i]
        assert len(by_level[N]) == 2
        repeated, jittered = by_level[N]
        np.testing.assert_array_equal(repeated, np.repeat(out[i - 1][1], N // LEVELS[i - 1], axis=0))
        assert out[i][0] == pytest.approx(max(_error(repeated), _error(jittered)), rel=1e-12)
        assert out[i][0] >= out[i - 1][0] * (1 - 1e-12)


def test_warm_start_evaluates_the_repeated_input_then_a_jittered_copy():
    """Level i's first evaluation is the previous worst input with every row repeated m times (rows
    x¹ … x¹ x² …); its second, where the first ascent starts, is that input plus a Gaussian jitter of
    sd jitter·lr·R = 0.06 per coordinate that splits every repeated token (the ball projection aside).

    The sd is estimated over 32 seeded ladders from the rows farther than 6 sd inside the ball (the
    projection cannot touch them), n ≥ 300 coordinates: the sample sd has relative standard error
    ≤ 1/√(2n) ≤ 4.1 %, so a correct jitter leaves the ±15 % band (> 3.6 standard errors) with
    probability < 3e-4, and the mean leaves ±5 standard errors with probability < 1e-6 (the seeds are
    fixed: the outcome is deterministic)."""
    sd = JITTER * LR * R
    noise = []
    for seed in range(32):
        out, inputs = _ladder(seed)
        by_level = _by_level(inputs)
        for i in range(1, len(LEVELS)):
            N, m = LEVELS[i], LEVELS[i] // LEVELS[i - 1]
            first, second = by_level[N][0], by_level[N][1]
            np.testing.assert_array_equal(first, np.repeat(out[i - 1][1], m, axis=0))
            # the repeated input has repeated tokens; the jittered start has none, and lies in the ball
            assert len({tuple(r) for r in first}) <= N // m
            assert len({tuple(r) for r in second}) == N
            assert np.all(np.linalg.norm(second, axis=1) <= R * (1 + 1e-12))
            deep = np.linalg.norm(first, axis=1) < R - 6 * sd
            noise.append((second - first)[deep].ravel())
    noise = np.concatenate(noise)
    assert noise.size >= 300
    assert 0.85 * sd <= noise.std() <= 1.15 * sd, (noise.size, noise.std(), sd)
    assert abs(noise.mean()) <= 5 * sd / np.sqrt(noise.size)


def test_without_jitter_the_warm_ascent_starts_at_the_repeated_input():
    out, inputs = _ladder(0, jitter=0.0)
    by_level = _by_level(inputs)
    for i in range(1, len(LEVELS)):
        np.testing.assert_array_equal(by_level[LEVELS[i]][1], by_level[LEVELS[i]][0])


def test_evaluation_counts_and_start_kinds_follow_the_definition():
    """Level 0: bottom_restarts ascents × (iterations + 1) evaluations, starts alternating ball
    (restart 0: inside) and sphere (restart 1: every token at |x| = R).  Level i > 0: 1 (the repeated
    input) + restarts × (iterations + 1); its random restart has index 1: on the sphere."""
    out, inputs = _ladder(3)
    by_level = _by_level(inputs)
    per = ITER + 1
    assert len(by_level[LEVELS[0]]) == 3 * per
    starts = by_level[LEVELS[0]][::per]
    assert np.all(np.linalg.norm(starts[0], axis=1) < R * (1 - 1e-9))
    np.testing.assert_allclose(np.linalg.norm(starts[1], axis=1), R, rtol=1e-12)
    assert np.all(np.linalg.norm(starts[2], axis=1) < R * (1 - 1e-9))
    for N in LEVELS[1:]:
        assert len(by_level[N]) == 1 + 2 * per
        np.testing.assert_allclose(np.linalg.norm(by_level[N][1 + per], axis=1), R, rtol=1e-12)


def test_same_generators_same_ladder_bit_for_bit():
    (a, _), (b, _) = _ladder(7), _ladder(7)
    for (va, Xa), (vb, Xb) in zip(a, b):
        assert va == vb
        np.testing.assert_array_equal(Xa, Xb)
    c, _ = _ladder(8)
    assert not np.array_equal(a[0][1], c[0][1])


def test_without_warm_start_each_level_is_the_plain_random_restart_estimate():
    """``warm_start=False``: level i is :func:`sup_error` with ``rngs[i]`` (bottom_restarts at level 0,
    restarts above), so no monotonicity is promised."""
    out, _ = _ladder(5, warm_start=False)
    for i, (N, (value, X)) in enumerate(zip(LEVELS, out)):
        want = search.sup_error(search.InputMap(_A), search.InputMap(_B), N, D, radius=R,
                                rng=np.random.default_rng([5, i]), restarts=3 if i == 0 else 2,
                                iterations=ITER, lr=LR)
        assert value == want[0]
        np.testing.assert_array_equal(X, want[1])


def test_projection_and_duplication_are_the_documented_maps():
    """project_to_ball: rows inside are unchanged, rows outside are scaled radially to |x| = R;
    duplicate_tokens: rows x¹ … x¹ (m times) x² …, token 1 first, the empirical measure unchanged."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(40, 3)) * 1.5
    P = search.project_to_ball(X, 1.2)
    n = np.linalg.norm(X, axis=1)
    np.testing.assert_array_equal(P[n <= 1.2], X[n <= 1.2])
    np.testing.assert_allclose(np.linalg.norm(P[n > 1.2], axis=1), 1.2, rtol=1e-14)
    np.testing.assert_allclose(P[n > 1.2] / 1.2, X[n > 1.2] / n[n > 1.2, None], rtol=1e-14)
    Y = search.duplicate_tokens(X[:3], 4)
    np.testing.assert_array_equal(Y, np.array([X[k] for k in range(3) for _ in range(4)]))
