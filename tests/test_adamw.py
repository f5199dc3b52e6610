"""AdamW / Blockwise AdamW (torch semantics) and the deterministic box bounds of docs/theory.md §A.4."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from transformer_limits.numeric.optim.adamw import (
    AdamW,
    BlockwiseAdamW,
    adamw_box_radius,
    adamw_box_radius_path,
    adamw_update_bound,
    adamw_update_bound_sup,
)
from transformer_limits.testing import strategies as tls
from transformer_limits.numeric.optim.adamw import AdamW, BlockwiseAdamW, adamw_box_radius_path, adamw_update_bound

BETAS = list(tls.ADAMW_BETAS)  # (0.9, 0.999), (0.9, 0.95), (0.0, 0.5), (0.5, 0.9), (0.99, 0.9999), (0.95, 0.9)
RTOL = 1e-12  # float rounding allowance on bounds that hold exactly in real arithmetic


def _run(opt, grads_seq):
    """Parameters after each step: list over k = 0..K of lists of arrays (copies)."""
    path = [[p.copy() for p in opt._params]]
    for grads in grads_seq:
        opt.step(grads)
        path.append([p.copy() for p in opt._params])
    return path


# --------------------------------------------------------------------------------------------
# (a) adversarial gradients never leave the derived box

@st.composite
def _adversarial(draw, shape):
    steps = draw(st.integers(1, 20))
    # |g| in [1e-31, 1e30] or exactly 0 (sparse entries and whole zero steps), any sign pattern.
    # (Far smaller |g| make g*g underflow to 0 while m does not: float64 then breaks the bound
    # when eps is tiny too, in torch as here; see docs/adamw.md.)
    mantissa = draw(hnp.arrays(np.float64, (steps,) + shape, elements=st.floats(0.1, 1.0)))
    sign = draw(hnp.arrays(np.int64, (steps,) + shape, elements=st.sampled_from([-1, 0, 1])))
    exponent = draw(hnp.arrays(np.int64, (steps,) + shape, elements=st.integers(-30, 30)))
    zero_steps = draw(st.lists(st.booleans(), min_size=steps, max_size=steps))
    grads = sign * mantissa * 10.0 ** exponent
    grads[np.array(zero_steps)] = 0.0
    theta0 = draw(hnp.arrays(np.float64, shape, elements=st.floats(-2, 2, width=64)))
    # lr in [1e-4, 1], weight_decay in {0, 1e-2, 0.3, 1, 5} clipped to 1/lr, eps in {1e-8, 1e-300, 0.1}
    hp = draw(tls.adamw_hyperparameters(betas=BETAS))
    return theta0, grads, hp["betas"], hp["lr"], hp["weight_decay"], hp["eps"]


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(_adversarial((6,)))
def test_coordinatewise_box_holds_for_adversarial_gradients(case):
    theta0, grads, betas, lr, wd, eps = case
    opt = AdamW({"w": theta0}, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    path = np.array([p[0] for p in _run(opt, [{"w": g} for g in grads])])
    assert np.all(np.isfinite(path))
    steps = len(grads)
    c = adamw_update_bound(*betas, np.arange(1, steps + 1))
    step = np.abs(path[1:] - (1 - lr * wd) * path[:-1])  # the Adam part of each step
    assert np.all(step <= lr * c[:, None] * (1 + RTOL) + RTOL * np.abs(path[:-1]))
    radius = adamw_box_radius_path(np.abs(theta0), lr, wd, *betas, steps)  # per-coordinate box
    assert np.all(np.abs(path) <= radius * (1 + RTOL) + 1e-300)
    drift = adamw_box_radius_path(np.abs(theta0), lr, wd, *betas, steps, drift=True)
    assert np.all(np.abs(path - theta0) <= drift * (1 + RTOL) + RTOL * np.abs(theta0))
    if wd > 0 and betas[0] < math.sqrt(betas[1]):
        bound = adamw_box_radius(np.max(np.abs(theta0)), lr, wd, *betas)  # max(R0, C/λ)
        assert np.max(np.abs(path)) <= bound * (1 + RTOL)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(_adversarial((2, 3, 4)), st.sampled_from([0, 1, 2, (0, 2)]))
def test_blockwise_frobenius_box_holds_for_adversarial_gradients(case, block_axes):
    theta0, grads, betas, lr, wd, eps = case
    opt = BlockwiseAdamW({"qkv": theta0}, lr=lr, betas=betas, eps=eps, weight_decay=wd,
                         block_axes=block_axes)
    path = _run(opt, [{"qkv": g} for g in grads])
    norms = np.array([opt.block_norms({"qkv": p[0]})[0] for p in path])  # (K+1,) + v shape
    moves = np.array([opt.block_norms({"qkv": b[0] - (1 - lr * wd) * a[0]})[0]
                      for a, b in zip(path, path[1:])])
    drifts = np.array([opt.block_norms({"qkv": p[0] - theta0})[0] for p in path])
    steps = len(grads)
    c = adamw_update_bound(*betas, np.arange(1, steps + 1)).reshape((-1,) + (1,) * 3)
    assert np.all(moves <= lr * c * (1 + RTOL) + RTOL * norms[:-1])
    r0 = norms[0]
    radius = adamw_box_radius_path(r0, lr, wd, *betas, steps, norm="blockwise")
    assert np.all(norms <= radius * (1 + RTOL) + 1e-300)
    drift = adamw_box_radius_path(r0, lr, wd, *betas, steps, norm="blockwise", drift=True)
    assert np.all(drifts <= drift * (1 + RTOL) + RTOL * r0)


# --------------------------------------------------------------------------------------------
# (b) scale invariance with eps = 0 (docs/theory.md §A.2: raw gradients carry 1/(LH))

def _gradients(rng, steps, shapes):
    return [{name: rng.standard_normal(shape) for name, shape in shapes.items()} for _ in range(steps)]


SHAPES = {"Q": (3, 4), "K": (3, 4), "V": (2, 4), "O": (4, 2)}


@pytest.mark.parametrize("optimizer", [AdamW, BlockwiseAdamW])
def test_eps0_trajectory_is_invariant_to_gradient_rescaling(optimizer):
    rng = np.random.default_rng(0)
    theta0 = {n: rng.standard_normal(s) for n, s in SHAPES.items()}
    grads = _gradients(rng, 40, SHAPES)
    schedule = lambda k: 1e-2 / math.sqrt(k)  # noqa: E731

    def trajectory(scale, eps=0.0):
        opt = optimizer(theta0, lr=schedule, betas=(0.9, 0.95), eps=eps, weight_decay=0.1)
        scaled = [{n: scale * g for n, g in step.items()} for step in grads]
        return np.concatenate([np.concatenate([p.ravel() for p in ps]) for ps in _run(opt, scaled)])

    reference = trajectory(1.0)
    for power_of_two in (2.0**-40, 2.0**-7, 2.0**30):  # exact in binary: bitwise identical
        np.testing.assert_array_equal(trajectory(power_of_two), reference)
    for L, H in [(12, 8), (3, 7), (1000, 96)]:
        np.testing.assert_allclose(trajectory(1.0 / (L * H)), reference, rtol=0, atol=1e-13)
    for scale in (1e-30, 3.7, 1e30):
        np.testing.assert_allclose(trajectory(scale), reference, rtol=0, atol=1e-13)
    # with eps > 0 the invariance fails for small gradients: eps must scale like 1/(LH) too
    assert np.max(np.abs(trajectory(1e-9, eps=1e-8) - reference)) > 1e-3


# --------------------------------------------------------------------------------------------
# (d) two steps unrolled by hand in 50-digit arithmetic

def _two_steps_by_hand(theta0, g1, g2, lr, b1, b2, eps, wd, blockwise):
    """θ_k = θ_{k-1} − η(m̂_k/(√v̂_k + ε) + λθ_{k-1}) written out for k = 1, 2 (docs/theory.md §A.4)."""
    mp = mpmath.mpf
    with mpmath.workdps(50):
        th = [mp(x) for x in theta0]
        g1, g2 = [mp(x) for x in g1], [mp(x) for x in g2]
        b1, b2, lr, eps, wd = mp(b1), mp(b2), mp(lr), mp(eps), mp(wd)
        if blockwise:
            sq1, sq2 = [sum(x * x for x in g1)] * len(th), [sum(x * x for x in g2)] * len(th)
        else:
            sq1, sq2 = [x * x for x in g1], [x * x for x in g2]
        out = []
        for i in range(len(th)):
            m1, v1 = (1 - b1) * g1[i], (1 - b2) * sq1[i]
            t1 = th[i] - lr * (m1 / (1 - b1) / (mpmath.sqrt(v1 / (1 - b2)) + eps) + wd * th[i])
            m2, v2 = b1 * m1 + (1 - b1) * g2[i], b2 * v1 + (1 - b2) * sq2[i]
            t2 = t1 - lr * (m2 / (1 - b1**2) / (mpmath.sqrt(v2 / (1 - b2**2)) + eps) + wd * t1)
            out.append(float(t2))
        return np.array(out)


@pytest.mark.parametrize("optimizer,blockwise", [(AdamW, False), (BlockwiseAdamW, True)])
@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.3, 0.6), (0.0, 0.5)])
def test_matches_hand_unrolled_two_steps(optimizer, blockwise, betas):
    theta0, g1, g2 = [0.5, -1.25, 2.0], [0.3, -4.0, 1e-3], [-0.7, 2.5, 1e-6]
    lr, eps, wd = 0.05, 1e-3, 0.2
    opt = optimizer([np.array(theta0)], lr=lr, betas=betas, eps=eps, weight_decay=wd)
    opt.step([np.array(g1)])
    (theta2,) = opt.step([np.array(g2)])
    expected = _two_steps_by_hand(theta0, g1, g2, lr, *betas, eps, wd, blockwise)
    np.testing.assert_allclose(theta2, expected, rtol=1e-14, atol=0)


# --------------------------------------------------------------------------------------------
# (e) deliberately wrong optimizers fail checks that AdamW passes

def _wrong_adam(theta0, grads, lr, betas, eps, wd, *, bias_correction, coupled):
    """Adam with one known bug: no bias correction, or L2 decay coupled into the gradient."""
    theta, m, v = theta0.copy(), np.zeros_like(theta0), np.zeros_like(theta0)
    path = [theta.copy()]
    for k, g in enumerate(grads, start=1):
        g = g + wd * theta if coupled else g
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        mh, vh = (m / (1 - betas[0] ** k), v / (1 - betas[1] ** k)) if bias_correction else (m, v)
        theta = theta * (1 if coupled else 1 - lr * wd) - lr * mh / (np.sqrt(vh) + eps)
        path.append(theta.copy())
    return np.array(path)


def _first_step_is_lr(path, lr, wd):
    """ε = 0: AdamW's first Adam step moves every coordinate by exactly η (C_β(1) = 1)."""
    return np.allclose(np.abs(path[1] - (1 - lr * wd) * path[0]), lr, rtol=1e-14, atol=0)


