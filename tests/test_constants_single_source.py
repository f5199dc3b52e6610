"""One source of truth per constant: numeric code takes derived constants from the derivations (via
the generated :mod:`transformer_limits.numeric.sphere.derived_constants`), every numeric closed form equals
its SymPy derivation, and every published constant is checked against its published value.

Published sources cited below:
* PyTorch, ``torch.optim.AdamW`` documentation (https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html):
  defaults lr = 1e-3, betas = (0.9, 0.999), eps = 1e-8, weight_decay = 1e-2.
* Agazzi, Bruno, Mosig García, Saviozzi, Romito (2026), "Stochastic Scaling Limits and Synchronization
  by Noise in Deep Transformer Models", arXiv:2604.26898, Appendix B table (k(1), k'(1), lambda_1,
  lambda_bar for ReLU, sigma_U = sigma_W = sigma), printed to 3 significant digits.
"""

from __future__ import annotations

import inspect
import math
import re
import subprocess
import sys
from pathlib import Path

import mpmath
import numpy as np
import pytest
import sympy as sp

import transformer_limits as tl
from transformer_limits.numeric.sphere import derived_constants as generated
from transformer_limits.numeric.optim.adamw import (AdamW, BlockwiseAdamW, adamw_box_radius,
                                              adamw_box_radius_path, adamw_update_bound,
                                              adamw_update_bound_sup)
from transformer_limits.numeric.sphere.common_noise_sde import CommonNoiseSDE
from transformer_limits.numeric.sphere.lyapunov import ACTIVATIONS as LYAPUNOV_ACTIVATIONS
from transformer_limits.symbolic import adamw_box as box
from transformer_limits.symbolic.derived_constants import (TARGET, derived_constants,
                                                           render_derived_constants)
from transformer_limits.symbolic.gaussian_quadrature import hermite_rule
from transformer_limits.symbolic.mlp_kernel import activation, x_sym

ROOT = Path(__file__).resolve().parents[1]

# ============================================================================================
# the generated constants module


def test_generated_constants_module_is_up_to_date_and_exact():
    assert TARGET.read_text(encoding="utf-8") == render_derived_constants(), (
        "numeric/sphere/derived_constants.py is stale: run `python3 -m transformer_limits.symbolic.derived_constants`")
    for name, (exact, _) in derived_constants().items():
        assert getattr(generated, name) == float(exact)
    assert derived_constants()["RELU_DK1_TIMES_D"][0] == sp.Rational(1, 2)


def test_sde_constants_come_from_the_generated_module():
    """CommonNoiseSDE.dk1 (ReLU) is RELU_DK1_TIMES_D/d, and equals the mlp-kernel derivation."""
    for d in (3, 64):
        sde = CommonNoiseSDE(d)
        assert sde.dk1 == generated.RELU_DK1_TIMES_D / d
        values = tl.derivation("mlp-kernel", d=d, sigma_u=0.2, sigma_w=0.3).values
        assert sde.dk1 == pytest.approx(values["dk1"], rel=1e-15)
        sde = CommonNoiseSDE(d, sigma_u=0.2, sigma_w=0.3)
        assert sde.k1 == pytest.approx(values["k1"], rel=1e-13)
        assert sde.k1 == pytest.approx(generated.RELU_K1_PER_S2 * (1 / d + 0.04) + 0.09, rel=1e-13)
    for act in ("tanh", "silu"):  # Mehler-series k(1), k'(1) of the SDE vs Gauss–Hermite of the derivation
        values = tl.derivation("mlp-kernel", activation=act, d=5, sigma_u=0.2, sigma_w=0.3).values
        sde = CommonNoiseSDE(5, activation=act, sigma_u=0.2, sigma_w=0.3)
        assert sde.k1 == pytest.approx(values["k1"], rel=1e-10)
        assert sde.dk1 == pytest.approx(values["dk1"], rel=1e-9)


def test_ito_coefficient_matches_the_lyapunov_derivation():
    """The SDE's Itô drift coefficient c = k(1)(d-1)/2 is the one in lambda_1 = ((d-3)/2)k'(1) - c
    of the ``lyapunov`` derivation (one formula, two places)."""
    for act, d in (("relu", 8),):  # (d - 3) != 0 and (d - 1)/2 != d/2; smooth k(1), k'(1) below
        sde = CommonNoiseSDE(d, activation=act, sigma_u=0.1, sigma_w=0.1)
        lam = tl.derivation("lyapunov", activation=act, d=d, sigma_u=0.1, sigma_w=0.1).values["lambda_1"]
        assert sde.ito_coefficient == pytest.approx((d - 3) / 2 * sde.dk1 - lam, rel=1e-9, abs=1e-12)


