"""Paper C's optimizers against independent float64 transcriptions of the reference code.

Each ``ref_*`` function below is written from the reference repository named in its docstring
(not from ``transformer_limits``): a plain loop over steps with the reference's order of
operations and its own orientation conventions.  The NumPy references
(:mod:`transformer_limits.numeric.optim.matrix_optimizers`) and the PyTorch optimizers
(:mod:`transformer_limits.numeric.torch.optimizers`, float64) must agree with them to rounding on
random non-square matrices, several steps, weight decay on, and every option in a setting where the
options differ (NorMuon with many rows, Dion with rank ``r < min(m, n)`` in both orientations).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_limits.numeric.optim.matrix_optimizers import Dion, Lion, Muon, NorMuon

JORDAN_NS = [(3.4445, -4.7750, 2.0315)] * 5  # KellerJordan/Muon muon.py
DION_NS = [(4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
           (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012)]  # microsoft/dion muon.py


# ------------------------------------------------------------------------------------------------
# Transcriptions
# ------------------------------------------------------------------------------------------------

def ref_newton_schulz(G, coeffs, eps):
    """``zeropower_via_newtonschulz5`` (KellerJordan/Muon; microsoft/dion muon.py), in float64."""
    X = G.T if G.shape[0] > G.shape[1] else G
    X = X / (math.sqrt(float(np.sum(X * X))) + eps)
    for a, b, c in coeffs:
        A = X @ X.T
        B = b * A + c * (A @ A)
        X = a * X + B @ X
    return X.T if G.shape[0] > G.shape[1] else X


def ref_muon_jordan(W, grads, lr, beta, wd, nesterov=True, eps=1e-7):
    """KellerJordan/Muon ``muon_update`` + ``Muon.step``: ``momentum.lerp_(grad, 1-β)``,
    ``update = grad.lerp_(momentum, β)`` (Nesterov), NS, ``*= max(1, rows/cols)^0.5``,
    ``p.mul_(1 - lr·wd)``, ``p.add_(update, alpha=-lr)``."""
    W, M = W.copy(), np.zeros_like(W)
    for g in grads:
        M = M + (1 - beta) * (g - M)
        U = g + beta * (M - g) if nesterov else M
        U = ref_newton_schulz(U, JORDAN_NS, eps) * max(1.0, W.shape[0] / W.shape[1]) ** 0.5
        W = W * (1 - lr * wd) - lr * U
    return W


def ref_muon_dion(W, grads, lr, mu, wd, nesterov=True, eps=1e-8):
    """microsoft/dion ``Muon`` (the paper's runs): ``M ← μM + G``, ``U = μM + G`` (Nesterov),
    ``NS`` with the dion schedule and ``epsilon``, ``X ← X(1 − lr·wd)``,
    ``X ← X − lr·sqrt(fan_out/fan_in)·U`` (``adjust_lr="spectral_norm"``)."""
    W, M = W.copy(), np.zeros_like(W)
    for g in grads:
        M = mu * M + g
        U = mu * M + g if nesterov else M
        U = ref_newton_schulz(U, DION_NS, eps)
        W = W * (1 - lr * wd) - lr * math.sqrt(W.shape[0] / W.shape[1]) * U
    return W


def ref_normuon(W, grads, lr, mu, wd, beta2=0.95, eps=1e-8):
    """microsoft/dion ``NorMuon``: the dion Muon direction ``U``, then per row (neuron) ``i``
    ``v_i ← lerp(v_i, mean_j U_ij², 1 − β₂)``, ``Û_ij = U_ij/(√v_i + 1e-8)``,
    ``Û ← Û·‖U‖_F/max(‖Û‖_F, 1e-8)``; spectral-norm lr, decoupled decay."""
    W, M = W.copy(), np.zeros_like(W)
    rows, cols = W.shape
    v = [0.0] * rows
    for g in grads:
        M = mu * M + g
        U = ref_newton_schulz(mu * M + g, DION_NS, eps)
        Uh = np.empty_like(U)
        for i in range(rows):  # one second moment per output neuron
            v[i] = v[i] + (1 - beta2) * (sum(U[i, j] ** 2 for j in range(cols)) / cols - v[i])
            Uh[i] = U[i] / (math.sqrt(v[i]) + 1e-8)
        Uh = Uh * (np.linalg.norm(U) / max(np.linalg.norm(Uh), 1e-8))
        W = W * (1 - lr * wd) - lr * math.sqrt(rows / cols) * Uh
    return W


def _gram_schmidt(A):
    """Orthonormal basis of the columns of ``A`` (modified Gram–Schmidt, full column rank)."""
    Q = np.array(A, dtype=np.float64)
    for j in range(Q.shape[1]):
        for i in range(j):
            Q[:, j] -= (Q[:, i] @ Q[:, j]) * Q[:, i]
        Q[:, j] /= np.linalg.norm(Q[:, j])
    return Q


def ref_dion(W, grads, Q0, lr, mu, wd, eps=1e-8):
    """microsoft/dion ``dion_update`` (dion_reference.py), single device, exact orthonormalisation.

    ``M`` keeps the shape of ``X``; ``transpose = rows < cols``; ``B = Mᵀ`` if transposed else ``M``;
    ``P = orth(B Q)``, ``R = Bᵀ P``; ``fix_all_zero_or_nan``: if ``M`` is all zero then ``P = 0``,
    ``R = Q``; ``M ← M − (1−μ)(P Rᵀ)`` (``R Pᵀ`` when transposed); ``Q ← R/(‖R_{:,j}‖ + ε)``;
    ``X ← X(1 − lr·wd) − lr·sqrt(fan_out/fan_in)·P Qᵀ`` (``Q Pᵀ`` when transposed).
    """
    W, M, Q = W.copy(), np.zeros_like(W), Q0.copy()
    transpose = W.shape[0] < W.shape[1]
    for g in grads:
        M = M + g
        B = M.T if transpose else M
        if np.all(M == 0):
            P, R = np.zeros((B.shape[0], Q.shape[1])), Q
        else:
            P = _gram_schmidt(B @ Q)
            R = B.T @ P
        M = M - (1 - mu) * ((R @ P.T) if transpose else (P @ R.T))
        Q = R / (np.sqrt(np.sum(R * R, axis=0, keepdims=True)) + eps)
        W = W * (1 - lr * wd) - lr * math.sqrt(W.shape[0] / W.shape[1]) * ((Q @ P.T) if transpose else (P @ Q.T))
    return W


def ref_lion(W, grads, lr, beta1, beta2, wd):
    """lucidrains/lion-pytorch ``update_fn`` (= google/automl lion, microsoft/dion ``lion_update``):
    ``p ← p(1 − lr·wd)``; ``u = sign(β₁ m + (1−β₁) g)``; ``p ← p − lr·u``; ``m ← β₂ m + (1−β₂) g``."""
    W, m = W.copy(), np.zeros_like(W)
    for g in grads:
        W = W * (1 - lr * wd)
        W = W - lr * np.sign(beta1 * m + (1 - beta1) * g)
        m = beta2 * m + (1 - beta2) * g
    return W


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------

SHAPES = [(12, 8), (8, 12)]


def _problem(shape, seed, steps=4, scale=1.0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape), [scale * rng.standard_normal(shape) for _ in range(steps)]


def _run(opt, W, grads):
    W = W.copy()
    for g in grads:
        opt.step(W, g)
    return W


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def _torch_run(opt_cls, W, grads, **kwargs):
    torch = pytest.importorskip("torch")
    p = torch.nn.Parameter(torch.tensor(W, dtype=torch.float64))
    opt = opt_cls([p], **kwargs)
    for g in grads:
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    return p.detach().numpy()


# ------------------------------------------------------------------------------------------------
# Muon
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_matches_jordan_reference(shape, nesterov):
    W, grads = _problem(shape, 1)
    ref = ref_muon_jordan(W, grads, 0.02, 0.95, 0.1, nesterov)
    ours = _run(Muon(0.02, 0.95, 0.1, nesterov=nesterov), W, grads)
    assert _rel(ours, ref) < 1e-12
    from transformer_limits.numeric.torch import optimizers as to
    assert _rel(_torch_run(to.Muon, W, grads, lr=0.02, momentum=0.95, weight_decay=0.1, nesterov=nesterov),
                ref) < 1e-12
    # the options are not degenerate here: the other momentum form / Nesterov flag differ
    assert _rel(_run(Muon(0.02, 0.95, 0.1, nesterov=not nesterov), W, grads), ref) > 1e-4
    # the "sum" form's U is the "lerp" form's U divided by (1 − β) (Nesterov or not), and NS is
    # scale invariant up to eps: the two forms give the same O to ~1e-9, not a different optimizer
    assert _rel(_run(Muon(0.02, 0.95, 0.1, nesterov=nesterov, momentum_form="sum"), W, grads), ref) < 1e-7


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_matches_microsoft_dion_reference(shape, nesterov):
    W, grads = _problem(shape, 2)
    ref = ref_muon_dion(W, grads, 0.02, 0.95, 0.1, nesterov)
    kw = dict(nesterov=nesterov, momentum_form="sum", coefficients="dion", scale="spectral_norm", ns_eps=1e-8)
    assert _rel(_run(Muon(0.02, 0.95, 0.1, **kw), W, grads), ref) < 1e-12
    from transformer_limits.numeric.torch import optimizers as to
    assert _rel(_torch_run(to.Muon, W, grads, lr=0.02, momentum=0.95, weight_decay=0.1, **kw), ref) < 1e-12
    # Jordan's coefficients or scale rule are a different optimizer
    assert _rel(_run(Muon(0.02, 0.95, 0.1, **{**kw, "coefficients": "original"}), W, grads), ref) > 1e-3
    if shape[0] < shape[1]:  # max(1, m/n)^½ = (m/n)^½ for tall matrices: only wide ones tell them apart
        assert _rel(_run(Muon(0.02, 0.95, 0.1, **{**kw, "scale": "original"}), W, grads), ref) > 1e-3


def test_newton_schulz_epsilon_is_the_runs_value_and_matters_for_small_gradients():
    """The runs pass ``epsilon=1e-8`` (microsoft/dion ``Muon``/``NorMuon`` default); Jordan's NS
    uses 1e-7.  With gradients of norm ~1e-3 the two differ by ~1e-4 relative, so the test can
    tell them apart; the factory must build the runs' value."""
    W, grads = _problem((12, 8), 3, scale=1e-4)
    ref = ref_muon_dion(W - W, grads, 1.0, 0.95, 0.0, eps=1e-8)  # W = 0, lr = 1: W_T = −Σ updates
    kw = dict(momentum_form="sum", coefficients="dion", scale="spectral_norm")
    runs = _run(Muon(1.0, 0.95, **kw, ns_eps=1e-8), W - W, grads)
    jordan_eps = _run(Muon(1.0, 0.95, **kw, ns_eps=1e-7), W - W, grads)
    assert _rel(runs, ref) < 1e-12
    assert _rel(jordan_eps, ref) > 1e-6
    torch = pytest.importorskip("torch")
    from transformer_limits.numeric.torch.optimizers import build_optimizer, optimizer_spec

    for name in ("muon", "normuon"):
        block = torch.nn.Parameter(torch.zeros(4, 4))
        bundle = build_optimizer(optimizer_spec(name), [block], [], [], d_model=4)
        assert bundle.optimizers[0].param_groups[0]["ns_eps"] == 1e-8


# ------------------------------------------------------------------------------------------------
# NorMuon
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(16, 6), (6, 16)])
def test_normuon_matches_microsoft_dion_reference(shape):
    W, grads = _problem(shape, 4)
    ref = ref_normuon(W, grads, 0.02, 0.95, 0.1)
    assert _rel(_run(NorMuon(0.02, 0.95, 0.1), W, grads), ref) < 1e-12
    from transformer_limits.numeric.torch import optimizers as to
    assert _rel(_torch_run(to.NorMuon, W, grads, lr=0.02, momentum=0.95, weight_decay=0.1), ref) < 1e-12
    # non-degenerate: normalising per column instead of per row (neuron) is a different optimizer
    wrong = ref_normuon(W.T, [g.T for g in grads], 0.02, 0.95, 0.1).T
    assert _rel(wrong, ref) > 1e-4
    # β₂ matters (v differs between steps)
    assert _rel(_run(NorMuon(0.02, 0.95, 0.1, beta2=0.5), W, grads), ref) > 1e-6


