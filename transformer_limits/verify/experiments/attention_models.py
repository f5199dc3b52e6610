"""The models of paper A's sup-over-inputs experiments (``attention-depth-width``, ``token-independence``):
the attention transformer and its MV-ODE limit as input -> output maps, one cache of models per sweep
process, and the record of the worst inputs the ascent found (docs/theory.md §A.1, §A.5;
docs/paper_a_experiments.md).

* :func:`discrete_map` / :func:`limit_map`: X0 (N, d) -> (output (N, d), vjp) of the discrete network
  (:class:`AttentionTransformer`, adjoint :meth:`~AttentionTransformer.backward`) and of the RK4 MV-ODE
  (:class:`MeanFieldLimit`, gradient of the RK4 map from its taped stages), the :class:`~transformer_limits.verify.input_search.InputMap`
  the sup search ascends;
* :class:`PaperAModels`: the exact-expectation, i.i.d.-head and training networks plus the limit for
  one settings dict, and the maps and trained head laws the error families need;
* :func:`models_for`: one :class:`PaperAModels` per (settings, head scale, Lions sign) per process;
* :class:`WorstInputs`: per (family, level), the largest sup error over seeds and its input X0;
* :data:`QUICK_MODEL`: the model of the quick profile (dimensions, ball radius, head law), shared by
  both experiments.

Causal masking (``causal-depth-width``, ``causal-token-independence``; docs/causal_masking.md): a
settings dict with ``"causal": True`` masks every model (token i attends to j <= i; the limit is the
prefix-measure MV-ODE), and the sup search then ascends the worst token (``token="max"``: the maps are
no longer permutation-equivariant) with tiled warm starts (``layout="tile"``).  ``"limit_causal"``
(default: ``"causal"``) masks the limit alone: ``causal=True, limit_causal=False`` is the deliberately
wrong control with the mask in the network but not in the limit.  Without these keys nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map
from transformer_limits.numeric.attention.mean_field import (
    HeadLaw,
    MeanFieldLimit,
    discrete_node_loss_and_grad,
    train_adamw,
)
from transformer_limits.numeric.attention.rk4_tape import forward_taped
from transformer_limits.numeric.attention.transformer import (
    AdjointPass,
    AttentionTransformer,
    ForwardPass,
    inverse_heads,
    inverse_sqrt_heads,
)
from transformer_limits.verify.input_search import InputMap, is_worse, sup_error
from transformer_limits.verify.sweeps import canonical_json

__all__ = ["QUICK_MODEL", "HEAD_SCALES", "Sup", "FlippedLionsTransformer", "discrete_map", "limit_map",
           "PaperAModels", "models_for", "WorstInputs"]

#: the quick profile's model: token dimension d, key/value dimensions, input ball radius R and the
#: finite-atom head law (nodes, atoms, gain)
QUICK_MODEL: dict[str, Any] = dict(d=2, d_k=2, d_v=2, radius=1.0, n_nodes=3, atoms=4, gain=1.5)


class FlippedLionsTransformer(AttentionTransformer):
    """Deliberately wrong adjoint: the Lions (interaction) term enters with the wrong sign,
    p_r = p_{r+1} + J^T p_{r+1} − Lions(p_{r+1}); parameter gradients follow from the wrong p."""

    def backward(self, fwd: ForwardPass, params: dict[str, Any], p_final: Any, *, grads: bool = True) -> AdjointPass:
        params, L, H = self.check_params(params)
        p = np.empty_like(fwd.states)
        p[L] = np.asarray(p_final, dtype=np.float64)
        # always the (wrong) gradients, whatever ``grads`` asks: this model exists to train with them
        dtheta_all = {k: np.empty_like(v) for k, v in params.items()}
        for r in range(L - 1, -1, -1):
            args = (fwd.states[r], params["Q"][r], params["K"][r], params["V"][r], params["O"][r],
                    fwd.weights[r], fwd.caches[r], p[r + 1])
            full, *dtheta = self.layer.vjp(*args, lions=True)
            jac = self.layer.vjp(*args, lions=False, param_grads=False)[0]
            p[r] = p[r + 1] + 2.0 * jac - full
            for k, g in zip(("Q", "K", "V", "O"), dtheta):
                dtheta_all[k][r] = g
        return AdjointPass(p, dtheta_all)


def discrete_map(model: AttentionTransformer, params: dict[str, np.ndarray], head_weights: Any = None) -> InputMap:
    def evaluate(X0: np.ndarray):
        fwd = model.forward(X0, params, head_weights, tape=True)
        return fwd.states[-1], lambda r: model.backward(fwd, params, r, grads=False).p[0]
    return InputMap(evaluate)


def limit_map(mf: MeanFieldLimit, law: HeadLaw, steps: int) -> InputMap:
    """X_1(X0) of the MV-ODE by ``steps`` RK4 steps; the vjp is the exact gradient of that RK4 map from
    the stages its forward pass kept (:func:`~transformer_limits.numeric.attention.rk4_tape.forward_taped`:
    the ascent climbs the function it evaluates, and no field is evaluated twice)."""
    def evaluate(X0: np.ndarray):
        tape = forward_taped(mf, X0, law, steps)
        return tape.final, tape.vjp
    return InputMap(evaluate)


@dataclass
class PaperAModels:
    """Settings plus the (possibly deliberately wrong) discrete model used for the i.i.d. heads
    (``head_scale``) and for the discrete training gradients (``lions_sign``)."""

    s: dict[str, Any]
    head_scale: Callable[[int], float] = inverse_heads
    lions_sign: int = 1

    def __post_init__(self) -> None:
        s = self.s
        dims = (s["d"], s["d_k"], s["d_v"])
        # settings["backend"]: "blas" (default) or the generated "numba" kernels, which the experiments
        # name: with their serial twins (numeric/numba_twins.py) they match BLAS at N = 6 with one head
        # and beat it 3x at 64 heads (one call per layer instead of a dozen NumPy calls), 25x at N = 1024
        backend = s.get("backend", "blas")
        # settings["precision"] (float32: numpy / blas / cupy) is the discrete models'; the mean-field
        # limit is the reference the experiments compare with and stays float64
        precision = s.get("precision", "float64")
        causal = bool(s.get("causal", False))
        self.exact = AttentionTransformer(*dims, causal=causal, backend=backend, precision=precision)
        self.iid = AttentionTransformer(*dims, causal=causal, backend=backend, head_scale=self.head_scale,
                                        precision=precision)
        cls = AttentionTransformer if self.lions_sign > 0 else FlippedLionsTransformer
        self.trainer = cls(*dims, causal=causal, backend=backend, precision=precision)
        self.mf = MeanFieldLimit(*dims, causal=bool(s.get("limit_causal", causal)), backend=backend)
        #: the sup search's options: token 1 (permutation-equivariant maps) or the worst token with
        #: tiled warm starts (causal maps; input_search's module docstring)
        self.search: dict[str, Any] = {"token": "max", "layout": "tile"} if causal else {}

    def law(self, seed: int) -> HeadLaw:
        s = self.s
        return HeadLaw.random(s["n_nodes"], s["atoms"], s["d"], s["d_k"], s["d_v"], seed=seed, gain=s["gain"])

    def sup(self, A: InputMap, B: InputMap, rng: np.random.Generator) -> tuple[float, np.ndarray]:
        """(estimated sup error, the worst input X0 (N, d) found): :func:`sup_error` with the settings."""
        s = self.s
        return sup_error(A, B, s["N"], s["d"], radius=s["radius"], rng=rng, restarts=s["restarts"],
                         iterations=s["iterations"], lr=s["ascent_lr"], token=self.search.get("token", 0))

    def exact_map(self, law: HeadLaw, L: int) -> InputMap:
        params, w = law.discretise(L, mode="exact")
        return discrete_map(self.exact, params, w)

    def iid_map(self, law: HeadLaw, L: int, H: int, seed: int) -> InputMap:
        params, _ = law.discretise(L, H, mode="iid", seed=seed)
        return discrete_map(self.iid, params)

    def limit(self, law: HeadLaw) -> InputMap:
        return limit_map(self.mf, law, self.s["limit_steps"])

    def trained(self, law: HeadLaw, L: int | None, seed: int) -> HeadLaw:
        """ν after K AdamW steps, driven by the discrete network's node gradients (L layers) or, with
        L None, by the limit's."""
        s = self.s
        Xtr = sample_tokens(s["n_train"], s["d"], radius=s["radius"], seed=seed)
        loss = SquaredErrorLoss(target_map(Xtr, seed=seed))
        if L is None:
            grad_fn = lambda nu: self.mf.loss_and_grad(Xtr, nu, loss, s["limit_steps"])[:2]  # noqa: E731
        else:
            grad_fn = lambda nu: discrete_node_loss_and_grad(self.trainer, Xtr, nu, loss, L)[:2]  # noqa: E731
        return train_adamw(grad_fn, law, s["train_steps"], lr=s["lr"], eps=s["eps"]).laws[-1]


