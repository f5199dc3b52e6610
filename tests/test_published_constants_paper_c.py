"""Paper C's published constants: each checked against where it is published, each typed once.

Sources (public repositories; the paper's runs use the authors' repository
``optimizer-scaling-laws/spectral-scaling-laws`` with ``microsoft/dion`` vendored):

* KellerJordan/Muon ``muon.py``: ``zeropower_via_newtonschulz5`` with
  ``a, b, c = (3.4445, -4.7750, 2.0315)``, ``steps=5``, ``X / (X.norm() + 1e-7)``; ``Muon(lr=0.02,
  momentum=0.95)``.
* microsoft/dion ``dion/muon.py``: ``ns_consts`` (the 5-step schedule below), ``Muon(...,
  epsilon=1e-8)`` passing ``epsilon`` to Newton–Schulz, ``adjust_lr_rms_norm`` ``0.2·sqrt(max(A, B))``;
  ``dion/normuon.py``: ``denom = V.sqrt() + 1e-8``, ``clamp(min=1e-8)``; ``dion/dion.py``:
  ``Dion(mu=0.95, epsilon=1e-8)``.
* spectral-scaling-laws ``optimizer_ssl/train/optimizer_factory.py``: Lion groups ``betas=(0.95,
  0.98)``, ``lr=hp.lr`` / ``hp.lr / sqrt(model_dim)``, ``weight_decay=0``; AdamW ``betas=(0.9,
  0.95)``; ``NorMuon(muon_beta2=0.95)``; its configs: lr 0.02 (matrix optimizers) and 3e-3
  (AdamW), weight decay 0.01; ``spectra/frequency_metrics.py``: mass cuts 0.33 / 0.67;
  ``spectra/covariance.py``: eigenvalue clamp 1e-12; ``models/gpt_model.py``: Linear init
  ``N(0, (fan_in^{-1/2} min(1, sqrt(fan_out/fan_in)))²)``, embedding ``N(0, 1)``.
* google/automl ``lion/lion_pytorch.py`` and lucidrains/lion-pytorch: Lion default
  ``betas=(0.9, 0.99)`` (Chen et al. 2023).
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

import transformer_limits.numeric.optim.matrix_optimizers as mo
from transformer_limits.numeric.spectra import ranks as spectral, token_strata

PUBLISHED = {
    "NS_COEFFICIENTS_ORIGINAL": ((3.4445, -4.7750, 2.0315),) * 5,
    "NS_COEFFICIENTS_DION": ((4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
                             (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012)),
    "NS_EPS_JORDAN": 1e-7,
    "NS_EPS_RUNS": 1e-8,
    "MUON_LR": 0.02,
    "MUON_MOMENTUM": 0.95,
    "NORMUON_BETA2": 0.95,
    "NORMUON_EPS": 1e-8,
    "DION_EPS": 1e-8,
    "LION_BETAS_RUNS": (0.95, 0.98),
    "LION_BETAS_CHEN": (0.9, 0.99),
    "RMS_NORM_SCALE": 0.2,
    "ADAMW_LR": 3e-3,
    "ADAMW_BETAS": (0.9, 0.95),
    "WEIGHT_DECAY": 0.01,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_optimizer_constant_equals_its_published_value(name):
    assert getattr(mo, name) == PUBLISHED[name]


def test_other_published_constants():
    assert (token_strata.HEAD_MASS, token_strata.MID_MASS) == (0.33, 0.67)
    assert spectral.EIGENVALUE_FLOOR == 1e-12
    assert mo.NS_EPS == mo.NS_EPS_JORDAN  # newton_schulz's default is Jordan's reference


def test_defaults_use_the_published_constants():
    """The classes' defaults are the named constants (Jordan's Muon; the runs' NorMuon/Dion)."""
    muon, normuon, dion, lion = mo.Muon(), mo.NorMuon(), mo.Dion(), mo.Lion()
    assert (muon.lr, muon.momentum, muon.ns_eps) == (0.02, 0.95, 1e-7)
    assert (normuon.beta2, normuon.eps, normuon.ns_eps) == (0.95, 1e-8, 1e-8)
    assert (dion.momentum, dion.eps) == (0.95, 1e-8)
    assert lion.betas == (0.95, 0.98)
    assert mo.muon_scale((9, 4), "rms_norm") == pytest.approx(0.2 * 3.0, rel=1e-15)


def test_torch_side_uses_the_same_definitions():
    torch = pytest.importorskip("torch")
    from transformer_limits.numeric.torch import optimizers as to
    from transformer_limits.numeric.torch.toy_gpt import init_std

    spec = to.optimizer_spec("muon")
    assert (spec.lr, spec.lion_lr, spec.weight_decay, spec.momentum, spec.ns_eps) == (0.02, 0.02, 0.01, 0.95, 1e-8)
    assert (spec.adamw_betas, spec.lion_betas) == ((0.9, 0.95), (0.95, 0.98))
    assert to.optimizer_spec("adamw").lr == 3e-3
    p = torch.nn.Parameter(torch.zeros(2, 2))
    assert to.NorMuon([p]).param_groups[0]["beta2"] == 0.95
    assert to.Dion([p]).param_groups[0]["eps"] == 1e-8
    assert init_std(768, 3072) == pytest.approx(1 / math.sqrt(3072) * math.sqrt(768 / 3072), rel=1e-15)
    assert init_std(3072, 768) == pytest.approx(1 / math.sqrt(768), rel=1e-15)


# Values that must not be typed as numeric literals outside their one named definition.
_VALUES = {v for key, val in PUBLISHED.items() if key != "RMS_NORM_SCALE"
           for v in (val if isinstance(val, tuple) and not isinstance(val[0], tuple)
                     else [x for abc in val for x in abc] if isinstance(val, tuple) else [val])}
_VALUES |= {0.33, 0.67, 1e-12, -4.775}
_NUMERIC = Path(mo.__file__).parents[1]  # transformer_limits/numeric


def _stray_literals(path: Path) -> list[str]:
    """Numeric literals with a published value that are not the right-hand side of a module-level
    ``UPPER_CASE = ...`` assignment (docstrings are strings and are not counted)."""
    tree = ast.parse(path.read_text())
    allowed: set[int] = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names = [n for t in targets for n in ([t] if isinstance(t, ast.Name) else getattr(t, "elts", []))]
        if names and all(isinstance(n, ast.Name) and n.id.isupper() for n in names) and node.value is not None:
            allowed |= {id(n) for n in ast.walk(node.value)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, float) and id(node) not in allowed:
            if node.value in _VALUES or -node.value in _VALUES:
                out.append(f"{path.name}:{node.lineno}: {node.value!r}")
    return out


@pytest.mark.parametrize("module", ["optim/matrix_optimizers.py", "torch/optimizers.py", "torch/toy_gpt.py",
                                    "spectra/token_strata.py", "spectra/ranks.py"])
def test_published_values_are_typed_once(module):
    assert _stray_literals(_NUMERIC / module) == []


def test_stray_literal_scan_catches_a_retyped_constant(tmp_path):
    """Deliberately wrong module: a second, inline 0.95 must be reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("MOMENTUM = 0.95\n\ndef f(mu=0.95):\n    return mu * 1e-8\n")
    assert _stray_literals(bad) == ["bad.py:3: 0.95", "bad.py:4: 1e-08"]
