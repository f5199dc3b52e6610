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

:func:`derivation_pages` does the same for the pages a report puts next to its results (the
derivation as Markdown and as HTML with MathML, without the kernel listing): typesetting them is the
SymPy part of writing a report, so a warm report writes them without importing SymPy.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from transformer_limits.atomic_write import atomic_write_text
from transformer_limits.kernel_cache import cache_dir, versions_tag

__all__ = ["derivation_values", "derivation_values_path", "derivation_pages", "derivation_pages_path"]

#: parameter types a cache key can hold exactly (anything else is built, never cached)
_KEY_TYPES = (bool, int, float, str, type(None))


#: modules outside ``symbolic/`` that typeset the pages (``versions_tag`` hashes ``symbolic/`` only)
_PAGE_RENDERERS = ("mathml.py", "latex_mathml.py")


def _renderers_digest() -> str:
    h = hashlib.sha256()
    for name in _PAGE_RENDERERS:
        h.update((Path(__file__).resolve().parent.parent / name).read_bytes())
    return h.hexdigest()[:16]


def _entry_path(kind: str, name: str, params: dict[str, Any], *extra: str) -> Path | None:
    if not all(isinstance(v, _KEY_TYPES) for v in params.values()):
        return None
    spec = json.dumps([name, sorted((k, repr(v)) for k, v in params.items()), versions_tag(), *extra])
    return cache_dir() / kind / f"{hashlib.sha256(spec.encode()).hexdigest()[:24]}.json"


def derivation_values_path(name: str, **params: Any) -> Path | None:
    """The cache file of ``derivation(name, **params).values`` (None when a parameter has no exact key,
    e.g. a SymPy number)."""
    return _entry_path("derivations", name, params)


def derivation_pages_path(name: str) -> Path:
    """The cache file of :func:`derivation_pages` ``(name)``."""
    path = _entry_path("derivation_pages", name, {}, _renderers_digest())
    assert path is not None  # no parameters: always an exact key
    return path


def _read_entry(path: Path | None) -> Any:
    """The JSON an entry holds, or None when there is none (absent, unreadable or torn: rebuilt)."""
    if path is None or not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _store_entry(path: Path, payload: Any) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(payload))
    except OSError:  # a read-only cache is a slower run, not a failure
        pass


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
    cached = _read_entry(path)
    if isinstance(cached, dict):
        return cached
    from transformer_limits.symbolic.derivation import derivation

    values = dict(derivation(name, **params).values)
    if path is not None and _plain(values):
        _store_entry(path, values)
    return json.loads(json.dumps(values)) if _plain(values) else values


def derivation_pages(name: str) -> tuple[str, str]:
    """``(markdown, html)`` of the derivation ``name`` with its default parameters, as a report shows
    it: the Markdown up to its "Generated kernels" section, the HTML page without the kernel listing
    (:func:`~transformer_limits.symbolic.derivation_docs.derivation_html`); from the on-disk cache when
    it holds them (see the module docstring)."""
    path = derivation_pages_path(name)
    cached = _read_entry(path)
    if isinstance(cached, list) and len(cached) == 2 and all(isinstance(t, str) for t in cached):
        return cached[0], cached[1]
    from transformer_limits.symbolic.derivation import derivation
    from transformer_limits.symbolic.derivation_docs import derivation_html

    result = derivation(name)
    markdown = result.to_markdown().split("## Generated kernels")[0].rstrip() + "\n"
    html = derivation_html(result, kernels=False)
    _store_entry(path, [markdown, html])
    return markdown, html