def _inside_decay_box(path, lr, wd, betas):
    """‖θ_k‖_∞ ≤ R_k (decay-aware recursion) for all k."""
    radius = adamw_box_radius_path(np.max(np.abs(path[0])), lr, wd, *betas, len(path) - 1)
    return bool(np.all(np.max(np.abs(path), axis=1) <= radius * (1 + RTOL)))


def test_wrong_optimizers_fail_checks_adamw_passes():
    rng = np.random.default_rng(1)
    theta0 = rng.uniform(-0.5, 0.5, 8)
    lr, wd, betas = 0.05, 2.0, (0.5, 0.9)
    grads = [-1e30 * np.sign(theta0)] * 200  # huge, constant, pushing every coordinate outwards
    real = np.array([p[0] for p in _run(AdamW([theta0], lr, betas, 0.0, wd), [[g] for g in grads])])
    assert _first_step_is_lr(real, lr, wd) and _inside_decay_box(real, lr, wd, betas)
    no_bias = _wrong_adam(theta0, grads, lr, betas, 0.0, wd, bias_correction=False, coupled=False)
    coupled = _wrong_adam(theta0, grads, lr, betas, 0.0, wd, bias_correction=True, coupled=True)
    assert not _first_step_is_lr(no_bias, lr, wd)
    assert not _inside_decay_box(no_bias, lr, wd, betas)
    assert not _first_step_is_lr(coupled, lr, wd)
    assert not _inside_decay_box(coupled, lr, wd, betas)
    # the real trajectory approaches the fixed point 1/λ of |θ| ← (1-ηλ)|θ| + η (ratio 1 here),
    # inside max(R0, C_β/λ); coupled L2 drifts linearly (its decay is normalised away)
    assert abs(np.max(np.abs(real[-1])) - 1 / wd) < 1e-6
    assert np.max(np.abs(coupled[-1])) > 5 * adamw_box_radius(0.5, lr, wd, *betas)


