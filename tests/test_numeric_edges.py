"""Numbers at the edges: attention inputs whose products overflow float64 are refused (never a silent
NaN), derivation parameters have validated ranges, and a derivation check that cannot be decided at
the working precision says "not evaluated" (or is decided at a higher precision) instead of a false
alarm or a false "consistent"."""

from __future__ import annotations

import importlib
import json
import re
import warnings

import numpy as np
import pytest

import transformer_limits as tl
from transformer_limits.cli import main
from transformer_limits.numeric.attention import reference as ref
from transformer_limits.numeric.attention.kernels import attention_kernels
from transformer_limits.numeric.backends import backend_status
from transformer_limits.symbolic import lyapunov as lyap
from transformer_limits.symbolic.derivation import CHECK_STATES, CheckLine, check_state

derivation_module = importlib.import_module("transformer_limits.symbolic.derivation")

CPU_BACKENDS = [s.name for s in backend_status() if s.available and s.name in ("numpy", "numba")]
METHODS = ("attention", "jacobian", "lions_derivative", "flat_derivative")
REFERENCES = {"attention": ref.attention_reference, "jacobian": ref.jacobian_reference,
              "lions_derivative": ref.lions_reference, "flat_derivative": ref.flat_reference}


def _one_line_exit_2(capsys, argv, pattern):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("transformer-limits: error:") and "Traceback" not in err
    assert pattern in err, err


# ------------------------------------------------------------------ attention at 1e308
@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_attention_at_1e308_is_refused_not_nan(backend):
    X = np.full((3, 2), 1e308)
    Q = K = V = np.eye(2)
    kern = attention_kernels(2, 2, 2, backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow RuntimeWarning either: refused before computing
        for method in METHODS:
            with pytest.raises(ValueError, match=r"^inputs X, Y, Q, K .*too large"):
                getattr(kern, method)(X, X, Q, K, V)
            with pytest.raises(ValueError, match=r"^inputs X, Y, Q, K .*too large"):
                REFERENCES[method](X, X, Q, K, V)
    # non-finite inputs were and stay refused by name
    with pytest.raises(ValueError, match="^Q contains non-finite"):
        kern.attention(np.ones((3, 2)), np.ones((3, 2)), np.full((2, 2), np.nan), K, V)
    with pytest.raises(ValueError, match="^V contains non-finite"):
        ref.attention_reference(np.ones((3, 2)), np.ones((3, 2)), Q, K, np.full((2, 2), np.inf))


def test_magnitude_bounds_are_bounds():
    # written from the definitions: the largest |logit| and |V y| of random inputs never exceed the
    # a-priori bounds, and the logit bound is attained up to the factor d_k d^2 by all-equal inputs
    rng = np.random.default_rng(3)
    for _ in range(50):
        N, M, d, d_k, d_v = rng.integers(1, 5, size=5)
        X, Y = rng.normal(size=(N, d)) * 10.0 ** rng.uniform(-3, 3), rng.normal(size=(M, d))
        Q, K, V = (rng.normal(size=s) * 10.0 ** rng.uniform(-3, 3) for s in ((d_k, d), (d_k, d), (d_v, d)))
        w = np.full(M, 1.0 / M)
        b = ref.magnitude_bounds(X, Y, Q, K, V, w)
        logits = (X @ Q.T) @ (Y @ K.T).T
        assert np.log10(np.abs(logits).max()) <= b["logits"] + 1e-12
        assert np.log10(np.abs(Y @ V.T).max()) <= b["values"] + 1e-12
    ones = np.ones((2, 3))
    b = ref.magnitude_bounds(ones, ones, np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3)), np.full(2, 0.5))
    assert b["logits"] == pytest.approx(np.log10(2 * 3 * 3))  # |<Qx, Ky>| = d_k d^2 exactly here (the largest term)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_accepted_inputs_give_finite_results_that_match_the_reference(backend):
    # Log-uniform magnitudes from 1e-200 to 1e200 per argument: many cases are refused;
    # every accepted case must be finite on every output and agree with the einsum reference.
    rng = np.random.default_rng(11)
    kern = attention_kernels(2, 2, 2, backend)
    accepted = refused = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow/invalid RuntimeWarning fails the test
        for _ in range(60):
            X, Y, Q, K, V = (rng.normal(size=(3, 2)) * 10.0 ** rng.uniform(-200, 200) if i < 2
                             else rng.normal(size=(2, 2)) * 10.0 ** rng.uniform(-200, 200) for i in range(5))
            for method in METHODS:
                try:
                    got = getattr(kern, method)(X, Y, Q, K, V)
                except ValueError as exc:
                    assert "too large" in str(exc)
                    with pytest.raises(ValueError, match="too large"):  # same contract in the reference
                        REFERENCES[method](X, Y, Q, K, V)
                    refused += 1
                    continue
                accepted += 1
                want = REFERENCES[method](X, Y, Q, K, V)
                assert np.all(np.isfinite(got)), method
                # covariances cancel: compare on the scale of the terms, 10**bound (float64 eps ~ 1e-16)
                b = ref.magnitude_bounds(X, Y, Q, K, V, np.full(3, 1 / 3))
                scale = 10.0 ** b["values" if method == "attention" else "derivatives"]
                assert np.allclose(got, want, rtol=1e-7, atol=1e-12 * scale), method
    assert accepted > 40 and refused > 40  # both sides of the contract were exercised


