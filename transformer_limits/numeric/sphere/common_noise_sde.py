"""The common-noise SDE limit of docs/theory.md §B.3, its schemes, couplings and Lyapunov estimator.

Limit SDE for N tokens X̄^i on S^{d−1} (Itô form)::

    dX̄^i = ( P_{X̄^i} s Attn(μ^N, X̄^i) − c X̄^i ) dt + P_{X̄^i} dW_t(X̄^i),    c = k(1)(d−1)/2,

``W`` a Brownian field common to all tokens with ``E[W_t(x) W_t(y)^T] = t k(⟨x,y⟩) I_d``.

Noise models (both give increments ``dW`` of shape (N, d) at the token positions):

* **exact in law** (:meth:`CommonNoiseSDE.exact_increment`): over a step of length h at positions X,
  ``dW = √h K^{1/2} Z`` with ``K = [k(⟨x_i,x_j⟩)]`` (N, N), Z (N, d) i.i.d. N(0,1) (coordinates
  independent); ``K^{1/2}`` is the symmetric PSD root by eigen-decomposition with negative
  eigenvalues (round-off) clipped to 0 — robust when tokens nearly coincide (Cholesky is not).
* **random features** (:meth:`CommonNoiseSDE.feature_increment`): given a first layer (U (m, d),
  b_U (m,)) the field ``dW(x) = (1/√m) Σ_k φ(⟨u_k,x⟩/√d + b_k) dB^k + σ_W dB^0`` driven by
  Brownian increments dB (m+1, d); its covariance is the empirical kernel
  ``k^m(x,y) = (1/m) Σ_k φ_k(x) φ_k(y) + σ_W²``.  Used for the couplings below and whenever
  several step sizes or particle systems must see the *same* noise.

Scheme (:meth:`CommonNoiseSDE.step`, "projected Euler–Maruyama")::

    X̃ = X + h (P_X s Attn(X) − c X) + P_X dW(X),     X' = X̃/|X̃|.

Strong order 1/2 (root-mean-square), i.e. mean-square error O(h): the noise vector fields
P_x σ_k(x) e_α do not commute, so no Milstein-type gain without Lévy areas (measured in
``tests/test_common_noise_sde.py`` and docs/paper_b.md).  With ``renormalise=False`` it is plain
Euler–Maruyama in R^d (also order 1/2; |X| ≠ 1); ``ito_drift=False`` drops −cX (a wrong model: with
``renormalise=False`` the tokens leave the sphere, |X|² ≈ 1 + k(1)(d−1)t).

Coupling of the paper's proof (:func:`coupled_discrete_and_sde`): layer ℓ of the discrete model
uses features (U^ℓ, b_U^ℓ); the SDE on [t_ℓ, t_{ℓ+1}] is driven by the random-feature field of the
same features with Brownian increments dB_s (substeps s), and the discrete model's output layer is
``W^ℓ[:, k] = Σ_s dB_s^k/√Δt``, ``b_W^ℓ = σ_W Σ_s dB_s^0/√Δt`` — exactly N(0,1) and N(0,σ_W²) — so
``√Δt G^m_ℓ(x) = W_{t_{ℓ+1}}(x) − W_{t_ℓ}(x)`` for every x.  Width coupling
(:func:`coupled_width_chains`): conditional on (U, b_U) the width-m field at the N points is
N(0, K^m ⊗ I_d), K^m = Φ Φ^T/m + σ_W²; it is realised as (K^m)^{1/2} Z and the m = ∞ (Gaussian
field) chain as K^{1/2} Z with the *same* standard normals Z (Basteri–Trevisan-type coupling).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from transformer_limits.numeric.sphere import loops
from transformer_limits.numeric.sphere.derived_constants import RELU_DK1_TIMES_D
from transformer_limits.numeric.sphere.loops import Pieces, SDEConstants
from transformer_limits.numeric.sphere.lyapunov import LyapunovEstimate
from transformer_limits.numeric.sphere.transformer import (
    SphereTransformer,
    attention_scale,
    check_field_settings,
    layer_norm,
    project_tangent,
)
from transformer_limits.numeric.sphere.mlp_field import mlp_field_kernels

__all__ = ["CommonNoiseSDE", "psd_sqrt", "coupled_discrete_and_sde", "coupled_width_chains",
           "strong_errors_random_features", "sde_top_lyapunov", "STRONG_ORDER"]

#: declared strong (root-mean-square) order of the projected Euler–Maruyama scheme
STRONG_ORDER = 0.5


def psd_sqrt(K: np.ndarray) -> np.ndarray:
    """Symmetric PSD square root of a symmetric (N, N) matrix (eigenvalues < 0 clipped to 0)
    (``transformer_limits.numeric.sphere.loops.psd_sqrt`` on NumPy)."""
    return loops.psd_sqrt(np, K)


def _rng(seed: int | np.random.Generator) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


@dataclass(frozen=True)
class CommonNoiseSDE:
    """The limit SDE of docs/theory.md §B.3 with its noise models and projected EM step.

    ``backend``: any of the MLP-field backends.  :meth:`simulate`, :meth:`simulate_batch`,
    :meth:`simulate_systems` and the two couplings are the loops of
    ``transformer_limits.numeric.sphere.loops``, the same code on the host and on a GPU backend,
    where the state stays on the device for the whole run (:attr:`device_resident`); ``numba-cuda``
    without CuPy has no device array arithmetic and runs them on host arrays (per-call kernel copies).
    ``precision``: ``float64`` (default) or ``float32`` (numpy, numba, cupy: the runs return float32 and the
    kernels, k(1) included, compute in float32); numba-cuda is float64 only (ValueError naming
    precision).
    """

    d: int
    activation: str = "relu"
    sigma_u: float = 0.0
    sigma_w: float = 0.0
    attention: str | float = "attractive"
    beta: float = 1.0
    Q: np.ndarray | None = field(default=None, compare=False)
    K: np.ndarray | None = field(default=None, compare=False)
    V: np.ndarray | None = field(default=None, compare=False)
    ito_drift: bool = True
    backend: str = "numpy"
    precision: str = "float64"

    def __post_init__(self):
        if not isinstance(self.d, (int, np.integer)) or self.d < 2:
            raise ValueError(f"d must be an integer >= 2, got {self.d!r}")
        check_field_settings(self)

    @property
    def device_resident(self) -> bool:
        """Whether the runs keep the state in device arrays for the whole run and compute with the
        array arithmetic of ``transformer_limits.numeric.sphere.loops`` (GPU backends with array
        arithmetic; numpy in float32 takes the array arithmetic on the host); False on numpy / numba in
        float64 and on ``numba-cuda`` without CuPy (the reference arithmetic on host arrays)."""
        return not loops.reference_arithmetic(loops.runtime_for((self.backend, self.precision)))

    @classmethod
    def from_model(cls, model: SphereTransformer, **overrides) -> "CommonNoiseSDE":
        """The limit SDE of a discrete :class:`SphereTransformer` (same φ, σ's, attention)."""
        kw: dict[str, Any] = dict(d=model.d, activation=model.activation, sigma_u=model.sigma_u, sigma_w=model.sigma_w,
                  attention=model.attention, beta=model.beta, Q=model.Q, K=model.K, V=model.V,
                  backend=model.backend, precision=model.precision)
        kw.update(overrides)
        return cls(**kw)

    # ------------------------------------------------------------------ kernel
    @property
    def kernels(self):
        """The generated MLP-field kernels of the SDE's backend at its precision (built once per
        process, shared by every run)."""
        return mlp_field_kernels(self.activation, self.backend, self.precision)

    def kernel_matrix(self, X: np.ndarray) -> np.ndarray:
        """K = [k(⟨x_i, x_j⟩)], shape (N, N)."""
        return self.kernels.kernel_matrix(X, self.sigma_u, self.sigma_w)

    @property
    def k1(self) -> float:
        """k(1)."""
        return self.kernels.k1(self.d, self.sigma_u, self.sigma_w)

    @property
    def dk1(self) -> float:
        """k'(1) = (1/d) E[φ'(sZ)²], from the ``mlp-kernel`` derivation's closed form for ReLU (generated
        constant, 1/(2d)), else Σ_j j b_j/(d s²) (Mehler series)."""
        if self.activation == "relu":
            return RELU_DK1_TIMES_D / self.d
        b = self.kernels.mehler(self.d, self.sigma_u)
        return float(np.arange(b.size) @ b) / (self.d * (1.0 / self.d + self.sigma_u**2))

    @property
    def ito_coefficient(self) -> float:
        """c = k(1)(d−1)/2 (0 when ``ito_drift`` is False)."""
        return self.k1 * (self.d - 1) / 2 if self.ito_drift else 0.0

    @property
    def constants(self):  # -> loops.SDEConstants (the loops are not in the API reference)
        """What the loops read of the SDE (``transformer_limits.numeric.sphere.loops.SDEConstants``;
        c from one k(1) of the run's kernels)."""
        return self._constants(self.ito_coefficient)

    def _constants(self, c: float) -> SDEConstants:
        assert self.Q is not None and self.K is not None and self.V is not None  # set by __post_init__
        return SDEConstants(d=int(self.d), activation=self.activation, sigma_u=float(self.sigma_u),
                            sigma_w=float(self.sigma_w), scale=attention_scale(self.attention), Q=self.Q, K=self.K,
                            V=self.V, backend=self.backend, precision=self.precision, c=c)

    def _host(self, drift: bool = True) -> Pieces:
        """The maps on host (NumPy) arrays, for the methods below (k(1) computed only for the drift;
        not cached: the SDE stays picklable and holds no kernels)."""
        return Pieces(loops.host_runtime((self.backend, self.precision)),
                      self._constants(self.ito_coefficient if drift else 0.0))

    # ------------------------------------------------------------------ drift and noise
    def drift(self, X: np.ndarray) -> np.ndarray:
        """b(X) = P_X s Attn(μ^N_X, X) − c X, shape (N, d)."""
        return self._host().drift(X)

    def exact_increment(self, X: np.ndarray, h: float, Z: np.ndarray) -> np.ndarray:
        """dW = √h K(X)^{1/2} Z, exact in law at the N positions (Z (N, d) standard normal)."""
        return np.sqrt(h) * psd_sqrt(self.kernel_matrix(X)) @ Z

    def feature_increment(self, X: np.ndarray, U: np.ndarray, b_U: np.ndarray, dB: np.ndarray) -> np.ndarray:
        """dW(x_i) = (1/√m) Σ_k φ_k(x_i) dB^k + σ_W dB^0 for dB (m+1, d) (row m is dB^0)."""
        return self._host(drift=False).feature_increment(X, U, b_U, dB)

    def step(self, X: np.ndarray, h: float, dW: np.ndarray, *, renormalise: bool = True) -> np.ndarray:
        """Projected Euler–Maruyama: ``X̃ = X + h b(X) + P_X dW``, then ``X̃/|X̃|`` (if ``renormalise``).

        Off the sphere (``renormalise=False``, ``|X| ≠ 1``) the two terms extend differently: the
        noise is projected at ``X/|X|`` (``P_{X/|X|} dW``), the drift is evaluated at the
        unnormalised X (attention logits scale with ``|X|²``, and ``−cX`` with ``|X|``).  Both extensions agree with the
        SDE on the sphere, where the scheme's order is measured; off it this is one choice of
        extension, not the paper's dynamics.
        """
        return self._host().em_step(X, h, dW, renormalise)

    # ------------------------------------------------------------------ runs
    def _runtime(self):
        return loops.runtime_for((self.backend, self.precision))

    def simulate(self, X0: np.ndarray, T: float, n_steps: int, seed: int | np.random.Generator = 0,
                 *, renormalise: bool = True) -> np.ndarray:
        """Trajectory (n_steps+1, N, d) with exact-in-law increments, h = T/n_steps.

        Z (N, d) per step from ``seed`` in the same order on every backend; dtype of ``precision``
        (``transformer_limits.numeric.sphere.loops.exact_runs``: on a device K(X) is the generated
        zonal kernel and its root ``xp.linalg.eigh`` there, Z uploaded in chunks of steps, the path
        copied back once).
        """
        X0 = np.asarray(X0, dtype=np.float64)
        return self.simulate_batch(X0[None], T, n_steps, [seed], renormalise=renormalise)[0]

    def simulate_batch(self, X0s: np.ndarray, T: float, n_steps: int, seeds, *,
                       renormalise: bool = True) -> np.ndarray:
        """B independent runs of :meth:`simulate` (own initial condition, own noise), shape
        (B, n_steps+1, N, d): ``out[b] == simulate(X0s[b], T, n_steps, seeds[b])`` up to round-off.

        X0s (B, N, d) (equal N); ``seeds`` one int or Generator per run.  With the array arithmetic
        (:attr:`device_resident`) all runs advance together: one zonal-kernel launch, one batched
        eigh and one batched attention per step for the whole batch; the reference runs one after
        the other.
        """
        X0s = np.asarray(X0s, dtype=np.float64)
        if X0s.ndim != 3 or X0s.shape[2] != self.d:
            raise ValueError(f"X0s must have shape (B, N, {self.d}), got {X0s.shape}")
        seeds = list(seeds)
        if len(seeds) != X0s.shape[0]:
            raise ValueError(f"seeds must give one seed per run ({X0s.shape[0]}), got {len(seeds)}")
        shape = X0s.shape[1:]
        draws = [(lambda rng=_rng(seed): rng.standard_normal(shape)) for seed in seeds]
        return loops.exact_runs(self._runtime(), self.constants, X0s, T, n_steps, draws, renormalise)

    def sample_features(self, m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """First layer (U (m, d), b_U (m,)) of a width-m MLP."""
        return rng.standard_normal((m, self.d)), self.sigma_u * rng.standard_normal(m)

    def simulate_systems(self, systems: list[np.ndarray], T: float, n_steps: int, m: int,
                         seed: int | np.random.Generator = 0, eval_steps=None) -> list[np.ndarray]:
        """Several particle systems driven by the SAME common noise (random-feature field with m
        fresh features per step); attention acts within each system.  Returns, per system, the
        positions at ``eval_steps`` (default: all), shape (n_eval, N_s, d), dtype of ``precision``.

        Per step the draws are ``U, b_U`` (:meth:`sample_features`) then ``dB = √h N(0,1)^{(m+1) x d}``
        (``transformer_limits.numeric.sphere.loops.feature_runs``: the systems' tokens are one
        concatenated state; with the array arithmetic the features of all systems are one launch per
        step and attention is batched when all N_s are equal; on a device the draws are uploaded in
        chunks and only the ``eval_steps`` positions come back, once).
        """
        rng = _rng(seed)
        root_h = np.sqrt(T / n_steps)

        def draw() -> tuple[np.ndarray, ...]:
            U, b_U = self.sample_features(m, rng)
            return U, b_U, root_h * rng.standard_normal((m + 1, self.d))

        return loops.feature_runs(self._runtime(), self.constants, systems, T, n_steps, m, draw, eval_steps)


# ---------------------------------------------------------------------------------------- couplings
def coupled_discrete_and_sde(model: SphereTransformer, sde: CommonNoiseSDE, X0: np.ndarray, substeps: int,
                             seed: int | np.random.Generator | Sequence[int | np.random.Generator] = 0, *,
                             renormalise: bool = True) -> tuple[np.ndarray, np.ndarray, Any]:
    """Discrete model and SDE driven by the same noise (module docstring, "Coupling").

    The SDE is integrated by projected EM with ``substeps`` steps per layer (plain EM in R^d when
    ``renormalise`` is False).  Returns
    ``(X (L+1, N, d), X̄ on the grid (L+1, N, d), sup_err)`` with
    ``sup_err = max over fine times t of (1/N) Σ_i |X^i_{⌊Lt/T⌋} − X̄^i_t|²``.  Per layer the draws
    are (U, b_U) (:meth:`CommonNoiseSDE.sample_features`) then dB (substeps, m+1, d)
    (``transformer_limits.numeric.sphere.loops.coupled_run``, on the runtime the two share).

    B independent couplings at once: X0 (B, N, d) and ``seed`` a sequence of B seeds or Generators
    (run b draws from its own); then X, X̄ are (B, L+1, N, d) and ``sup_err`` (B,), bitwise the B
    single runs (one array operation per step for all of them: several times faster at small N).
    """
    if substeps < 1:
        raise ValueError(f"substeps must be >= 1, got {substeps}")
    m, d = model.m, model.d
    root_h = np.sqrt(model.dt / substeps)

    def draws_of(rng: np.random.Generator) -> Callable[[], tuple[np.ndarray, ...]]:
        def draw() -> tuple[np.ndarray, ...]:
            U, b_U = sde.sample_features(m, rng)
            return U, b_U, root_h * rng.standard_normal((substeps, m + 1, d))
        return draw

    rt = loops.runtime_for((model.backend, model.precision), (sde.backend, sde.precision))
    return loops.coupled_run(rt, model.constants, sde.constants, X0, substeps, _per_run(X0, seed, draws_of),
                             renormalise)


def _per_run(X0: Any, seed: Any, draws_of: Callable[[np.random.Generator], Any]) -> Any:
    """The draw of one run (X0 (N, d)), or the list of B runs' draws (X0 (B, N, d), ``seed`` a
    sequence of B seeds or Generators; ValueError naming seed otherwise)."""
    if np.ndim(X0) != 3:
        return draws_of(_rng(seed))
    if isinstance(seed, np.random.Generator) or not isinstance(seed, Sequence) or len(seed) != np.shape(X0)[0]:
        raise ValueError(f"seed must be a sequence of {np.shape(X0)[0]} seeds or Generators (one per run of "
                         f"X0 {np.shape(X0)}), got {seed!r}")
    return [draws_of(_rng(s)) for s in seed]


def coupled_width_chains(model: SphereTransformer, sde: CommonNoiseSDE, X0: np.ndarray,
                         seed: int | np.random.Generator | Sequence[int | np.random.Generator] = 0
                         ) -> tuple[np.ndarray, np.ndarray]:
    """Width-m discrete chain and the m = ∞ (Gaussian-field) discrete chain, same Z each layer.

    Layer: Y = LN(X + α_1 s Attn(X)); width m: X' = LN(Y + √Δt (K^m(Y))^{1/2} Z) with
    K^m = Φ(Y)Φ(Y)^T/m + σ_W² (equal in law, given (U, b_U), to the literal MLP at the N tokens);
    m = ∞: X' = LN(Y + √Δt K(Y)^{1/2} Z).  Returns the two final states, each (N, d).  Per layer the
    draws are (U, b_U) then Z (N, d) (``transformer_limits.numeric.sphere.loops.width_chains_run``).
    B independent pairs at once: X0 (B, N, d) and ``seed`` a sequence of B seeds or Generators (as in
    :func:`coupled_discrete_and_sde`); the final states are then (B, N, d) each.
    """
    m, shape = model.m, np.shape(X0)[-2:]

    def draws_of(rng: np.random.Generator) -> Callable[[], tuple[np.ndarray, ...]]:
        def draw() -> tuple[np.ndarray, ...]:
            U, b_U = sde.sample_features(m, rng)
            return U, b_U, rng.standard_normal(shape)
        return draw

    rt = loops.runtime_for((model.backend, model.precision), (sde.backend, sde.precision))
    # the chains read the SDE's field only, not its drift: no k(1) (no kernel call for it)
    return loops.width_chains_run(rt, model.constants, sde._constants(0.0), X0, _per_run(X0, seed, draws_of))


def strong_errors_random_features(sde: CommonNoiseSDE, X0: np.ndarray, T: float, levels, ref_steps: int,
                                  m: int, seed: int | np.random.Generator = 0,
                                  *, renormalise: bool = True) -> np.ndarray:
    """Mean-square errors (1/N) Σ_i |X̂^i_T(n) − X̂^i_T(ref)|² of the scheme with n ∈ ``levels``
    steps against ``ref_steps`` steps, one fixed random-feature field (m features for all t) and
    Brownian increments summed exactly from the reference grid.  Shape (len(levels),)."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    U, b_U = sde.sample_features(m, rng)
    h = T / ref_steps
    dB = np.sqrt(h) * rng.standard_normal((ref_steps, m + 1, sde.d))
    X0 = layer_norm(np.asarray(X0, dtype=np.float64))

    def solve(n: int) -> np.ndarray:
        if ref_steps % n:
            raise ValueError(f"levels must divide ref_steps={ref_steps}, got {n}")
        incr = dB.reshape(n, ref_steps // n, m + 1, sde.d).sum(axis=1)
        X = X0
        for j in range(n):
            X = sde.step(X, T / n, sde.feature_increment(X, U, b_U, incr[j]), renormalise=renormalise)
        return X

    ref = solve(ref_steps)
    return np.array([np.mean(np.sum((solve(int(n)) - ref) ** 2, axis=1)) for n in levels])


# ---------------------------------------------------------------------------------------- Lyapunov
def sde_top_lyapunov(sde: CommonNoiseSDE, *, dt: float = 0.01, steps: int = 400, chains: int = 256,
                     n_exponents: int = 1, seed: int = 0) -> LyapunovEstimate:
    """Tangent-flow (Benettin/QR) estimate of the top Lyapunov exponent of the one-point SDE
    (no attention): dX = −cX dt + P_X dW(X).

    At a point x the field increment and its tangent Jacobian are independent Gaussians
    (isotropy): ΔG ~ N(0, k(1) h I_d) and, for tangent v, DΔG v = √(k'(1) h) Ξ v with Ξ (d, d)
    i.i.d. N(0,1) (Cov(∂_vG_a, ∂_wG_b) = k'(1)⟨v,w⟩δ_ab; Cov(G_a, ∂_vG_b) = k'(1)⟨x,v⟩ = 0).
    The frame V (d, p) is pushed by the linearised projected-EM step
    ``V ← P_{x'}[(1 − ch)V + P_x Ξ' V − x (ΔG^T V) − ⟨x,ΔG⟩V]/|x̃|`` and re-orthonormalised by QR;
    λ̂ = Σ log|R_11| / (steps h) per chain.  Converges to λ_1 = ((d−3)/2)k'(1) − ((d−1)/2)k(1) as h → 0.
    """
    if chains < 2 or steps < 1 or not dt > 0:
        raise ValueError("need chains >= 2, steps >= 1 and dt > 0")
    d = sde.d
    if not 1 <= n_exponents <= d - 1:
        raise ValueError(f"n_exponents must be in [1, {d - 1}], got {n_exponents}")
    rng = np.random.default_rng(seed)
    k1, dk1, c = sde.k1, sde.dk1, sde.ito_coefficient
    x = layer_norm(rng.standard_normal((chains, d)))
    V = rng.standard_normal((chains, d, n_exponents))
    V = V - x[:, :, None] * np.einsum("cd,cdp->cp", x, V)[:, None, :]
    V, _ = np.linalg.qr(V)
    logs = np.zeros((chains, n_exponents))
    for _ in range(steps):
        dG = np.sqrt(k1 * dt) * rng.standard_normal((chains, d))
        Xi = np.sqrt(dk1 * dt) * rng.standard_normal((chains, d, d))
        xt = (1 - c * dt) * x + project_tangent(x, dG)
        norm = np.linalg.norm(xt, axis=1)
        xn = xt / norm[:, None]
        JV = np.einsum("cab,cbp->cap", Xi, V)
        JV = JV - x[:, :, None] * np.einsum("cd,cdp->cp", x, JV)[:, None, :]
        W = ((1 - c * dt) * V + JV - x[:, :, None] * np.einsum("cd,cdp->cp", dG, V)[:, None, :]
             - np.sum(x * dG, axis=1)[:, None, None] * V)
        W = W - xn[:, :, None] * np.einsum("cd,cdp->cp", xn, W)[:, None, :]
        W = W / norm[:, None, None]
        V, R = np.linalg.qr(W)
        diag = np.einsum("cii->ci", R)
        V = V * np.sign(diag)[:, None, :]
        logs += np.log(np.abs(diag))
        x = xn
    per_chain = logs[:, 0] / (steps * dt)
    return LyapunovEstimate(float(per_chain.mean()), float(per_chain.std(ddof=1) / np.sqrt(chains)),
                            chains, steps, dt)
