"""Opening the files a user names as input (``rate check DATA.csv``, ``spectral fit POINTS.csv``,
``spectral ranks X.npy``): regular files only.

A FIFO with no writer blocks ``open`` forever and ``/dev/zero`` never ends, so a path is checked with
``os.stat`` before it is opened and FIFOs are never opened for reading: folders, ``/dev/null``,
FIFOs, sockets and devices are refused as "not a regular file" (an
:class:`~transformer_limits.errors.InputError` naming the file), a missing path as "no such file".
The file is then opened non-blocking and checked again with ``fstat``, so a path swapped for a FIFO
in between cannot block either.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from transformer_limits.errors import InputError

__all__ = ["check_regular_file", "open_regular_file", "read_regular_file"]

_KINDS = ((stat.S_ISDIR, "is a directory"), (stat.S_ISFIFO, "is a FIFO"),
          (stat.S_ISCHR, "is a character device"), (stat.S_ISBLK, "is a block device"),
          (stat.S_ISSOCK, "is a socket"))


def _kind_error(path: str, mode: int, expected: str) -> InputError:
    kind = next((text for test, text in _KINDS if test(mode)), "is not a file")
    return InputError(f"{path}: not a regular file ({kind}; expected {expected})")


def _os_error(path: str, exc: OSError) -> InputError:
    if isinstance(exc, FileNotFoundError):
        return InputError(f"{path}: no such file")
    return InputError(f"{path}: cannot read it ({exc.strerror or exc})")


def check_regular_file(path: str | os.PathLike, expected: str = "a file") -> os.stat_result:
    """``os.stat`` of ``path`` (following links); :class:`InputError` unless it is a regular file.

    ``expected`` completes the message, e.g. ``"a CSV file"``.
    """
    name = os.fspath(path)
    try:
        st = os.stat(name)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        if isinstance(exc, OSError):
            raise _os_error(name, exc) from None
        raise InputError(f"{name!r}: not a valid path ({exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _kind_error(name, st.st_mode, expected)
    return st


def open_regular_file(path: str | os.PathLike, expected: str = "a file") -> BinaryIO:
    """Open a regular file for binary reading; refuses anything else without blocking on it."""
    name = os.fspath(path)
    check_regular_file(name, expected)  # a FIFO is never opened
    try:
        # O_NONBLOCK: were the path replaced by a FIFO since the stat, open would not wait for a writer
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _os_error(name, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _kind_error(name, st.st_mode, expected)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file: ordinary reads from here on
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: str | os.PathLike, expected: str = "a file") -> bytes:
    """The bytes of a regular file (see :func:`open_regular_file`)."""
    name = os.fspath(path)
    with open_regular_file(name, expected) as fh:
        try:
            return fh.read()
        except OSError as exc:
            raise _os_error(name, exc) from None
