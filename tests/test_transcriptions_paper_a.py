"""Independent transcriptions of paper A's model definitions, compared with the production code.

Each reference below is written from the mathematics (docs/paper_a_model.md, docs/adamw.md and the
``torch.optim.AdamW`` algorithm box, https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html),
not from the implementation: plain Python loops over tokens, heads, layers and coordinates.  Every
option is exercised where it changes the answer: several layers and heads (so 1/H and 1/sqrt(H)
differ), d, d_k, d_v all different, temperature != 1, masked and unmasked, unequal head weights,
blockwise AdamW with several blocks of *different* sizes (so "mean" and "sum" differ), a
non-constant learning-rate schedule, eps > 0 and weight decay > 0.  Gradients are checked against
torch autograd of the transcribed forward pass (an independent derivation of the adjoint).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_limits.numeric.optim.adamw import AdamW, BlockwiseAdamW
from transformer_limits.numeric.attention.mean_field import (HeadLaw, MeanFieldLimit, discrete_node_loss_and_grad)
from transformer_limits.numeric.attention.losses import (MeanPooledRegressionLoss, SquaredErrorLoss,
                                                            sample_tokens, target_map)
from transformer_limits.numeric.attention.transformer import (AttentionTransformer, init_params,
                                                           inverse_depth, inverse_heads,
                                                           inverse_sqrt_heads)

D, DK, DV, N, L, H = 3, 2, 4, 5, 3, 2  # all different, so a transposed/misplaced matrix cannot pass
TEMPERATURE = 0.7


# ============================================================================================
# transcriptions (from the formulas, loops only)


def gamma_loop(X, i, Q, K, V, O, temperature, causal):
    """gamma(x^i, m^i, theta) = O V sum_j pi_ij x^j, pi_ij ∝ exp(<Q x^i, K x^j>/temperature) over
    j in the support of m^i (all tokens, or j <= i under the causal mask)."""
    support = range(i + 1) if causal else range(len(X))
    logits = [float(np.dot(Q @ X[i], K @ X[j])) / temperature for j in support]
    top = max(logits)
    weights = [math.exp(z - top) for z in logits]
    total = sum(weights)
    mean_y = sum((w / total) * X[j] for w, j in zip(weights, support))
    return O @ (V @ mean_y)


def forward_loop(X0, params, c, temperature, causal):
    """x_{r+1}^i = x_r^i + sum_h c[r, h] gamma(x_r^i, m_r^i, theta_{r,h}); returns x_0..x_L."""
    states = [np.array(X0, dtype=float)]
    n_layers, n_heads = params["Q"].shape[:2]
    for r in range(n_layers):
        X = states[-1]
        new = X.copy()
        for i in range(len(X)):
            for h in range(n_heads):
                new[i] += c[r][h] * gamma_loop(X, i, params["Q"][r, h], params["K"][r, h],
                                               params["V"][r, h], params["O"][r, h], temperature, causal)
        states.append(new)
    return np.stack(states)


def hat_interpolate(node_values, t):
    """theta(t) on uniform nodes t_n = n/(n_nodes-1), linear in between (np.interp per entry)."""
    n = node_values.shape[0]
    if n == 1:
        return node_values[0]
    grid = np.linspace(0.0, 1.0, n)
    flat = node_values.reshape(n, -1)
    return np.array([np.interp(t, grid, flat[:, k]) for k in range(flat.shape[1])]).reshape(
        node_values.shape[1:])


def limit_field_loop(X, t, law_params, weights, temperature, causal):
    """Gamma(x^i, mu^i, nu_t) = sum_a w_a gamma(x^i, mu^i, theta_a(t))."""
    out = np.zeros_like(X)
    for a, w in enumerate(weights):
        th = {k: hat_interpolate(v[:, a], t) for k, v in law_params.items()}
        for i in range(len(X)):
            out[i] += w * gamma_loop(X, i, th["Q"], th["K"], th["V"], th["O"], temperature, causal)
    return out


def rk4_loop(X0, field, steps):
    """Classical RK4 for dX/dt = field(t, X) on the uniform grid t_s = s/steps of [0, 1]."""
    X, h = np.array(X0, dtype=float), 1.0 / steps
    for s in range(steps):
        t = s * h
        k1 = field(t, X)
        k2 = field(t + h / 2, X + h / 2 * k1)
        k3 = field(t + h / 2, X + h / 2 * k2)
        k4 = field(t + h, X + h * k3)
        X = X + h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
    return X


def adamw_loop(theta0, grads, lr, beta1, beta2, eps, weight_decay):
    """torch.optim.AdamW's algorithm box, one scalar at a time (lr: k -> eta_k)."""
    theta = [float(x) for x in theta0]
    m, v = [0.0] * len(theta), [0.0] * len(theta)
    for k, g in enumerate(grads, start=1):
        eta = lr(k)
        for i, gi in enumerate(g):
            theta[i] = theta[i] - eta * weight_decay * theta[i]
            m[i] = beta1 * m[i] + (1 - beta1) * gi
            v[i] = beta2 * v[i] + (1 - beta2) * gi * gi
            m_hat, v_hat = m[i] / (1 - beta1**k), v[i] / (1 - beta2**k)
            theta[i] = theta[i] - eta * m_hat / (math.sqrt(v_hat) + eps)
    return np.array(theta)


