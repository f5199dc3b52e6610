"""AdamW / Blockwise AdamW defaults, block specifications and the mean-normalised box, from the
definitions (Loshchilov & Hutter 2019, Alg. 2, with torch.optim.AdamW's bias corrections and
defaults lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, as published in the PyTorch
documentation, https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_limits.numeric.optim.adamw import AdamW, BlockwiseAdamW, adamw_box_radius_path, adamw_update_bound

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
