#!/usr/bin/env bash
# Issue 41, item 3: the task selection (lab/studies/2026-11-28-qwen15b-preregistration/README.md,
# Amendments 2 and 3) on one lease of 2 GPUs, or with SERIAL=1 on leases of one: the three
# selection runs (lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select_{omni,math500,gsm8k}.yaml) through the pipeline's own
# Snakemake, to their gate draws and regimes, side by side, then the rule
# (lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select.py). Run from the repository root:
#
#   OUT=<folder> bash lab/studies/2026-11-28-qwen15b-task-selection/select_task_on_gpus.sh run [WHEELS...]   # every call the same
#   OUT=<folder> ONLY="omni" PACK_MIB=60 bash lab/studies/2026-11-28-qwen15b-task-selection/select_task_on_gpus.sh pack
#   bash lab/studies/2026-11-28-qwen15b-task-selection/select_task_on_gpus.sh dry                             # CPU, tiny stand-ins
#
# `run`, within LIMIT seconds of the call (default 560):
# 1. once a machine: `lease.sh --setup` with the WHEELS folders (Snakemake's set, the small
#    deps): the software, .lease/files (the subsample files, `lease_in.sh data`) copied in place,
#    and the GGUF joined from /tmp/lease-gguf/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf.part_NN and
#    checked against lab/models/qwen15b.sha256;
# 2. each run that is neither finished nor running starts as its own `lease.sh` (Snakemake,
#    --rerun-incomplete, --resources gpu=<the GPUs nvidia-smi lists>) in a new process session
#    (setsid): it outlives the call and goes on on the warm machine, so a calibration longer than
#    a call is not cut. The three share the GPUs through the jobs' GPU claims (core/gpus.py: a
#    job waits for a free device). Omni and MATH500 start first, GSM8K STAGGER seconds later
#    (default 60), so the two largest calibrations claim GPUs before the small jobs;
# 3. waits until the three have ended or the call's time is nearly up, printing progress;
# 4. packs what each run has finished into $OUT/<source>/ (lease_pack.py: one part of at most
#    PACK_MIB, default 15, MiB of small artifacts, the gate draws, then the calibration, and the
#    manifest naming what was left out) and, once all three are done, applies the rule:
#    $OUT/selection.csv. $OUT/console.log is this call's console (8 files in all).
# With SERIAL=1 (a lease of one GPU), step 2 starts one detached chain instead: the runs' imports
# and splits side by side (CPU), then each run's GPU work in turn, in SELECT_SOURCES order, so a
# small run's calibration is never queued behind a large one's and a lease that ends mid-way
# loses one calibration at most. SELECT_SOURCES (default "omni math500 gsm8k") names the runs this
# lease makes; the rule needs all three and runs on the device only when this lease made them.
# A run an earlier lease left unfinished goes on from what came back of it: `lease_in.sh carry
# qwen15b_select_<source>` locally (.lease/carry holds one run), carried with .lease/files; its
# lease.sh restores it (--carry) and makes only what is missing.
# `pack` only packs (ONLY: the sources, default all), e.g. a calibration left out of a run's
# 15 MiB in a last call with PACK_MIB=60. Locally, each source's files go back with
#   bash lab/lease/lease_in.sh merge qwen15b_select_<source> <files_at>/<source>
# The call sequence and its cost: lab/studies/2026-11-28-qwen15b-task-selection/select_the_1.5b_task.md.
#
# Env: LIMIT, STAGGER, SERIAL, SELECT_SOURCES, PACK_MIB, ONLY, SELECT_DIR (the runs' consoles and states, default
# /tmp/select), RUN_BUDGET (each run's lease.sh --budget, default 1700: the lease ends first),
# CORES (lease.sh --cores, default all), PROGRESS (seconds between progress lines, default 60),
# PYTHON (default python3).
set -uo pipefail
PART=${1:?usage: select_task_on_gpus.sh run [WHEELS...] | pack | dry}
shift
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
START=$SECONDS
LIMIT=${LIMIT:-560} STAGGER=${STAGGER:-60} PACK_MIB=${PACK_MIB:-15} RUN_BUDGET=${RUN_BUDGET:-1700}
W=${SELECT_DIR:-/tmp/select} PY=${PYTHON:-python3} CORES=${CORES:-all}
ALL_SOURCES=(omni math500 gsm8k)
read -ra SOURCES <<< "${SELECT_SOURCES:-${ALL_SOURCES[*]}}"  # this lease's runs, in the order they start
for s in "${SOURCES[@]}"; do
  [[ " ${ALL_SOURCES[*]} " == *" $s "* ]] || { echo "select_task_on_gpus: SELECT_SOURCES: $s is none of ${ALL_SOURCES[*]}" >&2; exit 2; }
