#!/usr/bin/env bash
# Run the test suite (units, stage contracts, the Snakemake smoke run). Extra args go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec python -m pytest -q --durations=10 "$@"
