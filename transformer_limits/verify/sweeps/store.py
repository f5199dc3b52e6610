"""The sweep results store: one SQLite file (WAL mode), one row per (experiment, config hash, point).

Schema (version :data:`STORE_SCHEMA_VERSION`): ``sweep_points`` holds each point's parameters,
status (``ok``/``error``), JSON result or traceback, timings, worker and attempt count, keyed by
``(experiment, config_hash, point_key)``; ``sweep_configs`` records each registered config.  Every
write is its own transaction, so a killed process leaves only whole rows, and a rerun reads which
points are done (docs/sweeps.md, "Store").
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from transformer_limits.errors import EnvironmentFailure, StoreError
from transformer_limits.verify.sweeps.grid import Grid, GridPoint, canonical_json, config_hash

__all__ = ["PointRecord", "SweepStore"]

STORE_SCHEMA_VERSION = 1
#: seconds a store open or write waits for another process's lock (SQLite busy timeout)
STORE_LOCK_TIMEOUT_S = 10.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sweep_points (
    experiment   TEXT    NOT NULL,
    config_hash  TEXT    NOT NULL,
    point_key    TEXT    NOT NULL,
    params       TEXT    NOT NULL,
    status       TEXT    NOT NULL CHECK (status IN ('ok', 'error')),
    result       TEXT,
    error        TEXT,
    started_at   REAL    NOT NULL,
    finished_at  REAL    NOT NULL,
    elapsed_s    REAL    NOT NULL,
    worker       TEXT    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (experiment, config_hash, point_key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sweep_configs (
    experiment   TEXT NOT NULL,
    config_hash  TEXT NOT NULL,
    config       TEXT NOT NULL,
    function     TEXT NOT NULL,
    created_at   REAL NOT NULL,
    PRIMARY KEY (experiment, config_hash)
) WITHOUT ROWID;
"""

_COLUMNS = ("point_key", "params", "status", "result", "error", "started_at", "finished_at",
            "elapsed_s", "worker", "attempts")


@dataclass(frozen=True)
class _PointOutcome:
    """What a worker sends back for one point (JSON text, never live objects): ``status`` is
    ``"ok"`` (``result`` holds the JSON) or ``"error"`` (``error`` holds the traceback)."""

    status: str
    result: str | None
    error: str | None
    started_at: float
    finished_at: float
    elapsed_s: float
    worker: str


@dataclass(frozen=True)
class PointRecord:
    """One point of a sweep as stored: ``status`` is ``"ok"``, ``"error"`` or ``"pending"``."""

    index: int
    key: str
    params: dict[str, Any]
    status: str
    result: dict[str, Any] | None = None
    error: str | None = None
    elapsed_s: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    worker: str | None = None
    attempts: int = 0

    @property
    def completed_result(self) -> dict[str, Any]:
        """``result`` of a point with status ``"ok"`` (StoreError for a pending or failed point)."""
        if self.result is None:
            raise StoreError(f"point {self.key} has status {self.status!r} and no result")
        return self.result


_SQLITE_MAGIC = b"SQLite format 3\x00"
_TABLE_COLUMNS = {
    "sweep_points": ("experiment", "config_hash", *_COLUMNS),
    "sweep_configs": ("experiment", "config_hash", "config", "function", "created_at"),
}


def _store_problem(path: Path, exc: BaseException, timeout: float) -> str:
    """One line saying what is wrong with the store at ``path`` given SQLite's/the OS's error."""
    text = str(exc)
    low = text.lower()
    if "locked" in low or "busy" in low:
        return (f"store {str(path)!r} is locked by another process (waited {timeout:g} s, "
                "the SQLite busy timeout); stop the other run or use another --store")
    if "full" in low or getattr(exc, "errno", None) == 28:
        return f"store {str(path)!r}: the file system is full ({text})"
    if "readonly" in low or "read-only" in low or "unable to open" in low or "permission" in low:
        return f"store {str(path)!r} is not writable ({text})"
    if "malformed" in low or "not a database" in low or "corrupt" in low or "encrypted" in low:
        return f"store {str(path)!r} is corrupted ({text}); delete it to start over"
    return f"store {str(path)!r}: {text}"


