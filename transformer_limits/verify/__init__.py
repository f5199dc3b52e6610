"""Rate claims, fits with confidence intervals, verdicts, sweeps and experiments: the public API.

The names in ``__all__`` are what users call; every other module and name is internal and may
change.  Each name is imported from its module on first use (PEP 562), so
``import transformer_limits.verify`` stays light (no SymPy, SciPy or Numba until a name needs it).

* claims: :func:`parse_rate_claim`, :class:`RateClaim`, :class:`RateTerm`
  (docs/verification.md);
* your own data: :func:`rate_check`, :class:`RateCheckResult` (docs/rate_check.md);
* fits: :func:`fit_power_law` (``log ē = log C + q log p``), :func:`fit_rate_claim`
  (``ē ≈ Σ_k C_k m_k``), :func:`local_orders`, :func:`choose_asymptotic_window`;
* verdicts (tests whose null hypothesis is the claim, false-failure rate ``alpha``):
  :func:`rate_at_least`, :func:`exponent_equals`, :func:`slope_zero`, :func:`constant_below`,
  :func:`fit_adequate`, their result :class:`Check` (its ``state``: pass, inconclusive or fail, with
  its ``power`` against the declared alternative; :func:`attach_power`), and :func:`assert_rate`
  for pytest (:class:`InconclusiveWarning` when a claim is not contradicted but undecided);
* Taylor-remainder tests: :func:`taylor_test`;
* experiments and sweeps: :class:`Experiment`, :class:`ExperimentConfig`,
  :class:`ExperimentResult`, :class:`CheckSpec`, :func:`register_experiment`, :func:`run_experiment`,
  :func:`run_points`, :func:`run_sweep` (docs/extending.md, docs/sweeps.md).

Modules stay importable by path, e.g. ``from transformer_limits.verify.experiment import Figure``.
"""

from transformer_limits.lazy_exports import install_lazy_exports

# public name -> module of this package that defines it
_EXPORTS = {
    # rate claims
    "parse_rate_claim": "rate.claims",
    "RateClaim": "rate.claims",
    "RateTerm": "rate.claims",
    # a claimed rate on the user's own data
    "rate_check": "rate.check",
    "RateCheckResult": "rate.check",
    "read_rate_data": "rate.data",
    "RateData": "rate.data",
    # fits
    "fit_power_law": "stats.power_law",
    "PowerLawFit": "stats.power_law",
    "fit_rate_claim": "stats.multi_term",
    "MultiTermFit": "stats.multi_term",
    "FitQuality": "stats.fit_quality",
    "Estimate": "stats.estimate",
    "local_orders": "stats.asymptotic_window",
    "LocalOrders": "stats.asymptotic_window",
    "choose_asymptotic_window": "stats.asymptotic_window",
    "AsymptoticWindow": "stats.asymptotic_window",
    # verdicts
    "Check": "verdicts",
    "rate_at_least": "verdicts",
    "exponent_equals": "verdicts",
    "slope_zero": "verdicts",
    "constant_below": "verdicts",
    "fit_adequate": "verdicts",
    "assert_rate": "assertions",
    "InconclusiveWarning": "assertions",
    "attach_power": "verdicts",
    "taylor_test": "taylor",
    "TaylorResult": "taylor",
    # experiments
    "Experiment": "experiment",
    "ExperimentConfig": "experiment",
    "run_settings": "experiment",
    "PrecisionError": "experiment",
    "ExperimentResult": "experiment",
    "Figure": "experiment",
    "CheckSpec": "check_spec",
    "register_experiment": "registry",
    "list_experiments": "registry",
    "experiment_spec": "registry",
    "load_experiment_file": "registry",
    "plugin_errors": "registry",
    "missing_requirement": "running",
    "run_experiment": "running",
    "run_points": "running",
    "jsonable_settings": "running",
    "RateSeries": "rate.plots",
    "rate_figure": "rate.plots",
    # sweeps
    "run_sweep": "sweeps",
    "load_sweep": "sweeps",
    "load_grid": "sweeps",
    "Grid": "sweeps",
    "Factor": "sweeps",
    "GridPoint": "sweeps",
    "PointRecord": "sweeps",
    "SweepStore": "sweeps",
    "SweepResult": "sweeps",
    "SweepError": "sweeps",
}

__all__ = install_lazy_exports(__name__, _EXPORTS)
