"""Covariance accumulator, spectra and Rényi ranks (docs/theory.md §C.3–C.4, §D item 14)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_limits.numeric.spectra.ranks import (
    StreamingCovariance,
    as_numpy_array,
    covariance_matrix,
    covariance_spectrum,
    hard_rank,
    rank_summary,
    reinjection_ratio,
    renyi_rank,
    singular_value_spectrum,
    soft_rank,
    spectral_asymmetry,
    spectrum,
)
from transformer_limits.testing import strategies as tls
from transformer_limits.numeric.spectra.ranks import (
    StreamingCovariance,
    covariance_matrix,
    covariance_spectrum,
    hard_rank,
    rank_summary,
    renyi_rank,
    soft_rank,
)

ALPHAS = [0.0, 0.25, 0.5, 0.9, 1.0 - 1e-9, 1.0, 1.0 + 1e-9, 1.1, 1.5, 2.0, 3.0, 5.0, 20.0, math.inf]

# λ in [0, 1e6]^n, n in 1..40, max λ > 1e-12 (the defaults of the public strategy)
spectra = tls.spectra(n=(1, 40), max_value=1e6)


@st.composite
def data_and_splits(draw):
    n = draw(st.integers(2, 40))
    d = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((n, d)) * rng.uniform(0.1, 10.0, d) + rng.uniform(-50, 50, d)
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=5)))
    return data, [0, *cuts, n]


# ---------------------------------------------------------------- covariance accumulator

@settings(derandomize=True, max_examples=60, deadline=None)
@given(data_and_splits())
def test_merge_of_shards_equals_one_shot(ds):
    data, bounds = ds
    shards = [StreamingCovariance().update(data[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    pooled = StreamingCovariance.pooled(shards)
    one_shot = StreamingCovariance().update(data)
    assert pooled.count == data.shape[0]
    np.testing.assert_allclose(pooled.mean, data.mean(axis=0), rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(pooled.covariance(), one_shot.covariance(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(pooled.covariance(), np.cov(data, rowvar=False).reshape(pooled.dim, -1),
                               rtol=1e-9, atol=1e-9)
    # streaming updates batch by batch give the same result
    streamed = StreamingCovariance()
    for a, b in zip(bounds[:-1], bounds[1:]):
        streamed.update(data[a:b])
    np.testing.assert_allclose(streamed.covariance(), one_shot.covariance(), rtol=1e-9, atol=1e-9)


@settings(derandomize=True, max_examples=30, deadline=None)
@given(data_and_splits())
def test_uncentred_merge_and_second_moment(ds):
    data, bounds = ds
    parts = [StreamingCovariance(center=False).update(data[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    pooled = StreamingCovariance.pooled(parts)
    np.testing.assert_allclose(pooled.covariance(), data.T @ data / data.shape[0], rtol=1e-10)
    np.testing.assert_allclose(pooled.covariance(ddof=1), data.T @ data / (data.shape[0] - 1), rtol=1e-10)


def test_pooling_matches_theory_formula_and_needs_the_mean_correction():
    """docs/theory.md §C.3: Σ_r S_r + Σ_r n_r (h̄_r − h̄)(h̄_r − h̄)^T, over n−1.  Dropping the between-shard
    term (a deliberately wrong pooling) must fail the comparison when shard means differ."""
    rng = np.random.default_rng(3)
    shards = [rng.standard_normal((n, 5)) + shift for n, shift in ((30, 0.0), (45, 2.0), (25, -3.0))]
    full = np.vstack(shards)
    mean = full.mean(axis=0)
    scatter = sum((s - s.mean(0)).T @ (s - s.mean(0)) for s in shards)
    between = sum(len(s) * np.outer(s.mean(0) - mean, s.mean(0) - mean) for s in shards)
    theory = (scatter + between) / (len(full) - 1)
    pooled = StreamingCovariance.pooled(StreamingCovariance().update(s) for s in shards)
    np.testing.assert_allclose(pooled.covariance(), theory, rtol=1e-12)
    wrong = scatter / (len(full) - 1)
    assert not np.allclose(wrong, np.cov(full, rowvar=False), rtol=1e-3)


def test_accumulator_errors_and_edge_cases():
    acc = StreamingCovariance(dim=3)
    acc.update(np.zeros((0, 3)))
    assert acc.count == 0
    with pytest.raises(ValueError, match="ddof"):
        acc.covariance()
    acc.update([1.0, 2.0, 3.0])  # one row
    with pytest.raises(ValueError, match="columns"):
        acc.update(np.ones((2, 4)))
    with pytest.raises(ValueError, match="centred"):
        acc.merge(StreamingCovariance(center=False).update(np.ones((2, 3))))
    with pytest.raises(ValueError, match="non-finite"):
        acc.update([[np.nan, 0.0, 0.0]])
    with pytest.raises(ValueError, match="dim"):
        StreamingCovariance(dim=0)
    assert StreamingCovariance().merge(StreamingCovariance()).count == 0


# ---------------------------------------------------------------- spectra

def test_covariance_spectrum_matches_numpy_and_singular_values():
    rng = np.random.default_rng(0)
    h = rng.standard_normal((200, 12)) @ rng.standard_normal((12, 12)) + 5.0
    lam = covariance_spectrum(h)
    ref = np.sort(np.linalg.eigvalsh(np.cov(h, rowvar=False)))[::-1]
    np.testing.assert_allclose(lam, ref, rtol=1e-10)
    assert np.all(np.diff(lam) <= 0)
    sig = singular_value_spectrum(h)
    np.testing.assert_allclose(sig**2 / (h.shape[0] - 1), lam, rtol=1e-9)
    np.testing.assert_allclose(spectrum(h, source="singular"), sig)
    np.testing.assert_allclose(covariance_spectrum(np.cov(h, rowvar=False), input="covariance"), lam, rtol=1e-10)
    np.testing.assert_allclose(covariance_spectrum(StreamingCovariance().update(h)), lam, rtol=1e-12)
    # uncentred spectrum differs (mean 5 adds a large mode)
    assert covariance_spectrum(h, center=False)[0] > 10 * lam[0]
    with pytest.raises(ValueError, match="source"):
        spectrum(h, source="gram")
    with pytest.raises(ValueError, match="square"):
        covariance_spectrum(np.ones((2, 3)), input="covariance")


def test_spectrum_is_clamped_for_rank_deficient_data():
    rng = np.random.default_rng(1)
    h = rng.standard_normal((50, 3)) @ rng.standard_normal((3, 10))  # rank 3 (rank 3 after centring)
    lam = covariance_spectrum(h)
    assert np.all(lam >= 0.0)  # round-off negatives clamped at 0 (no absolute floor)
    assert renyi_rank(lam, 0) == 3.0
    for c in (1e-150, 1e-6, 1e6, 1e150):  # the null modes stay null at every scale
        assert renyi_rank(covariance_spectrum(h * c), 0) == 3.0
    assert covariance_matrix(h).shape == (10, 10)


# ---------------------------------------------------------------- Rényi ranks

@settings(derandomize=True, max_examples=150, deadline=None)
@given(spectra)
def test_renyi_rank_bounds_and_monotone_in_alpha(lam):
    ranks = [renyi_rank(lam, a) for a in ALPHAS]
    support = renyi_rank(lam, 0)
    assert support == np.count_nonzero(lam > lam.max() * lam.size * np.finfo(float).eps)
    for r in ranks:
        assert 1.0 - 1e-9 <= r <= support * (1 + 1e-9)
    for r_lo, r_hi in zip(ranks[1:], ranks[:-1]):
        assert r_lo <= r_hi * (1 + 1e-9)
    soft, hard = soft_rank(lam), hard_rank(lam)
    assert hard <= soft * (1 + 1e-12)
    assert spectral_asymmetry(lam) >= -1e-12
    np.testing.assert_allclose(hard, lam.sum() ** 2 / np.sum(lam**2), rtol=1e-9)
    p = lam[lam > 0] / lam.sum()
    p = p[p > 0]
    np.testing.assert_allclose(soft, np.exp(-np.sum(p * np.log(p))), rtol=1e-6)
    np.testing.assert_allclose(renyi_rank(lam, math.inf), 1.0 / p.max(), rtol=1e-12)
    # α → 1 continuity (the log1p/expm1 branch)
    np.testing.assert_allclose(renyi_rank(lam, 1 + 1e-7), soft, rtol=1e-5)
    np.testing.assert_allclose(renyi_rank(lam, 1 - 1e-7), soft, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 2, 7, 100])
@pytest.mark.parametrize("alpha", ALPHAS)
def test_uniform_spectrum_has_rank_n_and_rank_one_has_rank_one(n, alpha):
    assert renyi_rank(np.full(n, 3.7), alpha) == pytest.approx(n, rel=1e-9)
    one = np.zeros(n)
    one[0] = 2.0
    assert renyi_rank(one, alpha) == pytest.approx(1.0, rel=1e-12)
    clamped = np.full(n, 5.0 * 1e-17)
    clamped[0] = 5.0  # round-off-level eigenvalues (relative 1e-17) must not count as modes
    assert renyi_rank(clamped, alpha) == pytest.approx(1.0, rel=1e-9)
    assert renyi_rank(clamped * 1e-20, alpha) == pytest.approx(1.0, rel=1e-9)  # relative, not absolute


def test_renyi_rank_against_direct_formula():
    lam = np.array([5.0, 3.0, 1.0, 0.5, 0.01])
    p = lam / lam.sum()
    for a in (0.3, 0.5, 2.0, 3.0, 7.5):
        expected = np.sum(p**a) ** (1.0 / (1.0 - a))
        assert renyi_rank(lam, a) == pytest.approx(expected, rel=1e-12)
    assert renyi_rank(lam, 0) == 5.0
    assert spectral_asymmetry(lam) == pytest.approx(np.log(soft_rank(lam) / hard_rank(lam)))


def test_rank_errors():
    with pytest.raises(ValueError, match="alpha"):
        renyi_rank([1.0, 2.0], -0.5)
    with pytest.raises(ValueError, match="alpha"):
        renyi_rank([1.0, 2.0], float("nan"))
    with pytest.raises(ValueError, match="negative"):
        renyi_rank([1.0, -0.5], 1)
    with pytest.raises(ValueError, match="no eigenvalue above"):
        renyi_rank([0.0, 0.0], 2)
    with pytest.raises(ValueError, match="empty"):
        soft_rank([])
    assert renyi_rank([1.0, -1e-18], 0) == 1.0  # rounding-level negatives are zeros


def test_reinjection_ratio_and_summary():
    rng = np.random.default_rng(5)
    pre = rng.standard_normal((400, 16)) @ np.diag(np.geomspace(1, 30, 16))
    post = np.maximum(pre, 0.0) ** 2  # ReLU²
    lp, lq = covariance_spectrum(pre), covariance_spectrum(post)
    rho = reinjection_ratio(lp, lq, 2.0)
    assert rho == pytest.approx(hard_rank(lq) / hard_rank(lp))
    summary = rank_summary(pre, alphas=[0, 1, 2, math.inf])
    assert set(summary["renyi"]) == {"0", "1", "2", "inf"}
    assert summary["soft"] == pytest.approx(soft_rank(lp))
    assert summary["renyi"]["2"] == pytest.approx(summary["hard"])
    assert summary["n"] == 400 and summary["dim"] == 16


# ---------------------------------------------------------------- array conversion

class _FakeTorch:
    def __init__(self, a):
        self.a = a

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        return self.a


class _FakeCupy:
    __cuda_array_interface__ = {}

    def __init__(self, a):
        self.a = a

    def get(self):
        return self.a


class _ArrayLike:
    def __array__(self, dtype=None, copy=None):
        return np.arange(6.0).reshape(2, 3)


def test_as_numpy_array_conversions_and_errors():
    a = np.arange(6.0).reshape(3, 2)
    for obj in (_FakeTorch(a), _FakeCupy(a), a.tolist()):
        out = as_numpy_array(obj, ndim=2)
        assert out.dtype == np.float64
        np.testing.assert_array_equal(out, a)
    assert as_numpy_array(_ArrayLike(), ndim=2).shape == (2, 3)
    with pytest.raises(ValueError, match=r"activations: expected a 2-D array, got shape \(3,\)"):
        as_numpy_array([1.0, 2.0, 3.0], name="activations", ndim=2)
    with pytest.raises(ValueError, match="non-finite"):
        as_numpy_array([[1.0, np.inf]])
    with pytest.raises(ValueError, match="convert"):
        as_numpy_array([["a", "b"]])
    with pytest.raises(ValueError, match="empty"):
        as_numpy_array(np.zeros((0, 3)))
    assert rank_summary(_FakeTorch(a @ np.ones((2, 2))))["dim"] == 2

# ------------------------------------------------------------------------------------------------
# Mutation-round tests (were tests/test_mutants_spectral.py): properties the mutation runs showed were not
# pinned down.
# ------------------------------------------------------------------------------------------------


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
