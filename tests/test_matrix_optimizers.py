"""Reference matrix optimizers (docs/theory.md §C.8, §D item 17)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_limits.numeric.optim.matrix_optimizers import (
    NS_COEFFICIENTS_DION,
    NS_COEFFICIENTS_ORIGINAL,
    NS_EPS_RUNS,
    Dion,
    Lion,
    Muon,
    NorMuon,
    muon_scale,
    newton_schulz,
    newton_schulz_singular_value_map,
)
from transformer_limits.numeric.optim.matrix_optimizers import NS_EPS_RUNS, NorMuon, newton_schulz

shapes = st.tuples(st.integers(1, 24), st.integers(1, 24))


def _random(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


def _conditioned(shape, seed, cond=10.0):
    """``U diag(s) V^T`` with ``s ∈ [1, cond]``: every normalised singular value ≥ 1/(cond·√k)."""
    rng = np.random.default_rng(seed)
    m, n = shape
    k = min(m, n)
    U, _ = np.linalg.qr(rng.standard_normal((m, k)))
    V, _ = np.linalg.qr(rng.standard_normal((n, k)))
    return U @ np.diag(rng.uniform(1.0, cond, k)) @ V.T


# ---------------------------------------------------------------- Newton–Schulz

@settings(derandomize=True, max_examples=60, deadline=None)
@given(shapes, st.integers(0, 10**6), st.sampled_from(["original", "dion"]))
def test_ns_equals_svd_reference_with_scalar_map(shape, seed, coeffs):
    G = _random(shape, seed)
    U, s, Vt = np.linalg.svd(G, full_matrices=False)
    reference = U @ np.diag(newton_schulz_singular_value_map(s, coeffs)) @ Vt
    np.testing.assert_allclose(newton_schulz(G, coeffs), reference, atol=1e-10)


def test_ns_reference_check_rejects_the_other_coefficient_set():
    """Deliberately wrong model: the SVD reference built with the other schedule must not match."""
    G = _random((12, 7), 0)
    U, s, Vt = np.linalg.svd(G, full_matrices=False)
    wrong = U @ np.diag(newton_schulz_singular_value_map(s, "dion")) @ Vt
    assert not np.allclose(newton_schulz(G, "original"), wrong, atol=1e-3)
    assert not np.allclose(newton_schulz(G, "original"), U @ Vt, atol=1e-3)  # NS is not exactly U V^T


def test_scalar_map_is_the_composition_of_quintics():
    s = np.linspace(0.0, 1.0, 11)
    for coeffs in (NS_COEFFICIENTS_ORIGINAL, NS_COEFFICIENTS_DION):
        x = s.copy()
        for a, b, c in coeffs:
            x = a * x + b * x**3 + c * x**5
        np.testing.assert_allclose(newton_schulz_singular_value_map(s, coeffs, normalize=False), x, rtol=1e-14)
    # slope at 0 is the product of the a's; the map is odd
    assert newton_schulz_singular_value_map(np.array([1e-9]), "original", normalize=False)[0] == pytest.approx(
        1e-9 * 3.4445**5, rel=1e-6)
    np.testing.assert_allclose(newton_schulz_singular_value_map(-s, "dion", normalize=False),
                               -newton_schulz_singular_value_map(s, "dion", normalize=False))


@pytest.mark.parametrize("shape", [(64, 32), (32, 64), (40, 40), (128, 8)])
@pytest.mark.parametrize("coeffs, band", [("original", (0.68, 1.14)), ("dion", (0.977, 1.032))])
def test_ns_output_is_nearly_orthogonal(shape, coeffs, band):
    """Not exactly U V^T: singular values land in the band of the 5-step map (≈[0.68, 1.13] for
    Jordan's quintic, ≈[0.978, 1.032] for the Dion schedule) once σ/‖G‖_F ≥ 0.01."""
    X = newton_schulz(_conditioned(shape, 1), coeffs)
    sv = np.linalg.svd(X, compute_uv=False)
    assert band[0] <= sv.min() and sv.max() <= band[1]
    k = min(shape)
    gram = X.T @ X if shape[0] >= shape[1] else X @ X.T
    assert np.linalg.norm(gram - np.eye(k), 2) <= max(1 - band[0] ** 2, band[1] ** 2 - 1) + 1e-12


def test_ns_coefficient_validation_and_zero_matrix():
    np.testing.assert_array_equal(newton_schulz(np.zeros((3, 2))), np.zeros((3, 2)))
    np.testing.assert_allclose(newton_schulz(np.eye(3), [(1.5, -0.5, 0.0)] * 30), np.eye(3), atol=1e-12)
    with pytest.raises(ValueError, match="coefficients"):
        newton_schulz(np.eye(2), "cubic")
    with pytest.raises(ValueError, match="triples"):
        newton_schulz(np.eye(2), [(1.0, 2.0)])
    with pytest.raises(ValueError, match="2-D"):
        newton_schulz(np.ones(3))


def test_scale_rules():
    assert muon_scale((1024, 256), "original") == 2.0
    assert muon_scale((256, 1024), "original") == 1.0
    assert muon_scale((256, 1024), "spectral_norm") == 0.5
    assert muon_scale((256, 1024), "rms_norm") == pytest.approx(0.2 * 32)
    assert muon_scale((5, 7), "none") == 1.0
    with pytest.raises(ValueError, match="scale"):
        muon_scale((2, 2), "max")


# ---------------------------------------------------------------- Muon

@pytest.mark.parametrize("form, nesterov", [("lerp", True), ("lerp", False), ("sum", True), ("sum", False)])
def test_muon_two_steps_match_the_update_rule(form, nesterov):
    rng = np.random.default_rng(0)
    W0 = rng.standard_normal((12, 8))
    G1, G2 = rng.standard_normal((2, 12, 8))
    lr, mu, wd = 0.02, 0.9, 0.1
    opt = Muon(lr, mu, wd, nesterov=nesterov, momentum_form=form, coefficients="dion", scale="spectral_norm")
    W = W0.copy()
    assert opt.step(W, G1) is W
    opt.step(W, G2)
    W_ref, M = W0.copy(), np.zeros_like(W0)
    for G in (G1, G2):
        if form == "lerp":
            M = mu * M + (1 - mu) * G
            U = (1 - mu) * G + mu * M if nesterov else M
        else:
            M = mu * M + G
            U = mu * M + G if nesterov else M
        W_ref = W_ref * (1 - lr * wd) - lr * math.sqrt(12 / 8) * newton_schulz(U, NS_COEFFICIENTS_DION)
    np.testing.assert_allclose(W, W_ref, rtol=1e-12, atol=1e-14)


def test_optimizer_input_checks():
    opt = Muon()
    with pytest.raises(ValueError, match="float64"):
        opt.step(np.ones((3, 3), dtype=np.float32), np.ones((3, 3)))
    with pytest.raises(ValueError, match="2-D"):
        opt.step(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="grad"):
        opt.step(np.ones((3, 3)), np.ones((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        opt.step(np.ones((3, 3)), np.full((3, 3), np.nan))
    opt.step(np.ones((3, 3)), np.ones((3, 3)))
    with pytest.raises(ValueError, match="one optimizer instance per parameter"):
        opt.step(np.ones((4, 3)), np.ones((4, 3)))
    for bad in (dict(lr=0.0), dict(momentum=1.0), dict(momentum_form="ema"), dict(scale="x")):
        with pytest.raises(ValueError):
            Muon(**bad)


# ---------------------------------------------------------------- NorMuon

@settings(derandomize=True, max_examples=40, deadline=None)
@given(shapes, st.integers(0, 10**6))
def test_normuon_preserves_the_frobenius_norm_of_O(shape, seed):
    rng = np.random.default_rng(seed)
    opt = NorMuon(momentum=0.0)  # then U = G exactly (sum form, Nesterov with μ = 0)
    W = rng.standard_normal(shape)
    for _ in range(3):
        G = rng.standard_normal(shape)
        W0 = W.copy()
        opt.step(W, G)
        O = newton_schulz(G, "dion", NS_EPS_RUNS)  # NorMuon's default is the runs' eps
        O_hat = opt.last_update
        assert np.linalg.norm(O_hat) == pytest.approx(np.linalg.norm(O), rel=1e-10)
        # Ô is O with each row rescaled by a positive factor
        ratio = np.linalg.norm(O_hat, axis=1) / np.maximum(np.linalg.norm(O, axis=1), 1e-300)
        row_scaled = O_hat - ratio[:, None] * O
        assert np.abs(row_scaled).max() <= 1e-9 * max(1.0, np.abs(O_hat).max())
        np.testing.assert_allclose(W, W0 - 0.02 * math.sqrt(shape[0] / shape[1]) * O_hat, rtol=1e-12, atol=1e-14)


def test_normuon_equalises_row_norms_after_many_steps():
    """With a constant gradient, v → mean_cols(O²) per row, so Ô has (nearly) equal row norms."""
    rng = np.random.default_rng(2)
    G = rng.standard_normal((16, 32)) * np.linspace(0.1, 10, 16)[:, None]
    opt = NorMuon(momentum=0.0)
    W = np.zeros((16, 32))
    for _ in range(200):
        opt.step(W, G)
    rows = np.linalg.norm(opt.last_update, axis=1)
    assert rows.max() / rows.min() < 1.01


# ---------------------------------------------------------------- Dion

@pytest.mark.parametrize("shape", [(48, 32), (32, 48)])
@pytest.mark.parametrize("fraction", [1 / 16, 1 / 4, 1 / 2, 1.0])
def test_dion_rank_and_error_feedback(shape, fraction):
    rng = np.random.default_rng(4)
    mu = 0.95
    opt = Dion(lr=0.01, momentum=mu, rank_fraction=fraction, seed=9)
    W = rng.standard_normal(shape)
    for _ in range(4):
        G = rng.standard_normal(shape)
        M_before = opt.momentum_buffer.copy() if opt.shape else np.zeros((max(shape), min(shape)))
        W0 = W.copy()
        opt.step(W, G)
        r = math.ceil(fraction * min(shape))
        assert opt.rank == r and opt.Q.shape == (min(shape), r)
        assert np.linalg.matrix_rank(opt.last_update) <= r
        G_work = G.T if shape[0] < shape[1] else G
        M_tilde = M_before + G_work
        P = opt.last_P
        np.testing.assert_allclose(P.T @ P, np.eye(r), atol=1e-12)
        R = M_tilde.T @ P
        # error feedback: what is left plus the (1−μ) share of the captured part is the full M + G
        np.testing.assert_allclose(opt.momentum_buffer + (1 - mu) * P @ R.T, M_tilde, atol=1e-10)
        # the captured component decays by μ, the rest is untouched
        np.testing.assert_allclose(P.T @ opt.momentum_buffer, mu * P.T @ M_tilde, atol=1e-10)
        np.testing.assert_allclose(np.linalg.norm(opt.Q, axis=0), 1.0, rtol=1e-6)
        update = P @ opt.Q.T
        np.testing.assert_allclose(opt.last_update, update.T if shape[0] < shape[1] else update)
        np.testing.assert_allclose(W, W0 - 0.01 * math.sqrt(shape[0] / shape[1]) * opt.last_update, atol=1e-14)


def test_dion_full_rank_without_momentum_applies_everything_and_is_seeded():
    rng = np.random.default_rng(5)
    G = rng.standard_normal((20, 12))
    opt = Dion(momentum=0.0, rank_fraction=1.0, seed=1)
    opt.step(np.zeros((20, 12)), G)
    assert np.abs(opt.momentum_buffer).max() < 1e-10  # full-rank P spans col(M): nothing left over
    a, b = (Dion(rank_fraction=0.25, seed=3) for _ in range(2))
    Wa, Wb = np.zeros((20, 12)), np.zeros((20, 12))
    for _ in range(3):
        a.step(Wa, G)
        b.step(Wb, G)
    np.testing.assert_array_equal(Wa, Wb)
    with pytest.raises(ValueError, match="rank_fraction"):
        Dion(rank_fraction=0.0)


# ---------------------------------------------------------------- Lion

def test_lion_update_rule_any_shape():
    rng = np.random.default_rng(6)
    b1, b2, lr, wd = 0.95, 0.98, 1e-3, 0.1
    opt = Lion(lr=lr, betas=(b1, b2), weight_decay=wd)
    W = rng.standard_normal(7)
    W_ref, M = W.copy(), np.zeros(7)
    for _ in range(3):
        G = rng.standard_normal(7)
        opt.step(W, G)
        U = np.sign(b1 * M + (1 - b1) * G)
        M = b2 * M + (1 - b2) * G
        W_ref = W_ref * (1 - lr * wd) - lr * U
        assert set(np.unique(opt.last_update)) <= {-1.0, 0.0, 1.0}
    np.testing.assert_allclose(W, W_ref, rtol=1e-14)
    with pytest.raises(ValueError, match="betas"):
        Lion(betas=(1.0, 0.9))


def test_dion_keeps_q_when_the_momentum_is_not_finite():
    """A non-finite momentum (as after an overflow; set directly here, since ``step`` rejects
    non-finite gradients) is treated like an all-zero one (microsoft/dion ``fix_all_zero_or_nan``):
    no update, ``Q`` kept up to column normalisation, weights unchanged."""
    rng = np.random.default_rng(8)
    opt = Dion(lr=0.01, weight_decay=0.0, rank_fraction=0.5, seed=2)
    W = rng.standard_normal((6, 4))
    opt.step(W, rng.standard_normal((6, 4)))
    opt.momentum_buffer[0, 0] = np.inf
    Q1, W1 = opt.Q.copy(), W.copy()
    opt.step(W, rng.standard_normal((6, 4)))
    np.testing.assert_array_equal(opt.last_P, 0.0)
    np.testing.assert_allclose(opt.Q, Q1 / (np.linalg.norm(Q1, axis=0) + 1e-8), rtol=1e-15)
    np.testing.assert_array_equal(W, W1)

# ------------------------------------------------------------------------------------------------
# Mutation-round tests (were tests/test_mutants_matrix_optimizers.py): properties the mutation runs showed were not
# pinned down.
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("beta2", [-0.5, -1e-12, 1.0, 1.5])
def test_normuon_second_moment_rate_outside_unit_interval_is_rejected(beta2):
    with pytest.raises(ValueError, match="beta2"):
        NorMuon(beta2=beta2)


def test_normuon_with_zero_rate_normalises_each_row_by_its_current_rms():
    """β₂ = 0: v_i = mean_j O_ij², Ô_ij = O_ij/(√v_i + ε), then ‖Ô‖_F is set to ‖O‖_F; so every
    row of the update has norm ‖O‖_F/√m (m rows), written here without the optimizer's code."""
    rng = np.random.default_rng(11)
    m, n = 6, 10
    G = rng.standard_normal((m, n)) * np.array([0.1, 1.0, 3.0, 0.5, 7.0, 2.0])[:, None]
    opt = NorMuon(momentum=0.0, beta2=0.0)  # μ = 0: U = G (sum form, Nesterov)
    W = np.zeros((m, n))
    opt.step(W, G)
    O = newton_schulz(G, "dion", NS_EPS_RUNS)
    rms = [math.sqrt(sum(O[i, j] ** 2 for j in range(n)) / n) for i in range(m)]
    O_hat = np.array([[O[i, j] / (rms[i] + 1e-8) for j in range(n)] for i in range(m)])
    O_hat *= np.linalg.norm(O) / np.linalg.norm(O_hat)
    np.testing.assert_allclose(opt.last_update, O_hat, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.linalg.norm(opt.last_update, axis=1),
                               np.linalg.norm(O) / math.sqrt(m), rtol=1e-6)
