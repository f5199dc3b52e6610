"""Mutation score of the modules that hold definitions, constants and statistics.

Run:  python benchmarks/mutation_score.py [--rev COMMIT] [--modules adamw spectral ...]
          [--max-mutants N | --time-budget SECONDS] [--seed 0] [--jobs 1]
          [--json OUT.json] [--markdown OUT.md] [--list] [--same-as OLD.json] [--render OLD.json]

For each ``(module, tests)`` pair in ``MODULES`` below, every mutation that the operators in
``OPERATORS`` can make to the module is enumerated with cosmic-ray's operators (a parso-based
AST rewriter: ``+`` -> ``-``, ``<`` -> ``<=``, ``if c`` -> ``if not c``, ``1`` -> ``2`` ...),
optionally a fixed-seed sample of them is drawn, and for each mutant the module's narrow test
subset is run (``pytest -x -q -p no:cacheprovider``, per-mutant timeout).  A mutant is *killed*
when the tests fail (any non-zero pytest exit, including an import/collection error), *survived*
when they pass, *timeout* when they run past ``max(10 s, 3 x unmutated time + 5 s)`` (counted as
detected, as mutmut and cosmic-ray do).  score = (killed + timeout) / mutants tested.

The working tree is never mutated in place (other people edit it): the script copies the tracked
and untracked, not-ignored files (``git ls-files -co --exclude-standard``) -- or, with ``--rev``,
the files of that commit (``git archive``) -- into one temporary folder per job and mutates there.
Each copy gets its own kernel cache (``TRANSFORMER_LIMITS_CACHE``) and the unmutated subset is run
once first (it must pass, and it warms the generated-kernel caches).  Each mutant gets a unique
file mtime so no stale ``.pyc``/Numba cache entry of another mutant can be reused.

Sampling: each module's mutants are put in one fixed-seed random order (``--seed``, default 0) and
a prefix of it is tested, so every tested set is a fixed-seed random sample.  ``--max-mutants N``
tests the first N; ``--time-budget S`` gives each module an equal share of the S seconds left (time
a module does not use passes on) and tests mutants in that order until its share is spent;
``--same-as OLD.json`` tests the mutants an earlier run tested (matched by operator, mutated line
text and result, so edits elsewhere in the module do not matter; those whose line changed are
listed as ``prior_mutants_gone``), so strengthened tests are scored on exactly the baseline's mutants.  With none of
these, every mutant is tested (hours: see the "Mutation testing" section of docs/contributing.md).

Output: a table on stdout; ``--json`` writes every tested mutant (file:line, operator, unified
diff, outcome, seconds) and ``--markdown`` the table plus the surviving mutants as diffs.
Exit codes: 0 finished, 2 bad input, 3 the unmutated tests of some module failed in the copy
(broken environment: that module is reported with no score).  Needs ``pip install cosmic-ray``.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as _dt
import difflib
import io
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (short name, module path, narrowest test files that exercise it).  The tests are the module's
# own file plus the files that compare it with a reference implementation or a transcription of the
# paper; a name ending in "?" is used only where it exists (added after the baseline commit).
MODULES: list[tuple[str, str, tuple[str, ...]]] = [
    ("matrix_optimizers", "transformer_limits/numeric/optim/matrix_optimizers.py",
     ("tests/test_matrix_optimizers.py", "tests/test_torch_optimizers.py",
      "tests/test_reference_paper_c_optimizers.py?", "tests/test_published_constants_paper_c.py?")),
    ("spectral", "transformer_limits/numeric/spectra/ranks.py",
     ("tests/test_spectral.py", "tests/test_reference_paper_c_ranks.py?")),
    ("token_strata", "transformer_limits/numeric/spectra/token_strata.py",
     ("tests/test_token_strata.py", "tests/test_reference_paper_c_strata.py?")),
    ("adamw", "transformer_limits/numeric/optim/adamw.py",
     ("tests/test_adamw.py", "tests/test_transcriptions_paper_a.py?")),
    ("transformer_model", "transformer_limits/numeric/attention/transformer.py",
     ("tests/test_transformer_model.py", "tests/test_transcriptions_paper_a.py?")),
    ("common_noise_sde", "transformer_limits/numeric/sphere/common_noise_sde.py",
     ("tests/test_common_noise_sde.py", "tests/test_transcriptions_paper_b.py?", "tests/test_batched_runs.py?")),
    ("sphere_transformer", "transformer_limits/numeric/sphere/transformer.py",
     ("tests/test_sphere_transformer.py", "tests/test_transcriptions_paper_b.py?")),
    ("mean_field", "transformer_limits/numeric/attention/mean_field.py",
     ("tests/test_mean_field.py", "tests/test_transcriptions_paper_a.py?",
      "tests/test_bound_sharpness.py?")),
    ("adamw_box", "transformer_limits/symbolic/adamw_box.py",
     ("tests/test_adamw_box.py",)),
    ("verdicts", "transformer_limits/verify/verdicts.py",
     ("tests/test_verdicts.py", "tests/test_verdict_power.py?")),
    ("scaling_fit", "transformer_limits/verify/scaling_fit.py",
     ("tests/test_scaling_fit.py",)),
    ("width_scaling", "transformer_limits/verify/stats/width_scaling.py",
     ("tests/test_scaling_fit.py", "tests/test_stats_width_scaling.py?")),
    # the rate fits (one module, rate_fit.py, before issue 12): tested together through fit_power_law
    # and fit_rate_claim
    *((name, f"transformer_limits/verify/stats/{name}.py",
       ("tests/test_rate_fit.py", "tests/test_interval_coverage.py?",
        f"tests/test_stats_{name}.py?"))
      for name in ("estimate", "seed_bootstrap", "fit_quality", "asymptotic_window", "power_law", "multi_term")),
    ("intervals", "transformer_limits/verify/stats/intervals.py",
     ("tests/test_stats_intervals.py", "tests/test_interval_coverage.py?")),
    ("ratio_trend", "transformer_limits/verify/stats/ratio_trend.py",
     ("tests/test_stats_ratio_trend.py", "tests/test_interval_coverage.py?")),
    ("beta_difference", "transformer_limits/verify/stats/beta_difference.py",
     ("tests/test_stats_beta_difference.py", "tests/test_interval_coverage.py?", "tests/test_power.py?")),
    # issue 23: executable verdicts, the z-test family, the layer checker
    ("check_spec", "transformer_limits/verify/check_spec.py",
     ("tests/test_check_spec_decide.py", "tests/test_experiment_declarations.py?")),
    ("z_family", "transformer_limits/verify/stats/z_family.py", ("tests/test_stats_z_family.py",)),
    ("distributions", "transformer_limits/verify/stats/distributions.py", ("tests/test_stats_distributions.py",)),
    ("sign_family", "transformer_limits/verify/stats/sign_family.py", ("tests/test_stats_sign_family.py",)),
    ("layers", "transformer_limits/layers.py", ("tests/test_layers.py",)),
    ("rate_claims", "transformer_limits/verify/rate/claims.py",
     ("tests/test_rate_claims.py",)),
    ("rate_claim_grammar", "transformer_limits/verify/rate/claim_grammar.py",
     ("tests/test_rate_claims.py",)),
    # issue 13: precision, device arrays, the backend a family runs on a device
    ("precision", "transformer_limits/numeric/precision.py", ("tests/test_precision.py",)),
    ("runtime", "transformer_limits/numeric/runtime.py", ("tests/test_runtime.py",)),
    ("flavours", "transformer_limits/numeric/flavours.py", ("tests/test_runtime.py", "tests/test_kernel_families_warm.py")),
    ("sphere_loops", "transformer_limits/numeric/sphere/loops.py",
     ("tests/test_sphere_runs.py", "tests/test_batched_simulators_cpu.py", "tests/test_transcriptions_paper_b.py?",
      "tests/test_batched_runs.py?", "tests/test_common_noise_sde.py")),
    ("derivation_cache", "transformer_limits/symbolic/derivation_cache.py",
     ("tests/test_derivation_cache.py", "tests/test_derivation_pages_cache.py")),
    ("lyapunov_simulation", "transformer_limits/numeric/sphere/lyapunov.py",
     ("tests/test_lyapunov_sampler.py", "tests/test_transcriptions_paper_b.py", "tests/test_lyapunov.py")),
    # issue 26, second sitting: the serial twins of the numba kernels, lions-taylor's sweep
    ("numba_twins", "transformer_limits/numeric/numba_twins.py", ("tests/test_numba_twins.py",)),
    ("lions_taylor", "transformer_limits/verify/experiments/lions_taylor.py",
     ("tests/test_experiment_lions_taylor.py",)),
    # issue 26, third sitting: the pruned sup of W_2², the vector width
    ("propagation_of_chaos", "transformer_limits/verify/experiments/propagation_of_chaos.py",
     ("tests/test_sup_wasserstein.py",)),
    ("vector_width", "transformer_limits/numeric/vector_width.py", ("tests/test_vector_width.py",)),
    # issue 26, fourth sitting: the taped RK4 map and its gradient, the symmetric self-attention gate
    ("rk4_tape", "transformer_limits/numeric/attention/rk4_tape.py", ("tests/test_rk4_tape.py?",)),
    ("attention_kernels", "transformer_limits/numeric/attention/kernels.py",
     ("tests/test_symmetric_attention.py?", "tests/test_attention_kernels.py", "tests/test_batched_runs.py?")),
    # issue 26, fifth sitting: pools kept across a report's sweeps, batched sphere runs
    ("fast_exp", "transformer_limits/symbolic/fast_exp.py", ("tests/test_fast_exp.py",)),
    ("attention_layer", "transformer_limits/numeric/attention/layer.py",
     ("tests/test_layers.py", "tests/test_layer_stacks.py", "tests/test_numba_twins.py", "tests/test_softmax_tape.py",
      "tests/test_token_stride.py")),
    ("layer_caches", "transformer_limits/numeric/attention/layer_caches.py",
     ("tests/test_softmax_tape.py", "tests/test_layer_stacks.py")),
    # issue 26, ninth sitting: the layer kernels' template (chunked two-row sweeps, split score sweep, the
    # unnormalised tape); every mutant compiles new kernels, so a run needs a time budget
    ("attention_adjoint_kernels", "transformer_limits/symbolic/attention_adjoint_kernels.py",
     ("tests/test_wide_head_sweeps.py", "tests/test_softmax_tape.py", "tests/test_token_stride.py")),
    # issue 26, eleventh sitting: the parameter gradients as one numba kernel per layer (each mutant compiles
    # the layer's kernels for the test shapes: a time budget)
    ("attention_param_grads", "transformer_limits/symbolic/attention_param_grads.py",
     ("tests/test_param_grads_kernel.py",)),
    # issue 26, twelfth sitting: the layer stacks' templates, the backward with gradients in one call
    ("attention_layer_stacks", "transformer_limits/symbolic/attention_layer_stacks.py",
     ("tests/test_layer_stacks.py",)),
    ("sweep_executors", "transformer_limits/verify/sweeps/executors.py",
     ("tests/test_sweep.py", "tests/test_fault_injection.py")),
    ("mlp_field", "transformer_limits/numeric/sphere/mlp_field.py",
     ("tests/test_batched_runs.py?", "tests/test_mlp_field_cuda.py", "tests/test_mlp_kernel.py")),
    ("devices", "transformer_limits/numeric/devices.py",
     ("tests/test_device_selection.py", "tests/test_precision.py")),
    ("running", "transformer_limits/verify/running.py",
     ("tests/test_precision.py", "tests/test_device_selection.py", "tests/test_check_spec.py?",
      "tests/test_result_validation.py?", "tests/test_experiment_declarations.py?")),
    # issue 21: power of every check, results validated before a verdict
    ("power", "transformer_limits/verify/stats/power.py", ("tests/test_power.py",)),
    ("result_validation", "transformer_limits/verify/result_validation.py", ("tests/test_result_validation.py",)),
    ("lyapunov", "transformer_limits/symbolic/lyapunov.py",
     ("tests/test_lyapunov.py", "tests/test_numeric_edges.py", "tests/test_lyapunov_identity.py?")),
]

# cosmic-ray operators used: one mutation per arithmetic site in mutmut's style (not the 10
# replacements cosmic-ray tries per operator, most of which are bit operations on floats that
# die with a TypeError and only inflate the score), comparison boundaries and negations, constants,
# booleans, loops.  Left out: ExceptionReplacer, RemoveDecorator (dropping @dataclass/@lru_cache is
# noise), VariableReplacer/Inserter (random), Is/IsNot swaps of numeric comparisons.
OPERATORS: tuple[str, ...] = (
    "core/ReplaceBinaryOperator_Add_Sub", "core/ReplaceBinaryOperator_Sub_Add",
    "core/ReplaceBinaryOperator_Mul_Div", "core/ReplaceBinaryOperator_Div_Mul",
    "core/ReplaceBinaryOperator_FloorDiv_Div", "core/ReplaceBinaryOperator_Mod_FloorDiv",
    "core/ReplaceBinaryOperator_Pow_Mul",
    "core/ReplaceComparisonOperator_Eq_NotEq", "core/ReplaceComparisonOperator_NotEq_Eq",
    "core/ReplaceComparisonOperator_Lt_LtE", "core/ReplaceComparisonOperator_LtE_Lt",
    "core/ReplaceComparisonOperator_Gt_GtE", "core/ReplaceComparisonOperator_GtE_Gt",
    "core/ReplaceComparisonOperator_Is_IsNot", "core/ReplaceComparisonOperator_IsNot_Is",
    "core/ReplaceUnaryOperator_USub_UAdd", "core/ReplaceUnaryOperator_Delete_Not",
    "core/AddNot", "core/ReplaceTrueWithFalse", "core/ReplaceFalseWithTrue",
    "core/ReplaceAndWithOr", "core/ReplaceOrWithAnd",
    "core/ReplaceBreakWithContinue", "core/ReplaceContinueWithBreak",
    "core/ZeroIterationForLoop", "core/NumberReplacer",
)

PYTEST_ARGS = ("-x", "-q", "-p", "no:cacheprovider")


@dataclass
class Mutant:
    module: str
    path: str
    operator: str
    occurrence: int
    line: int
    diff: str
    outcome: str = "not run"          # killed | survived | timeout | not run
    seconds: float = 0.0
    mutated_code: str = field(default="", repr=False)


# ---------------------------------------------------------------------------------------- copying
def _copy_tree(rev: str | None, dest: Path) -> None:
    """The checkout (tracked + untracked, not ignored) or the files of commit ``rev`` into ``dest``."""
    dest.mkdir(parents=True)
    if rev:
        tar = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev],
                             check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            tf.extractall(dest, filter="data")
        return
    names = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"],
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():  # deleted-but-tracked files are skipped
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


# ------------------------------------------------------------------------------------ enumerating
def _not_code(tree) -> set[int]:
    """ids of parso nodes whose mutation changes no computation: annotations (strings under
    ``from __future__ import annotations``) and the bare ``*`` / ``/`` markers of a parameter list
    (cosmic-ray 8.7 takes ``def f(a, *, b)`` for a multiplication)."""
    from cosmic_ray.ast import ast_nodes

    out: set[int] = set()
    for node in ast_nodes(tree):
        ann = None
        if node.type in ("param", "funcdef"):
            ann = node.annotation
        elif node.type == "annassign":
            ann = node.children[1]
        elif node.type == "operator" and node.value in ("*", "/") and node.parent is not None \
                and node.parent.type == "parameters":
            out.add(id(node))
        if ann is not None:
            out.update(id(n) for n in ast_nodes(ann))
    return out


def enumerate_mutants(name: str, path: str, source: str) -> list[Mutant]:
    """Every mutation the ``OPERATORS`` make to ``source`` (cheap: diffs come from ``materialise``)."""
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast

    lines = source.splitlines()
    out: list[Mutant] = []
    tree = get_ast(source)
    skip = _not_code(tree)
    for op_name in OPERATORS:
        operator = cosmic_ray.plugins.get_operator(op_name)()
        positions = [(start, id(node) in skip) for node in ast_nodes(tree)
                     for start, _end in operator.mutation_positions(node)]
        # occurrence = cosmic-ray's own index among all positions, so mutate_code finds the same node
        for occurrence, ((line, _col), skipped) in enumerate(positions):
            if not skipped and "no mutate" not in lines[line - 1]:
                out.append(Mutant(name, path, op_name.removeprefix("core/"), occurrence, line, ""))
    out.sort(key=lambda m: (m.line, m.operator, m.occurrence))
    return out


def materialise(m: Mutant, source: str) -> bool:
    """Fill in the mutated code and its diff (one parse, ~0.1 s); False if the mutation is a no-op."""
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code

    mutated = mutate_code(source, cosmic_ray.plugins.get_operator("core/" + m.operator)(), m.occurrence)
    if mutated is None or mutated == source:
        return False
    m.mutated_code = mutated
    m.diff = "".join(difflib.unified_diff(source.splitlines(True), mutated.splitlines(True),
                                          f"a/{m.path}", f"b/{m.path}", n=1))
    return True


def diff_key(operator: str, diff: str) -> tuple:
    """What a mutant does, independent of where the line sits: operator, removed and added lines."""
    rows = [r for r in diff.splitlines() if r[:1] in "-+" and not r.startswith(("---", "+++"))]
    return (operator, tuple(r[1:].strip() for r in rows if r[0] == "-"),
            tuple(r[1:].strip() for r in rows if r[0] == "+"))


def match_prior(prior: list[dict], muts: list[Mutant], source: str) -> tuple[list[Mutant], list[dict]]:
    """The mutants of ``muts`` doing what the earlier run's ``prior`` mutants did (same operator on
    the same line text with the same result), in the earlier order; and the earlier ones now gone."""
    lines = source.splitlines()
    found: list[Mutant] = []
    gone: list[dict] = []
    taken: set[int] = set()
    for pm in prior:
        key = diff_key(pm["operator"], pm["diff"])
        hit = None
        for i, m in enumerate(muts):
            if i in taken or m.operator != pm["operator"] or lines[m.line - 1].strip() not in key[1]:
                continue
            if not m.diff and not materialise(m, source):
                continue
            if diff_key(m.operator, m.diff) == key:
                hit = i
                break
        if hit is None:
            gone.append(pm)
        else:
            taken.add(hit)
            found.append(muts[hit])
    return found, gone


# -------------------------------------------------------------------------------------- running
def _env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(TRANSFORMER_LIMITS_CACHE=str(copy / ".mutation-kcache"), PYTHONDONTWRITEBYTECODE="1",
               MPLBACKEND="Agg", HYPOTHESIS_PROFILE="ci", PYTHONHASHSEED="0")
    env.pop("PYTHONPATH", None)  # tests import the copy (pytest pythonpath = ["."])
    return env


def run_tests(copy: Path, tests: tuple[str, ...], timeout: float | None) -> tuple[str, float, str]:
    """Run the test subset in ``copy``; (outcome, seconds, output tail)."""
    cmd = [sys.executable, "-m", "pytest", *PYTEST_ARGS, *tests]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=copy, env=_env(copy), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        outcome = "survived" if proc.returncode == 0 else "killed"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole test process group, numba workers included
        out, _ = proc.communicate()
        outcome = "timeout"
    return outcome, time.perf_counter() - t0, out.decode(errors="replace")[-2000:]


class _Stamp:
    """Unique mtimes per mutant so no .pyc / cache keyed on (mtime, size) is ever stale."""
    _lock = threading.Lock()
    _next = 0

    @classmethod
    def take(cls) -> int:
        with cls._lock:
            cls._next += 1
            return cls._next


def test_mutant(copy: Path, m: Mutant, tests: tuple[str, ...], timeout: float) -> None:
    target = copy / m.path
    original = target.read_bytes()
    st = target.stat()
    try:
        target.write_text(m.mutated_code, encoding="utf-8")
        bump = _Stamp.take() * 2_000_000_000  # 2 s steps: .pyc stores whole seconds
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + bump))
        m.outcome, m.seconds, _ = run_tests(copy, tests, timeout)
    finally:
        target.write_bytes(original)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


# ---------------------------------------------------------------------------------------- report
def summarise(name: str, path: str, tests, n_all: int, mutants: list[Mutant], base_s: float,
              error: str | None) -> dict:
    tested = [m for m in mutants if m.outcome != "not run"]
    count = {k: sum(m.outcome == k for m in tested) for k in ("killed", "survived", "timeout")}
    score = (count["killed"] + count["timeout"]) / len(tested) if tested else None
    ci = wilson(count["killed"] + count["timeout"], len(tested))
    return {"module": name, "path": path, "tests": list(tests), "mutants_enumerated": n_all,
            "mutants_tested": len(tested), **count, "score": score,
            "score_ci95": [round(ci[0], 4), round(ci[1], 4)],
            "unmutated_test_seconds": round(base_s, 2), "error": error,
            "mutants": [{k: v for k, v in asdict(m).items() if k not in ("module", "mutated_code")}
                        for m in tested]}


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson interval of a proportion k/n: the module's score when only a sample was tested."""
    if n == 0:
        return (0.0, 1.0)
    p, d = k / n, 1 + z * z / n
    c, h = (p + z * z / (2 * n)) / d, z * ((p * (1 - p) + z * z / (4 * n)) / n) ** 0.5 / d
    return (max(0.0, c - h), min(1.0, c + h))


