"""Command-line front door: ``transformer-limits SUBCOMMAND ...`` (thin; logic lives elsewhere).

Exit codes: 0 success, 1 a verification check failed, 2 bad input (one line on stderr, no
traceback).  Subcommands live in :mod:`transformer_limits.commands`; each module there defines
``register(subparsers)`` which adds its parser and sets ``handler`` via ``set_defaults``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sqlite3
import sys
from typing import Any, Sequence

__all__ = ["main", "UsageError", "CheckFailed", "emit"]

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class UsageError(ValueError):
    """Bad input from the user: reported as one line on stderr, exit code 2."""


class CheckFailed(Exception):
    """A verification check failed: exit code 1 (the report has already been printed)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse's default prints the whole usage block)."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        raise UsageError(f"{self.prog}: {message}")


def emit(payload: Any, fmt: str, text: str | None = None) -> None:
    """Print ``payload`` as JSON (``--format json``) or ``text`` for people."""
    if fmt == "json":
        json.dump(payload, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write((text if text is not None else str(payload)) + "\n")


def build_parser() -> argparse.ArgumentParser:
    from transformer_limits import __version__

    parser = _Parser(
        prog="transformer-limits",
        description="Derive, generate kernels, simulate and verify scaling limits of transformers.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    import transformer_limits.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"{commands.__name__}.{info.name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "handler", None) is None:
            parser.print_help(sys.stderr)
            return EXIT_BAD_INPUT
        return int(args.handler(args) or EXIT_OK)
    except CheckFailed:
        return EXIT_CHECK_FAILED
    except (UsageError, ValueError, OSError, sqlite3.DatabaseError) as exc:
        # bad input: unknown names, impossible values, unreadable/unwritable paths, a --store that
        # is not a SQLite file
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"transformer-limits: error: {msg}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("transformer-limits: interrupted", file=sys.stderr)
        return 130
