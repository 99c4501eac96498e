#!/usr/bin/env bash
# Run the test suite (units, stage contracts, the Snakemake smoke run). Extra args go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# The tests fetch nothing: the hub stays out whatever the user's shell allows.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
# The diagnosis page is checked in a real headless browser: Debian's chromium, installed here
# when missing and we may (root with apt-get; BOUNDARY_NO_APT=1 opts out). Otherwise that one
# test skips and says why.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
    && [ -z "${BOUNDARY_NO_APT:-}" ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) \
    >/dev/null 2>&1 || echo "test.sh: could not install chromium; the browser test will skip" >&2
fi
# Two workers (the CI machine has 2 cores); a test file stays on one worker, so its module
# fixtures (a Snakemake run, a trained model) are built once.
exec python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=10 "$@"
