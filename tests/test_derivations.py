"""Symbolic attention calculus: closed forms vs SymPy differentiation, and the identity test says no
to wrong formulas."""

import pytest
import sympy as sp

import transformer_limits as tl
from transformer_limits.symbolic import attention as sym
from transformer_limits.testing import assert_identity


def _identity_holds(s, lhs, rhs):
    """Both checks: the exact one of the derivations (exponentials named, rational points) and the
    public ``assert_identity`` (mpmath at 30 digits at its 8 random points, relative tolerance 1e-20;
    ``simplify=False``: the exact check beside it is the proof; most of the cost is lambdify, not the
    points)."""
    assert sym.prove_identity(s, lhs, rhs)
    assert assert_identity(lhs, rhs, simplify=False).passed


def _identity_fails(s, lhs, rhs):
    assert not sym.prove_identity(s, lhs, rhs)
    with pytest.raises(AssertionError, match="identity"):
        assert_identity(lhs, rhs, simplify=False)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 2, 2, 2), (3, 2, 1, 3), (2, 3, 3, 2)])
def test_closed_forms_equal_sympy_derivatives(shape):
    s = sym.attention_symbols(*shape)
    _identity_holds(s, sym.flat_derivative(s), sym.closed_flat(s))
    _identity_holds(s, sym.lions_derivative(s), sym.closed_lions(s))
    _identity_holds(s, sym.spatial_jacobian(s), sym.closed_jacobian(s))


def test_empirical_identity_per_atom():
    s = sym.attention_symbols(2, 2, 2, 3)
    A, lions = sym.attention_value(s), sym.closed_lions(s)
    for w, y in zip(s.ws, s.ys):
        _identity_holds(s, A.jacobian(y), w * lions.xreplace(dict(zip(s.z, y))))


@pytest.mark.parametrize("mutate", [
    lambda s: -sym.closed_lions(s),                                  # wrong sign
    lambda s: sym.closed_lions(s) - sym._pi(s, s.z) * s.V,           # dropped V term
    lambda s: sym.closed_lions(s).T if s.d == s.d_v else None,       # transposed
    lambda s: sym._pi(s, s.z) * (s.V + (s.V * s.z - sym.attention_value(s)) * (s.Q.T * (s.K * s.x)).T),  # Q<->K
])
def test_wrong_lions_formulas_are_rejected(mutate):
    s = sym.attention_symbols(2, 2, 2, 2)
    wrong = mutate(s)
    assert wrong is not None
    _identity_fails(s, sym.lions_derivative(s), wrong)


def test_unnamed_exponential_fails_rather_than_passes():
    s = sym.attention_symbols(1, 1, 1, 1)
    other = sym.closed_flat(s) + sp.Matrix([sp.exp(s.x[0] ** 3)])
    _identity_fails(s, sym.closed_flat(s), other)


def test_derivation_objects_render():
    d = tl.derivation("attention-lions-derivative", d=2, d_k=1, d_v=2)
    assert d.expressions["lions_derivative"].shape == (2, 2)
    latex = d._repr_latex_()
    assert latex.startswith("$") and "partial_\\mu" in latex
    md = d.to_markdown()
    assert "## How it was checked" in md and "kernels/" in md
    assert d is tl.derivation("attention-lions-derivative", d=2, d_k=1, d_v=2)  # cached


def test_multi_head_field_expression():
    d = tl.derivation("attention", d=1, d_k=1, d_v=1, n_atoms=1, heads=2)
    gamma = d.expressions["Gamma"]
    # one atom: each head's A is V_h y, so Gamma = (O0 V0 + O1 V1) y / 2
    y = sp.Symbol("y0_0", real=True)
    want = (sp.Symbol("O0_0_0", real=True) * sp.Symbol("V0_0_0", real=True)
            + sp.Symbol("O1_0_0", real=True) * sp.Symbol("V1_0_0", real=True)) * y / 2
    check = assert_identity(gamma[0], want)
    assert check.statistics["method"] == "sympy.simplify(lhs - rhs) == 0"  # proved, not sampled