done
MARGIN=45  # seconds kept for packing and the rule
GGUF=models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf

if [ "$PART" = dry ]; then
  # The device path on this CPU: a copy of the working tree as a call sends it, stand-in data
  # subsampled as the real data is, a tiny random model, the three configs cut to CPU size
  # (same runs, stages and targets), two calls (the first stopped early), the merge on a
  # "local" copy and the rule there.
  DRY=$(mktemp -d /tmp/select_dry.XXXXXX)
  set -e
  for copy in device local; do
    mkdir -p "$DRY/$copy" && git ls-files -co --exclude-standard -z | tar -c --null -T - | tar -x -C "$DRY/$copy"
  done
  cd "$DRY/local"
  export PYTHONPATH="$DRY/local/workflow"
  $PY lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_candidates.py --stand-in "$DRY/data" >/dev/null
  $PY lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_candidates.py --data "$DRY/data" --subsample
  $PY - "$DRY" <<'PY'
import sys
from pathlib import Path
import yaml
from boundary.tasks.testbed import TinyModelConfig, build_model, build_tokenizer
dry = Path(sys.argv[1])
tokenizer = build_tokenizer()
build_model(TinyModelConfig(hidden=32, layers=1, heads=2, intermediate=64), tokenizer).save_pretrained(dry / "tiny")
tokenizer.save_pretrained(dry / "tiny")
for copy in ("device", "local"):
    for source in ("gsm8k", "math500", "omni"):
        path = dry / copy / "lab/studies/2026-11-28-qwen15b-task-selection" / f"qwen15b_select_{source}.yaml"
        config = yaml.safe_load(path.read_text())
        config.update(base_model=str(dry / "tiny"), prompt={"template": "{problem}", "chat": False},
                      sampling={"backend": "hf", "batch_size": 64, "max_new_tokens": 4})
        config["calibration"]["n"] = 16
        config["verify"]["workers"] = 1
        config["train"]["gpus"] = 0  # CPU jobs: lease.sh gives Snakemake gpu=0
        path.write_text(yaml.safe_dump(config, sort_keys=False))
