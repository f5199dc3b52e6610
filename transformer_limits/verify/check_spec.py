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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

__all__ = ["CheckSpec", "apply_declarations", "declaration_errors"]


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
    """

    name: str
    claim: str = ""
    verdict: str = ""
    alpha: float | None = None
    tolerance: float | None = None
    alternative: float | None = None
    alternative_text: str = ""

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
                "alternative_text": self.alternative_text}


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
