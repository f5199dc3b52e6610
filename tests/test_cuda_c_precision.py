"""The CUDA C programs: one source, two precisions, and the math.h constants NVRTC lacks.

The C printer writes every number as a ``real`` and every math function by its overloaded name, and
``cuda_c_program`` puts ``typedef double|float real;`` and the constants in front.  So the float32
compile of every generated source must contain no double-precision arithmetic at all (checked in
nvcc's PTX where nvcc exists), and every constant a source uses (GELU's M_SQRT2 ...) must be defined
with its value: nvcc's math.h has them, NVRTC (CuPy's compiler) does not."""

from __future__ import annotations

import importlib
import math
import re
import subprocess

import pytest
import sympy as sp

from transformer_limits.numeric.backends import nvcc_path
from transformer_limits.numeric.kernel_family import CUDA_C_MATH_CONSTANTS, CUDA_C_REAL_TYPES, FAMILIES, cuda_c_program
from transformer_limits.symbolic.codegen import print_expr
from transformer_limits.symbolic.mlp_kernel import ACTIVATIONS

SHAPES = {"d": 3, "d_k": 2, "d_v": 2}
x, y = sp.symbols("x y", real=True)

#: PTX instructions computing in double precision (a float32 program must have none); conversions to
#: f64 count too (a float promoted to double on the way)
F64_OPS = re.compile(r"^\s*(?:@%p\d+\s+)?(add|sub|mul|div|fma|rcp|sqrt|rsqrt|ex2|lg2|sin|cos|max|min|neg|abs|"
                     r"setp|selp|cvt|mov|ld|st)\.[a-z0-9.]*f64\b", re.M)


def _cuda_c_sources():
    for family in FAMILIES.values():
        if "cuda-c" not in family.flavours:
            continue
        module, _, function = family.generator.partition(":")
        generate = getattr(importlib.import_module(module), function)
        choices = ([{"activation": a} for a in ACTIVATIONS] if family.params == ("activation",)
                   else [{p: SHAPES[p] for p in family.params}])
        for params in choices:
            yield f"{family.name}:{','.join(map(str, params.values()))}", generate(flavour="cuda-c", **params)[1]


SOURCES = dict(_cuda_c_sources())
DEFINED = dict(re.findall(r"#define (M_\w+) ([0-9.]+)", CUDA_C_MATH_CONSTANTS))


# ------------------------------------------------------------------ the math.h constants
def test_every_constant_a_cuda_c_source_uses_is_defined_for_nvrtc():
    used: dict[str, list[str]] = {}
    for name, source in SOURCES.items():
        for constant in set(re.findall(r"\bM_[A-Z0-9_]+\b", source)):
            used.setdefault(constant, []).append(name)
    assert "M_SQRT2" in used, "GELU's CUDA C uses M_SQRT2 (this test would not see the problem otherwise)"
    missing = {c: where for c, where in used.items() if c not in DEFINED}
    assert not missing, f"constants NVRTC lacks: {missing}"


@pytest.mark.parametrize("name, value", [("M_PI", math.pi), ("M_SQRT2", math.sqrt(2.0)), ("M_E", math.e),
                                         ("M_2_SQRTPI", 2 / math.sqrt(math.pi)), ("M_SQRT1_2", math.sqrt(0.5)),
                                         ("M_LN2", math.log(2.0)), ("M_1_PI", 1 / math.pi)])
def test_the_definitions_are_the_constants(name, value):
    assert float(DEFINED[name]) == pytest.approx(value, rel=1e-16)


# ------------------------------------------------------------------ the printer
def test_c_printer_prints_numbers_as_real():
    text = print_expr(x / 3 + sp.Rational(1, 2) * y + 2 * x * y + sp.Float(0.25) * y**3, "c")
    assert "((real)(1.0/3.0))" in text or "((real)3.0)" in text
    assert "((real)(1.0/2.0))" in text and "((real)2.0)" in text and "((real)0.25)" in text
    bare = re.sub(r"\(\(real\)\(?[-0-9.]+(?:/[-0-9.]+)?\)?\)", "", text)
    assert not re.search(r"\d\.\d", bare), f"an unwrapped number in {text!r}"


@pytest.mark.parametrize("expr", [sp.sqrt(2) * x, x / sp.pi, 2 / sp.sqrt(sp.pi) * x, 2 / sp.sqrt(sp.pi),
                                  sp.log(2) * x, sp.pi * x, sp.E * x, 1 / sp.sqrt(2)])
def test_c_printer_casts_math_constants_to_real(expr):
    text = print_expr(expr, "c")
    macros = re.findall(r"\bM_[A-Z0-9_]+\b", text)
    assert macros, text
    assert all(text.count(m) == text.count(f"((real){m})") for m in macros), text


def test_c_printer_squares_without_pow():
    # the same rule as the Python printers: x**2 -> (x*x), also in a denominator
    assert print_expr(x**2 + y, "c").count("(x*x)") == 1
    assert "pow" not in print_expr(x**2 + 1 / y**2 * 0 + x / (y * y), "c")
    assert "pow(x, ((real)3.0))" in print_expr(x**3, "c")


def test_cuda_c_program_typedefs_real():
    assert cuda_c_program("K", "float64").startswith("typedef double real;")
    assert cuda_c_program("K", "float32").startswith("typedef float real;")
    assert cuda_c_program("K").rstrip().endswith("K")
    with pytest.raises(ValueError, match="precision"):
        cuda_c_program("K", "float16")


# ------------------------------------------------------------------ the generated sources
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_cuda_c_source_computes_in_real(name):
    source = SOURCES[name]
    assert not re.search(r"\bdouble\b", source), f"{name}: writes double instead of real"
    assert not re.search(r"\bfloat\b", source), f"{name}: writes float instead of real"
    assert re.search(r"\breal\b", source)


def _ptx(tmp_path, program: str) -> str:
    src, ptx = tmp_path / "k.cu", tmp_path / "k.ptx"
    src.write_text(program)
    out = subprocess.run([nvcc_path(), "--ptx", "-arch=sm_90", "-o", str(ptx), str(src)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return ptx.read_text()


@pytest.mark.cudasim  # nvcc, twice per source: .ci/run's cudasim step
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_float32_compile_has_no_double_arithmetic(tmp_path, name):
    ptx64 = _ptx(tmp_path, cuda_c_program(SOURCES[name], "float64"))
    assert F64_OPS.search(ptx64), "float64 PTX without f64 instructions: the pattern would miss them"
    ptx32 = _ptx(tmp_path, cuda_c_program(SOURCES[name], "float32"))
    found = sorted({m.group(0).strip() for m in F64_OPS.finditer(ptx32)})
    assert not found, f"{name}: float32 program computes in double: {found[:5]}"
    assert set(re.findall(r"\.entry (\w+)", ptx32)) == set(re.findall(r"\.entry (\w+)", ptx64))


def test_precisions_are_the_two_real_types():
    assert CUDA_C_REAL_TYPES == {"float64": "double", "float32": "float"}
