"""HEAD/MID/TAIL strata against a per-token transcription of the authors' rule.

Reference semantics: spectral-scaling-laws ``optimizer_ssl/spectra/frequency_metrics.py``
(``TokenFrequencyTable._compute_tertile_boundaries`` / ``get_tertile``): sort the unigram counts
descending, ``head_cut = #{cumsum ≤ 0.33·total}``, ``mid_cut = #{cumsum ≤ 0.67·total}``, clipped to
``1 ≤ head_cut ≤ V−1`` and ``head_cut+1 ≤ mid_cut ≤ V−1``; ``head_min``/``mid_min`` the counts at
those (1-based) ranks; a token is HEAD if ``f ≥ head_min``, else MID if ``f ≥ mid_min``, else TAIL;
an activation row gets the stratum of its *input* token.
"""

from __future__ import annotations

import functools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_limits.numeric.spectra.token_strata import frequency_strata, split_by_stratum
from transformer_limits.testing import strategies as tls


def ref_strata(counts, head_mass=0.33, mid_mass=0.67):
    """Labels (0 HEAD, 1 MID, 2 TAIL) per token id, one token at a time."""
    ranked = sorted(counts, reverse=True)
    total = sum(ranked)
    head_cut = mid_cut = 0
    running = 0
    for f in ranked:
        running += f
        if running <= total * head_mass:
            head_cut += 1
        if running <= total * mid_mass:
            mid_cut += 1
    head_cut = max(1, min(head_cut, len(ranked) - 1))
    mid_cut = max(head_cut + 1, min(mid_cut, len(ranked) - 1))
    head_min, mid_min = ranked[head_cut - 1], ranked[mid_cut - 1]
    labels = []
    for f in counts:
        if f >= head_min:
            labels.append(0)
        elif f >= mid_min:
            labels.append(1)
        else:
            labels.append(2)
    return labels


# Zipf-like counts with ties: V in 3..400 types, f_r = floor(scale / r^s), s in [0.3, 2], scale in
# {10, 1e3, 1e6, 1e9}, shuffled (non-degenerate: every stratum is usually non-empty)
zipf_counts = functools.partial(tls.token_counts, vocab=(3, 400), law="zipf", exponent=(0.3, 2.0))


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.one_of(zipf_counts(), tls.token_counts(law="free", vocab=(3, 60), max_count=50)))
def test_labels_match_the_transcription(counts):
    np.testing.assert_array_equal(frequency_strata(counts).labels, ref_strata(counts))


@settings(derandomize=True, max_examples=30, deadline=None)
@given(st.floats(0.05, 0.45), st.floats(0.5, 0.95), zipf_counts())
def test_other_mass_cuts_match_the_transcription(head_mass, mid_mass, counts):
    got = frequency_strata(counts, head_mass=head_mass, mid_mass=mid_mass).labels
    np.testing.assert_array_equal(got, ref_strata(counts, head_mass, mid_mass))


def test_rows_follow_the_input_token_not_the_target():
    counts = np.floor(1e6 / np.arange(1, 101) ** 1.1).astype(np.int64)
    strata = frequency_strata(counts)
    labels = ref_strata(counts.tolist())
    assert set(labels) == {0, 1, 2}  # non-degenerate: three non-empty strata
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 100, size=501)
    inputs, targets = tokens[:-1], tokens[1:]
    H = rng.standard_normal((500, 3))
    parts = split_by_stratum(H, inputs, strata)
    for k, name in enumerate(("HEAD", "MID", "TAIL")):
        rows = [H[t] for t in range(500) if labels[inputs[t]] == k]
        np.testing.assert_array_equal(parts[name], np.array(rows).reshape(-1, 3))
    # deliberately wrong model: routing by the target token gives different row sets
    wrong = split_by_stratum(H, targets, strata)
    assert any(wrong[n].shape != parts[n].shape or not np.array_equal(wrong[n], parts[n]) for n in parts)
