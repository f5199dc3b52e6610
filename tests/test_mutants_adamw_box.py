"""The ``adamw-box`` derivation's self-checks must reject deliberately wrong constants, and its
statements at the boundary ``β1 = √β2`` follow from the mathematics (Gibson-Reisinger 2026, AdamW
box; Kingma & Ba 2015 for m_k, v_k and the bias corrections).

* C_β(k) is increasing in k, so sup_k C_β(k) = C_β(∞); the derivation checks monotonicity on
  k = 1..2000 and a 5% grid up to k_end (where all powers are < 1e-52).  A C_β with a bump far out
  (height 1e-3, width 2000 at k = 60000 for β = (0.9, 0.999); k_end ≈ 1.2e5) is not monotone and must be rejected.
* The Cauchy-Schwarz constant C̃_β(k) = (bias factor)·(Σ_{j<k} (β1²/β2)^j)^{1/2} is attained by
  g_{k−j} = (β1/β2)^j; a constant without the square root is not, and must be rejected.
* At r = β1/√β2 = 1 the series Σ r^j = k diverges: C_β(∞) = ∞ and the finiteness assumption fails.
"""

from __future__ import annotations

import math

import pytest
import sympy as sp

import transformer_limits as tl
from transformer_limits.symbolic import adamw_box as box


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
