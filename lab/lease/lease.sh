#!/usr/bin/env bash
# One GPU lease's share of a study: run the pipeline's own Snakemake on a machine that keeps
# nothing after the lease, from the artifacts earlier leases brought back, and pack what must
# come back (lab/lease/README.md). Run from the repository root:
#
#   OUT=<folder> bash lab/lease/lease.sh --configfile CFG [--override FILE]... [--carry DIR]
#       [--wheels DIR]... [--seed S [--methods M,...]] [--budget SECONDS] [--cores N] [--gpus N] [--setup] [--keep-locks]
#       [--checkpoints DIR [--no-checkpoint-pack]] [--detach [--run-budget SECONDS] [--stop-train SECONDS]
#       [--stop-train-at-step N] [--after-run CMD] [--tag NAME] [--no-wait]]
#       [--prioritize TARGET]... [--pin COMMIT] [TARGET...]
#
#   --configfile  the study's config (its `run:` names results/RUN)
#   --override    a YAML file Snakemake merges over CFG (e.g. `train: {gpus: 4, sharding: fsdp}`: only
#                 what it changes reruns); never `run` or `base_model`, which stay CFG's
#   --carry       a folder made by `lease_in.sh carry` (lease_RUN.manifest and its parts): restored
#                 into results/RUN and .snakemake/metadata once per lease (the first call that
#                 names it; a later call of the same warm lease keeps what the machine made since)
#   --wheels      a folder of wheels: of one holding snakemake-*.whl, the distributions the interpreter
#                 lacks go into its site-packages; any other folder's wheels go with --no-deps
#                 into /tmp/site (first on PYTHONPATH). vLLM's parts /tmp/vllm_part_* (a tar.xz of
#                 its wheel, lab/studies/2026-11-28-engine-rollouts/engine_rollout_steps.sh) are unpacked there if vllm is not importable.
#                 A later call of the same hold may leave a folder uncarried: it was installed.
#   --budget      seconds this call may take in all (default 590); Snakemake is stopped (SIGINT,
#                 then SIGKILL 20 s later) 60 s before, to leave time to pack
#   --cores       Snakemake's --cores (default all); --gpus: its --resources gpu= (default: the
#                 devices nvidia-smi lists, 0 without one): one sampling or 1-GPU training job a
#                 device, so 4 GPUs hold the three methods' trainings and one evaluation at once
#   --seed        adds the targets of seed S of every method and the base's draw S (its training
#                 logs and evaluations: `lease_pack.py targets`), listed once the software is in;
#                 --methods: only those methods' (`base`: the base's draw S), e.g. `grpo,pba` in one
#                 lease of 2 GPUs and `random,base` in the next
#   --setup       the software, the data and the base model's file only: no restore, no Snakemake,
#                 no pack (e.g. once, before several runs of this checkout start side by side)
#   --keep-locks  leave Snakemake's locks (by default a lock left by a killed call is cleared):
#                 for a run beside another Snakemake run of this checkout, whose locks an unlock
#                 would remove (lab/studies/2026-11-28-qwen15b-task-selection/select_task_on_gpus.sh runs three)
#   --detach      Snakemake runs in its own process session, so a job longer than a call (a
#                 calibration shard of 10 minutes) is not cut when the call ends: the call waits
#                 while it runs and packs what is finished so far; a later call with --detach
#                 waits on the same run (or, once it has ended, starts Snakemake again: it goes on
#                 where the last stopped). --run-budget: the detached run's own limit, default
#                 1700 s (a hold ends at 30 minutes anyway)
#   --checkpoints a folder of `lease_pack.py pack-checkpoints` parts (ckpt_RUN.manifest and its
#                 parts): a LoRA run's resumable state, restored into checkpoints/ once per lease
#                 (before Snakemake), so that the training job resumes where an earlier lease stopped,
#                 and a finished LoRA run's adapters (train/M/seedS/final, step*), dated after the
#                 base, so that a later lease evaluates them without training again
#   --no-checkpoint-pack  this call packs no checkpoint parts (a hold that only evaluates restored
#                 adapters: the parts would be the ones that went in, and 540 MiB take about 30 s
#                 of the call to pack)
#   --stop-train  with --detach: when this call has SECONDS left, the detached run's training jobs
#                 get a SIGTERM (they stop at the next step boundary with a checkpoint, exit 75),
#                 and the call waits for the run to end; SECONDS: 60 for the pack, a training step
#                 and the checkpoint's save (150 at a 30-s step). Whenever the run has ended and a
#                 run under checkpoints/RUN holds a resumable checkpoint (or results/RUN a LoRA
#                 run's adapters), they are packed into
#                 $LEASE_CKPT_OUT (default /tmp/lease-ckpt-out, 15-MiB parts: too large for one
#                 call's return, so later calls copy them to $OUT, 4 parts a call)
#   --stop-train-at-step  with --detach: each training job of the detached run gets a SIGTERM
#                 once its log shows step N-1 done (the run's checkpoint it resumed from, and a
#                 logged line a step since), so it stops after step N, with its checkpoint-N and
#                 its snapshot at N if train.checkpoints names N (a job first seen later stops
#                 after the step it is in). A watcher in the detached run's session sends it,
#                 between calls too; once it has, the run is not started again by a later call.
#                 A checkpoint holding full weights (full fine-tuning: about 21 GB at 1.5B) is
#                 never packed; its snapshots stay on the machine (lab/lease/README.md)
#   --after-run   with --detach: a shell command run in the detached run's session once Snakemake
#                 has ended, whatever its status (e.g. evaluating a stopped run's snapshot:
#                 lab/studies/2026-11-29-qwen15b-phase1/bridge/); the calls wait for it as for
#                 the run, and pack what it wrote
#   --tag         with --detach: the detached run's name (.snakemake/lease/detached-NAME), so
#                 that two runs of one checkout go on side by side (e.g. one a GPU, each with its
#                 CUDA_VISIBLE_DEVICES and --gpus 1; the second with --keep-locks)
#   --no-wait     with --detach: return once the run is started (or found running), without
#                 waiting for it; a later call waits and packs
#   --prioritize  Snakemake's --prioritize: this target's jobs start first (a training job before the
#                 base's draws that share a 2-GPU hold, so the draws take the other GPU, one at a time)
#   --pin         refuse to run unless workflow/ is as at COMMIT (a study whose runs span holds pins
#                 the package: another code gives a training job another key, and it would start
#                 again from step 0); restore it with `git checkout COMMIT -- workflow/`
#   TARGET        more Snakemake targets (with neither: its default target, the whole run, whose
#                 model weights a later lease lacks), e.g. results/RUN/report.html in the last lease
#
# Before Snakemake: data/ is linked to .lease/data if data/ is missing and that folder was carried,
# and the files of .lease/files (the config's data files outside data/, `lease_in.sh data`) are
# copied to their paths in the checkout (where missing or older); a GGUF base_model that is
# missing is joined from $LEASE_GGUF/NAME.part_* (default /tmp/lease-gguf) and checked against the lab/models/*.sha256 pin
# naming it. If artifacts were restored and the base model folder is missing, it is made first (a
# separate Snakemake run) and the restored files are then dated after it: otherwise the newer
# base would rerun every stage below it. Calling this again in the
# same warm lease goes on where the last call stopped (--rerun-incomplete; training resumes from
# checkpoints/). Every call ends by packing results/RUN's small artifacts and their metadata into
# $OUT (lease_pack.py: at most 4 parts of 15 MiB, 60 MiB in all; never model weights), with
# $OUT/lease.log, this call's console.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
start=$(date +%s)
cfg="" carry="" ckpts="" stop_train="" seed="" methods="" budget=590 cores=all gpus="" setup="" keep_locks="" detach="" run_budget=1700 wheels=() targets=()
overrides=() prio=() code_pin="" stop_at="" after_run="" tag="" no_wait="" no_ckpt_pack=""
while [ $# -gt 0 ]; do
  case "$1" in
    --configfile) cfg="$2"; shift 2 ;;
    --override) overrides+=("$2"); shift 2 ;;
    --carry) carry="$2"; shift 2 ;;
    --checkpoints) ckpts="$2"; shift 2 ;;
    --no-checkpoint-pack) no_ckpt_pack=1; shift ;;
    --stop-train) stop_train="$2"; shift 2 ;;
    --stop-train-at-step) stop_at="$2"; shift 2 ;;
    --after-run) after_run="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --no-wait) no_wait=1; shift ;;
    --seed) seed="$2"; shift 2 ;;
    --methods) methods="$2"; shift 2 ;;
    --wheels) wheels+=("$2"); shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --cores) cores="$2"; shift 2 ;;
    --gpus) gpus="$2"; shift 2 ;;
    --setup) setup=1; shift ;;
    --keep-locks) keep_locks=1; shift ;;
    --detach) detach=1; shift ;;
    --run-budget) run_budget="$2"; shift 2 ;;
    --prioritize) prio+=("$2"); shift 2 ;;
    --pin) code_pin="$2"; shift 2 ;;
    -*) echo "lease.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
