"""``transformer-limits spectral``: Rényi ranks of activations and rank-vs-width β fits (paper C).

* ``spectral fit POINTS.csv`` — fit ``log R = c + β log D`` per (optimizer, stratum, metric) with the
  OLS t-interval and a seeded bootstrap interval; optional ``--plot OUT.png``.
* ``spectral ranks ACTIVATIONS.npy`` — ``R_α`` per ``α``, soft/hard rank and asymmetry of one
  ``n × D`` matrix.
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from transformer_limits.commands._outcome import UsageError, emit
from transformer_limits.resource_limits import (
    BOOTSTRAP_BYTES_PER_CELL,
    MAX_BOOTSTRAP_REPLICATES,
    MEMORY_BUDGET_BYTES,
    check_bootstrap,
    format_bytes,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("spectral", help="Rényi ranks of activations and rank-vs-width fits (paper C)",
                       description="Spectral ranks (docs/theory.md §C.3–C.4) and beta fits (§C.6–C.7).")
    p.set_defaults(handler=lambda args: _missing_action(p))
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))

    fit = actions.add_parser("fit", help="fit log R = c + beta log D per (optimizer, stratum, metric)",
                             description="Fit log R = c + beta log D by OLS (95% t-interval) and a "
                                         "seeded bootstrap, per (optimizer, stratum, metric).")
    fit.add_argument("points", metavar="POINTS.csv",
                     help="CSV with columns optimizer,stratum,metric,width,value")
    fit.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                     help=f"bootstrap resamples (0 = none; default 1000; at most "
                          f"{MAX_BOOTSTRAP_REPLICATES}, and the estimated working set, "
                          f"{BOOTSTRAP_BYTES_PER_CELL} bytes per resample and point of the largest group, "
                          f"at most {format_bytes(MEMORY_BUDGET_BYTES)}; both checked before fitting)")
    fit.add_argument("--bootstrap-method", choices=("residual", "pairs"), default="residual")
    fit.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    fit.add_argument("--confidence", type=float, default=0.95)
    fit.add_argument("--plot", metavar="OUT.png", help="also draw log-log rank vs width with the fits")
    fit.add_argument("--format", choices=("text", "json"), default="text")
    fit.set_defaults(handler=run_fit)

    ranks = actions.add_parser("ranks", help="Rényi ranks of one n x D activation matrix (.npy)",
                               description="R_alpha per alpha, soft (R_1) and hard (R_2) rank and "
                                           "asymmetry log(R_1/R_2) of one n x D matrix.")
    ranks.add_argument("activations", metavar="ACTIVATIONS.npy", help="n x D float array (.npy)")
    ranks.add_argument("--alpha", nargs="+", type=_alpha, default=[0.0, 1.0, 2.0, math.inf],
                       help="Rényi orders in [0, inf] (default: 0 1 2 inf)")
    ranks.add_argument("--source", choices=("covariance", "singular"), default="covariance",
                       help="covariance eigenvalues (paper) or singular values of the data matrix")
    ranks.add_argument("--no-center", dest="center", action="store_false",
                       help="do not subtract the column mean")
    ranks.add_argument("--format", choices=("text", "json"), default="text")
    ranks.set_defaults(handler=run_ranks)


def _missing_action(parser: argparse.ArgumentParser) -> int:
    raise UsageError(f"{parser.prog}: choose an action: fit or ranks")


def _alpha(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(value) or value < 0:
        raise argparse.ArgumentTypeError(f"alpha must be in [0, inf], got {text!r}")
    return value


def run_fit(args: argparse.Namespace) -> int:
    from transformer_limits.verify.scaling_fit import fit_points, read_points_csv

    check_bootstrap(args.bootstrap, name="--bootstrap")  # the count first, before reading anything
    if args.seed < 0:  # once, here: a bad seed would otherwise surface inside the first group's fit
        raise UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    if not 0.0 < args.confidence < 1.0:
        raise UsageError(f"--confidence must be in (0, 1), got {args.confidence}")
    if args.plot and not str(args.plot).lower().endswith(".png"):
        raise UsageError(f"--plot must name a .png file, got {args.plot!r}")
    groups = read_points_csv(args.points)
    if args.bootstrap and groups:
        # memory estimated before any resample is drawn: the groups are fitted one at a time
        check_bootstrap(args.bootstrap, max(x.size for x, _ in groups.values()), name="--bootstrap")
    fits = fit_points(groups, confidence=args.confidence, n_bootstrap=args.bootstrap, seed=args.seed,
                      bootstrap=args.bootstrap_method)
    if args.plot:
        _write_plot(args.plot, groups, fits)
    lines = [f"{'optimizer':<12} {'stratum':<8} {'metric':<6} {'beta':>7}  {'t-interval':<18} "
             f"{'bootstrap':<18} {'R2':>6} {'n':>3}"]
    for f in fits:
        boot = (f"[{f['boot_ci_low']:.3f}, {f['boot_ci_high']:.3f}]" if f["bootstrap_n"] else "-")
        lines.append(f"{f['optimizer']:<12} {f['stratum']:<8} {f['metric']:<6} {f['beta']:>7.3f}  "
                     f"{'[' + format(f['ci_low'], '.3f') + ', ' + format(f['ci_high'], '.3f') + ']':<18} "
                     f"{boot:<18} {f['r2']:>6.3f} {f['n']:>3}")
    payload = {"points": os.fspath(args.points), "confidence": args.confidence,
               "bootstrap": args.bootstrap, "bootstrap_method": args.bootstrap_method,
               "seed": args.seed, "fits": [_json_safe(f) for f in fits]}
    if args.plot:
        payload["plot"] = os.fspath(args.plot)
        lines.append(f"plot: {args.plot}")
    emit(payload, args.format, "\n".join(lines))
    return 0


def _json_safe(record: dict) -> dict:
    """NaN (no bootstrap) becomes ``null`` so the output is strict JSON."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}