# ------------------------------------------------------------------------------------------------
# Dion
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(24, 16), (16, 24)])
@pytest.mark.parametrize("fraction", [0.25, 0.5, 1.0])
def test_dion_matches_microsoft_dion_reference(shape, fraction):
    W, grads = _problem(shape, 5, steps=5)
    k = math.ceil(fraction * min(shape))
    Q0 = np.random.default_rng(11).standard_normal((min(shape), k))
    ref = ref_dion(W, grads, Q0, 0.02, 0.95, 0.1)
    assert _rel(_run(Dion(0.02, 0.95, 0.1, rank_fraction=fraction, seed=11), W, grads), ref) < 1e-10
    from transformer_limits.numeric.torch import optimizers as to
    assert _rel(_torch_run(to.Dion, W, grads, lr=0.02, momentum=0.95, weight_decay=0.1,
                           rank_fraction=fraction, seed=11), ref) < 1e-10
    if fraction < 1:  # the rank matters: r < min(m, n) is a different update
        assert _rel(_run(Dion(0.02, 0.95, 0.1, rank_fraction=1.0, seed=11), W, grads), ref) > 1e-4


@pytest.mark.parametrize("shape", [(24, 16), (16, 24)])
@pytest.mark.parametrize("zero_steps", [1, 2])
def test_dion_keeps_q_on_an_all_zero_momentum(shape, zero_steps):
    """microsoft/dion ``fix_all_zero_or_nan``: after ``zero_steps`` exactly-zero gradients (the
    first steps of a block behind a zero-initialised projection) and four random ones the weights
    equal the reference's.  A QR of the zero matrix instead sets ``Q = 0``, and then only the first
    ``k`` rows move; that bug gives a 28–99 % relative difference here."""
    W, grads = _problem(shape, 6)
    grads = [np.zeros(shape)] * zero_steps + grads
    k = math.ceil(0.25 * min(shape))
    Q0 = np.random.default_rng(3).standard_normal((min(shape), k))
    ref = ref_dion(W, grads, Q0, 0.02, 0.95, 0.1)
    opt = Dion(0.02, 0.95, 0.1, rank_fraction=0.25, seed=3)
    ours = W.copy()
    opt.step(ours, grads[0])
    np.testing.assert_array_equal(opt.last_P, 0.0)  # no update on the zero step ...
    np.testing.assert_allclose(ours, W * (1 - 0.02 * 0.1), rtol=1e-15)  # ... only the weight decay
    np.testing.assert_allclose(opt.Q, Q0 / (np.linalg.norm(Q0, axis=0) + 1e-8), rtol=1e-14)  # Q kept
    for g in grads[1:]:
        opt.step(ours, g)
    assert _rel(ours, ref) < 1e-10
    from transformer_limits.numeric.torch import optimizers as to
    assert _rel(_torch_run(to.Dion, W, grads, lr=0.02, momentum=0.95, weight_decay=0.1,
                           rank_fraction=0.25, seed=3), ref) < 1e-10


