"""Independent transcriptions of paper B's definitions, compared with the production code.

Written from the formulas of the paper's model (Agazzi et al. 2026; docs/paper_b.md): the discrete
sphere-transformer layer, the random-MLP field, the zonal covariance k, and the limit SDE's drift,
diffusion and projected Euler–Maruyama step.  References are plain loops; k(1) and k(t) are computed
from their defining Gaussian integrals with SciPy quadrature (not with the package's Mehler series or
generated kernels), ReLU's k(t) also from the arc-cosine kernel of Cho & Saul (2009, "Kernel methods
for deep learning", eq. for n = 1).  Options are exercised where they change the answer: attractive,
repulsive, none and a numeric attention scale, non-symmetric Q, K, V and beta != 1, T != 1, several
layers, biases sigma_U, sigma_W > 0, ReLU and smooth activations, numpy and numba backends, the Itô
drift on and off, renormalised and plain steps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, special

from transformer_limits.numeric.sphere.common_noise_sde import CommonNoiseSDE
from transformer_limits.numeric.sphere.transformer import MLPLayer, SphereTransformer

D, M, NTOK = 3, 7, 5

PHI = {  # the activations, from their textbook definitions
    "relu": lambda z: max(z, 0.0),
    "tanh": math.tanh,
    "gelu": lambda z: 0.5 * z * (1.0 + math.erf(z / math.sqrt(2.0))),
    "sigmoid": lambda z: float(special.expit(z)),  # 1/(1 + e^{-z}) without overflow
    "silu": lambda z: z * float(special.expit(z)),
}


# ============================================================================================
# transcriptions


def unit(v):
    return v / math.sqrt(sum(x * x for x in v))


def attention_loop(X, Q, K, V):
    """Attn_X(x_i) = sum_j softmax_j(<Q x_i, K x_j>) V x_j."""
    out = np.zeros_like(X)
    for i in range(len(X)):
        logits = [float((Q @ X[i]) @ (K @ X[j])) for j in range(len(X))]
        top = max(logits)
        w = [math.exp(z - top) for z in logits]
        out[i] = sum((wj / sum(w)) * (V @ X[j]) for wj, j in zip(w, range(len(X))))
    return out


def mlp_loop(y, U, b_U, W, b_W, phi):
    """G^m(y) = (1/sqrt(m)) W phi(U y / sqrt(d) + b_U) + b_W."""
    m, d = U.shape
    hidden = [phi(float(U[k] @ y) / math.sqrt(d) + b_U[k]) for k in range(m)]
    return np.array([sum(W[a, k] * hidden[k] for k in range(m)) / math.sqrt(m) + b_W[a] for a in range(d)])


def sphere_layer_loop(X, layer, *, T, L, s, Q, K, V, phi):
    """Y = LN(X + (T/L) s Attn_X(X)),  X' = LN(Y + sqrt(T/L) G^m(Y))."""
    A = attention_loop(X, Q, K, V)
    Y = np.array([unit(X[i] + (T / L) * s * A[i]) for i in range(len(X))])
    return np.array([unit(Y[i] + math.sqrt(T / L) * mlp_loop(Y[i], layer.U, layer.b_U, layer.W, layer.b_W, phi))
                     for i in range(len(Y))])


def k1_quad(phi, d, sigma_u, sigma_w):
    """k(1) = E[phi(s Z)^2] + sigma_W^2, s^2 = 1/d + sigma_U^2 (adaptive quadrature)."""
    s = math.sqrt(1.0 / d + sigma_u**2)
    f = lambda z: phi(s * z) ** 2 * math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    return sum(integrate.quad(f, a, b, epsabs=1e-13, epsrel=1e-13, limit=200)[0]
               for a, b in ((-40.0, 0.0), (0.0, 40.0))) + sigma_w**2  # tails < e^-800


