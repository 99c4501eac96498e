#!/usr/bin/env bash
# The local side of a study run across GPU leases (lab/lease/README.md):
# what goes to a lease's machine (in ignored folders under .lease/, named in the device call's
# `carry`) and what comes back. Run from the repository root with the project's Python on PATH.
#
#   lease_in.sh data CFG...          .lease/data: a copy of the data files the configs name under
#                                    data/ (the data/ link does not travel), and .lease/files: the
#                                    others of this checkout at their paths (e.g. results/...);
#                                    lease.sh links data/ to the one and copies the other in place
#   lease_in.sh carry RUN [MIB]      .lease/carry: results/RUN's small artifacts and their Snakemake
#                                    metadata, at most MIB (default 30) MiB (lease_pack.py pack)
#   lease_in.sh merge RUN FOLDER     restores a lease's returned parts (FOLDER: where the device
#                                    call's files landed) into results/RUN and .snakemake/metadata,
#                                    dated now, so `snakemake -n` here or the next lease's carry
#                                    sees those stages as done
#   lease_in.sh gguf FILE [MIB] [DIR]
#                                    DIR/NN/NAME.part_NN (DIR default .lease/gguf): FILE in MIB-MiB
#                                    slices (default 50: a slice and the 10 MiB working tree fit
#                                    the 64 MiB a call carries; it warns when they do not), one
#                                    folder a call; the device call for slice NN is
#                                    mkdir -p /tmp/lease-gguf && cp DIR/NN/* /tmp/lease-gguf/
#                                    and lease.sh joins them and checks the SHA-256 pin
#   lease_in.sh ckpt FOLDER [MIB]    .lease/ckpt/NN: the parts of a LoRA run's checkpoint that earlier
#                                    calls brought back (FOLDER: ckpt_RUN.manifest and every part,
#                                    gathered from their files_at) regrouped into folders of at most
#                                    MIB (default 45) MiB, one a call; the device call for NN is
#                                    mkdir -p /tmp/lease-ckpt-in && cp .lease/ckpt/NN/* /tmp/lease-ckpt-in/
#                                    and lease.sh --checkpoints /tmp/lease-ckpt-in restores them
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PACK=lab/lease/lease_pack.py
case "${1:-}" in
  data)
    [ $# -ge 2 ] || { echo "usage: lease_in.sh data CFG..." >&2; exit 2; }
    rm -rf .lease/data .lease/files
    for cfg in "${@:2}"; do python "$PACK" data --configfile "$cfg" --out .lease; done
    ;;
  carry)
    run="${2:?usage: lease_in.sh carry RUN [MIB]}"
    rm -rf .lease/carry
    python "$PACK" pack --results "results/$run" --out .lease/carry --limit-mib "${3:-30}" --part-mib 64
    ;;
  merge)
    run="${2:?usage: lease_in.sh merge RUN FOLDER}" folder="${3:?usage: lease_in.sh merge RUN FOLDER}"
    grep -qx "run $run" "$folder"/lease_*.manifest ||
      { echo "lease_in: $folder: no lease_*.manifest of run $run" >&2; exit 1; }
    python "$PACK" unpack "$folder" --list .snakemake/lease/merged.txt
    python "$PACK" touch .snakemake/lease/merged.txt
    grep "^left_out \|^unfinished " "$folder"/lease_*.manifest | sed 's/^/lease_in: not in this lease'"'"'s files: /' || true
    ;;
  gguf)
    file="${2:?usage: lease_in.sh gguf FILE [MIB] [DIR]}" mib="${3:-50}" dir="${4:-.lease/gguf}"
    [ -f "$file" ] || { echo "lease_in: $file: no such file (lab/models/qwen05b.sh makes the 0.5B one)" >&2; exit 1; }
    rm -rf "$dir" && mkdir -p "$dir/split"
    split -b "${mib}M" -d -a 2 "$file" "$dir/split/$(basename "$file").part_"
    for part in "$dir"/split/*; do
      nn="${part##*_}"; mkdir -p "$dir/$nn"; mv "$part" "$dir/$nn/"
      echo "lease_in: $dir/$nn ($(($(stat -c %s "$dir/$nn"/*) / 1048576)) MiB)"
    done
    rmdir "$dir/split"
    tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
    [ $((tree + mib * 1048576)) -le $((64 * 1048576)) ] ||
      echo "lease_in: warning: the tracked tree ($((tree / 1048576)) MiB) and a $mib MiB slice exceed the 64 MiB a call carries: use a smaller MIB"
    ;;
  ckpt)
    folder="${2:?usage: lease_in.sh ckpt FOLDER [MIB]}" mib="${3:-45}"
    manifest=$(ls "$folder"/ckpt_*.manifest 2>/dev/null | head -n 1)
    [ -n "$manifest" ] || { echo "lease_in: $folder: no ckpt_*.manifest" >&2; exit 1; }
    for part in $(sed -n 's/^part \([^ ]*\) .*/\1/p' "$manifest"); do
      [ -f "$folder/$part" ] || { echo "lease_in: $folder/$part: missing (bring back every part first)" >&2; exit 1; }
    done
    rm -rf .lease/ckpt && mkdir -p .lease/ckpt/00
    cp "$manifest" .lease/ckpt/00/
    nn=0 used=$(stat -c %s "$manifest")
    for part in $(sed -n 's/^part \([^ ]*\) .*/\1/p' "$manifest"); do
      size=$(stat -c %s "$folder/$part")
      if [ $((used + size)) -gt $((mib * 1048576)) ]; then
        nn=$((nn + 1)) used=0; mkdir -p "$(printf '.lease/ckpt/%02d' $nn)"
      fi
      cp "$folder/$part" "$(printf '.lease/ckpt/%02d' $nn)/"
      used=$((used + size))
    done
    for d in .lease/ckpt/*; do echo "lease_in: $d ($(du -sm "$d" | cut -f1) MiB)"; done
    ;;
  *) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
