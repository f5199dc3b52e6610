"""AdamW (``torch.optim.AdamW`` semantics) and Blockwise AdamW on NumPy parameter pytrees, and the
deterministic update bound ``C_β(k)`` and box radius ``R_θ(K)`` of docs/theory.md §A.4.

Parameters are a ``dict`` name -> array or a ``list``/``tuple`` of arrays (a flat pytree); the
optimizers keep float64 copies and update them in place, gradients come in the same structure.

AdamW, per coordinate, step ``k >= 1`` (torch's order: the decoupled decay acts first)::

    θ ← θ (1 − η_k λ)
    m_k = β1 m_{k-1} + (1 − β1) g_k          v_k = β2 v_{k-1} + (1 − β2) g_k ⊙ g_k
    θ ← θ − (η_k / (1 − β1^k)) · m_k ⊘ (√v_k / √(1 − β2^k) + ε)

Blockwise AdamW keeps one scalar second moment per parameter block ``B`` (a whole named array, or a
slice of a stacked array such as ``(L, H, d_k, d)`` with one block per ``(l, h)``)::

    v_k^B = β2 v_{k-1}^B + (1 − β2) ‖g_k^B‖_F²            (normalize="sum", the default)
    v_k^B = β2 v_{k-1}^B + (1 − β2) ‖g_k^B‖_F² / |B|      (normalize="mean", Adam's RMS scale)

with the same first moment, decay and bias corrections.  Bounds (proof in ``docs/adamw.md``):

* ``|m̂_k| / √v̂_k ≤ C_β(k)`` per coordinate (AdamW) and ``‖m̂_k^B‖_F / √v̂_k^B ≤ C_β(k)`` per block
  (blockwise, ``normalize="sum"``; ``√|B| C_β(k)`` for ``"mean"``), for *every* gradient sequence;
  ``C_β(k)`` is increasing in ``k``, so ``sup_k C_β(k) = C_β(∞)`` (finite iff ``β1 < √β2``).
* Decay before the step gives ``‖θ_k‖ ≤ |1 − η_k λ| ‖θ_{k-1}‖ + η_k C_β(k)`` (∞-norm per coordinate,
  or Frobenius norm per block), hence ``‖θ_k‖ ≤ max(R_0, C_β/λ)`` for all k when ``η_k λ ≤ 1``.

No SymPy here; the closed forms are derived in :mod:`transformer_limits.symbolic.adamw_box`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence, SupportsFloat, Union, cast

import numpy as np

__all__ = [
    "AdamW",
    "BlockwiseAdamW",
    "adamw_update_bound",
    "adamw_update_bound_sup",
    "adamw_box_radius",
    "adamw_box_radius_path",
]

LearningRate = Union[float, Callable[[int], float], Sequence[float], np.ndarray]
Params = Union[Mapping[str, Any], Sequence[Any]]
ParamArrays = Union[dict[str, np.ndarray], list[np.ndarray]]  # what the optimizers hand back


# --------------------------------------------------------------------------------------------
# validation helpers


def _check_betas(beta1: float, beta2: float, *, bound: bool = False) -> tuple[float, float]:
    """torch accepts ``0 <= β < 1``; the bound ``C_β`` also needs ``β2 > 0`` (it divides by √β2)."""
    beta1, beta2 = float(beta1), float(beta2)
    if not 0.0 <= beta1 < 1.0:
        raise ValueError(f"beta1 must be in [0, 1), got {beta1!r}")
    if not (0.0 < beta2 < 1.0 if bound else 0.0 <= beta2 < 1.0):
        raise ValueError(f"beta2 must be in {'(0, 1)' if bound else '[0, 1)'}, got {beta2!r}")
    return beta1, beta2


def _check_nonnegative(name: str, value: SupportsFloat) -> float:
    value = float(value)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def _lr_at(lr: LearningRate, k: int) -> float:
    """η_k for step ``k >= 1``: a float, ``lr(k)`` for a callable, or ``lr[k-1]`` for an array."""
    if callable(lr):
        value: SupportsFloat = lr(k)
    elif np.ndim(lr) == 0:
        value = cast(SupportsFloat, lr)  # np.ndim == 0: a float, NumPy scalar or 0-d array
    else:
        schedule = cast(Sequence[float], lr)  # np.ndim > 0: a sequence or array of η_k
        if k > len(schedule):
            raise ValueError(f"lr schedule has {len(schedule)} entries, step {k} needs more")
        value = schedule[k - 1]
    return _check_nonnegative(f"lr (step {k})", value)


def _lr_path(lr: LearningRate, steps: int) -> np.ndarray:
    return np.array([_lr_at(lr, k) for k in range(1, steps + 1)], dtype=np.float64)


def _flatten(tree: Params, what: str) -> tuple[list, list[np.ndarray]]:
    if isinstance(tree, Mapping):
        keys = list(tree)
        return keys, [tree[k] for k in keys]
    if isinstance(tree, (list, tuple)):
        return list(range(len(tree))), list(tree)
    raise ValueError(f"{what} must be a dict name -> array or a list of arrays, got {type(tree)!r}")


# --------------------------------------------------------------------------------------------
# optimizers


class AdamW:
    """AdamW with ``torch.optim.AdamW`` semantics (defaults ``lr=1e-3, betas=(0.9, 0.999),
    eps=1e-8, weight_decay=1e-2``; no amsgrad/maximize), on float64 NumPy arrays.

    The arithmetic follows torch's single-tensor path operation by operation: ``θ *= 1 − ηλ``;
    ``m.lerp_(g, 1 − β1)``; ``v = v·β2 + ((1 − β2)·g)·g``; ``denom = √v / √(1 − β2^k) + ε``;
    ``θ += (−η/(1 − β1^k))·m / denom``.  (Agreement with ``torch.optim.AdamW``, float64,
    ``foreach=False``, is tested to rtol 1e-14 — measured: within 1 ulp after 30 steps — when torch
    is installed; it is not a dependency.)  With ``eps=0`` a coordinate whose gradients were all zero so far gives
    ``0/0 = nan``, exactly as in torch.

    Parameters
    ----------
    params:
        dict name -> array or list of arrays (any shapes); copied to float64.
    lr:
        η: a float, a callable ``k -> η_k`` (k = 1, 2, ...), or an array with ``lr[k-1] = η_k``.
    betas, eps, weight_decay:
        β1, β2 in [0, 1); ε >= 0; λ >= 0 (decoupled: θ ← θ(1 − η_k λ) before the Adam step).
    """

    def __init__(
        self,
        params: Params,
        lr: LearningRate = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        self.betas = _check_betas(*betas)
        self.eps = _check_nonnegative("eps", eps)
        self.weight_decay = _check_nonnegative("weight_decay", weight_decay)
        if not callable(lr) and np.ndim(lr) == 0:
            _check_nonnegative("lr", cast(SupportsFloat, lr))  # a float, NumPy scalar or 0-d array
        self.lr = lr
        self._is_dict = isinstance(params, Mapping)
        self._keys, arrays = _flatten(params, "params")
        self._params = [np.array(a, dtype=np.float64, copy=True) for a in arrays]
        self.exp_avg = [np.zeros_like(p) for p in self._params]
        self.exp_avg_sq = [np.zeros(self._second_moment_shape(i, p)) for i, p in enumerate(self._params)]
        self.step_count = 0

    # hooks a variant overrides ------------------------------------------------------------
    def _second_moment_shape(self, index: int, p: np.ndarray) -> tuple[int, ...]:
        return p.shape

    def _second_moment_increment(self, index: int, g: np.ndarray) -> np.ndarray:
        """``(1 − β2)·g·g`` per coordinate (torch's ``addcmul`` order)."""
        return (1.0 - self.betas[1]) * g * g

    # --------------------------------------------------------------------------------------
    @property
    def params(self) -> ParamArrays:
        """The live parameter arrays in the structure they were given (dict or list)."""
        if self._is_dict:
            return dict(zip(self._keys, self._params))
        return list(self._params)

    def _match(self, grads: Params) -> list[np.ndarray]:
        keys, arrays = _flatten(grads, "grads")
        if keys != self._keys:
            raise ValueError(f"grads must have the structure of params ({self._keys!r}), got {keys!r}")
        out = []
        for key, p, g in zip(keys, self._params, arrays):
            g = np.asarray(g, dtype=np.float64)
            if g.shape != p.shape:
                raise ValueError(f"grads[{key!r}] has shape {g.shape}, parameter has {p.shape}")
            out.append(g)
        return out

    def step(self, grads: Params) -> ParamArrays:
        """One optimizer step with gradients ``grads`` (same structure and shapes as params)."""
        gs = self._match(grads)
        self.step_count += 1
        k = self.step_count
        lr = _lr_at(self.lr, k)
        beta1, beta2 = self.betas
        weight = 1.0 - beta1
        step_size = lr / (1.0 - beta1**k)
        bias_correction2_sqrt = math.sqrt(1.0 - beta2**k)
        for i, (p, g) in enumerate(zip(self._params, gs)):
            p *= 1.0 - lr * self.weight_decay
            m = self.exp_avg[i]
            if weight < 0.5:  # torch.lerp: small weight from the start, large weight from the end
                m += weight * (g - m)
            else:
                m[...] = g - (g - m) * (1.0 - weight)
            v = self.exp_avg_sq[i]
            v *= beta2
            v += self._second_moment_increment(i, g)
            denom = np.sqrt(v) / bias_correction2_sqrt + self.eps
            p += (-step_size) * m / denom
        return self.params


def _block_axes_of(spec: Any, ndim: int, key: Any) -> tuple[int, ...]:
    """Axes that *enumerate* blocks: ``None``/0 -> none (whole array), int n -> the first n axes,
    tuple -> those axes."""
    if spec is None:
        return ()
    if isinstance(spec, (int, np.integer)):
        if not 0 <= spec <= ndim:
            raise ValueError(f"block_axes[{key!r}] = {spec} leading axes, array has ndim {ndim}")
        return tuple(range(int(spec)))
    try:
        given = [int(a) for a in spec]
    except (TypeError, ValueError):
        raise ValueError(f"block_axes[{key!r}] must be an int or a tuple of axes, got {spec!r}") from None
    if any(not -ndim <= a < ndim for a in given):
        raise ValueError(f"block_axes[{key!r}] = {spec!r} out of range for ndim {ndim}")
    return tuple(sorted({a % ndim for a in given}))


class BlockwiseAdamW(AdamW):
    """AdamW with one scalar second moment per parameter block (docs/theory.md §A.4, [RECON]).

    ``v_k^B = β2 v_{k-1}^B + (1 − β2) ‖g_k^B‖_F²`` (``normalize="sum"``: **not** divided by ``|B|``, so
    ``‖m̂_k^B‖_F/√v̂_k^B ≤ C_β(k)`` and the Frobenius drift per block is ≤ η_k C_β(k), independent of
    the block size) or ``‖g_k^B‖_F²/|B|`` (``normalize="mean"``: entries move on Adam's RMS scale and
    the per-block Frobenius bound picks up a factor ``√|B|`` unless η is rescaled by ``1/√|B|``).
    First moment, ε, decoupled decay and bias corrections are those of :class:`AdamW`.

    ``block_axes`` says which axes of an array *enumerate* blocks (the other axes form one block):
    ``None`` (default) -> each named array is one block; an int n -> the first n axes, e.g. ``2`` for
    a stacked ``(L, H, d_k, d)`` array gives one block per head ``(l, h)``; a tuple of axes; or a
    dict name -> any of these (missing names: one block per array).  The second-moment state of an
    array has its shape with the in-block axes reduced to length 1.
    """

    def __init__(
        self,
        params: Params,
        lr: LearningRate = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        *,
        block_axes: Any = None,
        normalize: str = "sum",
    ) -> None:
        if normalize not in ("sum", "mean"):
            raise ValueError(f"normalize must be 'sum' or 'mean', got {normalize!r}")
        self.normalize = normalize
        keys, arrays = _flatten(params, "params")
        if isinstance(block_axes, Mapping):
            unknown = set(block_axes) - set(keys)
            if unknown:
                raise ValueError(f"block_axes names unknown parameters {sorted(map(str, unknown))}")
            specs = [block_axes.get(k) for k in keys]
        else:
            specs = [block_axes] * len(keys)
        self._reduce_axes = []
        self.block_sizes = []
        for key, a, spec in zip(keys, arrays, specs):
            ndim = np.ndim(a)
            enum = _block_axes_of(spec, ndim, key)
            reduce = tuple(ax for ax in range(ndim) if ax not in enum)
            self._reduce_axes.append(reduce)
            self.block_sizes.append(int(np.prod([np.shape(a)[ax] for ax in reduce], dtype=np.int64)))
        super().__init__(params, lr, betas, eps, weight_decay)

    def _second_moment_shape(self, index: int, p: np.ndarray) -> tuple[int, ...]:
        reduce = self._reduce_axes[index]
        return tuple(1 if ax in reduce else n for ax, n in enumerate(p.shape))

    def _second_moment_increment(self, index: int, g: np.ndarray) -> np.ndarray:
        """``(1 − β2) ‖g^B‖_F²`` (divided by |B| for ``normalize="mean"``), one per block."""
        sq = np.sum(g * g, axis=self._reduce_axes[index], keepdims=True)
        if self.normalize == "mean":
            sq = sq / self.block_sizes[index]
        return (1.0 - self.betas[1]) * sq

    def block_norms(self, tree: Params | None = None) -> list[np.ndarray]:
        """Frobenius norm of every block of ``tree`` (default: the parameters), shaped like ``v``."""
        arrays = self._params if tree is None else self._match(tree)
        return [np.sqrt(np.sum(a * a, axis=r, keepdims=True)) for a, r in zip(arrays, self._reduce_axes)]


# --------------------------------------------------------------------------------------------
# bounds


def _one_minus_pow(base: float, k: np.ndarray) -> np.ndarray:
    """``1 − base^k`` without cancellation for base near 1 (``base`` in [0, 1))."""
    if base == 0.0:
        return np.ones_like(k, dtype=np.float64)
    return -np.expm1(k * math.log(base))


def _geometric_sum(ratio: float, k: np.ndarray) -> np.ndarray:
    """``Σ_{j<k} ratio^j`` = ``(1 − ratio^k)/(1 − ratio)`` (``k`` for ratio 1; inf on overflow)."""
    if ratio == 0.0:
        return np.ones_like(k, dtype=np.float64)
    if ratio == 1.0:
        return k.astype(np.float64)
    log_r = math.log(ratio)
    with np.errstate(over="ignore"):
        return np.expm1(k * log_r) / math.expm1(log_r)


def adamw_update_bound(beta1: float, beta2: float, k: Any, *, sharp: bool = False) -> Any:
    """``C_β(k) = (1−β1)√(1−β2^k) / ((1−β1^k)√(1−β2)) · Σ_{j<k} (β1/√β2)^j`` (docs/theory.md §A.4).

    ``|m̂_k|/√v̂_k ≤ C_β(k)`` for every gradient sequence (ε > 0 only lowers the ratio); ``C_β(1) = 1``.
    ``k``: an int >= 1, an integer array (vectorised), or ``math.inf`` for ``C_β(∞)`` (= sup_k C_β(k),
    since C_β(k) increases in k; inf unless β1 < √β2).

    ``sharp=True`` gives the attainable constant from Cauchy–Schwarz instead of the triangle
    inequality: the sum is replaced by ``√(Σ_{j<k} (β1²/β2)^j)``; it equals the sup of the ratio over
    gradient sequences (attained by ``g_{k-j} ∝ (β1/β2)^j``) and is ≤ C_β(k).
    """
    beta1, beta2 = _check_betas(beta1, beta2, bound=True)
    if np.ndim(k) == 0 and float(k) == math.inf:
        return adamw_update_bound_sup(beta1, beta2, sharp=sharp)
    kk = np.asarray(k)
    if kk.dtype.kind not in "iu" and not np.all(np.equal(np.mod(kk, 1), 0)):
        raise ValueError(f"k must be integer(s) >= 1, got {k!r}")
    kk = kk.astype(np.int64)
    if np.any(kk < 1):
        raise ValueError(f"k must be integer(s) >= 1, got {k!r}")
    prefactor = (1.0 - beta1) / math.sqrt(1.0 - beta2)
    if sharp:
        series = np.sqrt(_geometric_sum(beta1 * beta1 / beta2, kk))
    else:
        series = _geometric_sum(beta1 / math.sqrt(beta2), kk)
    out = prefactor * np.sqrt(_one_minus_pow(beta2, kk)) / _one_minus_pow(beta1, kk) * series
    return float(out) if out.ndim == 0 else out


def adamw_update_bound_sup(beta1: float, beta2: float, *, sharp: bool = False) -> float:
    """``sup_k C_β(k) = C_β(∞) = (1−β1) / (√(1−β2) (1 − β1/√β2))`` if β1 < √β2, else ``inf``.

    The sup is the limit because C_β(k) is increasing in k (proof in ``docs/adamw.md``; checked by
    the ``adamw-box`` derivation).  ``sharp=True``: ``(1−β1)/√((1−β2)(1 − β1²/β2))``.
    """
    beta1, beta2 = _check_betas(beta1, beta2, bound=True)
    ratio = beta1 / math.sqrt(beta2)
    if ratio >= 1.0:
        return math.inf
    prefactor = (1.0 - beta1) / math.sqrt(1.0 - beta2)
    return prefactor / math.sqrt(1.0 - ratio * ratio) if sharp else prefactor / (1.0 - ratio)


def _per_step_bound(beta1, beta2, steps, norm, normalize, block_size) -> np.ndarray:
    """``c_k``: bound on the Adam direction per step, in the box's norm (k = 1..steps)."""
    if norm not in ("coordinatewise", "blockwise"):
        raise ValueError(f"norm must be 'coordinatewise' or 'blockwise', got {norm!r}")
    if normalize not in ("sum", "mean"):
        raise ValueError(f"normalize must be 'sum' or 'mean', got {normalize!r}")
    factor = 1.0
    if norm == "blockwise" and normalize == "mean":
        if block_size is None or int(block_size) < 1:
            raise ValueError(f"block_size (>= 1) is needed for normalize='mean', got {block_size!r}")
        factor = math.sqrt(int(block_size))
    return factor * adamw_update_bound(beta1, beta2, np.arange(1, steps + 1))


def _affine_recursion(x0: Any, lr: np.ndarray, weight_decay: float, forcing: np.ndarray) -> np.ndarray:
    """``x_k = |1 − η_k λ| x_{k-1} + η_k f_k`` for k = 1..K; rows k = 0..K (x0 may be an array)."""
    x = np.asarray(x0, dtype=np.float64)
    out = np.empty((len(lr) + 1,) + x.shape)
    out[0] = x
    for k, (eta, f) in enumerate(zip(lr, forcing), start=1):
        x = abs(1.0 - eta * weight_decay) * x + eta * f
        out[k] = x
    return out


def adamw_box_radius_path(
    R0: Any,
    lr: LearningRate,
    weight_decay: float,
    beta1: float,
    beta2: float,
    steps: int,
    *,
    norm: str = "coordinatewise",
    normalize: str = "sum",
    block_size: int | None = None,
    drift: bool = False,
) -> np.ndarray:
    """Radii ``R_0, R_1, ..., R_K`` with ``‖θ_k‖ ≤ R_k`` for every gradient sequence (or, with
    ``drift=True``, bounds ``D_0 = 0, ..., D_K`` on ``‖θ_k − θ_0‖``).

    ``R_k = |1 − η_k λ| R_{k-1} + η_k c_k`` — torch's order (decay, then the Adam step ``η_k u_k``
    with ``‖u_k‖ ≤ c_k``) gives ``θ_k = (1 − η_k λ) θ_{k-1} − η_k u_k``.  ``norm="coordinatewise"``:
    ∞-norm per coordinate, ``c_k = C_β(k)``, R0 = ``‖θ_0‖_∞`` (or an array of ``|θ_{0,i}|`` for a
    per-coordinate box); ``norm="blockwise"``: Frobenius norm per block, ``c_k = C_β(k)`` (times
    ``√block_size`` for ``normalize="mean"``), R0 = ``‖θ_0^B‖_F``.  Shape ``(steps + 1,) + shape(R0)``.

    Drift: ``θ_k − θ_0 = (1 − η_kλ)(θ_{k-1} − θ_0) − η_kλθ_0 − η_k u_k`` gives
    ``D_k = |1 − η_kλ| D_{k-1} + η_k (λ R0 + c_k)``; for λ = 0 this is ``Σ_{j≤k} η_j c_j``.
    """
    steps = _check_steps(steps)
    lam = _check_nonnegative("weight_decay", weight_decay)
    r0 = np.asarray(R0, dtype=np.float64)
    if np.any(r0 < 0):
        raise ValueError(f"R0 must be >= 0, got {R0!r}")
    c = _per_step_bound(beta1, beta2, steps, norm, normalize, block_size)
    c = c.reshape((-1,) + (1,) * r0.ndim)
    if drift:
        return _affine_recursion(np.zeros_like(r0), _lr_path(lr, steps), lam, lam * r0 + c)
    return _affine_recursion(r0, _lr_path(lr, steps), lam, c)


def _check_steps(steps: Any) -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    return int(steps)


def adamw_box_radius(
    R0: float,
    lr: LearningRate,
    weight_decay: float,
    beta1: float = 0.9,
    beta2: float = 0.999,
    steps: int | None = None,
    *,
    norm: str = "coordinatewise",
    normalize: str = "sum",
    block_size: int | None = None,
) -> float:
    """Box radius ``R_θ``: ``‖θ_k‖ ≤ R_θ`` for k ≤ steps (or for all k when ``steps`` is None).

    With ``steps = K``: ``R_K`` of :func:`adamw_box_radius_path` (uses C_β(k) step by step; ≤ the
    closed form ``(1−ηλ)^K R_0 + η C_β(K) Σ_{j<K}(1−ηλ)^j`` for constant η, and ≤ ``R_0 + Σ η_k C_β``).

    With ``steps=None`` (needs λ > 0 and η_k λ ≤ 1 for all k): the uniform-in-time decoupled-decay
    bound ``max(R_0, c/λ)``, ``c = sup_k c_k`` — if ``‖θ_{k-1}‖ ≤ M := max(R_0, c/λ)`` then
    ``‖θ_k‖ ≤ (1 − η_kλ) M + η_k c ≤ (1 − η_kλ) M + η_k λ M = M``, whatever the schedule.  It is
    ``inf`` unless β1 < √β2.  ``lr`` must then be a float or an array (all of whose entries are
    checked against η λ ≤ 1).
    """
    if steps is not None:
        path = adamw_box_radius_path(R0, lr, weight_decay, beta1, beta2, steps, norm=norm,
                                     normalize=normalize, block_size=block_size)
        return float(path[-1])
    lam = _check_nonnegative("weight_decay", weight_decay)
    R0 = _check_nonnegative("R0", R0)
    if lam == 0.0:
        raise ValueError("weight_decay must be > 0 for the all-steps bound (steps=None)")
    if callable(lr):
        raise ValueError("lr: a callable schedule needs steps (η_k λ <= 1 cannot be checked for all k)")
    etas = np.atleast_1d(np.asarray(lr, dtype=np.float64))
    if not np.all(np.isfinite(etas)) or np.any(etas < 0) or np.any(etas * lam > 1.0):
        raise ValueError(f"lr: the all-steps bound needs 0 <= lr*weight_decay <= 1, got lr={lr!r}")
    c = _per_step_bound(beta1, beta2, 1, norm, normalize, block_size)[0]  # factor * C_β(1) = factor
    c *= adamw_update_bound_sup(beta1, beta2)
    return max(R0, c / lam)