# --------------------------------------------------------------------------------------------
# (f) blockwise drift is dimension-free, coordinatewise drift grows like sqrt(#entries)

def test_blockwise_drift_dimension_free_coordinatewise_grows_like_sqrt_entries():
    rng = np.random.default_rng(2)
    dims, steps, lr, betas = [2, 4, 8, 16, 32], 30, 1e-2, (0.9, 0.95)
    scales = 10.0 ** rng.uniform(-3, 3, steps)  # adversarial scale swings, fixed sign pattern
    c = adamw_update_bound(*betas, np.arange(1, steps + 1))
    drift = {"coordinatewise": [], "blockwise": [], "coordinatewise_op": []}
    for d in dims:
        signs = np.outer(rng.choice([-1.0, 1.0], d), rng.choice([-1.0, 1.0], d))  # rank one
        theta0 = rng.standard_normal((d, d)) / d
        grads = [[s * signs] for s in scales]
        coord = _run(AdamW([theta0], lr, betas, 0.0, 0.0), grads)
        block = _run(BlockwiseAdamW([theta0], lr, betas, 0.0, 0.0), grads)
        moves = [np.linalg.norm(b[0] - a[0]) for a, b in zip(block, block[1:])]
        assert np.all(np.array(moves) <= lr * c * (1 + RTOL))  # per step, any block size
        drift["coordinatewise"].append(np.linalg.norm(coord[-1][0] - theta0))
        drift["coordinatewise_op"].append(np.linalg.norm(coord[-1][0] - theta0, 2))
        drift["blockwise"].append(np.linalg.norm(block[-1][0] - theta0))
    log_n = np.log(np.square(dims))
    slope = {key: np.polyfit(log_n, np.log(val), 1)[0] for key, val in drift.items()}
    assert abs(slope["coordinatewise"] - 0.5) < 1e-6
    assert abs(slope["coordinatewise_op"] - 0.5) < 1e-6
    assert abs(slope["blockwise"]) < 1e-6
    assert max(drift["blockwise"]) <= lr * c.sum()


