"""The diffusive (SDE) depth limit of paper A's attention model: drift, diffusion, generator, Itô–Stratonovich.

Model (docs/attention_sde_regime.md): residual scale (T/L)^{1/2}, heads (Q_h, K_h, V_h) shared by the
layers, output matrices O_{r,h} = sigma_O Z_{r,h} with Z i.i.d. N(0, 1) entries per layer and head:

    x_{r+1}^i = x_r^i + (T/L) b(x_r^i, m_r) + (T/L)^{1/2} c_H sum_h O_{r,h} A_h(x_r^i, m_r).

Given the state the increment is Gaussian, so the model is the Euler–Maruyama scheme of the Itô SDE

    dX^i = b(X^i, mu_t) dt + sum_k sigma_k(X^i, mu_t) dW^k,   sigma_(h,a,k)(x, mu) = c_H sigma_O e_a A_{h,k}(x, mu),

with common noise (all tokens share W).  This derivation checks, with SymPy, that

* the diffusion covariance is C(x^i, x^j) = c_H² sigma_O² sum_h <A_h^i, A_h^j> I_d (Gaussian moments of
  the symbolic expectation E[xi^i xi^jT], exact);
* the generator is L f = sum_i <b^i, grad_i f> + (1/2) sum_{i,j} tr(C(x^i, x^j) grad_i grad_j^T f): the
  h-coefficient of E f(x + h b + sqrt(h) xi) for a polynomial f (exact; the sqrt(h) coefficient is 0);
* the Itô–Stratonovich conversion drift s^i = (1/2) sum_k (D sigma_k sigma_k)^i of the N-token system equals
  the closed form with the spatial Jacobian and the Lions derivative of A (50-digit residual at a random point);
* the noise fields do not commute (a Lie bracket [sigma_a, sigma_b] is non-zero at a random point), so
  Euler–Maruyama has strong order 1/2, not 1.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import sympy as sp

from transformer_limits.symbolic.derivation import Derivation, Param, register_derivation

__all__ = ["gaussian_expectation", "attention_noise_fields", "stratonovich_closed_form", "stratonovich_symbolic",
           "lie_bracket"]


def _vec(name: str, n: int) -> sp.Matrix:
    return sp.Matrix([sp.Symbol(f"{name}_{a}", real=True) for a in range(n)])


def _mat(name: str, rows: int, cols: int) -> sp.Matrix:
    return sp.Matrix(rows, cols, lambda a, b: sp.Symbol(f"{name}_{a}_{b}", real=True))


def gaussian_expectation(expr: sp.Expr, normals: list[sp.Symbol]) -> sp.Expr:
    """E[expr] for a polynomial in independent standard normals (E Z^k = (k−1)!! for even k, else 0)."""
    poly = sp.Poly(sp.expand(expr), *normals)
    total = sp.Integer(0)
    for powers, coeff in poly.terms():
        if all(k % 2 == 0 for k in powers):
            total += coeff * sp.prod([sp.factorial2(k - 1) for k in powers if k])
    return sp.expand(total)


# ------------------------------------------------------------------------------ covariance, generator
def _covariance_check(d: int, d_v: int, heads: int, n_tokens: int):
    """(C_01 from the expectation, C_01 from the formula, generic symbols): exact symbolic comparison."""
    c, sig = sp.Symbol("c_H", positive=True), sp.Symbol("sigma_O", positive=True)
    a = [[_vec(f"a{h}{i}", d_v) for i in range(n_tokens)] for h in range(heads)]
    Z = [_mat(f"Z{h}", d, d_v) for h in range(heads)]
    normals = [z for M in Z for z in M]
    xi = [c * sig * sum((Z[h] * a[h][i] for h in range(heads)), sp.zeros(d, 1)) for i in range(n_tokens)]
    expected = (xi[0] * xi[1 % n_tokens].T).applyfunc(lambda e: gaussian_expectation(e, normals))
    formula = c**2 * sig**2 * sum(((a[h][0].T * a[h][1 % n_tokens])[0, 0] for h in range(heads)),
                                  sp.Integer(0)) * sp.eye(d)
    return expected, formula, (c, sig, a, Z, xi, normals)


def _generator_check(d: int, d_v: int, heads: int, n_tokens: int, seed: int):
    """(h-coefficient of E f(x + h b + sqrt(h) xi), L f, sqrt(h)-coefficient) for a random cubic f."""
    _, _, (c, sig, a, Z, xi, normals) = _covariance_check(d, d_v, heads, n_tokens)
    x = [_vec(f"x{i}", d) for i in range(n_tokens)]
    b = [_vec(f"b{i}", d) for i in range(n_tokens)]
    coords = [v for X in x for v in X]
    rng = random.Random(seed)
    monomials = [sp.Integer(1), *coords, *(u * v for u, v in itertools.combinations_with_replacement(coords, 2)),
                 *(u * v * w for u, v, w in itertools.combinations_with_replacement(coords, 3))]
    f = sum(rng.randint(-3, 3) * m for m in rng.sample(monomials, 12))
    s = sp.Symbol("s", positive=True)  # s = sqrt(h)
    moved = {x[i][a_]: x[i][a_] + s**2 * b[i][a_] + s * xi[i][a_] for i in range(n_tokens) for a_ in range(d)}
    Ef = gaussian_expectation(f.xreplace(moved), normals)
    poly = sp.Poly(Ef, s)
    first, second = poly.coeff_monomial(s), poly.coeff_monomial(s**2)
    Cij = [[c**2 * sig**2 * sum(((a[h][i].T * a[h][j])[0, 0] for h in range(heads)), sp.Integer(0))
            for j in range(n_tokens)] for i in range(n_tokens)]
    Lf = sum((b[i][al] * f.diff(x[i][al]) for i in range(n_tokens) for al in range(d)), sp.Integer(0))
    Lf += sp.Rational(1, 2) * sum((Cij[i][j] * f.diff(x[i][al]).diff(x[j][al]) for i in range(n_tokens)
                                   for j in range(n_tokens) for al in range(d)), sp.Integer(0))
    return sp.expand(second), sp.expand(Lf), sp.expand(first)


# ------------------------------------------------------------------------------ Itô–Stratonovich
def _attention(Q, K, V, X, beta):
    """(P rows, A (list of d_v vectors)) of one head for tokens X (list of d-vectors), unmasked."""
    N = len(X)
    P, A = [], []
    for i in range(N):
        e = [sp.exp(beta * (Q * X[i]).dot(K * X[j])) for j in range(N)]
        Zs = sum(e)
        P.append([ej / Zs for ej in e])
        A.append(sum((P[i][j] * V * X[j] for j in range(N)), sp.zeros(V.shape[0], 1)))
    return P, A


def attention_noise_fields(Qs, Ks, Vs, X, beta, g) -> dict[tuple[int, int, int], list[sp.Matrix]]:
    """sigma_(h,a,k) of the N-token system: token i's component is g e_a A_{h,k}(x^i, mu^N) (g = c_H sigma_O)."""
    d = X[0].shape[0]
    out = {}
    for h, (Q, K, V) in enumerate(zip(Qs, Ks, Vs)):
        _, A = _attention(Q, K, V, X, beta)
        for a_, k in itertools.product(range(d), range(V.shape[0])):
            out[(h, a_, k)] = [sp.Matrix([g * A[i][k] if r == a_ else 0 for r in range(d)]) for i in range(len(X))]
    return out


