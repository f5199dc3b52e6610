"""Taylor block expansions of the attention MV-ODE flow map, evaluated with generated kernels.

For N particles X (N, d) and a head law with finite atoms frozen over the block (docs/theory.md §A.2–A.3),

    dX^i/dt = F_i(X) = Gamma(X^i, mu^N) = sum_a w_a O_a A_a(X^i, mu^N),   mu^N = (1/N) sum_j delta_{X^j},

the order-k block expansion of the flow map Phi_h (derivation ``flow-taylor``) is

    Phi_h(X) ~ X + h c_1 + h^2 c_2 + h^3 c_3,   c_1 = F,  c_2 = DF[F] / 2,
    c_3 = (D^2F[F, F] + DF[DF[F]]) / 6,

with the first variation (spatial Jacobian + Lions/interaction term, generated attention kernels
:func:`~transformer_limits.numeric.attention.kernels.attention_kernels`)

    DF_i[v] = sum_a w_a O_a [ grad_x A_a(X^i) v^i + (1/N) sum_j d_mu A_a(X^i)(X^j) v^j ],

and the second variation D^2F[v, v] = d^2/ds^2 F(X + s v)|_{s=0} — the exact second directional
derivative, which contains the spatial Hessian, the mixed and grad_z Lions terms and the second Lions
derivative of the derivation — evaluated by the generated *jet* kernel
(:mod:`transformer_limits.symbolic.flow_taylor_kernels`): the softmax jet along x_i + s v^i with every
atom moving as y_j + s v^j (no finite differences anywhere).  :func:`attention_jet` runs that kernel on any
backend of its flavours (python-numpy, python-numba, python-cuda, cuda-c; one calling convention, run
through :class:`~transformer_limits.numeric.runtime.Runtime`, host arrays in and out), and every ``backend=`` below reaches both the attention and the jet kernels.

Reference: the same field integrated by classical RK4 with ``reference_steps`` steps over [0, h]
(global error ~ h (h/steps)^4, far below the order-3 remainder ~ h^4 for the default 32 steps).
``transformer_limits.verify.taylor.flow_taylor_remainder_rates`` runs the Taylor test on
t -> Phi_t(X) at t = 0 with the coefficients [c_1, ..., c_k]: the remainder of the order-k expansion
shrinks at rate k + 1.  Deliberately wrong expansions (``wrong=``): ``no-lions`` (DF without the Lions
term, D^2F without the atom motion), ``wrong-half`` (c_2 = DF[F], missing 1/2), ``no-second-lions``
(D^2F with the atoms frozen: only the order-3 term is wrong).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Mapping

import numpy as np

from transformer_limits.numeric.attention.kernels import attention_kernels
from transformer_limits.numeric.runtime import Runtime
from transformer_limits.numeric.kernel_family import FLOW_TAYLOR_JET
from transformer_limits.resource_limits import check_kernel_dimensions

__all__ = ["FrozenHeads", "WRONG_EXPANSIONS", "frozen_heads", "attention_jet", "mv_field", "first_variation",
           "second_variation", "flow_taylor_coefficients", "flow_taylor_expansion", "reference_flow",
           "random_flow_instance", "flow_taylor_problem", "flow_expansion_builder"]

#: deliberately wrong expansions (each must fail the rate test at the orders it touches)
WRONG_EXPANSIONS = {
    "no-lions": "DF without the Lions term (1/N) sum_j d_mu Gamma(X^i)(X^j) v^j, D^2F with frozen atoms",
    "wrong-half": "c_2 = DF[F] instead of DF[F]/2",
    "no-second-lions": "D^2F[F, F] with the atoms of mu^N frozen (second-order Lions terms dropped)",
}


@dataclass(frozen=True)
class FrozenHeads:
    """Head atoms of nu frozen over the block: Q, K (A, d_k, d) with beta = 1/temperature folded into
    Q, V (A, d_v, d), O (A, d, d_v), weights (A,) summing to one."""

    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    O: np.ndarray
    weights: np.ndarray

    @property
    def shapes(self) -> tuple[int, int, int]:
        """(d, d_k, d_v)."""
        return self.Q.shape[2], self.Q.shape[1], self.V.shape[1]


def frozen_heads(law_or_params: Any, *, t: float = 0.0, temperature: float = 1.0) -> FrozenHeads:
    """Heads from a :class:`~transformer_limits.numeric.attention.mean_field.HeadLaw` (atoms theta_a(t), weights
    w_a), a :class:`FrozenHeads`, or a mapping with Q, K, V, O stacks (A, ...) and optional
    ``weights`` (A,) (default uniform)."""
    if isinstance(law_or_params, FrozenHeads):
        return law_or_params
    if not (temperature > 0):
        raise ValueError(f"temperature must be positive, got {temperature!r}")
    if hasattr(law_or_params, "at") and hasattr(law_or_params, "weights"):
        params, w = law_or_params.at(float(t)), law_or_params.weights
    elif isinstance(law_or_params, Mapping):
        params, w = law_or_params, law_or_params.get("weights")
    else:
        raise ValueError("law_or_params must be a HeadLaw, FrozenHeads or a mapping with Q, K, V, O")
    try:
        Q, K, V, O = (np.asarray(params[k], dtype=np.float64) for k in ("Q", "K", "V", "O"))
    except KeyError as exc:
        raise ValueError(f"law_or_params lacks {exc.args[0]!r}") from None
    if not (Q.ndim == K.ndim == V.ndim == O.ndim == 3) or Q.shape != K.shape:
        raise ValueError("law_or_params: Q, K, V, O must be stacks (A, rows, cols) with Q, K of one shape")
    A, d_k, d = Q.shape
    d_v = V.shape[1]
    if V.shape != (A, d_v, d) or O.shape != (A, d, d_v):
        raise ValueError(f"law_or_params: V must be (A, d_v, d) and O (A, d, d_v); got {V.shape}, {O.shape}")
    w = np.full(A, 1.0 / A) if w is None else np.asarray(w, dtype=np.float64)
    if w.shape != (A,) or np.any(w < 0) or not np.isclose(w.sum(), 1.0):
        raise ValueError("law_or_params: weights must be (A,), non-negative, summing to one")
    return FrozenHeads(Q / temperature, K, V, O, w)


@lru_cache(maxsize=32)
def _jet_module(d: int, d_k: int, d_v: int, backend: str = "numpy"):
    """The generated jet kernel of ``backend``'s flavour (kernel family FLOW_TAYLOR_JET; SymPy imported only on
    a cache miss): a Python module with ``jet``, or a CuPy RawModule for ``cuda-c``."""
    check_kernel_dimensions(d=d, d_k=d_k, d_v=d_v)  # stated cap before any code is generated
    return FLOW_TAYLOR_JET.load(backend, d=int(d), d_k=int(d_k), d_v=int(d_v))


def attention_jet(X: np.ndarray, DX: np.ndarray, Y: np.ndarray, DY: np.ndarray, w: np.ndarray, Q: np.ndarray,
                  K: np.ndarray, V: np.ndarray, *,
                  backend: str = "numpy") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A, dA/ds, d^2A/ds^2) at s = 0 of A(x_i + s DX_i, sum_j w_j delta_{y_j + s DY_j}) for one head
    (docs/theory.md §A.3), each (N, d_v), by the generated jet kernel of ``backend``.  X, DX (N, d);
    Y, DY (M, d); w (M,); Q, K (d_k, d); V (d_v, d)."""
    FLOW_TAYLOR_JET.resolve(backend)  # ValueError naming an unknown or unusable backend
    args = tuple(np.ascontiguousarray(a, dtype=np.float64) for a in (X, DX, Y, DY, w, Q, K, V))
    X, DX, Y, DY, w, Q, K, V = args
    if Q.ndim != 2:
        raise ValueError(f"Q must be a matrix (d_k, d), got shape {Q.shape}")
    d_k, d = Q.shape
    if X.ndim != 2 or X.shape[1] != d or DX.shape != X.shape:
        raise ValueError(f"X and DX must have one shape (N, {d}); got {X.shape}, {DX.shape}")
    if Y.ndim != 2 or Y.shape[1] != d or DY.shape != Y.shape or Y.shape[0] < 1 or w.shape != (Y.shape[0],):
        raise ValueError(f"Y, DY must have one shape (M, {d}) with M >= 1, w (M,); got {Y.shape}, {DY.shape}, "
                         f"{w.shape}")
    if K.shape != (d_k, d) or V.ndim != 2 or V.shape[1] != d:
        raise ValueError(f"K must have shape {(d_k, d)} and V (d_v, {d}); got {K.shape}, {V.shape}")
    module = _jet_module(d, d_k, V.shape[0], backend)
    # one path for every flavour: the outputs allocated on the backend's runtime and written in place
    # by the kernel (one thread per query row on a GPU); on the host put/get are casts
    rt = Runtime(backend)
    N, M = X.shape[0], Y.shape[0]
    out = tuple(rt.empty((N, V.shape[0])) for _ in range(3))
    rt.call(module, "jet", N, *(rt.put(a) for a in args), *out, sizes=(N, M))
    A0, A1, A2 = (rt.get(a) for a in out)
    return A0, A1, A2


