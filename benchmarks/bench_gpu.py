"""GPU throughput of the paper-A attention-only transformer: forward and forward+adjoint, against 2-core numba.

Run:  python3 benchmarks/bench_gpu.py [--sizes 1024 2048 4096 8192 16384] [--d 8] [--L 64] [--H 8]
                                      [--batch 16] [--batch-N 256] [--repeats 3] [--json FILE] [--quick]

Unit: token-pair-head-layer updates per second, N^2 H L / seconds (unmasked attention, N tokens,
docs/theory.md §A.2): one update is one (query i, key j) term of one head's softmax sum in one layer.
"forward" times ``AttentionTransformer.forward`` (L layer fields), "fwd+adj" times ``loss_and_grad``
(forward, then the adjoint recursion with every layer's VJP and parameter gradients).

Implementations, same run, same inputs (``AttentionTransformer(d, d, d, backend=...)``):

  numba       generated CPU kernels, Numba limited to 2 threads (the project's 2-core reference
              machine): the baseline of the ratio column; measured only at the sizes whose predicted
              time (previous size x (N/N_prev)^2) fits ``--cpu-budget``; nothing is extrapolated
  numba-cuda  numba.cuda.jit layer kernels on the GPU (float64 only)
  cupy        CUDA C layer kernels in a CuPy RawModule, in float64 and (rows "float32") the float32 compile
              of the same source
  A backend that is not usable here, or that the attention layer does not support, is skipped with
  the reason.  Before timing, each GPU backend's outputs and gradients are compared with numba's at
  the smallest size.

FLOP model per pair-head-layer (``_bench_common.flops_per_pair_head``, exp counted as 20 FLOPs):
forward 2 d_k + 20 + 2 d_v + 2 (logit, exp, value accumulation and normaliser) = 54 at d = 8;
forward+adjoint adds the adjoint pass's recomputed logit and exp, <g_i, v_j>, and the qbar, kbar, vbar
accumulations: 156 at d = 8.  Bytes: the least DRAM traffic of one layer-head reads the features and
writes the outputs, 8 N (2 d_k + d_v + d) bytes in float64 (4 in float32), so the arithmetic intensity
is about f N / (8 (2 d_k + d_v + d)) FLOP/byte, 216 at N = 1024 forward, far above the H200's ridge
point (34 TFLOP/s / 4.8 TB/s = 7 FLOP/byte): the pair loops are compute-bound and the roofline is
min(peak, intensity x HBM bandwidth) = peak.

Roofline figures (the H200's, stated, not measured; other GPUs get the same figures with a note):
FP64 34 TFLOP/s on the vector units (67 with tensor cores, which scalar pair loops do not use), FP32
67 TFLOP/s, HBM 4.8 TB/s.  The float32 rows are measured against the FP32 peak; before timing, the
float32 outputs and gradients are compared with numba's float64 ones (largest relative deviation printed).

Batching: the transformer keeps its state on the device for a whole pass (no host round trip per
layer) and runs B independent problems in one launch per kernel (``loss_and_grad_batch``).  The
"batched" table times forward+adjoint of ``--batch`` problems of ``--batch-N`` tokens in one batched
call against B calls one after the other, per backend (numba's batched call is that loop).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

os.environ.setdefault("NUMBA_THREADING_LAYER", "workqueue")  # see bench_transformer.py

import numpy as np  # noqa: E402

from _bench_common import flops_per_pair_head, time_best  # noqa: E402  (benchmarks/ is sys.path[0])

from transformer_limits.numeric.attention.layer import LAYER_FLAVOURS  # noqa: E402
from transformer_limits.numeric.attention.losses import SquaredErrorLoss, sample_tokens, target_map  # noqa: E402
from transformer_limits.numeric.attention.transformer import AttentionTransformer, init_params  # noqa: E402
from transformer_limits.numeric.backends import REGISTRY  # noqa: E402
from transformer_limits.numeric.precision import FLOAT32_BACKENDS  # noqa: E402

GPU_BACKENDS = ("numba-cuda", "cupy")
#: H200 figures (FLOP/s, bytes/s): FP64 vector, FP64 tensor core, FP32, HBM
PEAK = {"float64": 34e12, "float64-tensor": 67e12, "float32": 67e12}
HBM = 4.8e12
CPU_THREADS = 2


def gpu_status(names=GPU_BACKENDS) -> tuple[list[str], list[str]]:
    """(backends of ``names`` to measure, one line per skipped one saying why)."""
    use: list[str] = []
    notes: list[str] = []
    for name in names:
        b = REGISTRY[name]
        if b.flavour not in LAYER_FLAVOURS:
            notes.append(f"{name}: the attention layer has no {b.flavour} flavour "
                         f"(it runs {', '.join(LAYER_FLAVOURS)})")
        elif not b.available:
            notes.append(f"{name}: not usable here: {b.reason}")
        else:
            use.append(name)
    return use, notes


def float32_rows(gpus: list[str]) -> tuple[list[str], list[str]]:
    """(backends measured in float32 too, one line per GPU backend that is float64 only)."""
    return ([g for g in gpus if g in FLOAT32_BACKENDS],
            [f"{g}: float32 not measured (float64 only: numba types Python float literals as float64)"
             for g in gpus if g not in FLOAT32_BACKENDS])


def _sync(backend: str):
    if REGISTRY[backend].device != "cuda":
        return None
    if REGISTRY[backend].array_module == "cupy":
        import cupy

        return cupy.cuda.Device().synchronize
    from numba import cuda

    return cuda.synchronize


def measure(backend: str, N: int, d: int, params: dict, repeats: int, budget: float,
            precision: str = "float64") -> dict[str, Any]:
    """Best-of-``repeats`` forward and fwd+adjoint seconds of one backend at N tokens."""
    m = AttentionTransformer(d, d, d, backend=backend, precision=precision)
    X0 = sample_tokens(N, d, seed=1)
    loss = SquaredErrorLoss(target_map(X0, seed=2))
    sync = _sync(backend)
    tf, nf = time_best(lambda: m.forward(X0, params), repeats, warmup=False, budget_s=budget, sync=sync)
    tb, nb = time_best(lambda: m.loss_and_grad(X0, params, loss), repeats, warmup=False, budget_s=budget,
                       sync=sync)
    return dict(backend=backend, dtype=precision, N=N, fwd_s=tf, fwd_adj_s=tb, samples=min(nf, nb))


def measure_batch(backend: str, B: int, N: int, d: int, params: dict, repeats: int, budget: float) -> dict[str, Any]:
    """Best-of-``repeats`` seconds of forward+adjoint of B problems of N tokens: one batched call
    (``loss_and_grad_batch``, shared parameters) and B single calls."""
    m = AttentionTransformer(d, d, d, backend=backend)
    X0s = np.stack([sample_tokens(N, d, seed=10 + b) for b in range(B)])
    losses = [SquaredErrorLoss(target_map(X, seed=2)) for X in X0s]
    sync = _sync(backend)
    tb, _ = time_best(lambda: m.loss_and_grad_batch(X0s, params, losses), repeats, budget_s=budget, sync=sync)
    ts, _ = time_best(lambda: [m.loss_and_grad(X, params, f) for X, f in zip(X0s, losses)], repeats,
                      budget_s=budget, sync=sync)
    return dict(backend=backend, B=B, N=N, batched_s=tb, single_s=ts, speedup=ts / tb)


def _host(a: Any) -> np.ndarray:
    """A NumPy copy of a NumPy or CuPy array."""
    return np.asarray(a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else a)


def check_against(backend: str, ref: str, d: int, params: dict, N: int, precision: str = "float64") -> float:
    """Largest relative deviation of output and gradients of ``backend`` (at ``precision``) from ``ref``
    (float64) at N tokens."""
    X0 = sample_tokens(N, d, seed=1)
    loss = SquaredErrorLoss(target_map(X0, seed=2))
    out = []
    for b, p in ((backend, precision), (ref, "float64")):
        value, grads, fwd, _ = AttentionTransformer(d, d, d, backend=b, precision=p).loss_and_grad(X0, params, loss)
        out.append([_host(fwd.states[-1]).astype(np.float64)] + [_host(grads[k]).astype(np.float64)
                                                                  for k in sorted(grads)])
    return max(float(np.max(np.abs(a - r)) / max(float(np.max(np.abs(r))), 1e-300)) for a, r in zip(*out))


def _fmt(x: float | None, spec: str, unit: str = "") -> str:
    return "-" if x is None else format(x, spec) + unit


def _row_line(r: dict[str, Any]) -> str:
    """One table row (see the header printed by :func:`main`)."""
    pct = {k: None if r[k] is None else 100 * r[k] for k in ("roof_fwd", "roof_fwd_adj")}
    return (f"{r['backend']:<14} {r['dtype']:<8} {r['N']:>6} {r['fwd_ups']:>11.3e} {r['fwd_adj_ups']:>12.3e} "
            f"{_fmt(r['fwd_x_numba'], '.3g', 'x'):>11} {_fmt(r['fwd_adj_x_numba'], '.3g', 'x'):>13} "
            f"{r['fwd_flops'] / 1e9:>11.4g} {r['fwd_adj_flops'] / 1e9:>13.4g} "
            f"{_fmt(pct['roof_fwd'], '.3g', '%'):>10} {_fmt(pct['roof_fwd_adj'], '.3g', '%'):>10}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=None,
                    help="token counts N (default 1024 2048 4096 8192 16384; 32 64 with --quick)")
    ap.add_argument("--d", type=int, default=8, help="d = d_k = d_v")
    ap.add_argument("--L", type=int, default=64)
    ap.add_argument("--H", type=int, default=8)
    ap.add_argument("--batch", type=int, default=16, help="B of the batched table (independent problems)")
    ap.add_argument("--batch-N", type=int, default=256, help="tokens per problem in the batched table")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per cell (best of); one at least")
    ap.add_argument("--cpu-budget", type=float, default=40.0,
                    help="seconds a numba cell may take (forward + fwd+adj, predicted from the previous size)")
    ap.add_argument("--gpu-budget", type=float, default=60.0, help="the same for a GPU cell")
    ap.add_argument("--backends", nargs="+", default=list(GPU_BACKENDS), choices=sorted(REGISTRY),
                    help="backends to compare with numba (default: the GPU ones; numba-cuda-sim for a smoke test)")
    ap.add_argument("--quick", action="store_true", help="tiny smoke run: N 32 64 (unless --sizes), L 2, H 2, 1 repeat")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON here (rewritten after each row)")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.L, args.H, args.repeats = args.sizes or [32, 64], 2, 2, 1
        args.batch, args.batch_N = 3, 16
    args.sizes = args.sizes or [1024, 2048, 4096, 8192, 16384]
    for name in ("sizes", "d", "L", "H", "repeats", "batch", "batch_N"):
        vals = getattr(args, name) if name == "sizes" else [getattr(args, name)]
        if any(v < 1 for v in vals):
            print(f"bench_gpu: --{name} must be positive integers, got {getattr(args, name)}", file=sys.stderr)
            return 2
    sizes, d, L, H = sorted(set(args.sizes)), args.d, args.L, args.H
    ff, fb = flops_per_pair_head(d, d)
    params = init_params(L, H, d, d, d, seed=0)
    gpus, notes = gpu_status([b for b in args.backends if b != "numba"])
    f32, f32_notes = float32_rows(gpus)
    notes += f32_notes
    rows: list[dict[str, Any]] = []
    meta = dict(d=d, L=L, H=H, sizes=sizes, flops_fwd=ff, flops_fwd_adj=fb, peak=PEAK, hbm=HBM,
                cpu_threads=CPU_THREADS, gpu_backends=gpus, notes=notes)

    def dump():
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(dict(meta, rows=rows), fh, indent=2)

    print(f"# paper-A transformer, d = d_k = d_v = {d}, L = {L}, H = {H} (L*H = {L * H}), unmasked; "
          f"FLOPs per pair-head-layer: forward {ff}, fwd+adj {fb} (exp = 20)", flush=True)
    print(f"# roofline (H200 figures): FP64 {PEAK['float64'] / 1e12:.0f} TFLOP/s vector "
          f"({PEAK['float64-tensor'] / 1e12:.0f} with tensor cores), FP32 {PEAK['float32'] / 1e12:.0f} TFLOP/s, "
          f"HBM {HBM / 1e12:.1f} TB/s; the pair loops are compute-bound (see the docstring)", flush=True)
    if not any(REGISTRY[g].device == "cuda" for g in gpus):
        print(f"# no GPU: {'; '.join(f'{n}: {REGISTRY[n].reason}' for n in GPU_BACKENDS)}", flush=True)
    for line in notes:
        print(f"# skipped {line}", flush=True)
    for g in gpus:
        print(f"# {g}: {REGISTRY[g].reason}", flush=True)

    # warm-up: JIT compile every backend's kernels on a tiny input (they do not depend on N)
    import numba

    threads = numba.get_num_threads()
    for b in ["numba"] + gpus:
        small = AttentionTransformer(d, d, d, backend=b)
        X = sample_tokens(8, d, seed=1)
        small.loss_and_grad(X, params, SquaredErrorLoss(target_map(X, seed=2)))
    for g in gpus:
        err = check_against(g, "numba", d, params, sizes[0])
        meta[f"max_rel_dev_{g}"] = err
        print(f"# {g} vs numba at N = {sizes[0]}: largest relative deviation {err:.1e} (output, gradients)",
              flush=True)
        if not err < 1e-8:
            print(f"bench_gpu: {g} disagrees with numba (relative deviation {err:.1e})", file=sys.stderr)
            return 1
    for g in f32:
        err = check_against(g, "numba", d, params, sizes[0], "float32")
        meta[f"max_rel_dev_{g}_float32"] = err
        print(f"# {g} float32 vs numba float64 at N = {sizes[0]}: largest relative deviation {err:.1e}", flush=True)
        if not err < 1e-3:
            print(f"bench_gpu: {g} float32 disagrees with numba (relative deviation {err:.1e})", file=sys.stderr)
            return 1

    print(f"{'backend':<14} {'dtype':<8} {'N':>6} {'fwd upd/s':>11} {'f+adj upd/s':>12} {'fwd x numba':>11} "
          f"{'f+adj x numba':>13} {'fwd GFLOP/s':>11} {'f+adj GFLOP/s':>13} {'% roof fwd':>10} {'% roof f+a':>10}",
          flush=True)
    base: dict[int, dict] = {}
    for b, precision in [("numba", "float64")] + [(g, "float64") for g in gpus] + [(g, "float32") for g in f32]:
        budget = args.cpu_budget if b == "numba" else args.gpu_budget
        prev = None
        if b == "numba":
            numba.set_num_threads(min(CPU_THREADS, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
        try:
            for N in sizes:
                if prev is not None:
                    predicted = (prev["fwd_s"] + prev["fwd_adj_s"]) * (N / prev["N"]) ** 2
                    if predicted > budget:
                        print(f"# {b}: not measured at N >= {N} (predicted {predicted:.0f} s for one forward "
                              f"and one fwd+adj call > budget {budget:.0f} s)", flush=True)
                        break
                r = measure(b, N, d, params, args.repeats, budget, precision)
                units = N * N * H * L
                r.update(fwd_ups=units / r["fwd_s"], fwd_adj_ups=units / r["fwd_adj_s"],
                         fwd_flops=ff * units / r["fwd_s"], fwd_adj_flops=fb * units / r["fwd_adj_s"])
                if b == "numba":
                    base[N] = r
                ref = base.get(N)
                r["fwd_x_numba"] = ref["fwd_s"] / r["fwd_s"] if ref else None
                r["fwd_adj_x_numba"] = ref["fwd_adj_s"] / r["fwd_adj_s"] if ref else None
                roof = PEAK[precision] if REGISTRY[b].device == "cuda" else None
                r["roof_fwd"] = r["fwd_flops"] / roof if roof else None
                r["roof_fwd_adj"] = r["fwd_adj_flops"] / roof if roof else None
                rows.append(r)
                dump()

                print(_row_line(r), flush=True)
                prev = r
        finally:
            numba.set_num_threads(threads)
    print(f"\n# batched: forward+adjoint of B = {args.batch} problems of N = {args.batch_N} tokens (shared "
          f"parameters), one batched call vs B single calls", flush=True)
    print(f"{'backend':<14} {'B':>4} {'N':>6} {'batched s':>11} {'B single s':>11} {'speed-up':>9}", flush=True)
    numba.set_num_threads(min(CPU_THREADS, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined]
    try:
        for b in ["numba"] + gpus:
            r = measure_batch(b, args.batch, args.batch_N, d, params, args.repeats,
                              args.cpu_budget if b == "numba" else args.gpu_budget)
            meta.setdefault("batched", []).append(r)
            dump()
            print(f"{b:<14} {r['B']:>4} {r['N']:>6} {r['batched_s']:>11.4g} {r['single_s']:>11.4g} "
                  f"{r['speedup']:>8.3g}x", flush=True)
    finally:
        numba.set_num_threads(threads)
    print(f"# numba: {CPU_THREADS} threads (NUMBA_THREADING_LAYER={os.environ['NUMBA_THREADING_LAYER']}); "
          f"'% roof' = achieved FLOP/s / the dtype's peak (FP64 vector, FP32; GPU rows); '-' = no numba figure at that N",
          flush=True)
    dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
