"""On-disk cache of generated kernel sources (no SymPy needed to *read* it).

Layout under :func:`cache_dir`::

    kernels/<stem>_<key>.py|.cu   generated sources, readable; <key> hashes (expressions, printer,
                                  template, versions) — see symbolic.codegen.source_key
    kernels/<stem>_<key>_serial.py  the serial twin of a python-numba source (parallel=False; written
                                  by numeric.numba_twins.load_twins)
    index/<spec-hash>.txt         maps a kernel *spec* (family + parameters + flavour, built by
                                  :func:`kernel_spec`, hashed with the versions) to the source file
                                  name, so a warm process loads kernels without importing SymPy

Numba's ``cache=True`` stores compiled artifacts in ``kernels/__pycache__`` keyed by the source
file, so compiled kernels survive across processes as well.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from transformer_limits.atomic_write import atomic_write_text

__all__ = ["cache_dir", "versions_tag", "kernel_spec", "lookup_source", "record_source", "write_source",
           "load_python_source", "CODEGEN_VERSION"]

#: bump when a template or printer changes the generated text in a way the keys would not see
CODEGEN_VERSION = "4"


def cache_dir() -> Path:
    """``$TRANSFORMER_LIMITS_CACHE``, else ``$XDG_CACHE_HOME/transformer_limits`` (~/.cache)."""
    env = os.environ.get("TRANSFORMER_LIMITS_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "transformer_limits"


@lru_cache(maxsize=1)
def versions_tag() -> str:
    """Versions that change generated code or compiled artifacts (read without importing them)."""
    from importlib.metadata import PackageNotFoundError, version

    from transformer_limits import __version__

    parts = [f"transformer_limits={__version__}", f"codegen={CODEGEN_VERSION}",
             f"generators={_generator_digest()}"]
    for dist in ("sympy", "numba"):
        try:
            parts.append(f"{dist}={version(dist)}")
        except PackageNotFoundError:  # pragma: no cover
            parts.append(f"{dist}=none")
    return ";".join(parts)


def kernel_spec(family: str, **params: object) -> str:
    """Canonical spec string of a kernel family instance, e.g. ``attention:d=2:d_k=2:...``."""
    return ":".join([family] + [f"{k}={params[k]}" for k in sorted(params)])


def _generator_digest() -> str:
    """Hash of the code that generates kernels (``symbolic/*.py``), read as bytes without importing
    it: editing a template or a derivation invalidates the index, so stale kernels are never loaded."""
    folder = Path(__file__).resolve().parent / "symbolic"
    h = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _index_path(spec: str) -> Path:
    digest = hashlib.sha256(f"{spec}|{versions_tag()}".encode()).hexdigest()[:24]
    return cache_dir() / "index" / f"{digest}.txt"


def lookup_source(spec: str) -> Path | None:
    """Source file recorded for ``spec`` under the current versions, if it still exists."""
    idx = _index_path(spec)
    try:
        path = cache_dir() / "kernels" / idx.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return path if path.exists() else None


def record_source(spec: str, path: Path) -> None:
    atomic_write_text(_index_path(spec), path.name + "\n")


def write_source(filename: str, source: str) -> Path:
    """Store ``source`` as ``kernels/<filename>`` (``<stem>_<key><suffix>``) atomically (rewritten only
    if changed)."""
    path = cache_dir() / "kernels" / filename
    if not path.exists() or path.read_text(encoding="utf-8") != source:
        atomic_write_text(path, source)
    return path


def load_python_source(path: Path) -> ModuleType:
    """Import a generated Python file under a stable module name (so Numba's cache finds it)."""
    name = f"transformer_limits_kernels.{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot load generated kernel {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