def _write_plot(path: str, groups: dict, fits: list[dict]) -> None:
    """Log-log rank vs width, one colour per optimizer, marker/line style per stratum-metric."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np

    from transformer_limits.atomic_write import atomic_write_bytes
    from transformer_limits.verify.figures import figure_png

    optimizers = list(dict.fromkeys(f["optimizer"] for f in fits))
    series = list(dict.fromkeys((f["stratum"], f["metric"]) for f in fits))
    colours = plt.get_cmap("tab10")
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v", "x"]
    fig, ax = plt.subplots(figsize=(7.0, 5.0), dpi=120)
    for f in fits:
        key = (f["optimizer"], f["stratum"], f["metric"])
        x, y = groups[key]
        ci = optimizers.index(f["optimizer"]) % 10
        si = series.index((f["stratum"], f["metric"]))
        ax.scatter(x, y, color=colours(ci), marker=markers[si % len(markers)], s=18)
        xs = np.geomspace(x.min(), x.max(), 50)
        ax.plot(xs, np.exp(f["intercept"]) * xs ** f["beta"], color=colours(ci),
                linestyle=styles[si % len(styles)],
                label=f"{f['optimizer']} {f['stratum']} {f['metric']}: β={f['beta']:.3f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FFN width D")
    ax.set_ylabel("effective rank R")
    ax.set_title("log R = c + β log D (OLS)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    png = figure_png(fig)
    plt.close(fig)
    atomic_write_bytes(path, png)


def run_ranks(args: argparse.Namespace) -> int:
    import numpy as np

    from transformer_limits.numeric.spectra.ranks import rank_summary

    path = os.fspath(args.activations)
    data = _load_matrix(path)
    if data.shape[0] < 2:
        raise UsageError(f"{path}: need at least 2 rows to form a covariance, got {data.shape[0]}")
    try:
        summary = rank_summary(data, alphas=args.alpha, source=args.source, center=args.center)
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None
    summary = {"file": path, **summary}
    lines = [f"{path}: n={summary['n']} D={summary['dim']} source={args.source} "
             f"center={'yes' if args.center else 'no'}"]
    lines += [f"  R_{a:<6} {v:.6g}" for a, v in summary["renyi"].items()]
    lines += [f"  soft    {summary['soft']:.6g}", f"  hard    {summary['hard']:.6g}",
              f"  asymmetry log(R1/R2) {summary['asymmetry']:.6g}"]
    emit(summary, args.format, "\n".join(lines))
    return 0


def _load_matrix(path: str) -> Any:
    """The 2-D numeric array of the .npy file ``path``.  The header is read and checked against the
    file before any data (an empty, truncated or malformed file, an object/pickled, non-numeric or
    not 2-D array is one line naming the file, never a traceback or a huge allocation), and the path
    must be a regular file (a FIFO is never opened)."""
    import numpy as np
    from numpy.lib import format as npy

    from transformer_limits.input_files import open_regular_file

    with open_regular_file(path, "a .npy file") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            raise UsageError(f"{path}: not a readable .npy array (empty file)")
        magic = fh.read(len(npy.MAGIC_PREFIX))
        if magic.startswith(b"PK"):
            raise UsageError(f"{path}: expected a single .npy array, got an .npz archive")
        if magic != npy.MAGIC_PREFIX:
            raise UsageError(f"{path}: not a readable .npy array (not a .npy file: no .npy magic bytes at the start)")
        fh.seek(0)
        try:
            version = npy.read_magic(fh)
            readers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
            if version not in readers:
                raise UsageError(f"{path}: .npy format version {version[0]}.{version[1]} is not supported here "
                                 "(numpy.save writes 1.0 or 2.0 for numeric arrays)")
            shape, _, dtype = readers[version](fh)
        except (ValueError, OSError, EOFError) as exc:
            raise UsageError(f"{path}: not a readable .npy array (malformed header: {_first_line(exc)})") from None
        if dtype.hasobject:
            raise UsageError(f"{path}: the array holds Python objects (dtype {dtype}), which are not loaded "
                             "(pickled data can run code): save a float array")
        if dtype.kind not in "fiuc":  # complex is refused with its own message by rank_summary
            raise UsageError(f"{path}: expected a numeric (float or integer) array, got dtype {dtype}")
        if len(shape) != 2:
            raise UsageError(f"{path}: expected an n x D matrix (2-D array), got shape {shape}")
        need, have = math.prod(shape) * dtype.itemsize, size - fh.tell()
        if have < need:
            raise UsageError(f"{path}: not a readable .npy array (truncated: the header says shape {shape} of "
                             f"{dtype}, {need} bytes of data, the file holds {have})")
        fh.seek(0)
        try:
            return np.load(fh, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise UsageError(f"{path}: not a readable .npy array ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
