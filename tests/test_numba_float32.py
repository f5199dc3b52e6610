"""The float32 Numba kernels: one typed source per kernel family, computed wholly in float32.

``python-numba`` has ``typed_sources``: its float32 source is the float64 one through the typed-literal
pass (:func:`transformer_limits.symbolic.codegen.typed_python_source`).  What must hold, from the
arithmetic:

* every literal, accumulator and scratch array of a float32 kernel is float32: Numba types a float
  literal (or ``math.inf``, or ``numpy.empty(n)``) as float64 and float32 op float64 is float64, so one
  would silently compute the loop in float64 (half the SIMD lanes); checked in the source (AST) and in
  the types Numba infers for every variable of every kernel;
* the float32 kernels agree with the float64 NumPy reference to float32 rounding: a sum of n terms in
  float32 is off by at most ~ n eps32 relative to the sum of |terms| in the worst case and ~ sqrt(n) eps32
  for rounding errors of random sign (eps32 = 2^-23 ~ 1.2e-7); the tolerance below is 16 sqrt(n) eps32 of
  the largest entry (n the number of atoms summed), a few times the measured error, far below anything a
  float64 kernel would be allowed to miss by, and far above float64 rounding (so the test does not ask
  for float64 accuracy);
* float32 and float64 sources are separate cache entries (spec, file, Numba cache), and the float64
  source is the one it always was (the pass is the identity on float64).
"""

from __future__ import annotations

import ast
import re

import numpy as np
import pytest

from transformer_limits import kernel_cache
from transformer_limits.numeric.attention.kernels import AttentionKernels
from transformer_limits.numeric.attention.layer import AttentionLayer
from transformer_limits.numeric.attention.reference import (attention_reference, flat_reference, jacobian_reference,
                                                            lions_reference)
from transformer_limits.numeric.flavours import CUDA_C, PYTHON_CUDA, PYTHON_NUMBA, PYTHON_NUMPY
from transformer_limits.numeric.kernel_family import (ATTENTION, ELEMENTWISE_ACTIVATION, FAMILIES, FLOW_TAYLOR_JET,
                                                      LAYER_ADJOINT, MLP_FIELD)
from transformer_limits.numeric.numba_twins import KINDS, TwinKernel, forced
from transformer_limits.numeric.runtime import Runtime

pytest.importorskip("numba")

EPS32 = float(np.finfo(np.float32).eps)
f32 = np.float32
NUMBA = "numba"  # the backend that runs PYTHON_NUMBA

#: small instances of every family (parameters of its generator)
INSTANCES = {ATTENTION.name: dict(d=3, d_k=2, d_v=3), LAYER_ADJOINT.name: dict(d=3, d_k=2, d_v=3),
             MLP_FIELD.name: dict(activation="gelu"), FLOW_TAYLOR_JET.name: dict(d=2, d_k=2, d_v=2),
             ELEMENTWISE_ACTIVATION.name: dict(activation="silu")}


def _generated(family, precision: str) -> str:
    import importlib

    module, _, function = family.generator.partition(":")
    kwargs = dict(INSTANCES[family.name], **({} if precision == "float64" else {"precision": precision}))
    return getattr(importlib.import_module(module), function)(flavour=PYTHON_NUMBA.name, **kwargs)[1]


def _is_njit(node: ast.FunctionDef) -> bool:
    return any("njit" in ast.unparse(dec) for dec in node.decorator_list)


# ------------------------------------------------------------------ the source
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_literal_of_a_float32_kernel_is_a_float32_constant(family):
    source = _generated(FAMILIES[family], "float32")
    tree = ast.parse(source)
    kernels = [n for n in tree.body if isinstance(n, ast.FunctionDef) and _is_njit(n)]
    assert kernels
    for fn in kernels:
        for node in ast.walk(fn):
            if isinstance(node, ast.Constant):
                assert not isinstance(node.value, float), f"{fn.name}: float literal {node.value!r}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math":
                assert node.attr not in ("inf", "pi", "e", "nan", "tau"), f"{fn.name}: math.{node.attr}"
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and ast.unparse(node.func) in ("numpy.empty", "numpy.zeros")):
                assert len(node.args) == 2 or any(k.arg == "dtype" for k in node.keywords), \
                    f"{fn.name}: {ast.unparse(node)} allocates float64"
    # the module constants the kernels read are numpy.float32 values (float32 literals, rounded once)
    consts = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name) and re.fullmatch(r"_F\d+|_EXP_\w+", t.id)}
    assert all(ast.unparse(v).startswith("numpy.float32(") for v in consts.values())
    assert "_REAL = numpy.float32" in source


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_float64_source_is_not_touched(family):
    source = _generated(FAMILIES[family], "float64")
    assert "numpy.float32" not in source and "_REAL" not in source
    from transformer_limits.symbolic.codegen import typed_python_source

    assert typed_python_source(source, "float64") is source


