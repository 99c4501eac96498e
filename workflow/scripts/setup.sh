# Sourced by run.sh and test.sh: an idempotent virtualenv with boundary installed.
# CPU torch is pinned to 2.13.0 so pip never pulls a multi-GB CUDA build on a CPU machine;
# on a GPU machine install your CUDA torch into .venv first (see README).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VENV="${BOUNDARY_VENV:-$ROOT/.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
want="$(cat pyproject.toml | sha256sum | cut -c1-16)"
if [ "$(cat "$VENV/.boundary-installed" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip show torch >/dev/null 2>&1 || "$VENV/bin/python" -m pip install -q torch==2.13.0
  "$VENV/bin/python" -m pip install -q -e ".[pipeline,test]"
  echo "$want" > "$VENV/.boundary-installed"
fi
export PATH="$VENV/bin:$PATH"
# Nothing is fetched from a model hub; TRL's telemetry ping is skipped offline.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
