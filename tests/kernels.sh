#!/usr/bin/env bash
# The numeric tests under each OpenBLAS kernel, one run a kernel (tests/README.md, "Floats"):
#   bash tests/kernels.sh [--all] [--log DIR] [--timeout SECONDS] [CORE...]
#                                        (default: SkylakeX Haswell Zen Sandybridge Prescott)
# --all: the whole suite instead, as workflow/scripts/test.sh runs it (--dist loadfile
# --no-loadscope-reorder --durations=10; -n 2 unless $PYTEST_ARGS says another -n).
# --log DIR: each kernel's whole pytest output in DIR/kernel-CORE.log (else a scratch folder).
# --timeout: a kernel's run is stopped after SECONDS (SIGINT: pytest prints what failed so far).
# A kernel the CPU cannot run (SkylakeX without AVX-512: "Illegal instruction") is skipped and
# said. Extra pytest arguments go in $PYTEST_ARGS (e.g. "-n 4"). Exits 1 if any kernel failed.
# Run in the project's environment (workflow/scripts/test.sh's); $PYTHON: the interpreter (default python).
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
NUMERIC="tests/test_power.py tests/test_report.py tests/test_stats.py tests/test_attribution.py
  tests/test_adaptive.py tests/test_reliability.py tests/test_reference_noise.py tests/test_worked_example.py
  tests/test_passk.py tests/test_regimes.py tests/test_diagnose.py"
tests=$NUMERIC how="" logdir="" limit=""
while [ $# -gt 0 ]; do
  case "$1" in
    --all) tests="" how="--dist loadfile --no-loadscope-reorder --durations=10"; shift ;;
    --log) logdir="$2"; shift 2 ;;
    --timeout) limit="$2"; shift 2 ;;
    -*) echo "kernels.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ -z "$limit" ] || [ "$limit" -gt 0 ] 2>/dev/null || { echo "kernels.sh: --timeout $limit: not a number of seconds" >&2; exit 2; }
case "$how: ${PYTEST_ARGS:-}" in :*|*" -n"*|*" --numprocesses"*) ;; *) how="-n 2 $how" ;; esac
[ $# -gt 0 ] || set -- SkylakeX Haswell Zen Sandybridge Prescott
[ -n "$logdir" ] || { logdir=$(mktemp -d) && trap 'rm -rf "$logdir"' EXIT; }
mkdir -p "$logdir" || exit 2
failed=0
for core in "$@"; do
  if [ "$core" = SkylakeX ] && ! grep -qw avx512f /proc/cpuinfo; then
    echo "kernels.sh: $core: skipped, this CPU has no AVX-512"; continue
  fi
  took=$(OPENBLAS_CORETYPE=$core "${PYTHON:-python}" -c \
    'import numpy, threadpoolctl; print(",".join(i.get("architecture", "?") for i in threadpoolctl.threadpool_info() if i.get("internal_api") == "openblas"))')
  log="$logdir/kernel-$core.log"
  # Into a file, not a pipe: a timeout's SIGINT reaches pytest's whole process group, and a
  # reader of its output in that group would die before pytest prints what failed.
  # shellcheck disable=SC2086
  OPENBLAS_CORETYPE=$core ${limit:+timeout -s INT -k 60 "$limit"} "${PYTHON:-python}" -m pytest -q -rfE \
    -p no:cacheprovider $how ${PYTEST_ARGS:-} $tests > "$log" 2>&1
  rc=$?
  summary=$(tail -n 1 "$log")
  case $rc in
    124) summary="stopped at the ${limit}-s limit: $summary" ;;
    2) summary="interrupted: $summary" ;;  # pytest's code for a SIGINT (Ctrl-C)
  esac
  echo "kernels.sh: $core (OpenBLAS took ${took:-?}): $summary"
  [ $rc = 0 ] || failed=1
done
exit $failed
