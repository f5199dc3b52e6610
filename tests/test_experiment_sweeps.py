"""The long experiments run as sweeps (``run_points``): the parallel, resumable path must give
bitwise the same errors as the serial reference loops, and a rerun on a store recomputes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_limits.verify.experiment import ExperimentConfig
from transformer_limits.verify.experiments import attention_depth_width as adw
from transformer_limits.verify.experiments import attention_models as models
from transformer_limits.verify import input_search as search
from transformer_limits.verify.experiments import propagation_of_chaos as chaos
from transformer_limits.verify.experiments import token_independence as ti

TINY_ADW = {**adw.SETTINGS["quick"], **dict(L_levels=(4, 8), seeds_L=2, H_levels=(1, 4), seeds_H=2, cross_L=(2, 4),
                                             grid_L=(2, 8), grid_H=(1, 4), seeds_grid=2, restarts=1, iterations=2,
                                             train_steps=2)}
TINY_TOKENS = {**ti.SETTINGS["quick"], "N_levels": (4, 16, 64), "seeds": 3, "restarts": 1, "iterations": 3,
               "bottom_restarts": 1}
TINY_CHAOS = {**chaos.SETTINGS["quick"], "N_levels": (8, 32), "N_ref": 128, "seeds": 3, "n_steps": 10}


@pytest.mark.parametrize("workers", [1, 2])
def test_attention_families_sweep_equals_serial_loops(workers):
    M, seed = models.PaperAModels(TINY_ADW), 3
    s = TINY_ADW
    expected = {
        "depth": adw.depth_errors(M, seed, trained=False),
        "depth_trained": adw.depth_errors(M, seed + 11, trained=True),
        "heads": adw.fluctuation_errors(M, seed, (s["L_H"],), s["H_levels"], s["seeds_H"], trained=False)[0],
        "heads_trained": adw.fluctuation_errors(M, seed + 11, (s["L_H"],), s["H_levels"], s["seeds_H"],
                                                trained=True)[0],
        "cross": adw.fluctuation_errors(M, seed + 7, s["cross_L"], (s["cross_H"],), s["seeds_H"], trained=False)[:, 0],
        "grid": adw.total_errors(M, seed),
    }
    families = adw.run_families(ExperimentConfig(seed=seed, workers=workers), s)
    for family, values in expected.items():
        np.testing.assert_array_equal(families.errors[family], values, err_msg=family)
        assert families.seconds[family] > 0
    # the worst input of each (family, level) attains the largest error over the seeds
    rows = families.worst.data()
    depth = [r for r in rows if r["family"] == "depth"]
    assert [r["level"] for r in depth] == [f"L={L}" for L in s["L_levels"]]
    for i, r in enumerate(depth):
        assert r["sup_error"] == expected["depth"][i].max() and r["seed_index"] == expected["depth"][i].argmax()
        X0 = np.array(r["X0"])
        assert X0.shape == (s["N"], s["d"]) and np.all(np.linalg.norm(X0, axis=1) <= s["radius"] * (1 + 1e-12))
    assert [r["family"] for r in rows] == sorted((r["family"] for r in rows), key=adw.FAMILIES.index)
    assert len(rows) == (2 * len(s["L_levels"]) + 2 * len(s["H_levels"]) + len(s["cross_L"])
                         + len(s["grid_L"]) * len(s["grid_H"]))


def test_attention_tasks_cover_every_cell_once_most_expensive_first():
    tasks = adw.family_tasks(TINY_ADW)
    keys = [(t["family"], t["j"], t["a"], t["b"]) for t in tasks]
    assert len(set(keys)) == len(keys)
    s = TINY_ADW
    n = {"depth": len(s["L_levels"]) * s["seeds_L"], "heads": len(s["H_levels"]) * s["seeds_H"],
         "cross": len(s["cross_L"]) * s["seeds_H"], "grid": len(s["grid_L"]) * len(s["grid_H"]) * s["seeds_grid"],
         "depth_trained": s["seeds_L"], "heads_trained": s["seeds_H"]}
    assert {f: sum(t["family"] == f for t in tasks) for f in n} == n
    assert tasks[0]["family"] in ("depth_trained", "heads_trained")


def test_attention_run_refuses_a_head_scale_a_sweep_point_cannot_name():
    with pytest.raises(ValueError, match="head_scale must be one of"):
        adw.run(ExperimentConfig(), head_scale=lambda H: 1.0 / H, settings=TINY_ADW)


@pytest.mark.parametrize("workers", [1, 2])
def test_token_and_chaos_sweeps_equal_serial_loops(workers):
    config = ExperimentConfig(seed=2, workers=workers)
    tokens, _, worst = ti.token_errors_sweep(config, TINY_TOKENS)
    assert [r["level"] for r in worst.rows()] == [f"N={n}" for n in TINY_TOKENS["N_levels"]]
    np.testing.assert_array_equal(tokens, ti.token_errors(TINY_TOKENS, 2))
    errors, seconds = chaos.chaos_errors_sweep(config, TINY_CHAOS)
    for d in TINY_CHAOS["dims"]:
        np.testing.assert_array_equal(errors[d], chaos.chaos_errors(TINY_CHAOS, d, 2))
    assert set(seconds) == {f"d={d}" for d in TINY_CHAOS["dims"]}


def test_rerun_on_a_store_recomputes_no_point(tmp_path, monkeypatch):
    config = ExperimentConfig(seed=1, store=str(tmp_path / "runs.sqlite"))
    first, _, _ = ti.token_errors_sweep(config, TINY_TOKENS)

    def must_not_run(point):
        raise AssertionError(f"point {point} was recomputed")

    monkeypatch.setattr(ti, "evaluate_point", must_not_run)
    again, _, _ = ti.token_errors_sweep(config, TINY_TOKENS)
    np.testing.assert_array_equal(again, first)
    # another seed is another sweep: it must run (and here fail loudly)
    with pytest.raises(Exception, match="recomputed"):
        ti.token_errors_sweep(ExperimentConfig(seed=2, store=config.store), TINY_TOKENS)


# Values of the serial loops before they were split into sweep points (commit 50ea9b1, blas/numpy
# backends): a change of random streams (seed offsets, rng keys, level/seed order) breaks these,
# while backend round-off (numba vs BLAS, ~1e-15) does not.
GOLDEN = {
    # depth, grid and tokens moved (1e-4 to 1.6e-3 relative) when the limit's gradient in the ascent became the
    # exact gradient of its RK4 map (numeric/attention/rk4_tape.py) instead of the continuous adjoint
    "depth": [[0.29081998583277285, 0.26103832859399995], [0.06776600704381466, 0.09095239520878272]],
    "grid": [[1.4026098592998049, 1.033186309918424], [0.4543464702128822, 0.22634379199608]],
    "heads_trained": [[0.3039724887758756, 0.5905104568853898], [0.13416019718756697, 0.5541839499835722]],
    # N > 4 rows changed when the sup estimate became the warm-start ladder (monotone in N per seed)
    "tokens": [[0.41376901817746187, 0.25623506792104006, 0.48270145445386775],
               [0.6953894411991591, 0.44541332054032384, 0.6081800536471021],
               [0.7437617661384982, 0.5312948166331621, 0.8973801471054912]],
    "chaos": [[0.6346436963976768, 0.3870257373674978, 0.3497734453933048],
              [0.3691541140940244, 0.23584718930424306, 0.15575463437079592]],
}


def test_random_streams_are_those_of_the_original_serial_loops():
    M = models.PaperAModels(TINY_ADW)
    got = {"depth": adw.depth_errors(M, 3, trained=False), "grid": adw.total_errors(M, 3)[:, :, 0],
           "heads_trained": adw.fluctuation_errors(M, 14, (TINY_ADW["L_H"],), TINY_ADW["H_levels"], 2,
                                                   trained=True)[0],
           "tokens": ti.token_errors(TINY_TOKENS, 2), "chaos": chaos.chaos_errors(TINY_CHAOS, 2, 2)}
    for name, values in GOLDEN.items():
        np.testing.assert_allclose(got[name], values, rtol=1e-9, err_msg=name)


def test_sup_error_reports_nan_as_the_worst_case():
    calls = iter(range(100))

    def evaluate(X):
        k = next(calls)
        out = np.zeros_like(X)
        out[0, 0] = np.nan if k == 1 else 0.1 * k  # blows up at the second evaluation
        return out, lambda r: np.ones_like(X)

    zero = search.InputMap(lambda X: (np.zeros_like(X), lambda r: np.zeros_like(X)))
    best, X = search.sup_error(search.InputMap(evaluate), zero, 3, 2, radius=1.0, rng=np.random.default_rng(0),
                            restarts=1, iterations=4, lr=0.1)
    assert np.isnan(best) and X.shape == (3, 2)
    worst = models.WorstInputs(1.0)
    for j, e in enumerate([0.2, np.nan, 0.5]):
        worst.add("depth", "L=4", j, e, np.zeros((3, 2)))
    assert worst.data()[0]["seed_index"] == 1
