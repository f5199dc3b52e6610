"""Numba's CUDA simulator runs a python-cuda kernel as plain Python, so it never type-checks it: a
kernel launched with an argument of the wrong number of dimensions (which Numba would reject when
compiling it for a real GPU) passes every simulator test.  Here every launch the device-resident
simulators make is recorded, and each python-cuda source is compiled with ``numba.njit`` in place of
``cuda.jit`` (thread index 0) and called with the recorded arguments: Numba's type inference then
checks every kernel against the arrays a real run gives it."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map
from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params
from transformer_limits.numeric.backends import REGISTRY
from transformer_limits.numeric.runtime import Runtime
from transformer_limits.numeric.sphere.common_noise_sde import CommonNoiseSDE
from transformer_limits.numeric.sphere.transformer import SphereTransformer, uniform_sphere

pytestmark = [pytest.mark.cudasim,
              pytest.mark.skipif(not REGISTRY["numba-cuda-sim"].available,
                                 reason=f"numba-cuda-sim: {REGISTRY['numba-cuda-sim'].reason}")]


def _njit_module(path: str) -> dict:
    """The kernels of a generated python-cuda file compiled for the CPU by numba.njit (thread 0)."""
    text = open(path, encoding="utf-8").read()
    assert "from numba import cuda" in text and "cuda.grid(1)" in text
    text = (text.replace("from numba import cuda", "import numba")
            .replace("@cuda.jit", "@numba.njit").replace("cuda.grid(1)", "0"))
    namespace: dict = {}
    exec(compile(text, path, "exec"), namespace)  # noqa: S102 - our own generated source
    return namespace


@pytest.fixture
def launches(monkeypatch):
    """Every python-cuda launch of the block: (source file, kernel name, arguments)."""
    seen: list[tuple[str, str, tuple]] = []
    original = Runtime.call

    def record(self, module, name, threads, *args, **kwargs):
        if self.flavour.launch == "grid" and np.all(np.asarray(threads) > 0):
            seen.append((module.__file__, name, tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a
                                                      for a in args)))
        return original(self, module, name, threads, *args, **kwargs)

    monkeypatch.setattr(Runtime, "call", record)
    return seen


def _type_check(seen) -> set[str]:
    compiled: dict[str, dict] = {}
    names = set()
    for path, name, args in seen:
        kernels = compiled.setdefault(path, _njit_module(path))
        kernels[name](*args)  # numba.core.errors.TypingError on a kernel a GPU would not compile
        names.add(name)
    return names


def test_every_launch_of_the_attention_transformer_type_checks(launches):
    d, L, H, B, N = 3, 2, 2, 2, 5
    model = AttentionTransformer(d, 2, 2, backend="numba-cuda-sim")
    params = init_params(L, H, d, 2, 2, seed=0)
    X0s = np.stack([sample_tokens(N, d, seed=b) for b in range(B)])
    model.loss_and_grad_batch(X0s, params, [SquaredErrorLoss(target_map(X, seed=1)) for X in X0s])
    per_problem = {k: np.stack([v, 0.5 * v]) for k, v in params.items()}
    model.loss_and_grad_batch(X0s, per_problem, [SquaredErrorLoss(target_map(X, seed=1)) for X in X0s])
    X = sample_tokens(N, d, seed=3)
    AttentionTransformer(d, 2, 2, causal=True, backend="numba-cuda-sim").loss_and_grad(
        X, params, SquaredErrorLoss(target_map(X, seed=1)))
    assert _type_check(launches) >= {"features", "forward", "head_sum", "adjoint_rows", "adjoint_keys",
                                     "param_grads"}


def test_every_launch_of_the_sphere_simulators_type_checks(launches):
    sde = CommonNoiseSDE(3, "relu", 0.5, 0.5, backend="numba-cuda-sim")
    rng = np.random.default_rng(0)
    sde.simulate(uniform_sphere(4, 3, rng), 0.1, 2, 0)
    sde.simulate_batch(np.stack([uniform_sphere(4, 3, rng) for _ in range(2)]), 0.1, 2, [1, 2])
    sde.simulate_systems([uniform_sphere(4, 3, rng), uniform_sphere(6, 3, rng)], 0.1, 2, 8, 0)
    SphereTransformer(d=3, m=8, L=2, T=0.5, backend="numba-cuda-sim").run(uniform_sphere(4, 3, rng), 0)
    assert len(_type_check(launches)) >= 2


def test_a_kernel_given_an_argument_of_the_wrong_rank_is_caught(launches):
    # the check itself: head_sum's PARTS as a 2-D array (the bug a real GPU found first, H = 0 launches)
    d, L, H, N = 3, 1, 1, 4
    model = AttentionTransformer(d, 2, 2, backend="numba-cuda-sim")
    X = sample_tokens(N, d, seed=0)
    model.forward(X, init_params(L, H, d, 2, 2, seed=0))
    path, name, args = next(x for x in launches if x[1] == "head_sum")
    bad = (args[0][0],) + args[1:]  # PARTS (H, N, d) -> (N, d)
    with pytest.raises(numba.core.errors.TypingError):
        _njit_module(path)[name](*bad)
