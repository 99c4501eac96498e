#!/bin/bash
# Issue 39's two engine checks that need a real model on a GPU, in one call of at most 600 s
# (benchmarks/bench_engine_pairs.py says what each check asserts):
#   pairs   the same short PBA run (SmolLM2-135M-Instruct, lab/studies/2026-11-27-smollm2-arith-add15/smollm2_arith_add15.yaml's train
#           settings and train split, 32 steps of 16 prompts x 8) trained with rollout_engine
#           generate and vllm, same seed: the same actions, logged values within 3 SE
#   resume  a vllm run SIGKILLed after its first checkpoint (step 8) and restarted: it resumes
#           there and continues the run
# Both run at once: on one GPU generate and the killed run share it; with 2 or more an
# uninterrupted vllm run gets the second (one engine a GPU).
#
#   OUT=<folder> bash lab/studies/2026-11-28-engine-rollouts/engine_against_generate.sh (--model DIR | --gguf FILE[,FILE...] [--gguf-sha FILE]) \
#       [--split TRAIN.parquet] [--wheels DIR] [--budget 590] [--deadline 470] [--steps 32] [--cpu]
#
# --model: a folder `boundary import-base` wrote; else --gguf: the GGUF or its parts in order
# (joined, checked against the sha256 in --gguf-sha), imported on the CPU (about 50-70 s).
# --split: a train split parquet; default: made from the config by the benchmark (its
# arithmetic splits, the data stage's chat prompts; a second or two).
# --wheels: when trl is not importable, these wheels are installed with pip --target /tmp/site,
# and vLLM from /tmp/vllm_part_* (its wheel as a tar.xz cut in parts) when vllm is not.
# --budget: seconds for the whole script; the runs get what is left after the setup, less 45 s
# for the checks and the copy, and at most --deadline.
# --cpu: a dry run (gloo, a tiny random model and the testbed split, the stand-in engine of
# tests/standin_engine.py for vllm, 8 steps with a checkpoint every 2, 1,200 s for the runs),
# to catch a broken command before a lease.
# $OUT (default /tmp/gpu_issue39_pairs) gets: console.log (everything printed), pairs.csv (the
# tables of sampled values), checks.txt (every check line) and logs.tgz (each run's log,
# log.parquet and actions.parquet, the mask, the split and bench.json: the runs' settings;
# `bench_engine_pairs.py --check-only --work <it unpacked>` checks them again).
set -u
T0=$(date +%s)
REPO=$(cd "$(dirname "$0")/.." && pwd)
MODEL="" SHA="" SPLIT="" WHEELS="" BUDGET=590 DEADLINE=470 STEPS="" CPU=0 PARTS=()
while [ $# -gt 0 ]; do
  case $1 in
    --model) MODEL=$(realpath "$2"); shift 2 ;;
    --gguf) IFS=, read -ra NAMES <<< "$2" && for f in "${NAMES[@]}"; do PARTS+=("$(realpath "$f")"); done; shift 2 ;;
    --gguf-sha) SHA=$(realpath "$2"); shift 2 ;;
    --split) SPLIT=$(realpath "$2"); shift 2 ;;
    --wheels) WHEELS=$(realpath "$2"); shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --deadline) DEADLINE=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --cpu) CPU=1; shift ;;
    *) echo "engine_against_generate: unknown option $1"; exit 2 ;;
  esac
done
OUT=${OUT:-/tmp/gpu_issue39_pairs}
WORK=/tmp/gpu_issue39_pairs_work
rm -rf $WORK  # an old run's checkpoints would be resumed
mkdir -p "$OUT" $WORK /tmp/site
exec > >(tee "$OUT/console.log") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 VLLM_USE_FLASHINFER_SAMPLER=0
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH=/tmp/site:$REPO/workflow${PYTHONPATH:+:$PYTHONPATH} PYTHONWARNINGS=ignore
PY=${PYTHON:-python3}
cd "$REPO"
say() { echo "== $* ($(( $(date +%s) - T0 )) s in)"; }