PY
  bash lab/lease/lease_in.sh data lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select_{gsm8k,math500,omni}.yaml | tail -1
  cp results/qwen15b/candidates/*_near_copies.csv results/qwen15b/candidates/math500_l3_diagnostic.jsonl \
    .lease/files/results/qwen15b/candidates/
  cp -r .lease "$DRY/device/"  # the call's carry; the device copy has no results/ of its own
  set +e
  cd "$DRY/device"
  export PYTHONPATH="" LEASE_SITE="$DRY/site" BOUNDARY_GPU_LOCKS="$DRY/locks" PYTHON="$(command -v "$PY")"
  echo "--- call 1 (stopped after 20 s, the runs go on) [$(date -u +%T)]"
  OUT="$DRY/out1" SELECT_DIR="$DRY/w" LIMIT=65 STAGGER=5 CORES=2 PROGRESS=10 bash lab/studies/2026-11-28-qwen15b-task-selection/select_task_on_gpus.sh run
  echo "--- call 2 [$(date -u +%T)]"
  OUT="$DRY/out2" SELECT_DIR="$DRY/w" LIMIT=500 CORES=2 PROGRESS=10 bash lab/studies/2026-11-28-qwen15b-task-selection/select_task_on_gpus.sh run
  echo "--- local: merge the three runs, then the rule [$(date -u +%T)]"
  cd "$DRY/local"
  export PYTHONPATH="$DRY/local/workflow"
  for source in "${SOURCES[@]}"; do
    bash lab/lease/lease_in.sh merge "qwen15b_select_$source" "$DRY/out2/$source" || exit 1
  done
  $PY lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select.py || exit 1
  for source in "${SOURCES[@]}"; do
    run=results/qwen15b_select_$source
    $PY -m snakemake "$run/rollouts/base_gate.parquet" "$run/regimes/regimes.parquet" -n --cores 1 \
      --configfile "lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select_$source.yaml" 2>&1 | grep -E "^(rule|localrule) |Nothing to be done" || true
  done
  echo "dry run: files of call 2: $(cd "$DRY/out2" && find . -type f | sort | tr '\n' ' ')"
  [ "$(find "$DRY/out2" -type f | wc -l)" -le 8 ] && [ -f "$DRY/out2/selection.csv" ]
  exit
fi

cfg() { echo "lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select_$1.yaml"; }
run_of() { echo "results/qwen15b_select_$1"; }
targets() { echo "$(run_of "$1")/rollouts/base_gate.parquet $(run_of "$1")/regimes/regimes.parquet"; }
carry_of() {  # what an earlier lease brought back of this run (`lease_in.sh carry`): restored first
  [ -f ".lease/carry/lease_qwen15b_select_$1.manifest" ] && echo "--carry .lease/carry"
}
if [ "$PART" = chain ]; then
  # SERIAL's detached chain (started by `run`, arguments: the sources still to make). Each source's
  # pid file names this process until its own run has ended (its exit file), so `run` counts a
  # queued run as running.
  for s in "$@"; do mkdir -p "$W/$s" && rm -f "$W/$s/exit" && echo $$ > "$W/$s/pid"; done
  for s in "$@"; do  # CPU: the imports and the splits, side by side
    run=$(run_of "$s")
    # shellcheck disable=SC2046
    OUT="$W/$s/prep" bash lab/lease/lease.sh --configfile "$(cfg "$s")" $(carry_of "$s") \
      --budget "$RUN_BUDGET" --cores "$CORES" --keep-locks "$run/models/base" "$run/splits/train.parquet" \
      "$run/splits/diagnostic.parquet" > "$W/$s/prep.log" 2>&1 &
  done
  wait
  for s in "$@"; do  # GPU: one run at a time
    # shellcheck disable=SC2046
    OUT="$W/$s" bash lab/lease/lease.sh --configfile "$(cfg "$s")" $(carry_of "$s") \
      --budget "$RUN_BUDGET" --cores "$CORES" --keep-locks $(targets "$s") > "$W/$s/nohup.log" 2>&1
    echo $? > "$W/$s/exit"
  done
  exit 0
fi

: "${OUT:?select_task_on_gpus.sh: set OUT to the folder that comes back}"
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/console.log") 2>&1
TEE=$!
trap 'exec >&- 2>&-; wait "$TEE" 2>/dev/null' EXIT  # console.log complete before the call returns
left() { echo $((LIMIT - (SECONDS - START))); }
say() { echo "select [$((SECONDS - START)) s, $(date -u +%T)]: $*"; }
running() { [ -f "$W/$1/pid" ] && [ ! -f "$W/$1/exit" ] && kill -0 "$(cat "$W/$1/pid")" 2>/dev/null; }
finished() {  # its lease.sh ended with both targets made (Snakemake deletes a failed job's outputs)
  local t
  [ -f "$W/$1/exit" ] || return 1
  for t in $(targets "$1"); do [ -f "$t" ] || return 1; done
}
stages() {  # what a run has made so far
  local run s done=()
  run=$(run_of "$1")
  for s in models/base splits/train.parquet splits/diagnostic.parquet rollouts/base_gate.parquet \
           rollouts/base_calibration.parquet regimes/regimes.parquet; do
    [ -e "$run/$s" ] && done+=("$(basename "$s" .parquet)")
  done
  echo "${done[*]:-nothing yet}"
}
pace() {  # the last line of a run's sampling logs: tqdm's count, elapsed<remaining and rate
  local log
  for log in "$(run_of "$1")"/logs/{calibrate_base,gate_draws}.log; do
    [ -f "$log" ] && echo "  $1 $(basename "$log" .log): $(tr '\r' '\n' < "$log" | grep -v '^\s*$' | tail -1 | cut -c1-150)"
  done
}
pack() {
  local s
  for s in ${ONLY:-${SOURCES[*]}}; do
    [ -d "$(run_of "$s")" ] || { say "$s: nothing to pack"; continue; }
    $PY lab/lease/lease_pack.py pack --results "$(run_of "$s")" --out "$OUT/$s" --limit-mib "$PACK_MIB" \
      --part-mib 16 | sed "s/^/$s: /"
  done
}
git log -1 --format='commit %H' 2>/dev/null || true

if [ "$PART" = pack ]; then pack; exit 0; fi
[ "$PART" = run ] || { echo "select_task_on_gpus: part $PART: run, pack or dry" >&2; exit 2; }

# 1. Software, data and the GGUF, once a machine.
if [ ! -f "$W/setup.done" ]; then
  wheels=()
  for dir in "$@"; do wheels+=(--wheels "$dir"); done
  OUT="$W/setup" bash lab/lease/lease.sh --configfile "$(cfg gsm8k)" --setup "${wheels[@]}" || exit 1
  base_model=$($PY -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['base_model'])" "$(cfg gsm8k)")
  if [ "${base_model##*.}" = gguf ] && [ ! -f "$base_model" ]; then
    say "$base_model is not on this machine: copy its 20 slices to /tmp/lease-gguf/$(basename "$GGUF").part_NN first"
    exit 1
  fi
  touch "$W/setup.done"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
fi

# 2. Start what is neither finished nor running.
alive=0
for s in "${SOURCES[@]}"; do running "$s" && alive=1; done
if [ $alive = 0 ]; then  # no Snakemake runs here: clear a lock a killed one left
  $PY -m snakemake --unlock --configfile "$(cfg gsm8k)" >/dev/null 2>&1 || true
fi
todo=()
for s in "${SOURCES[@]}"; do
  if finished "$s"; then say "$s: finished"; continue; fi
  if running "$s"; then say "$s: running ($(stages "$s"))"; continue; fi
  todo+=("$s")
done
if [ "${SERIAL:-0}" = 1 ] && [ ${#todo[@]} -gt 0 ]; then
  SELECT_DIR="$W" CORES="$CORES" RUN_BUDGET="$RUN_BUDGET" PYTHON="$PY" setsid bash "$0" chain "${todo[@]}" \
    > "$W/chain.log" 2>&1 < /dev/null &
  for _ in $(seq 100); do [ -f "$W/${todo[-1]}/pid" ] && break; sleep 0.1; done  # running() reads it
  say "started one chain: ${todo[*]} (imports side by side, then the GPU work in this order)"
  todo=()
fi
for s in "${todo[@]}"; do
  delay=0
  [ "$s" = gsm8k ] && [ ! -f "$W/$s/starts" ] && delay=$STAGGER
  mkdir -p "$W/$s" && rm -f "$W/$s/exit" "$W/$s/pid" && echo "$(date -u +%T)" >> "$W/$s/starts"
  # shellcheck disable=SC2046
  W_RUN="$W/$s" setsid bash -c 'echo $$ > "$W_RUN/pid"; sleep "$1"; shift
                                OUT="$W_RUN" bash lab/lease/lease.sh "$@"; echo $? > "$W_RUN/exit"' _ \
    "$delay" --configfile "$(cfg "$s")" $(carry_of "$s") --budget "$RUN_BUDGET" --cores "$CORES" --keep-locks $(targets "$s") \
    > "$W/$s/nohup.log" 2>&1 < /dev/null &
  for _ in $(seq 100); do [ -f "$W/$s/pid" ] && break; sleep 0.1; done  # running() reads it
  say "$s: started (start $(wc -l < "$W/$s/starts"), after $delay s)"
done

# 3. Wait.
last=0
while :; do
  alive=0
  for s in "${SOURCES[@]}"; do running "$s" && alive=1; done
  [ $alive = 0 ] && break
  [ "$(left)" -le $MARGIN ] && { say "the call's time is up: the runs go on; call again"; break; }
  if [ $((SECONDS - last)) -ge "${PROGRESS:-60}" ]; then
    last=$SECONDS
    for s in "${SOURCES[@]}"; do say "$s: $(running "$s" && echo running || echo ended): $(stages "$s")"; pace "$s"; done
  fi
  sleep 5
done
for s in "${SOURCES[@]}"; do  # each run's console, its Snakemake lines and errors
  [ -f "$W/$s/lease.log" ] && grep -E "^lease.sh|Error|Exception|Finished jobid|steps \(" "$W/$s/lease.log" |
    tail -n 12 | sed "s/^/$s: /"
done

# 4. Back: what each run finished, and the rule once all three are done.
pack
done_all=1
for s in "${ALL_SOURCES[@]}"; do finished "$s" || done_all=0; done
if [ $done_all = 1 ] && [ -f results/qwen15b/candidates/math500_l3_near_copies.csv ]; then
  $PY lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select.py --out "$OUT/selection.csv"
elif [ $done_all = 1 ]; then
  say "all three runs done; the rule runs locally after the merge (the near-copy lists were not carried)"
else
  say "not all three runs are done here: call again, or merge them locally and run the rule there"
fi
say "done"
