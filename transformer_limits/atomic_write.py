"""Atomic file output: write to a temporary file in the target folder, then rename.

A reader (or a crash) never sees a half-written file: :func:`os.replace` is atomic on POSIX when
source and target share a file system, which a sibling temporary file guarantees.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_write_text", "atomic_write_bytes", "staged_directory"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temp file in the same folder + ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual mode
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def staged_directory(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield a staging folder; on success move its files into ``out_dir``, on error discard it.

    Each file lands with an atomic rename, so ``out_dir`` never holds a half-written file, and an
    exception inside the block leaves ``out_dir`` exactly as it was.
    """
    out = Path(out_dir)
    for folder in (out, *out.parents):
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"--out {str(out)!r}: {str(folder)!r} exists and is not a directory")
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.stage.", dir=parent))
    try:
        yield stage
        out.mkdir(parents=True, exist_ok=True)
        for src in sorted(stage.rglob("*")):
            if src.is_dir():
                continue
            dest = out / src.relative_to(stage)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