def _state(X: Any, heads: FrozenHeads) -> np.ndarray:
    X = np.ascontiguousarray(X, dtype=np.float64)
    d = heads.shapes[0]
    if X.ndim != 2 or X.shape[1] != d or X.shape[0] < 1:
        raise ValueError(f"X must have shape (N, {d}), got {X.shape}")
    return X


def _heads_sum(heads: FrozenHeads, per_head: Callable[[int], np.ndarray]) -> np.ndarray:
    """sum_a w_a O_a y_a^i for per_head(a) = y_a (N, d_v)."""
    return sum(w * per_head(a) @ heads.O[a].T for a, w in enumerate(heads.weights))


def mv_field(X: Any, law_or_params: Any, *, backend: str = "numpy", **frozen: Any) -> np.ndarray:
    """F_i(X) = sum_a w_a O_a A_a(X^i, mu^N), shape (N, d)."""
    heads = frozen_heads(law_or_params, **frozen)
    return _bound_field(heads, backend)(_state(X, heads))


def _bound_field(heads: FrozenHeads, backend: str) -> Callable[[np.ndarray], np.ndarray]:
    """X -> F(X) for frozen heads, each head's (Q, K, V) checked and put once
    (:meth:`~transformer_limits.numeric.attention.kernels.AttentionKernels.self_attention`): the
    reference flow evaluates the field 4 x steps times."""
    kern = attention_kernels(*heads.shapes, backend)
    bound = [kern.self_attention(heads.Q[a], heads.K[a], heads.V[a]) for a in range(len(heads.weights))]
    return lambda X: _heads_sum(heads, lambda a: bound[a](X))


