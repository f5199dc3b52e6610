"""``assert_taylor_rate``, ``assert_identity``, ``assert_rate`` and ``node_seed`` of
``transformer_limits.testing`` (issue 24).

A right derivative passes and a wrong one raises ``AssertionError`` with the table, at first and
second order, for scalar, vector and matrix-valued f, with ``jvp`` as an array or a callable.  The
Taylor verdicts are deterministic (fixed points and directions; the remainders have no randomness),
and so are the identity checks (``random.Random(seed)`` points); the rate assertions use seeded
lognormal data and a stated false-failure rate of 1 % (fixed seeds: the same verdict on every run).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import sympy as sp

from transformer_limits.testing import assert_identity, assert_rate, assert_taylor_rate, node_seed
from transformer_limits.verify import InconclusiveWarning
from transformer_limits.verify.stats.seed_bootstrap import lognormal_seed_noise

RNG = np.random.default_rng(24)
W = RNG.normal(size=(4, 3))
X = RNG.normal(size=(5, 3))
DX = RNG.normal(size=(5, 3))


def layer(x):
    """tanh(x Wᵀ): (5, 3) -> (5, 4), a matrix-valued f."""
    return np.tanh(x @ W.T)


def layer_jvp(x, dx):
    return (1.0 - np.tanh(x @ W.T) ** 2) * (dx @ W.T)


def layer_hvp(x, dx):
    t = np.tanh(x @ W.T)
    return -2.0 * t * (1.0 - t**2) * (dx @ W.T) ** 2


# --- assert_taylor_rate -------------------------------------------------------------------------


def test_a_right_first_order_expansion_passes_with_power():
    check = assert_taylor_rate(layer, X, DX, layer_jvp(X, DX))
    assert check.state == "pass" and check.passed and check.power == 1.0
    assert check.name == "taylor_remainder_rate" and check.expected == pytest.approx(-1.9)
    assert -2.1 < check.measured < -1.9  # the exponent of 1/h: the order is 2
    assert check.statistics["alpha"] == 0.01 and check.statistics["method"] == "t"
    assert "remainder order 1" in check.alternative


def test_jvp_may_be_a_callable_of_x_and_dx():
    assert assert_taylor_rate(layer, X, DX, layer_jvp).to_dict() == \
        assert_taylor_rate(layer, X, DX, layer_jvp(X, DX)).to_dict()


def test_a_wrong_first_order_term_fails_with_the_table():
    with pytest.raises(AssertionError) as info:
        assert_taylor_rate(layer, X, DX, 1.05 * layer_jvp(X, DX))
    text = str(info.value)
    assert text.startswith("Taylor remainder rate failed: |f(x + h dx) − f(x) − h·jvp| = O(h^2)")
    assert "local order" in text and "remainder" in text and "FAIL" in text
    assert len([line for line in text.splitlines() if line.strip().startswith(("0.05 ", "0.025 "))]) == 2
    assert "jvp does not match f" in text
    # the error carries the failed Check: the order a wrong term leaves, the remainders, the floor
    check = info.value.check
    assert check.state == "fail" and not check.passed
    assert 0.9 < -check.measured < 1.1  # remainder order ~1
    assert len(check.statistics["local_orders_h"]) == len(check.statistics["remainders"]) - 1 == 7
    assert check.statistics["round_off_floor"] > 0


def test_a_right_second_order_expansion_passes_and_claims_order_3():
    check = assert_taylor_rate(layer, X, DX, layer_jvp, hvp=layer_hvp)
    assert check.state == "pass" and -3.2 < check.measured < -2.9
    assert "(h²/2)·hvp" in check.claim and check.statistics["remainder_order"] == 3


@pytest.mark.parametrize("wrong", [lambda x, dx: -layer_hvp(x, dx), lambda x, dx: 0.0 * layer_hvp(x, dx)])
def test_a_wrong_or_missing_second_order_term_fails(wrong):
    with pytest.raises(AssertionError, match="hvp does not match f"):
        assert_taylor_rate(layer, X, DX, layer_jvp, hvp=wrong)


def test_a_wrong_jvp_also_fails_the_second_order_check():
    with pytest.raises(AssertionError, match="Taylor remainder rate failed"):
        assert_taylor_rate(layer, X, DX, lambda x, dx: 1.05 * layer_jvp(x, dx), hvp=layer_hvp)


def test_claiming_a_higher_order_than_true_fails():
    with pytest.raises(AssertionError, match=r"O\(h\^3\)"):
        assert_taylor_rate(layer, X, DX, layer_jvp, order=3)


def test_a_faster_remainder_passes_an_at_least_claim():
    # sin at 0: the second derivative vanishes, R_1 = h^3/6 + ..., which is "at least order 2"
    check = assert_taylor_rate(np.sin, 0.0, 1.0, 1.0)
    assert check.state == "pass" and check.measured < -2.8


def test_scalar_and_vector_functions():
    assert assert_taylor_rate(np.exp, 0.3, 1.0, np.exp(0.3)).state == "pass"
    with pytest.raises(AssertionError):
        assert_taylor_rate(np.exp, 0.3, 1.0, np.exp(0.31))
    v = np.array([0.1, -0.4, 0.7])
    # f: R^3 -> R, a scalar output of a vector input (jvp is a number)
    check = assert_taylor_rate(lambda x: np.sum(np.sin(x) ** 2), v, np.ones(3), np.sum(np.sin(2 * v)))
    assert check.state == "pass"


def test_an_exact_expansion_at_the_round_off_floor_passes_and_says_so():
    A = RNG.normal(size=(3, 3))
    check = assert_taylor_rate(lambda x: A @ x, np.ones(3), np.arange(3.0), A @ np.arange(3.0))
    assert check.state == "pass" and "exact to round-off" in check.note
    assert check.statistics["method"].startswith("taylor_test: every remainder")


def test_too_little_power_is_inconclusive_and_strict_raises():
    # cos(5x) at 0.3 is pre-asymptotic at the coarse steps; an alternative as close as order 1.85
    # cannot be told from the claim 2 - 0.1 (deterministic data: the same verdict every run)
    f, jvp = (lambda x: np.cos(5 * x)), -5 * np.sin(1.5)
    with pytest.warns(InconclusiveWarning, match="inconclusive"):
        check = assert_taylor_rate(f, 0.3, 1.0, jvp, alternative=1.85)
    assert check.passed and check.state == "inconclusive" and check.power < 0.8
    with pytest.raises(AssertionError, match="inconclusive"):
        assert_taylor_rate(f, 0.3, 1.0, jvp, alternative=1.85, strict=True)


@pytest.mark.parametrize("kwargs, match", [
    (dict(dx=np.ones(4)), "dx must have the shape of x"),
    (dict(jvp=np.ones(4)), r"jvp must have the shape of f\(x\), \(5, 4\)"),
    (dict(jvp=np.ones((5, 4)), hvp=np.ones(3)), "hvp must have the shape"),
    (dict(order=0), "order must be an integer >= 1"),
    (dict(alpha=0.5), "alpha must be in"),
    (dict(tolerance=1.0), "tolerance must be in"),
    (dict(h0=-1.0), "h0 must be"),
    (dict(levels=3), "levels must be an integer >= 4"),
    (dict(fit_levels=9), "fit_levels must be an integer in"),
    (dict(factor=1.0), "factor must be in"),
    (dict(alternative=1.95), "alternative must be a remainder order below"),
    (dict(jvp=np.full((5, 4), np.nan)), "jvp must be finite"),
])
def test_bad_arguments_are_value_errors_naming_them(kwargs, match):
    args = dict(f=layer, x=X, dx=DX, jvp=layer_jvp(X, DX))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        assert_taylor_rate(**args)


def test_too_few_levels_above_the_floor_is_a_value_error():
    # R = h^2 exactly and tiny: only the coarsest remainder clears the floor
    with pytest.raises(ValueError, match="h0: only"):
        assert_taylor_rate(lambda x: x**2, 0.0, 1.0, 0.0, h0=1e-6)


# --- assert_identity ----------------------------------------------------------------------------

x, y = sp.symbols("x y")


def test_an_identity_simplify_can_prove_passes_symbolically():
    check = assert_identity(sp.sin(x) ** 2 + sp.cos(x) ** 2, 1)
    assert check.passed and check.state == "pass" and check.measured == 0.0
    assert check.statistics["method"].startswith("sympy.simplify")


def test_a_true_identity_checked_numerically_at_high_precision():
    check = assert_identity(sp.exp(x) / (sp.exp(x) + sp.exp(y)), 1 / (1 + sp.exp(y - x)), simplify=False,
                            points=6, digits=40)
    assert check.state == "pass" and check.statistics["points"] == 6 and check.measured < 1e-30


def test_a_false_identity_fails_naming_the_worst_point():
    with pytest.raises(AssertionError) as info:
        assert_identity(sp.sin(x) ** 2 - sp.cos(x) ** 2, 1)
    text = str(info.value)
    assert "worst point: x = " in text and "simplify(lhs - rhs) = -2*cos(x)**2" in text
    assert "relative difference" in text and text.count("max relative difference") == 8


def test_a_tiny_difference_is_found_at_enough_digits():
    lhs, rhs = sp.exp(x), sp.exp(x) + sp.Rational(1, 10**25)
    assert assert_identity(lhs, rhs, simplify=False, digits=30).passed  # below 10^-(30-10)
    with pytest.raises(AssertionError, match="worst point"):
        assert_identity(lhs, rhs, simplify=False, digits=45)


def test_matrix_identities_name_the_worst_entry():
    M = sp.Matrix([[x, y], [x * y, 1]])
    assert assert_identity(2 * M, sp.Matrix([[2 * x, 2 * y], [2 * x * y, 2]]), simplify=False).passed
    assert assert_identity(M - M, 0).passed  # "== 0" for a matrix
    with pytest.raises(AssertionError, match=r"entry \(1, 0\)"):
        assert_identity(2 * M, sp.Matrix([[2 * x, 2 * y], [2 * x * y + x, 2]]), simplify=False)

    # a large matrix is named by its shape and first entry in the message (printing it all is slow)
    big = sp.Matrix([x**k for k in range(30)])
    with pytest.raises(AssertionError, match=r"identity failed: Matrix\(30x1: \[1, …\]\) = Matrix\(30x1"):
        assert_identity(big, big + sp.Matrix([0] * 29 + [x]), simplify=False)


def test_points_respect_the_symbols_assumptions():
    p = sp.Symbol("p", positive=True)
    assert assert_identity(sp.sqrt(p**2), p, simplify=False).passed  # every point has p > 0
    with pytest.raises(AssertionError):
        assert_identity(sp.sqrt(x**2), x, simplify=False)  # false for x < 0
    n = sp.Symbol("n", integer=True)
    assert assert_identity(sp.cos(sp.pi * n) ** 2, 1, simplify=False).passed


def test_explicit_points_and_redrawn_poles():
    assert assert_identity(x**2, x * x, points=[{x: 0.5}, {x: -3}], simplify=False).statistics["points"] == 2
    # 1/x at a random point: x = 0 is redrawn, never reported
    assert assert_identity(1 / x * x**2, x, simplify=False, points=50).passed
    with pytest.raises(ValueError, match="not finite"):
        assert_identity(1 / x, 1 / x, points=[{x: 0}], simplify=False)


@pytest.mark.parametrize("call, match", [
    (lambda: assert_identity(x, x, digits=20), "digits must be an integer >= 27"),
    (lambda: assert_identity(x, x, seed=-1), "seed must be"),
    (lambda: assert_identity(sp.Matrix([x, y]), sp.Matrix([x])), "same shape"),
    (lambda: assert_identity(x + y, y + x, symbols=[x]), "missing"),
    (lambda: assert_identity(x, x, points=0), "points must be >= 1"),
    (lambda: assert_identity(x, x, points=[{y: 1}], simplify=False), "points must map every symbol"),
    (lambda: assert_identity(sp.Eq(x, 1), 1), "lhs must be"),
])
def test_identity_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- assert_rate (the testing face) and node_seed ---------------------------------------------


L = 2.0 ** np.arange(3, 10)


def test_assert_rate_is_verify_assert_rate():
    from transformer_limits.verify.assertions import assert_rate as verify_assert_rate

    good = lognormal_seed_noise(2.0 / L, 32, 0.2, 0)  # (n_levels, n_seeds), seeded
    assert assert_rate({"L": L}, good, "L^-1").to_dict() == verify_assert_rate({"L": L}, good, "L^-1").to_dict()
    bad = lognormal_seed_noise(3.0 * L**-0.5, 20, 0.5, 1)
    with pytest.raises(AssertionError, match="rate claim failed"):
        assert_rate({"L": L}, bad, "L^-1")  # false-failure rate 1 %; a decay L^-1/2 must fail


def test_assert_rate_warnings_point_at_the_caller():
    few = lognormal_seed_noise(2.0 / L[:4], 3, 0.5, 2)  # 4 levels, 3 seeds: too little power
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check = assert_rate({"L": L[:4]}, few, "L^-1")
    assert check.state == "inconclusive"
    assert [w.category for w in caught] == [InconclusiveWarning]
    assert caught[0].filename == __file__


def test_node_seed_is_reproducible_and_distinct():
    a = node_seed("tests/test_x.py::test_y")
    assert a == node_seed("tests/test_x.py::test_y") and 0 <= a < 2**32
    assert a != node_seed("tests/test_x.py::test_y[1]") and a != node_seed("tests/test_x.py::test_y", base=1)
    with pytest.raises(ValueError, match="node_id"):
        node_seed("")
    with pytest.raises(ValueError, match="base"):
        node_seed("t", base=-1)