def test_large_but_safe_inputs_are_accepted():
    # logits up to the stated 1e15 are fine (max-shifted softmax), and large values too: the
    # bounds are not needlessly strict
    X = np.array([[1e7, 0.0], [0.0, 1e7]])
    assert ref.magnitude_bounds(X, X, np.eye(2), np.eye(2), np.eye(2), np.full(2, 0.5))["logits"] <= 15
    Q = K = np.eye(2)
    V = np.eye(2)
    A = attention_kernels(2, 2, 2, "numpy").attention(X, X, Q, K, V)
    assert np.all(np.isfinite(A))
    np.testing.assert_allclose(A, X, rtol=1e-12)  # each query attends to itself only
    Y = np.array([[1.0, 0.0], [0.0, 1.0]])
    A = attention_kernels(2, 2, 2, "numpy").attention(Y, Y, np.eye(2), np.eye(2), 1e290 * np.eye(2))
    assert np.all(np.isfinite(A)) and A.max() > 1e289


# ------------------------------------------------------------------ derivation parameters and checks
def test_check_line_states():
    assert CHECK_STATES == ("passed", "failed", "not evaluated")
    line = CheckLine("x: not evaluated (overflow)", "not evaluated")
    assert line == "x: not evaluated (overflow)" and check_state(line) == "not evaluated"
    assert check_state("a proof") == "passed"
    with pytest.raises(ValueError, match="state must be one of"):
        CheckLine("x", "unknown")


@pytest.mark.parametrize("param, pattern", [
    ("sigma_u=1e308", "'sigma_u' must be <= 10000.0"),
    ("sigma_w=1e5", "'sigma_w' must be <= 10000.0"),
    ("sigma_u=inf", "'sigma_u' must be float"),
    ("sigma_u=nan", "'sigma_u' must be float"),
    ("d=100000", "'d' must be <= 1024"),
])
def test_lyapunov_parameter_ranges(capsys, param, pattern):
    _one_line_exit_2(capsys, ["derive", "lyapunov", "--param", param], pattern)
    with pytest.raises(ValueError, match=pattern.split(" must")[0]):
        key, value = param.split("=")
        tl.derivation("lyapunov", **{key: value})


