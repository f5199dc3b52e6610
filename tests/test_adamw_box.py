"""The ``adamw-box`` derivation: C_β(k), its sup, R_θ(K), parameter validation and the CLI."""

from __future__ import annotations

import json
import math

import mpmath
import numpy as np
import pytest
import sympy as sp

import transformer_limits as tl
from transformer_limits.cli import main
from transformer_limits.numeric.optim.adamw import (
    adamw_box_radius,
    adamw_box_radius_path,
    adamw_update_bound,
    adamw_update_bound_sup,
)
from transformer_limits.symbolic.adamw_box import BETA1, BETA2, C_BETA_K, K_STEP
from transformer_limits.testing import assert_identity
from transformer_limits.symbolic import adamw_box as box

BETAS = [(0.9, 0.999), (0.9, 0.95), (0.5, 0.9), (0.0, 0.3), (0.99, 0.9999), (0.5, 0.25)]


def _direct_sum(b1, b2, k):
    """C_β(k) from its definition, term by term, in mpmath (50 digits)."""
    with mpmath.workdps(50):
        b1, b2 = mpmath.mpf(b1), mpmath.mpf(b2)
        total = mpmath.fsum((b1 / mpmath.sqrt(b2)) ** j for j in range(k))
        return (1 - b1) * mpmath.sqrt(1 - b2**k) / ((1 - b1**k) * mpmath.sqrt(1 - b2)) * total


def _direct_sum_expr(k):
    """C_β(k) = (1 − β1) √(1 − β2^k) / ((1 − β1^k) √(1 − β2)) · Σ_{j<k} (β1/√β2)^j as a SymPy expression
    in β1, β2, the sum written out term by term (the definition, not the closed form)."""
    b1, b2 = BETA1, BETA2
    total = sp.Add(*[(b1 / sp.sqrt(b2)) ** j for j in range(k)])
    return (1 - b1) * sp.sqrt(1 - b2**k) / ((1 - b1**k) * sp.sqrt(1 - b2)) * total


def test_closed_form_equals_direct_sum_at_every_beta():
    """C_β(k), k = 1..50: the closed form against the definition at every (β1, β2) of BETAS, both
    sides in mpmath at 45 digits (relative tolerance 10^-(45 − 10) = 1e-35)."""
    ks = range(1, 51)
    closed = sp.Matrix([C_BETA_K.subs(K_STEP, k) for k in ks])
    direct = sp.Matrix([_direct_sum_expr(k) for k in ks])
    check = assert_identity(closed, direct, [BETA1, BETA2], points=[{BETA1: b1, BETA2: b2} for b1, b2 in BETAS],
                            digits=45, simplify=False)
    assert check.statistics["points"] == len(BETAS)


@pytest.mark.parametrize("b1,b2", BETAS)
def test_closed_form_equals_direct_sum_and_c1_is_one(b1, b2):
    proved = assert_identity(C_BETA_K.subs(K_STEP, 1), 1)
    assert proved.statistics["method"] == "sympy.simplify(lhs - rhs) == 0"  # C_β(1) = 1 symbolically
    # the float64 code against the definition in 50-digit mpmath (the closed form: the test above)
    for k in range(1, 51):
        assert adamw_update_bound(b1, b2, k) == pytest.approx(float(_direct_sum(b1, b2, k)), rel=1e-13)


@pytest.mark.parametrize("b1,b2", BETAS)
def test_values_match_numeric_and_c_k_below_sup(b1, b2):
    d = tl.derivation("adamw-box", beta1=b1, beta2=b2, k=37)
    sup = adamw_update_bound_sup(b1, b2)
    assert d.values["C_beta_sup"] == pytest.approx(sup, rel=1e-13) if math.isfinite(sup) else \
        d.values["C_beta_sup"] == math.inf
    assert d.values["C_beta_k"] == pytest.approx(adamw_update_bound(b1, b2, 37), rel=1e-13)
    assert d.values["C_beta_k"] <= d.values["C_beta_sup"]
    assert d.values["C_beta_sharp_sup"] <= d.values["C_beta_sup"]
    for k in (1, 2, 10, 100, 10**4, 10**6):
        assert adamw_update_bound(b1, b2, k) <= d.values["C_beta_sup"] * (1 + 1e-14)


def test_key_numbers():
    torch_default = tl.derivation("adamw-box", beta1=0.9, beta2=0.999).values
    gpt_style = tl.derivation("adamw-box", beta1=0.9, beta2=0.95).values
    # C_β(∞) = (1-β1)/(√(1-β2)(1-β1/√β2)) by hand
    for vals, b2 in ((torch_default, 0.999), (gpt_style, 0.95)):
        by_hand = 0.1 / (math.sqrt(1 - b2) * (1 - 0.9 / math.sqrt(b2)))
        assert vals["C_beta_inf"] == pytest.approx(by_hand, rel=1e-14)
    assert torch_default["C_beta_sup"] == pytest.approx(31.7658301364, rel=1e-10)
    assert gpt_style["C_beta_sup"] == pytest.approx(5.8368130046, rel=1e-10)
    assert torch_default["C_beta_sharp_sup"] == pytest.approx(7.2702918, rel=1e-7)


