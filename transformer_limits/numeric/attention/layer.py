"""One multi-head attention layer field and its vector-Jacobian product, on three backends.

Field of one layer (docs/theory.md §A.2, [RECON]), for tokens X (N, d) and heads h = 1..H::

    F^i = sum_h c_h O_h A_h(x^i, m^i),   A_h(x, m) = sum_j P_ij V_h x^j,
    P_ij = softmax_j(beta <Q_h x^i, K_h x^j>) over the visible j (all j, or j <= i when causal),

so m^i = m^N (unmasked) or the prefix measure (1/i) sum_{j<=i} delta_{x^j} (causal); c_h are the head
weights (residual scale x head scale, or residual scale x atom weight in exact-expectation mode);
beta = 1/temperature.  The VJP with cotangent PC (N, d) returns::

    xbar^j = sum_h [ grad_x A_h(x^j)^T g_h^j + sum_i w_ij (d_mu A_h(x^i, m^i)(x^j))^T g_h^i ],
    g_h^i = c_h O_h^T PC^i,  w_ij = 1/N or 1_{j<=i}/i,

and the parameter gradients dQ, dK, dV, dO of sum_i <PC^i, F^i> (stacked (H, ...)).

Backends (names of :data:`transformer_limits.numeric.backends.REGISTRY`; the flavour each runs in
brackets):

``numpy``  [python-numpy] reference: the field by explicit softmax matrices, xbar by the docs/theory.md §A.2 formula with
           the Jacobian and Lions-derivative tensors of the generated NumPy attention kernels
           (:func:`transformer_limits.numeric.attention.kernels.attention_kernels`; O(N^2 d d_v) memory per head,
           for tests); parameter gradients by matrix products.
``blas``   [numpy-blas] plain batched NumPy/BLAS backpropagation (matmul over heads, (H, N, N) softmax matrices);
           the baseline of ``benchmarks/bench_transformer.py``.
``numba``  [python-numba] generated kernels (kernel family
           :data:`~transformer_limits.numeric.kernel_family.LAYER_ADJOINT`), parallel
           over tokens, pair loops vectorised over keys, O(T H N (d_k + d_v)) memory (T threads): the Lions term is applied as K^T kbar + V^T vbar,
           never as an (N, N, d, d) tensor.
``numba-cuda``, ``numba-cuda-sim`` [python-cuda] and ``cupy`` [cuda-c]  the same family's GPU kernels
           (:mod:`transformer_limits.symbolic.attention_adjoint_cuda`): one thread per (head, query row) for
           the forward pass and the row part of the adjoint, one per (head, key) for the key-side sums
           kbar^j, vbar^j (P_ij recomputed from the stored log Z^i), head sums (with the residual) and the
           parameter gradients in a fixed order (no atomics: deterministic).  :meth:`AttentionLayer.field`
           and :meth:`AttentionLayer.vjp` take and return host arrays; :meth:`AttentionLayer.device_field`
           and :meth:`AttentionLayer.device_vjp` run a batch of B problems on device arrays
           (:class:`~transformer_limits.numeric.runtime.Runtime`), for the device-resident
           transformer.

``precision`` (``float64`` default, or ``float32``): numpy and blas compute in arrays of that dtype; cupy
runs the float32 compile of the same CUDA C source; numba runs its float32 kernel sources (scratch
partials in float32 too); the python-cuda backends are float64 only.

``lions=False`` in :meth:`AttentionLayer.vjp` drops the Lions (interaction) term; it exists to show that
the gradient Taylor test then fails (a deliberately wrong model).
"""

from __future__ import annotations

import importlib
import threading
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from transformer_limits.numeric.attention.layer_caches import (SOFTMAX_TAPE_BYTES, DeviceCache, LayerCache, LayerStack,
                                                               no_tape)
from transformer_limits.numeric.backends import FLOAT32_BACKENDS, REGISTRY, resolve_backend
from transformer_limits.numeric.flavours import NUMPY_BLAS, PYTHON_NUMPY
from transformer_limits.numeric.numba_twins import numba_thread_count
from transformer_limits.numeric.reused_arrays import ReusedArrays
from transformer_limits.numeric.runtime import DTYPES, Runtime
from transformer_limits.numeric.kernel_family import LAYER_ADJOINT
from transformer_limits.resource_limits import check_kernel_dimensions

