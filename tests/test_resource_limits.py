"""Stated resource limits (transformer_limits.resource_limits): bootstrap sizes, memory estimates and
generated-kernel dimensions are checked up front, before anything large is allocated or generated."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from transformer_limits import resource_limits as rl
from transformer_limits.cli import main
from transformer_limits.verify.stats.width_scaling import bootstrap_slopes


def _one_line_exit_2(capsys, argv, pattern):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("transformer-limits: error:") and "Traceback" not in err
    assert pattern in err, err
    return err


# ------------------------------------------------------------------ bootstrap and memory
def test_check_bootstrap_limits_and_names_the_argument():
    assert rl.check_bootstrap(0) == 0
    assert rl.check_bootstrap(rl.MAX_BOOTSTRAP_REPLICATES) == rl.MAX_BOOTSTRAP_REPLICATES  # the cap itself
    with pytest.raises(ValueError, match=r"^n_boot must be <= 1000000"):
        rl.check_bootstrap(rl.MAX_BOOTSTRAP_REPLICATES + 1, name="n_boot")
    with pytest.raises(ValueError, match="n_bootstrap must be >= 0"):
        rl.check_bootstrap(-1)
    with pytest.raises(ValueError, match="n_bootstrap must be an integer"):
        rl.check_bootstrap(2.5)
    with pytest.raises(ValueError, match="n_bootstrap must be an integer"):
        rl.check_bootstrap(True)
    # memory: 10^6 resamples of 26 points fit 2 GiB (80 bytes per cell), 27 points do not
    rl.check_bootstrap(10**6, 26)
    with pytest.raises(ValueError, match=r"n_bootstrap=1000000 on 27 points would need about 2\.0 GiB"):
        rl.check_bootstrap(10**6, 27)


def test_check_memory_message_and_nan():
    with pytest.raises(ValueError) as info:
        rl.check_memory(3 * 2**40, "X with 10^6 rows")
    msg = str(info.value)
    assert "\n" not in msg and "3.0 TiB" in msg and "2.0 GiB budget" in msg and msg.startswith("X with")
    with pytest.raises(ValueError):
        rl.check_memory(float("nan"), "x")
    rl.check_memory(rl.MEMORY_BUDGET_BYTES, "x")  # the budget itself is allowed


@pytest.mark.parametrize("method", ["residual", "pairs"])
def test_bootstrap_memory_estimate_bounds_the_measured_peak(method):
    # tracemalloc sees NumPy's data buffers; the estimate must be an upper bound (safe) and not
    # wildly loose (within a factor 4 of the measured peak: 8.2 cells for pairs, 4.2 for residual).
    B, n = 20_000, 12
    rng = np.random.default_rng(0)
    lx = np.log(np.geomspace(64, 4096, n))
    ly = 0.7 * lx + rng.normal(0, 0.1, n)
    tracemalloc.start()
    try:
        bootstrap_slopes(lx, ly, n_bootstrap=B, seed=1, method=method)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    estimate = rl.bootstrap_memory_bytes(B, n)
    assert estimate / 4 <= peak <= estimate, (peak / (B * n * 8), estimate)


def test_cli_bootstrap_over_the_cap_is_refused_before_reading(capsys, tmp_path):
    # the file does not exist: the count is checked first, so the message is about --bootstrap
    _one_line_exit_2(capsys, ["spectral", "fit", str(tmp_path / "none.csv"), "--bootstrap", "1000000000"],
                     "--bootstrap must be <= 1000000")


def test_cli_bootstrap_memory_estimate_refuses_before_fitting(capsys, tmp_path, monkeypatch):
    rows = ["optimizer,stratum,metric,width,value"] + [f"A,G,soft,{w},{w ** 0.5:.6f}" for w in range(64, 64 + 40)]
    csv = tmp_path / "points.csv"
    csv.write_text("\n".join(rows) + "\n")
    # 20000 resamples x 40 points x 80 B = 61 MiB > a 1 MiB budget (a stand-in for 10^6 x 40 > 2 GiB)
    monkeypatch.setattr(rl, "MEMORY_BUDGET_BYTES", 2**20)

    def no_fit(*args, **kwargs):
        raise AssertionError("fit_points was called although the bootstrap does not fit the budget")

    monkeypatch.setattr("transformer_limits.verify.scaling_fit.fit_points", no_fit)
    err = _one_line_exit_2(capsys, ["spectral", "fit", str(csv), "--bootstrap", "20000"], "memory")
    assert "--bootstrap=20000 on 40 points" in err and "1.0 MiB budget" in err
    monkeypatch.undo()
    assert main(["spectral", "fit", str(csv), "--bootstrap", "200", "--format", "json"]) == 0
    capsys.readouterr()


def test_cli_help_states_the_limits(capsys):
    with pytest.raises(SystemExit):
        main(["spectral", "fit", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "at most 1000000" in out and "2.0 GiB" in out


# ------------------------------------------------------------------ generated-kernel dimensions
def _no_codegen(monkeypatch):
    """Make every kernel generator fail loudly: the caps must refuse before generating anything."""
    def boom(*args, **kwargs):
        raise AssertionError("code generation started for a dimension over the cap")

    monkeypatch.setattr("transformer_limits.numeric.kernel_family.KernelFamily.generate", boom)
    monkeypatch.setattr("transformer_limits.kernel_cache.lookup_source", lambda spec: None)


def test_check_kernel_dimensions():
    cap = rl.MAX_KERNEL_DIMENSION
    assert rl.check_kernel_dimensions(d=cap, d_k=1, d_v=np.int64(cap)) == (cap, 1, cap)
    with pytest.raises(ValueError, match=rf"^d_k must be <= {cap}"):
        rl.check_kernel_dimensions(d=2, d_k=cap + 1, d_v=2)
    for bad in (0, -3, 2.0, True, "4"):
        with pytest.raises(ValueError, match="d_v must be a positive integer"):
            rl.check_kernel_dimensions(d_v=bad)


@pytest.mark.parametrize("dims, name", [((10**6, 2, 2), "d"), ((2, rl.MAX_KERNEL_DIMENSION + 1, 2), "d_k"),
                                        ((2, 2, 10**9), "d_v")])
def test_attention_kernels_refuse_large_dimensions_before_generating(monkeypatch, dims, name):
    from transformer_limits.numeric.attention.kernels import AttentionKernels

    _no_codegen(monkeypatch)
    for backend in ("numpy", "numba"):
        with pytest.raises(ValueError, match=rf"^{name} must be <= {rl.MAX_KERNEL_DIMENSION}"):
            AttentionKernels(*dims, backend=backend)


def test_layer_and_jet_kernels_refuse_large_dimensions_before_generating(monkeypatch):
    from transformer_limits.numeric.attention.layer import AttentionLayer
    from transformer_limits.numeric.attention.flow_taylor import _jet_module, random_flow_instance

    _no_codegen(monkeypatch)
    with pytest.raises(ValueError, match="^d must be <= "):
        AttentionLayer(10**6, 2, 2, backend="numba")
    with pytest.raises(ValueError, match="^d_v must be <= "):
        _jet_module(2, 2, 10**6)
    with pytest.raises(ValueError, match="^d must be <= "):  # before allocating (H, d_k, 10^9) arrays
        random_flow_instance(np.random.default_rng(0), d=10**9)
    # the BLAS layer generates nothing: any size is fine (adamw-box drifts at d = 256)
    AttentionLayer(256, 4, 4, backend="blas")


def test_info_and_derive_list_state_the_limits(capsys):
    assert main(["info", "--format", "json"]) == 0
    limits = json.loads(capsys.readouterr().out)["limits"]
    assert limits == {"max_bootstrap_replicates": rl.MAX_BOOTSTRAP_REPLICATES,
                      "memory_budget_bytes": rl.MEMORY_BUDGET_BYTES,
                      "max_kernel_dimension": rl.MAX_KERNEL_DIMENSION}
    assert main(["derive", "--list", "--format", "json"]) == 0
    specs = {s["name"]: {p["name"]: p for p in s["params"]} for s in json.loads(capsys.readouterr().out)}
    assert specs["lyapunov"]["sigma_u"]["high"] == 1e4 and specs["lyapunov"]["sigma_u"]["low"] == 0
    assert specs["attention"]["d"]["high"] == 8


def test_pairwise_outputs_are_estimated_before_allocation(monkeypatch):
    from transformer_limits.numeric.attention.kernels import attention_kernels
    from transformer_limits.numeric.sphere.mlp_field import mlp_field_kernels

    monkeypatch.setattr(rl, "MEMORY_BUDGET_BYTES", 2**20)  # 1 MiB stands in for 2 GiB
    X = np.zeros((200, 2))
    kern = attention_kernels(2, 2, 2, "numpy")
    # (200, 200, 2, 2) float64 = 2.4 MiB (x3 temporaries) > 1 MiB; the (200, 2) attention is fine
    with pytest.raises(ValueError, match=r"^X, Y with 200 x 200 rows \(lions derivative"):
        kern.lions_derivative(X, X, np.eye(2), np.eye(2), np.eye(2))
    assert kern.attention(X, X, np.eye(2), np.eye(2), np.eye(2)).shape == (200, 2)
    Z = np.zeros((400, 3))
    Z[:, 0] = 1.0
    with pytest.raises(ValueError, match=r"^X with 400 rows \(kernel matrix 400 x 400\)"):
        mlp_field_kernels("relu", "numpy").kernel_matrix(Z, 0.1, 0.1)
    assert mlp_field_kernels("relu", "numpy").kernel_matrix(Z[:100], 0.1, 0.1).shape == (100, 100)
