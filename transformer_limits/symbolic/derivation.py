"""The :class:`Derivation` record and the registry of named derivations.

A derivation is a named piece of mathematics (symbols of docs/theory.md §0.3) produced by SymPy once: the
expressions, the assumptions under which they hold, how they were checked, and — when numeric
parameters are given — their numeric values.  Builders register themselves with
:func:`register_derivation`; users call :func:`derivation` (also exported at the package top level)
or ``transformer-limits derive NAME``.

Every module of :mod:`transformer_limits.symbolic` that is not infrastructure (see
``_INFRASTRUCTURE``) is imported on first use of the registry, so a new derivation module only needs
to call :func:`register_derivation` at import time.
"""

from __future__ import annotations

import importlib
import json
import math
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

import sympy as sp

from transformer_limits.jsonable import jsonable

__all__ = [
    "CHECK_STATES",
    "CheckLine",
    "check_state",
    "Derivation",
    "Param",
    "derivation",
    "list_derivations",
    "register_derivation",
    "derivation_spec",
]


#: states of a derivation check: "passed" (a proof or a numeric comparison that held), "failed" (it
#: did not hold) and "not evaluated" (it could not be decided here, e.g. the numbers overflow or
#: would need more precision than allowed; the line says why) — never a false alarm or a false pass
CHECK_STATES = ("passed", "failed", "not evaluated")


class CheckLine(str):
    """One line of :attr:`Derivation.checks` (plain text) carrying its state (``CHECK_STATES``).

    Plain ``str`` lines count as ``"passed"``: the builders raise instead of recording a failed proof.

    >>> CheckLine("identity: not evaluated (overflow)", "not evaluated").state
    'not evaluated'
    """

    state: str

    def __new__(cls, text: str, state: str = "passed") -> "CheckLine":
        if state not in CHECK_STATES:
            raise ValueError(f"state must be one of {', '.join(CHECK_STATES)}; got {state!r}")
        line = super().__new__(cls, text)
        line.state = state
        return line


def check_state(line: str) -> str:
    """The state of one check line (``"passed"`` for a plain string)."""
    return getattr(line, "state", "passed")


@dataclass(frozen=True)
class Param:
    """A parameter a derivation accepts (``--param NAME=VALUE`` on the CLI).

    ``kind`` is ``int``, ``float`` or ``str``; ``low``/``high`` are inclusive bounds for numbers
    (``low_open`` makes the lower bound strict); ``choices`` restricts strings.  A parameter whose
    default is ``None`` is optional: without it the derivation stays symbolic in that quantity.
    """

    name: str
    kind: type
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] | None = None

    def coerce(self, value: Any) -> Any:
        """Convert and validate ``value``; raise ``ValueError`` naming the parameter when bad."""
        if value is None:
            return None
        out: Any  # int, float or str (self.kind)
        try:
            if self.kind is int:
                if isinstance(value, float) and not value.is_integer():
                    raise ValueError
                if isinstance(value, str):
                    value = value.strip()
                out = int(value) if not isinstance(value, str) else int(value, 10)
            elif self.kind is float:
                out = float(value)
                if not math.isfinite(out):
                    raise ValueError
            else:
                out = str(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"parameter {self.name!r} must be {self.kind.__name__}, got {value!r}"
            ) from None
        if self.choices is not None and out not in self.choices:
            raise ValueError(
                f"parameter {self.name!r} must be one of {', '.join(self.choices)}; got {out!r}"
            )
        if self.low is not None and (out < self.low or (self.low_open and out == self.low)):
            op = ">" if self.low_open else ">="
            raise ValueError(f"parameter {self.name!r} must be {op} {self.low}, got {out!r}")
        if self.high is not None and out > self.high:
            raise ValueError(f"parameter {self.name!r} must be <= {self.high}, got {out!r}")
        return out


