"""spectral-scaling through the sweeps package: its training runs are sweep points, so a store makes
a rerun resume (docs/sweeps.md, "Execution and resume"; docs/paper_c_toy.md).

Tiny settings (d_model 32, one layer, 3 steps, 2 widths × 2 seeds × 5 optimizers = 20 runs): the
numbers mean nothing, only that a rerun trains nothing and reproduces every table and verdict.
"""

from __future__ import annotations

import shutil

import pytest

pytest.importorskip("torch", reason="spectral-scaling needs PyTorch: pip install 'transformer_limits[train]'")

from transformer_limits.verify.experiment import ExperimentConfig  # noqa: E402
from transformer_limits.verify.experiments import spectral_scaling as ss  # noqa: E402
from transformer_limits.verify.sweeps import SweepStore  # noqa: E402

TINY = ss.TrainingGrid(ffn_mults=(1, 2), seeds=2, steps=3, batch_size=4, eval_sequences=8, d_model=32, n_layers=1,
                       n_heads=2, context=16)
N_RUNS = len(ss.OPTIMIZERS) * 2 * 2


def _verdicts(result):
    return [(c.name, c.measured, c.ci, c.passed, c.statistics, c.note) for c in result.checks]


def test_sweep_spec_keeps_the_run_seeds_and_order():
    spec = ss.sweep_spec(TINY, base_seed=5)
    # seeds base + 0 .. base + seeds − 1 (a plain axis, not derived seeds); optimizer slowest, seed fastest
    assert spec["grid"] == {"optimizer": list(ss.OPTIMIZERS), "k": [1, 2], "seed": [5, 6]}
    assert spec["fixed"]["steps"] == 3 and spec["fixed"]["d_model"] == 32


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The main TINY grid trained once into a store (20 runs, 2 worker processes): ``(store, result)``.
    Each test works on a copy of the store (:func:`_copy_store`), so the training is paid once per module."""
    store = tmp_path_factory.mktemp("spectral") / "spectral.sqlite"
    result = ss.run_grid(TINY, _config(store))
    return store, result


def _config(store) -> ExperimentConfig:
    return ExperimentConfig(profile="full", seed=5, workers=2, store=str(store))


def _copy_store(store, tmp_path):
    """A copy of the closed SQLite store (with any WAL side files) under ``tmp_path``."""
    for path in store.parent.glob(store.name + "*"):
        shutil.copyfile(path, tmp_path / path.name)
    return tmp_path / store.name


def test_a_second_run_with_the_same_store_trains_nothing_and_gives_the_same_result(trained, tmp_path):
    store, first = trained
    assert (first.provenance["runs_trained"], first.provenance["runs_from_store"]) == (N_RUNS, 0)
    assert sorted({r["seed"] for r in first.tables["runs"]}) == [5, 6]
    store = _copy_store(store, tmp_path)
    config = _config(store)

    second = ss.run_grid(TINY, config)
    assert (second.provenance["runs_trained"], second.provenance["runs_from_store"]) == (0, N_RUNS)
    assert _verdicts(second) == _verdicts(first)
    assert second.tables == first.tables and second.fits == first.fits and second.notes == first.notes
    with SweepStore(store) as db:
        (entry,) = db.experiments()
        assert entry["experiment"] == "spectral-scaling" and entry["n_ok"] == N_RUNS
        rows = db.rows(entry["experiment"], entry["config_hash"])
    assert all(row["attempts"] == 1 for row in rows.values())  # no point was written twice


def test_more_seeds_for_some_optimizers_trains_only_their_extra_runs(trained, tmp_path):
    """The full profile trains the Dion runs with more seeds (their check needs them for power): the
    extra seeds are a sweep of their own in the same store, the other optimizers keep theirs."""
    grid = ss.TrainingGrid(**{**TINY.__dict__, "more_seeds": (("dion-1/2", 3), ("dion-1/16", 3))})
    assert grid.seeds_of("dion-1/2") == 3 and grid.seeds_of("adamw") == 2
    (extra,) = ss.more_seeds_specs(grid, base_seed=5)
    assert extra["grid"] == {"optimizer": ["dion-1/2", "dion-1/16"], "k": [1, 2], "seed": [7]}
    # the main grid first (trained by the fixture): the extra runs then add only 2 x 2 runs
    result = ss.run_grid(grid, _config(_copy_store(trained[0], tmp_path)))
    assert (result.provenance["runs_trained"], result.provenance["runs_from_store"]) == (4, N_RUNS)
    seeds = {(r["optimizer"], r["seed"]) for r in result.tables["runs"]}
    assert ("Dion 1/16", 7) in seeds and ("AdamW", 7) not in seeds
    rows = {(r["optimizer"], r["stratum"], r["metric"]): r["n_seeds"] for r in result.tables["betas"]}
    assert rows[("Dion 1/2", "GLOBAL", "hard")] == 3 and rows[("AdamW", "GLOBAL", "hard")] == 2
    with pytest.raises(ValueError, match="more_seeds"):
        ss.TrainingGrid(**{**TINY.__dict__, "more_seeds": (("dion-1/2", 2),)})
