"""The bounds of docs/theory.md §A.3 hold at hypothesis-drawn configurations, and are not vacuous."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_limits as tl
from transformer_limits.numeric.attention import reference as ref


def _scaled(rng, shape, radius2):
    """Random matrix with operator norm exactly radius2."""
    M = rng.normal(size=shape)
    return M * (radius2 / np.linalg.norm(M, 2))


@settings(max_examples=60)
@given(seed=st.integers(0, 2**32 - 1), R=st.floats(0.1, 2.0), R_theta=st.floats(0.3, 1.5),
       N=st.integers(1, 6), d=st.integers(1, 4))
def test_bounds_hold(seed, R, R_theta, N, d):
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(N, d))
    Y *= (R * rng.random((N, 1))) / np.linalg.norm(Y, axis=1, keepdims=True)
    x = rng.normal(size=(1, d))
    x *= R * rng.random() / np.linalg.norm(x)
    QtK = _scaled(rng, (d, d), R_theta**2)
    Q, K = QtK.T.copy(), np.eye(d)  # Q^T K = QtK
    V = _scaled(rng, (d, d), R_theta**2)
    vals = tl.derivation("attention-bounds", R=R, R_theta=R_theta, x_norm=float(np.linalg.norm(x))).values
    slack = 1 + 1e-9
    assert np.linalg.norm(ref.attention_reference(x, Y, Q, K, V)) <= vals["attention_bound"] * slack
    assert np.linalg.norm(ref.jacobian_reference(x, Y, Q, K, V)[0], 2) <= vals["jacobian_bound"] * slack
    lions = ref.lions_reference(x, Y, Q, K, V)[0]
    assert max(np.linalg.norm(L, 2) for L in lions) <= vals["lions_derivative_bound"] * slack


def test_factor_two_in_the_exponent_is_needed():
    """A measure with almost all mass at -R e and a tiny atom at +R e: pi(x, Re) -> e^{2 R_theta^2 R |x|}."""
    R, R_theta, eps = 1.0, 1.0, 1e-6
    e = np.array([[1.0]])
    Y = np.array([[R], [-R]])
    w = np.array([eps, 1 - eps])
    x = e * R
    lions = ref.lions_reference(x, Y, np.eye(1) * R_theta**2, np.eye(1), np.eye(1) * R_theta**2, w)
    _, p = ref._softmax_weights(x, Y, np.eye(1) * R_theta**2, np.eye(1), w)
    vals = tl.derivation("attention-bounds", R=R, R_theta=R_theta).values
    assert p[0, 0] <= vals["softmax_density_bound"]
    wrong_bound = np.exp(R_theta**2 * R * R)  # missing factor 2
    assert p[0, 0] > wrong_bound  # the wrong bound is violated
    assert np.abs(lions[0, 0]).max() <= vals["lions_derivative_bound"]


def test_bounds_need_both_radii():
    with pytest.raises(ValueError, match="R_theta"):
        tl.derivation("attention-bounds", R=1.0)
    with pytest.raises(ValueError, match="'R'"):
        tl.derivation("attention-bounds", R=-1.0, R_theta=1.0)
