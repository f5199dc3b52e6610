"""Paper C's toy activation collector reports the Rényi ranks of docs/theory.md §C.3–C.5, computed
here independently on the same activations.

A tiny :class:`ToyGPT` (2 layers, d_model 16, FFN width D = 32) runs a few batches under
:class:`FFNActivationCollector` (both sites).  Hooks of this test record the same activations:
``h_pre = c_fc(x)`` (output of ``c_fc``) and ``h_post = ReLU(h_pre)²`` (input of ``c_proj``), one row per
token, and the input token ids.  From them, with NumPy only and the definitions of docs/theory.md:

* strata (§C.5) from the unigram counts: sort descending, cumulative mass c, T the total,
  head_cut = #{c ≤ 0.33 T}, mid_cut = #{c ≤ 0.67 T} (clipped to 1 ≤ head_cut < mid_cut ≤ V − 1),
  head_min = f_sorted[head_cut − 1], mid_min = f_sorted[mid_cut − 1]; HEAD f ≥ head_min,
  MID mid_min ≤ f < head_min, TAIL f < mid_min; a row belongs to the stratum of its *input* token;
* covariance (§C.3) per (layer, site, stratum) and pooled (GLOBAL = all rows of the layer and site):
  C = (1/(n − 1)) Σ_t (h_t − h̄)(h_t − h̄)^T;
* ranks (§C.4) on p_i = λ_i / Σλ (λ = eigenvalues of C, round-off negatives set to 0):
  soft R_1 = exp(−Σ p_i log p_i), hard R_2 = (Σλ)² / Σλ², R_∞ = 1 / max p_i.

The activations are float32 from the model, converted exactly to float64; everything after that is
float64, so the collector must agree to 1e-10 relative (its streaming covariance only sums in another
order).  Deterministic (fixed seeds), a second or two on the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from transformer_limits.numeric.spectra.token_strata import frequency_strata  # noqa: E402
from transformer_limits.numeric.torch.toy_gpt import FFNActivationCollector, ToyGPT, ToyGPTConfig  # noqa: E402

V, D_MODEL, LAYERS, FFN_MULT, CONTEXT = 64, 16, 2, 2, 16
D = D_MODEL * FFN_MULT
STRATA = ("HEAD", "MID", "TAIL")
REL = 1e-10


def _zipf_tokens(shape, seed):
    rng = np.random.default_rng(seed)
    p = (np.arange(V) + 1.0) ** -1.1
    return rng.choice(V, size=shape, p=p / p.sum()).astype(np.int64)


def _strata_labels(counts: np.ndarray) -> np.ndarray:
    """Stratum code (0 HEAD, 1 MID, 2 TAIL) per token id, docs/theory.md §C.5."""
    f_sorted = np.sort(counts)[::-1]
    cum = np.cumsum(f_sorted)
    total = cum[-1]
    head_cut = int(np.sum(cum <= 0.33 * total))
    mid_cut = int(np.sum(cum <= 0.67 * total))
    head_cut = min(max(head_cut, 1), V - 1)
    mid_cut = min(max(mid_cut, head_cut + 1), V - 1)
    head_min, mid_min = f_sorted[head_cut - 1], f_sorted[mid_cut - 1]
    return np.where(counts >= head_min, 0, np.where(counts >= mid_min, 1, 2))


def _covariance(H: np.ndarray) -> np.ndarray:
    Hc = H - H.mean(axis=0)
    return Hc.T @ Hc / (H.shape[0] - 1)


def _ranks(C: np.ndarray) -> dict[float, float]:
    lam = np.clip(np.linalg.eigvalsh(C), 0.0, None)
    p = lam / lam.sum()
    nz = p[p > 0]
    return {1.0: float(np.exp(-np.sum(nz * np.log(nz)))), 2.0: float(lam.sum() ** 2 / np.sum(lam**2)),
            float("inf"): float(1.0 / p.max())}


@pytest.fixture(scope="module")
def collected():
    """(collector, recorded rows {(layer, site): (n, D)}, input ids (n,), labels per id)."""
    torch.manual_seed(0)
    model = ToyGPT(ToyGPTConfig(vocab_size=V, d_model=D_MODEL, n_layers=LAYERS, n_heads=2, ffn_mult=FFN_MULT,
                                context=CONTEXT))
    model.eval()
    train = _zipf_tokens((64, CONTEXT), seed=1)
    counts = np.bincount(train.reshape(-1), minlength=V)
    strata = frequency_strata(counts)
    labels = _strata_labels(counts)
    collector = FFNActivationCollector(model, strata, sites=("pre", "post"))
    rows: dict[tuple[int, str], list[np.ndarray]] = {(l, s): [] for l in range(LAYERS) for s in ("pre", "post")}
    handles = []
    for layer, block in enumerate(model.blocks):
        handles.append(block.mlp.c_fc.register_forward_hook(
            lambda mod, inp, out, layer=layer: rows[(layer, "pre")].append(out.detach().double().numpy())))
        handles.append(block.mlp.c_proj.register_forward_pre_hook(
            lambda mod, inp, layer=layer: rows[(layer, "post")].append(inp[0].detach().double().numpy())))
    ids = []
    evaluation = _zipf_tokens((12, CONTEXT), seed=2)
    with torch.no_grad(), collector:
        for chunk in np.split(evaluation, 3):  # three forward passes: the accumulators merge batches
            idx = torch.from_numpy(chunk)
            collector.set_tokens(idx)
            model(idx)
            ids.append(chunk.reshape(-1))
    for h in handles:
        h.remove()
    flat = {k: np.concatenate([a.reshape(-1, a.shape[-1]) for a in v]) for k, v in rows.items()}
    return collector, flat, np.concatenate(ids), labels


def test_recorded_sites_are_c_fc_output_and_its_squared_relu(collected):
    _, rows, ids, labels = collected
    for layer in range(LAYERS):
        pre, post = rows[(layer, "pre")], rows[(layer, "post")]
        assert pre.shape == post.shape == (ids.size, D)
        # post = ReLU(pre)² in float32 (one rounding): relative 2^-24
        np.testing.assert_allclose(post, np.maximum(pre, 0.0) ** 2, rtol=2e-7, atol=0)
    assert set(np.unique(labels[ids])) == {0, 1, 2}  # every stratum has tokens


def test_strata_are_those_of_theory_c5(collected):
    collector, _, _, labels = collected
    np.testing.assert_array_equal(collector.strata.labels, labels)


def test_collector_covariances_are_the_centred_unbiased_covariance_per_stratum_and_pooled(collected):
    collector, rows, ids, labels = collected
    codes = labels[ids]
    pooled = collector.pooled()
    for (layer, site), H in rows.items():
        for k, name in enumerate(STRATA):
            acc = collector.accumulators[(layer, site, name)]
            assert acc.count == int(np.sum(codes == k))
            want = _covariance(H[codes == k])
            np.testing.assert_allclose(acc.covariance(), want, rtol=0, atol=REL * np.abs(want).max())
        acc = pooled[(layer, site, "GLOBAL")]
        want = _covariance(H)
        assert acc.count == ids.size
        np.testing.assert_allclose(acc.covariance(), want, rtol=0, atol=REL * np.abs(want).max())


def test_collector_ranks_are_the_renyi_ranks_of_theory_c4(collected):
    """Soft R_1, hard R_2 (and R_∞) of every (layer, site, stratum) and GLOBAL, to 1e-10 relative."""
    collector, rows, ids, labels = collected
    codes = labels[ids]
    got = collector.renyi_ranks((1.0, 2.0, float("inf")))
    assert set(got) == {(l, s, n) for l in range(LAYERS) for s in ("pre", "post") for n in (*STRATA, "GLOBAL")}
    for (layer, site), H in rows.items():
        for name, subset in [*((n, H[codes == k]) for k, n in enumerate(STRATA)), ("GLOBAL", H)]:
            want = _ranks(_covariance(subset))
            for alpha, value in want.items():
                assert got[(layer, site, name)][alpha] == pytest.approx(value, rel=REL), (layer, site, name, alpha)
            # the definitions' order: 1 <= R_inf <= R_2 <= R_1 <= D
            assert 1 <= want[float("inf")] <= want[2.0] <= want[1.0] <= D
    # the ranks differ between sites, layers and strata (a mix-up of keys would show)
    values = [got[(l, s, n)][2.0] for l in range(LAYERS) for s in ("pre", "post") for n in (*STRATA, "GLOBAL")]
    assert len(set(np.round(values, 8))) == len(values)
