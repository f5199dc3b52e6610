"""Toy-scale reproduction kit for paper C (docs/theory.md §C.1–C.5): a synthetic Zipfian language, a small
modded-nanoGPT-style model, FFN activation hooks feeding :class:`StreamingCovariance` per
HEAD/MID/TAIL stratum, and one training run end to end.

This module imports PyTorch at import time; nothing else in the package imports it at import time
(the ``spectral-scaling`` experiment imports it inside ``run``), so ``import transformer_limits``
works without torch.

**Language** (:class:`ZipfLanguage`, NumPy, seeded).  Vocabulary ``V``, Zipf unigram
``π(v) ∝ (v+1)^{−s}``, two random successor tables ``s₁, s₂ : V → V`` drawn from ``π``.  Each next
token is

    ``x_t = s₁(x_{t−1})`` with prob. ``λ₁``;  ``s₂(x_{t−2})`` with prob. ``λ₂``;  ``~ π`` otherwise,

so a model can learn a bigram map and (through attention) a skip-bigram map; the Bayes loss is
:meth:`ZipfLanguage.conditional_nll`.  The stationary unigram law solves
``μ = λ₀ π + λ₁ μ S₁ + λ₂ μ S₂`` (``S_i`` the successor matrices, ``λ₀ = 1 − λ₁ − λ₂``), i.e.
``μ = λ₀ π (I − λ₁ S₁ − λ₂ S₂)^{−1}`` exactly; its occurrence-mass tertiles are the *declared*
strata (:meth:`ZipfLanguage.declared_strata`).  The paper's strata come from the unigram counts of
the training corpus (:func:`frequency_strata` on ``numpy.bincount``); both are reported.

**Model** (:class:`ToyGPT`): token embedding, ``n_layers`` pre-RMSNorm blocks (weightless
``rms_norm``), causal multi-head attention with RoPE and optional QK-RMSNorm, FFN
``c_proj(ReLU(c_fc x)²)`` of hidden width ``D = ffn_mult · d_model`` (``ffn_mult ∈ 1..8``), no biases,
final RMSNorm, untied ``lm_head``.  Initialisation as the authors' ``GPT._init_weights``
(spectral-scaling-laws ``optimizer_ssl/models/gpt_model.py``): every ``Linear`` weight
``W ∈ R^{fan_out × fan_in}`` is ``N(0, σ²)`` with ``σ = fan_in^{−1/2} · min(1, (fan_out/fan_in)^{1/2})``
(spectral-norm scaling, arXiv:2310.17813) and the embedding is ``N(0, 1)``; no projection starts at
zero (a zero ``c_proj``/``lm_head`` makes every block gradient exactly zero at step 1).

**Hooks** (:class:`FFNActivationCollector`): ``h_pre = c_fc(x)`` (forward hook on ``c_fc``) and
``h_post = ReLU(h_pre)²`` (forward pre-hook on ``c_proj``), shape ``(B, T, D)`` → ``n × D`` rows,
split by the stratum of the **input** token of each row and accumulated in float64
``StreamingCovariance`` per ``(layer, site, stratum)``; ``GLOBAL`` pools the three strata exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from transformer_limits.numeric.spectra.ranks import (
    StreamingCovariance,
    as_numpy_array,
    covariance_spectrum,
    renyi_rank,
)
from transformer_limits.numeric.spectra.token_strata import STRATA, FrequencyStrata, frequency_strata
from transformer_limits.numeric.torch.optimizers import OptimizerSpec, build_optimizer

__all__ = [
    "ZipfLanguage",
    "ToyGPTConfig",
    "ToyGPT",
    "init_std",
    "FFNActivationCollector",
    "ToyRunConfig",
    "ToyRunResult",
    "train_toy_gpt",
    "SITES",
    "POOLED",
]

SITES = ("pre", "post")
POOLED = "GLOBAL"
STRATUM_COUNT_SCALE = 10**12  # μ → integer pseudo-counts for frequency_strata


# ------------------------------------------------------------------------------------------------
# Synthetic Zipfian language
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZipfLanguage:
    """The seeded synthetic language of the module docstring.

    ``vocab_size`` V ≥ 3, ``zipf_exponent`` s > 0, ``bigram_weight`` λ₁, ``skip_weight`` λ₂
    (λ₁ + λ₂ < 1), ``seed`` for the successor tables.
    """

    vocab_size: int = 512
    zipf_exponent: float = 0.8
    bigram_weight: float = 0.45
    skip_weight: float = 0.25
    seed: int = 0

    def __post_init__(self) -> None:
        if int(self.vocab_size) != self.vocab_size or self.vocab_size < 3:
            raise ValueError(f"vocab_size must be an integer >= 3, got {self.vocab_size!r}")
        if not self.zipf_exponent > 0:
            raise ValueError(f"zipf_exponent must be positive, got {self.zipf_exponent!r}")
        if not (self.bigram_weight >= 0 and self.skip_weight >= 0 and self.bigram_weight + self.skip_weight < 1):
            raise ValueError("bigram_weight, skip_weight: need non-negative weights with sum < 1, got "
                             f"{self.bigram_weight!r}, {self.skip_weight!r}")

    @property
    def unigram(self) -> np.ndarray:
        """``π(v) ∝ (v+1)^{−s}``, shape ``(V,)``."""
        w = np.arange(1, self.vocab_size + 1, dtype=np.float64) ** -self.zipf_exponent
        return w / w.sum()

    @property
    def successors(self) -> tuple[np.ndarray, np.ndarray]:
        """``(s₁, s₂)``, each ``(V,)`` int64, drawn i.i.d. from ``π`` with ``default_rng(seed)``."""
        rng = np.random.default_rng(self.seed)
        pi = self.unigram
        return (rng.choice(self.vocab_size, size=self.vocab_size, p=pi),
                rng.choice(self.vocab_size, size=self.vocab_size, p=pi))

    def stationary(self) -> np.ndarray:
        """Exact stationary unigram law ``μ = λ₀ π (I − λ₁ S₁ − λ₂ S₂)^{−1}``, shape ``(V,)``."""
        V = self.vocab_size
        s1, s2 = self.successors
        T = np.zeros((V, V))
        np.add.at(T, (np.arange(V), s1), self.bigram_weight)
        np.add.at(T, (np.arange(V), s2), self.skip_weight)
        lam0 = 1.0 - self.bigram_weight - self.skip_weight
        mu = np.linalg.solve((np.eye(V) - T).T, lam0 * self.unigram)
        mu = np.clip(mu, 0.0, None)
        return mu / mu.sum()

    def unigram_entropy(self) -> float:
        """``H(μ) = −Σ μ log μ`` in nats: the loss of the best context-free predictor."""
        mu = self.stationary()
        mu = mu[mu > 0]
        return float(-np.sum(mu * np.log(mu)))

    def declared_strata(self) -> FrequencyStrata:
        """HEAD/MID/TAIL of the stationary law ``μ`` (occurrence-mass tertiles, docs/theory.md §C.5)."""
        return frequency_strata(np.round(self.stationary() * STRATUM_COUNT_SCALE))

    def sample(self, n_sequences: int, length: int, seed: int, *, burn_in: int = 16) -> np.ndarray:
        """``n_sequences × length`` int64 tokens; each row starts after ``burn_in`` steps from ``μ``."""
        if n_sequences < 1 or length < 1:
            raise ValueError(f"n_sequences and length must be >= 1, got {n_sequences}, {length}")
        rng = np.random.default_rng(seed)
        s1, s2 = self.successors
        pi, mu = self.unigram, self.stationary()
        total = length + burn_in
        x = np.empty((n_sequences, total), dtype=np.int64)
        x[:, 0] = rng.choice(self.vocab_size, size=n_sequences, p=mu)
        x[:, 1] = rng.choice(self.vocab_size, size=n_sequences, p=mu)
        for t in range(2, total):
            u = rng.random(n_sequences)
            fresh = rng.choice(self.vocab_size, size=n_sequences, p=pi)
            x[:, t] = np.where(u < self.bigram_weight, s1[x[:, t - 1]],
                               np.where(u < self.bigram_weight + self.skip_weight, s2[x[:, t - 2]], fresh))
        return x[:, burn_in:]

    def conditional_nll(self, tokens: Any) -> float:
        """Mean ``−log P(x_t | x_{t−1}, x_{t−2})`` over positions ``t ≥ 2`` of ``tokens`` (``n × T``):
        the Bayes-optimal cross-entropy (nats) on those tokens."""
        x = np.asarray(tokens, dtype=np.int64)
        if x.ndim != 2 or x.shape[1] < 3:
            raise ValueError(f"tokens: expected an n x T array with T >= 3, got shape {x.shape}")
        s1, s2 = self.successors
        lam0 = 1.0 - self.bigram_weight - self.skip_weight
        nxt, a, b = x[:, 2:], x[:, 1:-1], x[:, :-2]
        p = (lam0 * self.unigram[nxt] + self.bigram_weight * (s1[a] == nxt)
             + self.skip_weight * (s2[b] == nxt))
        return float(-np.mean(np.log(p)))


# ------------------------------------------------------------------------------------------------
# Model
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToyGPTConfig:
    """``vocab_size``, ``d_model``, ``n_layers``, ``n_heads`` (divides ``d_model``, even head dim),
    ``ffn_mult`` k (``D = k·d_model``), ``context`` (max sequence length), ``qk_norm``."""

    vocab_size: int = 512
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    ffn_mult: int = 4
    context: int = 64
    qk_norm: bool = True

    def __post_init__(self) -> None:
        if not 1 <= int(self.ffn_mult) <= 8 or int(self.ffn_mult) != self.ffn_mult:
            raise ValueError(f"ffn_mult must be an integer in 1..8, got {self.ffn_mult!r}")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"n_heads={self.n_heads} must divide d_model={self.d_model} into even head dims")
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "context"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")

    @property
    def ffn_width(self) -> int:
        return self.ffn_mult * self.d_model


def _rms_norm(x: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],))


class _Rotary(nn.Module):
    cos: torch.Tensor  # buffers registered in __init__, declared for the type checker
    sin: torch.Tensor

    def __init__(self, head_dim: int, context: int, base: float = 10000.0) -> None:
        super().__init__()
        inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        ang = torch.outer(torch.arange(context, dtype=torch.float32), inv)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, H, T, hd)
        T = x.shape[-2]
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class _Attention(nn.Module):
    def __init__(self, cfg: ToyGPTConfig) -> None:
        super().__init__()
        self.n_heads, self.qk_norm = cfg.n_heads, cfg.qk_norm
        self.c_q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.c_k = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.c_v = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.rotary = _Rotary(cfg.d_model // cfg.n_heads, cfg.context)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        shape = (B, T, self.n_heads, C // self.n_heads)
        q, k, v = (lin(x).view(shape).transpose(1, 2) for lin in (self.c_q, self.c_k, self.c_v))
        if self.qk_norm:
            q, k = _rms_norm(q), _rms_norm(k)
        q, k = self.rotary(q), self.rotary(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class _MLP(nn.Module):
    def __init__(self, cfg: ToyGPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, cfg.ffn_width, bias=False)
        self.c_proj = nn.Linear(cfg.ffn_width, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.relu(self.c_fc(x)).square())


class _Block(nn.Module):
    def __init__(self, cfg: ToyGPTConfig) -> None:
        super().__init__()
        self.attn = _Attention(cfg)
        self.mlp = _MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(_rms_norm(x))
        return x + self.mlp(_rms_norm(x))


def init_std(fan_out: int, fan_in: int) -> float:
    """The authors' ``Linear`` init std ``fan_in^{−1/2} · min(1, (fan_out/fan_in)^{1/2})``."""
    return min(1.0, (fan_out / fan_in) ** 0.5) / fan_in ** 0.5


