"""Command-line front door: ``transformer-limits SUBCOMMAND ...`` (thin; logic lives elsewhere).

Exit codes (defined in :mod:`transformer_limits.errors`): 0 success (INCONCLUSIVE checks included,
unless ``--strict``), 1 a verification check failed, 2 bad input (one line on stderr, no traceback), 3 an experiment crashed or the environment
failed mid-run (one line on stderr), 4 ``--strict`` and a check INCONCLUSIVE, 130 SIGINT, 143 SIGTERM (both: one line on stderr, temporary
folders and worker processes cleaned up).  Subcommands live in :mod:`transformer_limits.commands`; each module there defines
``register(subparsers)`` which adds its parser and sets ``handler`` via ``set_defaults``.
"""

from __future__ import annotations

import argparse
import errno
import json
import signal
import sqlite3
import sys
import threading
from typing import Any, NoReturn, Sequence

from transformer_limits.commands import register_commands
from transformer_limits.commands._outcome import CheckFailed, CheckInconclusive, UsageError, emit, raise_for_status
from transformer_limits.errors import (EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_ERROR, EXIT_INCONCLUSIVE, EXIT_OK,
                                       EXIT_SIGINT, EXIT_SIGTERM, EnvironmentFailure, ExperimentCrashed, InputError)

__all__ = ["main", "UsageError", "CheckFailed", "CheckInconclusive", "emit", "raise_for_status"]

# errors of the machine, not of the user's input: a full disk or quota mid-run is exit 3
_ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by the SIGTERM handler, so the cleanup of SIGINT runs for it too."""


def _raise_terminated(signum, frame) -> None:  # noqa: ARG001 - signal handler API
    raise Terminated()


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse's default prints the whole usage block)."""

    def error(self, message: str) -> NoReturn:  # noqa: D401 - argparse API
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    from transformer_limits import __version__

    parser = _Parser(
        prog="transformer-limits",
        description="Derive, generate kernels, simulate and verify scaling limits of transformers.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    register_commands(sub)
    return parser


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    # SIGTERM behaves like SIGINT (KeyboardInterrupt): sweeps stop their workers, temporary folders
    # and staging folders are removed.  Only the main thread may install handlers.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return _main(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "handler", None) is None:
            parser.print_help(sys.stderr)
            return EXIT_BAD_INPUT
        return int(args.handler(args) or EXIT_OK)
    except CheckFailed:
        return EXIT_CHECK_FAILED
    except CheckInconclusive as exc:
        print(f"transformer-limits: inconclusive: {_one_line(exc)} (--strict: exit {EXIT_INCONCLUSIVE})",
              file=sys.stderr)
        return EXIT_INCONCLUSIVE
    except ExperimentCrashed as exc:  # the results were printed and written; say why the code is 3
        print(f"transformer-limits: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except (EnvironmentFailure, MemoryError) as exc:
        what = "out of memory" + (f" ({_one_line(exc)})" if str(exc) else "") if isinstance(exc, MemoryError) \
            else _one_line(exc)
        print(f"transformer-limits: error: {what}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:
        print(f"transformer-limits: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR if exc.errno in _ENVIRONMENT_ERRNOS else EXIT_BAD_INPUT
    except (InputError, ValueError, sqlite3.DatabaseError) as exc:
        # bad input: unknown names, impossible values, unusable --out/--store/--scheduler
        print(f"transformer-limits: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as exc:
        if isinstance(exc, Terminated):
            print("transformer-limits: terminated (SIGTERM); stopped workers and removed temporary files",
                  file=sys.stderr)
            return EXIT_SIGTERM
        print("transformer-limits: interrupted; stopped workers and removed temporary files", file=sys.stderr)
        return EXIT_SIGINT
