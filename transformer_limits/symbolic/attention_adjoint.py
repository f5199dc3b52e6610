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

``adjoint_pieces`` derives each per-token / per-pair piece with SymPy (derivatives of the logit,
of the output projection and of the feature maps); the derivation ``attention-adjoint`` checks at
50 digits that the assembled VJP equals SymPy's own gradient of sum_i <g^i, A(x^i, m^i)>, masked
and unmasked, and equals the docs/theory.md §A.2 form built from the closed Jacobian and Lions derivative.
Loop templates: :mod:`transformer_limits.symbolic.attention_adjoint_kernels`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sympy as sp

from transformer_limits.symbolic.attention import kernel_pieces
from transformer_limits.symbolic.derivation import Derivation, Param, register_derivation

__all__ = ["AdjointPieces", "adjoint_pieces", "layer_vjp_symbolic"]


def _syms(prefix: str, n: int) -> list[sp.Symbol]:
    return [sp.Symbol(f"{prefix}_{a}", real=True) for a in range(n)]


def _matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    return sp.Matrix(rows, cols, lambda a, b: sp.Symbol(f"{name}_{a}_{b}", real=True))


@dataclass(frozen=True)
class AdjointPieces:
    """Scalar expressions for the forward and adjoint loop templates of one head.

    Symbols: x_a / y_a token coordinates; Q_a_b, K_a_b, V_a_b, O_a_c head parameters; q_b, k_b, v_c
    features; beta inverse temperature; p the pair weight P_ij (row-stochastic softmax); A_c the
    head output A^i; ct_a the cotangent p^i of the layer output; wh the head weight c_h; g_c the
    value cotangent g^i = c_h O^T p^i; gA = <g^i, A^i>; sbar the pair score; qb_b, kb_b, vb_c the
    accumulated feature cotangents.
    """

    d: int
    d_k: int
    d_v: int
    query: dict[str, sp.Expr]       # q_b = (Q x)_b
    key: dict[str, sp.Expr]         # k_b = (K y)_b, v_c = (V y)_c
    logit: dict[str, sp.Expr]       # logit = beta <q, k>
    head_out: dict[str, sp.Expr]    # o_a = wh (O A)_a
    cotangent: dict[str, sp.Expr]   # g_c = wh (O^T ct)_c
    g_dot_a: dict[str, sp.Expr]     # gA = <g, A>
    pair_score: dict[str, sp.Expr]  # sbar = p (<g, v> - gA)
    query_inc: dict[str, sp.Expr]   # dq_b = sbar d logit / d q_b
    key_inc: dict[str, sp.Expr]     # dk_b = sbar d logit / d k_b
    value_inc: dict[str, sp.Expr]   # dv_c = d (p <g, v>) / d v_c
    jac_vjp: dict[str, sp.Expr]     # xj_a = (Q^T qb)_a          (spatial-Jacobian term)
    lions_vjp: dict[str, sp.Expr]   # xl_a = (K^T kb + V^T vb)_a (Lions term)


def _transpose_product(features: sp.Matrix, wrt: sp.Matrix, bar: list[sp.Symbol]) -> sp.Matrix:
    """(d features / d wrt)^T bar: the VJP of a feature map, by SymPy differentiation."""
    return features.jacobian(wrt).T * sp.Matrix(bar)


@lru_cache(maxsize=32)
def adjoint_pieces(d: int, d_k: int, d_v: int) -> AdjointPieces:
    base = kernel_pieces(d, d_k, d_v)
    x, y = sp.Matrix(_syms("x", d)), sp.Matrix(_syms("y", d))
    Q, K, V, O = _matrix("Q", d_k, d), _matrix("K", d_k, d), _matrix("V", d_v, d), _matrix("O", d, d_v)
    q, k, v, A = _syms("q", d_k), _syms("k", d_k), _syms("v", d_v), _syms("A", d_v)
    ct, g = _syms("ct", d), _syms("g", d_v)
    qb, kb, vb = _syms("qb", d_k), _syms("kb", d_k), _syms("vb", d_v)
    beta, wh, p = sp.Symbol("beta", real=True), sp.Symbol("wh", real=True), sp.Symbol("p", positive=True)
    gA, sbar = sp.Symbol("gA", real=True), sp.Symbol("sbar", real=True)
    logit = beta * base.logit["logit"]
    out = wh * O * sp.Matrix(A)
    # g = d <ct, wh O A> / d A : the cotangent of the head output A
    gvec = sp.Matrix([sp.diff((sp.Matrix(ct).T * out)[0, 0], a) for a in A])
    # pair score: <g, flat derivative> with the atom weight folded into p (kernel_pieces.flat)
    flat_dot = sum(gc * base.flat[f"flat_{c}"] for c, gc in enumerate(g))
    g_dot_a = sum(gc * ac for gc, ac in zip(g, A))
    score = p * (sum(gc * vc for gc, vc in zip(g, v)) - gA)
    if sp.expand(flat_dot - score.subs(gA, g_dot_a)) != 0:  # pragma: no cover - algebra guard
        raise RuntimeError("pair score differs from <g, flat derivative>")
    return AdjointPieces(
        d=d, d_k=d_k, d_v=d_v,
        query={f"q_{b}": (Q * x)[b] for b in range(d_k)},
        key={**{f"k_{b}": base.key[f"k_{b}"] for b in range(d_k)},
             **{f"v_{c}": base.key[f"v_{c}"] for c in range(d_v)}},
        logit={"logit": logit},
        head_out={f"o_{a}": out[a] for a in range(d)},
        cotangent={f"g_{c}": gvec[c] for c in range(d_v)},
        g_dot_a={"gA": g_dot_a},
        pair_score={"sbar": score},
        query_inc={f"dq_{b}": sbar * sp.diff(logit, q[b]) for b in range(d_k)},
        key_inc={f"dk_{b}": sbar * sp.diff(logit, k[b]) for b in range(d_k)},
        value_inc={f"dv_{c}": sp.diff(p * sum(gc * vc for gc, vc in zip(g, v)), v[c]) for c in range(d_v)},
        jac_vjp={f"xj_{a}": _transpose_product(Q * x, x, qb)[a] for a in range(d)},
        lions_vjp={f"xl_{a}": (_transpose_product(K * x, x, kb) + _transpose_product(V * x, x, vb))[a]
                   for a in range(d)},
    )


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
    from transformer_limits.symbolic.attention_adjoint_kernels import adjoint_kernel_sources

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
