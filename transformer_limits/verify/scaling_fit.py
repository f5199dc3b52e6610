"""The points file of paper C's width-scaling fits: read it and fit every (optimizer, stratum, metric)
group with :func:`~transformer_limits.verify.stats.width_scaling.fit_width_scaling`
(``log R = c + β log D``; docs/theory.md §C.6–C.7, docs/spectral.md).

The points file (CSV) has the header ``optimizer,stratum,metric,width,value``, one row per point.
"""

from __future__ import annotations

import csv
import math
import os
from typing import Any

import numpy as np

from transformer_limits.verify.stats.width_scaling import BootstrapMethod, fit_width_scaling

__all__ = ["read_points_csv", "fit_points", "fit_points_csv", "POINT_COLUMNS"]

POINT_COLUMNS = ("optimizer", "stratum", "metric", "width", "value")


def read_points_csv(path: str | os.PathLike) -> dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]]:
    """Read a points CSV into ``{(optimizer, stratum, metric): (widths, values)}`` (file order).

    Raises ``ValueError`` (one line naming file, row and column) for a missing file, missing
    columns, an empty key, or a width/value that is not a finite positive number.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    groups: dict[tuple[str, str, str], tuple[list[float], list[float]]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = [c.strip() for c in (reader.fieldnames or [])]
        missing = [c for c in POINT_COLUMNS if c not in header]
        if missing:
            raise ValueError(f"{path}: missing column(s) {', '.join(missing)} "
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
    if not groups:
        raise ValueError(f"{path}: no data rows")
    return {k: (np.array(xs), np.array(ys)) for k, (xs, ys) in groups.items()}


def fit_points(groups: dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]], *,
               confidence: float = 0.95, n_bootstrap: int = 0, seed: int = 0,
               bootstrap: BootstrapMethod = "residual") -> list[dict[str, Any]]:
    """Fit every group; one dict per ``(optimizer, stratum, metric)`` with the fields of
    :class:`~transformer_limits.verify.stats.width_scaling.WidthScalingFit`.

    Every group is bootstrapped with the same ``seed`` (reproducible, independent of group order).
    """
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