def blockwise_adamw_loop(theta0, grads, blocks, lr, beta1, beta2, eps, weight_decay, normalize):
    """Blockwise AdamW: one scalar v per block B (a list of flat indices),
    v^B = beta2 v^B + (1 - beta2) sum_{i in B} g_i^2  (divided by |B| for normalize="mean")."""
    theta = [float(x) for x in theta0]
    m = [0.0] * len(theta)
    vb = [0.0] * len(blocks)
    for k, g in enumerate(grads, start=1):
        eta = lr(k)
        for b, block in enumerate(blocks):
            sq = sum(g[i] * g[i] for i in block)
            if normalize == "mean":
                sq /= len(block)
            vb[b] = beta2 * vb[b] + (1 - beta2) * sq
            v_hat = vb[b] / (1 - beta2**k)
            for i in block:
                theta[i] = theta[i] - eta * weight_decay * theta[i]
                m[i] = beta1 * m[i] + (1 - beta1) * g[i]
                theta[i] = theta[i] - eta * (m[i] / (1 - beta1**k)) / (math.sqrt(v_hat) + eps)
    return np.array(theta)


# ============================================================================================
# the discrete model


def _params(seed=0, gain=1.6):
    return init_params(L, H, D, DK, DV, seed=seed, gain=gain)


