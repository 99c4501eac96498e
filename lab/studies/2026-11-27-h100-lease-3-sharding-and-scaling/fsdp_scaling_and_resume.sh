#!/bin/bash
# Issue 21's figures on one machine of 4 GPUs, in one call, each printed as it is measured:
#   (a) the Qwen2.5-7B shape (random weights, bf16) GRPO and PBA steps under train.sharding fsdp
#   (b) DDP at the same shape (expected: out of memory)
#   (c) bench_scaling.py: SmolLM2 GRPO step time on 1, 2, 4 GPUs at a fixed global batch
#   (d) a 2-process SmolLM2 job killed after its checkpoint 2 and resumed (DDP)
#   (e) FSDP with the real SmolLM2 against 1 process (2 and 4 processes), and its kill/resume
#
#   bash lab/studies/2026-11-27-h100-lease-3-sharding-and-scaling/fsdp_scaling_and_resume.sh --split TRAIN.parquet (--model DIR | --gguf FILE[,FILE...] \
#       [--gguf-sha FILE]) [--wheels DIR] [--rows abcde] [--budget 540] [--deadline S] [--cpu]
#
# --model: a folder `boundary import-base` wrote. Else --gguf: the GGUF, or its parts in order
# (concatenated, checked against the sha256 in --gguf-sha), imported (about 70 s) while rows a
# and b run, which do not need it.
# --wheels: wheels installed with pip --target /tmp/site when trl is not importable.
# --budget: seconds for the whole script; each row gets its own limit, cut to what is left, and
# a row that fails or runs out of time prints its error and the next row starts.
# --deadline: the most seconds rows d and e may take together (default 150 on GPUs, 1200 with
# --cpu); the 2-process FSDP check took 173 s beside row d's jobs.
# --cpu: a dry run on the CPU (gloo, toy shapes; fsdp rows run as ddp, which is all accelerate
# does on a CPU), to catch a broken command before a GPU lease.
# $OUT (default /tmp/gpu_issue21) gets two files, kept current as rows finish: console.log (all
# that is printed here) and logs.tgz (every run's log, the checks' logs and log/actions tables).
set -u
T0=$(date +%s)
REPO=$(cd "$(dirname "$0")/.." && pwd)
MODEL="" GGUF="" SHA="" SPLIT="" WHEELS="" ROWS=abcde BUDGET=540 CPU=0 PARTS=() DEADLINE=""
while [ $# -gt 0 ]; do
  case $1 in
    --model) MODEL=$(realpath "$2"); shift 2 ;;
    --gguf) IFS=, read -ra NAMES <<< "$2" && for f in "${NAMES[@]}"; do PARTS+=("$(realpath "$f")"); done
            GGUF=$2; shift 2 ;;
    --gguf-sha) SHA=$(realpath "$2"); shift 2 ;;
    --split) SPLIT=$(realpath "$2"); shift 2 ;;
    --wheels) WHEELS=$(realpath "$2"); shift 2 ;;
    --rows) ROWS=$2; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --deadline) DEADLINE=$2; shift 2 ;;
    --cpu) CPU=1; shift ;;
    *) echo "fsdp_scaling_and_resume: unknown option $1"; exit 2 ;;
  esac
done
OUT=${OUT:-/tmp/gpu_issue21}
LOGS=/tmp/gpu_issue21_logs
rm -rf $LOGS /tmp/gpu_issue21_[de]  # a check's old checkpoints would be resumed
mkdir -p "$OUT" $LOGS
exec > >(tee "$OUT/console.log") 2>&1
# NVLink multicast (NVLS) off; offline; this checkout's package first.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH=/tmp/site:$REPO/workflow${PYTHONPATH:+:$PYTHONPATH} PYTHONWARNINGS=ignore
PY=${PYTHON:-python3}
cd "$REPO"

left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

# row NAME LIMIT COMMAND...: run it with LIMIT seconds (or what is left), its output to
# $LOGS/NAME.log and, warnings left out, here as it comes; then stop anything it left on a GPU.
row() {
  local name=$1 limit=$2; shift 2
  local l; l=$(left)
  [ "$limit" -gt $(( l - 5 )) ] && limit=$(( l - 5 ))
  if [ "$limit" -lt 30 ]; then echo "== $name: skipped ($l s of the budget left)"; return; fi
  echo "== $name (limit ${limit} s, $(( $(date +%s) - T0 )) s in)"
  local s; s=$(date +%s)
  timeout -k 5 "$limit" "$@" 2>&1 | tee "$LOGS/$name.log" | grep --line-buffered -v -i -E "warn|^\s*$"
  local code=${PIPESTATUS[0]}
  [ "$code" = 124 ] || [ "$code" = 137 ] && code="$code (stopped at its ${limit} s limit)"
  echo "== $name: exit $code, $(( $(date +%s) - s )) s"
  [ -z "${TOGETHER:-}" ] && stop_gpu_leftovers
  keep_logs
}