def _directional(field: list[sp.Matrix], X, direction: list[sp.Matrix]) -> list[sp.Matrix]:
    """(D field) direction on the system R^{N d}: token i's component sum_j sum_b d_{x^j_b} field^i v^j_b."""
    return [sum((field[i].diff(X[j][b_]) * direction[j][b_] for j in range(len(X)) for b_ in range(X[0].shape[0])),
                sp.zeros(X[0].shape[0], 1)) for i in range(len(X))]


def stratonovich_symbolic(Qs, Ks, Vs, X, beta, g) -> list[sp.Matrix]:
    """s^i = (1/2) sum_k (D sigma_k sigma_k)^i by SymPy differentiation of the noise fields."""
    fields = attention_noise_fields(Qs, Ks, Vs, X, beta, g)
    total = [sp.zeros(X[0].shape[0], 1) for _ in X]
    for fld in fields.values():
        total = [t + v for t, v in zip(total, _directional(fld, X, fld))]
    return [sp.Rational(1, 2) * t for t in total]


def stratonovich_closed_form(Qs, Ks, Vs, X, beta, g) -> list[sp.Matrix]:
    """The closed form (1/2) g² sum_h [beta Q^T sum_j P_ij <V x^j − A^i, A^i> K x^j + V^T sum_j P_ij A^j
    + beta K^T Q x^i sum_j P_ij <V x^j − A^i, A^j>] (Jacobian term + Lions term, weight 1/N)."""
    N = len(X)
    out = [sp.zeros(X[0].shape[0], 1) for _ in X]
    for Q, K, V in zip(Qs, Ks, Vs):
        P, A = _attention(Q, K, V, X, beta)
        for i in range(N):
            jac = beta * Q.T * sum(((P[i][j] * (V * X[j] - A[i]).dot(A[i])) * (K * X[j]) for j in range(N)),
                                   sp.zeros(K.shape[0], 1))
            lions_v = V.T * sum((P[i][j] * A[j] for j in range(N)), sp.zeros(V.shape[0], 1))
            lions_q = beta * K.T * Q * X[i] * sum((P[i][j] * (V * X[j] - A[i]).dot(A[j]) for j in range(N)),
                                                  sp.Integer(0))
            out[i] += jac + lions_v + lions_q
    return [sp.Rational(1, 2) * g**2 * o for o in out]


