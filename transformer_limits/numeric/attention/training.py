"""``adamw-box`` experiment support: train the paper-A discrete model with AdamW or Blockwise AdamW
and record per-head parameter radii, so the verify layer can check ``box_holds`` (every head stays in
S(R_theta) = {||Q||, ||K||, ||V||, ||O|| <= R_theta}, docs/theory.md §A.4) and ``blockwise_dimension_free``
(the blockwise drift ||theta_k - theta_0|| per head does not grow with d).

Radii per step k = 0..K, matrix in {Q, K, V, O}, layer r and head h: operator norm (largest singular
value), Frobenius norm, and the same norms of the drift theta_k - theta_0.  Gradients are the exact
adjoint gradients of :class:`transformer_limits.numeric.attention.transformer.AttentionTransformer`
(shape (L, H, ...) stacks: BlockwiseAdamW uses ``block_axes=2``, one block per head matrix).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from transformer_limits.numeric.optim.adamw import AdamW, BlockwiseAdamW
from transformer_limits.numeric.attention.transformer import PARAM_NAMES, AttentionTransformer

__all__ = ["HeadRadii", "head_radii", "train_with_radii"]


@dataclass
class HeadRadii:
    """``operator[name]``, ``frobenius[name]``, ``drift_operator[name]``, ``drift_frobenius[name]``:
    arrays (K+1, L, H); ``losses`` (K+1,) (the loss before step k, and after the last step)."""

    losses: np.ndarray
    operator: dict[str, np.ndarray] = field(default_factory=dict)
    frobenius: dict[str, np.ndarray] = field(default_factory=dict)
    drift_operator: dict[str, np.ndarray] = field(default_factory=dict)
    drift_frobenius: dict[str, np.ndarray] = field(default_factory=dict)

    def max_radius(self, norm: str = "operator") -> np.ndarray:
        """max over heads and matrices of the chosen norm, per step: (K+1,)."""
        table = self.operator if norm == "operator" else self.frobenius
        return np.max(np.stack([v.reshape(v.shape[0], -1).max(axis=1) for v in table.values()]), axis=0)

    def to_dict(self) -> dict[str, Any]:
        return {"losses": self.losses.tolist(),
                **{f"{kind}_{k}": v.tolist() for kind in ("operator", "frobenius", "drift_operator",
                                                          "drift_frobenius")
                   for k, v in getattr(self, kind).items()}}


def head_radii(params: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(operator norms, Frobenius norms) of every head matrix, each (L, H)."""
    op = {k: np.linalg.norm(params[k], ord=2, axis=(-2, -1)) for k in PARAM_NAMES}
    fro = {k: np.linalg.norm(params[k], axis=(-2, -1)) for k in PARAM_NAMES}
    return op, fro


def train_with_radii(model: AttentionTransformer, X0: Any, params: dict[str, np.ndarray], loss: Any,
                     steps: int, *, optimizer: str = "adamw", lr: Any = 1e-2, betas=(0.9, 0.999),
                     eps: float = 1e-8, weight_decay: float = 1e-2, normalize: str = "sum",
                     head_weights: Any = None) -> HeadRadii:
    """K steps of AdamW (``optimizer="adamw"``) or BlockwiseAdamW (``"blockwise"``, one block per
    head matrix) on the model's exact gradients; records radii before every step and at the end."""
    if optimizer == "adamw":
        opt = AdamW(params, lr, betas, eps, weight_decay)
    elif optimizer == "blockwise":
        opt = BlockwiseAdamW(params, lr, betas, eps, weight_decay, block_axes=2, normalize=normalize)
    else:
        raise ValueError(f"optimizer must be 'adamw' or 'blockwise', got {optimizer!r}")
    if not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    theta0 = {k: np.array(v, dtype=np.float64) for k, v in params.items()}
    current = opt.params
    losses, records = [], []
    for k in range(steps + 1):
        assert isinstance(current, dict)  # params is a dict, so the optimizer hands back dicts
        op, fro = head_radii(current)
        dop, dfro = head_radii({n: current[n] - theta0[n] for n in PARAM_NAMES})
        records.append((op, fro, dop, dfro))
        value, grads, _, _ = model.loss_and_grad(X0, current, loss, head_weights)
        losses.append(value)
        if k < steps:
            current = opt.step(grads)
    out = HeadRadii(np.array(losses))
    for idx, kind in enumerate(("operator", "frobenius", "drift_operator", "drift_frobenius")):
        getattr(out, kind).update({n: np.stack([rec[idx][n] for rec in records]) for n in PARAM_NAMES})
    return out
