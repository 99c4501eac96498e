#!/bin/bash
# Issue 41, item 2 (fidelity) on ONE GPU: the calibrate stage's sampler against stock
# transformers `generate` (one prompt a call, 256 identical rows) on the 1.5B model's first 32
# GSM8K diagnostic prompts x 256, lab/studies/2026-11-28-qwen15b-preregistration/qwen15b.yaml's calibration (T 0.6, top-p 0.95, seed
# 1001) and max_new_tokens 1,024 (lab/studies/2026-11-28-qwen15b-fidelity/bench_fidelity.py says what it compares and how).
# Run from the repository root:
#
#   OUT=<folder> bash lab/studies/2026-11-28-qwen15b-fidelity/sampler_against_generate.sh run GGUF SPLIT [WHEELS]   # each call
#   OUT=<folder> bash lab/studies/2026-11-28-qwen15b-fidelity/sampler_against_generate.sh setup GGUF SPLIT [WHEELS] # optional, earlier
#   bash lab/studies/2026-11-28-qwen15b-fidelity/sampler_against_generate.sh dry                                    # CPU, tiny model
#
# GGUF: the joined Qwen2.5-Coder-1.5B-Instruct file (or any model folder). SPLIT: the 32-prompt
# split parquet made beforehand on a CPU (`bench_fidelity.py --make-split`; the GSM8K data is
# not on the device). WHEELS: a folder of the wheels the image lacks (gguf, math-verify,
# latex2sympy2_extended, antlr4-python3-runtime, jsonschema, jsonschema-specifications,
# referencing, rpds-py), installed with pip --target /tmp/site unless importable already.
#
# `setup` installs the wheels and imports the GGUF (`boundary import-base`) into
# $FIDELITY_DIR/base, once. `run` does setup, then whatever is not done yet, within LIMIT
# seconds of the call: the project's half (skipped, for the next call, when fewer than 240 s are
# left), then stock `generate` in $WORKERS processes sharing the GPU (each one prompt a call;
# a prompt's samples are kept as it ends, so a call that runs out of time loses only prompts in
# progress), then the comparison of what both halves hold (a partial one says so in one line).
# Call `run` again until it prints `stock prompts done: 32 of 32`; the work folder lives in
# /tmp, which a warm machine keeps between calls. On a fresh machine set RESUME=<an earlier samples.tgz>.
#
# Measured on 2 x H200 (2026-11-28, lab/studies/2026-11-28-qwen15b-fidelity/README.md): setup 129 s,
# project half 121 s, stock half 278 s wall with GPUS=2 WORKERS=6: two calls in all.
# Time (the estimate made before that run, from known rates):
# - setup: the wheels, and import-base of the 1.5B GGUF (2 min 58 s on this repo's 2-core CPU):
#   2-3.5 min.
# - project half: 8,192 completions of about 300 tokens (unmeasured) = 2.5M tokens at the
#   27.6k tok/s the 1.5B calibrate stage ran on one H100: about 90 s; with start, model load
#   and verification 2-2.5 min.
# - stock half: a call runs until the longest of its 256 rows ends, and at 1,024 tokens some
#   row of 256 nearly always reaches the cap: about 1,024 steps a prompt. A step at 256 rows:
#   top-p sorts 256 x 151,936 float32 logits, about 22 ms at the 0.56 ns a logit top-p cost
#   stock generate in the SmolLM2 benchmark (88.7 against 33.4 ms a step at 2,048 x 49,152,
#   lab/studies/2026-11-27-sampling-speed-h100/README.md), plus 5-10 ms of GPU work for the forward
#   (3.6 GB of weights, the DynamicCache copying itself) and 15-20 ms of CPU for its ~1,100
#   kernel launches. 32 x 1,024 steps: 15-17 min with the GPU kept busy by 3 processes (the
#   default), 20-25 min in one; less where a prompt's longest row ends before the cap.
# So both halves do not fit one 600-s call, nor two: setup, project and stock are about 19-23
# min of work against 525 s (8.75 min) of work a call. Plan three `run` calls; two suffice only
# if `setup` ran at the end of the last GGUF-shipping call and the stock half comes in at the
# fast end (each call's comparison prints how long the prompts left need at its pace).
#
# Env: LIMIT (seconds of this call, default 570), WORKERS (stock processes, default 3), CONFIG
# (default lab/studies/2026-11-28-qwen15b-preregistration/qwen15b.yaml), PROMPTS (32), FIDELITY_DIR (default /tmp/q15/fidelity), RESUME,
# STOCK_FROM (a folder holding an earlier run's stock/: its samples are reused, so a call redraws
# only the project's half, e.g. with BOUNDARY_SEAT_ATTENTION=sdpa_gqa against the committed
# lab/studies/2026-11-28-qwen15b-fidelity/samples; use a fresh FIDELITY_DIR), PROJECT_SEED (the
# project half's calibration seed, bench_fidelity.py --seed: a fresh draw against the same stock),
# STOCK_MAX (at most so many prompts a stock process, this call), GPUS (default 1; on a machine
# of several, stock process i runs on GPU i mod GPUS and the project's half on GPU 0: fewer
# calls). $OUT gets console.log, fidelity.csv and totals.csv (the comparison), samples.tgz (both
# halves' scored samples: project.parquet, project.json, stock/) and logs.tgz (each process's log).
set -u
PART=${1:?usage: sampler_against_generate.sh run|setup GGUF SPLIT [WHEELS] | dry}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
START=$SECONDS
LIMIT=${LIMIT:-570}; WORKERS=${WORKERS:-3}; GPUS=${GPUS:-1}; CONFIG=${CONFIG:-lab/studies/2026-11-28-qwen15b-preregistration/qwen15b.yaml}; PROMPTS=${PROMPTS:-32}
MARGIN=45  # seconds kept for the comparison, the archives and the exit
EXTRA=()
if [ "$PART" = dry ]; then  # the whole driver on a CPU: a tiny random model, 4 prompts, two calls
  DRY=$(mktemp -d /tmp/fidelity_dry.XXXXXX)
  OUT=${OUT:-$DRY/out}; W=$DRY/work; SOURCE=$DRY/tiny; SPLIT=$DRY/split.parquet; WHEELS=""
  CONFIG=config/config.yaml; PROMPTS=4; WORKERS=2; EXTRA=(--cpu --n 64 --max-new-tokens 4)
