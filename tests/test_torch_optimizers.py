"""PyTorch matrix optimizers vs the float64 NumPy references (docs/theory.md §C.8, §D item 17)."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install 'transformer_limits[train]')")

from transformer_limits.numeric.optim import matrix_optimizers as ref  # noqa: E402
from transformer_limits.numeric.torch import optimizers as tor  # noqa: E402

SHAPES = [(6, 6), (5, 9), (12, 4), (1, 7)]
TOL = 1e-10


def _grads(shape, n, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape) for _ in range(n)]


def _run_pair(ref_opt, make_torch_opt, shape, seed, steps=4):
    """Same initial weights and gradients in float64 through both implementations."""
    W0 = np.random.default_rng(seed + 100).standard_normal(shape)
    W_ref = W0.copy()
    p = torch.nn.Parameter(torch.tensor(W0, dtype=torch.float64))
    opt = make_torch_opt([p])
    for g in _grads(shape, steps, seed):
        ref_opt.step(W_ref, g)
        p.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    return W_ref, p.detach().numpy(), opt


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("coeffs", ["original", "dion"])
def test_newton_schulz_matches_reference(shape, coeffs):
    G = np.random.default_rng(1).standard_normal(shape)
    out = tor.newton_schulz(torch.tensor(G), coeffs).numpy()
    np.testing.assert_allclose(out, ref.newton_schulz(G, coeffs), atol=TOL, rtol=0)


def test_newton_schulz_rejects_non_matrix():
    with pytest.raises(ValueError, match="G"):
        tor.newton_schulz(torch.zeros(3))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("form,coeffs", [("lerp", "original"), ("sum", "dion")])
@pytest.mark.parametrize("scale", ["original", "spectral_norm", "rms_norm"])
@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_matches_reference(shape, form, coeffs, scale, nesterov):
    kw = dict(nesterov=nesterov, momentum_form=form, coefficients=coeffs, scale=scale)
    W_ref, W_t, opt = _run_pair(ref.Muon(0.05, 0.9, 0.01, **kw),
                                lambda ps: tor.Muon(ps, 0.05, 0.9, 0.01, **kw), shape, seed=3)
    np.testing.assert_allclose(W_t, W_ref, atol=TOL, rtol=0)


def test_muon_wrong_schedule_does_not_match():
    """Deliberately wrong model: the torch Muon with the other NS schedule must not match."""
    W_ref, W_t, _ = _run_pair(ref.Muon(0.05, coefficients="original"),
                              lambda ps: tor.Muon(ps, 0.05, coefficients="dion"), (6, 5), seed=4)
    assert np.max(np.abs(W_ref - W_t)) > 1e-4


@pytest.mark.parametrize("shape", SHAPES)
def test_normuon_matches_reference(shape):
    W_ref, W_t, opt = _run_pair(ref.NorMuon(0.02, 0.95, 0.01), lambda ps: tor.NorMuon(ps, 0.02, 0.95, 0.01),
                                shape, seed=5)
    np.testing.assert_allclose(W_t, W_ref, atol=TOL, rtol=0)
    state = next(iter(opt.state.values()))
    assert state["second_moment"].shape == (shape[0],)


@pytest.mark.parametrize("shape", [(8, 8), (10, 6), (6, 10), (16, 3)])
@pytest.mark.parametrize("rank_fraction", [1.0, 0.5, 1 / 16])
def test_dion_matches_reference(shape, rank_fraction):
    W_ref, W_t, opt = _run_pair(ref.Dion(0.02, 0.95, 0.01, rank_fraction=rank_fraction, seed=7),
                                lambda ps: tor.Dion(ps, 0.02, 0.95, 0.01, rank_fraction=rank_fraction, seed=7),
                                shape, seed=6, steps=5)
    np.testing.assert_allclose(W_t, W_ref, atol=TOL, rtol=0)
    state = next(iter(opt.state.values()))
    assert state["rank"] == math.ceil(rank_fraction * min(shape))
    assert np.linalg.matrix_rank(state["last_update"].numpy(), tol=1e-8) <= state["rank"]


def test_lion_matches_reference():
    shape = (4, 3, 2)  # Lion accepts any shape
    W0 = np.random.default_rng(0).standard_normal(shape)
    W_ref = W0.copy()
    p = torch.nn.Parameter(torch.tensor(W0))
    opt = tor.Lion([p], lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)
    r = ref.Lion(1e-2, (0.9, 0.99), 0.1)
    for g in _grads(shape, 4, 1):
        r.step(W_ref, g)
        p.grad = torch.tensor(g)
        opt.step()
    np.testing.assert_allclose(p.detach().numpy(), W_ref, atol=TOL, rtol=0)


def test_matrix_optimizers_reject_vectors_and_bad_arguments():
    p = torch.nn.Parameter(torch.zeros(5))
    p.grad = torch.ones(5)
    with pytest.raises(ValueError, match="2-D"):
        tor.Muon([p]).step()
    with pytest.raises(ValueError, match="rank_fraction"):
        tor.Dion([p], rank_fraction=0.0)
    with pytest.raises(ValueError, match="lr"):
        tor.Lion([p], lr=0.0)
    with pytest.raises(ValueError, match="scale"):
        tor.Muon([p], scale="bogus")
    with pytest.raises(ValueError, match="optimizer"):
        tor.optimizer_spec("sgd")


def test_factory_assigns_optimizers_like_the_authors():
    blocks = [torch.nn.Parameter(torch.randn(8, 4)), torch.nn.Parameter(torch.randn(4, 8))]
    emb, head = [torch.nn.Parameter(torch.randn(10, 4))], [torch.nn.Parameter(torch.randn(10, 4))]
    adamw = tor.build_optimizer(tor.optimizer_spec("adamw"), blocks, emb, head, d_model=4)
    assert [type(o) for o in adamw.optimizers] == [torch.optim.AdamW]
    assert adamw.optimizers[0].param_groups[0]["weight_decay"] == 0.01
    assert adamw.optimizers[0].param_groups[1]["weight_decay"] == 0.0
    for name, cls in [("muon", tor.Muon), ("normuon", tor.NorMuon), ("dion-1/16", tor.Dion)]:
        spec = tor.optimizer_spec(name, lr_scalar=0.04)
        bundle = tor.build_optimizer(spec, blocks, emb, head, d_model=4)
        matrix, scalar = bundle.optimizers
        assert type(matrix) is cls and type(scalar) is tor.Lion
        assert matrix.param_groups[0]["lr"] == 0.02
        assert [g["lr"] for g in scalar.param_groups] == [0.04, 0.04 / 2.0]  # head: lr/sqrt(d_model)
        bundle.set_lr_factor(0.5)
        assert scalar.param_groups[1]["lr"] == pytest.approx(0.01)
    assert tor.optimizer_spec("dion-1/16").rank_fraction == 1 / 16
    assert tor.optimizer_spec("dion-1/2").label == "Dion 1/2"
