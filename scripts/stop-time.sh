#!/usr/bin/env bash
# How long `weir run` takes to stop: started on a manifest directory, SIGTERM one second
# after /ready answers 200; prints the seconds from the signal to the log's "stopped
# accepting" (the listeners closed, draining) and to the process's exit.
#
#   scripts/stop-time.sh WEIR DIR
#
# DIR: e.g. a directory `weir-bench propagation --changes 0 --keep-work` left under
# target/weir-bench/work. Ports: WEIR_ADMIN (default 127.0.0.1:19901), 127.0.0.1:18080
# and :18443 for Ingresses.
set -euo pipefail
. "$(dirname "$0")/wait-ready.sh"
weir=${1:?usage: stop-time.sh WEIR DIR}
dir=${2:?usage: stop-time.sh WEIR DIR}
admin=${WEIR_ADMIN:-127.0.0.1:19901}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$weir" run -c "$dir" --admin "$admin" --ingress-http 127.0.0.1:18080 \
  --ingress-https 127.0.0.1:18443 --no-access-log --no-watch >"$log" 2>&1 &
pid=$!
wait_ready "$admin" "$pid" "$log" 0.05
sleep 1
t0=$(date +%s.%N)
kill -TERM "$pid"
until grep -q "stopped accepting" "$log"; do
  if ! kill -0 "$pid" 2>/dev/null; then break; fi
  sleep 0.005
done
t1=$(date +%s.%N)
wait "$pid" || true
t2=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" -v c="$t2" \
  'BEGIN { printf "to_stop_accepting_s=%.3f to_exit_s=%.3f\n", b - a, c - a }'
