"""Property-based and rate assertions for your own tests: the public API.

Three assertions, each raising ``AssertionError`` with a readable table when its claim is
contradicted and returning the deciding :class:`~transformer_limits.verify.Check` otherwise:

* :func:`assert_taylor_rate` — a derivative (``jvp``, optionally the second directional derivative
  ``hvp``) is right when the Taylor remainder ``|f(x + h dx) − f(x) − h·jvp|`` decays like ``h^2``
  (``h^3`` with ``hvp``), decided by a power-law fit with a confidence interval;
* :func:`assert_rate` — errors over a refinement parameter obey a claimed rate
  (:func:`transformer_limits.verify.assert_rate`, recorded for ``pytest --tl-report``);
* :func:`assert_identity` — a SymPy identity, proved by ``simplify`` or checked at random points with
  mpmath at high precision;

and :func:`node_seed`, the reproducible seed of a pytest node id (the ``tl_seed`` fixture).

Hypothesis strategies for measures, sphere points, attention parameters, inputs, activations and
rate claims are in :mod:`transformer_limits.testing.strategies`; the pytest plugin
(``pytest --tl-report DIR``, fixtures ``tl_profile`` and ``tl_seed``) is
``transformer_limits.testing.pytest_plugin``.  Tutorial: docs/testing.md.

Each name is imported on first use (PEP 562): ``import transformer_limits.testing`` imports neither
SymPy, SciPy nor hypothesis.
"""

from transformer_limits.lazy_exports import install_lazy_exports

# public name -> module of this package that defines it
_EXPORTS = {
    "assert_taylor_rate": "taylor_rate",
    "assert_rate": "rates",
    "assert_identity": "identity",
    "node_seed": "seeds",
}

__all__ = install_lazy_exports(__name__, _EXPORTS)
