"""Property tests of a home-made attention variant (docs/testing.md walks through them).

    python3 -m pytest examples/property_tests                       # all pass
    python3 -m pytest examples/property_tests --tl-report out/      # ... and write out/index.html

``test_forgetting_the_keys_is_caught`` passes because the wrong derivative FAILS ``assert_taylor_rate``
(an AssertionError, expected).  Statistical checks use fixed seeds; hypothesis runs derandomized.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings

from sigmoid_attention import (residual_flow, sigmoid_attention, sigmoid_attention_jvp,
                               sigmoid_attention_jvp_forgetting_keys)
from transformer_limits.testing import assert_identity, assert_rate, assert_taylor_rate
from transformer_limits.testing import strategies as tls

rng = np.random.default_rng(0)
X, dX = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
Q, K, V = rng.normal(size=(2, 3)) / 2, rng.normal(size=(2, 3)) / 2, rng.normal(size=(3, 3)) / 2


def A(Y):
    return sigmoid_attention(Y, Q, K, V)


def test_the_derivative_is_right():
    # remainder |A(X + h dX) - A(X) - h dA| must decay like h^2
    assert_taylor_rate(A, X, dX, sigmoid_attention_jvp(X, dX, Q, K, V))


def test_forgetting_the_keys_is_caught():
    # the remainder of the wrong derivative decays like h: the assertion must fail
    with pytest.raises(AssertionError, match="Taylor remainder rate failed"):
        assert_taylor_rate(A, X, dX, sigmoid_attention_jvp_forgetting_keys(X, dX, Q, K, V))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(tls.transformer_inputs(N=(1, 6), d=3), tls.attention_parameters(d=3, d_k=2, d_v=3, heads=1, bound=1.0))
def test_the_derivative_is_right_everywhere(X0, params):
    Qh, Kh, Vh = params["Q"][0], params["K"][0], params["V"][0]
    direction = np.cos(np.arange(X0.size)).reshape(X0.shape)  # a fixed direction, no zero rows

    def jvp(Y, dY):  # jvp may also be a callable of (x, dx)
        return sigmoid_attention_jvp(Y, dY, Qh, Kh, Vh)

    assert_taylor_rate(lambda Y: sigmoid_attention(Y, Qh, Kh, Vh), X0, direction, jvp)


def test_depth_rate():
    # 12 random token sets ("seeds"): error of L residual layers against L = 2048, claim O(1/L);
    # false-failure rate 1 % (alpha), fixed seed: the same verdict on every run
    Ls = np.array([4, 8, 16, 32, 64])
    errors = np.empty((Ls.size, 12))
    for s in range(12):
        X0 = np.random.default_rng(100 + s).normal(size=(4, 3))
        reference = residual_flow(X0, Q, K, V, 2048)
        errors[:, s] = [np.linalg.norm(residual_flow(X0, Q, K, V, L) - reference) for L in Ls]
    assert_rate({"L": Ls}, errors, "L^-1", resample="paired")  # each column is one token set at every L


def test_sigmoid_derivative_identity():
    z = sp.Symbol("z", real=True)
    sigma = 1 / (1 + sp.exp(-z))
    assert_identity(sp.diff(sigma, z), sigma * (1 - sigma))
