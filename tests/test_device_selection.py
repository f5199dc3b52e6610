"""Device selection: ``device=`` / ``--device`` (cpu | cuda | auto), the backend each kernel family runs on
a device, and how the choice reaches experiments, provenance, the report index and ``info``.

This machine may have no GPU (the tests run with Numba's CUDA simulator, which does not count as a
device): a usable CUDA backend is faked by replacing the status probes.
"""

from __future__ import annotations

import json

import pytest

from transformer_limits.cli import main
from transformer_limits.errors import InputError
from transformer_limits.numeric import backends
from transformer_limits.numeric import devices
from transformer_limits.numeric.devices import (DEVICES, RunTarget, backend_for, choose_backend, cuda_backends,
                                                resolve_device)
from transformer_limits.numeric.flavours import CUDA_C, PYTHON_NUMPY
from transformer_limits.numeric.kernel_family import ATTENTION, FLOW_TAYLOR_JET, LAYER_ADJOINT, KernelFamily
from transformer_limits.verify import registry
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult
from transformer_limits.verify.running import run_experiment
from transformer_limits.verify.verdicts import Check

#: a family with only NumPy and CUDA C sources (no Numba flavour): cpu -> numpy, cuda -> cupy
NUMPY_AND_CUDA_C = KernelFamily("test-numpy-cuda-c", "the test kernels", ("d",), (PYTHON_NUMPY, CUDA_C),
                                "nowhere:nothing")


def _cuda_unusable() -> bool:
    return not any(b.available for b in cuda_backends())


needs_no_gpu = pytest.mark.skipif(not _cuda_unusable(), reason="a CUDA backend is usable here")


# ---------------------------------------------------------------------------------------------- devices


def test_the_cuda_backends_are_the_registry_entries_on_a_cuda_device():
    assert {b.name for b in cuda_backends()} == {"numba-cuda", "cupy"}  # the simulator runs on the CPU
    assert DEVICES == ("cpu", "cuda", "auto")


def test_cpu_is_the_default_and_always_usable():
    choice = resolve_device()
    assert (choice.device, choice.requested) == ("cpu", "cpu") and choice.reason


@pytest.mark.parametrize("bad", ["gpu", "CUDA", "", None, 0])
def test_an_unknown_device_is_a_value_error_naming_device(bad):
    with pytest.raises(ValueError, match="device must be one of cpu, cuda, auto"):
        resolve_device(bad)
    with pytest.raises(ValueError, match="device"):
        ExperimentConfig(device=bad)


@needs_no_gpu
def test_cuda_without_a_usable_backend_is_one_line_with_every_probe_reason():
    with pytest.raises(ValueError) as info:
        resolve_device("cuda")
    message = str(info.value)
    assert "\n" not in message and "device 'cuda'" in message
    for b in cuda_backends():
        assert f"{b.name}: {b.reason}" in message
    auto = resolve_device("auto")
    assert auto.device == "cpu" and "no usable CUDA backend" in auto.reason
    assert all(b.reason in auto.reason for b in cuda_backends())


@pytest.mark.parametrize("usable", [("numba-cuda",), ("cupy",), ("numba-cuda", "cupy")])
def test_any_usable_cuda_backend_makes_cuda_usable_and_auto_pick_it(fake_cuda, usable):
    fake_cuda(*usable)
    assert resolve_device("cuda").device == "cuda"
    auto = resolve_device("auto")
    assert auto.device == "cuda" and all(f"fake GPU for {n}" in auto.reason for n in usable)


# ---------------------------------------------------------------------------------- backend per family


@pytest.mark.parametrize("family, cpu", [(ATTENTION, "numba"), (LAYER_ADJOINT, "numba"), (FLOW_TAYLOR_JET, "numba"),
                                         (NUMPY_AND_CUDA_C, "numpy")])
def test_on_cpu_a_family_runs_numba_where_it_has_it_else_numpy(family, cpu):
    assert backend_for("cpu", family) == cpu
    choice = choose_backend("cpu", family)
    assert choice.device == "cpu" and not choice.fallback and choice.family == family.name


