"""Time of reading and validating ``rate check`` data (``read_rate_data``) against the number of rows.

    python benchmarks/bench_rate_check_read.py [--seeds 417 4167 41667] [--points 24]

Rows: seeds per point, rows, CSV size, seconds to read + validate + group (best of ``--repeat``),
and microseconds per row.  Reading is linear in the rows (issue 25: the duplicate (point, seed)
check used to compare every seed of a point with every other one, 19.8 s for 24 x 4,167 rows and
over 600 s for 1e6).  The data are the grid of ``examples/rate_data.py`` (6 L x 4 H levels).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from transformer_limits.verify.rate.data import read_rate_data

L_LEVELS = (2, 4, 8, 16, 32, 64)
H_LEVELS = (1, 4, 16, 64, 256, 1024)


def write_csv(path: str, n_points: int, n_seeds: int) -> int:
    """A long-format CSV with ``n_points`` (L, H) points and ``n_seeds`` seeds each; returns its rows."""
    points = [(L, H) for L in L_LEVELS for H in H_LEVELS][:n_points]
    rng = np.random.default_rng(0)
    seeds = np.arange(n_seeds)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("L,H,seed,error\n")
        for L, H in points:
            errors = (2.0 / L + 0.5 * L ** (-1 / 3) * H ** -0.5) * np.exp(0.3 * rng.standard_normal(n_seeds))
            fh.writelines(f"{L},{H},{s},{e!r}\n" for s, e in zip(seeds.tolist(), errors.tolist()))
    return len(points) * n_seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[417, 4167, 41667])
    parser.add_argument("--points", type=int, default=24, help="points (at most 36; default 24)")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"{'seeds':>7} {'rows':>9} {'MiB':>7} {'read s':>8} {'us/row':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for n_seeds in args.seeds:
            path = os.path.join(tmp, f"rate_{n_seeds}.csv")
            rows = write_csv(path, args.points, n_seeds)
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                data = read_rate_data(path, ["L", "H"])
                best = min(best, time.perf_counter() - t0)
            assert data.errors.shape == (args.points, n_seeds)
            print(f"{n_seeds:>7} {rows:>9} {os.path.getsize(path) / 2**20:>7.1f} {best:>8.2f} "
                  f"{1e6 * best / rows:>7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
