"""Every deliberately wrong model, in one place: the negative controls of the verifiers.

A verifier that cannot fail proves nothing, so each check of each built-in experiment has at least
one control: a model with one mistake that a careful reader could make (a sign, a missing factor, a
wrong scaling), built from the same code as the right model by one option, which the check must
reject.  The controls themselves live next to what they perturb (a head scale of the transformer,
a ``wrong=`` expansion of the flow map, a formula passed to an experiment); this table names them
all, says what is wrong, how to build it, which check must fail, and the test that proves it does.
tests/test_controls.py keeps the table true: every experiment and check exists and is declared,
every test exists, and every built-in check has a control.

Controls are never run by ``report``; their must-fail tests run in the default test profile, and
the quick-profile versions (``@pytest.mark.slow``) in the slow profile.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Control", "CONTROLS", "controls_for"]


@dataclass(frozen=True)
class Control:
    """One deliberately wrong model: ``build`` (a Python expression in the experiment's module
    namespace) makes check ``check`` of experiment ``experiment`` fail, as ``test`` shows."""

    name: str
    experiment: str
    check: str
    mistake: str
    build: str
    test: str


CONTROLS: tuple[Control, ...] = (
    # paper A
    Control("inverse-sqrt-heads", "attention-depth-width", "exponent_H",
            "heads averaged with 1/sqrt(H) instead of 1/H: no H -> infinity limit",
            "run(config, head_scale=inverse_sqrt_heads)",
            "tests/test_experiments_paper_a.py::test_inverse_sqrt_heads_fails_exponent_H_and_rate_bound"),
    Control("inverse-sqrt-heads-rate", "attention-depth-width", "rate_bound_holds",
            "as above; the error no longer falls like L^-1/3 H^-1/2",
            "run(config, head_scale=inverse_sqrt_heads)",
            "tests/test_experiments_paper_a.py::test_inverse_sqrt_heads_fails_exponent_H_and_rate_bound"),
    Control("flipped-lions-adjoint", "attention-depth-width", "trained_exponent_L",
            "the Lions (interaction) term of the adjoint enters with the wrong sign",
            "run(config, lions_sign=-1)",
            "tests/test_experiments_paper_a.py::test_wrong_lions_sign_fails_trained_exponent_L"),
    Control("counting-head", "token-independence", "slope_in_log_N",
            "an un-normalised head that sums a kernel over tokens (error ~ c log N at clusters)",
            "run(config, counting_head=1.0)",
            "tests/test_experiments_paper_a.py::test_token_independence_reduced_grid_and_counting_head_model"),
    Control("coupled-weight-decay", "adamw-box", "box_holds",
            "L2 added to the gradient (Adam + L2) instead of decoupled weight decay",
            "run(config, coupled_decay=True)",
            "tests/test_experiments_paper_a.py::test_adamw_box_reduced_and_coupled_decay_fails"),
    Control("wrong-sign-lions-expansion", "lions-taylor", "lions_taylor_rate",
            "the first-order Lions term with the wrong sign (remainder O(h), rate 1)",
            "wrong_sign_lions_expansion",
            "tests/test_experiment_lions_taylor.py::test_wrong_sign_lions_term_fails_the_rate_check"),
    Control("flow-expansion-wrong-half", "lions-taylor", "flow_taylor_order2_rate",
            "c_2 = DF[F] instead of DF[F]/2 (also no-lions, no-second-lions)",
            "flow_taylor_problem(X, params, 2, wrong='wrong-half')",
            "tests/test_flow_taylor.py::test_wrong_expansion_fails_the_rate_test"),
    Control("causal-unmasked-limit", "causal-depth-width", "exponent_L",
            "the causal mask in the network but not in the limit (limit tokens see the whole sequence)",
            "run(config, unmasked_limit=True)",
            "tests/test_causal_experiments.py::test_unmasked_limit_fails_exponent_L"),
    Control("causal-inverse-sqrt-heads", "causal-depth-width", "exponent_H",
            "heads averaged with 1/sqrt(H) instead of 1/H, under the mask",
            "run(config, head_scale=inverse_sqrt_heads)",
            "tests/test_causal_experiments.py::test_inverse_sqrt_heads_fails_exponent_H_and_rate_bound_under_the_mask"),
    Control("causal-inverse-sqrt-heads-rate", "causal-depth-width", "rate_bound_holds",
            "as above; e / (L^-1 + L^-1/3 H^-1/2) grows in H",
            "run(config, head_scale=inverse_sqrt_heads)",
            "tests/test_causal_experiments.py::test_inverse_sqrt_heads_fails_exponent_H_and_rate_bound_under_the_mask"),
    Control("causal-flipped-lions-adjoint", "causal-depth-width", "trained_exponent_L",
            "the Lions term of the causal adjoint with the wrong sign",
            "run(config, lions_sign=-1)",
            "tests/test_causal_experiments.py::test_wrong_lions_sign_fails_trained_exponent_L_under_the_mask"),
    Control("causal-counting-head", "causal-token-independence", "slope_in_log_N",
            "an un-normalised counting head in the masked network (error ~ c log N at clusters)",
            "run(config, counting_head=1.0)",
            "tests/test_causal_experiments.py::test_causal_token_independence_reduced_grid_and_counting_head"),
    Control("sde-regime-non-diffusive", "attention-sde-regime", "strong_order_L",
            "residual scale T/L instead of (T/L)^1/2 with zero-mean heads: the model tends to the ODE, no diffusive limit",
            "run(config, residual_power=1.0)",
            "tests/test_attention_sde_regime.py::test_non_diffusive_residual_scale_fails_the_L_checks"),
    Control("sde-regime-non-diffusive-weak", "attention-sde-regime", "weak_order_L",
            "as above; the laws of x_L and X_T differ by O(1)",
            "run(config, residual_power=1.0)",
            "tests/test_attention_sde_regime.py::test_non_diffusive_residual_scale_fails_the_L_checks"),
    Control("sde-regime-non-diffusive-ode", "attention-sde-regime", "ode_limit_rejected",
            "as above; the error to the ODE limit then decays",
            "run(config, residual_power=1.0)",
            "tests/test_attention_sde_regime.py::test_non_diffusive_residual_scale_fails_the_L_checks"),
    Control("sde-regime-stratonovich-limit", "attention-sde-regime", "weak_order_L",
            "the limit read as a Stratonovich SDE (Itô drift plus ½ Σ_k Dσ_k σ_k)",
            "run(config, limit_correction=1.0)",
            "tests/test_attention_sde_regime.py::test_stratonovich_limit_fails_weak_order"),
    Control("sde-regime-inverse-sqrt-heads", "attention-sde-regime", "strong_exponent_H",
            "heads averaged with 1/sqrt(H): the diffusion does not vanish as H grows",
            "run(config, head_average='sqrt')",
            "tests/test_attention_sde_regime.py::test_inverse_sqrt_head_average_fails_the_H_checks"),
    Control("sde-regime-inverse-sqrt-heads-diffusion", "attention-sde-regime", "diffusion_exponent_H",
            "as above; displacement² independent of H",
            "run(config, head_average='sqrt')",
            "tests/test_attention_sde_regime.py::test_inverse_sqrt_head_average_fails_the_H_checks"),
    # paper B
    Control("draft-a-lyapunov-typo", "lyapunov", "lyapunov_agrees",
            "Draft A's λ_1 with the bias term of the wrong sign",
            "run(config, formula=draft_a_typo)",
            "tests/test_experiment_lyapunov.py::test_correct_formula_passes_and_draft_a_typo_fails"),
    Control("k-prime-without-1-over-d", "lyapunov", "lyapunov_agrees",
            "k'(1) without its 1/d (Draft B)",
            "run(config, formula=wrong)",
            "tests/test_experiment_lyapunov.py::test_missing_one_over_d_in_k_prime_fails"),
    Control("non-diffusive-mlp-step", "sde-limit", "exponent_L",
            "MLP step (T/L)^1 instead of sqrt(T/L): no diffusive limit",
            "model_overrides=dict(alpha2_power=1.0)",
            "tests/test_experiments_paper_b.py::test_exponent_L_fails_for_wrong_models"),
    Control("sde-without-ito-drift", "sde-limit", "exponent_L",
            "the limit SDE without its Itô correction −cX",
            "sde_overrides=dict(ito_drift=False), renormalise=False",
            "tests/test_experiments_paper_b.py::test_exponent_L_fails_for_wrong_models"),
    Control("k-prime-without-1-over-d-phase", "synchronization-phase", "phase_sign",
            "the boundary λ̄ = 0 from k'(1) without its 1/d (Draft B): the synchronising points are predicted "
            "non-synchronising (λ̄ ≈ +3), where the simulated cluster energy decays",
            "run(config, formula=lambda_bar_without_one_over_d)",
            "tests/test_synchronization_phase.py::test_k_prime_without_one_over_d_fails_and_the_right_model_passes"),
    Control("no-common-noise", "propagation-of-chaos", "exponent_N",
            "the reference system driven by a noise path of its own: μ^N_t does not approach μ_t",
            "run(config, independent_noise=True)",
            "tests/test_controls.py::test_chaos_without_common_noise_fails_exponent_N"),
    Control("positive-decay-rate", "synchronization", "decay_rate_bound",
            "the bound's rate ε + λ̄' with the wrong sign (Draft A's λ̄' > 0)",
            "decay_rate_check(fit, +abs(bound))",
            "tests/test_experiments_paper_b.py::test_decay_rate_bound_passes_and_wrong_sign_fails"),
    # paper C
    Control("swapped-dion-labels", "spectral-released", "dion_rank_monotone",
            "the Dion 1/2 and 1/16 labels swapped (registered as spectral-released-wrong-dion)",
            "transformer-limits verify spectral-released-wrong-dion",
            "tests/test_spectral_released.py::test_wrong_variant_swapped_dion_labels_fails"),
    Control("swapped-optimizer-labels", "spectral-scaling", "muon_hard_beta_exceeds_adamw",
            "Muon and AdamW labels swapped in the trained widths",
            "beta_difference_check on swapped fits",
            "tests/test_toy_gpt.py::test_checks_pass_on_the_claim_and_fail_on_swapped_labels"),
)


def controls_for(experiment: str) -> tuple[Control, ...]:
    """The controls of ``experiment`` (empty when it has none)."""
    return tuple(c for c in CONTROLS if c.experiment == experiment)
