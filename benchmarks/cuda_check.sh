#!/usr/bin/env bash
# The whole GPU check, in under 8 minutes on one CUDA GPU.
#
#   bash benchmarks/cuda_check.sh [OUT_DIR]
#
# The model file travels to a GPU machine in two parts (it is larger than one transfer): put
# them as model_parts/*.part* (in name order: `split -n 2 FILE model_parts/gguf.part`) and this
# script joins them; otherwise the embedded GGUF of the installed model package is used.
#
# 1. the CUDA tests (tests/test_cuda.py: identity plans exact, the fixed-shape path captured as
#    CUDA graphs and equal to itself eagerly, every method's greedy tokens equal to the naive
#    loop's, eager and fixed-shape, bf16 and fp32);
# 2. the forward's cost, eager and fixed-shape (W = 16, graphs): GPU busy time against wall
#    time, kernels per forward, syncs per token, and, on 6 bundled and 6 held-out questions,
#    every method checked equal to the naive loop before its tok/s is reported
#    (benchmarks/cuda_forward.py);
# 3. the harness, bf16 and fp32, bundled and held-out, with greedy equality checked before any
#    speed, and the verify cost curve T = 1..32.
# Records (JSON, text) land in OUT_DIR (default bench_out/cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench_out/cuda}
PY=${PYTHON:-.venv/bin/python}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
mkdir -p "$OUT"
MODEL_ARGS=()
if compgen -G "model_parts/*.part*" > /dev/null; then
    cat $(ls model_parts/*.part* | sort) > "$OUT/model.gguf"
    MODEL_ARGS=(--model "$OUT/model.gguf")
fi
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name())" \
    | tee "$OUT/device.txt"
git rev-parse HEAD >> "$OUT/device.txt" 2>/dev/null || true
CASSPEC_MODEL=${MODEL_ARGS[1]:-} timeout 100 "$PY" -m pytest -q -x tests/test_cuda.py 2>&1 | tee "$OUT/tests.txt" || true
timeout 60 "$PY" benchmarks/cuda_forward.py "${MODEL_ARGS[@]}" --repeats 10 --json "$OUT/forward_eager.json" \
    2>&1 | tee "$OUT/forward_eager.txt" || true
timeout 150 "$PY" benchmarks/cuda_forward.py "${MODEL_ARGS[@]}" --repeats 10 --static 16 --equality 6 \
    --json "$OUT/forward_static.json" 2>&1 | tee "$OUT/forward_static.txt" || true
for DT in bfloat16 float32; do
    timeout 60 "$PY" -m casspec_ref bench --device cuda --dtype "$DT" --max-new-tokens 64 --runs 1 \
        --limit 4 --methods ar,ar-plain,pld:3,chain,cas-spec --verify-curve "${MODEL_ARGS[@]}" \
        --out "$OUT/bench_${DT}_bundled" --no-progress || true
    timeout 45 "$PY" -m casspec_ref bench --device cuda --dtype "$DT" --max-new-tokens 64 --runs 1 \
        --limit 4 --questions heldout --methods ar,ar-plain,pld:3,chain,cas-spec "${MODEL_ARGS[@]}" \
        --out "$OUT/bench_${DT}_heldout" --no-progress || true
done
rm -f "$OUT/model.gguf"