__all__ = ["LAYER_BACKENDS", "LAYER_FLAVOURS", "FLOAT32_BACKENDS", "AttentionLayer", "DeviceCache", "LayerCache",
           "attention_layer"]

#: flavours the layer runs: NumPy attention kernels (reference), hand-written BLAS, generated layer kernels
#: (every flavour of the kernel family LAYER_ADJOINT)
LAYER_FLAVOURS = (PYTHON_NUMPY, NUMPY_BLAS, *LAYER_ADJOINT.flavours.values())
#: the backends that run them: numpy, blas, numba, numba-cuda, numba-cuda-sim, cupy
LAYER_BACKENDS = tuple(name for name, b in REGISTRY.items() if b.flavour in LAYER_FLAVOURS)


def _c_einsum() -> Callable[..., Any]:
    """NumPy's C einsum, which np.einsum (no ``optimize``) hands its operands to: at a few tokens the
    Python wrapper is a sixth of each call, and the numpy / blas layer makes nine per field + VJP."""
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):  # NumPy 2.x, 1.x
        try:
            fn = getattr(importlib.import_module(name), "c_einsum", None)
        except ImportError:
            continue
        if fn is not None:
            return fn
    return np.einsum  # pragma: no cover - the same numbers, through the wrapper


_einsum = _c_einsum()

#: row tasks of the numba kernels at least (see :func:`_tasks`)
MIN_TASKS = 16


#: up to this many tokens the numba kernels run one row task (a parallel launch does not pay there)
SERIAL_TOKENS = 32


