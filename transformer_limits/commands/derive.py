"""``transformer-limits derive``: list, show and document the registered derivations."""

from __future__ import annotations

import argparse

from transformer_limits.commands._outcome import UsageError, emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "derive",
        help="show a SymPy derivation (formulas, assumptions, checks, values)",
        description="Show a named derivation, list them, or write all of them as Markdown pages.",
    )
    p.add_argument("name", nargs="?", help="derivation name (see --list)")
    p.add_argument("--list", action="store_true", help="list the derivations and their parameters")
    p.add_argument("--all", action="store_true", help="write every derivation (needs --out)")
    p.add_argument("--out", help="folder for --all: a Markdown and an HTML (MathML) page per derivation + kernels/")
    p.add_argument("--format", choices=("text", "latex", "json"), default="text")
    p.add_argument(
        "--param", action="append", default=[], metavar="KEY=VALUE",
        help="derivation parameter, e.g. d=3 or R=1.5 (repeatable; each has a validated range, listed "
             "by `derive --list --format json`; out of range = exit 2)",
    )
    p.set_defaults(handler=run)


def parse_params(items: list[str]) -> dict[str, str]:
    """Parse ``KEY=VALUE`` strings; a malformed item is a :class:`UsageError`."""
    out: dict[str, str] = {}
    for item in items:
        for piece in item.split():
            key, sep, value = piece.partition("=")
            if not sep or not key or not value:
                raise UsageError(f"--param expects KEY=VALUE, got {piece!r}")
            if key in out:
                raise UsageError(f"--param {key!r} given twice")
            out[key] = value
    return out


def run(args: argparse.Namespace) -> int:
    from transformer_limits.symbolic.derivation import derivation, list_derivations

    if args.list:
        specs = list_derivations()
        payload = [
            {
                "name": s.name,
                "title": s.title,
                "params": [
                    {"name": p.name, "type": p.kind.__name__, "default": p.default, "doc": p.doc,
                     "low": p.low, "high": p.high, "low_open": p.low_open,
                     "choices": list(p.choices) if p.choices else None}
                    for p in s.params
                ],
            }
            for s in specs
        ]
        width = max(len(s.name) for s in specs)
        text = "\n".join(
            f"{s.name:<{width}}  {s.title}"
            + (f"  [{', '.join(p.name for p in s.params)}]" if s.params else "")
            for s in specs
        )
        emit(payload, "json" if args.format == "json" else "text", text)
        return 0
    if args.all:
        if not args.out:
            raise UsageError("derive --all needs --out DIR")
        if args.name or args.param:
            raise UsageError("derive --all takes no NAME or --param")
        from transformer_limits.symbolic.derivation_docs import write_derivation_docs

        written = write_derivation_docs(args.out)
        emit({"out": args.out, "files": written}, args.format if args.format == "json" else "text",
             f"wrote {len(written)} files to {args.out}")
        return 0
    if not args.name:
        raise UsageError("derive needs a NAME, --list or --all")
    if args.out:
        raise UsageError("--out is only used with --all")
    result = derivation(args.name, **parse_params(args.param))
    if args.format == "json":
        emit(result.to_json(), "json")
    elif args.format == "latex":
        emit(None, "text", "\n".join(f"% {k}\n{v}" for k, v in result.latex.items()))
    else:
        emit(None, "text", result.to_text())
    return 0
