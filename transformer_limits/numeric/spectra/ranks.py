"""Covariance spectra and Rényi effective ranks of activation matrices (docs/theory.md §C.3–C.4).

Everything is float64 NumPy.  Symbols follow docs/theory.md §C:

* activations ``H`` — an ``n × D`` matrix, one row ``h_t ∈ R^D`` per token (n tokens, D features);
* covariance  ``C = (1/(n−1)) Σ_t (h_t − h̄)(h_t − h̄)^T``  (``D × D``, mean-centred, unbiased);
* eigenvalues ``λ_1 ≥ … ≥ λ_D`` = ``eigvalsh(C)`` with round-off negatives clamped at ``0``;
* mode weights ``p_i = λ_i / Σ_j λ_j``;
* Rényi rank ``R_α(p) = exp(H_α(p))``, ``H_α(p) = (1/(1−α)) log Σ_i p_i^α``, with the limits
  ``R_1 = exp(−Σ p_i log p_i)`` (soft rank), ``R_2 = (Σλ)²/Σλ²`` (hard rank),
  ``R_∞ = 1/max p_i`` and ``R_0 = #{λ_i > 0}``.

Conventions (explicit, see ``docs/spectral.md``):

* **Spectrum source.** ``source="covariance"`` gives the eigenvalues ``λ_i`` of ``C`` (the paper's
  metric); ``source="singular"`` gives the singular values ``σ_i`` of the (centred, unless
  ``center=False``) data matrix.  For a centred matrix ``σ_i² = (n−1) λ_i``, so ranks computed on
  ``σ`` are *not* the same numbers as ranks on ``λ`` (they weight small modes more heavily).
* **Centring.** ``center=True`` (default, the paper's choice) subtracts the column mean;
  ``center=False`` uses the raw second-moment matrix ``(1/(n−ddof)) Σ_t h_t h_t^T``.
* **Scale invariance.** ``R_α(cλ) = R_α(λ)`` for every ``c > 0``, so nothing here uses an
  absolute floor: eigenvalues at or below the *relative* tolerance ``len(λ) · ε_machine · max λ``
  (the ``numpy.linalg.matrix_rank`` rounding rule) count as exact zeros, so ``R_0`` counts only the
  resolved modes and ``R_α`` is continuous as ``α → 0``; spectra are divided by ``max λ`` before
  any sum (a spectrum of ``1e308`` entries works), and :func:`rank_summary` divides the
  activations by their largest entry before forming the covariance.  The authors' code clamps
  eigenvalues at ``1e-12`` and adds ``1e-12`` inside logs/denominators (:data:`EIGENVALUE_FLOOR`,
  kept for reference only); on their spectra (``λ ≫ 1e-12``) the two differ by ``O(1e-12)``
  relative, but the absolute floor changes the ranks of data measured in small units.
* **Input validation.** NaN/Inf, complex input, and non-square or non-symmetric covariance
  matrices raise ``ValueError`` naming the argument.
* **Asymmetry.** :func:`spectral_asymmetry` is ``Δ = log(R_1/R_2) ≥ 0`` (project page / blog), not
  the authors' code's linear ``soft − hard``.
"""

from __future__ import annotations

from typing import Any, Iterable, Literal, Sequence

import numpy as np
from scipy.special import logsumexp

__all__ = [
    "EIGENVALUE_FLOOR",
    "as_numpy_array",
    "StreamingCovariance",
    "covariance_matrix",
    "covariance_spectrum",
    "singular_value_spectrum",
    "spectrum",
    "renyi_rank",
    "soft_rank",
    "hard_rank",
    "spectral_asymmetry",
    "reinjection_ratio",
    "rank_summary",
]

EIGENVALUE_FLOOR = 1e-12
"""The authors' absolute eigenvalue clamp (spectral-scaling-laws ``spectra/covariance.py``).
Documented for comparison; not applied here because it breaks scale invariance."""
_SYMMETRY_RTOL = 1.5e-8  # ≈ sqrt(float64 eps): allows round-off, rejects a non-covariance
SpectrumSource = Literal["covariance", "singular"]
SPECTRUM_SOURCES = ("covariance", "singular")


