"""Calculus of softmax attention as a function of the token measure (docs/theory.md §A.3).

For a probability measure mu on R^d and head parameters Q, K in R^{d_k x d}, V in R^{d_v x d},

    a(x, y)    = <Q x, K y>,
    Z(x, mu)   = int e^{a(x,y)} mu(dy),      pi_mu(x, y) = e^{a(x,y)} / Z(x, mu),
    A(x, mu)   = int V y pi_mu(x, y) mu(dy).

Derived here, componentwise for concrete (d, d_k, d_v) and a measure with ``n_atoms`` atoms
mu = sum_j w_j delta_{y_j} (weights summing to one):

* flat derivative   dA/dmu(x, mu)(z) = pi_mu(x, z) (V z - A(x, mu))            (d_v)
* Lions derivative  d_mu A(x, mu)(z) = pi_mu(x, z) [V + (V z - A)(K^T Q x)^T]   (d_v x d)
* spatial Jacobian  grad_x A(x, mu)  = Cov_{pi mu}(V y, Q^T K y)                (d_v x d)
* multi-head field  Gamma(x, mu, nu^H) = (1/H) sum_h O_h A_h(x, mu)             (d)

Each closed form is checked against SymPy's own differentiation: after differentiating, every
exponential e^{a(x, y_j)} is replaced by a fresh symbol E_j, which turns both sides into rational
functions, and their difference is evaluated exactly at random rational points (Schwartz-Zippel
identity test, :func:`prove_identity`).  The same test confirms the empirical-measure identity
dA(x, m)/dy_j = w_j d_mu A(x, m)(y_j).

Per-token and per-pair pieces of the closed forms
(:func:`transformer_limits.symbolic.template_pieces.kernel_pieces`) feed the loop templates of
:mod:`transformer_limits.symbolic.attention_kernels`, whose sources the derivations show.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import mpmath
import sympy as sp

from transformer_limits.symbolic.attention_kernels import attention_kernel_sources
from transformer_limits.symbolic.derivation import Derivation, Param, register_derivation

__all__ = [
    "AttentionSymbols",
    "attention_symbols",
    "attention_value",
    "flat_derivative",
    "lions_derivative",
    "spatial_jacobian",
]

_SHAPE_PARAMS = (
    Param("d", int, 2, "token dimension d", low=1, high=8),
    Param("d_k", int, 2, "query/key dimension d_k", low=1, high=8),
    Param("d_v", int, 2, "value dimension d_v", low=1, high=8),
    Param("n_atoms", int, 2, "atoms of the measure used for the symbolic proof", low=1, high=4),
    Param("seed", int, None, "evaluate the formulas at a seeded random point (values)", low=0),
)


def _matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    return sp.Matrix(rows, cols, lambda a, b: sp.Symbol(f"{name}_{a}_{b}", real=True))


def _vector(name: str, n: int) -> sp.Matrix:
    return sp.Matrix([sp.Symbol(f"{name}_{a}", real=True) for a in range(n)])


@dataclass(frozen=True)
class AttentionSymbols:
    """Symbols for one head and a measure mu = sum_j w_j delta_{y_j}."""

    d: int
    d_k: int
    d_v: int
    x: sp.Matrix  # (d, 1) query position
    ys: tuple[sp.Matrix, ...]  # atoms y_j, each (d, 1)
    ws: tuple[sp.Symbol, ...]  # atom weights w_j > 0
    z: sp.Matrix  # (d, 1) the point where measure derivatives are evaluated
    Q: sp.Matrix
    K: sp.Matrix
    V: sp.Matrix

    def logit(self, x: sp.Matrix, y: sp.Matrix) -> sp.Expr:
        """a(x, y) = <Q x, K y>."""
        return ((self.Q * x).T * (self.K * y))[0, 0]

    def exp_symbols(self) -> dict[sp.Expr, sp.Symbol]:
        """e^{a(x, y_j)} -> E_j and e^{a(x, z)} -> E_z: turns attention into rational functions."""
        out = {sp.exp(self.logit(self.x, y)): sp.Symbol(f"E_{j}", positive=True)
               for j, y in enumerate(self.ys)}
        out[sp.exp(self.logit(self.x, self.z))] = sp.Symbol("E_z", positive=True)
        return out

    def all_symbols(self) -> list[sp.Symbol]:
        syms = list(self.x) + [s for y in self.ys for s in y] + list(self.ws) + list(self.z)
        return syms + list(self.Q) + list(self.K) + list(self.V)


@lru_cache(maxsize=32)
def attention_symbols(d: int, d_k: int, d_v: int, n_atoms: int) -> AttentionSymbols:
    return AttentionSymbols(
        d=d, d_k=d_k, d_v=d_v,
        x=_vector("x", d),
        ys=tuple(_vector(f"y{j}", d) for j in range(n_atoms)),
        ws=tuple(sp.Symbol(f"w_{j}", positive=True) for j in range(n_atoms)),
        z=_vector("z", d),
        Q=_matrix("Q", d_k, d), K=_matrix("K", d_k, d), V=_matrix("V", d_v, d),
    )


def _attention_of(s: AttentionSymbols, x: sp.Matrix, atoms, weights) -> sp.Matrix:
    """A(x, sum_j w_j delta_{y_j}) for explicit atoms/weights (weights need not sum to one)."""
    e = [sp.exp(s.logit(x, y)) for y in atoms]
    Z = sum(w * ej for w, ej in zip(weights, e))
    return sum((w * ej * (s.V * y) for w, ej, y in zip(weights, e, atoms)), sp.zeros(s.d_v, 1)) / Z


def attention_value(s: AttentionSymbols) -> sp.Matrix:
    """A(x, mu), shape (d_v, 1)."""
    return _attention_of(s, s.x, s.ys, s.ws)


def flat_derivative(s: AttentionSymbols) -> sp.Matrix:
    """dA/dmu(x, mu)(z) = d/d eps A(x, (1 - eps) mu + eps delta_z) at eps = 0, by SymPy."""
    eps = sp.Symbol("epsilon")
    perturbed = _attention_of(s, s.x, (*s.ys, s.z), (*[(1 - eps) * w for w in s.ws], eps))
    return perturbed.diff(eps).subs(eps, 0)


def lions_derivative(s: AttentionSymbols) -> sp.Matrix:
    """d_mu A(x, mu)(z) = grad_z of the flat derivative, by SymPy; shape (d_v, d)."""
    return flat_derivative(s).jacobian(s.z)


def spatial_jacobian(s: AttentionSymbols) -> sp.Matrix:
    """grad_x A(x, mu), by SymPy; shape (d_v, d)."""
    return attention_value(s).jacobian(s.x)


# --------------------------------------------------------------------------- closed forms
def _pi(s: AttentionSymbols, y: sp.Matrix) -> sp.Expr:
    Z = sum(w * sp.exp(s.logit(s.x, yj)) for w, yj in zip(s.ws, s.ys))
    return sp.exp(s.logit(s.x, y)) / Z


def closed_flat(s: AttentionSymbols) -> sp.Matrix:
    return _pi(s, s.z) * (s.V * s.z - attention_value(s))


def closed_lions(s: AttentionSymbols) -> sp.Matrix:
    r = s.K.T * (s.Q * s.x)
    return _pi(s, s.z) * (s.V + (s.V * s.z - attention_value(s)) * r.T)


def closed_jacobian(s: AttentionSymbols) -> sp.Matrix:
    A = attention_value(s)
    out = sp.zeros(s.d_v, s.d)
    for w, y in zip(s.ws, s.ys):
        out += w * _pi(s, y) * (s.V * y - A) * (s.Q.T * (s.K * y)).T
    return out


def prove_identity(s: AttentionSymbols, lhs: sp.Matrix, rhs: sp.Matrix, *, trials: int = 3,
                   seed: int = 0) -> bool:
    """Decide lhs == rhs as functions of x, the atoms, the weights and Q, K, V.

    Every exponential e^{a(x, y_j)} is replaced by an independent symbol E_j; both sides become
    rational functions of the symbols, and their difference is evaluated *exactly* at ``trials``
    random rational points (Schwartz-Zippel: a non-zero rational function of total degree D vanishes
    at a random point of S^n with probability <= D / |S|; |S| = 10^12 here, so a wrong identity
    passes with probability below 1e-9 per trial).  An exponential that could not be named makes
    the test fail, never pass.
    """
    import random

    table = [(sp.expand(e.args[0]), E) for e, E in s.exp_symbols().items()]

    def name_exponential(e):
        arg = sp.expand(e.args[0])
        for a, E in table:
            if arg == a:
                return E
            if arg == -a:  # SymPy writes 1/exp(a) as exp(-a)
                return 1 / E
        return e

    diff = (lhs - rhs).replace(lambda e: isinstance(e, sp.exp), name_exponential)
    if any(e.has(sp.exp) for e in diff):
        return False
    syms = sorted(set().union(*(e.free_symbols for e in diff)), key=str)
    rng = random.Random(seed)
    for _ in range(trials):
        point = {v: sp.Rational(rng.randint(1, 10**12), rng.randint(1, 10**6)) * rng.choice((-1, 1))
                 for v in syms}
        if any(e.xreplace(point) != 0 for e in diff):
            return False
    return True


# --------------------------------------------------------------------------- kernel pieces
# --------------------------------------------------------------------------- numeric values
def _random_point(s: AttentionSymbols, seed: int) -> dict[sp.Symbol, sp.Float]:
    """A seeded random configuration (uniform in [-1, 1], weights normalised), exact rationals."""
    import random

    rng = random.Random(seed)
    point = {sym: sp.Rational(rng.randint(-1000, 1000), 1000) for sym in s.all_symbols()}
    raw = [sp.Rational(rng.randint(1, 1000), 1000) for _ in s.ws]
    total = sum(raw)
    point.update({w: r / total for w, r in zip(s.ws, raw)})
    return point


def evaluate_mpmath(expr: sp.Matrix, point: dict, dps: int = 50) -> list:
    """Evaluate a SymPy matrix at ``point`` with mpmath at ``dps`` digits (nested lists of mpf)."""
    syms = sorted(point, key=str)
    f = sp.lambdify(syms, expr, modules="mpmath")
    with mpmath.workdps(dps):
        val = f(*[mpmath.mpf(sp.Rational(point[s]).p) / sp.Rational(point[s]).q for s in syms])
        return [[val[i, j] for j in range(val.cols)] for i in range(val.rows)]


def _values(s: AttentionSymbols, named: dict[str, tuple[sp.Matrix, sp.Matrix]], seed: int) -> dict:
    point = _random_point(s, seed)
    out: dict = {"point": {str(k): float(v) for k, v in point.items()}}
    for name, (raw, closed) in named.items():
        a = evaluate_mpmath(raw, point)
        b = evaluate_mpmath(closed, point)
        out[name] = [[float(v) for v in row] for row in b]
        out[f"{name}_residual"] = float(max(abs(u - v) for ra, rb in zip(a, b) for u, v in zip(ra, rb)))
    return out


# --------------------------------------------------------------------------- derivations
_ASSUMPTIONS = [
    "mu = sum_j w_j delta_{y_j} is a probability measure with n_atoms atoms (w_j > 0, sum w_j = 1); "
    "the closed forms hold for every compactly supported mu (the proof is atom-by-atom).",
    "Unmasked softmax attention; a 1/sqrt(d_k) temperature is absorbed in Q.",
    "Q, K in R^{d_k x d}, V in R^{d_v x d}; the output matrix O of a head multiplies A from the left.",
]


def _kernel_sources(d: int, d_k: int, d_v: int) -> dict[str, str]:
    return attention_kernel_sources(d, d_k, d_v)


_GENERIC = {
    "attention": r"A(x,\mu) = \int V y\, \pi_\mu(x,y)\, \mu(dy),\quad "
                 r"\pi_\mu(x,y) = \frac{e^{\langle Qx, Ky\rangle}}{\int e^{\langle Qx, Ky'\rangle}\mu(dy')}",
    "multi_head_field": r"\Gamma(x,\mu,\nu^H) = \frac{1}{H}\sum_{h=1}^H O_h A_h(x,\mu)",
    "flat_derivative": r"\frac{\delta A}{\delta\mu}(x,\mu)(z) = \pi_\mu(x,z)\,\bigl(Vz - A(x,\mu)\bigr)",
    "lions_derivative": r"\partial_\mu A(x,\mu)(z) = \pi_\mu(x,z)\,\bigl[V + (Vz - A(x,\mu))(K^\top Q x)^\top\bigr]",
    "jacobian": r"\nabla_x A(x,\mu) = \int \pi_\mu(x,y)\,(Vy - A(x,\mu))(Q^\top K y)^\top\,\mu(dy) "
                r"= \mathrm{Cov}_{\pi_\mu(x,\cdot)\mu}(Vy,\; Q^\top K y)",
    "empirical_identity": r"\frac{\partial A(x, m^N)}{\partial x^j} = \frac{1}{N}\,\partial_\mu A(x, m^N)(x^j)",
}


@register_derivation("attention", title="Softmax attention A(x, mu) and the multi-head field Gamma",
                     params=_SHAPE_PARAMS + (Param("heads", int, 2, "heads H of Gamma", low=1, high=4),))
def _attention(d: int, d_k: int, d_v: int, n_atoms: int, seed: int | None, heads: int) -> Derivation:
    s = attention_symbols(d, d_k, d_v, n_atoms)
    A = attention_value(s)
    Os = [_matrix(f"O{h}", d, d_v) for h in range(heads)]
    head_syms = []
    for h in range(heads):
        sh = AttentionSymbols(d, d_k, d_v, s.x, s.ys, s.ws, s.z, _matrix(f"Q{h}", d_k, d),
                              _matrix(f"K{h}", d_k, d), _matrix(f"V{h}", d_v, d))
        head_syms.append(sh)
    gamma = sum((O * attention_value(sh) for O, sh in zip(Os, head_syms)), sp.zeros(d, 1)) / heads
    # permutation invariance in the atoms: swap the first two atoms (with their weights)
    checks = []
    if n_atoms >= 2:
        swap = {**{a: b for a, b in zip(s.ys[0], s.ys[1])}, **{b: a for a, b in zip(s.ys[0], s.ys[1])},
                s.ws[0]: s.ws[1], s.ws[1]: s.ws[0]}
        assert A.xreplace(swap) == A
        checks.append("A(x, mu) is invariant under permuting the atoms of mu (SymPy, structurally identical).")
    convex = sum(w * _pi(s, y) for w, y in zip(s.ws, s.ys))
    assert prove_identity(s, sp.Matrix([convex]), sp.Matrix([1]))
    checks.append("int pi_mu(x, y) mu(dy) = 1: A is a pi-weighted average of V y (exact rational identity test).")
    checks.append("Generated kernels agree with a NumPy einsum reference and with mpmath at 50 digits "
                  "(tests/test_attention_kernels.py).")
    values = _values(s, {"A": (A, A)}, seed) if seed is not None else {}
    values.pop("A_residual", None)
    return Derivation(
        name="attention", title="Softmax attention A(x, mu) and the multi-head field Gamma",
        summary=("Softmax attention of a query x against a token measure mu, A(x, mu) = "
                 "int V y pi_mu(x, y) mu(dy), and the multi-head mean-field Gamma = (1/H) sum_h O_h A_h "
                 f"(componentwise for d={d}, d_k={d_k}, d_v={d_v}, a measure with {n_atoms} atoms, "
                 f"H={heads} heads)."),
        expressions={"A": A, "Gamma": gamma},
        generic_latex={k: _GENERIC[k] for k in ("attention", "multi_head_field")},
        assumptions=_ASSUMPTIONS, checks=checks, values=values,
        kernels=_kernel_sources(d, d_k, d_v),
    )


def _derivative_derivation(name: str, title: str, key: str, raw_fn, closed_fn, extra_checks,
                           d, d_k, d_v, n_atoms, seed) -> Derivation:
    s = attention_symbols(d, d_k, d_v, n_atoms)
    raw = raw_fn(s)
    closed = closed_fn(s)
    if not prove_identity(s, raw, closed):  # pragma: no cover - would be a SymPy regression
        raise RuntimeError(f"{name}: SymPy could not confirm the closed form")
    checks = [f"SymPy's derivative equals the closed form for d={d}, d_k={d_k}, d_v={d_v} and "
              f"{n_atoms} atoms: exponentials named as symbols, the difference evaluated exactly at "
              f"random rational points (Schwartz-Zippel; a wrong identity passes with prob. < 1e-27)."]
    checks += extra_checks(s, closed)
    checks.append("Generated kernels agree with a NumPy einsum reference and with mpmath at 50 digits "
                  "(tests/test_attention_kernels.py).")
    values = _values(s, {key: (raw, closed)}, seed) if seed is not None else {}
    return Derivation(
        name=name, title=title,
        summary=(f"{title}, for A(x, mu) = int V y pi_mu(x, y) mu(dy). SymPy differentiates the "
                 f"componentwise attention for d={d}, d_k={d_k}, d_v={d_v} and a measure with "
                 f"{n_atoms} atoms ({key}_sympy), and the closed form ({key}) is checked against it. "
                 "The generated kernels evaluate the closed form."),
        expressions={key: closed, f"{key}_sympy": raw},
        generic_latex={key: _GENERIC[key]} | (
            {"empirical_identity": _GENERIC["empirical_identity"]} if key == "lions_derivative" else {}),
        assumptions=_ASSUMPTIONS, checks=checks, values=values,
        kernels=_kernel_sources(d, d_k, d_v),
    )


def _flat_checks(s: AttentionSymbols, closed: sp.Matrix) -> list[str]:
    # normalisation convention: int dA/dmu(x, mu)(z) mu(dz) = 0
    total = sum((w * closed.xreplace(dict(zip(s.z, y))) for w, y in zip(s.ws, s.ys)), sp.zeros(s.d_v, 1))
    total = total.xreplace({s.ws[-1]: 1 - sum(s.ws[:-1])})
    assert prove_identity(s, total, sp.zeros(s.d_v, 1))
    return ["Normalisation: int dA/dmu(x, mu)(z) mu(dz) = 0 (exact rational identity test, with sum w_j = 1)."]


def _lions_checks(s: AttentionSymbols, closed: sp.Matrix) -> list[str]:
    A = attention_value(s)
    for j, (w, y) in enumerate(zip(s.ws, s.ys)):
        lhs = A.jacobian(y)
        rhs = w * closed.xreplace(dict(zip(s.z, y)))
        assert prove_identity(s, lhs, rhs), j
    return ["Empirical-measure identity dA(x, mu)/dy_j = w_j d_mu A(x, mu)(y_j) for every atom "
            "(exact rational identity test); with w_j = 1/N this is dA(x, m^N)/dx^j = (1/N) d_mu A(x, m^N)(x^j).",
            "First-order Taylor remainder in the atom positions shrinks at rate 2 "
            "(tests/test_attention_kernels.py::test_lions_taylor_remainder)."]


def _jacobian_checks(s: AttentionSymbols, closed: sp.Matrix) -> list[str]:
    return ["grad_x A equals the covariance of (V y, Q^T K y) under pi_mu(x, .) mu (the closed form)."]


_DERIVATIVES = [
    ("attention-flat-derivative", "Flat (linear functional) derivative of attention in mu",
     "flat_derivative", flat_derivative, closed_flat, _flat_checks),
    ("attention-lions-derivative", "Lions derivative of attention in mu",
     "lions_derivative", lions_derivative, closed_lions, _lions_checks),
    ("attention-jacobian", "Spatial Jacobian grad_x A(x, mu) of attention",
     "jacobian", spatial_jacobian, closed_jacobian, _jacobian_checks),
]


def _register_derivatives() -> None:
    for name, title, key, raw_fn, closed_fn, extra in _DERIVATIVES:
        def build(d, d_k, d_v, n_atoms, seed, _n=name, _t=title, _k=key, _r=raw_fn, _c=closed_fn, _e=extra):
            return _derivative_derivation(_n, _t, _k, _r, _c, _e, d, d_k, d_v, n_atoms, seed)

        register_derivation(name, title=title, params=_SHAPE_PARAMS)(build)


_register_derivatives()
