"""The user's data of ``transformer-limits rate check``: long-format rows grouped into refinement points
and seeds (docs/rate_check.md).

Input: a CSV file (a header line naming the columns, then one row per point and seed) or a mapping
column name -> 1-D values: parameter columns (``L``, ``H``, ...; finite, > 0, at least 2 levels
each), an error column (finite, > 0) and optionally a seed column.  :func:`read_rate_data` groups the
rows into :class:`RateData`: per parameter the values ``(n_points,)`` (points sorted by the
parameters) and the errors ``(n_points, n_seeds)``, every point with the same number (>= 2) of seeds.
Bad input raises :class:`~transformer_limits.errors.InputError` (a ``ValueError``) in one line naming
the file and line (or ``data[...]``) and the column.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import numbers
import os
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter
from typing import Any, Mapping, Sequence

import numpy as np

from transformer_limits.errors import InputError
from transformer_limits.input_files import read_regular_file

__all__ = ["ERROR_MIN", "ERROR_MAX", "TERM_MIN", "TERM_MAX", "TERM_SPREAD_MAX", "RateData", "check_claim_range",
           "read_rate_data", "level_text"]

#: the range of errors the fits handle in float64: they square, sum and divide errors (an error of
#: 1e308 overflows the mean of two seeds, one of 1e-160 underflows its square), so 1e±150 leaves room
#: for sums over millions of seeds and for constants up to 1e±150 times the claim's terms
ERROR_MIN, ERROR_MAX = 1e-150, 1e150


@dataclass(frozen=True)
class RateData:
    """Rows grouped into points.

    ``params``: name -> values, each shape ``(n_points,)`` (points sorted by the parameters);
    ``errors``: shape ``(n_points, n_seeds)`` (column j: the j-th seed label in sorted order at every
    point); ``seeds``: the labels per point; ``source``: the file or ``"data"``; ``sha256``: digest of
    the file (or of the arrays).
    """

    params: dict[str, np.ndarray]
    errors: np.ndarray
    seeds: list[list[str]]
    source: str
    n_rows: int
    error_column: str
    seed_column: str | None
    sha256: str

    @property
    def n_points(self) -> int:
        return int(self.errors.shape[0])

    @property
    def n_seeds(self) -> int:
        return int(self.errors.shape[1])

    def point_label(self, i: int) -> str:
        return ", ".join(f"{k}={level_text(v[i])}" for k, v in self.params.items())


def level_text(value: float) -> str:
    """A parameter value as printed in labels and messages (``%g``)."""
    return f"{float(value):g}"


class _FileLines:
    """The file line of each data row (a quoted cell may span lines), found on first use: only
    messages need it, so a valid file is not scanned twice."""

    def __init__(self, text: str, raw_rows: list[int]) -> None:
        self.text, self.raw_rows = text, raw_rows
        self.lines: list[int] | None = None

    def __len__(self) -> int:
        return len(self.raw_rows)

    def __getitem__(self, i: int) -> int:
        if self.lines is None:
            reader = csv.reader(io.StringIO(self.text, newline=""))
            self.lines = [reader.line_num for _ in reader]
        return self.lines[self.raw_rows[i]]


def _read_csv(path: str) -> tuple[dict[str, list[str]], _FileLines, str]:
    """Columns (name -> stripped cells), the file line of each data row and the file's SHA-256.

    Every step is a C-level pass over the rows (``list(reader)``, ``map``, ``compress``); the
    per-row Python loops run only to locate an error."""
    raw = read_regular_file(path, "a CSV file")  # refuses folders, FIFOs and devices before reading
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file (expected a CSV file)") from None
    if "\0" in text:
        raise InputError(f"{path}: not a text file (it holds NUL bytes; expected a CSV file)")
    if not text.strip():
        raise InputError(f"{path}: empty file (expected a header line naming the columns, then data rows)")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        all_rows = list(reader)
    except csv.Error as exc:
        raise InputError(f"{path}: line {reader.line_num}: malformed CSV ({exc})") from None
    # blank lines (no cell, or only empty or blank cells) are skipped
    kept = list(compress(range(len(all_rows)), map(str.strip, map("".join, all_rows))))
    if not kept:
        raise InputError(f"{path}: empty file (only blank lines; expected a header line naming the columns)")
    lines = _FileLines(text, kept)  # lines[0]: the header's line
    header = [cell.strip() for cell in all_rows[kept[0]]]
    if all(_is_number(c) for c in header if c):
        raise InputError(f"{path}: line {lines[0]} has no header: the first line must name the columns "
                         f"(e.g. L,H,seed,error), found {','.join(header)}")
    empty = [k + 1 for k, c in enumerate(header) if not c]
    if empty:
        raise InputError(f"{path}: line {lines[0]}: header column {empty[0]} has no name")
    duplicates = sorted({c for c in header if header.count(c) > 1})
    if duplicates:
        raise InputError(f"{path}: line {lines[0]}: duplicate column name(s) "
                         f"{', '.join(repr(c) for c in duplicates)} in the header")
    if len(kept) == 1:
        raise InputError(f"{path}: no data rows (only the header line)")
    body = [all_rows[k] for k in kept[1:]]
    width = len(header)
    if set(map(len, body)) != {width}:
        k = next(k for k, row in enumerate(body) if len(row) != width)
        raise InputError(f"{path}: line {lines[k + 1]}: {len(body[k])} fields, but the header has {width}")
    # column by column (zip(*body) would unpack a million rows into one call's arguments)
    columns = {c: list(map(str.strip, map(itemgetter(j), body))) for j, c in enumerate(header)}
    return columns, _FileLines(text, kept[1:]), hashlib.sha256(raw).hexdigest()


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _mapping_columns(data: Mapping[str, Any]) -> tuple[dict[str, list[Any]], range, str]:
    columns: dict[str, list[Any]] = {}
    for name, values in data.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"data: column names must be non-empty strings, got {name!r}")
        arr = np.asarray(values)
        if arr.ndim != 1:
            raise ValueError(f"data[{name!r}] must be 1-D (one value per row), got shape {arr.shape}")
        columns[name] = arr.tolist()
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"data: columns have different lengths "
                         f"({', '.join(f'{k}: {len(v)}' for k, v in columns.items())})")
    n = lengths.pop() if lengths else 0
    if n == 0:
        raise ValueError("data: no rows")
    digest = hashlib.sha256(repr(sorted((k, [repr(x) for x in v]) for k, v in columns.items())).encode()).hexdigest()
    return columns, range(n), digest


def _number(cell: Any, source: str, where: str, column: str) -> float:
    if isinstance(cell, (bool, np.bool_)):
        raise InputError(f"{source}: {where}: column {column!r}: {cell!r} is not a number")
    if isinstance(cell, numbers.Real):
        try:
            return float(cell)
        except OverflowError:  # an integer beyond float64: refused as not finite
            return math.inf
    text = str(cell).strip()
    if not text:
        raise InputError(f"{source}: {where}: column {column!r} is empty")
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{source}: {where}: column {column!r}: {text!r} is not a number") from None


def _seed_label(cell: Any) -> str:
    if isinstance(cell, numbers.Integral) and not isinstance(cell, bool):
        return str(int(cell))
    if isinstance(cell, float) and cell.is_integer():
        return str(int(cell))
    return str(cell).strip()


def _seed_order(label: str) -> tuple:
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def _floats(cells: list[Any], texts: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(values, unreadable)``: the cells as float64 and a mask of the cells :func:`_number` refuses
    (their value is NaN).  CSV cells (``texts``) and plain numbers are converted by ``float`` in one
    C-level pass; anything else (a bool, a string in a mapping, a bad cell) cell by cell."""
    if texts or all(type(c) in (int, float) for c in cells):  # not bool: type(True) is bool
        try:
            return np.fromiter(map(float, cells), np.float64, len(cells)), np.zeros(len(cells), bool)
        except (ValueError, OverflowError):
            pass  # an unreadable cell or an int beyond float64: find it cell by cell below
    values = np.full(len(cells), np.nan)
    bad = np.zeros(len(cells), bool)
    for i, cell in enumerate(cells):
        if isinstance(cell, (bool, np.bool_)) or not (isinstance(cell, numbers.Real) or str(cell).strip()):
            bad[i] = True
            continue
        try:
            values[i] = float(cell) if isinstance(cell, numbers.Real) else float(str(cell).strip())
        except OverflowError:
            values[i] = math.inf
        except ValueError:
            bad[i] = True
    return values, bad


