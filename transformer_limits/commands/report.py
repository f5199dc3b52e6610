"""``transformer-limits report``: run every experiment of a profile and write all reports + an index.

    transformer-limits report [--profile quick|full] --out DIR [--only NAME ...] [--seed N]
                              [--workers N] [--scheduler ADDRESS] [--store PATH.sqlite]
                              [--format text|json] [--no-progress] [--module FILE.py ...]
                              [--device cpu|cuda|auto] [--precision float64|float32]

Writes ``DIR/<name>/{results.json,report.md,report.html,*.png}`` per experiment and
``DIR/{index.md,index.html,summary.json}``.  The whole tree is built in a staging folder inside
``DIR`` and moved in at the end, replacing an earlier report there as a whole (its index, the
experiment folders it listed, their figures and derivation pages); an interrupted run leaves
``DIR`` as it was.  An exception inside an experiment marks it ERROR (``status: "error"`` in its
results.json, traceback in its notes), never FAIL; the other experiments still run.  A bad store,
scheduler, grid size or output folder, or ``--device cuda`` without a usable GPU, stops the run
before any work, writing nothing (exit 2); a full disk, an
unwritable store or a broken worker pool mid-run stops it with exit 3.
With ``--store`` the experiments' sweeps are kept in one SQLite file, so a killed (full) report rerun
with the same options skips every point it already finished.
``--module FILE.py`` (repeatable) imports a Python file first; the experiments it registers run
like the built-in ones (in the profiles they declare, or by ``--only``).  Installed plugins
(entry-point group ``transformer_limits.experiments``) are always included.
An experiment whose ``requires`` names a module missing here (spectral-scaling without PyTorch)
is skipped, not crashed.  The index lists every registered experiment that did not run, with why
(:func:`not_run_experiments`); when nothing selected can run, that is bad input (exit 2).
Exit 0 when no check of any experiment failed and nothing crashed (INCONCLUSIVE checks included,
unless ``--strict``: then 4), 1 when a check failed and nothing crashed, 2 on bad input, 3 when an
experiment crashed (see :mod:`transformer_limits.errors`).
"""

from __future__ import annotations

import argparse
import sys

from transformer_limits.commands._outcome import UsageError, emit, raise_for_status
from transformer_limits.commands.verify import add_run_options, check_out_dir, load_modules, make_config, show_progress


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="run all experiments of a profile and write their reports and an index",
        description="Run every registered experiment whose profiles include --profile (or those named by "
                    "--only) and write one report folder each plus index.md/index.html/summary.json.",
    )
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these experiments")
    add_run_options(p)
    p.set_defaults(handler=run)


def selected_experiments(profile: str, only: list[str] | None):
    """Experiments whose ``profiles`` include ``profile``; ``only`` names them explicitly instead
    (run whatever their profiles; unknown names are a usage error)."""
    from transformer_limits.verify.registry import experiment_spec, list_experiments

    if only:
        seen: list[str] = []
        for name in only:
            if name not in seen:
                seen.append(name)
        return [experiment_spec(name) for name in seen]
    return [e for e in list_experiments() if profile in e.profiles]


def not_run_experiments(selected, profile: str, only: list[str] | None) -> list[dict]:
    """Every registered experiment this report does not run, with one line saying why:
    ``"not in profile quick (profiles: full)"``, ``"deliberately wrong variant, run by name"``
    (``profiles=()``), ``"not named by --only"``, and, when a module it requires is missing,
    :func:`transformer_limits.verify.running.missing_requirement`'s line (``"missing requirement:
    needs PyTorch (pip install torch)"``, joined with ``"; "``).  A selected experiment with a
    missing requirement is listed too: it is skipped, not run."""
    from transformer_limits.verify.registry import list_experiments
    from transformer_limits.verify.running import missing_requirement

    chosen = {e.name for e in selected}
    out = []
    for exp in list_experiments():
        reasons = []
        if exp.name not in chosen:
            if only:
                reasons.append("not named by --only")
            if not exp.profiles:  # docs/extending.md: profiles=() is how wrong variants stay out of reports
                reasons.append("deliberately wrong variant, run by name")
            elif not only:
                reasons.append(f"not in profile {profile} (profiles: {', '.join(exp.profiles)})")
        why = missing_requirement(exp)
        if why is not None:
            reasons.append(why)
        if reasons:
            out.append({"name": exp.name, "title": exp.title, "paper": exp.paper, "profiles": list(exp.profiles),
                        "selected": exp.name in chosen, "reason": "; ".join(reasons)})
    return out


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from transformer_limits.atomic_write import replaced_directory
    from transformer_limits.verify.running import run_experiment
    from transformer_limits.verify.sweeps.executors import shared_pools
    from transformer_limits.commands.verify import STATE_WORDS
    from transformer_limits.verify.report import report_entries, summary_counts, write_experiment_report, write_index

    load_modules(args)
    check_out_dir(args.out)
    experiments = selected_experiments(args.profile, args.only)
    if not experiments:
        raise UsageError(f"no experiment includes profile {args.profile!r}")
    # skip (and list) what cannot run here instead of crashing on it
    not_run = not_run_experiments(experiments, args.profile, args.only)
    skipped = {e["name"]: e["reason"] for e in not_run if e["selected"]}
    experiments = [e for e in experiments if e.name not in skipped]
    if not experiments:
        raise UsageError("nothing to run: " + "; ".join(f"{n}: {why}" for n, why in skipped.items()))
    progress = show_progress(args)
    # one bar over experiments; the sweeps' own bars nest below it and vanish when done.  No tqdm
    # monitor thread: sweep pools fork while the outer bar is alive
    tqdm.monitor_interval = 0
    config = make_config(args, progress=progress)
    done = []
    # one process pool for the whole report: its workers start and load their kernels once
    with replaced_directory(args.out, owned=report_entries) as stage, shared_pools():
        bar = tqdm(experiments, desc="experiments", unit="exp", file=sys.stderr, disable=not progress)
        try:
            for exp in bar:
                bar.set_postfix_str(exp.name)
                result = run_experiment(exp, config)
                write_experiment_report(result, stage / exp.name, exp, config)
                done.append((exp, result))
        finally:
            bar.close()
        summary = write_index(done, stage, args.profile, not_run=not_run)
    width = max(len(e["name"]) for e in summary["experiments"])
    word = STATE_WORDS
    lines = [f"{e['name']:<{width}}  {word[e['status']]:<12}  {e['checks_passed']}/{e['checks_total']} "
             f"checks passed  {e['time_s']:.1f} s"
             + (f"  failed: {', '.join(e['failed_checks'])}" if e["failed_checks"] else "")
             + (f"  inconclusive: {', '.join(e['inconclusive_checks'])}" if e["inconclusive_checks"] else "")
             + (f"  crashed: {e['error']}" if e["status"] == "error" else "")
             for e in summary["experiments"]]
    lines += [f"{e['name']:<{width}}  SKIPPED  {e['reason']}" for e in summary["not_run"] if e["selected"]]
    others = sum(not e["selected"] for e in summary["not_run"])
    if others:
        lines.append(f"{others} other registered experiment(s) not run; the index says why")
    lines.append(f"RESULT: {word[summary['status']]} ({summary_counts(summary)}, "
                 f"{summary['total_time_s']:.1f} s); index: {args.out}/index.md")
    emit(summary, args.format, "\n".join(lines))
    crashed = [e["name"] for e in summary["experiments"] if e["status"] == "error"]
    raise_for_status(summary["status"], "report", strict=args.strict,
                     crashed=f"{len(crashed)} experiment(s) crashed ({', '.join(crashed)}); their reports say ERROR")
    return 0
