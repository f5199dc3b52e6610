"""The hypothesis strategies of ``transformer_limits.testing.strategies`` (issue 24).

Each strategy is drawn with no arguments and with options, and its invariants are checked on every
example: shapes, weights positive and summing to 1, unit norms on the sphere, the box / Frobenius /
ball bounds, activations the simulators accept, claim strings the parser accepts.  Shrinking is
checked with ``hypothesis.find``: the minimal example is the small, readable one the docs promise.
Bad options are ValueErrors naming the argument.  Hypothesis runs derandomized (tests/conftest.py):
no test here is statistical.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from transformer_limits.testing import strategies as tls
from transformer_limits.verify.rate.claims import parse_rate_claim

FEW = settings(max_examples=25)


def _measure_ok(m: tls.EmpiricalMeasure, sphere: bool = False) -> None:
    n, d = m.atoms.shape
    assert m.weights.shape == (n,) and n == m.n_atoms and d == m.d and n >= 1
    assert np.all(m.weights > 0) and abs(m.weights.sum() - 1.0) < 1e-12
    assert np.all(np.isfinite(m.atoms))
    assert np.allclose(m.mean(), m.weights @ m.atoms)
    if sphere:
        assert np.allclose(np.linalg.norm(m.atoms, axis=1), 1.0, atol=1e-12)


@FEW
@given(tls.empirical_measures())
def test_empirical_measures_without_arguments(m):
    _measure_ok(m)
    assert 1 <= m.d <= 4 and 1 <= m.n_atoms <= 8
    assert np.all(np.abs(m.atoms) <= 2.0)
    assert np.allclose(m.weights, 1.0 / m.n_atoms)  # uniform by default


@FEW
@given(tls.empirical_measures(d=3, n_atoms=(2, 5), weights="random", radius=0.5))
def test_empirical_measures_with_options(m):
    _measure_ok(m)
    assert m.d == 3 and 2 <= m.n_atoms <= 5
    assert np.all(np.abs(m.atoms) <= 0.5)
    assert np.all(m.weights >= 1.0 / (10 * m.n_atoms))  # k_j / sum k with k_j in 1..10


@FEW
@given(tls.empirical_measures(d=st.sampled_from([2, 7]), n_atoms=1))
def test_sizes_may_be_strategies(m):
    assert m.d in (2, 7) and m.n_atoms == 1 and m.weights.tolist() == [1.0]


@FEW
@given(tls.sphere_points(), tls.sphere_points(d=3, n=(4, 4)))
def test_sphere_points_have_unit_norm(P, P3):
    assert P.ndim == 2 and 2 <= P.shape[1] <= 5 and 1 <= P.shape[0] <= 8
    assert P3.shape == (4, 3)
    for points in (P, P3):
        assert np.allclose(np.linalg.norm(points, axis=1), 1.0, atol=1e-12)


@FEW
@given(tls.sphere_measures(), tls.sphere_measures(d=4, n_atoms=3, weights="random"))
def test_sphere_measures(m, m4):
    _measure_ok(m, sphere=True)
    _measure_ok(m4, sphere=True)
    assert m4.atoms.shape == (3, 4)


def _shapes(p):
    return {k: v.shape for k, v in p.items()}


@FEW
@given(tls.attention_parameters())
def test_attention_parameters_without_arguments(p):
    H, d_k, d = p["Q"].shape
    d_v = p["V"].shape[1]
    assert _shapes(p) == {"Q": (H, d_k, d), "K": (H, d_k, d), "V": (H, d_v, d), "O": (H, d, d_v)}
    assert all(np.all(np.abs(v) <= 1.0) for v in p.values())


@FEW
@given(tls.attention_parameters(d=3, d_k=2, d_v=4, heads=2, layers=(1, 3), bound=0.25))
def test_attention_parameters_in_a_box_with_layers(p):
    from transformer_limits.numeric.attention.transformer import param_shapes

    L = p["Q"].shape[0]
    assert _shapes(p) == param_shapes(L, 2, 3, 2, 4)  # AttentionTransformer's layout (L, H, ...)
    assert all(np.all(np.abs(v) <= 0.25) for v in p.values())


@FEW
@given(tls.attention_parameters(d=4, heads=3, bound=0.5, norm="frobenius", scale=3.0))
def test_attention_parameters_in_a_frobenius_ball(p):
    for v in p.values():
        assert np.all(np.linalg.norm(v, axis=(-2, -1)) <= 0.5)  # per head, exactly (no round-off excess)


def test_attention_parameters_inside_the_adamw_box():
    from transformer_limits.numeric import adamw_box_radius

    R = adamw_box_radius(R0=0.1, lr=1e-3, weight_decay=0.01, steps=50)
    found = find(tls.attention_parameters(d=2, heads=1, bound=R), lambda p: np.abs(p["Q"]).max() > 0.9 * R)
    assert np.abs(found["Q"]).max() <= R


@FEW
@given(tls.transformer_inputs(), tls.transformer_inputs(N=16, d=3, radius=0.3))
def test_transformer_inputs_lie_in_the_ball(X, X3):
    assert X.ndim == 2 and 1 <= X.shape[0] <= 8 and 1 <= X.shape[1] <= 4
    assert np.all(np.linalg.norm(X, axis=1) <= 1.0)
    assert X3.shape == (16, 3) and np.all(np.linalg.norm(X3, axis=1) <= 0.3)


@FEW
@given(tls.activations(), tls.activations(smooth=True), tls.activations(names=["tanh", "gelu"]))
def test_activations_are_supported_by_the_simulators(name, smooth, chosen):
    from transformer_limits.numeric.sphere.lyapunov import ACTIVATIONS
    from transformer_limits.symbolic.mlp_kernel import ACTIVATIONS as SYMBOLIC

    assert name in ACTIVATIONS and name in SYMBOLIC
    assert smooth != "relu"
    assert chosen in ("tanh", "gelu")


@FEW
@given(tls.rate_claims(), tls.rate_claims(params=("N",), max_terms=1), tls.rate_claims(params=("L", "m"), logs=True))
def test_rate_claims_parse(text, single, with_logs):
    claim = parse_rate_claim(text)
    assert set(claim.parameters) <= {"L", "H"} and 1 <= len(claim.terms) <= 3
    assert all(q < 0 for t in claim.terms for q in t.exponents.values())  # every term decays
    assert str(parse_rate_claim(str(claim))) == str(claim)  # and prints back to itself
    assert parse_rate_claim(single).parameters == ("N",) and len(parse_rate_claim(single).terms) == 1
    assert set(parse_rate_claim(with_logs).parameters) <= {"L", "m"}


def test_rate_claims_with_logs_can_have_log_factors():
    found = find(tls.rate_claims(logs=True), lambda c: "log" in c)
    assert parse_rate_claim(found).terms[0].log_powers


def test_failing_examples_shrink_to_small_readable_ones():
    m = find(tls.empirical_measures(weights="random"), lambda m: m.n_atoms >= 3)
    assert m.atoms.shape == (3, 1) and np.all(m.atoms == 0) and np.allclose(m.weights, 1 / 3)
    assert find(tls.sphere_points(), lambda P: True).tolist() == [[1.0, 0.0]]
    p = find(tls.attention_parameters(), lambda p: True)
    assert _shapes(p) == {"Q": (1, 1, 1), "K": (1, 1, 1), "V": (1, 1, 1), "O": (1, 1, 1)}
    assert all(np.all(v == 0) for v in p.values())
    assert find(tls.transformer_inputs(), lambda X: True).tolist() == [[0.0]]
    assert find(tls.activations(), lambda a: True) == "relu"
    assert find(tls.activations(smooth=True), lambda a: True) == "tanh"
    assert find(tls.rate_claims(), lambda c: True) == "L^-1"
    assert find(tls.rate_claims(), lambda c: "H" in c) == "H^-1"


@pytest.mark.parametrize("make, match", [
    (lambda: tls.empirical_measures(d=0), "d must be >= 1"),
    (lambda: tls.empirical_measures(n_atoms=(3, 2)), "n_atoms must be a range"),
    (lambda: tls.empirical_measures(weights="dirichlet"), "weights must be"),
    (lambda: tls.empirical_measures(radius=-1.0), "radius must be"),
    (lambda: tls.empirical_measures(d=2.5), "d must be an int"),
    (lambda: tls.sphere_points(d=1), "d must be >= 2"),
    (lambda: tls.attention_parameters(norm="spectral"), "norm must be"),
    (lambda: tls.attention_parameters(bound=0.0), "bound must be"),
    (lambda: tls.attention_parameters(heads=True), "heads must be an int"),
    (lambda: tls.transformer_inputs(radius=float("inf")), "radius must be"),
    (lambda: tls.activations(names=["swish"]), "names must be among"),
    (lambda: tls.activations(names="tanh"), "names must be a sequence"),
    (lambda: tls.activations(names=["relu"], smooth=True), "leave no activation"),
    (lambda: tls.rate_claims(params=("L", "log")), "params must be"),
    (lambda: tls.rate_claims(params=("C1",)), "params must be"),
    (lambda: tls.rate_claims(params=("L", "L")), "params must be"),
    (lambda: tls.rate_claims(max_terms=0), "max_terms must be"),
    (lambda: tls.adamw_hyperparameters(betas=[(1.0, 0.9)]), "betas must be"),
    (lambda: tls.adamw_hyperparameters(betas=[]), "betas must be"),
    (lambda: tls.adamw_hyperparameters(lr=(0.5, 0.1)), "lr must be"),
    (lambda: tls.adamw_hyperparameters(lr=0.0), "lr must be > 0"),
    (lambda: tls.adamw_hyperparameters(weight_decay=[-1.0]), "weight_decay must be"),
    (lambda: tls.adamw_hyperparameters(eps="1e-8"), "eps must be"),
    (lambda: tls.spectra(n=0), "n must be >= 1"),
    (lambda: tls.spectra(max_value=1e-13), "max_value must be"),
    (lambda: tls.spectra(dynamic_range=0.5), "dynamic_range must be >= 1"),
    (lambda: tls.spectra(dynamic_range=0.0), "dynamic_range must be"),
    (lambda: tls.token_counts(law="poisson"), "law must be"),
    (lambda: tls.token_counts(law="free", max_count=0), "max_count must be"),
    (lambda: tls.token_counts(scales=[0]), "scales must be"),
    (lambda: tls.token_counts(exponent=(2.0, 1.0)), "exponent must be"),
    (lambda: tls.token_counts(vocab=(0, 3)), "vocab must be a range"),
])
def test_bad_options_name_the_argument(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# -- the strategies moved here from the project's own tests (issue 24 item 3) ---------------------

def _adamw_ok(hp, betas, lr, decays, epsilons):
    assert set(hp) == {"lr", "betas", "eps", "weight_decay"}
    assert hp["betas"] in betas and lr[0] <= hp["lr"] <= lr[1] and hp["eps"] in epsilons
    # λ is one of the listed values, clipped to 1/η: the decay factor 1 − ηλ stays in [0, 1]
    assert hp["weight_decay"] in decays or hp["weight_decay"] == pytest.approx(1.0 / hp["lr"])
    assert 0.0 <= hp["lr"] * hp["weight_decay"] <= 1.0 + 1e-12


@FEW
@given(tls.adamw_hyperparameters(), tls.adamw_hyperparameters(betas=[(0.0, 0.5)], lr=(0.5, 1.0),
                                                              weight_decay=[3.0], eps=[0.0]))
def test_adamw_hyperparameters(hp, clipped):
    _adamw_ok(hp, tls.ADAMW_BETAS, (1e-4, 1.0), (0.0, 1e-2, 0.3, 1.0, 5.0), (1e-8, 1e-300, 0.1))
    _adamw_ok(clipped, [(0.0, 0.5)], (0.5, 1.0), (3.0,), (0.0,))
    assert clipped["weight_decay"] == pytest.approx(1.0 / clipped["lr"])  # 3 > 1/η for every η in [0.5, 1]


def test_adamw_hyperparameters_drive_the_optimizer_and_shrink():
    from transformer_limits.numeric.optim.adamw import AdamW

    hp = find(tls.adamw_hyperparameters(lr=0.01), lambda hp: True)
    assert hp == {"lr": 0.01, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0}  # the first of each list
    opt = AdamW({"w": np.ones(3)}, **hp)  # the dict is AdamW's keyword arguments
    opt.step({"w": np.ones(3)})
    assert np.allclose(opt._params[0], 1.0 - 0.01)  # the first Adam step moves each entry by lr
    # the β1 >= √β2 pairs are drawn too (there the sup of C_β(k) is infinite)
    assert find(tls.adamw_hyperparameters(), lambda hp: hp["betas"][0] >= np.sqrt(hp["betas"][1]))["betas"] == (0.95, 0.9)


@FEW
@given(tls.spectra(), tls.spectra(n=5, max_value=1.0))
def test_spectra_are_non_negative_with_a_mode(lam, lam5):
    for spectrum, top in ((lam, 1e6), (lam5, 1.0)):
        assert spectrum.dtype == np.float64 and spectrum.ndim == 1
        assert np.all(spectrum >= 0) and np.all(spectrum <= top) and spectrum.max() > tls.SPECTRUM_FLOOR
    assert 1 <= lam.size <= 40 and lam5.shape == (5,)


def test_spectra_shrink_and_reach_the_round_off_cases():
    assert find(tls.spectra(), lambda lam: True).tolist() == [1.0]
    # a zero next to a mode: the case a rank estimator must not count
    found = find(tls.spectra(), lambda lam: lam.size >= 2 and np.any(lam == 0))
    assert found.tolist() == [0.0, 1.0] or found.tolist() == [1.0, 0.0]


@FEW
@given(tls.spectra(n=(2, 30), dynamic_range=1e4))
def test_spectra_of_bounded_dynamic_range(lam):
    assert 2 <= lam.size <= 30 and np.all(lam >= 0) and lam.max() > tls.SPECTRUM_FLOOR
    positive = lam[lam > 0]
    assert positive.min() >= positive.max() / 1e4  # no entry between 0 and max λ / r


def test_spectra_of_bounded_dynamic_range_shrink_and_keep_zeros():
    assert find(tls.spectra(dynamic_range=10.0), lambda lam: True).tolist() == [1.0]
    # a wide spectrum becomes a mode and zeros: hypothesis finds the small one [0, 1] (or [1, 0])
    found = find(tls.spectra(dynamic_range=10.0), lambda lam: lam.size >= 2 and np.any(lam == 0))
    assert sorted(found.tolist()) == [0.0, 1.0]
    # two modes within the range are kept as they are
    found = find(tls.spectra(dynamic_range=10.0), lambda lam: np.count_nonzero(lam) >= 2 and len(set(lam)) >= 3)
    assert np.count_nonzero(found) >= 2 and found[found > 0].min() >= found.max() / 10.0


@FEW
@given(tls.token_counts(), tls.token_counts(vocab=50, exponent=1.0, scales=[1000]),
       tls.token_counts(law="free", vocab=(3, 10), max_count=4))
def test_token_counts(zipf, fixed, free):
    for counts in (zipf, fixed, free):
        assert all(isinstance(c, int) and c >= 0 for c in counts) and sum(counts) > 0
    assert 3 <= len(zipf) <= 400 and 3 <= len(free) <= 10 and max(free) <= 4
    # s = 1, scale 1000: the counts are ⌊1000 / r⌋ for r = 1..50, shuffled
    assert sorted(fixed, reverse=True) == [1000 // r for r in range(1, 51)]


def test_token_counts_shrink_and_have_ties():
    assert sorted(find(tls.token_counts(law="free"), lambda c: True)) == [0, 0, 1]  # three types, one count
    zipf = find(tls.token_counts(), lambda c: len(set(c)) < len(c))  # ties in the tail are common
    assert len(set(zipf)) < len(zipf) and sum(zipf) > 0