def test_only_typed_flavours_generate_a_float32_source():
    from transformer_limits.symbolic.attention_kernels import attention_kernel_source

    with pytest.raises(ValueError, match=f"precision 'float32': flavour {PYTHON_CUDA.name} computes in float64 only"):
        attention_kernel_source(2, 2, 2, PYTHON_CUDA.name, "float32")
    with pytest.raises(ValueError, match="one source for every precision"):
        attention_kernel_source(2, 2, 2, CUDA_C.name, "float32")
    with pytest.raises(ValueError, match=f"precision 'float32' is not available for the attention kernels "
                                         f"in flavour {PYTHON_CUDA.name}"):
        ATTENTION.spec(PYTHON_CUDA, "float32", d=2, d_k=2, d_v=2)


# ------------------------------------------------------------------ the cache
def test_float32_kernels_are_cached_apart_from_float64_ones(fresh_kernel_cache):
    params = dict(d=2, d_k=2, d_v=2)
    spec64 = ATTENTION.spec(PYTHON_NUMBA, **params)
    spec32 = ATTENTION.spec(PYTHON_NUMBA, "float32", **params)
    assert spec64 == f"attention:d=2:d_k=2:d_v=2:flavour={PYTHON_NUMBA.name}"  # the spec it always was
    assert spec32 == f"attention:d=2:d_k=2:d_v=2:flavour={PYTHON_NUMBA.name}:precision=float32"
    p64 = ATTENTION.source_path(PYTHON_NUMBA, **params)
    p32 = ATTENTION.source_path(PYTHON_NUMBA, "float32", **params)
    assert p64 != p32 and "_float32_" in p32.name and "float32" not in p64.name
    assert kernel_cache.lookup_source(spec32) == p32 and kernel_cache.lookup_source(spec64) == p64
    assert p64.read_text() != p32.read_text()
    # one source for every precision where the flavour is not typed (NumPy: the dtype it is given)
    assert ATTENTION.spec(PYTHON_NUMPY, "float32", **params) == ATTENTION.spec(PYTHON_NUMPY, **params)
    assert ATTENTION.source_path(PYTHON_NUMPY, "float32", **params) == ATTENTION.source_path(PYTHON_NUMPY, **params)
    # loaded as two modules (Numba's on-disk cache is keyed by the file: two caches)
    m64, m32 = ATTENTION.load(NUMBA, **params), ATTENTION.load(NUMBA, precision="float32", **params)
    assert m64 is not m32 and m64.__file__ != m32.__file__


# ------------------------------------------------------------------ the types Numba infers
def _float64_variables(dispatcher, float64_arguments: bool = False) -> list[str]:
    """Variables whose inferred type involves float64, in every compiled signature of ``dispatcher`` whose
    arguments are free of float64 (the launches of a float32 runtime; with ``float64_arguments``, the
    others).  A freshly compiled overload has the type map; one loaded from Numba's disk cache has its
    annotation as text (``name = ... :: type`` per line)."""
    bad = []
    overloads = {sig: cres for sig, cres in dispatcher.overloads.items()
                 if ("float64" in str(sig)) == float64_arguments}
    assert overloads, "kernel was not compiled for these arguments"
    for cres in overloads.values():
        ann = cres.type_annotation
        if hasattr(ann, "typemap"):
            bad += [f"{k}: {t}" for k, t in ann.typemap.items() if "float64" in str(t) or "complex" in str(t)]
        else:
            bad += [line.strip() for line in str(ann).splitlines() if re.search(r"::.*(float64|complex)", line)]
    return bad


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(f32)


def test_numba_infers_float32_for_every_variable_of_every_float32_kernel():
    """Both twins of every kernel (the parallel one and its serial twin, numeric/numba_twins.py)."""
    checked = {}
    for kind in KINDS:
        with forced(kind):
            launched = _launch_every_float32_kernel()
        checked.update({f"{name} ({kind})": getattr(k, kind) if isinstance(k, TwinKernel) else k
                        for name, k in launched.items()})
    bad = {name: found[:3] for name, disp in checked.items() if (found := _float64_variables(disp))}
    assert not bad, bad


