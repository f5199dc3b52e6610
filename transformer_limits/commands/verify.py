"""``transformer-limits verify``: run one registered experiment and print its verdicts.

    transformer-limits verify NAME [--profile quick|full] [--out DIR] [--seed N] [--workers N]
                                   [--scheduler ADDRESS] [--store PATH.sqlite] [--format text|json]
                                   [--no-progress] [--module FILE.py ...] [--device cpu|cuda|auto]
                                   [--precision float64|float32]
    transformer-limits verify --list [--format json] [--module FILE.py ...]

``--module FILE.py`` (repeatable) imports a Python file first, which registers its experiments
(:func:`transformer_limits.verify.registry.load_experiment_file`); installed plugins (entry-point
group ``transformer_limits.experiments``) are always loaded.  See ``docs/extending.md``.

Exit 0 when no check fails (PASS, or INCONCLUSIVE without ``--strict``), 1 (after printing) when
one fails, 4 with ``--strict`` when none fails but one is INCONCLUSIVE, 2 on bad input (checked before
any work: --module, --out, --store, --scheduler, --device cuda without a usable GPU), 3 when the experiment crashed (printed and written as
ERROR, never FAIL) or the environment failed mid-run; see :mod:`transformer_limits.errors`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from transformer_limits.commands._outcome import UsageError, emit, raise_for_status
from transformer_limits.errors import EXIT_INCONCLUSIVE

PROFILE_CHOICES = ("quick", "full")
DEVICE_CHOICES = ("cpu", "cuda", "auto")  # transformer_limits.numeric.devices.DEVICES
PRECISION_CHOICES = ("float64", "float32")  # transformer_limits.numeric.precision.PRECISIONS
#: ``--out`` needs at least this much free space up front (reports are a few MB at most)
MIN_FREE_BYTES = 1 << 20


def add_run_options(p: argparse.ArgumentParser) -> None:
    """Options shared by ``verify`` and ``report``."""
    p.add_argument("--profile", choices=PROFILE_CHOICES, default="quick",
                   help="quick (CI, about a minute per experiment) or full (publication grids)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p.add_argument("--workers", type=int, default=None,
                   help=f"processes for sweeps (default: the CPUs this process may use, {available_cpus()} here; "
                        "results do not depend on it)")
    p.add_argument("--scheduler", help="dask.distributed scheduler address for sweeps (tcp://host:8786)")
    p.add_argument("--store", help="SQLite sweep store: a killed run resumes where it stopped, e.g. runs.sqlite")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bars on stderr")
    p.add_argument("--device", choices=DEVICE_CHOICES, default="cpu",
                   help="where the kernels run: cpu (default), cuda (a GPU; bad input without one) or auto "
                        "(cuda where usable); kernels without a GPU flavour run on the CPU, and the report "
                        "says so")
    p.add_argument("--precision", choices=PRECISION_CHOICES, default="float64",
                   help="floating-point precision of the simulations: float64 (default) or float32 (an option "
                        "for GPU speed; experiments that declare it run in float32 and state their measured "
                        "error against float64, the others run in float64 and say so)")
    p.add_argument("--strict", action="store_true",
                   help=f"exit {EXIT_INCONCLUSIVE} (not 0) when no check failed but some check is INCONCLUSIVE "
                        "(power below 0.8 against its alternative): for scripts that need a decided answer")
    p.add_argument("--module", action="append", metavar="FILE.py", default=None,
                   help="import this Python file first; it registers its experiments (repeatable; "
                        "see docs/extending.md)")


def load_modules(args: argparse.Namespace) -> None:
    """Import every ``--module`` file (before anything else); a missing file, one that is not
    ``.py``, one that raises or registers a taken name or nothing is bad input (exit 2)."""
    from transformer_limits.errors import InputError
    from transformer_limits.verify.registry import load_experiment_file

    for path in getattr(args, "module", None) or ():
        try:
            load_experiment_file(path)
        except InputError as exc:
            raise UsageError(f"--module: {exc}") from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify",
        help="run one verification experiment and print its verdicts",
        description="Run a registered experiment (see --list), print its checks, optionally write a report.",
    )
    p.add_argument("name", nargs="?", help="experiment name (see --list)")
    p.add_argument("--list", action="store_true", help="list the registered experiments")
    p.add_argument("--out", help="write results.json, report.md and report.html into this folder")
    add_run_options(p)
    p.set_defaults(handler=run)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def check_out_dir(out: str | None) -> None:
    """``--out`` must be usable, checked before any work: not empty, not an existing non-directory
    (nor below one), on a writable file system with at least :data:`MIN_FREE_BYTES` free."""
    import shutil

    if out is None:
        return
    if not out.strip():
        raise UsageError("--out must not be empty (give a folder, e.g. --out report/)")
    path = Path(out)
    if path.is_symlink() and not path.exists():
        raise UsageError(f"--out {out!r} is a dangling symbolic link (to {os.readlink(path)!r})")
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out!r} exists and is not a directory")
    existing = next(d for d in (path.absolute(), *path.absolute().parents) if d.exists())
    if not existing.is_dir():
        raise UsageError(f"--out {out!r}: {str(existing)!r} exists and is not a directory")
    try:
        read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except (AttributeError, OSError):
        read_only = False
    if read_only:
        raise UsageError(f"--out {out!r}: {str(existing)!r} is on a read-only file system")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out!r}: {str(existing)!r} is not writable")
    free = shutil.disk_usage(existing).free
    if free < MIN_FREE_BYTES:
        raise UsageError(f"--out {out!r}: only {free} bytes free on its file system "
                         f"(need at least {MIN_FREE_BYTES})")


def check_store(store: str | None) -> None:
    """Open and validate ``--store`` before any work (creating it when missing); a problem is a
    :class:`transformer_limits.errors.StoreError` (exit 2) naming the store."""
    if store is None:
        return
    from transformer_limits.verify.sweeps import SweepStore

    SweepStore(store).close()


def check_scheduler(scheduler: str | None) -> None:
    """``--scheduler`` must be a reachable dask scheduler (handshake checked) before any work."""
    if scheduler is None:
        return
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise UsageError("--scheduler needs dask.distributed: pip install 'transformer_limits[distributed]'") from None
    from transformer_limits.verify.sweeps import check_scheduler_address

    check_scheduler_address(scheduler)


def make_config(args: argparse.Namespace, *, progress: bool):
    """:class:`ExperimentConfig` from the parsed options (one-line errors for bad values)."""
    from transformer_limits.verify.experiment import ExperimentConfig

    if args.seed < 0:
        raise UsageError(f"--seed must be >= 0, got {args.seed}")
    workers = available_cpus() if args.workers is None else args.workers
    if workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    store = getattr(args, "store", None)
    out = getattr(args, "out", None)
    if store is not None and out is not None and store.strip() and out.strip() \
            and Path(store).resolve() == Path(out).resolve():
        raise UsageError(f"--store {store!r} and --out {out!r} name the same path: the store is a file, the "
                         "report a folder")
    if store is not None and Path(store).is_dir():
        raise UsageError(f"--store {store!r} is a directory; give a .sqlite file path")
    if store is not None and not Path(store).resolve().parent.is_dir():
        raise UsageError(f"--store {store!r}: folder {str(Path(store).parent)!r} does not exist")
    if store is not None and not store.strip():
        raise UsageError("--store must not be empty (give a .sqlite file path)")
    scheduler = getattr(args, "scheduler", None)
    if scheduler is not None and not scheduler.strip():
        raise UsageError("--scheduler needs an address such as tcp://host:8786")
    device, precision = getattr(args, "device", "cpu"), getattr(args, "precision", "float64")
    target = run_target(device, precision)
    check_scheduler(scheduler)
    check_store(store)
    return ExperimentConfig(profile=args.profile, seed=args.seed, workers=workers, progress=progress,
                            scheduler=scheduler, store=store, device=device, precision=precision,
                            target=target)


def run_target(device: str, precision: str = "float64"):
    """The run's :class:`~transformer_limits.numeric.devices.RunTarget`, resolved once, before any
    work: ``--device`` must be usable here (``cuda`` needs a usable CUDA backend)."""
    from transformer_limits.numeric.devices import RunTarget

    try:
        return RunTarget.resolve(device, precision)
    except ValueError as exc:
        raise UsageError(f"--device {device}: {exc}") from None


def show_progress(args: argparse.Namespace) -> bool:
    return not args.no_progress and sys.stderr.isatty()


#: how each state reads in text output
STATE_WORDS = {"pass": "PASS", "inconclusive": "INCONCLUSIVE", "fail": "FAIL", "error": "ERROR"}


def power_text(check: dict) -> str:
    """``0.93`` or ``—`` (not stated) for a check's ``results.json`` entry."""
    power = check.get("power")
    return "—" if power is None else f"{power:.2f}"


