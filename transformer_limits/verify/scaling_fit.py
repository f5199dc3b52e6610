"""Power-law fits ``log R = c + β log D`` of rank versus FFN width (docs/theory.md §C.6–C.7).

* **OLS t-interval (the authors').** ``β`` and its standard error from
  :func:`scipy.stats.linregress` on ``(log D, log R)`` (natural logs), 95% interval
  ``β ± t_{0.975, n−2} · SE``, ``R² = r²``; at least 3 points.
* **Bootstrap (ours).** Percentile interval of ``β`` over ``B`` seeded resamples
  (``numpy.random.default_rng(seed)``).  Default ``"residual"``: the widths are a designed grid,
  so the design is kept fixed and ``log R* = ĉ + β̂ log D + e*`` with ``e*`` drawn from the
  leverage-corrected, re-centred residuals ``e_i/√(1−h_ii)`` (Davison & Hinkley 1997, alg. 6.1).
  ``"pairs"`` resamples ``(D, R)`` points with replacement; resamples with fewer than two distinct
  widths (slope undefined) are dropped and reported via ``bootstrap_n``.  With 8 widths neither
  bootstrap is exact: both are narrower than the t-interval and cover a true slope ≈ 89% of the time
  at nominal 95% under Gaussian log-noise (the t-interval is exact there; ``tests/test_scaling_fit.py``,
  ``tests/test_interval_coverage.py``).

Limits: ``n_bootstrap`` is at most ``transformer_limits.resource_limits.MAX_BOOTSTRAP_REPLICATES``
(10^6) and its working set ``resource_limits.bootstrap_memory_bytes(n_bootstrap, n)`` must fit
``MEMORY_BUDGET_BYTES`` (2 GiB); both are checked before anything is allocated (``ValueError`` naming
``n_bootstrap``).

The points file (CSV) has the header ``optimizer,stratum,metric,width,value``, one row per point.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from scipy import stats

from transformer_limits.resource_limits import check_bootstrap

__all__ = ["PowerLawFit", "fit_power_law", "bootstrap_slopes", "read_points_csv", "fit_points",
           "fit_points_csv", "POINT_COLUMNS"]

POINT_COLUMNS = ("optimizer", "stratum", "metric", "width", "value")
MIN_POINTS = 3
BootstrapMethod = Literal["residual", "pairs"]


@dataclass(frozen=True)
class PowerLawFit:
    """One fit of ``log R = intercept + beta · log D``.

    ``ci_low``/``ci_high``: OLS t-interval at ``confidence``; ``boot_ci_low``/``boot_ci_high``:
    bootstrap percentile interval (NaN when ``bootstrap_n == 0``).
    """

    beta: float
    intercept: float
    stderr: float
    ci_low: float
    ci_high: float
    r2: float
    n: int
    confidence: float
    boot_ci_low: float = math.nan
    boot_ci_high: float = math.nan
    bootstrap_n: int = 0
    bootstrap_method: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def covers(self, beta: float, *, bootstrap: bool = False) -> bool:
        """Whether ``beta`` lies in the t-interval (or the bootstrap interval)."""
        lo, hi = (self.boot_ci_low, self.boot_ci_high) if bootstrap else (self.ci_low, self.ci_high)
        if math.isnan(lo):
            raise ValueError("no bootstrap interval: fit with n_bootstrap > 0")
        return lo <= beta <= hi


def _log_xy(widths: Any, values: Any) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(widths, dtype=np.float64).reshape(-1)
    y = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.shape != y.shape:
        raise ValueError(f"widths and values differ in length ({x.size} vs {y.size})")
    for name, arr in (("widths", x), ("values", y)):
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"{name}: all entries must be finite and positive (log-log fit)")
    if x.size < MIN_POINTS:
        raise ValueError(f"need at least {MIN_POINTS} points for a fit with a CI, got {x.size}")
    if np.unique(x).size < 2:
        raise ValueError("widths: need at least two distinct widths")
    return np.log(x), np.log(y)


def _slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """OLS slopes of each row of ``y`` (``B × n``) on the matching row of ``x`` (``B × n``)."""
    xc = x - x.mean(axis=-1, keepdims=True)
    yc = y - y.mean(axis=-1, keepdims=True)
    return np.sum(xc * yc, axis=-1) / np.sum(xc * xc, axis=-1)


def bootstrap_slopes(log_x: np.ndarray, log_y: np.ndarray, *, n_bootstrap: int, seed: int = 0,
                     method: BootstrapMethod = "residual") -> np.ndarray:
    """``n_bootstrap`` bootstrap replicates of the OLS slope of ``log_y`` on ``log_x`` (shape ``(B',)``).

    ``B' = n_bootstrap`` for ``"residual"``; for ``"pairs"`` degenerate resamples are dropped.
    """
    if isinstance(n_bootstrap, (int, float, np.integer, np.floating)) and n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be a positive integer, got {n_bootstrap!r}")
    n = log_x.size
    # stated limit and memory estimate (transformer_limits.resource_limits), before any allocation
    n_bootstrap = check_bootstrap(n_bootstrap, n, name="n_bootstrap")
    rng = np.random.default_rng(seed)
    if method == "residual":
        slope, intercept = np.polyfit(log_x, log_y, 1)
        fitted = intercept + slope * log_x
        xc = log_x - log_x.mean()
        leverage = 1.0 / n + xc**2 / np.sum(xc**2)
        resid = (log_y - fitted) / np.sqrt(1.0 - leverage)
        resid -= resid.mean()
        y_star = fitted + resid[rng.integers(0, n, size=(n_bootstrap, n))]
        return _slopes(np.broadcast_to(log_x, y_star.shape), y_star)
    if method == "pairs":
        idx = rng.integers(0, n, size=(n_bootstrap, n))
        xs, ys = log_x[idx], log_y[idx]
        ok = np.ptp(xs, axis=1) > 0
        return _slopes(xs[ok], ys[ok])
    raise ValueError(f"bootstrap method must be 'residual' or 'pairs', got {method!r}")


def fit_power_law(widths: Any, values: Any, *, confidence: float = 0.95, n_bootstrap: int = 0,
                  seed: int = 0, bootstrap: BootstrapMethod = "residual") -> PowerLawFit:
    """Fit ``log R = c + β log D`` to points ``(D_i, R_i)`` (both ``(n,)``, positive, ``n ≥ 3``)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    lx, ly = _log_xy(widths, values)
    if n_bootstrap:  # refused up front (limit, memory) rather than after the OLS fit
        check_bootstrap(n_bootstrap, lx.size, name="n_bootstrap")
    res = stats.linregress(lx, ly)
    n = lx.size
    # constant log R: linregress reports NaN; the slope 0 is then exact (R² stays undefined, NaN)
    stderr = 0.0 if np.ptp(ly) == 0 else float(res.stderr)
    half = stats.t.ppf(0.5 + confidence / 2.0, n - 2) * stderr
    extra: dict[str, Any] = {}
    if n_bootstrap:
        slopes = bootstrap_slopes(lx, ly, n_bootstrap=n_bootstrap, seed=seed, method=bootstrap)
        tail = 100.0 * (1.0 - confidence) / 2.0
        lo, hi = np.percentile(slopes, [tail, 100.0 - tail]) if slopes.size else (math.nan, math.nan)
        extra = dict(boot_ci_low=float(lo), boot_ci_high=float(hi), bootstrap_n=int(slopes.size),
                     bootstrap_method=bootstrap)
    return PowerLawFit(beta=float(res.slope), intercept=float(res.intercept), stderr=stderr,
                       ci_low=float(res.slope - half), ci_high=float(res.slope + half),
                       r2=float(res.rvalue**2), n=int(n), confidence=float(confidence), **extra)


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
            key = tuple((row.get(c) or "").strip() for c in POINT_COLUMNS[:3])
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
    """Fit every group; one dict per ``(optimizer, stratum, metric)`` with the :class:`PowerLawFit` fields.

    Every group is bootstrapped with the same ``seed`` (reproducible, independent of group order).
    """
    out = []
    for (optimizer, stratum, metric), (x, y) in groups.items():
        try:
            fit = fit_power_law(x, y, confidence=confidence, n_bootstrap=n_bootstrap, seed=seed,
                                bootstrap=bootstrap)
        except ValueError as exc:
            raise ValueError(f"{optimizer}/{stratum}/{metric}: {exc}") from None
        out.append({"optimizer": optimizer, "stratum": stratum, "metric": metric, **fit.as_dict()})
    return out


def fit_points_csv(path: str | os.PathLike, **kwargs: Any) -> list[dict[str, Any]]:
    """:func:`read_points_csv` then :func:`fit_points` (keyword arguments as there)."""
    return fit_points(read_points_csv(path), **kwargs)