@pytest.mark.parametrize("usable, family, expected, fallback", [
    (("numba-cuda", "cupy"), ATTENTION, "numba-cuda", False),   # python-cuda first
    (("cupy",), ATTENTION, "cupy", False),                      # else cuda-c
    (("numba-cuda",), NUMPY_AND_CUDA_C, "numpy", True),         # no python-cuda, cupy unusable
    (("numba-cuda", "cupy"), NUMPY_AND_CUDA_C, "cupy", False),
    (("numba-cuda", "cupy"), LAYER_ADJOINT, "numba-cuda", False),
    (("cupy",), LAYER_ADJOINT, "cupy", False),
    (("numba-cuda", "cupy"), FLOW_TAYLOR_JET, "numba-cuda", False),
])
def test_on_cuda_a_family_runs_its_gpu_flavour_else_the_cpu_and_says_so(fake_cuda, usable, family, expected,
                                                                        fallback):
    fake_cuda(*usable)
    choice = choose_backend("cuda", family)
    assert (choice.backend, choice.fallback, choice.device) == (expected, fallback, "cuda")
    assert backend_for("auto", family) == expected
    if fallback:
        assert "on the CPU" in choice.reason and family.title in choice.reason
    else:
        assert backends.REGISTRY[expected].device == "cuda"


def test_a_family_is_named_or_given_and_cuda_without_gpu_raises(fake_cuda):
    assert backend_for("cpu", "attention-adjoint") == "numba"
    with pytest.raises(ValueError, match="unknown kernel family 'nope'"):
        backend_for("cpu", "nope")
    fake_cuda()
    with pytest.raises(ValueError, match="device 'cuda'"):
        backend_for("cuda", ATTENTION)


# ------------------------------------------------------------------------------------------ experiments


def _experiment(run, name="device-dummy", **declared) -> Experiment:
    return Experiment(name=name, title="device dummy", paper="A", claim="1 + 1 = 2", derivations=(), **declared,
                      checks=("dummy_check",), run=run, profiles=("full",))


def _passing(config: ExperimentConfig) -> ExperimentResult:
    check = Check("dummy_check", "1 + 1 = 2", 2.0, 2.0, (1.9, 2.1), True,
                  {"alpha": 0.01, "sides": "two-sided", "method": "exact"}, "", 1.0, "1 + 1 = 3 (exact)")
    return ExperimentResult("device-dummy", config.profile, checks=[check])


def test_run_experiment_resolves_the_device_before_the_run_and_records_it():
    seen: list[ExperimentConfig] = []
    exp = _experiment(lambda config: seen.append(config) or _passing(config))
    result = run_experiment(exp, ExperimentConfig(device="auto"))
    expected = resolve_device("auto")
    assert seen[0].device == expected.device  # run() sees cpu or cuda, never auto
    assert result.provenance["device"] == expected.device
    assert result.provenance["device_reason"] == expected.reason
    result = run_experiment(exp, ExperimentConfig(), device="cpu")
    assert seen[1].device == "cpu" and result.provenance["device"] == "cpu" and result.passed


@needs_no_gpu
def test_run_experiment_on_cuda_without_gpu_is_input_error_and_runs_nothing():
    seen: list[ExperimentConfig] = []
    exp = _experiment(lambda config: seen.append(config) or _passing(config))
    with pytest.raises(InputError, match="device 'cuda'"):
        run_experiment(exp, ExperimentConfig(), device="cuda")
    with pytest.raises(InputError, match="device must be one of"):
        run_experiment(exp, ExperimentConfig(), device="gpu")
    assert seen == []


#: a dummy's kernel families, by the settings key naming each one's CPU backend
KERNELS = {"backend": LAYER_ADJOINT, "attention_backend": ATTENTION, "other_backend": NUMPY_AND_CUDA_C}
SETTINGS = {"full": {"backend": "numba", "attention_backend": "blas", "other_backend": "numpy"}}