# Agazzi et al. (2026), arXiv:2604.26898, Appendix B: (d, sigma, k(1), k'(1), lambda_1, lambda_bar)
PAPER_B_RELU_TABLE = [
    (5, 0.0, "1.00e-01", "1.00e-01", "-1.00e-01", "2.00e-01"),
    (5, 0.1, "1.15e-01", "1.00e-01", "-1.30e-01", "1.70e-01"),
    (64, 0.0, "7.81e-03", "7.81e-03", "-7.81e-03", "1.56e-02"),
    (64, 0.1, "2.28e-02", "7.81e-03", "-4.80e-01", "-8.99e-01"),
    (128, 0.0, "3.91e-03", "3.91e-03", "-3.91e-03", "7.81e-03"),
    (128, 0.1, "1.89e-02", "3.91e-03", "-9.56e-01", "-1.87e+00"),
]


def _printed(value: float, text: str) -> bool:
    """``value`` printed with the precision of ``text`` (3 significant digits) gives ``text``."""
    return f"{value:.2e}" == text


@pytest.mark.parametrize("d,sigma,k1,dk1,lam1,lambar", PAPER_B_RELU_TABLE)
def test_numeric_sde_constants_reproduce_the_published_relu_table(d, sigma, k1, dk1, lam1, lambar):
    sde = CommonNoiseSDE(d, activation="relu", sigma_u=sigma, sigma_w=sigma)
    assert _printed(sde.k1, k1) and _printed(sde.dk1, dk1)
    # lambda_1 = ((d-3)/2) k'(1) - c and lambda_bar = (d-1) k'(1) - (d-3) k(1) from the numeric constants
    assert _printed((d - 3) / 2 * sde.dk1 - sde.ito_coefficient, lam1)
    assert _printed((d - 1) * sde.dk1 - (d - 3) * sde.k1, lambar)


# ============================================================================================
# activations typed in numeric code (lyapunov_simulation) vs the SymPy definitions


@pytest.mark.parametrize("name", sorted(LYAPUNOV_ACTIVATIONS))
def test_lyapunov_simulation_activations_equal_the_sympy_definitions(name):
    act = activation(name)
    phi, dphi = LYAPUNOV_ACTIVATIONS[name]
    z = np.concatenate([np.linspace(-8, 8, 161), [-1e-3, 1e-3, 0.37, -2.9]])
    z = z[z != 0.0]  # ReLU' is undefined at the kink
    f = sp.lambdify(x_sym, act.expr, modules="mpmath")
    df = sp.lambdify(x_sym, act.derivative, modules="mpmath")
    with mpmath.workdps(30):
        want = np.array([float(f(mpmath.mpf(float(t)))) for t in z])
        dwant = np.array([float(df(mpmath.mpf(float(t)))) for t in z])
    np.testing.assert_allclose(phi(z), want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(dphi(z), dwant, rtol=1e-12, atol=1e-15)


# ============================================================================================
# AdamW: numeric closed forms vs the adamw-box derivation; published defaults; docs table

BETAS = [(0.9, 0.999), (0.9, 0.95), (0.0, 0.5), (0.5, 0.25), (0.3, 0.6), (0.99, 0.999), (0.0, 1e-12)]


def _sym(expr, b1, b2, **extra):
    """Evaluate a derivation expression at 40 digits (Piecewise branch chosen by SymPy)."""
    subs = {box.BETA1: sp.Float(b1, 40), box.BETA2: sp.Float(b2, 40)}
    subs.update({getattr(box, k): v for k, v in extra.items()})
    value = sp.N(expr.subs(subs), 40)
    return float(value) if value.is_finite else math.inf


@pytest.mark.parametrize("b1,b2", BETAS)
def test_numeric_update_bounds_equal_the_derivation(b1, b2):
    for k in (1, 2, 3, 17, 256, 4096):
        assert adamw_update_bound(b1, b2, k) == pytest.approx(_sym(box.C_BETA_K, b1, b2, K_STEP=k), rel=1e-11)
        assert adamw_update_bound(b1, b2, k, sharp=True) == pytest.approx(
            _sym(box.C_SHARP_K, b1, b2, K_STEP=k), rel=1e-11)
    if b1 < math.sqrt(b2):
        assert adamw_update_bound_sup(b1, b2) == pytest.approx(_sym(box.C_BETA_INF, b1, b2), rel=1e-13)
        assert adamw_update_bound_sup(b1, b2, sharp=True) == pytest.approx(
            _sym(box.C_SHARP_INF, b1, b2), rel=1e-13)
    values = tl.derivation("adamw-box", beta1=b1, beta2=b2, lr=0.01, weight_decay=0.5, R0=0.3,
                           steps=200, k=17).values
    assert values["C_beta_k"] == pytest.approx(adamw_update_bound(b1, b2, 17), rel=1e-12)
    assert values["C_beta_sup"] == pytest.approx(adamw_update_bound_sup(b1, b2), rel=1e-13)
    if math.isfinite(values["C_beta_sup"]):
        assert values["R_theta_all_steps"] == pytest.approx(adamw_box_radius(0.3, 0.01, 0.5, b1, b2), rel=1e-13)
    # the closed-form K-step radius uses C_beta(K) for every step, the numeric path C_beta(k) step by step
    path = adamw_box_radius_path(0.3, 0.01, 0.5, b1, b2, 200)
    assert path[-1] <= values["R_theta_coordinatewise"] * (1 + 1e-12)
    closed = (1 - 0.005) ** 200 * 0.3 + 0.01 * adamw_update_bound(b1, b2, 200) * (1 - 0.995**200) / 0.005
    assert values["R_theta_coordinatewise"] == pytest.approx(closed, rel=1e-12)


def test_adamw_defaults_are_torch_published_defaults():
    """PyTorch docs (torch.optim.AdamW): lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2."""
    published = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}
    for cls in (AdamW, BlockwiseAdamW):
        sig = inspect.signature(cls.__init__)
        assert {k: sig.parameters[k].default for k in published} == published, cls
    torch = pytest.importorskip("torch")
    tsig = inspect.signature(torch.optim.AdamW.__init__)
    assert {k: tsig.parameters[k].default for k in published} == published


