"""Sup-over-inputs search: projected Adam ascent of the error between two input -> output maps.

For two maps A, B from N tokens X0 (N, d) to N tokens, the error of interest is

    e_N = sup_{X0 in B_R^N} |A(X0)^1 − B(X0)^1|

(unmasked attention is permutation-equivariant, so the worst token can be taken to be token 1).  Every
evaluated input is a lower bound of the sup; the search reports the largest error it evaluated and the
input that attained it.

**Which token** (option ``token`` of every search function, :data:`Token`): ``0`` (default) is token 1
as above; another int ``i`` is token i + 1 (Python indexing: ``-1`` is the last token); ``"max"`` is the
worst token, e_N = sup_X0 max_i |A(X0)^i − B(X0)^i|, the error of maps that are not
permutation-equivariant (causal masking, docs/causal_masking.md).  For ``"max"`` each ascent step
ascends ½|A^{i*} − B^{i*}|² at the token i* that is worst at the current iterate (a subgradient of
½ max_i |A^i − B^i|²), so the worst token may change along the ascent.  ``token=0`` is the search as it
was before the option existed, bit for bit.

* :func:`ascend`: one projected ascent of f = ½|A^1 − B^1|² from a given start, with
  :class:`~transformer_limits.numeric.optim.adamw.AdamW` (λ = 0, β = (0.9, 0.99), ε = 1e-12, step
  η_k = lr·R / sqrt(1 + (k − 1)/4) for k = 1, 2, ...) on the negated gradient, the iterate projected
  onto the ball after every step.  Adam's per-coordinate scaling moves token 1 and the context tokens,
  whose gradients are O(1/N), alike.
* :func:`sup_error`: ``restarts`` ascents from random starts (even: uniform in the ball, odd: on the
  sphere).
* :func:`sup_error_ladder`: the estimate on a ladder of token counts N_0 < N_1 < ... (each a multiple
  of the one before) that is **monotone in N per map pair**, as the true sup is.  If A and B depend on
  X0 only through the empirical measure (1/N) Σ_i δ_{x^i} and token 1's position — true for unmasked
  softmax attention and its mean-field limit — then the input that repeats every token of X0 ∈ B_R^n
  m = N/n times has the same token-1 error as X0, so e_N ≥ e_n.  The ladder evaluates that repeated
  worst input of the previous level first (its error equals the previous estimate up to round-off)
  and keeps the best, so ê(N_i) ≥ ê(N_{i−1}) per ladder, by construction.  It then ascends from a
  slightly jittered copy (the copies of a context token get identical gradients, so without a nudge
  they would never split) in place of the first random restart.  Along its chain of warm starts the
  worst input at N_i has thus had up to ``iterations · (1 + i)`` Adam steps per coordinate (Adam moves
  every coordinate by about the step size whatever its gradient scale): the per-coordinate budget
  grows with log N instead of staying fixed while the number of coordinates N·d grows, at the cost
  of the random restarts it replaces plus one evaluation per level.
  Under a causal mask the repeated input is *not* equivalent (a non-last copy of x^j sees a prefix
  with too many copies of x^j, moves differently, and the last copies' prefix measures drift with it
  after the first layer); ``layout="tile"`` instead repeats the whole sequence, so the first n tokens
  of the new input are the previous worst input exactly, and a causal map's outputs for them do not
  depend on the later tokens: the max-over-tokens error is again ≥ the previous one (docs/causal_masking.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Sequence

import numpy as np

from transformer_limits.numeric.optim.adamw import AdamW
from transformer_limits.numeric.attention.losses import sample_tokens

__all__ = ["InputMap", "Token", "project_to_ball", "is_worse", "token_one_error", "token_error", "worst_token",
           "ascend", "sup_error", "duplicate_tokens", "tile_tokens", "sup_error_ladder", "check_ladder"]

#: which token's error the search ascends: an index (0 = token 1, -1 = the last) or "max" (the worst)
Token = int | Literal["max"]

#: Adam's moment decays and ε for the ascent (β2 = 0.99: a short ascent needs a short memory)
BETAS = (0.9, 0.99)
EPS = 1e-12


@dataclass
class InputMap:
    """X0 (N, d) -> (output (N, d), vjp: r (N, d) -> r^T d output / d X0 (N, d))."""

    evaluate: Callable[[np.ndarray], tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]]


def project_to_ball(X: np.ndarray, radius: float) -> np.ndarray:
    """Every token (row of X, (N, d)) radially projected onto the closed ball of radius R."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X * np.minimum(1.0, radius / np.maximum(norms, 1e-300))


def is_worse(error: float, best: float | None) -> bool:
    """Whether ``error`` replaces ``best`` as the worst case: larger, or NaN (a model that blew up is the
    worst case and sticks, so the verdict sees it); ``best`` None means nothing seen yet."""
    return best is None or (not np.isnan(best) and (error > best or np.isnan(error)))