def test_the_target_keeps_the_settings_backends_on_cpu_and_records_every_declared_family():
    picked = {}

    def run(config):
        picked.update({f.name: config.target.backend(f) for f in KERNELS.values()})
        with pytest.raises(ValueError, match="family 'flow-taylor-jet' is not part of this run target"):
            config.target.backend(FLOW_TAYLOR_JET)  # an undeclared family is refused, not resolved on the side
        return _passing(config)

    result = run_experiment(_experiment(run, kernels=KERNELS, settings=SETTINGS), ExperimentConfig(profile="full"))
    assert picked == {"attention-adjoint": "numba", "attention": "blas", "test-numpy-cuda-c": "numpy"}
    assert {k: v["backend"] for k, v in result.provenance["backends"].items()} == picked
    assert not any(n.startswith("device") for n in result.notes)
    with pytest.raises(ValueError, match="cpu_backend must be a CPU backend"):
        RunTarget.resolve("cpu").with_kernels({ATTENTION: "cupy"})
    with pytest.raises(ValueError, match="kernels names the setting 'backend'"):
        _experiment(run, kernels={"backend": ATTENTION}, settings={"full": {}})


def test_on_cuda_the_target_takes_the_gpu_flavour_or_notes_the_cpu_fallback(fake_cuda):
    fake_cuda("numba-cuda")
    picked = {}

    def run(config):
        picked.update({f.name: config.target.backend(f) for f in KERNELS.values()})
        return _passing(config)

    result = run_experiment(_experiment(run, kernels=KERNELS, settings=SETTINGS),
                            ExperimentConfig(profile="full", device="cuda"))
    assert picked == {"attention-adjoint": "numba-cuda", "attention": "numba-cuda", "test-numpy-cuda-c": "numpy"}
    assert result.provenance["device"] == "cuda"
    assert result.provenance["backends"]["attention"]["backend"] == "numba-cuda"
    notes = [n for n in result.notes if n.startswith("device cuda")]
    assert len(notes) == 1 and NUMPY_AND_CUDA_C.title in notes[0] and "on the CPU" in notes[0]


def test_a_run_resolves_its_device_once_and_passes_a_frozen_target_down(monkeypatch):
    """One resolve_device per run (the CLI's target is reused), a frozen, picklable target in the config
    (sweep workers get it with the settings, never resolve again)."""
    import dataclasses
    import pickle

    calls = []
    real = devices.resolve_device
    monkeypatch.setattr(devices, "resolve_device", lambda device="cpu": calls.append(device) or real(device))
    seen = []
    exp = _experiment(lambda config: seen.append(config) or _passing(config), kernels=KERNELS, settings=SETTINGS)
    run_experiment(exp, ExperimentConfig(profile="full", device="auto"))
    assert calls == ["auto"]
    target = RunTarget.resolve("cpu")
    assert len(calls) == 2
    run_experiment(exp, ExperimentConfig(profile="full", target=target))  # resolved by the caller: not again
    assert len(calls) == 2 and seen[-1].target.device == "cpu" and seen[-1].target.backend(ATTENTION) == "blas"
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen[-1].target.device = "cuda"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(seen[-1].target)) == seen[-1].target


def test_the_package_resolves_a_device_in_one_place():
    """resolve_device is called by RunTarget.resolve only (the issue's "one call site")."""
    import ast
    from pathlib import Path

    import transformer_limits

    root = Path(transformer_limits.__file__).parent
    sites = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "resolve_device":
                sites.append(f"{path.relative_to(root)}:{node.lineno}")
    assert len(sites) == 1 and sites[0].startswith("numeric/devices.py"), sites


class _Stop(Exception):
    pass


@pytest.mark.parametrize("module, sweep", [("propagation_of_chaos", "chaos_errors_sweep"),
                                           ("token_independence", "token_errors_sweep")])
