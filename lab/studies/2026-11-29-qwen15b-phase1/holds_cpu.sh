#!/usr/bin/env bash
# Phase 1's holds (README.md, "The holds, call by call") on this CPU with the smoke twin
# qwen15b_phase1_smoke.yaml and the real 1.5B GGUF: fresh `git worktree`s of HEAD stand for the
# local checkout and four holds' machines.
#   local:  the task's files, a calibration (standing in for the committed one), the carry, the
#           data files and the GGUF's 45-MiB slices, as for the device
#   hold 1: the slices joined and pinned, the base imported, the carry restored and dated; the
#           base's 4 sequential draws; merged locally, `snakemake -n` for them lists nothing
#   hold 2: a LoRA GRPO run started detached, stopped by `--stop-train` at a step boundary
#           (exit 75), its resumable state packed in parts (the parts' size is the figure a
#           1.5B rank-16 adapter with its optimizer state travels in)
#   hold 3: the carry of holds 1-2 and the checkpoint parts restored, the run resumed (its log
#           says "resuming from") and finished; its adapters packed like a checkpoint
#   hold 4: the adapters restored and dated after the base: the checkpoints evaluated
#           sequentially, nothing trained; merged locally, `snakemake -n` for every Phase 1
#           target lists nothing
# Each step prints its wall time; a hold's run that outlives a call gets the device's next call
# (the same command, which waits on it and packs). Run from the repository root (about 45 minutes
# on 2 shared cores; the 1.5B import peaks at 14 GB, jobs run one at a time, and the scratch
# folder needs about 50 GB: five imported bases; it is removed at the end):
#   bash lab/studies/2026-11-29-qwen15b-phase1/holds_cpu.sh [SCRATCH]   (default /tmp/phase1_holds)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
S="${1:-/tmp/phase1_holds}"
CFG=lab/studies/2026-11-29-qwen15b-phase1/qwen15b_phase1_smoke.yaml RUN=qwen15b_phase1_smoke
GGUF=models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf
[ -f "$REPO/$GGUF" ] || { echo "holds_cpu: $GGUF: missing (bash lab/models/qwen15b.sh)" >&2; exit 1; }
DATA="$REPO/../shared/data"
[ -f "$DATA/math500/test.jsonl" ] || { echo "holds_cpu: $DATA: no MATH500 copy" >&2; exit 1; }
for w in local dev1 dev2 dev3 dev4; do git -C "$REPO" worktree remove --force "$S/$w" 2>/dev/null || true; done
rm -rf "$S" && mkdir -p "$S"
for w in local dev1 dev2 dev3 dev4; do git -C "$REPO" worktree add -q --detach "$S/$w" HEAD; done
export PYTHON="$(command -v python)" LEASE_SITE="$S/site" BOUNDARY_GPU_LOCKS="$S/locks"
export LEASE_GGUF="$S/gguf"  # the device's /tmp/lease-gguf
export PYTHONPATH="$S/local/workflow"  # the local checkout's package (lease.sh puts each hold's first)
T0=$(date +%s)
t() { echo "--- $* [$(date -u +%T), +$(($(date +%s) - T0)) s]"; }
quiet() { grep -v "^\[\|^ \|^$\|^Select\|^Finished\|^Job\|^rule\|^localrule\|^host\|^Building\|^Provided\|^Using\|^Assuming\|^Complete\|^Falling" || true; }
base_draws=$(for i in 0 1 2 3; do echo "results/$RUN/eval/diagnostic/base/seed$i/counts.parquet"; done)
seed0="results/$RUN/train/grpo/seed0/log.parquet $(for m in grpo grpo_step1 grpo_step2; do
  echo "results/$RUN/eval/diagnostic/$m/seed0/counts.parquet"; done)"

t "local: the task's files, the calibration (the committed one's stand-in), the carry, data, slices"
cd "$S/local"
mkdir -p models && ln -s "$REPO/$GGUF" "$GGUF"
python lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_candidates.py --data "$DATA" > /dev/null
python -m snakemake "results/$RUN/regimes/regimes.parquet" --cores 1 --configfile $CFG 2>&1 | quiet
bash lab/lease/lease_in.sh carry $RUN
bash lab/lease/lease_in.sh data $CFG | tail -n 1
bash lab/lease/lease_in.sh gguf "$GGUF" 45 | tail -n 2

