"""Parameter sweeps: grid specs, deterministic per-point seeds, a resumable SQLite store, executors.

A sweep evaluates a function ``fn(point) -> dict`` on every point of a grid (e.g. depth ``L``, heads
``H``, tokens ``N``, replicate seeds) and stores each point's JSON result in an embedded SQLite
database, so an interrupted sweep resumes where it stopped and a grown grid runs only its new
points.
The format, the seed rule, the store schema and the resume semantics are documented in
``docs/sweeps.md``.

Quick use::

    >>> grid = load_grid({"grid": {"L": [4, 8], "seed": {"count": 2, "base": 1234}}})
    >>> len(grid), sorted(grid.points()[0])
    (4, ['L', 'seed', 'seed_index'])

    result = run_sweep(fn, grid, "runs.sqlite", experiment="depth-scaling", config={"version": 1})
    result.groupby("loss", by="L")  # {4: array([...two seeds...]), 8: array([...])}

Seeds: a seed axis ``name = {count = R, base = B}`` adds ``name_index`` in ``0..R-1`` to the point
and ``name`` = :func:`derive_seed` ``(B, params, name)``, a 63-bit integer from a
:class:`numpy.random.SeedSequence` keyed by ``B`` and a SHA-256 digest of the point's other
parameters, so a point's seed never depends on the grid order or on which other points exist.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import multiprocessing
import os
import pickle
import socket
import sqlite3
import struct
import sys
import threading
import time
import tomllib
import traceback
import warnings
from contextlib import contextmanager
from collections import deque
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, Executor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from transformer_limits.errors import EnvironmentFailure, InputError, SchedulerError, StoreError

__all__ = [
    "Factor",
    "Grid",
    "GridPoint",
    "PointRecord",
    "SweepError",
    "SweepResult",
    "SweepStore",
    "canonical_json",
    "config_hash",
    "derive_seed",
    "load_grid",
    "load_sweep",
    "run_sweep",
]

SECTIONS = ("grid", "zip", "fixed")
SEED_TABLE_KEYS = frozenset({"count", "base"})
STORE_SCHEMA_VERSION = 1
#: largest grid :func:`load_grid` accepts (points, seed replicates included); checked before expanding
MAX_GRID_POINTS = 1_000_000
#: seconds a store open or write waits for another process's lock (SQLite busy timeout)
STORE_LOCK_TIMEOUT_S = 10.0
#: seconds to connect to a dask scheduler and receive its handshake, and to wait for its first worker
SCHEDULER_TIMEOUT_S = 10.0
#: times a process pool broken by a killed worker is replaced (unfinished points resubmitted)
POOL_RESTARTS = 2
#: seconds between checks, while waiting for a dask sweep's points, that its scheduler still has a
#: worker (dask holds the tasks of a cluster whose workers all died and waits for new ones forever)
WORKER_WATCH_S = 5.0


# ------------------------------------------------------------------------------------------------
# canonical JSON and hashes
# ------------------------------------------------------------------------------------------------


def _to_jsonable(value: Any) -> Any:
    """``json.dumps`` hook: NumPy scalars and arrays become Python numbers and lists."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def canonical_json(value: Any) -> str:
    """Deterministic JSON text (sorted keys, no spaces, NumPy values as Python numbers).

    Equal values give equal text across runs, processes and machines (floats are written with
    ``repr``, which round-trips exactly), which makes the text usable as a key and a hash input.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_to_jsonable)


def _sha256_hex(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def config_hash(config: Mapping[str, Any] | None) -> str:
    """16 hex digits of SHA-256 of the canonical JSON of ``config`` (``None`` counts as ``{}``)."""
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a mapping of JSON values, got {type(config).__name__}")
    try:
        return _sha256_hex(dict(config))[:16]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"config must be JSON-serialisable: {exc}") from None


def derive_seed(base: int, params: Mapping[str, Any], name: str = "seed") -> int:
    """Seed of one point: a 63-bit integer determined by ``(base, name, params)`` only.

    ``params`` are the point's parameters without derived seeds (fixed constants, grid values and
    seed indices). The SHA-256 digest of ``canonical_json({"name": name, "params": params})`` gives
    eight 32-bit words used as the ``spawn_key`` of ``numpy.random.SeedSequence(base)``; the first
    64-bit word of its state, shifted right by one bit, is the seed. Python's ``hash()`` (salted
    per process) is never used, so the seed is the same in every process and on every machine.
    """
    text = canonical_json({"name": name, "params": dict(params)})
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    words = tuple(int(w) for w in np.frombuffer(digest, dtype="<u4"))
    state = np.random.SeedSequence(entropy=int(base), spawn_key=words).generate_state(1, np.uint64)
    return int(state[0]) >> 1


# ------------------------------------------------------------------------------------------------
# grid specification
# ------------------------------------------------------------------------------------------------


def _check_value(where: str, value: Any) -> Any:
    """Validate one parameter value (JSON scalar or list/dict of them); return plain Python."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or isinstance(value, (int, str)) or value is None:
        return value
    if isinstance(value, float):
        if math.isnan(value):
            raise ValueError(f"{where}: NaN is not a valid parameter value")
        return value
    if isinstance(value, (list, tuple)):
        return [_check_value(f"{where}[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: keys must be strings, got {k!r}")
            out[k] = _check_value(f"{where}.{k}", v)
        return out
    raise ValueError(f"{where}: unsupported value {value!r} of type {type(value).__name__}")


def _check_values_list(where: str, values: Any, *, distinct: bool = True) -> list[Any]:
    """A non-empty list of parameter values, distinct unless ``distinct`` is false (a zip column:
    only the zipped rows must be distinct)."""
    if isinstance(values, np.ndarray):
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        raise ValueError(
            f"{where}: expected a non-empty list of values, got {type(values).__name__} {values!r}"
        )
    if len(values) == 0:
        raise ValueError(f"{where}: empty list (a grid axis needs at least one value)")
    out = [_check_value(f"{where}[{i}]", v) for i, v in enumerate(values)]
    if not distinct:
        return out
    seen: set[str] = set()
    for v in out:
        text = canonical_json(v)
        if text in seen:
            raise ValueError(f"{where}: duplicate value {v!r}")
        seen.add(text)
    return out


def _check_name(where: str, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: parameter names must be non-empty strings, got {name!r}")
    return name


def _check_int(where: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{where}: expected an integer >= {low}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Factor:
    """One independent direction of the cartesian product.

    ``names`` are the point parameters it sets and ``rows`` their joint values: a plain axis has one
    name, a zip group several names moving together, a seed axis the single name
    ``f"{seed_name}_index"`` with rows ``(0,), (1,), ...`` and the derived seed stored under
    ``seed_name`` (drawn from ``seed_base``).
    """

    names: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    seed_name: str | None = None
    seed_base: int | None = None
    zip_group: str | None = None


@dataclass(frozen=True)
class GridPoint:
    """One expanded grid point: position ``index`` in the grid, store ``key`` and ``params``.

    ``key`` is ``canonical_json`` of the parameters without derived seeds; ``params`` (what the
    sweep function receives) adds the derived seeds.
    """

    index: int
    key: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Grid:
    """A validated sweep grid: ``fixed`` constants and ordered ``factors`` (see :func:`load_grid`).

    Points are the cartesian product of the factors in declaration order, the last factor varying
    fastest (like :func:`itertools.product`).
    """

    factors: tuple[Factor, ...]
    fixed: Mapping[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return math.prod(len(f.rows) for f in self.factors)

    @property
    def names(self) -> tuple[str, ...]:
        """Every parameter name a point carries (fixed, factor names, then derived seed names)."""
        seeds = tuple(f.seed_name for f in self.factors if f.seed_name is not None)
        return tuple(self.fixed) + tuple(n for f in self.factors for n in f.names) + seeds

    def expand(self) -> list[GridPoint]:
        """All points in grid order, each with its store key and derived seeds."""
        seeds = [f for f in self.factors if f.seed_name is not None]
        out: list[GridPoint] = []
        for index, combo in enumerate(itertools.product(*(f.rows for f in self.factors))):
            base = dict(self.fixed)
            for factor, row in zip(self.factors, combo):
                base.update(zip(factor.names, row))
            params = dict(base)
            for f in seeds:
                params[f.seed_name] = derive_seed(f.seed_base, base, f.seed_name)
            # the seed bases belong to the key: another base is another point, never a stale hit
            key = dict(base, **{f"{f.seed_name}_base": f.seed_base for f in seeds})
            out.append(GridPoint(index=index, key=canonical_json(key), params=params))
        return out

    def points(self) -> list[dict[str, Any]]:
        """The parameter dicts (what the sweep function receives), in grid order."""
        return [p.params for p in self.expand()]

    def to_dict(self) -> dict[str, Any]:
        """The spec as a dict; for a grid from :func:`load_grid`, ``load_grid`` of it is equal."""
        grid: dict[str, Any] = {}
        zips: dict[str, Any] = {}
        for i, f in enumerate(self.factors):
            if f.seed_name is not None:
                grid[f.seed_name] = {"count": len(f.rows), "base": f.seed_base}
            elif f.zip_group is None and len(f.names) == 1:
                grid[f.names[0]] = [r[0] for r in f.rows]
            else:
                group = f.zip_group or f"zip{i}"
                zips[group] = {n: [r[j] for r in f.rows] for j, n in enumerate(f.names)}
        out: dict[str, Any] = {"grid": grid}
        if zips:
            out["zip"] = zips
        if self.fixed:
            out["fixed"] = dict(self.fixed)
        return out


def _read_spec(spec: str | os.PathLike | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(spec, Mapping):
        return spec
    if not isinstance(spec, (str, os.PathLike)):
        raise ValueError(
            f"grid must be a mapping, a Grid or a TOML path, got {type(spec).__name__}"
        )
    path = Path(spec)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ValueError(f"grid file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"grid file {str(path)!r} is not valid TOML: {exc}") from None


def load_grid(spec: str | os.PathLike | Mapping[str, Any] | Grid) -> Grid:
    """Validate a grid spec (a dict, a TOML file path, or a :class:`Grid`) and build the grid.

    Spec (TOML shown; a dict has the same nesting)::

        [grid]                     # cartesian axes, in this order (last varies fastest)
        L = [4, 8, 16]
        H = [1, 4]
        seed = {count = 8, base = 1234}   # seed axis: seed_index = 0..7, seed = derive_seed(...)

        [zip.shape]                # a zip group: equal-length lists moving together, one factor
        N = [64, 128]
        d = [8, 16]

        [fixed]                    # constants added to every point
        dt = 0.01

    Zip groups follow the ``[grid]`` axes in the product order. Raises ``ValueError`` naming the
    key for an unknown section, an empty list, a non-list axis, a bad seed table, unequal zip
    lengths, a duplicate axis value or zip row, or a parameter name used twice.
    """
    if isinstance(spec, Grid):
        return spec
    raw = _read_spec(spec)
    for section in raw:
        if section not in SECTIONS:
            raise ValueError(
                f"unknown grid section {section!r} (expected one of: {', '.join(SECTIONS)})"
            )
    for section in SECTIONS:
        if section in raw and not isinstance(raw[section], Mapping):
            raise ValueError(f"{section}: expected a table of parameters, got {raw[section]!r}")
    taken: dict[str, str] = {}

    def claim(where: str, name: Any) -> str:
        name = _check_name(where, name)
        if name in taken:
            raise ValueError(f"{where}: parameter {name!r} is already defined by {taken[name]}")
        taken[name] = where
        return name

    fixed = {claim(f"fixed.{k}", k): _check_value(f"fixed.{k}", v)
             for k, v in raw.get("fixed", {}).items()}
    factors: list[Factor] = []
    for key, values in raw.get("grid", {}).items():
        where = f"grid.{key}"
        if isinstance(values, Mapping):
            unknown = set(values) - SEED_TABLE_KEYS
            if unknown or set(values) != SEED_TABLE_KEYS:
                raise ValueError(
                    f"{where}: a seed axis is {{count = R, base = B}}, got keys {sorted(values)}"
                )
            count = _check_int(f"{where}.count", values["count"], 1)
            if count > MAX_GRID_POINTS:
                raise InputError(f"{where}.count: {count} replicates exceed the limit of {MAX_GRID_POINTS} grid points")
            base = _check_int(f"{where}.base", values["base"], 0)
            index_name = claim(where, f"{_check_name(where, key)}_index")
            factors.append(Factor((index_name,), tuple((i,) for i in range(count)),
                                  seed_name=claim(where, key), seed_base=base))
        else:
            name = claim(where, key)
            factors.append(Factor((name,), tuple((v,) for v in _check_values_list(where, values))))
    for group, table in raw.get("zip", {}).items():
        where = f"zip.{group}"
        if not isinstance(table, Mapping) or not table:
            raise ValueError(f"{where}: expected a non-empty table of equal-length lists")
        columns = {claim(f"{where}.{k}", k): _check_values_list(f"{where}.{k}", v, distinct=False)
                   for k, v in table.items()}
        lengths = {k: len(v) for k, v in columns.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"{where}: zipped lists must have equal lengths, got {lengths}")
        rows = tuple(zip(*columns.values()))
        if len({canonical_json(r) for r in rows}) != len(rows):
            raise ValueError(f"{where}: duplicate rows")
        factors.append(Factor(tuple(columns), rows, zip_group=str(group)))
    if not factors and not fixed:
        raise ValueError("grid: the spec defines no parameters ([grid], [zip] or [fixed])")
    size = math.prod(len(f.rows) for f in factors)
    if size > MAX_GRID_POINTS:
        shape = " x ".join(f"{len(f.rows)} ({', '.join(f.names)})" for f in factors)
        raise InputError(f"grid has {size} points ({shape}), more than the limit of {MAX_GRID_POINTS} "
                         "(transformer_limits.verify.sweep.MAX_GRID_POINTS)")
    return Grid(factors=tuple(factors), fixed=fixed)


# ------------------------------------------------------------------------------------------------
# results store
# ------------------------------------------------------------------------------------------------

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
class _Outcome:
    """What a worker sends back for one point (JSON text, never live objects)."""

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
        self._conn = None
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

    def _open(self) -> None:
        conn = self._conn
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
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite already rolled back (e.g. after SQLITE_FULL); keep the first error
            raise
        self._conn.execute("COMMIT")

    def _fail_write(self, exc: BaseException) -> EnvironmentFailure:
        return EnvironmentFailure(f"could not write to sweep {_store_problem(self.path, exc, self.timeout)}")

    def close(self) -> None:
        self._conn.close()

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

    def write(self, experiment: str, chash: str, point: GridPoint, outcome: _Outcome) -> None:
        """Insert or replace one point's outcome atomically (``attempts`` counts the writes)."""
        try:
            self._write(experiment, chash, point, outcome)
        except (sqlite3.Error, OSError) as exc:
            raise self._fail_write(exc) from None

    def _write(self, experiment: str, chash: str, point: GridPoint, outcome: _Outcome) -> None:
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
        rows = self._conn.execute(
            "SELECT point_key, status FROM sweep_points WHERE experiment = ? AND config_hash = ?",
            (experiment, chash),
        )
        return dict(rows.fetchall())

    def rows(self, experiment: str, chash: str) -> dict[str, dict[str, Any]]:
        """``{point_key: row}`` with ``params``/``result`` decoded from JSON."""
        cur = self._conn.execute(
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
        cur = self._conn.execute(
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


# ------------------------------------------------------------------------------------------------
# results
# ------------------------------------------------------------------------------------------------


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
        return [{**r.params, **r.result} for r in self.records if r.status == "ok"]

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


# ------------------------------------------------------------------------------------------------
# execution
# ------------------------------------------------------------------------------------------------


# one point at a time per process: a dask worker with several threads would otherwise enter Numba's
# parallel kernels from two threads, which the default (workqueue) threading layer aborts on
_POINT_LOCK = threading.Lock()


def _limit_numba_threads(threads: int) -> None:
    """Pool initializer: each of W workers gets cpus // W Numba threads (no oversubscription)."""
    import numba

    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))


# Linux has prctl(PR_SET_PDEATHSIG); elsewhere (or with this off, as a test does) a watchdog thread
_USE_PRCTL = sys.platform.startswith("linux")


def _exit_with_parent(expected_parent: int | None = None) -> None:
    """Make this worker die when the process that started it dies (even by SIGKILL).

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; elsewhere (or if prctl fails) a daemon thread
    polls the parent pid once a second.  Without this a SIGKILLed parent leaves its pool workers
    blocked forever on the task queue (each holds the queue's write end, so none sees EOF).
    """
    import signal

    parent = os.getppid()
    if expected_parent is not None and parent != expected_parent:  # it died before we got here
        os._exit(1)
    armed = False
    if _USE_PRCTL:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    if not armed:
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, name="tl-parent-watchdog", daemon=True).start()


def _init_worker(threads: int, parent: int | None = None) -> None:
    """Pool initializer: signals (the parent handles SIGINT/SIGTERM and stops the workers; a fork
    inherits its Python handlers), die with the parent, and the Numba thread share."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent(parent)
    _limit_numba_threads(threads)


def _execute_point(fn: Callable[[dict[str, Any]], Mapping[str, Any]],
                   params: dict[str, Any]) -> _Outcome:
    """Run ``fn`` on one point (in a worker) and encode its result as JSON text."""
    worker = f"{socket.gethostname()}:{os.getpid()}"
    status, result, error = "ok", None, None
    with _POINT_LOCK:
        started = time.time()
        t0 = time.perf_counter()
        try:
            value = _checked_value(fn, params)
            result = canonical_json(dict(value))
        except Exception:
            status, error = "error", traceback.format_exc()
        elapsed = time.perf_counter() - t0
    return _Outcome(status, result, error, started, time.time(), elapsed, worker)


def _checked_value(fn: Callable[[dict[str, Any]], Mapping[str, Any]], params: dict[str, Any]) -> Mapping[str, Any]:
    value = fn(dict(params))
    if not isinstance(value, Mapping):
        raise TypeError(f"sweep function must return a dict, got {type(value).__name__}")
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise TypeError(f"result keys must be strings, got {bad!r}")
    clash = sorted(set(value) & set(params))
    if clash:
        raise ValueError(f"result keys {clash} collide with point parameters")
    return value


class _SerialExecutor(Executor):
    """Runs each submission at once in this process (``workers=1``)."""

    def submit(self, fn, /, *args, **kwargs):
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # _execute_point catches fn errors; this is a safety net
            future.set_exception(exc)
        return future


def _check_scheduler(scheduler: Any) -> None:
    """``scheduler`` must be an address string or a ``distributed.Client``, with dask installed."""
    if not (isinstance(scheduler, str) and scheduler) and not hasattr(scheduler, "get_executor"):
        raise ValueError(
            f"scheduler must be an address string or a distributed.Client, got {scheduler!r}"
        )
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise ImportError(
            "scheduler= needs dask.distributed: pip install 'transformer_limits[distributed]'"
        ) from None


_SCHEMES = ("tcp", "tls", "inproc", "ucx", "ws", "wss")


def _parse_tcp_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``tcp://`` (or scheme-less) address; None for other schemes;
    :class:`SchedulerError` when it is not an address at all."""
    text = address.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    if scheme not in _SCHEMES:
        raise SchedulerError(f"scheduler address {address!r} has an unknown scheme {scheme!r} "
                             f"(expected one of {', '.join(_SCHEMES)}, e.g. tcp://host:8786)")
    if scheme != "tcp":
        return None
    host, colon, port = rest.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in rest:
        raise SchedulerError(f"scheduler address {address!r} is not an address such as tcp://host:8786")
    return host, int(port)


def _recv_exactly(sock: socket.socket, n: int, deadline: float) -> bytes:
    chunks, got = [], 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(min(n - got, 65536))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def check_scheduler_address(address: str, timeout: float | None = None) -> None:
    """Check that ``address`` is a dask scheduler, in at most about ``timeout`` seconds.

    For ``tcp://host:port``: connect, then read the handshake a dask comm sends on accepting a
    connection (an 8-byte little-endian length, then frames: a frame count, their lengths, and a
    msgpack dict with ``python`` and ``compression`` keys), with every length bounded before
    anything is allocated.  An HTTP server (which says nothing first), a peer that sends garbage, a
    closed port and a malformed address each raise :class:`transformer_limits.errors.SchedulerError`
    (a ``ValueError``) naming the address.  Other schemes (``tls``, ``inproc``, ...) are only
    parsed; their connection is bounded by ``distributed.Client(timeout=...)``.
    """
    timeout = SCHEDULER_TIMEOUT_S if timeout is None else float(timeout)
    if not isinstance(address, str) or not address.strip():
        raise SchedulerError("scheduler needs an address such as tcp://host:8786")
    target = _parse_tcp_address(address)
    if target is None:
        return
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection(target, timeout=timeout)
    except (TimeoutError, socket.timeout):
        raise SchedulerError(f"scheduler {address!r} did not accept a connection within {timeout:g} s") from None
    except OSError as exc:
        raise SchedulerError(f"cannot connect to scheduler {address!r}: {exc.strerror or exc}") from None
    not_dask = f"{address!r} is not a dask scheduler (its first message is not a dask handshake)"
    try:
        with sock:
            (total,) = struct.unpack("<Q", _recv_exactly(sock, 8, deadline))
            if not 16 <= total <= 1 << 16:
                raise SchedulerError(not_dask)
            body = _recv_exactly(sock, total, deadline)
    except (TimeoutError, socket.timeout):
        raise SchedulerError(f"{address!r} accepted the connection but sent no dask handshake within "
                             f"{timeout:g} s (is it a dask scheduler?)") from None
    except OSError as exc:
        raise SchedulerError(f"{address!r} closed the connection during the dask handshake ({exc})") from None
    (n_frames,) = struct.unpack_from("<Q", body)
    if not 1 <= n_frames <= 64 or 8 + 8 * n_frames > total:
        raise SchedulerError(not_dask)
    lengths = struct.unpack_from(f"<{n_frames}Q", body, 8)
    if 8 + 8 * n_frames + sum(lengths) != total:
        raise SchedulerError(not_dask)
    import msgpack

    offset = 8 + 8 * n_frames
    for length in lengths:
        try:
            value = msgpack.unpackb(body[offset:offset + length])
        except Exception:  # noqa: BLE001 - any decoding failure means "not dask"
            value = None
        if isinstance(value, dict) and "python" in value and "compression" in value:
            return
        offset += length
    raise SchedulerError(not_dask)


class _DaskExecutor:
    """``distributed.Client.get_executor`` with ``shutdown(cancel_futures=...)`` semantics.

    An address is checked first (:func:`check_scheduler_address`), the client connects with
    ``timeout=SCHEDULER_TIMEOUT_S`` and then waits as long for at least one worker."""

    def __init__(self, scheduler: Any):
        import distributed

        if isinstance(scheduler, str):
            check_scheduler_address(scheduler)
            try:
                client = distributed.Client(scheduler, timeout=SCHEDULER_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                raise SchedulerError(f"cannot connect to scheduler {scheduler!r}: {exc}") from None
            self._client, self._own = client, True
        else:
            self._client, self._own = scheduler, False
        try:
            self._client.wait_for_workers(1, timeout=SCHEDULER_TIMEOUT_S)
        except (OSError, TimeoutError):
            if self._own:
                self._client.close()
            where = scheduler if isinstance(scheduler, str) else _client_address(self._client)
            raise SchedulerError(f"scheduler {where} has no worker "
                                 f"(none joined within {SCHEDULER_TIMEOUT_S:g} s)") from None
        self.address = scheduler if isinstance(scheduler, str) else _client_address(self._client)
        self._executor = self._client.get_executor(pure=False)
        self.capacity = 2 * max(1, sum(self._client.nthreads().values()))
        self._workerless_since: float | None = None

    def workerless_for(self) -> float:
        """Seconds the scheduler has had no worker (0 while it has one; unreachable counts as none)."""
        try:
            n_workers = len(self._client.scheduler_info().get("workers", {}))
        except Exception:  # noqa: BLE001 - a scheduler that cannot answer has no usable worker either
            n_workers = 0
        now = time.monotonic()
        if n_workers:
            self._workerless_since = None
            return 0.0
        if self._workerless_since is None:
            self._workerless_since = now
        return now - self._workerless_since

    def submit(self, fn, /, *args):
        return self._executor.submit(fn, *args)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        try:
            self._executor.shutdown(wait=wait and not cancel_futures)
        finally:
            if self._own:
                self._client.close()


def _client_address(client: Any) -> str:
    """The scheduler address of a ``distributed.Client`` (its ``scheduler`` is None before it connects)."""
    rpc = getattr(client, "scheduler", None)
    return str(getattr(rpc, "address", None) or getattr(getattr(client, "cluster", None), "scheduler_address", None)
               or "(unknown address)")


def _make_executor(workers: int, scheduler: Any, mp_context: Any) -> tuple[Any, int]:
    """The executor and how many points it may hold in flight."""
    if scheduler is not None:
        executor = _DaskExecutor(scheduler)
        return executor, executor.capacity
    if workers == 1:
        return _SerialExecutor(), 1
    if mp_context is None and os.environ.get("NUMBA_THREADING_LAYER", "").lower() in ("omp", "tbb"):
        # forking a process whose OpenMP/TBB pool is running is fatal (GNU OpenMP aborts the child)
        mp_context = multiprocessing.get_context("forkserver")
    threads = max(1, (os.cpu_count() or 1) // workers)
    method = (mp_context or multiprocessing.get_context()).get_start_method()
    parent = os.getpid() if method == "fork" else None  # forkserver/spawn workers have another parent
    return ProcessPoolExecutor(max_workers=workers, mp_context=mp_context, initializer=_init_worker,
                               initargs=(threads, parent)), 2 * workers


def _stop_workers(executor: Any) -> None:
    """Terminate a process pool's workers now (an interrupt must not wait for running points)."""
    processes = dict(getattr(executor, "_processes", None) or {})
    for proc in processes.values():
        try:
            proc.terminate()
        except (OSError, AttributeError):
            pass
    for proc in processes.values():
        try:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        except (OSError, AttributeError, ValueError, AssertionError):
            pass


def _check_picklable(fn: Callable) -> None:
    try:
        pickle.dumps(fn)
    except Exception as exc:
        raise ValueError(
            f"fn must be a picklable top-level function for a process pool "
            f"(or use workers=1): {exc}"
        ) from None


def _future_outcome(future: Future) -> _Outcome:
    """The worker's outcome, or an error outcome when the executor itself failed the task."""
    try:
        return future.result()
    except Exception:
        now = time.time()
        return _Outcome("error", None, traceback.format_exc(), now, now, 0.0, "executor")


def _error_summary(experiment: str, errors: list[PointRecord], total: int) -> str:
    first = errors[0]
    tail = (first.error or "").strip().splitlines()
    return (
        f"{len(errors)} of {total} points failed in sweep {experiment!r}; "
        f"first failed point {canonical_json(first.params)}:\n" + "\n".join(tail[-15:])
    )


def run_sweep(
    fn: Callable[[dict[str, Any]], Mapping[str, Any]],
    grid: str | os.PathLike | Mapping[str, Any] | Grid,
    store_path: str | os.PathLike,
    *,
    experiment: str | None = None,
    config: Mapping[str, Any] | None = None,
    workers: int | None = None,
    scheduler: Any = None,
    progress: bool = True,
    on_error: str = "raise",
    retry_errors: bool = True,
    mp_context: Any = None,
) -> SweepResult:
    """Evaluate ``fn`` on every grid point not yet completed in the store; return all results.

    Parameters
    ----------
    fn : picklable top-level function ``fn(point: dict) -> dict`` of JSON-able results (NumPy
        scalars/arrays allowed; result keys must not repeat parameter names).
    grid : spec for :func:`load_grid` (dict, TOML path or :class:`Grid`).
    store_path : SQLite file (created if missing).
    experiment : store namespace; default ``fn.__name__``.
    config : JSON-able mapping of everything else that changes results (code version, solver
        options); its hash is part of the store key, so a new config starts from scratch.
    workers : processes of the local pool; default ``min(2, os.cpu_count())``; ``1`` runs serially
        in this process (no pickling). Ignored when ``scheduler`` is given.
    scheduler : dask.distributed scheduler address (``"tcp://host:8786"``) or a
        ``distributed.Client``; points then run on that cluster.
    progress : show a tqdm bar on stderr.
    on_error : ``"raise"`` stops submitting new points after the first failure and raises
        :class:`SweepError` once in-flight points are stored; ``"continue"`` evaluates every point,
        warns with a summary and returns the result (see :attr:`SweepResult.errors`).
    retry_errors : re-run points stored with status ``"error"`` (default); otherwise keep them.
    mp_context : ``multiprocessing`` context for the pool (default: the platform's).

    Completed points (status ``"ok"``) are never re-run, so calling again after a crash or a kill
    resumes the sweep; the parent process alone writes the store, one transaction per point.
    """
    if on_error not in ("raise", "continue"):
        raise ValueError(f"on_error must be 'raise' or 'continue', got {on_error!r}")
    if workers is None:
        workers = min(2, os.cpu_count() or 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    grid = load_grid(grid)
    if experiment is None:
        experiment = getattr(fn, "__name__", None) or "sweep"
    if not isinstance(experiment, str) or not experiment:
        raise ValueError(f"experiment must be a non-empty string, got {experiment!r}")
    if scheduler is not None:
        _check_scheduler(scheduler)
    elif workers > 1:
        _check_picklable(fn)

    points = grid.expand()
    function = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    with SweepStore(store_path) as store:
        chash = store.register_config(experiment, config, function)
        stored = store.statuses(experiment, chash)
        keep = {"ok"} if retry_errors else {"ok", "error"}
        todo = [p for p in points if stored.get(p.key) not in keep]
        n_run = _drive(fn, todo, store, experiment, chash, workers, scheduler, progress,
                               on_error, mp_context, total=len(points))
        result = SweepResult(experiment, chash, Path(store_path),
                             store.records(experiment, chash, grid),
                             n_run=n_run, n_skipped=len(points) - len(todo))
    errors = result.errors
    if errors:
        message = _error_summary(experiment, errors, len(points))
        if on_error == "raise":
            raise SweepError(message, result)
        warnings.warn(message, RuntimeWarning, stacklevel=2)
    return result


def load_sweep(
    store_path: str | os.PathLike,
    grid: str | os.PathLike | Mapping[str, Any] | Grid,
    *,
    experiment: str,
    config: Mapping[str, Any] | None = None,
) -> SweepResult:
    """Read a sweep's stored results without running anything (absent points are ``"pending"``)."""
    grid = load_grid(grid)
    if not Path(store_path).is_file():
        raise ValueError(f"store_path {str(store_path)!r} is not a sweep store file")
    chash = config_hash(config)
    with SweepStore(store_path) as store:
        records = store.records(experiment, chash, grid)
    return SweepResult(experiment, chash, Path(store_path), records)


def _drive(fn, todo: list[GridPoint], store: SweepStore, experiment: str, chash: str,
           workers: int, scheduler: Any, progress: bool, on_error: str, mp_context: Any,
           total: int) -> int:
    """Submit ``todo`` with a bounded number in flight; store each outcome as it arrives.

    A process pool broken by a killed worker (``BrokenProcessPool``) is replaced and its unfinished
    points resubmitted, at most :data:`POOL_RESTARTS` times, then
    :class:`transformer_limits.errors.EnvironmentFailure`; such points are never stored as errors.
    On an interrupt (``KeyboardInterrupt``, which the CLI also raises for SIGTERM) the workers are
    terminated at once.
    """
    if not todo:
        return 0
    from tqdm import tqdm

    executor, capacity = _make_executor(workers, scheduler, mp_context)
    queue: deque[GridPoint] = deque(todo)
    pending: dict[Future, GridPoint] = {}
    n_run = n_failed = restarts = 0
    stop = clean = False
    bar = None
    try:
        def refill() -> bool:
            """Submit up to capacity; False when the pool is broken."""
            while not stop and len(pending) < capacity and queue:
                point = queue.popleft()
                try:
                    pending[executor.submit(_execute_point, fn, point.params)] = point
                except BrokenExecutor:
                    queue.appendleft(point)
                    return False
            return True

        healthy = refill()  # a fork-started pool forks here, before tqdm starts its monitor thread
        bar = tqdm(total=total, initial=total - len(todo), desc=experiment, unit="pt",
                   file=sys.stderr, disable=not progress, dynamic_ncols=True,
                   leave=None)  # None: kept at top level, cleared when nested under report's bar
        while pending or not healthy:
            lost: list[GridPoint] = []
            if pending:
                watch = getattr(executor, "workerless_for", None)
                done, _ = wait(list(pending), timeout=WORKER_WATCH_S if watch else None,
                               return_when=FIRST_COMPLETED)
                if not done and watch is not None and watch() > SCHEDULER_TIMEOUT_S:
                    raise EnvironmentFailure(
                        f"sweep {experiment!r}: scheduler {executor.address} has had no worker for over "
                        f"{SCHEDULER_TIMEOUT_S:g} s (all died or left); {len(pending) + len(queue)} points "
                        "unfinished, rerun with the same --store to resume")
                for future in done:
                    point = pending.pop(future)
                    if isinstance(future.exception(), BrokenExecutor):
                        lost.append(point)  # the pool died under it: not the point's fault
                        continue
                    outcome = _future_outcome(future)
                    store.write(experiment, chash, point, outcome)
                    n_run += 1
                    bar.update(1)
                    if outcome.status == "error":
                        n_failed += 1
                        bar.set_postfix(errors=n_failed)
                        stop = stop or on_error == "raise"
            if lost or not healthy:
                # every other in-flight point of a broken pool fails the same way: requeue them all
                lost += list(pending.values())
                pending.clear()
                queue.extendleft(reversed(lost))
                restarts += 1
                _stop_workers(executor)
                executor.shutdown(wait=True, cancel_futures=True)
                if restarts > POOL_RESTARTS:
                    raise EnvironmentFailure(
                        f"sweep {experiment!r}: the worker pool broke {restarts} times (a worker was killed, "
                        f"e.g. by the OOM killer); {len(queue)} points unfinished, rerun with the same --store to resume")
                executor, capacity = _make_executor(workers, scheduler, mp_context)
            healthy = refill()
        clean = True
    finally:
        if bar is not None:
            bar.close()
        if not clean:
            _stop_workers(executor)
        executor.shutdown(wait=True, cancel_futures=not clean)
    return n_run
