#!/usr/bin/env bash
# The carry every Phase 1 hold restores (.lease/carry), from the study's COMMITTED calibration:
# lab/studies/2026-11-28-qwen15b-task-selection/qwen15b/ (the confirmation lease's calibration,
# 62,720 samples at n = 256 with the text removed; the gate's 6,000 draws; the regimes: 57 of 245
# Boundary) placed in results/qwen15b, where Snakemake then treats them as done. Nothing of them
# is recomputed, here or on a device:
#   1. the committed files (and their lease's logs) are copied into results/qwen15b;
#   2. the splits are made by the pipeline (they render the chat template, so the base is
#      imported: about 3 minutes and 14 GB on 2 cores; the splits are the text of the data
#      files, which are never committed);
#   3. `snakemake --touch` records the calibration, gate draws and regimes as made by this
#      config and code (Snakemake's metadata; the calibrate shards, never committed, stay
#      missing, which reruns nothing while their consumer is up to date);
#   4. `lease_in.sh carry qwen15b` packs them with their records into .lease/carry, and
#      `snakemake -n` for hold 1's targets must list the 4 base draws and nothing else.
# Run from the repository root, after `bash lab/models/qwen15b.sh` and
# `python lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_candidates.py --data ../shared/data`:
#   bash lab/studies/2026-11-29-qwen15b-phase1/make_carry.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
CFG=lab/studies/2026-11-28-qwen15b-preregistration/qwen15b_phase1.yaml
SRC=lab/studies/2026-11-28-qwen15b-task-selection/qwen15b
R=results/qwen15b
for f in rollouts/base_calibration.parquet rollouts/base_gate.parquet regimes/regimes.parquet; do
  if [ -e "$R/$f" ] && ! cmp -s "$SRC/$f" "$R/$f"; then
    echo "make_carry: $R/$f differs from the committed $SRC/$f; move it away first" >&2; exit 1
  fi
  mkdir -p "$(dirname "$R/$f")" && cp -p "$SRC/$f" "$R/$f"
done
mkdir -p "$R/logs" && cp -rn "$SRC/logs/." "$R/logs/"
splits="$R/splits/train.parquet $R/splits/diagnostic.parquet $R/splits/bench_gsm8k.parquet $R/splits/bench_omni_math_rule.parquet"
# shellcheck disable=SC2086
python -m snakemake $splits --cores 2 --configfile $CFG --quiet rules
python -m snakemake --touch "$R/regimes/regimes.parquet" "$R/rollouts/base_gate.parquet" --cores 1 \
  --configfile $CFG --quiet rules
bash lab/lease/lease_in.sh carry qwen15b
draws=$(for i in 0 1 2 3; do echo "$R/eval/diagnostic/base/seed$i/counts.parquet"; done)
# shellcheck disable=SC2086
jobs=$(python -m snakemake $draws -n --configfile $CFG 2>&1 | grep -E '^[a-z_]+ +[0-9]+$' | grep -v '^total' | sort -u)
jobs=$(echo "$jobs" | tr -s ' ')
echo "make_carry: hold 1's jobs: $(echo "$jobs" | tr '\n' ' ')"
[ "$jobs" = "evaluate 4" ] || { echo "make_carry: hold 1 would run more than the 4 base draws" >&2; exit 1; }
