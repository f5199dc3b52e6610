"""Write a long-format CSV of errors from a known model, for ``transformer-limits rate check``.

    python3 examples/rate_data.py rate_data.csv                 # model: 2/L + 0.5 L^-1/3 H^-1/2
    transformer-limits rate check rate_data.csv --claim "L^-1 + L^-1/3 H^-1/2"   # exit 0: the claim holds
    transformer-limits rate check rate_data.csv --claim "L^-2"  --param L H      # exit 1: decay claimed too fast
    python3 examples/rate_data.py slow.csv --model no-head-decay  # 2/L + 0.5 L^-1/3: no decay in H
    transformer-limits rate check slow.csv --claim "L^-1 + L^-1/3 H^-1/2"        # exit 1: the claim is false

One row per (L, H, seed): ``L,H,seed,error`` with ``error = law(L, H) · exp(σ Z − σ²/2)`` (Z standard
normal, so the seed mean is the law), on the grid L ∈ {2, 4, ..., 64}, H ∈ {1, 4, 16, 64}; every
draw comes from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys

import numpy as np

MODELS = {
    # the claim L^-1 + L^-1/3 H^-1/2 holds with constants (2, 0.5)
    "claimed": lambda L, H: 2.0 / L + 0.5 * L ** (-1 / 3) * H ** -0.5,
    # no averaging over heads: the L^-1/3 term does not decay in H, so the claim is false
    "no-head-decay": lambda L, H: 2.0 / L + 0.5 * L ** (-1 / 3),
}
L_LEVELS = (2, 4, 8, 16, 32, 64)
H_LEVELS = (1, 4, 16, 64)


def rate_rows(model: str = "claimed", *, seeds: int = 8, sigma: float = 0.3, seed: int = 0,
              L_levels=L_LEVELS, H_levels=H_LEVELS) -> list[dict[str, float]]:
    """Rows ``{"L", "H", "seed", "error"}`` of ``MODELS[model]`` with lognormal seed noise."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    if seeds < 1 or not sigma >= 0:
        raise ValueError("seeds must be >= 1 and sigma >= 0")
    rng = np.random.default_rng(seed)
    rows = []
    for L in L_levels:
        for H in H_levels:
            law = MODELS[model](float(L), float(H))
            for j in range(seeds):
                rows.append({"L": L, "H": H, "seed": j,
                             "error": law * float(np.exp(sigma * rng.standard_normal() - sigma**2 / 2))})
    return rows


def write_rate_csv(path: str, rows: list[dict[str, float]]) -> None:
    """Write ``rows`` as CSV atomically (temporary file + rename)."""
    from transformer_limits.atomic_write import atomic_write_text

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["L", "H", "seed", "error"], lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, "error": repr(row["error"])})
    atomic_write_text(path, buf.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", metavar="OUT.csv")
    parser.add_argument("--model", choices=sorted(MODELS), default="claimed")
    parser.add_argument("--seeds", type=int, default=8, help="seeds per (L, H) point (default 8)")
    parser.add_argument("--sigma", type=float, default=0.3, help="lognormal noise sigma (default 0.3)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    try:
        rows = rate_rows(args.model, seeds=args.seeds, sigma=args.sigma, seed=args.seed)
    except ValueError as exc:
        print(f"rate_data.py: error: {exc}", file=sys.stderr)
        return 2
    write_rate_csv(args.out, rows)
    print(f"wrote {len(rows)} rows of model {args.model!r} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