def k_gauss_hermite(phi, t, d, sigma_u, sigma_w, nodes=120):
    """k(t) = E[phi(V1) phi(V2)] + sigma_W^2, (V1, V2) centred Gaussian, Var = 1/d + sigma_U^2,
    Cov = t/d + sigma_U^2 (the covariance of <u, x>/sqrt(d) + b at two unit vectors): tensor
    Gauss–Hermite in (Z1, Z2) with V1 = s Z1, V2 = s(rho Z1 + sqrt(1 - rho^2) Z2)."""
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / math.sqrt(2 * math.pi)
    s2 = 1.0 / d + sigma_u**2
    rho = (t / d + sigma_u**2) / s2
    s = math.sqrt(s2)
    f = np.vectorize(phi)
    Z1, Z2 = np.meshgrid(z, z, indexing="ij")
    vals = f(s * Z1) * f(s * (rho * Z1 + math.sqrt(max(1 - rho * rho, 0.0)) * Z2))
    return float(w @ vals @ w) + sigma_w**2


def k_relu_conditional(t, d, sigma_u, sigma_w):
    """E[relu(V1) relu(V2)] + sigma_W^2 as E[relu(s Z1) E[relu(a Z1 + b Z2) | Z1]] with the Gaussian
    partial expectation E relu(m + b Z) = m Phi(m/b) + b phi(m/b) and 1-D adaptive quadrature."""
    s2 = 1.0 / d + sigma_u**2
    s, rho = math.sqrt(s2), min(1.0, (t / d + sigma_u**2) / s2)
    a, b = s * rho, s * math.sqrt(max(1 - rho * rho, 0.0))

    def inner(z1):
        m = a * z1
        return max(m, 0.0) if b == 0 else m * special.ndtr(m / b) + b * math.exp(-(m / b) ** 2 / 2) / math.sqrt(2 * math.pi)

    f = lambda z1: s * z1 * inner(z1) * math.exp(-z1 * z1 / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    return integrate.quad(f, 0.0, 40.0, epsabs=1e-14, epsrel=1e-13, limit=200)[0] + sigma_w**2


def k_relu_arccos(t, d, sigma_u, sigma_w):
    """Cho–Saul arc-cosine kernel (degree 1) for the pre-activation covariance:
    E[relu(V1) relu(V2)] = s^2/(2 pi) (sin theta + (pi - theta) cos theta), cos theta = rho."""
    s2 = 1.0 / d + sigma_u**2
    theta = math.acos(max(-1.0, min(1.0, (t / d + sigma_u**2) / s2)))
    return s2 / (2 * math.pi) * (math.sin(theta) + (math.pi - theta) * math.cos(theta)) + sigma_w**2


def tangent(x, v):
    """P_x v = v - <v, x> x for a unit x."""
    return v - float(v @ x) * x


def sde_drift_loop(X, *, s, Q, K, V, k1, d, ito):
    """b(x_i) = P_{x_i} s Attn(mu^N, x_i) - k(1)(d-1)/2 x_i (the Itô correction of the projected
    noise: the trace of P_x k(1) I P_x is (d-1) k(1))."""
    A = attention_loop(X, Q, K, V)
    c = k1 * (d - 1) / 2 if ito else 0.0
    return np.array([s * tangent(X[i], A[i]) - c * X[i] for i in range(len(X))])


# ============================================================================================
# the discrete model


def _random_qkv(rng, d):
    return [rng.normal(size=(d, d)) / math.sqrt(d) for _ in range(3)]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("activation", ["relu", "tanh", "gelu"])
@pytest.mark.parametrize("attention,s", [("attractive", 1.0), ("repulsive", -1.0), ("none", 0.0), (0.37, 0.37)])
def test_sphere_layer_matches_transcription(attention, s, activation, backend):
    rng = np.random.default_rng(1)
    Q, K, V = _random_qkv(rng, D)
    model = SphereTransformer(D, M, L=5, T=2.0, activation=activation, sigma_u=0.3, sigma_w=0.2,
                              attention=attention, Q=Q, K=K, V=V, backend=backend)
    X = rng.normal(size=(NTOK, D))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    layer = model.sample_layer(rng)
    expected = sphere_layer_loop(X, layer, T=2.0, L=5, s=s, Q=Q, K=K, V=V, phi=PHI[activation])
    np.testing.assert_allclose(model.layer(X, layer), expected, rtol=1e-12, atol=1e-13)


def test_default_attention_matrices_give_beta_identity():
    """Default Q = K = sqrt(beta) I, V = I: logits beta <x_i, x_j>."""
    beta = 2.5
    model = SphereTransformer(D, M, L=4, beta=beta)
    rng = np.random.default_rng(2)
    X = rng.normal(size=(NTOK, D))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    expected = attention_loop(X, math.sqrt(beta) * np.eye(D), math.sqrt(beta) * np.eye(D), np.eye(D))
    np.testing.assert_allclose(model.attention_field(X), expected, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(model.Q.T @ model.K, beta * np.eye(D), rtol=1e-14)


def test_run_composes_layers_with_fresh_mlps():
    """run: X_0 normalised, then L layers, layer l with the l-th draw of sample_layer."""
    rng = np.random.default_rng(3)
    Q, K, V = _random_qkv(rng, D)
    model = SphereTransformer(D, M, L=4, T=1.5, activation="tanh", sigma_u=0.2, sigma_w=0.1, Q=Q, K=K, V=V)
    X0 = rng.normal(size=(NTOK, D)) * 3.0  # not on the sphere: run normalises first
    traj = model.run(X0, seed=9)
    draws = np.random.default_rng(9)
    X = X0 / np.linalg.norm(X0, axis=1, keepdims=True)
    np.testing.assert_allclose(traj[0], X, rtol=1e-15)
    for ell in range(4):
        X = sphere_layer_loop(X, model.sample_layer(draws), T=1.5, L=4, s=1.0, Q=Q, K=K, V=V, phi=PHI["tanh"])
        np.testing.assert_allclose(traj[ell + 1], X, rtol=1e-12, atol=1e-13)


def test_sample_layer_has_the_stated_gaussian_scales():
    """U, W entries N(0,1), b_U ~ N(0, sigma_U^2), b_W ~ N(0, sigma_W^2): sample standard deviations
    over 600 layers within 8% (> 5 standard errors of the sd estimate; false-failure rate < 1e-6)."""
    model = SphereTransformer(D, M, L=1, sigma_u=0.3, sigma_w=0.7)
    rng = np.random.default_rng(4)
    layers = [model.sample_layer(rng) for _ in range(600)]
    for name, sd in (("U", 1.0), ("W", 1.0), ("b_U", 0.3), ("b_W", 0.7)):
        sample = np.concatenate([getattr(lay, name).ravel() for lay in layers])
        assert abs(sample.std() / sd - 1) < 0.08, (name, sample.std())
        assert abs(sample.mean()) < 6 * sd / math.sqrt(sample.size), name


# ============================================================================================
# the kernel and the SDE


@pytest.mark.parametrize("activation", ["relu", "tanh", "gelu", "sigmoid", "silu"])
def test_k1_matches_its_defining_integral(activation):
    sde = CommonNoiseSDE(4, activation=activation, sigma_u=0.4, sigma_w=0.3)
    assert sde.k1 == pytest.approx(k1_quad(PHI[activation], 4, 0.4, 0.3), rel=1e-10)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_kernel_matrix_matches_gaussian_integrals(activation):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(NTOK, D))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    sde = CommonNoiseSDE(D, activation=activation, sigma_u=0.4, sigma_w=0.3)
    K = sde.kernel_matrix(X)
    G = np.clip(X @ X.T, -1, 1)
    if activation == "relu":
        ref = np.vectorize(lambda t: k_relu_arccos(t, D, 0.4, 0.3))(G)
        np.testing.assert_allclose(K, ref, rtol=1e-12)
        # Gauss–Hermite converges only algebraically for the kinked ReLU: use the conditional form
        ref_int = np.vectorize(lambda t: k_relu_conditional(t, D, 0.4, 0.3))(G)
    else:
        ref_int = np.vectorize(lambda t: k_gauss_hermite(PHI[activation], t, D, 0.4, 0.3))(G)
    np.testing.assert_allclose(K, ref_int, rtol=1e-10)


@pytest.mark.parametrize("ito", [True, False])
@pytest.mark.parametrize("activation,attention,s", [("relu", "attractive", 1.0), ("tanh", "repulsive", -1.0),
                                                      ("gelu", 0.6, 0.6), ("relu", "none", 0.0)])
def test_sde_drift_matches_transcription(activation, attention, s, ito):
    rng = np.random.default_rng(6)
    d = 4  # (d - 1) != d / 2 etc.
    Q, K, V = _random_qkv(rng, d)
    sde = CommonNoiseSDE(d, activation=activation, sigma_u=0.3, sigma_w=0.5, attention=attention,
                         Q=Q, K=K, V=V, ito_drift=ito)
    X = rng.normal(size=(NTOK, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    k1 = k1_quad(PHI[activation], d, 0.3, 0.5)
    expected = sde_drift_loop(X, s=s, Q=Q, K=K, V=V, k1=k1, d=d, ito=ito)
    np.testing.assert_allclose(sde.drift(X), expected, rtol=1e-9, atol=1e-12)


def test_exact_increment_is_sqrt_h_times_psd_root_of_the_kernel():
    """dW = sqrt(h) K^{1/2} Z with K^{1/2} the symmetric PSD root (scipy.linalg.sqrtm of the
    transcribed kernel matrix); its conditional covariance is h K (x) I_d."""
    from scipy.linalg import sqrtm

    rng = np.random.default_rng(7)
    X = rng.normal(size=(NTOK, D))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    sde = CommonNoiseSDE(D, activation="relu", sigma_u=0.2, sigma_w=0.3)
    Kref = np.vectorize(lambda t: k_relu_arccos(t, D, 0.2, 0.3))(np.clip(X @ X.T, -1, 1))
    root = np.real(sqrtm(Kref))
    Z, h = rng.normal(size=(NTOK, D)), 0.03
    np.testing.assert_allclose(sde.exact_increment(X, h, Z), math.sqrt(h) * root @ Z, rtol=1e-9, atol=1e-12)


def test_feature_increment_matches_transcription():
    """dW(x) = (1/sqrt(m)) sum_k phi(<u_k, x>/sqrt(d) + b_k) dB^k + sigma_W dB^0."""
    rng = np.random.default_rng(8)
    sde = CommonNoiseSDE(D, activation="tanh", sigma_u=0.3, sigma_w=0.4)
    X = rng.normal(size=(NTOK, D))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    U, b_U = sde.sample_features(M, rng)
    dB = rng.normal(size=(M + 1, D)) * 0.1
    expected = np.array([sum(math.tanh(float(U[k] @ x) / math.sqrt(D) + b_U[k]) * dB[k] for k in range(M))
                         / math.sqrt(M) + 0.4 * dB[M] for x in X])
    np.testing.assert_allclose(sde.feature_increment(X, U, b_U, dB), expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("renormalise", [True, False])
def test_projected_euler_maruyama_step_matches_transcription(renormalise):
    """X~ = X + h b(X) + P_X dW, X' = X~/|X~| (or X~ when not renormalising)."""
    rng = np.random.default_rng(9)
    Q, K, V = _random_qkv(rng, D)
    sde = CommonNoiseSDE(D, activation="relu", sigma_u=0.2, sigma_w=0.3, attention="repulsive", Q=Q, K=K, V=V)
    X = rng.normal(size=(NTOK, D))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    dW, h = rng.normal(size=(NTOK, D)) * 0.2, 0.05
    b = sde_drift_loop(X, s=-1.0, Q=Q, K=K, V=V, k1=k1_quad(PHI["relu"], D, 0.2, 0.3), d=D, ito=True)
    Xt = np.array([X[i] + h * b[i] + tangent(X[i], dW[i]) for i in range(NTOK)])
    expected = np.array([unit(x) for x in Xt]) if renormalise else Xt
    np.testing.assert_allclose(sde.step(X, h, dW, renormalise=renormalise), expected, rtol=1e-9, atol=1e-12)


def test_simulate_uses_exact_increments_on_the_uniform_grid():
    """simulate(X0, T, n): h = T/n and the increments sqrt(h) K(X_n)^{1/2} Z_n with Z_n the seeded
    standard normals, in order."""
    rng = np.random.default_rng(10)
    sde = CommonNoiseSDE(D, activation="relu", sigma_u=0.1, sigma_w=0.2, beta=1.7)
    X0 = rng.normal(size=(NTOK, D))
    traj = sde.simulate(X0, 0.6, 3, seed=11)
    draws = np.random.default_rng(11)
    X = X0 / np.linalg.norm(X0, axis=1, keepdims=True)
    h = 0.2
    root_b = math.sqrt(1.7) * np.eye(D)
    k1 = (1.0 / D + 0.1**2) / 2 + 0.2**2  # ReLU: E[relu(sZ)^2] = s^2/2
    for n in range(3):
        Kref = np.vectorize(lambda t: k_relu_arccos(t, D, 0.1, 0.2))(np.clip(X @ X.T, -1, 1))
        w, E = np.linalg.eigh(Kref)
        dW = math.sqrt(h) * (E * np.sqrt(np.clip(w, 0, None))) @ E.T @ draws.standard_normal(X.shape)
        b = sde_drift_loop(X, s=1.0, Q=root_b, K=root_b, V=np.eye(D), k1=k1, d=D, ito=True)
        X = np.array([unit(X[i] + h * b[i] + tangent(X[i], dW[i])) for i in range(NTOK)])
        np.testing.assert_allclose(traj[n + 1], X, rtol=1e-9, atol=1e-12)


# ============================================================================================
# the Benettin estimator of the layer map's top Lyapunov exponent


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_benettin_tangent_push_is_the_derivative_of_the_layer_map(activation):
    """simulate_top_lyapunov pushes v by the Jacobian of x -> LN(x + sqrt(dt) G^m(x)); here the
    Jacobian is replaced by central finite differences of the transcribed map (same seeded draws,
    in the documented order U, W, b_U, b_W per step), and the time-normalised log growth agrees."""
    from transformer_limits.numeric.sphere.lyapunov import simulate_top_lyapunov

    d, m, dt, steps, chains, su, sw = 4, 6, 0.05, 5, 3, 0.3, 0.2
    est = simulate_top_lyapunov(activation, d, su, sw, width=m, dt=dt, steps=steps, chains=chains, seed=3)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((chains, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    v = rng.standard_normal((chains, d))
    v -= np.sum(v * x, axis=1, keepdims=True) * x
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    logs = np.zeros(chains)
    phi = PHI[activation]
    for _ in range(steps):
        U, W = rng.standard_normal((chains, m, d)), rng.standard_normal((chains, d, m))
        b_u, b_w = su * rng.standard_normal((chains, m)), sw * rng.standard_normal((chains, d))
        for c in range(chains):
            F = lambda y: unit(y + math.sqrt(dt) * mlp_loop(y, U[c], b_u[c], W[c], b_w[c], phi))  # noqa: E731
            eps = 1e-6
            Jv = (F(x[c] + eps * v[c]) - F(x[c] - eps * v[c])) / (2 * eps)
            logs[c] += math.log(np.linalg.norm(Jv))
            x[c], v[c] = F(x[c]), Jv / np.linalg.norm(Jv)
    per_chain = logs / (steps * dt)
    assert est.estimate == pytest.approx(per_chain.mean(), rel=1e-6)
