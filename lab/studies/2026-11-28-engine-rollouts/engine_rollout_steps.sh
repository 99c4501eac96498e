#!/bin/bash
# Issue 39's figures (training rollouts from the vllm engine) on a machine of 4 GPUs, each row
# printed as it is measured; $OUT/console.log holds everything printed, $OUT/logs.tgz every
# run's log. Run from the repository root:
#
#   OUT=<folder> bash lab/studies/2026-11-28-engine-rollouts/engine_rollout_steps.sh ROWS [--cpu]
#
# Before the first row: the wheels in $WHEELS (default .whl/deps) are installed with pip
# --target /tmp/site, and vLLM from /tmp/vllm_part_* (a tar.xz of its wheel, cut in parts) is
# unpacked there, unless vllm and trl are importable already.
#   a  bench_7b_shape.py: Qwen2.5-7B shape, fsdp GRPO on 4 GPUs, engine vllm (dummy start,
#      weights synced in), 8 prompts x G = 4 of 128 + 128 tokens (the issue's small shape)
#   b  bench_scaling.py: SmolLM2 shape, engine vllm, on ROW_B_GPUS GPUs (default 1,2,4, counts above
#      the machine's GPUs dropped: a 2-GPU lease runs 1,2; --cpu: 1,2), 256 x 8 = 2,048 completions
#      of up to 512 tokens after 128-token prompts, eos on, 8 micro-batches a step. Each count may
#      take ROW_B_LIMIT seconds (default 270; bench_scaling's --timeout is per count): on 2 x H200
#      the 1-GPU row built its trainer in 45 s and took 63.5 s for step 1, and its timed step 2 was
#      not done at 170 s; the 2-GPU row's step 2 took 44.0 s, so one GPU's is at most 2 x 44 = 88 s:
#      52 + 63.5 + 88 = 204 s, plus a margin. 1,2,4 on 4 GPUs: about 8 minutes (estimated; a call has 10).
#   c  the same for the Qwen2.5-1.5B shape, 4 GPUs first, then 1; 64 completions a process a
#      micro-batch at each count (so the 1-GPU row holds what a 4-GPU process does)
#   h  row c on 2 GPUs
#   d  bench_7b_shape.py at 64 prompts x 8 of 1,024 tokens, engine vllm
#   e  row a with the generate engine (the baseline, on the same machine)
#   f  row a with the engine's sleep mode off (no wake-up or empty_cache around the sync)
#   g  row f with the engine in tensor parallel over the 4 GPUs (vllm_tensor_parallel_size 4)
#   m  row f with the engine's log-prob check every 50 syncs, as the configs have it (--check-every 50:
#      only the untimed first sync is checked); the other rows check at every sync and report it
#      as its own phase (check_s), which the 10x goal's row f counted as sync before it was split out
#   k  row b with the engine's CUDA graphs captured up to 1,024 rows (--vllm-capture 1024; vLLM's
#      default stops at 512, while each engine decodes its 1,024 rows at once): the lead of the
#      2 x H200 lease (lab/studies/2026-11-28-engine-rollouts/README.md), against row b on the same machine
#   s  issue 41's cost input: the 1.5B study's step (lab/studies/2026-11-28-qwen15b-preregistration/qwen15b.yaml: 32 prompts x 8 of up to
#      1,024 tokens after MATH prompts of up to 192, micro-batches of 32), the shape of the study's
#      Qwen2.5-Coder-1.5B GGUF as imported (untied output layer, 1.78B parameters), eos suppressed
#      (every completion full length: the step's upper bound), on 1 GPU and on 4 (ROW_S_GPUS)
#   p  the same for the 0.5B pilot's step (lab/studies/2026-11-29-qwen05b-pilot/qwen05b_pilot.yaml: up to 512 tokens, micro-batches
#      of 64), the Coder-0.5B GGUF's shape (0.63B parameters), on 1 GPU (each pilot run trains on one)
#   q  the pilot's step at the study's cap (Amendment 9: up to 1,024 tokens, micro-batches of 32), the
#      0.5B's shape, on 1 GPU and on 2 (ROW_Q_GPUS)
# ROW_LIMIT (default 230): seconds each 7B row may take.
set -u
ROWS=${1:-abc}
CPU=0; [ "${2:-}" = "--cpu" ] && CPU=1
OUT=${OUT:-/tmp/gpu_issue39_out}
mkdir -p "$OUT" /tmp/site /tmp/gpu_issue39_logs
exec > >(tee -a "$OUT/console.log") 2>&1
PY=python3
export PYTHONPATH=/tmp/site:$PWD/workflow${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
  TOKENIZERS_PARALLELISM=false VLLM_USE_FLASHINFER_SAMPLER=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
if [ $CPU = 0 ] && ! $PY -c "import vllm, trl" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "${WHEELS:-.whl/deps}"/*.whl || { echo "engine_rollout_steps: wheel install failed"; exit 1; }
  cat /tmp/vllm_part_* | xz -d | tar -x -C /tmp/site || { echo "engine_rollout_steps: vllm unpack failed"; exit 1; }
fi
$PY -c "import torch, transformers, trl; print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__)"
[ $CPU = 0 ] && $PY -c "import vllm; print('vllm', vllm.__version__)" && nvidia-smi -L
git log -1 --format='commit %H' 2>/dev/null || true
save_logs() { (cd /tmp && tar -czf "$OUT/logs.tgz" gpu_issue39_logs 2>/dev/null); }
stop_gpu_leftovers() {
  [ $CPU = 1 ] && return
  nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | xargs -r kill -9 2>/dev/null; sleep 2
}
L=/tmp/gpu_issue39_logs
RL=${ROW_LIMIT:-230}
if [ $CPU = 1 ]; then
  SEVEN=(--cpu --shape tiny-qwen2 --gpus 2 --prompts 4 --G 2 --prompt-len 8 --completion-len 8 --steps 2 --warmup 1)
  SCALE=(--cpu --shape tiny-qwen2 --prompts 4 --G 2 --prompt-len 8 --completion-len 8 --steps 2 --warmup 1 --accum 2)
  STUDY=(--cpu --prompts 4 --G 2 --prompt-len 8 --completion-len 8 --micro-batch 2 --steps 2 --warmup 1)
  PILOT=("${STUDY[@]}"); S_GPUS=1,2; STUDY_SHAPE=tiny-qwen2; PILOT_SHAPE=tiny-qwen2
  ENGINE=generate; SMOL=tiny-qwen2; MID=tiny-qwen2; MICRO=2; TP=2
else
  SEVEN=(--gpus 4 --prompts 8 --G 4 --prompt-len 128 --completion-len 128 --steps 3 --warmup 1)
  SCALE=(--prompts 256 --G 8 --prompt-len 128 --completion-len 512 --eos --steps 2 --warmup 1 --accum 8)
  STUDY=(--prompts 32 --G 8 --prompt-len 192 --completion-len 1024 --micro-batch 32 --steps 2 --warmup 1)
  PILOT=(--prompts 32 --G 8 --prompt-len 192 --completion-len 512 --micro-batch 64 --steps 2 --warmup 1); S_GPUS=1,4
  STUDY_SHAPE=qwen2.5-coder-1.5b-gguf; PILOT_SHAPE=qwen2.5-coder-0.5b-gguf  # the study's models, output layer untied
  ENGINE=vllm; SMOL=smollm2-135m; MID=qwen2.5-1.5b; MICRO=64; TP=4
fi
# Rows b's, s's and q's GPU counts: ROW_B_GPUS, ROW_S_GPUS and ROW_Q_GPUS, without those above the
# GPUs this machine has (a 2-GPU lease: ROW_S_GPUS=1,2).
if [ $CPU = 1 ]; then
  B_GPUS=${ROW_B_GPUS:-1,2}
else
  HAVE=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  fits() { tr ',' '\n' <<< "$1" | awk -v have="$HAVE" '$1 >= 1 && $1 <= have' | paste -sd, -; }
  ROW_S_GPUS=${ROW_S_GPUS:-$S_GPUS}
  B_GPUS=$(fits "${ROW_B_GPUS:-1,2,4}") S_GPUS=$(fits "$ROW_S_GPUS") Q_GPUS=$(fits "${ROW_Q_GPUS:-1,2}")
fi
for row in $(echo "$ROWS" | grep -o .); do
  echo "=== row $row ($(date -u +%H:%M:%S))"
  case $row in
    a) timeout $RL $PY benchmarks/bench_7b_shape.py "${SEVEN[@]}" --runs fsdp:grpo --engine $ENGINE --timeout $((RL - 10)) --logs $L/a ;;
    f) timeout $RL $PY benchmarks/bench_7b_shape.py "${SEVEN[@]}" --runs fsdp:grpo --engine $ENGINE --sleep off \
         --timeout $((RL - 10)) --logs $L/f ;;
    m) timeout $RL $PY benchmarks/bench_7b_shape.py "${SEVEN[@]}" --runs fsdp:grpo --engine $ENGINE --sleep off \
         --check-every 50 --timeout $((RL - 10)) --logs $L/m ;;
    g) timeout $RL $PY benchmarks/bench_7b_shape.py "${SEVEN[@]}" --runs fsdp:grpo --engine $ENGINE --sleep off \
         --vllm-tp $TP --timeout $((RL - 10)) --logs $L/g ;;
    b|k) if [ -z "$B_GPUS" ]; then echo "row $row: none of ROW_B_GPUS=${ROW_B_GPUS:-1,2,4} fits the $HAVE GPU(s) here"
       else $PY benchmarks/bench_scaling.py "${SCALE[@]}" --gpus "$B_GPUS" --shape $SMOL --engine $ENGINE \
              $([ "$row" = k ] && echo --vllm-capture 1024) --timeout "${ROW_B_LIMIT:-270}" --logs $L/$row; fi ;;
    c) $PY benchmarks/bench_scaling.py "${SCALE[@]}" --gpus 4,1 --micro-batch $MICRO --shape $MID --engine $ENGINE \
         --timeout 330 --logs $L/c ;;
    h) $PY benchmarks/bench_scaling.py "${SCALE[@]}" --gpus 2 --micro-batch $MICRO --shape $MID --engine $ENGINE \
         --timeout 250 --logs $L/h ;;
    d) timeout 300 $PY benchmarks/bench_7b_shape.py "${SEVEN[@]}" --prompts 64 --G 8 --completion-len 1024 --accum 4 \
         --steps 2 --runs fsdp:grpo --engine $ENGINE --timeout 290 --logs $L/d ;;
    s) if [ -z "$S_GPUS" ]; then echo "row s: none of ROW_S_GPUS=$ROW_S_GPUS fits the $HAVE GPU(s) here"
       else $PY benchmarks/bench_scaling.py "${STUDY[@]}" --gpus "$S_GPUS" --shape $STUDY_SHAPE --engine $ENGINE \
              --timeout 280 --logs $L/s; fi ;;
    p) $PY benchmarks/bench_scaling.py "${PILOT[@]}" --gpus 1 --shape $PILOT_SHAPE --engine $ENGINE --timeout 250 --logs $L/p ;;
    q) $PY benchmarks/bench_scaling.py "${STUDY[@]}" --gpus "${Q_GPUS:-1}" --shape $PILOT_SHAPE --engine $ENGINE \
         --timeout 280 --logs $L/q ;;
    e) timeout 230 $PY benchmarks/bench_7b_shape.py "${SEVEN[@]}" --runs fsdp:grpo --engine generate --timeout 220 --logs $L/e ;;
  esac
  stop_gpu_leftovers
  save_logs
done
echo "=== done ($(date -u +%H:%M:%S))"
