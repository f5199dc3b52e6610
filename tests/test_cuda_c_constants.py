"""Every math.h constant a generated CUDA C source uses is defined for NVRTC (CuPy's compiler has no
math.h): the C99 printer writes e.g. M_SQRT2 and M_PI for GELU, which nvcc would accept and NVRTC not."""

from __future__ import annotations

import importlib
import math
import re

import pytest

from transformer_limits.numeric.kernel_family import CUDA_C_MATH_CONSTANTS, FAMILIES
from transformer_limits.symbolic.mlp_kernel import ACTIVATIONS

DEFINED = dict(re.findall(r"#define (M_\w+) ([0-9.]+)", CUDA_C_MATH_CONSTANTS))
SHAPES = {"d": 3, "d_k": 2, "d_v": 2}


def _cuda_c_sources():
    for family in FAMILIES.values():
        if "cuda-c" not in family.flavours:
            continue
        module, _, function = family.generator.partition(":")
        generate = getattr(importlib.import_module(module), function)
        choices = ([{"activation": a} for a in ACTIVATIONS] if family.params == ("activation",)
                   else [{p: SHAPES[p] for p in family.params}])
        for params in choices:
            yield family.name, params, generate(flavour="cuda-c", **params)[1]


def test_every_constant_a_cuda_c_source_uses_is_defined_for_nvrtc():
    used = {}
    for name, params, source in _cuda_c_sources():
        for constant in set(re.findall(r"\bM_[A-Z0-9_]+\b", source)):
            used.setdefault(constant, []).append((name, tuple(params.values())))
    assert "M_SQRT2" in used, "GELU's CUDA C uses M_SQRT2 (this test would not see the problem otherwise)"
    missing = {c: where for c, where in used.items() if c not in DEFINED}
    assert not missing, f"constants NVRTC lacks: {missing}"


@pytest.mark.parametrize("name, value", [("M_PI", math.pi), ("M_SQRT2", math.sqrt(2.0)), ("M_E", math.e),
                                         ("M_2_SQRTPI", 2 / math.sqrt(math.pi)), ("M_SQRT1_2", math.sqrt(0.5)),
                                         ("M_LN2", math.log(2.0)), ("M_1_PI", 1 / math.pi)])
def test_the_definitions_are_the_constants(name, value):
    assert float(DEFINED[name]) == pytest.approx(value, rel=1e-16)
