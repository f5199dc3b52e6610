"""Taylor block expansions of the flow map of the N-particle McKean-Vlasov ODE (docs/theory.md §A.2–A.3).

N particles X = (X^1..X^N), X^i in R^d, move by the autonomous MV-ODE (paper A's forward limit with
the head law nu frozen over the block)

    dX^i/dt = F_i(X) := Gamma(X^i, mu^N, nu),      mu^N = (1/N) sum_j delta_{X^j}.

Its flow map over a block of depth h is the Lie series X(h) = sum_k h^k/k! L^k X of the Lie derivative
L = sum_i F_i . grad_{X^i}; up to order 3

    Phi_h(X)^i = X^i + h F_i + h^2/2 DF_i[F] + h^3/6 (D^2F_i[F, F] + DF_i[DF[F]]) + O(h^4),

where D is the derivative of the *system* field X -> F(X) in R^{N d}.  Through the empirical measure
(exact identities for G(mu^N): dG/dX^j = (1/N) d_mu G(X^j); d^2 G/dX^j dX^k = (1/N^2) d_mu^2 G(X^j, X^k)
+ delta_jk (1/N) grad_z d_mu G(X^j)) it splits into spatial and Lions (interaction) terms:

    DF_i[v]      = grad_x Gamma(X^i) v^i + (1/N) sum_j d_mu Gamma(X^i)(X^j) v^j
    D^2F_i[v, v] = grad_x^2 Gamma(X^i)[v^i, v^i] + (2/N) sum_j grad_x d_mu Gamma(X^i)(X^j)[v^i, v^j]
                   + (1/N) sum_j grad_z d_mu Gamma(X^i)(X^j)[v^j, v^j]
                   + (1/N^2) sum_{j,k} d_mu^2 Gamma(X^i)(X^j, X^k)[v^j, v^k].

The derivation ``flow-taylor`` checks these coefficients componentwise for a concrete small case
(single-head softmax attention F = A(x, mu) with V standing for O V, d x d, ``n_particles`` particles):
SymPy iterates L on the N-particle system (the exact Taylor series of the autonomous ODE), and the
coefficients are assembled from the measure derivatives of A — the first-order ones from the docs/theory.md
§A.3 closed forms (:func:`~transformer_limits.symbolic.attention.closed_jacobian`, ``closed_lions``), the
second-order ones by SymPy from their definitions (grad_x and grad_z of d_mu A, and the second Lions
derivative d_mu^2 A(x)(z, z') = grad_{z'} of the flat derivative of mu -> d_mu A(x, mu)(z)).  Equality is
decided by :func:`~transformer_limits.symbolic.attention.prove_identity` (exponentials named, exact
rational evaluation at random points).  Dropping the Lions term from DF must break the identity.

Numerical second-order terms (``jet_pieces`` in :mod:`transformer_limits.symbolic.template_pieces`,
loop template in :mod:`transformer_limits.symbolic.flow_taylor_kernels`): along the linear path x(s) = x + s dx,
y_j(s) = y_j + s dy_j the softmax weights p_j = w_j e^{l_j}/Z have the jet

    l_j(s) = <Q x(s), K y_j(s)> = l + s l1 + s^2/2 l2,        c_j = l1_j - sum_k p_k l1_k,
    A'  = sum_j p_j [c_j V y_j + V dy_j],
    A'' = sum_j p_j [(c_j^2 + l2_j - m2 - s2) V y_j + 2 c_j V dy_j],  m2 = sum p l2,  s2 = sum p c^2,

so D^2F_i[v, v] = d^2/ds^2 F_i(X + s v) is A'' with dx = v^i, dy_j = v^j (and O applied).  The derivation
checks this jet against SymPy's d/ds and d^2/ds^2 of A along the path (general atom weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import factorial

import sympy as sp

from transformer_limits.symbolic.attention import (
    AttentionSymbols,
    attention_symbols,
    attention_value,
    closed_jacobian,
    closed_lions,
    prove_identity,
)
from transformer_limits.symbolic.derivation import Derivation, Param, register_derivation
from transformer_limits.symbolic.flow_taylor_kernels import jet_kernel_source
from transformer_limits.symbolic.template_pieces import jet_pieces

__all__ = ["lie_series", "block_coefficients", "attention_jet"]

_PARAMS = (
    Param("order", int, 3, "highest order k of the block expansion (1..3)", low=1, high=3),
    Param("d", int, 1, "token dimension d of the concrete componentwise check", low=1, high=2),
    Param("d_k", int, 1, "query/key dimension d_k of the concrete check", low=1, high=2),
    Param("n_particles", int, 2, "particles N of the concrete check", low=1, high=3),
)


def _vec(name: str, n: int) -> sp.Matrix:
    return sp.Matrix([sp.Symbol(f"{name}_{a}", real=True) for a in range(n)])


def _syms(name: str, n: int) -> list[sp.Symbol]:
    return [sp.Symbol(f"{name}_{a}", real=True) for a in range(n)]


# --------------------------------------------------------------------------- N-particle system
@dataclass(frozen=True)
class _ParticleExps:
    """Names e^{a(X^i, X^j)} -> E_i_j for :func:`prove_identity` (queries and atoms are the particles)."""

    s: AttentionSymbols

    def exp_symbols(self) -> dict[sp.Expr, sp.Symbol]:
        return {sp.exp(self.s.logit(yi, yj)): sp.Symbol(f"E_{i}_{j}", positive=True)
                for i, yi in enumerate(self.s.ys) for j, yj in enumerate(self.s.ys)}


def _name_exponentials(s: AttentionSymbols, expr: sp.Matrix) -> sp.Matrix:
    """Replace every e^{arg} by prod_k E_k^{c_k} where arg = sum_k c_k a(X^i, X^j) (SymPy merges
    e^a e^b into e^{a+b} in products, which :func:`prove_identity` alone could not name).  An
    exponential whose argument is no such combination is left alone (the identity test then fails)."""
    basis: dict[sp.Expr, sp.Symbol] = {}
    for e, E in _ParticleExps(s).exp_symbols().items():
        basis.setdefault(sp.expand(e.args[0]), E)
    args, names = list(basis), list(basis.values())
    gens = sorted(set().union(*(a.free_symbols for a in args)), key=str)
    polys = [sp.Poly(a, *gens).as_dict() for a in args]
    monos = sorted(set().union(*polys), key=str)
    M = sp.Matrix([[P.get(m, 0) for P in polys] for m in monos])
    solved: dict[sp.Expr, sp.Expr] = {}

    def name(e):
        arg = sp.expand(e.args[0])
        if arg not in solved:
            solved[arg] = e
            if arg.free_symbols <= set(gens):
                rhs = sp.Poly(arg, *gens).as_dict()
                if set(rhs) <= set(monos):
                    try:
                        sol, free = M.gauss_jordan_solve(sp.Matrix([rhs.get(m, 0) for m in monos]))
                        sol = sol.xreplace({f: 0 for f in free})
                        solved[arg] = sp.Mul(*[E**c for E, c in zip(names, sol)])
                    except ValueError:
                        pass
        return solved[arg]

    return expr.replace(lambda e: isinstance(e, sp.exp), name)


def _empirical(s: AttentionSymbols) -> dict:
    """Weights of the empirical measure mu^N of the atoms (the particles)."""
    n = len(s.ys)
    return {w: sp.Rational(1, n) for w in s.ws}


def _at(expr: sp.Matrix, s: AttentionSymbols, **points: sp.Matrix) -> sp.Matrix:
    """``expr`` at the empirical measure, with the named vector symbols replaced (x=, z=, dx=, ...)."""
    rep = dict(_empirical(s))
    for name, value in points.items():
        rep.update(zip(_POINT_SYMBOLS[name](s), value))
    return expr.xreplace(rep)


_POINT_SYMBOLS = {
    "x": lambda s: list(s.x), "z": lambda s: list(s.z), "z2": lambda s: _syms("zz", s.d),
    "a": lambda s: _syms("da", s.d), "b": lambda s: _syms("db", s.d), "c": lambda s: _syms("dc", s.d),
}


def lie_series(s: AttentionSymbols, order: int) -> list[list[sp.Matrix]]:
    """[L^k X]_{k=1..order} for the particles ``s.ys`` with F_i = A(X^i, mu^N): SymPy differentiates
    the N-particle system (no measure calculus).  Entry k-1 is a list over particles of (d, 1)."""
    field = [_at(attention_value(s), s, x=y) for y in s.ys]
    current = list(s.ys)
    out = []
    for _ in range(order):
        current = [sum((g.jacobian(y) * f for y, f in zip(s.ys, field)), sp.zeros(s.d, 1)) for g in current]
        out.append(current)
    return out


@lru_cache(maxsize=8)
def _measure_derivatives(d: int, d_k: int, n: int) -> dict[str, sp.Matrix]:
    """Directional measure derivatives of A at a generic (x, mu, z, z'), directions a (at x), b (at z),
    c (at z'): first order from the docs/theory.md §A.3 closed forms, second order by SymPy from definitions."""
    s = attention_symbols(d, d_k, d, n)
    a, b, c = (sp.Matrix(_POINT_SYMBOLS[k](s)) for k in ("a", "b", "c"))
    z2 = sp.Matrix(_POINT_SYMBOLS["z2"](s))
    jac_a = closed_jacobian(s) * a
    lions_b = closed_lions(s) * b
    eps = sp.Symbol("epsilon")
    # mu_eps = (1 - eps) mu + eps delta_{z'}: the flat derivative of mu -> d_mu A(x, mu)(z) b at z'
    s_eps = AttentionSymbols(d, d, d, s.x, (*s.ys, z2), (*[(1 - eps) * w for w in s.ws], eps), s.z,
                             s.Q, s.K, s.V)
    flat = (closed_lions(s_eps) * b).diff(eps).subs(eps, 0)
    return {
        "field": attention_value(s),
        "jac": jac_a,                                   # grad_x A [a]
        "lions": lions_b,                               # d_mu A(x)(z) [b]
        "hess_xx": jac_a.jacobian(s.x) * a,             # grad_x^2 A [a, a]
        "hess_xz": lions_b.jacobian(s.x) * a,           # grad_x d_mu A(x)(z) [a, b]
        "hess_zz": lions_b.jacobian(s.z) * b,           # grad_z d_mu A(x)(z) [b, b]
        "lions2": flat.jacobian(z2) * c,                # d_mu^2 A(x)(z, z') [b, c]
    }


def _first_variation(s, md, v, i, *, lions=True):
    """DF_i[v] = grad_x A(X^i) v^i + (1/N) sum_j d_mu A(X^i)(X^j) v^j."""
    n, y = len(s.ys), s.ys
    out = _at(md["jac"], s, x=y[i], a=v[i])
    if lions:
        out += sum((_at(md["lions"], s, x=y[i], z=y[j], b=v[j]) for j in range(n)), sp.zeros(s.d, 1)) / n
    return out


def _second_variation(s, md, v, i):
    """D^2F_i[v, v] with the mixed, grad_z-Lions and second-Lions terms written out."""
    n, y = len(s.ys), s.ys
    out = _at(md["hess_xx"], s, x=y[i], a=v[i])
    for j in range(n):
        out += 2 * _at(md["hess_xz"], s, x=y[i], z=y[j], a=v[i], b=v[j]) / n
        out += _at(md["hess_zz"], s, x=y[i], z=y[j], b=v[j]) / n
        for k in range(n):
            out += _at(md["lions2"], s, x=y[i], z=y[j], z2=y[k], b=v[j], c=v[k]) / n**2
    return out


def block_coefficients(s: AttentionSymbols, order: int, *, lions: bool = True) -> list[list[sp.Matrix]]:
    """[c_k]_{k=1..order} (c_k = L^k X / k!, per particle) assembled from the measure derivatives;
    ``lions=False`` drops the Lions term of DF (a deliberately wrong expansion)."""
    md = _measure_derivatives(s.d, s.d_k, len(s.ys))
    n = len(s.ys)
    F = [_at(md["field"], s, x=y) for y in s.ys]
    out = [F]
    if order >= 2:
        DF = [_first_variation(s, md, F, i, lions=lions) for i in range(n)]
        out.append([e / 2 for e in DF])
    if order >= 3:
        out.append([(_second_variation(s, md, F, i) + _first_variation(s, md, DF, i, lions=lions)) / 6
                    for i in range(n)])
    return out


# --------------------------------------------------------------------------- jet pieces (kernels)
def attention_jet(s: AttentionSymbols, dx: sp.Matrix, dys) -> tuple[sp.Matrix, sp.Matrix, sp.Matrix]:
    """(A, A', A'') along x + t dx, y_j + t dy_j assembled from :func:`jet_pieces` exactly as the
    loop template does (softmax over the atoms of ``s`` with weights ``s.ws``)."""
    P = jet_pieces(s.d, s.d_k, s.d_v)
    names = {f"{n}_{a}": e for n, vec in (("x", s.x), ("dx", dx)) for a, e in enumerate(vec)}
    params = {sp.Symbol(f"{n}_{a}_{b}", real=True): M[a, b] for n, M in (("Q", s.Q), ("K", s.K), ("V", s.V))
              for a in range(M.rows) for b in range(M.cols)}

    def sub(expr, extra):  # replace symbols by name (the pieces' symbols carry assumptions)
        expr = sp.sympify(expr).xreplace(params)
        return expr.xreplace({v: extra[v.name] for v in expr.free_symbols if v.name in extra})

    qf = {k: sub(e, names) for k, e in P.query.items()}
    Z = sum(w * sp.exp(s.logit(s.x, yj)) for w, yj in zip(s.ws, s.ys))
    atoms = []
    for w, yj, dyj in zip(s.ws, s.ys, dys):
        tok = {f"y_{a}": yj[a] for a in range(s.d)} | {f"dy_{a}": dyj[a] for a in range(s.d)}
        feats = qf | {k: sub(e, tok) for k, e in P.key.items()}
        lg = {k: sub(e, feats) for k, e in P.logit.items()}
        p = w * sp.exp(s.logit(s.x, yj)) / Z
        atoms.append((feats, lg, p))
    m1 = sum(sub(P.moments["mom1"], {"p": p} | lg) for _, lg, p in atoms)
    m2 = sum(sub(P.moments["mom2"], {"p": p} | lg) for _, lg, p in atoms)
    s2 = sum(sub(P.spread["spread"], {"p": p, "lc": lg["logit1"] - m1}) for _, lg, p in atoms)
    out = []
    for m in range(3):
        out.append(sp.Matrix([sum(sub(P.jet[f"jet{m}_{c}"], feats | {"p": p, "lc": lg["logit1"] - m1,
                                                                     "e2": lg["logit2"] - m2 - s2})
                                  for feats, lg, p in atoms) for c in range(s.d_v)]))
    return tuple(out)


# --------------------------------------------------------------------------- derivation
_GENERIC = {
    "mv_ode": r"\frac{dX^i}{dt} = F_i(X) := \Gamma(X^i, \mu^N, \nu),\qquad \mu^N = \frac1N\sum_{j=1}^N \delta_{X^j},"
              r"\qquad \Gamma(x,\mu,\nu) = \sum_a w_a O_a A_a(x,\mu)",
    "lie_series": r"\Phi_h(X) = \sum_{k\ge 0}\frac{h^k}{k!}\,\mathcal{L}^k X,\qquad "
                  r"\mathcal{L} = \sum_{i=1}^N F_i(X)\cdot\nabla_{X^i}",
    "first_variation": r"DF_i[v] = \nabla_x\Gamma(X^i,\mu^N)\,v^i + \frac1N\sum_{j=1}^N "
                       r"\partial_\mu\Gamma(X^i,\mu^N)(X^j)\,v^j",
    "second_variation": r"D^2F_i[v,v] = \nabla_x^2\Gamma(X^i,\mu^N)[v^i,v^i] + \frac2N\sum_j "
                        r"\nabla_x\partial_\mu\Gamma(X^i,\mu^N)(X^j)[v^i,v^j] + \frac1N\sum_j "
                        r"\nabla_z\partial_\mu\Gamma(X^i,\mu^N)(X^j)[v^j,v^j] + \frac1{N^2}\sum_{j,k} "
                        r"\partial^2_\mu\Gamma(X^i,\mu^N)(X^j,X^k)[v^j,v^k]",
    "second_lions_derivative": r"\partial^2_\mu\Gamma(x,\mu)(z,z') = \partial_\mu\bigl[\mu\mapsto"
                               r"\partial_\mu\Gamma(x,\mu)(z)\bigr](\mu)(z') = \nabla_{z'}\frac{\delta}{\delta\mu}"
                               r"\bigl[\partial_\mu\Gamma(x,\mu)(z)\bigr](z')",
    "order_1": r"\Phi_h(X)^i = X^i + h\,F_i + O(h^2)",
    "order_2": r"\Phi_h(X)^i = X^i + h\,F_i + \frac{h^2}{2}\,DF_i[F] + O(h^3)",
    "order_3": r"\Phi_h(X)^i = X^i + h\,F_i + \frac{h^2}{2}\,DF_i[F] + \frac{h^3}{6}\bigl(D^2F_i[F,F] "
               r"+ DF_i[DF[F]]\bigr) + O(h^4)",
    "attention_jet": r"\frac{d^2}{ds^2}A(x+s\,\delta x, \textstyle\sum_j w_j\delta_{y_j+s\,\delta y_j})\big|_{s=0} "
                     r"= \sum_j p_j\bigl[(c_j^2 + \ell''_j - \bar\ell'' - \mathrm{Var}_p\ell')Vy_j "
                     r"+ 2c_jV\delta y_j\bigr],"
                     r"\quad c_j = \ell'_j - \bar\ell'",
}


@register_derivation("flow-taylor", title="Taylor block expansion of the MV-ODE flow map (orders 1-3)",
                     params=_PARAMS)
def _flow_taylor(order: int, d: int, d_k: int, n_particles: int) -> Derivation:
    s = attention_symbols(d, d_k, d, n_particles)
    lie = lie_series(s, order)
    coeffs = block_coefficients(s, order)
    checks = []
    for k in range(order):
        lhs = sp.Matrix.vstack(*lie[k])
        rhs = factorial(k + 1) * sp.Matrix.vstack(*coeffs[k])
        if not prove_identity(s, _name_exponentials(s, lhs), _name_exponentials(s, rhs)):  # pragma: no cover
            raise RuntimeError(f"flow-taylor: order-{k + 1} coefficient differs from the Lie series")
        checks.append(f"order {k + 1}: {k + 1}! c_{k + 1} equals SymPy's L^{k + 1} X of the {n_particles}-particle "
                      f"system (d={d}, d_k={d_k}): exponentials e^(a(X^i, X^j)) named, difference evaluated "
                      "exactly at random rational points (Schwartz-Zippel).")
    if order >= 2:
        wrong = block_coefficients(s, 2, lions=False)[1]
        if prove_identity(s, _name_exponentials(s, sp.Matrix.vstack(*lie[1])),
                          _name_exponentials(s, 2 * sp.Matrix.vstack(*wrong))):  # pragma: no cover
            raise RuntimeError("flow-taylor: dropping the Lions term did not change the order-2 coefficient")
        checks.append("control: without the Lions term (1/N) sum_j d_mu Gamma(X^i)(X^j) v^j the order-2 "
                      "coefficient is NOT the Lie series term (the identity test rejects it).")
    # the jet used by the generated kernels, against SymPy's d/ds along a linear path (general weights)
    t = sp.Symbol("t")
    dx, dys = _vec("dx", d), [_vec(f"dy{j}", d) for j in range(n_particles)]
    moved = {**dict(zip(s.x, s.x + t * dx)),
             **{c: c + t * e for y, dy in zip(s.ys, dys) for c, e in zip(y, dy)}}
    path = attention_value(s).xreplace(moved)
    raw = [path.diff(t, m).subs(t, 0) for m in (1, 2)]
    _, jet1, jet2 = attention_jet(s, dx, dys)
    if not (prove_identity(s, raw[0], jet1) and prove_identity(s, raw[1], jet2)):  # pragma: no cover
        raise RuntimeError("flow-taylor: the attention jet differs from SymPy's path derivatives")
    checks.append("kernel jet: the first and second path derivatives of A(x + s dx, sum_j w_j delta_{y_j + s dy_j}) "
                  "assembled from the generated pieces (jet_pieces) equal SymPy's d/ds, d^2/ds^2 "
                  "(general weights; exact rational identity test).")
    checks.append("Numerically: remainders of the order-k expansion against an RK4 reference flow shrink at "
                  "rate k + 1 for k = 1, 2, 3; without the Lions term or with the wrong 1/2 factor they do not "
                  "(tests/test_flow_taylor.py).")
    filename, source = jet_kernel_source(d, d_k, d)
    expressions = {f"coefficient_{k + 1}": _name_exponentials(s, sp.Matrix.vstack(*coeffs[k]))
                   for k in range(order)}
    return Derivation(
        name="flow-taylor", title="Taylor block expansion of the MV-ODE flow map (orders 1-3)",
        summary=("Coefficients of the flow map Phi_h of the N-particle McKean-Vlasov ODE dX^i/dt = "
                 "Gamma(X^i, mu^N, nu) over a block of depth h, up to order 3, with the Lions (interaction) "
                 "terms explicit. SymPy derives them from the Lie series of the autonomous N-particle system "
                 f"and checks them componentwise (single-head attention, d={d}, d_k={d_k}, N={n_particles}; "
                 "coefficient_k stacks c_k = L^k X / k! over the particles, e^(a(X^i, X^j)) written E_i_j)."),
        expressions=expressions,
        generic_latex={k: v for k, v in _GENERIC.items()
                       if not (k.startswith("order_") and int(k[-1]) > order)},
        assumptions=[
            "Autonomous field over the block: the head law nu is frozen at the block start (for a "
            "depth-dependent nu_t the expansion gains d/dt terms, not included).",
            "Unmasked attention, mu^N the empirical measure of the N particles (weights 1/N); "
            "O_a folded into V in the componentwise check (V is d x d there).",
            "Smooth field (softmax attention is real-analytic), so the Lie series is the Taylor series of "
            "the flow and the truncation error is O(h^{k+1}) uniformly on compact sets.",
        ],
        checks=checks,
        kernels={filename.rsplit("_", 1)[0] + ".py": source},  # no cache key: docs do not churn
    )
