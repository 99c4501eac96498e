#!/usr/bin/env bash
# Run the whole pipeline (default: the embedded CPU testbed config). Extra arguments go to
# snakemake, e.g. `--configfile config/paper.yaml --profile config/profiles/slurm`.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec snakemake --cores all "$@"
