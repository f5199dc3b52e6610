"""The recording behind ``pytest --tl-report`` and its report, in process (issue 24).

* Without ``--tl-report`` (this very run) the plugin is inert: no collector plugin, no recording,
  ``verify.assert_rate`` untouched; the fixtures ``tl_profile`` and ``tl_seed`` exist.
* Inside a collector every assertion leaves a record, pass, inconclusive or fail, with a figure; a
  record that cannot be built never changes the assertion's outcome.
* ``rate_verdict`` is the Check that ``assert_rate`` decides on (one code path in verify.assertions;
  checked for pass, inconclusive, fail and every check kind), so a failed ``assert_rate`` is reported
  with its true verdict.
* The report: one folder per test with records (names from node ids, never clashing), the index
  files, the first MAX_DRAWN records drawn and every Check listed; an earlier report replaced, a
  user's own files kept.

Deterministic (fixed seeds and points); the rate data are seeded lognormal draws.
"""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
import sympy as sp

from transformer_limits.testing import assert_identity, assert_rate, assert_taylor_rate, node_seed
from transformer_limits.testing import rates, taylor_rate
from transformer_limits.testing.pytest_report import (MAX_DRAWN, TestRecords, build_experiment, experiment_name,
                                                      write_test_report)
from transformer_limits.testing.recording import collecting, recording_active
from transformer_limits.verify.assertions import assert_rate as verify_assert_rate
from transformer_limits.verify.experiment import EXPERIMENT_NAME
from transformer_limits.verify.stats.seed_bootstrap import lognormal_seed_noise

L = 2.0 ** np.arange(3, 10)
x = sp.Symbol("x")


def _plugin_loaded(request) -> bool:
    return request.config.pluginmanager.hasplugin("transformer_limits")


def test_the_plugin_is_inert_without_tl_report(request):
    if not _plugin_loaded(request):
        pytest.skip("the pytest11 entry point is not installed: python3 -m pip install -e . --no-deps")
    assert request.config.getoption("tl_report") is None
    assert request.config.pluginmanager.get_plugin("transformer_limits-report") is None
    assert not recording_active()
    import transformer_limits.verify.assertions as assertions

    assert assertions.assert_rate is rates._verify_assert_rate  # verify's own function, not routed


def test_the_fixtures(request):
    if not _plugin_loaded(request):
        pytest.skip("the pytest11 entry point is not installed: python3 -m pip install -e . --no-deps")
    assert request.getfixturevalue("tl_profile") == "quick"
    assert request.getfixturevalue("tl_seed") == node_seed(request.node.nodeid)


def _f(z):
    return np.sin(z) * np.exp(0.3 * z)


def _df(z, dz):
    return (np.cos(z) + 0.3 * np.sin(z)) * np.exp(0.3 * z) * dz


Z, DZ = np.linspace(-1.0, 1.0, 6).reshape(2, 3), np.ones((2, 3))


