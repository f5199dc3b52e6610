"""Paper A's discrete attention-only transformer: a head is the 4-tuple theta = (Q, K, V, O) and
nothing else (module docstring; Gibson-Reisinger 2026), so a parameter set missing one of the four
matrices, or carrying an extra one, is bad input and must be rejected with a ValueError naming
``params`` (the conventions' API error), never silently used or left to a KeyError."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params

D, DK, DV = 3, 2, 4


@pytest.mark.parametrize("change", ["missing O", "extra bias", "list"])
def test_params_must_be_exactly_the_four_head_matrices(change):
    model = AttentionTransformer(D, DK, DV, backend="numpy")
    params = init_params(2, 3, D, DK, DV, seed=0)
    X0 = np.random.default_rng(1).normal(size=(4, D))
    model.forward(X0, params)  # the well-formed set is accepted
    if change == "missing O":
        bad = {k: v for k, v in params.items() if k != "O"}
    elif change == "extra bias":
        bad = dict(params, b=np.zeros((2, 3, D)))
    else:
        bad = [params[k] for k in ("Q", "K", "V", "O")]
    with pytest.raises(ValueError, match="params must be a dict with keys"):
        model.check_params(bad)
    with pytest.raises(ValueError, match="params"):
        model.forward(X0, bad)
