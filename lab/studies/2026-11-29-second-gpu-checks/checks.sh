#!/usr/bin/env bash
# The GPU checks that need minutes, not a hold, run one after another on one GPU of a 2-GPU hold
# whose other GPU runs the 1.5B study (README.md beside this file says what each must show).
# Run from the repository root of the hold's checkout, after the study's lease.sh has installed
# the software (Snakemake, /tmp/site with TRL and vLLM):
#
#   bash lab/studies/2026-11-29-second-gpu-checks/checks.sh start GPU [CPUS] [STEPS]
#       copies the checkout to /tmp/gpu-checks/tree and runs the steps there, detached, on GPU
#       (a physical index), pinned to the cores CPUS (taskset list, default 12-19), so the study's
#       lease and any test run keep theirs; STEPS default "engine lora7b loraeval decode"
#   bash lab/studies/2026-11-29-second-gpu-checks/checks.sh status
#   OUT=<folder> bash lab/studies/2026-11-29-second-gpu-checks/checks.sh collect
#       $OUT/checks.tgz: every step's console, the engine run's Snakemake log, stage times and
#       the GPU's process samples; $OUT/checks.txt: the summary lines
#
# The SmolLM2 GGUF's slices go to /tmp/gpu-checks/gguf and the config's data to
# /tmp/gpu-checks/data beforehand (one device call each, README.md).
#
# Steps:
#   engine    lab's smollm2_gpus.yaml with train.rollout_engine: vllm on ONE GPU with four jobs a
#             GPU, the docs' one-GPU recipe (BOUNDARY_JOBS_PER_GPU=4, --resources gpu=4), through
#             lease.sh (so Snakemake's own scheduling); nvidia-smi's compute processes on the GPU
#             are sampled every 2 s into gpu_apps.csv
#   lora7b    benchmarks/bench_lora.py, the 7B shape with LoRA, GRPO then PBA
#   loraeval  benchmarks/bench_lora_eval.py, the 7B shape: merged folder against vLLM's LoRA serving
#   decode    lab/studies/2026-11-29-decode-step-h200/decode_step.sh owge
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
HERE=lab/studies/2026-11-29-second-gpu-checks
W=/tmp/gpu-checks
CFG=lab/studies/2026-11-27-smollm2-gpus-one-lease/smollm2_gpus.yaml

say() { echo "checks [$(date +%H:%M:%S)]: $*" | tee -a "$W/checks.txt"; }