def table(rows: list[dict]) -> str:
    head = "| module | enumerated | tested | killed | survived | timeout | score | 95% CI (sample) |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        s = "n/a" if r["score"] is None else f"{100 * r['score']:.0f}%"
        lo, hi = wilson(r["killed"] + r["timeout"], r["mutants_tested"])
        lines.append(f"| {r['module']} | {r['mutants_enumerated']} | {r['mutants_tested']} | "
                     f"{r['killed']} | {r['survived']} | {r['timeout']} | {s} | "
                     f"{100 * lo:.0f}-{100 * hi:.0f}% |")
    return "\n".join(lines)


def markdown(meta: dict, rows: list[dict]) -> str:
    out = [f"# Mutation scores ({meta['date']}, commit {meta['commit']})", "",
           f"Tool: cosmic-ray {meta['cosmic_ray']} operators, sampling {meta['sampling']}, "
           f"seed {meta['seed']}.", "", table(rows), ""]
    for r in rows:
        surv = [m for m in r["mutants"] if m["outcome"] == "survived"]
        if r["error"]:
            out += [f"## {r['module']}: ERROR", "", "```", r["error"], "```", ""]
        if not surv:
            continue
        out += [f"## {r['module']}: {len(surv)} surviving", ""]
        for m in surv:
            out += [f"- `{r['path']}:{m['line']}` {m['operator']}", "", "```diff",
                    m["diff"].rstrip("\n"), "```"]
        out.append("")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rev", help="mutate the files of this commit (git archive) instead of the checkout")
    p.add_argument("--modules", nargs="+", metavar="NAME", help="subset of the MODULES names")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--max-mutants", type=int, help="the first N mutants per module of the seeded order")
    g.add_argument("--time-budget", type=float, metavar="S",
                   help="test mutants (in the seeded order) until each module's equal share of S s is spent")
    g.add_argument("--same-as", type=Path, metavar="JSON",
                   help="test the mutants an earlier --json output tested (matched by operator and line text)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1, help="parallel test runs (one tree copy each)")
    p.add_argument("--json", type=Path, help="write every tested mutant and the table here")
    p.add_argument("--markdown", type=Path, help="write the table and surviving mutants here")
    p.add_argument("--list", action="store_true", help="only count the mutants per module")
    p.add_argument("--render", type=Path, metavar="JSON",
                   help="only print the Markdown (table + surviving mutants) of an earlier --json output")
    a = p.parse_args(argv)
    if a.render:
        data = json.loads(a.render.read_text())
        print(markdown(data["meta"], data["modules"]))
        return 0

    known = {m[0]: m for m in MODULES}
    chosen = a.modules or list(known)
    bad = [n for n in chosen if n not in known]
    if bad or a.jobs < 1 or (a.max_mutants is not None and a.max_mutants < 1) \
            or (a.time_budget is not None and a.time_budget <= 0):
        print(f"mutation_score: bad input: unknown module(s) {bad} (known: {', '.join(known)})"
              if bad else "mutation_score: bad input: --jobs/--max-mutants/--time-budget must be > 0",
              file=sys.stderr)
        return 2
    try:
        import cosmic_ray  # noqa: F401
        from importlib.metadata import version
        cr_version = version("cosmic-ray")
    except ImportError:
        print("mutation_score: cosmic-ray is not installed (pip install cosmic-ray)", file=sys.stderr)
        return 2

    rev = a.rev
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", rev or "HEAD"],
                                check=True, capture_output=True, text=True).stdout.strip()
    except subprocess.CalledProcessError:
        print(f"mutation_score: bad input: --rev {rev!r} is not a commit", file=sys.stderr)
        return 2
    if not rev:
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"],
                               capture_output=True, text=True).stdout.strip()
        commit += "+working-tree" if dirty else ""

    tmp = Path(tempfile.mkdtemp(prefix="tl-mutation-"))
    rows: list[dict] = []
    broken = False
    try:
        copies = [tmp / f"copy{j}" for j in range(a.jobs)]
        for c in copies:
            _copy_tree(rev, c)
        plan = []
        for name in chosen:
            _, path, wanted = known[name]
            tests = tuple(t.rstrip("?") for t in wanted
                          if not t.endswith("?") or (copies[0] / t.rstrip("?")).is_file())
            muts = enumerate_mutants(name, path, (copies[0] / path).read_text(encoding="utf-8"))
            plan.append((name, path, tests, muts))
        if a.list:
            for name, path, tests, muts in plan:
                print(f"{name:20s} {len(muts):5d} mutants  tests: {' '.join(tests)}")
            return 0

        # the unmutated subsets first: they must pass (and warm the kernel caches); their time sets
        # the per-mutant timeout
        base: dict[str, tuple[float, str | None]] = {}
        for name, path, tests, muts in plan:
            outs = [run_tests(c, tests, None) for c in copies]
            ok = all(o[0] == "survived" for o in outs)
            base[name] = (max(o[1] for o in outs), None if ok else outs[0][2])
            print(f"[unmutated] {name}: {'pass' if ok else 'FAIL'} in {base[name][0]:.1f} s",
                  flush=True)

        # each module's mutants in one fixed-seed random order; a prefix of it is tested, so any
        # tested set is a fixed-seed random sample
        prior: dict[str, list[dict]] = {}
        if a.same_as:
            prior = {r["module"]: [m for m in r["mutants"] if m["outcome"] != "not run"]
                     for r in json.loads(a.same_as.read_text())["modules"]}
        rng_note = "all mutants"
        if a.max_mutants is not None:
            rng_note = f"first {a.max_mutants} per module of a seed-{a.seed} permutation"
        elif a.time_budget is not None:
            rng_note = (f"time budget {a.time_budget:.0f} s shared by the modules; each tests a prefix "
                        f"of a seed-{a.seed} permutation of its mutants until its share is spent")
        elif a.same_as:
            rng_note = f"the mutants tested in {a.same_as.name} (matched by operator and line text)"
        left = a.time_budget
        t_start = time.perf_counter()

        for k, (name, path, tests, muts) in enumerate(plan):
            base_s, err = base[name]
            source = (copies[0] / path).read_text(encoding="utf-8")
            order = list(muts)
            random.Random(a.seed).shuffle(order)
            gone: list[dict] = []
            if a.same_as:
                order, gone = match_prior(prior.get(name, []), muts, source)
            elif a.max_mutants is not None:
                order = order[:a.max_mutants]
            deadline = None
            if left is not None:  # an equal share of what is left; unused time passes on
                deadline = time.perf_counter() + (a.time_budget - (time.perf_counter() - t_start)) \
                    / (len(plan) - k)
            if err is not None:
                broken = True
                rows.append(summarise(name, path, tests, len(muts), [], base_s, err))
                continue
            timeout = max(10.0, 3 * base_s + 5)
            free: queue.Queue[Path] = queue.Queue()
            for c in copies:
                free.put(c)

            def work(m: Mutant) -> Mutant:
                if deadline is not None and time.perf_counter() > deadline:
                    return m  # share spent: stays "not run"
                if not m.diff and not materialise(m, source):
                    m.outcome = "no-op"
                    return m
                c = free.get()
                try:
                    test_mutant(c, m, tests, timeout)
                finally:
                    free.put(c)
                return m

            t0 = time.perf_counter()
            with cf.ThreadPoolExecutor(a.jobs) as ex:
                for m in ex.map(work, order):
                    if m.outcome == "survived":
                        print(f"  survived {path}:{m.line} {m.operator}", flush=True)
            # a prefix of the permutation only (with --jobs > 1 a later one may have finished first)
            n = next((i for i, m in enumerate(order) if m.outcome == "not run"), len(order))
            for m in order[n:]:
                m.outcome = "not run"
            sample = sorted((m for m in order[:n] if m.outcome != "no-op"),
                            key=lambda m: (m.line, m.operator, m.occurrence))
            row = summarise(name, path, tests, len(muts), sample, base_s, None)
            row["sampled"] = len(sample) < len(muts)
            row["permutation_prefix"] = None if a.same_as else n
            if a.same_as:  # earlier mutants whose code is gone (changed or removed lines)
                row["prior_mutants_gone"] = gone
            if gone:
                print(f"[{name}] {len(gone)} earlier mutants no longer apply", flush=True)
            rows.append(row)
            print(f"[{name}] {row['mutants_tested']}/{len(muts)} mutants, score "
                  f"{100 * row['score']:.0f}% in {time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    meta = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit, "cosmic_ray": cr_version, "operators": list(OPERATORS),
            "pytest_args": list(PYTEST_ARGS), "sampling": rng_note, "seed": a.seed,
            "jobs": a.jobs, "python": sys.version.split()[0],
            "score_definition": "(killed + timeout) / tested"}
    print()
    print(table(rows))
    sys.path.insert(0, str(REPO))
    from transformer_limits.atomic_write import atomic_write_text
    if a.json:
        atomic_write_text(a.json, json.dumps({"meta": meta, "modules": rows}, indent=1) + "\n")
    if a.markdown:
        atomic_write_text(a.markdown, markdown(meta, rows) + "\n")
    return 3 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