def as_numpy_array(x: Any, *, name: str = "array", ndim: int | None = None,
                   allow_empty: bool = False) -> np.ndarray:
    """Convert ``x`` to a finite float64 :class:`numpy.ndarray`.

    Accepts NumPy arrays, nested sequences, objects with ``__array__``, PyTorch tensors (via
    ``x.detach().cpu().numpy()``) and CuPy arrays (via ``x.get()``); no framework is imported.

    Raises ``ValueError`` naming ``name`` when the result does not have ``ndim`` dimensions
    (if given), is empty (unless ``allow_empty``), is not numeric, is complex (casting would
    silently drop the imaginary part), or holds NaN/Inf.
    """
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor (any device)
        if getattr(x, "is_complex", lambda: False)():
            raise ValueError(f"{name}: complex input (dtype {x.dtype}); pass a real array, "
                             "e.g. the eigenvalues of a Hermitian matrix")
        x = x.detach().cpu().numpy()
    elif hasattr(x, "get") and hasattr(x, "__cuda_array_interface__"):
        x = x.get()  # cupy.ndarray (device) -> host numpy array
    try:
        raw = np.asarray(x)
        complex_input = raw.dtype.kind == "c"
        arr = raw if complex_input else raw.astype(np.float64, copy=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: cannot convert {type(x).__name__} to a float64 array ({exc})") from None
    if complex_input:  # a float cast would silently drop the imaginary part
        raise ValueError(f"{name}: complex input (dtype {raw.dtype}); pass a real array, "
                         "e.g. the eigenvalues of a Hermitian matrix")
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-D array, got shape {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name}: array is empty (shape {arr.shape})")
    if not np.all(np.isfinite(arr)):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise ValueError(f"{name}: {bad} non-finite value(s) (NaN or Inf)")
    return arr


class StreamingCovariance:
    """Streaming, exactly mergeable covariance of ``D``-dimensional rows.

    State after rows ``h_1 … h_n``: count ``n``, mean ``h̄`` (``D``) and scatter matrix
    ``S = Σ_t (h_t − h̄)(h_t − h̄)^T`` (``D × D``); with ``center=False`` the mean is not tracked
    and ``S = Σ_t h_t h_t^T``.

    :meth:`merge` pools two accumulators exactly (docs/theory.md §C.3): with ``n = n_a + n_b`` and
    ``h̄ = (n_a h̄_a + n_b h̄_b)/n``,

        ``S = S_a + S_b + n_a (h̄_a − h̄)(h̄_a − h̄)^T + n_b (h̄_b − h̄)(h̄_b − h̄)^T``
        ``  = S_a + S_b + (n_a n_b / n) δ δ^T``,  ``δ = h̄_b − h̄_a``

    (scatter sums plus the between-shard mean correction), so any split of the rows into batches
    or shards gives the one-shot result up to rounding.  :meth:`update` merges one batch.
    """

    def __init__(self, dim: int | None = None, *, center: bool = True) -> None:
        if dim is not None and (int(dim) != dim or dim < 1):
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self.center = bool(center)
        self.dim: int | None = None
        self.count = 0
        # mean and scatter stay None until the dimension is known (first batch or merge)
        self.mean: np.ndarray | None = None
        self.scatter: np.ndarray | None = None
        if dim is not None:
            self._init_dim(int(dim))

    def _init_dim(self, dim: int) -> None:
        if self.dim is None:
            self.dim = dim
            self.mean = np.zeros(dim)
            self.scatter = np.zeros((dim, dim))
        elif dim != self.dim:
            raise ValueError(f"batch has {dim} columns but the accumulator has dim={self.dim}")

    def _absorb(self, n_b: int, mean_b: np.ndarray, scatter_b: np.ndarray) -> None:
        # callers run _init_dim first, which sets both
        assert self.mean is not None and self.scatter is not None
        n_a = self.count
        n = n_a + n_b
        if self.center:
            delta = mean_b - self.mean
            self.scatter += scatter_b + np.outer(delta, delta) * (n_a * n_b / n)
            self.mean = self.mean + delta * (n_b / n)
        else:
            self.scatter += scatter_b
        self.count = n

    def update(self, batch: Any) -> "StreamingCovariance":
        """Add the rows of ``batch`` (``n_b × D``; a 1-D array is one row). Returns ``self``."""
        rows = as_numpy_array(batch, name="batch", allow_empty=True)
        if rows.ndim == 1:
            rows = rows[None, :]
        if rows.ndim != 2:
            raise ValueError(f"batch: expected an n x D matrix, got shape {rows.shape}")
        self._init_dim(rows.shape[1])
        if rows.shape[0] == 0:
            return self
        if self.center:
            mean_b = rows.mean(axis=0)
            dev = rows - mean_b
            self._absorb(rows.shape[0], mean_b, dev.T @ dev)
        else:
            self._absorb(rows.shape[0], np.zeros(rows.shape[1]), rows.T @ rows)
        return self

    def merge(self, other: "StreamingCovariance") -> "StreamingCovariance":
        """Pool ``other`` into ``self`` exactly (``other`` is unchanged). Returns ``self``."""
        if not isinstance(other, StreamingCovariance):
            raise ValueError(f"other: expected a StreamingCovariance, got {type(other).__name__}")
        if other.center != self.center:
            raise ValueError("other: cannot merge a centred and an uncentred accumulator")
        if other.count == 0:
            return self
        # a non-empty accumulator has run _init_dim, so its dim, mean and scatter are set
        assert other.dim is not None and other.mean is not None and other.scatter is not None
        self._init_dim(other.dim)
        self._absorb(other.count, other.mean, other.scatter)
        return self

    @classmethod
    def pooled(cls, parts: Iterable["StreamingCovariance"]) -> "StreamingCovariance":
        """A new accumulator holding all rows of ``parts`` (e.g. one per data-parallel rank)."""
        parts = list(parts)
        if not parts:
            raise ValueError("parts: need at least one accumulator")
        out = cls(center=parts[0].center)
        for part in parts:
            out.merge(part)
        return out

    def covariance(self, ddof: int | None = None) -> np.ndarray:
        """``S / (n − ddof)`` (``D × D``).

        ``ddof=None`` means 1 when centred (unbiased ``C`` of docs/theory.md §C.3) and 0 when not
        (the raw second-moment matrix ``(1/n) Σ h h^T``).
        """
        if ddof is None:
            ddof = 1 if self.center else 0
        if self.count - ddof <= 0:
            raise ValueError(f"need more than ddof={ddof} rows, have {self.count}")
        if self.scatter is None:  # only reachable with ddof < 0 and no rows
            raise ValueError(f"ddof={ddof}: the accumulator holds no rows and no dimension")
        return self.scatter / (self.count - ddof)


def _activations(x: Any) -> np.ndarray:
    return as_numpy_array(x, name="activations", ndim=2)


def covariance_matrix(activations: Any, *, center: bool = True, ddof: int | None = None) -> np.ndarray:
    """Covariance ``C`` (``D × D``) of an ``n × D`` activation matrix (see :class:`StreamingCovariance`)."""
    return StreamingCovariance(center=center).update(_activations(activations)).covariance(ddof)


def _check_source(source: str) -> None:
    if source not in SPECTRUM_SOURCES:
        raise ValueError(f"source must be one of {SPECTRUM_SOURCES}, got {source!r}")


def covariance_spectrum(data: Any, *, center: bool = True, ddof: int | None = None,
                        input: Literal["activations", "covariance"] = "activations") -> np.ndarray:
    """Eigenvalues ``λ_1 ≥ … ≥ λ_D ≥ 0`` of ``C`` (the paper's covariance); round-off negatives become ``0``.

    ``data`` is an ``n × D`` activation matrix (``input="activations"``), a symmetric ``D × D``
    covariance (``input="covariance"``; non-square, non-symmetric beyond ``1.5e-8 · max|C|``,
    complex or non-finite input raises ``ValueError`` naming ``covariance``) or a
    :class:`StreamingCovariance`.  ``C`` is divided by ``max|C|`` before ``eigvalsh`` and the
    eigenvalues multiplied back, so the result is scale-equivariant (``λ(cC) = c λ(C)``) over the
    whole float64 range.  Returns shape ``(D,)``.
    """
    if isinstance(data, StreamingCovariance):
        cov = data.covariance(ddof)
    elif input == "activations":
        cov = covariance_matrix(data, center=center, ddof=ddof)
    elif input == "covariance":
        cov = as_numpy_array(data, name="covariance", ndim=2)
        if cov.shape[0] != cov.shape[1]:
            raise ValueError(f"covariance: expected a square matrix, got shape {cov.shape}")
    else:
        raise ValueError(f"input must be 'activations' or 'covariance', got {input!r}")
    scale = float(np.abs(cov).max()) if cov.size else 0.0
    if not np.isfinite(scale):
        raise ValueError("covariance: non-finite entries (overflow); rescale the activations")
    if scale == 0.0:
        return np.zeros(cov.shape[0])
    unit = cov / scale
    if np.abs(unit - unit.T).max() > _SYMMETRY_RTOL:
        raise ValueError(f"covariance: not symmetric (max |C - C^T| / max |C| = "
                         f"{np.abs(unit - unit.T).max():.3g})")
    lam = np.maximum(np.linalg.eigvalsh(unit), 0.0)[::-1] * scale
    if not np.all(np.isfinite(lam)):
        raise ValueError("covariance: eigenvalues overflow float64; rescale the input")
    return lam


def singular_value_spectrum(activations: Any, *, center: bool = True) -> np.ndarray:
    """Singular values ``σ_1 ≥ … ≥ σ_k`` (``k = min(n, D)``) of the (centred) ``n × D`` matrix.

    For a centred matrix ``σ_i² = (n−1) λ_i``; ranks on ``σ`` weight modes by ``σ``, not ``σ²``.
    """
    h = _activations(activations)
    if center:
        h = h - h.mean(axis=0)
    return np.linalg.svd(h, compute_uv=False)


def spectrum(activations: Any, *, source: SpectrumSource = "covariance", center: bool = True) -> np.ndarray:
    """Descending spectrum of an ``n × D`` matrix: covariance eigenvalues or singular values."""
    _check_source(source)
    if source == "covariance":
        return covariance_spectrum(activations, center=center)
    return singular_value_spectrum(activations, center=center)


def _mode_log_weights(eigenvalues: Any, tol: float | None) -> np.ndarray:
    """``log p_i`` over the modes above the tolerance (the rest are exact zeros).

    Default tolerance relative, ``len(λ)·ε·max λ``; an explicit ``tol`` is absolute.  Everything is
    computed on ``λ / max λ`` so that the result does not depend on the scale of ``λ``.
    """
    lam = as_numpy_array(eigenvalues, name="eigenvalues", ndim=1)
    if tol is not None and not tol >= 0:
        raise ValueError(f"tol must be non-negative, got {tol}")
    top = float(lam.max())
    if not top > 0 or (tol is not None and not top > tol):
        raise ValueError(f"eigenvalues: no eigenvalue above the tolerance (max {top:.3g}; "
                         "rank undefined for a zero spectrum)")
    x = lam / top
    cut = lam.size * np.finfo(np.float64).eps if tol is None else tol / top
    if float(x.min()) < -cut:
        raise ValueError(f"eigenvalues: negative value {float(lam.min()):.3e} (spectra are non-negative)")
    kept = x[x > cut]
    return np.log(kept) - np.log(kept.sum())


def _check_alpha(alpha: float) -> float:
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise ValueError(f"alpha must be a number in [0, inf], got {alpha!r}") from None
    if np.isnan(a) or a < 0:
        raise ValueError(f"alpha must be in [0, inf], got {alpha!r}")
    return a


def renyi_rank(eigenvalues: Any, alpha: float, *, tol: float | None = None) -> float:
    """Rényi effective rank ``R_α = exp( (1/(1−α)) log Σ_i p_i^α )``, ``p_i = λ_i/Σλ``.

    ``eigenvalues``: 1-D non-negative spectrum (any order, any scale: ``R_α(cλ) = R_α(λ)``);
    entries ``≤ tol`` are zeros (default relative, ``max λ · len(λ) · ε``; an explicit ``tol`` is
    absolute).  ``alpha`` in ``[0, ∞]``: ``α = 0`` → number of modes above ``tol``; ``α = 1`` → ``exp(−Σ p log p)``;
    ``α = ∞`` → ``1/max p``.  ``1 ≤ R_α ≤ #modes`` and ``R_α`` is non-increasing in ``α``.
    Near ``α = 1`` the log-moment is evaluated as ``log1p(Σ p_i expm1((α−1) log p_i))`` to avoid
    cancellation; elsewhere with ``logsumexp``.
    """
    a = _check_alpha(alpha)
    logp = _mode_log_weights(eigenvalues, tol)
    if a == 0.0:
        return float(logp.size)
    if np.isinf(a):
        return float(np.exp(-logp.max()))
    t = a - 1.0
    if t == 0.0:
        return float(np.exp(-np.sum(np.exp(logp) * logp)))
    if abs(t) < 0.5:
        # log Σ p^α = log(1 + Σ p (p^{α−1} − 1)); |t log p| ≤ 0.5·745 cannot overflow
        log_moment = np.log1p(np.sum(np.exp(logp) * np.expm1(t * logp)))
    else:
        log_moment = logsumexp(a * logp)
    return float(np.exp(-log_moment / t))


def soft_rank(eigenvalues: Any, *, tol: float | None = None) -> float:
    """Soft rank ``R_1 = exp(−Σ_i p_i log p_i)`` (Shannon effective rank)."""
    return renyi_rank(eigenvalues, 1.0, tol=tol)


def hard_rank(eigenvalues: Any, *, tol: float | None = None) -> float:
    """Hard rank ``R_2 = 1/Σ p_i² = (Σλ_i)²/Σλ_i²`` (participation ratio)."""
    return renyi_rank(eigenvalues, 2.0, tol=tol)


def spectral_asymmetry(eigenvalues: Any, *, tol: float | None = None) -> float:
    """Pointwise asymmetry ``Δ = log R_1 − log R_2 = log(R_1/R_2) ≥ 0``."""
    return float(np.log(soft_rank(eigenvalues, tol=tol)) - np.log(hard_rank(eigenvalues, tol=tol)))


def reinjection_ratio(pre: Any, post: Any, alpha: float, *, tol: float | None = None) -> float:
    """Nonlinear reinjection ratio ``ρ_α = R_α(post) / R_α(pre)`` (docs/theory.md §C.4, App. C).

    ``pre``/``post``: spectra (1-D) of the pre- and post-activation covariance of the same layer.
    """
    return renyi_rank(post, alpha, tol=tol) / renyi_rank(pre, alpha, tol=tol)


def rank_summary(activations: Any, *, alphas: Sequence[float] = (0.0, 1.0, 2.0, float("inf")),
                 source: SpectrumSource = "covariance", center: bool = True) -> dict:
    """Ranks of one ``n × D`` activation matrix: ``R_α`` per ``α``, soft, hard, asymmetry.

    Returns a JSON-ready dict (``α = ∞`` is keyed ``"inf"``).  The ranks are scale invariant: the
    spectrum is taken of ``H / max|H|`` (``R_α`` does not change, overflow and underflow do not
    happen).
    """
    h = _activations(activations)
    top = float(np.abs(h).max())
    lam = spectrum(h / top if top > 0 else h, source=source, center=center)
    renyi = {_alpha_key(a): renyi_rank(lam, a) for a in alphas}
    return {
        "n": int(h.shape[0]),
        "dim": int(h.shape[1]),
        "source": source,
        "center": bool(center),
        "renyi": renyi,
        "soft": soft_rank(lam),
        "hard": hard_rank(lam),
        "asymmetry": spectral_asymmetry(lam),
    }


def _alpha_key(alpha: float) -> str:
    a = _check_alpha(alpha)
    if np.isinf(a):
        return "inf"
    return f"{a:g}"