SCALINGS = [
    ("1/L, 1/H", inverse_depth, inverse_heads, lambda: [[1 / (L * H)] * H] * L),
    ("1/L, 1/sqrt(H)", inverse_depth, inverse_sqrt_heads, lambda: [[1 / (L * math.sqrt(H))] * H] * L),
    ("1, 1 (no scaling)", lambda n: 1.0, lambda n: 1.0, lambda: [[1.0] * H] * L),
]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("backend", ["numpy", "blas", "numba"])
@pytest.mark.parametrize("name,residual,head,c", SCALINGS, ids=[s[0] for s in SCALINGS])
def test_forward_matches_loop_transcription(name, residual, head, c, backend, causal):
    params, X0 = _params(), sample_tokens(N, D, domain="ball", radius=1.5, seed=3)
    model = AttentionTransformer(D, DK, DV, causal=causal, temperature=TEMPERATURE,
                                 residual_scale=residual, head_scale=head, backend=backend)
    expected = forward_loop(X0, params, c(), TEMPERATURE, causal)
    np.testing.assert_allclose(model.forward(X0, params).states, expected, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("causal", [False, True])
def test_head_weights_mode_matches_loop_transcription(causal):
    """Exact-expectation mode: c_{r,h} = residual_scale(L) * w_h, w of shape (H,) or (L, H)."""
    params, X0 = _params(1), sample_tokens(N, D, domain="cube", seed=4)
    model = AttentionTransformer(D, DK, DV, causal=causal, temperature=TEMPERATURE)
    w_h = np.array([0.25, 0.75])
    w_lh = np.array([[0.1, 0.9], [0.6, 0.4], [0.3, 0.7]])
    for w, c in ((w_h, [[x / L for x in w_h]] * L), (w_lh, (w_lh / L).tolist())):
        expected = forward_loop(X0, params, c, TEMPERATURE, causal)
        np.testing.assert_allclose(model.forward(X0, params, head_weights=w).states, expected,
                                   rtol=1e-12, atol=1e-13)


def _torch_forward(torch, X0, P, c, temperature, causal):
    """The same model in torch (vectorised per head; logits (N, N), row softmax, mask j <= i)."""
    X = X0
    n = X0.shape[0]
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool)) if causal else None
    for r in range(P["Q"].shape[0]):
        out = X
        for h in range(P["Q"].shape[1]):
            logits = (X @ P["Q"][r, h].T) @ (X @ P["K"][r, h].T).T / temperature
            if mask is not None:
                logits = logits.masked_fill(~mask, -math.inf)
            A = torch.softmax(logits, dim=1) @ X
            out = out + c[r][h] * (A @ P["V"][r, h].T @ P["O"][r, h].T)
        X = out
    return X


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("pooled", [False, True])
@pytest.mark.parametrize("backend", ["numpy", "blas", "numba"])
def test_adjoint_and_parameter_gradients_match_torch_autograd(backend, pooled, causal):
    """p_0 = dLoss/dx_0 and dLoss/dtheta_{r,h} of the adjoint recursion equal torch autograd of the
    transcribed forward pass (both losses of transformer_losses, transcribed from their formulas)."""
    torch = pytest.importorskip("torch")
    params, X0 = _params(2), sample_tokens(N, D, domain="sphere", seed=5)
    rng = np.random.default_rng(6)
    if pooled:
        w, y = rng.normal(size=D), 0.4
        loss = MeanPooledRegressionLoss(w, y)
        torch_loss = lambda XL: 0.5 * (XL.mean(0) @ torch.tensor(w) - y) ** 2  # noqa: E731
    else:
        targets = target_map(X0, seed=7)
        loss = SquaredErrorLoss(targets)
        torch_loss = lambda XL: 0.5 * ((XL - torch.tensor(targets)) ** 2).sum(1).mean()  # noqa: E731
    model = AttentionTransformer(D, DK, DV, causal=causal, temperature=TEMPERATURE, backend=backend,
                                 head_scale=inverse_sqrt_heads)
    value, grads, _, adj = model.loss_and_grad(X0, params, loss)
    tX = torch.tensor(X0, requires_grad=True)
    tP = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    c = [[1 / (L * math.sqrt(H))] * H] * L
    t_value = torch_loss(_torch_forward(torch, tX, tP, c, TEMPERATURE, causal))
    t_value.backward()
    assert value == pytest.approx(t_value.item(), rel=1e-12)
    np.testing.assert_allclose(adj.p[0], tX.grad.numpy(), rtol=1e-9, atol=1e-12)
    for k in params:
        np.testing.assert_allclose(grads[k], tP[k].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=k)


def test_torch_transcription_agrees_with_loop_transcription():
    """The two transcriptions (loops, vectorised torch) agree, so neither is the code's mirror."""
    torch = pytest.importorskip("torch")
    params, X0 = _params(3), sample_tokens(N, D, seed=8)
    c = [[0.2, 0.5], [0.3, 0.1], [0.7, 0.05]]
    for causal in (False, True):
        t = _torch_forward(torch, torch.tensor(X0), {k: torch.tensor(v) for k, v in params.items()}, c,
                           TEMPERATURE, causal)
        np.testing.assert_allclose(t.numpy(), forward_loop(X0, params, c, TEMPERATURE, causal)[-1],
                                   rtol=1e-13, atol=1e-14)


