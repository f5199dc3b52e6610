"""What an experiment is: its declaration, its configuration and its result.

An :class:`Experiment` declares a claim, the derivations it rests on, its checks
(:class:`~transformer_limits.verify.check_spec.CheckSpec`: claim, verdict, alpha, tolerance) and a
``run`` function ``run(config: ExperimentConfig) -> ExperimentResult``.  The result carries the
verdicts (:class:`transformer_limits.verify.verdicts.Check`), fitted rates, tables and figures;
:func:`transformer_limits.verify.running.run_experiment` runs it, holds it to the declared checks and
records its provenance, and the report writer (:mod:`transformer_limits.verify.report`) turns any
result into ``results.json``, ``report.md`` and a self-contained ``report.html``.

Experiments are registered with :func:`transformer_limits.verify.registry.register_experiment`;
see ``docs/extending.md`` for the whole recipe.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

from transformer_limits.numeric.devices import DEVICES, RunTarget
from transformer_limits.numeric.kernel_family import KernelFamily
from transformer_limits.numeric.precision import PRECISIONS
from transformer_limits.verify.check_spec import CheckSpec
from transformer_limits.verify.verdicts import Check

__all__ = ["EXPERIMENT_NAME", "Experiment", "ExperimentConfig", "ExperimentResult", "Figure", "PrecisionError", "PROFILES",
           "run_settings", "run_target"]

PROFILES = ("quick", "full")
#: what an experiment name may be: it is a folder name in reports (never "", ".", ".." or a path)
EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@dataclass(frozen=True)
class ExperimentConfig:
    """How to run: ``profile`` picks the grid (``quick`` for CI and the README, ``full`` for
    publication-grade grids), ``seed`` the base seed, ``workers`` the process count, ``progress``
    whether to show tqdm bars (on stderr), ``scheduler`` an optional dask.distributed address,
    ``store`` an optional SQLite sweep store path (resumable sweeps), ``device`` where the kernels
    run: ``cpu`` (default), ``cuda`` or ``auto``
    (``transformer_limits.numeric.devices.RunTarget.resolve``; ``run_experiment`` resolves it, so
    ``run`` sees ``cpu`` or ``cuda``), ``precision`` the floating-point precision of the simulations:
    ``float64`` (default) or ``float32`` (where the experiment declares it in
    ``Experiment.precisions``; else it runs in float64 and says so).  ``target`` is the
    :class:`~transformer_limits.numeric.devices.RunTarget` ``run_experiment`` resolved (device,
    precision and the backend of each kernel family the experiment declares in ``Experiment.kernels``);
    ``run`` reads backends from it (:func:`run_settings`), never resolves a device itself."""

    profile: str = "quick"
    seed: int = 0
    workers: int = 1
    progress: bool = False
    scheduler: str | None = None
    store: str | None = None
    device: str = "cpu"
    precision: str = "float64"
    target: RunTarget | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {self.profile!r}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))
        if self.target is not None and not isinstance(self.target, RunTarget):
            raise ValueError(f"target must be a RunTarget or None, got {type(self.target).__name__}")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("target")  # recorded in provenance (device, device_reason, backends)
        return out


def run_target(config: ExperimentConfig, kernels: Mapping[str, KernelFamily] = {},
               settings: Mapping[str, Any] | None = None) -> RunTarget:
    """The run target of ``config``: ``config.target`` (set by ``run_experiment``), else, for a ``run``
    called directly, ``config.device`` / ``config.precision`` resolved with the families of
    ``kernels`` (settings key -> family) on the backends ``settings`` name."""
    if config.target is not None:
        return config.target
    named = settings or {}
    return RunTarget.resolve(config.device, config.precision).with_kernels(
        {fam: named.get(key) for key, fam in kernels.items()})


def run_settings(config: ExperimentConfig, settings: Mapping[str, Any],
                 kernels: Mapping[str, KernelFamily]) -> dict[str, Any]:
    """``settings`` as a run uses them on its target: each key of ``kernels`` (settings key -> kernel
    family, as the experiment declares in ``Experiment.kernels``) names the backend the target chose
    for that family (on ``cpu`` in float64 the settings' own, so a cpu run is the profile's run bit for
    bit), and ``precision`` is added for a float32 run."""
    target = run_target(config, kernels, settings)
    out = dict(settings)
    for key, fam in kernels.items():
        out[key] = target.backend(fam)
    if target.precision != "float64":
        out["precision"] = target.precision
    return out


@dataclass
class Figure:
    """A plot for the report: a PNG (bytes) plus a caption.

    Build it with matplotlib (Agg) and ``transformer_limits.verify.figures.figure_png``; the
    report embeds it in HTML as base64 and writes it next to ``report.md``.
    """

    name: str
    png: bytes
    caption: str


@dataclass
class ExperimentResult:
    """What an experiment run produced.

    Fields::

        checks      verdicts (each has name, claim, expected, measured, ci, passed, statistics, note)
        fits        JSON-able fitted rates keyed by name (exponents with CIs, constants, windows)
        tables      named lists of row dicts (rendered as Markdown/HTML tables, saved in results.json)
        figures     plots
        notes       free-text findings (e.g. "the L^-1/3 term is not tight")
        data        JSON-able raw results kept in results.json but not rendered (e.g. the worst
                    inputs found by the sup-over-inputs ascent, as arrays)
        provenance  what only the run knows (per-point seeds, phase seconds); run_experiment adds
                    seed, settings and timings, the report versions, git commit and config hash
        error       None, or one line saying why the run crashed, broke its declarations or returned
                    an invalid result (set by run_experiment; a traceback is in notes): status
                    "error", neither a pass nor a failed check.
        estimates   check name -> the estimate an executable declared check decides (a fit, or
                    label -> fit for a family): run_experiment turns each into its Check
                    (:meth:`decide`), so run() returns estimates and the runner decides; not
                    saved (the fits are, in ``fits``).  A result with estimates still undecided
                    (run() called directly, without :meth:`decide`) has status "error", never
                    a silent pass.
    """

    experiment: str
    profile: str
    checks: list[Check] = field(default_factory=list)
    fits: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    estimates: dict[str, Any] = field(default_factory=dict)

    def decide(self, specs: "tuple[CheckSpec, ...] | list[CheckSpec]") -> "ExperimentResult":
        """Decide the pending ``estimates`` with their declarations ``specs`` (the experiment's
        ``checks``): each becomes its :class:`Check` (``CheckSpec.decide``), the checks are put in
        declared order and ``estimates`` is emptied.  Returns ``self``."""
        from transformer_limits.verify.check_spec import decide_declared

        if self.estimates:
            self.checks = decide_declared(specs, self.estimates, list(self.checks))
            self.estimates = {}
        return self

    @property
    def passed(self) -> bool:
        """Every check passed with power (state ``pass``) and the run did not crash."""
        return self.status == "pass"

    @property
    def status(self) -> str:
        """``"error"`` (crashed or invalid), ``"fail"`` (a check failed: the data contradict the claim),
        ``"inconclusive"`` (nothing contradicted, but some check had power below 0.8 against its
        alternative, or none stated) or ``"pass"`` (every check passed with power)."""
        if self.error is not None or self.estimates:  # crashed, or estimates nobody decided
            return "error"
        states = {c.state for c in self.checks}
        if "fail" in states:
            return "fail"
        return "inconclusive" if "inconclusive" in states else "pass"

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    @property
    def inconclusive_checks(self) -> list[Check]:
        return [c for c in self.checks if c.state == "inconclusive"]


@dataclass(frozen=True)
class Experiment:
    """A claim and how to check it.

    Fields::

        name         CLI name (transformer-limits verify NAME)
        title        one line
        paper        "A", "B" or "C"
        claim        the statement being checked, in the symbols of docs/theory.md §0.3
        derivations  names of the derivations it rests on (linked from the report)
        checks       the checks it always reports, declared once: CheckSpec objects (a bare name is
                     CheckSpec(name)); run() reads their alpha / tolerance, run_experiment holds
                     the result to them
        run          run(config) -> ExperimentResult
        profiles     profiles in which report includes it (("quick", "full") or ("full",))
        budget_s     wall time per profile on 2 cores, an upper figure (--workers 1, other work
                     running: provenance.timings.run_s of such reports); the README shows it
        requires     modules it must import (e.g. ("torch",)); where one is missing it is not
                     run (missing_requirement() says why: verify exits 2, report lists it)
        settings     profile -> the settings run() uses, recorded in provenance by run_experiment
        precisions   the precisions run() honours (config.precision): ("float64",) by default; an
                     experiment that also runs in float32 declares ("float64", "float32") and a
                     precision_probe
        precision_probe  probe(config) -> PrecisionError: one representative simulation of the
                     profile in float32 and in float64, compared; run_experiment records it for
                     every float32 run (provenance.precision_error and a note in the report)
        kernels      settings key -> KernelFamily: the kernel families run() calls and the key of its
                     settings that names the CPU backend of each; run_experiment resolves their
                     backends on the run's device once (config.target) and records them
    """

    name: str
    title: str
    paper: str
    claim: str
    derivations: tuple[str, ...]
    checks: tuple[CheckSpec, ...]
    run: Callable[[ExperimentConfig], ExperimentResult]
    profiles: tuple[str, ...] = PROFILES
    budget_s: dict[str, float] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    precisions: tuple[str, ...] = ("float64",)
    precision_probe: Callable[[ExperimentConfig], "PrecisionError"] | None = None
    kernels: Mapping[str, KernelFamily] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and EXPERIMENT_NAME.fullmatch(self.name)):
            # the name is a folder of a report (--out/<name>/): it must not leave --out or be "." / ".."
            raise ValueError(f"experiment name must be letters, digits, '-', '_' or '.' starting with a letter or "
                             f"digit (it names a report folder), got {self.name!r}")
        bad = [p for p in self.precisions if p not in PRECISIONS]
        if bad or "float64" not in self.precisions:
            raise ValueError(f"precisions must include float64 and only {', '.join(PRECISIONS)}, "
                             f"got {self.precisions!r}")
        if "float32" in self.precisions and self.precision_probe is None:
            raise ValueError(f"experiment {self.name!r} declares float32 but no precision_probe "
                             "(a float32 run must state its error against float64)")
        if isinstance(self.checks, (str, CheckSpec)):
            raise ValueError(f"checks must be a sequence of CheckSpec objects or names, got {self.checks!r}")
        specs = tuple(CheckSpec.of(c) for c in self.checks)
        names = [s.name for s in specs]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"checks declares {', '.join(twice)} more than once")
        object.__setattr__(self, "checks", specs)
        for key, fam in dict(self.kernels).items():
            if not isinstance(fam, KernelFamily):
                raise ValueError(f"kernels must map settings keys to KernelFamily objects, got {key!r}: {fam!r}")
            for profile, s in self.settings.items():
                if key not in s:
                    raise ValueError(f"experiment {self.name!r}: kernels names the setting {key!r}, which "
                                     f"the {profile} settings lack")

    @property
    def check_names(self) -> tuple[str, ...]:
        """The declared checks' names, in declaration order."""
        return tuple(s.name for s in self.checks)

    def check(self, name: str) -> CheckSpec:
        """The declaration of check ``name``; ``ValueError`` naming it when there is none."""
        for spec in self.checks:
            if spec.name == name:
                return spec
        raise ValueError(f"experiment {self.name!r} declares no check {name!r} "
                         f"(declared: {', '.join(self.check_names)})")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description (everything but ``run``)."""
        return {"name": self.name, "title": self.title, "paper": self.paper, "claim": self.claim,
                "derivations": list(self.derivations), "check_names": list(self.check_names),
                "profiles": list(self.profiles), "budget_s": dict(self.budget_s),
                "requires": list(self.requires), "precisions": list(self.precisions)}


@dataclass(frozen=True)
class PrecisionError:
    """How far a float32 simulation is from the same simulation in float64: ``quantity`` (what was
    compared, one line), ``max_abs`` = max over entries of ``|y32 − y64|`` and ``max_rel`` =
    ``max_abs / max |y64|``."""

    quantity: str
    max_abs: float
    max_rel: float

    @classmethod
    def between(cls, quantity: str, y32: Any, y64: Any) -> "PrecisionError":
        """Compare two arrays of the same shape (float32 result, float64 result)."""
        import numpy as np

        a, b = np.asarray(y32, dtype=np.float64), np.asarray(y64, dtype=np.float64)
        if a.shape != b.shape:
            raise ValueError(f"y32 and y64 must have the same shape, got {a.shape} and {b.shape}")
        err = float(np.max(np.abs(a - b))) if a.size else 0.0
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        return cls(quantity, err, err / scale if scale > 0 else err)

    def to_dict(self) -> dict[str, Any]:
        return {"quantity": self.quantity, "max_abs": self.max_abs, "max_rel": self.max_rel}
