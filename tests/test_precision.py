"""The float32 option: ``precision=`` / ``--precision`` (float64 | float32), which backends honour it,
how an experiment declares it, and how a float32 run states its measured error against float64.

A toy experiment whose "simulation" is a float32 or float64 sum makes the bookkeeping checkable
without the cost of a real experiment; the real experiments' float32 verdicts are in
tests/test_float32_verdicts.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from transformer_limits.cli import main
from transformer_limits.errors import InputError
from transformer_limits.numeric.devices import choose_backend
from transformer_limits.numeric.kernel_family import ATTENTION, LAYER_ADJOINT, MLP_FIELD
from transformer_limits.numeric.precision import FLOAT32_BACKENDS, PRECISIONS, dtype_of, resolve_precision
from transformer_limits.verify import registry
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult, PrecisionError
from transformer_limits.verify.running import run_experiment
from transformer_limits.verify.verdicts import Check


def _simulate(precision: str) -> np.ndarray:
    """A "simulation" whose float32 result differs from float64 by rounding: partial sums of 1/k."""
    k = np.arange(1, 2001, dtype=dtype_of(precision))
    return np.cumsum(1 / k)[::100]


def _run(config: ExperimentConfig) -> ExperimentResult:
    y = _simulate(config.precision)
    check = Check("harmonic", "H_2000 > 8", 8.0, float(y[-1]), (float(y[-1]), float(y[-1])), bool(y[-1] > 8),
                  {"alpha": 0.01, "sides": "one-sided", "method": "exact"}, "", 1.0, "H_2000 <= 8 (exact)")
    result = ExperimentResult("precision-dummy", config.profile, checks=[check])
    result.data["dtype"] = str(y.dtype)
    return result


def _probe(config: ExperimentConfig) -> PrecisionError:
    return PrecisionError.between("the partial sums H_k", _simulate("float32"), _simulate("float64"))


def _experiment(precisions=("float64", "float32"), probe=_probe, run=_run, **declared) -> Experiment:
    return Experiment(name="precision-dummy", title="dummy", paper="A", claim="H_2000 > 8", derivations=(),
                      checks=("harmonic",), run=run, profiles=("full",), precisions=precisions,
                      precision_probe=probe, **declared)


# ------------------------------------------------------------------ values and errors
def test_precisions_and_their_dtypes():
    assert PRECISIONS == ("float64", "float32")
    assert dtype_of("float64") == np.float64 and dtype_of("float32") == np.float32
    assert FLOAT32_BACKENDS == ("numpy", "blas", "numba", "cupy")  # numba: its float32 sources


@pytest.mark.parametrize("bad", ["float16", "double", None, 32])
def test_an_unknown_precision_is_a_value_error_naming_precision(bad):
    with pytest.raises(ValueError, match="precision must be one of float64, float32"):
        resolve_precision(bad)
    with pytest.raises(ValueError, match="precision must be one of"):
        ExperimentConfig(precision=bad)


def test_float32_on_a_float64_only_backend_is_refused():
    assert resolve_precision("float32", "blas") == "float32"
    assert resolve_precision("float32", "numba") == "float32"  # the float32 numba sources
    with pytest.raises(ValueError, match="precision 'float32' is not available on backend 'numba-cuda-sim'"):
        resolve_precision("float32", "numba-cuda-sim")
    assert resolve_precision("float64", "numba-cuda-sim") == "float64"


def test_precision_error_is_the_max_abs_and_relative_difference():
    err = PrecisionError.between("y", np.array([1.0, 2.5, -4.0]), np.array([1.0, 2.0, -4.0]))
    assert err.max_abs == 0.5 and err.max_rel == 0.5 / 4.0
    assert PrecisionError.between("y", np.zeros(2), np.zeros(2)).max_rel == 0.0
    with pytest.raises(ValueError, match="same shape"):
        PrecisionError.between("y", np.zeros(2), np.zeros(3))


def test_an_experiment_declaring_float32_needs_a_probe():
    with pytest.raises(ValueError, match="declares float32 but no precision_probe"):
        _experiment(probe=None)
    with pytest.raises(ValueError, match="precisions must include float64"):
        _experiment(precisions=("float32",))


# ------------------------------------------------------------------ backends
@pytest.mark.parametrize("family, settings_backend", [
    (MLP_FIELD, "numba"), (ATTENTION, "numba"), (LAYER_ADJOINT, "numba"), (ATTENTION, "blas"), (MLP_FIELD, "numpy")])
def test_on_cpu_float32_keeps_the_settings_backend(family, settings_backend):
    """Every CPU backend computes in float32 (numba with its float32 sources): an experiment's tuned
    CPU backend runs its float32 run too."""
    c = choose_backend("cpu", family, cpu_backend=settings_backend, precision="float32")
    assert c.backend == settings_backend and not c.fallback and "float32" in c.reason
    assert choose_backend("cpu", family, cpu_backend=settings_backend).backend == settings_backend  # float64


def test_on_cuda_float32_runs_cupy_never_numba_cuda(fake_cuda):
    fake_cuda("numba-cuda", "cupy")
    assert choose_backend("cuda", MLP_FIELD, precision="float64").backend == "numba-cuda"
    c = choose_backend("cuda", MLP_FIELD, cpu_backend="numba", precision="float32")
    assert c.backend == "cupy" and "float32" in c.reason and not c.fallback
    fake_cuda("numba-cuda")
    c = choose_backend("cuda", MLP_FIELD, cpu_backend="numba", precision="float32")
    assert c.backend == "numba" and c.fallback and "numba-cuda: float64 only" in c.reason


# ------------------------------------------------------------------ run_experiment
def test_a_float32_run_records_its_measured_error_against_float64():
    result = run_experiment(_experiment(), ExperimentConfig(), precision="float32")
    assert result.passed and result.data["dtype"] == "float32"
    prov = result.provenance
    assert prov["precision"] == "float32" and "precision_requested" not in prov
    want = _probe(ExperimentConfig())
    assert prov["precision_error"] == want.to_dict()
    assert 1e-8 < want.max_rel < 1e-4  # float32 rounding of a sum of 2000 terms: visible, small
    assert any(n.startswith("float32: the partial sums H_k differs from the float64 run by at most")
               for n in result.notes)


def test_float64_is_the_default_and_runs_no_probe():
    calls = []
    result = run_experiment(_experiment(probe=lambda c: calls.append(c) or _probe(c)), ExperimentConfig())
    assert result.data["dtype"] == "float64" and result.provenance["precision"] == "float64"
    assert calls == [] and "precision_error" not in result.provenance


def test_an_experiment_without_float32_runs_in_float64_and_says_so():
    result = run_experiment(_experiment(precisions=("float64",), probe=None), ExperimentConfig(precision="float32"))
    assert result.passed and result.data["dtype"] == "float64"
    assert result.provenance["precision"] == "float64"
    assert result.provenance["precision_requested"] == "float32"
    assert any("runs in float64 only" in n for n in result.notes)


def test_a_crashing_probe_is_an_error_never_a_verdict():
    def probe(config):
        raise RuntimeError("probe broke")

    result = run_experiment(_experiment(probe=probe), ExperimentConfig(precision="float32"))
    assert result.status == "error" and "precision probe: RuntimeError: probe broke" in result.error


def test_a_bad_precision_argument_is_input_error_and_runs_nothing():
    seen = []
    with pytest.raises(InputError, match="precision must be one of"):
        run_experiment(_experiment(run=lambda c: seen.append(c) or _run(c)), ExperimentConfig(), precision="half")
    assert seen == []


def test_the_run_targets_backends_follow_the_runs_precision():
    def run(config):
        assert config.target.backend(LAYER_ADJOINT) == "numba"  # float32 too: numba's float32 kernels
        assert config.target.precision == config.precision
        return _run(config)

    declared = dict(kernels={"backend": LAYER_ADJOINT}, settings={"quick": {"backend": "numba"}})
    result = run_experiment(_experiment(run=run, **declared), ExperimentConfig(precision="float64"))
    assert result.provenance["backends"]["attention-adjoint"]["backend"] == "numba"
    result = run_experiment(_experiment(run=run, **declared), ExperimentConfig(precision="float32"))
    assert result.provenance["backends"]["attention-adjoint"]["backend"] == "numba"
    assert "float32" in result.provenance["backends"]["attention-adjoint"]["reason"]


# ------------------------------------------------------------------ CLI
@pytest.fixture
def dummy(monkeypatch):
    registry.list_experiments()
    monkeypatch.setitem(registry._REGISTRY, "precision-dummy", _experiment())


def test_cli_precision_reaches_the_run_the_results_and_the_index(dummy, capsys, tmp_path):
    assert main(["verify", "precision-dummy", "--precision", "float32", "--format", "json", "--no-progress"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["provenance"]["precision"] == "float32"
    assert payload["provenance"]["precision_error"]["quantity"] == "the partial sums H_k"
    assert main(["verify", "precision-dummy", "--precision", "float32", "--no-progress"]) == 0
    assert ", float32" in capsys.readouterr().out
    out = tmp_path / "r"
    assert main(["report", "--out", str(out), "--only", "precision-dummy", "--precision", "float32",
                 "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["experiments"][0]["precision"] == "float32"
    assert summary["experiments"][0]["precision_error"]["max_rel"] > 0
    assert "precision-dummy ran in float32: the partial sums H_k within" in (out / "index.md").read_text()


def test_cli_unknown_precision_exits_2(dummy, capsys):
    assert main(["verify", "precision-dummy", "--precision", "float16"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_float32_enters_the_config_hash_and_float64_hashes_are_unchanged():
    import hashlib

    from transformer_limits.verify.provenance import config_hash
    from transformer_limits.verify.sweeps import canonical_json

    old = hashlib.sha256(canonical_json({"experiment": "x", "config": {"profile": "quick", "seed": 3}})
                         .encode()).hexdigest()  # the hash before the option existed
    assert config_hash("x", ExperimentConfig(seed=3)) == old
    assert config_hash("x", ExperimentConfig(seed=3, precision="float32")) != old