def first_variation(X: Any, law_or_params: Any, v: Any, *, lions: bool = True, backend: str = "numpy",
                    **frozen: Any) -> np.ndarray:
    """DF_i[v] = sum_a w_a O_a [grad_x A_a(X^i) v^i + (1/N) sum_j d_mu A_a(X^i)(X^j) v^j], (N, d).
    ``lions=False`` drops the Lions (interaction) term (a wrong model)."""
    heads = frozen_heads(law_or_params, **frozen)
    X = _state(X, heads)
    v = np.asarray(v, dtype=np.float64)
    if v.shape != X.shape:
        raise ValueError(f"v must have the shape of X {X.shape}, got {v.shape}")
    kern = attention_kernels(*heads.shapes, backend)
    N = X.shape[0]

    def head(a: int) -> np.ndarray:
        args = (X, X, heads.Q[a], heads.K[a], heads.V[a])
        out = np.einsum("icd,id->ic", kern.jacobian(*args), v)
        if lions:
            out += np.einsum("ijcd,jd->ic", kern.lions_derivative(*args), v) / N
        return out

    return _heads_sum(heads, head)


def second_variation(X: Any, law_or_params: Any, v: Any, *, measure: bool = True, backend: str = "numpy",
                     **frozen: Any) -> np.ndarray:
    """D^2F_i[v, v] = d^2/ds^2 F_i(X + s v)|_{s=0} by the generated jet kernel of ``backend``
    (:func:`attention_jet`), (N, d).
    ``measure=False`` freezes the atoms of mu^N (drops every second-order Lions term; a wrong model)."""
    heads = frozen_heads(law_or_params, **frozen)
    X = _state(X, heads)
    v = np.ascontiguousarray(v, dtype=np.float64)
    if v.shape != X.shape:
        raise ValueError(f"v must have the shape of X {X.shape}, got {v.shape}")
    w = np.full(X.shape[0], 1.0 / X.shape[0])
    DY = v if measure else np.zeros_like(v)
    return _heads_sum(heads, lambda a: attention_jet(X, v, X, DY, w, heads.Q[a], heads.K[a], heads.V[a],
                                                     backend=backend)[2])


