"""Reading ``rate check`` data at scale, float64 range of claims and errors, and claim symbols missing
from ``--param`` (issue 25, items 2, 6 and 7).

* Large files: reading is linear in the rows (``benchmarks/bench_rate_check_read.py`` has the timings;
  no test here measures time).  These tests pin what the linear code must still do on 200,000 rows:
  find a repeated (point, seed) at the very end and name both lines, and group every row correctly.
* Overflow: errors outside [1e-150, 1e150] and claim terms outside float64's safe range (``L^-100
  H^-100`` is 1e-361 at L = H = 64) are bad input, one line naming the column or the term, raised
  before any fit, with no NumPy or SciPy warning (warnings are errors in these tests).
* A claim symbol that ``--param`` leaves out names the symbol and the ``--param`` that supplies it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from transformer_limits.cli import main
from transformer_limits.errors import InputError
from transformer_limits.verify.rate.check import rate_check
from transformer_limits.verify.rate.claim_grammar import UnknownParameterError
from transformer_limits.verify.rate.claims import parse_rate_claim
from transformer_limits.verify.rate.data import (ERROR_MAX, ERROR_MIN, check_claim_range,
                                                  read_rate_data)

CLAIM = "L^-1 + L^-1/3 H^-1/2"
L_LEVELS, H_LEVELS = (2, 4, 8, 16, 32, 64), (1, 4, 16, 64)


def _run(capsys, *argv):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NumPy/SciPy RuntimeWarning fails the test
        code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code, out, err, *patterns):
    assert code == 2, (out, err)
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("transformer-limits: error:"), err
    for pattern in patterns:
        assert pattern in err, err


def _grid(seeds=8, scale=1.0, seed=0):
    """Columns of the example model 2/L + 0.5 L^-1/3 H^-1/2 with lognormal noise, ``scale`` x errors."""
    rng = np.random.default_rng(seed)
    rows = [(L, H, s) for L in L_LEVELS for H in H_LEVELS for s in range(seeds)]
    law = np.array([2.0 / L + 0.5 * L ** (-1 / 3) * H ** -0.5 for L, H, _ in rows])
    error = law * np.exp(0.1 * rng.standard_normal(len(rows))) * scale
    return {"L": [r[0] for r in rows], "H": [r[1] for r in rows], "seed": [r[2] for r in rows],
            "error": error.tolist()}


def _write_csv(path, columns):
    names = list(columns)
    lines = [",".join(names)] + [",".join(repr(v) if isinstance(v, float) else str(v) for v in row)
                                 for row in zip(*(columns[c] for c in names))]
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------------------------------------------
# item 2: large files (linear reading); correctness on 200,000 rows
# ------------------------------------------------------------------------------------------------

N_SEEDS_LARGE = 8334  # 24 points x 8334 seeds = 200,016 rows


def _large_columns():
    """24 points x 8334 seeds, rows in a shuffled order, seed labels 0..8333."""
    rng = np.random.default_rng(1)
    L, H = np.meshgrid(L_LEVELS, H_LEVELS, indexing="ij")
    L, H = np.repeat(L.ravel(), N_SEEDS_LARGE), np.repeat(H.ravel(), N_SEEDS_LARGE)
    seed = np.tile(np.arange(N_SEEDS_LARGE), len(L_LEVELS) * len(H_LEVELS))
    error = (2.0 / L + 0.5 * L ** (-1 / 3) * H ** -0.5) * np.exp(0.3 * rng.standard_normal(L.size))
    order = rng.permutation(L.size)
    return {"L": L[order].tolist(), "H": H[order].tolist(), "seed": seed[order].tolist(),
            "error": error[order].tolist()}


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    columns = _large_columns()
    return columns, _write_csv(tmp_path_factory.mktemp("large") / "large.csv", columns)


def test_large_file_groups_every_row(large):
    columns, path = large
    rd = read_rate_data(path, ["L", "H"])
    assert rd.n_rows == 24 * N_SEEDS_LARGE
    assert (rd.n_points, rd.n_seeds) == (24, N_SEEDS_LARGE)
    # points sorted by (L, H); seeds in numeric order; every error where its (L, H, seed) says
    assert [(float(a), float(b)) for a, b in zip(rd.params["L"], rd.params["H"])] == \
        [(float(a), float(b)) for a in L_LEVELS for b in H_LEVELS]
    assert all(s == [str(k) for k in range(N_SEEDS_LARGE)] for s in rd.seeds)
    point = {(a, b): k for k, (a, b) in enumerate((a, b) for a in L_LEVELS for b in H_LEVELS)}
    expected = np.empty((24, N_SEEDS_LARGE))
    for a, b, s, e in zip(columns["L"], columns["H"], columns["seed"], columns["error"]):
        expected[point[a, b], s] = e
    assert np.array_equal(rd.errors, expected)


def test_large_file_duplicate_at_the_very_end_names_both_lines(large, tmp_path):
    columns, path = large
    first = next(i for i in range(len(columns["L"])) if columns["seed"][i] == 17 and columns["L"][i] == 64
                 and columns["H"][i] == 16)
    dup = tmp_path / "dup.csv"
    dup.write_text(path.read_text() + "64,16,17,0.5\n")
    n_lines = 1 + len(columns["L"]) + 1  # header, the rows, the duplicate
    with pytest.raises(InputError, match=rf"line {first + 2} and line {n_lines}: two rows for L=64, H=16, "
                                         r"seed '17'"):
        read_rate_data(dup, ["L", "H"])


def test_large_file_over_the_bootstrap_budget_names_the_option(large, capsys):
    """Read and validated, then refused before any resample: the memory budget names --bootstrap."""
    _, path = large
    code, out, err = _run(capsys, "rate", "check", path, "--claim", CLAIM)
    _one_line_error(code, out, err, f"--bootstrap=1000 on 24 levels x {N_SEEDS_LARGE} seeds would need about")


def test_duplicate_is_the_first_repeated_pair_in_file_order(tmp_path):
    text = "L,H,seed,error\n" + "".join(f"{L},{H},{s},0.{L}{s}\n" for L in (2, 4) for H in (1, 4) for s in (0, 1))
    text += "4,4,0,0.1\n2,1,1,0.2\n"  # lines 10 and 11 repeat lines 8 and 3
    path = tmp_path / "d.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=r"line 8 and line 10: two rows for L=4, H=4, seed '0'"):
        read_rate_data(path, ["L", "H"])


def test_line_numbers_count_blank_lines_and_quoted_newlines(tmp_path):
    """Messages give file lines: blank lines and a quoted cell spanning two lines are counted."""
    text = ("L,H,seed,error,note\n\n2,1,0,0.5,\"two\nlines\"\n" + "".join(
        f"{L},{H},{s},0.{L}{s},x\n" for L in (2, 4, 8) for H in (1, 4) for s in (0, 1) if (L, H, s) != (2, 1, 0)))
    path = tmp_path / "q.csv"
    path.write_text(text + "8,4,9,-1,x\n")
    with pytest.raises(InputError, match=r"line 16: error column 'error' = '-1': errors must be > 0"):
        read_rate_data(path, ["L", "H"])
    path.write_text(text + "8,4,1,0.3,x\n")
    with pytest.raises(InputError, match=r"line 15 and line 16: two rows for L=8, H=4, seed '1'"):
        read_rate_data(path, ["L", "H"])


def test_first_bad_row_is_reported_in_file_order(tmp_path):
    """The checks run on whole columns, but the message is the first bad row's, parameters first."""
    text = "L,H,seed,error\n" + "".join(f"{L},{H},{s},0.{L}{s}\n" for L in (2, 4) for H in (1, 4) for s in (0, 1))
    path = tmp_path / "b.csv"
    path.write_text(text + "4,4,2,nan\n2,-1,2,0.1\n")
    with pytest.raises(InputError, match=r"line 10: error column 'error' = 'nan' is not finite"):
        read_rate_data(path, ["L", "H"])
    path.write_text(text + "4,x,2,nan\n")
    with pytest.raises(InputError, match=r"line 10: column 'H': 'x' is not a number"):
        read_rate_data(path, ["L", "H"])


