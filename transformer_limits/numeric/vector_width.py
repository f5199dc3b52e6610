"""512-bit vectors for the generated Numba kernels on CPUs with AVX-512.

LLVM tunes Ice Lake, Rocket Lake, Sapphire Rapids and their kin with ``prefer-256-bit``: loops are
vectorised four doubles wide although the CPU has 512-bit registers (a guard against the frequency
drop of early AVX-512 parts).  The pair loops of the attention kernels (logits, the vectorised
``fast_exp``, the weighted sums) are compute-bound, and eight lanes measured faster on this project's
2-core Rocket Lake machine: the ``attention-adjoint`` family at d = 2, H = 4, N = 1024, one thread,
forward 6.6 → 5.5 ms and adjoint 7.7 → 5.7 ms (docs/performance.md).

:func:`prefer_wide_vectors` turns the tuning off for the process (``numba.config.CPU_NAME`` /
``CPU_FEATURES`` = the host's, plus ``-prefer-256-bit``) when

* the host has ``avx512f``,
* neither ``NUMBA_CPU_NAME`` nor ``NUMBA_CPU_FEATURES`` is set (a user's choice wins; so does
  ``TRANSFORMER_LIMITS_VECTOR_WIDTH=256``), and
* Numba has not compiled anything yet in this process: its target machine is built once, on the
  first compilation, and Numba's cache index names the CPU features, so changing them afterwards would
  file code under features it was not compiled for.

Numba caches per CPU name and feature string, so kernels compiled either way live side by side.  Both
serial and parallel twins are compiled the same way (they stay bit for bit equal); against 256-bit
code, reductions under ``reassoc`` may differ in the last bits.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["ENV_VAR", "prefer_wide_vectors", "wide_vectors_active"]

#: set to ``256`` to keep LLVM's default vector width for the generated kernels
ENV_VAR = "TRANSFORMER_LIMITS_VECTOR_WIDTH"
_TUNING = "-prefer-256-bit"
_decided: bool | None = None


def _numba_target_initialised() -> bool:
    from numba.core.registry import cpu_target

    return "_toplevel_target_context" in vars(cpu_target)  # a cached_property, set on first compilation


def _numba_config() -> Any:
    from numba.core import config  # its attributes are set from the environment at import: untyped

    return config


def prefer_wide_vectors() -> bool:
    """Switch Numba to 512-bit vectors if the conditions above hold (once per process); True when the
    process compiles with them."""
    global _decided
    if _decided is not None:
        return _decided
    import llvmlite.binding as ll

    config = _numba_config()

    width = os.environ.get(ENV_VAR, "512")
    if width not in ("256", "512"):
        raise ValueError(f"{ENV_VAR} must be 256 or 512, got {width!r}")
    features = ll.get_host_cpu_features()
    wanted = (width == "512"
              and "NUMBA_CPU_NAME" not in os.environ and "NUMBA_CPU_FEATURES" not in os.environ
              and features.get("avx512f", False) and not _numba_target_initialised())
    if wanted:
        config.CPU_NAME = ll.get_host_cpu_name()
        config.CPU_FEATURES = f"{features.flatten()},{_TUNING}"
    _decided = wide_vectors_active()
    return _decided


def wide_vectors_active() -> bool:
    """True when Numba's configured CPU features turn ``prefer-256-bit`` off."""
    features = _numba_config().CPU_FEATURES
    return bool(features) and str(features).endswith(_TUNING)
