"""Sweep grids: the spec format, its validation, and the per-point seed and key rules.

A grid is the cartesian product of *factors* (a plain axis, a zip group of equal-length columns, or
a seed axis ``name = {count = R, base = B}``) plus ``fixed`` constants; the last factor varies
fastest, like :func:`itertools.product`.  A seed axis adds ``name_index`` in ``0..R-1`` to the
point and ``name`` = :func:`derive_seed` ``(B, params, name)``, a 63-bit integer from a
:class:`numpy.random.SeedSequence` keyed by ``B`` and a SHA-256 digest of the point's other
parameters, so a point's seed never depends on the grid order or on which other points exist.

Quick use::

    >>> grid = load_grid({"grid": {"L": [4, 8], "seed": {"count": 2, "base": 1234}}})
    >>> len(grid), sorted(grid.points()[0])
    (4, ['L', 'seed', 'seed_index'])

Each point's store key is :func:`canonical_json` of its parameters without derived seeds (plus the
seed bases), so equal points have equal keys in every process.  The format is documented in
``docs/sweeps.md``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from transformer_limits.errors import InputError
from transformer_limits.jsonable import jsonable

__all__ = ["Factor", "Grid", "GridPoint", "canonical_json", "config_hash", "derive_seed", "load_grid"]

SECTIONS = ("grid", "zip", "fixed")
SEED_TABLE_KEYS = frozenset({"count", "base"})
#: largest grid :func:`load_grid` accepts (points, seed replicates included); checked before expanding
MAX_GRID_POINTS = 1_000_000


# ------------------------------------------------------------------------------------------------
# canonical JSON and hashes
# ------------------------------------------------------------------------------------------------


def _to_jsonable(value: Any) -> Any:
    """``json.dumps`` hook: NumPy scalars and arrays become Python numbers and lists (±inf and NaN
    kept: ``json.dumps`` writes them)."""
    if isinstance(value, (np.generic, np.ndarray)):
        return jsonable(value, nonfinite="keep")
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

    def __post_init__(self) -> None:
        if (self.seed_name is None) != (self.seed_base is None):
            raise ValueError(f"seed_name and seed_base must be given together, got seed_name={self.seed_name!r}, "
                             f"seed_base={self.seed_base!r}")


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
        # (name, base) of each seed axis; a Factor has both or neither
        seeds = [(f.seed_name, f.seed_base) for f in self.factors
                 if f.seed_name is not None and f.seed_base is not None]
        out: list[GridPoint] = []
        for index, combo in enumerate(itertools.product(*(f.rows for f in self.factors))):
            base = dict(self.fixed)
            for factor, row in zip(self.factors, combo):
                base.update(zip(factor.names, row))
            params = dict(base)
            for name, seed_base in seeds:
                params[name] = derive_seed(seed_base, base, name)
            # the seed bases belong to the key: another base is another point, never a stale hit
            key = dict(base, **{f"{name}_base": seed_base for name, seed_base in seeds})
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
                         "(transformer_limits.verify.sweeps.grid.MAX_GRID_POINTS)")
    return Grid(factors=tuple(factors), fixed=fixed)