: "${OUT:?lease.sh: set OUT to the folder that comes back}"
[ -f "$cfg" ] || { echo "lease.sh: --configfile ${cfg:-(none)}: no such file" >&2; exit 2; }
[ -z "$methods" ] || [ -n "$seed" ] || { echo "lease.sh: --methods $methods: needs --seed" >&2; exit 2; }
for opt in stop_train:--stop-train stop_at:--stop-train-at-step after_run:--after-run tag:--tag no_wait:--no-wait; do
  var=${opt%%:*}
  [ -z "${!var}" ] || [ -n "$detach" ] || { echo "lease.sh: ${opt#*:}: needs --detach" >&2; exit 2; }
done
[ -z "$stop_at" ] || [[ "$stop_at" =~ ^[1-9][0-9]*$ ]] || { echo "lease.sh: --stop-train-at-step $stop_at: not a step (1, 2, ...)" >&2; exit 2; }
[ -z "$tag" ] || [[ "$tag" =~ ^[A-Za-z0-9_]+$ ]] || { echo "lease.sh: --tag $tag: letters, digits and _ only" >&2; exit 2; }
if [ -n "$code_pin" ]; then
  git rev-parse --verify -q "$code_pin^{commit}" >/dev/null || { echo "lease.sh: --pin $code_pin: no such commit in this checkout" >&2; exit 2; }
  changed=$(git diff --name-only "$code_pin" -- workflow/ | head -n 3 | paste -sd ' ')
  [ -z "$changed" ] && [ -z "$(git ls-files --others --exclude-standard workflow/ | head -n 1)" ] ||
    { echo "lease.sh: --pin $code_pin: workflow/ differs from it (${changed:-untracked files}); restore it: git checkout $code_pin -- workflow/" >&2; exit 2; }