def test_radius_values_bound_the_numeric_recursion():
    params = dict(beta1=0.9, beta2=0.95, lr=3e-3, weight_decay=0.01, R0=0.05, steps=2000,
                  entries=64 * 64)
    d = tl.derivation("adamw-box", **params)
    v = d.values
    path = adamw_box_radius_path(0.05, 3e-3, 0.01, 0.9, 0.95, 2000)
    assert v["R_theta_coordinatewise"] == v["R_theta_blockwise"]
    assert path[-1] <= v["R_theta_coordinatewise"] <= v["R_theta_all_steps"]
    assert v["R_theta_all_steps"] == pytest.approx(adamw_box_radius(0.05, 3e-3, 0.01, 0.9, 0.95))
    assert v["R_theta_coordinatewise_frobenius"] == pytest.approx(64 * v["R_theta_coordinatewise"])
    # constant c_k = C_β(K): the closed form is the recursion's exact solution
    K, lr, wd, r0 = 2000, 3e-3, 0.01, 0.05
    c_K = adamw_update_bound(0.9, 0.95, K)
    radius = r0
    for _ in range(K):
        radius = (1 - lr * wd) * radius + lr * c_K
    assert v["R_theta_coordinatewise"] == pytest.approx(radius, rel=1e-12)
    no_decay = tl.derivation("adamw-box", beta1=0.9, beta2=0.95, lr=lr, weight_decay=0.0, R0=r0,
                             steps=K).values
    assert no_decay["R_theta_blockwise"] == pytest.approx(r0 + K * lr * c_K, rel=1e-13)
    assert "R_theta_all_steps" not in no_decay


def test_derivation_records_proof_and_assumptions():
    d = tl.derivation("adamw-box")
    text = " ".join(d.checks)
    assert "increasing" in text and "h(s) = s/(e^s - 1)" in text and "Cauchy-Schwarz" in text
    assert any("beta1 < sqrt(beta2)" in a for a in d.assumptions)
    assert any("NOT divided by |B|" in a for a in d.assumptions)
    assert set(d.expressions) >= {"C_beta_k", "C_beta_inf", "C_beta_sup", "R_theta_coordinatewise",
                                  "R_theta_blockwise"}
    assert "R_theta_coordinatewise" not in d.values  # no lr/R0/steps: stays symbolic
    inf_case = tl.derivation("adamw-box", beta1=0.9, beta2=0.7)
    assert inf_case.values["C_beta_sup"] == math.inf
    assert any("FAILS here" in a for a in inf_case.assumptions)
    json.dumps(d.to_json())
    assert "adamw-box" in d.to_markdown()


@pytest.mark.parametrize("params,name", [
    ({"beta1": 1.0}, "beta1"), ({"beta1": 1.5}, "beta1"), ({"beta1": -0.1}, "beta1"),
    ({"beta2": 0.0}, "beta2"), ({"beta2": -1.0}, "beta2"), ({"beta2": 1.0}, "beta2"),
    ({"lr": 0.0}, "lr"), ({"lr": -1e-3}, "lr"), ({"weight_decay": -1.0}, "weight_decay"),
    ({"lr": 0.5, "weight_decay": 3.0}, "weight_decay"), ({"R0": -1.0}, "R0"),
    ({"steps": 0}, "steps"), ({"k": 0}, "k"), ({"steps": 1.5}, "steps"),
])
def test_impossible_parameters_raise_naming_them(params, name):
    with pytest.raises(ValueError, match=f"'{name}'"):
        tl.derivation("adamw-box", **params)