def _check_order(order: Any) -> int:
    if not isinstance(order, (int, np.integer)) or not 1 <= order <= 3:
        raise ValueError(f"order must be 1, 2 or 3, got {order!r}")
    return int(order)


def flow_taylor_coefficients(X: Any, law_or_params: Any, order: int = 3, *, wrong: str | None = None,
                             backend: str = "numpy", t: float = 0.0, temperature: float = 1.0) -> list[np.ndarray]:
    """[c_1, ..., c_order] (each (N, d)) of Phi_h(X) = X + sum_k h^k c_k + O(h^{order+1})."""
    order = _check_order(order)
    if wrong is not None and wrong not in WRONG_EXPANSIONS:
        raise ValueError(f"wrong must be None or one of {', '.join(WRONG_EXPANSIONS)}; got {wrong!r}")
    heads = frozen_heads(law_or_params, t=t, temperature=temperature)
    X = _state(X, heads)
    lions = wrong != "no-lions"
    F = mv_field(X, heads, backend=backend)
    out = [F]
    if order >= 2:
        DF = first_variation(X, heads, F, lions=lions, backend=backend)
        out.append(DF if wrong == "wrong-half" else DF / 2)
    if order >= 3:
        D2 = second_variation(X, heads, F, measure=wrong not in ("no-lions", "no-second-lions"), backend=backend)
        out.append((D2 + first_variation(X, heads, DF, lions=lions, backend=backend)) / 6)
    return out


def flow_taylor_expansion(X: Any, law_or_params: Any, h: float, order: int = 3, **options: Any) -> np.ndarray:
    """The order-k block expansion X + sum_{k<=order} h^k c_k of Phi_h(X), shape (N, d).
    ``options``: ``wrong``, ``backend``, ``t`` (time of a HeadLaw), ``temperature``."""
    if not np.isfinite(h):
        raise ValueError(f"h must be finite, got {h!r}")
    coeffs = flow_taylor_coefficients(X, law_or_params, order, **options)
    return np.asarray(X, dtype=np.float64) + sum(h ** (k + 1) * c for k, c in enumerate(coeffs))


def reference_flow(X: Any, law_or_params: Any, h: float, *, steps: int = 32, backend: str = "numpy",
                   t: float = 0.0, temperature: float = 1.0) -> np.ndarray:
    """Phi_h(X) by classical RK4 with ``steps`` uniform steps on [0, h] (same frozen field)."""
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    heads = frozen_heads(law_or_params, t=t, temperature=temperature)
    Y = _state(X, heads).copy()
    dt = float(h) / steps
    f = _bound_field(heads, backend)

    for _ in range(steps):
        k1 = f(Y)
        k2 = f(Y + dt / 2 * k1)
        k3 = f(Y + dt / 2 * k2)
        k4 = f(Y + dt * k3)
        Y = Y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return Y


