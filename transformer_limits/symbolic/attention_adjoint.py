"""Vector-Jacobian products (VJPs) of multi-head softmax attention: the adjoint of docs/theory.md §A.2.

One layer of the reconstructed model maps the tokens X = (x^1..x^N) to the field

    F^i = sum_h c_h O_h A_h(x^i, m^i),      A_h(x, m) = int V_h y pi_m(x, y) m(dy),

with logits beta <Q_h x, K_h y> (beta = 1/temperature), c_h the head weight (residual scale times
head scale) and m^i the measure token i attends to: m^N = (1/N) sum_j delta_{x^j} (unmasked) or the
prefix measure (1/i) sum_{j<=i} delta_{x^j} (causal mask).  Given a cotangent p^i of F^i, the VJP
of the layer is

    xbar^j = sum_h [ grad_x A_h(x^j, m^j)^T g_h^j
                     + sum_i w_ij (d_mu A_h(x^i, m^i)(x^j))^T g_h^i ],     g_h^i = c_h O_h^T p^i,

with w_ij = 1/N (unmasked) or 1_{j<=i}/i (causal): the first term is the spatial-Jacobian term,
the second the Lions-derivative (interaction) term of docs/theory.md §A.2.  Expanding the closed forms of
docs/theory.md §A.3 with P_ij = w_ij pi(x^i, x^j) (a row-stochastic matrix) gives the loop-friendly form

    sbar_ij = P_ij <g^i, V x^j - A^i> = w_ij <g^i, dA/dmu(x^i, m^i)(x^j)>     (pair score)
    qbar^i  = sum_j sbar_ij d logit/d q = beta sum_j sbar_ij K x^j           (query cotangent)
    kbar^j  = sum_i sbar_ij d logit/d k = beta sum_i sbar_ij Q x^i           (key cotangent)
    vbar^j  = sum_i P_ij g^i                                                (value cotangent)
    jacobian term = Q^T qbar^i,   Lions term = K^T kbar^j + V^T vbar^j,

and the parameter gradients dQ = sum_i qbar^i x^{iT}, dK = sum_j kbar^j x^{jT},
dV = sum_j vbar^j x^{jT}, dO = c sum_i p^i A^{iT}.  Nothing of size N x N x d x d is formed.

``adjoint_pieces`` (:mod:`transformer_limits.symbolic.template_pieces`) derives each per-token /
per-pair piece with SymPy (derivatives of the logit, of the output projection and of the feature
maps); the derivation ``attention-adjoint`` checks at
50 digits that the assembled VJP equals SymPy's own gradient of sum_i <g^i, A(x^i, m^i)>, masked
and unmasked, and equals the docs/theory.md §A.2 form built from the closed Jacobian and Lions derivative.
Loop templates: :mod:`transformer_limits.symbolic.attention_adjoint_kernels`.
"""

from __future__ import annotations

import sympy as sp

from transformer_limits.symbolic.attention_adjoint_kernels import adjoint_kernel_sources
from transformer_limits.symbolic.derivation import Derivation, Param, register_derivation
from transformer_limits.symbolic.template_pieces import adjoint_pieces

__all__ = ["layer_vjp_symbolic"]


def _syms(prefix: str, n: int) -> list[sp.Symbol]:
    return [sp.Symbol(f"{prefix}_{a}", real=True) for a in range(n)]


def _matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    return sp.Matrix(rows, cols, lambda a, b: sp.Symbol(f"{name}_{a}_{b}", real=True))


# --------------------------------------------------------------------------- symbolic check
def layer_vjp_symbolic(d: int, d_k: int, d_v: int, n_tokens: int, causal: bool):
    """SymPy objects for one head on ``n_tokens`` tokens: (X, params, g, objective, assembled xbar,
    theory xbar).

    objective = sum_i <g^i, A(x^i, m^i)>; ``assembled`` is the loop form of the module docstring
    (pair scores -> feature cotangents -> Q^T qbar + K^T kbar + V^T vbar); ``theory`` is
    grad_x A(x^j, m^j)^T g^j + sum_i w_ij (d_mu A(x^i, m^i)(x^j))^T g^i from the closed forms of
    docs/theory.md §A.3.  Both must equal the SymPy gradient of the objective.
    """
    X = [sp.Matrix(_syms(f"x{i}", d)) for i in range(n_tokens)]
    Q, K, V = _matrix("Q", d_k, d), _matrix("K", d_k, d), _matrix("V", d_v, d)
    G = [sp.Matrix(_syms(f"g{i}", d_v)) for i in range(n_tokens)]
    beta = sp.Symbol("beta", positive=True)

    def visible(i):
        return range(i + 1) if causal else range(n_tokens)

    logits = [[beta * ((Q * X[i]).T * (K * X[j]))[0, 0] for j in range(n_tokens)] for i in range(n_tokens)]
    P, A = [], []
    for i in range(n_tokens):
        e = {j: sp.exp(logits[i][j]) for j in visible(i)}
        Z = sum(e.values())
        P.append({j: e[j] / Z for j in e})
        A.append(sum((P[i][j] * V * X[j] for j in e), sp.zeros(d_v, 1)))
    objective = sum((G[i].T * A[i])[0, 0] for i in range(n_tokens))
    # assembled loop form
    sb = {(i, j): P[i][j] * (G[i].T * (V * X[j] - A[i]))[0, 0] for i in range(n_tokens) for j in visible(i)}
    qbar = [beta * sum((sb[i, j] * K * X[j] for j in visible(i)), sp.zeros(d_k, 1)) for i in range(n_tokens)]
    kbar = [beta * sum((sb[i, j] * Q * X[i] for i in range(n_tokens) if (i, j) in sb), sp.zeros(d_k, 1))
            for j in range(n_tokens)]
    vbar = [sum((P[i][j] * G[i] for i in range(n_tokens) if (i, j) in sb), sp.zeros(d_v, 1))
            for j in range(n_tokens)]
    assembled = [Q.T * qbar[j] + K.T * kbar[j] + V.T * vbar[j] for j in range(n_tokens)]
    # docs/theory.md §A.2 form: Jacobian term + Lions term with the closed forms (pi = n_i P_ij)
    theory = []
    for j in range(n_tokens):
        jac = sum((P[j][k] * (V * X[k] - A[j]) * (beta * Q.T * K * X[k]).T for k in visible(j)),
                  sp.zeros(d_v, d))
        term = jac.T * G[j]
        for i in range(n_tokens):
            if j in P[i]:
                lions = P[i][j] * len(P[i]) * (V + (V * X[j] - A[i]) * (beta * K.T * Q * X[i]).T)
                term += sp.Rational(1, len(P[i])) * lions.T * G[i]
        theory.append(term)
    return X, (Q, K, V, beta), G, objective, assembled, theory


