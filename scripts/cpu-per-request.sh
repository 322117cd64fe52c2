#!/usr/bin/env bash
# CPU time (user and system, from /proc/PID/stat) that weir spends per proxied request,
# per configuration variant, in alternating rounds: the cost a saturated proxy core pays
# per request, so its ratio between two variants is their throughput ratio on that core.
# Unlike req/s, it does not depend on how fast the load generator and the backend run;
# it still moves with the machine's other load (caches), so compare the variants within
# one run, round by round, and quote medians.
#
#   scripts/cpu-per-request.sh WEIR_BINARY ROUNDS [VARIANT ...]
#
# VARIANT: plain, retry, limit, as in instructions-callgrind.sh (default: plain retry).
# Each round runs every variant once: weir (pinned to CPU 0) serves one plaintext Ingress
# host in front of `weir-bench backend` (CPU 1); wrk (CPU 1) warms it up for 2 s, then
# sends 8 s of HTTP/1.1 keep-alive load over 16 connections; the CPU weir used in those
# 8 s is divided by the 2xx answers it counted (weir_requests_total). Needs wrk, curl,
# taskset; WEIR_BENCH (default target/release/weir-bench).
#
# Also printed: the context switches of weir's threads per request (voluntary +
# involuntary, /proc/PID/task/*/status). BACKEND_CPU=0 pins the backend to weir's core
# (the bench's shared-core placement) instead of CPU 1; BACKEND_SIZE=N makes its
# answers N bytes long (default 0). A variant written
# `NAME@plain-writes` is NAME with weir's batched writes turned off (WEIR_IO_URING=0: a
# `writev` per message, ARCHITECTURE.md "Batched writes"), for an A/B of one binary in
# one run.
set -euo pipefail
weir=$(realpath "${1:?usage: $0 WEIR_BINARY ROUNDS [plain|retry|limit ...]}")
rounds=${2:?usage: $0 WEIR_BINARY ROUNDS [plain|retry|limit ...]}
shift 2
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(plain retry)
bench=${WEIR_BENCH:-target/release/weir-bench}
. "$(dirname "$0")/per-request-site.sh"
start_backend taskset -c "${BACKEND_CPU:-1}"
tck=$(getconf CLK_TCK)
ticks() { awk '{s = substr($0, index($0, ")") + 2); split(s, f, " "); print f[12], f[13]}' "/proc/$1/stat"; }
# Voluntary and involuntary context switches of all of PID's threads.
switches() { cat /proc/"$1"/task/*/status | awk '/^voluntary_ctxt/ {v += $2} /^nonvoluntary_ctxt/ {n += $2} END {print v, n}'; }
uring=${WEIR_IO_URING-}

results="$out/results"
for round in $(seq 1 "$rounds"); do
    for label in "${variants[@]}"; do
        variant=${label%@plain-writes}
        if [ "$variant" != "$label" ]; then
            export WEIR_IO_URING=0
        elif [ -n "$uring" ]; then
            export WEIR_IO_URING="$uring"
        else
            unset WEIR_IO_URING
        fi
        serve_pinned "$variant"
        read -r u0 s0 < <(ticks "$w")
        read -r v0 i0 < <(switches "$w")
        r0=$(requests)
        wrk_load taskset -c 1 -- -d8s
        read -r u1 s1 < <(ticks "$w")
        read -r v1 i1 < <(switches "$w")
        r1=$(requests)
        kill "$w"
        wait "$w" 2>/dev/null || true
        awk -v r="$round" -v v="$label" -v n=$((r1 - r0)) -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v t="$tck" \
            -v sv=$((v1 - v0)) -v si=$((i1 - i0)) \
            'BEGIN {printf "round %d %-6s %7d requests  user %6.2f us  system %6.2f us  total %6.2f us per request  switches %.3f + %.3f\n", r, v, n, u / t / n * 1e6, s / t / n * 1e6, (u + s) / t / n * 1e6, sv / n, si / n}' |
            tee -a "$results"
    done
done
echo "medians over $rounds round(s):"
for variant in "${variants[@]}"; do
    for col in 7 10 13 18 20; do
        awk -v v="$variant" '$3 == v {print $'"$col"'}' "$results" | sort -n |
            awk '{a[NR] = $1} END {printf "%s ", (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
    done | awk -v v="$variant" '{printf "  %-6s user %6.2f us  system %6.2f us  total %6.2f us per request  switches %.3f + %.3f\n", v, $1, $2, $3, $4, $5}'
done