@pytest.mark.parametrize("profile", ["quick", "full"])
def test_on_cpu_the_experiments_sweep_exactly_todays_settings(monkeypatch, module, sweep, profile):
    """Device cpu gives the settings' own backend, so the sweep (and its store keys) are today's."""
    import importlib

    mod = importlib.import_module(f"transformer_limits.verify.experiments.{module}")
    captured = {}

    def capture(config, s, **kwargs):
        captured.update(s)
        raise _Stop

    monkeypatch.setattr(mod, sweep, capture)
    with pytest.raises(_Stop):
        mod.run(ExperimentConfig(profile=profile))
    assert captured == dict(mod.SETTINGS[profile])


def test_on_cuda_the_experiments_use_the_device_backend_of_their_family(monkeypatch, fake_cuda):
    from transformer_limits.numeric.kernel_family import MLP_FIELD
    from transformer_limits.verify.experiments import propagation_of_chaos, token_independence

    fake_cuda("numba-cuda", "cupy")
    for mod, sweep, family in ((propagation_of_chaos, "chaos_errors_sweep", MLP_FIELD),
                               (token_independence, "token_errors_sweep", LAYER_ADJOINT)):
        captured = {}

        def capture(config, s, captured=captured, **kwargs):
            captured.update(s)
            raise _Stop

        monkeypatch.setattr(mod, sweep, capture)
        with pytest.raises(_Stop):
            mod.run(ExperimentConfig(device="cuda"))
        expected = choose_backend("cuda", family, cpu_backend=mod.SETTINGS["quick"]["backend"]).backend
        assert mod.KERNELS == {"backend": family}
        assert captured["backend"] == expected
        assert {k: v for k, v in captured.items() if k != "backend"} == \
            {k: v for k, v in mod.SETTINGS["quick"].items() if k != "backend"}


# -------------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def dummy(monkeypatch):
    """Register ``device-dummy`` (passing), recording the configs it runs under."""
    seen: list[ExperimentConfig] = []
    registry.list_experiments()  # discover the real ones first
    monkeypatch.setitem(registry._REGISTRY, "device-dummy",
                        _experiment(lambda config: seen.append(config) or _passing(config)))
    return seen


@needs_no_gpu
@pytest.mark.parametrize("command", ["verify", "report"])
def test_cli_device_cuda_without_gpu_exits_2_before_anything_and_writes_nothing(dummy, capsys, tmp_path, command):
    out = tmp_path / "out"
    argv = (["verify", "device-dummy", "--out", str(out)] if command == "verify"
            else ["report", "--out", str(out), "--only", "device-dummy"])
    assert main(argv + ["--device", "cuda", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--device cuda" in err and "\n" not in err
    assert dummy == [] and not out.exists()


def test_cli_unknown_device_exits_2(dummy, capsys):
    assert main(["verify", "device-dummy", "--device", "gpu"]) == 2
    assert "invalid choice" in capsys.readouterr().err and dummy == []


def test_cli_device_reaches_the_experiment_and_its_provenance(dummy, capsys, tmp_path):
    expected = resolve_device("auto")
    assert main(["verify", "device-dummy", "--device", "auto", "--format", "json", "--no-progress"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert dummy[-1].device == expected.device
    assert payload["provenance"]["device"] == expected.device
    assert payload["provenance"]["device_reason"] == expected.reason
    assert payload["provenance"]["config"]["device"] == "auto"  # what was asked
    assert main(["verify", "device-dummy", "--no-progress"]) == 0
    assert dummy[-1].device == "cpu"
    capsys.readouterr()
    out = tmp_path / "r"
    assert main(["report", "--out", str(out), "--only", "device-dummy", "--device", "cpu", "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["device"] == "cpu" and summary["device_reason"] == resolve_device("cpu").reason
    assert summary["experiments"][0]["device"] == "cpu"
    results = json.loads((out / "device-dummy" / "results.json").read_text())
    assert results["provenance"]["device"] == "cpu"


def test_info_says_which_device_auto_uses_and_why(capsys):
    expected = resolve_device("auto")
    assert main(["info"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("device: ")]
    assert len(lines) == 1 and lines[0].startswith(f"device: {expected.device} (why: {expected.reason})")


def test_info_json_has_the_device_and_its_reason(capsys):
    expected = resolve_device("auto")
    assert main(["info", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == {"device": expected.device, "reason": expected.reason}