# ============================================================================================
# the mean-field limit: depth-time grid, law of the heads, RK4


def _law(seed=0):
    """3 nodes (t = 0, 1/2, 1), 2 atoms with unequal weights."""
    return HeadLaw.random(3, 2, D, DK, DV, seed=seed, gain=1.5, weights=[0.3, 0.7])


def test_head_law_interpolation_is_piecewise_linear_on_uniform_nodes():
    law = _law()
    for t in (0.0, 0.1, 0.25, 0.5, 0.6, 0.999, 1.0):
        got = law.at(t)
        for k, v in law.params.items():
            for a in range(2):
                np.testing.assert_allclose(got[k][a], hat_interpolate(v[:, a], t), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("causal", [False, True])
def test_exact_discretisation_uses_left_endpoints_r_over_L(causal):
    """Layer r of the exact-heads network uses theta_a(r/L) with head weights w_a and residual 1/L:
    x_{r+1} = x_r + (1/L) sum_a w_a gamma(x_r, theta_a(r/L)) — the explicit Euler step of the limit."""
    law, X0 = _law(1), sample_tokens(N, D, seed=9)
    n_layers = 5  # r/L falls strictly inside the node intervals
    params, w = law.discretise(n_layers, mode="exact")
    model = AttentionTransformer(D, DK, DV, causal=causal)
    got = model.output(X0, params, head_weights=w)
    X = np.array(X0)
    for r in range(n_layers):
        X = X + limit_field_loop(X, r / n_layers, law.params, law.weights, 1.0, causal) / n_layers
    np.testing.assert_allclose(got, X, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("causal", [False, True])
def test_mean_field_rk4_matches_transcription(causal):
    """RK4 on the uniform grid of [0, 1] with the interpolated law (steps = 6: stages at t = k/12
    straddle the node t = 1/2), temperature != 1."""
    law, X0 = _law(2), sample_tokens(N, D, domain="ball", radius=1.3, seed=10)
    mf = MeanFieldLimit(D, DK, DV, causal=causal, temperature=TEMPERATURE, backend="numpy")
    got = mf.forward(X0, law, 6)
    field = lambda t, X: limit_field_loop(X, t, law.params, law.weights, TEMPERATURE, causal)  # noqa: E731
    np.testing.assert_allclose(got.final, rk4_loop(X0, field, 6), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got.trajectory[0], X0, rtol=0, atol=0)
    np.testing.assert_allclose(mf.field(law, 0.3, X0), field(0.3, X0), rtol=1e-12, atol=1e-13)


def test_node_gradients_match_torch_autograd_through_the_interpolation():
    """dLoss/dtheta_{n,a} of the exact-heads network = autograd of the loss as a function of the node
    parameters (layer-r heads theta_a(r/L) = sum_n phi_n(r/L) theta_{n,a}, hat weights from np.interp)."""
    torch = pytest.importorskip("torch")
    law, X0 = _law(3), sample_tokens(N, D, seed=11)
    targets = target_map(X0, seed=12)
    n_layers = 4
    model = AttentionTransformer(D, DK, DV, backend="numpy")
    _, node_grads, _ = discrete_node_loss_and_grad(model, X0, law, SquaredErrorLoss(targets), n_layers)
    nodes = np.linspace(0, 1, law.n_nodes)
    phi = np.array([[np.interp(r / n_layers, nodes, np.eye(law.n_nodes)[n]) for n in range(law.n_nodes)]
                    for r in range(n_layers)])  # (L, n_nodes)
    tN = {k: torch.tensor(v, requires_grad=True) for k, v in law.params.items()}
    layer = {k: torch.einsum("rn,na...->ra...", torch.tensor(phi), v) for k, v in tN.items()}
    c = [[w / n_layers for w in law.weights]] * n_layers
    XL = _torch_forward(torch, torch.tensor(X0), layer, c, 1.0, False)
    (0.5 * ((XL - torch.tensor(targets)) ** 2).sum(1).mean()).backward()
    for k in law.params:
        np.testing.assert_allclose(node_grads[k], tN[k].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=k)


def test_iid_discretisation_draws_atoms_with_the_law_weights():
    """iid mode: every head is one of the atoms at t = r/L; atom frequencies match w (binomial,
    |z| < 5: false-failure rate < 1e-6 for this fixed seed-independent criterion)."""
    law = HeadLaw.random(2, 3, D, DK, DV, seed=4, weights=[0.2, 0.3, 0.5])
    n_layers, n_heads = 3, 3000
    params, w = law.discretise(n_layers, n_heads, mode="iid", seed=13)
    assert w is None
    counts = np.zeros(3)
    for r in range(n_layers):
        atoms = law.at(r / n_layers)["Q"]  # (A, d_k, d)
        dist = np.abs(params["Q"][r][:, None] - atoms[None]).max(axis=(2, 3))  # (H, A)
        assert np.all(dist.min(axis=1) == 0.0)
        counts += np.bincount(dist.argmin(axis=1), minlength=3)
    total = n_layers * n_heads
    z = (counts - total * law.weights) / np.sqrt(total * law.weights * (1 - law.weights))
    assert np.all(np.abs(z) < 5), z


# ============================================================================================
# AdamW and Blockwise AdamW


def _gradients(rng, sizes, steps):
    """Random gradients with varied scales and signs (and an exact zero) per step."""
    out = []
    for _ in range(steps):
        g = rng.normal(size=sum(sizes)) * rng.choice([1e-3, 1.0, 30.0], size=sum(sizes))
        g[0] = 0.0
        out.append(g)
    return out


def _schedule(k):
    return 0.05 / math.sqrt(k) + 0.01 * (k % 2)  # non-constant, not monotone


@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.5, 0.8), (0.0, 0.3)])
def test_adamw_matches_algorithm_box_transcription(betas):
    rng = np.random.default_rng(20)
    shapes = {"W": (2, 3, 4), "b": (5,), "S": (3, 2)}
    theta0 = {k: rng.normal(size=s) for k, s in shapes.items()}
    flat0 = np.concatenate([v.ravel() for v in theta0.values()])
    grads = _gradients(rng, [int(np.prod(s)) for s in shapes.values()], 7)
    opt = AdamW(theta0, lr=_schedule, betas=betas, eps=1e-3, weight_decay=0.3)
    splits = np.cumsum([int(np.prod(s)) for s in shapes.values()])[:-1]
    for g in grads:
        parts = np.split(g, splits)
        out = opt.step({k: p.reshape(s) for (k, s), p in zip(shapes.items(), parts)})
    got = np.concatenate([out[k].ravel() for k in shapes])
    expected = adamw_loop(flat0, grads, _schedule, *betas, 1e-3, 0.3)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


