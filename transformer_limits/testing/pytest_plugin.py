"""The pytest plugin of transformer_limits (entry point ``pytest11``: loaded by every pytest run where
the package is installed).

* ``pytest --tl-report DIR``: every ``assert_rate`` / ``assert_taylor_rate`` / ``assert_identity`` made
  during the run (pass, inconclusive or fail) is collected, and at the end DIR gets a report in the
  format of ``transformer-limits report``: ``index.html``, ``index.md``, ``summary.json`` and one
  folder per test (``results.json``, ``report.md``, ``report.html``, figures).  The assertions of
  :mod:`transformer_limits.testing` are collected, and so are calls of
  ``transformer_limits.verify.assert_rate`` (during a ``--tl-report`` run its name leads through the
  recording wrapper; modules that imported it before the run started keep the plain function).
  The report does not change a test's outcome; the run's exit status is pytest's.  Not with
  pytest-xdist (``-n``): its workers' assertions are not collected.
* ``--tl-profile quick|full`` (default ``quick``): the ``tl_profile`` fixture, for tests that size
  their grids by profile, and the profile named in the report.
* ``tl_seed`` fixture: a seed derived from the test's node id
  (:func:`transformer_limits.testing.node_seed`), the same on every run.

Without ``--tl-report`` the plugin only adds the two options and the two fixtures: no hook runs
around tests, nothing heavy is imported (this module, ``transformer_limits.testing.seeds`` and the
standard library: no NumPy, SciPy, SymPy or hypothesis), and no assertion builds a record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generator

import pytest

from transformer_limits.testing.seeds import node_seed

PROFILES = ("quick", "full")
_PLUGIN_NAME = "transformer_limits-report"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("transformer_limits", "transformer_limits verification report")
    group.addoption("--tl-report", metavar="DIR", default=None, dest="tl_report",
                    help="write a transformer_limits report of every assert_rate / assert_taylor_rate / "
                         "assert_identity made by the tests (index.html, index.md, summary.json) into DIR")
    group.addoption("--tl-profile", choices=PROFILES, default="quick", dest="tl_profile",
                    help="profile for the tl_profile fixture and the report (default: quick)")


def pytest_configure(config: pytest.Config) -> None:
    out = config.getoption("tl_report", None)
    if out is None or hasattr(config, "workerinput"):  # inert; or an xdist worker (see the docstring)
        return
    from transformer_limits.atomic_write import check_output_dir

    try:
        check_output_dir(Path(out))
    except ValueError as exc:
        raise pytest.UsageError(f"--tl-report: {exc}".replace("--out ", "")) from None
    # absolute now: a test that changes the working directory must not move the report
    config.pluginmanager.register(ReportCollector(Path(out).absolute(), config.getoption("tl_profile")),
                                  _PLUGIN_NAME)


@pytest.fixture
def tl_profile(request: pytest.FixtureRequest) -> str:
    """The profile chosen with ``--tl-profile`` (``"quick"`` by default, or ``"full"``)."""
    return str(request.config.getoption("tl_profile", "quick"))


@pytest.fixture
def tl_seed(request: pytest.FixtureRequest) -> int:
    """A reproducible seed for this test: ``node_seed(request.node.nodeid)``, in [0, 2**32)."""
    return node_seed(request.node.nodeid)


class ReportCollector:
    """Registered for a ``--tl-report`` run only: collects each test's records, writes the report."""

    def __init__(self, out: Path, profile: str) -> None:
        from transformer_limits.testing.pytest_report import TestRecords

        self.out, self.profile = out, profile
        self.tests: dict[str, TestRecords] = {}
        self.summary: dict[str, Any] | None = None
        self.error: str | None = None
        self._restore = _route_verify_assert_rate()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
        from transformer_limits.testing.pytest_report import TestRecords
        from transformer_limits.testing.recording import collecting

        test = self.tests.setdefault(item.nodeid, TestRecords(item.nodeid))
        with collecting() as sink:  # setup, call and teardown: fixtures may assert too
            try:
                return (yield)
            finally:
                test.records.extend(sink)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        test = self.tests.get(report.nodeid)
        if test is None:
            return
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            test.outcome, test.duration_s = report.outcome, float(report.duration)
        elif report.when == "teardown" and report.outcome == "failed":
            test.outcome = "error in teardown"

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        from transformer_limits.testing.pytest_report import write_test_report

        try:
            self.summary = write_test_report(list(self.tests.values()), self.out, self.profile)
        except (OSError, ValueError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            if session.exitstatus == 0:
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.error is not None:
            terminalreporter.write_line(f"tl-report: could not write the report to {self.out}: {self.error}", red=True)
        elif self.summary is not None:
            s = self.summary
            terminalreporter.write_line(
                f"tl-report: {s['n_experiments']} test(s) with assertions ({s['n_passed']} passed, "
                f"{s['n_inconclusive']} inconclusive, {s['n_failed']} failed) -> {self.out / 'index.html'}")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._restore()


def _route_verify_assert_rate() -> Any:
    """Let ``transformer_limits.verify.assert_rate`` (and ``verify.assertions.assert_rate``) lead to the
    recording wrapper for the run; returns the function that puts them back."""
    import transformer_limits.verify as verify
    import transformer_limits.verify.assertions as assertions
    from transformer_limits.testing import rates

    original = assertions.assert_rate
    cached = "assert_rate" in vars(verify)  # the lazy API caches a name once it was looked up
    assertions.assert_rate = rates.assert_rate
    if cached:
        vars(verify)["assert_rate"] = rates.assert_rate

    def restore() -> None:
        assertions.assert_rate = original
        if cached or vars(verify).get("assert_rate") is rates.assert_rate:
            vars(verify)["assert_rate"] = original

    return restore


__all__ = ["PROFILES", "ReportCollector", "pytest_addoption", "pytest_configure", "tl_profile", "tl_seed"]
