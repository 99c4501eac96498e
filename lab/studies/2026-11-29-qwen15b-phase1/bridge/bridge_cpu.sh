#!/usr/bin/env bash
# The bridge's hold (README.md here) on this CPU, with bridge_cpu.yaml standing in for
# qwen15b_phase1.yaml and grpo_full.yaml over it unchanged: a fresh `git worktree` of HEAD with
# workflow/ as c5e8ba9 has it (the holds' package, Amendment 12) stands for the device's checkout.
#   1. the base and the splits (what the hold's carry and import give)
#   2. dry runs: the LoRA runs' targets without the override; the bridge's with it (train_grpo_full
#      alone); the same LoRA targets with it (their training's lr changes: never together)
#   3. the hold's first run call as on 2 GPUs: the bridge's lease.sh --detach --tag bridge
#      --stop-train-at-step 30 --after-run evaluate_snapshot.py --no-wait, then the LoRA side's
#      (two base draws, no override) --tag lora --keep-locks beside it in the same checkout
#   4. the bridge waited on: full fine-tuning stopped after step 30 (exit 75), then the step-30
#      snapshot evaluated by the evaluate job's own command; its checkpoint (full weights) not
#      packed; the counts, the run's log and trainer state in the lease's pack
#   5. a last call: the stopped run is not started again; both pack
# Run from the repository root (a few minutes on 2 cores):
#   bash lab/studies/2026-11-29-qwen15b-phase1/bridge/bridge_cpu.sh [SCRATCH]   (default /tmp/bridge_cpu)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../../.." && pwd)"
S="${1:-/tmp/bridge_cpu}"
PIN=c5e8ba9
git -C "$REPO" worktree remove --force "$S/dev" 2>/dev/null || true
rm -rf "$S" && mkdir -p "$S"
git -C "$REPO" worktree add -q --detach "$S/dev" HEAD
cd "$S/dev"
git checkout -q "$PIN" -- workflow/
export PYTHON="$(command -v python)" LEASE_SITE="$S/site" BOUNDARY_GPU_LOCKS="$S/locks"
export PYTHONPATH="$S/dev/workflow" LEASE_POLL=0.5  # the testbed's steps take about a second: poll faster than the device's 3 s
HERE=lab/studies/2026-11-29-qwen15b-phase1/bridge
CFG=$HERE/bridge_cpu.yaml OV=$HERE/grpo_full.yaml R=results/bridge_cpu
E=$R/eval/diagnostic
LORA="$R/train/grpo/seed0/log.parquet $E/grpo_step30/seed0/counts.parquet $E/base/seed0/counts.parquet"
BRIDGE="$R/train/grpo_full/seed0/log.parquet"
T0=$(date +%s)
t() { echo "--- $* [$(date -u +%T), +$(($(date +%s) - T0)) s]"; }
plan() { python -m snakemake -n "$@" --cores 2 --scheduler greedy 2>&1 | sed -n '/^Job stats/,/^total/p' | awk '!seen[$0]++'; }

t "1. the base and the splits"
python -m snakemake $R/models/base $R/splits/train.parquet $R/splits/diagnostic.parquet --cores 2 \
  --configfile $CFG > "$S/base.log" 2>&1 || { tail -n 20 "$S/base.log"; exit 1; }

t "2. dry runs"
echo "the LoRA runs' targets, without the override:"; plan $LORA --configfile $CFG
echo "the bridge's target, with it:"; plan $BRIDGE --configfile $CFG $OV
echo "the LoRA runs' targets with it (their settings' lr):"
python -m snakemake -n -p $LORA --cores 2 --configfile $CFG $OV 2>&1 | grep -o '"lr":[^,]*' | sort | uniq -c

t "3. the hold's first run call: the bridge started (--no-wait), then the LoRA side beside it, waited on"
bridge() {  # the bridge's lease.sh call, its files into $S/$1/bridge
  local out=$1; shift
  OUT="$S/$out/bridge" LEASE_CKPT_OUT="$S/ckpt-bridge" bash lab/lease/lease.sh --configfile $CFG --override $OV \
    --cores 2 --gpus 0 --detach --tag bridge --keep-locks --pin $PIN --stop-train-at-step 30 "$@" \
    --after-run "python $HERE/evaluate_snapshot.py --configfile $CFG --override $OV --method grpo_full_step30" $BRIDGE
}
lora() {  # the LoRA side's (here: two base draws, without the override), its files into $S/$1/lora
  local out=$1; shift
  OUT="$S/$out/lora" bash lab/lease/lease.sh --configfile $CFG --cores 2 --gpus 0 --detach --tag lora --keep-locks \
    --pin $PIN "$@" $E/base/seed0/counts.parquet $E/base/seed1/counts.parquet
}
bridge call1 --no-wait
lora call1 --budget 580
t "4. the next call: the bridge waited on (its step-30 stop, then its snapshot's evaluation)"
bridge call2 --budget 580
t "5. a last call, both --no-wait: the stopped run is not started again; each packs"
bridge call3 --no-wait
lora call3 --no-wait

t "checks"
log=$R/bridge/grpo_full/seed0/log.parquet
python - "$log" "$E/grpo_full_step30/seed0/counts.parquet" <<'PY'
import sys
import pandas as pd
log, counts = pd.read_parquet(sys.argv[1]), pd.read_parquet(sys.argv[2])
print(f"the bridge's log: steps {int(log.step.min())}-{int(log.step.max())}, KL to the base logged at steps "
      f"{log.dropna(subset=['kl_base_k1']).step.astype(int).tolist()}; reward over steps 21-30 "
      f"{log[log.step.between(21, 30)].reward.mean():.3f}")
print(f"the snapshot's counts: {counts.prompt_id.nunique()} prompts, columns {sorted(counts.columns)[:8]}...")
PY
grep -h "stopped after step\|asked to stop\|full weights\|not started again\|evaluate_snapshot:\|after-run exit\|snakemake exit" \
  "$S"/call*/*/lease.log .snakemake/lease/detached-*.log $R/logs/train/grpo_full/seed0.log | cut -c1-220 | awk '!seen[$0]++'
for f in "$E/grpo_full_step30/seed0/counts.parquet" "$log" "$R/bridge/grpo_full/seed0/trainer_state.json" \
  "$E/base/seed0/counts.parquet" "$E/base/seed1/counts.parquet"; do
  grep -q "^packed $f" "$S/call3/bridge/lease_bridge_cpu.manifest" && echo "packed to come back: $f" || { echo "NOT packed: $f"; exit 1; }
done
ls "$S/ckpt-bridge" 2>/dev/null | grep -q . && { echo "checkpoint parts were packed: $(ls "$S/ckpt-bridge")"; exit 1; } || echo "no checkpoint part packed (full weights stay)"
t "done"
cd "$REPO" && git worktree remove --force "$S/dev"
