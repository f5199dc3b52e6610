"""Throughput of the generated attention kernels against a plain NumPy/BLAS implementation.

Run:  python benchmarks/bench_attention.py [--N 1024] [--d 8] [--repeat 5] [--json OUT.json]

Every backend usable here is timed on the same inputs in the same run; the table reports the median
time, GFLOP/s, and the ratio to the NumPy/BLAS baseline (``attention_reference``, einsum + matmul,
multi-threaded OpenBLAS).  Results are checked against the baseline before timing.

FLOP model (per query-key pair, d_k = d_v = d): logits 2 d_k (computed twice by the two-sweep
softmax in the loop kernels, once in BLAS), exp 1 (counted as 1 FLOP; it costs ~10-20 cycles),
accumulation 2 d_v + 2.  Lions derivative: per pair 3 + d_v (2 d + 1) FLOPs and d_v d * 8 bytes written;
it is bound by the write bandwidth, which is measured in the same run (a NumPy copy of the output
size) to state the roofline.  Compute roofline: 2 cores x 16 double FLOP/cycle (AVX2 FMA) x clock.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from transformer_limits.numeric.attention import reference as ref
from transformer_limits.numeric.attention.kernels import attention_kernels
from transformer_limits.numeric.backends import available_backends


def _time(fn, repeat: int) -> float:
    fn()  # warm-up (JIT compile, caches)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _clock_ghz() -> float:
    try:
        with open("/proc/cpuinfo") as fh:
            mhz = [float(line.split(":")[1]) for line in fh if line.startswith("cpu MHz")]
        return max(mhz) / 1000 if mhz else 2.5
    except OSError:
        return 2.5


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--N", type=int, default=1024, help="tokens (queries = keys) for the forward pass")
    ap.add_argument("--N-lions", type=int, default=256, help="tokens for the Lions-derivative tensor")
    ap.add_argument("--d", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", help="also write the table as JSON here")
    args = ap.parse_args(argv)
    d = args.d
    rng = np.random.default_rng(0)
    Q, K, V = (rng.normal(size=(d, d)) / np.sqrt(d) for _ in range(3))
    backends = [b for b in available_backends() if b != "numba-cuda-sim"]
    rows = []
    cores = os.cpu_count() or 1
    peak = cores * 16 * _clock_ghz()

    # ---------------- forward A(x_i, m^N)
    X = rng.normal(size=(args.N, d))
    pairs = args.N * args.N
    flops_loop = pairs * (4 * d + 1 + 2 * d + 2)
    flops_blas = pairs * (2 * d + 1 + 2 * d + 2)
    base = _time(lambda: ref.attention_reference(X, X, Q, K, V), args.repeat)
    rows.append(dict(kernel="forward", backend="numpy/BLAS (baseline)", N=args.N, seconds=base,
                     gflops=flops_blas / base / 1e9, ratio=1.0))
    want = ref.attention_reference(X, X, Q, K, V)
    for b in backends:
        k = attention_kernels(d, d, d, b)
        np.testing.assert_allclose(k.attention(X, X, Q, K, V), want, rtol=1e-10, atol=1e-12)
        t = _time(lambda: k.attention(X, X, Q, K, V), args.repeat)
        rows.append(dict(kernel="forward", backend=f"generated {b}", N=args.N, seconds=t,
                         gflops=(flops_loop if b != "numpy" else flops_blas) / t / 1e9, ratio=base / t))

    # ---------------- Lions derivative at every atom (memory-bound output)
    n = args.N_lions
    Xl = X[:n]
    out_bytes = n * n * d * d * 8
    probe = np.empty(n * n * d * d)
    bw_t = _time(lambda: probe.fill(1.0), args.repeat)  # write bandwidth, same run
    bandwidth = out_bytes / bw_t
    base = _time(lambda: ref.lions_reference(Xl, Xl, Q, K, V), args.repeat)
    rows.append(dict(kernel="lions", backend="numpy/BLAS (baseline)", N=n, seconds=base,
                     gflops=n * n * (3 + d * (2 * d + 1)) / base / 1e9, ratio=1.0,
                     roofline_fraction=out_bytes / base / bandwidth))
    want = ref.lions_reference(Xl, Xl, Q, K, V)
    for b in backends:
        k = attention_kernels(d, d, d, b)
        np.testing.assert_allclose(k.lions_derivative(Xl, Xl, Q, K, V), want, rtol=1e-10, atol=1e-12)
        t = _time(lambda: k.lions_derivative(Xl, Xl, Q, K, V), args.repeat)
        rows.append(dict(kernel="lions", backend=f"generated {b}", N=n, seconds=t,
                         gflops=n * n * (3 + d * (2 * d + 1)) / t / 1e9, ratio=base / t,
                         roofline_fraction=out_bytes / t / bandwidth))

    print(f"# attention kernels, d = d_k = d_v = {d}; {cores} cores; compute peak ~{peak:.0f} GFLOP/s "
          f"(16 DP FLOP/cycle/core); measured write bandwidth {bandwidth / 1e9:.1f} GB/s")
    print(f"{'kernel':<8} {'backend':<24} {'N':>6} {'median s':>10} {'GFLOP/s':>9} {'% peak':>7} "
          f"{'vs BLAS':>8} {'% BW roof':>9}")
    for r in rows:
        roof = f"{100 * r['roofline_fraction']:.0f}%" if "roofline_fraction" in r else "-"
        print(f"{r['kernel']:<8} {r['backend']:<24} {r['N']:>6} {r['seconds']:>10.4f} {r['gflops']:>9.2f} "
              f"{100 * r['gflops'] / peak:>6.1f}% {r['ratio']:>7.2f}x {roof:>9}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(d=d, peak_gflops=peak, bandwidth=bandwidth, rows=rows), fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
