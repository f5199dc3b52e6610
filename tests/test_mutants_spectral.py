"""Covariance accumulator and Rényi ranks pinned from their definitions (paper C, Jha-Reagen 2026).

Written from the formulas, not from the code: the unbiased sample covariance
``C = Σ_t (h_t − h̄)(h_t − h̄)^T / (n − 1)`` (``1/n`` and no centring for the raw second moment),
``R_α = (Σ_i p_i^α)^{1/(1−α)}`` with ``p_i = λ_i / Σλ`` and ``1 ≤ R_α ≤ #modes`` (Rényi 1961; the
effective-rank family of Roy & Vetterli 2007 for α = 1, the participation ratio for α = 2).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_limits.numeric.spectra.ranks import (
    StreamingCovariance,
    covariance_matrix,
    covariance_spectrum,
    hard_rank,
    rank_summary,
    renyi_rank,
    soft_rank,
)


def test_one_dimensional_activations_have_the_sample_variance():
    """D = 1 is a valid dimension: C is the 1 × 1 sample variance Σ(x − x̄)²/(n − 1)."""
    x = [2.0, -1.0, 4.5, 0.25, 3.0]
    mean = sum(x) / len(x)
    variance = sum((v - mean) ** 2 for v in x) / (len(x) - 1)
    acc = StreamingCovariance(dim=1)
    acc.update(np.array(x[:2])[:, None]).update(np.array(x[2:])[:, None])
    assert acc.covariance().shape == (1, 1)
    assert acc.covariance()[0, 0] == pytest.approx(variance, rel=1e-14)
    second_moment = sum(v * v for v in x) / len(x)
    raw = StreamingCovariance(dim=1, center=False).update(np.array(x)[:, None])
    assert raw.covariance()[0, 0] == pytest.approx(second_moment, rel=1e-14)


def test_covariance_needs_more_rows_than_ddof():
    """``S/(n − ddof)`` is undefined for n = ddof: one centred row has no sample covariance (0/0),
    which must be an error naming ddof, not a matrix of NaN."""
    one_row = StreamingCovariance(dim=3).update([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="ddof"):
        one_row.covariance()
    with pytest.raises(ValueError, match="ddof"):
        covariance_matrix(np.array([[1.0, 2.0]]))
    two_rows = StreamingCovariance(dim=2, center=False).update(np.eye(2))
    with pytest.raises(ValueError, match="ddof"):
        two_rows.covariance(ddof=2)
    # n = 1 with ddof = 0 is defined: the raw second moment h h^T
    raw = StreamingCovariance(dim=2, center=False).update([3.0, -1.0]).covariance()
    np.testing.assert_allclose(raw, [[9.0, -3.0], [-3.0, 1.0]], rtol=0, atol=0)


@pytest.mark.parametrize("alpha", [0.01, 0.02, 0.1, 0.3, 0.45, 1.6, 2.4])
def test_renyi_rank_over_the_whole_float64_range_of_mode_ratios(alpha):
    """Two modes whose ratio spans the float64 range (λ_2/λ_1 = 2^-1074, tol = 0 keeps both):
    R_α = (p_1^α + p_2^α)^{1/(1−α)} must stay within its bound [1, 2] and equal the formula
    evaluated in log space, for every α — including small α, where p_2^{α−1} ≈ 10^{+320} is not a
    float64 and a formula that goes through it overflows."""
    tiny = math.ldexp(1.0, -1074)  # smallest subnormal
    lam = np.array([1.0, tiny])
    log_p = [-math.log1p(tiny), math.log(tiny) - math.log1p(tiny)]
    expected = math.exp(math.log(sum(math.exp(alpha * lp) for lp in log_p)) / (1.0 - alpha))
    value = renyi_rank(lam, alpha, tol=0.0)
    assert 1.0 <= value <= 2.0
    assert value == pytest.approx(expected, rel=1e-12)


def test_rank_summary_default_orders_are_rank_soft_hard_and_max():
    """The default Rényi orders are the four named ones: α = 0 (number of modes), 1 (soft, Shannon),
    2 (hard, participation ratio (Σλ)²/Σλ²) and ∞ (1/max p); each entry is that rank."""
    rng = np.random.default_rng(3)
    h = rng.standard_normal((200, 6)) @ np.diag([4.0, 2.0, 1.0, 0.5, 0.25, 0.1])
    lam = covariance_spectrum(h)
    p = lam / lam.sum()
    summary = rank_summary(h)
    assert set(summary["renyi"]) == {"0", "1", "2", "inf"}
    assert summary["renyi"]["0"] == 6.0
    assert summary["renyi"]["1"] == pytest.approx(math.exp(-sum(q * math.log(q) for q in p)), rel=1e-12)
    assert summary["renyi"]["2"] == pytest.approx(lam.sum() ** 2 / (lam**2).sum(), rel=1e-12)
    assert summary["renyi"]["inf"] == pytest.approx(1.0 / p.max(), rel=1e-12)
    assert summary["renyi"]["1"] == pytest.approx(soft_rank(lam), rel=1e-12)
    assert summary["renyi"]["2"] == pytest.approx(hard_rank(lam), rel=1e-12)