def lie_bracket(fa: list[sp.Matrix], fb: list[sp.Matrix], X) -> list[sp.Matrix]:
    """[sigma_a, sigma_b] = D sigma_b sigma_a − D sigma_a sigma_b on the system R^{N d}."""
    return [u - v for u, v in zip(_directional(fb, X, fa), _directional(fa, X, fb))]


def _random_heads(rng: random.Random, heads: int, d: int, d_k: int, d_v: int):
    def mat(r, c):
        return sp.Matrix(r, c, lambda *_: sp.Rational(rng.randint(-900, 900), 600))
    return [mat(d_k, d) for _ in range(heads)], [mat(d_k, d) for _ in range(heads)], [mat(d_v, d) for _ in range(heads)]


def _numeric_residuals(d: int, d_k: int, d_v: int, heads: int, n_tokens: int, seed: int) -> dict[str, Any]:
    """50-digit residual of the Itô–Stratonovich closed form and the largest Lie bracket at a random point."""
    import mpmath

    rng = random.Random(seed)
    Qs, Ks, Vs = _random_heads(rng, heads, d, d_k, d_v)
    X = [_vec(f"x{i}", d) for i in range(n_tokens)]
    beta, g = sp.Rational(rng.randint(500, 1500), 1000), sp.Rational(rng.randint(500, 1500), 1000)
    point = {v: sp.Rational(rng.randint(-900, 900), 1000) for Xi in X for v in Xi}
    with mpmath.workdps(50):
        sym = stratonovich_symbolic(Qs, Ks, Vs, X, beta, g)
        closed = stratonovich_closed_form(Qs, Ks, Vs, X, beta, g)
        resid = max(abs(sp.N((u - v)[a_].xreplace(point), 50)) for u, v in zip(sym, closed) for a_ in range(d))
        size = max(abs(sp.N(u[a_].xreplace(point), 50)) for u in sym for a_ in range(d))
        fields = attention_noise_fields(Qs, Ks, Vs, X, beta, g)
        keys = sorted(fields)
        bracket, pair = sp.Integer(0), None
        for ka, kb in itertools.combinations(keys[:2 * d_v], 2):  # the fields of head 0
            br = lie_bracket(fields[ka], fields[kb], X)
            val = max(abs(sp.N(v[a_].xreplace(point), 30)) for v in br for a_ in range(d))
            if val > bracket:
                bracket, pair = val, (ka, kb)
    return {"stratonovich_residual": float(resid), "stratonovich_size": float(size),
            "max_lie_bracket": float(bracket), "bracket_pair": str(pair)}


@register_derivation(
    "attention-sde", title="Diffusive depth limit of attention with zero-mean heads: drift, diffusion, generator",
    params=(Param("d", int, 2, "token dimension d", low=1, high=4),
            Param("d_k", int, 2, "query/key dimension d_k", low=1, high=4),
            Param("d_v", int, 2, "value dimension d_v", low=1, high=4),
            Param("heads", int, 2, "heads H in the checks", low=1, high=3),
            Param("n_tokens", int, 2, "tokens N in the checks", low=1, high=3),
            Param("seed", int, 0, "seed of the random test polynomial, heads and point", low=0)))
