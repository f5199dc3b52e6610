"""Devices: which device a run uses (``cpu`` | ``cuda`` | ``auto``) and which backend each kernel family
runs there, with the reason either way.

The device of a run is one of ``DEVICES``; :func:`resolve_device` turns it into ``cpu`` or
``cuda`` using the status probes of the CUDA backends of
:data:`transformer_limits.numeric.backends.REGISTRY` (``numba-cuda``, ``cupy``; the CUDA simulator
``numba-cuda-sim`` runs on the CPU and does not count):

==========  =====================================================================================
``cpu``     always (the default)
``cuda``    a CUDA backend is usable here; otherwise ``ValueError`` naming ``device`` with every
            CUDA backend's reason, in one line
``auto``    ``cuda`` where a CUDA backend is usable, else ``cpu``; the reason says which and why
==========  =====================================================================================

:func:`choose_backend` (:func:`backend_for` for the name alone) gives the backend a kernel family
(:mod:`transformer_limits.numeric.kernel_family`) runs on a device, from the flavours it declares:

* ``cpu``: ``numba`` where the family has the ``python-numba`` flavour, else ``numpy``;
* ``cuda``: ``numba-cuda`` where it has ``python-cuda`` (and numba-cuda is usable), else ``cupy``
  where it has ``cuda-c`` (and CuPy is usable), else its CPU backend, and the reason says so
  (:attr:`BackendChoice.fallback`).

At ``precision="float32"`` only the backends whose flavour computes in float32
(:data:`transformer_limits.numeric.backends.FLOAT32_BACKENDS`) qualify: on ``cpu`` the same order
(``numba`` runs its float32 kernel sources), ``blas`` where neither qualifies; on ``cuda`` ``cupy``
(the float32 compile of the cuda-c source), else that CPU backend.

**The run target.**  A run resolves its device once: :meth:`RunTarget.resolve` (the one caller of
:func:`resolve_device`) turns ``device`` and ``precision`` into a frozen :class:`RunTarget`, and
:meth:`RunTarget.with_kernels` adds the backend of each kernel family the run uses (a pure function
of the resolved target: no probe, no second resolution).  The target is passed down (the CLI to
``run_experiment``, the runner to the experiment in ``ExperimentConfig.target``), never looked up
from a global.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from transformer_limits.numeric.backends import FLOAT32_BACKENDS, REGISTRY, Backend
from transformer_limits.numeric.flavours import CUDA_C, PYTHON_CUDA
from transformer_limits.numeric.kernel_family import FAMILIES, KernelFamily
from transformer_limits.numeric.precision import resolve_precision

__all__ = ["DEVICES", "DeviceChoice", "BackendChoice", "RunTarget", "cuda_backends", "resolve_device",
           "choose_backend", "backend_for"]

#: the values of ``device=`` and ``--device``
DEVICES = ("cpu", "cuda", "auto")


@dataclass(frozen=True)
class DeviceChoice:
    """The device a run uses (``cpu`` | ``cuda``), what was asked for and why (one line)."""

    device: str
    requested: str
    reason: str


@dataclass(frozen=True)
class BackendChoice:
    """The backend ``family`` (its name) runs on ``device``; ``fallback`` when the device is
    ``cuda`` but the family runs on the CPU (the reason says why)."""

    family: str
    device: str
    backend: str
    fallback: bool
    reason: str


def cuda_backends() -> tuple[Backend, ...]:
    """Every backend of :data:`~transformer_limits.numeric.backends.REGISTRY` on a CUDA device
    (available here or not)."""
    return tuple(b for b in REGISTRY.values() if b.device == "cuda")


def _cuda_reasons() -> str:
    return "; ".join(f"{b.name}: {b.reason}" for b in cuda_backends())


def resolve_device(device: object = "cpu") -> DeviceChoice:
    """The device ``device`` (one of ``DEVICES``) means here; ValueError naming ``device`` for an
    unknown value, or for ``cuda`` where no CUDA backend is usable (with each one's reason)."""
    if not isinstance(device, str) or device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cpu":
        return DeviceChoice("cpu", device, "asked for cpu (the default)")
    usable = [b.name for b in cuda_backends() if b.available]
    if device == "cuda":
        if not usable:
            raise ValueError(f"device 'cuda' is not usable here (no usable CUDA backend: {_cuda_reasons()})")
        return DeviceChoice("cuda", device, f"asked for cuda ({_cuda_reasons()})")
    if usable:
        return DeviceChoice("cuda", device, f"a CUDA backend is usable ({_cuda_reasons()})")
    return DeviceChoice("cpu", device, f"no usable CUDA backend ({_cuda_reasons()})")


def _family(family: KernelFamily | str) -> KernelFamily:
    if isinstance(family, str):
        if family not in FAMILIES:
            raise ValueError(f"unknown kernel family {family!r} (known: {', '.join(FAMILIES)})")
        return FAMILIES[family]
    return family


def _cpu_backend(fam: KernelFamily, cpu_backend: str | None, precision: str) -> str:
    if cpu_backend is not None:
        # the caller's backend (e.g. "blas" for the attention layer, beyond the family's flavours):
        # only a CPU backend is checked here, its consumer resolves it
        if cpu_backend not in REGISTRY or REGISTRY[cpu_backend].device != "cpu":
            raise ValueError(f"cpu_backend must be a CPU backend "
                             f"({', '.join(n for n, b in REGISTRY.items() if b.device == 'cpu')}), "
                             f"got {cpu_backend!r}")
        if precision == "float64" or cpu_backend in FLOAT32_BACKENDS:
            return cpu_backend
    for name in ("numba", "numpy"):  # the fastest CPU backend of the family's flavours first
        if fam.has(REGISTRY[name].flavour) and REGISTRY[name].available and precision in REGISTRY[name].precisions:
            return name
    if precision == "float32":  # no float32 flavour of the family: the attention layer's BLAS path
        return "blas"
    raise ValueError(f"family {fam.name!r} has no usable CPU flavour (flavours: {', '.join(fam.flavours)})")


def choose_backend(device: str, family: KernelFamily | str, *, cpu_backend: str | None = None,
                   precision: str = "float64") -> BackendChoice:
    """The backend kernel family ``family`` (a :class:`KernelFamily` or its name) runs on the resolved
    ``device`` (``cpu`` | ``cuda``: a :class:`RunTarget`'s; ``auto`` is resolved by
    :meth:`RunTarget.resolve`, not here) at ``precision`` (``float64`` | ``float32``), and why; see the
    module docstring for the order.  ``cpu_backend`` replaces the family's fastest CPU backend (on
    ``cpu``, and as the fallback on ``cuda``): an experiment's tuned choice; at float32 a float64-only
    one is replaced (and the reason says so)."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be a resolved device (cpu or cuda; resolve {device!r} with "
                         f"RunTarget.resolve), got {device!r}")
    where = device
    precision = resolve_precision(precision)
    fam = _family(family)
    cpu = _cpu_backend(fam, cpu_backend, precision)
    f32 = "" if precision == "float64" else " in float32"
    if cpu_backend is not None and cpu != cpu_backend:
        f32 += f" ({cpu_backend} is float64 only)"
    if where == "cpu":
        return BackendChoice(fam.name, "cpu", cpu, False, f"cpu: {cpu} runs {fam.title}{f32}")
    skipped = []
    for flavour, name in ((PYTHON_CUDA, "numba-cuda"), (CUDA_C, "cupy")):
        if not fam.has(flavour):
            continue
        if precision == "float32" and name not in FLOAT32_BACKENDS:
            skipped.append(f"{name}: float64 only")
            continue
        if REGISTRY[name].available:
            return BackendChoice(fam.name, "cuda", name, False, f"cuda: {name} runs the {flavour} flavour "
                                 f"of {fam.title}{f32}")
        skipped.append(f"{name}: {REGISTRY[name].reason}")
    why = ("; ".join(skipped) if skipped
           else f"no GPU flavour; flavours: {', '.join(fam.flavours)}")
    return BackendChoice(fam.name, "cuda", cpu, True, f"cuda asked, but {cpu} runs {fam.title} on the CPU{f32} "
                         f"({why})")


def backend_for(device: str, family: KernelFamily | str, precision: str = "float64") -> str:
    """Name of the backend kernel family ``family`` runs on ``device`` (``cpu`` | ``cuda`` | ``auto``)
    at ``precision`` (a :class:`RunTarget` resolved for this one family)."""
    return RunTarget.resolve(device, precision).with_kernels({family: None}).backend(family)


@dataclass(frozen=True)
class RunTarget:
    """Where and how a run computes, resolved once and passed down (see the module docstring).

    Fields::

        device      the resolved device: cpu | cuda
        requested   what was asked: cpu | cuda | auto
        reason      why this device (one line)
        precision   float64 | float32
        choices     the BackendChoice of each kernel family of the run (with_kernels), in order
    """

    device: str
    requested: str
    reason: str
    precision: str = "float64"
    choices: tuple[BackendChoice, ...] = ()

    @classmethod
    def resolve(cls, device: object = "cpu", precision: object = "float64") -> "RunTarget":
        """The target of ``device`` (``cpu`` | ``cuda`` | ``auto``) at ``precision``; ValueError naming
        ``device`` (an unknown one, or ``cuda`` where no CUDA backend is usable, with every probe's
        reason) or ``precision``.  The one place a device is resolved."""
        where = resolve_device(device)
        return cls(where.device, where.requested, where.reason, resolve_precision(precision))

    def with_precision(self, precision: str) -> "RunTarget":
        """This target at another precision (its kernel choices dropped: they depend on it)."""
        return replace(self, precision=resolve_precision(precision), choices=())

    def with_kernels(self, kernels: Mapping[KernelFamily | str, str | None] | Iterable[Any]) -> "RunTarget":
        """This target with the backend of every kernel family of ``kernels`` (family -> the run's CPU
        backend for it, None for the family's fastest; or an iterable of families) chosen on
        this target's ``device`` at its ``precision`` (:func:`choose_backend`); a family already chosen keeps
        its choice."""
        pairs = kernels.items() if isinstance(kernels, Mapping) else ((f, None) for f in kernels)
        chosen = {c.family: c for c in self.choices}
        for family, cpu_backend in pairs:
            fam = _family(family)
            if fam.name not in chosen:
                chosen[fam.name] = choose_backend(self.device, fam, cpu_backend=cpu_backend,
                                                  precision=self.precision)
        return replace(self, choices=tuple(chosen.values()))

    def choice(self, family: KernelFamily | str) -> BackendChoice:
        """The :class:`BackendChoice` of ``family`` (ValueError naming ``family`` if the target has none:
        a run declares the kernel families it uses)."""
        name = family if isinstance(family, str) else family.name
        for c in self.choices:
            if c.family == name:
                return c
        raise ValueError(f"family {name!r} is not part of this run target (declared: "
                         f"{', '.join(c.family for c in self.choices) or 'none'})")

    def backend(self, family: KernelFamily | str) -> str:
        """The backend name ``family`` runs on in this target."""
        return self.choice(family).backend

    @property
    def fallbacks(self) -> tuple[BackendChoice, ...]:
        """The choices that run on the CPU although ``cuda`` is the device."""
        return tuple(c for c in self.choices if c.fallback)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "requested": self.requested, "reason": self.reason,
                "precision": self.precision,
                "backends": {c.family: {"backend": c.backend, "reason": c.reason} for c in self.choices}}