def test_nothing_is_recorded_without_a_collector(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("a record was built with no collector open")

    monkeypatch.setattr(taylor_rate, "_record", boom)
    monkeypatch.setattr(rates, "_record", boom)
    assert assert_taylor_rate(_f, Z, DZ, _df).passed
    assert assert_rate({"L": L}, lognormal_seed_noise(2 / L, 16, 0.2, 0), "L^-1").passed


def test_every_assertion_is_recorded_pass_inconclusive_or_fail():
    with collecting() as sink:
        assert_taylor_rate(_f, Z, DZ, _df)
        with pytest.raises(AssertionError):
            assert_taylor_rate(_f, Z, DZ, lambda z, dz: 1.1 * _df(z, dz))
        with pytest.warns(UserWarning):
            assert_rate({"L": L[:4]}, lognormal_seed_noise(2 / L[:4], 3, 0.5, 2), "L^-1")
        with pytest.raises(AssertionError):
            assert_rate({"L": L}, lognormal_seed_noise(3 * L**-0.5, 20, 0.5, 1), "L^-1")
        assert_identity(sp.sin(x) ** 2 + sp.cos(x) ** 2, 1)
        with pytest.raises(AssertionError):
            assert_identity(sp.sin(x), sp.cos(x), simplify=False)
    assert not recording_active()
    assert [(r.kind, r.check.state) for r in sink] == [
        ("assert_taylor_rate", "pass"), ("assert_taylor_rate", "fail"), ("assert_rate", "inconclusive"),
        ("assert_rate", "fail"), ("assert_identity", "pass"), ("assert_identity", "fail")]
    for rec in sink:
        if rec.figure is not None:
            fig = rec.figure("probe")
            assert fig.png.startswith(b"\x89PNG") and fig.caption
    assert sink[0].fit["exponent"] == pytest.approx(2.0, abs=0.1)  # the fit in h: the order itself
    assert sink[3].fit["param"] == "L" and sink[3].table[0]["L"] == 8.0
    assert sink[4].figure is None and "proved symbolically" in sink[4].notes[0]


def test_collectors_nest_and_close():
    with collecting() as outer:
        with collecting() as inner:
            assert_taylor_rate(_f, Z, DZ, _df)
        assert_identity(x, x)
    assert [r.kind for r in inner] == ["assert_taylor_rate"] and [r.kind for r in outer] == ["assert_identity"]
    assert not recording_active()


def test_a_record_that_cannot_be_built_never_changes_the_outcome(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("report bug")

    monkeypatch.setattr(taylor_rate, "_record", broken)
    with collecting() as sink:
        check = assert_taylor_rate(_f, Z, DZ, _df)
        with pytest.raises(AssertionError, match="Taylor remainder rate failed"):
            assert_taylor_rate(_f, Z, DZ, lambda z, dz: 1.1 * _df(z, dz))
    assert check.passed
    assert [r.check for r in sink] == [None, None]
    assert "could not record" in sink[0].notes[0] and "report bug" in sink[0].notes[0]


@pytest.mark.parametrize("data, claim, options", [
    (lognormal_seed_noise(2 / L, 32, 0.2, 0), "L^-1", {}),                                   # pass
    (lognormal_seed_noise(2 / L[:4], 3, 0.5, 2), "L^-1", {}),                                # inconclusive
    (lognormal_seed_noise(3 * L**-0.5, 20, 0.5, 1), "L^-1", {}),                             # fail
    (lognormal_seed_noise(2 / L, 16, 0.2, 3), -1.0, dict(check="equals", tolerance=0.05)),
    (lognormal_seed_noise(0 * L + 1, 16, 0.2, 4), 0, dict(check="zero", alternative=0.5)),
    (lognormal_seed_noise(2 / L, 16, 0.2, 5), "L^-1 + L^-1/3 H^-1/2", dict(param="L", n_boot=500, seed=7,
                                                                          method="percentile")),
])
def test_rate_verdict_rebuilds_the_check_assert_rate_decides_on(data, claim, options):
    params = {"L": L[:len(data)]}
    _, rebuilt, _ = rates.rate_verdict(params, data, claim, **options)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            returned = verify_assert_rate(params, data, claim, **options)
    except AssertionError as exc:
        assert rebuilt.state == "fail" and "rate claim failed" in str(exc)
    else:
        assert returned.to_dict() == rebuilt.to_dict()


def test_experiment_names_are_folder_names_and_never_clash():
    ids = ["tests/test_a.py::test_b", "tests/test_a.py::test_b[1-2]", "tests/test_a.py::test_b[1/2]",
           "__weird__::[x]", "t::" + "long" * 100]
    names = [experiment_name(i) for i in ids]
    assert len(set(names)) == len(names)
    assert all(EXPERIMENT_NAME.fullmatch(n) and len(n) <= 128 for n in names)
    assert names[0].startswith("tests-test_a.py-test_b-")
    assert experiment_name(ids[0]) == names[0]  # stable


def _records_of(calls) -> list:
    with collecting() as sink:
        for call in calls:
            try:
                call()
            except AssertionError:
                pass
    return sink


def test_the_report_lists_every_check_and_draws_a_few(tmp_path):
    right = lambda: assert_taylor_rate(_f, Z, DZ, _df)  # noqa: E731
    wrong = lambda: assert_taylor_rate(_f, Z, DZ, lambda z, dz: 1.1 * _df(z, dz))  # noqa: E731
    many = TestRecords("tests/test_p.py::test_many", _records_of([right] * 5 + [wrong]), "passed", 0.5)
    experiment, result = build_experiment(many, "full")
    assert [c.name for c in result.checks] == ["assert_taylor_rate"] + [f"assert_taylor_rate_{k}" for k in range(2, 7)]
    assert [c.state for c in result.checks] == ["pass"] * 5 + ["fail"]
    assert all(c.statistics["verdict"] == "taylor_remainder_rate" for c in result.checks)
    assert len(result.figures) == MAX_DRAWN + 1  # the first three and the last failing one
    assert sorted(result.fits) == ["assert_taylor_rate", "assert_taylor_rate_2", "assert_taylor_rate_3",
                                   "assert_taylor_rate_6"]
    assert any("6 assertions recorded" in n for n in result.notes)
    assert result.notes[-1] == "pytest outcome of the test: passed"
    assert experiment.title == many.node_id and experiment.check_names == tuple(c.name for c in result.checks)
    assert result.provenance["seeds"] == {"tl_seed": node_seed(many.node_id)}
    assert result.status == "fail" and many.records[0].check.name == "taylor_remainder_rate"  # not renamed


def test_write_test_report_writes_the_report_format(tmp_path):
    out = tmp_path / "out"
    (out / "stale").mkdir(parents=True)
    (out / "mine.txt").write_text("a user's file")
    tests = [
        TestRecords("t.py::test_right", _records_of([lambda: assert_taylor_rate(_f, Z, DZ, _df)]), "passed", 0.1),
        TestRecords("t.py::test_identity", _records_of([lambda: assert_identity(sp.sin(x), sp.cos(x),
                                                                                simplify=False)]), "failed", 0.2),
        TestRecords("t.py::test_without_assertions", [], "passed", 0.0),
    ]
    summary = write_test_report(tests, out, "quick")
    assert (summary["n_experiments"], summary["n_passed"], summary["n_failed"]) == (2, 1, 1)
    assert summary["status"] == "fail" and summary["profile"] == "quick"
    assert json.loads((out / "summary.json").read_text()) == summary
    for name in ("index.html", "index.md", "mine.txt", "stale"):
        assert (out / name).exists(), name  # folders the report did not write are not its to delete
    html = (out / "index.html").read_text()
    for test in tests[:2]:
        folder = out / experiment_name(test.node_id)
        assert experiment_name(test.node_id) in html
        payload = json.loads((folder / "results.json").read_text())
        assert payload["title"] == test.node_id and len(payload["checks"]) == 1
        assert (folder / "report.html").is_file() and (folder / "report.md").is_file()
        assert [f["file"] for f in payload["figures"]] == [payload["checks"][0]["name"] + ".png"]
        assert (folder / payload["figures"][0]["file"]).read_bytes().startswith(b"\x89PNG")
    assert not (out / experiment_name(tests[2].node_id)).exists()
    # a second run replaces the first report's folders as a whole
    write_test_report(tests[:1], out, "quick")
    assert not (out / experiment_name(tests[1].node_id)).exists()
    assert (out / experiment_name(tests[0].node_id) / "results.json").is_file() and (out / "mine.txt").exists()


def test_routing_verify_assert_rate_is_undone():
    import transformer_limits.verify as verify
    import transformer_limits.verify.assertions as assertions
    from transformer_limits.testing.pytest_plugin import _route_verify_assert_rate

    original = assertions.assert_rate
    restore = _route_verify_assert_rate()
    try:
        assert assertions.assert_rate is rates.assert_rate and verify.assert_rate is rates.assert_rate
        with collecting() as sink:
            assertions.assert_rate({"L": L}, lognormal_seed_noise(2 / L, 16, 0.2, 0), "L^-1")
        assert [r.kind for r in sink] == ["assert_rate"]
    finally:
        restore()
    assert assertions.assert_rate is original and verify.assert_rate is original
    assert re.search(r"verify", original.__module__)