run_steps() {  # in the detached session: GPU STEPS
  local gpu=$1 steps=$2
  cd "$W/tree" || exit 1
  export PYTHONPATH=/tmp/site:$PWD/workflow PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
  for step in $steps; do
    local started; started=$(date +%s)
    say "$step: started on GPU $gpu"
    case $step in
      engine)
        printf 'train: {rollout_engine: vllm}\n' > "$W/engine.yaml"
        # time, pid, memory, the process's command (a container may show pids it cannot name)
        (while sleep 2; do
           t=$(date +%s)
           nvidia-smi -i "$gpu" --query-compute-apps=pid,used_memory --format=csv,noheader 2>/dev/null |
             while IFS=, read -r pid mem; do
               echo "$t,$pid,$mem,$(ps -o args= -p "$pid" 2>/dev/null | cut -c1-160 | tr ',' ' ')"
             done
         done >> "$W/gpu_apps.csv") &
        local sampler=$!
        CUDA_VISIBLE_DEVICES=$gpu BOUNDARY_JOBS_PER_GPU=4 LEASE_GGUF=$W/gguf OUT=$W/engine_out \
          bash lab/lease/lease.sh --configfile $CFG --override "$W/engine.yaml" --gpus 4 --cores 8 \
          --wheels /tmp/kit/deps --wheels /tmp/kit/smk --budget 900 > "$W/engine.log" 2>&1
        local rc=$?
        kill $sampler 2>/dev/null
        say "engine: lease.sh exit $rc; $(cat .snakemake/log/*.log 2>/dev/null | grep -c 'Finished jobid') jobs finished; $(grep -h 'steps (100%) done\|Exiting because\|Error in rule' .snakemake/log/*.log 2>/dev/null | tail -3 | tr '\n' ' ')"
        grep -l "profiling\|Initial free memory" results/smollm2_gpus/logs -r 2>/dev/null | sed 's/^/  memory-profiling message in: /' | tee -a "$W/checks.txt"
        python3 "$ROOT/$HERE/ownership.py" "$(ls -t .snakemake/log/*.log | head -n 1)" --gpu-apps "$W/gpu_apps.csv" \
          > "$W/ownership.txt" 2>&1
        tail -n 4 "$W/ownership.txt" | tee -a "$W/checks.txt"
        ;;
      lora7b)
        CUDA_VISIBLE_DEVICES=$gpu python3 benchmarks/bench_lora.py --only 7b:lora:grpo,7b:lora:pba \
          --timeout 420 --logs "$W/lora7b" > "$W/lora7b.log" 2>&1
        say "lora7b: exit $?"; grep -h "^7b\|^card" "$W/lora7b.log" | tee -a "$W/checks.txt"
        ;;
      loraeval)
        CUDA_VISIBLE_DEVICES=$gpu python3 benchmarks/bench_lora_eval.py --shape qwen2.5-7b --rank 16 \
          > "$W/loraeval.log" 2>&1
        say "loraeval: exit $?"; grep -v -i "warn\|it/s\]\|^  " "$W/loraeval.log" | tail -12 | tee -a "$W/checks.txt"
        ;;
      decode)
        CUDA_VISIBLE_DEVICES=$gpu OUT=$W/decode WHEELS=/tmp/kit/deps \
          bash lab/studies/2026-11-29-decode-step-h200/decode_step.sh owge > "$W/decode.log" 2>&1
        say "decode: exit $?"; grep -h "^row \|tok/s\|ms a step" "$W/decode.log" | tail -12 | tee -a "$W/checks.txt"
        ;;
      *) say "no step $step" ;;
    esac
    say "$step: $(( $(date +%s) - started )) s"
  done
  say "done"
}

case "${1:-}" in
  start)
    gpu=${2:?usage: checks.sh start GPU [CPUS] [STEPS]} cpus=${3:-12-19} steps=${4:-engine lora7b loraeval decode}
    mkdir -p "$W/tree"
    [ -f "$W/gguf/SmolLM2-135M-Instruct.Q4_1.gguf.part_00" ] || { echo "checks: no SmolLM2 slices in $W/gguf"; exit 2; }
    # The checkout as the device received it (tracked and untracked files, no results/, no
    # .snakemake/): the study's Snakemake holds this checkout's locks.
    (cd "$ROOT" && git ls-files -co --exclude-standard | tar -cf - -T -) | tar -xf - -C "$W/tree"
    mkdir -p "$W/tree/.lease" && rm -rf "$W/tree/.lease/data" && cp -r "$W/data" "$W/tree/.lease/data"
    setsid nohup taskset -c "$cpus" bash "$ROOT/$HERE/checks.sh" run "$gpu" "$steps" > "$W/run.log" 2>&1 < /dev/null &
    echo "checks: started on GPU $gpu, cores $cpus: $steps (pid $!)"
    ;;
  run) run_steps "$2" "$3" ;;
  status)
    cat "$W/checks.txt" 2>/dev/null
    for f in "$W"/engine.log "$W"/lora7b.log "$W"/loraeval.log "$W"/decode.log; do
      [ ! -f "$f" ] || echo "== $(basename "$f"): $(tail -c 300 "$f" | tr '\r' '\n' | tail -n 2 | tr '\n' ' ')"
    done
    ;;
  collect)
    : "${OUT:?OUT must name a folder}"
    cp "$W/checks.txt" "$OUT/" 2>/dev/null
    (cd "$W" && tar -czf "$OUT/checks.tgz" --exclude=tree/workflow --exclude='*.safetensors' --exclude='*.gguf' \
      checks.txt run.log engine.log gpu_apps.csv ownership.txt lora7b.log lora7b loraeval.log decode.log decode engine_out \
      tree/.snakemake/log tree/results/smollm2_gpus/logs tree/results/smollm2_gpus/benchmarks 2>/dev/null)
    ls -la "$OUT"
    ;;
  *) sed -n 2,30p "$0"; exit 2 ;;
esac
