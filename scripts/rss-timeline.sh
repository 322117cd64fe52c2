#!/usr/bin/env bash
# RSS and CPU of `weir run` on a manifest directory, sampled every 0.25 s until /ready
# answers 200: where in startup the peak RSS is (reading, the emission of the batch, the
# data plane's snapshot). Then the peak (VmHWM) and weir's startup phases are printed and
# weir is stopped (TERM).
#
#   scripts/rss-timeline.sh WEIR DIR OUT
#
# OUT gets one line per sample: seconds since start, RSS in MiB, user and system CPU in
# clock ticks (`getconf CLK_TCK`, 100 here). Ports as in startup-at-ready.sh.
set -euo pipefail
weir=${1:?usage: rss-timeline.sh WEIR DIR OUT}
dir=${2:?usage: rss-timeline.sh WEIR DIR OUT}
out=${3:?usage: rss-timeline.sh WEIR DIR OUT}
admin=${WEIR_ADMIN:-127.0.0.1:19901}
log=$(mktemp)
"$weir" run -c "$dir" --admin "$admin" --ingress-http 127.0.0.1:18080 \
  --ingress-https 127.0.0.1:18443 --no-access-log $([ -n "${WEIR_WATCH:-}" ] || echo --no-watch) >"$log" 2>&1 &
pid=$!
start=$(date +%s.%N)
: >"$out"
while :; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "weir exited before /ready; last log lines:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  now=$(date +%s.%N)
  rss=$(awk '/VmRSS/{print int($2 / 1024)}' "/proc/$pid/status")
  read -r -a stat <"/proc/$pid/stat"
  awk -v a="$start" -v b="$now" -v r="$rss" -v u="${stat[13]}" -v s="${stat[14]}" \
    'BEGIN{printf "%.2f %s %s %s\n", b - a, r, u, s}' >>"$out"
  curl -sf -o /dev/null "http://$admin/ready" && break
  sleep 0.25
done
awk '/VmHWM/{printf "peak_rss_mib=%.1f\n", $2 / 1024}' "/proc/$pid/status"
# The startup cycle's phases (parse: this thread's time outside the translator).
curl -sf "http://$admin/metrics" | awk '/^weir_propagation_seconds_sum/{print}' || true
tail -1 "$out"
kill -TERM "$pid"
wait "$pid" 2>/dev/null || true
rm -f "$log"
