"""Toy GPT, synthetic Zipfian language, FFN hooks and the spectral-scaling checks (docs/theory.md §C.1–C.7)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'transformer_limits[train]')")

from transformer_limits.numeric.spectra.ranks import covariance_matrix  # noqa: E402
from transformer_limits.numeric.spectra.token_strata import STRATA, frequency_strata  # noqa: E402
from transformer_limits.numeric.torch.toy_gpt import (  # noqa: E402
    FFNActivationCollector,
    ToyGPT,
    ToyGPTConfig,
    ToyRunConfig,
    ZipfLanguage,
    train_toy_gpt,
)
from transformer_limits.numeric.torch.optimizers import optimizer_spec  # noqa: E402
from transformer_limits.verify.experiments import spectral_scaling as ss  # noqa: E402

LANG = ZipfLanguage()


# ---------------------------------------------------------------- language


def test_stationary_law_solves_the_balance_equation():
    mu = LANG.stationary()
    s1, s2 = LANG.successors
    lam0 = 1 - LANG.bigram_weight - LANG.skip_weight
    rhs = lam0 * LANG.unigram
    np.add.at(rhs, s1, LANG.bigram_weight * mu)
    np.add.at(rhs, s2, LANG.skip_weight * mu)
    np.testing.assert_allclose(mu, rhs, atol=1e-14)
    assert mu.sum() == pytest.approx(1.0) and np.all(mu >= 0)


def test_corpus_has_the_declared_strata():
    declared = LANG.declared_strata()
    shares = declared.occurrence_share()
    types = declared.types_per_stratum()
    assert all(0.25 < shares[s] < 0.42 for s in STRATA), shares
    assert types["HEAD"] < types["MID"] < types["TAIL"]
    tokens = LANG.sample(2000, 65, seed=3)
    counts = np.bincount(tokens.reshape(-1), minlength=LANG.vocab_size)
    # empirical unigram law ≈ μ: total variation distance of 130k draws (Markov-dependent) < 0.02
    assert 0.5 * np.abs(counts / counts.sum() - LANG.stationary()).sum() < 0.02
    empirical = frequency_strata(counts)
    # the corpus strata agree with the declared ones except for a few types at the tertile cut-offs
    agree = np.mean(empirical.labels == declared.labels)
    assert agree > 0.97
    assert empirical.types_per_stratum()["HEAD"] == pytest.approx(types["HEAD"], abs=2)


def test_sampling_is_seeded_and_bayes_loss_is_below_unigram_entropy():
    a, b = LANG.sample(20, 33, seed=1), LANG.sample(20, 33, seed=1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, LANG.sample(20, 33, seed=2))
    assert a.shape == (20, 33) and a.min() >= 0 and a.max() < LANG.vocab_size
    assert LANG.conditional_nll(LANG.sample(500, 65, seed=4)) < LANG.unigram_entropy() - 1.5
    with pytest.raises(ValueError, match="skip_weight"):
        ZipfLanguage(bigram_weight=0.7, skip_weight=0.4)


# ---------------------------------------------------------------- model and hooks


def _tiny_model(k=2, layers=2, vocab=64):
    torch.manual_seed(0)
    model = ToyGPT(ToyGPTConfig(vocab_size=vocab, d_model=16, n_layers=layers, n_heads=2, ffn_mult=k, context=16))
    for block in model.blocks:  # non-zero (zero-initialised) projections: non-trivial later layers and logits
        torch.nn.init.normal_(block.mlp.c_proj.weight, std=0.1)
        torch.nn.init.normal_(block.attn.c_proj.weight, std=0.1)
    torch.nn.init.normal_(model.lm_head.weight, std=0.1)
    return model


def test_hooks_collect_the_right_rows_and_shapes():
    model = _tiny_model(k=3)
    lang = ZipfLanguage(vocab_size=64)
    strata = lang.declared_strata()
    idx = torch.from_numpy(lang.sample(5, 16, seed=0))
    raw: dict = {}
    handles = [model.blocks[1].mlp.c_fc.register_forward_hook(lambda m, i, o: raw.__setitem__("pre", o)),
               model.blocks[1].mlp.c_proj.register_forward_pre_hook(lambda m, i: raw.__setitem__("post", i[0]))]
    with torch.no_grad(), FFNActivationCollector(model, strata) as col:
        col.set_tokens(idx)
        model(idx)
    for h in handles:
        h.remove()
    D = 3 * 16
    assert raw["pre"].shape == (5, 16, D)
    torch.testing.assert_close(raw["post"], torch.relu(raw["pre"]) ** 2)
    codes = strata.stratum_codes(idx.numpy().reshape(-1))
    for layer in range(2):
        for site in ("pre", "post"):
            n = [col.accumulators[(layer, site, s)].count for s in STRATA]
            assert n == [int(np.sum(codes == k)) for k in range(3)]
            assert col.accumulators[(layer, site, "TAIL")].dim == D
    for site in ("pre", "post"):
        rows = raw[site].reshape(-1, D).numpy().astype(np.float64)
        for k, s in enumerate(STRATA):
            if np.sum(codes == k) > 1:
                np.testing.assert_allclose(col.accumulators[(1, site, s)].covariance(),
                                           covariance_matrix(rows[codes == k]), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(col.pooled()[(1, site, "GLOBAL")].covariance(), covariance_matrix(rows),
                                   rtol=1e-6, atol=1e-8)
    ranks = col.renyi_ranks((1.0, 2.0))
    for key, r in ranks.items():
        assert 1.0 <= r[2.0] <= r[1.0] <= D + 1e-9, key
    assert not model.blocks[0].mlp.c_fc._forward_hooks  # hooks removed on exit


def test_initialisation_is_the_authors():
    """spectral-scaling-laws ``GPT._init_weights``: Linear ``N(0, σ²)`` with
    ``σ = fan_in^{-1/2}·min(1, sqrt(fan_out/fan_in))``, embedding ``N(0, 1)``; nothing starts at zero.
    Sample stds of ≥ 4096 entries are within 4% of σ (relative sd ≈ 1/sqrt(2N) ≤ 1.1%: a 3.6-sd
    band; seeded, so deterministic)."""
    torch.manual_seed(0)
    cfg = ToyGPTConfig(vocab_size=128, d_model=64, n_layers=2, n_heads=4, ffn_mult=3, context=16)
    model = ToyGPT(cfg)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 2 * 6 + 1
    for lin in linears:
        w = lin.weight.detach()
        fan_out, fan_in = w.shape
        sigma = min(1.0, (fan_out / fan_in) ** 0.5) / fan_in**0.5
        assert float(w.std()) == pytest.approx(sigma, rel=0.04)
        assert abs(float(w.mean())) < 4 * sigma / w.numel() ** 0.5
    assert float(model.embed.weight.detach().std()) == pytest.approx(1.0, rel=0.04)
    # why it matters: every block matrix gets a non-zero gradient at step 1 (a zero lm_head, the
    # old initialisation, makes them all exactly zero, which is the Dion all-zero-momentum case)
    idx = torch.from_numpy(ZipfLanguage(vocab_size=128).sample(4, 17, seed=0))
    for zero_head in (False, True):
        model.zero_grad()
        if zero_head:
            torch.nn.init.zeros_(model.lm_head.weight)
        logits = model(idx[:, :-1])
        torch.nn.functional.cross_entropy(logits.reshape(-1, 128), idx[:, 1:].reshape(-1)).backward()
        zero = [p.grad.abs().max().item() == 0.0 for p in model.blocks.parameters()]
        assert all(zero) if zero_head else not any(zero)


def test_model_is_causal_and_validates_its_config():
    model = _tiny_model()
    idx = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        a = model(idx)
        idx2 = idx.clone()
        idx2[:, 8:] = (idx2[:, 8:] + 1) % 64
        b = model(idx2)
    torch.testing.assert_close(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, 8:], b[:, 8:])
    with pytest.raises(ValueError, match="ffn_mult"):
        ToyGPTConfig(ffn_mult=9)
    with pytest.raises(ValueError, match="n_heads"):
        ToyGPTConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="idx"):
        model(torch.zeros((2, 17), dtype=torch.int64))


def test_tiny_training_run_learns_the_language():
    torch.set_num_threads(1)
    lang = ZipfLanguage(vocab_size=128)
    cfg = ToyRunConfig(model=ToyGPTConfig(vocab_size=128, d_model=32, n_layers=1, n_heads=2, ffn_mult=2, context=32),
                       optimizer=optimizer_spec("muon"), steps=50, batch_size=16, eval_sequences=32, language=lang,
                       log_every=10)
    res = train_toy_gpt(cfg)
    assert res.loss_history[-1][1] < res.loss_history[0][1] - 1.0
    # held-out loss well below the unigram entropy (the best context-free predictor)
    assert res.eval_loss < res.unigram_entropy - 0.5, (res.eval_loss, res.unigram_entropy, res.bayes_loss)
    assert res.eval_loss > res.bayes_loss - 0.05  # cannot beat the Bayes loss (up to sampling noise)
    assert set(res.ranks) == {(0, "post", s) for s in (*STRATA, "GLOBAL")}
    assert sum(res.tokens_per_stratum.values()) == 32 * 32


# ---------------------------------------------------------------- statistical checks


def _synthetic_fits(betas: dict[str, float], seed=0, noise=0.05):
    """Rank tables R = c D^β e^{noise·Z} for 4 widths × 3 seeds, fitted as in the experiment."""
    rng = np.random.default_rng(seed)
    widths = np.array([64.0, 128.0, 256.0, 512.0])
    fits = {}
    for i, (name, beta) in enumerate(betas.items()):
        for stratum in ("MID", "TAIL", "GLOBAL"):
            R = 3.0 * widths[:, None] ** beta * np.exp(noise * rng.standard_normal((4, 3)))
            fits[(name, stratum, "hard")] = ss.fit_betas(widths, R, seed=i, n_boot=500)
    return fits


# Fixed seeds.  With Δβ = 0.6 and log-noise 0.05 the true difference is > 15 standard errors, so the
# check on correctly labelled data has a false-failure rate far below the declared α = 0.05 and the
# swapped labels (Δβ = −0.6) are rejected with probability ≈ 1.
def test_checks_pass_on_the_claim_and_fail_on_swapped_labels():
    fits = _synthetic_fits({"adamw": 0.3, "muon": 0.9, "dion-1/2": 0.8, "dion-1/16": 0.5})
    muon, dion = ss.muon_hard_beta_check(fits), ss.dion_monotone_check(fits)
    assert muon.passed and muon.statistics["supported"]
    assert dion.passed and dion.statistics["supported"]
    assert muon.false_failure_rate == ss.ALPHA
    swapped = {("adamw" if k[0] == "muon" else "muon" if k[0] == "adamw" else
                "dion-1/2" if k[0] == "dion-1/16" else "dion-1/16", *k[1:]): v for k, v in fits.items()}
    bad_muon, bad_dion = ss.muon_hard_beta_check(swapped), ss.dion_monotone_check(swapped)
    assert not bad_muon.passed and not bad_dion.passed
    assert bad_muon.ci[1] < 0 and "contradicted" in bad_muon.note


def test_check_is_not_a_point_comparison():
    """Equal true exponents with noise: a small negative point Δβ must not fail the check."""
    fits = _synthetic_fits({"adamw": 0.5, "muon": 0.5, "dion-1/2": 0.5, "dion-1/16": 0.5}, seed=5, noise=0.2)
    check = ss.muon_hard_beta_check(fits)
    assert check.passed and not check.statistics["supported"]
    assert check.ci[0] < 0 < check.ci[1]


def test_experiment_is_registered_full_only_and_package_imports_without_torch():
    from transformer_limits.verify.registry import experiment_spec

    spec = experiment_spec("spectral-scaling")
    assert spec.profiles == ("full",) and spec.paper == "C"
    assert set(spec.check_names) == {"training_learns", "muon_hard_beta_exceeds_adamw", "dion_rank_monotone"}
    code = ("import sys, transformer_limits; from transformer_limits.verify.registry import list_experiments; "
            "list_experiments(); assert 'torch' not in sys.modules, 'torch imported at package import'")
    subprocess.run([sys.executable, "-c", code], check=True)