Sup = tuple[float, np.ndarray]  # (sup error, worst input X0 (N, d))

#: head scalings a sweep point can name (points are JSON; the deliberately wrong model is 1/sqrt(H))
HEAD_SCALES: dict[str, Callable[[int], float]] = {"inverse_heads": inverse_heads,
                                                  "inverse_sqrt_heads": inverse_sqrt_heads}

_MODELS: dict[str, PaperAModels] = {}


def models_for(settings: dict[str, Any], head_scale: str = "inverse_heads", lions_sign: int = 1) -> PaperAModels:
    """The :class:`PaperAModels` of a sweep point, built once per process."""
    key = canonical_json([settings, head_scale, lions_sign])
    if key not in _MODELS:
        _MODELS[key] = PaperAModels(dict(settings), head_scale=HEAD_SCALES[head_scale], lions_sign=lions_sign)
    return _MODELS[key]


class WorstInputs:
    """Per (family, level): the largest sup error over the seeds and the input X0 (N, d) that attained
    it — the "worst input" the ascent found, reported so a reader can inspect where the sup sits."""

    def __init__(self, radius: float):
        self.radius = radius
        self._best: dict[tuple[str, str], tuple[float, int, np.ndarray]] = {}
        self._order: dict[tuple[str, str], tuple] = {}

    def add(self, family: str, level: str, seed_index: int, error: float, X0: Any, order: tuple = ()) -> None:
        """Offer one seed's result; rows are sorted by ``order`` (e.g. (family rank, level index))."""
        key = (family, level)
        self._order[key] = order
        if is_worse(error, self._best.get(key, (None,))[0]):
            self._best[key] = (float(error), int(seed_index), np.asarray(X0, dtype=np.float64))

    def _items(self):
        return sorted(self._best.items(), key=lambda kv: (self._order[kv[0]], kv[0]))

    def rows(self) -> list[dict[str, Any]]:
        """Summary rows: token norms of the worst input relative to the radius R."""
        out = []
        for (family, level), (error, j, X) in self._items():
            r = np.linalg.norm(X, axis=1) / self.radius
            out.append({"family": family, "level": level, "seed_index": j, "sup_error": error,
                        "norm x^1 / R": float(r[0]),
                        "min norm x^i / R, i > 1": float(r[1:].min()) if len(r) > 1 else None,
                        "max norm x^i / R, i > 1": float(r[1:].max()) if len(r) > 1 else None,
                        "share of tokens on the sphere": float(np.mean(r >= 0.999))})
        return out

    def data(self) -> list[dict[str, Any]]:
        """The same entries with the worst inputs themselves (``X0``: N rows of d coordinates)."""
        return [{"family": f, "level": lv, "seed_index": j, "sup_error": e, "X0": X.tolist()}
                for (f, lv), (e, j, X) in self._items()]
