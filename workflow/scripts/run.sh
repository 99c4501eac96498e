#!/usr/bin/env bash
# Run the whole pipeline (default: the embedded CPU testbed config). Extra arguments go to
# snakemake, e.g. `--configfile config/paper.yaml --profile config/profiles/slurm`.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# Snakemake reads --configfile before the workflow starts and names no file for a missing,
# binary or tab-indented one: check them first, one line naming the file.
configfiles=() taking=0
for arg in "$@"; do
    case "$arg" in
        --configfile | --configfiles) taking=1 ;;
        --configfile=* | --configfiles=*) configfiles+=("${arg#*=}") taking=0 ;;
        -*) taking=0 ;;
        *) [ "$taking" = 1 ] && configfiles+=("$arg") ;;
    esac
done
if [ "${#configfiles[@]}" -gt 0 ]; then
    boundary check-config "${configfiles[@]}" > /dev/null || exit 1
fi
exec snakemake --cores all "$@"
