"""Properties of ``verify/rate_claims.py`` that the mutation baseline showed were not pinned down:
which term of a claim is the slowest, the canonical text and LaTeX of exponents 1, the validation of
parameter names and tables, and error messages that name the offending token.
"""

import dataclasses

import numpy as np
import pytest

from transformer_limits.verify.rate_claims import RateClaim, RateTerm, parse_rate_claim


@pytest.mark.parametrize("text", ["log(L)^-1 L^-1 + L^-1", "L^-1 + log(L)^-1 L^-1"])
def test_slowest_term_prefers_no_log_over_a_negative_log_power(text):
    # 1/L decays slower than 1/(L log L): at equal exponents the larger log power wins, and "no log"
    # is log power 0 > −1, whatever the order of the terms
    term = parse_rate_claim(text).leading_term("L")
    assert dict(term.exponents) == {"L": -1} and not term.log_powers
    # and log(L)/L is slower than 1/L (log power 1 > 0)
    assert dict(parse_rate_claim("L^-1 + log(L) L^-1").leading_term("L").log_powers) == {"L": 1}


def test_canonical_text_and_latex_of_unit_and_other_powers():
    claim = parse_rate_claim("log(L)/L + log(L)^2 L^-2 + L^2 H")
    assert [t.monomial() for t in claim.terms] == ["log(L) L^-1", "log(L)^2 L^-2", "L^2 H"]
    assert [t.latex() for t in claim.terms] == [r"C_{1}\, \log L\, L^{-1}", r"C_{2}\, (\log L)^{2}\, L^{-2}",
                                                r"C_{3}\, L^{2}\, H"]
    assert parse_rate_claim(str(claim)).terms == claim.terms  # the canonical form parses back to the same terms
    table = {"L": np.array([4.0, 9.0]), "H": np.array([2.0, 5.0])}
    expected = np.column_stack([np.log(table["L"]) / table["L"], np.log(table["L"]) ** 2 / table["L"] ** 2,
                                table["L"] ** 2 * table["H"]])
    np.testing.assert_allclose(claim.evaluate_terms(table), expected, rtol=1e-14)


@pytest.mark.parametrize("name", ["L-1", "2L", "", "log"])
def test_invalid_parameter_names_are_rejected(name):
    with pytest.raises(ValueError, match="not a valid parameter name"):
        RateTerm("C1", {name: -1})
    with pytest.raises(ValueError, match="not a valid parameter name"):
        RateTerm("C1", {}, {name: 1})


def test_terms_are_immutable_values():
    term = RateTerm("C1", {"L": -1})
    assert term == RateTerm("C1", {"L": -1.0}) and len({term, RateTerm("C1", {"L": -1})}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        term.coefficient = "C2"  # a hashable value: changing it would corrupt sets and dict keys


def test_table_columns_of_different_lengths_are_rejected():
    claim = parse_rate_claim("L^-1 + H^-1/2")
    with pytest.raises(ValueError, match="different lengths"):
        claim.evaluate_terms({"L": [1.0, 2.0, 3.0], "H": [1.0, 2.0]})


def test_errors_name_the_offending_token_and_position():
    with pytest.raises(ValueError, match=r"expected '\)', found 'H' at position 7"):
        parse_rate_claim("sqrt(L H)")
    with pytest.raises(ValueError, match=r"zero denominator in exponent at position 5"):
        parse_rate_claim("L^-1/0")  # position 5 is the 0
    with pytest.raises(ValueError, match=r"unknown parameter 'X' \(params are \['L'\]\) at position 5"):
        parse_rate_claim("sqrt(X)", params=["L"])


@pytest.mark.parametrize("text, params", [("exp(L)", ["L"]), ("C(L) L^-1", None), ("C1(L H)^-1", None)])
def test_a_name_applied_to_arguments_is_not_a_constant(text, params):
    # a coefficient is a constant: "C(L)" (a function of L) or an unknown function "exp(L)" must not be
    # read as a constant times L
    with pytest.raises(ValueError):
        parse_rate_claim(text, params=params)
    assert isinstance(parse_rate_claim("C1 L^-1"), RateClaim)


def test_a_constant_term_has_one_value_per_point_even_with_no_points():
    """A floor term C (no parameters) evaluates to ones of length n_points: 3 points give 3 ones,
    an empty table (0 points) gives an empty array, never a phantom point."""
    claim = parse_rate_claim("1 + L^-1")
    floor = claim.terms[0]
    assert dict(floor.exponents) == {} and dict(floor.log_powers) == {}
    np.testing.assert_array_equal(floor.evaluate({"L": np.array([2.0, 4.0, 8.0])}), np.ones(3))
    assert floor.evaluate({}).shape == (0,)
