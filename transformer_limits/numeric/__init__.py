"""Kernels per backend and simulators of the discrete models and their limits (no SymPy at run time).

Numba's parallel kernels here are short (one parallel region per layer or per kernel call), so the
default threading layer is ``workqueue``: OpenMP's spinning workers cost ~10 ms per region on a
loaded 2-core machine, workqueue ~0.1 ms.  Set ``NUMBA_THREADING_LAYER`` to choose another.
"""

import os as _os

if "NUMBA_THREADING_LAYER" not in _os.environ:
    _os.environ["NUMBA_THREADING_LAYER"] = "workqueue"
    import sys as _sys

    if "numba" in _sys.modules:  # numba already read its configuration: update it before any launch
        _sys.modules["numba"].core.config.THREADING_LAYER = "workqueue"
