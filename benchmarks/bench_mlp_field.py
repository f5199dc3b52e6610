"""Throughput of the generated MLP-field kernels (numba vs NumPy reference), same-run ratios.

    python benchmarks/bench_mlp_field.py [--repeat 20]

Rows: activation, shape (N tokens, width m, d), seconds per call for the generated NumPy kernel,
the generated Numba kernel and a hand-written NumPy expression; ratios are within this run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.special import erf, expit

from transformer_limits.numeric.sphere.mlp_field import mlp_field_kernels

HAND = {"relu": lambda z: np.maximum(z, 0.0), "tanh": np.tanh, "sigmoid": expit,
        "silu": lambda z: z * expit(z), "gelu": lambda z: 0.5 * z * (1 + erf(z / np.sqrt(2)))}


def _time(fn, repeat: int) -> float:
    fn()
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'activation':<10} {'N':>5} {'m':>5} {'d':>3} {'numpy-gen s':>12} {'numba s':>10} {'hand s':>10} "
          f"{'numpy/numba':>12} {'hand/gen':>9}")
    for act in ("relu", "tanh", "gelu"):
        for N, m, d in ((64, 256, 8), (256, 1024, 16), (1024, 2048, 64)):
            Y = rng.standard_normal((N, d))
            U, b, W, bw = (rng.standard_normal((m, d)), rng.standard_normal(m), rng.standard_normal((d, m)),
                           rng.standard_normal(d))
            gen, fast = mlp_field_kernels(act, "numpy"), mlp_field_kernels(act, "numba")
            t_np = _time(lambda: gen.mlp_field(Y, U, b, W, bw), args.repeat)
            t_nb = _time(lambda: fast.mlp_field(Y, U, b, W, bw), args.repeat)
            t_hand = _time(lambda: HAND[act](Y @ U.T / np.sqrt(d) + b) @ W.T / np.sqrt(m) + bw, args.repeat)
            print(f"{act:<10} {N:>5} {m:>5} {d:>3} {t_np:>12.3e} {t_nb:>10.3e} {t_hand:>10.3e} "
                  f"{t_np / t_nb:>12.2f} {t_hand / t_np:>9.2f}")


if __name__ == "__main__":
    main()