def test_dion_zero_step_reference_is_not_degenerate():
    """Deliberately wrong model: Dion that takes the QR of the zero momentum (the old behaviour)
    must fail the comparison above."""

    def qr_of_zero(W, grads, Q0, lr, mu, wd, eps=1e-8):
        W, M, Q = W.copy(), np.zeros_like(W), Q0.copy()
        for g in grads:
            M = M + g
            P, _ = np.linalg.qr(M @ Q)
            R = M.T @ P
            M = M - (1 - mu) * (P @ R.T)
            Q = R / (np.linalg.norm(R, axis=0, keepdims=True) + eps)
            W = W * (1 - lr * wd) - lr * math.sqrt(W.shape[0] / W.shape[1]) * (P @ Q.T)
        return W

    W, grads = _problem((24, 16), 6)
    grads = [np.zeros((24, 16))] + grads
    Q0 = np.random.default_rng(3).standard_normal((16, 4))
    ref = ref_dion(W, grads, Q0, 0.02, 0.95, 0.1)
    delta_ref = ref - W * (1 - 0.002) ** len(grads)
    wrong = qr_of_zero(W, grads, Q0, 0.02, 0.95, 0.1)
    delta_wrong = wrong - W * (1 - 0.002) ** len(grads)
    assert np.linalg.norm(delta_wrong - delta_ref) > 0.25 * np.linalg.norm(delta_ref)


