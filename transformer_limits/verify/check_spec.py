"""A check declared once: its name, the claim it tests, the verdict that decides it, its
false-failure rate, its tolerance and the alternative (the violation it must detect, against which
its power is reported).

An :class:`~transformer_limits.verify.experiment.Experiment` lists its checks as ``CheckSpec``
objects (``checks=(...)``).  The experiment's ``run`` reads ``alpha`` and ``tolerance`` from the
declaration instead of a second copy of the numbers, and
:func:`~transformer_limits.verify.running.run_experiment` holds every result to it
(:func:`declaration_errors`): the result reports exactly the declared checks, a check whose
``claim`` is empty gets the declared text, and a declared ``alpha`` is the one the check's
statistics state (every verdict's false-failure rate is its ``alpha``: docs/theory.md §0.3 gives
the symbols of the claims, docs/verification.md the verdicts).

**Executable verdicts.**  A check whose ``verdict`` is one of :data:`DECIDABLE_VERDICTS` and which
declares its ``claimed`` value decides itself: :meth:`CheckSpec.decide` applies the verdict to an
estimate with the declared numbers (claimed value, α, tolerance, alternative), names the check and,
with ``family="bonferroni"``, tests a family of estimates each at α/n and combines them.  ``run()``
may then return estimates only (``ExperimentResult.estimates``: check name -> fit) and
:func:`~transformer_limits.verify.running.run_experiment` decides (``decide_declared``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["CheckSpec", "DECIDABLE_VERDICTS", "apply_declarations", "declaration_errors", "decide_declared"]

#: verdicts a CheckSpec can apply itself (:meth:`CheckSpec.decide`); the value says whether the
#: verdict needs the ``claimed`` value (slope_zero tests 0)
DECIDABLE_VERDICTS: dict[str, bool] = {"rate_at_least": True, "exponent_equals": True, "slope_zero": False}
#: how a family of estimates is combined (``CheckSpec.family``)
FAMILIES = ("bonferroni",)


@dataclass(frozen=True)
class CheckSpec:
    """One declared check.

    Fields::

        name       the check's name in results (e.g. exponent_L); no whitespace
        claim      the claim in words and symbols, recorded on the Check when run() leaves its claim
                   empty ("" where the verdict writes the claim itself, e.g. "err ~ L^-1")
        verdict    the test that decides it, e.g. "exponent_equals", "rate_at_least", "deterministic"
        alpha      the false-failure rate (0.0 for a deterministic check; None: not declared)
        tolerance  the declared tolerance of the verdict (e.g. |q − q₀| ≤ tolerance); None: none
        alternative       the violation the check must detect, as a value of the tested quantity
                   (an exponent q₁ for an exponent check, Δβ₁ < 0 for an ordering, a slope for a
                   trend); the run reports its power against it (docs/verification.md, "Power");
                   None for a deterministic check whose rule rejects every violation
        alternative_text  that violation in words (recorded on the Check when run() leaves it empty)
        claimed    the claimed value of the tested quantity (an exponent q₀ or q_claim); with a
                   verdict of DECIDABLE_VERDICTS it makes the check executable (:meth:`decide`)
        family     None (one estimate) or "bonferroni" (a family of estimates, each tested at
                   α/n, failing when one fails: ``verdicts.bonferroni_family``)
    """

    name: str
    claim: str = ""
    verdict: str = ""
    alpha: float | None = None
    tolerance: float | None = None
    alternative: float | None = None
    alternative_text: str = ""
    claimed: float | None = None
    family: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or any(c.isspace() for c in self.name):
            raise ValueError(f"name must be a non-empty string without whitespace, got {self.name!r}")
        if self.alpha is not None and not (isinstance(self.alpha, (int, float)) and 0.0 <= self.alpha < 0.5):
            raise ValueError(f"alpha must be None or in [0, 0.5), got {self.alpha!r}")
        if self.tolerance is not None and not (isinstance(self.tolerance, (int, float))
                                               and math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ValueError(f"tolerance must be None or a finite number >= 0, got {self.tolerance!r}")
        if self.alternative is not None and not (isinstance(self.alternative, (int, float))
                                                 and math.isfinite(self.alternative)):
            raise ValueError(f"alternative must be None or a finite number, got {self.alternative!r}")
        if self.claimed is not None and not (isinstance(self.claimed, (int, float)) and math.isfinite(self.claimed)):
            raise ValueError(f"claimed must be None or a finite number, got {self.claimed!r}")
        if self.family is not None and self.family not in FAMILIES:
            raise ValueError(f"family must be None or one of {', '.join(FAMILIES)}, got {self.family!r}")
        if self.family is not None and not self.executable:
            raise ValueError(f"check {self.name}: a family needs an executable verdict "
                             f"({', '.join(DECIDABLE_VERDICTS)}) and its claimed value")

    @property
    def executable(self) -> bool:
        """Whether :meth:`decide` can apply the verdict: a decidable verdict, α declared, and the
        claimed value where the verdict needs one."""
        needs_claim = DECIDABLE_VERDICTS.get(self.verdict)
        return needs_claim is not None and self.alpha is not None and (self.claimed is not None or not needs_claim)

    def _decide_one(self, fit: Any, alpha: float) -> Any:
        from transformer_limits.verify import verdicts

        tolerance = self.tolerance or 0.0
        if self.verdict == "slope_zero":
            return verdicts.slope_zero(fit, alpha, tolerance=tolerance, alternative=self.alternative)
        claimed = float(self.claimed)  # type: ignore[arg-type]  # executable: declared for these verdicts
        if self.verdict == "rate_at_least":
            return verdicts.rate_at_least(fit, claimed, alpha, alternative=self.alternative)
        return verdicts.exponent_equals(fit, claimed, alpha, tolerance=tolerance, alternative=self.alternative)

    def decide(self, estimate: Any, *, claim: str = "", sides: str = "", member_claim: str = "") -> Any:
        """The :class:`~transformer_limits.verify.verdicts.Check` of this declaration on ``estimate``:
        a fit (``family`` None) or a mapping label -> fit (``family="bonferroni"``: each member at
        α/n, combined by ``verdicts.bonferroni_family``, ``sides``
        describing the members, ``member_claim`` their claim when the verdict's own text is not the
        one to state).  The check carries the declared name, ``claim`` (else the declared
        claim, else the verdict's own text) and its power against the declared alternative."""
        if not self.executable:
            raise ValueError(f"check {self.name} is not executable: verdict {self.verdict!r} with claimed "
                             f"{self.claimed!r} and alpha {self.alpha!r}")
        alpha = self.required_alpha
        if self.family is None:
            if isinstance(estimate, Mapping):
                raise ValueError(f"check {self.name} decides one estimate, got a mapping (declare family=...)")
            check = self._decide_one(estimate, alpha)
            check.name, check.claim = self.name, claim or self.claim or check.claim
            return check
        if not isinstance(estimate, Mapping) or not estimate:
            raise ValueError(f"check {self.name} decides a family: estimate must be a non-empty mapping label -> fit")
        from transformer_limits.verify.verdicts import bonferroni_family

        labels = [str(k) for k in estimate]
        members = [self._decide_one(fit, alpha / len(labels)) for fit in estimate.values()]
        for member in members:
            member.claim = member_claim or member.claim
        return bonferroni_family(self.name, claim or self.claim or members[0].claim, self.claimed, members, alpha,
                                 sides or f"{members[0].statistics['sides']}, each at α/{len(labels)}", labels)

    @property
    def required_alpha(self) -> float:
        """The declared ``alpha``, for a check whose run needs one (ValueError if it is undeclared)."""
        if self.alpha is None:
            raise ValueError(f"check {self.name} declares no alpha, but its run needs one")
        return self.alpha

    @property
    def required_tolerance(self) -> float:
        """The declared ``tolerance``, for a check whose run needs one (ValueError if it is undeclared)."""
        if self.tolerance is None:
            raise ValueError(f"check {self.name} declares no tolerance, but its run needs one")
        return self.tolerance

    @property
    def required_alternative(self) -> float:
        """The declared ``alternative``, for a check whose run computes a power (ValueError if undeclared)."""
        if self.alternative is None:
            raise ValueError(f"check {self.name} declares no alternative, but its run needs one")
        return float(self.alternative)

    @classmethod
    def of(cls, item: "CheckSpec | str") -> "CheckSpec":
        """``item`` itself, or ``CheckSpec(item)`` for a bare name (a check with nothing else declared)."""
        if isinstance(item, CheckSpec):
            return item
        if isinstance(item, str):
            return cls(item)
        raise ValueError(f"checks must hold CheckSpec objects or names, got {type(item).__name__}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "claim": self.claim, "verdict": self.verdict, "alpha": self.alpha,
                "tolerance": self.tolerance, "alternative": self.alternative,
                "alternative_text": self.alternative_text, "claimed": self.claimed, "family": self.family}


def declaration_errors(specs: Sequence[CheckSpec], checks: Iterable[Any]) -> list[str]:
    """Why ``checks`` (verdicts of one run) do not match the declarations ``specs`` (empty: they do):
    a declared check missing, a check reported that is not declared, a check reported twice, or a
    statistics ``alpha`` other than the declared one."""
    checks = list(checks)
    declared = {s.name: s for s in specs}
    names = [c.name for c in checks]
    errors = []
    missing = [n for n in declared if n not in names]
    if missing:
        errors.append(f"the result lacks the declared check(s) {', '.join(missing)}")
    extra = sorted({n for n in names if n not in declared})
    if extra:
        errors.append(f"the result reports undeclared check(s) {', '.join(extra)}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        errors.append(f"the result reports check(s) {', '.join(twice)} more than once")
    for check in checks:
        spec = declared.get(check.name)
        stated = (check.statistics or {}).get("alpha")
        if spec is not None and spec.alpha is not None and stated is not None \
                and not math.isclose(float(stated), spec.alpha, rel_tol=1e-12, abs_tol=1e-15):
            errors.append(f"check {check.name} used alpha={stated:g}, declared alpha={spec.alpha:g}")
    return errors


def apply_declarations(specs: Sequence[CheckSpec], checks: Iterable[Any]) -> None:
    """Give every check whose ``claim`` (``alternative``) is empty the claim text (alternative text) of
    its declaration (in place)."""
    declared = {s.name: s for s in specs}
    for check in checks:
        spec = declared.get(check.name)
        if spec is not None and not check.claim:
            check.claim = spec.claim
        if spec is not None and not check.alternative and spec.alternative_text:
            check.alternative = spec.alternative_text


def decide_declared(specs: Sequence[CheckSpec], estimates: Mapping[str, Any], checks: list[Any]) -> list[Any]:
    """The run's checks with every declared executable check that ``run()`` left to the runner decided:
    for each spec (in declared order) with an entry in ``estimates`` and no check of its name in
    ``checks``, ``spec.decide(estimates[name])``.  Returns the checks in declared order (checks of
    undeclared names last, for :func:`declaration_errors` to report).  An estimate for a check that is
    not declared, or not executable, is a ValueError naming it."""
    declared = {s.name: s for s in specs}
    for name in estimates:
        if name not in declared or not declared[name].executable:
            raise ValueError(f"the run returned an estimate for {name!r}, which is not a declared executable check")
    have = {c.name for c in checks}
    decided = {s.name: s.decide(estimates[s.name]) for s in specs if s.name in estimates and s.name not in have}
    rank = {name: k for k, name in enumerate(declared)}
    return sorted([*checks, *decided.values()], key=lambda c: rank.get(c.name, len(rank)))  # stable: twins kept
