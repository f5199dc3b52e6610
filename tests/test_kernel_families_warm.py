"""Kernel families and the backend vocabulary: a warm process loads every family without SymPy, and a
bad ``backend=`` is a ValueError that says what is wrong.

The warm-load test runs one script twice in fresh processes on one temporary kernel cache: the first
generates every family on every CPU flavour (SymPy imported), the second finds everything in the
cache, runs one small call of each family and must never import SymPy.  Each call is checked
against a value known in closed form, so the warm process runs real kernels, not stubs.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from transformer_limits.numeric.backends import BACKENDS, GENERATED_FLAVOURS, REGISTRY, resolve_backend
from transformer_limits.numeric.kernel_family import FAMILIES

WARM_SCRIPT = textwrap.dedent("""
    import math, sys
    import numpy as np
    from transformer_limits.numeric.attention.kernels import attention_kernels
    from transformer_limits.numeric.attention.layer import attention_layer
    from transformer_limits.numeric.attention.flow_taylor import attention_jet
    from transformer_limits.numeric.sphere.mlp_field import mlp_field_kernels
    from transformer_limits.numeric.elementwise import elementwise_activation

    X = np.array([[0.3, -0.2], [1.0, 0.5], [-0.7, 0.1]])
    I = np.eye(2)
    # attention with Q = 0: uniform softmax, so A(x_i, mu) = V * mean_j y_j for every query
    for backend in ("numpy", "numba"):
        A = attention_kernels(2, 2, 2, backend).attention(X, X, np.zeros((2, 2)), I, I)
        assert np.allclose(A, X.mean(axis=0)), backend
    # layer field with Q = 0, one head, O = V = I, c = 1: F^i = mean_j x^j (unmasked)
    layer = attention_layer(2, 2, 2, backend="numba")
    F, cache = layer.field(X, np.zeros((1, 2, 2)), I[None], I[None], I[None], np.ones(1))
    assert np.allclose(F, X.mean(axis=0))
    # the jet along a zero direction: A1 = A2 = 0, A0 = A
    A0, A1, A2 = attention_jet(X, 0 * X, X, 0 * X, np.full(3, 1 / 3), I, I, I)
    assert np.allclose(A1, 0) and np.allclose(A2, 0)
    for activation in ("relu", "tanh"):
        for backend in ("numpy", "numba"):
            k = mlp_field_kernels(activation, backend)
            U, W = np.ones((4, 2)), np.ones((2, 4))
            G = k.mlp_field(X, U, np.zeros(4), W, np.zeros(2))
            pre = X.sum(axis=1) / math.sqrt(2)
            phi = np.maximum(pre, 0) if activation == "relu" else np.tanh(pre)
            assert np.allclose(G, (4 * phi / 2)[:, None] * np.ones(2)), (activation, backend)
            f = elementwise_activation(activation, backend)(pre)
            dphi = np.where(pre > 0, 1.0, 0.0) if activation == "relu" else 1 - np.tanh(pre) ** 2
            assert np.allclose(f["phi"], phi) and np.allclose(f["dphi"], dphi), (activation, backend)
    print("sympy" in sys.modules)
""")


def test_warm_processes_load_every_kernel_family_without_sympy(tmp_path):
    env = dict(os.environ, TRANSFORMER_LIMITS_CACHE=str(tmp_path / "kc"), NUMBA_ENABLE_CUDASIM="0")
    cold = subprocess.run([sys.executable, "-c", WARM_SCRIPT], env=env, capture_output=True, text=True)
    assert cold.returncode == 0, cold.stderr
    assert cold.stdout.split()[-1] == "True"  # an empty cache: generated with SymPy
    warm = subprocess.run([sys.executable, "-c", WARM_SCRIPT], env=env, capture_output=True, text=True)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.split()[-1] == "False", "a warm load imported SymPy"


def test_every_backend_is_one_record_with_its_arrays_device_and_flavour():
    assert BACKENDS == ("numpy", "numba", "numba-cuda", "numba-cuda-sim", "cupy")  # the test fixture
    assert set(REGISTRY) == set(BACKENDS) | {"blas"}
    for name, b in REGISTRY.items():
        assert b.name == name and b.array_module in ("numpy", "cupy") and b.device in ("cpu", "cuda")
        assert (b.flavour in GENERATED_FLAVOURS) == (name != "blas")
        assert isinstance(b.available, bool) and b.reason
    assert REGISTRY["numpy"].available and REGISTRY["blas"].available


def test_every_family_declares_backends_and_one_spec_per_instance():
    for family in FAMILIES.values():
        assert family.backends(), family.name
        params = {p: 2 if p.startswith("d") else "relu" for p in family.params}
        specs = {family.spec(f, **params) for f in family.flavours}
        assert len(specs) == len(family.flavours)  # the flavour is part of the spec
        with pytest.raises(ValueError, match="takes parameters"):
            family.spec(next(iter(family.flavours)), wrong=1)


def test_unknown_backend_names_the_argument_and_the_known_ones():
    from transformer_limits.numeric.attention.kernels import AttentionKernels

    with pytest.raises(ValueError, match=r"unknown backend 'gpu' \(known: numpy, blas, numba, numba-cuda"):
        AttentionKernels(2, 2, 2, backend="gpu")
    with pytest.raises(ValueError, match="unknown backend"):
        resolve_backend(None, GENERATED_FLAVOURS, "anything")


def test_backend_without_the_family_flavour_lists_the_supported_ones():
    from transformer_limits.numeric.attention.kernels import AttentionKernels
    from transformer_limits.numeric.sphere.mlp_field import MLPFieldKernels

    with pytest.raises(ValueError, match=r"not supported by the attention kernels \(supported: numpy, numba, "):
        AttentionKernels(2, 2, 2, backend="blas")
    with pytest.raises(ValueError, match=r"not supported by the MLP-field kernels \(supported: numpy, numba, "
                                          r"numba-cuda, numba-cuda-sim, cupy\)"):
        MLPFieldKernels("relu", backend="blas")


def test_unavailable_backend_states_the_probe_reason():
    unavailable = [b for b in REGISTRY.values() if not b.available and b.flavour.on_device]
    if not unavailable:
        pytest.skip("every GPU backend is usable here")
    from transformer_limits.numeric.attention.kernels import AttentionKernels

    b = unavailable[0]
    with pytest.raises(ValueError, match=f"backend '{b.name}' is not usable here: "):
        AttentionKernels(2, 2, 2, backend=b.name)
    with pytest.raises(ValueError) as info:
        AttentionKernels(2, 2, 2, backend=b.name)
    assert b.reason in str(info.value)


def test_layer_blas_backend_still_runs_any_size():
    from transformer_limits.numeric.attention.layer import LAYER_BACKENDS, AttentionLayer

    assert LAYER_BACKENDS == ("numpy", "blas", "numba", "numba-cuda", "numba-cuda-sim", "cupy")
    layer = AttentionLayer(3, 1, 1, backend="blas")
    X = np.eye(3)
    F, _ = layer.field(X, np.zeros((1, 1, 3)), np.zeros((1, 1, 3)), np.ones((1, 1, 3)), np.ones((1, 3, 1)),
                       np.ones(1))
    assert np.allclose(F, 1.0)  # uniform softmax, V x^j = 1 for every j, so A = 1 and F = O A = (1, 1, 1)