def test_docs_adamw_table_equals_the_derivation():
    """docs/adamw.md prints C_beta(inf) and the sharp constant to 4 decimals; both come from the
    adamw-box derivation (no second source)."""
    text = (ROOT / "docs" / "adamw.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \(([\d.]+), ([\d.]+)\)[^|]*\| ([\d.]+) \| ([\d.]+) \|$", text, flags=re.M)
    assert len(rows) == 2
    for b1, b2, sup, sharp in rows:
        values = tl.derivation("adamw-box", beta1=float(b1), beta2=float(b2)).values
        assert f"{values['C_beta_sup']:.4f}" == sup
        assert f"{values['C_beta_sharp_sup']:.4f}" == sharp


# ============================================================================================
# quadrature rules used by numeric code vs the symbolic infrastructure's mpmath rules


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_gauss_legendre_rule_of_the_head_law_quadrature(n):
    """mean_field.AffineHeadLaw uses numpy's Gauss–Legendre rule: nodes and weights equal mpmath's
    Golub–Welsch rule at 30 digits."""
    x, w = np.polynomial.legendre.leggauss(n)
    with mpmath.workdps(30):
        xs, ws = mpmath.mp.gauss_quadrature(n, "legendre")
        xs, ws = [float(xs[i]) for i in range(n)], [float(ws[i]) for i in range(n)]
    order = np.argsort(xs)
    np.testing.assert_allclose(x, np.take(xs, order), rtol=0, atol=2e-15)
    np.testing.assert_allclose(w, np.take(ws, order), rtol=2e-14)


def test_gauss_hermite_rule_of_the_numeric_kernels():
    """numeric.mlp_field's probabilists' Gauss–Hermite rule (numpy hermegauss / sqrt(2 pi)) equals the
    symbolic ``hermite_rule`` (mpmath) that the mlp-kernel derivation uses."""
    z, w = np.polynomial.hermite_e.hermegauss(40)
    zs, ws = hermite_rule(40, 20)
    order = np.argsort([float(t) for t in zs])
    np.testing.assert_allclose(z, [float(zs[i]) for i in order], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(w / math.sqrt(2 * math.pi), [float(ws[i]) for i in order], rtol=1e-10,
                               atol=1e-15 * w.max())


def test_numeric_adamw_and_sde_constants_need_no_sympy():
    """The numeric bound functions and the generated constants import no SymPy at run time."""
    code = ("import sys\n"
            "from transformer_limits.numeric.optim.adamw import adamw_box_radius, adamw_update_bound\n"
            "from transformer_limits.numeric.sphere import derived_constants\n"
            "from transformer_limits.numeric.sphere.common_noise_sde import CommonNoiseSDE\n"
            "adamw_box_radius(0.1, 1e-3, 1e-2); adamw_update_bound(0.9, 0.999, 10)\n"
            "CommonNoiseSDE(5).dk1\n"
            "assert 'sympy' not in sys.modules, 'sympy imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
