"""Paper C's Rényi ranks pinned by exact values, an independent transcription and scale invariance.

Inequalities such as ``1 ≤ R_2 ≤ R_1 ≤ D`` are passed by many wrong definitions (ranks of the
singular values instead of the eigenvalues, say).  Here the ranks are pinned by

* spectra whose ranks are known by hand: ``k`` equal eigenvalues (every ``R_α = k``) and
  geometric spectra ``λ_i = q^i`` (closed forms below);
* a plain-Python transcription of the definitions (Jha & Reagen 2026; project page and
  spectral-scaling-laws ``spectra/effective_rank.py``): ``p = λ/Σλ``, soft ``R_1 = exp(−Σ p log p)``,
  hard ``R_2 = (Σλ)²/Σλ²``, ``R_α = (Σ p^α)^{1/(1−α)}``, ``R_∞ = 1/max p``, ``R_0 = #{p > 0}``,
  asymmetry ``log R_1 − log R_2``, on lognormal spectra and on spectra drawn by
  ``transformer_limits.testing.strategies.spectra``;
* scale invariance ``R_α(cλ) = R_α(λ)`` and ``R_α(cH) = R_α(H)`` for ``c ∈ [1e-12, 1e12]``;
* input validation (non-square / complex / non-finite covariance, 1e308 spectra).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_limits.numeric.spectra.ranks import (
    covariance_spectrum,
    hard_rank,
    rank_summary,
    renyi_rank,
    soft_rank,
    spectral_asymmetry,
)
from transformer_limits.testing.strategies import spectra

ALPHAS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, math.inf]


def ref_renyi(lam, alpha):
    """Rényi effective rank from its definition, in plain Python (zeros are not modes)."""
    total = math.fsum(lam)
    p = [x / total for x in lam if x > 0]
    if alpha == 0:
        return float(len(p))
    if alpha == 1:
        return math.exp(-math.fsum(pi * math.log(pi) for pi in p))
    if alpha == math.inf:
        return 1.0 / max(p)
    return math.fsum(pi**alpha for pi in p) ** (1.0 / (1.0 - alpha))


def ref_hard(lam):
    return math.fsum(lam) ** 2 / math.fsum(x * x for x in lam)


def geometric_ranks(q, n):
    """Closed forms for ``λ_i = q^i``, ``i = 0..n−1`` (``0 < q < 1``), with ``S = Σ q^i``:
    ``Σ p_i^α = (1 − q^{αn})/((1 − q^α) S^α)``, ``R_∞ = S``, and ``R_1 = exp(log S − log q · μ)``
    with ``μ = Σ i p_i = q/(1 − q) − n q^n/(1 − q^n)`` (mean of the truncated geometric law)."""
    S = (1 - q**n) / (1 - q)
    out = {0.0: float(n), math.inf: S}
    mean = q / (1 - q) - n * q**n / (1 - q**n)
    out[1.0] = math.exp(math.log(S) - math.log(q) * mean)
    for a in (0.5, 1.5, 2.0, 3.0, 5.0):
        out[a] = ((1 - q ** (a * n)) / ((1 - q**a) * S**a)) ** (1 / (1 - a))
    return out


# ------------------------------------------------------------------------------------------------
# Exact values
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, zeros", [(1, 5), (3, 0), (7, 9), (64, 64)])
@pytest.mark.parametrize("alpha", ALPHAS)
def test_k_equal_eigenvalues_have_every_rank_k(k, zeros, alpha):
    lam = np.concatenate([np.full(k, 2.5), np.zeros(zeros)])
    assert renyi_rank(lam, alpha) == pytest.approx(k, rel=1e-12)


@pytest.mark.parametrize("q, n", [(0.5, 10), (0.9, 40), (0.3, 3), (0.99, 200)])
@pytest.mark.parametrize("alpha", ALPHAS)
def test_geometric_spectrum_closed_forms(q, n, alpha):
    lam = q ** np.arange(n)
    assert renyi_rank(lam, alpha) == pytest.approx(geometric_ranks(q, n)[alpha], rel=1e-11)


def test_hard_rank_is_the_participation_ratio_and_asymmetry_its_log_gap():
    # infinite geometric spectrum: R_2 = (1 + q)/(1 − q); q = 1/2 → 3 (to 2^{-100} here)
    lam = 0.5 ** np.arange(100)
    assert hard_rank(lam) == pytest.approx(3.0, rel=1e-14)
    forms = geometric_ranks(0.5, 100)
    assert spectral_asymmetry(lam) == pytest.approx(math.log(forms[1.0]) - math.log(forms[2.0]), rel=1e-12)


def test_a_wrong_rank_definition_fails_the_exact_values():
    """Deliberately wrong models: ranks of the singular values √λ (the data matrix's) or of p²
    satisfy 1 ≤ R_2 ≤ R_1 ≤ D but not the closed forms."""
    lam = 0.9 ** np.arange(40)
    exact = geometric_ranks(0.9, 40)
    for wrong in (np.sqrt(lam), lam**2):
        r1, r2 = soft_rank(wrong), hard_rank(wrong)
        assert 1 <= r2 <= r1 <= 40  # the inequalities alone do not catch it
        assert abs(r2 / exact[2.0] - 1) > 0.05 and abs(r1 / exact[1.0] - 1) > 0.05


# ------------------------------------------------------------------------------------------------
# Transcription on random spectra
# ------------------------------------------------------------------------------------------------

#: spectra(dynamic_range=...) with every positive λ >= max λ / 1e9, far above the relative round-off
#: tolerance len(λ)·ε·max λ (<= 1.6e-14 for 70 entries): "λ > 0" and "resolved mode" coincide for R_0
MODE_RANGE = 1e9


def _matches_the_transcription(lam):
    for a in ALPHAS:
        assert renyi_rank(lam, a) == pytest.approx(ref_renyi(lam.tolist(), a), rel=1e-10)
    assert hard_rank(lam) == pytest.approx(ref_hard(lam.tolist()), rel=1e-12)
    assert soft_rank(lam) == pytest.approx(ref_renyi(lam.tolist(), 1.0), rel=1e-12)
    assert spectral_asymmetry(lam) == pytest.approx(
        math.log(ref_renyi(lam.tolist(), 1.0)) - math.log(ref_hard(lam.tolist())), rel=1e-9, abs=1e-12)


@settings(derandomize=True, max_examples=80, deadline=None)
@given(st.integers(1, 60), st.integers(0, 2**32 - 1), st.floats(0.0, 3.0), st.integers(0, 10),
       spectra(n=(1, 70), dynamic_range=MODE_RANGE))
def test_ranks_match_the_transcription(n, seed, spread, zeros, drawn):
    """Lognormal spectra with appended zeros, and ``spectra``'s plateaus, runs of zeros and
    spectra spread over nine decades."""
    # spread ≤ 3: every positive λ is above the relative round-off tolerance len(λ)·ε·max λ, so the
    # transcription's "λ > 0" and the code's resolved modes coincide for R_0
    rng = np.random.default_rng(seed)
    lam = np.concatenate([np.exp(spread * rng.standard_normal(n)), np.zeros(zeros)])
    rng.shuffle(lam)
    _matches_the_transcription(lam)
    _matches_the_transcription(drawn)


# ------------------------------------------------------------------------------------------------
# Scale invariance
# ------------------------------------------------------------------------------------------------

@settings(derandomize=True, max_examples=60, deadline=None)
@given(st.floats(-12.0, 12.0), st.integers(0, 2**32 - 1), spectra(dynamic_range=MODE_RANGE))
def test_ranks_of_a_spectrum_are_scale_invariant(log10_c, seed, drawn):
    c = 10.0**log10_c
    lam = np.exp(3.0 * np.random.default_rng(seed).standard_normal(30))
    for spectrum in (lam, drawn):
        for a in ALPHAS:
            assert renyi_rank(c * spectrum, a) == pytest.approx(renyi_rank(spectrum, a), rel=1e-12)


def _activations(seed, n=400, d=64, rank=None):
    """``n × d`` activations with singular values spread over three decades (rank ``rank``)."""
    rng = np.random.default_rng(seed)
    r = d if rank is None else rank
    return rng.standard_normal((n, r)) @ (np.geomspace(1.0, 1e-3, r)[:, None] * rng.standard_normal((r, d)))


@settings(derandomize=True, max_examples=40, deadline=None)
@given(st.floats(-12.0, 12.0), st.integers(0, 3), st.sampled_from(["covariance", "singular"]))
def test_ranks_of_activations_are_scale_invariant(log10_c, seed, source):
    """The issue: an absolute 1e-12 floor changed the hard rank at scale 1e-3 (3.42 vs 6.36) and
    dropped modes at 1e-5.  R_0 is compared on full-rank data (on rank-deficient data the null
    modes sit at the round-off level by definition)."""
    H = _activations(seed)
    c = 10.0**log10_c
    base = rank_summary(H, alphas=ALPHAS, source=source)
    scaled = rank_summary(c * H, alphas=ALPHAS, source=source)
    for key, value in base["renyi"].items():
        assert scaled["renyi"][key] == pytest.approx(value, rel=1e-9), key
    assert base["renyi"]["0"] == 64.0
    deficient = _activations(seed, rank=20)
    for key in ("1", "2", "inf"):
        assert rank_summary(c * deficient, alphas=ALPHAS)["renyi"][key] == pytest.approx(
            rank_summary(deficient, alphas=ALPHAS)["renyi"][key], rel=1e-9)


@pytest.mark.parametrize("c", [1e-300, 1e-150, 1e150, 1e300])
def test_extreme_scales(c):
    lam = np.array([4.0, 2.0, 1.0, 0.5])
    for a in ALPHAS:
        assert renyi_rank(c * lam, a) == pytest.approx(ref_renyi(lam.tolist(), a), rel=1e-12)
    assert renyi_rank(np.full(5, 1e308), 2.0) == pytest.approx(5.0, rel=1e-14)  # Σλ overflows naively
    assert covariance_spectrum(np.diag([1e308, 1e307]), input="covariance") == pytest.approx([1e308, 1e307])


# ------------------------------------------------------------------------------------------------
# Input validation
# ------------------------------------------------------------------------------------------------

def test_covariance_input_validation():
    with pytest.raises(ValueError, match=r"covariance: expected a square matrix"):
        covariance_spectrum(np.ones((3, 4)), input="covariance")
    with pytest.raises(ValueError, match=r"covariance: not symmetric"):
        covariance_spectrum(np.array([[1.0, 0.5], [0.0, 1.0]]), input="covariance")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ComplexWarning: an error, not a silent cast
        with pytest.raises(ValueError, match=r"covariance: complex"):
            covariance_spectrum(np.eye(2) + 1j * np.eye(2), input="covariance")
        with pytest.raises(ValueError, match=r"eigenvalues: complex"):
            renyi_rank(np.array([1.0 + 1e-3j, 2.0]), 2)
        with pytest.raises(ValueError, match=r"activations: complex"):
            rank_summary(np.ones((4, 2), dtype=complex))
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match=r"covariance: .*non-finite"):
            covariance_spectrum(np.array([[1.0, bad], [bad, 1.0]]), input="covariance")
        with pytest.raises(ValueError, match=r"eigenvalues: .*non-finite"):
            renyi_rank([1.0, bad], 1)
    with pytest.raises(ValueError, match=r"eigenvalues: expected a 1-D array"):
        renyi_rank(np.eye(3), 2)  # a covariance matrix is not a spectrum
    with pytest.raises(ValueError, match=r"eigenvalues: no eigenvalue above"):
        renyi_rank(np.zeros(4), 1)
