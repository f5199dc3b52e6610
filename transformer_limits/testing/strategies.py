"""Hypothesis strategies for the objects of the theory (docs/theory.md §0.3 for the symbols).

Every strategy works with no arguments (small random sizes) and takes keyword options.  A size option
(``d``, ``n_atoms``, ``heads``, ...) is an int (fixed), a ``(low, high)`` pair (drawn in that closed
range) or a hypothesis strategy of ints.  Everything is built from bounded integers and floats with
``st.composite``, so a failing example shrinks to a small, readable one (few atoms, low dimension,
coordinates 0 or 1, uniform weights)::

    from hypothesis import given
    from transformer_limits.testing import strategies as tls

    @given(tls.empirical_measures(d=3, weights="random"), tls.attention_parameters(d=3, heads=2, bound=1.0))
    def test_my_attention(measure, params): ...

* :func:`empirical_measures` — μ = Σ_j w_j δ_{y^j} on R^d: atoms ``(n, d)``, weights ``(n,)`` summing to 1;
* :func:`sphere_points`, :func:`sphere_measures` — points ``(n, d)`` of S^{d−1} (unit rows) and
  empirical measures on it;
* :func:`attention_parameters` — Q, K ``(H, d_k, d)``, V ``(H, d_v, d)``, O ``(H, d, d_v)`` (with
  ``layers=L``: ``(L, H, ...)``, the layout of ``AttentionTransformer``), optionally inside a box
  ``max |θ| ≤ bound`` or a Frobenius ball per matrix (e.g. AdamW's parameter box, docs/adamw.md);
* :func:`transformer_inputs` — N tokens ``(N, d)`` in the closed ball of radius R;
* :func:`activations` — names of the supported MLP activations;
* :func:`rate_claims` — claim strings that ``parse_rate_claim`` accepts;
* :func:`adamw_hyperparameters` — AdamW's ``lr``, ``betas``, ``eps``, ``weight_decay`` (keyword
  arguments of ``AdamW`` / ``BlockwiseAdamW``, with ``lr · weight_decay <= 1``);
* :func:`spectra` — eigenvalue spectra λ ``(n,)``, λ_i >= 0 with a resolved mode (max λ > 1e-12),
  optionally of bounded ``dynamic_range`` (no entry between 0 and max λ / r);
* :func:`token_counts` — token occurrence counts ``f_v`` of a vocabulary (Zipf-like or free), sum > 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

import numpy as np
from hypothesis import strategies as st

__all__ = ["EmpiricalMeasure", "activations", "adamw_hyperparameters", "attention_parameters",
           "empirical_measures", "rate_claims", "spectra", "sphere_measures", "sphere_points", "token_counts",
           "transformer_inputs"]

#: a size option: fixed, a closed range, or a strategy of ints
Size = int | tuple[int, int] | st.SearchStrategy
#: the one activation without a continuous derivative (``smooth=True`` leaves it out)
NONSMOOTH_ACTIVATIONS = ("relu",)


@dataclass(frozen=True, eq=False)
class EmpiricalMeasure:
    """μ = Σ_j w_j δ_{y^j}: ``atoms`` (n, d), ``weights`` (n,) positive, summing to 1."""

    atoms: np.ndarray
    weights: np.ndarray

    @property
    def n_atoms(self) -> int:
        return int(self.atoms.shape[0])

    @property
    def d(self) -> int:
        return int(self.atoms.shape[1])

    def mean(self) -> np.ndarray:
        """∫ y μ(dy) = Σ_j w_j y^j, shape (d,)."""
        return self.weights @ self.atoms


def _size(value: Size, name: str, low: int) -> st.SearchStrategy:
    """A strategy of ints >= ``low`` from a size option (see the module docstring)."""
    if isinstance(value, st.SearchStrategy):
        return value
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int, a (low, high) pair or a strategy, got {value!r}")
    if isinstance(value, int):
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value!r}")
        return st.just(value)
    if (isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                             for v in value)):
        lo, hi = value
        if not low <= lo <= hi:
            raise ValueError(f"{name} must be a range (low, high) with {low} <= low <= high, got {value!r}")
        return st.integers(lo, hi)
    raise ValueError(f"{name} must be an int, a (low, high) pair or a strategy, got {value!r}")


def _positive(value: float, name: str) -> float:
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _coordinates(shape: tuple[int, ...], bound: float) -> st.SearchStrategy:
    """Arrays of ``shape`` with entries in [−bound, bound] (floats, shrinking to 0)."""
    n = int(np.prod(shape))
    floats = st.floats(-bound, bound, allow_nan=False, allow_infinity=False)
    return st.lists(floats, min_size=n, max_size=n).map(lambda v: np.array(v, dtype=np.float64).reshape(shape))


def _weights(n: int, kind: str) -> st.SearchStrategy:
    """Uniform 1/n, or k_j / Σ k (k_j integers in 1..10: readable, shrinking to uniform)."""
    if kind == "uniform":
        return st.just(np.full(n, 1.0 / n))
    counts = st.lists(st.integers(1, 10), min_size=n, max_size=n)
    return counts.map(lambda k: np.asarray(k, dtype=np.float64) / float(sum(k)))


def _check_weights(weights: str) -> None:
    if weights not in ("uniform", "random"):
        raise ValueError(f"weights must be 'uniform' or 'random', got {weights!r}")


@st.composite
def _empirical(draw: Any, d: st.SearchStrategy, n_atoms: st.SearchStrategy, weights: str, radius: float,
               sphere: bool) -> EmpiricalMeasure:
    dim, n = draw(d), draw(n_atoms)
    atoms = draw(_unit_rows(n, dim)) if sphere else draw(_coordinates((n, dim), radius))
    return EmpiricalMeasure(atoms, draw(_weights(n, weights)))


def empirical_measures(*, d: Size = (1, 4), n_atoms: Size = (1, 8), weights: str = "uniform",
                       radius: float = 2.0) -> st.SearchStrategy:
    """Empirical measures μ = Σ_j w_j δ_{y^j} on R^d (:class:`EmpiricalMeasure`): atoms ``(n, d)`` with
    coordinates in [−radius, radius], weights ``(n,)`` summing to 1: ``"uniform"`` (1/n) or
    ``"random"`` (k_j / Σ k with integers k_j in 1..10, so every weight is >= 1/(10 n))."""
    _check_weights(weights)
    return _empirical(_size(d, "d", 1), _size(n_atoms, "n_atoms", 1), weights,
                      _positive(radius, "radius"), False)


def _unit_rows(n: int, d: int) -> st.SearchStrategy:
    """n unit vectors of R^d: v / |v| for v in [−1, 1]^d (|v| < 1e-3, e.g. the shrunk 0, gives e_1)."""
    def normalise(v: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(v, axis=1, keepdims=True)
        e1 = np.zeros_like(v)
        e1[:, 0] = 1.0
        return np.where(norms >= 1e-3, v / np.maximum(norms, 1e-3), e1)

    return _coordinates((n, d), 1.0).map(normalise)


@st.composite
def _sphere(draw: Any, d: st.SearchStrategy, n: st.SearchStrategy) -> np.ndarray:
    return draw(_unit_rows(draw(n), draw(d)))


def sphere_points(*, d: Size = (2, 5), n: Size = (1, 8)) -> st.SearchStrategy:
    """Points of the unit sphere S^{d−1} ⊂ R^d, shape ``(n, d)``, every row of norm 1 (to round-off)."""
    return _sphere(_size(d, "d", 2), _size(n, "n", 1))


def sphere_measures(*, d: Size = (2, 5), n_atoms: Size = (1, 8), weights: str = "uniform") -> st.SearchStrategy:
    """Empirical measures on S^{d−1} (:class:`EmpiricalMeasure` with unit-norm atoms), weights as in
    :func:`empirical_measures`."""
    _check_weights(weights)
    return _empirical(_size(d, "d", 2), _size(n_atoms, "n_atoms", 1), weights, 1.0, True)


NORMS = ("box", "frobenius")
#: a projection onto a ball of radius r scales to r·(1 − 4 eps): the rounded norm stays <= r
_SHRINK = 1.0 - 4 * np.finfo(np.float64).eps


@st.composite
def _attention(draw: Any, d: st.SearchStrategy, d_k: st.SearchStrategy, d_v: st.SearchStrategy,
               heads: st.SearchStrategy, layers: st.SearchStrategy | None, bound: float | None, norm: str,
               scale: float) -> dict[str, np.ndarray]:
    dim, dk, dv, H = draw(d), draw(d_k), draw(d_v), draw(heads)
    lead = (H,) if layers is None else (draw(layers), H)
    shapes = {"Q": (dk, dim), "K": (dk, dim), "V": (dv, dim), "O": (dim, dv)}
    entry = bound if bound is not None and norm == "box" else scale
    out = {}
    for name, shape in shapes.items():
        theta = draw(_coordinates(lead + shape, entry))
        if bound is not None and norm == "frobenius":
            # shrink each matrix (one per layer and head) into the Frobenius ball of radius bound
            fro = np.linalg.norm(theta, axis=(-2, -1), keepdims=True)
            theta = theta * np.minimum(1.0, _SHRINK * bound / np.maximum(fro, np.finfo(np.float64).tiny))
        out[name] = theta
    return out


def attention_parameters(*, d: Size = (1, 4), d_k: Size = (1, 3), d_v: Size = (1, 3), heads: Size = (1, 3),
                         layers: Size | None = None, bound: float | None = None, norm: str = "box",
                         scale: float = 1.0) -> st.SearchStrategy:
    """Attention parameters θ_h = (Q, K, V, O) of ``heads`` heads as a dict of arrays:
    ``Q``, ``K`` ``(H, d_k, d)``, ``V`` ``(H, d_v, d)``, ``O`` ``(H, d, d_v)``; with ``layers`` given,
    ``(L, H, ...)`` (``AttentionTransformer``'s ``params``).

    Without ``bound`` the entries lie in [−scale, scale].  With ``bound`` (e.g. AdamW's box radius
    ``adamw_box_radius(R0, lr, weight_decay, steps=K)``, docs/adamw.md): ``norm="box"`` draws every
    entry in [−bound, bound] (``max |θ_i| <= bound``, the coordinatewise AdamW box), ``norm="frobenius"``
    scales each matrix into ``‖θ‖_F <= bound`` (the blockwise box, one block per matrix)."""
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {', '.join(NORMS)}, got {norm!r}")
    return _attention(_size(d, "d", 1), _size(d_k, "d_k", 1), _size(d_v, "d_v", 1),
                      _size(heads, "heads", 1), None if layers is None else _size(layers, "layers", 1),
                      None if bound is None else _positive(bound, "bound"), norm, _positive(scale, "scale"))


@st.composite
def _inputs(draw: Any, N: st.SearchStrategy, d: st.SearchStrategy, radius: float) -> np.ndarray:
    X = draw(_coordinates((draw(N), draw(d)), radius))
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    # a token outside the ball is pulled radially onto its sphere: every row ends with |x| <= radius
    return np.where(norms > radius, X * (_SHRINK * radius / np.maximum(norms, radius)), X)


def transformer_inputs(*, N: Size = (1, 8), d: Size = (1, 4), radius: float = 1.0) -> st.SearchStrategy:
    """N tokens x^1..x^N of R^d in the closed ball of radius ``radius`` (docs/theory.md §A.5's
    sup over X0 in the ball), shape ``(N, d)``: drawn in the cube, rows outside the ball projected
    radially onto its sphere."""
    return _inputs(_size(N, "N", 1), _size(d, "d", 1), _positive(radius, "radius"))


def activations(*, names: Sequence[str] | None = None, smooth: bool = False) -> st.SearchStrategy:
    """Names of the supported activations φ (``"relu"``, ``"tanh"``, ``"sigmoid"``, ``"silu"``,
    ``"gelu"``: the keys of ``transformer_limits.numeric.sphere.lyapunov.ACTIVATIONS``, accepted by
    ``SphereTransformer``, ``mlp_field_kernels`` and ``simulate_top_lyapunov``), shrinking towards the
    first; ``names``: a subset; ``smooth``: only the C^∞ ones (no ReLU)."""
    # the names the simulators accept, in their order (the one a failing example shrinks towards)
    from transformer_limits.numeric.sphere.lyapunov import ACTIVATIONS

    supported = tuple(ACTIVATIONS)
    pool = [n for n in supported if not (smooth and n in NONSMOOTH_ACTIVATIONS)]
    if names is not None:
        if isinstance(names, str):
            raise ValueError(f"names must be a sequence of activation names, got the string {names!r}")
        unknown = [n for n in names if n not in supported]
        if unknown:
            raise ValueError(f"names must be among {', '.join(supported)}; got {unknown}")
        pool = [n for n in pool if n in names]
    if not pool:
        raise ValueError(f"names {list(names or [])} leave no activation (smooth={smooth})")
    return st.sampled_from(pool)


def _power_text(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _term_text(exponents: dict[str, Fraction], logs: dict[str, int]) -> str:
    parts = [f"log({p})" if k == 1 else f"log({p})^{k}" for p, k in logs.items()]
    parts += [f"{p}^{_power_text(q)}" for p, q in exponents.items()]
    return " ".join(parts)


@st.composite
def _term(draw: Any, params: tuple[str, ...], logs: bool) -> tuple[tuple, str]:
    """One term: for each parameter either nothing or p^(−k/m) (k in 1..4, m in 1..4), at least one
    power; with ``logs`` possibly log(p) (power 1..2) on a powered parameter (log L / L decays)."""
    exponents: dict[str, Fraction] = {}
    log_powers: dict[str, int] = {}
    first = draw(st.integers(0, len(params) - 1))
    for i, p in enumerate(params):
        if i == first or draw(st.booleans()):
            exponents[p] = -Fraction(draw(st.integers(1, 4)), draw(st.sampled_from((1, 2, 3, 4))))
            if logs and draw(st.booleans()):
                log_powers[p] = draw(st.integers(1, 2))
    key = (tuple(sorted(exponents.items())), tuple(sorted(log_powers.items())))
    return key, _term_text(exponents, log_powers)


def rate_claims(*, params: Sequence[str] = ("L", "H"), max_terms: int = 3, logs: bool = False) -> st.SearchStrategy:
    """Rate-claim strings in ``params`` that :func:`transformer_limits.verify.parse_rate_claim` accepts,
    e.g. ``"L^-1 + L^-1/3 H^-1/2"``: 1..``max_terms`` terms with distinct monomials, each a product of
    decaying powers p^(−k/m) (k, m in 1..4) and, with ``logs``, log factors (``"log(L) L^-1"``).
    Shrinks to ``"<first param>^-1"``."""
    import re

    if isinstance(params, str) or not params:
        raise ValueError(f"params must be a non-empty sequence of parameter names, got {params!r}")
    names = tuple(params)
    bad = [p for p in names if not (isinstance(p, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p))
           or p in ("log", "ln", "sqrt") or p[0] in "Cc"]
    if bad or len(set(names)) != len(names):
        # a leading name starting with C or c is read as the term's coefficient name (C1, C_fwd)
        raise ValueError(f"params must be distinct identifiers, not log, ln or sqrt and not starting with "
                         f"C or c (coefficient names), got {list(params)}")
    if isinstance(max_terms, bool) or not isinstance(max_terms, int) or max_terms < 1:
        raise ValueError(f"max_terms must be an integer >= 1, got {max_terms!r}")
    terms = st.lists(_term(names, logs), min_size=1, max_size=max_terms, unique_by=lambda t: t[0])
    return terms.map(lambda ts: " + ".join(text for _, text in ts))


#: (β1, β2) pairs :func:`adamw_hyperparameters` draws from by default: torch's default, the usual
#: LLM pair, β1 = 0 (RMSProp-like), and pairs with β1 >= √β2 (where the sup of C_β(k) is infinite)
ADAMW_BETAS = ((0.9, 0.999), (0.9, 0.95), (0.0, 0.5), (0.5, 0.9), (0.99, 0.9999), (0.95, 0.9))


def _float_range(value: float | tuple[float, float], name: str, low: float, high: float) -> st.SearchStrategy:
    """Floats from a fixed value or a closed range ``(a, b)`` inside [low, high]."""
    pair = value if isinstance(value, tuple) else (value, value)
    if not (len(pair) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                   for v in pair) and low <= pair[0] <= pair[1] <= high):
        raise ValueError(f"{name} must be a number or a range (a, b) with {low:g} <= a <= b <= {high:g}, "
                         f"got {value!r}")
    a, b = float(pair[0]), float(pair[1])
    return st.just(a) if a == b else st.floats(a, b, allow_nan=False, allow_infinity=False)


def _choices(values: Sequence[Any], name: str, ok: Any, what: str) -> tuple[Any, ...]:
    out = tuple(values)
    if isinstance(values, str) or not out or not all(ok(v) for v in out):
        raise ValueError(f"{name} must be a non-empty sequence of {what}, got {values!r}")
    return out


@st.composite
def _adamw(draw: Any, betas: tuple[tuple[float, float], ...], lr: st.SearchStrategy,
           weight_decay: tuple[float, ...], eps: tuple[float, ...]) -> dict[str, Any]:
    pair = draw(st.sampled_from(betas))
    rate = draw(lr)
    # λ <= 1/η keeps the decay factor 1 − ηλ of θ_{k−1} in [0, 1] (docs/adamw.md)
    decay = min(draw(st.sampled_from(weight_decay)), 1.0 / rate)
    return {"lr": rate, "betas": pair, "eps": draw(st.sampled_from(eps)), "weight_decay": decay}


def adamw_hyperparameters(*, betas: Sequence[tuple[float, float]] = ADAMW_BETAS,
                          lr: float | tuple[float, float] = (1e-4, 1.0),
                          weight_decay: Sequence[float] = (0.0, 1e-2, 0.3, 1.0, 5.0),
                          eps: Sequence[float] = (1e-8, 1e-300, 0.1)) -> st.SearchStrategy:
    """AdamW hyper-parameters as the keyword arguments of ``AdamW`` / ``BlockwiseAdamW``
    (docs/theory.md §A.4, docs/adamw.md): a dict ``{"lr": η, "betas": (β1, β2), "eps": ε,
    "weight_decay": λ}``.

    ``betas``: the (β1, β2) pairs drawn from (0 <= β1 < 1, 0 < β2 < 1; default
    ``ADAMW_BETAS``, both β1 < √β2 and β1 >= √β2); ``lr``: a fixed η or a range ``(a, b)`` in
    (0, 1]; ``weight_decay``: the λ values drawn from, each clipped to 1/η so that ``η λ <= 1``;
    ``eps``: the ε values drawn from (ε = 1e-300 exercises the bound's ε -> 0 limit).  Shrinks
    towards the first pair, λ and ε of each list."""
    pairs = _choices(betas, "betas", lambda b: isinstance(b, tuple) and len(b) == 2 and 0.0 <= b[0] < 1.0
                     and 0.0 < b[1] < 1.0, "pairs (beta1, beta2) with 0 <= beta1 < 1, 0 < beta2 < 1")
    pairs = tuple((float(b1), float(b2)) for b1, b2 in pairs)
    rates = _float_range(lr, "lr", 0.0, 1.0)
    if (lr if isinstance(lr, tuple) else (lr,))[0] <= 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    decays = _choices(weight_decay, "weight_decay", lambda v: isinstance(v, (int, float)) and 0.0 <= v < math.inf,
                      "finite numbers >= 0")
    epsilons = _choices(eps, "eps", lambda v: isinstance(v, (int, float)) and 0.0 <= v < math.inf,
                        "finite numbers >= 0")
    return _adamw(pairs, rates, tuple(float(v) for v in decays), tuple(float(v) for v in epsilons))


#: a spectrum's largest eigenvalue must exceed this (a spectrum of zeros has no rank)
SPECTRUM_FLOOR = 1e-12


def spectra(*, n: Size = (1, 40), max_value: float = 1e6, dynamic_range: float | None = None) -> st.SearchStrategy:
    """Eigenvalue spectra λ = (λ_1, ..., λ_n) of a covariance (docs/theory.md §C.3–C.4), shape
    ``(n,)``, entries in [0, max_value] in no particular order, with a resolved mode:
    ``max λ > 1e-12`` (``SPECTRUM_FLOOR``).  Zeros and round-off-size entries next to large
    ones are common (the cases the rank estimators must not count as modes); a failing example
    shrinks towards a short spectrum of small integers.

    ``dynamic_range`` r >= 1: every entry is 0 or >= max λ / r (smaller ones are set to 0), so that
    the modes are unambiguous: with r well below 1/(n ε) no entry sits near a round-off threshold,
    and "λ_i > 0" and "λ_i is a resolved mode" agree."""
    top = _positive(max_value, "max_value")
    if top <= SPECTRUM_FLOOR:
        raise ValueError(f"max_value must be > {SPECTRUM_FLOOR:g} (a spectrum needs a mode), got {max_value!r}")
    if dynamic_range is not None and _positive(dynamic_range, "dynamic_range") < 1.0:
        raise ValueError(f"dynamic_range must be >= 1, got {dynamic_range!r}")
    from hypothesis.extra import numpy as hnp

    floats = st.floats(0.0, top, allow_nan=False, allow_infinity=False)
    # hnp.arrays repeats a "fill" value over many entries: plateaus of equal eigenvalues and runs of zeros
    arrays = hnp.arrays(np.float64, _size(n, "n", 1), elements=floats)
    resolved = arrays.filter(lambda a: a.max() > SPECTRUM_FLOOR)
    if dynamic_range is None:
        return resolved
    cut = float(dynamic_range)
    return resolved.map(lambda a: np.where(a >= a.max() / cut, a, 0.0))


COUNT_LAWS = ("zipf", "free")


@st.composite
def _zipf_counts(draw: Any, vocab: st.SearchStrategy, exponent: st.SearchStrategy,
                 scales: tuple[int, ...]) -> list[int]:
    v, s, scale = draw(vocab), draw(exponent), draw(st.sampled_from(scales))
    counts = np.floor(scale / np.arange(1, v + 1) ** s).astype(np.int64)
    # a shuffled vocabulary: the code must sort by frequency itself, ties included
    np.random.default_rng(draw(st.integers(0, 2**32 - 1))).shuffle(counts)
    return counts.tolist() if counts.sum() > 0 else [1] * v


def token_counts(*, vocab: Size = (3, 400), law: str = "zipf", exponent: float | tuple[float, float] = (0.3, 2.0),
                 scales: Sequence[int] = (10, 1000, 10**6, 10**9), max_count: int = 50) -> st.SearchStrategy:
    """Occurrence counts f_v of the ``vocab`` token types of a corpus (docs/theory.md §C.5's
    frequency strata), a list of ints >= 0 with a positive sum.

    ``law="zipf"``: ``f_r = ⌊scale / r^s⌋`` for ranks r = 1..V (``exponent`` s, a value or a range;
    ``scale`` drawn from ``scales``), shuffled, so ties and zeros in the tail are common (all-zero:
    every count 1).  ``law="free"``: independent counts in [0, ``max_count``] (sum > 0), the
    adversarial case."""
    if law not in COUNT_LAWS:
        raise ValueError(f"law must be one of {', '.join(COUNT_LAWS)}, got {law!r}")
    sizes = _size(vocab, "vocab", 1)
    if law == "free":
        if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 1:
            raise ValueError(f"max_count must be an integer >= 1, got {max_count!r}")
        entries = st.integers(0, max_count)
        if isinstance(vocab, tuple):  # hypothesis's own list sizes: short lists are drawn more often
            counts = st.lists(entries, min_size=vocab[0], max_size=vocab[1])
        else:
            counts = sizes.flatmap(lambda v: st.lists(entries, min_size=v, max_size=v))
        return counts.filter(lambda c: sum(c) > 0)
    pool = _choices(scales, "scales", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                    "integers >= 1")
    return _zipf_counts(sizes, _float_range(exponent, "exponent", 0.0, 10.0), pool)
