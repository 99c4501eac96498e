#!/bin/bash
# Sequential against full evaluation of real SmolLM2-135M-Instruct on one GPU, both ways in one
# process each (benchmarks/bench_sequential.py): the arithmetic pool's diagnostic split
# (smollm2_arith_add15.yaml, 256 prompts) and GSM8K's (config/smollm2.yaml, its first PROMPTS).
#
#   OUT=<folder> bash lab/studies/2026-11-29-sequential-evaluation/sequential_on_gpu.sh GGUF SPLITS [PROMPTS] [LIMIT]
#
# GGUF: SmolLM2's file, imported here (`boundary import-base`); SPLITS: a folder with
# arith_diagnostic.parquet and gsm8k_diagnostic.parquet as the two configs' data stage writes
# them. PROMPTS (default 100): GSM8K prompts; LIMIT (default 280): seconds a benchmark may run.
# Wheels (.whl/deps: gguf, math-verify) from $WHEELS into /tmp/site unless importable.
set -u
GGUF=$(realpath "$1"); SPLITS=$(realpath "$2"); PROMPTS=${3:-100}; LIMIT=${4:-280}
OUT=${OUT:-/tmp/sequential_gpu_out}; W=/tmp/sequential_gpu
mkdir -p "$OUT" "$W" /tmp/site
exec > >(tee -a "$OUT/sequential_console.log") 2>&1
export PYTHONPATH=/tmp/site:$PWD/workflow${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if ! python3 -c "import gguf, math_verify" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "${WHEELS:-.whl/deps}"/*.whl || { echo "sequential_on_gpu: wheel install failed"; exit 1; }
fi
git log -1 --format='commit %H' 2>/dev/null; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
sha256sum "$GGUF"
python3 -m boundary.cli import-base --source "$GGUF" --out "$W/base" 2>&1 | tail -1 || exit 1
echo "=== arithmetic pool, 256 prompts ($(date -u +%H:%M:%S))"
timeout "$LIMIT" python3 benchmarks/bench_sequential.py --config lab/studies/2026-11-27-smollm2-arith-add15/smollm2_arith_add15.yaml \
  --model "$W/base" --split "$SPLITS/arith_diagnostic.parquet" --device cuda --batch-size auto 2>&1 \
  | grep -v -i "warn\|it/s\]\|s/it\]"; echo "exit ${PIPESTATUS[0]}"
echo "=== GSM8K, first $PROMPTS prompts ($(date -u +%H:%M:%S))"
timeout "$LIMIT" python3 benchmarks/bench_sequential.py --config config/smollm2.yaml \
  --model "$W/base" --split "$SPLITS/gsm8k_diagnostic.parquet" --prompts "$PROMPTS" --device cuda --batch-size auto 2>&1 \
  | grep -v -i "warn\|it/s\]\|s/it\]"; echo "exit ${PIPESTATUS[0]}"
echo "=== done $(date -u +%H:%M:%S)"