# ------------------------------------------------------------------------------------------------
# item 6: overflow is bad input, one clear line, no warnings
# ------------------------------------------------------------------------------------------------


def test_claim_term_that_underflows_is_refused_naming_the_term(tmp_path, capsys):
    path = _write_csv(tmp_path / "data.csv", _grid())
    code, out, err = _run(capsys, "rate", "check", path, "--claim", "L^-100 H^-100")
    _one_line_error(code, out, err, "claim: the term C1 L^-100 H^-100", "1e-361", "L=64, H=64", "underflow")


def test_claim_term_far_from_the_data_is_refused(tmp_path, capsys):
    path = _write_csv(tmp_path / "data.csv", _grid())
    code, out, err = _run(capsys, "rate", "check", path, "--claim", "L^80 H^80")
    _one_line_error(code, out, err, "claim: the term C1 L^80 H^80 over the errors varies by", "float64")


@pytest.mark.parametrize("value", ["1e308", "1e-320", "1e200"])
def test_error_outside_the_float64_range_is_refused_naming_the_column(tmp_path, capsys, value):
    columns = _grid()
    columns["error"][5] = value
    path = _write_csv(tmp_path / "data.csv", columns)
    code, out, err = _run(capsys, "rate", "check", path, "--claim", CLAIM)
    _one_line_error(code, out, err, f"line 7: error column 'error' = '{value}' is outside [1e-150, 1e+150]")


