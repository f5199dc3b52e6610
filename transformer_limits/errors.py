"""The exception types that decide the CLI's exit code (one place; mapped in :mod:`transformer_limits.cli`).

==========  =======================================================================================
exit code   meaning
==========  =======================================================================================
0           no check failed and nothing crashed: every check passed, or some were INCONCLUSIVE (not
            contradicted, power below 0.8 against their alternative) and ``--strict`` was not given
1           at least one check failed (the data contradict a claim) and no experiment crashed
2           bad input (:class:`InputError`): an argument, a ``--store`` that is not a usable sweep
            store, a ``--scheduler`` that is not a reachable dask scheduler, an unusable ``--out``,
            a grid over its stated size limit; detected before any work, one line on stderr
3           an experiment crashed (:class:`ExperimentCrashed`: its ``results.json`` says
            ``"status": "error"``, the report says ERROR, never FAIL) or the environment failed
            mid-run (:class:`EnvironmentFailure`: disk full, store unwritable, out of memory,
            worker pool broken beyond its retries); one line on stderr
4           ``--strict`` only: no check failed and nothing crashed, but some check was INCONCLUSIVE
            (for scripts that need a decided answer)
130 / 143   interrupted by SIGINT / SIGTERM (one line on stderr; temporary folders and worker
            processes are cleaned up)
==========  =======================================================================================

A failed check is never used to report a broken store, scheduler, disk or worker.
"""

from __future__ import annotations

__all__ = [
    "EXIT_OK",
    "EXIT_CHECK_FAILED",
    "EXIT_BAD_INPUT",
    "EXIT_ERROR",
    "EXIT_INCONCLUSIVE",
    "EXIT_SIGINT",
    "EXIT_SIGTERM",
    "InputError",
    "StoreError",
    "SchedulerError",
    "EnvironmentFailure",
    "ExperimentCrashed",
]

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT, EXIT_ERROR, EXIT_INCONCLUSIVE = 0, 1, 2, 3, 4
EXIT_SIGINT, EXIT_SIGTERM = 130, 143


class InputError(ValueError):
    """Bad input from the user or an unusable resource they named (exit 2, nothing written)."""


class StoreError(InputError):
    """A ``--store`` that is not a usable sweep store: not SQLite, corrupted, foreign schema,
    read-only, locked past the stated timeout, or holding rows that do not decode."""


class SchedulerError(InputError):
    """A ``--scheduler`` address that is malformed, unreachable, or not a dask scheduler."""


class EnvironmentFailure(RuntimeError):
    """The environment failed mid-run (disk full, store unwritable, out of memory, worker pool
    broken beyond its retries): exit 3, never a failed check."""


class ExperimentCrashed(RuntimeError):
    """One or more experiments raised (their results say ``status: "error"``): exit 3."""
