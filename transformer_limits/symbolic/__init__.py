"""SymPy derivations (no NumPy arrays, no loops) and code generation from them: the public API.

The names in ``__all__`` are what users call: the registry of named derivations.  Every other
module and name is internal and may change.  Each name is imported from its module on first use
(PEP 562), so ``import transformer_limits.symbolic`` does not import SymPy; the first derivation
does.

* :func:`derivation` builds a named derivation (a :class:`Derivation`: expressions, LaTeX,
  assumptions, checks, values); :func:`list_derivations` and :func:`derivation_spec` describe the
  registered ones and their parameters (:class:`DerivationSpec`, :class:`Param`);
* :func:`derivation_values` gives a derivation's numeric values from an on-disk cache (no SymPy on a
  hit), for runs that need a derived constant;
* :func:`register_derivation` registers a builder.  Derivation modules of this package register
  theirs on import and are discovered on first use of the registry (docs/contributing.md);
* :func:`write_derivation_docs` writes one Markdown page per derivation (``docs/derivations``).

Modules stay importable by path, e.g. ``from transformer_limits.symbolic import attention``.
"""

from transformer_limits.lazy_exports import install_lazy_exports

# public name -> module of this package that defines it
_EXPORTS = {
    "derivation": "derivation",
    "Derivation": "derivation",
    "list_derivations": "derivation",
    "derivation_spec": "derivation",
    "DerivationSpec": "derivation",
    "Param": "derivation",
    "CheckLine": "derivation",
    "register_derivation": "derivation",
    "write_derivation_docs": "derivation_docs",
    "derivation_values": "derivation_cache",
}

__all__ = install_lazy_exports(__name__, _EXPORTS)
