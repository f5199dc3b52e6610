"""Plain JSON values from NumPy, SymPy-free: one coercion for results, settings, derivations and sweeps.

:func:`jsonable` turns a nested value into ``dict`` / ``list`` / ``str`` / ``int`` / ``float`` /
``bool`` / ``None``: mappings get string keys, lists and tuples become lists, anything with a
``tolist`` method (NumPy arrays and scalars, matrices) is replaced by ``tolist()``.  Its callers
differ in three choices, which are parameters rather than separate copies:

* ``nonfinite``: what ±inf and NaN become: ``"null"`` (``results.json``, which is written with
  ``allow_nan=False``), ``"string"`` (``'inf'``, ``'nan'``: derivation values) or ``"keep"`` (the
  float itself: settings and sweep keys, where ``json.dumps`` writes ``Infinity``);
* ``other``: applied to a value of no kind above (default: returned unchanged); a derivation passes
  a SymPy-aware converter, a ``json.dumps`` hook one that raises ``TypeError``;
* ``depth``: how many container levels are converted (``None``: all); below it values are returned
  as they are (experiment settings convert their top-level tuples only, so nested tuples used as
  keys stay tuples).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

__all__ = ["NONFINITE", "jsonable"]

#: the accepted values of ``nonfinite``
NONFINITE = ("null", "string", "keep")


def jsonable(value: Any, *, nonfinite: str = "null", other: Callable[[Any], Any] | None = None,
             depth: int | None = None) -> Any:
    """``value`` as plain JSON types (see the module docstring for ``nonfinite``, ``other``, ``depth``)."""
    if nonfinite not in NONFINITE:
        raise ValueError(f"nonfinite must be one of {', '.join(NONFINITE)}, got {nonfinite!r}")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
        raise ValueError(f"depth must be None or a non-negative integer, got {depth!r}")
    return _convert(value, nonfinite, other, depth)


def _convert(value: Any, nonfinite: str, other: Callable[[Any], Any] | None, depth: int | None) -> Any:
    if depth == 0:
        return value
    inner = None if depth is None else depth - 1
    if isinstance(value, Mapping):
        return {str(k): _convert(v, nonfinite, other, inner) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_convert(v, nonfinite, other, inner) for v in value]
    if not isinstance(value, str) and callable(getattr(value, "tolist", None)):
        # a NumPy array or scalar: tolist() gives Python lists / numbers, converted at this level
        return _convert(value.tolist(), nonfinite, other, depth)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value) or nonfinite == "keep":
            return value
        return None if nonfinite == "null" else str(value)
    return value if other is None else other(value)
