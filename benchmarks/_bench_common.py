"""Helpers shared by the transformer benchmarks (``bench_transformer.py``, ``bench_gpu.py``).

Unit of work: one token-pair-head-layer update, i.e. one (query i, key j) term of one head's softmax
sum in one layer (docs/theory.md §A.2); a forward pass over N tokens, unmasked, does N^2 H L of them.
"""

from __future__ import annotations

import math
import time
from typing import Callable


def time_best(fn: Callable[[], object], repeats: int, *, warmup: bool = True,
              budget_s: float = math.inf, sync: Callable[[], object] | None = None) -> tuple[float, int]:
    """(best wall time in seconds, samples taken) of ``fn()`` over at most ``repeats`` timed calls.

    ``warmup`` makes one untimed call first (JIT compile, caches, device allocations); no further
    sample is started once the timed calls so far add up to ``budget_s`` (at least one is always
    taken).  ``sync`` (e.g. a device synchronise) is called after each call, inside the timing."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats!r}")
    if warmup:
        fn()
        if sync is not None:
            sync()
    best, spent, n = math.inf, 0.0, 0
    while n < repeats and (n == 0 or spent < budget_s):
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        dt = time.perf_counter() - t0
        best, spent, n = min(best, dt), spent + dt, n + 1
    return best, n


def flops_per_pair_head(d_k: int, d_v: int, exp_flops: int = 20) -> tuple[int, int]:
    """(forward, forward+adjoint) floating-point operations per (token pair, head, layer).

    forward: logit <q_i, k_j> (2 d_k), exp (``exp_flops``), value accumulation and normaliser
    (2 d_v + 2); the adjoint pass recomputes logit and exp, forms <g_i, v_j> (2 d_v + 2) and
    accumulates qbar, kbar (2 d_k each) and vbar (2 d_v)."""
    fwd = 2 * d_k + exp_flops + 2 * d_v + 2           # logit, exp, value accumulation + sum
    bwd = 2 * d_k + exp_flops + 2 * d_v + 2          # one adjoint pass recomputes logit, exp, <g, v>
    bwd += 2 * d_k + 2 * d_k + 2 * d_v               # qbar, kbar, vbar accumulations
    return fwd, fwd + bwd
