"""The points file of paper C's width-scaling fits: read it and fit every (optimizer, stratum, metric)
group with :func:`~transformer_limits.verify.stats.width_scaling.fit_width_scaling`
(``log R = c + β log D``; docs/theory.md §C.6–C.7, docs/spectral.md).

The points file (CSV) has the header ``optimizer,stratum,metric,width,value``, one row per point.
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import os
from typing import Any

import numpy as np

from transformer_limits.errors import InputError
from transformer_limits.input_files import read_regular_file
from transformer_limits.verify.stats.width_scaling import BootstrapMethod, fit_width_scaling

__all__ = ["read_points_csv", "fit_points", "fit_points_csv", "POINT_COLUMNS"]

POINT_COLUMNS = ("optimizer", "stratum", "metric", "width", "value")


def read_points_csv(path: str | os.PathLike) -> dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]]:
    """Read a points CSV into ``{(optimizer, stratum, metric): (widths, values)}`` (file order).

    Raises ``ValueError`` (an :class:`~transformer_limits.errors.InputError`, one line naming the
    file, and the row and column where there is one) for a missing file, a path that is not a
    regular file (a folder, ``/dev/null``, a FIFO: never opened), a file that is not UTF-8 text (a
    BOM is allowed) or not CSV, missing columns, an empty key, or a width/value that is not a finite
    positive number.
    """
    path = os.fspath(path)
    data = read_regular_file(path, "a CSV file")  # before opening: a FIFO would block, /dev/zero never end
    try:
        text = data.decode("utf-8-sig")  # a BOM (as spreadsheet programs write) is not part of the header
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a UTF-8 text file (byte {exc.start}; expected a CSV file)") from None
    if "\0" in text:
        raise InputError(f"{path}: not a text file (it holds NUL bytes; expected a CSV file)")
    groups: dict[tuple[str, str, str], tuple[list[float], list[float]]] = {}
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = [c.strip() for c in (reader.fieldnames or [])]
        missing = [c for c in POINT_COLUMNS if c not in header]
        if missing:
            raise InputError(f"{path}: missing column(s) {', '.join(missing)} "
                             f"(need {','.join(POINT_COLUMNS)}; found {','.join(header) or 'nothing'})")
        reader.fieldnames = header
        for line, row in enumerate(reader, start=2):
            optimizer, stratum, metric = ((row.get(c) or "").strip() for c in POINT_COLUMNS[:3])
            key = (optimizer, stratum, metric)
            for col, val in zip(POINT_COLUMNS[:3], key):
                if not val:
                    raise ValueError(f"{path}: row {line}: column {col!r} is empty")
            nums = []
            for col in POINT_COLUMNS[3:]:
                raw = (row.get(col) or "").strip()
                try:
                    num = float(raw)
                except ValueError:
                    raise ValueError(f"{path}: row {line}: column {col!r}: {raw!r} is not a number") from None
                if not math.isfinite(num) or num <= 0:
                    raise ValueError(f"{path}: row {line}: column {col!r}: {raw!r} is not finite and positive")
                nums.append(num)
            xs, ys = groups.setdefault(key, ([], []))
            xs.append(nums[0])
            ys.append(nums[1])
    except csv.Error as exc:
        raise InputError(f"{path}: line {reader.line_num}: malformed CSV ({exc})") from None
    if not groups:
        raise ValueError(f"{path}: no data rows")
    return {k: (np.array(xs), np.array(ys)) for k, (xs, ys) in groups.items()}


def fit_points(groups: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]], *,
               confidence: float = 0.95, n_bootstrap: int = 0, seed: int = 0,
               bootstrap: BootstrapMethod = "residual") -> list[dict[str, Any]]:
    """Fit every group; one dict per ``(optimizer, stratum, metric)`` with the fields of
    :class:`~transformer_limits.verify.stats.width_scaling.WidthScalingFit`.

    Every group is bootstrapped with the same ``seed`` (reproducible, independent of group order);
    ``seed`` is checked once, before any fit (``ValueError`` naming ``seed``).
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    out = []
    for (optimizer, stratum, metric), (x, y) in groups.items():
        try:
            fit = fit_width_scaling(x, y, confidence=confidence, n_bootstrap=n_bootstrap, seed=seed,
                                bootstrap=bootstrap)
        except ValueError as exc:
            raise ValueError(f"{optimizer}/{stratum}/{metric}: {exc}") from None
        out.append({"optimizer": optimizer, "stratum": stratum, "metric": metric, **fit.as_dict()})
    return out


def fit_points_csv(path: str | os.PathLike, **kwargs: Any) -> list[dict[str, Any]]:
    """:func:`read_points_csv` then :func:`fit_points` (keyword arguments as there)."""
    return fit_points(read_points_csv(path), **kwargs)
