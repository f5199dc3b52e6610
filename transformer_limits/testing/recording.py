"""Where the assertions of :mod:`transformer_limits.testing` leave their verdicts for
``pytest --tl-report``.

Every assertion asks :func:`recording_active` first and, only when a collector is open (the plugin
opens one around each test while ``--tl-report`` is given), builds an :class:`AssertionRecord`: the
deciding :class:`~transformer_limits.verify.Check` (pass, inconclusive or fail), a table, a fit
summary and a figure factory.  With no collector open nothing is built, so an assertion costs
exactly what it costs without the plugin.  Recording never changes an assertion's outcome: an
error while building a record is itself recorded (as a note) and swallowed.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:  # pragma: no cover
    from transformer_limits.verify.experiment import Figure
    from transformer_limits.verify.verdicts import Check

__all__ = ["AssertionRecord", "collecting", "record", "record_safely", "recording_active"]

#: the open collectors, innermost last (a record goes to the innermost one)
_SINKS: list[list["AssertionRecord"]] = []


@dataclass
class AssertionRecord:
    """One assertion made while a collector was open.

    ``kind``: ``"assert_rate"``, ``"assert_taylor_rate"`` or ``"assert_identity"``; ``check``: its
    verdict (None when the record could not be built: ``notes`` say why); ``table``: rows for the
    report (levels, remainders, points); ``fit``: a JSON-able fit summary (``exponent``,
    ``exponent_ci``, ...) or None; ``figure``: ``figure(name) -> Figure``, called only for the records
    a report draws; ``notes``: free text."""

    kind: str
    check: "Check | None"
    table: list[dict[str, Any]] = field(default_factory=list)
    fit: dict[str, Any] | None = None
    figure: "Callable[[str], Figure] | None" = None
    notes: list[str] = field(default_factory=list)


def recording_active() -> bool:
    """Whether a collector is open (then the assertions build records)."""
    return bool(_SINKS)


def record(entry: AssertionRecord) -> None:
    """Give ``entry`` to the innermost open collector (nothing happens when none is open)."""
    if _SINKS:
        _SINKS[-1].append(entry)


def record_safely(kind: str, build: Callable[[], AssertionRecord]) -> None:
    """``record(build())`` when a collector is open; an exception in ``build`` becomes a note-only
    record of ``kind`` instead of reaching the test (the assertion's own outcome stands)."""
    if not _SINKS:
        return
    try:
        entry = build()
    except Exception as exc:  # noqa: BLE001 - a report problem must never fail the user's test
        entry = AssertionRecord(kind, None, notes=[f"{kind}: could not record this assertion for the report: "
                                                   f"{type(exc).__name__}: {exc}"])
    record(entry)


@contextmanager
def collecting() -> Iterator[list[AssertionRecord]]:
    """Open a collector for the block; yields the list the block's assertions are appended to."""
    sink: list[AssertionRecord] = []
    _SINKS.append(sink)
    try:
        yield sink
    finally:
        # by identity: two collectors holding equal (e.g. empty) lists are still different collectors
        for i in range(len(_SINKS) - 1, -1, -1):
            if _SINKS[i] is sink:
                del _SINKS[i]
                break
