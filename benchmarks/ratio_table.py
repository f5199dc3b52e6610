"""The same-run ratio table of the paper-A transformer: every implementation and precision against
NumPy/BLAS float64, and the generated kernels against a float64 dgemm on the same cores.

Rows: N = 256, 1024, 4096 (``--N``); implementations: ``blas`` (NumPy/BLAS, einsum/matmul batched over
heads), ``numba`` (the generated kernels; in float32 their float32 sources, every literal and scratch
array float32, so the pair loops run 8 lanes per AVX2 vector instead of 4), ``torch`` (PyTorch CPU
autograd, if importable); precisions float64 and float32.  Columns: forward and forward+adjoint seconds, updates per second (token pair × head ×
layer, docs/theory.md §A.2) and the ratio to blas float64 measured in the same run.  The yardstick: a
float64 dgemm (n = 2048) on the same threads; the forward pass's achieved fraction is
(FLOPs per pair-head-layer × updates / s) / dgemm FLOP/s, with the FLOP count of
``_bench_common.flops_per_pair_head`` (exp counted as 20 flops), the best forward against the best dgemm of
the same rounds; ``paired``: the median over rounds of each round's forward against that round's dgemm.

L and H shrink with N so one forward pass stays about the same work (L·H·N² ≈ 2^27 updates; BLAS keeps
(H, N, N) float64 matrices per layer for its backward pass, 1 GiB at N = 4096, H = 8).  Usage::

    python3 benchmarks/ratio_table.py                     # N = 256 1024 4096, about 5 minutes on 2 cores
    python3 benchmarks/ratio_table.py --N 256 --json ratios.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable

import numpy as np

os.environ.setdefault("NUMBA_THREADING_LAYER", "workqueue")  # see bench_transformer.py

from _bench_common import flops_per_pair_head  # noqa: E402  (benchmarks/ is sys.path[0])
from bench_transformer import _torch_fn  # noqa: E402

from transformer_limits.atomic_write import atomic_write_text  # noqa: E402
from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map  # noqa: E402
from transformer_limits.numeric.numba_twins import TIMINGS as TWIN_TIMINGS  # noqa: E402
from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params  # noqa: E402

#: updates per forward pass the depth and heads are sized for
WORK = 2 ** 27


def shape_for(N: int) -> tuple[int, int]:
    """(L, H) with L·H·N² ≈ :data:`WORK` where it can (H ≤ 32, L ≤ 64: N = 256 gets L = 64, H = 32;
    N = 1024 L = 4, H = 32; N = 4096 L = 1, H = 8)."""
    lh = max(1, WORK // (N * N))
    H = min(32, lh)
    return max(1, min(64, lh // H)), H


def dgemm_call(n: int = 2048) -> tuple[Callable[[], object], float]:
    """(a float64 n × n matmul on this process's threads, its FLOPs), warmed up."""
    a = np.random.default_rng(0).standard_normal((n, n))
    a @ a
    return (lambda: a @ a), 2.0 * n ** 3


def prepare(impl: str, precision: str, N: int, d: int) -> tuple[dict, Callable[[], object], Callable[[], object]]:
    """(row, forward, forward+adjoint) of one implementation and precision at N, warmed up."""
    L, H = shape_for(N)
    params = init_params(L, H, d, d, d, seed=0)
    X0 = sample_tokens(N, d, seed=1)
    loss = SquaredErrorLoss(target_map(X0, seed=2))
    row = {"impl": impl, "precision": precision, "N": N, "L": L, "H": H, "updates": N * N * H * L}
    if impl == "torch":
        cast = np.float32 if precision == "float32" else np.float64
        p = {k: v.astype(cast) for k, v in params.items()}
        fwd = _torch_fn(X0.astype(cast), p, loss.targets.astype(cast), L, H, False)
        both = _torch_fn(X0.astype(cast), p, loss.targets.astype(cast), L, H, True)
    else:
        m = AttentionTransformer(d, d, d, backend=impl, precision=precision)
        fwd = lambda: m.forward(X0, params)  # noqa: E731
        both = lambda: m.loss_and_grad(X0, params, loss)  # noqa: E731
    # steady state: the serial-twin chooser (numba_twins.py) times each launch shape 2 x TIMINGS times,
    # after a compiling launch of each twin
    for _ in range(2 * TWIN_TIMINGS + 2 if impl == "numba" else 1):
        fwd(), both()
    return row, fwd, both


def measure_block(N: int, d: int, repeats: int, configs: list[tuple[str, str]]) -> tuple[list[dict], list[float]]:
    """(rows of every (impl, precision) at N, the dgemm FLOP/s of each round).  The repeats of all
    implementations and of the yardstick dgemm alternate (per round one forward and one forward+adjoint of
    each, and one dgemm, in a fresh seeded order each round), so that a slow phase of a shared host falls
    on all of them alike instead of on the one measured while it lasts: the same-run ratios compare like
    with like.  Each row keeps its per-round times (``forward_rounds_s``, ``forward_adjoint_rounds_s``);
    ``forward_s`` and ``forward_adjoint_s`` are their minima."""
    prepared = [prepare(impl, prec, N, d) for impl, prec in configs]
    gemm, gemm_flops = dgemm_call()
    n = len(prepared) + 1  # the implementations and the dgemm
    times = [([], []) for _ in prepared]
    gemm_rates: list[float] = []
    order = np.random.default_rng(N)  # seeded: the same orders in every run
    for _ in range(repeats):
        # a fresh order each round: a rotation keeps the cyclic order, so each implementation would always
        # follow the same one (and run while that one's BLAS or OpenMP threads still spin)
        for k in order.permutation(n):
            if k == len(prepared):
                t0 = time.perf_counter()
                gemm()
                gemm_rates.append(gemm_flops / (time.perf_counter() - t0))
                continue
            _, fwd, both = prepared[k]
            for slot, fn in enumerate((fwd, both)):
                t0 = time.perf_counter()
                fn()
                times[k][slot].append(time.perf_counter() - t0)
    for (row, _, _), (f, b) in zip(prepared, times):
        row["forward_rounds_s"], row["forward_adjoint_rounds_s"] = f, b
        row["forward_s"], row["forward_adjoint_s"] = min(f), min(b)
    return [row for row, _, _ in prepared], gemm_rates


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--N", type=int, nargs="+", default=[256, 1024, 4096])
    ap.add_argument("--d", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    if min(args.N) < 1 or args.d < 1 or args.repeats < 1:
        ap.error("--N, --d and --repeats must be >= 1")
    try:
        import torch  # noqa: F401

        impls = ["blas", "numba", "torch"]
    except ImportError:
        impls = ["blas", "numba"]
    fwd_flops, both_flops = flops_per_pair_head(args.d, args.d)
    print(f"# d = d_k = d_v = {args.d}, {os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.1f}; "
          f"{args.repeats} alternating rounds per N, best of them")
    header = (f"{'N':>5} {'L':>3} {'H':>2} {'impl':>6} {'prec':>8} {'fwd s':>9} {'fwd x':>7} {'f+adj s':>9} "
              f"{'f+adj x':>8} {'fwd % dgemm':>12} {'paired':>7}")
    rows, peaks = [], {}
    for N in args.N:
        block, rates = measure_block(N, args.d, args.repeats,
                                     [(impl, prec) for prec in ("float64", "float32") for impl in impls])
        peak = peaks[N] = max(rates)
        print(f"# N = {N}: float64 dgemm (n = 2048) {peak / 1e9:.2f} GFLOP/s, best of the rounds "
              f"(median {np.median(rates) / 1e9:.2f})")
        print(header)
        base = next(r for r in block if r["impl"] == "blas" and r["precision"] == "float64")
        for r in block:
            if "forward_s" in r:
                r["forward_x_blas64"] = base["forward_s"] / r["forward_s"]
                r["forward_adjoint_x_blas64"] = base["forward_adjoint_s"] / r["forward_adjoint_s"]
                r["dgemm_flops"] = peak
                r["forward_fraction_of_dgemm"] = fwd_flops * r["updates"] / r["forward_s"] / peak
                r["forward_adjoint_fraction_of_dgemm"] = both_flops * r["updates"] / r["forward_adjoint_s"] / peak
                # the same fraction round by round (each forward against the dgemm of its own round): its
                # median is robust to host phases longer than a round, where best-of-each pairs two moments
                r["forward_fraction_of_dgemm_paired_median"] = float(np.median(
                    [fwd_flops * r["updates"] / f / g for f, g in zip(r["forward_rounds_s"], rates)]))
                print(f"{N:>5} {r['L']:>3} {r['H']:>2} {r['impl']:>6} {r['precision']:>8} {r['forward_s']:9.4f} "
                      f"{r['forward_x_blas64']:7.2f} {r['forward_adjoint_s']:9.4f} {r['forward_adjoint_x_blas64']:8.2f} "
                      f"{100 * r['forward_fraction_of_dgemm']:11.1f}% "
                      f"{100 * r['forward_fraction_of_dgemm_paired_median']:6.1f}%")
            else:
                print(f"{N:>5} {r['L']:>3} {r['H']:>2} {r['impl']:>6} {r['precision']:>8}   {r['note']}")
            rows.append(r)
        torch64 = next((r for r in block if r["impl"] == "torch" and r["precision"] == "float64"), None)
        numba64 = next(r for r in block if r["impl"] == "numba" and r["precision"] == "float64")
        numba32 = next(r for r in block if r["impl"] == "numba" and r["precision"] == "float32")
        if torch64 is not None:
            print(f"#   N = {N}: numba forward+adjoint is {torch64['forward_adjoint_s'] / numba64['forward_adjoint_s']:.2f}x "
                  "PyTorch CPU float64")
        print(f"#   N = {N}: numba float32 / float64 speed-up: forward {numba64['forward_s'] / numba32['forward_s']:.2f}x, "
              f"forward+adjoint {numba64['forward_adjoint_s'] / numba32['forward_adjoint_s']:.2f}x (same run)")
    print(f"# FLOPs per pair-head-layer: forward {fwd_flops}, forward+adjoint {both_flops} (exp counted as 20)")
    if args.json:
        atomic_write_text(args.json, json.dumps({"dgemm_flops": {str(n): f for n, f in peaks.items()},
                                                 "repeats": args.repeats, "d": args.d, "cpus": os.cpu_count(),
                                                 "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