keep_logs() {
  (cd /tmp && tar -czf "$OUT/logs.tgz" gpu_issue21_logs gpu_issue21_[de]/logs gpu_issue21_[de]/*/*.parquet 2>/dev/null)
}

# The lease's GPUs hold only this script's processes: whatever a stopped row left there goes.
stop_gpu_leftovers() {
  [ $CPU = 1 ] && return
  nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | xargs -r kill -9 2>/dev/null
}

# The environment: carried wheels, versions, devices.
if ! $PY -c "import trl, accelerate, datasets, math_verify" 2>/dev/null; then
  [ -n "$WHEELS" ] || { echo "fsdp_scaling_and_resume: trl etc. not importable and no --wheels"; exit 1; }
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl \
    || { echo "fsdp_scaling_and_resume: wheel install failed"; exit 1; }
fi
IMPORT=""
if [ -z "$MODEL" ] && [ -n "$GGUF" ] && [[ $ROWS == *[cde]* ]]; then
  MODEL=/tmp/gpu_issue21_base
  if [ ! -f $MODEL/config.json ]; then
    ( cat "${PARTS[@]}" > /tmp/gpu_issue21.gguf \
      && { [ -z "$SHA" ] || echo "$(cut -d' ' -f1 "$SHA")  /tmp/gpu_issue21.gguf" | sha256sum -c --quiet -; } \
      && CUDA_VISIBLE_DEVICES= $PY -m boundary.cli import-base --source /tmp/gpu_issue21.gguf --out $MODEL ) \
      > $LOGS/import.log 2>&1 &  # on the CPU: the GPUs are the rows'
    IMPORT=$!
    echo "importing the GGUF in the background (log: import.log)"
  fi
fi
$PY -c "import torch, transformers, accelerate, trl; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__, 'trl', trl.__version__, 'gpus', torch.cuda.device_count(), torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')" 2>&1 | tail -1
[ $CPU = 0 ] && nvidia-smi -L
echo "setup done, $(( $(date +%s) - T0 )) s in"

if [ $CPU = 1 ]; then
  GPUS=2 SHAPE=(--shape tiny-qwen2 --prompts 2 --G 2 --prompt-len 8 --completion-len 8 --steps 2 --warmup 1)
  FSDP=ddp SCALE=(--gpus 1,2 --prompts 4 --G 2 --completion-len 8 --steps 2 --warmup 1 --cpu)
  CHECK=(--cpu --steps 4 --refresh 2 --save-steps 2 --prompts 4 --G 2 --completion-len 8)
  E=(--methods pba_support --gpus 2) DCAP=1200 CT=600 CL=1300
else
  # The paper's step (256 prompts x G=8, up to 8,192 tokens) scaled to 8 prompts x G=4 = 32
  # completions (8 a GPU) of 128 tokens after 128-token prompts; 1 warm-up + 2 timed steps.
  GPUS=4 SHAPE=(--shape qwen2.5-7b --prompts 8 --G 4 --prompt-len 128 --completion-len 128 --steps 3 --warmup 1)
  FSDP=fsdp SCALE=(--gpus 1,2,4 --prompts 16 --G 8 --completion-len 128 --steps 3 --warmup 1)
  CHECK=(--steps 4 --refresh 2 --save-steps 2 --prompts 8 --G 4 --completion-len 128)
  E=(--methods pba_support,pba_policy --gpus 2,4) DCAP=150 CT=55 CL=170
  export BOUNDARY_JOBS_PER_GPU=8 BOUNDARY_GPU_LOCKS=/tmp/gpu_issue21_locks OMP_NUM_THREADS=4
fi

[[ $ROWS == *a* ]] && row a_7b_fsdp 350 $PY benchmarks/bench_7b_shape.py --gpus $GPUS "${SHAPE[@]}" \
  --runs $FSDP:grpo,$FSDP:pba --timeout 170 --logs $LOGS/7b
[[ $ROWS == *b* ]] && row b_7b_ddp 80 $PY benchmarks/bench_7b_shape.py --gpus $GPUS "${SHAPE[@]}" \
  --runs ddp:grpo --timeout 75 --logs $LOGS/7b
if [ -n "$IMPORT" ]; then
  S=$(date +%s); wait $IMPORT
  echo "== import: exit $?, waited $(( $(date +%s) - S )) s; $(tail -1 $LOGS/import.log)"
fi
REAL=()
if [ -f "$MODEL/config.json" ] && [ -n "$SPLIT" ]; then
  REAL=(--model "$MODEL" --split "$SPLIT")
elif [[ $ROWS == *[cde]* ]]; then
  # With EOS suppressed a step's work depends on the shape alone: c runs on SmolLM2's shape.
  echo "== no model (--model or --gguf) and --split: c with random weights, d and e skipped"; ROWS=${ROWS//[de]/}
fi
[[ $ROWS == *c* ]] && row c_scaling $CL $PY benchmarks/bench_scaling.py "${REAL[@]}" \
  "${SCALE[@]}" --timeout $CT --logs $LOGS/scaling
# (d) and (e) together: neither is timed, and the allocator shares the GPUs between their jobs.
if [[ $ROWS == *[de]* ]]; then
  DCAP=${DEADLINE:-$DCAP}
  D=$(( $(left) - 25 ))
  [ $D -gt $DCAP ] && D=$DCAP
  export TOGETHER=1 PIDS=""
  [[ $ROWS == *d* ]] && row d_resume_ddp $(( D + 15 )) $PY benchmarks/gpu_multi_process_check.py --model "$MODEL" \
    --split "$SPLIT" "${CHECK[@]}" --sharding ddp --methods pba_policy --gpus 2 --resume-gpus 2 \
    --deadline $D --work /tmp/gpu_issue21_d > $LOGS/d.console 2>&1 &
  PIDS=$!
  [[ $ROWS == *e* ]] && row e_fsdp_smollm2 $(( D + 15 )) $PY benchmarks/gpu_multi_process_check.py --model "$MODEL" \
    --split "$SPLIT" "${CHECK[@]}" --sharding $FSDP "${E[@]}" --resume-gpus 2 \
    --deadline $D --work /tmp/gpu_issue21_e > $LOGS/e.console 2>&1 &
  wait ${PIDS:-} $!  # these two: a bare wait would wait for the console's tee too, for ever
  unset TOGETHER
  stop_gpu_leftovers
  cat $LOGS/d.console $LOGS/e.console 2>/dev/null
  keep_logs
fi
echo "fsdp_scaling_and_resume: done, $(( $(date +%s) - T0 )) s"
