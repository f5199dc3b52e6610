"""512-bit vectors for the generated Numba kernels (transformer_limits/numeric/vector_width.py).

Each case runs in a fresh interpreter: Numba's target machine is built once per process, so the
switch is only possible before the first compilation, and the test must see that first compilation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import llvmlite.binding as ll
import numpy as np
import pytest

HOST_HAS_AVX512 = bool(ll.get_host_cpu_features().get("avx512f", False))

PROBE = textwrap.dedent("""
    import json, sys
    import numba
    from numba.core import config
    from transformer_limits.numeric import vector_width
    if sys.argv[1] == "compile-first":
        numba.njit(lambda x: x + 1)(1)
    active = vector_width.prefer_wide_vectors()
    again = vector_width.prefer_wide_vectors()
    print(json.dumps({"active": active, "again": again, "name": config.CPU_NAME,
                      "features": config.CPU_FEATURES}))
""")


def probe(mode: str = "plain", **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "TRANSFORMER_LIMITS_VECTOR_WIDTH")}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env=dict(clean, **env), capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_wide_vectors_follow_the_host():
    got = probe()
    assert got["active"] is HOST_HAS_AVX512 and got["again"] is HOST_HAS_AVX512
    if HOST_HAS_AVX512:
        # the host's own features, with LLVM's 256-bit preference turned off and nothing else changed
        assert got["name"] == ll.get_host_cpu_name()
        assert got["features"] == ll.get_host_cpu_features().flatten() + ",-prefer-256-bit"
    else:
        assert got["name"] is None and got["features"] is None


def test_a_users_numba_cpu_choice_wins():
    got = probe(NUMBA_CPU_NAME="generic")
    assert got["active"] is False and got["name"] == "generic"


def test_a_users_own_feature_string_is_kept_and_not_reported_wide():
    host = ll.get_host_cpu_features().flatten()
    got = probe(NUMBA_CPU_FEATURES=host)
    assert got["active"] is False and got["features"] == host


def test_the_opt_out_keeps_llvms_default():
    got = probe(TRANSFORMER_LIMITS_VECTOR_WIDTH="256")
    assert got["active"] is False and got["name"] is None and got["features"] is None


def test_nothing_changes_after_numbas_first_compilation():
    # the target machine exists already: changing the features now would mislabel the cache
    got = probe("compile-first")
    assert got["active"] is False and got["name"] is None and got["features"] is None


FIELD = textwrap.dedent("""
    import json
    import numpy as np
    from transformer_limits.numeric.attention.layer import AttentionLayer
    from transformer_limits.numeric.vector_width import wide_vectors_active
    rng = np.random.default_rng(3)
    H, N, d = 4, 97, 2
    X = rng.standard_normal((N, d))
    Qs, Ks, Vs, Os = (rng.standard_normal((H, d, d)) for _ in range(4))
    F, _ = AttentionLayer(d, d, d, backend="numba").field(X, Qs, Ks, Vs, Os, np.full(H, 1.0 / H))
    print(json.dumps({"wide": wide_vectors_active(), "F": F.ravel().tolist()}))
""")


@pytest.mark.skipif(not HOST_HAS_AVX512, reason="the host has no AVX-512")
def test_wide_and_narrow_kernels_differ_by_rounding_only():
    runs = {}
    for width in ("512", "256"):
        env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")}
        out = subprocess.run([sys.executable, "-c", FIELD], env=dict(env, TRANSFORMER_LIMITS_VECTOR_WIDTH=width),
                             capture_output=True, text=True, timeout=300, check=True)
        runs[width] = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs["512"]["wide"] is True and runs["256"]["wide"] is False
    np.testing.assert_allclose(runs["512"]["F"], runs["256"]["F"], rtol=1e-13, atol=1e-15)


def test_a_bad_width_is_a_value_error_naming_the_variable(monkeypatch):
    from transformer_limits.numeric import vector_width

    monkeypatch.setattr(vector_width, "_decided", None)
    monkeypatch.setenv("TRANSFORMER_LIMITS_VECTOR_WIDTH", "wide")
    with pytest.raises(ValueError, match="TRANSFORMER_LIMITS_VECTOR_WIDTH must be 256 or 512, got 'wide'"):
        vector_width.prefer_wide_vectors()
