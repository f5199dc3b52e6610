"""Reproducible seeds from pytest node ids (the ``tl_seed`` fixture of the plugin)."""

from __future__ import annotations

import hashlib

__all__ = ["SEED_BITS", "node_seed"]

#: seeds are integers in [0, 2**SEED_BITS): accepted by numpy.random.default_rng, the legacy
#: numpy.random.seed and hypothesis' @seed alike
SEED_BITS = 32


def node_seed(node_id: str, base: int = 0) -> int:
    """The seed of a test: the first 32 bits of ``sha256(f"{base}:{node_id}")`` as an integer in
    ``[0, 2**32)``.

    ``node_id`` is pytest's node id (``"tests/test_x.py::test_y[case]"``, relative to the rootdir), so
    a test gets the same seed on every run and machine, and different tests (or parametrized cases)
    get unrelated seeds.  ``base`` (>= 0) shifts every seed at once (a new family of draws)."""
    if not isinstance(node_id, str) or not node_id:
        raise ValueError(f"node_id must be a non-empty string, got {node_id!r}")
    if isinstance(base, bool) or not isinstance(base, int) or base < 0:
        raise ValueError(f"base must be a non-negative integer, got {base!r}")
    digest = hashlib.sha256(f"{base}:{node_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:SEED_BITS // 8], "big")