def _blocks_of(shapes, block_axes):
    """Flat index lists of every block: the entries sharing their indices on the enumerating axes."""
    blocks, offset = [], 0
    for name, shape in shapes.items():
        idx = np.arange(int(np.prod(shape))).reshape(shape) + offset
        spec = block_axes.get(name)
        enum = () if spec is None else (tuple(range(spec)) if isinstance(spec, int) else tuple(spec))
        groups: dict = {}
        for pos in np.ndindex(*shape):
            groups.setdefault(tuple(pos[a] for a in enum), []).append(int(idx[pos]))
        blocks += list(groups.values())
        offset += idx.size
    return blocks


@pytest.mark.parametrize("normalize", ["sum", "mean"])
@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.5, 0.8)])
def test_blockwise_adamw_matches_transcription_with_blocks_of_different_sizes(normalize, betas):
    """Blocks: W (2, 3, 4) with block_axes=1 -> 2 blocks of 12; b (5,) one block of 5; S (3, 2) with
    block_axes=(1,) -> 2 column blocks of 3: four different sizes, so "mean" != "sum"."""
    rng = np.random.default_rng(21)
    shapes = {"W": (2, 3, 4), "b": (5,), "S": (3, 2)}
    block_axes = {"W": 1, "S": (1,)}
    blocks = _blocks_of(shapes, block_axes)
    assert sorted(len(b) for b in blocks) == [3, 3, 5, 12, 12]
    theta0 = {k: rng.normal(size=s) for k, s in shapes.items()}
    flat0 = np.concatenate([v.ravel() for v in theta0.values()])
    grads = _gradients(rng, [int(np.prod(s)) for s in shapes.values()], 7)
    opt = BlockwiseAdamW(theta0, lr=_schedule, betas=betas, eps=1e-3, weight_decay=0.3,
                         block_axes=block_axes, normalize=normalize)
    splits = np.cumsum([int(np.prod(s)) for s in shapes.values()])[:-1]
    for g in grads:
        out = opt.step({k: p.reshape(s) for (k, s), p in zip(shapes.items(), np.split(g, splits))})
    got = np.concatenate([out[k].ravel() for k in shapes])
    expected = blockwise_adamw_loop(flat0, grads, blocks, _schedule, *betas, 1e-3, 0.3, normalize)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    other = blockwise_adamw_loop(flat0, grads, blocks, _schedule, *betas, 1e-3, 0.3,
                                 "sum" if normalize == "mean" else "mean")
    assert np.max(np.abs(other - expected)) > 1e-3  # the setting tells the normalisations apart