def verdict_table(payload: dict) -> str:
    """Readable verdicts of one ``results.json`` payload."""
    from transformer_limits.verify.report import check_counts, check_state

    checks = payload["checks"]
    status = payload.get("status") or ("pass" if payload["passed"] else "fail")
    width = max([len("check")] + [len(c["name"]) for c in checks])
    run_s = payload["provenance"].get("timings", {}).get("run_s")
    device = payload["provenance"].get("device", "cpu")
    precision = payload["provenance"].get("precision", "float64")
    lines = [f"{payload['experiment']} — {payload['title']} (paper {payload['paper']}, profile "
             f"{payload['profile']}" + ("" if device == "cpu" else f", device {device}")
             + ("" if precision == "float64" else f", {precision}")
             + (f", {run_s:.1f} s)" if run_s is not None else ")"),
             f"  {'check':<{width}}  {'verdict':<12}  {'power':>5}  {'expected':>10}  {'measured':>10}  CI"]
    for c in checks:
        low, high = c["ci"]
        ci = f"[{'-inf' if low is None else f'{low:.4g}'}, {'inf' if high is None else f'{high:.4g}'}]"
        exp = "—" if c["expected"] is None else f"{c['expected']:.4g}"
        meas = "—" if c["measured"] is None else f"{c['measured']:.4g}"
        state = check_state(c)
        lines.append(f"  {c['name']:<{width}}  {STATE_WORDS[state]:<12}  {power_text(c):>5}  {exp:>10}  "
                     f"{meas:>10}  {ci}")
        if state == "inconclusive" and c.get("power") is None:
            lines.append(f"  {'':<{width}}  power not stated: the check cannot say how large a violation it "
                         "could have detected")
        elif c.get("note") and state != "pass":
            lines.append(f"  {'':<{width}}  {c['note']}")
    if status == "error":
        lines.append(f"RESULT: ERROR (the experiment crashed: {payload.get('error')}; not a failed check)")
    else:
        lines.append(f"RESULT: {STATE_WORDS[status]} ({check_counts(checks)})")
    return "\n".join(lines)


