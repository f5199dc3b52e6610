"""What a sweep returns: :class:`SweepResult` (one :class:`PointRecord` per grid point, in grid
order, with table/column/groupby views) and :class:`SweepError` (raised after failed points)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from transformer_limits.errors import StoreError
from transformer_limits.verify.sweeps.store import PointRecord

__all__ = ["SweepError", "SweepResult"]


class SweepError(RuntimeError):
    """Raised after a sweep in which points failed; ``.result`` holds everything stored."""

    def __init__(self, message: str, result: "SweepResult"):
        super().__init__(message)
        self.result = result


@dataclass
class SweepResult:
    """Outcome of :func:`run_sweep`: one :class:`PointRecord` per grid point, in grid order.

    ``n_run`` points were evaluated by this call and ``n_skipped`` were already complete in the
    store. :attr:`table` flattens the completed points into ``{**params, **result}`` rows.
    """

    experiment: str
    config_hash: str
    store_path: Path
    records: list[PointRecord]
    n_run: int = 0
    n_skipped: int = 0

    def __len__(self) -> int:
        return len(self.records)

    @property
    def table(self) -> list[dict[str, Any]]:
        """Rows ``{**params, **result}`` of the points with status ``"ok"``, in grid order."""
        return [{**r.params, **r.completed_result} for r in self.records if r.status == "ok"]

    @property
    def errors(self) -> list[PointRecord]:
        """The points whose last attempt raised (``error`` holds the traceback)."""
        return [r for r in self.records if r.status == "error"]

    @property
    def complete(self) -> bool:
        """True when every grid point has status ``"ok"``."""
        return all(r.status == "ok" for r in self.records)

    def column(self, name: str) -> np.ndarray:
        """``np.asarray`` of parameter or result ``name`` over :attr:`table` (grid order)."""
        return np.asarray(self._values(self.table, name))

    def groupby(self, value: str, by: str | Sequence[str]) -> dict[Any, np.ndarray]:
        """``{group: array of value}`` over :attr:`table`, groups in grid order.

        ``by="L"`` gives scalar keys (``{4: ..., 8: ...}``); ``by=("L", "H")`` gives tuple keys.
        Inside a group the values keep grid order (e.g. replicate seeds along axis 0).
        """
        names = (by,) if isinstance(by, str) else tuple(by)
        if not names:
            raise ValueError("by must name at least one parameter")
        rows = self.table
        keys = list(zip(*(self._values(rows, n) for n in names))) if rows else []
        values = self._values(rows, value)
        groups: dict[Any, list[Any]] = {}
        for key, v in zip(keys, values):
            groups.setdefault(key[0] if isinstance(by, str) else key, []).append(v)
        return {k: np.asarray(v) for k, v in groups.items()}

    def _values(self, rows: list[dict[str, Any]], name: str) -> list[Any]:
        missing = sum(name not in r for r in rows)
        if missing and missing < len(rows):
            # the function returns the same keys for every point: a row without them was edited
            raise StoreError(f"column {name!r} is missing from {missing} of {len(rows)} rows of sweep "
                             f"{self.experiment!r} in store {str(self.store_path)!r} (a tampered row?); "
                             "delete those rows or the store to recompute them")
        if missing:
            raise ValueError(f"column {name!r} is missing from {missing} of {len(rows)} rows")
        return [r[name] for r in rows]