fi
for file in "${overrides[@]}"; do
  [ -f "$file" ] || { echo "lease.sh: --override $file: no such file" >&2; exit 2; }
  grep -Eq '^(run|base_model):' "$file" &&
    { echo "lease.sh: --override $file: sets run or base_model, which only --configfile names" >&2; exit 2; }
done
cfgs=("$cfg" "${overrides[@]}")
mkdir -p "$OUT" .snakemake/lease
exec > >(tee -a "$OUT/lease.log") 2>&1
PY="${PYTHON:-python3}"
SITE="${LEASE_SITE:-/tmp/site}"
export PYTHONPATH="$SITE:$ROOT/workflow${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
left() { echo $((start + budget - $(date +%s))); }
say() { echo "lease.sh [$(($(date +%s) - start)) s]: $*"; }
git log -1 --format='lease.sh: commit %H' 2>/dev/null || true

# 1. Software: Snakemake and the carried wheel sets; `boundary` runs this checkout's package.
want=$(sed -n 's/.*"snakemake==\([^"]*\)".*/\1/p' pyproject.toml)
mkdir -p "$SITE"
installed="$SITE/.lease-wheel-dirs"  # the folders this hold has installed from
for dir in "${wheels[@]}"; do
  if [ ! -d "$dir" ]; then
    # A later call of a warm hold need not carry a folder again: a carry replaces the folders it
    # names, so one left out is absent, and what it held is installed already.
    grep -qxF "$dir" "$installed" 2>/dev/null || { say "--wheels $dir: no such folder"; exit 1; }
    say "--wheels $dir: not carried this call; installed by an earlier call of this hold"
    continue
  fi
  if ls "$dir"/snakemake-*.whl >/dev/null 2>&1; then
    # Only the distributions the interpreter lacks, into its own site-packages: nothing it has is
    # shadowed. Not pip's resolver: snakemake requires pulp (16 MB of ILP solvers) that the set
    # leaves out; --scheduler greedy below needs none.
    [ "$($PY -m snakemake --version 2>/dev/null)" = "$want" ] || {
      missing=$($PY - "$dir" <<'PY'
import sys, importlib.metadata as md
from pathlib import Path
for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    try:
        md.version(wheel.name.split("-")[0])
    except md.PackageNotFoundError:
        print(wheel)
PY
)
      # shellcheck disable=SC2086
      $PY -m pip install -q --no-index --no-deps --no-compile $missing &&
        say "installed from $dir: $(echo $missing | xargs -n1 basename | cut -d- -f1 | tr '\n' ' ')"; } ||
      { say "installing snakemake $want from $dir failed"; exit 1; }
  else
    stamp="$SITE/.lease-$(ls "$dir" | sha256sum | cut -c1-16)"
    [ -e "$stamp" ] || { $PY -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
      "$dir"/*.whl && touch "$stamp"; } || { say "installing the wheels of $dir failed"; exit 1; }
  fi
  echo "$dir" >> "$installed"
done
if ls /tmp/vllm_part_* >/dev/null 2>&1 && ! $PY -c "import vllm" 2>/dev/null; then
  cat /tmp/vllm_part_* | xz -d | tar -x -C "$SITE" || { say "unpacking vllm from /tmp/vllm_part_* failed"; exit 1; }
fi
[ "$($PY -m snakemake --version 2>/dev/null)" = "$want" ] ||
  { say "snakemake $want is not installed: pass --wheels with the folder of its wheel set"; exit 1; }
BIN="$SITE.bin"  # beside the site: one per LEASE_SITE
mkdir -p "$BIN"
printf '#!/bin/sh\nexec %s -m boundary.cli "$@"\n' "$(command -v "$PY")" > "$BIN/boundary"
chmod +x "$BIN/boundary"
export PATH="$BIN:$PATH"
run=$($PY -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['run'])" "$cfg") || exit 1
if [ -n "$seed" ]; then
  seeded=$($PY lab/lease/lease_pack.py targets --configfile "$cfg" --seed "$seed" \
    ${methods:+--methods "$methods"}) || exit 1
  read -r -d '' -a more <<< "$seeded" || true
  targets+=("${more[@]}")
fi
base_model=$($PY -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1])).get('base_model') or '')" "$cfg")

# 2. Data and the base model's file.
[ -e data ] || [ ! -d .lease/data ] || ln -s .lease/data data
[ ! -d .lease/files ] || cp -ru .lease/files/. . || { say "copying .lease/files into the checkout failed"; exit 1; }
if [ "${base_model##*.}" = gguf ] && [ ! -f "$base_model" ]; then
  pin=$(grep -l " $base_model\$" lab/models/*.sha256 | head -1)
  gguf_dir="${LEASE_GGUF:-/tmp/lease-gguf}"
  parts=("$gguf_dir"/"$(basename "$base_model")".part_*)
  if [ -n "$pin" ] && [ -f "${parts[0]}" ]; then
    mkdir -p "$(dirname "$base_model")"
    cat "${parts[@]}" > "$base_model.partial"
    if [ "$(sha256sum "$base_model.partial" | cut -c1-64)" = "$(head -n 1 "$pin" | cut -c1-64)" ]; then
      mv "$base_model.partial" "$base_model" && say "$base_model: joined from ${#parts[@]} slices, SHA-256 as $pin pins"
    else
      rm -f "$base_model.partial"; say "$base_model: the ${#parts[@]} slices in $gguf_dir join to another SHA-256 than $pin pins; refused"; exit 1
    fi
  fi
fi

if [ -n "$setup" ]; then
  say "set up (--setup: nothing run)"; exit 0
fi

# Targets first: --configfile takes every word after it.
smk() { $PY -m snakemake "$@" --cores "$cores" --resources gpu="$ngpu" --scheduler greedy --configfile "${cfgs[@]}"; }
# run_smk SECONDS TARGET...: smk going on where the last run stopped, SIGINT at the limit, SIGKILL 20 s later.
run_smk() {
  timeout -s INT -k 20 "$1" bash -c "$(declare -f smk); $(declare -p PY cores ngpu cfgs); smk \"\$@\" --rerun-incomplete --keep-going" _ "${@:2}"
}
ngpu=${gpus:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)}
ngpu=${ngpu:-0}
detached=.snakemake/lease/detached${tag:+-$tag}  # .pid, .log and .rc of a --detach run (.stopped, .after-rc)
alive() { [ -f "$detached.pid" ] && kill -0 "$(cat "$detached.pid")" 2>/dev/null; }
# A lock left by a killed call is cleared; never the locks of a detached run still going.
[ -n "$keep_locks" ] || alive || $PY -m snakemake --unlock --configfile "${cfgs[@]}" >/dev/null 2>&1 || true

# 3. Restore what earlier leases brought back (once a lease), then date it after the base.
if [ -n "$carry" ]; then
  key=$(sha256sum "$carry"/lease_*.manifest 2>/dev/null | cut -c1-64)
  [ -n "$key" ] || { say "--carry $carry: no lease_*.manifest"; exit 1; }
  if [ "$(cat .snakemake/lease/restored 2>/dev/null)" != "$key" ] && [ "$(cat .snakemake/lease/pending 2>/dev/null)" != "$key" ]; then
    $PY lab/lease/lease_pack.py unpack "$carry" || exit 1
    echo "$key" > .snakemake/lease/pending
  fi
fi
# A LoRA run's resumable state and adapters from an earlier lease (once a lease), dated after
# the base like the restored artifacts.
ckpt_out="${LEASE_CKPT_OUT:-/tmp/lease-ckpt-out}"
if [ -n "$ckpts" ]; then
  key=$(sha256sum "$ckpts"/ckpt_*.manifest 2>/dev/null | cut -c1-64)
  [ -n "$key" ] || { say "--checkpoints $ckpts: no ckpt_*.manifest"; exit 1; }
  if [ "$(cat .snakemake/lease/ckpt-restored 2>/dev/null)" != "$key" ]; then
    $PY lab/lease/lease_pack.py unpack-checkpoints "$ckpts" --list .snakemake/lease/ckpt-restored.txt || exit 1
    echo "$key" > .snakemake/lease/ckpt-restored
    touch .snakemake/lease/ckpt-pending
  fi
fi
if [ -f .snakemake/lease/pending ] || [ -f .snakemake/lease/ckpt-pending ]; then
  base="results/$run/models/base"
  if [ ! -d "$base" ] && [ "$(left)" -gt 120 ]; then
    say "making $base before the restored stages are dated"
    run_smk $(($(left) - 60)) "$base"
  fi
  if [ -d "$base" ]; then
    [ ! -f .snakemake/lease/pending ] || { $PY lab/lease/lease_pack.py touch .snakemake/lease/restored.txt &&
      mv .snakemake/lease/pending .snakemake/lease/restored; }
    [ ! -f .snakemake/lease/ckpt-pending ] || { $PY lab/lease/lease_pack.py touch .snakemake/lease/ckpt-restored.txt &&
      rm .snakemake/lease/ckpt-pending; }
  fi
fi

# A training process's command line: the train rule's `boundary --gpus N [--own] train ...`
# (--own: its colocated engine owns the GPU), run through the shim above as
# `python -m boundary.cli --gpus N [--own] train ...`; lab/lease/test_lease.py checks both forms.
TRAIN_RE='boundary(\.cli)? (--gpus [0-9]+ )?(--own )?train '
# train_pids: the detached run's training processes (its own session), by id, once they have run
# 20 s: a SIGTERM in a process's first moments, before it installs its stop handler, would end it
# without a checkpoint. (A test shortens it: $LEASE_TERM_AFTER, and the step watcher's poll,
# $LEASE_POLL, 3 s.)
train_pids() {
  local pid
  for pid in $(pgrep -s "${1:-$(cat "$detached.pid")}" -f "$TRAIN_RE" 2>/dev/null); do
    [ "$(ps -o etimes= -p "$pid" 2>/dev/null | tr -d ' ')" -ge "${LEASE_TERM_AFTER:-20}" ] 2>/dev/null && echo "$pid"
  done
  return 0
}
# logged_steps LOG: the steps a training job's log shows done: the checkpoint it resumed from, and
# the trainer's logged line a step since (train.py: logging_steps 1; a line "{'loss': ...}").
logged_steps() {
  local from done
  from=$(sed -n 's/^train: resuming from .*checkpoint-\([0-9][0-9]*\);.*/\1/p' "$1" 2>/dev/null | tail -n 1)
  done=$(tr '\r' '\n' < "$1" 2>/dev/null | grep -c "{'loss': ")
  echo $((${from:-0} + ${done:-0}))
}
# watch_steps N: in the detached run's session, while it runs: a SIGTERM to each of its training
# processes, once, when its log shows step N-1 done (--stop-train-at-step), so that the stop falls
# at step N's boundary; each signal is recorded in $detached.stopped.
watch_steps() {
  local asked="" pid out log done
  while sleep "${LEASE_POLL:-3}"; do
    for pid in $(train_pids 0); do
      case " $asked " in *" $pid "*) continue ;; esac
      out=$(tr '\0' '\n' < "/proc/$pid/cmdline" 2>/dev/null | sed -n '/^--out$/{n;p;q}')
      [ -n "$out" ] || continue
      log="${out/\/train\//\/logs\/train\/}.log"  # the train rule's log: results/RUN/logs/train/M/seedS.log
      done=$(logged_steps "$log")
      if [ "$done" -ge $(($1 - 1)) ] && kill -TERM "$pid" 2>/dev/null; then
        asked="$asked $pid"
        echo "${out#results/*/train/} $done" >> "$detached.stopped"
        echo "lease.sh: training process $pid (${out#results/*/train/}) has logged step $done: asked to stop at its next step boundary (SIGTERM, --stop-train-at-step $1)"
      fi
    done
  done
}
stopped_train="" fresh=""