def test_lyapunov_sigma_1000_is_decided_at_adequate_precision(capsys):
    # Before: c_0 ≈ σ_U²/2 = 5e5 put the tail c_n ≈ 1e-10 under the fit's floor 1e-15·max c_n at 30
    # digits, the tail estimate was 0 and the identity was reported INCONSISTENT (a false alarm;
    # n_max >= 32 here, e.g. the default 48).
    assert main(["derive", "lyapunov", "--param", "sigma_u=1000", "--param", "n_max=32", "--format", "json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    line = next(c for c in payload["checks"] if c.startswith("Gegenbauer"))
    assert "consistent" in line and "INCONSISTENT" not in line and "evaluated at" in line
    assert set(payload["check_states"]) == {"passed"}
    v = payload["values"]
    assert v["gegenbauer_identity_holds"] is True
    # Proposition 1.5 (ReLU): λ̄ = 1/d − (σ_U² + 2σ_W²)(d − 3)/2 at d = 5, σ_U = 1000, σ_W = 0.1
    assert v["lambda_bar"] == pytest.approx(1 / 5 - (1e6 + 0.02), rel=1e-12)
    assert all(np.isfinite(v[k]) for k in ("k1", "lambda_1", "lambda_bar", "lambda_bar_prime"))


def test_lyapunov_check_not_evaluated_when_precision_is_capped(monkeypatch, capsys):
    # With the precision cap at the working 30 digits the σ_U = 1000 tail cannot be resolved: the
    # check must say "not evaluated" (not "INCONSISTENT", not "consistent").
    monkeypatch.setattr(lyap, "MAX_DIGITS", 30)
    d = tl.derivation("lyapunov", sigma_u=1000, n_max=36)
    line = next(c for c in d.checks if c.startswith("Gegenbauer"))
    assert check_state(line) == "not evaluated" and "not evaluated" in line
    assert re.search(r"needs \d+ > 30 digits", line), line
    assert d.values["gegenbauer_identity_holds"] is None
    assert d.to_json()["values"]["gegenbauer_identity_holds"] is None
    assert d.to_text().splitlines()[-1] != "checks: 9 passed, 1 not evaluated"  # values follow
    assert "checks: 9 passed, 1 not evaluated" in d.to_text()
    assert "**checks: 9 passed, 1 not evaluated**" in d.to_markdown()


@pytest.mark.parametrize("sigma_u, n_max", [(0.1, 22), (1000.0, 33)])
def test_a_wrong_lambda_bar_still_fails_the_identity(monkeypatch, sigma_u, n_max):
    # deliberately wrong model: λ̄ from Draft B's k'(1) without the 1/d (factor d on k'(1)); the
    # identity must be reported failed — raising the precision must not turn it into "not evaluated"
    def wrong(k1, dk1, d):
        return (d - 3) * dk1 / 2 - (d - 1) * k1 / 2, (d - 1) * d * dk1 - (d - 3) * k1

    lyap._symbolic_checks()  # SymPy's proofs use the right exponents (cached before the swap; the test
    # failed when run alone)
    monkeypatch.setattr(lyap, "lyapunov_exponents", wrong)
    monkeypatch.setattr(derivation_module, "_CACHE", {})  # never the right λ̄'s cached derivation
    d = tl.derivation("lyapunov", sigma_u=sigma_u, n_max=n_max)
    line = next(c for c in d.checks if c.startswith("Gegenbauer"))
    assert check_state(line) == "failed" and "INCONSISTENT" in line
    assert d.values["gegenbauer_identity_holds"] is False
    assert "checks: 9 passed, 1 failed" in d.to_text()


def test_lyapunov_vacuous_tolerance_is_not_evaluated_not_consistent():
    # tanh at σ_U = 10: the c_n error bound (~7e2) dwarfs λ̄ ≈ −1.9, so |residual − tail| ≤ 10·error
    # holds for any λ̄ whatsoever — before, this was reported "consistent" (a false pass)
    d = tl.derivation("lyapunov", activation="tanh", sigma_u=10, n_max=12)
    line = next(c for c in d.checks if c.startswith("Gegenbauer"))
    assert check_state(line) == "not evaluated" and "too inexact" in line and "consistent" not in line
    assert d.values["gegenbauer_identity_holds"] is None
    assert np.isfinite(d.values["lambda_bar"])  # the exponents themselves are still reported
    # the default tanh setting keeps a meaningful tolerance and passes
    ok = tl.derivation("lyapunov", activation="tanh", n_max=24)
    assert check_state(next(c for c in ok.checks if c.startswith("Gegenbauer"))) == "passed"
