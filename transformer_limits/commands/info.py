"""``transformer-limits info``: versions, which kernel backends are usable here (with reasons) and the
device ``--device auto`` would use, and why (:meth:`transformer_limits.numeric.devices.RunTarget.resolve`)."""

from __future__ import annotations

import argparse
import platform
import sys

from transformer_limits.commands._outcome import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="versions and backend availability",
                       description="Print versions and which kernel backends are usable here.")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import mpmath
    import numpy
    import scipy
    import sympy

    from transformer_limits import __version__
    from transformer_limits.numeric.backends import backend_status, nvcc_path
    from transformer_limits.numeric.devices import RunTarget
    from transformer_limits.kernel_cache import cache_dir

    versions = {
        "transformer_limits": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "sympy": sympy.__version__,
        "mpmath": mpmath.__version__,
    }
    from transformer_limits import resource_limits as rl

    backends = [s.__dict__ for s in backend_status()]
    auto = RunTarget.resolve("auto")
    limits = {"max_bootstrap_replicates": rl.MAX_BOOTSTRAP_REPLICATES,
              "memory_budget_bytes": rl.MEMORY_BUDGET_BYTES,
              "max_kernel_dimension": rl.MAX_KERNEL_DIMENSION}
    payload = {
        "versions": versions,
        "backends": backends,
        "device": {"device": auto.device, "reason": auto.reason},
        "nvcc": nvcc_path(),
        "kernel_cache": str(cache_dir()),
        "platform": platform.platform(),
        "limits": limits,
    }
    lines = ["transformer_limits " + __version__, "", "versions:"]
    lines += [f"  {k:<20} {v}" for k, v in versions.items()]
    lines += ["", "backends:"]
    for b in backends:
        mark = "yes" if b["available"] else "no "
        ver = b["version"] or "-"
        lines.append(f"  {b['name']:<16} {mark}  {ver:<10} {b['reason']}")
    lines += ["", f"device: {auto.device} (why: {auto.reason}), what --device auto uses"]
    lines += ["", f"nvcc:          {payload['nvcc'] or 'not on PATH (CUDA C sources are not compiled)'}",
              f"kernel cache:  {payload['kernel_cache']}",
              "", "stated limits (transformer_limits.resource_limits):",
              f"  bootstrap replicates  <= {rl.MAX_BOOTSTRAP_REPLICATES}",
              f"  memory per step       <= {rl.format_bytes(rl.MEMORY_BUDGET_BYTES)}",
              f"  kernel d, d_k, d_v    <= {rl.MAX_KERNEL_DIMENSION}"]
    emit(payload, args.format, "\n".join(lines))
    return 0
