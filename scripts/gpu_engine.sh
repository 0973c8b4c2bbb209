#!/usr/bin/env bash
# GPU machine: issue 12's engine benchmarks (carry .device). Builds only the executable.
#   scripts/gpu_engine.sh ablation [BENCH ARGS...]   teletron bench --suite train --ablation at the
#                                                    1b preset's default shape; JSON + log in $OUT.
set -uo pipefail
part=${1:?usage: gpu_engine.sh ablation [bench args...]}; shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export TELETRON_BUILD_TARGETS=${TELETRON_BUILD_TARGETS:-teletron}
source "$here/device_build.sh" || exit 1
echo "build ${build_s}s" | tee -a "$out/summary.txt"
case "$part" in
  ablation)
    timeout "${BENCH_TIMEOUT:-400}" "$tt" bench --suite train --ablation --json "$out/ablation.json" "$@" \
      >"$out/ablation.log" 2>&1
    echo "bench exit $?" | tee -a "$out/summary.txt"
    grep -vE "^\[.*(debug|trace)\]" "$out/ablation.log" | tail -40 | tee -a "$out/summary.txt"
    ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