def _check_row(source: str, where: str, row: dict[str, Any], params: Sequence[str], error: str) -> None:
    """The message of a bad row (checked in the order of the columns: parameters, then the error)."""
    for p in params:
        v = _number(row[p], source, where, p)
        if not (math.isfinite(v) and v > 0):
            raise InputError(f"{source}: {where}: parameter {p!r} = {row[p]!r}: parameters must be finite and > 0")
    e = _number(row[error], source, where, error)
    if not math.isfinite(e):
        raise InputError(f"{source}: {where}: error column {error!r} = {row[error]!r} is not finite")
    if e <= 0:
        raise InputError(f"{source}: {where}: error column {error!r} = {row[error]!r}: "
                         "errors must be > 0 (rates are fitted on log scale)")
    raise InputError(f"{source}: {where}: error column {error!r} = {row[error]!r} is outside "
                     f"[{ERROR_MIN:g}, {ERROR_MAX:g}], the range the fits handle in float64 (they square "
                     "and sum errors): rescale the error column")


def read_rate_data(data: Any, params: Sequence[str], *, error: str = "error",
                   seed_column: str | None = None) -> RateData:
    """Group long-format rows into a :class:`RateData`.

    ``data``: a CSV path (``str``/``PathLike``; header line, then one row per point and seed) or a
    mapping column name -> 1-D values.  ``params``: the parameter columns (values finite and > 0,
    at least 2 levels each); ``error``: the error column (finite, within
    [``ERROR_MIN``, ``ERROR_MAX``] of this module); ``seed_column``: the seed labels (``None``: a column
    named ``seed`` if there is one, else the rows of a point are its seeds in file order).  Every
    point needs the same number (>= 2) of seeds and no (point, seed) pair may repeat.  A CSV path
    must be a regular file (not a folder, FIFO or device).  Raises
    :class:`~transformer_limits.errors.InputError` (a ``ValueError``): one line naming the file and
    line (or ``data[...]``) and the column.  Time and memory are linear in the number of rows.
    """
    numbers_: _FileLines | range  # the line (CSV) or row (mapping) of each data row, for messages
    if isinstance(data, (str, os.PathLike)):
        source = os.fspath(data)
        columns, numbers_, digest = _read_csv(source)
        unit, texts = "line", True
    elif isinstance(data, Mapping):
        source = "data"
        columns, numbers_, digest = _mapping_columns(data)
        unit, texts = "row", False
    else:
        raise ValueError(f"data must be a CSV path or a mapping column name -> values, got {type(data).__name__}")

    def where(i: int) -> str:
        return f"{unit} {numbers_[i]}"

    have = list(columns)
    explicit_seed = seed_column is not None
    if seed_column is None and "seed" in columns and "seed" not in params and error != "seed":
        seed_column = "seed"
    wanted = [(p, "a parameter of the claim") for p in params] + [(error, "the error column")]
    if explicit_seed and seed_column is not None:
        wanted.append((seed_column, "the seed column"))
    for name, role in wanted:
        if name not in columns:
            raise InputError(f"{source}: missing column {name!r} ({role}; the columns are "
                             f"{', '.join(repr(c) for c in have)})")
    n = len(numbers_)
    # vectorised checks; the first bad row (in file order) is then re-checked alone for its message
    bad = np.zeros(n, bool)
    table = {}
    for p in params:
        table[p], unreadable = _floats(columns[p], texts)
        with np.errstate(invalid="ignore"):
            bad |= unreadable | ~(np.isfinite(table[p]) & (table[p] > 0))
    errors, unreadable = _floats(columns[error], texts)
    with np.errstate(invalid="ignore"):
        bad |= unreadable | ~((errors >= ERROR_MIN) & (errors <= ERROR_MAX))
    if bad.any():
        i = int(np.argmax(bad))
        _check_row(source, where(i), {c: columns[c][i] for c in (*params, error)}, params, error)
    for p in params:
        levels = np.unique(table[p])
        if levels.size < 2:
            raise InputError(f"{source}: parameter {p!r} has only one level ({level_text(levels[0])}): a rate needs "
                             "at least 2 levels of every parameter")
    # points: rows sorted by the parameters (lexicographic, first parameter first), equal rows one point
    keys = np.column_stack([table[p] for p in params])
    order = np.lexsort(keys.T[::-1])
    new_point = np.ones(n, bool)
    new_point[1:] = np.any(keys[order[1:]] != keys[order[:-1]], axis=1)
    point = np.empty(n, np.intp)
    point[order] = np.cumsum(new_point) - 1
    firsts = order[new_point]  # one row of each point, in point order
    counts = np.bincount(point)

    def label_of(k: int) -> str:
        return ", ".join(f"{p}={level_text(table[p][firsts[k]])}" for p in params)

    if seed_column is None:  # a point's rows are its seeds 0, 1, ... in file order
        rank = np.empty(n, np.intp)
        rank[order] = np.arange(n) - np.repeat(np.flatnonzero(new_point), counts)
        labels = [str(r) for r in rank.tolist()]
    else:
        cells = columns[seed_column]
        if texts:
            labels = cells  # stripped strings already
        elif all(type(c) is int for c in cells):  # the usual integer seeds: one C-level pass
            labels = list(map(str, cells))
        else:
            labels = [_seed_label(cell) for cell in cells]
        pairs = list(zip(point.tolist(), labels))
        if not all(labels) or len(set(pairs)) < n:  # hashing: linear in the rows; then find the first
            seen: dict[tuple[int, str], int] = {}  # (point, seed) -> its first row
            for i, (k, label) in enumerate(pairs):
                if not label:
                    raise InputError(f"{source}: {where(i)}: seed column {seed_column!r} is empty")
                first = seen.setdefault((k, label), i)
                if first != i:
                    raise InputError(f"{source}: {where(first)} and {where(i)}: two rows for {label_of(k)}, seed "
                                     f"{label!r} (is a column that tells them apart missing from the parameters?)")
    few = next((k for k, c in enumerate(counts) if c < 2), None)
    if few is not None:
        raise InputError(f"{source}: too few rows for the fit: point {label_of(few)} has 1 row; every point "
                         "needs at least 2 seeds (the confidence intervals resample seeds)")
    if np.unique(counts).size > 1:
        lo, hi = int(np.argmin(counts)), int(np.argmax(counts))
        raise InputError(f"{source}: points have different numbers of seeds ({counts[lo]} at {label_of(lo)}, "
                         f"{counts[hi]} at {label_of(hi)}): give every point the same number of seeds")
    # within a point, seeds in the order of _seed_order (ranked once over the distinct labels)
    seed_rank = {label: r for r, label in enumerate(sorted(set(labels), key=_seed_order))}
    rows = np.lexsort((np.fromiter(map(seed_rank.__getitem__, labels), np.intp, n), point))
    n_points, n_seeds = counts.size, int(counts[0])
    ordered = list(map(labels.__getitem__, rows.tolist()))
    seeds = [ordered[k * n_seeds:(k + 1) * n_seeds] for k in range(n_points)]
    return RateData({p: table[p][firsts] for p in params}, errors[rows].reshape(n_points, n_seeds), seeds,
                    source, n, error, seed_column, digest)