def _source_note(source: dict | None) -> str:
    """Where a listed experiment comes from, when not from this package."""
    if not source or source.get("kind") in ("built-in", None):
        return ""
    if source["kind"] == "plugin":
        return f"  (plugin {source['entry_point']})"
    if source["kind"] == "module":
        return f"  (from {source['path']})"
    return f"  (from {source.get('module', '?')})"


def _list(args: argparse.Namespace) -> int:
    from transformer_limits.verify.registry import experiment_source, list_experiments

    exps = list_experiments()
    sources = {e.name: experiment_source(e.name) for e in exps}
    width = max([len(e.name) for e in exps] + [4])
    text = "\n".join(f"{e.name:<{width}}  paper {e.paper}  [{', '.join(e.profiles)}]  {e.title}"
                     + _source_note(sources[e.name]) for e in exps)
    emit([dict(e.to_dict(), source=sources[e.name]) for e in exps], args.format,
         text or "(no experiments registered)")
    return 0


def run(args: argparse.Namespace) -> int:
    load_modules(args)
    if args.list:
        if args.name or args.out:
            raise UsageError("verify --list takes no NAME or --out")
        return _list(args)
    if not args.name:
        raise UsageError("verify needs an experiment NAME or --list")
    from transformer_limits.verify.registry import experiment_spec
    from transformer_limits.verify.running import run_experiment
    from transformer_limits.verify.report import results_payload, write_experiment_report

    experiment = experiment_spec(args.name)
    check_out_dir(args.out)
    config = make_config(args, progress=show_progress(args))
    result = run_experiment(experiment, config)
    if args.out:
        payload = write_experiment_report(result, args.out, experiment, config)
    else:
        payload = results_payload(result, experiment, config)
    text = verdict_table(payload) + (f"\nreport: {args.out}/report.md" if args.out else "")
    emit(payload, args.format, text)
    raise_for_status(payload["status"], args.name, strict=args.strict,
                     crashed=f"experiment {args.name} crashed: {payload['error']}")
    return 0