def test_blockwise_stacked_heads_match_transcription():
    """block_axes=2 on an (L, H, d_k, d) array: one block per head (l, h)."""
    rng = np.random.default_rng(22)
    shape = (2, 3, 2, 4)
    theta0 = rng.normal(size=shape)
    blocks = _blocks_of({"Q": shape}, {"Q": 2})
    assert len(blocks) == 6 and all(len(b) == 8 for b in blocks)
    grads = _gradients(rng, [theta0.size], 5)
    for normalize in ("sum", "mean"):
        opt = BlockwiseAdamW([theta0], lr=0.02, betas=(0.8, 0.9), eps=1e-4, weight_decay=0.5,
                             block_axes=2, normalize=normalize)
        for g in grads:
            (out,) = opt.step([g.reshape(shape)])
        expected = blockwise_adamw_loop(theta0.ravel(), grads, blocks, lambda k: 0.02, 0.8, 0.9, 1e-4,
                                        0.5, normalize)
        np.testing.assert_allclose(out.ravel(), expected, rtol=1e-12, atol=1e-15)


def test_adamw_matches_torch_adamw():
    """torch.optim.AdamW (single-tensor path, float64) on several tensors, 12 steps, non-default
    hyperparameters; agreement to a few ulps (the docstring promises op-by-op equality)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(23)
    shapes = [(3, 4), (5,), (2, 2, 2)]
    theta0 = [rng.normal(size=s) for s in shapes]
    tparams = [torch.tensor(t, requires_grad=True) for t in theta0]
    topt = torch.optim.AdamW(tparams, lr=0.03, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.2,
                             foreach=False)
    opt = AdamW(theta0, lr=0.03, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.2)
    for _ in range(12):
        grads = [rng.normal(size=s) * rng.choice([1e-2, 1.0, 10.0]) for s in shapes]
        for p, g in zip(tparams, grads):
            p.grad = torch.tensor(g)
        topt.step()
        out = opt.step(grads)
    for mine, theirs in zip(out, tparams):
        np.testing.assert_allclose(mine, theirs.detach().numpy(), rtol=1e-14, atol=1e-16)
