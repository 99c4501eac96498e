#!/usr/bin/env bash
# The numeric tests under each OpenBLAS kernel, one run a kernel (tests/README.md, "Floats"):
#   bash tests/kernels.sh [CORE...]      (default: SkylakeX Haswell Zen Sandybridge Prescott)
# A kernel the CPU cannot run (SkylakeX without AVX-512: "Illegal instruction") is skipped and
# said. Extra pytest arguments go in $PYTEST_ARGS (e.g. "-n 4"). Exits 1 if any kernel failed.
# Run in the project's environment (workflow/scripts/test.sh's); $PYTHON: the interpreter (default python).
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
NUMERIC="tests/test_power.py tests/test_report.py tests/test_stats.py tests/test_attribution.py
  tests/test_adaptive.py tests/test_reliability.py tests/test_reference_noise.py tests/test_worked_example.py
  tests/test_passk.py tests/test_regimes.py tests/test_diagnose.py"
[ $# -gt 0 ] || set -- SkylakeX Haswell Zen Sandybridge Prescott
failed=0
for core in "$@"; do
  if [ "$core" = SkylakeX ] && ! grep -qw avx512f /proc/cpuinfo; then
    echo "kernels.sh: $core: skipped, this CPU has no AVX-512"; continue
  fi
  took=$(OPENBLAS_CORETYPE=$core "${PYTHON:-python}" -c \
    'import numpy, threadpoolctl; print(",".join(i.get("architecture", "?") for i in threadpoolctl.threadpool_info() if i.get("internal_api") == "openblas"))')
  # shellcheck disable=SC2086
  summary=$(OPENBLAS_CORETYPE=$core "${PYTHON:-python}" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-} $NUMERIC 2>&1 | tail -n 1)
  echo "kernels.sh: $core (OpenBLAS took ${took:-?}): $summary"
  case "$summary" in *failed*|*error*|"") failed=1 ;; esac
done
exit $failed
