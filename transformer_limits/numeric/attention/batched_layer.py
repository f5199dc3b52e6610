"""One attention layer applied to B problems at once, on the arrays of a runtime.

The paper-A simulators (the discrete transformer's passes, :mod:`~transformer_limits.numeric.attention.transformer`,
and the mean-field RK4 loops, :mod:`~transformer_limits.numeric.attention.mean_field`) are written once
against a :class:`~transformer_limits.numeric.runtime.Runtime` and one of the two objects here, which
supply the layer's field and vector-Jacobian product (docs/theory.md §A.2) for B problems stacked
row-wise::

    X, base, out, PC   (B N, d)           tokens of problem b in rows b N .. (b + 1) N - 1
    theta = (Q, K, V, O)  (PB H, ...)       heads of problem b: rows b H .. (b + 1) H - 1 (PB = B),
                                            or the same H heads for every problem (PB = 1)
    c                  (B H,)             head weights c_{b,h}
    field:  out = base + F(X)             F^i = sum_h c_h O_h sum_j P^h_ij V_h x^j  (base None: out = F)
    vjp:    out = base + xbar(X, PC)      grads = (dQ, dK, dV, dO), each (B H, ...), of sum_i <PC^i, F^i>

* :class:`HostLayer`: host (NumPy) arrays; one :meth:`AttentionLayer.field` / :meth:`AttentionLayer.vjp`
  call per problem, so a batch gives bit for bit the numbers of its problems run alone, on every
  backend (a GPU layer's host API copies in and out per call);
* :class:`DeviceLayer`: device arrays of the layer's own runtime; one ``device_field`` /
  ``device_vjp`` launch chain for all B problems, nothing copied between host and device.

:func:`layer_ops` picks one.  The caches the VJP needs stay where the arrays are
(:meth:`caches`: one slot per layer of a stack, ``caches(n).layer(r)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from transformer_limits.numeric.attention.layer import AttentionLayer, DeviceCache, LayerCache
from transformer_limits.numeric.runtime import Runtime

__all__ = ["HostLayer", "DeviceLayer", "HostCaches", "LazyLayerCaches", "layer_ops", "host_runtime"]

#: the heads' (Q, K, V, O), each (PB H, ...)
Theta = tuple[Any, Any, Any, Any]


def host_runtime(layer: AttentionLayer) -> Runtime:
    """The host runtime at the layer's precision: the layer's backend where it runs on the host, else
    numpy (only its arrays are used: the layer's host API takes NumPy arrays on every backend)."""
    return Runtime("numpy" if layer.flavour.on_device else layer.backend, layer.precision)


def layer_ops(layer: AttentionLayer, B: int, H: int, N: int, *, resident: bool = True) -> "HostLayer | DeviceLayer":
    """The device form where the layer runs on a device (and ``resident``), else the host form."""
    if resident and layer.dev is not None:
        return DeviceLayer(layer, B, H, N)
    return HostLayer(layer, B, H, N)


class HostCaches:
    """Host caches of n layers for B problems: ``layer(r)`` is the list of B :class:`LayerCache`;
    ``stacked``: the same caches as one ``LayerStack`` when a single problem's layers ran as a stack
    (``AttentionLayer.field_stack``), else None."""

    def __init__(self, slots: list[list[Any]] | None, stacked: Any = None):
        self.slots, self.stacked = slots, stacked

    def layer(self, r: int) -> list[Any]:
        if self.slots is None:  # a stack: layer r's views, made when asked for
            return [self.stacked.layer(r)]
        return self.slots[r]


class HostLayer:
    """The layer on host arrays, problem by problem (see the module docstring)."""

    def __init__(self, layer: AttentionLayer, B: int, H: int, N: int):
        self.layer, self.B, self.H, self.N = layer, B, H, N
        self.rt = host_runtime(layer)

    def _views(self, b: int, PB: int, theta: Theta, c: Any) -> tuple[slice, Theta, Any]:
        """Problem b's rows, heads (its own, or the shared ones when PB = 1) and head weights."""
        rows, heads = slice(b * self.N, (b + 1) * self.N), slice(b * self.H, (b + 1) * self.H)
        own = heads if PB > 1 else slice(None)
        Q, K, V, O = theta
        return rows, (Q[own], K[own], V[own], O[own]), c[heads]

    def caches(self, n: int) -> HostCaches:
        return HostCaches([[None] * self.B for _ in range(n)])

    def copy_in(self, stack: Any, index: int, host: np.ndarray) -> None:
        """stack[index] = host (B N, d)."""
        stack[index] = host

    # the runtime's arrays are C-contiguous in the layer's dtype, and so are their row and head slices:
    # the layer's *_checked entry points skip its argument checks
    def field(self, X, theta: Theta, c, PB: int, base, out, cache: Any) -> None:
        if self.B == 1:  # one problem: its rows and heads are the whole arrays (no views to make)
            F, cache[0] = self.layer.field_checked(X, *theta, c)
            out[...] = F if base is None else base + F
            return
        for b in range(self.B):
            rows, (Q, K, V, O), cb = self._views(b, PB, theta, c)
            F, cache[b] = self.layer.field_checked(X[rows], Q, K, V, O, cb)
            out[rows] = F if base is None else base[rows] + F

    def vjp(self, X, theta: Theta, c, PB: int, cache: Any, PC, base, out, grads, *, lions: bool = True) -> None:
        """``grads`` None: xbar alone (the layer skips its parameter gradients)."""
        if self.B == 1:  # one problem: its rows and heads are the whole arrays
            xbar, *dtheta = self.layer.vjp_checked(X, *theta, c, cache[0], PC, lions=lions,
                                                   param_grads=grads is not None)
            out[...] = xbar if base is None else base + xbar
            if grads is not None:
                for g, dg in zip(grads, dtheta):
                    g[...] = dg
            return
        for b in range(self.B):
            rows, (Q, K, V, O), cb = self._views(b, PB, theta, c)
            xbar, *dtheta = self.layer.vjp_checked(X[rows], Q, K, V, O, cb, cache[b], PC[rows], lions=lions,
                                                   param_grads=grads is not None)
            out[rows] = xbar if base is None else base[rows] + xbar
            if grads is not None:
                for g, dg in zip(grads, dtheta):
                    g[b * self.H:(b + 1) * self.H] = dg

    def layer_caches(self, caches: HostCaches) -> Sequence[LayerCache]:
        """Problem 0's cache of every layer (the single-problem ``ForwardPass.caches``; a stack's views
        are made when indexed)."""
        if caches.slots is None:
            return caches.stacked
        return [slot[0] for slot in caches.slots]


class LazyLayerCaches(Sequence[LayerCache]):
    """The layer caches of a device stack (L, B H, ...) as host :class:`LayerCache` (problems stacked:
    (B H, ...)); copied to the host once, on first access (five copies, whatever L)."""

    def __init__(self, rt: Runtime, stack: DeviceCache, L: int):
        self._rt, self._stack, self._L = rt, stack, L
        self._host: list[LayerCache] | None = None

    def _fetch(self) -> list[LayerCache]:
        if self._host is None:
            c = self._stack
            QF, KT, VT, A, LZ = (self._rt.get(a) for a in (c.QF, c.KT, c.VT, c.A, c.LOGZ))
            self._host = [LayerCache(A=A[r], QF=QF[r], KF=KT[r], VF=VT[r], LOGZ=LZ[r]) for r in range(self._L)]
        return self._host

    def __getitem__(self, r):
        return self._fetch()[r]

    def __len__(self) -> int:
        return self._L


class DeviceLayer:
    """The layer on device arrays, all B problems per launch (see the module docstring)."""

    def __init__(self, layer: AttentionLayer, B: int, H: int, N: int):
        assert layer.dev is not None, "DeviceLayer needs a layer on a GPU backend"
        self.layer, self.B, self.H, self.N = layer, B, H, N
        self.rt = layer.dev
        self.OH = self.rt.empty((B * H, N, layer.d))  # per-head outputs of device_field (scratch)
        self._zero: Any = None

    def _base(self, base: Any) -> Any:
        if base is not None:
            return base
        if self._zero is None:  # base 0: out = F (or xbar) alone
            self._zero = self.rt.zeros((self.B * self.N, self.layer.d))
        return self._zero

    def caches(self, n: int) -> DeviceCache:
        """A stack (n, B H, ...); ``layer(r)`` are device views."""
        return DeviceCache.empty(self.rt, (n, self.B * self.H), self.N, self.layer.d_k, self.layer.d_v)

    def copy_in(self, stack: Any, index: int, host: np.ndarray) -> None:
        """stack[index] = host (B N, d): one copy in, placed by head_sum over zero heads (out = base), so
        that no array arithmetic is needed (a Numba device array without CuPy has none); PARTS is never
        read, but Numba types it, so it is a 3-D slice of the stack."""
        self.rt.call(self.layer._module, "head_sum", self.B * self.N, stack[:1], self.rt.put(host), self.B, 0,
                     self.N, stack[index])

    def field(self, X, theta: Theta, c, PB: int, base, out, cache: Any) -> None:
        Q, K, V, O = theta
        self.layer.device_field(X, Q, K, V, O, c, self.B, self.H, self.N, PB, self._base(base), out, cache, self.OH)

    def vjp(self, X, theta: Theta, c, PB: int, cache: Any, PC, base, out, grads, *, lions: bool = True) -> None:
        """``grads`` None: xbar alone (no parameter-gradient launch)."""
        Q, K, V, O = theta
        self.layer.device_vjp(X, Q, K, V, O, c, self.B, self.H, self.N, PB, cache, PC, self._base(base), out,
                              None if grads is None else tuple(grads), lions=lions)

    def layer_caches(self, caches: DeviceCache) -> Sequence[LayerCache]:
        return LazyLayerCaches(self.rt, caches, int(caches.A.shape[0]))