# --------------------------------------------------------------------------------------------
# structure, blocks and schedules

def test_per_head_blocks_in_stacked_array_equal_separate_arrays():
    rng = np.random.default_rng(3)
    L, H, dk, d = 2, 3, 4, 5
    stacked0 = rng.standard_normal((L, H, dk, d))
    grads = [rng.standard_normal((L, H, dk, d)) * 10.0 ** rng.uniform(-5, 5, (L, H, 1, 1))
             for _ in range(6)]
    kwargs = dict(lr=0.1, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05)
    stacked = BlockwiseAdamW({"Q": stacked0}, block_axes={"Q": 2}, **kwargs)
    via_tuple = BlockwiseAdamW({"Q": stacked0}, block_axes=(-4, 1), **kwargs)
    heads = {f"Q{l}{h}": stacked0[l, h] for l in range(L) for h in range(H)}
    separate = BlockwiseAdamW(heads, **kwargs)
    assert stacked.exp_avg_sq[0].shape == (L, H, 1, 1) and stacked.block_sizes == [dk * d]
    for g in grads:
        stacked.step({"Q": g})
        via_tuple.step({"Q": g})
        separate.step({f"Q{l}{h}": g[l, h] for l in range(L) for h in range(H)})
    for l in range(L):
        for h in range(H):
            np.testing.assert_array_equal(stacked.params["Q"][l, h], separate.params[f"Q{l}{h}"])
    np.testing.assert_array_equal(stacked.params["Q"], via_tuple.params["Q"])


