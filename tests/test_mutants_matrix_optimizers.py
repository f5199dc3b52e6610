"""NorMuon's second-moment rate pinned from its definition (microsoft/dion ``normuon.py``).

``v ← β₂ v + (1−β₂) mean_cols(O ⊙ O)`` is an exponential moving average only for ``β₂ ∈ [0, 1)``:
a negative β₂ makes ``v`` alternate in sign (``√v`` undefined) and ``β₂ ≥ 1`` never forgets, so
both must be rejected naming ``beta2``; ``β₂ = 0`` is allowed and normalises every row of ``O`` by
its own RMS of the current step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_limits.numeric.optim.matrix_optimizers import NS_EPS_RUNS, NorMuon, newton_schulz


@pytest.mark.parametrize("beta2", [-0.5, -1e-12, 1.0, 1.5])
def test_normuon_second_moment_rate_outside_unit_interval_is_rejected(beta2):
    with pytest.raises(ValueError, match="beta2"):
        NorMuon(beta2=beta2)


def test_normuon_with_zero_rate_normalises_each_row_by_its_current_rms():
    """β₂ = 0: v_i = mean_j O_ij², Ô_ij = O_ij/(√v_i + ε), then ‖Ô‖_F is set to ‖O‖_F; so every
    row of the update has norm ‖O‖_F/√m (m rows), written here without the optimizer's code."""
    rng = np.random.default_rng(11)
    m, n = 6, 10
    G = rng.standard_normal((m, n)) * np.array([0.1, 1.0, 3.0, 0.5, 7.0, 2.0])[:, None]
    opt = NorMuon(momentum=0.0, beta2=0.0)  # μ = 0: U = G (sum form, Nesterov)
    W = np.zeros((m, n))
    opt.step(W, G)
    O = newton_schulz(G, "dion", NS_EPS_RUNS)
    rms = [math.sqrt(sum(O[i, j] ** 2 for j in range(n)) / n) for i in range(m)]
    O_hat = np.array([[O[i, j] / (rms[i] + 1e-8) for j in range(n)] for i in range(m)])
    O_hat *= np.linalg.norm(O) / np.linalg.norm(O_hat)
    np.testing.assert_allclose(opt.last_update, O_hat, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.linalg.norm(opt.last_update, axis=1),
                               np.linalg.norm(O) / math.sqrt(m), rtol=1e-6)