def test_cli_derive_json(capsys):
    argv = ["derive", "adamw-box", "--format", "json", "--param", "lr=0.001",
            "--param", "weight_decay=0.01", "--param", "R0=0.1", "--param", "steps=1000",
            "--param", "k=10"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["name"] == "adamw-box"
    assert out["values"]["C_beta_k"] == pytest.approx(adamw_update_bound(0.9, 0.999, 10))
    assert out["values"]["C_beta_sup"] == pytest.approx(31.7658301364, rel=1e-10)
    assert out["values"]["R_theta_blockwise"] >= adamw_box_radius(0.1, 1e-3, 0.01, steps=1000)
    assert out["values"]["R_theta_all_steps"] == pytest.approx(3176.58301364, rel=1e-10)


@pytest.mark.parametrize("param", ["beta1=1", "beta2=0", "lr=0", "lr=1 weight_decay=2", "steps=x",
                                   "nonsense=1"])
def test_cli_bad_params_exit_2(capsys, param):
    assert main(["derive", "adamw-box", "--format", "json", "--param", param]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error" in err
    assert param.split()[-1].split("=")[0] in err


def test_symbolic_and_numeric_bound_agree_on_grid():
    ks = np.array([1, 3, 17, 256, 4096])
    f = sp.lambdify((BETA1, BETA2, K_STEP), C_BETA_K, modules="numpy")
    for b1, b2 in BETAS[:5]:
        expected = np.array([float(f(b1, b2, int(k))) for k in ks])
        np.testing.assert_allclose(adamw_update_bound(b1, b2, ks), expected, rtol=1e-9)


@pytest.mark.parametrize("b2", [1e-12, 1e-40])
def test_derivation_builds_where_C_beta_is_constant_to_working_precision(b2):
    """beta1 = 0 and a tiny beta2: C_beta(k) = sqrt(1 - beta2^k)/sqrt(1 - beta2) stops changing at 60
    digits after a few steps; the monotonicity check used to raise 'C_beta(k) increasing' here."""
    values = tl.derivation("adamw-box", beta1=0.0, beta2=b2, k=7).values
    assert values["C_beta_k"] == pytest.approx(1.0, abs=1e-11)
    assert values["C_beta_sup"] == pytest.approx(1.0, abs=1e-11)

# ------------------------------------------------------------------------------------------------
# Mutation-round tests (were tests/test_mutants_adamw_box.py): properties the mutation runs showed were not
# pinned down.
# ------------------------------------------------------------------------------------------------


def _uncached(b1, b2):
    return box._numeric_checks.__wrapped__(b1, b2)


def test_a_non_monotone_c_beta_far_beyond_the_dense_range_is_rejected(monkeypatch):
    k = box.K_STEP
    bump = 1 + sp.Rational(1, 1000) * sp.exp(-((k - 60000) ** 2) / (2 * 2000**2))
    monkeypatch.setattr(box, "C_BETA_K", box.C_BETA_K * bump)
    with pytest.raises(RuntimeError, match="C_beta\\(k\\) increasing"):
        _uncached(0.9, 0.999)


def test_a_sharp_constant_that_is_not_attained_is_rejected(monkeypatch):
    wrong = box._bias_factor(box.K_STEP) * box._geometric(box.RATIO**2, box.K_STEP)  # no square root
    monkeypatch.setattr(box, "C_SHARP_K", wrong)
    with pytest.raises(RuntimeError, match="sharp constant attained"):
        _uncached(0.9, 0.999)


def test_unmodified_checks_pass_at_the_same_betas():
    """The two wrong models above differ from the real constants only in the perturbation."""
    lines, sup = _uncached(0.9, 0.999)
    assert sup == pytest.approx((1 - 0.9) / (math.sqrt(1 - 0.999) * (1 - 0.9 / math.sqrt(0.999))), rel=1e-14)
    assert lines


def test_boundary_ratio_one_has_infinite_sup_and_says_the_assumption_fails():
    """β1 = 0.5, β2 = 0.25 (exact in binary): r = 1, C_β(k) = (bias factor)·k is unbounded."""
    d = tl.derivation("adamw-box", beta1=0.5, beta2=0.25, k=7)
    assert d.values["C_beta_sup"] == math.inf
    assert d.values["C_beta_sharp_sup"] == math.inf
    pre = 0.5 / math.sqrt(0.75)
    assert d.values["C_beta_k"] == pytest.approx(pre * math.sqrt(1 - 0.25**7) / (1 - 0.5**7) * 7, rel=1e-14)
    finiteness = [a for a in d.assumptions if "finite iff" in a]
    assert len(finiteness) == 1 and "FAILS here" in finiteness[0]
    inside = tl.derivation("adamw-box", beta1=0.5, beta2=0.26)
    assert "(holds here)" in next(a for a in inside.assumptions if "finite iff" in a)


def test_step_index_is_a_positive_integer_symbol():
    """C_β(k) is defined at step counts k = 1, 2, ...: the symbol k in the published expressions
    carries integer and positive assumptions (so SymPy treats β^k, Σ_{j<k} as over integers)."""
    d = tl.derivation("adamw-box")
    for name in ("C_beta_k", "C_beta_sharp_k"):
        (k,) = [s for s in d.expressions[name].free_symbols if s.name == "k"]
        assert k.is_integer is True and k.is_positive is True, name
    (K,) = [s for s in d.expressions["R_theta_coordinatewise"].free_symbols if s.name == "K"]
    assert K.is_integer is True and K.is_positive is True