def random_flow_instance(rng: np.random.Generator, *, n_particles: int = 3, d: int = 2, d_k: int = 2,
                         d_v: int = 2, n_heads: int = 2,
                         radius: float = 1.0) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """X (N, d) standard normal and head atoms in S(R_theta) with R_theta = ``radius``: Gaussian Q, K, V, O
    rescaled to operator norm ``radius`` (so ||Q^T K||, ||O V|| <= radius^2 and the field and its
    derivatives are O(1) on the scale of X); Dirichlet weights."""
    for name, val in (("n_particles", n_particles), ("d", d), ("d_k", d_k), ("d_v", d_v), ("n_heads", n_heads)):
        if not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    if not radius > 0:
        raise ValueError(f"radius must be positive, got {radius!r}")
    check_kernel_dimensions(d=d, d_k=d_k, d_v=d_v)  # the expansion needs generated kernels of these sizes
    X = rng.standard_normal((n_particles, d))
    shapes = {"Q": (d_k, d), "K": (d_k, d), "V": (d_v, d), "O": (d, d_v)}
    params = {}
    for name, shape in shapes.items():
        M = rng.standard_normal((n_heads, *shape))
        params[name] = radius * M / np.linalg.norm(M, ord=2, axis=(1, 2))[:, None, None]
    params["weights"] = rng.dirichlet(np.ones(n_heads))
    return X, params


Problem = tuple[Callable[[np.ndarray], np.ndarray], np.ndarray, np.ndarray, list[np.ndarray]]


def flow_taylor_problem(X: Any, law_or_params: Any, order: int = 3, *, wrong: str | None = None,
                        backend: str = "numpy", reference_steps: int = 32, t: float = 0.0,
                        temperature: float = 1.0) -> Problem:
    """``(f, x, dx, coefficients)`` for :func:`~transformer_limits.verify.taylor.taylor_test`:
    f(tau) = Phi_tau(X) (RK4 reference, tau an array of shape (1,)), x = 0, dx = 1, coefficients
    [c_1..c_order]; the order-k remainder is ||Phi_h(X) - X - sum h^k c_k|| = O(h^{k+1})."""
    heads = frozen_heads(law_or_params, t=t, temperature=temperature)
    X = _state(X, heads)
    coeffs = flow_taylor_coefficients(X, heads, order, wrong=wrong, backend=backend)

    def f(tau: np.ndarray) -> np.ndarray:
        return reference_flow(X, heads, float(np.asarray(tau).reshape(-1)[0]), steps=reference_steps,
                              backend=backend)

    return f, np.zeros(1), np.ones(1), coeffs


def flow_expansion_builder(order: int, *, wrong: str | None = None, n_heads: int = 2, reference_steps: int = 32,
                           backend: str = "numpy") -> Callable[[Any, np.random.Generator], Problem]:
    """``build(case, rng) -> (f, x, dx, coefficients)`` for a Taylor-expansion registry such as
    ``verify.experiments.lions_taylor.EXPANSIONS``: ``case`` needs ``d``, ``d_k``, ``d_v`` and
    ``n_atoms`` (the number N of particles); the instance is drawn by :func:`random_flow_instance`."""
    order = _check_order(order)

    def build(case: Any, rng: np.random.Generator) -> Problem:
        X, params = random_flow_instance(rng, n_particles=case.n_atoms, d=case.d, d_k=case.d_k, d_v=case.d_v,
                                         n_heads=n_heads)
        return flow_taylor_problem(X, params, order, wrong=wrong, backend=backend, reference_steps=reference_steps)

    return build
