"""The prepared GPU check (benchmarks/gpu_check.sh) and the GPU benchmark (benchmarks/bench_gpu.py) on a
machine without a GPU: shell syntax, dry run, failure bookkeeping with a stand-in interpreter, and the
benchmark's quick CPU run, whose figures are checked against the unit definitions (pair-updates =
N^2 H L per pass, FLOPs = pair-updates x the per-pair count of docs/theory.md §A.2's forward pass)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
BENCH = ROOT / "benchmarks" / "bench_gpu.py"
STEPS = ("install", "info", "pytest", "bench", "report")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OUT" and not k.startswith("GPU_CHECK_")}
    env.update(extra)
    return env


def _run(args, cwd, env, timeout=120):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_gpu_check_is_valid_bash():
    r = _run(["bash", "-n", str(SCRIPT)], ROOT, _env())
    assert r.returncode == 0, r.stderr


def test_dry_run_prints_every_step_and_writes_nothing(tmp_path):
    before = sorted(p.name for p in (ROOT / "benchmarks").iterdir())
    out = tmp_path / "out"
    r = _run(["bash", str(SCRIPT), "--dry-run", "out"], tmp_path, _env())
    assert r.returncode == 0, r.stderr
    for step in STEPS:
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"[{step}] timeout "))
        assert f"{out}/{step}.log" in line  # a relative OUTDIR is resolved against the caller's folder
    assert "-m gpu" in r.stdout and "--device cuda" in r.stdout and "bench_gpu.py" in r.stdout
    assert "--json" in r.stdout and ".[gpu,test]" in r.stdout
    limits = [int(ln.split()[2].rstrip("s:")) for ln in r.stdout.splitlines() if " timeout " in ln]
    assert len(limits) == len(STEPS) and sum(limits) <= 8 * 60
    assert list(tmp_path.iterdir()) == []  # not even OUTDIR is made
    assert sorted(p.name for p in (ROOT / "benchmarks").iterdir()) == before


def test_out_from_environment(tmp_path):
    r = _run(["bash", str(SCRIPT), "--dry-run"], tmp_path, _env(OUT=str(tmp_path / "from-env")))
    assert r.returncode == 0 and f"{tmp_path}/from-env/bench.log" in r.stdout


def test_missing_out_is_a_one_line_error(tmp_path):
    r = _run(["bash", str(SCRIPT)], tmp_path, _env())
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and "set OUT or pass a folder" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_bad_arguments_are_a_one_line_error(tmp_path):
    r = _run(["bash", str(SCRIPT), "a", "b"], tmp_path, _env())
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_failed_and_timed_out_steps_are_recorded_and_the_rest_still_run(tmp_path):
    """A stand-in interpreter: the pytest step fails (exit 3), the info step outlives its limit."""
    fake = tmp_path / "fakepy"
    fake.write_text('#!/usr/bin/env bash\necho "fake $*"\ncase "$*" in\n  *"pytest -m gpu"*) exit 3 ;;\n'
                    '  *" info"*) sleep 30 ;;\n  *report*) mkdir -p "${@: -1}" && echo x > "${@: -1}/index.md" ;;\n'
                    'esac\nexit 0\n')
    fake.chmod(0o755)
    out = tmp_path / "out"
    r = _run(["bash", str(SCRIPT), str(out)], tmp_path, _env(PYTHON=str(fake), GPU_CHECK_T_INFO="1"))
    assert r.returncode == 1, r.stdout + r.stderr
    summary = (out / "summary.txt").read_text().splitlines()
    status = {ln.split()[0]: ln for ln in summary[1:-1]}
    assert list(status) == list(STEPS)
    assert "rc=3" in status["pytest"] and "FAILED" in status["pytest"]
    assert "TIMED OUT" in status["info"]
    assert all(" ok" in status[s] for s in ("install", "bench", "report"))
    assert summary[-1].startswith("FAILED: info pytest")
    assert "bench_gpu.py" in (out / "bench.log").read_text() and "--json" in (out / "bench.log").read_text()
    assert sorted(p.name for p in out.iterdir()) == sorted([f"{s}.log" for s in STEPS]
                                                          + ["summary.txt", "report.tar.gz"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fakepy", "out"]


@pytest.fixture(scope="module")
def numba_layer_compiled():
    """Compile (or load from Numba's cache) the numba layer kernels once, so that the benchmark's own
    run below measures the benchmark, not the first compilation."""
    from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map
    from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params

    X = sample_tokens(8, 8, seed=1)
    AttentionTransformer(8, 8, 8, backend="numba").loss_and_grad(
        X, init_params(2, 2, 8, 8, 8, seed=0), SquaredErrorLoss(target_map(X, seed=2)))


def test_bench_gpu_quick_runs_on_cpu(tmp_path, numba_layer_compiled):
    out = tmp_path / "bench.json"
    r = _run([sys.executable, str(BENCH), "--quick", "--json", str(out)], ROOT, _env(), timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(ln.startswith("# no GPU: ") and "numba-cuda" in ln and "cupy" in ln for ln in lines)
    assert any(ln.split()[:1] == ["backend"] and "fwd upd/s" in ln for ln in lines)
    rows = {int(ln.split()[2]): ln.split() for ln in lines if ln.split()[:2] == ["numba", "float64"]}
    assert sorted(rows) == [32, 64]
    data = json.loads(out.read_text())
    batched = data["batched"]
    assert [(b["backend"], b["B"], b["N"]) for b in batched] == [("numba", 3, 16)]
    assert batched[0]["speedup"] == pytest.approx(batched[0]["single_s"] / batched[0]["batched_s"])
    assert any(ln.split()[:3] == ["numba", "3", "16"] and ln.endswith("x") for ln in lines)  # the batched table
    d, L, H = data["d"], data["L"], data["H"]
    f_fwd = 2 * d + 20 + 2 * d + 2  # logit 2 d_k, exp (20), value accumulation 2 d_v + normaliser 2
    assert data["flops_fwd"] == f_fwd
    for row in data["rows"]:
        units = row["N"] ** 2 * H * L
        assert row["fwd_ups"] == pytest.approx(units / row["fwd_s"])
        assert row["fwd_adj_ups"] == pytest.approx(units / row["fwd_adj_s"])
        assert row["fwd_flops"] == pytest.approx(f_fwd * units / row["fwd_s"])
        assert row["fwd_x_numba"] == pytest.approx(1.0)  # the baseline against itself
        assert row["roof_fwd"] is None  # no roofline fraction for a CPU row
        assert float(rows[row["N"]][3]) == pytest.approx(row["fwd_ups"], rel=1e-3)


def test_bench_gpu_compares_a_cuda_backend_with_numba_in_the_simulator(tmp_path, numba_layer_compiled):
    from transformer_limits.numeric.attention.layer import LAYER_BACKENDS

    out = tmp_path / "bench.json"
    r = _run([sys.executable, str(BENCH), "--quick", "--sizes", "16", "--backends", "numba-cuda-sim",
              "--json", str(out)], ROOT, _env(NUMBA_ENABLE_CUDASIM="1"), timeout=300)
    assert r.returncode == 0, r.stderr
    if "numba-cuda-sim" not in LAYER_BACKENDS:
        assert "# skipped numba-cuda-sim: the attention layer has no python-cuda flavour" in r.stdout
        return
    rows = [row for row in json.loads(out.read_text())["rows"] if row["backend"] == "numba-cuda-sim"]
    assert len(rows) == 1 and rows[0]["fwd_x_numba"] is not None
    assert json.loads(out.read_text())["max_rel_dev_numba-cuda-sim"] < 1e-10
    assert rows[0]["roof_fwd"] is None  # the simulator runs on the CPU: no GPU roofline
    assert "# skipped numba-cuda-sim: float32 not measured (float64 only" in r.stdout
    assert [b["backend"] for b in json.loads(out.read_text())["batched"]] == ["numba", "numba-cuda-sim"]


def test_bench_gpu_bad_argument(tmp_path):
    r = _run([sys.executable, str(BENCH), "--repeats", "0"], ROOT, _env())
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--repeats" in r.stderr
