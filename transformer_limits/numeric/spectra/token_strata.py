"""HEAD/MID/TAIL token-frequency strata by occurrence-mass tertiles (docs/theory.md §C.5).

Given unigram counts ``f(v)`` over a vocabulary of size ``V``:

1. sort the counts descending, ``f_(1) ≥ … ≥ f_(V)``, cumulative mass ``c_k = Σ_{j≤k} f_(j)``,
   total ``T = c_V``;
2. ``head_cut = #{k : c_k ≤ 0.33 T}``, ``mid_cut = #{k : c_k ≤ 0.67 T}``, clipped so that
   ``1 ≤ head_cut ≤ V−1`` and ``head_cut + 1 ≤ mid_cut ≤ V−1`` (when ``V ≥ 3``);
3. ``head_min = f_(head_cut)``, ``mid_min = f_(mid_cut)`` (1-based order statistics);
4. HEAD: ``f ≥ head_min``; MID: ``mid_min ≤ f < head_min``; TAIL: ``f < mid_min``.

Ties at a threshold all go to the higher stratum, so the occurrence shares are only roughly one
third each (the released FineWeb10B table: 32.79% / 34.21% / 33.00%).  A row of an activation
matrix belongs to the stratum of the token id at its **input position**.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from transformer_limits.numeric.spectra.ranks import as_numpy_array

__all__ = ["STRATA", "FrequencyStrata", "frequency_strata", "split_by_stratum"]

STRATA = ("HEAD", "MID", "TAIL")
HEAD_MASS, MID_MASS = 0.33, 0.67


@dataclass(frozen=True)
class FrequencyStrata:
    """Result of :func:`frequency_strata`.

    ``counts``: ``(V,)`` int64 unigram counts; ``labels``: ``(V,)`` int8 stratum code per token id
    (0 HEAD, 1 MID, 2 TAIL); ``head_cut``/``mid_cut``: cut indices in the sorted order;
    ``head_min``/``mid_min``: the count thresholds.
    """

    counts: np.ndarray
    labels: np.ndarray
    head_cut: int
    mid_cut: int
    head_min: int
    mid_min: int

    @property
    def vocab_size(self) -> int:
        return int(self.counts.size)

    def types_per_stratum(self) -> dict[str, int]:
        """Number of token types in each stratum."""
        return {name: int(np.count_nonzero(self.labels == k)) for k, name in enumerate(STRATA)}

    def occurrence_share(self) -> dict[str, float]:
        """Fraction of all occurrences ``Σ_{v∈S} f(v) / T`` in each stratum."""
        total = float(self.counts.sum())
        return {name: float(self.counts[self.labels == k].sum()) / total for k, name in enumerate(STRATA)}

    def stratum_codes(self, token_ids: Any) -> np.ndarray:
        """Stratum code (0/1/2) of each token id; ids must be integers in ``[0, V)``."""
        ids = np.asarray(token_ids)
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"token_ids: expected integers, got dtype {ids.dtype}")
        ids = ids.astype(np.int64, copy=False)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"token_ids: values must lie in [0, {self.vocab_size}), "
                             f"found [{int(ids.min())}, {int(ids.max())}]")
        return self.labels[ids]


def frequency_strata(counts: Any, *, head_mass: float = HEAD_MASS, mid_mass: float = MID_MASS) -> FrequencyStrata:
    """Occurrence-mass tertiles of a unigram count vector ``counts`` (shape ``(V,)``, ``V ≥ 3``).

    ``head_mass``/``mid_mass`` are the cumulative-mass cut-offs (0.33 / 0.67 in the paper).
    """
    f = as_numpy_array(counts, name="counts", ndim=1)
    if f.size < 3:
        raise ValueError(f"counts: need a vocabulary of at least 3 tokens, got {f.size}")
    if np.any(f < 0) or np.any(f != np.round(f)):
        raise ValueError("counts: unigram counts must be non-negative integers")
    if not 0.0 < head_mass < mid_mass < 1.0:
        raise ValueError(f"need 0 < head_mass < mid_mass < 1, got {head_mass}, {mid_mass}")
    f = f.astype(np.int64)
    if f.sum() <= 0:
        raise ValueError("counts: total count must be positive")
    f_sorted = np.sort(f)[::-1]
    cum = np.cumsum(f_sorted).astype(np.float64)
    total = cum[-1]
    vocab = f.size
    head_cut = int(np.count_nonzero(cum <= head_mass * total))
    mid_cut = int(np.count_nonzero(cum <= mid_mass * total))
    head_cut = max(1, min(head_cut, vocab - 1))
    mid_cut = max(head_cut + 1, min(mid_cut, vocab - 1))
    head_min = int(f_sorted[head_cut - 1])
    mid_min = int(f_sorted[mid_cut - 1])
    labels = np.full(vocab, 2, dtype=np.int8)
    labels[f >= mid_min] = 1
    labels[f >= head_min] = 0
    return FrequencyStrata(counts=f, labels=labels, head_cut=head_cut, mid_cut=mid_cut,
                           head_min=head_min, mid_min=mid_min)


def split_by_stratum(activations: Any, token_ids: Any, strata: FrequencyStrata) -> dict[str, np.ndarray]:
    """Split the rows of an ``n × D`` activation matrix by the stratum of each row's input token.

    ``token_ids``: ``(n,)`` integer ids (the token at the input position of each row).
    Returns ``{"HEAD": n_H × D, "MID": n_M × D, "TAIL": n_T × D}`` (row order preserved; a stratum
    without rows gets a ``0 × D`` array).
    """
    h = as_numpy_array(activations, name="activations", ndim=2)
    ids = np.asarray(token_ids)
    if ids.ndim != 1 or ids.shape[0] != h.shape[0]:
        raise ValueError(f"token_ids: expected shape ({h.shape[0]},) to match the activation rows, "
                         f"got {ids.shape}")
    codes = strata.stratum_codes(ids)
    return {name: h[codes == k] for k, name in enumerate(STRATA)}