class SweepStore:
    """SQLite results store (WAL mode); one row per (experiment, config hash, point key).

    Every write is its own transaction, so a killed process leaves only whole rows. Only the
    process that owns the sweep writes; workers return JSON text to it. Usable as a context manager.

    Opening validates the file (:class:`transformer_limits.errors.StoreError`, a ``ValueError``,
    naming the store, for each problem): a regular file with the SQLite header, ``PRAGMA
    quick_check`` clean, schema version and columns this code writes (or an empty database),
    writable, and not locked by another process for more than ``timeout`` seconds (default
    ``STORE_LOCK_TIMEOUT_S``).  A store file this call created is removed again when opening
    fails (no 0-byte leftovers on a full or read-only file system).  A write that fails mid-run
    (disk full, file made read-only) raises :class:`transformer_limits.errors.EnvironmentFailure`.
    """

    def __init__(self, path: str | os.PathLike, *, timeout: float | None = None):
        self.path = Path(path)
        self.timeout = STORE_LOCK_TIMEOUT_S if timeout is None else float(timeout)
        if str(path) == "":
            raise StoreError("store path must not be empty")
        if self.path.is_dir():
            raise StoreError(f"store {str(self.path)!r} is a directory; give a .sqlite file path")
        existed = self.path.exists()
        if existed and not self.path.is_file():
            raise StoreError(f"store {str(self.path)!r} is not a regular file")
        self._conn: sqlite3.Connection | None = None
        try:
            if existed:
                with self.path.open("rb") as fh:
                    header = fh.read(len(_SQLITE_MAGIC))
                if header and header != _SQLITE_MAGIC:
                    raise StoreError(f"store {str(self.path)!r} is not a SQLite database (wrong file header)")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), timeout=self.timeout, isolation_level=None)
            self._open()
        except StoreError:
            self._abandon(existed)
            raise
        except (sqlite3.Error, OSError) as exc:
            self._abandon(existed)
            raise StoreError(_store_problem(self.path, exc, self.timeout)) from None

    @property
    def _connection(self) -> sqlite3.Connection:
        """The open SQLite connection (StoreError while opening has not connected yet)."""
        if self._conn is None:
            raise StoreError(f"store {str(self.path)!r} is not connected")
        return self._conn

    def _open(self) -> None:
        conn = self._connection
        check = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
        if check != ["ok"]:
            raise StoreError(f"store {str(self.path)!r} is corrupted (quick_check: {'; '.join(map(str, check[:3]))}); "
                             "delete it to start over")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, STORE_SCHEMA_VERSION):
            raise StoreError(
                f"store {str(self.path)!r} has schema version {version}, "
                f"this code reads version {STORE_SCHEMA_VERSION}"
            )
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        ours = tables & set(_TABLE_COLUMNS)
        if tables and not ours:
            raise StoreError(f"store {str(self.path)!r} is a SQLite database of another program "
                             f"(tables {', '.join(sorted(tables)[:5])}), not a sweep store")
        for table in sorted(ours):
            columns = tuple(r[1] for r in conn.execute(f"PRAGMA table_info({table})"))
            if columns != _TABLE_COLUMNS[table]:
                raise StoreError(f"store {str(self.path)!r} has a table {table} with columns {list(columns)}, "
                                 f"not the sweep-store schema version {STORE_SCHEMA_VERSION}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        with self.transaction():  # also proves the file is writable and not locked
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {STORE_SCHEMA_VERSION}")

    def _abandon(self, existed: bool) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
        if not existed:  # never leave a 0-byte or half-initialised store behind
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.unlink(f"{self.path}{suffix}")
                except OSError:
                    pass

    # -- plumbing ---------------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``, or ``ROLLBACK`` when the block raises."""
        conn = self._connection
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite already rolled back (e.g. after SQLITE_FULL); keep the first error
            raise
        conn.execute("COMMIT")

    def _fail_write(self, exc: BaseException) -> EnvironmentFailure:
        return EnvironmentFailure(f"could not write to sweep {_store_problem(self.path, exc, self.timeout)}")

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> "SweepStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writes -----------------------------------------------------------------------------------
    def register_config(self, experiment: str, config: Mapping[str, Any] | None,
                        function: str = "") -> str:
        """Record ``config`` under its hash (first registration wins); return the hash."""
        chash = config_hash(config)
        try:
            with self.transaction() as conn:
                conn.execute(
                    "INSERT OR IGNORE INTO sweep_configs VALUES (?, ?, ?, ?, ?)",
                    (experiment, chash, canonical_json(dict(config or {})), function, time.time()),
                )
        except (sqlite3.Error, OSError) as exc:
            raise self._fail_write(exc) from None
        return chash

    def write(self, experiment: str, chash: str, point: GridPoint, outcome: _PointOutcome) -> None:
        """Insert or replace one point's outcome atomically (``attempts`` counts the writes)."""
        try:
            self._write(experiment, chash, point, outcome)
        except (sqlite3.Error, OSError) as exc:
            raise self._fail_write(exc) from None

    def _write(self, experiment: str, chash: str, point: GridPoint, outcome: _PointOutcome) -> None:
        with self.transaction() as conn:
            conn.execute(
                """INSERT INTO sweep_points VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)
                   ON CONFLICT (experiment, config_hash, point_key) DO UPDATE SET
                     params = excluded.params, status = excluded.status,
                     result = excluded.result, error = excluded.error,
                     started_at = excluded.started_at, finished_at = excluded.finished_at,
                     elapsed_s = excluded.elapsed_s, worker = excluded.worker,
                     attempts = sweep_points.attempts + 1""",
                (experiment, chash, point.key, canonical_json(point.params), outcome.status,
                 outcome.result, outcome.error, outcome.started_at, outcome.finished_at,
                 outcome.elapsed_s, outcome.worker),
            )

    # -- reads ------------------------------------------------------------------------------------
    def statuses(self, experiment: str, chash: str) -> dict[str, str]:
        """``{point_key: status}`` of the stored points of one experiment and config."""
        rows = self._connection.execute(
            "SELECT point_key, status FROM sweep_points WHERE experiment = ? AND config_hash = ?",
            (experiment, chash),
        )
        return dict(rows.fetchall())

    def rows(self, experiment: str, chash: str) -> dict[str, dict[str, Any]]:
        """``{point_key: row}`` with ``params``/``result`` decoded from JSON."""
        cur = self._connection.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM sweep_points "
            "WHERE experiment = ? AND config_hash = ?",
            (experiment, chash),
        )
        out = {}
        for values in cur.fetchall():
            row = dict(zip(_COLUMNS, values))
            try:
                row["params"] = json.loads(row["params"])
                row["result"] = None if row["result"] is None else json.loads(row["result"])
            except (TypeError, ValueError) as exc:
                raise StoreError(f"store {str(self.path)!r}: the row of point {row['point_key']} in {experiment!r} "
                                 f"does not decode ({exc}); delete that row or the store to recompute it") from None
            if not isinstance(row["params"], dict) or (row["status"] == "ok" and not isinstance(row["result"], dict)):
                raise StoreError(f"store {str(self.path)!r}: the row of point {row['point_key']} in {experiment!r} "
                                 "is not a JSON object; delete that row or the store to recompute it")
            out[row["point_key"]] = row
        return out

    def experiments(self) -> list[dict[str, Any]]:
        """Registered (experiment, config hash, config, function) with their point counts."""
        cur = self._connection.execute(
            """SELECT c.experiment, c.config_hash, c.config, c.function,
                      SUM(p.status = 'ok'), SUM(p.status = 'error')
               FROM sweep_configs c LEFT JOIN sweep_points p
                 ON p.experiment = c.experiment AND p.config_hash = c.config_hash
               GROUP BY c.experiment, c.config_hash ORDER BY c.created_at"""
        )
        return [
            {"experiment": e, "config_hash": h, "config": json.loads(c), "function": f,
             "n_ok": int(ok or 0), "n_error": int(err or 0)}
            for e, h, c, f, ok, err in cur.fetchall()
        ]

    def records(self, experiment: str, chash: str, grid: Grid) -> list[PointRecord]:
        """One :class:`PointRecord` per grid point, in grid order (``"pending"`` if not stored)."""
        stored = self.rows(experiment, chash)
        out = []
        for p in grid.expand():
            row = stored.get(p.key)
            if row is None:
                out.append(PointRecord(index=p.index, key=p.key, params=p.params, status="pending"))
                continue
            if canonical_json(row["params"]) != canonical_json(p.params):
                raise StoreError(f"store {str(self.path)!r}: the stored parameters of point {p.key} in "
                                 f"{experiment!r} were modified; delete that row or the store to recompute it")
            out.append(PointRecord(
                index=p.index, key=p.key, params=row["params"], status=row["status"],
                result=row["result"], error=row["error"], elapsed_s=row["elapsed_s"],
                started_at=row["started_at"], finished_at=row["finished_at"],
                worker=row["worker"], attempts=row["attempts"],
            ))
        ok = [r for r in out if r.status == "ok"]
        empty = [r for r in ok if not r.result]
        if empty and len(empty) < len(ok):  # an empty result beside full ones was edited or truncated
            raise StoreError(f"store {str(self.path)!r}: the result of point {empty[0].key} in {experiment!r} "
                             "is empty while other points have results; delete that row or the store to recompute it")
        return out

