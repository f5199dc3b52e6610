"""Paper A under a causal mask: depth/width rates of the masked transformer vs its prefix-measure
limit, at init and after AdamW steps (experiment ``causal-depth-width``).

Claim tested (a *conjecture*: paper A leaves causal masking open; docs/causal_masking.md): the causally
masked network (token i attends to j <= i) converges to the prefix-measure MV-ODE

    dX_t^i/dt = Γ(X_t^i, m_t^i, ν_t),   m_t^i = (1/i) Σ_{j<=i} δ_{X_t^j},

uniformly over inputs in the ball at the unmasked rate O(L^-1 + L^-1/3 H^-1/2), also after K AdamW
steps.  A FAIL of a check is a finding about the conjecture (the data contradict the unmasked rate
under the mask), not a bug of the code; the controls below show what a bug looks like.

**Error functional.**  The masked maps are not permutation-equivariant (token 1 sees itself only,
token N the whole sequence), so the error is ``sup_X0 max_i |A(X0)^i − B(X0)^i|``: the projected Adam
ascent of :func:`~transformer_limits.verify.input_search.sup_error` with ``token="max"`` ascends, at
every iterate, the error of the token that is worst there.  The limit is
:class:`~transformer_limits.numeric.attention.mean_field.MeanFieldLimit` (``causal=True``), RK4 on
``limit_steps`` steps; its input-gradient is the exact gradient of that RK4 map (the layer VJPs at
its stages carry the Lions weights w_ji = 1_{i<=j}/j: token i influences the later tokens j through
their prefix measures).

**Errors, checks, statistics**: those of ``attention-depth-width``
(:mod:`~transformer_limits.verify.experiments.attention_depth_width`, whose families and verdicts
this module runs with ``settings["causal"] = True``): ``exponent_L`` / ``trained_exponent_L``
exponent_equals(−1, tol 0.15); ``exponent_H`` / ``trained_exponent_H`` exponent_equals(−1/2, tol
0.15); ``rate_bound_holds`` one-sided trends of e / (L^-1 + L^-1/3 H^-1/2) in L and H; all at
α = 0.01 with conservative (t ∪ seed bootstrap) intervals and their power against the declared
alternatives (half the claimed exponent; a ratio growing like L^0.3 or H^0.3).

**Control** (tests/test_causal_experiments.py): ``unmasked_limit=True`` keeps the mask in the network
but not in the limit (the limit's tokens see the whole sequence): its error does not decay in L, so
``exponent_L`` must FAIL.  The controls of ``attention-depth-width`` (1/sqrt(H) heads, flipped Lions
sign) apply unchanged through ``head_scale`` / ``lions_sign``.
"""

from __future__ import annotations

from typing import Any, Callable

from transformer_limits.numeric.attention.transformer import inverse_heads
from transformer_limits.numeric.kernel_family import LAYER_ADJOINT
from transformer_limits.verify.experiment import Experiment, ExperimentConfig, ExperimentResult, run_settings
from transformer_limits.verify.experiments import attention_depth_width as adw
from transformer_limits.verify.registry import register_experiment

__all__ = ["NAME", "SETTINGS", "CHECKS", "runtime_settings", "run"]

NAME = "causal-depth-width"
#: the checks of attention-depth-width (same claims, now under the mask)
CHECKS = adw.CHECKS
#: the unmasked experiment's profiles with the mask on every model (the blas backend: a few tokens)
#: the kernel families run() calls, by the settings key naming the CPU backend of each
KERNELS = {"backend": LAYER_ADJOINT}
SETTINGS: dict[str, dict[str, Any]] = {
    profile: dict(s, causal=True, backend="blas") for profile, s in adw.SETTINGS.items()}


def runtime_settings(config: ExperimentConfig, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The profile's settings (``settings`` overriding) with the layer kernels' backend on
    ``config.device`` (cpu: the settings' own, so a cpu run's sweep keys are the profile's)."""
    s = run_settings(config, dict(SETTINGS[config.profile], **(settings or {})), KERNELS)
    s.pop("precision", None)  # float64 only (Experiment.precisions)
    return s


def run(config: ExperimentConfig, *, unmasked_limit: bool = False,
        head_scale: Callable[[int], float] = inverse_heads, lions_sign: int = 1,
        settings: dict[str, Any] | None = None) -> ExperimentResult:
    """Run the experiment.  ``unmasked_limit`` (control): mask in the network, none in the limit;
    ``head_scale`` / ``lions_sign``: the controls of attention-depth-width; ``settings`` overrides the
    profile (reduced grids in tests)."""
    s = runtime_settings(config, settings)
    if unmasked_limit:
        s["limit_causal"] = False
    result = adw.run(config, head_scale=head_scale, lions_sign=lions_sign, settings=s, experiment=NAME,
                     profiles=SETTINGS, figure_prefix="causal", error_label="sup_X0 max_i |x^i − X^i|")
    verdict = "holds" if result.passed else "is contradicted or undecided"
    result.notes.insert(0, (
        f"Conjecture (paper A leaves causal masking open): the unmasked rate O({adw.CLAIM}) {verdict} under "
        f"the causal mask on this grid (status {result.status}); errors are sup over inputs of the worst "
        "token, max_i |x_L^i − X_1^i|, against the prefix-measure MV-ODE."))
    if unmasked_limit:
        result.notes.append("Control: the limit is unmasked (mask in the network only); exponent_L must fail.")
    result.provenance["unmasked_limit"] = unmasked_limit
    return result


register_experiment(Experiment(
    name=NAME,
    title="Paper A, causal mask: sup-over-inputs error of the masked transformer vs its prefix-measure limit",
    paper="A",
    claim="conjecture: sup_{X0 in ball} max_i |x_L^i − X_1^i| = O(L^-1 + L^-1/3 H^-1/2) under the causal mask, "
          "at init and after K AdamW steps",
    derivations=("attention", "adamw-box"),
    checks=CHECKS,
    run=run,
    budget_s={"quick": 60.0, "full": 900.0},
    settings=SETTINGS,
    kernels=KERNELS,
))
