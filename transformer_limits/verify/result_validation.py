"""Is an experiment's result a result?  Checked before any verdict is read from it.

:func:`result_errors` lists why a value returned by ``Experiment.run`` cannot be turned into a
verdict, each naming the field: checks that are not :class:`~transformer_limits.verify.verdicts.Check`
objects, a ``passed`` that is not a bool, a measured value, interval bound, claimed value, power or
statistic that is NaN (or a measured value that is infinite), an ``alpha`` missing or outside
[0, 0.5), an interval whose low end exceeds its high end, and tables, fits, data or notes that
cannot become JSON.  :func:`~transformer_limits.verify.running.run_experiment` turns a non-empty
list into an ERROR (exit 3), never a PASS, so a plugin or a ``--module`` file is held to the same
rules as the built-in experiments.  ±inf is allowed for the open side of a one-sided interval and
in statistics (an open bound); NumPy scalars are accepted (``numpy.bool_`` for ``passed``).
"""

from __future__ import annotations

import json
import math
import numbers
from typing import Any

import numpy as np

from transformer_limits.jsonable import jsonable

__all__ = ["result_errors"]


def _is_real(value: Any) -> bool:
    return isinstance(value, (numbers.Real, np.floating, np.integer)) and not isinstance(value, (bool, np.bool_))


def _nan_paths(value: Any, path: str, depth: int = 0) -> list[str]:
    """Paths below ``value`` that hold NaN (dicts, lists, tuples and arrays are walked)."""
    if depth > 20:
        return []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nan_paths(v, f"{path}.{k}", depth + 1)]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _nan_paths(v, f"{path}[{i}]", depth + 1)]
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return [path] if np.isnan(value).any() else []
    if _is_real(value) and math.isnan(float(value)):
        return [path]
    return []


def _json_error(value: Any) -> str | None:
    """Why ``value`` cannot be written to results.json (None: it can); a cycle is one reason."""
    try:
        json.dumps(jsonable(value), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
    return None


def _check_errors(i: int, check: Any) -> list[str]:
    from transformer_limits.verify.verdicts import Check

    if not isinstance(check, Check):
        return [f"checks[{i}] is a {type(check).__name__}, not a Check"]
    where = f"check {check.name!r}" if isinstance(check.name, str) and check.name else f"checks[{i}]"
    errors = []
    if not isinstance(check.name, str) or not check.name:
        errors.append(f"{where}: name must be a non-empty string, got {check.name!r}")
    if not isinstance(check.passed, (bool, np.bool_)):
        errors.append(f"{where}: passed must be a bool, got {type(check.passed).__name__} {check.passed!r}")
    if not (_is_real(check.measured) and math.isfinite(float(check.measured))):
        errors.append(f"{where}: measured must be a finite number, got {check.measured!r}")
    if check.expected is not None and not (_is_real(check.expected) and not math.isnan(float(check.expected))):
        errors.append(f"{where}: expected must be a number or None, got {check.expected!r}")
    ci = check.ci
    if not (isinstance(ci, (tuple, list)) and len(ci) == 2 and all(_is_real(b) for b in ci)):
        errors.append(f"{where}: ci must be a (low, high) pair of numbers, got {ci!r}")
    elif any(math.isnan(float(b)) for b in ci):
        errors.append(f"{where}: ci holds NaN: {tuple(ci)!r}")
    elif float(ci[0]) > float(ci[1]):
        errors.append(f"{where}: ci low {ci[0]!r} exceeds high {ci[1]!r}")
    if not isinstance(check.statistics, dict):
        errors.append(f"{where}: statistics must be a dict, got {type(check.statistics).__name__}")
    else:
        alpha = check.statistics.get("alpha")
        if alpha is None:
            errors.append(f"{where}: statistics lack alpha (the false-failure rate)")
        elif not (_is_real(alpha) and 0.0 <= float(alpha) < 0.5):
            errors.append(f"{where}: statistics.alpha must be in [0, 0.5), got {alpha!r}")
        errors += [f"{where}: {p} is NaN" for p in _nan_paths(check.statistics, "statistics")]
        why = _json_error(check.statistics)
        if why:
            errors.append(f"{where}: statistics cannot be written as JSON ({why})")
    if check.power is not None and not (_is_real(check.power) and 0.0 <= float(check.power) <= 1.0):
        errors.append(f"{where}: power must be in [0, 1] or None, got {check.power!r}")
    if not isinstance(check.note, str) or not isinstance(check.claim, str) or not isinstance(check.alternative, str):
        errors.append(f"{where}: claim, note and alternative must be strings")
    return errors


def result_errors(result: Any) -> list[str]:
    """Why ``result`` (an ``ExperimentResult``) cannot be decided; empty when it can."""
    errors: list[str] = []
    if not isinstance(result.checks, list):
        return [f"checks must be a list of Check objects, got {type(result.checks).__name__}"]
    for i, check in enumerate(result.checks):
        errors += _check_errors(i, check)
    for field in ("fits", "tables", "data", "provenance"):
        value = getattr(result, field)
        if not isinstance(value, dict):
            errors.append(f"{field} must be a dict, got {type(value).__name__}")
            continue
        why = _json_error(value)
        if why:
            errors.append(f"{field} cannot be written as JSON ({why})")
    if not isinstance(result.notes, list) or not all(isinstance(n, str) for n in result.notes):
        errors.append("notes must be a list of strings")
    return errors