def test_blockwise_on_single_entries_is_adamw_and_mean_matches_sum_with_rescaled_v():
    rng = np.random.default_rng(4)
    theta0 = rng.standard_normal((3, 4))
    grads = [[rng.standard_normal((3, 4))] for _ in range(5)]
    coord = _run(AdamW([theta0], 0.01, (0.9, 0.999), 1e-8, 0.01), grads)
    per_entry = _run(BlockwiseAdamW([theta0], 0.01, (0.9, 0.999), 1e-8, 0.01, block_axes=2), grads)
    np.testing.assert_allclose(per_entry[-1][0], coord[-1][0], rtol=1e-15, atol=1e-15)
    # mean normalisation = sum normalisation with the step scaled by sqrt(|B|) (eps = 0)
    mean = _run(BlockwiseAdamW([theta0], 0.01, (0.9, 0.999), 0.0, 0.0, normalize="mean"), grads)
    total = _run(BlockwiseAdamW([theta0], 0.01 * math.sqrt(12), (0.9, 0.999), 0.0, 0.0), grads)
    np.testing.assert_allclose(mean[-1][0], total[-1][0], rtol=1e-13)
    radius = adamw_box_radius(np.linalg.norm(theta0), 0.01, 0.0, 0.9, 0.999, 5, norm="blockwise",
                              normalize="mean", block_size=12)
    assert np.linalg.norm(mean[-1][0]) <= radius


def test_lr_schedule_callable_array_and_constant_agree():
    rng = np.random.default_rng(5)
    theta0, grads = rng.standard_normal(4), [[rng.standard_normal(4)] for _ in range(5)]
    etas = np.array([1e-3, 2e-3, 3e-3, 2e-3, 1e-3])
    from_array = _run(AdamW([theta0], etas), grads)
    from_callable = _run(AdamW([theta0], lambda k: etas[k - 1]), grads)
    np.testing.assert_array_equal(from_array[-1][0], from_callable[-1][0])
    constant = _run(AdamW([theta0], np.full(5, 1e-3)), grads)
    np.testing.assert_array_equal(constant[-1][0], _run(AdamW([theta0], 1e-3), grads)[-1][0])
    with pytest.raises(ValueError, match="lr schedule has 5 entries"):
        _run(AdamW([theta0], etas), grads + grads[:1])


