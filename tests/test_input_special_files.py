"""Input files that are not what they claim to be (issue 25, items 1, 3, 4 and 5).

* ``rate check DATA``, ``spectral fit POINTS`` and ``spectral ranks X.npy`` accept only regular files:
  a FIFO with no writer (it used to block ``open`` forever), ``/dev/zero`` (read until memory ran
  out), ``/dev/null`` and folders exit 2 with one line naming the file and saying "not a regular
  file", not "no such file".  The FIFO and ``/dev/zero`` cases run the CLI in a subprocess with a
  timeout and a memory limit, so a regression fails instead of hanging the suite or the machine.
* ``spectral ranks``: empty, truncated, malformed, object/pickled, non-numeric and not-2-D ``.npy``
  files exit 2 with one line naming the file (an empty file used to escape as ``EOFError``, exit 1).
* ``spectral fit``: a UTF-8 BOM is accepted (as ``rate check`` does), a non-UTF-8 file is one line
  naming the file; ``--seed -1`` names ``--seed`` and is refused once, before any fit.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from transformer_limits.cli import main
from transformer_limits.errors import InputError
from transformer_limits.input_files import check_regular_file, open_regular_file, read_regular_file

ROOT = Path(__file__).resolve().parents[1]
POINTS = ROOT / "tests" / "data" / "spectral_global_points_160m.csv"
RATE_CSV = "L,H,seed,error\n" + "".join(f"{L},{H},{s},0.{L}{H}{s}\n" for L in (2, 4, 8) for H in (1, 4)
                                        for s in (0, 1))

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
needs_dev_zero = pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# one-line exit-2 assertion shared with the rate-check input tests (one copy)
from test_rate_check_inputs import _one_line_error  # noqa: E402


def _limit_memory():  # in the child: a regression that reads /dev/zero fails fast, not the machine
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def _cli_subprocess(*argv):
    """The CLI in a child process; the timeout only stops a hang (a regression), it measures nothing."""
    return subprocess.run([sys.executable, "-m", "transformer_limits", *map(str, argv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


COMMANDS = {
    "rate check": ("rate", "check", "{path}", "--claim", "L^-1 + H^-1"),
    "spectral fit": ("spectral", "fit", "{path}"),
    "spectral ranks": ("spectral", "ranks", "{path}"),
}


def _argv(command, path):
    return [str(path) if a == "{path}" else a for a in COMMANDS[command]]


# ------------------------------------------------------------------------------------------------
# item 1 (and 4): FIFOs, devices and folders are "not a regular file"
# ------------------------------------------------------------------------------------------------


@needs_fifo
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_fifo_without_a_writer_exits_2_without_blocking(tmp_path, command):
    fifo = tmp_path / "data.fifo"
    os.mkfifo(fifo)
    r = _cli_subprocess(*_argv(command, fifo))
    assert r.returncode == 2, r.stderr
    assert r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert f"{fifo}: not a regular file (is a FIFO" in r.stderr


@needs_dev_zero
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_dev_zero_exits_2_without_reading_it(command):
    r = _cli_subprocess(*_argv(command, "/dev/zero"))
    assert r.returncode == 2, r.stderr
    assert r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert "/dev/zero: not a regular file (is a character device" in r.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("kind", ["folder", "/dev/null"])
def test_folder_and_dev_null_are_not_regular_files(tmp_path, capsys, command, kind):
    if kind == "/dev/null" and not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null")
    path = tmp_path if kind == "folder" else Path("/dev/null")
    what = "is a directory" if kind == "folder" else "is a character device"
    _one_line_error(*_run(capsys, *_argv(command, path)), f"{path}: not a regular file ({what}")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_missing_file_is_still_no_such_file(tmp_path, capsys, command):
    _one_line_error(*_run(capsys, *_argv(command, tmp_path / "none")), f"{tmp_path / 'none'}: no such file")


@needs_fifo
def test_input_files_api(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    for call in (check_regular_file, open_regular_file, read_regular_file):
        with pytest.raises(InputError, match=r"not a regular file \(is a FIFO; expected a file\)"):
            call(fifo)
        with pytest.raises(InputError, match=r"no such file"):
            call(tmp_path / "none")
    regular = tmp_path / "r.txt"
    regular.write_bytes(b"abc")
    assert check_regular_file(regular).st_size == 3
    assert read_regular_file(regular) == b"abc"
    with open_regular_file(regular) as fh:
        assert fh.read() == b"abc"
    link = tmp_path / "link"
    link.symlink_to(fifo)  # a link is followed: what it points to decides
    with pytest.raises(InputError, match="is a FIFO"):
        read_regular_file(link)


# ------------------------------------------------------------------------------------------------
# item 3: spectral ranks on broken .npy files
# ------------------------------------------------------------------------------------------------


def _npy_bytes(array):
    path_free = __import__("io").BytesIO()
    np.save(path_free, array)
    return path_free.getvalue()


GOOD = _npy_bytes(np.random.default_rng(0).normal(size=(50, 6)))
HUGE_HEADER = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }"
HUGE_HEADER = b"\x93NUMPY\x01\x00" + (118).to_bytes(2, "little") + HUGE_HEADER.ljust(117) + b"\n" + bytes(64)

BROKEN_NPY = {
    "empty": (b"", "not a readable .npy array (empty file)"),
    "truncated data": (GOOD[:200], "not a readable .npy array (truncated: the header says shape (50, 6) of "
                                   "float64, 2400 bytes of data"),
    "truncated header": (GOOD[:60], "not a readable .npy array (malformed header"),
    "garbage header": (b"\x93NUMPY\x01\x00garbage garbage", "not a readable .npy array (malformed header"),
    "not npy": (b"hello, world\n", "not a readable .npy array (not a .npy file"),
    "pickle": (__import__("pickle").dumps([1, 2]), "not a readable .npy array (not a .npy file"),
    "object array": (None, "the array holds Python objects (dtype object)"),
    "strings": (_npy_bytes(np.array([["a", "b"], ["c", "d"]])), "expected a numeric (float or integer) array"),
    "bool": (_npy_bytes(np.ones((3, 2), dtype=bool)), "expected a numeric (float or integer) array, got dtype bool"),
    "1-D": (_npy_bytes(np.ones(5)), "expected an n x D matrix (2-D array), got shape (5,)"),
    "3-D": (_npy_bytes(np.ones((2, 3, 4))), "expected an n x D matrix (2-D array), got shape (2, 3, 4)"),
    "header promises 8 TB": (HUGE_HEADER, "not a readable .npy array (truncated: the header says shape "
                                          "(1000000, 1000000)"),
    "one row": (_npy_bytes(np.ones((1, 4))), "need at least 2 rows"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_NPY))
def test_broken_npy_is_one_line_exit_2(tmp_path, capsys, case):
    content, pattern = BROKEN_NPY[case]
    path = tmp_path / "acts.npy"
    if content is None:
        np.save(path, np.array([[1, 2], [3, None]], dtype=object), allow_pickle=True)
    else:
        path.write_bytes(content)
    _one_line_error(*_run(capsys, "spectral", "ranks", path), f"{path}: {pattern}")


def test_npz_and_good_npy(tmp_path, capsys):
    np.savez(tmp_path / "a.npz", a=np.ones((3, 3)))
    _one_line_error(*_run(capsys, "spectral", "ranks", tmp_path / "a.npz"), "got an .npz archive")
    (tmp_path / "good.npy").write_bytes(GOOD)
    code, out, err = _run(capsys, "spectral", "ranks", tmp_path / "good.npy", "--format", "json")
    assert code == 0 and err == ""
    assert (json.loads(out)["n"], json.loads(out)["dim"]) == (50, 6)


# ------------------------------------------------------------------------------------------------
# item 4: spectral fit and the encoding of the points file
# ------------------------------------------------------------------------------------------------


def test_fit_accepts_a_utf8_bom(tmp_path, capsys):
    with_bom = tmp_path / "bom.csv"
    with_bom.write_bytes(b"\xef\xbb\xbf" + POINTS.read_bytes())
    code, out, err = _run(capsys, "spectral", "fit", with_bom, "--bootstrap", "0", "--format", "json")
    assert code == 0, err
    plain = _run(capsys, "spectral", "fit", POINTS, "--bootstrap", "0", "--format", "json")[1]
    assert json.loads(out)["fits"] == json.loads(plain)["fits"]


@pytest.mark.parametrize("content, pattern", [
    (b"optimizer,stratum,metric,width,value\nA\xe9,G,soft,768,1\n", "not a UTF-8 text file"),
    (b"optimizer,stratum,metric,width,value\nA,G,so\x00ft,768,1\n", "not a text file (it holds NUL bytes"),
])
def test_fit_non_utf8_or_binary_file_names_the_file(tmp_path, capsys, content, pattern):
    path = tmp_path / "points.csv"
    path.write_bytes(content)
    _one_line_error(*_run(capsys, "spectral", "fit", path), f"{path}: {pattern}")


def test_rate_check_and_fit_read_the_same_bom_file(tmp_path, capsys):
    path = tmp_path / "rate.csv"
    path.write_bytes(b"\xef\xbb\xbf" + RATE_CSV.encode())
    from transformer_limits.verify.rate.data import read_rate_data

    assert read_rate_data(path, ["L", "H"]).n_points == 6  # the BOM is not part of the first column's name


# ------------------------------------------------------------------------------------------------
# item 5: spectral fit --seed
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bootstrap", ["0", "200"])
def test_fit_negative_seed_names_the_option(capsys, bootstrap):
    _one_line_error(*_run(capsys, "spectral", "fit", POINTS, "--seed", "-1", "--bootstrap", bootstrap),
                    "--seed must be a non-negative integer, got -1")


def test_fit_seed_is_checked_before_reading_or_fitting(tmp_path, capsys):
    """A file whose first group cannot be fitted: the seed is still what is reported."""
    path = tmp_path / "points.csv"
    path.write_text("optimizer,stratum,metric,width,value\nA,G,soft,768,1\n")
    _one_line_error(*_run(capsys, "spectral", "fit", path, "--seed", "-1"), "--seed")


def test_fit_points_checks_the_seed_once_before_any_fit(monkeypatch):
    from transformer_limits.verify import scaling_fit

    calls = []
    monkeypatch.setattr(scaling_fit, "fit_width_scaling", lambda *a, **k: calls.append(a))
    groups = scaling_fit.read_points_csv(POINTS)
    for seed in (-1, 1.5, True):
        with pytest.raises(ValueError, match=r"^seed must be a non-negative integer"):
            scaling_fit.fit_points(groups, n_bootstrap=0, seed=seed)
    assert calls == []
