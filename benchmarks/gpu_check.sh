#!/usr/bin/env bash
# The one prepared GPU check (issue 13): on a machine with a CUDA GPU, in at most 8 minutes,
#   1. install   the package with its gpu and test extras (pip)
#   2. info      `transformer-limits info` (backends, device, and why)
#   3. pytest    `pytest -m gpu` (the device tests)
#   4. bench     benchmarks/bench_gpu.py (pair-updates/s against 2-core numba, roofline fractions; --json)
#   5. report    `transformer-limits report --profile quick --device cuda`
# Every step runs under `timeout` (the limits below add up to 470 s) and writes STEP.log under OUTDIR;
# a failed step does not stop the later ones, the script exits 1 at the end if any failed, and
# OUTDIR/summary.txt lists each step's exit status and seconds.  The report folder is packed into
# OUTDIR/report.tar.gz so that OUTDIR holds eight files.
#
# Usage:  bash benchmarks/gpu_check.sh [--dry-run] [OUTDIR]      (OUTDIR defaults to $OUT)
#   --dry-run   print the steps and their commands; run nothing, write nothing
# Environment: PYTHON (default python3); GPU_CHECK_T_<STEP> overrides a step's limit in seconds.
# Install: when cupy, numba.cuda, pytest and sympy already import (a GPU image without network
# access), only the package itself is installed (--no-deps --no-build-isolation); otherwise
# `pip install -e ".[gpu,test]"`.
set -euo pipefail

DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then DRY=1; shift; fi
if [[ $# -gt 1 || "${1:-}" == -* ]]; then
    echo "gpu_check.sh: usage: bash benchmarks/gpu_check.sh [--dry-run] [OUTDIR]" >&2
    exit 2
fi
OUT="${1:-${OUT:?set OUT or pass a folder}}"
OUT="$(realpath -m -- "$OUT")"
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1

INSTALL="if $PY -c 'import cupy, numba.cuda, pytest, sympy' 2>/dev/null; then"
INSTALL+=" $PY -m pip install --no-deps --no-build-isolation -e .; else $PY -m pip install -e '.[gpu,test]'; fi"
STEPS=(install info pytest bench report)
declare -A LIMIT=([install]=60 [info]=20 [pytest]=120 [bench]=150 [report]=120)
declare -A CMD=(
    [install]="$INSTALL"
    [info]="$PY -m transformer_limits info"
    [pytest]="$PY -m pytest -m gpu -q -p no:cacheprovider"
    [bench]="$PY benchmarks/bench_gpu.py --repeats 3 --cpu-budget 15 --gpu-budget 20 --json '$OUT/bench.json'"
    [report]="$PY -m transformer_limits report --profile quick --device cuda --no-progress --out '$OUT/report'"
)

if ((DRY)); then
    echo "# dry run: would write logs under $OUT"
    for s in "${STEPS[@]}"; do
        t="GPU_CHECK_T_${s^^}"
        echo "[$s] timeout ${!t:-${LIMIT[$s]}}s: ${CMD[$s]} > $OUT/$s.log 2>&1"
    done
    echo "[pack] tar -czf $OUT/report.tar.gz -C $OUT report"
    exit 0
fi

mkdir -p -- "$OUT"
SUMMARY="$OUT/summary.txt"
echo "# gpu_check.sh $(date -u +%FT%TZ) on $(hostname); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
    >"$SUMMARY"
FAILED=()
for s in "${STEPS[@]}"; do
    t="GPU_CHECK_T_${s^^}"
    limit="${!t:-${LIMIT[$s]}}"
    echo "[$s] timeout ${limit}s: ${CMD[$s]}"
    start=$(date +%s)
    set +e
    timeout --kill-after=10 "$limit" bash -c "${CMD[$s]}" >"$OUT/$s.log" 2>&1
    rc=$?
    set -e
    secs=$(($(date +%s) - start))
    case $rc in
        0) status="ok" ;;
        124 | 137) status="TIMED OUT after ${limit}s" ;;
        *) status="FAILED" ;;
    esac
    ((rc == 0)) || FAILED+=("$s")
    printf '%-8s rc=%-4s %4ss  %s\n' "$s" "$rc" "$secs" "$status" | tee -a "$SUMMARY"
done
if [[ -d "$OUT/report" ]]; then
    tar -czf "$OUT/report.tar.gz" -C "$OUT" report && rm -rf -- "$OUT/report"
fi
if ((${#FAILED[@]})); then
    echo "FAILED: ${FAILED[*]} (logs in $OUT)" | tee -a "$SUMMARY"
    exit 1
fi
echo "all steps passed (logs in $OUT)" | tee -a "$SUMMARY"
