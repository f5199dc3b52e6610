"""Taylor block expansions of the MV-ODE flow map (derivation ``flow-taylor``, numeric.flow_taylor).

The rate tests are deterministic up to round-off (no sampling error: the remainder of a correct
order-k expansion is C h^{k+1} + O(h^{k+2}), and the RK4 reference with 32 steps is ~1e-5 of it); their
only failure mode is pre-asymptotic behaviour at the finest steps h = 0.2 * 2^-i, i = 3..5.  Over 300
random instances of the drawn shapes (N <= 4, d <= 3, d_k, d_v, heads <= 2) the smallest minimum rates
were 1.96, 2.96 and 3.98 for k = 1, 2, 3 (threshold k + 0.9): false-failure rate < 1/300 per example.
"""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer_limits as tl
from transformer_limits.cli import main
from transformer_limits.numeric.attention.flow_taylor import (
    WRONG_EXPANSIONS,
    first_variation,
    flow_expansion_builder,
    flow_taylor_coefficients,
    flow_taylor_expansion,
    frozen_heads,
    mv_field,
    random_flow_instance,
    reference_flow,
    second_variation,
    attention_jet,
)
from transformer_limits.verify.taylor import flow_taylor_remainder_rates
from transformer_limits.symbolic.derivation import list_derivations
from transformer_limits.testing import assert_taylor_rate
from transformer_limits.verify.taylor import taylor_test


@settings(max_examples=12)
@given(seed=st.integers(0, 2**31 - 1), order=st.integers(1, 3), N=st.integers(1, 4), d=st.integers(1, 3),
       d_k=st.integers(1, 2), d_v=st.integers(1, 2), heads=st.integers(1, 2))
def test_order_k_remainder_shrinks_at_rate_k_plus_1(seed, order, N, d, d_k, d_v, heads):
    r = flow_taylor_remainder_rates(seed, order, n_particles=N, d=d, d_k=d_k, d_v=d_v, n_heads=heads)
    assert r.passed, r.to_dict()
    assert r.expected_rate == order + 1
    assert r.min_rate < order + 1.5, r.to_dict()  # not a lucky cancellation of the next order either


@pytest.mark.parametrize("order", [1, 2, 3])
def test_measured_rates_default_instance(order):
    r = flow_taylor_remainder_rates(0, order)
    np.testing.assert_allclose(r.asymptotic_rates, order + 1, atol=0.05)


@pytest.mark.parametrize("wrong, order", [("no-lions", 2), ("no-lions", 3), ("wrong-half", 2), ("wrong-half", 3),
                                          ("no-second-lions", 3)])
@pytest.mark.parametrize("seed", [0, 1])
def test_wrong_expansion_fails_the_rate_test(wrong, order, seed):
    r = flow_taylor_remainder_rates(seed, order, wrong=wrong)
    assert not r.passed, r.to_dict()
    # the wrong term leaves an O(h^2) (first-variation errors) or O(h^3) (second-variation) remainder
    assert r.min_rate == pytest.approx(3.0 if wrong == "no-second-lions" else 2.0, abs=0.1)


def test_no_second_lions_only_touches_order_3():
    assert flow_taylor_remainder_rates(0, 2, wrong="no-second-lions").passed
    assert set(WRONG_EXPANSIONS) == {"no-lions", "wrong-half", "no-second-lions"}


def test_variations_against_jet_and_finite_differences():
    rng = np.random.default_rng(3)
    X, params = random_flow_instance(rng, n_particles=4, d=3, d_k=2, d_v=2, n_heads=2)
    heads = frozen_heads(params)
    v = rng.standard_normal(X.shape)
    # first path derivative of the generated jet == Jacobian + Lions kernels (independent pieces)
    w = np.full(4, 0.25)
    A1 = sum(wa * attention_jet(X, v, X, v, w, heads.Q[a], heads.K[a], heads.V[a])[1] @ heads.O[a].T
             for a, wa in enumerate(heads.weights))
    np.testing.assert_allclose(A1, first_variation(X, params, v), rtol=1e-12, atol=1e-13)
    # second variation == central second difference of the field along X + s v
    eps = 1e-4
    fd = (mv_field(X + eps * v, params) - 2 * mv_field(X, params) + mv_field(X - eps * v, params)) / eps**2
    np.testing.assert_allclose(second_variation(X, params, v), fd, rtol=1e-5, atol=1e-6)
    # the Lions term matters: without it DF differs from the directional derivative
    fd1 = (mv_field(X + eps * v, params) - mv_field(X - eps * v, params)) / (2 * eps)
    assert np.abs(first_variation(X, params, v, lions=False) - fd1).max() > 1e-3


