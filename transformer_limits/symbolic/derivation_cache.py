"""The numeric values of a derivation, cached on disk, so a run that needs a derived constant does not
rebuild the derivation (SymPy, high-precision checks) in every process.

:func:`derivation_values` returns ``derivation(name, **params).values`` (the JSON-able numbers a
derivation states: floats, booleans, None, lists and dicts of them).  A hit reads
``<cache_dir>/derivations/<key>.json`` without importing SymPy; ``key`` hashes the name, the
parameters as given and :func:`transformer_limits.kernel_cache.versions_tag` (the package, SymPy and
Numba versions and a hash of every ``symbolic/*.py`` source: editing a derivation invalidates its
entries).  A miss builds the derivation (which validates the parameters: a bad one is the
``ValueError`` of :func:`~transformer_limits.symbolic.derivation.derivation`) and writes the entry
atomically; values that are not plain JSON are returned but not stored.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from transformer_limits.atomic_write import atomic_write_text
from transformer_limits.kernel_cache import cache_dir, versions_tag

__all__ = ["derivation_values", "derivation_values_path"]

#: parameter types a cache key can hold exactly (anything else is built, never cached)
_KEY_TYPES = (bool, int, float, str, type(None))


def derivation_values_path(name: str, **params: Any) -> Path | None:
    """The cache file of ``derivation(name, **params).values`` (None when a parameter has no exact key,
    e.g. a SymPy number)."""
    if not all(isinstance(v, _KEY_TYPES) for v in params.values()):
        return None
    spec = json.dumps([name, sorted((k, repr(v)) for k, v in params.items()), versions_tag()])
    return cache_dir() / "derivations" / f"{hashlib.sha256(spec.encode()).hexdigest()[:24]}.json"


def _plain(value: Any) -> bool:
    """Whether ``value`` survives a JSON round trip unchanged (finite floats, ints, bools, None, str,
    lists and str-keyed dicts of them)."""
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def derivation_values(name: str, **params: Any) -> dict[str, Any]:
    """``derivation(name, **params).values``, from the on-disk cache when it holds them (see the module
    docstring); a fresh dict either way (callers may modify it)."""
    path = derivation_values_path(name, **params)
    if path is not None and path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # unreadable or torn entry: rebuild it below
            pass
    from transformer_limits.symbolic.derivation import derivation

    values = dict(derivation(name, **params).values)
    if path is not None and _plain(values):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(values))
        except OSError:  # a read-only cache is a slower run, not a failure
            pass
    return json.loads(json.dumps(values)) if _plain(values) else values
