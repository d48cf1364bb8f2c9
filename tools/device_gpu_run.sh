#!/usr/bin/env bash
# One call on the lent H200 (device tool): GPU tests + benchmarks, compact evidence to $OUT.
# Usage (device tool, carry [".whl"]): bash tools/device_gpu_run.sh [A] [B] [tests]
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv | tee "$OUT/nvidia_smi.csv"
status=0
for step in "$@"; do
  case "$step" in
    tests)
      NUMBA_SOFTMAX_EVIDENCE="$OUT/gpu_evidence.json" python3 -m pytest tests/gpu -q -rs -p no:cacheprovider \
        --junitxml="$OUT/gpu_tests.xml" 2>&1 | tee "$OUT/gpu_tests.log" | tail -40 || status=1 ;;
    A|B)
      rm -rf "/tmp/run$step"; python3 -m bench --experiment "$step" --expect-device H200 --out "/tmp/run$step" 2>&1 | grep -v "it/s\]\|case/s" | tail -30
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      tar -czf "$OUT/run$step.tar.gz" -C /tmp --exclude="run$step/arrays" "run$step" ;;
  esac
done
exit $status
