#!/usr/bin/env bash
# Hold 8's second GPU: the product's 7B LoRA step figures (PBA against GRPO, and PBA with
# kl_value_every 10), then the decode-step rows left from hold 3, from main's code at the commit
# .lease/head/COMMIT names (the hold's own checkout has workflow/ at c5e8ba9 for the bridge).
# README.md beside this file says what each must show. From the checkout's root, after the
# bridge's first lease.sh call has installed TRL and vLLM into /tmp/site:
#
#   bash <this> start     unpacks .lease/head/head.tgz into /tmp/head and starts both, detached,
#                         on GPU 1 and cores 16-31, one after the other
#   OUT=<folder> bash <this> collect
#                         $OUT/gpu1.tgz: both consoles, the bench's per-run logs and results,
#                         the decode rows' output; $OUT/gpu1.txt: the summary lines
set -uo pipefail
H=${GPU1_DIR:-/tmp/head} CORES=${GPU1_CORES:-16-31}  # both set by the test
case ${1:-} in
  start)
    if [ -e $H/started ]; then echo "gpu1: started before ($(cat $H/started))"; exit 0; fi
    mkdir -p $H && tar -xzf .lease/head/head.tgz -C $H && cp .lease/head/COMMIT $H/ || exit 1
    date -u +%H:%M:%S > $H/started
    cd $H && CUDA_VISIBLE_DEVICES=1 setsid nohup taskset -c "$CORES" bash -c '
      export PYTHONPATH=/tmp/site:$PWD/workflow PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
      echo "commit $(cat COMMIT)"
      python3 benchmarks/bench_lora.py --only 7b:lora:grpo,7b:lora:pba,7b:lora:pba_value10 --timeout 420 \
        --logs lora7b > lora7b.log 2>&1; echo "lora7b exit $?"
      OUT=$PWD/decode WHEELS=/tmp/kit/deps bash lab/studies/2026-11-29-decode-step-h200/decode_step.sh owge \
        > decode.log 2>&1; echo "decode exit $?"' > $H/gpu1.log 2>&1 < /dev/null &
    echo "gpu1: started on GPU 1, cores $CORES, commit $(cat $H/COMMIT)"
    ;;
  collect)
    : "${OUT:?OUT: the folder of the call output}"
    { cat $H/gpu1.log 2>/dev/null; grep -h "^7b\|^card\|^PBA\|^goal" $H/lora7b.log 2>/dev/null
      grep -h "^row \|tok/s\|ms a step" $H/decode.log 2>/dev/null | tail -12; } | tee "$OUT/gpu1.txt"
    tar -czf "$OUT/gpu1.tgz" -C $H --ignore-failed-read COMMIT gpu1.log lora7b.log lora7b decode.log decode 2>/dev/null
    ls -la "$OUT/gpu1.tgz"
    ;;
  *) echo "usage: gpu1.sh start | collect" >&2; exit 2 ;;
esac