def test_field_matches_mean_field_limit_and_head_law_input():
    from transformer_limits.numeric.attention.mean_field import HeadLaw, MeanFieldLimit

    law = HeadLaw.random(3, 2, 2, 2, 3, seed=4)
    X = np.random.default_rng(5).standard_normal((5, 2))
    mf = MeanFieldLimit(2, 2, 3, temperature=0.7, backend="numpy")
    np.testing.assert_allclose(mv_field(X, law, t=0.3, temperature=0.7), mf.field(law, 0.3, X), rtol=1e-12,
                               atol=1e-14)
    # order-1 expansion is the Euler step; the RK4 reference agrees with MeanFieldLimit on a constant law
    h = 0.05
    c = flow_taylor_coefficients(X, law, 1, t=0.3, temperature=0.7)
    np.testing.assert_allclose(flow_taylor_expansion(X, law, h, 1, t=0.3, temperature=0.7), X + h * c[0])
    const = HeadLaw({k: v[:1] for k, v in law.params.items()}, law.weights)
    np.testing.assert_allclose(reference_flow(X, const, 1.0, steps=8, temperature=0.7),
                               mf.forward(X, const, 8).final, rtol=1e-12)


def test_builder_for_taylor_expansion_registries():
    class Case:  # the attributes a lions-taylor TaylorCase provides
        d, d_k, d_v, n_atoms = 2, 2, 3, 4

    f, x, dx, coeffs = flow_expansion_builder(3)(Case(), np.random.default_rng(0))
    assert len(coeffs) == 3 and coeffs[0].shape == (4, 2)
    assert taylor_test(f, x, dx, coeffs, h0=0.1, levels=6).passed
    # the same expansion through the public API: c_1 = DΦ[dx] and c_2 = D²Φ[dx, dx]/2 leave O(h^3)
    check = assert_taylor_rate(f, x, dx, coeffs[0], hvp=2.0 * coeffs[1], h0=0.1, levels=6, strict=True)
    assert check.passed and check.statistics["remainder_order"] == 3
    # a dropped second-order term leaves the h² term: the order-3 claim fails with order ~2
    with pytest.raises(AssertionError, match="a remainder of order 2 means"):
        assert_taylor_rate(f, x, dx, coeffs[0], hvp=np.zeros_like(coeffs[1]), h0=0.1, levels=6)


def test_bad_arguments_raise_value_error():
    X, params = random_flow_instance(np.random.default_rng(0))
    with pytest.raises(ValueError, match="order"):
        flow_taylor_expansion(X, params, 0.1, 4)
    with pytest.raises(ValueError, match="wrong"):
        flow_taylor_coefficients(X, params, 2, wrong="bogus")
    with pytest.raises(ValueError, match="X must have shape"):
        flow_taylor_expansion(X[:, :1], params, 0.1, 2)
    with pytest.raises(ValueError, match="weights"):
        frozen_heads({**params, "weights": np.array([0.5, 0.6])})
    with pytest.raises(ValueError, match="law_or_params"):
        frozen_heads([1, 2])


def test_derivation_registered_and_cli_json(capsys):
    assert "flow-taylor" in [s.name for s in list_derivations()]
    d1 = tl.derivation("flow-taylor", order=1)
    assert "order_1" in d1.latex and "order_2" not in d1.generic_latex
    assert main(["derive", "flow-taylor", "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {"order_1", "order_2", "order_3", "first_variation", "second_variation"} <= set(payload["latex"])
    assert r"\partial_\mu\Gamma" in payload["latex"]["first_variation"]
    assert any("NOT the Lie series" in c for c in payload["checks"])
    assert main(["derive", "flow-taylor", "--param", "order=4"]) == 2