def test_eps0_zero_gradient_gives_nan_like_torch_and_bad_input_raises():
    opt = AdamW({"w": np.ones(2)}, eps=0.0)
    with np.errstate(invalid="ignore"):
        assert np.all(np.isnan(opt.step({"w": np.zeros(2)})["w"]))
    with pytest.raises(ValueError, match="beta1"):
        AdamW([np.ones(2)], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="weight_decay"):
        AdamW([np.ones(2)], weight_decay=-1.0)
    with pytest.raises(ValueError, match="grads"):
        AdamW({"w": np.ones(2)}).step({"v": np.ones(2)})
    with pytest.raises(ValueError, match=r"grads\['w'\]"):
        AdamW({"w": np.ones(2)}).step({"w": np.ones(3)})
    with pytest.raises(ValueError, match="normalize"):
        BlockwiseAdamW([np.ones(2)], normalize="rms")
    with pytest.raises(ValueError, match="block_axes"):
        BlockwiseAdamW([np.ones((2, 2))], block_axes=3)
    with pytest.raises(ValueError, match="beta2"):
        adamw_update_bound(0.9, 0.0, 3)
    with pytest.raises(ValueError, match="k must"):
        adamw_update_bound(0.9, 0.99, 0)
    with pytest.raises(ValueError, match="block_size"):
        adamw_box_radius(1.0, 0.1, 0.1, 0.9, 0.99, 3, norm="blockwise", normalize="mean")
    with pytest.raises(ValueError, match="weight_decay"):
        adamw_box_radius(1.0, 0.1, 0.0)
    with pytest.raises(ValueError, match="lr"):
        adamw_box_radius(1.0, 0.5, 4.0)


# --------------------------------------------------------------------------------------------
# the bound functions

def test_update_bound_values_monotone_and_sharp_constant_attained():
    for b1, b2 in BETAS:
        ks = np.arange(1, 5001)
        c = adamw_update_bound(b1, b2, ks)
        assert c[0] == pytest.approx(1.0, rel=1e-15)
        assert np.all(np.diff(c[:50]) > 0) and np.all(np.diff(c) >= -1e-15 * c[1:])  # float plateau
        sup = adamw_update_bound_sup(b1, b2)
        assert sup == adamw_update_bound(b1, b2, math.inf)
        assert np.all(c <= sup * (1 + 1e-14))
        sharp = adamw_update_bound(b1, b2, ks, sharp=True)
        assert np.all(sharp <= c * (1 + 1e-14))
    # gradients g_{k-j} = (β1/β2)^j attain the sharp constant, run through AdamW itself (ε = 0)
    b1, b2, k = 0.9, 0.999, 12
    grads = [[np.array([(b1 / b2) ** (k - i)])] for i in range(1, k + 1)]
    path = _run(AdamW([np.zeros(1)], 1.0, (b1, b2), 0.0, 0.0), grads)
    assert abs(path[-1][0][0] - path[-2][0][0]) == pytest.approx(
        adamw_update_bound(b1, b2, k, sharp=True), rel=1e-13)


def test_box_radius_forms():
    b1, b2, lr, wd, r0, K = 0.9, 0.95, 1e-2, 0.1, 0.3, 500
    c = adamw_update_bound(b1, b2, np.arange(1, K + 1))
    no_decay = adamw_box_radius_path(r0, lr, 0.0, b1, b2, K)
    np.testing.assert_allclose(no_decay, r0 + lr * np.concatenate([[0.0], np.cumsum(c)]), rtol=1e-13)
    closed = (1 - lr * wd) ** K * r0 + lr * c[-1] * (1 - (1 - lr * wd) ** K) / (lr * wd)
    path = adamw_box_radius_path(r0, lr, wd, b1, b2, K)
    assert path[-1] <= closed * (1 + 1e-13)
    assert np.all(path <= adamw_box_radius(r0, lr, wd, b1, b2) * (1 + 1e-13))  # max(R0, C/λ)
    assert adamw_box_radius(r0, lr, wd, b1, b2) == max(r0, adamw_update_bound_sup(b1, b2) / wd)
    assert adamw_box_radius(r0, lr, wd, b1, b2, K) == path[-1]
    assert adamw_box_radius(1.0, 0.1, 0.5, 0.9, 0.7) == math.inf  # β1 > √β2: no uniform bound

