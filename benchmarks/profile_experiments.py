"""Where the time of each experiment goes: wall and CPU time, cores busy, and the share of every phase.

Each experiment runs as the user runs it (``python3 -m transformer_limits verify NAME --profile P
--workers W``, a fresh process: start-up included) under py-spy, sampling the main process and its
sweep workers (``--subprocesses``; idle threads are not sampled, so samples measure CPU, not waiting).
Every sample's stack is put in one phase, the first rule that matches in this order:

===================  ===========================================================================
phase                a frame of the stack in
===================  ===========================================================================
start-up / imports   the import machinery (``<frozen importlib._bootstrap>``): interpreter and
                     package start-up, lazy imports, the workers' start-up
compilation          numba or llvmlite (JIT compilation of the generated kernels, the disk cache)
code generation      SymPy, ``transformer_limits/symbolic``, ``kernel_cache``
figures              matplotlib, PIL, ``verify/figures.py``, ``verify/rate_plots.py``
statistics           ``verify/stats``, ``verdicts.py``, ``scaling_fit.py``, ``scipy/stats``
ascent               ``verify/input_search.py`` (the sup-over-inputs searches: their simulations too)
simulation           ``transformer_limits/numeric`` (the models, their limits and adjoints, training)
error measurement    POT (the Wasserstein distances of propagation-of-chaos)
sweep machinery      the innermost frame in ``verify/sweeps``, ``verify/running.py``, multiprocessing,
                     pickle, sqlite3, selectors, threading, queue (the pools' own work and waiting)
no Python frame      none (the interpreter starting or tearing down a process, the collector)
other                the rest (the experiment's own glue)
===================  ===========================================================================

Wall time is measured around the command, CPU time is the command's children's ``rusage`` (user +
system, the workers included), and ``cores busy`` = CPU / wall.  Usage::

    python3 -m pip install py-spy
    python3 benchmarks/profile_experiments.py --profile quick --workers 2 --json prof.json --markdown prof.md
    python3 benchmarks/profile_experiments.py --profile full --only sde-limit lions-taylor

The table in docs/performance.md was made with these commands (``--rate``: samples per second and
process; 50 by default, about 1 % overhead).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

#: (phase, pattern a frame's "function (file:line)" text must match); the first phase with a match wins
PHASE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("start-up / imports", re.compile(r"<frozen importlib\._bootstrap")),
    ("compilation", re.compile(r"\((?:[^()]*/)?(?:numba|llvmlite)/")),
    ("code generation", re.compile(r"\((?:[^()]*/)?(?:sympy/|transformer_limits/symbolic/|transformer_limits/kernel_cache\.py)")),
    ("figures", re.compile(r"\((?:[^()]*/)?(?:matplotlib/|PIL/|transformer_limits/verify/(?:figures|rate_plots)\.py)")),
    ("statistics", re.compile(r"\((?:[^()]*/)?(?:transformer_limits/verify/(?:stats/|verdicts\.py|scaling_fit\.py)|scipy/stats/)")),
    ("ascent", re.compile(r"\((?:[^()]*/)?transformer_limits/verify/input_search\.py")),
    ("simulation", re.compile(r"\((?:[^()]*/)?transformer_limits/numeric/")),
    ("error measurement", re.compile(r"\((?:[^()]*/)?ot/")),
)
#: the sweep machinery owns a sample only when it is the innermost frame (every worker's stack starts in
#: multiprocessing, whatever the worker is doing)
SWEEP_FRAME = re.compile(r"\((?:[^()]*/)?(?:transformer_limits/verify/(?:sweeps/|running\.py)|multiprocessing/|"
                         r"concurrent/|pickle|sqlite3/|selectors\.py|threading\.py|queue\.py)")
PHASES = tuple(p for p, _ in PHASE_RULES) + ("sweep machinery", "no Python frame", "other")


def phase_of(stack: str) -> str:
    """The phase of one collapsed stack (frames joined by ``;``, outermost first, the first being
    py-spy's process label): ``no Python frame`` when the process had none (the interpreter starting
    or tearing down, the garbage collector)."""
    if ";" not in stack:
        return "no Python frame"
    for phase, pattern in PHASE_RULES:
        if pattern.search(stack):
            return phase
    return "sweep machinery" if SWEEP_FRAME.search(stack.rsplit(";", 1)[-1]) else "other"


def phase_shares(raw: str) -> tuple[dict[str, float], int]:
    """(share of samples per phase, number of samples) of py-spy's raw (collapsed) output."""
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            counts[phase_of(stack)] += int(n)
    total = sum(counts.values())
    return {p: (counts[p] / total if total else 0.0) for p in PHASES}, total


