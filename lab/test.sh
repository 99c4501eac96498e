#!/usr/bin/env bash
# The lab's tests (its GPU-machine tooling, its studies' scripts, configs and published tables),
# apart from the product's default `pytest` (testpaths: tests/). They reuse the product's test
# fixtures (tests/conftest.py, loaded as a plugin) and venv. Extra args go to pytest.
source "$(dirname "${BASH_SOURCE[0]}")/../workflow/scripts/setup.sh"
export PYTHONPATH="$ROOT/tests${PYTHONPATH:+:$PYTHONPATH}"
# The lab's tests read nothing from a hub (and TRL pings none offline).
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
args=("$@")
case " $* " in *" lab/"* | *" lab "*) ;; *) args=(lab "$@") ;; esac  # lab/ unless a lab path is given
exec python -m pytest -q -p conftest --rootdir "$ROOT" "${args[@]}"
