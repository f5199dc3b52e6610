"""``assert_identity``: a SymPy identity, proved symbolically or checked at random high-precision points.

First ``simplify(lhs − rhs) == 0`` (a proof).  When SymPy cannot decide, both sides are evaluated with
mpmath at ``digits`` significant digits at random points, as the derivations' own checks do
(``transformer_limits.symbolic.attention.evaluate_mpmath``: exact rational points, ``lambdify`` with
``modules="mpmath"`` under ``mpmath.workdps``).  A false identity ``lhs − rhs = g ≢ 0`` with g analytic
vanishes only on a null set, so a random point finds it; the tolerance leaves 10 of the ``digits``
for cancellation inside the evaluation, so a true identity fails only if that loses more than 10
digits.
"""

from __future__ import annotations

import random
from typing import Any, Mapping, Sequence

from transformer_limits.testing.recording import AssertionRecord, record_safely, recording_active
from transformer_limits.verify.stats.power import deterministic_power
from transformer_limits.verify.verdicts import Check, attach_power

__all__ = ["IDENTITY_GUARD_DIGITS", "assert_identity"]

#: digits of the working precision left for cancellation: the tolerance is 10^-(digits - guard)
IDENTITY_GUARD_DIGITS = 10
#: fewest working digits accepted (the tolerance must stay below double precision's 1e-16)
MIN_DIGITS = 27
#: the box random points are drawn from (positive symbols: (0, 2]; negative: [-2, 0))
BOX = 2
#: a random coordinate is an integer multiple of 1/GRID (exact rationals, short to read)
GRID = 1000
#: how many draws per requested point before giving up on points where a side is not finite
DRAWS_PER_POINT = 20


def _as_matrix(value: Any, name: str) -> Any:
    import sympy as sp

    try:
        expr = sp.sympify(value)
    except (sp.SympifyError, TypeError) as exc:
        raise ValueError(f"{name} must be a SymPy expression, matrix or number, got {value!r}") from exc
    if isinstance(expr, sp.MatrixBase):
        return sp.Matrix(expr)
    if not isinstance(expr, sp.Expr):
        raise ValueError(f"{name} must be a SymPy expression, matrix or number (not a relation or set), got {expr!r}")
    return sp.Matrix([[expr]])


def _draw(symbol: Any, rng: random.Random) -> Any:
    """A random exact rational for ``symbol`` that respects its assumptions (integer, sign)."""
    import sympy as sp

    if symbol.is_integer:
        low = 1 if symbol.is_positive else 0 if symbol.is_nonnegative else -10
        high = -1 if symbol.is_negative else 0 if symbol.is_nonpositive else 10
        return sp.Integer(rng.randint(low, high))
    low = 1 if symbol.is_positive else 0 if symbol.is_nonnegative else -BOX * GRID
    high = -1 if symbol.is_negative else 0 if symbol.is_nonpositive else BOX * GRID
    return sp.Rational(rng.randint(low, high), GRID)


class _Side:
    """One side as a function of the symbols, evaluated with mpmath (``lambdify``; SymPy's ``evalf``
    for what mpmath cannot print)."""

    def __init__(self, matrix: Any, symbols: Sequence[Any]) -> None:
        import sympy as sp

        self.matrix, self.symbols = matrix, list(symbols)
        try:
            self.fn: Any = sp.lambdify(self.symbols, matrix, modules="mpmath")
        except (TypeError, NameError, ValueError, SyntaxError):
            self.fn = None

    def at(self, point: Sequence[Any], digits: int) -> list[Any] | None:
        """The entries at ``point`` (exact rationals) as mpmath numbers at ``digits`` digits, row by
        row; None when an entry is not finite there (a pole)."""
        import mpmath
        import sympy as sp

        with mpmath.workdps(digits):
            values: list[Any] | None = None
            if self.fn is not None:
                args = [mpmath.mpf(sp.Rational(v).p) / sp.Rational(v).q for v in point]
                try:
                    out = self.fn(*args)
                    values = [mpmath.mpmathify(out[i, j]) for i in range(self.matrix.rows)
                              for j in range(self.matrix.cols)]
                except (TypeError, NameError, ValueError, ZeroDivisionError, AttributeError):
                    values = None  # a function mpmath does not know, or a pole hit exactly
            if values is None:
                subs = dict(zip(self.symbols, point))
                try:
                    values = []
                    for entry in self.matrix:
                        re, im = (sp.N(part, digits) for part in sp.N(entry.xreplace(subs), digits).as_real_imag())
                        values.append(mpmath.mpc(mpmath.mpf(str(re)), mpmath.mpf(str(im))) if im != 0
                                      else mpmath.mpf(str(re)))
                except (TypeError, ValueError, ZeroDivisionError):
                    return None
            if not all(mpmath.isfinite(v) for v in values):
                return None
            return values


def _point_text(symbols: Sequence[Any], point: Sequence[Any]) -> str:
    return ", ".join(f"{s} = {v}" for s, v in zip(symbols, point)) or "(no symbols)"