def profile_one(name: str, profile: str, workers: int, rate: int, python: str = sys.executable) -> dict:
    """Run ``verify NAME`` under py-spy; wall, CPU, cores busy, exit code and the phase shares."""
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("py-spy is not installed: python3 -m pip install py-spy")
    with tempfile.TemporaryDirectory() as tmp:
        raw_path = Path(tmp) / "raw.txt"
        command = [python, "-m", "transformer_limits", "verify", name, "--profile", profile, "--workers",
                   str(workers), "--no-progress", "--format", "json"]
        # py-spy's own CPU must not count: time the command in a wrapper whose children are the command only
        wrapper = [python, "-c", _WRAPPER, str(Path(tmp) / "times.json"), *command]
        t0 = time.perf_counter()
        proc = subprocess.run([spy, "record", "--format", "raw", "--subprocesses", "--rate", str(rate),
                               "--nonblocking", "-o", str(raw_path), "--", *wrapper],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wall_outer = time.perf_counter() - t0
        times = json.loads((Path(tmp) / "times.json").read_text()) if (Path(tmp) / "times.json").exists() else {}
        shares, samples = phase_shares(raw_path.read_text() if raw_path.exists() else "")
    status = None
    try:
        status = json.loads(times.get("stdout", "") or "{}").get("status")
    except json.JSONDecodeError:
        pass
    wall = times.get("wall_s", wall_outer)
    cpu = times.get("cpu_s", float("nan"))
    return {"experiment": name, "profile": profile, "workers": workers, "exit_code": times.get("rc", proc.returncode),
            "status": status, "wall_s": wall, "cpu_s": cpu, "cores_busy": cpu / wall if wall else float("nan"),
            "samples": samples, "shares": shares}


# runs the command, records its wall time and its (and its children's) CPU time, and its stdout
_WRAPPER = """
import json, resource, subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
json.dump({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rc": p.returncode, "stdout": p.stdout}, open(out, "w"))
"""


def markdown_table(rows: list[dict]) -> str:
    head = ["experiment", "profile", "status", "wall s", "CPU s", "cores busy"] + [p for p in PHASES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"`{r['experiment']}`", r["profile"], str(r["status"]), f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}",
                 f"{r['cores_busy']:.2f}"] + [f"{100 * r['shares'][p]:.0f} %" for p in PHASES]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", choices=("quick", "full"), default="quick")
    ap.add_argument("--only", nargs="+", help="experiment names (default: every experiment of the profile)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rate", type=int, default=50, help="py-spy samples per second and process")
    ap.add_argument("--json", help="write the rows here (JSON)")
    ap.add_argument("--markdown", help="write the table here (Markdown)")
    args = ap.parse_args(argv)
    if args.workers < 1 or args.rate < 1:
        ap.error("--workers and --rate must be >= 1")
    from transformer_limits.verify.registry import list_experiments

    names = args.only or [e.name for e in list_experiments() if args.profile in e.profiles]
    rows = []
    for name in names:
        row = profile_one(name, args.profile, args.workers, args.rate)
        rows.append(row)
        print(f"{name}: {row['wall_s']:.1f} s wall, {row['cpu_s']:.1f} s CPU, status {row['status']}", file=sys.stderr)
    table = markdown_table(rows)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "phases": PHASES, "rate": args.rate}, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
