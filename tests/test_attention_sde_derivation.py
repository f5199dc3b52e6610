"""The derivation ``attention-sde`` against independent transcriptions of the maths and against the
numeric SDE-regime code (transformer_limits.numeric.attention.sde_regime)."""

import numpy as np
import sympy as sp

from transformer_limits.numeric.attention.sde_regime import SDERegime
from transformer_limits.symbolic import derivation
from transformer_limits.symbolic.attention_sde import (
    gaussian_expectation,
    stratonovich_closed_form,
    stratonovich_symbolic,
)


def test_derivation_builds_and_records_its_checks():
    d = derivation("attention-sde", heads=1, n_tokens=2)
    assert all(state == "passed" for state in d.check_states)
    assert d.values["stratonovich_residual"] < 1e-40
    assert d.values["max_lie_bracket"] > 1e-3  # non-commutative noise
    assert {"covariance", "generator", "stratonovich_drift", "limit_sde"} <= set(d.generic_latex)


def test_one_head_covariance_by_hand_in_d2():
    # Independent transcription: ξ = c σ O a and ξ' = c σ O b with O (2 x 2) i.i.d. N(0, 1):
    # ξ_1 = c σ (O11 a1 + O12 a2), ξ_2 = c σ (O21 a1 + O22 a2), so E ξ_1 ξ'_1 = E ξ_2 ξ'_2 = c² σ² (a1 b1 + a2 b2)
    # and E ξ_1 ξ'_2 = 0 (different rows of O are independent)
    d = derivation("attention-sde", heads=1, n_tokens=2)
    C = d["covariance_12"]
    c, s = sp.Symbol("c_H", positive=True), sp.Symbol("sigma_O", positive=True)
    a = sp.symbols("a00_0 a00_1", real=True)
    b = sp.symbols("a01_0 a01_1", real=True)
    by_hand = c**2 * s**2 * (a[0] * b[0] + a[1] * b[1])
    assert sp.expand(C[0, 0] - by_hand) == 0 and sp.expand(C[1, 1] - by_hand) == 0
    assert C[0, 1] == 0 and C[1, 0] == 0


def test_gaussian_expectation_moments():
    z, w = sp.symbols("z w", real=True)
    assert gaussian_expectation(z**4 + z * w + w**2 * z**2 + 3, [z, w]) == 3 + 1 + 3
    assert gaussian_expectation(z**3 * w, [z, w]) == 0


def test_numeric_covariance_equals_the_formula_with_a_hand_softmax():
    # C[i, j] = c_H² σ_O² Σ_h <A_h^i, A_h^j>, A_h^i = Σ_j softmax_j(β <Q x^i, K x^j>) V x^j, written out here
    model = SDERegime(H=2, sigma_O=0.7, temperature=0.8, heads_seed=6)
    X = np.random.default_rng(7).standard_normal((1, 3, 2))
    x = X[0]
    C = np.zeros((3, 3))
    for h in range(2):
        Q, K, V = (model.heads[k][h] for k in "QKV")
        logits = np.array([[(Q @ xi) @ (K @ xj) / 0.8 for xj in x] for xi in x])
        P = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        A = P @ (x @ V.T)
        C += (0.5 * 0.7) ** 2 * A @ A.T
    np.testing.assert_allclose(model.covariance(X)[0], C, rtol=1e-12)


def test_numeric_stratonovich_drift_equals_the_sympy_derivative():
    model = SDERegime(H=1, sigma_O=1.1, temperature=0.9, head_gain=1.4, heads_seed=8)
    # N = 2 tokens and one head keep SymPy's differentiation of the softmax fields short (the derivation
    # itself checks H = 2)
    X = np.random.default_rng(9).standard_normal((1, 2, 2))
    Qs, Ks, Vs = ([sp.Matrix(model.heads[k][h]) for h in range(1)] for k in "QKV")
    syms = [sp.Matrix(sp.symbols(f"x{i}_0 x{i}_1", real=True)) for i in range(2)]
    g = sp.Float(model.noise_scale, 30)
    beta = sp.Float(model.beta, 30)
    point = {s: sp.Float(v, 30) for xi, row in zip(syms, X[0]) for s, v in zip(xi, row)}
    numeric = model.stratonovich_correction(X)[0]
    for form in (stratonovich_symbolic, stratonovich_closed_form):
        values = np.array([[float(e.xreplace(point)) for e in v] for v in form(Qs, Ks, Vs, syms, beta, g)])
        np.testing.assert_allclose(numeric, values, rtol=1e-10, atol=1e-12)