def _launch_every_float32_kernel() -> dict:
    rng, rt = np.random.default_rng(0), Runtime(NUMBA, "float32")
    d, dk, dv, N, M, H, T = 3, 2, 3, 9, 11, 2, 3
    checked = {}
    m = ATTENTION.load(NUMBA, precision="float32", d=d, d_k=dk, d_v=dv)
    X, Y, Q, K, V = _rand(rng, N, d), _rand(rng, M, d), _rand(rng, dk, d), _rand(rng, dk, d), _rand(rng, dv, d)
    w = np.full(M, 1 / M, f32)
    KF, VF, UF = np.empty((M, dk), f32), np.empty((M, dv), f32), np.empty((M, d), f32)
    A, LZ = np.empty((N, dv), f32), np.empty(N, f32)
    rt.call(m, "key_features", M, Y, Q, K, V, KF, VF, UF)
    rt.call(m, "forward", N, X, w, Q, K, V, KF, VF, A, LZ)
    rt.call(m, "jacobian", N, X, w, Q, K, V, KF, VF, UF, A, LZ, np.empty((N, dv, d), f32))
    rt.call(m, "lions_derivative", N, X, Q, K, V, KF, VF, A, LZ, np.empty((N, M, dv, d), f32))
    rt.call(m, "flat_derivative", N, X, Q, K, V, KF, VF, A, LZ, np.empty((N, M, dv), f32))
    assert m.fast_exp(f32(0.5)) == f32(np.exp(0.5))  # compiled on its own too (inlined into the cached kernels)
    checked.update({f"attention.{k}": getattr(m, k) for k in ("key_features", "forward", "jacobian",
                                                              "lions_derivative", "flat_derivative", "fast_exp")})
    m = LAYER_ADJOINT.load(NUMBA, precision="float32", d=d, d_k=dk, d_v=dv)
    Qs, Ks, Vs, Os = _rand(rng, H, dk, d), _rand(rng, H, dk, d), _rand(rng, H, dv, d), _rand(rng, H, d, dv)
    c = np.full(H, 0.5, f32)
    QF, KT, VT = np.empty((H, N, dk), f32), np.empty((H, dk, N), f32), np.empty((H, dv, N), f32)
    A, LZ, F = np.empty((H, N, dv), f32), np.empty((H, N), f32), np.empty((N, d), f32)
    rt.call(m, "features", H * N, X, Qs, Ks, Vs, QF, KT, VT)
    tape = np.empty((H, N, N), f32)  # the softmax tape (its branch is typed either way; a float32 one)
    rt.call(m, "forward", N, QF, KT, VT, Os, c, 1.0, False, T, A, LZ, F, tape)  # beta a Python float: cast by rt
    KBP, VBP, QBAR = np.empty((T, H, dk, N), f32), np.empty((T, H, dv, N), f32), np.empty((H, N, dk), f32)
    rt.call(m, "adjoint", N, _rand(rng, N, d), Os, c, QF, KT, VT, A, LZ, 1.0, True, QBAR, KBP, VBP, tape)
    KBT, VBT = np.empty((H, dk, N), f32), np.empty((H, dv, N), f32)
    rt.call(m, "finish", N, KBP, VBP, Qs, Ks, Vs, QBAR, True, KBT, VBT, np.empty((N, d), f32))
    rt.call(m, "param_grads", N, X, _rand(rng, N, d), c, A, QBAR, KBT, VBT, np.empty((H, dk, d), f32),
            np.empty((H, dk, d), f32), np.empty((H, dv, d), f32), np.empty((H, d, dv), f32))
    rt.call(m, "features_serial", H * N, X, Qs, Ks, Vs, QF, KT, VT)
    checked.update({f"adjoint.{k}": getattr(m, k) for k in ("features", "features_serial", "forward", "adjoint",
                                                            "finish", "param_grads")})
    for act in ("relu", "gelu"):
        m = MLP_FIELD.load(NUMBA, precision="float32", activation=act)
        Phi = np.empty((N, 5), f32)
        rt.call(m, "features", 0, X, _rand(rng, 5, d), _rand(rng, 5), Phi)
        rt.call(m, "mlp_field_from_features", 0, Phi, _rand(rng, d, 5), _rand(rng, d), np.empty((N, d), f32))
        rt.call(m, "zonal_kernel_matrix", 0, X, 3.0, 0.5, 0.5, _rand(rng, 4), np.empty((N, N), f32))
        # the helpers too (compiled inside their callers when those come from Numba's disk cache)
        rt.call(m, "_activate", 0, _rand(rng, N, 5), _rand(rng, 5), 0.5, Phi)
        rt.call(m, "_zonal", 0, _rand(rng, N, N), 3.0, 0.5, 0.5, _rand(rng, 4), np.empty((N, N), f32))
        checked.update({f"mlp-{act}.{k}": getattr(m, k) for k in ("features", "mlp_field_from_features",
                                                                  "zonal_kernel_matrix", "_zonal", "_activate")})
    m = FLOW_TAYLOR_JET.load(NUMBA, precision="float32", d=d, d_k=dk, d_v=dv)
    rt.call(m, "jet", N, X, X, Y, Y, w, Q, K, V, *(np.empty((N, dv), f32) for _ in range(3)))
    checked["jet"] = m.jet
    m = ELEMENTWISE_ACTIVATION.load(NUMBA, precision="float32", activation="gelu")
    rt.call(m, "kernel", 5, _rand(rng, 5), np.empty(5, f32), np.empty(5, f32))
    checked["elementwise"] = m.kernel
    return checked