# hold DEV OUT [ARG...]: the device's run calls of one hold: lease.sh in DEV's checkout, its files
# into OUT, called again (as the device's next call, which waits and packs) while its detached
# run outlives a call. Each hold's machine starts from the local checkout's .lease/ (carry, data,
# slices, checkpoint parts), copied as the device's calls carry them.
hold() {
  local dev=$1 out=$2 call
  shift 2
  cp -r "$S/local/.lease" "$S/$dev/.lease"
  for call in 1 2 3; do
    (cd "$S/$dev" && OUT="$out" bash lab/lease/lease.sh --configfile $CFG --cores 1 --budget 590 \
      --carry .lease/carry --detach "$@") 2>&1 | quiet
    grep -q "detached snakemake exit status" "$out/lease.log" && return 0
    : > "$out/lease.log"  # the next call's console alone
  done
  echo "holds_cpu: $dev: the run did not end within 3 calls" >&2
  return 1
}
# ckpt_in N: the checkpoint parts regrouped locally, as the device's calls copy them in.
ckpt_in() { mkdir -p "$S/ckpt-in$1" && cp "$S"/local/.lease/ckpt/*/* "$S/ckpt-in$1/"; }
train_log="results/$RUN/logs/train/grpo/seed0.log"

t "hold 1 (dev1): GGUF slices joined, base imported, carry restored; the base's 4 sequential draws"
mkdir -p "$LEASE_GGUF" && cp "$S"/local/.lease/gguf/*/* "$LEASE_GGUF/"  # the device's slice calls
hold dev1 "$S/out1" $base_draws
ls -l "$S/out1"
t "local: merge hold 1; snakemake -n for the base draws"
cd "$S/local" && bash lab/lease/lease_in.sh merge $RUN "$S/out1"
python -m snakemake $base_draws -n --configfile $CFG 2>&1 | grep -E "^(rule|localrule) |Nothing"
cmp -s "$S/local/results/$RUN/models/base/model.safetensors" "$S/dev1/results/$RUN/models/base/model.safetensors" &&
  echo "import-base: the same model.safetensors in two checkouts (a run's key holds the base's files)" ||
  echo "import-base: WARNING: two imports differ: a run's key would change between holds"
bash lab/lease/lease_in.sh carry $RUN

t "hold 2 (dev2): GRPO LoRA seed 0 started detached, then stopped at a step boundary"
# --stop-train 589 of a 590-s call: the training job is asked to stop once it has run 20 s, so
# it stops after its first step (on the device, the hold's last training call: --stop-train 150).
LEASE_CKPT_OUT="$S/ckpt2" hold dev2 "$S/out2" --stop-train 589 $seed0  # the device's /tmp/lease-ckpt-out
grep -E "^train: (starting|stopped|resuming)" "$S/dev2/$train_log"
ls -l "$S/ckpt2"
t "local: merge hold 2; the checkpoint parts (brought back 4 a call on the device) regrouped for hold 3"
cd "$S/local" && bash lab/lease/lease_in.sh merge $RUN "$S/out2" && bash lab/lease/lease_in.sh carry $RUN
bash lab/lease/lease_in.sh ckpt "$S/ckpt2" && ckpt_in 3

t "hold 3 (dev3): carry and checkpoint restored; the run resumes and ends (no evaluation in this hold)"
LEASE_CKPT_OUT="$S/ckpt3" hold dev3 "$S/out3" --checkpoints "$S/ckpt-in3" "results/$RUN/train/grpo/seed0/log.parquet"
grep -E "^train: (starting|stopped|resuming)" "$S/dev3/$train_log"
ls -l "$S/ckpt3"
t "local: merge hold 3; its adapters regrouped for hold 4"
cd "$S/local" && bash lab/lease/lease_in.sh merge $RUN "$S/out3" && bash lab/lease/lease_in.sh carry $RUN
bash lab/lease/lease_in.sh ckpt "$S/ckpt3" && ckpt_in 4

t "hold 4 (dev4): the adapters restored and dated; the checkpoints evaluated, nothing trained"
LEASE_CKPT_OUT="$S/ckpt4" hold dev4 "$S/out4" --checkpoints "$S/ckpt-in4" $seed0
{ grep -c "rule train_grpo" "$S/dev4/.snakemake/lease/detached.log" || true; } | sed 's/^/train jobs run in hold 4: /'
t "local: merge hold 4; snakemake -n for every evaluation of Phase 1"
cd "$S/local" && bash lab/lease/lease_in.sh merge $RUN "$S/out4"
# The evaluations, not the training log: the training job's other outputs (the adapters) never
# come back through the carry, so naming its log as a target would ask for it again here.
python -m snakemake $base_draws ${seed0#* } -n --configfile $CFG 2>&1 | grep -E "^(rule|localrule) |Nothing"
for w in local dev1 dev2 dev3 dev4; do git -C "$REPO" worktree remove --force "$S/$w"; done
rm -rf "$S"
t "end"