def _check_vjp(d: int, d_k: int, d_v: int, n_tokens: int, causal: bool, seed: int) -> float:
    """Max |assembled - sympy gradient| + |theory - sympy gradient| at a random point, 50 digits."""
    import random

    import mpmath

    X, (Q, K, V, beta), G, obj, assembled, theory = layer_vjp_symbolic(d, d_k, d_v, n_tokens, causal)
    rng = random.Random(seed)
    syms = sorted(set().union(*(e.free_symbols for e in [obj])), key=str)
    point = {s: sp.Rational(rng.randint(-900, 900), 1000) for s in syms}
    point[beta] = sp.Rational(rng.randint(300, 1500), 1000)
    worst = mpmath.mpf(0)
    with mpmath.workdps(50):
        for j in range(n_tokens):
            grad = sp.Matrix([obj.diff(s) for s in X[j]])
            for other in (assembled[j], theory[j]):
                diff = (grad - other).xreplace(point)
                worst = max(worst, max(abs(sp.N(e, 50)) for e in diff))
    return float(worst)


@register_derivation(
    "attention-adjoint", title="Vector-Jacobian product of softmax attention (adjoint with Lions term)",
    params=(Param("d", int, 2, "token dimension d", low=1, high=8),
            Param("d_k", int, 2, "query/key dimension d_k", low=1, high=8),
            Param("d_v", int, 2, "value dimension d_v", low=1, high=8),
            Param("n_tokens", int, 3, "tokens in the 50-digit check", low=1, high=4),
            Param("seed", int, 0, "seed of the random check point", low=0)))
def _attention_adjoint(d: int, d_k: int, d_v: int, n_tokens: int, seed: int) -> Derivation:
    P = adjoint_pieces(d, d_k, d_v)
    checks, values = [], {}
    for causal in (False, True):
        res = _check_vjp(d, d_k, d_v, n_tokens, causal, seed)
        tag = "causal" if causal else "unmasked"
        values[f"residual_{tag}"] = res
        if not res < 1e-40:  # pragma: no cover - would be a derivation bug
            raise RuntimeError(f"attention-adjoint ({tag}): residual {res:g}")
        checks.append(f"{tag}: the assembled VJP (pair scores -> Q^T qbar + K^T kbar + V^T vbar) and the "
                      f"docs/theory.md §A.2 form (Jacobian + Lions term with weights w_ij) both equal SymPy's gradient of "
                      f"sum_i <g^i, A(x^i, m^i)> at a random point (N={n_tokens}, 50 digits, residual {res:.1e}).")
    checks.append("Generated numba kernels agree with the NumPy reference adjoint to 1e-12 and pass the "
                  "gradient Taylor test at rate 2 (tests/test_transformer_model.py).")
    exprs = {}
    for group in ("logit", "pair_score", "query_inc", "key_inc", "value_inc", "jac_vjp", "lions_vjp"):
        exprs.update({k: v for k, v in getattr(P, group).items()})
    return Derivation(
        name="attention-adjoint",
        title="Vector-Jacobian product of softmax attention (adjoint with Lions term)",
        summary=__doc__.split("\n\n")[0].strip(),
        expressions=exprs,
        generic_latex={
            "adjoint": r"p_r^i = p_{r+1}^i + \tfrac1L\Bigl[\nabla_x\Gamma(x_r^i,m_r^i)^\top p_{r+1}^i"
                       r" + \sum_{j} w_{ji}\,\bigl(\partial_\mu\Gamma(x_r^j,m_r^j)(x_r^i)\bigr)^\top p_{r+1}^j\Bigr],"
                       r"\quad w_{ji} = \tfrac1N \text{ (unmasked)},\ \tfrac{1_{i\le j}}{j}\text{ (causal)}",
            "pair_score": r"\bar s_{ij} = P_{ij}\langle g^i, V x^j - A^i\rangle = w_{ij}\langle g^i,"
                          r" \tfrac{\delta A}{\delta\mu}(x^i,m^i)(x^j)\rangle",
            "lions_term": r"\sum_i w_{ij}\,(\partial_\mu A(x^i,m^i)(x^j))^\top g^i = K^\top\bar k^j + V^\top \bar v^j",
        },
        assumptions=["Softmax attention with logits beta <Q x, K y>; head output O A; head weight c_h.",
                     "Causal mask: token i attends to j <= i with the prefix measure (1/i) sum_{j<=i} delta_{x^j}."],
        checks=checks, values=values, kernels=adjoint_kernel_sources(d, d_k, d_v),
    )
