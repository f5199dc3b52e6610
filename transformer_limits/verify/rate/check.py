"""Check a claimed convergence rate on the user's own data (``transformer-limits rate check``).

Input: long-format data, one row per refinement point and seed: parameter columns (``L``, ``H``,
...), an error column and optionally a seed column.  :func:`rate_check` groups the rows into points
``(n_points,)`` per parameter and errors ``(n_points, n_seeds)``
(:func:`~transformer_limits.verify.rate.data.read_rate_data`) and decides the claim with the fits
and verdicts of the built-in experiments (:mod:`~transformer_limits.verify.stats`,
:mod:`~transformer_limits.verify.verdicts`):

* **constants**: ``ē_i ≈ Σ_k C_k m_k(params_i)`` by relative NNLS with seed-bootstrap CIs
  (:func:`~transformer_limits.verify.stats.multi_term.fit_rate_claim`);
* ``rate_bound_holds`` (always): the claim is a bound ``err ≤ Σ_k C_k m_k``; it holds with some
  constants iff the ratio ``r = err / Σ_k Ĉ_k m_k`` stays bounded, so a ratio that grows
  significantly in any parameter contradicts it.  With exactly two parameters on a complete grid the
  trend of log r̄ is one joint regression over the grid, each slope tested one-sidedly at α/2
  (:func:`~transformer_limits.verify.stats.ratio_trend.ratio_trend`, the test of
  ``attention-depth-width``); otherwise every *line* (points where one parameter varies and the
  others are fixed) with at least :data:`MIN_LINE_LEVELS` levels gets a power-law fit of r over all
  its levels and :func:`~transformer_limits.verify.verdicts.rate_at_least` with exponent 0,
  Bonferroni over the lines.  The ratio uses the *fitted* constants Ĉ_k: with unit constants the
  ratio's trend over a finite grid depends on the unknown constants (for ``2/L + 0.5 L^-1/3 H^-1/2``
  the ratio to ``1/L + L^-1/3 H^-1/2`` grows in H although the claim is true);
* ``exponent_<p>`` for each parameter p in which every term of the claim is a pure power of p (no
  term free of p: such a term is a floor along p; no log factor): along every line in p with at least
  :data:`MIN_LINE_LEVELS` levels, a free-exponent fit (:func:`~transformer_limits.verify.stats.power_law.fit_power_law`,
  window ``"all"`` or ``"auto"``) and :func:`~transformer_limits.verify.verdicts.rate_at_least` with the
  claim's slowest exponent in p, Bonferroni over the lines.  The log-log slope of a sum of power
  laws is a convex combination of their exponents, so it is never shallower than the slowest one;
* the lack-of-fit F test of the additive form (:func:`~transformer_limits.verify.verdicts.fit_adequate`)
  is reported as a diagnostic, not a verdict: an upper bound need not be a sum of its terms.

Each check fails a true claim with probability at most α (default 0.01); the run passes when every
check does (at most ``n_checks · α`` in all).  The result is an
:class:`~transformer_limits.verify.experiment.ExperimentResult` written by the report writer of the
built-in experiments (``results.json``, ``report.md``, ``report.html`` with log-log plots).
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from transformer_limits.errors import InputError
from transformer_limits.resource_limits import check_bootstrap
from transformer_limits.verify.rate.claim_grammar import UnknownParameterError
from transformer_limits.verify.rate.claims import RateClaim, parse_rate_claim
from transformer_limits.verify.rate.data import RateData, check_claim_range, level_text, read_rate_data

__all__ = ["MIN_LINE_LEVELS", "RateCheckResult", "rate_check"]

DEFAULT_ALPHA = 0.01
#: the violation each check of a rate check must detect by default: an exponent 0.25 slower than claimed
DEFAULT_ALTERNATIVE = 0.25
#: levels a line needs to be tested (a 2-level line has no t-interval: bootstrap only)
MIN_LINE_LEVELS = 3
#: fewest bootstrap resamples (the one-sided bounds sit at the α/n_lines quantile)
MIN_BOOTSTRAP = 100
WINDOWS = ("all", "auto")
_IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


# ------------------------------------------------------------------------------------------------
# lines of the design
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Line:
    """Points where ``param`` varies and the other parameters are ``fixed``; ``idx`` sorted by param."""

    param: str
    fixed: dict[str, float]
    idx: np.ndarray

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={level_text(v)}" for k, v in self.fixed.items()) or "all points"


def _lines(params: Mapping[str, np.ndarray], p: str) -> list[_Line]:
    """Every line in ``p`` with at least 2 levels (points are unique, so p is distinct on a line)."""
    others = [q for q in params if q != p]
    groups: dict[tuple[float, ...], list[int]] = {}
    for i in range(params[p].size):
        groups.setdefault(tuple(float(params[q][i]) for q in others), []).append(i)
    out = []
    for key in sorted(groups):
        idx = np.array(sorted(groups[key], key=lambda i: params[p][i]))
        if idx.size >= 2:
            out.append(_Line(p, dict(zip(others, key)), idx))
    return out


def _is_grid(params: Mapping[str, np.ndarray]) -> bool:
    n = next(iter(params.values())).size
    return len(params) == 2 and n == math.prod(np.unique(v).size for v in params.values())


def _exponent_testable(claim: RateClaim, p: str) -> str | None:
    """None when every term of ``claim`` is a pure power of ``p``; else why ``exponent_p`` is not made."""
    if p not in claim.parameters:
        return f"{p} is not in the claim (the claim is constant in {p})"
    free = [t for t in claim.terms if p not in t.exponents]
    if free:
        return (f"the term {free[0]} does not decay in {p} (a floor along {p}), so the error need not decay "
                f"in {p}; the bound test covers {p}")
    logs = [t for t in claim.terms if p in t.log_powers]
    if logs:
        return f"the term {logs[0]} has a log factor in {p}; the bound test covers {p}"
    return None


# ------------------------------------------------------------------------------------------------
# result
# ------------------------------------------------------------------------------------------------


@dataclass
class RateCheckResult:
    """The outcome of :func:`rate_check`: an :class:`ExperimentResult` plus what the report needs.

    ``passed``: every check passed with power (``status`` pass; ``inconclusive``: none failed but
    some had power below 0.8); ``checks``: the verdicts; ``constants``: the fitted C_k;
    :meth:`payload` is the ``results.json`` object, :meth:`write` writes the report folder, and
    Jupyter renders the verdicts and plots (``_repr_html_``).
    """

    result: Any
    experiment: Any
    config: Any
    claim: RateClaim
    data: RateData
    constants: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.result.passed

    @property
    def status(self) -> str:
        return self.result.status

    @property
    def checks(self) -> list:
        return self.result.checks

    def payload(self) -> dict:
        """The ``results.json`` object (as ``verify --format json`` prints it)."""
        from transformer_limits.verify.report import results_payload

        return results_payload(self.result, self.experiment, self.config)

    def write(self, out_dir: str | os.PathLike) -> dict:
        """Write ``results.json``, ``report.md``, ``report.html`` and the plots into ``out_dir``
        (staged, moved in together); returns the payload."""
        from transformer_limits.verify.report import write_experiment_report

        return write_experiment_report(self.result, out_dir, self.experiment, self.config)

    def __repr__(self) -> str:
        verdicts = ", ".join(f"{c.name} {c.state if c.state != 'fail' else 'FAIL'}" for c in self.checks)
        return f"RateCheckResult({self.claim.expression()!r} on {self.data.source}: {self.status}; {verdicts})"

    def _repr_html_(self) -> str:
        import base64

        from transformer_limits.verify.report import _check_rows, _e, _fit_summary, _html_table, _summary_line

        payload = self.payload()
        head, rows, states = _check_rows(payload["checks"])
        status = payload["status"]
        colour = {"pass": "#2e7d32", "fail": "#c62828", "inconclusive": "#8d6e00"}.get(status, "#e65100")
        out = [f'<div class="tl-rate-check"><p><b style="color:#fff;background:{colour};padding:.15em .5em;'
               f'border-radius:4px">{_e(_summary_line(payload))}</b> {_e(payload["title"])}</p>',
               _html_table(head, rows, states)
               .replace('<tr class="fail">', '<tr class="fail" style="background:#fbe3e3">')
               .replace('<tr class="inconclusive">', '<tr class="inconclusive" style="background:#fff6d5">'),
               f"<p>constants: {_e(_fit_summary(payload['fits']['claim_constants']))}</p>"]
        out += [f"<p>{_e(n)}</p>" for n in payload["notes"]]
        for fig in self.result.figures:
            data = base64.b64encode(fig.png).decode("ascii")
            out.append(f'<figure><img alt="{_e(fig.caption)}" src="data:image/png;base64,{data}" '
                       f'style="max-width:640px"><figcaption>{_e(fig.caption)}</figcaption></figure>')
        return "\n".join(out) + "</div>"


# ------------------------------------------------------------------------------------------------
# the check
# ------------------------------------------------------------------------------------------------


def _parse_claim(claim: Any, params: Sequence[str] | None) -> RateClaim:
    if isinstance(claim, RateClaim):
        if params is not None:
            unknown = [p for p in claim.parameters if p not in params]
            if unknown:
                raise ValueError(f"claim: parameter(s) {unknown} are not among params {list(params)}")
        return claim
    if not isinstance(claim, str):
        raise ValueError(f"claim must be a claim string such as 'L^-1 + L^-1/3 H^-1/2', got {type(claim).__name__}")
    try:
        return parse_rate_claim(claim, params=params)
    except UnknownParameterError as exc:  # keeps the symbol, so the CLI can say how to supply it
        raise UnknownParameterError(f"claim: {exc}", exc.name, exc.params) from None
    except ValueError as exc:
        raise InputError(f"claim: {exc}") from None


def _check_options(params: Sequence[str] | None, error: str, seed_column: str | None, alpha: float,
                   n_boot: int | None, seed: int, window: str, noise_floor: float | None, aggregate: str) -> None:
    from transformer_limits.verify.stats.seed_bootstrap import AGGREGATES

    if params is not None:
        if isinstance(params, str) or not all(isinstance(p, str) for p in params):
            raise ValueError(f"params must be a sequence of column names, got {params!r}")
        if not params:
            raise ValueError("params must name at least one column")
        bad = [p for p in params if not p or p[0].isdigit() or not set(p) <= _IDENT_CHARS]
        if bad:
            raise ValueError(f"params: {bad[0]!r} is not a parameter name (letters, digits, _; not starting with a digit)")
        dup = sorted({p for p in params if list(params).count(p) > 1})
        if dup:
            raise ValueError(f"params: {dup[0]!r} is given twice")
    if not isinstance(error, str) or not error:
        raise ValueError(f"error must name the error column, got {error!r}")
    if seed_column is not None and (not isinstance(seed_column, str) or not seed_column):
        raise ValueError(f"seed_column must name a column, got {seed_column!r}")
    if not (isinstance(alpha, numbers.Real) and 0.0 < alpha < 0.5):
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")
    if n_boot is not None:
        check_bootstrap(n_boot, name="n_boot")
        if n_boot < MIN_BOOTSTRAP:
            raise ValueError(f"n_boot must be >= {MIN_BOOTSTRAP} (the one-sided bounds are bootstrap quantiles), "
                             f"got {n_boot}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {window!r}")
    if noise_floor is not None:
        if window != "auto":
            raise ValueError("noise_floor needs window='auto' (it drops levels from the exponent fits)")
        if not (isinstance(noise_floor, numbers.Real) and math.isfinite(noise_floor) and noise_floor > 0):
            raise ValueError(f"noise_floor must be finite and > 0, got {noise_floor!r}")
    if aggregate not in AGGREGATES:
        raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}")


def rate_check(data: Any, claim: str | RateClaim, *, params: Sequence[str] | None = None, error: str = "error",
               seed_column: str | None = None, alpha: float = DEFAULT_ALPHA, n_boot: int | None = None,
               seed: int = 0, window: str = "all", noise_floor: float | None = None,
               aggregate: str = "mean", alternative: float = DEFAULT_ALTERNATIVE) -> RateCheckResult:
    """Check ``claim`` (e.g. ``"L^-1 + L^-1/3 H^-1/2"``) on long-format data (see the module docstring).

    ``data``: a CSV path or a mapping column -> 1-D values (:func:`read_rate_data`); ``params``: the
    parameter columns (default: the claim's symbols; extra ones are parameters the claim is constant
    in); ``error`` / ``seed_column``: column names; ``alpha``: false-failure rate of each check;
    ``n_boot``: bootstrap resamples of every fit (default: each fit's own, 2000 for power laws, 1000
    for the constants); ``seed``: the bootstrap seed (results are reproducible); ``window``:
    ``"all"`` or ``"auto"`` (the asymptotic-window rules, for the exponent fits only, with
    ``noise_floor``); ``aggregate``: the level aggregate over seeds.  Returns a
    :class:`RateCheckResult`; raises ``ValueError`` (an :class:`~transformer_limits.errors.InputError`
    for the data and the claim) naming the bad argument, before any fit.
    """
    _check_options(params, error, seed_column, alpha, n_boot, seed, window, noise_floor, aggregate)
    if not (isinstance(alternative, numbers.Real) and math.isfinite(alternative) and alternative > 0):
        raise ValueError(f"alternative must be a finite exponent distance > 0, got {alternative!r}")
    rate_claim = _parse_claim(claim, None if params is None else list(params))
    names = list(params) if params is not None else list(rate_claim.parameters)
    if not names:
        raise InputError(f"claim {rate_claim.expression()!r} has no parameter to vary")
    clash = [c for c in (error, seed_column) if c in names]
    if clash:
        raise ValueError(f"column {clash[0]!r} cannot be both a parameter and the error/seed column")
    if seed_column is not None and seed_column == error:
        raise ValueError(f"seed_column and error are the same column {error!r}")
    rd = read_rate_data(data, names, error=error, seed_column=seed_column)
    check_claim_range(rd, rate_claim)  # overflow in a fit is refused here, naming the term and the point
    if rd.n_points <= len(rate_claim.terms):
        raise InputError(f"{rd.source}: too few points for the fit: {rd.n_points} point(s) cannot test a claim "
                         f"with {len(rate_claim.terms)} constant(s) (need more points than constants)")
    lines = {p: _lines(rd.params, p) for p in names}
    grid = _is_grid(rd.params)
    if not grid:
        short = [p for p in names if not any(ln.idx.size >= MIN_LINE_LEVELS for ln in lines[p])]
        if short:
            raise InputError(f"{rd.source}: too few levels for the fit: no line with >= {MIN_LINE_LEVELS} levels of "
                             f"{short[0]!r} with the other parameters fixed (give a sweep in {short[0]}, or a "
                             "complete grid in two parameters)")
    return _analyse(rd, rate_claim, names, lines, grid, alpha=alpha, n_boot=n_boot, seed=int(seed),
                    window=window, noise_floor=noise_floor, aggregate=aggregate, alternative=float(alternative))


def _analyse(rd: RateData, claim: RateClaim, names: list[str], lines: dict[str, list[_Line]], grid: bool, *,
             alpha: float, n_boot: int | None, seed: int, window: str, noise_floor: float | None,
             aggregate: str, alternative: float) -> RateCheckResult:
    from transformer_limits.verify.check_spec import CheckSpec
    from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
    from transformer_limits.verify.stats.multi_term import fit_rate_claim
    from transformer_limits.verify.stats.power_law import fit_power_law
    from transformer_limits.verify.rate.plots import RateSeries, grid_heatmap, rate_figure
    from transformer_limits.verify.verdicts import fit_adequate

    boot: dict[str, Any] = {} if n_boot is None else {"n_boot": int(n_boot)}  # only a given n_boot is passed on
    table = {p: rd.params[p] for p in claim.parameters}
    constants = fit_rate_claim(claim, table, rd.errors, seed=seed, aggregate=aggregate, **boot)
    predicted = constants.predict(table)
    ratio = rd.errors / predicted[:, None]
    expression = claim.expression()
    checks, fits, notes = [], {"claim_constants": constants.to_dict()}, []
    specs: list[CheckSpec] = []

    # -- rate_bound_holds: err / (fitted claim) must not grow in any parameter --------------------
    if grid:
        from transformer_limits.verify.stats.ratio_trend import ratio_bound_check

        p1, p2 = names
        g1, g2 = np.unique(rd.params[p1]), np.unique(rd.params[p2])
        cube = np.empty((g1.size, g2.size, rd.n_seeds))
        mean_ratio = np.empty((g1.size, g2.size))
        for i in range(rd.n_points):
            a, b = np.searchsorted(g1, rd.params[p1][i]), np.searchsorted(g2, rd.params[p2][i])
            cube[a, b] = ratio[i]
            mean_ratio[a, b] = constants.level_errors[i] / predicted[i]
        spec = CheckSpec("rate_bound_holds", verdict="one-sided ratio trends of err / claim", alpha=alpha,
                         alternative=alternative,
                         alternative_text=f"err / claim growing like {p1}^{alternative:g} or {p2}^{alternative:g}")
        bound, _ = ratio_bound_check(
            spec.name, f"err = O({expression}): err / (fitted claim) does not grow in {p1} or {p2} over the grid",
            cube, g1, g2, alpha=spec.required_alpha, seed=seed, alternative=spec.required_alternative,
            alternative_text=spec.alternative_text, params=(p1, p2), ratio_text="err / claim", n_boot=n_boot)
        specs.append(spec)
        checks.append(bound)
        bound_rows = [{"parameter": k, "design": "joint regression over the grid", "slope": s["slope"],
                       f"lower_{1 - alpha / 2:g}_bound": s["lower"]} for k, s in bound.statistics["slopes"].items()]
    else:
        tested = [ln for p in names for ln in lines[p] if ln.idx.size >= MIN_LINE_LEVELS]
        # each line's ratio must not grow: rate_at_least(0) per line, Bonferroni over the lines (CheckSpec.decide)
        spec = CheckSpec("rate_bound_holds", verdict="rate_at_least", family="bonferroni", claimed=0.0, alpha=alpha,
                         alternative=alternative)
        ratio_fits = {f"along {ln.param} at {ln.label}": fit_power_law(
            {ln.param: rd.params[ln.param][ln.idx]}, ratio[ln.idx], window="all", seed=seed, aggregate=aggregate,
            **boot) for ln in tested}
        bound = spec.decide(ratio_fits, claim=f"err = O({expression}): err / (fitted claim) does not grow along any "
                            f"line ({len(tested)} lines)",
                            sides="one-sided per line (lower bound of the slope of err / claim), Bonferroni over the lines")
        specs.append(spec)
        checks.append(bound)
        members = bound.statistics["members"]
        bound_rows = [{"parameter": ln.param, "design": f"line at {ln.label}", "slope": m["measured"],
                       f"lower_{1 - alpha / len(tested):g}_bound": m["ci"][0], "pass": m["passed"]}
                      for ln, m in zip(tested, members.values())]

    # -- exponent_<p>: free-exponent fits along every line in p --------------------------------
    line_fits: dict[tuple[str, str], Any] = {}
    exponent_rows = []
    for p in names:
        why = _exponent_testable(claim, p)
        tested = [ln for ln in lines[p] if ln.idx.size >= MIN_LINE_LEVELS]
        for ln in tested:
            line_fits[p, ln.label] = fit_power_law({p: rd.params[p][ln.idx]}, rd.errors[ln.idx], window=window,
                                                   noise_floor=noise_floor, seed=seed, aggregate=aggregate, **boot)
            fits[f"{p} at {ln.label}"] = line_fits[p, ln.label].to_dict()
        if why is None and not tested:
            why = f"no line in {p} has >= {MIN_LINE_LEVELS} levels"
        if why is not None:
            notes.append(f"no exponent_{p} check: {why}.")
            continue
        q_exact = claim.leading_exponent(p)
        q = float(q_exact)
        # the slowest claimed exponent on every line in p: rate_at_least per line, Bonferroni over the lines
        spec = CheckSpec(f"exponent_{p}", verdict="rate_at_least", family="bonferroni", claimed=q, alpha=alpha,
                         alternative=q + alternative)
        family = spec.decide({f"along {p} at {ln.label}": line_fits[p, ln.label] for ln in tested},
                             claim=f"err decays in {p} at least like {p}^{q_exact} (slowest term "
                                   f"{claim.leading_term(p)}) on every line in {p}",
                             sides="one-sided per line (lower bound of q), Bonferroni over the lines",
                             member_claim=f"{expression} (slowest term in {p}: {p}^{q_exact})")
        for ln, m in zip(tested, family.statistics["members"].values()):
            exponent_rows.append({"parameter": p, "line": ln.label, "levels": int(ln.idx.size),
                                  "fitted_exponent": m["measured"], "claimed_slowest": q,
                                  f"lower_{1 - alpha / len(tested):g}_bound": m["ci"][0], "pass": m["passed"]})
        specs.append(spec)
        checks.append(family)

    # -- diagnostics, tables, figures ------------------------------------------------------------
    adequate = fit_adequate(constants, alpha) if math.isfinite(constants.quality.f_statistic) else None
    c_text = ", ".join(f"{k} = {v.value:.4g} (95% CI [{constants.interval(k)[0]:.4g}, {constants.interval(k)[1]:.4g}])"
                       for k, v in constants.constants.items())
    notes.insert(0, f"Fitted constants of {expression} (relative NNLS, C_k >= 0, seed-bootstrap percentile CIs): "
                    f"{c_text}; the bound test divides the errors by this fitted claim.")
    if adequate is not None:
        notes.insert(1, f"Diagnostic, not a verdict: the additive form {expression} "
                        f"{'describes' if adequate.passed else 'does not describe'} the data within seed noise "
                        f"(lack-of-fit F = {adequate.measured:.3g}, p = {adequate.statistics['p_value']:.3g}); an "
                        "upper bound need not be a sum of its terms.")
    notes.append(f"Each check has false-failure rate {alpha:g}; the run fails a true claim with probability at most "
                 f"{len(checks)} x {alpha:g}.")
    points = []
    for i in range(rd.n_points):
        e = rd.errors[i]
        points.append({**{p: float(rd.params[p][i]) for p in names}, "seeds": rd.n_seeds,
                       f"{aggregate}_error": float(constants.level_errors[i]), "min": float(e.min()),
                       "max": float(e.max()), "fitted_claim": float(predicted[i]),
                       "ratio": float(constants.level_errors[i] / predicted[i])})
    tables = {"points": points, "bound_trend": bound_rows}
    if exponent_rows:
        tables["exponents"] = exponent_rows
    figures = []
    for p in names:
        shown = lines[p]
        if len(shown) > 7:  # at most 7 series a panel: evenly spaced lines
            shown = [shown[k] for k in np.unique(np.linspace(0, len(shown) - 1, 7).round().astype(int))]
        claimed_q = None if _exponent_testable(claim, p) is not None else float(claim.leading_exponent(p))
        series = [RateSeries(ln.label, rd.params[p][ln.idx], rd.errors[ln.idx], line_fits.get((p, ln.label)),
                             claimed_q)
                  for ln in shown]
        if series:
            figures.append(rate_figure(f"rate_check_{p}", f"error vs {p} on each line in {p} (the other parameters "
                                       f"fixed); claim {expression}", series, xlabel=p, ylabel=rd.error_column))
    if grid:
        figures.append(grid_heatmap("rate_check_ratio", f"{aggregate} error / fitted claim {expression} on the grid "
                                    "(bounded = the bound holds)", mean_ratio, list(g1), list(g2), row_label=p1,
                                    col_label=p2, value_label="error / claim"))
    result = ExperimentResult("rate-check", "quick", checks=checks, fits=fits, tables=tables, figures=figures,
                              notes=notes)
    options = {"params": names, "error": rd.error_column, "seed_column": rd.seed_column, "alpha": alpha,
               "n_boot": n_boot, "window": window, "noise_floor": noise_floor, "aggregate": aggregate}
    result.provenance = {"seed": seed, "data": {"source": rd.source, "sha256": rd.sha256, "rows": rd.n_rows,
                                                "points": rd.n_points, "seeds_per_point": rd.n_seeds},
                         "options": options}
    experiment = Experiment(
        name="rate-check", title=f"Rate check of {claim.name} on {rd.source}", paper="user data",
        claim=f"err = O({expression}) in {', '.join(names)} (constants fitted; each check at alpha = {alpha:g})",
        derivations=(), checks=tuple(specs), run=lambda config: result)
    config = ExperimentConfig(profile="quick", seed=seed)
    return RateCheckResult(result, experiment, config, claim, rd,
                           {k: v.value for k, v in constants.constants.items()})
