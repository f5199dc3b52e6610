"""transformer_limits: derive, generate kernels, simulate, and verify scaling limits of transformers.

Layout (data flows one way)::

    symbolic/   SymPy derivations and code generation
    numeric/    kernels per backend and simulators (no SymPy at run time)
    verify/     claims, fits, verdicts and reports

Quick use::

    >>> import transformer_limits as tl
    >>> d = tl.derivation("attention-lions-derivative", d=2, d_k=2, d_v=2)
    >>> d.latex["lions_derivative"]  # doctest: +ELLIPSIS
    '...'
"""

__version__ = "0.1.0"


def derivation(name, **params):
    """Build a named derivation; see :func:`transformer_limits.symbolic.derivation.derivation`."""
    from transformer_limits.symbolic.derivation import derivation as _derivation

    return _derivation(name, **params)


def derivation_values(name, **params):
    """The numeric values of a named derivation, cached on disk; see
    :func:`transformer_limits.symbolic.derivation_cache.derivation_values`."""
    from transformer_limits.symbolic.derivation_cache import derivation_values as _values

    return _values(name, **params)


def list_derivations():
    """Registered derivations (name, title, parameters)."""
    from transformer_limits.symbolic.derivation import list_derivations as _list

    return _list()


__all__ = ["__version__", "derivation", "derivation_values", "list_derivations"]
