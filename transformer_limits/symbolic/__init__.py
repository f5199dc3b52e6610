"""SymPy derivations (no NumPy arrays, no loops) and code generation from them.

Derivation modules in this package register named derivations on import; see
:mod:`transformer_limits.symbolic.derivation`.
"""

from transformer_limits.symbolic.derivation import (
    Derivation,
    Param,
    derivation,
    list_derivations,
    register_derivation,
)

__all__ = ["Derivation", "Param", "derivation", "list_derivations", "register_derivation"]
