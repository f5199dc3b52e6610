"""What every subcommand shares: bad-input errors, the exit of a verdict, and printing a result.

Lives in the commands package (not in :mod:`transformer_limits.cli`) so that the subcommands never
import the front door that imports them: the layers run cli -> commands -> verify/symbolic/numeric.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from transformer_limits.errors import ExperimentCrashed, InputError

__all__ = ["UsageError", "CheckFailed", "CheckInconclusive", "raise_for_status", "emit"]


class UsageError(InputError):
    """Bad input from the user: reported as one line on stderr, exit code 2."""


class CheckFailed(Exception):
    """A verification check failed: exit code 1 (the report has already been printed)."""


class CheckInconclusive(Exception):
    """``--strict``: no check failed but some were INCONCLUSIVE: exit code 4 (report already printed)."""


def raise_for_status(status: str, what: str, *, strict: bool = False, crashed: str = "") -> None:
    """The exit of a verdict ``status`` (``pass``/``inconclusive``/``fail``/``error``) of ``what``:
    error → :class:`ExperimentCrashed` (3, with the one line ``crashed``), fail → :class:`CheckFailed`
    (1), inconclusive → :class:`CheckInconclusive` (4) with ``strict``, else nothing (0)."""
    if status == "error":
        raise ExperimentCrashed(crashed or f"{what} crashed")
    if status == "fail":
        raise CheckFailed(what)
    if status == "inconclusive" and strict:
        raise CheckInconclusive(what)


def emit(payload: Any, fmt: str, text: str | None = None) -> None:
    """Print ``payload`` as JSON (``--format json``) or ``text`` for people."""
    if fmt == "json":
        json.dump(payload, sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    else:
        sys.stdout.write((text if text is not None else str(payload)) + "\n")
