"""PyTorch implementations of the matrix optimizers of docs/theory.md §C.8 and the authors' optimizer factory.

The update rules are those of the float64 NumPy references in
:mod:`transformer_limits.numeric.optim.matrix_optimizers` (same symbols, same defaults, same Dion ``Q_0``
draw), written as :class:`torch.optim.Optimizer` subclasses so that they can train a model; in
float64 they reproduce the references to rounding (``tests/test_torch_optimizers.py``).  Weights
use the ``Linear.weight`` layout ``W ∈ R^{fan_out × fan_in}``; decoupled weight decay
``W ← W(1 − ηλ) − η·scale·O`` everywhere.

* :class:`Muon` — ``M ← βM + (1−β)G``, ``U = (1−β)G + βM`` (``momentum_form="lerp"``, Jordan) or
  ``M ← μM + G``, ``U = μM + G`` (``"sum"``, microsoft/dion, the paper's runs); ``O = NS(U)`` with
  the original quintic ``(3.4445, −4.7750, 2.0315)×5`` or the 5-step dion schedule; scale rules
  ``"original"`` ``max(1, fan_out/fan_in)^{1/2}``, ``"spectral_norm"`` ``√(fan_out/fan_in)``,
  ``"rms_norm"`` ``0.2·√max(fan_out, fan_in)``, ``"none"``.
* :class:`NorMuon` — Muon's ``O``, per-row ``v ← β₂v + (1−β₂) mean_cols(O⊙O)``,
  ``Ô = O/(√v + ε)``, ``Ô ← Ô·‖O‖_F/‖Ô‖_F``.
* :class:`Dion` — larger dimension first (``m ≥ n``), rank ``k = ⌈r·n⌉``, ``Q_0 ~ N(0,1)`` drawn by
  ``numpy.random.default_rng(seed)`` (identical to the reference): ``M ← M + G``,
  ``P = QR(MQ)``, ``R = M^T P``, ``M ← M − (1−μ)PR^T``, ``Q ← R/(‖R_{:,j}‖ + ε)``, update
  ``PQ^T``; an all-zero or non-finite ``M`` gives ``P = 0``, ``R = Q`` (microsoft/dion
  ``fix_all_zero_or_nan``).  Plain Householder QR (``torch.linalg.qr``), not the runs'
  randomized Cholesky-QR.
* :class:`Lion` — ``U = sign(β₁M + (1−β₁)G)``, ``M ← β₂M + (1−β₂)G``.
* AdamW is :class:`torch.optim.AdamW`.

:func:`build_optimizer` is the factory of the authors' ``train/optimizer_factory.py``: the matrix
parameters of the transformer blocks get the named optimizer; embedding and ``lm_head`` get Lion
(``lr_embed = lr``, ``lr_head = lr/√d_model`` with the matrix rate ``lr``, no weight decay) — or
AdamW everywhere for the AdamW runs.  Every published constant is imported from
:mod:`transformer_limits.numeric.optim.matrix_optimizers` (one definition, one cited source).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Literal, Sequence

import numpy as np
import torch

from transformer_limits.numeric.optim.matrix_optimizers import (
    ADAMW_BETAS,
    ADAMW_LR,
    DION_EPS,
    LION_BETAS_RUNS,
    MUON_LR,
    MUON_MOMENTUM,
    NORMUON_BETA2,
    NORMUON_EPS,
    NS_EPS,
    NS_EPS_JORDAN,
    NS_EPS_RUNS,
    WEIGHT_DECAY,
    ScaleRule,
    _coefficients,
    muon_scale,
)

__all__ = [
    "newton_schulz",
    "Muon",
    "NorMuon",
    "Dion",
    "Lion",
    "OPTIMIZER_NAMES",
    "ADAMW_LR",
    "ADAMW_BETAS",
    "WEIGHT_DECAY",
    "OptimizerSpec",
    "optimizer_spec",
    "OptimizerBundle",
    "build_optimizer",
]


def newton_schulz(G: torch.Tensor, coefficients: str | Sequence[Sequence[float]] = "original",
                  eps: float = NS_EPS) -> torch.Tensor:
    """Newton–Schulz orthogonalisation of an ``m × n`` tensor in its own dtype (returns ``m × n``).

    ``X_0 = G/(‖G‖_F + eps)`` (transposed when ``m > n``), then ``A = XX^T``,
    ``X ← aX + (bA + cA²)X`` for each ``(a, b, c)`` — :func:`matrix_optimizers.newton_schulz`.
    """
    if G.ndim != 2 or G.numel() == 0:
        raise ValueError(f"G: expected a non-empty 2-D matrix, got shape {tuple(G.shape)}")
    coeffs = _coefficients(coefficients)
    transpose = G.shape[0] > G.shape[1]
    X = G.T if transpose else G
    X = X / (torch.linalg.matrix_norm(X) + eps)
    for a, b, c in coeffs:
        A = X @ X.T
        X = a * X + (b * A + c * (A @ A)) @ X
    return X.T if transpose else X


def _check_common(lr: float, weight_decay: float, momentum: float | None = None) -> None:
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr}")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be non-negative, got {weight_decay}")
    if momentum is not None and not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")


def _apply_update(p: torch.Tensor, update: torch.Tensor, lr: float, weight_decay: float, scale: float) -> None:
    """``W ← W(1 − ηλ) − η·scale·update`` in place."""
    if weight_decay:
        p.mul_(1.0 - lr * weight_decay)
    p.add_(update.to(p.dtype), alpha=-lr * scale)


def _matrix_grad(p: torch.Tensor) -> torch.Tensor:
    if p.ndim != 2:
        raise ValueError(f"param: expected a 2-D matrix, got shape {tuple(p.shape)} "
                         "(give vectors/embeddings to Lion or AdamW)")
    if p.grad is None:  # the step loops skip such parameters before calling this
        raise ValueError("param: has no gradient (run backward() first)")
    return p.grad


class Muon(torch.optim.Optimizer):
    """Muon (docs/theory.md §C.8); defaults as :class:`matrix_optimizers.Muon` (Jordan's reference).

    The paper's runs: ``momentum_form="sum", coefficients="dion", scale="spectral_norm",
    ns_eps=NS_EPS_RUNS``.  The direction before lr and scale is kept in ``state[p]["last_update"]``.
    """

    def __init__(self, params: Iterable[Any], lr: float = MUON_LR, momentum: float = MUON_MOMENTUM,
                 weight_decay: float = 0.0, *, nesterov: bool = True,
                 momentum_form: Literal["lerp", "sum"] = "lerp",
                 coefficients: str | Sequence[Sequence[float]] = "original",
                 scale: ScaleRule = "original", ns_eps: float = NS_EPS_JORDAN) -> None:
        _check_common(lr, weight_decay, momentum)
        if momentum_form not in ("lerp", "sum"):
            raise ValueError(f"momentum_form must be 'lerp' or 'sum', got {momentum_form!r}")
        muon_scale((1, 1), scale)  # validates the rule
        if not ns_eps >= 0:
            raise ValueError(f"ns_eps must be non-negative, got {ns_eps}")
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov,
                        momentum_form=momentum_form, coefficients=_coefficients(coefficients), scale=scale,
                        ns_eps=float(ns_eps))
        super().__init__(params, defaults)

    @staticmethod
    def _momentum_direction(state: dict, g: torch.Tensor, group: dict) -> torch.Tensor:
        mu = group["momentum"]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(g)
        M = state["momentum_buffer"]
        if group["momentum_form"] == "lerp":
            M.mul_(mu).add_(g, alpha=1.0 - mu)
            return (1.0 - mu) * g + mu * M if group["nesterov"] else M.clone()
        M.mul_(mu).add_(g)
        return mu * M + g if group["nesterov"] else M.clone()

    def _direction(self, state: dict, g: torch.Tensor, group: dict) -> torch.Tensor:
        return newton_schulz(self._momentum_direction(state, g, group), group["coefficients"], group["ns_eps"])

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = _matrix_grad(p)
                state = self.state[p]
                O = self._direction(state, g, group)
                state["last_update"] = O
                _apply_update(p, O, group["lr"], group["weight_decay"],
                              muon_scale(tuple(p.shape), group["scale"]))
        return loss


class NorMuon(Muon):
    """NorMuon (microsoft/dion ``normuon.py``); defaults are the runs' (sum momentum, dion NS
    schedule, ``"spectral_norm"``, ``β₂ = 0.95``) as in :class:`matrix_optimizers.NorMuon`."""

    def __init__(self, params: Iterable[Any], lr: float = MUON_LR, momentum: float = MUON_MOMENTUM,
                 weight_decay: float = 0.0, *, beta2: float = NORMUON_BETA2, eps: float = NORMUON_EPS,
                 nesterov: bool = True, momentum_form: Literal["lerp", "sum"] = "sum",
                 coefficients: str | Sequence[Sequence[float]] = "dion",
                 scale: ScaleRule = "spectral_norm", ns_eps: float = NS_EPS_RUNS) -> None:
        if not 0.0 <= beta2 < 1.0:
            raise ValueError(f"beta2 must be in [0, 1), got {beta2}")
        super().__init__(params, lr, momentum, weight_decay, nesterov=nesterov, momentum_form=momentum_form,
                         coefficients=coefficients, scale=scale, ns_eps=ns_eps)
        for group in self.param_groups:
            group.setdefault("beta2", float(beta2))
            group.setdefault("eps", float(eps))

    def _direction(self, state: dict, g: torch.Tensor, group: dict) -> torch.Tensor:
        O = super()._direction(state, g, group)
        if "second_moment" not in state:
            state["second_moment"] = torch.zeros(O.shape[0], dtype=O.dtype, device=O.device)
        v = state["second_moment"]
        v.mul_(group["beta2"]).add_((O * O).mean(dim=1), alpha=1.0 - group["beta2"])
        O_hat = O / (v.sqrt()[:, None] + group["eps"])
        return O_hat * (torch.linalg.matrix_norm(O) / torch.linalg.matrix_norm(O_hat).clamp(min=group["eps"]))


class Dion(torch.optim.Optimizer):
    """Dion with rank fraction ``r`` (single device, plain QR) as :class:`matrix_optimizers.Dion`.

    ``seed``: ``Q_0`` of the ``i``-th parameter (in ``param_groups`` order) is drawn with
    ``numpy.random.default_rng(seed + i)``, so a one-parameter Dion matches the reference with
    the same ``seed``.
    """

    def __init__(self, params: Iterable[Any], lr: float = MUON_LR, momentum: float = MUON_MOMENTUM,
                 weight_decay: float = 0.0, *, rank_fraction: float = 1.0, eps: float = DION_EPS,
                 seed: int = 0, scale: ScaleRule = "spectral_norm") -> None:
        _check_common(lr, weight_decay, momentum)
        if not 0.0 < rank_fraction <= 1.0:
            raise ValueError(f"rank_fraction must be in (0, 1], got {rank_fraction}")
        muon_scale((1, 1), scale)
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, rank_fraction=rank_fraction,
                        eps=eps, scale=scale)
        super().__init__(params, defaults)
        self.seed = int(seed)

    def _init_state(self, p: torch.Tensor, group: dict, index: int) -> dict:
        state = self.state[p]
        transposed = p.shape[0] < p.shape[1]
        m, n = (p.shape[1], p.shape[0]) if transposed else tuple(p.shape)
        rank = int(math.ceil(group["rank_fraction"] * n))
        q0 = np.random.default_rng(self.seed + index).standard_normal((n, rank))
        state.update(transposed=transposed, rank=rank,
                     momentum_buffer=torch.zeros((m, n), dtype=p.dtype, device=p.device),
                     Q=torch.as_tensor(q0, dtype=p.dtype, device=p.device))
        return state

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                index += 1
                if p.grad is None:
                    continue
                g = _matrix_grad(p)
                state = self.state[p] if "Q" in self.state[p] else self._init_state(p, group, index - 1)
                M = state["momentum_buffer"]
                M.add_(g.T if state["transposed"] else g)
                if bool(torch.isfinite(M).all()) and bool((M != 0).any()):
                    P, _ = torch.linalg.qr(M @ state["Q"])
                    R = M.T @ P
                    M.sub_(P @ R.T, alpha=1.0 - group["momentum"])
                else:  # all-zero or non-finite momentum: no update, keep Q (fix_all_zero_or_nan)
                    P = torch.zeros((M.shape[0], state["rank"]), dtype=M.dtype, device=M.device)
                    R = state["Q"]
                state["Q"] = R / (torch.linalg.vector_norm(R, dim=0, keepdim=True) + group["eps"])
                update = P @ state["Q"].T
                if state["transposed"]:
                    update = update.T
                state["last_update"] = update
                _apply_update(p, update, group["lr"], group["weight_decay"],
                              muon_scale(tuple(p.shape), group["scale"]))
        return loss


class Lion(torch.optim.Optimizer):
    """Lion, any tensor shape: ``U = sign(β₁M + (1−β₁)G)``, ``M ← β₂M + (1−β₂)G``,
    ``W ← W(1−ηλ) − ηU``; betas ``(0.95, 0.98)`` as in the runs."""

    def __init__(self, params: Iterable[Any], lr: float = 1e-4, betas: tuple[float, float] = LION_BETAS_RUNS,
                 weight_decay: float = 0.0) -> None:
        _check_common(lr, weight_decay)
        b1, b2 = betas
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        super().__init__(params, dict(lr=lr, betas=(float(b1), float(b2)), weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                M = state["momentum_buffer"]
                update = torch.sign(b1 * M + (1.0 - b1) * p.grad)
                M.mul_(b2).add_(p.grad, alpha=1.0 - b2)
                state["last_update"] = update
                _apply_update(p, update, group["lr"], group["weight_decay"], 1.0)
        return loss


# ------------------------------------------------------------------------------------------------
# The authors' optimizer factory
# ------------------------------------------------------------------------------------------------

OPTIMIZER_NAMES = ("adamw", "muon", "normuon", "dion-1/2", "dion-1/4", "dion-1/8", "dion-1/16")


@dataclass(frozen=True)
class OptimizerSpec:
    """Hyper-parameters of one run's optimizers (docs/theory.md §C.8; toy-scale learning rates).

    ``name``: one of :data:`OPTIMIZER_NAMES`; ``lr``: matrix lr (0.02 for Muon/NorMuon/Dion,
    3e-3 for AdamW in the paper); ``lr_scalar``: Lion's embedding lr, ``None`` (default) meaning
    ``lr`` as in the authors' ``optimizer_factory.py`` (``lr_embed = lr``, ``lr_head = lr/√d_model``);
    ``weight_decay`` 0.01 on the block matrices; ``momentum`` μ = 0.95; AdamW betas (0.9, 0.95);
    Lion betas (0.95, 0.98); ``ns_eps`` the Newton–Schulz ``eps`` of Muon/NorMuon (1e-8, the
    runs' microsoft/dion default).
    """

    name: str
    lr: float
    lr_scalar: float | None = None
    weight_decay: float = WEIGHT_DECAY
    momentum: float = MUON_MOMENTUM
    adamw_betas: tuple[float, float] = ADAMW_BETAS
    lion_betas: tuple[float, float] = LION_BETAS_RUNS
    ns_eps: float = NS_EPS_RUNS
    seed: int = 0

    @property
    def lion_lr(self) -> float:
        """Lion's embedding lr: ``lr_scalar``, or the matrix rate ``lr`` when unset (authors)."""
        return self.lr if self.lr_scalar is None else self.lr_scalar

    @property
    def label(self) -> str:
        """Display label: ``AdamW``, ``Muon``, ``NorMuon``, ``Dion 1/2`` ..."""
        if self.name.startswith("dion-"):
            return "Dion " + self.name.split("-", 1)[1]
        return {"adamw": "AdamW", "muon": "Muon", "normuon": "NorMuon"}[self.name]

    @property
    def rank_fraction(self) -> float | None:
        if not self.name.startswith("dion-"):
            return None
        num, den = self.name.split("-", 1)[1].split("/")
        return float(num) / float(den)


def optimizer_spec(name: str, **overrides: Any) -> OptimizerSpec:
    """The paper's settings for ``name`` (AdamW lr 3e-3, matrix optimizers lr 0.02), with overrides."""
    if name not in OPTIMIZER_NAMES:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZER_NAMES)}, got {name!r}")
    base: dict[str, Any] = dict(lr=ADAMW_LR if name == "adamw" else MUON_LR)
    base.update(overrides)
    return OptimizerSpec(name=name, **base)


