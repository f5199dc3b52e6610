"""The vectorisable exp emitted into the generated Numba kernels: accuracy against numpy.exp."""

import importlib.util
import sys

import numpy as np
import pytest

from transformer_limits.symbolic.fast_exp import fast_exp_lines

pytest.importorskip("numba")


@pytest.fixture(scope="module")
def row_exp(tmp_path_factory):
    path = tmp_path_factory.mktemp("fast_exp") / "fast_exp_row.py"
    path.write_text("\n".join(["import numba"] + fast_exp_lines() + [
        "", "", '@numba.njit(fastmath={"contract", "reassoc"})', "def row_exp(x, out):",
        "    for j in range(x.shape[0]):", "        out[j] = fast_exp(x[j])", ""]))
    spec = importlib.util.spec_from_file_location("fast_exp_row", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fast_exp_row"] = module
    spec.loader.exec_module(module)

    def run(x):
        out = np.empty_like(x)
        module.row_exp(x, out)
        return out
    return run


def _ulps(got, want):
    return np.where(got == want, 0.0, np.abs(got - want) / np.spacing(np.abs(want)))


def test_fast_exp_within_two_ulp_on_the_softmax_range(row_exp):
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-745.0, 0.0, 1_000_001), -rng.exponential(20.0, 200_000),
                        rng.uniform(-700.0, 700.0, 200_000), rng.uniform(-1.0, 1.0, 200_000)])
    assert _ulps(row_exp(x), np.exp(x)).max() <= 2.0  # measured: 1 ulp


def test_fast_exp_special_values_as_numpy(row_exp):
    x = np.array([0.0, -0.0, -1e-300, 1e-300, -745.2, -746.0, -1e300, -np.inf, np.inf, 709.7, 710.0, 1e300])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(row_exp(x), np.exp(x))
    assert np.isnan(row_exp(np.array([np.nan]))[0])
