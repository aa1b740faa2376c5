#!/usr/bin/env bash
# The whole GPU check, in under 8 minutes on one CUDA GPU (the design card names an A100).
#
#   bash benchmarks/cuda_check.sh [OUT_DIR]
#
# 1. the CUDA tests (greedy speculative output equals the naive loop on the GPU, identity plans
#    exact, the KV-cache invariant), skipped on machines without CUDA;
# 2. the benchmark harness on the bundled prompt set, bf16 and fp32, every method against the
#    naive loop, with greedy equality checked before any speed is reported.
# Results (JSON, tables, PNG plots) land in OUT_DIR (default bench_out/cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench_out/cuda}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())"
"$PY" -m pytest -q tests/test_cuda.py 2>&1 | tee "$OUT/tests.txt"
"$PY" -m casspec_ref bench --device cuda --dtype bfloat16 --max-new-tokens 128 --runs 2 \
    --methods ar,pld,chain,vchc,swift-tree,static-tree,cas-spec --out "$OUT/bf16" --no-progress
"$PY" -m casspec_ref bench --device cuda --dtype float32 --max-new-tokens 128 --runs 1 \
    --methods ar,pld,chain,cas-spec --out "$OUT/fp32" --no-progress