def test_a_float64_scalar_would_promote_the_loop_so_the_runtime_casts_it():
    """The check above can fail: a Python float beta passed past the runtime types the logits float64."""
    rng = np.random.default_rng(1)
    d, H, N, T = 2, 1, 5, 2
    m = LAYER_ADJOINT.load(NUMBA, precision="float32", d=d, d_k=d, d_v=d)
    QF, KT, VT = _rand(rng, H, N, d), _rand(rng, H, d, N), _rand(rng, H, d, N)
    out = np.empty((H, N, d), f32), np.empty((H, N), f32), np.empty((N, d), f32), np.empty((H, 0, 0), f32)
    with forced("serial"):
        m.forward(QF, KT, VT, _rand(rng, H, d, d), np.ones(H, f32), 1.0, False, T, *out)  # no runtime: float64 beta
    assert any("beta" in v for v in _float64_variables(m.forward.serial, float64_arguments=True))


# ------------------------------------------------------------------ accuracy against float64
def _rel(got, want) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


@pytest.mark.parametrize("weights", [False, True])
def test_float32_attention_kernels_match_the_float64_reference(weights):
    rng = np.random.default_rng(2)
    d, dk, dv, N, M = 3, 2, 3, 40, 300
    X, Y = rng.standard_normal((N, d)), rng.standard_normal((M, d))
    Q, K, V = rng.standard_normal((dk, d)), rng.standard_normal((dk, d)), rng.standard_normal((dv, d))
    w = rng.uniform(0.0, 1.0, M) if weights else None
    if weights:
        w[::7] = 0.0  # zero-weight atoms must not set the shift
    k32 = AttentionKernels(d, dk, dv, NUMBA, "float32")
    tol = 16 * np.sqrt(M) * EPS32
    for name, ref in (("attention", attention_reference), ("jacobian", jacobian_reference),
                      ("lions_derivative", lions_reference), ("flat_derivative", flat_reference)):
        got = getattr(k32, name)(X, Y, Q, K, V, w)
        want = ref(X, Y, Q, K, V, w)
        assert got.dtype == np.float32, name
        assert _rel(got, want) <= tol, (name, _rel(got, want), tol)


@pytest.mark.parametrize("causal", [False, True])
def test_float32_layer_field_and_adjoint_match_float64(causal):
    rng = np.random.default_rng(3)
    d, dk, dv, H, N = 4, 3, 4, 3, 96
    X = rng.standard_normal((N, d))
    Qs, Ks = rng.standard_normal((H, dk, d)) / 2, rng.standard_normal((H, dk, d)) / 2
    Vs, Os = rng.standard_normal((H, dv, d)) / 2, rng.standard_normal((H, d, dv)) / 2
    c, PC = np.full(H, 1.0 / H), rng.standard_normal((N, d))
    l64 = AttentionLayer(d, dk, dv, causal=causal, backend="blas")
    l32 = AttentionLayer(d, dk, dv, causal=causal, backend=NUMBA, precision="float32")
    F64, cache64 = l64.field(X, Qs, Ks, Vs, Os, c)
    F32, cache32 = l32.field(X, Qs, Ks, Vs, Os, c)
    tol = 16 * np.sqrt(N) * EPS32
    assert F32.dtype == np.float32 and _rel(F32, F64) <= tol
    for got, want in zip(l32.vjp(X, Qs, Ks, Vs, Os, c, cache32, PC), l64.vjp(X, Qs, Ks, Vs, Os, c, cache64, PC)):
        assert got.dtype == np.float32 and _rel(got, want) <= tol, _rel(got, want)
