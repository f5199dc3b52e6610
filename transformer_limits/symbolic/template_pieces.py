"""Scalar pieces of the kernel loop templates: per-token and per-pair SymPy expressions.

A loop template (``*_kernels.py``) places these straight-line blocks inside loops; the derivations
check them (docs/theory.md §A.2–A.3):

* :func:`kernel_pieces`   softmax attention, its spatial Jacobian, flat and Lions derivatives
  (closed forms of docs/theory.md §A.3, checked by the ``attention-*`` derivations);
* :func:`adjoint_pieces`  forward and VJP of one attention layer (docs/theory.md §A.2, checked at 50
  digits by the ``attention-adjoint`` derivation);
* :func:`jet_pieces`      the second-order attention jet along a linear path (flow-map Taylor blocks,
  checked by the ``flow-taylor`` derivation).

This module depends on SymPy only, so templates and derivations both import it and the dependency
runs one way: derivation -> template -> pieces.  Symbols are created by name with the assumptions the
derivations use (``Q_a_b`` real, ...), so they are the derivations' symbols.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sympy as sp

__all__ = ["KernelPieces", "kernel_pieces", "AdjointPieces", "adjoint_pieces", "JetPieces", "jet_pieces"]


def _syms(prefix: str, n: int) -> list[sp.Symbol]:
    return [sp.Symbol(f"{prefix}_{a}", real=True) for a in range(n)]


def _vector(name: str, n: int) -> sp.Matrix:
    return sp.Matrix(_syms(name, n))


def _matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    return sp.Matrix(rows, cols, lambda a, b: sp.Symbol(f"{name}_{a}_{b}", real=True))


# --------------------------------------------------------------------------- attention
@dataclass(frozen=True)
class KernelPieces:
    """Scalar expressions the loop templates need, in the symbols named below.

    query features  (x_a, Q, K)   -> q_b = (Q x)_b, r_a = (K^T Q x)_a
    key features    (y_a, Q, K, V)-> k_b = (K y)_b, v_c = (V y)_c, u_a = (Q^T K y)_a
    pair logit      (q_b, k_b)    -> logit = <q, k>
    pair terms with p = pi_mu(x, y) (density w.r.t. mu) and A_c = A(x, mu)_c:
        flat_c   = p (v_c - A_c)
        lions_ca = p (V_ca + (v_c - A_c) r_a)
        jac_ca   = p (v_c - A_c) u_a        (summed against mu for grad_x A)
    """

    d: int
    d_k: int
    d_v: int
    query: dict[str, sp.Expr]
    key: dict[str, sp.Expr]
    logit: dict[str, sp.Expr]
    flat: dict[str, sp.Expr]
    lions: dict[str, sp.Expr]
    jac: dict[str, sp.Expr]


@lru_cache(maxsize=32)
def kernel_pieces(d: int, d_k: int, d_v: int) -> KernelPieces:
    Q, K, V = _matrix("Q", d_k, d), _matrix("K", d_k, d), _matrix("V", d_v, d)
    x, y = _vector("x", d), _vector("y", d)
    qx = Q * x
    ky = K * y
    q_syms = sp.Matrix(_syms("q", d_k))
    rx = K.T * q_syms  # r = K^T q reuses q = Q x
    uy = Q.T * ky
    vy = V * y
    q, k, r, u, v = list(q_syms), _syms("k", d_k), _syms("r", d), _syms("u", d), _syms("v", d_v)
    A = _syms("A", d_v)
    p = sp.Symbol("p", positive=True)
    query = {f"q_{b}": qx[b] for b in range(d_k)}
    query.update({f"r_{a}": rx[a] for a in range(d)})
    key = {f"k_{b}": ky[b] for b in range(d_k)}
    key.update({f"v_{c}": vy[c] for c in range(d_v)})
    key.update({f"u_{a}": uy[a] for a in range(d)})
    return KernelPieces(
        d=d, d_k=d_k, d_v=d_v, query=query, key=key,
        logit={"logit": sum(qb * kb for qb, kb in zip(q, k))},
        flat={f"flat_{c}": p * (v[c] - A[c]) for c in range(d_v)},
        lions={f"lions_{c}_{a}": p * (V[c, a] + (v[c] - A[c]) * r[a])
               for c in range(d_v) for a in range(d)},
        jac={f"jac_{c}_{a}": p * (v[c] - A[c]) * u[a] for c in range(d_v) for a in range(d)},
    )



# --------------------------------------------------------------------------- layer adjoint
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
    key_coef: dict[str, sp.Expr]    # kc_b = d logit / d k_b (so dk_b = sbar kc_b: kc_b is per query row)
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
    key_coef = {f"kc_{b}": sp.diff(logit, k[b]) for b in range(d_k)}
    if any(sp.diff(c, kb) != 0 for c in key_coef.values() for kb in k):  # pragma: no cover - algebra guard
        raise RuntimeError("d logit / d k depends on k: the key updates' per-row coefficients do not apply")
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
        key_coef=key_coef,
        value_inc={f"dv_{c}": sp.diff(p * sum(gc * vc for gc, vc in zip(g, v)), v[c]) for c in range(d_v)},
        jac_vjp={f"xj_{a}": _transpose_product(Q * x, x, qb)[a] for a in range(d)},
        lions_vjp={f"xl_{a}": (_transpose_product(K * x, x, kb) + _transpose_product(V * x, x, vb))[a]
                   for a in range(d)},
    )



# --------------------------------------------------------------------------- flow-map jet
@dataclass(frozen=True)
class JetPieces:
    """Scalar expressions for the second-order attention jet along a linear path.

    Symbols: x_a, dx_a (query and its direction), y_a, dy_a (atom and its direction), Q_a_b, K_a_b,
    V_a_b; q_b, qd_b, k_b, kd_b, v_c, vd_c features; p (softmax weight incl. the atom weight),
    lc = l1 - m1 (centred logit rate), e2 = l2 - m2 - s2.
    """

    d: int
    d_k: int
    d_v: int
    query: dict[str, sp.Expr]      # q_b = (Q x)_b, qd_b = (Q dx)_b
    key: dict[str, sp.Expr]        # k_b, kd_b, v_c = (V y)_c, vd_c = (V dy)_c
    logit: dict[str, sp.Expr]      # logit, logit1, logit2 (s-derivatives of <q(s), k(s)> at 0)
    moments: dict[str, sp.Expr]    # mom1 = p logit1, mom2 = p logit2
    spread: dict[str, sp.Expr]     # spread = p lc^2
    jet: dict[str, sp.Expr]        # jet0_c, jet1_c, jet2_c (summed over atoms: A, A', A'')


@lru_cache(maxsize=32)
def jet_pieces(d: int, d_k: int, d_v: int) -> JetPieces:
    Q, K, V = _matrix("Q", d_k, d), _matrix("K", d_k, d), _matrix("V", d_v, d)
    x, dx, y, dy = _vector("x", d), _vector("dx", d), _vector("y", d), _vector("dy", d)
    q, qd, k, kd = (_syms(n, d_k) for n in ("q", "qd", "k", "kd"))
    v, vd = _syms("v", d_v), _syms("vd", d_v)
    p, t = sp.Symbol("p", positive=True), sp.Symbol("t")
    lc, e2 = sp.Symbol("lc", real=True), sp.Symbol("e2", real=True)
    path = sum((qb + t * qdb) * (kb + t * kdb) for qb, qdb, kb, kdb in zip(q, qd, k, kd))
    logit = {f"logit{m or ''}": sp.expand(path.diff(t, m).subs(t, 0)) for m in range(3)}
    l1, l2 = sp.Symbol("logit1", real=True), sp.Symbol("logit2", real=True)
    jet = {}
    for c in range(d_v):
        jet[f"jet0_{c}"] = p * v[c]
        jet[f"jet1_{c}"] = p * (lc * v[c] + vd[c])
        jet[f"jet2_{c}"] = p * ((lc**2 + e2) * v[c] + 2 * lc * vd[c])
    key = {f"k_{b}": (K * y)[b] for b in range(d_k)} | {f"kd_{b}": (K * dy)[b] for b in range(d_k)}
    key |= {f"v_{c}": (V * y)[c] for c in range(d_v)} | {f"vd_{c}": (V * dy)[c] for c in range(d_v)}
    return JetPieces(
        d=d, d_k=d_k, d_v=d_v,
        query={f"q_{b}": (Q * x)[b] for b in range(d_k)} | {f"qd_{b}": (Q * dx)[b] for b in range(d_k)},
        key=key, logit=logit, moments={"mom1": p * l1, "mom2": p * l2}, spread={"spread": p * lc**2}, jet=jet,
    )

