#!/usr/bin/env bash
# One call on the lent H200 (device tool): GPU tests + benchmarks, compact evidence to $OUT.
# Usage (device tool, carry [".whl"]): bash tools/device_gpu_run.sh [tests] [A] [B] [profileA] [profileB] [perf]
#                                        [tilesprobe] [fusedprobe]   (TILES_PROBE_ARGS / FUSED_PROBE_ARGS: extra
#                                        options of python -m bench probe tiles / fused)
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
      extra=""; [ "$step" = B ] && extra="--trace"
      rm -rf "/tmp/run$step"; python3 -m bench --experiment "$step" --expect-device H200 --out "/tmp/run$step" $extra 2>&1 | grep -v "it/s\]\|case/s" | tail -30
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      tar -czf "$OUT/run$step.tar.gz" -C /tmp --exclude="run$step/arrays" "run$step" ;;
    perf)
      rm -rf /tmp/perf; python3 -m bench perf --expect-device H200 --out /tmp/perf 2>&1 | tail -45
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      tar -czf "$OUT/perf.tar.gz" -C /tmp perf ;;
    fusedprobe)
      python3 -m bench probe fused --out "$OUT/fused_probe" ${FUSED_PROBE_ARGS:-} 2>&1 | tail -60
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    tilesprobe)
      python3 -m bench probe tiles --out "$OUT/tiles_probe" ${TILES_PROBE_ARGS:-} 2>&1 | tail -40
      [ "${PIPESTATUS[0]}" = 0 ] || status=1 ;;
    profileA|profileB)
      x=${step#profile}; rm -rf "/tmp/prof$x"
      python3 -m bench profile --experiment "$x" --expect-device H200 --out "/tmp/prof$x" --timeout-s 240 2>&1 | tail -40
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      python3 -m bench bundle "/tmp/prof$x" --out "$OUT/profile_$x.tar.gz" --max-file-bytes 2097152
      [ "$(stat -c %s "$OUT/profile_$x.tar.gz")" -le 15000000 ] || \
        python3 -m bench bundle "/tmp/prof$x" --out "$OUT/profile_$x.tar.gz" --max-file-bytes 131072 ;;
  esac
done
exit $status