def test_all_errors_of_1e308_are_refused_before_any_fit(capsys, tmp_path):
    columns = _grid()
    columns["error"] = ["1e308"] * len(columns["error"])
    path = _write_csv(tmp_path / "data.csv", columns)
    code, out, err = _run(capsys, "rate", "check", path, "--claim", CLAIM, "--aggregate", "rms")
    _one_line_error(code, out, err, "error column 'error' = '1e308' is outside")


@pytest.mark.parametrize("scale", [1e-140, 1e140])
def test_errors_inside_the_range_are_fitted_without_warnings(scale):
    """Scale invariance near the edges of the range: constants scale with the errors, no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        base = rate_check(_grid(), CLAIM, n_boot=200)
        scaled = rate_check(_grid(scale=scale), CLAIM, n_boot=200)
    for name, value in base.constants.items():
        assert scaled.constants[name] == pytest.approx(value * scale, rel=1e-9)
    assert ERROR_MIN < scale * 0.01 and scale * 10 < ERROR_MAX


def test_check_claim_range_api():
    rd = read_rate_data(_grid(), ["L", "H"])
    check_claim_range(rd, parse_rate_claim(CLAIM))
    check_claim_range(rd, parse_rate_claim("log(H) L^-1 + L^-1/3"))  # log(1) = 0: the term is 0 at H = 1
    with pytest.raises(InputError, match=r"^claim: the term C1 L\^-100 H\^-100 is about 1e-361 at L=64, H=64"):
        check_claim_range(rd, parse_rate_claim("L^-100 H^-100"))
    with pytest.raises(InputError, match=r"^claim: the term C1 L\^-100 H\^-100"):
        rate_check(_grid(), "L^-100 H^-100")
    small = {**_grid(), "H": [h / 4 for h in _grid()["H"]]}
    with pytest.raises(InputError, match=r"log\(H\) < 0\): a log factor needs H >= 1"):
        check_claim_range(read_rate_data(small, ["L", "H"]), parse_rate_claim("log(H) L^-1"))


# ------------------------------------------------------------------------------------------------
# item 7: a claim symbol missing from --param
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("claim", ["L^-1 + L^-1/3 H^-1/2 + m^-1", "m^-1 + L^-1", "L^-1 + H^-1 m", "L^-1 + 1/m",
                                   "L^-1 + sqrt(m)"])
def test_claim_symbol_missing_from_param_says_how_to_supply_it(tmp_path, capsys, claim):
    path = _write_csv(tmp_path / "data.csv", _grid())
    code, out, err = _run(capsys, "rate", "check", path, "--claim", claim, "--param", "L", "H")
    _one_line_error(code, out, err, "unknown parameter 'm'", "--param L H m", "remove it from the claim")
    assert "unexpected token" not in err


def test_unknown_parameter_error_carries_the_symbol():
    with pytest.raises(UnknownParameterError, match=r"unknown parameter 'm' \(params are \['H', 'L'\]\)") as info:
        parse_rate_claim("L^-1 + m^-1", params=["L", "H"])
    assert (info.value.name, info.value.params) == ("m", ["H", "L"])
    with pytest.raises(UnknownParameterError, match=r"^claim: rate claim") as info:
        rate_check(_grid(), "L^-1 + m^-1", params=["L", "H"])
    assert info.value.name == "m"
    # a coefficient name with an exponent (no params given: C is a coefficient by its name)
    with pytest.raises(ValueError, match=r"coefficient name 'C' with an exponent"):
        parse_rate_claim("C^-1 + L^-1")