@torch.no_grad()
def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=init_std(*module.weight.shape))
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=1.0)


class ToyGPT(nn.Module):
    """``forward(idx)``: ``idx`` ``(B, T)`` int64 with ``T ≤ context`` → logits ``(B, T, V)``."""

    def __init__(self, cfg: ToyGPTConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layers))
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(_init_weights)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.ndim != 2 or idx.shape[1] > self.config.context:
            raise ValueError(f"idx: expected (B, T) with T <= {self.config.context}, got {tuple(idx.shape)}")
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(_rms_norm(x))

    def parameter_groups(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """``(block matrices, embedding, head)`` for :func:`build_optimizer`."""
        return ([p for p in self.blocks.parameters()], [self.embed.weight], [self.lm_head.weight])


# ------------------------------------------------------------------------------------------------
# Activation hooks
# ------------------------------------------------------------------------------------------------


class FFNActivationCollector:
    """Forward hooks collecting FFN activations of every block into float64 covariance accumulators.

    Use as a context manager around forward passes; call :meth:`set_tokens` with the ``(B, T)``
    input ids before each forward.  ``accumulators[(layer, site, stratum)]`` is a
    :class:`StreamingCovariance` of ``D``-dimensional rows (``site`` in ``sites``, ``stratum`` in
    ``HEAD/MID/TAIL``); :meth:`pooled` adds ``GLOBAL`` by exact merging.
    """

    def __init__(self, model: ToyGPT, strata: FrequencyStrata, *, sites: Sequence[str] = SITES) -> None:
        bad = [s for s in sites if s not in SITES]
        if bad or not sites:
            raise ValueError(f"sites must be a non-empty subset of {SITES}, got {tuple(sites)!r}")
        if strata.vocab_size != model.config.vocab_size:
            raise ValueError(f"strata: vocabulary {strata.vocab_size} != model vocabulary {model.config.vocab_size}")
        self.model, self.strata, self.sites = model, strata, tuple(sites)
        self.accumulators: dict[tuple[int, str, str], StreamingCovariance] = {
            (layer, site, name): StreamingCovariance(model.config.ffn_width)
            for layer in range(model.config.n_layers) for site in self.sites for name in STRATA}
        self._codes: np.ndarray | None = None
        self._handles: list[Any] = []

    def set_tokens(self, idx: Any) -> None:
        """Input ids ``(B, T)`` of the next forward pass (row order of the hooked activations)."""
        self._codes = self.strata.stratum_codes(as_numpy_array(idx, name="idx", ndim=2).astype(np.int64).reshape(-1))

    def _absorb(self, layer: int, site: str, act: torch.Tensor) -> None:
        if self._codes is None:
            raise ValueError("call set_tokens(idx) before the forward pass")
        rows = as_numpy_array(act.reshape(-1, act.shape[-1]), name=f"layer {layer} {site} activations", ndim=2)
        if rows.shape[0] != self._codes.size:
            raise ValueError(f"set_tokens got {self._codes.size} tokens but the forward pass has {rows.shape[0]} rows")
        for k, name in enumerate(STRATA):
            self.accumulators[(layer, site, name)].update(rows[self._codes == k])

    def __enter__(self) -> "FFNActivationCollector":
        for layer, block in enumerate(self.model.blocks):
            assert isinstance(block, _Block)  # ModuleList is typed as holding any Module
            if "pre" in self.sites:
                self._handles.append(block.mlp.c_fc.register_forward_hook(
                    lambda mod, inp, out, layer=layer: self._absorb(layer, "pre", out)))
            if "post" in self.sites:
                self._handles.append(block.mlp.c_proj.register_forward_pre_hook(
                    lambda mod, inp, layer=layer: self._absorb(layer, "post", inp[0])))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def pooled(self) -> dict[tuple[int, str, str], StreamingCovariance]:
        """The accumulators plus ``(layer, site, "GLOBAL")`` = exact pool of the three strata."""
        out = dict(self.accumulators)
        for layer in range(self.model.config.n_layers):
            for site in self.sites:
                out[(layer, site, POOLED)] = StreamingCovariance.pooled(
                    [self.accumulators[(layer, site, s)] for s in STRATA])
        return out

    def renyi_ranks(self, alphas: Iterable[float] = (1.0, 2.0)) -> dict[tuple[int, str, str], dict[float, float]]:
        """``{(layer, site, stratum): {α: R_α}}`` on the covariance spectra (strata + ``GLOBAL``)."""
        alphas = tuple(alphas)
        out = {}
        for key, acc in self.pooled().items():
            if acc.count < 2:
                raise ValueError(f"{key}: fewer than 2 tokens collected; use more evaluation tokens")
            lam = covariance_spectrum(acc)
            out[key] = {a: renyi_rank(lam, a) for a in alphas}
        return out


# ------------------------------------------------------------------------------------------------
# One training run
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToyRunConfig:
    """One run: model ``model``, optimizer ``optimizer``, ``steps`` of ``batch_size`` sequences of
    ``model.context`` tokens (each training sequence is seen once), warm-down over the last
    ``warmdown_frac`` of the steps (lr factor ``(T − t)/T_wd``, no warm-up, docs/theory.md §C.1),
    ``eval_sequences`` held-out sequences for the loss and the activation spectra, ``seed`` for
    data order, initialisation and Dion's ``Q_0``; ``language`` the synthetic language."""

    model: ToyGPTConfig
    optimizer: OptimizerSpec
    steps: int = 300
    batch_size: int = 32
    warmdown_frac: float = 0.2
    eval_sequences: int = 96
    seed: int = 0
    language: ZipfLanguage = field(default_factory=ZipfLanguage)
    sites: tuple[str, ...] = ("post",)
    alphas: tuple[float, ...] = (1.0, 2.0)
    log_every: int = 25


@dataclass
class ToyRunResult:
    """``ranks[(layer, site, stratum)][α]``; ``loss_history`` ``[(step, train loss)]``;
    ``eval_loss`` held-out cross-entropy (nats), ``unigram_entropy`` ``H(μ)``, ``bayes_loss`` the
    Bayes-optimal loss on the held-out tokens; ``strata_types`` / ``strata_share`` of the training
    corpus strata; ``seconds`` wall time."""

    config: ToyRunConfig
    ranks: dict[tuple[int, str, str], dict[float, float]]
    loss_history: list[tuple[int, float]]
    eval_loss: float
    unigram_entropy: float
    bayes_loss: float
    strata_types: dict[str, int]
    strata_share: dict[str, float]
    tokens_per_stratum: dict[str, int]
    seconds: float

    def layer_median(self, site: str, stratum: str, alpha: float) -> float:
        """Median over layers of ``R_α`` (docs/theory.md §C.6 step 2)."""
        return float(np.median([self.ranks[(layer, site, stratum)][alpha]
                                for layer in range(self.config.model.n_layers)]))

    def summary(self) -> dict[str, Any]:
        cfg = self.config
        return {"optimizer": cfg.optimizer.label, "ffn_mult": cfg.model.ffn_mult, "width": cfg.model.ffn_width,
                "seed": cfg.seed, "eval_loss": self.eval_loss, "unigram_entropy": self.unigram_entropy,
                "bayes_loss": self.bayes_loss, "seconds": self.seconds}


def _lr_factor(step: int, steps: int, warmdown_frac: float) -> float:
    warmdown = max(1, int(round(warmdown_frac * steps)))
    return 1.0 if step < steps - warmdown else (steps - step) / warmdown


def train_toy_gpt(cfg: ToyRunConfig) -> ToyRunResult:
    """Train one :class:`ToyGPT` with ``cfg.optimizer`` and measure FFN ranks per stratum at the end.

    Training data: ``steps · batch_size`` fresh sequences of length ``context + 1`` from
    ``cfg.language`` (seed ``cfg.seed``); strata from their unigram counts (docs/theory.md §C.5).  The
    ranks are measured on ``eval_sequences`` held-out sequences (a different seed stream).
    """
    start = time.perf_counter()
    lang, mcfg = cfg.language, cfg.model
    if lang.vocab_size != mcfg.vocab_size:
        raise ValueError(f"language vocabulary {lang.vocab_size} != model vocabulary {mcfg.vocab_size}")
    if cfg.steps < 1 or cfg.batch_size < 1 or cfg.eval_sequences < 1:
        raise ValueError("steps, batch_size and eval_sequences must be >= 1")
    data_seed = np.random.SeedSequence([cfg.seed, 1])
    train_tokens = lang.sample(cfg.steps * cfg.batch_size, mcfg.context + 1, seed=data_seed.generate_state(1)[0])
    eval_tokens = lang.sample(cfg.eval_sequences, mcfg.context + 1,
                              seed=np.random.SeedSequence([cfg.seed, 2]).generate_state(1)[0])
    strata = frequency_strata(np.bincount(train_tokens[:, :-1].reshape(-1), minlength=lang.vocab_size))

    torch.manual_seed(cfg.seed)
    model = ToyGPT(mcfg)
    blocks, embed, head = model.parameter_groups()
    spec = replace(cfg.optimizer, seed=cfg.seed)
    opt = build_optimizer(spec, blocks, embed, head, mcfg.d_model)
    data = torch.from_numpy(train_tokens)
    history: list[tuple[int, float]] = []
    model.train()
    for step in range(cfg.steps):
        batch = data[step * cfg.batch_size:(step + 1) * cfg.batch_size]
        opt.set_lr_factor(_lr_factor(step, cfg.steps, cfg.warmdown_frac))
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{spec.label} width {mcfg.ffn_width}: loss is {loss.item()} at step {step}")
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            history.append((step, float(loss.item())))

    model.eval()
    collector = FFNActivationCollector(model, strata, sites=cfg.sites)
    ev = torch.from_numpy(eval_tokens)
    losses = []
    with torch.no_grad(), collector:
        for chunk in torch.split(ev, 32):
            collector.set_tokens(chunk[:, :-1])
            logits = model(chunk[:, :-1])
            losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                                          reduction="sum").item())
    eval_loss = float(sum(losses) / (eval_tokens.shape[0] * mcfg.context))
    ranks = collector.renyi_ranks(cfg.alphas)
    site0 = cfg.sites[0]
    counts = {s: collector.accumulators[(0, site0, s)].count for s in STRATA}
    return ToyRunResult(cfg, ranks, history, eval_loss, lang.unigram_entropy(),
                        lang.conditional_nll(eval_tokens),
                        strata.types_per_stratum(), strata.occurrence_share(), counts,
                        time.perf_counter() - start)