def _row_groups(H: int, N: int) -> int:
    """Row groups G per head of the numba adjoint: its tasks are (head h, group g), rows i = g, g + G, ...,
    each with its own key-side partials (G, H, d_k + d_v, N), summed over g afterwards.  G = ceil(T / H)
    for the forward's T = :func:`_tasks` (N), so the adjoint has at least as many tasks as the forward,
    G = 1 (no partials to sum) from H = 16 heads on, and, like T, G is the same with 1 … 16 Numba
    threads (bitwise the same results)."""
    return -(-_tasks(N) // H)


def _tasks(N: int) -> int:
    """Row tasks of the numba forward kernel (rows i = t, t + T, ... per task t, all heads).  T does not
    follow the thread count up to MIN_TASKS threads, so results are bitwise the same with 1 … 16 Numba
    threads (e.g. in sweep workers that get fewer threads than the parent).  Up to SERIAL_TOKENS tokens
    T = 1: such layers run on the serial twins anyway (numba_twins.py)."""
    if N <= SERIAL_TOKENS:
        return 1
    return max(1, min(max(MIN_TASKS, numba_thread_count()), N))


#: row lengths (bytes) that are multiples of ALIAS_BYTES map every row of a (H, n, N) array to the same cache sets
ALIAS_BYTES, CACHE_LINE_BYTES = 4096, 64


def token_stride(N: int, itemsize: int) -> int:
    """N_s >= N, the token stride of the numba kernels' transposed arrays KT, VT and partials KBP, VBP (H,
    n, N_s): N, or N plus one cache line where N itemsize is a multiple of ``ALIAS_BYTES`` (there the
    rows of one head share their L1 sets, and the adjoint's key-side sweeps, 16 or more rows at once,
    miss on every access: measured 1.35x slower at N = 1024 and 4096, float64).  Columns j >= N are
    padding, never read."""
    return N + CACHE_LINE_BYTES // itemsize if (N * itemsize) % ALIAS_BYTES == 0 else N


#: per thread: the adjoint's task partials of the last shape, reused (a fresh (G, H, d_k + d_v, N) array
#: per call costs its page faults, about as much as the key-side updates themselves at N = 256)
_SCRATCH = threading.local()


def _partials(G: int, H: int, d_k: int, d_v: int, N: int,
              dtype: np.dtype = np.dtype(np.float64)) -> tuple[np.ndarray, np.ndarray]:
    """KBP (G, H, d_k, N_s), VBP (G, H, d_v, N_s) scratch for the numba adjoint (N_s = ``token_stride``,
    given as ``N``) in ``dtype`` (the layer's: a
    float64 scratch would promote the float32 kernel's partial sums); contents undefined (the kernel's
    tasks zero their own slices); one pair per thread, replaced when the shape or dtype changes."""
    key = (G, H, d_k, d_v, N, np.dtype(dtype))
    if getattr(_SCRATCH, "key", None) != key:
        _SCRATCH.key, _SCRATCH.arrays = key, (np.empty((G, H, d_k, N), dtype), np.empty((G, H, d_v, N), dtype))
    return _SCRATCH.arrays



class AttentionLayer:
    """Field and VJP of one attention layer for fixed shapes, mask, temperature and backend."""

    def __init__(self, d: int, d_k: int, d_v: int, *, causal: bool = False, temperature: float = 1.0,
                 backend: str = "numpy", precision: str = "float64"):
        for name, val in (("d", d), ("d_k", d_k), ("d_v", d_v)):
            if not isinstance(val, (int, np.integer)) or val < 1:
                raise ValueError(f"{name} must be a positive integer, got {val!r}")
        self.flavour = resolve_backend(backend, LAYER_FLAVOURS, "the attention layer").flavour
        if not (np.isfinite(temperature) and temperature > 0):
            raise ValueError(f"temperature must be a positive number, got {temperature!r}")
        if precision not in DTYPES:
            raise ValueError(f"precision must be one of {', '.join(DTYPES)}, got {precision!r}")
        if precision != "float64" and backend not in FLOAT32_BACKENDS:
            raise ValueError(f"precision {precision!r} needs one of the backends {', '.join(FLOAT32_BACKENDS)}; "
                             f"backend {backend!r} computes in float64 only")
        if LAYER_ADJOINT.has(self.flavour):  # generated code is unrolled in d, d_k, d_v (blas: any size)
            check_kernel_dimensions(d=d, d_k=d_k, d_v=d_v)
        self.d, self.d_k, self.d_v = int(d), int(d_k), int(d_v)
        self.causal, self.beta, self.backend = bool(causal), 1.0 / float(temperature), backend
        self.precision, self.dtype = precision, DTYPES[precision]
        self._module: Any = None
        self._masks: dict[int, np.ndarray] = {}  # causal masks by N (numpy / blas field)
        #: arrays and kernel calls of the generated flavours; None on numpy and blas (no generated kernels)
        self.runtime: Runtime | None = None
        if LAYER_ADJOINT.has(self.flavour):
            self._module = LAYER_ADJOINT.load(backend, precision=precision, d=self.d, d_k=self.d_k, d_v=self.d_v)
            self.runtime = Runtime(backend, precision)
            self._stack_arrays = ReusedArrays()  # field_stack's layer caches, reused once dropped
        # GPU flavours: device arrays and launches (the batched device_field / device_vjp)
        self.dev: Runtime | None = self.runtime if self.flavour.on_device else None

    def _stride(self, N: int) -> int:
        """The numba kernels' token stride N_s for N tokens in this layer's dtype (``token_stride``)."""
        return token_stride(N, self.dtype.itemsize)

    def _visible(self, N: int) -> np.ndarray:
        """The causal mask j <= i, (N, N) bool, built once per N (read only)."""
        mask = self._masks.get(N)
        if mask is None:
            mask = np.tril(np.ones((N, N), dtype=bool))
            mask.setflags(write=False)
            self._masks[N] = mask
        return mask

    # ------------------------------------------------------------------ checks
    def _check(self, X, Qs, Ks, Vs, Os, c):
        X = np.ascontiguousarray(X, dtype=self.dtype)
        Qs, Ks, Vs, Os = (np.ascontiguousarray(a, dtype=self.dtype) for a in (Qs, Ks, Vs, Os))
        c = np.ascontiguousarray(c, dtype=self.dtype)
        if X.ndim != 2 or X.shape[1] != self.d or X.shape[0] < 1:
            raise ValueError(f"X must have shape (N, {self.d}) with N >= 1, got {X.shape}")
        H = Qs.shape[0] if Qs.ndim == 3 else -1
        want = {"Qs": (H, self.d_k, self.d), "Ks": (H, self.d_k, self.d), "Vs": (H, self.d_v, self.d),
                "Os": (H, self.d, self.d_v)}
        for name, arr in (("Qs", Qs), ("Ks", Ks), ("Vs", Vs), ("Os", Os)):
            if H < 1 or arr.shape != want[name]:
                raise ValueError(f"{name} must have shape {want[name]} (H >= 1), got {arr.shape}")
        if c.shape != (H,):
            raise ValueError(f"head weights c must have shape ({H},), got {c.shape}")
        return X, Qs, Ks, Vs, Os, c

    # ------------------------------------------------------------------ field
    def field(self, X, Qs, Ks, Vs, Os, c) -> tuple[np.ndarray, LayerCache]:
        """F (N, d) and the cache for :meth:`vjp`."""
        return self.field_checked(*self._check(X, Qs, Ks, Vs, Os, c))

    def field_checked(self, X, Qs, Ks, Vs, Os, c) -> tuple[np.ndarray, LayerCache]:
        """:meth:`field` on arguments that already passed ``_check`` (C-contiguous arrays of the
        layer's dtype and shapes): the simulators' host loops call it once per layer and problem (their
        arrays come from the runtime, so the checks would only repeat themselves)."""
        if self.dev is not None:
            return self._field_gpu(X, Qs, Ks, Vs, Os, c)
        if self.runtime is not None:  # the generated host kernels (numba): their own kernel set, see _field_host
            return self._field_host(X, Qs, Ks, Vs, Os, c)
        QF = _einsum("hkd,nd->hnk", Qs, X)
        KF = _einsum("hkd,nd->hnk", Ks, X)
        VF = _einsum("hkd,nd->hnk", Vs, X)
        logits = QF @ KF.transpose(0, 2, 1)
        if self.beta != 1.0:  # x * 1.0 == x exactly: the product is skipped, not the temperature
            logits = self.beta * logits
        if self.causal:
            logits = np.where(self._visible(X.shape[0]), logits, -np.inf)
        E = np.exp(logits - logits.max(axis=2, keepdims=True))
        P = E / E.sum(axis=2, keepdims=True)
        A = P @ VF
        F = _einsum("h,hac,hnc->na", c, Os, A)
        return F, LayerCache(A=A, QF=QF, KF=KF, VF=VF, P=P)

    def _field_host(self, X, Qs, Ks, Vs, Os, c):
        """The python-numba kernels of LAYER_ADJOINT (unbatched features, forward with the head sum and
        T row tasks; not yet the GPU flavours' kernel set), called through the host runtime."""
        rt, m = self.runtime, self._module
        assert rt is not None
        H, N = Qs.shape[0], X.shape[0]
        Ns = self._stride(N)
        QF, KT, VT = rt.empty((H, N, self.d_k)), rt.empty((H, self.d_k, Ns)), rt.empty((H, self.d_v, Ns))
        rt.call(m, "features", H * N, X, Qs, Ks, Vs, QF, KT, VT)
        A, LOGZ, F = rt.empty((H, N, self.d_v)), rt.empty((H, N)), rt.empty((N, self.d))
        rt.call(m, "forward", N, QF, KT, VT, Os, c, self.beta, self.causal, _tasks(N), A, LOGZ, F,
                no_tape((H,), self.dtype))
        return F, LayerCache(A=A, QF=QF, KF=KT, VF=VT, LOGZ=LOGZ)

    # ------------------------------------------------------------------ stacks of layers (numba host)
    @property
    def runs_stacks(self) -> bool:
        """Whether :meth:`field_stack` / :meth:`xbar_stack` run here (the generated host kernels: numba)."""
        return self.runtime is not None and self.dev is None

    def field_stack(self, states, Qs, Ks, Vs, Os, c, *, tape: bool = False) -> Any:
        """x_{r+1} = x_r + F_r(x_r), r = 0..L-1, in one call of the numba ``forward_stack`` (the kernels
        of :meth:`field` in the same order, so the same numbers bit for bit): ``states`` (L+1, N, d) with
        x_0 set is filled in place; Qs.. (L, H, ...), c (L, H); all C-contiguous in the layer's dtype.
        Returns the L layer caches, stacked (a ``LayerStack``), in arrays of the layer's
        ``ReusedArrays`` pool: handed out again only once nothing references them.  ``tape``: also keep
        the softmax tape E (L, H, N, N) (numerators; ``LayerStack``) for the adjoint, if it fits
        ``SOFTMAX_TAPE_BYTES`` (the states are the same bit for bit either way)."""
        rt, m = self.runtime, self._module
        assert rt is not None and self.dev is None, "field_stack runs the numba host kernels"
        (L, H), N = Qs.shape[:2], states.shape[1]
        empty = lambda shape: self._stack_arrays.empty(shape, self.dtype)  # noqa: E731 (host arrays)
        Ns = self._stride(N)
        taped = tape and L * H * N * N * self.dtype.itemsize <= SOFTMAX_TAPE_BYTES
        st = LayerStack(empty((L, H, N, self.d_k)), empty((L, H, self.d_k, Ns)), empty((L, H, self.d_v, Ns)),
                        empty((L, H, N, self.d_v)), empty((L, H, N)), empty((L, H, N, N)) if taped else None)
        rt.call(m, "forward_stack", N, states, Qs, Ks, Vs, Os, c, self.beta, self.causal, _tasks(N), st.QF, st.KT,
                st.VT, st.A, st.LOGZ, rt.empty((N, self.d)), self._tape(st.E, (L, H)))
        return st

    def _tape(self, E: np.ndarray | None, lead: tuple[int, ...]) -> np.ndarray:
        """The kernels' tape argument: E, or the empty "no tape" array with leading axes ``lead``."""
        return no_tape(lead, self.dtype) if E is None else E

    def xbar_stack(self, p, Qs, Ks, Vs, Os, c, stack: Any, lions: bool = True, *, states: Any = None,
                   grads: tuple[Any, Any, Any, Any] | None = None) -> None:
        """p_r = p_{r+1} + xbar_r(p_{r+1}), r = L-1..0, in one call of the numba ``adjoint_stack`` (the
        kernels of :meth:`vjp` without parameter gradients, same order, same numbers): ``p`` (L+1, N, d)
        with p_L set is filled in place; ``stack`` is :meth:`field_stack`'s.  With ``grads`` = (dQs, dKs,
        dVs, dOs) (L, H, ...) and the forward ``states`` (L+1, N, d): ``adjoint_grads_stack``, which also
        writes every layer's parameter gradients (:meth:`vjp`'s, bit for bit)."""
        rt, m = self.runtime, self._module
        assert rt is not None and self.dev is None, "xbar_stack runs the numba host kernels"
        H, N = Qs.shape[1], p.shape[1]
        KBP, VBP = _partials(_row_groups(H, N), H, self.d_k, self.d_v, self._stride(N), self.dtype)
        args = (Os, c, stack.QF, stack.KT, stack.VT, stack.A, stack.LOGZ, self.beta, self.causal, bool(lions),
                rt.empty((H, N, self.d_k)), KBP, VBP, rt.empty((H, self.d_k, N)), rt.empty((H, self.d_v, N)),
                rt.empty((N, self.d)), self._tape(stack.E, Qs.shape[:2]))
        if grads is None:
            rt.call(m, "adjoint_stack", N, p, Qs, Ks, Vs, *args)
        else:
            rt.call(m, "adjoint_grads_stack", N, p, states, Qs, Ks, Vs, *args, *grads)

    # ------------------------------------------------------------------ vjp
    def vjp(self, X, Qs, Ks, Vs, Os, c, cache: LayerCache, PC, *, lions: bool = True, param_grads: bool = True):
        """(xbar (N, d), dQs, dKs, dVs, dOs) for the cotangent PC (N, d) of F; ``param_grads=False``
        returns (xbar, None, None, None, None), xbar bit for bit the same (the sup-over-inputs ascent
        needs the input gradient alone)."""
        X, Qs, Ks, Vs, Os, c = self._check(X, Qs, Ks, Vs, Os, c)
        PC = np.ascontiguousarray(PC, dtype=self.dtype)
        if PC.shape != X.shape:
            raise ValueError(f"cotangent PC must have shape {X.shape}, got {PC.shape}")
        return self.vjp_checked(X, Qs, Ks, Vs, Os, c, cache, PC, lions=lions, param_grads=param_grads)

    def vjp_checked(self, X, Qs, Ks, Vs, Os, c, cache: LayerCache, PC, *, lions: bool = True,
                    param_grads: bool = True):
        """:meth:`vjp` on arguments that already passed the checks (see :meth:`field_checked`)."""
        if self.dev is not None:  # the whole VJP (parameter gradients too) on the device
            return self._vjp_gpu(X, Qs, Ks, Vs, Os, c, cache, PC, lions, param_grads)
        if self.runtime is not None:  # the generated host kernels (numba)
            QBAR, KBAR, VBAR, xbar = self._bars_host(Qs, Ks, Vs, Os, c, cache, PC, lions)
        else:
            QBAR, KBAR, VBAR = self._bars_blas(Os, c, cache, PC)
            if self.flavour is NUMPY_BLAS:
                xbar = _einsum("hnk,hkd->nd", QBAR, Qs)
                if lions:
                    xbar += _einsum("hnk,hkd->nd", KBAR, Ks) + _einsum("hnk,hkd->nd", VBAR, Vs)
            else:
                xbar = self._xbar_theory(X, Qs, Ks, Vs, Os, c, PC, lions)
        if not param_grads:
            return xbar, None, None, None, None
        if self.runtime is not None:  # one kernel call (per-head matmuls cost their calls, not their flops)
            return (xbar, *self._param_grads_host(X, PC, c, cache.A, QBAR, KBAR, VBAR))
        dQ, dK, dV = (np.matmul(B.transpose(0, 2, 1), X) for B in (QBAR, KBAR, VBAR))  # sum_i bar^i x^iT
        dO = c[:, None, None] * np.matmul(PC.T, cache.A)
        return xbar, dQ, dK, dV, dO

    def _bars_blas(self, Os, c, cache: LayerCache, PC):
        P = cache.P
        assert P is not None  # the numpy/blas forward pass keeps the softmax matrices
        G = c[:, None, None] * _einsum("na,hac->hnc", PC, Os)
        gA = _einsum("hnc,hnc->hn", G, cache.A)
        S = P * (G @ cache.VF.transpose(0, 2, 1) - gA[:, :, None])
        QBAR = S @ cache.KF
        KBAR = S.transpose(0, 2, 1) @ cache.QF
        if self.beta != 1.0:  # as in the field: x * 1.0 == x exactly
            QBAR, KBAR = self.beta * QBAR, self.beta * KBAR
        VBAR = P.transpose(0, 2, 1) @ G
        return QBAR, KBAR, VBAR

    def _bars_host(self, Qs, Ks, Vs, Os, c, cache: LayerCache, PC, lions):
        """The python-numba adjoint kernels: ``adjoint`` (tasks (head, row group), each with its own
        kbar/vbar partials (G, H, d_k|d_v, N), zeroed by the task), then ``finish`` (partials summed over
        the groups in order; xbar = sum_h Q_h^T qbar_h + the Lions term, once per token)."""
        rt, m = self.runtime, self._module
        assert rt is not None
        H, N = Qs.shape[0], PC.shape[0]
        QBAR = rt.empty((H, N, self.d_k))
        KBP, VBP = _partials(_row_groups(H, N), H, self.d_k, self.d_v, self._stride(N), self.dtype)
        rt.call(m, "adjoint", N, PC, Os, c, cache.QF, cache.KF, cache.VF, cache.A, cache.LOGZ, self.beta,
                self.causal, QBAR, KBP, VBP, self._tape(cache.E, (H,)))
        KBT, VBT, xbar = rt.empty((H, self.d_k, N)), rt.empty((H, self.d_v, N)), rt.empty((N, self.d))
        rt.call(m, "finish", N, KBP, VBP, Qs, Ks, Vs, QBAR, bool(lions), KBT, VBT, xbar)
        return QBAR, KBT.transpose(0, 2, 1), VBT.transpose(0, 2, 1), xbar  # KBAR, VBAR (H, N, d_k|d_v) views

    def _param_grads_host(self, X, PC, c, A, QBAR, KBAR, VBAR):
        """(dQ, dK, dV, dO) (H, d_k|d_v|d, d|d_v) by the numba ``param_grads`` kernel: dQ_h = sum_i qbar_h^i
        x^iT, dK_h, dV_h likewise, dO_h = c_h sum_i p^i A_h^iT; KBAR, VBAR are ``_bars_host``'s views of
        (H, d_k|d_v, N) arrays."""
        rt = self.runtime
        assert rt is not None
        H, d, N = QBAR.shape[0], self.d, X.shape[0]
        out = rt.empty((H, self.d_k, d)), rt.empty((H, self.d_k, d)), rt.empty((H, self.d_v, d)), rt.empty((H, d, self.d_v))
        KBT, VBT = (np.ascontiguousarray(B.transpose(0, 2, 1)) for B in (KBAR, VBAR))  # no copy: finish's arrays
        rt.call(self._module, "param_grads", N, X, PC, c, A, QBAR, KBT, VBT, *out)
        return out

    # ------------------------------------------------------------------ GPU (device arrays)
    def device_field(self, X, Qs, Ks, Vs, Os, c, B: int, H: int, N: int, PB: int, base, out,
                     cache: Any, OH) -> None:
        """Batched forward pass on device arrays: out = base + F for B problems (X, base, out (B N, d);
        Qs.. (PB H, ...), PB = 1 shared or B; c (B H,)); fills ``cache`` (a ``DeviceCache``);
        OH (B H, N, d) is scratch."""
        assert self.dev is not None, "device_field needs a GPU backend"
        m, dev = self._module, self.dev
        dev.call(m, "features", B * H * N, X, Qs, Ks, Vs, B, H, N, PB, cache.QF, cache.KT, cache.VT)
        dev.call(m, "forward", B * H * N, cache.QF, cache.KT, cache.VT, Os, c, self.beta, self.causal, B, H, N,
                   PB, cache.A, cache.LOGZ, OH)
        dev.call(m, "head_sum", B * N, OH, base, B, H, N, out)  # sum_h in order, then + base

    def device_vjp(self, X, Qs, Ks, Vs, Os, c, B: int, H: int, N: int, PB: int, cache: Any, PC, base,
                   out, grads: tuple[Any, Any, Any, Any] | None, *, lions: bool = True) -> None:
        """Batched VJP on device arrays: out = base + xbar (B N, d; base = PC in the adjoint recursion,
        0 for xbar alone) and the per-problem parameter gradients ``grads`` = (dQ, dK, dV, dO), each
        (B H, ...), for the cotangent PC (B N, d) (``grads`` None: xbar alone); ``cache`` is the
        forward pass's ``DeviceCache``."""
        assert self.dev is not None, "device_vjp needs a GPU backend"
        m, dev, beta, causal = self._module, self.dev, self.beta, self.causal
        QBAR, KBAR = dev.empty((B * H, N, self.d_k)), dev.empty((B * H, N, self.d_k))
        G, VBAR, GA = dev.empty((B * H, N, self.d_v)), dev.empty((B * H, N, self.d_v)), dev.empty((B * H, N))
        XH = dev.empty((B * H, N, self.d))  # per head: Jacobian term (rows), then + Lions term (keys)
        dev.call(m, "adjoint_rows", B * H * N, PC, Qs, Os, c, cache.QF, cache.KT, cache.VT, cache.A, cache.LOGZ,
                   beta, causal, B, H, N, PB, QBAR, G, GA, XH)
        dev.call(m, "adjoint_keys", B * H * N, Ks, Vs, cache.QF, cache.KT, cache.VT, cache.LOGZ, G, GA, beta,
                   causal, bool(lions), B, H, N, PB, KBAR, VBAR, XH)
        dev.call(m, "head_sum", B * N, XH, base, B, H, N, out)  # p_r = p_{r+1} + sum_h (Jacobian + Lions)
        if grads is None:
            return
        R = 2 * self.d_k + self.d_v + self.d
        dev.call(m, "param_grads", B * H * R, X, PC, c, cache.A, QBAR, KBAR, VBAR, B, H, N, *grads)

    def _field_gpu(self, X, Qs, Ks, Vs, Os, c):
        dev, (H, N) = self.dev, (Qs.shape[0], X.shape[0])
        assert dev is not None
        dX, dQ, dK, dV, dO, dc = (dev.put(a) for a in (X, Qs, Ks, Vs, Os, c))
        cache, F = DeviceCache.empty(dev, (H,), N, self.d_k, self.d_v), dev.empty((N, self.d))
        self.device_field(dX, dQ, dK, dV, dO, dc, 1, H, N, 1, dev.zeros((N, self.d)), F, cache,
                          dev.empty((H, N, self.d)))  # base 0: F alone
        return dev.get(F), LayerCache(A=dev.get(cache.A), QF=dev.get(cache.QF), KF=dev.get(cache.KT),
                                      VF=dev.get(cache.VT), LOGZ=dev.get(cache.LOGZ))

    def _vjp_gpu(self, X, Qs, Ks, Vs, Os, c, cache: LayerCache, PC, lions, param_grads=True):
        dev, (H, N) = self.dev, (Qs.shape[0], X.shape[0])
        assert dev is not None
        dcache = DeviceCache(*(dev.put(a) for a in (cache.QF, cache.KF, cache.VF, cache.A, cache.LOGZ)))
        dX, dQ, dK, dV, dO, dc = (dev.put(a) for a in (X, Qs, Ks, Vs, Os, c))
        grads = ((dev.empty(Qs.shape), dev.empty(Ks.shape), dev.empty(Vs.shape), dev.empty(Os.shape))
                 if param_grads else None)
        out = dev.empty((N, self.d))
        self.device_vjp(dX, dQ, dK, dV, dO, dc, 1, H, N, 1, dcache, dev.put(PC), dev.zeros((N, self.d)), out, grads,
                        lions=lions)  # base 0: xbar alone
        if grads is None:
            return dev.get(out), None, None, None, None
        return (dev.get(out), *(dev.get(g) for g in grads))

    def _xbar_theory(self, X, Qs, Ks, Vs, Os, c, PC, lions):
        """docs/theory.md §A.2: Jacobian term + Lions term, with the generated NumPy attention kernels."""
        from transformer_limits.numeric.attention.kernels import attention_kernels

        kern = attention_kernels(self.d, self.d_k, self.d_v, "numpy")
        N = X.shape[0]
        xbar = np.zeros_like(X)
        for h in range(Qs.shape[0]):
            Q, K, V = Qs[h], self.beta * Ks[h], Vs[h]  # beta absorbed in K
            G = c[h] * PC @ Os[h]  # g^i = c_h O_h^T p^i, (N, d_v)
            if not self.causal:
                J = kern.jacobian(X, X, Q, K, V)  # (N, d_v, d)
                xbar += np.einsum("ica,ic->ia", J, G)
                if lions:
                    D = kern.lions_derivative(X, X, Q, K, V)  # (N_query, N_atom, d_v, d)
                    xbar += np.einsum("ijca,ic->ja", D, G) / N
                continue
            for i in range(N):  # token i sees the prefix measure (1/(i+1)) sum_{j<=i} delta_{x^j}
                Y = X[: i + 1]
                J = kern.jacobian(X[i:i + 1], Y, Q, K, V)
                xbar[i] += J[0].T @ G[i]
                if lions:
                    D = kern.lions_derivative(X[i:i + 1], Y, Q, K, V)[0]  # (i+1, d_v, d)
                    xbar[: i + 1] += np.einsum("jca,c->ja", D, G[i]) / (i + 1)
        return xbar


@lru_cache(maxsize=64)
def attention_layer(d: int, d_k: int, d_v: int, *, causal: bool = False, temperature: float = 1.0,
                    backend: str = "numpy", precision: str = "float64") -> AttentionLayer:
    """Cached :class:`AttentionLayer`."""
    return AttentionLayer(d, d_k, d_v, causal=causal, temperature=temperature, backend=backend,
                          precision=precision)
