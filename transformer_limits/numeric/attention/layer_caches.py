"""What one attention layer's forward pass keeps for its vector-Jacobian product (docs/theory.md §A.2).

``LayerCache`` is one layer's cache on the host, ``LayerStack`` the caches of a whole stack of L layers
run in one numba call (``AttentionLayer.field_stack``),
``DeviceCache`` a batch of B problems' caches on a GPU.  The numba kernels either recompute the softmax
weights P_ij = exp(beta <q^i, k^j> - log Z^i) in the adjoint from the log-normalisers LOGZ, or read them
from a *softmax tape* E the forward pass wrote (a stack run with ``tape=True``, while it fits
``SOFTMAX_TAPE_BYTES``): one exp and one logit per pair fewer in the adjoint, N^2 H L floats more.  The
tape holds the softmax numerators E_ij = exp(beta <q^i, k^j> - m_i) (m_i the row's largest logit; zero
where a causal j > i), so P_ij = E_ij / sum_j E_ij: the forward skips a normalising pass over every row
and the adjoint, which sums the row as it reads it, scales its per-row sums once instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from transformer_limits.numeric.runtime import Runtime

__all__ = ["SOFTMAX_TAPE_BYTES", "DeviceCache", "LayerCache", "LayerStack", "no_tape"]

#: the largest softmax tape (bytes) a layer stack keeps for its adjoint (larger stacks recompute P_ij): the
#: layer's ReusedArrays pool keeps as much unused, so a tape is reused by the next pass, not faulted in again
SOFTMAX_TAPE_BYTES = 2**30


def no_tape(lead: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The kernels' "no tape" argument: an empty (*lead, 0, 0) array of the layer's dtype (the kernels
    test ``E.shape[1] > 0``; the dtype keeps one compiled specialisation per precision)."""
    return np.empty(lead + (0, 0), dtype)


@dataclass
class DeviceCache:
    """One layer's cache on the device for a batch of B problems (bh = b H + h): QF (B H, N, d_k),
    KT (B H, d_k, N), VT (B H, d_v, N), A (B H, N, d_v), LOGZ (B H, N)."""

    QF: Any
    KT: Any
    VT: Any
    A: Any
    LOGZ: Any

    @staticmethod
    def empty(dev: Runtime, lead: tuple[int, ...], N: int, d_k: int, d_v: int) -> "DeviceCache":
        """Uninitialised arrays with leading axes ``lead`` (e.g. (B H,), or (L, B H) for a whole network)."""
        return DeviceCache(dev.empty(lead + (N, d_k)), dev.empty(lead + (d_k, N)), dev.empty(lead + (d_v, N)),
                           dev.empty(lead + (N, d_v)), dev.empty(lead + (N,)))

    def layer(self, r: int) -> "DeviceCache":
        """Layer r of a stacked (L, B H, ...) cache (device views, no copy)."""
        return DeviceCache(self.QF[r], self.KT[r], self.VT[r], self.A[r], self.LOGZ[r])


@dataclass
class LayerCache:
    """What the forward pass keeps for the VJP: head outputs A (H, N, d_v), features QF (H, N, d_k),
    KF, VF (H, N, d_k|d_v) (numpy/blas) or transposed (H, d_k|d_v, N) (GPU backends) or (H, d_k|d_v, N_s)
    (numba: columns j < N, the token stride N_s = ``token_stride``), and the softmax matrices
    P (H, N, N) (numpy/blas; zero where a causal j > i) and/or log-normalisers LOGZ (H, N) (generated
    kernels), and, where a numba stack kept it, the softmax tape E (H, N, N) (numerators: P = E / its row
    sums).  Host (NumPy) arrays on every backend."""

    A: np.ndarray
    QF: np.ndarray
    KF: np.ndarray
    VF: np.ndarray
    P: np.ndarray | None = None
    LOGZ: np.ndarray | None = None
    E: np.ndarray | None = None


@dataclass
class LayerStack:
    """The caches of L layers run by ``AttentionLayer.field_stack``, stacked: QF (L, H, N, d_k), KT
    (L, H, d_k, N_s), VT (L, H, d_v, N_s) (token stride N_s = ``token_stride``), A (L, H, N, d_v), LOGZ
    (L, H, N), and the softmax tape E (L, H, N, N) (numerators E_ij = exp(logit_ij - m_i), zero where a
    causal j > i; P = E / its row sums) or None (P recomputed in the adjoint)."""

    QF: np.ndarray
    KT: np.ndarray
    VT: np.ndarray
    A: np.ndarray
    LOGZ: np.ndarray
    E: np.ndarray | None = None

    def layer(self, r: int) -> LayerCache:
        """Layer r's cache (views), as ``AttentionLayer.field`` returns it (with its tape E when taped)."""
        return LayerCache(A=self.A[r], QF=self.QF[r], KF=self.KT[r], VF=self.VT[r], LOGZ=self.LOGZ[r],
                          E=None if self.E is None else self.E[r])

    def __getitem__(self, r: int) -> LayerCache:  # a sequence of the layer caches (ForwardPass.caches)
        if not -len(self) <= r < len(self):
            raise IndexError(r)
        return self.layer(r)

    def __len__(self) -> int:
        return int(self.A.shape[0])
