"""Crude global bounds on softmax attention and its derivatives (THEORY.md 1.3).

If supp mu ⊂ B(0, R), ||Q^T K|| <= R_theta^2 and ||V|| <= R_theta^2 (operator norms; fold a head's
output matrix O into V, i.e. ||O V|| <= R_theta^2), then for |x| = r:

    pi_mu(x, z)          <= exp(2 R_theta^2 R r)                       (kernel bound)
    |A(x, mu)|           <= R_theta^2 R
    ||grad_x A(x, mu)||  <= 2 R_theta^4 R^2
    ||d_mu A(x, mu)(z)|| <= exp(2 R_theta^2 R r) (R_theta^2 + 2 R_theta^4 R r)

Proof sketch (each step is one line): |<Qx, Ky>| = |x^T (Q^T K) y| <= R_theta^2 r R, so the softmax
density is at most e^{R_theta^2 R r} / e^{-R_theta^2 R r}; A is a pi mu-average of V y with
|V y| <= R_theta^2 R; grad_x A = Cov(V y, Q^T K y) with |V y - A| <= 2 R_theta^2 R and
|Q^T K y| <= R_theta^2 R; the Lions derivative is pi [V + (V z - A)(K^T Q x)^T] with
|K^T Q x| <= R_theta^2 r.  These are crude; the paper's constants are unknown.
"""

from __future__ import annotations

import sympy as sp

from transformer_limits.symbolic.derivation import Derivation, Param, register_derivation

__all__ = ["attention_bound_expressions"]

_R, _RT, _r = sp.symbols("R R_theta r", positive=True)


def attention_bound_expressions() -> dict[str, sp.Expr]:
    """Named bounds as SymPy expressions of (R, R_theta, r = |x|)."""
    kernel = sp.exp(2 * _RT**2 * _R * _r)
    return {
        "softmax_density_bound": kernel,
        "attention_bound": _RT**2 * _R,
        "jacobian_bound": 2 * _RT**4 * _R**2,
        "lions_derivative_bound": kernel * (_RT**2 + 2 * _RT**4 * _R * _r),
    }


_LATEX = {
    "softmax_density_bound": r"\pi_\mu(x,z) \le e^{2 R_\theta^2 R |x|}",
    "attention_bound": r"|A(x,\mu)| \le R_\theta^2 R",
    "jacobian_bound": r"\|\nabla_x A(x,\mu)\| \le 2 R_\theta^4 R^2",
    "lions_derivative_bound": r"\|\partial_\mu A(x,\mu)(z)\| \le e^{2R_\theta^2 R|x|}\,(R_\theta^2 + 2R_\theta^4 R |x|)",
}


@register_derivation(
    "attention-bounds",
    title="Global bounds on attention, its Jacobian and its Lions derivative",
    params=(
        Param("R", float, None, "radius of the support of mu", low=0.0, low_open=True),
        Param("R_theta", float, None, "parameter radius: ||Q^T K||, ||O V|| <= R_theta^2", low=0.0, low_open=True),
        Param("x_norm", float, None, "|x| of the query (default: R)", low=0.0),
    ),
)
def attention_bounds(R: float | None, R_theta: float | None, x_norm: float | None) -> Derivation:
    exprs = attention_bound_expressions()
    values = {}
    if R is not None and R_theta is not None:
        subs = {_R: R, _RT: R_theta, _r: R if x_norm is None else x_norm}
        values = {k: float(v.subs(subs)) for k, v in exprs.items()}
        values["x_norm"] = float(subs[_r])
    elif (R is None) != (R_theta is None):
        missing = "R" if R is None else "R_theta"
        raise ValueError(f"parameter {missing!r} is needed to evaluate the bounds (give both R and R_theta)")
    return Derivation(
        name="attention-bounds",
        title="Global bounds on attention, its Jacobian and its Lions derivative",
        summary=("Crude global bounds used for 'global Lipschitz' statements of paper A, as SymPy "
                 "expressions of the support radius R, the parameter radius R_theta and r = |x|."),
        expressions=exprs,
        generic_latex=_LATEX,
        assumptions=["supp mu ⊂ B(0, R)", "||Q^T K|| <= R_theta^2 and ||O V|| <= R_theta^2 (operator norms)",
                     "unmasked softmax attention, one head (a mean over heads obeys the same bounds)"],
        checks=["Each bound follows from |<Qx, Ky>| <= R_theta^2 |x| R (proof sketch in the module docstring).",
                "tests/test_attention_bounds.py: hypothesis-drawn configurations never exceed the bounds "
                "(NumPy reference), and an adversarial two-atom measure shows the factor 2 in the "
                "exponent is needed: a bound with exp(R_theta^2 R |x|) fails."],
        values=values,
    )
