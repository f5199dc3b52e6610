"""Rate-claim parser, design matrix, leading exponent and text forms."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_limits.testing import strategies as tls
from transformer_limits.verify.rate.claims import RateClaim, RateTerm, parse_rate_claim
import dataclasses


def test_parses_the_theory_claims():
    paper1 = parse_rate_claim("L^-1 + L^-1/3 H^-1/2", name="paper-1 forward")
    assert paper1.terms == (RateTerm("C1", {"L": -1}), RateTerm("C2", {"L": Fraction(-1, 3), "H": Fraction(-1, 2)}))
    assert paper1.parameters == ("L", "H")
    paper2 = parse_rate_claim("log(L)/L + 1/m")
    assert paper2.terms == (RateTerm("C1", {"L": -1}, {"L": 1}), RateTerm("C2", {"m": -1}))
    assert parse_rate_claim("N^-1/2").terms == (RateTerm("C1", {"N": Fraction(-1, 2)}),)


@pytest.mark.parametrize("text, expected", [
    ("L^(-1/3) H^{-1/2}", {"L": Fraction(-1, 3), "H": Fraction(-1, 2)}),
    ("L**-0.5", {"L": Fraction(-1, 2)}),
    ("1/(m L)", {"m": -1, "L": -1}),
    ("L^-1/m", {"L": -1, "m": -1}),           # '/' followed by a name divides
    ("1/sqrt(H)", {"H": Fraction(-1, 2)}),
    ("L * L^-2", {"L": -1}),
    ("(L H)^-1/2", {"L": Fraction(-1, 2), "H": Fraction(-1, 2)}),
])
def test_exponent_forms(text, expected):
    assert parse_rate_claim(text).terms[0].exponents == expected


def test_coefficient_names_explicit_and_default():
    claim = parse_rate_claim("C_fwd L^-1 + L^-1/3 H^-1/2 + C1 m^-1")
    assert claim.coefficient_names == ("C_fwd", "C2", "C1")
    claim = parse_rate_claim("K L^-1 + A/m", params=["L", "m"])
    assert claim.coefficient_names == ("K", "A")
    assert parse_rate_claim("C0 + 1/L").terms[0] == RateTerm("C0")


@pytest.mark.parametrize("text, token", [
    ("L^-1 - L^-2", "'-'"),
    ("L^x", "'x'"),
    ("2/L", "'2'"),
    ("L $ H", "'$'"),
    ("", "empty"),
    ("L^", "end of text"),
    ("log(2)", "log"),
    ("(L", "')'"),
    ("L C1", "'C1'"),
    ("L + ", "end of text"),
    ("L^-1/0", "zero denominator"),
])
def test_bad_claims_name_the_token(text, token):
    with pytest.raises(ValueError, match="rate claim") as info:
        parse_rate_claim(text)
    assert token in str(info.value)


def test_unknown_parameter_with_params():
    with pytest.raises(ValueError, match="unknown parameter 'H'"):
        parse_rate_claim("L^-1 + L^-1 H^-1/2 + C3 L^-2 H", params=["L"])


def test_claim_validation():
    with pytest.raises(ValueError, match="duplicate monomial"):
        parse_rate_claim("1/L + C5 L^-1")
    with pytest.raises(ValueError, match="test_function"):
        parse_rate_claim("1/L", error_functional="weak")
    with pytest.raises(ValueError, match="error_functional"):
        parse_rate_claim("1/L", error_functional="average")
    weak = parse_rate_claim("1/L", error_functional="weak", test_function="cos(x_1)", coupling="same B")
    assert weak.to_dict()["test_function"] == "cos(x_1)"


def test_design_matrix_and_predict():
    claim = parse_rate_claim("log(L)/L + 1/m")
    table = {"L": np.array([2.0, 4.0, 8.0]), "m": np.array([1.0, 10.0, 100.0])}
    X = claim.evaluate_terms(table)
    assert X.shape == (3, 2)
    np.testing.assert_allclose(X[:, 0], np.log(table["L"]) / table["L"])
    np.testing.assert_allclose(X[:, 1], 1 / table["m"])
    np.testing.assert_allclose(claim.predict(table, {"C1": 2.0, "C2": 3.0}), X @ [2.0, 3.0])
    with pytest.raises(ValueError, match="no column 'm'"):
        claim.evaluate_terms({"L": [2.0]})
    with pytest.raises(ValueError, match="positive"):
        claim.evaluate_terms({"L": [2.0], "m": [0.0]})


def test_leading_exponent():
    claim = parse_rate_claim("L^-1 + L^-1/3 H^-1/2")
    assert claim.leading_exponent("L") == Fraction(-1, 3)
    assert claim.leading_exponent("H") == Fraction(-1, 2)
    paper2 = parse_rate_claim("1/L + log(L)/L + 1/m")
    assert paper2.leading_exponent("L") == -1
    assert paper2.leading_term("L").log_powers == {"L": 1}   # log L / L is the slower of the two
    with pytest.raises(ValueError, match="'N'"):
        claim.leading_exponent("N")


def test_text_and_latex():
    claim = parse_rate_claim("L^-1 + L^-1/3 H^-1/2")
    assert str(claim) == "C1 L^-1 + C2 L^-1/3 H^-1/2"
    assert claim.latex() == r"C_{1}\, L^{-1} + C_{2}\, L^{-1/3}\, H^{-1/2}"
    assert parse_rate_claim("log(L)/L").latex() == r"C_{1}\, \log L\, L^{-1}"


# -- hypothesis: round trips -----------------------------------------------------------------------

_exponent = st.fractions(min_value=-3, max_value=3, max_denominator=6).filter(lambda q: q != 0)
_monomial = st.tuples(
    st.dictionaries(st.sampled_from(["L", "H", "m", "N", "d_k"]), _exponent, max_size=3),
    st.dictionaries(st.sampled_from(["L", "N"]), st.integers(1, 3).map(Fraction), max_size=1),
)


@st.composite
def claims(draw):
    monomials = draw(st.lists(_monomial, min_size=1, max_size=4, unique_by=lambda m: (
        tuple(sorted(m[0].items())), tuple(sorted(m[1].items())))))
    terms = tuple(RateTerm(f"C{k + 1}", e, g) for k, (e, g) in enumerate(monomials))
    return RateClaim("c", terms)


@settings(max_examples=150, deadline=None)
@given(claims())
def test_str_round_trip(claim):
    assert parse_rate_claim(str(claim), name="c") == claim
    assert claim.latex()


@settings(max_examples=100, deadline=None)
@given(claims(), st.integers(0, 2**16))
def test_design_matrix_matches_terms_and_leading_exponent(claim, seed):
    rng = np.random.default_rng(seed)
    table = {p: rng.uniform(1.5, 100.0, size=5) for p in claim.parameters}
    X = claim.evaluate_terms(table) if claim.parameters else None
    for k, term in enumerate(claim.terms):
        manual = np.ones(5)
        for p, a in term.exponents.items():
            manual *= table[p] ** float(a)
        for p, b in term.log_powers.items():
            manual *= np.log(table[p]) ** float(b)
        if X is not None:
            np.testing.assert_allclose(X[:, k], manual, rtol=1e-12)
    for p in claim.parameters:
        q = claim.leading_exponent(p)
        assert all(t.exponents.get(p, 0) <= q for t in claim.terms if p in t.parameters)


@settings(max_examples=100, deadline=None)
@given(tls.rate_claims(params=("L", "H", "m", "N"), max_terms=4, logs=True))
def test_public_strategy_claims_parse_and_round_trip(text):
    """The claims of transformer_limits.testing.strategies (decaying powers, log factors) parse, and
    their canonical text round-trips (the generated RateClaim objects above cover growth and constants)."""
    claim = parse_rate_claim(text, name="c")
    assert 1 <= len(claim.terms) <= 4 and set(claim.parameters) <= {"L", "H", "m", "N"}
    assert parse_rate_claim(str(claim), name="c") == claim
    assert all(a < 0 for t in claim.terms for a in t.exponents.values())


# -- input limits (issue 11): ValueError with a clear message, never OverflowError/RecursionError ------

@pytest.mark.parametrize("text, match", [
    ("L^1e999", "too long or too large"),
    ("L^-1e999", "too long or too large"),
    ("L^(1e-999)", "too long or too large"),
    ("1e999999999/L", "too long or too large"),
    ("L^1e5", "outside the stated limits"),
    ("L^-1/99999", "outside the stated limits"),
    ("((L^50)^50)", "outside the stated limits"),
    ("(" * 40 + "L" + ")" * 40, "nested deeper than the stated limit"),
    ("(" * 999 + "L" + ")" * 999, "nested deeper than the stated limit"),
    ("(" * 5000 + "L" + ")" * 5000, "over the stated limit"),
    ("L^-1 + " * 400 + "m^-1", "over the stated limit"),
], ids=lambda v: v[:20] if isinstance(v, str) else None)
def test_claim_input_limits(text, match):
    from transformer_limits.verify.rate import claim_grammar as grammar

    with pytest.raises(ValueError, match=match) as info:
        parse_rate_claim(text)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400
    # the limits are stated in the module and sit above every realistic claim
    assert grammar.MAX_NESTING >= 8 and grammar.MAX_ABS_EXPONENT >= 10
    assert str(parse_rate_claim("(" * grammar.MAX_NESTING + "L" + ")" * grammar.MAX_NESTING)) == "C1 L"
    assert parse_rate_claim("L^-100 + L^(1/10000)").leading_exponent("L") == Fraction(1, 10000)


def test_programmatic_terms_respect_the_exponent_limit():
    with pytest.raises(ValueError, match="outside the stated limits"):
        RateTerm("C1", {"L": 10**999})
    with pytest.raises(ValueError, match="short rational"):
        RateTerm("C1", {"L": "1" * 100})

# ------------------------------------------------------------------------------------------------
# Mutation-round tests (were tests/test_mutants_rate_claims.py): properties the mutation runs showed were not
# pinned down.
# ------------------------------------------------------------------------------------------------


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
