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
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from transformer_limits.errors import InputError

__all__ = ["RateData", "read_rate_data", "level_text"]




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


def _read_csv(path: str) -> tuple[dict[str, list[str]], list[str], str]:
    """Columns (name -> cells), a location per data row (``line N``) and the file's SHA-256."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not a CSV file")
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file (expected a CSV file)") from None
    if "\0" in text:
        raise InputError(f"{path}: not a text file (it holds NUL bytes; expected a CSV file)")
    if not text.strip():
        raise InputError(f"{path}: empty file (expected a header line naming the columns, then data rows)")
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[tuple[int, list[str]]] = []
    try:
        for row in reader:
            if any(cell.strip() for cell in row):  # blank lines are skipped
                rows.append((reader.line_num, [cell.strip() for cell in row]))
    except csv.Error as exc:
        raise InputError(f"{path}: line {reader.line_num}: malformed CSV ({exc})") from None
    if not rows:
        raise InputError(f"{path}: empty file (only blank lines; expected a header line naming the columns)")
    (header_line, header), body = rows[0], rows[1:]
    if all(_is_number(c) for c in header if c):
        raise InputError(f"{path}: line {header_line} has no header: the first line must name the columns "
                         f"(e.g. L,H,seed,error), found {','.join(header)}")
    empty = [k + 1 for k, c in enumerate(header) if not c]
    if empty:
        raise InputError(f"{path}: line {header_line}: header column {empty[0]} has no name")
    duplicates = sorted({c for c in header if header.count(c) > 1})
    if duplicates:
        raise InputError(f"{path}: line {header_line}: duplicate column name(s) "
                         f"{', '.join(repr(c) for c in duplicates)} in the header")
    if not body:
        raise InputError(f"{path}: no data rows (only the header line)")
    columns: dict[str, list[str]] = {c: [] for c in header}
    where = []
    for line, row in body:
        if len(row) != len(header):
            raise InputError(f"{path}: line {line}: {len(row)} fields, but the header has {len(header)}")
        for c, cell in zip(header, row):
            columns[c].append(cell)
        where.append(f"line {line}")
    return columns, where, hashlib.sha256(raw).hexdigest()


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _mapping_columns(data: Mapping[str, Any]) -> tuple[dict[str, list[Any]], list[str], str]:
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
    return columns, [f"row {i}" for i in range(n)], digest


def _number(cell: Any, source: str, where: str, column: str) -> float:
    if isinstance(cell, (bool, np.bool_)):
        raise InputError(f"{source}: {where}: column {column!r}: {cell!r} is not a number")
    if isinstance(cell, numbers.Real):
        return float(cell)
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


def read_rate_data(data: Any, params: Sequence[str], *, error: str = "error",
                   seed_column: str | None = None) -> RateData:
    """Group long-format rows into a :class:`RateData`.

    ``data``: a CSV path (``str``/``PathLike``; header line, then one row per point and seed) or a
    mapping column name -> 1-D values.  ``params``: the parameter columns (values finite and > 0,
    at least 2 levels each); ``error``: the error column (finite and > 0); ``seed_column``: the seed
    labels (``None``: a column named ``seed`` if there is one, else the rows of a point are its
    seeds in file order).  Every point needs the same number (>= 2) of seeds and no (point, seed)
    pair may repeat.  Raises :class:`~transformer_limits.errors.InputError` (a ``ValueError``): one
    line naming the file and line (or ``data[...]``) and the column.
    """
    if isinstance(data, (str, os.PathLike)):
        source = os.fspath(data)
        columns, where, digest = _read_csv(source)
    elif isinstance(data, Mapping):
        source = "data"
        columns, where, digest = _mapping_columns(data)
    else:
        raise ValueError(f"data must be a CSV path or a mapping column name -> values, got {type(data).__name__}")
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
    n = len(where)
    table = {p: np.empty(n) for p in params}
    errors = np.empty(n)
    for i in range(n):
        for p in params:
            v = _number(columns[p][i], source, where[i], p)
            if not (math.isfinite(v) and v > 0):
                raise InputError(f"{source}: {where[i]}: parameter {p!r} = {columns[p][i]!r}: "
                                 "parameters must be finite and > 0")
            table[p][i] = v
        e = _number(columns[error][i], source, where[i], error)
        if not math.isfinite(e):
            raise InputError(f"{source}: {where[i]}: error column {error!r} = {columns[error][i]!r} is not finite")
        if e <= 0:
            raise InputError(f"{source}: {where[i]}: error column {error!r} = {columns[error][i]!r}: "
                             "errors must be > 0 (rates are fitted on log scale)")
        errors[i] = e
    for p in params:
        levels = np.unique(table[p])
        if levels.size < 2:
            raise InputError(f"{source}: parameter {p!r} has only one level ({level_text(levels[0])}): a rate needs "
                             "at least 2 levels of every parameter")
    points: dict[tuple[float, ...], list[tuple[str, float, str]]] = {}
    for i in range(n):
        key = tuple(float(table[p][i]) for p in params)
        if seed_column is None:
            label = str(len(points.get(key, [])))
        else:
            label = _seed_label(columns[seed_column][i])
            if not label:
                raise InputError(f"{source}: {where[i]}: seed column {seed_column!r} is empty")
        entries = points.setdefault(key, [])
        for other_label, _, other_where in entries:
            if other_label == label:
                point = ", ".join(f"{p}={level_text(v)}" for p, v in zip(params, key))
                raise InputError(f"{source}: {other_where} and {where[i]}: two rows for {point}, seed {label!r} "
                                 "(is a column that tells them apart missing from the parameters?)")
        entries.append((label, float(errors[i]), where[i]))
    keys = sorted(points)
    counts = [len(points[k]) for k in keys]

    def label_of(key: tuple[float, ...]) -> str:
        return ", ".join(f"{p}={level_text(v)}" for p, v in zip(params, key))

    few = next((k for k, c in zip(keys, counts) if c < 2), None)
    if few is not None:
        raise InputError(f"{source}: too few rows for the fit: point {label_of(few)} has 1 row; every point "
                         "needs at least 2 seeds (the confidence intervals resample seeds)")
    if len(set(counts)) > 1:
        lo, hi = int(np.argmin(counts)), int(np.argmax(counts))
        raise InputError(f"{source}: points have different numbers of seeds ({counts[lo]} at {label_of(keys[lo])}, "
                         f"{counts[hi]} at {label_of(keys[hi])}): give every point the same number of seeds")
    seeds, rows = [], []
    for k in keys:
        entries = sorted(points[k], key=lambda t: _seed_order(t[0]))
        seeds.append([t[0] for t in entries])
        rows.append([t[1] for t in entries])
    return RateData({p: np.array([k[j] for k in keys]) for j, p in enumerate(params)}, np.array(rows), seeds,
                    source, n, error, seed_column, digest)
