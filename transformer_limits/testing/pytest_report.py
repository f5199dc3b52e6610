"""The report of ``pytest --tl-report DIR``: the recorded assertions of each test as one experiment
report, in the format of ``transformer-limits report`` (docs/reports.md).

Each test that made at least one ``assert_rate`` / ``assert_taylor_rate`` / ``assert_identity``
becomes an :class:`~transformer_limits.verify.Experiment` (name from the node id, title the node id)
with an :class:`~transformer_limits.verify.ExperimentResult` holding one Check per assertion (its
state: pass, inconclusive or fail, whatever the test then did with it), the fits, the tables and
figures of the first few and of the last failing assertion.  The writers are those of the report
command (:func:`~transformer_limits.verify.report.write_experiment_report`,
:func:`~transformer_limits.verify.report.write_index`), inside one
:func:`~transformer_limits.atomic_write.replaced_directory`: DIR gets the new report as a whole, or
stays as it was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from transformer_limits.testing.recording import AssertionRecord
from transformer_limits.testing.seeds import node_seed
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult

__all__ = ["MAX_DRAWN", "TestRecords", "build_experiment", "experiment_name", "write_test_report"]

#: a test's first MAX_DRAWN assertions get a figure, a table and their text (plus its last failing
#: one): a hypothesis test may make hundreds, and every one still gets its Check
MAX_DRAWN = 3


@dataclass
class TestRecords:
    """What one test left: its node id, its assertions in order, and pytest's outcome and call time."""

    __test__ = False  # not a pytest test class, whatever the name says

    node_id: str
    records: list[AssertionRecord] = field(default_factory=list)
    outcome: str | None = None
    duration_s: float | None = None


def experiment_name(node_id: str) -> str:
    """A report folder name for ``node_id``: its letters, digits, ``_``, ``.`` and ``-`` (other runs
    become ``-``), at most 100 of them, then ``-`` and 8 hex digits of its SHA-256 (distinct node ids
    never share a folder)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", node_id).strip("-.")[:100].rstrip("-.") or "test"
    if not stem[0].isalnum():
        stem = "t" + stem
    return f"{stem}-{hashlib.sha256(node_id.encode('utf-8')).hexdigest()[:8]}"


def _labels(records: Sequence[AssertionRecord]) -> list[str]:
    """``assert_rate``, ``assert_rate_2``, ``assert_identity``, ...: one distinct check name per record."""
    seen: dict[str, int] = {}
    out = []
    for rec in records:
        seen[rec.kind] = seen.get(rec.kind, 0) + 1
        out.append(rec.kind if seen[rec.kind] == 1 else f"{rec.kind}_{seen[rec.kind]}")
    return out


def _drawn(records: Sequence[AssertionRecord]) -> list[int]:
    """Indices of the records shown in full: the first MAX_DRAWN and the last failing one."""
    chosen = list(range(min(MAX_DRAWN, len(records))))
    failing = [i for i, r in enumerate(records) if r.check is not None and not r.check.passed]
    if failing and failing[-1] not in chosen:
        chosen.append(failing[-1])
    return chosen


def _not_runnable(config: ExperimentConfig) -> ExperimentResult:
    raise RuntimeError("this experiment records a pytest test: run the test with pytest --tl-report")


def build_experiment(test: TestRecords, profile: str) -> tuple[Experiment, ExperimentResult]:
    """The experiment and result of one test's records (see the module docstring)."""
    from transformer_limits.verify.check_spec import CheckSpec

    name = experiment_name(test.node_id)
    labels = _labels(test.records)
    result = ExperimentResult(name, profile)
    claims: list[str] = []
    for label, rec in zip(labels, test.records):
        if rec.check is None:
            continue
        check = dataclasses.replace(rec.check, name=label, statistics=dict(rec.check.statistics))
        check.statistics.setdefault("verdict", rec.check.name)
        result.checks.append(check)
        if check.claim not in claims:
            claims.append(check.claim)
    drawn = _drawn(test.records)
    for i in drawn:
        rec, label = test.records[i], labels[i]
        if rec.fit is not None:
            result.fits[label] = rec.fit
        if rec.table:
            result.tables[label] = rec.table
        if rec.figure is not None:
            result.figures.append(rec.figure(label))
        result.notes.extend(f"{label}: {note}" if "\n" not in note else f"{label}:\n{note}" for note in rec.notes if note)
    # records that could not be built still say so, drawn or not
    result.notes.extend(n for i, r in enumerate(test.records) if r.check is None and i not in drawn for n in r.notes)
    if len(test.records) > len(drawn):
        result.notes.append(f"{len(test.records)} assertions recorded (every Check is listed); fits, tables and "
                            f"figures for {len(drawn)} of them: the first {MAX_DRAWN} and the last failing one")
    result.notes.append(f"pytest outcome of the test: {test.outcome or 'unknown'}")
    result.provenance.update(timings={"run_s": test.duration_s} if test.duration_s is not None else {},
                             seeds={"tl_seed": node_seed(test.node_id)},
                             pytest={"node_id": test.node_id, "outcome": test.outcome})
    claim = "; ".join(claims) if claims else "(no verdict recorded)"
    experiment = Experiment(name=name, title=test.node_id, paper="pytest", claim=claim, derivations=(),
                            checks=tuple(CheckSpec(c.name) for c in result.checks), run=_not_runnable,
                            profiles=(profile,))
    return experiment, result


def write_test_report(tests: Sequence[TestRecords], out_dir: str | os.PathLike, profile: str) -> dict[str, Any]:
    """Write the report of ``tests`` into ``out_dir`` (one folder per test with at least one record, and
    ``index.html``, ``index.md``, ``summary.json``), replacing an earlier report there as a whole;
    returns the ``summary.json`` payload."""
    from transformer_limits.atomic_write import replaced_directory
    from transformer_limits.verify.report import report_entries, write_experiment_report, write_index

    config = ExperimentConfig(profile=profile)
    done = []
    with replaced_directory(Path(out_dir), owned=report_entries) as stage:
        for test in tests:
            if not test.records:
                continue
            experiment, result = build_experiment(test, profile)
            write_experiment_report(result, stage / experiment.name, experiment, config)
            done.append((experiment, result))
        return write_index(done, stage, profile)
