#!/usr/bin/env bash
# Instructions (user and kernel) that a weir binary spends per proxied request under one
# `weir-bench traffic` scenario: counts are far less disturbed by other work on a shared
# machine than times are, so they compare two builds where req/s and CPU seconds cannot.
#
#   scripts/instructions-per-request.sh WEIR_BINARY [SCENARIO] [WEIR_BENCH_BINARY]
#
# WEIR_PROXY=weir-retry (or weir-limit) measures that variant of weir's configuration
# (weir-bench traffic --proxies) instead of plain weir.
#
# Runs the scenario for weir alone (12 s), attaches `perf stat` to weir for 5 s in the
# middle and divides by the requests weir counted in that window (weir_requests_total
# from its admin /metrics). Needs perf (Debian linux-perf) and curl.
set -euo pipefail
weir=${1:?usage: $0 WEIR_BINARY [SCENARIO] [WEIR_BENCH_BINARY]}
scenario=${2:-h1-c64}
bench=${3:-target/release/weir-bench}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Without hardware counters (many VMs) perf writes "<not supported>" instead of a count:
# find out before the 12 s run.
if perf stat -x, -e instructions:u -- true 2>&1 >/dev/null | grep -q "not supported\|not counted"; then
    echo "perf stat has no instruction counters on this machine; use scripts/instructions-callgrind.sh" >&2
    exit 1
fi

"$bench" traffic --weir "$weir" --proxies "${WEIR_PROXY:-weir}" --scenarios "$scenario" \
    --duration 12 --warmup 1 --out "$out/results" >"$out/bench.log" 2>&1 &
bench_pid=$!
pid=
for _ in $(seq 1 100); do
    pid=$(pgrep -f "traffic-.*/weir run" | head -1 || true)
    [ -n "$pid" ] && break
    sleep 0.2
done
[ -n "$pid" ] || { echo "weir did not start; see the bench log:" >&2; cat "$out/bench.log" >&2; exit 1; }
sleep 4
admin=$(tr '\0' ' ' <"/proc/$pid/cmdline" | sed -E 's/.*--admin ([^ ]+).*/\1/')
requests() { curl -s "http://$admin/metrics" | awk '/^weir_requests_total/ {s += $2} END {print s + 0}'; }
r0=$(requests)
perf stat -x, -e instructions:u,instructions:k -p "$pid" -o "$out/stat" -- sleep 5
r1=$(requests)
wait "$bench_pid" || true
n=$((r1 - r0))
[ "$n" -gt 0 ] || { echo "no requests counted" >&2; exit 1; }
awk -F, -v n="$n" -v sc="$scenario" '
    /instructions:u/ {u = $1} /instructions:k/ {k = $1}
    END {printf "'"${WEIR_PROXY:-weir}"' %s: %d requests in 5 s; per request: %.0f user + %.0f kernel instructions\n", sc, n, u / n, k / n}
' "$out/stat"