class OptimizerBundle:
    """Several optimizers stepped together; ``set_lr_factor(f)`` scales every group's base lr."""

    def __init__(self, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        self.optimizers = list(optimizers)
        for opt in self.optimizers:
            for group in opt.param_groups:
                group.setdefault("base_lr", group["lr"])

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def set_lr_factor(self, factor: float) -> None:
        for opt in self.optimizers:
            for group in opt.param_groups:
                group["lr"] = group["base_lr"] * factor


def build_optimizer(spec: OptimizerSpec, block_matrices: Sequence[torch.Tensor],
                    embedding: Sequence[torch.Tensor], head: Sequence[torch.Tensor],
                    d_model: int) -> OptimizerBundle:
    """The authors' factory: ``block_matrices`` (2-D weights of the blocks) get ``spec.name``;
    ``embedding``/``head`` get Lion (``spec.lion_lr`` and ``spec.lion_lr/√d_model``, no weight
    decay), or AdamW with the same lr and no decay when ``spec.name == "adamw"`` (AdamW everywhere)."""
    blocks, emb, hd = list(block_matrices), list(embedding), list(head)
    if spec.name == "adamw":
        groups = [dict(params=blocks, weight_decay=spec.weight_decay),
                  dict(params=emb + hd, weight_decay=0.0)]
        return OptimizerBundle([torch.optim.AdamW(groups, lr=spec.lr, betas=spec.adamw_betas)])
    if spec.name == "muon":
        matrix: torch.optim.Optimizer = Muon(blocks, spec.lr, spec.momentum, spec.weight_decay, nesterov=True,
                                             momentum_form="sum", coefficients="dion", scale="spectral_norm",
                                             ns_eps=spec.ns_eps)
    elif spec.name == "normuon":
        matrix = NorMuon(blocks, spec.lr, spec.momentum, spec.weight_decay, ns_eps=spec.ns_eps)
    else:
        rank_fraction = spec.rank_fraction
        if rank_fraction is None:  # the name is not "dion-<num>/<den>"
            raise ValueError(f"spec.name must be one of {', '.join(OPTIMIZER_NAMES)}, got {spec.name!r}")
        matrix = Dion(blocks, spec.lr, spec.momentum, spec.weight_decay, rank_fraction=rank_fraction,
                      seed=spec.seed)
    scalar = Lion([dict(params=emb, lr=spec.lion_lr),
                   dict(params=hd, lr=spec.lion_lr / math.sqrt(d_model))],
                  lr=spec.lion_lr, betas=spec.lion_betas, weight_decay=0.0)
    return OptimizerBundle([matrix, scalar])