#: the range of each term of a claim at the data's points, and of a term over its point's errors:
#: the fits divide the terms by the errors and multiply them by the constants in float64 (1e±308)
TERM_MIN, TERM_MAX = 1e-300, 1e300
#: the most a term over the errors may vary across the points: the fitted term then stays within this
#: factor of the errors, and the relative residuals (error / fitted claim) and their squares are finite
TERM_SPREAD_MAX = 1e150


def _flows(log10_value: float) -> str:
    return "over" if log10_value > 0 else "under"


def check_claim_range(data: RateData, claim: Any) -> None:
    """Refuse a claim (a :class:`~transformer_limits.verify.rate.claims.RateClaim`) whose fit would
    leave float64's range on ``data``.  At every point, each term must be within [:data:`TERM_MIN`,
    :data:`TERM_MAX`] (``L^-100 H^-100`` is 1e-361 at L = H = 64), so must the term over each error
    of the point, and the term over the errors may vary by at most :data:`TERM_SPREAD_MAX` across
    the points; a log factor needs its parameter >= 1 (``log(H)`` is 0 at H = 1: that term is 0
    there and is not range-checked).  Raises :class:`~transformer_limits.errors.InputError`
    (``claim: ...``, one line naming the term and the point) before any fit, instead of overflow
    warnings and a NaN deep inside one.  Magnitudes are summed in logs, so the check itself cannot
    overflow."""
    log_lo, log_hi, log_spread = math.log10(TERM_MIN), math.log10(TERM_MAX), math.log10(TERM_SPREAD_MAX)
    e_lo, e_hi = np.log10(data.errors.min(axis=1)), np.log10(data.errors.max(axis=1))
    for term in claim.terms:
        magnitude = np.zeros(data.n_points)  # log10 of the term at each point
        zero = np.zeros(data.n_points, bool)  # log(p) = 0: the term is exactly 0 at that point
        for p, power in term.log_powers.items():
            logs = np.log(data.params[p])
            bad = np.flatnonzero(logs < 0)
            if bad.size:
                raise InputError(f"claim: the term {term} is undefined or negative at "
                                 f"{data.point_label(int(bad[0]))} (log({p}) < 0): a log factor needs {p} >= 1")
            zero |= logs == 0
            magnitude += float(power) * np.log10(np.where(logs > 0, logs, 1.0))
        for p, power in term.exponents.items():
            magnitude += float(power) * np.log10(data.params[p])
        used = np.flatnonzero(~zero)
        if not used.size:
            continue
        m, lo, hi = magnitude[used], magnitude[used] - e_hi[used], magnitude[used] - e_lo[used]
        where = [data.point_label(int(i)) for i in used[[np.argmin(m), np.argmax(m), np.argmin(lo), np.argmax(hi)]]]
        params = ", ".join(term.parameters)
        if m.min() < log_lo or m.max() > log_hi:
            k, value = (1, m.max()) if m.max() > log_hi else (0, m.min())
            raise InputError(f"claim: the term {term} is about 1e{value:+.0f} at {where[k]}, outside "
                             f"[{TERM_MIN:g}, {TERM_MAX:g}]: it would {_flows(value)}flow in float64 (its "
                             f"exponents are too large for the range of {params})")
        if lo.min() < log_lo or hi.max() > log_hi:
            k, value = (3, hi.max()) if hi.max() > log_hi else (2, lo.min())
            raise InputError(f"claim: the term {term} over the errors is about 1e{value:+.0f} at {where[k]}, "
                             f"outside [{TERM_MIN:g}, {TERM_MAX:g}]: the fits would {_flows(value)}flow in "
                             "float64 (rescale the error column)")
        if hi.max() - lo.min() > log_spread:
            raise InputError(f"claim: the term {term} over the errors varies by about 1e{hi.max() - lo.min():+.0f} "
                             f"across the points (from {where[2]} to {where[3]}), over {TERM_SPREAD_MAX:g}: the "
                             "fitted term would leave float64's range relative to the errors (the claim is that "
                             f"far from the data; its exponents are too large for the range of {params})")
