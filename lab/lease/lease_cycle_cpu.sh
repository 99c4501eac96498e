#!/usr/bin/env bash
# The lease cycle of lab/lease/README.md on this CPU with the smoke
# config: fresh checkouts (git worktrees of HEAD) stand for the local one and two leases' machines.
#   lease 1 runs until the masks and packs; the local checkout merges what came back and makes the
#   carry folder; lease 2, in another fresh checkout, restores it, re-makes the base, and
#   `snakemake -n` there lists none of the restored stages; lease 2 runs both seeds and the
#   report; the local checkout merges that and `snakemake -n` for the report lists nothing.
# Run from the repository root: bash lab/lease/lease_cycle_cpu.sh [SCRATCH] (default /tmp/lease_cycle).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
S="${1:-/tmp/lease_cycle}"
CFG=tests/configs/smoke.yaml RUN=smoke
for w in local dev1 dev2; do
  git -C "$REPO" worktree remove --force "$S/$w" 2>/dev/null || true
done
rm -rf "$S" && mkdir -p "$S"
for w in local dev1 dev2; do git -C "$REPO" worktree add -q --detach "$S/$w" HEAD; done
export PYTHON="$(command -v python)" LEASE_SITE="$S/site" BOUNDARY_GPU_LOCKS="$S/locks"
t() { echo "--- $* [$(date -u +%T)]"; }

t "lease 1 (dev1): until the masks"
(cd "$S/dev1" && OUT="$S/out1" bash lab/lease/lease.sh --configfile $CFG --cores 2 --budget 400 \
  results/$RUN/masks/pba.parquet results/$RUN/regimes/regimes.parquet) | grep -v "^\[\|^ \|^$\|^Select\|^Finished\|^Job\|^rule\|^localrule\|^host\|^Building\|^Provided\|^Using\|^Assuming\|^Complete\|^Falling" || true
ls -l "$S/out1"

t "local: merge lease 1, make the carry folder"
(cd "$S/local" && bash lab/lease/lease_in.sh merge $RUN "$S/out1" && bash lab/lease/lease_in.sh carry $RUN)
(cd "$S/local" && python -m snakemake results/$RUN/masks/pba.parquet results/$RUN/regimes/regimes.parquet -n --configfile $CFG 2>&1 | grep -E "^(rule|localrule) |reason|Nothing")

t "lease 2 (dev2): restore, re-make the base, date the restored files"
cp -r "$S/local/.lease" "$S/dev2/.lease"  # the device call's carry
(cd "$S/dev2" && OUT="$S/out2a" bash lab/lease/lease.sh --configfile $CFG --cores 2 --budget 400 \
  --carry .lease/carry results/$RUN/models/base) | grep "lease" || true
t "lease 2: snakemake -n for everything (restored stages must not be listed)"
(cd "$S/dev2" && python -m snakemake -n --configfile $CFG 2>&1 | sed -n "/^Job stats/,/^total/p" | head -n 12)
restored=$(cd "$S/dev2" && python -m snakemake -n --configfile $CFG 2>&1 | grep -cE "^rule (splits|calibrate_base|regimes|gate_draws|mask):" || true)
echo "restored stages listed by snakemake -n in lease 2: $restored"

t "lease 2: both seeds and the report"
(cd "$S/dev2" && OUT="$S/out2" bash lab/lease/lease.sh --configfile $CFG --cores 2 --budget 590 \
  --carry .lease/carry) | grep "lease" || true
t "local: merge lease 2; snakemake -n for the report"
(cd "$S/local" && bash lab/lease/lease_in.sh merge $RUN "$S/out2")
(cd "$S/local" && python -m snakemake results/$RUN/report.html -n --configfile $CFG 2>&1 | grep -E "^(rule|localrule) |reason|Nothing|missing")
t "end"
