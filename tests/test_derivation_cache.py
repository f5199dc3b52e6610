"""derivation_values: a derivation's numbers from the on-disk cache (no SymPy on a hit), the same numbers
as the derivation itself, invalidated by a change of the symbolic sources or versions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import transformer_limits
from transformer_limits.symbolic import derivation_cache
from transformer_limits.symbolic.derivation import derivation

LYAPUNOV = dict(activation="relu", d=5, sigma_u=0.5, sigma_w=0.5, beta=1.0)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_LIMITS_CACHE", str(tmp_path))
    return tmp_path


def test_a_miss_builds_and_stores_and_a_hit_returns_the_same_numbers(cache):
    built = derivation("lyapunov", **LYAPUNOV).values
    first = transformer_limits.derivation_values("lyapunov", **LYAPUNOV)
    path = derivation_cache.derivation_values_path("lyapunov", **LYAPUNOV)
    assert path is not None and path.is_file() and path.parent == cache / "derivations"
    second = transformer_limits.derivation_values("lyapunov", **LYAPUNOV)
    assert first == second == json.loads(json.dumps(built))  # the floats bit for bit
    assert second["lambda_1"] == built["lambda_1"] and isinstance(second["lambda_1"], float)
    second["lambda_1"] = 0.0  # a fresh dict: the caller's edit reaches neither the cache nor a later call
    assert transformer_limits.derivation_values("lyapunov", **LYAPUNOV)["lambda_1"] == built["lambda_1"]


def test_a_hit_is_read_from_the_file_and_keyed_by_the_parameters(cache):
    transformer_limits.derivation_values("lyapunov", **LYAPUNOV)
    path = derivation_cache.derivation_values_path("lyapunov", **LYAPUNOV)
    path.write_text(json.dumps({"lambda_1": 123.0}))  # planted: a hit must come from the file
    assert transformer_limits.derivation_values("lyapunov", **LYAPUNOV) == {"lambda_1": 123.0}
    other = dict(LYAPUNOV, d=6)
    assert derivation_cache.derivation_values_path("lyapunov", **other) != path
    assert transformer_limits.derivation_values("lyapunov", **other)["lambda_1"] == \
        derivation("lyapunov", **other).values["lambda_1"]


def test_a_changed_version_tag_or_a_torn_file_rebuilds(cache, monkeypatch):
    transformer_limits.derivation_values("lyapunov", **LYAPUNOV)
    path = derivation_cache.derivation_values_path("lyapunov", **LYAPUNOV)
    path.write_text("{torn")
    assert transformer_limits.derivation_values("lyapunov", **LYAPUNOV)["lambda_1"] == \
        derivation("lyapunov", **LYAPUNOV).values["lambda_1"]
    monkeypatch.setattr(derivation_cache, "versions_tag", lambda: "edited symbolic sources")
    assert derivation_cache.derivation_values_path("lyapunov", **LYAPUNOV) != path


def test_bad_parameters_are_the_derivations_value_error_and_store_nothing(cache):
    with pytest.raises(ValueError, match="unknown derivation"):
        transformer_limits.derivation_values("no-such-derivation", d=3)
    with pytest.raises(ValueError):
        transformer_limits.derivation_values("lyapunov", **dict(LYAPUNOV, d=1))
    assert not (cache / "derivations").exists() or not any((cache / "derivations").iterdir())


def test_a_warm_hit_does_not_import_sympy(cache):
    transformer_limits.derivation_values("lyapunov", **LYAPUNOV)
    code = ("import sys, transformer_limits as tl; "
            f"v = tl.derivation_values('lyapunov', **{LYAPUNOV!r}); "
            "print('sympy' in sys.modules, v['lambda_1'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "TRANSFORMER_LIMITS_CACHE": str(cache)}).stdout.split()
    assert out == ["False", repr(derivation("lyapunov", **LYAPUNOV).values["lambda_1"])]