else
  [ "$PART" = run ] || [ "$PART" = setup ] || { echo "sampler_against_generate: part $PART: run, setup or dry"; exit 2; }
  SOURCE=$(realpath "${2:?GGUF}"); SPLIT=$(realpath "${3:?SPLIT}"); WHEELS=${4:-}
  OUT=${OUT:-/tmp/gpu_issue41_fidelity_out}; W=${FIDELITY_DIR:-/tmp/q15/fidelity}
fi
mkdir -p "$OUT" "$W/logs" "$W/run" /tmp/site
exec > >(tee -a "$OUT/console.log") 2>&1
TEE=$!
trap 'exec >&- 2>&-; wait "$TEE" 2>/dev/null' EXIT  # console.log complete before the call returns
export PYTHONPATH=/tmp/site:$REPO/workflow${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 \
  TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
left() { echo $((LIMIT - (SECONDS - START))); }
stamp() { echo "=== $* ($(date -u +%H:%M:%S), ${SECONDS}s of ${LIMIT}s)"; }
quiet() { tr '\r' '\n' < "$1" | grep -v "it/s]\|s/it]\|^\s*$"; }  # a log without progress bars
BENCH=(python3 lab/studies/2026-11-28-qwen15b-fidelity/bench_fidelity.py --model "$W/base" --split "$SPLIT" --config "$CONFIG"
       --prompts "$PROMPTS" --out "$W/run" "${EXTRA[@]}")

setup() {
  stamp "setup: $SOURCE"
  git log -1 --format='commit %H' 2>/dev/null || true
  [ "$PART" = dry ] || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  local needs="import math_verify, latex2sympy2_extended, jsonschema, referencing, scipy, yaml"
  case "$SOURCE" in *.gguf) needs="$needs, gguf" ;; esac
  if [ -n "$WHEELS" ] && ! python3 -c "$needs" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$WHEELS"/*.whl || { echo "sampler_against_generate: wheel install from $WHEELS failed"; exit 1; }
  fi
  python3 -c "$needs" || { echo "sampler_against_generate: a package is missing (carry its wheel; see the header)"; exit 1; }
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  if [ ! -f "$W/base/config.json" ]; then
    python3 -m boundary.cli import-base --source "$SOURCE" --out "$W/base" > "$W/logs/import.log" 2>&1
    local rc=$?
    quiet "$W/logs/import.log" | tail -2
    [ $rc = 0 ] || { echo "sampler_against_generate: import-base failed (exit $rc)"; exit 1; }
  fi
  if [ -n "${RESUME:-}" ] && [ ! -f "$W/run/project.json" ]; then
    tar -xzf "$RESUME" -C "$W/run" && echo "resumed from $RESUME"
  fi
  if [ -n "${STOCK_FROM:-}" ] && ! ls "$W/run/stock/"[0-9]*.parquet > /dev/null 2>&1; then
    mkdir -p "$W/run/stock" && cp "$STOCK_FROM"/stock/* "$W/run/stock/" \
      && echo "stock half from $STOCK_FROM: $(ls "$W/run/stock" | grep -c '^[0-9].*parquet$') prompts"
  fi
  stamp "setup done"
}

project() {
  [ -f "$W/run/project.json" ] && return
  if [ "$(left)" -lt $((240 + MARGIN)) ]; then echo "project: $(left) s left, too few: the next call runs it"; return; fi
  stamp "project half (the calibrate stage's sample-and-verify)"
  timeout $(($(left) - MARGIN)) "${BENCH[@]}" --only project ${PROJECT_SEED:+--seed "$PROJECT_SEED"} \
    > "$W/logs/project.log" 2>&1
  echo "project: exit $?"
  quiet "$W/logs/project.log" | tail -6
}

stock() {
  local seconds=$(($(left) - MARGIN)) pids=() i
  [ "$seconds" -gt 30 ] || { echo "stock: $seconds s left, none begun"; return; }
  stamp "stock half: $WORKERS processes, $seconds s"
  for i in $(seq 0 $((WORKERS - 1))); do
    [ "$GPUS" -gt 1 ] && export CUDA_VISIBLE_DEVICES=$((i % GPUS))
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout $((seconds + 15)) "${BENCH[@]}" --only stock \
      --shard "$i/$WORKERS" --deadline "$seconds" ${STOCK_MAX:+--max-prompts "$STOCK_MAX"} > "$W/logs/stock_$i.log" 2>&1 &
    pids+=($!)
  done
  [ "$GPUS" -gt 1 ] && unset CUDA_VISIBLE_DEVICES
  for i in "${!pids[@]}"; do  # wait on these PIDs: a bare `wait` also waits for the tee above
    wait "${pids[$i]}"
    echo "stock $i: exit $?"
    quiet "$W/logs/stock_$i.log" | grep "model loaded\|: prompt \|deadline\|memory\|rror\|warning: "
  done
}

compare() {
  stamp "comparison"
  "${BENCH[@]}" --only compare 2>&1 | tee "$W/logs/compare.log"
  cp "$W/run/fidelity.csv" "$W/run/totals.csv" "$OUT/" 2>/dev/null
  (cd "$W/run" && tar -czf "$OUT/samples.tgz" project.parquet project.json stock 2>/dev/null)
  (cd "$W" && tar -czf "$OUT/logs.tgz" logs)
  echo "stock prompts done: $(ls "$W/run/stock" 2>/dev/null | grep -c '^[0-9].*parquet$') of $PROMPTS"
}

if [ "$PART" = dry ]; then
  python3 - "$DRY" <<'PY' || { echo "sampler_against_generate: dry: the tiny model could not be made"; exit 1; }
import sys
import pandas as pd
from boundary.tasks.testbed import TinyModelConfig, build_model, build_tokenizer
dry = sys.argv[1]
tokenizer = build_tokenizer()
build_model(TinyModelConfig(hidden=32, layers=1, heads=2, intermediate=64), tokenizer).save_pretrained(f"{dry}/tiny")
tokenizer.save_pretrained(f"{dry}/tiny")
problems = ["12+34=", "5+6=", "7+8=", "1+2="]
pd.DataFrame({"prompt_id": [f"p{i}" for i in range(4)], "problem": problems, "prompt": problems,
              "answer": ["4", "1", "5", "3"], "source": "dry"}).to_parquet(f"{dry}/split.parquet")
PY
  setup; project; STOCK_MAX=1 stock; compare  # call 1: 2 of 4 stock prompts
  stock; compare  # call 2: resumes the other 2
  rows=$(($(wc -l < "$OUT/fidelity.csv") - 1))
  echo "dry run: $rows prompts compared; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
  [ "$rows" = 4 ] || exit 1
  exit 0
fi
setup
[ "$PART" = setup ] && exit 0
project
stock
compare
stamp "done"
