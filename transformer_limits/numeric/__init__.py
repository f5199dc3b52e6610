"""Kernels per backend and simulators of the discrete models and their limits: the public API.

The names in ``__all__`` are what users call; every other module and name is internal and may
change.  Each name is imported from its module on first use (PEP 562), so
``import transformer_limits.numeric`` imports neither SymPy nor SciPy, Numba or PyTorch; nothing
here needs SymPy at run time.

* attention (docs/theory.md §A.3): :func:`attention_kernels` (generated kernels of one head and its
  flat/Lions derivatives), :func:`multi_head_field`, :func:`attention_layer` (forward and VJP);
* paper A models: :class:`AttentionTransformer`, :func:`init_params`, the losses, the mean-field
  limit :class:`MeanFieldLimit` with :class:`HeadLaw`, :func:`train_adamw`, its RK4 map with the exact
  gradient :func:`forward_taped` (:class:`RK4Tape`), and the Lie-series
  expansion of the flow :func:`flow_taylor_expansion`;
* optimizers: :class:`AdamW`, :class:`BlockwiseAdamW` and their parameter box
  (:func:`adamw_box_radius`, docs/adamw.md), :class:`Muon`, :class:`NorMuon`, :class:`Dion`,
  :class:`Lion` (NumPy; the PyTorch versions are in ``transformer_limits.numeric.torch.optimizers``);
* paper B models: :class:`SphereTransformer`, :class:`CommonNoiseSDE`, :func:`mlp_field_kernels`,
  :func:`simulate_top_lyapunov`;
* spectra (paper C, docs/spectral.md): :func:`renyi_rank`, :func:`covariance_spectrum`,
  :class:`StreamingCovariance`, :func:`rank_summary`, and the token strata
  :func:`frequency_strata`;
* flavours and backends: :class:`Flavour` records (the kinds of kernel source; :func:`flavour_named`),
  :class:`Backend` records, :func:`resolve_backend` (a user's ``backend=`` string for a kernel
  family), :class:`KernelFamily`, :func:`available_backends`, :func:`backend_status`;
  devices: :class:`RunTarget` (device, precision and the backend of each kernel family, resolved once:
  :meth:`RunTarget.resolve` calls :func:`resolve_device`), :func:`backend_for` /
  :func:`choose_backend` (the backend a kernel family uses on a device); precision:
  ``float64`` (default) or ``float32``, checked by :func:`resolve_precision`; runtimes:
  :class:`Runtime` (a backend's arrays, copies and kernel calls, host and device alike) and
  :func:`count_transfers` (host <-> device copies, :class:`TransferLog`).

PyTorch-only parts (paper C's toy training: ``transformer_limits.numeric.torch.toy_gpt`` and
``transformer_limits.numeric.torch.optimizers``) are imported by module path, so the API works
without PyTorch.

Numba's parallel kernels here are short (one parallel region per layer or per kernel call), so the
default threading layer is ``workqueue``: OpenMP's spinning workers cost ~10 ms per region on a
loaded 2-core machine, workqueue ~0.1 ms.  Set ``NUMBA_THREADING_LAYER`` to choose another.  Even
0.1 ms is more than a small problem's work, so every kernel also has a serial twin that runs launches
too small to gain from threads (``transformer_limits.numeric.numba_twins``).
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
    "attention_kernels": "attention.kernels",
    "AttentionKernels": "attention.kernels",
    "multi_head_field": "attention.kernels",
    "attention_layer": "attention.layer",
    "AttentionLayer": "attention.layer",
    "LayerCache": "attention.layer",
    # paper A: discrete model, losses, mean-field limit, flow expansion
    "AttentionTransformer": "attention.transformer",
    "init_params": "attention.transformer",
    "ForwardPass": "attention.transformer",
    "AdjointPass": "attention.transformer",
    "BatchForwardPass": "attention.transformer",
    "BatchAdjointPass": "attention.transformer",
    "SquaredErrorLoss": "attention.losses",
    "MeanPooledRegressionLoss": "attention.losses",
    "sample_tokens": "attention.losses",
    "target_map": "attention.losses",
    "train_with_radii": "attention.training",
    "HeadRadii": "attention.training",
    "HeadLaw": "attention.mean_field",
    "AffineHeadLaw": "attention.mean_field",
    "MeanFieldLimit": "attention.mean_field",
    "RK4Result": "attention.mean_field",
    "train_adamw": "attention.mean_field",
    "TrainingHistory": "attention.mean_field",
    "forward_taped": "attention.rk4_tape",
    "RK4Tape": "attention.rk4_tape",
    "flow_taylor_expansion": "attention.flow_taylor",
    "reference_flow": "attention.flow_taylor",
    # optimizers
    "AdamW": "optim.adamw",
    "BlockwiseAdamW": "optim.adamw",
    "adamw_update_bound": "optim.adamw",
    "adamw_update_bound_sup": "optim.adamw",
    "adamw_box_radius": "optim.adamw",
    "adamw_box_radius_path": "optim.adamw",
    "Muon": "optim.matrix_optimizers",
    "NorMuon": "optim.matrix_optimizers",
    "Dion": "optim.matrix_optimizers",
    "Lion": "optim.matrix_optimizers",
    "newton_schulz": "optim.matrix_optimizers",
    "newton_schulz_singular_value_map": "optim.matrix_optimizers",
    # paper B: sphere transformer, common-noise SDE, MLP field, Lyapunov exponents
    "SphereTransformer": "sphere.transformer",
    "MLPLayer": "sphere.transformer",
    "uniform_sphere": "sphere.transformer",
    "CommonNoiseSDE": "sphere.common_noise_sde",
    "coupled_discrete_and_sde": "sphere.common_noise_sde",
    "sde_top_lyapunov": "sphere.common_noise_sde",
    "mlp_field_kernels": "sphere.mlp_field",
    "MLPFieldKernels": "sphere.mlp_field",
    "simulate_top_lyapunov": "sphere.lyapunov",
    "LyapunovEstimate": "sphere.lyapunov",
    # paper C: spectra, Rényi ranks, token strata
    "StreamingCovariance": "spectra.ranks",
    "covariance_matrix": "spectra.ranks",
    "covariance_spectrum": "spectra.ranks",
    "singular_value_spectrum": "spectra.ranks",
    "spectrum": "spectra.ranks",
    "renyi_rank": "spectra.ranks",
    "soft_rank": "spectra.ranks",
    "hard_rank": "spectra.ranks",
    "spectral_asymmetry": "spectra.ranks",
    "reinjection_ratio": "spectra.ranks",
    "rank_summary": "spectra.ranks",
    "FrequencyStrata": "spectra.token_strata",
    "frequency_strata": "spectra.token_strata",
    "split_by_stratum": "spectra.token_strata",
    # backends
    "available_backends": "backends",
    "backend_status": "backends",
    "BackendStatus": "backends",
    "Backend": "backends",
    "resolve_backend": "backends",
    "resolve_device": "devices",
    "backend_for": "devices",
    "choose_backend": "devices",
    "DeviceChoice": "devices",
    "BackendChoice": "devices",
    "RunTarget": "devices",
    "KernelFamily": "kernel_family",
    "Flavour": "flavours",
    "flavour_named": "flavours",
    # precision and runtimes
    "resolve_precision": "precision",
    "Runtime": "runtime",
    "TransferLog": "runtime",
    "count_transfers": "runtime",
}

__all__ = install_lazy_exports(__name__, _EXPORTS)
