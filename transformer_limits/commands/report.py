"""``transformer-limits report``: run every experiment of a profile and write all reports + an index.

    transformer-limits report [--profile quick|full] --out DIR [--only NAME ...] [--seed N]
                              [--workers N] [--scheduler ADDRESS] [--store PATH.sqlite]
                              [--format text|json] [--no-progress]

Writes ``DIR/<name>/{results.json,report.md,report.html,*.png}`` per experiment and
``DIR/{index.md,index.html,summary.json}``.  An exception inside an experiment is reported as its
failed check ``ran_without_error`` (traceback in its notes); the other experiments still run.
With ``--store`` the experiments' sweeps are kept in one SQLite file, so a killed (full) report rerun
with the same options skips every point it already finished.
Exit 0 when every check of every experiment passes, 1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys

from transformer_limits.cli import CheckFailed, UsageError, emit
from transformer_limits.commands.verify import add_run_options, check_out_dir, make_config, show_progress


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
    from transformer_limits.verify.experiment import experiment_spec, list_experiments

    if only:
        seen: list[str] = []
        for name in only:
            if name not in seen:
                seen.append(name)
        return [experiment_spec(name) for name in seen]
    return [e for e in list_experiments() if profile in e.profiles]


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from transformer_limits.verify.experiment import run_experiment
    from transformer_limits.verify.report import write_experiment_report, write_index

    check_out_dir(args.out)
    experiments = selected_experiments(args.profile, args.only)
    if not experiments:
        raise UsageError(f"no experiment includes profile {args.profile!r}")
    progress = show_progress(args)
    # one bar over experiments; the sweeps' own bars nest below it and vanish when done.  No tqdm
    # monitor thread: sweep pools fork while the outer bar is alive
    tqdm.monitor_interval = 0
    config = make_config(args, progress=progress)
    done = []
    bar = tqdm(experiments, desc="experiments", unit="exp", file=sys.stderr, disable=not progress)
    for exp in bar:
        bar.set_postfix_str(exp.name)
        result = run_experiment(exp, config)
        write_experiment_report(result, f"{args.out}/{exp.name}", exp, config)
        done.append((exp, result))
    bar.close()
    summary = write_index(done, args.out, args.profile)
    width = max(len(e["name"]) for e in summary["experiments"])
    lines = [f"{e['name']:<{width}}  {'PASS' if e['passed'] else 'FAIL'}  {e['checks_passed']}/{e['checks_total']} "
             f"checks  {e['time_s']:.1f} s" + (f"  failed: {', '.join(e['failed_checks'])}" if e["failed_checks"] else "")
             for e in summary["experiments"]]
    lines.append(f"RESULT: {'PASS' if summary['passed'] else 'FAIL'} ({summary['n_passed']}/"
                 f"{summary['n_experiments']} experiments passed, {summary['total_time_s']:.1f} s); "
                 f"index: {args.out}/index.md")
    emit(summary, args.format, "\n".join(lines))
    if not summary["passed"]:
        raise CheckFailed("report")
    return 0