def token_one_error(A: InputMap, B: InputMap, X: np.ndarray) -> float:
    """|A(X)^1 − B(X)^1| at one input X (N, d): :func:`token_error` of token 1."""
    return token_error(A, B, X, 0)


def worst_token(a: np.ndarray, b: np.ndarray, token: Token) -> int:
    """The row index of the token whose error the search follows, for outputs a, b (N, d): ``token``
    itself when an int; for ``"max"`` the argmax of |a^i − b^i| (a NaN row first: it sticks)."""
    if token == "max":
        norms = np.linalg.norm(a - b, axis=1)
        nan = np.flatnonzero(np.isnan(norms))
        return int(nan[0]) if nan.size else int(np.argmax(norms))
    if isinstance(token, (int, np.integer)) and not isinstance(token, bool) and -a.shape[0] <= token < a.shape[0]:
        return int(token) % a.shape[0]  # -1 -> N - 1: a row index in [0, N)
    raise ValueError(f"token must be 'max' or a token index in [-{a.shape[0]}, {a.shape[0]}), got {token!r}")


def token_error(A: InputMap, B: InputMap, X: np.ndarray, token: Token = 0) -> float:
    """|A(X)^i − B(X)^i| at one input X (N, d) for the token i that ``token`` names (:data:`Token`;
    ``"max"``: max_i)."""
    a, b = A.evaluate(X)[0], B.evaluate(X)[0]
    i = worst_token(a, b, token)
    return float(np.linalg.norm(a[i] - b[i]))


def _step_size(lr: float, radius: float) -> Callable[[int], float]:
    return lambda k: lr * radius / np.sqrt(1.0 + (k - 1) / 4.0)


def ascend(A: InputMap, B: InputMap, X: np.ndarray, *, radius: float, iterations: int, lr: float,
           best: tuple[float, np.ndarray] | None = None, token: Token = 0) -> tuple[float, np.ndarray]:
    """Projected Adam ascent of ½|A(X)^i − B(X)^i|² from X (N, d), ``iterations`` steps (so
    ``iterations + 1`` evaluations), i the token ``token`` names (default token 1; ``"max"``: the
    worst token at each iterate).  Returns (largest error evaluated, its input); ``best`` is a
    (value, input) pair found earlier, replaced only by a worse case (:func:`is_worse`)."""
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    best_value, best_X = (None, None) if best is None else best
    opt = AdamW([np.asarray(X, dtype=np.float64)], lr=_step_size(lr, radius), betas=BETAS, eps=EPS,
                weight_decay=0.0)
    live = opt.params
    assert isinstance(live, list)  # params given as a list come back as one
    X = live[0]  # the optimizer's live array: projected in place after every step
    for k in range(iterations + 1):
        a, vjp_a = A.evaluate(X)
        b, vjp_b = B.evaluate(X)
        i = worst_token(a, b, token)
        diff = a[i] - b[i]
        value = float(np.linalg.norm(diff))
        if is_worse(value, best_value):
            best_value, best_X = value, X.copy()
        if k == iterations:
            break
        r = np.zeros_like(a)
        r[i] = diff
        opt.step([vjp_b(r) - vjp_a(r)])  # AdamW descends: the negated gradient of f ascends
        X[...] = project_to_ball(X, radius)
    assert best_value is not None and best_X is not None  # the first evaluation always replaces None
    return best_value, best_X


def sup_error(A: InputMap, B: InputMap, N: int, d: int, *, radius: float, rng: np.random.Generator,
              restarts: int, iterations: int, lr: float, token: Token = 0) -> tuple[float, np.ndarray]:
    """(estimated sup_{X0 in B_R^N} |A(X0)^1 − B(X0)^1|, the worst X0 (N, d) found): :func:`ascend`
    from ``restarts`` random starts (odd restarts on the sphere, even ones uniformly in the ball; one
    ``rng.integers(2**32)`` seed per start); ``token`` as in :func:`ascend` (``"max"``: sup max_i)."""
    if restarts < 1:
        raise ValueError(f"restarts must be >= 1, got {restarts}")
    best = None
    for start in range(restarts):
        best = ascend(A, B, _random_start(N, d, start, radius, rng), radius=radius, iterations=iterations,
                      lr=lr, best=best, token=token)
    assert best is not None  # restarts >= 1 ascents ran
    return best


def _random_start(N: int, d: int, start: int, radius: float, rng: np.random.Generator) -> np.ndarray:
    return sample_tokens(N, d, domain="sphere" if start % 2 else "ball", radius=radius,
                         seed=int(rng.integers(2**32)))


def _factor(factor: int) -> int:
    if not isinstance(factor, (int, np.integer)) or factor < 1:
        raise ValueError(f"factor must be a positive integer, got {factor!r}")
    return int(factor)


