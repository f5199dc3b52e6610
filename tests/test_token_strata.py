"""HEAD/MID/TAIL strata by occurrence-mass tertiles (docs/theory.md §C.5, §D item 16)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from transformer_limits.numeric.spectra.token_strata import STRATA, frequency_strata, split_by_stratum
from transformer_limits.testing import strategies as tls

# V in 3..300 token types with independent counts in [0, 1e6], sum > 0
count_vectors = tls.token_counts(law="free", vocab=(3, 300), max_count=10**6)


def _reference_thresholds(counts, head_mass=0.33, mid_mass=0.67):
    """Straight transcription of docs/theory.md §C.5 with a Python loop (independent of the vectorised code)."""
    f_sorted = sorted(counts, reverse=True)
    total = sum(f_sorted)
    running, head_cut, mid_cut = 0, 0, 0
    for f in f_sorted:
        running += f
        head_cut += running <= head_mass * total
        mid_cut += running <= mid_mass * total
    v = len(f_sorted)
    head_cut = max(1, min(head_cut, v - 1))
    mid_cut = max(head_cut + 1, min(mid_cut, v - 1))
    return f_sorted[head_cut - 1], f_sorted[mid_cut - 1]


@settings(derandomize=True, max_examples=200, deadline=None)
@given(count_vectors)
def test_strata_follow_the_tertile_rule(counts):
    s = frequency_strata(counts)
    assert (s.head_min, s.mid_min) == _reference_thresholds(counts)
    f = np.asarray(counts)
    expected = np.where(f >= s.head_min, 0, np.where(f >= s.mid_min, 1, 2))
    np.testing.assert_array_equal(s.labels, expected)
    # a partition; a more frequent token is never in a rarer stratum
    assert sum(s.types_per_stratum().values()) == len(counts)
    order = np.argsort(-f, kind="stable")
    assert np.all(np.diff(s.labels[order]) >= 0)
    shares = s.occurrence_share()
    assert sum(shares.values()) == pytest.approx(1.0)
    # HEAD holds at least the first head_cut tokens, HEAD+MID at least the first mid_cut
    cum = np.cumsum(np.sort(f)[::-1]) / f.sum()
    assert shares["HEAD"] >= cum[s.head_cut - 1] - 1e-12
    assert shares["HEAD"] + shares["MID"] >= cum[s.mid_cut - 1] - 1e-12


def test_zipf_vocabulary_gives_roughly_equal_occurrence_thirds():
    vocab = 50304
    counts = np.floor(1e9 / np.arange(1, vocab + 1) ** 1.1).astype(np.int64)
    np.random.default_rng(0).shuffle(counts)
    s = frequency_strata(counts)
    shares = s.occurrence_share()
    for name in STRATA:
        assert abs(shares[name] - 1 / 3) < 0.02, shares
    types = s.types_per_stratum()
    assert types["HEAD"] < types["MID"] < types["TAIL"]
    assert s.head_min > s.mid_min


def test_ties_go_to_the_higher_stratum():
    s = frequency_strata([10, 10, 10, 10, 10, 10])
    assert s.head_min == 10
    assert s.types_per_stratum() == {"HEAD": 6, "MID": 0, "TAIL": 0}


def test_split_by_stratum_routes_rows_by_input_token():
    counts = np.array([1000, 500, 300, 100, 50, 20, 5, 1, 0])
    s = frequency_strata(counts)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, counts.size, 60)
    h = rng.standard_normal((60, 4))
    parts = split_by_stratum(h, ids, s)
    assert sum(len(p) for p in parts.values()) == 60
    codes = s.labels[ids]
    for k, name in enumerate(STRATA):
        np.testing.assert_array_equal(parts[name], h[codes == k])
        assert parts[name].shape[1] == 4


def test_errors():
    s = frequency_strata([5, 3, 1, 1])
    with pytest.raises(ValueError, match="token_ids"):
        split_by_stratum(np.ones((3, 2)), [0, 1], s)
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        s.stratum_codes([0, 4])
    with pytest.raises(ValueError, match="integers"):
        s.stratum_codes([0.5])
    with pytest.raises(ValueError, match="at least 3"):
        frequency_strata([1, 2])
    with pytest.raises(ValueError, match="non-negative integers"):
        frequency_strata([1, -2, 3])
    with pytest.raises(ValueError, match="positive"):
        frequency_strata([0, 0, 0])
    with pytest.raises(ValueError, match="head_mass"):
        frequency_strata([1, 2, 3], head_mass=0.7, mid_mass=0.5)
