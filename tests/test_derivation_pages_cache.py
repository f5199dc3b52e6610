"""derivation_pages: the Markdown and HTML pages a report writes for a derivation, from the on-disk cache
(no SymPy on a hit), equal to the pages built from the derivation itself; the cache's failure paths
(torn entry, wrong-shaped entry, read-only folder) fall back to building."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest

from transformer_limits.symbolic import derivation_cache
from transformer_limits.symbolic.derivation import derivation
from transformer_limits.symbolic.derivation_docs import derivation_html

NAME = "attention-lions-derivative"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_LIMITS_CACHE", str(tmp_path))
    return tmp_path


@functools.cache
def built_pages(name):
    """The pages from the derivation, transcribed from what a report shows: the Markdown up to the
    kernel listing, the HTML page without it (built once per process: typesetting takes a second)."""
    result = derivation(name)
    return result.to_markdown().split("## Generated kernels")[0].rstrip() + "\n", derivation_html(result, kernels=False)


def test_a_miss_builds_and_stores_and_a_hit_returns_the_same_pages(cache):
    expected = built_pages(NAME)
    assert "## Generated kernels" not in expected[0] and expected[1].lstrip().startswith("<")
    assert derivation_cache.derivation_pages(NAME) == expected
    path = derivation_cache.derivation_pages_path(NAME)
    assert path.is_file() and path.parent == cache / "derivation_pages"
    assert json.loads(path.read_text()) == list(expected)
    assert derivation_cache.derivation_pages(NAME) == expected


def test_a_hit_comes_from_the_file_and_entries_are_keyed_by_name_and_renderers(cache, monkeypatch):
    derivation_cache.derivation_pages(NAME)
    path = derivation_cache.derivation_pages_path(NAME)
    path.write_text(json.dumps(["# planted\n", "<p>planted</p>"]))
    assert derivation_cache.derivation_pages(NAME) == ("# planted\n", "<p>planted</p>")
    assert derivation_cache.derivation_pages_path("lyapunov") != path
    # pages and values of the same name never share an entry
    assert derivation_cache.derivation_values_path(NAME) != path
    monkeypatch.setattr(derivation_cache, "_renderers_digest", lambda: "edited mathml.py")
    assert derivation_cache.derivation_pages_path(NAME) != path
    monkeypatch.undo()
    monkeypatch.setattr(derivation_cache, "versions_tag", lambda: "edited symbolic sources")
    assert derivation_cache.derivation_pages_path(NAME) != path


@pytest.mark.parametrize("content", ["[\"torn", "{\"a\": 1}", "[\"only one\"]", "[1, 2]", "[\"a\", \"b\", \"c\"]"])
def test_a_torn_or_wrong_shaped_entry_is_rebuilt(cache, content):
    path = derivation_cache.derivation_pages_path(NAME)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)  # where a build would have stored the pages (the hit test shows it reads there)
    assert derivation_cache.derivation_pages(NAME) == built_pages(NAME)
    assert json.loads(path.read_text()) == list(built_pages(NAME))  # and stored again


@pytest.mark.parametrize("content", ["{torn", "[1.0, 2.0]", "\"a string\""])
def test_a_torn_or_non_dict_values_entry_is_rebuilt(cache, content):
    params = dict(activation="relu", d=5, sigma_u=0.5, sigma_w=0.5, beta=1.0)
    import transformer_limits
    transformer_limits.derivation_values("lyapunov", **params)
    path = derivation_cache.derivation_values_path("lyapunov", **params)
    path.write_text(content)
    assert transformer_limits.derivation_values("lyapunov", **params) == \
        json.loads(json.dumps(derivation("lyapunov", **params).values))


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes to read-only folders")
def test_a_read_only_cache_is_a_slower_run_not_a_failure(cache):
    cache.chmod(0o500)
    try:
        assert derivation_cache.derivation_pages(NAME) == built_pages(NAME)
        assert not derivation_cache.derivation_pages_path(NAME).exists()
    finally:
        cache.chmod(0o700)


def test_an_unwritable_cache_path_is_a_slower_run_not_a_failure(cache, monkeypatch):
    blocker = cache / "derivation_pages"
    blocker.write_text("a file where the folder should be")  # mkdir fails with an OSError, as read-only does
    assert derivation_cache.derivation_pages(NAME) == built_pages(NAME)
    assert blocker.is_file()


def test_a_warm_report_page_write_does_not_import_sympy(cache, tmp_path):
    derivation_cache.derivation_pages(NAME)
    code = ("import sys; from pathlib import Path; from transformer_limits.verify.report import _write_derivation_pages; "
            f"_write_derivation_pages(Path({str(tmp_path)!r}), [{NAME!r}]); "
            "print('sympy' in sys.modules)")
    env = dict(os.environ, TRANSFORMER_LIMITS_CACHE=str(cache))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"
    assert (tmp_path / "derivations" / f"{NAME}.md").read_text() == built_pages(NAME)[0]
    assert (tmp_path / "derivations" / f"{NAME}.html").read_text() == built_pages(NAME)[1]


def test_the_pages_key_hashes_every_renderer_source(monkeypatch):
    """Editing mathml.py or latex_mathml.py must change the key: each renderer's bytes enter the digest."""
    full = derivation_cache._renderers_digest()
    for only in (("mathml.py",), ("latex_mathml.py",), ()):
        monkeypatch.setattr(derivation_cache, "_PAGE_RENDERERS", only)
        assert derivation_cache._renderers_digest() != full
    monkeypatch.undo()
    assert derivation_cache._renderers_digest() == full and len(full) == 16


def test_no_path_means_no_entry():
    assert derivation_cache._read_entry(None) is None


@pytest.mark.parametrize("value, plain", [
    (None, True), (True, True), (3, True), ("s", True), (1.5, True), ([1.0, None, "a"], True),
    ({"a": [1.0, {"b": False}]}, True),
    (float("nan"), False), (float("inf"), False), ([1.0, float("nan")], False), ({1: 2.0}, False),
    ({"a": float("-inf")}, False), ((1.0, 2.0), False), (object(), False)])
def test_plain_is_exactly_what_survives_a_json_round_trip(value, plain):
    assert derivation_cache._plain(value) is plain
    if plain:
        assert json.loads(json.dumps(value)) == value


def test_values_that_are_not_plain_json_are_returned_but_not_stored(cache, monkeypatch):
    import importlib

    derivation_module = importlib.import_module("transformer_limits.symbolic.derivation")

    class Built:
        values = {"lambda_1": float("nan"), "ok": 1.0}

    monkeypatch.setattr(derivation_module, "derivation", lambda name, **params: Built())
    params = dict(activation="relu", d=5, sigma_u=0.5, sigma_w=0.5, beta=1.0)
    out = derivation_cache.derivation_values("lyapunov", **params)
    assert out["ok"] == 1.0 and out["lambda_1"] != out["lambda_1"]  # NaN comes back as built
    assert not derivation_cache.derivation_values_path("lyapunov", **params).exists()
