#!/usr/bin/env bash
# Startup cost of `weir run` on a manifest directory, read the moment /ready answers 200:
# page faults (minflt), CPU seconds (user + system, all threads, and each), RSS and peak
# RSS (VmHWM), wall time.
#
#   scripts/startup-at-ready.sh WEIR DIR [CPU]      # pinned to CPU (default 1) with taskset
#   scripts/startup-at-ready.sh WEIR DIR [CPU] --callgrind OUT
#                                 # instead: valgrind --tool=callgrind until /ready (count
#                                 # instructions with callgrind_annotate OUT | grep TOTALS)
#
# DIR: e.g. the directory `weir-bench propagation --domains 20000 --changes 0 --keep-work`
# leaves under target/weir-bench/work. weir is stopped (TERM) once the figures are read.
# Ports: WEIR_ADMIN (default 127.0.0.1:19901), 127.0.0.1:18080 and :18443 for Ingresses.
# WEIR_WATCH=1: weir watches DIR as `weir run` does by default (and as the bench runs it);
# without it, --no-watch.
set -euo pipefail
. "$(dirname "$0")/wait-ready.sh"
weir=${1:?usage: startup-at-ready.sh WEIR DIR [CPU] [--callgrind OUT]}
dir=${2:?usage: startup-at-ready.sh WEIR DIR [CPU] [--callgrind OUT]}
cpu=${3:-1}
admin=${WEIR_ADMIN:-127.0.0.1:19901}
args=(run -c "$dir" --admin "$admin" --ingress-http 127.0.0.1:18080
  --ingress-https 127.0.0.1:18443 --no-access-log)
[ "${WEIR_WATCH:-0}" = 1 ] || args+=(--no-watch)
log=$(mktemp)
if [ "${4:-}" = "--callgrind" ]; then
  out=${5:?--callgrind needs an output file}
  valgrind --tool=callgrind --callgrind-out-file="$out" "$weir" "${args[@]}" >"$log" 2>&1 &
else
  taskset -c "$cpu" "$weir" "${args[@]}" >"$log" 2>&1 &
fi
pid=$!
start=$(date +%s.%N)
wait_ready "$admin" "$pid" "$log" 0.02
ready=$(date +%s.%N)
read -r -a stat <"/proc/$pid/stat"
tck=$(getconf CLK_TCK)
rss=$(awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$pid/status")
hwm=$(awk '/VmHWM/{printf "%.1f", $2/1024}' "/proc/$pid/status")
kill -TERM "$pid"
wait "$pid" 2>/dev/null || true
rm -f "$log"
# Field 10 of /proc/PID/stat (minor page faults); fields 14 and 15 (user, system), in
# clock ticks. Under valgrind they are valgrind's own: only the instruction count is meant.
awk -v mf="${stat[9]}" -v u="${stat[13]}" -v s="${stat[14]}" -v t="$tck" -v r="$rss" -v h="$hwm" \
  -v w="$(awk -v a="$start" -v b="$ready" 'BEGIN{printf "%.3f", b - a}')" \
  'BEGIN{printf "minflt=%d cpu_s=%.2f user_s=%.2f sys_s=%.2f rss_mib=%s hwm_mib=%s wall_s=%s\n", mf, (u + s) / t, u / t, s / t, r, h, w}'
