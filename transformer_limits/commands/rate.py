"""``transformer-limits rate check DATA.csv --claim CLAIM``: check a claimed rate on your own data.

    transformer-limits rate check DATA.csv --claim "L^-1 + L^-1/3 H^-1/2" [--error error]
        [--seed-column seed] [--param L H] [--alpha 0.01] [--bootstrap N] [--seed 0]
        [--window all|auto] [--noise-floor X] [--aggregate mean] [--alternative A] [--strict]
        [--format text|json] [--out DIR]

The fits and verdicts are those of the built-in experiments
(:mod:`transformer_limits.verify.rate.check`; docs/rate_check.md).  Exit 0 when no check fails
(INCONCLUSIVE checks, power below 0.8 against ``--alternative``, included unless ``--strict``: 4),
1 when the data contradict the claim, 2 for bad input (one line on stderr, nothing written).
"""

from __future__ import annotations

import argparse

from transformer_limits.commands._outcome import UsageError, emit, raise_for_status


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rate", help="check a claimed convergence rate on your own data (CSV)",
                       description="Check a claimed rate such as 'L^-1 + L^-1/3 H^-1/2' on long-format data.")
    p.set_defaults(handler=lambda args: _missing_action(p))
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=type(p))
    check = actions.add_parser(
        "check", help="decide a rate claim on a CSV of errors (one row per point and seed)",
        description="Fit the claim's constants, test that error / claim does not grow in any parameter "
                    "and that the error decays at least as fast as claimed along every line; see "
                    "docs/rate_check.md.")
    check.add_argument("data", metavar="DATA.csv",
                       help="CSV with a header: parameter columns, an error column, optionally a seed column")
    check.add_argument("--claim", required=True, help='the claimed rate, e.g. "L^-1 + L^-1/3 H^-1/2"')
    check.add_argument("--error", default="error", metavar="COLUMN", help="error column (default: error)")
    check.add_argument("--seed-column", metavar="COLUMN",
                       help="seed column (default: 'seed' if present, else the rows of a point are its seeds)")
    check.add_argument("--param", nargs="+", action="extend", metavar="COLUMN",
                       help="parameter columns (default: the claim's symbols); more than the claim's means the "
                            "claim is constant in the others")
    check.add_argument("--alpha", type=float, default=0.01,
                       help="false-failure rate of each check (default 0.01)")
    check.add_argument("--bootstrap", type=int, metavar="N",
                       help="bootstrap resamples of every fit (default: 2000 for exponents, 1000 for constants)")
    check.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    check.add_argument("--window", choices=("all", "auto"), default="all",
                       help="levels of the exponent fits: all (default) or auto (asymptotic-window rules)")
    check.add_argument("--noise-floor", type=float, metavar="X",
                       help="with --window auto: drop levels within 4x of this error floor")
    check.add_argument("--aggregate", choices=("mean", "rms", "geometric", "median"), default="mean",
                       help="aggregate of a point's seeds (default mean)")
    check.add_argument("--alternative", type=float, default=0.25, metavar="A",
                       help="the violation each check must detect: an exponent A slower than claimed, err / claim "
                            "growing like p^A (default 0.25); a check not contradicted with power below 0.8 "
                            "against it is INCONCLUSIVE")
    check.add_argument("--strict", action="store_true",
                       help="exit 4 (not 0) when no check failed but some check is INCONCLUSIVE")
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.add_argument("--out", help="write results.json, report.md and report.html (with plots) into this folder")
    check.set_defaults(handler=run_check)


def _missing_action(parser: argparse.ArgumentParser) -> int:
    raise UsageError(f"{parser.prog}: choose an action: check")


def run_check(args: argparse.Namespace) -> int:
    from transformer_limits.commands.verify import check_out_dir, verdict_table
    from transformer_limits.verify.rate.check import rate_check
    from transformer_limits.verify.rate.claim_grammar import UnknownParameterError

    check_out_dir(args.out)  # before any work
    if not 0.0 < args.alpha < 0.5:
        raise UsageError(f"--alpha must be in (0, 0.5), got {args.alpha}")
    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")
    if not (args.alternative > 0 and args.alternative < float("inf")):
        raise UsageError(f"--alternative must be a finite exponent distance > 0, got {args.alternative}")
    if args.noise_floor is not None and args.window != "auto":
        raise UsageError("--noise-floor needs --window auto")
    try:
        outcome = rate_check(args.data, args.claim, params=args.param, error=args.error,
                             seed_column=args.seed_column, alpha=args.alpha, n_boot=args.bootstrap,
                             seed=args.seed, window=args.window, noise_floor=args.noise_floor,
                             aggregate=args.aggregate, alternative=args.alternative)
    except UnknownParameterError as exc:  # a claim symbol left out of --param: say how to supply it
        given = list(args.param or exc.params)
        raise UsageError(f"--claim: unknown parameter {exc.name!r}: the claim uses it, but --param names only "
                         f"{' '.join(given)}; add it (--param {' '.join([*given, exc.name])}, with a column "
                         f"{exc.name!r} in the data) or remove it from the claim") from None
    except ValueError as exc:
        raise UsageError(_option_names(str(exc))) from None
    payload = outcome.write(args.out) if args.out else outcome.payload()
    lines = [verdict_table(payload)]
    lines += [f"  {n}" for n in payload["notes"]]
    if args.out:
        lines.append(f"report: {args.out}/report.md")
    emit(payload, args.format, "\n".join(lines))
    raise_for_status(payload["status"], "rate check", strict=args.strict)
    return 0


def _option_names(message: str) -> str:
    """The API names arguments (``n_boot``); on the command line they are options (``--bootstrap``)."""
    for api, option in (("n_boot", "--bootstrap"), ("seed_column", "--seed-column"), ("params", "--param"),
                        ("noise_floor", "--noise-floor")):
        if message.startswith((api + " ", api + ":", api + "=")):  # "n_boot=1000 ... over the memory budget"
            return option + message[len(api):]
    return message
