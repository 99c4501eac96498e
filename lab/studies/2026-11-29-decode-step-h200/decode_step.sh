#!/bin/bash
# Where the 1.5B study's rollout time goes, on one H200: the study's step (32 prompts x 8,
# 128-token prompts + 1,024 tokens, eos suppressed, T 0.6, top-p 0.95, the Coder-1.5B GGUF's
# 1.78B shape with random weights, the colocated engine as the study's config has it), with
# `generate` split into the engine's own call, its sleep and wake-ups, TRL's reading of the
# log-probs and the rest (benchmarks/multi_gpu_steps.py). Run from the repository root:
#
#   OUT=<folder> [PYSPY=ROW] bash lab/studies/2026-11-29-decode-step-h200/decode_step.sh ROWS
#
# Rows, each one run of 3 steps (the first dropped), one after another:
#   f  full fine-tuning, the engine's log-probs as TRL 1.16.0 asks for them (logprobs=0)
#   l  LoRA rank 16 on every linear layer, log-probs as TRL asks
#   o  row l with the engine's log-probs off (TRL reads them only for its importance correction);
#      since 2026-11-29 the trainer's own default (rollout_engine.unscored)
#   s  row o with the engine's sleep mode off
#   F  row f with the log-probs off
#   c  row o with the engine's CUDA graphs captured to 256 rows (--vllm-capture 256)
#   w  row o without the benchmark's memory-sampling thread (--no-memory-watch)
#   g  row w with gc.freeze() before each engine call (--gc-freeze)
#   e  the engine alone (bench_engine_decode.py) at the same shape and sampling, sleep mode off
# (The first two calls ran rows f, l, o and s, c with the log-probs off emulated in the benchmark;
# the trainer's own path since: --engine-logprobs off is its default, trl asks as TRL does.)
# PYSPY=ROW: py-spy samples that row's trainer for 45 s once it trains ($OUT/pyspy_ROW.txt, raw
# stacks; the wheel comes in .whl/deps). Before the first row the carried wheels ($WHEELS,
# default .whl/deps) go into /tmp/site and vLLM from /tmp/vllm_part_*, unless importable.
set -u
ROWS=${1:-flo}
OUT=${OUT:-/tmp/decode_step_out}
LOGS=/tmp/decode_step_logs
mkdir -p "$OUT" /tmp/site $LOGS
exec > >(tee -a "$OUT/console.log") 2>&1
export PYTHONPATH=/tmp/site:$PWD/workflow:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
  TOKENIZERS_PARALLELISM=false VLLM_USE_FLASHINFER_SAMPLER=0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
if ! python3 -c "import vllm, trl" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "${WHEELS:-.whl/deps}"/*.whl || { echo "decode_step: wheel install failed"; exit 1; }
  cat /tmp/vllm_part_* | xz -d | tar -x -C /tmp/site || { echo "decode_step: vllm unpack failed"; exit 1; }
fi
python3 -c "import torch, transformers, trl, vllm; print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'vllm', vllm.__version__)"
nvidia-smi -L; git log -1 --format='commit %H' 2>/dev/null; git status --short --untracked-files=no | head
for (( i=0; i<${#ROWS}; i++ )); do
  row=${ROWS:$i:1}
  case $row in
    f) extra=(--engine-logprobs trl) ;;
    l) extra=(--lora 16 --engine-logprobs trl) ;;
    o) extra=(--lora 16 --engine-logprobs off) ;;
    s) extra=(--lora 16 --engine-logprobs off --sleep off) ;;
    F) extra=(--engine-logprobs off) ;;
    c) extra=(--lora 16 --engine-logprobs off --vllm-capture 256) ;;
    w) extra=(--lora 16 --engine-logprobs off --no-memory-watch) ;;
    g) extra=(--lora 16 --engine-logprobs off --no-memory-watch --gc-freeze) ;;
    e) python3 benchmarks/bench_engine_decode.py 2>&1 | grep -v -i "warn\|capturing\|^  \|it/s\]" | tee "$OUT/engine_alone.txt"
       continue ;;
    *) echo "decode_step: no row $row"; continue ;;
  esac
  log=$LOGS/row_$row.log
  started=$(date +%s)
  python3 -m torch.distributed.run --standalone --nproc-per-node=1 benchmarks/multi_gpu_steps.py \
    --shape qwen2.5-coder-1.5b-gguf --method grpo --prompts 32 --G 8 --prompt-len 128 --completion-len 1024 \
    --accum 8 --steps 3 --warmup 1 --temperature 0.6 --top-p 0.95 --engine vllm --check-every 50 \
    --out "$OUT/row_$row.json" "${extra[@]}" > "$log" 2>&1 &
  job=$!
  if [ "${PYSPY:-}" = "$row" ] && command -v /tmp/site/bin/py-spy >/dev/null; then
    until grep -q "trainer built" "$log" || ! kill -0 $job 2>/dev/null; do sleep 2; done
    sleep 5
    pid=$(pgrep -n -f "benchmarks/multi_gpu_steps.py")
    /tmp/site/bin/py-spy record --pid "$pid" --duration 45 --rate 50 --format raw --nonblocking \
      -o "$OUT/pyspy_$row.txt" > "$LOGS/pyspy_$row.log" 2>&1 || echo "py-spy failed: $(tail -2 $LOGS/pyspy_$row.log)"
  fi
  wait $job
  echo "row $row ($(( $(date +%s) - started )) s, exit $?): $(tail -1 "$OUT/row_$row.json" 2>/dev/null || echo no result)"
  grep -h "multi_gpu_steps\]\|Asynchronous scheduling\|cudagraph\|Using .* backend\|sampler\|KV cache" "$log" | grep -v Warn | head -20
done
(cd /tmp && tar -czf "$OUT/logs.tgz" decode_step_logs 2>/dev/null)
