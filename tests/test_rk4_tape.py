"""The taped RK4 map of the MV-ODE and its exact gradient (numeric/attention/rk4_tape.py).

Properties, from the mathematics: the tape's final state is ``MeanFieldLimit.forward``'s bit for bit
(the sup search's errors are unchanged); its VJP is the derivative of the map ``forward`` computes
(Taylor remainder of order 2 for f(X) = <r, Phi_h(X)>, central differences to their own error), linear
in the cotangent, and tends to the continuous adjoint's P_0 / N as h -> 0 at RK4's order; a planted
wrong reverse step (the stage weights of the forward pass used in reverse order) fails the same checks.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.numeric.attention.mean_field import HeadLaw, MeanFieldLimit
from transformer_limits.numeric.attention.rk4_tape import RK4Tape, forward_taped
from transformer_limits.verify.taylor import taylor_test

BACKENDS = ("numba", "blas")


def problem(seed: int, N: int = 6, causal: bool = False, backend: str = "numba"):
    mf = MeanFieldLimit(2, 2, 2, causal=causal, backend=backend)
    law = HeadLaw.random(3, 4, 2, 2, 2, seed=seed, gain=1.5)
    rng = np.random.default_rng([seed, 1])
    return mf, law, rng.uniform(-1.0, 1.0, (N, 2)), rng.normal(size=(N, 2)), rng.normal(size=(N, 2))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("steps", [2, 6])
def test_final_state_is_forward_bit_for_bit(backend, causal, steps):
    mf, law, X0, _, _ = problem(3, causal=causal, backend=backend)
    tape = forward_taped(mf, X0, law, steps)
    assert np.array_equal(tape.final, mf.forward(X0, law, steps).final)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_vjp_passes_the_taylor_test_of_the_rk4_map(backend, causal):
    """f(X) = <r, Phi_h(X)>: |f(X + eps V) - f(X) - eps <vjp(r), V>| = O(eps^2) (rate 2, not 1)."""
    mf, law, X0, r, V = problem(5, causal=causal, backend=backend)
    steps = 4
    grad = forward_taped(mf, X0, law, steps).vjp(r)
    f = lambda X: np.array([np.sum(r * mf.forward(X, law, steps).final)])  # noqa: E731
    result = taylor_test(f, X0, V, [np.array([np.sum(grad * V)])], h0=0.05)
    assert result.passed, (result.rates, result.remainders)


def test_vjp_equals_central_differences_of_forward():
    mf, law, X0, r, _ = problem(7, N=5)
    steps, eps = 4, 1e-6
    grad = forward_taped(mf, X0, law, steps).vjp(r)
    fd = np.empty_like(X0)
    for idx in np.ndindex(*X0.shape):
        E = np.zeros_like(X0)
        E[idx] = eps
        fd[idx] = np.sum(r * (mf.forward(X0 + E, law, steps).final - mf.forward(X0 - E, law, steps).final)) / (2 * eps)
    # central differences: O(eps^2) truncation, O(round-off / eps) = 1e-10 relative here
    assert np.abs(grad - fd).max() <= 1e-8 * np.abs(fd).max()


def test_vjp_is_linear_in_the_cotangent():
    mf, law, X0, r, s = problem(11)
    tape = forward_taped(mf, X0, law, 4)
    combined = tape.vjp(2.5 * r - 0.75 * s)
    assert np.allclose(combined, 2.5 * tape.vjp(r) - 0.75 * tape.vjp(s), rtol=0, atol=1e-13 * np.abs(combined).max())


def test_vjp_tends_to_the_continuous_adjoint_at_rk4_order():
    """Both approximate r^T dPhi/dX_0 of the exact flow to O(h^4): their difference falls like h^4
    (a factor 16 per halving of h; > 8 asked, pre-asymptotic slack)."""
    mf, law, X0, r, _ = problem(13)
    N = X0.shape[0]
    gaps = []
    for steps in (4, 8, 16):
        tape = forward_taped(mf, X0, law, steps)
        continuous = mf.adjoint(tape.final, N * r, law, steps, node_grads=False)[1] / N
        gaps.append(np.abs(tape.vjp(r) - continuous).max())
    assert gaps[0] / gaps[1] > 8 and gaps[1] / gaps[2] > 8, gaps


def test_vjp_rejects_a_cotangent_of_the_wrong_shape():
    mf, law, X0, _, _ = problem(1)
    with pytest.raises(ValueError, match="r must have the shape"):
        forward_taped(mf, X0, law, 2).vjp(np.zeros((X0.shape[0] + 1, 2)))


def test_forward_taped_checks_its_steps():
    mf, law, X0, _, _ = problem(1)
    with pytest.raises(ValueError, match="steps"):
        forward_taped(mf, X0, law, 3)  # 3 nodes: steps must be a multiple of 2


class _ReversedWeightsTape(RK4Tape):
    """Deliberately wrong reverse step: the cotangent weights applied as if the stages ran backward
    (k4's weight on stage 1, ...): right at h -> 0 (first order), wrong at O(h^2)."""

    def vjp(self, r):
        nu, h = self._nu, 1.0 / self.steps
        lam = np.array(r, dtype=np.float64)
        for s in range(self.steps - 1, -1, -1):
            (t1, Y1, c1), (t2, Y2, c2), (t3, Y3, c3), (t4, Y4, c4) = self._stages[4 * s:4 * s + 4]
            g1 = nu.vjp(t1, Y1, h / 6 * lam, False, cache=c1)[0]
            g2 = nu.vjp(t2, Y2, h / 3 * lam + h / 2 * g1, False, cache=c2)[0]
            g3 = nu.vjp(t3, Y3, h / 3 * lam + h / 2 * g2, False, cache=c3)[0]
            g4 = nu.vjp(t4, Y4, h / 6 * lam + h * g3, False, cache=c4)[0]
            lam = lam + g1 + g2 + g3 + g4
        return lam


def test_a_wrong_reverse_step_fails_the_taylor_test():
    mf, law, X0, r, V = problem(5)
    steps = 4
    tape = forward_taped(mf, X0, law, steps)
    wrong = _ReversedWeightsTape(tape.final, tape.steps, tape._nu, tape._stages).vjp(r)
    f = lambda X: np.array([np.sum(r * mf.forward(X, law, steps).final)])  # noqa: E731
    assert not taylor_test(f, X0, V, [np.array([np.sum(wrong * V)])], h0=0.05).passed
