"""What a report records about the run that produced a result: versions of the scientific stack, the
platform, the git commit, the config as asked and its hash (``results.json``'s ``provenance``; the
schema is in ``docs/reports.md``)."""

from __future__ import annotations

import hashlib
import platform
import re
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
from transformer_limits.verify.sweeps import canonical_json

__all__ = ["config_hash", "environment", "run_provenance"]

_PACKAGES = ("numpy", "scipy", "sympy", "numba", "matplotlib", "transformer_limits")




def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def _git_commit() -> str | None:
    """``git rev-parse HEAD`` of the checkout holding this package; None outside git (or no git)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", commit) else None


@lru_cache(maxsize=1)
def environment() -> dict[str, Any]:
    """Versions of Python and the scientific stack, the platform and the git commit (cached)."""
    from transformer_limits import __version__

    versions: dict[str, str | None] = {"python": platform.python_version()}
    versions.update({p: _version(p) for p in _PACKAGES})
    versions["transformer_limits"] = versions["transformer_limits"] or __version__
    return {"versions": versions, "platform": platform.platform(), "git_commit": _git_commit()}


def config_hash(experiment: str, config: ExperimentConfig) -> str:
    """SHA-256 (hex) of the canonical JSON of the experiment name and the result-determining config
    (profile, seed and a float32 precision; workers, scheduler, store, progress and device change how,
    not what, is computed; float64 is left out so that hashes from before the option stay valid)."""
    cfg: dict[str, Any] = {"profile": config.profile, "seed": config.seed}
    if config.precision != "float64":
        cfg["precision"] = config.precision
    key = {"experiment": experiment, "config": cfg}
    return hashlib.sha256(canonical_json(key).encode("utf-8")).hexdigest()


def run_provenance(result: ExperimentResult, experiment: Experiment, config: ExperimentConfig) -> dict:
    """The ``provenance`` of ``results.json``: the run's own entries, then versions, platform, git commit,
    the config as asked and its :func:`config_hash`."""
    env = environment()
    prov = dict(result.provenance)
    prov.setdefault("seeds", {"base": config.seed})
    prov.setdefault("timings", {})
    prov.update(versions=env["versions"], platform=env["platform"], git_commit=env["git_commit"],
                config=config.to_dict(), config_hash=config_hash(experiment.name, config))
    return prov