def _attention_sde(d: int, d_k: int, d_v: int, heads: int, n_tokens: int, seed: int) -> Derivation:
    expected, formula, _ = _covariance_check(d, d_v, heads, n_tokens)
    if sp.simplify(expected - formula) != sp.zeros(d, d):  # pragma: no cover - would be a derivation bug
        raise RuntimeError("attention-sde: the covariance differs from c_H² sigma_O² sum_h <a^i, a^j> I_d")
    second, Lf, first = _generator_check(d, d_v, heads, n_tokens, seed)
    if sp.expand(second - Lf) != 0 or first != 0:  # pragma: no cover
        raise RuntimeError("attention-sde: the one-step expansion does not give the generator")
    values = _numeric_residuals(d, d_k, d_v, heads, n_tokens, seed)
    if not values["stratonovich_residual"] < 1e-40 * max(1.0, values["stratonovich_size"]):  # pragma: no cover
        raise RuntimeError(f"attention-sde: Itô–Stratonovich residual {values['stratonovich_residual']:g}")
    if not values["max_lie_bracket"] > 1e-6:  # pragma: no cover - random heads give commuting fields only by accident
        raise RuntimeError("attention-sde: the noise fields commute at the test point")
    checks = [
        f"Covariance: E[xi^1 xi^2T] computed by Gaussian moments of the symbolic O entries equals "
        f"c_H² sigma_O² sum_h <a_h^1, a_h^2> I_d exactly (d={d}, d_v={d_v}, H={heads}).",
        f"Generator: for a random cubic polynomial f of the N={n_tokens} tokens, E f(x + h b + sqrt(h) xi) has "
        "zero sqrt(h) coefficient and its h coefficient equals L f exactly.",
        f"Itô–Stratonovich: (1/2) sum_k D sigma_k sigma_k by SymPy differentiation of the softmax noise fields "
        f"(N={n_tokens}, H={heads}) equals the Jacobian + Lions closed form at a random point "
        f"(50 digits, residual {values['stratonovich_residual']:.1e}, size {values['stratonovich_size']:.3g}).",
        f"Non-commutative noise: max |[sigma_a, sigma_b]| over the fields of one head = "
        f"{values['max_lie_bracket']:.3g} at the same point (30 digits), so Euler–Maruyama has strong order 1/2.",
        "The numeric correction (SDERegime.stratonovich_correction) and covariance agree with these "
        "expressions (tests/test_attention_sde_derivation.py).",
    ]
    a = [[_vec(f"a{h}{i}", d_v) for i in range(2)] for h in range(heads)]
    return Derivation(
        name="attention-sde",
        title="Diffusive depth limit of attention with zero-mean heads: drift, diffusion, generator",
        summary=__doc__.split("\n\n")[0].strip(),
        expressions={"covariance_12": formula, "covariance_entry_expected": expected[0, 0],
                     "a_symbols": sp.Matrix([s for h in range(heads) for s in a[h][0]])},
        generic_latex={
            "discrete_model": r"x_{r+1}^i = x_r^i + \tfrac{T}{L} b(x_r^i, m_r) + \bigl(\tfrac{T}{L}\bigr)^{1/2}"
                              r" c_H \sum_h O_{r,h} A_h(x_r^i, m_r),\quad O_{r,h} = \sigma_O Z_{r,h}",
            "limit_sde": r"dX^i_t = b(X^i_t, \mu^N_t)\,dt + c_H\sigma_O \sum_h dW_h(t)\, A_h(X^i_t, \mu^N_t)"
                         r"\quad\text{(Ito, common noise)}",
            "covariance": r"C(x^i, x^j;\mu) = c_H^2\sigma_O^2 \sum_h \langle A_h(x^i,\mu), A_h(x^j,\mu)\rangle I_d",
            "generator": r"\mathcal{L} f = \sum_i \langle b^i, \nabla_i f\rangle + \tfrac12 \sum_{i,j}"
                         r" \operatorname{tr}\bigl(C(x^i,x^j)\nabla_i\nabla_j^\top f\bigr)",
            "stratonovich_drift": r"s^i = \tfrac12 c_H^2\sigma_O^2 \sum_h \Bigl[\beta Q_h^\top \sum_j P_{ij}"
                                  r"\langle V_h x^j - A^i, A^i\rangle K_h x^j + V_h^\top \sum_j P_{ij} A^j"
                                  r" + \beta K_h^\top Q_h x^i \sum_j P_{ij}\langle V_h x^j - A^i, A^j\rangle\Bigr]",
            "head_scaling": r"c_H = 1/H:\ C = O(1/H),\ \text{diffusion} \propto H^{-1/2},\ "
                            r"\mathbb{E}|x_L - X_T|^2 \propto H^{-2} L^{-1}",
        },
        assumptions=["O_{r,h} i.i.d. over layers and heads with i.i.d. N(0, sigma_O²) entries, independent of "
                     "the tokens; (Q_h, K_h, V_h) fixed across layers.",
                     "Unmasked softmax attention with logits beta <Q x, K y>; m_r the empirical measure of the tokens.",
                     "The discrete model is the Euler–Maruyama scheme, so its limit is the Itô SDE (no correction); "
                     "s is the drift a Stratonovich reading would add."],
        checks=checks, values=values,
    )