@dataclass
class Derivation:
    """Result of one derivation.

    Attributes
    ----------
    name, title:
        Registry name (``attention-lions-derivative``) and a human title.
    expressions:
        Named SymPy objects (``Expr`` or ``Matrix``) produced by the derivation, componentwise for
        the concrete shapes in ``params``.
    generic_latex:
        Named formulas in generic matrix form (docs/theory.md §0.3 notation), written once by hand and
        *checked* against ``expressions`` by the derivation itself.
    assumptions:
        Conditions under which the formulas hold.
    checks:
        How the result was verified (symbolic identity, mpmath evaluation, ...), one line each.
    values:
        Numeric values (floats or nested lists) when numeric parameters were given.
    params:
        The validated parameters the derivation was built with.
    """

    name: str
    title: str
    summary: str
    expressions: dict[str, Any]
    assumptions: list[str]
    checks: list[str]
    params: dict[str, Any] = field(default_factory=dict)
    generic_latex: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    kernels: dict[str, str] = field(default_factory=dict)  # file name -> generated source

    @property
    def latex(self) -> dict[str, str]:
        """Named LaTeX formulas (the generic matrix forms, then every componentwise expression)."""
        out = dict(self.generic_latex)
        for key, expr in self.expressions.items():
            out.setdefault(key, sp.latex(expr))
        return out

    def __getitem__(self, key: str) -> Any:
        return self.expressions[key]

    @property
    def check_states(self) -> list[str]:
        """State of each line of ``checks`` (``"passed"``, ``"failed"`` or ``"not evaluated"``)."""
        return [check_state(c) for c in self.checks]

    def _check_summary(self) -> str | None:
        """``checks: 5 passed, 1 not evaluated`` when some check did not pass, else None."""
        states = self.check_states
        if all(s == "passed" for s in states):
            return None
        return "checks: " + ", ".join(f"{states.count(s)} {s}" for s in CHECK_STATES if states.count(s))

    def to_json(self) -> dict[str, Any]:
        """JSON-able dictionary (``name``, ``title``, ``latex``, ``assumptions``, ``values``, ...)."""
        return {
            "name": self.name,
            "title": self.title,
            "summary": self.summary,
            "params": _jsonable(self.params),
            "latex": self.latex,
            "expressions": {k: sp.sstr(v) for k, v in self.expressions.items()},
            "assumptions": list(self.assumptions),
            "checks": [str(c) for c in self.checks],
            "check_states": self.check_states,
            "values": _jsonable(self.values),
        }

    def to_text(self) -> str:
        lines = [f"{self.name}: {self.title}", "", self.summary, ""]
        if self.params:
            lines.append("parameters: " + ", ".join(f"{k}={v}" for k, v in self.params.items()))
        lines.append("formulas (generic form):")
        for key, tex in self.generic_latex.items():
            lines.append(f"  {key}: {tex}")
        lines.append("expressions (componentwise):")
        for key, expr in self.expressions.items():
            text = sp.sstr(expr)
            if len(text) > 400:
                text = text[:400] + " ..."
            lines.append(f"  {key} = {text}")
        lines.append("assumptions:")
        lines.extend(f"  - {a}" for a in self.assumptions)
        lines.append("checked by:")
        lines.extend(f"  - {c}" for c in self.checks)
        summary = self._check_summary()
        if summary:
            lines.append(summary)
        if self.values:
            lines.append("values:")
            lines.extend(f"  {k} = {v}" for k, v in _jsonable(self.values).items())
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """One Markdown page: generic formulas, componentwise LaTeX, assumptions, checks."""
        lines = [f"# `{self.name}` — {self.title}", "", self.summary, ""]
        if self.params:
            lines += ["Generated with parameters: "
                      + ", ".join(f"`{k}={v}`" for k, v in self.params.items()), ""]
        if self.generic_latex:
            lines += ["## Formulas (generic matrix form)", ""]
            for key, tex in self.generic_latex.items():
                lines += [f"**{key}**", "", "$$", tex, "$$", ""]
        lines += ["## Componentwise SymPy results", ""]
        for key, expr in self.expressions.items():
            tex = sp.latex(expr)
            if len(tex) > 3000:
                tex = tex[:3000] + r"\;\ldots"
            lines += [f"**{key}**", "", "$$", tex, "$$", ""]
        lines += ["## Assumptions", ""] + [f"- {a}" for a in self.assumptions] + [""]
        lines += ["## How it was checked", ""] + [f"- {c}" for c in self.checks] + [""]
        if self._check_summary():
            lines += [f"**{self._check_summary()}**", ""]
        if self.values:
            lines += ["## Values", "", "| name | value |", "|---|---|"]
            for k, v in _jsonable(self.values).items():
                lines.append(f"| `{k}` | `{json.dumps(v)}` |")
            lines.append("")
        if self.kernels:
            lines += ["## Generated kernels", "",
                      "Sources generated from the expressions above (see `docs/codegen.md`):", ""]
            for filename in self.kernels:
                lines.append(f"- [`{filename}`](kernels/{filename})")
            lines.append("")
        return "\n".join(lines)

    def _repr_latex_(self) -> str:
        parts = [rf"\text{{{self.name}}}:\quad"]
        for key, tex in (self.generic_latex or self.latex).items():
            parts.append(rf"\text{{{key}}} = {tex}")
        return r"$\begin{gathered}" + r" \\ ".join(parts) + r"\end{gathered}$"

    def __repr__(self) -> str:
        return f"Derivation({self.name!r}, params={self.params!r})"