# 4. The run, stopped in time to pack (with --detach it outlives the call instead).
if [ -f .snakemake/lease/pending ] || [ -f .snakemake/lease/ckpt-pending ]; then
  say "the base model is not made yet: the run waits for the next call"
elif [ -n "$detach" ]; then
  if alive; then
    say "the detached run goes on (pid $(cat "$detached.pid"))"
  elif [ -n "$stop_at" ] && [ -s "$detached.stopped" ]; then
    # --stop-train-at-step: a run stopped there ends there (a new start would resume and train on)
    say "the run's training was stopped by --stop-train-at-step ($(paste -sd ',' "$detached.stopped")): not started again"
  elif [ "$(left)" -gt 90 ]; then
    say "snakemake on $ngpu GPU(s), detached, $run_budget s: ${targets[*]:-the default target}${stop_at:+; training stops after step $stop_at}${after_run:+; then: $after_run}"
    rm -f "$detached.rc" "$detached.after-rc"
    # the session: Snakemake (and the step watcher beside it), then --after-run's command
    STOP_AT="$stop_at" AFTER_RUN="$after_run" setsid nohup bash -c "$(declare -f smk run_smk train_pids logged_steps watch_steps); $(declare -p PY cores ngpu cfgs TRAIN_RE detached)
      if [ -n \"\$STOP_AT\" ]; then watch_steps \"\$STOP_AT\" & watcher=\$!; fi
      run_smk \"\$@\"; echo \$? > $detached.rc
      [ -z \"\${watcher:-}\" ] || kill \$watcher 2>/dev/null
      if [ -n \"\$AFTER_RUN\" ]; then
        echo \"lease.sh: after the run: \$AFTER_RUN\"; bash -c \"\$AFTER_RUN\"; echo \$? > $detached.after-rc
      fi" \
      _ "$run_budget" "${targets[@]}" ${prio[@]+--prioritize "${prio[@]}"} > "$detached.log" 2>&1 < /dev/null &
    echo $! > "$detached.pid"
  else
    say "too little time left to start the run"
  fi
  shown=0
  while [ -z "$no_wait" ] && alive && [ "$(left)" -gt 60 ]; do
    sleep 5
    if [ -n "$stop_train" ] && [ "$(left)" -le "$stop_train" ]; then
      # every training process of the run, once each (a second SIGTERM would stop it at once),
      # also one that starts after the stop time (a job that was waiting)
      for pid in $(train_pids); do
        case " $stopped_train " in *" $pid "*) continue ;; esac
        kill -TERM "$pid" 2>/dev/null && stopped_train="$stopped_train $pid" &&
          say "training process $pid asked to stop at the next step boundary (SIGTERM)"
      done
    fi
    # A carried checkpoint that its job did not resume (another key: code, settings or base files
    # changed between leases) would train from step 0 in silence: said, and that job stopped.
    # Only logs written since the run started count (a restored log, dated at the restore, says
    # what an earlier lease's job did), and only the jobs of runs whose state was carried.
    # (A job is signalled once it has run 20 s, train_pids: until then each pass tries again.)
    [ -z "$ckpts" ] || for dir in $($PY lab/lease/lease_pack.py restarted --run "$run" --since "$detached.pid"); do
      case " $fresh " in *" $dir "*) ;; *)
        fresh="$fresh $dir"
        say "WARNING: ${dir#"checkpoints/$run/"} started afresh although its checkpoint was carried: its key differs (code, settings or base files changed since it was saved); stopping it" ;;
      esac
      for pid in $(train_pids); do
        case " $stopped_train " in *" $pid "*) continue ;; esac
        tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--checkpoint-dir $dir " &&
          kill -TERM "$pid" 2>/dev/null && stopped_train="$stopped_train $pid"
      done
    done
    if [ $(($(date +%s) - shown)) -ge 60 ]; then
      shown=$(date +%s)
      say "running: $(grep -E 'of [0-9]+ steps' "$detached.log" | tail -n 1 | grep . || echo 'no Snakemake job finished yet')"
      # the logs written in the last 20 s, the running jobs': a long job's own progress (tqdm's last line)
      find "results/$run/logs" -name '*.log' -newermt '20 seconds ago' 2>/dev/null | sort | while read -r log; do
        echo "  ${log#results/"$run"/logs/}: $(tr '\r' '\n' < "$log" | grep -v '^\s*$' | tail -n 1 | cut -c1-150)"
      done
    fi
  done
  grep -E "^Finished jobid|of [0-9]+ steps|^Error|^Exiting because|^lease.sh: |^train: stopped" "$detached.log" 2>/dev/null | tail -n 20
  if alive; then
    say "the detached run goes on after this call: call again to wait for it and pack"
  elif [ -f "$detached.pid" ]; then
    say "detached snakemake exit status $(cat "$detached.rc" 2>/dev/null || echo unknown)"
    [ -z "$after_run" ] || say "--after-run exit status $(cat "$detached.after-rc" 2>/dev/null || echo unknown)"
  fi