# The environment: wheels first (the import needs gguf), the GGUF's import in the background
# while vLLM unpacks, then versions and devices.
if [ $CPU = 0 ] && ! $PY -c "import trl, datasets, math_verify, gguf" 2>/dev/null; then
  [ -n "$WHEELS" ] || { echo "engine_against_generate: trl etc. not importable and no --wheels"; exit 1; }
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    || { echo "engine_against_generate: wheel install failed"; exit 1; }
  say "wheels installed"
fi
IMPORT=""
if [ $CPU = 0 ] && [ -z "$MODEL" ]; then
  [ ${#PARTS[@]} -gt 0 ] || { echo "engine_against_generate: --model or --gguf"; exit 2; }
  MODEL=/tmp/gpu_issue39_pairs_base
  if [ ! -f $MODEL/config.json ]; then
    ( cat "${PARTS[@]}" > /tmp/gpu_issue39_pairs.gguf \
      && { [ -z "$SHA" ] || echo "$(cut -d' ' -f1 "$SHA")  /tmp/gpu_issue39_pairs.gguf" | sha256sum -c --quiet -; } \
      && CUDA_VISIBLE_DEVICES= $PY -m boundary.cli import-base --source /tmp/gpu_issue39_pairs.gguf --out $MODEL ) \
      > $WORK/import.log 2>&1 &
    IMPORT=$!
    say "importing the GGUF in the background"
  fi
fi
if [ $CPU = 0 ] && ! $PY -c "import vllm" 2>/dev/null; then
  cat /tmp/vllm_part_* | xz -d | tar -x -C /tmp/site || { echo "engine_against_generate: vllm unpack failed"; exit 1; }
  say "vllm unpacked"
fi
if [ -n "$IMPORT" ]; then
  wait $IMPORT  # this PID alone: a bare wait would wait for the console's tee too, for ever
  CODE=$?
  say "import: exit $CODE; $(tail -1 $WORK/import.log)"
  [ $CODE = 0 ] || { cat $WORK/import.log; exit 1; }
fi
$PY -c "import torch, transformers, accelerate, trl; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__, 'trl', trl.__version__, 'gpus', torch.cuda.device_count(), torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')" 2>&1 | tail -1
if [ $CPU = 0 ]; then
  $PY -c "import vllm; print('vllm', vllm.__version__)" 2>&1 | tail -1
  nvidia-smi -L
fi
git log -1 --format='commit %H' 2>/dev/null || true

if [ $CPU = 1 ]; then
  ARGS=(--cpu --steps "${STEPS:-8}" --save-steps 2)
  DEADLINE=1200 BUDGET=1300
else
  ARGS=(--model "$MODEL" --steps "${STEPS:-32}" --save-steps 8)
  export OMP_NUM_THREADS=4
fi
ARGS+=(--config lab/studies/2026-11-27-smollm2-arith-add15/smollm2_arith_add15.yaml)  # its train settings and split
[ -n "$SPLIT" ] && ARGS+=(--split "$SPLIT")
D=$(( BUDGET - ($(date +%s) - T0) - 45 ))
[ $D -gt "$DEADLINE" ] && D=$DEADLINE
if [ $D -lt 120 ]; then
  say "runs skipped: $D s left for them"
else
  say "runs (deadline $D s)"
  # bench_engine_pairs.py stops its runs at --deadline; the timeout is for the checks after it.
  timeout -k 5 $(( D + 40 )) $PY benchmarks/bench_engine_pairs.py "${ARGS[@]}" --deadline $D --work $WORK \
    --tables "$OUT"
  say "bench_engine_pairs: exit $? (1: a check failed; 124: stopped by the timeout)"
fi
# Whatever a stopped run left behind: its own runs only (their --out is under $WORK), so a job
# beside this one on the machine's other GPUs goes on.
pkill -9 -f -- "--out $WORK/" 2>/dev/null
(cd $WORK && tar -czf "$OUT/logs.tgz" bench.json logs import.log mask.parquet splits */log.parquet */actions.parquet 2>/dev/null)
say "engine_against_generate: done"
