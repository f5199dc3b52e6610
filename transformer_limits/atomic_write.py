"""Atomic file output: write to a temporary file in the target folder, then rename.

A reader (or a crash) never sees a half-written file: :func:`os.replace` is atomic on POSIX when
source and target share a file system, which a sibling temporary file guarantees.  Folders are
staged inside the destination for the same reason (the destination may be a mount point).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

__all__ = ["atomic_write_text", "atomic_write_bytes", "check_output_dir", "replaced_directory",
           "staged_directory"]


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


STAGE_PREFIX = ".tl-stage-"
TRASH_PREFIX = ".tl-old-"


def check_output_dir(out: Path) -> None:
    """``out`` and its ancestors must not be existing non-directories (``ValueError`` otherwise)."""
    if str(out) == "":
        raise ValueError("--out must not be empty")
    for folder in (out, *out.parents):
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"--out {str(out)!r}: {str(folder)!r} exists and is not a directory")


def _make_dirs(out: Path) -> list[Path]:
    """``mkdir -p out``; return the folders this call created (deepest last)."""
    missing = [d for d in (out, *out.parents) if not d.exists()]
    out.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


def _remove_created(created: list[Path]) -> None:
    """Remove the folders :func:`_make_dirs` created, if they are empty (an error leaves no trace)."""
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            return


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but not ours
        return True
    return True


def _remove_stale_stages(out: Path) -> None:
    """Staging/trash folders left in ``out`` by a process that was killed (SIGKILL: no cleanup).

    Their names carry the writer's pid; folders of a live process are left alone."""
    try:
        entries = list(out.iterdir())
    except OSError:
        return
    for entry in entries:
        for prefix in (STAGE_PREFIX, TRASH_PREFIX):
            if entry.name.startswith(prefix):
                pid = entry.name[len(prefix):].split("-", 1)[0]
                if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
                    shutil.rmtree(entry, ignore_errors=True)


def _new_stage(out: Path, prefix: str) -> Path:
    # inside the destination: the final renames never cross a file system (``--out`` may be a mount)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=out))


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Block SIGINT/SIGTERM for the few renames of a commit (delivered right after it)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    signals = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextmanager
def staged_directory(out_dir: str | os.PathLike) -> Iterator[Path]:
    """Yield a staging folder; on success move its files into ``out_dir``, on error discard it.

    The staging folder is made inside ``out_dir`` (so every rename stays on one file system, even
    when ``out_dir`` is a mount point).  Each file lands with an atomic rename, so ``out_dir`` never
    holds a half-written file, and an exception inside the block leaves ``out_dir`` exactly as it
    was (folders this call created are removed again).  Files already in ``out_dir`` and not
    written now are kept (a merge); :func:`replaced_directory` replaces a folder as a whole.
    """
    out = Path(out_dir)
    check_output_dir(out)
    created = _make_dirs(out)
    ok = False
    try:
        stage = _new_stage(out, STAGE_PREFIX)
        try:
            yield stage
            for src in sorted(stage.rglob("*")):
                if src.is_dir():
                    continue
                dest = out / src.relative_to(stage)
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dest)
            ok = True
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    finally:
        if not ok:
            _remove_created(created)


@contextmanager
def replaced_directory(out_dir: str | os.PathLike,
                       owned: Callable[[Path], Iterable[str]] = lambda out: ()) -> Iterator[Path]:
    """Yield a staging folder whose entries, on success, replace ``out_dir``'s owned entries as a whole.

    ``owned(out_dir)`` names the top-level entries an earlier run wrote (e.g. an old report's index
    and experiment folders); on success they and every entry the stage would overwrite are moved
    to a trash folder, the staged entries renamed in, and the trash deleted, so old and new
    results are never mixed and stale files do not survive.  Entries not owned (a user's own
    files) are kept.  Staging and trash live inside ``out_dir`` (one file system; ``out_dir`` may be
    a mount point); the renames run with SIGINT/SIGTERM deferred, and a failed rename puts the old
    entries back.  On an exception in the block ``out_dir`` is left exactly as it was.  Staging
    folders of killed writers (``.tl-stage-<pid>-*`` with a dead pid) are removed on entry.
    """
    out = Path(out_dir)
    check_output_dir(out)
    created = _make_dirs(out)
    _remove_stale_stages(out)
    ok = False
    try:
        stage = _new_stage(out, STAGE_PREFIX)
        trash: Path | None = None
        try:
            yield stage
            new = sorted(os.listdir(stage))
            old = sorted((set(owned(out)) | set(new)) - {stage.name})
            with _signals_deferred():
                trash = _new_stage(out, TRASH_PREFIX)
                moved_old: list[str] = []
                moved_new: list[str] = []
                try:
                    for name in old:
                        if os.path.lexists(out / name):
                            os.rename(out / name, trash / name)
                            moved_old.append(name)
                    for name in new:
                        os.rename(stage / name, out / name)
                        moved_new.append(name)
                except BaseException:
                    for name in reversed(moved_new):
                        os.rename(out / name, stage / name)
                    for name in reversed(moved_old):
                        os.rename(trash / name, out / name)
                    raise
            ok = True
        finally:
            shutil.rmtree(stage, ignore_errors=True)
            if trash is not None:
                shutil.rmtree(trash, ignore_errors=True)
    finally:
        if not ok:
            _remove_created(created)