# ------------------------------------------------------------------------------------------------
# Mutation-round tests (were tests/test_mutants_adamw.py): properties the mutation runs showed were not
# pinned down.
# ------------------------------------------------------------------------------------------------


TORCH_DEFAULTS = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2)


def _adamw_scalar_loop(theta0, grads, lr, beta1, beta2, eps, weight_decay):
    """The AdamW algorithm box, one scalar at a time (decoupled decay first, as torch)."""
    theta = [float(x) for x in theta0]
    m, v = [0.0] * len(theta), [0.0] * len(theta)
    for k, g in enumerate(grads, start=1):
        for i, gi in enumerate(g):
            theta[i] -= lr * weight_decay * theta[i]
            m[i] = beta1 * m[i] + (1 - beta1) * gi
            v[i] = beta2 * v[i] + (1 - beta2) * gi * gi
            theta[i] -= lr * (m[i] / (1 - beta1**k)) / (math.sqrt(v[i] / (1 - beta2**k)) + eps)
    return np.array(theta)


def test_default_hyperparameters_are_torch_adamw_defaults():
    """AdamW and Blockwise AdamW with one block per entry, built with *no* hyper-parameters, follow
    the AdamW recursion with torch's published defaults.  Gradients change scale from step to step
    (so β2 matters after step 1) and some are ~1e-8 (so ε matters); λθ_0 is visible next to η."""
    rng = np.random.default_rng(21)
    theta0 = rng.standard_normal(6) * 3.0
    grads = [rng.standard_normal(6) * scale for scale in (1.0, 1e-8, 5.0, 0.3, 2e-8, 1.0)]
    expected = _adamw_scalar_loop(theta0, grads, **TORCH_DEFAULTS)
    for opt in (AdamW([theta0]), BlockwiseAdamW([theta0], block_axes=1)):
        for g in grads:
            opt.step([g])
        np.testing.assert_allclose(opt.params[0], expected, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("spec", [-1, -2, 3])
def test_block_axes_count_outside_zero_to_ndim_is_rejected(spec):
    """An int n means "the first n axes enumerate blocks": only 0 <= n <= ndim is meaningful
    (a negative count would silently mean one block per array)."""
    with pytest.raises(ValueError, match="block_axes"):
        BlockwiseAdamW({"w": np.ones((2, 2))}, block_axes=spec)


def test_mean_normalisation_with_single_entry_blocks_equals_sum_normalisation():
    """|B| = 1: ‖g^B‖_F²/|B| = ‖g^B‖_F², so the mean-normalised box (factor √|B| = 1) is the sum
    box, R_k = |1 − ηλ| R_{k−1} + η C_β(k), written out here."""
    lr, lam, b1, b2, steps = 0.05, 0.5, 0.9, 0.99, 7
    mean = adamw_box_radius_path(2.0, lr, lam, b1, b2, steps, norm="blockwise", normalize="mean",
                                 block_size=1)
    radius, expected = 2.0, [2.0]
    for k in range(1, steps + 1):
        radius = abs(1 - lr * lam) * radius + lr * adamw_update_bound(b1, b2, k)
        expected.append(radius)
    np.testing.assert_allclose(mean, expected, rtol=1e-14)
    four = adamw_box_radius_path(0.0, lr, 0.0, b1, b2, steps, norm="blockwise", normalize="mean",
                                 block_size=4)  # √4 = 2 times the λ = 0 drift Σ η C_β(k)
    np.testing.assert_allclose(four[-1], 2 * lr * sum(adamw_update_bound(b1, b2, k) for k in range(1, 8)),
                               rtol=1e-14)
    for bad in (0, -3, None):
        with pytest.raises(ValueError, match="block_size"):
            adamw_box_radius_path(1.0, lr, lam, b1, b2, steps, norm="blockwise", normalize="mean",
                                  block_size=bad)