def duplicate_tokens(X: np.ndarray, factor: int) -> np.ndarray:
    """Every token of X (n, d) repeated ``factor`` times in place, (factor·n, d): rows
    x^1, ..., x^1, x^2, ...; token 1 stays first, and the empirical measure is unchanged."""
    return np.repeat(np.asarray(X, dtype=np.float64), _factor(factor), axis=0)


def tile_tokens(X: np.ndarray, factor: int) -> np.ndarray:
    """The whole sequence X (n, d) repeated ``factor`` times, (factor·n, d): rows x^1, ..., x^n, x^1, ...;
    the first n rows are X itself (what a causal map's first n outputs depend on), and the empirical
    measure is unchanged."""
    return np.tile(np.asarray(X, dtype=np.float64), (_factor(factor), 1))


#: how the ladder's warm start enlarges the previous worst input (see the module docstring)
LAYOUTS = {"repeat": duplicate_tokens, "tile": tile_tokens}


def check_ladder(N_levels: Sequence[int]) -> tuple[int, ...]:
    """The ladder as ints; ValueError unless strictly increasing with each level a multiple of the last."""
    levels = tuple(int(n) for n in N_levels)
    if not levels or levels[0] < 1 or any(n != m for n, m in zip(levels, N_levels)):
        raise ValueError(f"N_levels must be positive integers, got {N_levels!r}")
    for n, m in zip(levels, levels[1:]):
        if m <= n or m % n:
            raise ValueError(f"N_levels must increase with each level a multiple of the one before "
                             f"(the warm start repeats every token), got {N_levels!r}")
    return levels


def sup_error_ladder(A: InputMap, B: InputMap, N_levels: Sequence[int], d: int, *, radius: float,
                     rngs: Sequence[np.random.Generator], restarts: int, iterations: int, lr: float,
                     bottom_restarts: int | None = None, jitter: float = 0.1,
                     warm_start: bool = True, token: Token = 0,
                     layout: str = "repeat") -> list[tuple[float, np.ndarray]]:
    """The sup estimate at every N of the ladder, [(ê(N_i), worst X0 (N_i, d)), ...], monotone in N.

    Level 0: :func:`sup_error` with ``rngs[0]``, ``bottom_restarts`` (default ``restarts``) random
    starts × ``iterations`` steps: every later level inherits its worst input, and an estimate that
    is still climbing towards the sup along the ladder would look like growth in N, so the cheap
    smallest N deserves the most restarts.
    Level i > 0 (``warm_start``): the previous worst input with every token repeated N_i / N_{i−1}
    times is evaluated first (same error when the maps depend on the tokens through their empirical
    measure, so ê(N_i) ≥ ê(N_{i−1})); the first of the ``restarts`` ascents starts from it after a
    Gaussian jitter of standard deviation ``jitter · lr · R`` per coordinate (``rngs[i]``) that lets
    repeated tokens split, the other ``restarts − 1`` from random starts as in :func:`sup_error`
    (restart indices 1, 2, ...: sphere, ball, ...), all of ``iterations`` steps: one evaluation more
    than :func:`sup_error` at that level, and never below the warm chain or those random restarts.
    ``warm_start=False`` gives independent :func:`sup_error` estimates per level (``restarts`` starts
    above level 0; no monotonicity): the estimate the ladder replaced, kept for comparisons.
    ``token`` as in :func:`ascend`; ``layout`` how the warm start enlarges the previous worst input:
    ``"repeat"`` (every token in place, :func:`duplicate_tokens`: maps of the empirical measure and
    token 1) or ``"tile"`` (the whole sequence, :func:`tile_tokens`: causal maps with ``token="max"``).
    """
    levels = check_ladder(N_levels)
    if len(rngs) != len(levels):
        raise ValueError(f"rngs must hold one generator per level ({len(levels)}), got {len(rngs)}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if not (np.isfinite(jitter) and jitter >= 0):
        raise ValueError(f"jitter must be a finite number >= 0, got {jitter!r}")
    out: list[tuple[float, np.ndarray]] = []
    for i, (N, rng) in enumerate(zip(levels, rngs)):
        if i == 0 or not warm_start:
            out.append(sup_error(A, B, N, d, radius=radius, rng=rng, iterations=iterations, lr=lr,
                                 restarts=restarts if i or bottom_restarts is None else bottom_restarts,
                                 token=token))
            continue
        X = LAYOUTS[layout](out[-1][1], N // levels[i - 1])
        best = (token_error(A, B, X, token), X)
        X = project_to_ball(X + jitter * lr * radius * rng.normal(size=X.shape), radius)
        best = ascend(A, B, X, radius=radius, iterations=iterations, lr=lr, best=best, token=token)
        for start in range(1, restarts):
            best = ascend(A, B, _random_start(N, d, start, radius, rng), radius=radius, iterations=iterations,
                          lr=lr, best=best, token=token)
        out.append(best)
    return out