elif [ "$(left)" -gt 90 ]; then
  say "snakemake on $ngpu GPU(s), $(($(left) - 60)) s: ${targets[*]:-the default target}"
  run_smk $(($(left) - 60)) "${targets[@]}" ${prio[@]+--prioritize "${prio[@]}"}
  rc=$?
  [ $rc = 124 ] && say "stopped at the time limit: call again to go on" || say "snakemake exit status $rc"
else
  say "too little time left to run anything"
fi

# 5. What comes back: the small artifacts in $OUT; a LoRA run's resumable state and finished
# adapters beside it in $ckpt_out (later calls bring its parts back), whenever no training process
# is running (one could be writing its checkpoint); evaluations that go on read the adapters only.
training_now() { alive && pgrep -s "$(cat "$detached.pid")" -f "$TRAIN_RE" >/dev/null 2>&1; }
pack_checkpoints() {
  if [ -n "$no_ckpt_pack" ]; then
    say "no checkpoint parts packed (--no-checkpoint-pack)"
  elif ! training_now && { [ -d "checkpoints/$run" ] || ls "results/$run"/train/*/seed*/*/adapter_config.json >/dev/null 2>&1; }; then
    $PY lab/lease/lease_pack.py pack-checkpoints --checkpoints "checkpoints/$run" --results "results/$run" \
      --out "$ckpt_out" &&
      ls "$ckpt_out"/ckpt_"$run".tgz.* >/dev/null 2>&1 &&
      say "the checkpoint parts to bring back, 4 a call: $(cd "$ckpt_out" && ls ckpt_"$run".tgz.* | tr '\n' ' ')(each call: cp $ckpt_out/ckpt_$run.manifest and its next parts to \$OUT)"
  fi
}
pack_checkpoints
[ -d "results/$run" ] && $PY lab/lease/lease_pack.py pack --results "results/$run" --out "$OUT"
say "done"
