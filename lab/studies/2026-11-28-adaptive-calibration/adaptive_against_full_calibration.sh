#!/bin/bash
# Issue 40's figures on GPUs: adaptive against full calibration of real SmolLM2-135M-Instruct,
# one benchmark process a GPU, all at once (each pair, full then adaptive, on its own GPU):
#   GPU 0: the arithmetic pool (lab/studies/2026-11-27-smollm2-arith-add15/smollm2_arith_add15.yaml, its 256 diagnostic prompts);
#   GPU 1..N-1: GSM8K (config/smollm2.yaml, the 500 diagnostic prompts), one share each.
#
#   OUT=<folder> bash lab/studies/2026-11-28-adaptive-calibration/adaptive_against_full_calibration.sh GGUF SPLITS [GPUS] [LIMIT]
#
# GGUF: SmolLM2's file (workflow/scripts/smollm2.sh), imported here with `boundary import-base`.
# SPLITS: a folder with arith_diagnostic.parquet and gsm8k_diagnostic.parquet, the two configs'
# diagnostic splits as their data stage writes them. GPUS (default 4); LIMIT: seconds a process
# (default 540). $OUT gets console.log (everything printed) and issue40.tgz (each process's
# output and its counts.csv: per prompt n, c and regime of both runs).
set -u
GGUF=$(realpath "$1"); SPLITS=$(realpath "$2"); GPUS=${3:-4}; LIMIT=${4:-540}
OUT=${OUT:-/tmp/gpu_issue40_out}; W=/tmp/gpu_issue40
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/console.log") 2>&1
export PYTHONPATH=$REPO/workflow${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
cd "$REPO"
git log -1 --format='commit %H' 2>/dev/null || true
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
sha256sum "$GGUF"
python3 -m boundary.cli import-base --source "$GGUF" --out "$W/base" 2>&1 | tail -1 || exit 1
GSM=$(python3 -c "import pandas as pd; print(len(pd.read_parquet('$SPLITS/gsm8k_diagnostic.parquet')))")
SHARE=$(( (GSM + GPUS - 2) / (GPUS - 1) ))
bench() {  # name gpu config split [bench options]
  local name=$1 gpu=$2 config=$3 split=$4; shift 4
  CUDA_VISIBLE_DEVICES=$gpu timeout "$LIMIT" python3 benchmarks/bench_adaptive_calibration.py \
    --config "$config" --model "$W/base" --split "$split" --device cuda --batch-size auto --out "$W/$name" "$@" \
    > "$W/$name.txt" 2>&1
  echo "$name (GPU $gpu): exit $? at $(date -u +%H:%M:%S)"
}
echo "start $(date -u +%H:%M:%S): $GPUS GPUs, GSM8K $GSM prompts in shares of $SHARE"
PIDS=()
bench arith 0 lab/studies/2026-11-27-smollm2-arith-add15/smollm2_arith_add15.yaml "$SPLITS/arith_diagnostic.parquet" & PIDS+=($!)
for g in $(seq 1 $((GPUS - 1))); do
  bench "gsm8k_$g" "$g" config/smollm2.yaml "$SPLITS/gsm8k_diagnostic.parquet" --prompts $SHARE \
    --offset $(((g - 1) * SHARE)) & PIDS+=($!)
done
wait "${PIDS[@]}"  # not a bare wait: that also waits for the tee above, which never ends
for f in "$W"/*.txt; do
  echo "=== $(basename "$f" .txt)"
  grep -v -i "warn\|it/s\]\|s/it\]" "$f" | tail -22
done
(cd "$W" && tar -czf "$OUT/issue40.tgz" ./*.txt ./*/counts.csv 2>/dev/null)
echo "=== done $(date -u +%H:%M:%S)"
