"""Kernels per backend and simulators of the discrete models and their limits: the public API.

The names in ``__all__`` are what users call; every other module and name is internal and may
change.  Each name is imported from its module on first use (PEP 562), so
``import transformer_limits.numeric`` imports neither SymPy nor SciPy, Numba or PyTorch; nothing
here needs SymPy at run time.

* attention (docs/theory.md §A.3): :func:`attention_kernels` (generated kernels of one head and its
  flat/Lions derivatives), :func:`multi_head_field`, :func:`attention_layer` (forward and VJP);
* paper A models: :class:`AttentionTransformer`, :func:`init_params`, the losses, the mean-field
  limit :class:`MeanFieldLimit` with :class:`HeadLaw`, :func:`train_adamw`, and the Lie-series
  expansion of the flow :func:`flow_taylor_expansion`;
* optimizers: :class:`AdamW`, :class:`BlockwiseAdamW` and their parameter box
  (:func:`adamw_box_radius`, docs/adamw.md), :class:`Muon`, :class:`NorMuon`, :class:`Dion`,
  :class:`Lion` (NumPy; the PyTorch versions are in ``transformer_limits.numeric.torch_optimizers``);
* paper B models: :class:`SphereTransformer`, :class:`CommonNoiseSDE`, :func:`mlp_field_kernels`,
  :func:`simulate_top_lyapunov`;
* spectra (paper C, docs/spectral.md): :func:`renyi_rank`, :func:`covariance_spectrum`,
  :class:`StreamingCovariance`, :func:`rank_summary`, and the token strata
  :func:`frequency_strata`;
* backends: :func:`available_backends`, :func:`backend_status`.

PyTorch-only parts (paper C's toy training: ``transformer_limits.numeric.toy_gpt`` and
``transformer_limits.numeric.torch_optimizers``) are imported by module path, so the API works
without PyTorch.

Numba's parallel kernels here are short (one parallel region per layer or per kernel call), so the
default threading layer is ``workqueue``: OpenMP's spinning workers cost ~10 ms per region on a
loaded 2-core machine, workqueue ~0.1 ms.  Set ``NUMBA_THREADING_LAYER`` to choose another.
"""

import os as _os
import sys as _sys

from transformer_limits.lazy_exports import install_lazy_exports

if "NUMBA_THREADING_LAYER" not in _os.environ:
    _os.environ["NUMBA_THREADING_LAYER"] = "workqueue"

    if "numba" in _sys.modules:  # numba already read its configuration: update it before any launch
        _sys.modules["numba"].core.config.THREADING_LAYER = "workqueue"

# public name -> module of this package that defines it
_EXPORTS = {
    # attention kernels
    "attention_kernels": "attention",
    "AttentionKernels": "attention",
    "multi_head_field": "attention",
    "attention_layer": "attention_layer",
    "AttentionLayer": "attention_layer",
    "LayerCache": "attention_layer",
    # paper A: discrete model, losses, mean-field limit, flow expansion
    "AttentionTransformer": "transformer_model",
    "init_params": "transformer_model",
    "ForwardPass": "transformer_model",
    "AdjointPass": "transformer_model",
    "SquaredErrorLoss": "transformer_losses",
    "MeanPooledRegressionLoss": "transformer_losses",
    "sample_tokens": "transformer_losses",
    "target_map": "transformer_losses",
    "train_with_radii": "transformer_training",
    "HeadRadii": "transformer_training",
    "HeadLaw": "mean_field",
    "AffineHeadLaw": "mean_field",
    "MeanFieldLimit": "mean_field",
    "RK4Result": "mean_field",
    "train_adamw": "mean_field",
    "TrainingHistory": "mean_field",
    "flow_taylor_expansion": "flow_taylor",
    "reference_flow": "flow_taylor",
    # optimizers
    "AdamW": "adamw",
    "BlockwiseAdamW": "adamw",
    "adamw_update_bound": "adamw",
    "adamw_update_bound_sup": "adamw",
    "adamw_box_radius": "adamw",
    "adamw_box_radius_path": "adamw",
    "Muon": "matrix_optimizers",
    "NorMuon": "matrix_optimizers",
    "Dion": "matrix_optimizers",
    "Lion": "matrix_optimizers",
    "newton_schulz": "matrix_optimizers",
    "newton_schulz_singular_value_map": "matrix_optimizers",
    # paper B: sphere transformer, common-noise SDE, MLP field, Lyapunov exponents
    "SphereTransformer": "sphere_transformer",
    "MLPLayer": "sphere_transformer",
    "uniform_sphere": "sphere_transformer",
    "CommonNoiseSDE": "common_noise_sde",
    "coupled_discrete_and_sde": "common_noise_sde",
    "sde_top_lyapunov": "common_noise_sde",
    "mlp_field_kernels": "mlp_field",
    "MLPFieldKernels": "mlp_field",
    "simulate_top_lyapunov": "lyapunov_simulation",
    "LyapunovEstimate": "lyapunov_simulation",
    # paper C: spectra, Rényi ranks, token strata
    "StreamingCovariance": "spectral",
    "covariance_matrix": "spectral",
    "covariance_spectrum": "spectral",
    "singular_value_spectrum": "spectral",
    "spectrum": "spectral",
    "renyi_rank": "spectral",
    "soft_rank": "spectral",
    "hard_rank": "spectral",
    "spectral_asymmetry": "spectral",
    "reinjection_ratio": "spectral",
    "rank_summary": "spectral",
    "FrequencyStrata": "token_strata",
    "frequency_strata": "token_strata",
    "split_by_stratum": "token_strata",
    # backends
    "available_backends": "backends",
    "backend_status": "backends",
    "BackendStatus": "backends",
}

__all__ = install_lazy_exports(__name__, _EXPORTS)