def _jsonable(obj: Any) -> Any:
    """Convert numpy / SymPy scalars and arrays to plain JSON types (±inf and NaN as text)."""
    return jsonable(obj, nonfinite="string", other=_sympy_value)


def _sympy_value(obj: Any) -> Any:
    """A real SymPy number as a float, another SymPy expression as text; else float(obj) or text."""
    if isinstance(obj, sp.Basic):
        if obj.is_number:
            val = complex(obj.evalf(30))
            return val.real if val.imag == 0 else str(obj)
        return str(obj)
    try:
        return float(obj)
    except (TypeError, ValueError):
        return str(obj)


@dataclass(frozen=True)
class DerivationSpec:
    """A registered derivation: its name, title, builder and the parameters the builder accepts."""

    name: str
    title: str
    builder: Callable[..., Derivation]
    params: tuple[Param, ...]

    def validate(self, params: dict[str, Any]) -> dict[str, Any]:
        known = {p.name: p for p in self.params}
        unknown = sorted(set(params) - set(known))
        if unknown:
            accepted = ", ".join(known) or "none"
            raise ValueError(
                f"derivation {self.name!r} has no parameter {unknown[0]!r} (accepted: {accepted})"
            )
        out = {}
        for p in self.params:
            out[p.name] = p.coerce(params.get(p.name, p.default))
        return out


_REGISTRY: dict[str, DerivationSpec] = {}
_INFRASTRUCTURE = {"derivation", "codegen"}
_DISCOVERED = False


def register_derivation(name: str, *, title: str, params: tuple[Param, ...] = ()):
    """Decorator registering ``builder(**params) -> Derivation`` under ``name``."""

    def decorate(builder: Callable[..., Derivation]) -> Callable[..., Derivation]:
        if name in _REGISTRY and _REGISTRY[name].builder is not builder:
            raise RuntimeError(f"derivation {name!r} registered twice")
        _REGISTRY[name] = DerivationSpec(name, title, builder, tuple(params))
        return builder

    return decorate


def _discover() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    import transformer_limits.symbolic as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_") or info.name in _INFRASTRUCTURE:
            continue
        importlib.import_module(f"{pkg.__name__}.{info.name}")
    _DISCOVERED = True


def derivation_spec(name: str) -> DerivationSpec:
    """The registered derivation ``name``; ``ValueError`` listing the known names when unknown."""
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown derivation {name!r} (known: {', '.join(sorted(_REGISTRY))})"
        ) from None


def list_derivations() -> list[DerivationSpec]:
    """All registered derivations, sorted by name."""
    _discover()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


_CACHE: dict[tuple, Derivation] = {}


def derivation(name: str, **params: Any) -> Derivation:
    """Build (or fetch from the in-process cache) the derivation ``name``.

    Raises ``ValueError`` naming the bad argument for an unknown name, unknown parameter or an
    impossible value.

    >>> d = derivation("attention-lions-derivative", d=2, d_k=2, d_v=2)
    >>> sorted(d.latex)[:1]
    ['lions_derivative']
    """
    spec = derivation_spec(name)
    clean = spec.validate(params)
    key = (name, tuple(sorted(clean.items())))
    if key not in _CACHE:
        result = spec.builder(**clean)
        result.params = {k: v for k, v in clean.items() if v is not None}
        _CACHE[key] = result
    return _CACHE[key]