# ------------------------------------------------------------------------------------------------
# Lion
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("betas", [(0.95, 0.98), (0.9, 0.99)])
def test_lion_matches_lucidrains_reference(betas):
    W, grads = _problem((5, 7), 7, steps=5)
    ref = ref_lion(W, grads, 1e-3, *betas, 0.1)
    assert _rel(_run(Lion(1e-3, betas, 0.1), W, grads), ref) < 1e-14
    from transformer_limits.numeric.torch import optimizers as to
    assert _rel(_torch_run(to.Lion, W, grads, lr=1e-3, betas=betas, weight_decay=0.1), ref) < 1e-14
    # β₁ and β₂ play different roles: swapping them changes the trajectory
    assert _rel(ref_lion(W, grads, 1e-3, betas[1], betas[0], 0.1), ref) > 1e-6


def test_factory_lion_rates_are_the_authors():
    """spectral-scaling-laws ``train/optimizer_factory.py``: embedding Lion at the matrix rate
    ``hp.lr``, head at ``hp.lr / sqrt(model_dim)``, betas (0.95, 0.98), no weight decay."""
    torch = pytest.importorskip("torch")
    from transformer_limits.numeric.torch.optimizers import build_optimizer, optimizer_spec

    for name in ("muon", "normuon", "dion-1/2"):
        spec = optimizer_spec(name)
        bundle = build_optimizer(spec, [torch.nn.Parameter(torch.zeros(8, 8))],
                                 [torch.nn.Parameter(torch.zeros(10, 8))], [torch.nn.Parameter(torch.zeros(10, 8))],
                                 d_model=64)
        emb, head = bundle.optimizers[1].param_groups
        assert emb["lr"] == spec.lr == 0.02
        assert head["lr"] == pytest.approx(0.02 / 8.0, rel=1e-15)
        assert emb["betas"] == head["betas"] == (0.95, 0.98)
        assert emb["weight_decay"] == head["weight_decay"] == 0.0