def assert_identity(
    lhs: Any,
    rhs: Any,
    symbols: Sequence[Any] | None = None,
    *,
    points: int | Sequence[Mapping[Any, Any]] = 8,
    digits: int = 30,
    seed: int = 0,
    simplify: bool = True,
) -> Check:
    """Assert ``lhs == rhs`` as an identity in ``symbols``.

    ``lhs``, ``rhs``: SymPy expressions or matrices of one shape (or numbers).  ``symbols``: the
    variables (default: the free symbols of ``lhs`` and ``rhs``, sorted by name; every free symbol
    must be listed).  First ``sympy.simplify(lhs − rhs) == 0`` (skipped with ``simplify=False``, for large
    expressions); otherwise both sides are evaluated with mpmath at ``digits`` (>= 27) digits at
    ``points`` random points (an int; or explicit points, mappings symbol -> value) drawn with
    ``random.Random(seed)`` as exact rationals k/1000 in [-2, 2] per symbol, respecting the symbol's
    assumptions (``positive=True``: (0, 2]; ``integer=True``: integers in [-10, 10]; points where a
    side is not finite are redrawn).  Each entry must satisfy
    ``|lhs − rhs| <= 10^-(digits − 10) · max(1, |lhs|, |rhs|)``.

    Returns the :class:`~transformer_limits.verify.Check` (deterministic: false-failure rate 0 up to
    round-off, power 1 against a nonzero analytic difference); ``measured`` is the largest relative
    difference (0 for a symbolic proof).  Raises ``AssertionError`` naming the worst point, both
    values and the simplified difference when the identity fails; ``ValueError`` naming a bad argument.
    """
    import mpmath
    import sympy as sp

    if isinstance(digits, bool) or not isinstance(digits, int) or digits < MIN_DIGITS:
        raise ValueError(f"digits must be an integer >= {MIN_DIGITS} (the tolerance is 10^-(digits - "
                         f"{IDENTITY_GUARD_DIGITS})), got {digits!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if isinstance(points, bool) or (isinstance(points, int) and points < 1):
        raise ValueError(f"points must be >= 1 (or a sequence of mappings symbol -> value), got {points!r}")
    left, right = _as_matrix(lhs, "lhs"), _as_matrix(rhs, "rhs")
    if right.shape == (1, 1) and left.shape != (1, 1) and right[0, 0] == 0:
        right = sp.zeros(*left.shape)  # "M == 0" for a matrix M
    if left.shape != right.shape:
        raise ValueError(f"lhs and rhs must have the same shape, got {left.shape} and {right.shape}")
    difference = left - right
    # the symbols of both sides (not of their difference: terms that cancel still need values)
    free = sorted(left.free_symbols | right.free_symbols, key=str)
    if symbols is None:
        names = free
    else:
        names = list(symbols)
        bad = [s for s in names if not isinstance(s, sp.Symbol)]
        if bad:
            raise ValueError(f"symbols must be SymPy symbols, got {bad}")
        missing = [s for s in free if s not in names]
        if missing:
            raise ValueError(f"symbols must list every free symbol of lhs and rhs; missing {missing}")
    claim = f"{_short(lhs)} = {_short(rhs)}"
    if simplify:
        reduced = sp.simplify(difference)
        if all(e == 0 for e in reduced):
            check = _check(claim, True, 0.0, (0.0, 0.0), {"method": "sympy.simplify(lhs - rhs) == 0"},
                           "proved: simplify(lhs - rhs) = 0")
            if recording_active():
                record_safely("assert_identity", lambda: AssertionRecord(
                    "assert_identity", check, [], None, None, [f"{claim}: proved symbolically"]))
            return check
    else:
        reduced = difference
    evaluated = _evaluated_points(points, names, seed, _Side(left, names), _Side(right, names), digits)
    chosen = [p for p, _, _ in evaluated]
    tolerance = mpmath.mpf(10) ** -(digits - IDENTITY_GUARD_DIGITS)
    rows: list[dict[str, Any]] = []
    worst: tuple[Any, int, int, Any, Any] | None = None  # (relative difference, point, entry, lhs, rhs)
    with mpmath.workdps(digits):
        for k, (point, a, b) in enumerate(evaluated):
            rel = [abs(u - v) / max(mpmath.mpf(1), abs(u), abs(v)) for u, v in zip(a, b)]
            e = max(range(len(rel)), key=rel.__getitem__)
            if worst is None or rel[e] > worst[0]:
                worst = (rel[e], k, e, a[e], b[e])
            rows.append({"point": _point_text(names, point), "max_relative_difference": float(rel[e])})
    assert worst is not None  # at least one point (_evaluated_points)
    passed = bool(worst[0] <= tolerance)
    rel_values = [r["max_relative_difference"] for r in rows]
    stats = {"method": f"mpmath at {digits} digits at {len(chosen)} points (simplify undecided)"
             if simplify else f"mpmath at {digits} digits at {len(chosen)} points (simplify skipped)",
             "tolerance": float(tolerance), "digits": digits, "seed": seed, "points": len(chosen),
             "symbols": [str(s) for s in names]}
    worst_rel, k, e, u, v = worst
    entry = divmod(e, left.cols)
    where = (f"worst point: {_point_text(names, chosen[k])}"
             + (f", entry {entry}" if left.shape != (1, 1) else ""))
    note = "" if passed else (f"{where}: lhs = {mpmath.nstr(u, 15)}, rhs = {mpmath.nstr(v, 15)}, relative "
                              f"difference {mpmath.nstr(worst_rel, 3)} > tolerance {mpmath.nstr(tolerance, 3)}")
    check = _check(claim, passed, float(worst_rel), (min(rel_values), max(rel_values)), stats, note)
    if recording_active():
        record_safely("assert_identity", lambda: _record(check, rows, float(tolerance)))
    if not passed:
        residue = _short(reduced if reduced.shape != (1, 1) else reduced[0, 0], 300)
        table = "\n".join(f"  {r['point']}: max relative difference {r['max_relative_difference']:.3g}" for r in rows)
        label = "simplify(lhs - rhs)" if simplify else "lhs - rhs"
        raise AssertionError(f"identity failed: {claim}\n{note}\n{label} = {residue}\n"
                             f"points ({digits} digits, seed {seed}):\n{table}")
    return check


def _short(value: Any, limit: int = 160) -> str:
    """``str(value)`` cut to ``limit`` characters; a matrix of more than 4 entries is named by its shape
    and first entry (printing every entry of a large matrix costs more than checking it)."""
    import sympy as sp

    if isinstance(value, sp.MatrixBase) and value.rows * value.cols > 4:
        text = f"Matrix({value.rows}x{value.cols}: [{_short(value[0, 0], limit)}, …])"
    else:
        text = str(value)
    return text if len(text) <= limit else text[:limit] + " …"


def _evaluated_points(points: int | Sequence[Mapping[Any, Any]], names: Sequence[Any], seed: int,
                      left: _Side, right: _Side, digits: int) -> list[tuple[list[Any], list[Any], list[Any]]]:
    """``(point, lhs entries, rhs entries)`` at the given points, or at ``points`` random ones (a draw
    where a side is not finite is replaced by another)."""
    import sympy as sp

    out = []
    if isinstance(points, int):  # >= 1, checked by assert_identity
        rng = random.Random(seed)
        for _ in range(DRAWS_PER_POINT * points):
            point = [_draw(s, rng) for s in names]
            a, b = left.at(point, digits), right.at(point, digits)
            if a is not None and b is not None:
                out.append((point, a, b))
                if len(out) == points:
                    return out
        raise ValueError(f"points: lhs or rhs is not finite at {DRAWS_PER_POINT * points - len(out)} of "
                         f"{DRAWS_PER_POINT * points} random points (seed {seed}); give the points explicitly")
    for given in points:
        if not isinstance(given, Mapping) or any(s not in given for s in names):
            raise ValueError(f"points must map every symbol {list(names)} to a value, got {given!r}")
        point = [sp.Rational(sp.nsimplify(given[s])) for s in names]
        a, b = left.at(point, digits), right.at(point, digits)
        if a is None or b is None:
            raise ValueError(f"points: lhs or rhs is not finite at {_point_text(names, point)}")
        out.append((point, a, b))
    if not out:
        raise ValueError("points must not be empty")
    return out


def _check(claim: str, passed: bool, measured: float, ci: tuple[float, float], stats: dict[str, Any],
           note: str) -> Check:
    stats = {"alpha": 0.0, "false_failure_rate": 0.0,
             "sides": "one-sided (max relative |lhs - rhs| <= tolerance)", **stats}
    check = Check("identity", claim, 0.0, measured, ci, passed, stats, note)
    return attach_power(check, deterministic_power(True),
                        "lhs - rhs a nonzero analytic function (it vanishes only on a null set: a random "
                        "point finds it)", model="deterministic")


def _record(check: Check, rows: list[dict[str, Any]], tolerance: float) -> AssertionRecord:
    def figure(name: str) -> Any:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure as MplFigure

        from transformer_limits.verify.experiment import Figure
        from transformer_limits.verify.figures import figure_png

        fig = MplFigure(figsize=(6.4, 3.6), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        values = [max(r["max_relative_difference"], 1e-300) for r in rows]
        ax.semilogy(range(1, len(values) + 1), values, "o", label="max relative |lhs − rhs| at the point")
        ax.axhline(tolerance, color="#d62728", ls="--", label=f"tolerance {tolerance:.0e}")
        ax.set_xlabel("random point")
        ax.set_ylabel("relative difference")
        ax.legend(fontsize=7)
        fig.tight_layout()
        return Figure(name, figure_png(fig), "Relative difference of the two sides at each random point "
                                             "(mpmath) against the tolerance.")

    return AssertionRecord("assert_identity", check, rows, None, figure, [check.note] if check.note else [])
